"""A live report rewrite carries the header lines of the final report (walkthrough 28 #1).

Before: while a campaign ran, the aggregator's live rewrites of ``geoverify_table.md`` / ``report.md`` had no
interim line and no simulator or replay line; only the final report had them. A researcher reading the report
folder during a run (or after a kill or a forced second Ctrl-C, which leave the last live rewrite in place) saw
tables of a few hundred simulated answers that read as a final report of a real model. Now each live rewrite says it
is a live report of a running campaign (``Interim report: live report written at ...``) and names the simulated
or replayed models as the final report does; the final report replaces it without the live line.

Both kinds end to end through the engine, reading what the live report left in the report folder just before the
final report is written (the kind's ``report`` is wrapped, then called as usual, as
``tests/test_geoverify_live_missing.py`` does).
"""

from __future__ import annotations

import anyio

from geoagent import engine
from geoagent.cli import main
from geoagent.config import config_from_dict
from geoagent.geohint.campaign import GeoHintCampaign
from geoagent.geoverify.campaign import GeoVerifyCampaign
from geoagent.report.live import LiveBanners, live_interim_note
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve
from _model_harness import geoverify_replay_toml
from test_geohint_campaign import _cfg

LIVE = "**Interim report: live report written at "


def _capture_live(monkeypatch, kind, files):
    seen: dict[str, str] = {}
    final_report = kind.report

    async def report_after_the_live_one(self, cfg_, ctx, outcome):
        for f in files:
            seen[f.name] = f.read_text(encoding="utf-8") if f.is_file() else ""
        return await final_report(self, cfg_, ctx, outcome)

    monkeypatch.setattr(kind, "report", report_after_the_live_one)
    return seen


def test_geoverify_live_rewrite_says_live_and_replayed(tmp_path, release_dir, monkeypatch, capsys):
    cfg = tmp_path / "gv.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, "gv-live-banner", release_dir,
                                         geoverify="n_boot = 0\nreport_interval_s = 0"))
    report = tmp_path / "state" / "gv-live-banner" / "report"
    seen = _capture_live(monkeypatch, GeoVerifyCampaign, [report / "geoverify_table.md"])
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    live = seen["geoverify_table.md"]
    assert live.startswith("**Replay of recorded responses"), live[:200]  # the replay line first, as in the final report
    assert LIVE in live and "the tables cover only the answers scored by then" in live
    assert "verify_raw_sample.jsonl" in live
    final = (report / "geoverify_table.md").read_text(encoding="utf-8")
    assert "live report written" not in final and final.startswith("**Replay of recorded responses")


def test_geohint_live_rewrite_says_live_and_simulated(tmp_path, release_dir, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    report = tmp_path / "state" / "gh-engine" / "report"
    seen = _capture_live(monkeypatch, GeoHintCampaign, [report / "report.md", report / "report_note.txt"])

    async def go():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            d = _cfg(wd, nm)
            d["geohint"].update(conditions=["baseline", "forced"], baseline_repeats=1, report_interval_s=0, n_boot=0)
            return await engine.run_campaign(config_from_dict(d), live=False, handle_signals=False, export=False)

    out = anyio.run(go)
    assert out.status == "complete", out.summary()
    live_md, live_note = seen["report.md"], seen["report_note.txt"]
    assert LIVE in live_md, live_md[:400]
    assert "Simulated answers: " in live_md and "sim-a" in live_md.split("Simulated answers: ")[1].splitlines()[0]
    assert "Simulated answers: " in live_note  # the note beside the CSV tables says it too
    final = (report / "report.md").read_text(encoding="utf-8")
    assert "live report written" not in final and "Simulated answers: " in final


def test_banners_hand_cases():
    calls = []

    def simulated():
        calls.append(1)
        return ["sim-a"]

    image = {"note": None}
    b = LiveBanners(simulated, "", lambda: image["note"])
    kw = b()
    assert set(kw) == {"interim", "simulated"} and kw["simulated"] == ["sim-a"]
    image["note"] = "3 photos missing"
    kw = b()
    assert kw["image_note"] == "3 photos missing"
    assert calls == [1]  # the store is read once, at the first rewrite
    assert LiveBanners(lambda: [], "Replayed answers: m from f")()["replay_note"] == "Replayed answers: m from f"
    assert live_interim_note(0.0).startswith("live report written at 1970-01-01 00:00:00 UTC while the campaign runs")


def test_banners_find_a_simulated_model_whose_answers_came_after_the_first_rewrite(monkeypatch):
    """Walk28 review #5: the simulated list was read once, at the first rewrite; a fake started by hand is known
    as one only by the answers it marked, so a first rewrite before its first answer left every later live report
    without the simulator warning. Now it is read again a minute later, and a name once found stays."""
    from geoagent.report import live

    answers: list[list[str]] = [[], ["fake-by-hand"], []]
    calls = []

    def simulated():
        calls.append(1)
        return answers[min(len(calls) - 1, 2)]

    clock = [1000.0]
    monkeypatch.setattr(live.time, "monotonic", lambda: clock[0])
    b = LiveBanners(simulated)
    assert b()["simulated"] == []
    clock[0] += 10.0
    assert b()["simulated"] == [] and len(calls) == 1  # within the minute: not read again
    clock[0] += live.SIMULATED_REFRESH_S
    assert b()["simulated"] == ["fake-by-hand"] and len(calls) == 2
    clock[0] += live.SIMULATED_REFRESH_S
    assert b()["simulated"] == ["fake-by-hand"] and len(calls) == 3  # found once: kept
