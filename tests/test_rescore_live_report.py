"""The live aggregator counts the rows a run scores again (rev22 finding 2).

The run's aggregator rebuilds its counts from the store when it starts, before the scorer writes the deleted rows
again; the scorer's put on edge ``scored`` is a no-op while that edge holds the key as done, so no live rewrite of
that run counted them (a ``--watch`` run kept a report short by them until it stopped; the end report, built from
the store, was right). Now the engine reopens those keys on ``scored`` too: the aggregator gets each row again,
and counts it once whether it started before the rows came back or after.

A real replay campaign through the CLI (the scorer in its own ``--stages`` run), the aggregator stage driven by hand
on the tasks it would lease (skipped without the release data).
"""
import asyncio
import csv
import sqlite3
from pathlib import Path

from geoagent.cli import main
from geoagent.geoverify.stages import SERVICE_PLAN_KEYS, GeoVerifyAggregatorStage
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import StageContext
from geoagent.runtime.store import open_campaign_state

REPLAY = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml"
NAME = "geocontext-replay"


def _n_parsed(folder: Path) -> str:
    rows = csv.reader(open(folder / "geoverify_table.csv", encoding="utf-8"))
    return next(r for r in rows if r[1] == "n parsed (main arm)")[-5]  # pooled over the models


def test_the_live_report_counts_the_rows_scored_again_once(release_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    assert main(["run", str(REPLAY), "--no-live"]) == 0
    db = tmp_path / "state" / NAME / "campaign.sqlite"
    with sqlite3.connect(db) as c:
        keys = [k for (k,) in c.execute("SELECT key FROM results WHERE tbl = 'geoverify_scored' ORDER BY key")]
        c.executemany("DELETE FROM results WHERE tbl = 'geoverify_scored' AND key = ?", [(k,) for k in keys[:3]])
    st = open_campaign_state(NAME, root=tmp_path / "state")
    services = {"store": st.store, SERVICE_PLAN_KEYS: frozenset(keys)}

    early = GeoVerifyAggregatorStage(report_interval_s=0)
    early_ctx = StageContext(NAME, services={**services, "report_dir": str(tmp_path / "early")})
    asyncio.run(early.start(early_ctx))  # the run's aggregator, started before the scorer writes the rows again
    capsys.readouterr()
    assert main(["run", str(REPLAY), "--stages", "scorer", "--no-live"]) == 0
    assert "3 planned tasks scored by an earlier run had no row" in capsys.readouterr().err

    async def body() -> tuple[str, str]:
        late = GeoVerifyAggregatorStage(report_interval_s=0)
        late_ctx = StageContext(NAME, services={**services, "report_dir": str(tmp_path / "late")})
        await late.start(late_ctx)  # one started after: the rows are in the store again
        q = open_queue(tmp_path / "queues", NAME, "scored")
        tasks = await q.lease(10, 60)
        assert sorted(t.key for t in tasks) == keys[:3]  # the aggregator's input holds them again
        for agg, ctx in ((early, early_ctx), (late, late_ctx)):
            for t in tasks:
                await agg.handle(t, ctx)
            agg.write_report(ctx)  # a live rewrite
        await q.close()
        return _n_parsed(tmp_path / "early"), _n_parsed(tmp_path / "late")

    assert asyncio.run(body()) == ("336", "336")
    assert st.store.count_results("geoverify_scored") == 336
    st.close()
