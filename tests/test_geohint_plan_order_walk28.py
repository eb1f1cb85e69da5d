"""A GeoHint plan is queued unit by unit in a seeded random order (walk28 #3).

Before: the planner ranked sites in a seeded random order but queued all of a site's requests together (every image,
reference point, condition and model: hundreds of requests). A run stopped at the budget cap (or interrupted) held
the answers of the first site or two only: a GeoHint run capped at $0.50 reported one site of six, hit rate 91 %
against 54 % over the whole plan. Now the ranked item is the unit (an image's baseline, or one of its reference
points), with each unit's models, conditions and repeats kept together (GeoVerify ranks trials the same way), so a
stopped run holds a random sample of units spread over the sites.

End to end: a GeoHint campaign over the release's sites, on the sandbox's OpenAI-compatible fake with prices, with a
cap that stops it after a few dozen calls; the answers it scored come from many sites, where the planner's order gave
the first one or two.
"""

from __future__ import annotations

import polars as pl

from geoagent.cli import main
from geoagent.engine import EXIT_BUDGET


def _geohint_toml(tmp, release_dir, cap: float) -> str:
    return f"""
[campaign]
name = "gh-order"
kind = "geohint"
seed = 11
contact = "mailto:test@example.org"
[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"
[budget]
cap_usd = {cap}
[[models]]
name = "sim"
provider = "openai"
base_url = "http://openai.sandbox.invalid/v1"
model = "gpt-4o-mini"
max_output_tokens = 64
price_input_usd_per_mtok = 10.0
price_output_usd_per_mtok = 10.0
concurrency = 2
[geohint]
release_dir = "{release_dir}"
conditions = ["baseline", "forced"]
baseline_repeats = 1
images = "synthetic"
n_boot = 0
n_flips = 50
n_splits = 4
[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
"""


def test_a_capped_geohint_run_answers_many_sites(tmp_path, release_dir, capsys):
    cfg = tmp_path / "gh.toml"
    cfg.write_text(_geohint_toml(tmp_path, release_dir, cap=0.4))
    assert main(["run", str(cfg), "--no-live"]) == EXIT_BUDGET
    capsys.readouterr()
    out = tmp_path / "export"
    assert main(["export", str(cfg), "--out", str(out)]) == 0
    capsys.readouterr()
    responses = pl.read_parquet(out / "model_responses.parquet")
    scored = pl.read_parquet(out / "geohint_scored.parquet")
    answered = responses.height
    assert 10 <= answered <= 200, answered  # stopped early (the plan has thousands of requests)
    sites = scored["site"].n_unique()
    # in the planner's order (site by site) a few dozen answers are one or two sites' worth
    assert sites >= 10, (sites, answered)


def test_units_in_random_order_with_their_requests_together(release_dir):
    """The plan's order: a prefix spreads over many sites; each unit's requests (every model, condition and repeat
    of one image's baseline or reference point) are next to each other; the same seed plans the same order, another
    seed another; the order changes no key."""
    from geoagent.data.importer import import_release
    from geoagent.geohint.conditions import conditions_from_config
    from geoagent.geohint.plan import ModelSpec, plan_requests, synthetic_images

    release = import_release(release_dir)
    models = [ModelSpec(model="a", provider="simulated"), ModelSpec(model="b", provider="simulated")]
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced", "forced_warn"]}})

    def plan(seed):
        reqs, _ = plan_requests(release.sites, synthetic_images(release.sites), release.ladders, models, conds,
                                seed=seed, baseline_repeats=2)
        return reqs

    reqs = plan(11)
    unit = [(r.meta["site"], r.image_id, r.meta["ref_qid"]) for r in reqs]
    runs = [u for i, u in enumerate(unit) if i == 0 or unit[i - 1] != u]
    assert len(runs) == len(set(runs))  # each unit's requests are one block
    sizes = {u: unit.count(u) for u in set(runs)}
    assert set(sizes.values()) == {4}  # baseline: 2 models x 2 repeats; a point: 2 models x 2 context conditions
    first = reqs[:100]
    # 25 units spread over many of the 109 sites (a site's reference points follow its image's baseline, review #4,
    # so a few units of one image come together: 13 sites here, 1-2 in the planner's old site-by-site order)
    assert len({r.meta["site"] for r in first}) >= 10
    assert plan(11) == reqs
    other = plan(12)
    assert [r.key for r in other] != [r.key for r in reqs] and sorted(r.key for r in other) == sorted(r.key for r in reqs)


def test_every_prefix_holds_the_baseline_of_each_context_request_in_it(release_dir):
    """Walk28 review #4: with units shuffled independently, a run stopped at fraction f of the plan held the
    baseline of only a fraction f of its context answers, and the paired comparisons with the no-context answer
    of the same image (error ratio, regime split) could use about f of them. A reference point's unit now sorts
    at the later of its own rank and its image's baseline's; the plan is still spread over the sites."""
    from geoagent.data.importer import import_release
    from geoagent.geohint.conditions import conditions_from_config
    from geoagent.geohint.plan import ModelSpec, plan_requests, synthetic_images

    release = import_release(release_dir)
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced"]}})
    reqs, _ = plan_requests(release.sites, synthetic_images(release.sites), release.ladders,
                            [ModelSpec(model="a", provider="simulated")], conds, seed=5)
    seen_baseline: set[tuple[str, str]] = set()
    context_before_baseline = 0
    for r in reqs:
        img = (r.meta["site"], r.image_id)
        if r.meta["ref_qid"] is None:
            seen_baseline.add(img)
        elif img not in seen_baseline:
            context_before_baseline += 1
    assert context_before_baseline == 0
    n_context = sum(r.meta["ref_qid"] is not None for r in reqs)
    assert n_context > 1000  # the release's ladders: many reference points per image
    # a prefix of a tenth of the plan: context answers from many sites, not only baselines
    prefix = reqs[: len(reqs) // 10]
    ctx = [r for r in prefix if r.meta["ref_qid"] is not None]
    assert len(ctx) > 0.01 * n_context and len({r.meta["site"] for r in ctx}) >= 10, (len(ctx), n_context)
