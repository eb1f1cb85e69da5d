"""The GeoVerify live report lists the missing work as it stands (s15).

Before: the aggregator stage's live rewrite (every ``report_interval_s`` while a campaign runs) wrote the tables
without the missing work, so it never touched ``geoverify_missing.csv``: during a re-run a researcher watching the
report folder saw the previous run's list (here: 136 dead-lettered trials, requeued and being answered) until the
final report replaced it, and the live Markdown table said nothing of missing trials while the CSV beside it listed
them. Now each live rewrite reads the missing work anew (the campaign kind's ``live_missing``: dead letters from the
queues, and the plan's unreplayed trials), as the final report does.

End to end on the release sample (``tests/_model_harness.py`` replay campaign, as
``tests/test_adversarial_reports.py``): a first run with a truncated recording dead-letters 136 trials; ``run.py dead
--requeue``; the recording is completed and the campaign re-run with a live rewrite at every flush. What the live
report left in the report folder is read just before the final report is written (the kind's ``report`` is
wrapped, then called as usual).
"""

from __future__ import annotations

import csv
import io

from geoagent.cli import main
from geoagent.engine import EXIT_INCOMPLETE
from geoagent.geoverify.campaign import GeoVerifyCampaign
from _model_harness import geoverify_replay_toml


def _missing_rows(text: str) -> list[dict]:
    return list(csv.DictReader(io.StringIO(text)))


def test_a_rerun_live_report_rewrites_the_missing_list(tmp_path, release_dir, capsys, monkeypatch):
    lines = (release_dir / "verify_raw_sample.jsonl").read_bytes().splitlines()
    rec = tmp_path / "rec.jsonl"
    rec.write_bytes(b"\n".join(lines[:200]) + b"\n")
    cfg = tmp_path / "gv.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, "gv-live-missing", release_dir, replay_path=rec,
                                         queue="backoff_base_s = 0.01\nbackoff_max_s = 0.02",
                                         geoverify="n_boot = 0\nreport_interval_s = 0"))
    assert main(["run", str(cfg), "--no-live"]) == EXIT_INCOMPLETE
    report = tmp_path / "state" / "gv-live-missing" / "report"
    first = _missing_rows((report / "geoverify_missing.csv").read_text())
    assert len(first) == 136 and all("ReplayMiss" in r["reason"] for r in first)

    assert main(["dead", str(cfg), "--requeue"]) == 0
    rec.write_bytes(b"\n".join(lines) + b"\n")  # every recorded answer: the requeued trials are answered now
    seen: dict[str, str] = {}
    final_report = GeoVerifyCampaign.report

    async def report_after_the_live_one(self, cfg_, ctx, outcome):
        seen["csv"] = (report / "geoverify_missing.csv").read_text()
        seen["md"] = (report / "geoverify_table.md").read_text()
        return await final_report(self, cfg_, ctx, outcome)

    monkeypatch.setattr(GeoVerifyCampaign, "report", report_after_the_live_one)
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    # the live report's list: nothing dead-lettered any more (before: the first run's 136 rows)
    live = _missing_rows(seen["csv"])
    assert [r for r in live if r["edge"] != "not replayed"] == [], live[:3]
    assert "Missing trials (dead-lettered): none." in seen["md"]  # before: no word of missing work in the live table
    final = _missing_rows((report / "geoverify_missing.csv").read_text())
    assert live == final  # the live report listed what the final one lists


def test_a_live_rewrite_whose_missing_work_cannot_be_read_still_writes_the_tables(tmp_path, caplog):
    """The queues unreadable for a moment (a locked file, a Redis outage): the live rewrite still writes the tables,
    says so once in the log, and leaves the previous ``geoverify_missing.csv`` as it was (never an empty list that
    would read as "nothing missing")."""
    from geoagent.geoverify.stages import GeoVerifyAggregatorStage

    out = tmp_path / "report"
    out.mkdir()
    (out / "geoverify_missing.csv").write_text("model,edge,key,reason\nm,requests,t|m,HTTP 500\n")
    stage = GeoVerifyAggregatorStage(report_interval_s=0)

    def unreadable():
        raise OSError("database is locked")

    stage._live_missing = unreadable
    with caplog.at_level("WARNING", logger="geoagent.geoverify.stages"):
        paths = stage._write(out)
    assert paths["md"].is_file() and "missing" not in paths
    assert (out / "geoverify_missing.csv").read_text().count("\n") == 2  # the earlier list, untouched
    assert [r.getMessage() for r in caplog.records] == [
        "GeoVerify live report: could not read the missing work (database is locked); geoverify_missing.csv left "
        "as it was"]
