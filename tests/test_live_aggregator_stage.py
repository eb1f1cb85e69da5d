"""The aggregator stages' final report at stop lets the report thread go, whatever fails.

Before, :meth:`stop` closed the report thread's pool only after a normal end (GeoHint) or in a ``finally`` around
the final write alone (GeoVerify), so a rebuild from the store that raised at stop (a re-plan seen then, the results
table unreadable) left the pool and its worker thread behind.
"""

from __future__ import annotations

import anyio
import pytest

from geoagent.geohint.stages import SERVICE_PLAN_KEYS as GH_PLAN_KEYS
from geoagent.geohint.stages import GeoHintAggregatorStage
from geoagent.geoverify.stages import SERVICE_PLAN_KEYS as GV_PLAN_KEYS
from geoagent.geoverify.stages import GeoVerifyAggregatorStage
from geoagent.runtime.stage import StageContext


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
