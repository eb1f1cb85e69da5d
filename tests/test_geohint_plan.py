"""GeoHint request plan: counts, strict pairing, per-model sampling under a seed (issue 4 point 2)."""

from __future__ import annotations

from collections import Counter, defaultdict

import pytest
from scipy import stats

from geoagent.data.importer import import_release
from geoagent.data.model import Image
from geoagent.geohint.conditions import conditions_from_config
from geoagent.geohint.plan import ModelSpec, models_from_config, plan_requests
from geoagent.geohint.stages import plan_messages


@pytest.fixture(scope="module")
def release(release_dir):
    return import_release(release_dir)


def _images(rel, per_site=2):
    return [Image(image_id=str(10_000 + i * 10 + j), site_id=s, lat=v.lat, lon=v.lon)
            for i, (s, v) in enumerate(sorted(rel.sites.items())) for j in range(per_site)]


def test_full_plan_counts_on_the_real_109_sites(release):
    imgs = _images(release)
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced", "forced_warn", "forced_chain", "v1"]}})
    reqs, summary = plan_requests(release.sites, imgs, release.ladders, [ModelSpec("m1"), ModelSpec("m2")], conds,
                                  baseline_repeats=3)
    n_points = {s: sum(1 for p in lad.points if p.name_en and p.dist_km is not None) for s, lad in release.ladders.items()}
    assert len(release.sites) == 109 and len(n_points) == 109
    expected_ctx = sum(2 * n_points[i.site_id] for i in imgs)  # per image: points x models
    by_cond = Counter(r.meta["condition"] for r in reqs)
    assert by_cond["baseline"] == len(imgs) * 2 * 3
    for c in ("forced", "forced_warn", "forced_chain", "v1"):
        assert by_cond[c] == expected_ctx
    assert summary.requests_by_condition == dict(by_cond)
    assert len({r.key for r in reqs}) == len(reqs)  # keys unique
    # baseline repeats are distinct requests (distinct params -> distinct request keys)
    base = [r for r in reqs if r.meta["condition"] == "baseline" and r.image_id == imgs[0].image_id and r.model == "m1"]
    assert sorted(r.params.get("seed", 0) for r in base) == [0, 1, 2]
    r0 = next(r for r in reqs if r.meta["condition"] == "forced")
    point = next(p for p in release.ladders[r0.meta["site"]].points if p.qid == r0.meta["ref_qid"])
    assert r0.prompt.startswith(f"I took this photo near {point.name_en}. ")
    assert (r0.meta["band"], r0.meta["tier"], r0.meta["dist_km"]) == (point.band, point.tier, point.dist_km)
    assert "max_output_tokens" not in r0.params  # each model's own [[models]] max_output_tokens applies


def test_strict_pairing_and_sampling_rate(release):
    imgs = _images(release, per_site=3)
    conds = conditions_from_config({"geohint": {"conditions": ["forced", "forced_warn", "baseline"]}})
    models = [ModelSpec("cheap"), ModelSpec("opus", sample_rate=1 / 3)]
    reqs, summary = plan_requests(release.sites, imgs, release.ladders, models, conds, seed=11)
    units = defaultdict(set)
    for r in reqs:
        if r.meta["condition"] != "baseline":
            units[(r.model, r.meta["site"], r.image_id, r.meta["ref_qid"])].add(r.meta["condition"])
    assert all(v == {"forced", "forced_warn"} for v in units.values())  # strictly paired
    kept, total = summary.units_kept["opus"], summary.units_total["opus"]
    assert summary.units_kept["cheap"] == summary.units_total["cheap"]
    assert summary.sample_rates == {"cheap": 1.0, "opus": pytest.approx(1 / 3)}
    assert stats.binomtest(kept, total, 1 / 3).pvalue > 1e-4
    assert all(r.meta["sample_rate"] == pytest.approx(1 / 3) for r in reqs if r.model == "opus")
    again, _ = plan_requests(release.sites, imgs, release.ladders, models, conds, seed=11)
    assert [r.key for r in again] == [r.key for r in reqs]
    other, _ = plan_requests(release.sites, imgs, release.ladders, models, conds, seed=12)
    assert {r.key for r in other} != {r.key for r in reqs}


def test_models_from_config_and_messages(release):
    cfg = {"models": [{"model": "a", "provider": "openai"}, "b"], "geohint": {"sample_rates": {"b": 0.5}}}
    specs = models_from_config(cfg)
    assert [(m.model, m.provider, m.sample_rate) for m in specs] == [("a", "openai", 1.0), ("b", "simulated", 0.5)]
    with pytest.raises(ValueError, match="sample_rate"):
        ModelSpec("x", sample_rate=0)
    site = "tokyo_shibuya"
    imgs = [Image(image_id="1", site_id=site, lat=0.0, lon=0.0)]
    msgs, _ = plan_messages(release.sites, imgs, release.ladders, [ModelSpec("a")], conditions_from_config({"conditions": ["forced"]}))
    assert len(msgs) == len(release.ladders[site].points)
    key, payload = msgs[0]
    assert key.startswith("gh|a|tokyo_shibuya|1|forced|Q")
    assert set(payload) == {"model", "prompt", "image_id", "image_ref", "params", "meta"}
    assert payload["meta"]["task"] == "geohint" and payload["image_ref"] is None
    with pytest.raises(ValueError, match="unknown site"):
        plan_requests(release.sites, [Image(image_id="2", site_id="nowhere", lat=0, lon=0)], release.ladders, [ModelSpec("a")], [])


def test_models_and_settings_from_a_campaign_config():
    from geoagent.config import ConfigError, config_from_dict
    from geoagent.geohint.settings import GeoHintSettings

    raw = {
        "campaign": {"name": "gh", "kind": "geohint", "contact": "ops@example.org"},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "haiku", "provider": "simulated", "model": "claude-haiku-4-5"},
                   {"name": "opus", "provider": "simulated", "model": "claude-opus-5", "sampling_rate": 0.5}],
        "geohint": {"conditions": ["baseline", "context", "warned"], "baseline_repeats": 5, "sample_rates": {"opus": 0.3333}},
    }
    cfg = config_from_dict(raw)
    settings = cfg.section("geohint")
    assert isinstance(settings, GeoHintSettings) and settings.baseline_repeats == 5
    assert [c.name for c in conditions_from_config({"geohint": settings.model_dump()})] == ["baseline", "forced", "forced_warn"]
    specs = models_from_config(cfg)
    assert [(m.model, m.sample_rate) for m in specs] == [("haiku", 1.0), ("opus", pytest.approx(0.3333))]
    bad = {**raw, "geohint": {"conditions": ["forced", "bogus"]}}
    with pytest.raises(ConfigError, match="bogus"):
        config_from_dict(bad).section("geohint")


def test_plan_from_config_on_all_109_sites(release):
    from geoagent.config import config_from_dict
    from geoagent.geohint.plan import synthetic_images
    from geoagent.geohint.stages import plan_from_config

    cfg = config_from_dict({
        "campaign": {"name": "gh", "kind": "geohint", "seed": 4, "contact": "ops@example.org"},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "a", "provider": "simulated", "model": "a"}, {"name": "b", "provider": "simulated", "model": "b", "sampling_rate": 0.5}],
        "geohint": {"conditions": ["baseline", "forced"], "baseline_repeats": 2, "max_output_tokens": 700},
    })
    imgs = synthetic_images(release.sites, per_site=1)
    assert len(imgs) == 109 and len({i.image_id for i in imgs}) == 109 and all(len(i.image_id) == 16 for i in imgs)
    msgs, summary = plan_from_config(cfg, release.sites, imgs, release.ladders)
    n_points = sum(len(release.ladders[s].points) for s in release.sites)
    assert summary.units_total["a"] == n_points + 109
    assert sum(1 for _, p in msgs if p["model"] == "a") == n_points + 2 * 109
    assert all(p["params"]["max_output_tokens"] == 700 for _, p in msgs)
    assert summary.seed == 4 and summary.sample_rates["b"] == 0.5
    assert 0.4 < summary.units_kept["b"] / summary.units_total["b"] < 0.6
