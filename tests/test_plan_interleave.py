"""Queue order of the planners: models interleaved, items in a seeded random order.

A user's walkthrough: a run stopped by the cost cap left the second model with 0 answers
("local-a 160/339 (47%), local-b 0/339 (0%)"): the planners enqueued every request of the first model, then
the second's, and the model caller dispatches in queue order. Now every model's requests of one item (a
GeoVerify trial, a GeoHint unit, a generic prompt) stand next to each other and the items come in a seeded
random order, so any prefix of a run covers the models evenly and a random sample of trials / sites. The
order changes no key: a resumed run plans the same tasks.
"""

from __future__ import annotations

from pathlib import Path

import anyio

from _model_harness import generic_campaign
from geoagent.config import config_from_dict, estimate, load_config
from geoagent.engine import EXIT_BUDGET, run_campaign

CONCURRENCY = 4  # per model; the model caller handles 2 x 4 tasks at once


def _models(names: tuple[str, ...] = ("a", "b"), **extra) -> list[dict]:
    # equally priced: the same prompts cost both models the same
    return [{"name": n, "provider": "simulated", "model": f"{n}-1", "price_input_usd_per_mtok": 1.0,
             "price_output_usd_per_mtok": 4.0, "max_output_tokens": 100, "concurrency": CONCURRENCY,
             "rate": {"requests": 5000, "period_s": 1.0}, **extra} for n in names]


def _generic(tmp: Path, name: str, cap_usd: float, n: int = 40) -> Path:
    models = "".join(f"""
[[models]]
name = "{m['name']}"
provider = "simulated"
model = "{m['model']}"
price_input_usd_per_mtok = {m['price_input_usd_per_mtok']}
price_output_usd_per_mtok = {m['price_output_usd_per_mtok']}
max_output_tokens = 100
concurrency = {CONCURRENCY}
rate = {{ requests = 5000, period_s = 1.0 }}
""" for m in _models())
    return generic_campaign(tmp, name=name, n=n, models=models, cap_usd=cap_usd)


def _run(cfg):
    return anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))


def test_generic_budget_stop_leaves_equally_priced_models_about_equal(tmp_path):
    # what all 2 x 40 calls really cost (uncapped); a cap of 40 % of it stops the run midway
    full = _run(load_config(_generic(tmp_path, "full", 100.0)))
    assert full.status == "complete" and full.answered_by_model == {"a": 40, "b": 40}
    out = _run(load_config(_generic(tmp_path, "capped", full.spend["spent_usd"] * 0.4)))
    assert out.status == "budget exhausted" and out.exit_code == EXIT_BUDGET
    got = out.answered_by_model
    # block order gave a 32 / b 0; interleaved, the two differ by at most the tasks in flight at the stop
    assert got["a"] > 0 and got["b"] > 0 and abs(got["a"] - got["b"]) <= 2 * CONCURRENCY, got
    assert "WARNING" not in out.summary()


def _geoverify_cfg(release_dir: Path, seed: int, cap: float = 100.0, name: str = "gv-order", **model_extra):
    return config_from_dict({"campaign": {"name": name, "kind": "geoverify", "seed": seed},
                             "budget": {"cap_usd": cap}, "models": _models(**model_extra),
                             "geoverify": {"release_dir": str(release_dir), "n_boot": 0}})


def test_geoverify_plan_interleaves_models_per_trial_in_a_seeded_order(release_dir, tmp_path, monkeypatch):
    from geoagent.data.importer import import_release
    from geoagent.geoverify.plan import plan_campaign

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    release = import_release(release_dir)
    plan = plan_campaign(_geoverify_cfg(release_dir, 7), release=release, store_data=False)
    msgs = plan.messages
    trial_ids = [p["meta"]["trial_id"] for _, p in msgs]
    # each trial's two requests are adjacent, a before b
    assert [p["model"] for _, p in msgs] == ["a", "b"] * (len(msgs) // 2)
    assert trial_ids[0::2] == trial_ids[1::2]
    # the trial order is random, not the file's: the first 40 trials come from across the file
    file_order = [t.trial_id for t in release.trials]
    first = trial_ids[0:80:2]
    assert first != file_order[:40] and max(file_order.index(t) for t in first) > len(file_order) // 2
    # deterministic for a seed, another seed reorders; keys and payloads are the same set either way
    again = plan_campaign(_geoverify_cfg(release_dir, 7), release=release, store_data=False).messages
    assert again == msgs
    other = plan_campaign(_geoverify_cfg(release_dir, 8), release=release, store_data=False).messages
    assert [k for k, _ in other] != [k for k, _ in msgs]
    assert sorted(k for k, _ in other) == sorted(k for k, _ in msgs)


def test_geoverify_budget_stop_covers_both_models_and_the_dry_run_agrees(release_dir, tmp_path, monkeypatch):
    # the walkthrough's case: two equally priced models over the release's trials, stopped by the cap
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    full = _run(_geoverify_cfg(release_dir, 7, name="gv-full"))
    assert full.status == "complete", full.summary()
    n = full.planned_by_model["a"]
    cfg = _geoverify_cfg(release_dir, 7, cap=full.spend["spent_usd"] * 0.4, name="gv-capped")
    out = _run(cfg)
    assert out.status == "budget exhausted", out.summary()
    got = out.answered_by_model
    assert got["a"] > 0.2 * n and abs(got["a"] - got["b"]) <= 2 * CONCURRENCY, got
    assert "WARNING" not in out.summary()
    # the dry run's simulation dispatches in the same order: both models about alike there too
    from geoagent.engine import estimate_lines
    from geoagent.geoverify.plan import plan_campaign

    msgs = [p for _, p in plan_campaign(cfg, store_data=False).messages]
    est = estimate(cfg, msgs)
    sim = {m: est.by_model[m].calls_before_cap for m in ("a", "b")}
    assert abs(sim["a"] - sim["b"]) <= 2 * CONCURRENCY and sim["a"] > 0, sim
    # without expected_output_tokens every answer is taken at max_output_tokens (100), but the simulated
    # answers are shorter: the run makes more calls than simulated, and the line says why
    made = out.spend["calls"]
    assert est.calls_before_cap < made
    text = "\n".join(estimate_lines(est, cfg))
    assert ("  if every answer used all its max_output_tokens (what the expected cost assumes: no "
            "expected_output_tokens set for a, b), the run would stop at the cap (exit 4)") in text
    assert "shorter answers let the run make more calls than this, possibly all of them" in text
    # the expected-cost bound is cap / mean expected cost per call, computed here by hand
    fit_exp = int(est.calls * cfg.budget.cap_usd / est.cost_usd)
    assert f"at the mean expected cost per call, about {fit_exp} (cap / mean expected cost" in text
    # with expected_output_tokens = the run's mean answer length the simulation lands near the run
    mean_out = round(full.spend["output_tokens"] / full.spend["calls"])
    tuned = _geoverify_cfg(release_dir, 7, cap=cfg.budget.cap_usd, name="gv-tuned",
                           expected_output_tokens=mean_out)
    est2 = estimate(tuned, msgs)
    assert abs(est2.calls_before_cap - made) <= 0.05 * made + 2 * CONCURRENCY, (est2.calls_before_cap, made)
    assert "shorter answers let" not in "\n".join(estimate_lines(est2, tuned))


def test_geohint_plan_interleaves_models_per_unit_and_shuffles_sites(release_dir):
    from geoagent.data.importer import import_release
    from geoagent.data.model import Image
    from geoagent.geohint.conditions import conditions_from_config
    from geoagent.geohint.plan import ModelSpec, plan_requests

    rel = import_release(release_dir)
    imgs = [Image(image_id=str(10_000 + i), site_id=s, lat=v.lat, lon=v.lon) for i, (s, v) in enumerate(sorted(rel.sites.items()))]
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced", "forced_warn"]}})
    models = [ModelSpec("a"), ModelSpec("b")]

    def plan(seed):
        return plan_requests(rel.sites, imgs, rel.ladders, models, conds, seed=seed)[0]

    reqs = plan(5)
    # per unit (site, image, reference point or baseline): a's requests, then b's, then the next unit
    unit = [(r.meta["site"], r.image_id, r.meta["ref_qid"], r.meta["ref_name"], r.meta["condition"] == "baseline") for r in reqs]
    blocks = [(unit[i], reqs[i].model) for i in range(len(reqs)) if i == 0 or (unit[i], reqs[i].model) != (unit[i - 1], reqs[i - 1].model)]
    assert [m for _, m in blocks] == ["a", "b"] * (len(blocks) // 2)
    assert all(blocks[i][0] == blocks[i + 1][0] for i in range(0, len(blocks), 2))
    # any prefix holds both models about equally (a unit is at most 2 conditions x 1 repeat per model)
    for k in (50, 500, 5000):
        c = sum(r.model == "a" for r in reqs[:k])
        assert abs(c - (k - c)) <= 2
    # sites come in a seeded random order, not alphabetically; the same seed gives the same order
    sites = list(dict.fromkeys(r.meta["site"] for r in reqs))
    assert sorted(sites) == sorted(rel.sites) and sites != sorted(sites)
    assert [r.key for r in plan(5)] == [r.key for r in reqs]
    other = plan(6)
    assert [r.key for r in other] != [r.key for r in reqs] and sorted(r.key for r in other) == sorted(r.key for r in reqs)
