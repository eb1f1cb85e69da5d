"""The cost cap's refusals are kept out of a stage's recent errors (s14-usage).

Before: every task the cap refused (:class:`~geoagent.runtime.stage.BudgetStop`; at a budget stop, every task in
flight) was noted among the stage's 5 ``last_errors``, pushing the real errors out: after a stop with 5 calls in
flight, ``status`` and the stage record showed only refusals, which ``status`` already merges into one line. The
refusals now have their own list (``budget_refusals``, ``budget_refused``); ``status`` shows the last real errors
and then the refusals' one line. A real pipeline over SQLite queues (no mocks).
"""

from __future__ import annotations

import anyio

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.progress import merge_records
from geoagent.runtime.stage import BudgetStop, PermanentFailure, Stage, StageContext
from geoagent.status import stage_error_lines

REAL = "HTTP 400: bad request"


def _refusal(i: int) -> str:
    return (f"budget exhausted: spent $0.090000 + unknown $0.000000 + reserved $0.00{i}000 + this call "
            f"$0.00874{i} > cap $0.100000")


class Refused(Stage):
    """One real failure first, then every other task refused by the cap while many are in flight."""

    name = "caller"
    input_edge = "a"
    output_edge = None
    concurrency = 16

    async def handle(self, task, ctx):
        i = int(task.key[1:])
        if i == 0:
            raise PermanentFailure(REAL)
        await anyio.sleep(0.05)
        raise BudgetStop(_refusal(i % 10))


def _run(tmp_path):
    async def main():
        queues = open_edge_queues(tmp_path / "q", "t", [Refused()], backoff_base_s=0.01, backoff_max_s=0.02,
                                  max_attempts=3)
        await queues["a"].put_many([(f"k{i}", {}) for i in range(16)])
        run = await run_pipeline("t", [Refused()], queues, StageContext("t"), handle_signals=False)
        for q in queues.values():
            await q.close()
        return run

    return anyio.run(main)


def test_refusals_keep_out_of_the_recent_errors(tmp_path):
    run = _run(tmp_path)
    assert run.budget_stopped
    [stats] = run.stats()
    sd = stats.as_dict()
    # before: last_errors held 5 refusals and no longer the HTTP 400
    assert any(REAL in e for e in sd["last_errors"]), sd["last_errors"]
    assert not any("budget exhausted" in e for e in sd["last_errors"]), sd["last_errors"]
    assert sd["budget_refused"] >= 6 and len(sd["budget_refusals"]) == 5
    assert all("budget exhausted" in e for e in sd["budget_refusals"])
    shown = stage_error_lines(sd)
    assert len(shown) == 2 and REAL in shown[0] and "calls refused at the cap)" in shown[1], shown


def test_status_lines_of_an_older_record_and_of_merged_processes():
    # a record written before s14 kept the refusals among its last errors: still one line, after the real ones
    old = {"last_errors": ["Missing: retries exhausted", "BudgetStop: " + _refusal(1), "BudgetStop: " + _refusal(2)]}
    assert stage_error_lines(old) == ["Missing: retries exhausted", "BudgetStop: budget exhausted: spent $0.090000 + "
                                      "unknown $0.000000 + reserved $0.001000 to $0.002000 + this call $0.008741 to "
                                      "$0.008742 > cap $0.100000 (the last 2 calls refused at the cap)"]
    # two processes' records: the refusals merged and counted across them
    recs = [{"pid": p, "t": 1.0, "finished": True, "stages": [
        {"stage": "caller", "done": 0, "last_errors": [REAL] if p == 1 else [], "budget_refusals": [_refusal(p)],
         "budget_refused": 3, "finished": True}]} for p in (1, 2)]
    [sd] = merge_records(recs, [False, False])["stages"]
    assert sd["last_errors"] == [REAL] and sd["budget_refused"] == 6 and len(sd["budget_refusals"]) == 2
