"""A GeoHint campaign whose config dropped sites and a model between runs scores exactly the current plan's
requests, says what it left out, exports a ``scored`` column that reproduces the report, and lists no task set
aside as superseded among the missing ones.

Walkthrough: 12 sites interrupted, cut to 6 and re-run: "719 scored responses over 7 sites", report.md agreed,
and the export held the removed site's 47 rows; with a model removed, ``table1.csv`` still had its row. Real
sites and ladders, simulated provider, geocoder against the local Wikidata and Nominatim fakes, real engine.
"""

from __future__ import annotations

import csv
import re
from urllib.parse import urlsplit

import anyio
import polars as pl
import pytest

from geoagent import engine
from geoagent.config import config_from_dict
from geoagent.geohint.stages import SCORED_TABLE
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve

FAST = {"rate": 2000.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 3, "backoff_base_s": 0.01,
        "backoff_max_s": 0.1, "timeout_s": 10.0}

@pytest.fixture(autouse=True)
def _no_upstream_wait(monkeypatch):
    # a downstream-only run plans here without a model caller (only_stages); it must end at once, as before
    # fixstages43's wait for an upstream process (GEOAGENT_UPSTREAM_WAIT_S: 10 minutes by default)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")



def _cfg(wd_url: str, nm_url: str, sites: list[str], models: list[str]) -> dict:
    return {
        "campaign": {"name": "gh-scope", "kind": "geohint", "seed": 1, "contact": "ops@example.org"},
        "budget": {"cap_usd": 0.0},
        "models": [{"name": m, "provider": "simulated", "model": m} for m in models],
        "hosts": {urlsplit(wd_url).netloc: FAST, urlsplit(nm_url).netloc: FAST},
        "geohint": {
            "sites": sites, "conditions": ["baseline", "forced"], "images": "synthetic",
            "n_flips": 50, "n_splits": 5,
            "geocoder": {"wikidata_url": wd_url + "/w/api.php", "nominatim_url": nm_url,
                         "nominatim_max_requests": 100_000},
        },
    }


def test_removed_sites_and_model_are_not_scored_and_the_export_marks_the_scored_rows(release_dir, isolated_roots,
                                                                                      monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    kept, dropped, queued_only = ["paris_marais", "tokyo_shibuya"], "london_barbican", "mumbai_bowen"

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            # run 1: three sites, two models, complete
            first = await engine.run_campaign(config_from_dict(_cfg(wd, nm, [*kept, dropped], ["sim-a", "sim-b"])),
                                              live=False, handle_signals=False, export=False)
            # run 2: a fourth site planned and queued, none of it sent (a process without the model caller)
            await engine.run_campaign(config_from_dict(_cfg(wd, nm, [*kept, dropped, queued_only], ["sim-a", "sim-b"])),
                                      live=False, handle_signals=False, export=False, only_stages=["parser"])
            # run 3: two sites and one model: the dropped site's and model's answers stay stored, the queued
            # site's tasks are set aside (superseded)
            cfg = config_from_dict(_cfg(wd, nm, kept, ["sim-a"]))
            capsys.readouterr()
            third = await engine.run_campaign(cfg, live=False, handle_signals=False, export=True)
            return first, third, cfg, capsys.readouterr().err

    first, third, cfg, err = anyio.run(main)
    # the set-aside reason names the removed sites and model, not a positional diff of the list
    assert (f"(config changed: geohint.sites: removed '{dropped}', '{queued_only}'; models (sim-b) removed)"
            in err), err
    assert first.status == "complete" and third.status == "complete", third.summary()
    assert sum(third.superseded.values()) > 0
    summary = third.summary()
    with open_campaign_state("gh-scope", root=isolated_roots / "state") as st:
        stored = [(k, r) for k, r in st.store.iter_results(SCORED_TABLE)]
    left_out = len(stored) - third.planned
    assert left_out > 0 and third.missing == 0
    m = re.search(r"GeoHint: (\d+) scored responses over (\d+) sites", summary)
    assert m and (int(m.group(1)), int(m.group(2))) == (third.planned, 2), summary
    assert f"Left out of scoring: {left_out} stored answers of tasks the current plan no longer holds" in summary
    # walk46 #13: and the plan line says the done counts below it hold them
    assert (f"planned {third.planned} requests (the done counts below also hold {left_out} of an earlier plan, no "
            "longer planned: kept, not scored)") in summary, summary
    report = isolated_roots / "state" / "gh-scope" / "report"
    md = (report / "report.md").read_text(encoding="utf-8")
    assert f"Left out of scoring: {left_out} stored answers" in md
    assert f"{third.planned} scored responses, 2 sites, models: sim-a;" in md
    # the removed model has no row in the tables
    with open(report / "table1.csv", encoding="utf-8") as fh:
        assert "sim-b" not in fh.read()
    # superseded tasks are not missing work (run 3 ended complete): the report lists none
    assert "Incomplete" not in md and "Missing requests (dead-lettered): none." in md
    with open(report / "missing.csv", encoding="utf-8") as fh:
        assert list(csv.reader(fh)) == [["model", "edge", "key", "reason"]]
    # the export keeps every stored row and marks exactly the report's rows as scored
    df = pl.read_parquet(isolated_roots / "state" / "gh-scope" / "geohint_scored.parquet")
    assert df.height == len(stored)
    scored = df.filter(pl.col("scored"))
    assert scored.height == third.planned
    assert set(scored["site"]) == set(kept) and set(scored["model"]) == {"sim-a"}
    assert df.filter(~pl.col("scored")).height == left_out
    # the per-model "answered / planned" figures count answers to the current plan's requests only (the
    # dropped site's answers of sim-a are stored, not in the plan): the run's and `status`'s
    from geoagent.status import campaign_status

    assert third.answered_by_model == {"sim-a": third.planned}
    assert campaign_status(cfg)["answered_by_model"] == {"sim-a": third.planned}
