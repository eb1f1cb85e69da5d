"""A GeoVerify or GeoHint plan is queued in a seeded random order (walk28 #3).

Before: tasks were queued, and so sent, in the planner's order, site by site. A run stopped at the budget cap (or
interrupted) held the answers of the plan's first sites only: a GeoHint run capped at $0.50 reported one site of
six, hit rate 91 % against 54 % over the whole plan. Now :func:`geoagent.engine.dispatch_order` shuffles the plan
with the campaign's seed before it is queued (the same order at each run), so a stopped run holds a random sample of
the plan, spread over its sites.

End to end: a GeoHint campaign over the release's sites, on the sandbox's OpenAI-compatible fake with prices, with a
cap that stops it after a few dozen calls; the answers it scored come from many sites, where the planner's order gave
the first one or two.
"""

from __future__ import annotations

import polars as pl

from geoagent.cli import main
from geoagent.engine import EXIT_BUDGET, CampaignKind, dispatch_order
from geoagent.geohint.campaign import GeoHintCampaign
from geoagent.geoverify.campaign import GeoVerifyCampaign


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


def test_dispatch_order_is_seeded_and_only_for_shuffled_kinds():
    class Cfg:
        class campaign:
            seed = 3

    plan = [(f"k{i}", i) for i in range(200)]
    a = dispatch_order(plan, GeoVerifyCampaign(), Cfg)
    b = dispatch_order(list(plan), GeoHintCampaign(), Cfg)
    assert a == b and a != plan and sorted(a) == sorted(plan)  # one order per seed, a permutation of the plan
    assert plan == [(f"k{i}", i) for i in range(200)]  # the planner's list is left as it was

    class Other:
        class campaign:
            seed = 4

    assert dispatch_order(plan, GeoVerifyCampaign(), Other) != a
    assert CampaignKind.dispatch_shuffled is False
    gen = (m for m in plan)
    assert dispatch_order(gen, GeoVerifyCampaign(), Cfg) is gen  # a streamed plan stays lazy, in its order
