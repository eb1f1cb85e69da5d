"""The aggregator stages' shared live-report machinery (:class:`geoagent.report.live.LiveAggregatorStage`) and the
differences GeoHint's and GeoVerify's stages keep on purpose.

Before session 19 each stage carried its own copy of the machinery; the copies had drifted apart. One drift was a
defect in both: :meth:`stop` closed the report thread's pool only after a normal end (GeoHint) or in a ``finally``
around the final write alone (GeoVerify), so a rebuild from the store that raised at stop left the pool and its
worker thread behind. The others are kept as flags and pinned here: GeoHint writes no report before its first scored row,
logs a failing final report instead of raising it and drops a row its aggregator rejects; GeoVerify writes an
empty report, raises, and keeps a rejected batch pending (its ``update`` takes a batch whole or not at all).
"""

from __future__ import annotations

import logging

import anyio
import pytest
from _geohint_synth import synth_results

from geoagent import constants as C
from geoagent.data.importer import import_release
from geoagent.geohint.stages import SERVICE_PLAN_KEYS as GH_PLAN_KEYS
from geoagent.geohint.stages import GeoHintAggregatorStage
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.geoverify.stages import SERVICE_PLAN_KEYS as GV_PLAN_KEYS
from geoagent.geoverify.stages import GeoVerifyAggregatorStage
from geoagent.runtime.stage import PermanentFailure, StageContext, Task


class _UnreadableStore:
    """A results store whose table cannot be read (a disk error mid-run)."""

    def iter_results(self, table):
        raise OSError(f"cannot read {table}")


@pytest.mark.parametrize("cls, plan_service", [(GeoHintAggregatorStage, GH_PLAN_KEYS),
                                               (GeoVerifyAggregatorStage, GV_PLAN_KEYS)])
def test_stop_lets_the_report_thread_go_when_the_rebuild_fails(tmp_path, cls, plan_service):
    """A re-plan seen at stop rebuilds from the store; when that raises, ``stop`` raises it and still closes the
    report thread's pool. Failed first: both stages kept the pool (GeoHint closed it only after a normal end,
    GeoVerify only around the final write)."""
    stage = cls(report_interval_s=0.0)
    ctx = StageContext("aggbase", {"report_dir": tmp_path / "report"})

    async def main():
        await stage.start(ctx)  # no store: nothing to rebuild
        assert stage.live.start(lambda: None)  # a live rewrite ran: the pool exists
        await stage.live.wait()
        assert stage.live._pool is not None
        ctx.services["store"] = _UnreadableStore()
        ctx.services[plan_service] = frozenset({"k"})  # the campaign planned anew
        with pytest.raises(OSError, match="cannot read"):
            await stage.stop(ctx)

    anyio.run(main)
    assert stage.live._pool is None


def test_both_stages_share_the_machinery():
    from geoagent.report.live import LiveAggregatorStage

    for cls in (GeoHintAggregatorStage, GeoVerifyAggregatorStage):
        assert issubclass(cls, LiveAggregatorStage)
        for name in ("_load", "_follow_plan", "handle", "_drain", "write_report", "_write", "flush", "stop"):
            assert name not in vars(cls), (cls.__name__, name)
        assert cls.name == C.STAGE_AGGREGATOR and cls.input_edge == C.EDGE_SCORED and cls.output_edge is None
    assert GeoHintAggregatorStage().live.what == "GeoHint" and GeoVerifyAggregatorStage().live.what == "GeoVerify"
    assert GeoVerifyAggregatorStage().missing_csv == "geoverify_missing.csv"
    assert GeoHintAggregatorStage().missing_csv == "missing.csv"


def test_geohint_report_of_no_row_and_final_failure_logged(tmp_path, caplog):
    """GeoHint writes the report of an empty aggregator too, as GeoVerify does (session 21; before, none, so a
    re-run's earlier report of answers its plan no longer holds stayed in place); a failing final report (its
    folder is a file) is logged and ``stop`` returns."""
    out = tmp_path / "report"
    ctx = StageContext("aggbase", {"report_dir": out})
    stage = GeoHintAggregatorStage(report_interval_s=0.0, n_flips=10, n_splits=2, n_boot=0, figures=False)
    r = synth_results(seed=2, n_sites=2)[0]
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder", encoding="utf-8")

    async def main():
        await stage.start(ctx)
        await stage.flush(ctx)
        assert stage.live.started == 1  # the live rewrite of 0 rows (before: none)
        await stage.stop(ctx)
        assert "0 scored responses" in (out / "report.md").read_text(encoding="utf-8")
        await stage.handle(Task(r.key, r.to_json(), 0, "l"), ctx)
        ctx.services["report_dir"] = blocked
        with caplog.at_level(logging.ERROR):
            await stage.stop(ctx)  # logged, not raised

    anyio.run(main)
    assert "GeoHint live report failed" in caplog.text and stage.live.failed == 1


def test_geohint_drops_a_rejected_row_and_counts_the_next(tmp_path):
    """A row the GeoHint aggregator rejects (a hint distance off the Earth) fails its own task; the next row is
    counted (it is not kept pending to raise again); a malformed row is a permanent failure."""
    ctx = StageContext("aggbase", {"report_dir": tmp_path / "report"})
    stage = GeoHintAggregatorStage(report_interval_s=0.0, figures=False)
    good, bad = synth_results(seed=2, n_sites=2)[:2]
    bad_row = bad.to_json() | {"dist_km": 1e200}

    async def main():
        await stage.start(ctx)
        with pytest.raises(ValueError, match="no distance on Earth"):
            await stage.handle(Task(bad.key, bad_row, 0, "l"), ctx)
        await stage.handle(Task(good.key, good.to_json(), 0, "l"), ctx)
        with pytest.raises(PermanentFailure, match="malformed"):
            await stage.handle(Task("x", {"dist_km": "far"}, 0, "l"), ctx)

    anyio.run(main)
    assert stage.agg.keys == {good.key}


def test_geoverify_empty_report_raised_final_failure_and_kept_batch(release_dir, tmp_path):
    """GeoVerify writes a report of an empty aggregator; a batch its aggregator rejects (a verdict neither yes, no
    nor None) stays pending and the error comes back at each drain; a failing final report (its folder is a file)
    raises."""
    out = tmp_path / "report"
    ctx = StageContext("aggbase", {"report_dir": out})
    stage = GeoVerifyAggregatorStage(report_interval_s=0.0)
    row = scored_rows_from_release(import_release(release_dir))[0]
    blocked = tmp_path / "blocked"
    blocked.write_text("not a folder", encoding="utf-8")

    async def main():
        await stage.start(ctx)
        await stage.flush(ctx)
        await stage.live.wait()
        assert stage.live.started == 1 and stage.live.failed == 0 and (out / "geoverify_table.csv").is_file()
        await stage.handle(Task("t|m", row | {"verdict": "maybe"}, 0, "l"), ctx)
        for _ in range(2):
            with pytest.raises(ValueError, match="'maybe'"):
                await stage.flush(ctx)
            assert len(stage._pending) == 1
        stage._pending.clear()
        ctx.services["report_dir"] = blocked
        with pytest.raises(OSError):
            await stage.stop(ctx)

    anyio.run(main)
    assert stage.live._pool is None
