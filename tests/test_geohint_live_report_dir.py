"""The GeoHint live report goes to the campaign's state folder, ``[paths] state`` included (s18).

Before: the aggregator stage's live rewrite (every ``[geohint] report_interval_s`` while a campaign runs) wrote to
``$GEOAGENT_STATE`` or ``state/`` of the working directory, ignoring the config's ``[paths] state``, so a campaign
whose file moved its state folder left a second, partial ``state/<campaign>/report/`` wherever the command ran
(found by a whole-suite run that left ``state/gh-crash/report`` in the repository) while its own report folder
got the live tables only at the end. GeoVerify's aggregator already took the run's state folder.

End to end through the engine with the local Wikidata and Nominatim fakes (as
``tests/test_geohint_live_missing.py``), a live rewrite at every flush, the process in another folder.
"""

from __future__ import annotations

import anyio

from geoagent import engine
from geoagent.config import config_from_dict
from geoagent.geohint.campaign import GeoHintCampaign
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve
from test_geohint_campaign import _cfg


def test_the_live_report_is_written_under_the_configs_state_folder(tmp_path, release_dir, monkeypatch):
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    elsewhere = tmp_path / "cwd"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    report = tmp_path / "mine" / "state" / "gh-engine" / "report"
    seen: dict[str, list[str]] = {}
    final_report = GeoHintCampaign.report

    async def report_after_the_live_one(self, cfg_, ctx, outcome):
        seen["live"] = sorted(p.name for p in report.iterdir()) if report.is_dir() else []
        return await final_report(self, cfg_, ctx, outcome)

    monkeypatch.setattr(GeoHintCampaign, "report", report_after_the_live_one)

    async def go():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            d = _cfg(wd, nm)
            d["paths"] = {"state": str(tmp_path / "mine" / "state"), "queues": str(tmp_path / "mine" / "queues")}
            d["geohint"].update(conditions=["baseline", "forced"], baseline_repeats=1, report_interval_s=0, n_boot=0)
            cfg = config_from_dict(d)
            return await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(go)
    assert out.status == "complete", out.summary()
    # the live rewrite wrote the campaign's own report folder before the final report (before: nothing there)
    assert "report.md" in seen["live"] and "table1.csv" in seen["live"], seen
    # and nothing anywhere else (before: state/gh-engine/report/ of the working directory)
    assert not (elsewhere / "state").exists(), sorted(str(p) for p in (elsewhere / "state").rglob("*"))
    assert (report / "report.md").is_file()
