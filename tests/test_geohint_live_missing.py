"""The GeoHint live report lists the missing work as it stands (s15; GeoVerify's twin:
tests/test_geoverify_live_missing.py).

Before: the aggregator stage's live rewrite of ``report.md`` (every ``[geohint] report_interval_s`` while a campaign
runs) wrote the tables without the missing work, so it never touched ``missing.csv`` and ``report.md`` carried no
"Incomplete" note: during a re-run after ``run.py dead --requeue`` a researcher watching the report folder saw the
previous run's list beside a live ``report.md`` that said nothing of missing requests, until the final report
replaced both. Now each live rewrite reads the missing work anew (the campaign kind's ``live_missing``: dead letters
from the queues), as the final report does.

End to end through the engine with the local Wikidata and Nominatim fakes (as
``tests/test_adversarial_reports.py``): a first run whose Wikidata fake answers HTTP 500 to half the lookups, with no
retry, dead-letters answers on the geocoder's edge; they are requeued and the campaign re-run against a healthy fake,
with a live rewrite at every flush. What the live report left in the report folder is read just before the final
report is written (the kind's ``report`` is wrapped, then called as usual).
"""

from __future__ import annotations

import csv
import io

import anyio

from geoagent import engine
from geoagent.config import config_from_dict
from geoagent.engine import EXIT_INCOMPLETE
from geoagent.geohint.campaign import GeoHintCampaign
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve
from geoagent.status import dead_letters, requeue_dead
from test_geohint_campaign import _cfg


def _run(release_dir, faults):
    async def go():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz, faults=faults)) as wd, \
                serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            d = _cfg(wd, nm)
            d["geohint"].update(conditions=["baseline", "forced"], baseline_repeats=1, report_interval_s=0, n_boot=0)
            for h in d["hosts"].values():
                h["max_attempts"] = 1
            d["queue"] = {"max_attempts": 1, "backoff_base_s": 0.01, "backoff_max_s": 0.02}
            cfg = config_from_dict(d)
            return await engine.run_campaign(cfg, live=False, handle_signals=False, export=False), cfg

    return anyio.run(go)


def test_a_rerun_live_report_rewrites_the_missing_list(tmp_path, release_dir, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    out, cfg = _run(release_dir, FaultConfig(rate=0.5, kinds=("500",), seed=3))
    dead = [d for items in dead_letters(cfg, limit=10_000).values() for d in items]
    assert out.exit_code == EXIT_INCOMPLETE and dead
    report = tmp_path / "state" / "gh-engine" / "report"
    first = list(csv.DictReader(io.StringIO((report / "missing.csv").read_text())))
    assert len(first) == len(dead)

    assert requeue_dead(cfg) == len(dead)
    seen: dict[str, str] = {}
    final_report = GeoHintCampaign.report

    async def report_after_the_live_one(self, cfg_, ctx, outcome):
        seen["csv"] = (report / "missing.csv").read_text()
        seen["md"] = (report / "report.md").read_text(encoding="utf-8")
        return await final_report(self, cfg_, ctx, outcome)

    monkeypatch.setattr(GeoHintCampaign, "report", report_after_the_live_one)
    out, cfg = _run(release_dir, None)  # a healthy Wikidata: every requeued answer is located now
    assert out.exit_code == 0, out.summary()
    # the live report's list: nothing dead-lettered any more (before: the first run's rows)
    assert list(csv.DictReader(io.StringIO(seen["csv"]))) == []
    assert "Missing requests (dead-lettered): none." in seen["md"]  # before: no word of missing work live
    assert "Incomplete:" not in seen["md"]
    assert seen["csv"] == (report / "missing.csv").read_text()  # the live report listed what the final one lists


def test_a_live_rewrite_lists_the_missing_work_and_keeps_it_when_unreadable(tmp_path, caplog):
    """The stage alone: with the service its live rewrite writes ``missing.csv`` and the "Incomplete" note; when
    the queues are unreadable for a moment (a locked file, a Redis outage) it still writes the tables, says so once
    in the log, and leaves the previous ``missing.csv`` as it was (never an empty list that would read as "nothing
    missing")."""
    from geoagent.geohint.result import GeoHintResult
    from geoagent.geohint.stages import GeoHintAggregatorStage

    out = tmp_path / "report"
    out.mkdir()
    stage = GeoHintAggregatorStage(report_interval_s=0, n_flips=10, n_splits=2, n_boot=0, figures=False)
    for i in range(6):
        key = f"gh|m|s{i % 3}|img{i}|baseline||r0"
        stage.agg.add(GeoHintResult(key=key, site=f"s{i % 3}", image_id=f"img{i}", model="m", condition="baseline",
                                    schema="forced", resolved_level="area", error_km=0.4 if i % 2 else 2.5,
                                    hit=bool(i % 2)))
    row = {"model": "m", "edge": "answers", "key": "gh|m|s0|img9|baseline||r0", "reason": "HTTP 500"}
    stage._live_missing = lambda: {"missing": [row]}
    stage._write(out)
    assert "**Incomplete: 1 request(s) missing**" in (out / "report.md").read_text(encoding="utf-8")
    assert (out / "missing.csv").read_text() == "model,edge,key,reason\nm,answers,gh|m|s0|img9|baseline||r0,HTTP 500\n"

    def unreadable():
        raise OSError("database is locked")

    stage._live_missing = unreadable
    with caplog.at_level("WARNING", logger="geoagent.geohint.stages"):
        stage._write(out)
    assert (out / "report.md").is_file()
    assert (out / "missing.csv").read_text().count("\n") == 2  # the earlier list, untouched
    assert [r.getMessage() for r in caplog.records] == [
        "GeoHint live report: could not read the missing work (database is locked); missing.csv left as it was"]
