"""On Redis, a ``--stages`` process sees the stages the campaign's processes on other machines run (fixstages44,
review44b #3).

Before: a downstream process (``--stages scorer,aggregator``) counted the ready tasks of a foreign upstream stage as
work on its way only when this machine's manifest.json named a live process running that stage
(:func:`geoagent.runtime.manifest.stages_run_elsewhere`), which a process on another machine (a state folder of its
own) never is. So once the upstream stage counted as taken up, a response the other machine's model caller had just
queued, before its parser leased it, looked like work nobody would do: the downstream process ended, and so did the
upstream one after it, both "campaign not complete", exit 0, no report (about 4 runs in 10 with two real processes).

Now each run's owner record on the server names its stages and those that ended
(:meth:`geoagent.runtime.redis_state.RedisLedger.note_stages`), and the downstream process's runners read the live
owners' stages (:func:`geoagent.engine.stages_elsewhere_now`): ready tasks of such a stage keep it waiting while that
process lives and runs the stage; its stage ending, its exit, or its heartbeat expiring (a crash) ends the wait.

Real redis-server (module fixture), real ledgers of two "machines" (host names of their own), real Redis queues and a
real stage runner; the upstream machine's work is this test leasing, acking and putting tasks as its processes would.
"""

from __future__ import annotations

import functools
import logging
import time
import uuid

import anyio
import pytest

from geoagent.engine import stages_elsewhere_now
from geoagent.runtime.redis_state import open_redis_campaign_state
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import StageRunner
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

STAGES = ["model_caller", "parser", "scorer"]


class Scorer(Stage):
    name = "scorer"
    input_edge = "answers"
    output_edge = None

    async def handle(self, task, ctx):
        return []


def _machine(url: str, campaign: str, tmp, host: str, **options):
    """A process's campaign state on "machine" ``host`` (its own state folder; heartbeat 1 s unless given)."""
    options.setdefault("heartbeat_ttl_s", 1.0)
    return open_redis_campaign_state(url, campaign, tmp / host, host=host, **options)


def test_owner_records_name_the_stages_of_the_live_processes(redis_url, tmp_path):  # noqa: F811
    """:meth:`RedisLedger.stages_elsewhere`: a ``--stages`` run's stages less those that ended; a whole run's (no
    stages noted): every stage; a reader (status, export: ``recover=False``) and a process gone (its record dropped,
    or its heartbeat expired: a crash) count for none."""
    campaign = "t" + uuid.uuid4().hex[:10]
    up = _machine(redis_url, campaign, tmp_path, "machine-a")
    down = _machine(redis_url, campaign, tmp_path, "machine-b")
    reader = _machine(redis_url, campaign, tmp_path, "machine-c", recover=False)
    try:
        assert down.ledger.stages_elsewhere(STAGES) == set(STAGES)  # up: no stages noted, a whole-campaign run
        up.ledger.note_stages(["model_caller", "parser"])
        assert down.ledger.stages_elsewhere(STAGES) == {"model_caller", "parser"}
        assert up.ledger.stages_elsewhere(STAGES) == set(STAGES)  # down noted none: a whole run, for up
        down.ledger.note_stages(["scorer"])
        assert up.ledger.stages_elsewhere(STAGES) == {"scorer"}  # the reader counts for none
        up.ledger.note_stages(["model_caller", "parser"], {"model_caller"})
        assert down.ledger.stages_elsewhere(STAGES) == {"parser"}
        # the heartbeat rewrites the record it was last given (not the one at its start)
        time.sleep(0.8)
        assert down.ledger.stages_elsewhere(STAGES) == {"parser"}
        up.db.stop_heartbeats()  # a crash: the record stays, the heartbeat key expires after its 1 s
        deadline = time.monotonic() + 5
        while down.ledger.stages_elsewhere(STAGES) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert down.ledger.stages_elsewhere(STAGES) == set()
    finally:
        for st in (up, down, reader):
            st.close()


@pytest.mark.parametrize("end", ["stage ended", "process ended", "crashed"])
def test_a_response_queued_on_another_machine_keeps_the_downstream_runner_waiting(redis_url, tmp_path, caplog,
                                                                                  end):  # noqa: F811
    """The race of review44b #3, made to hold still: the parser counts as taken up (its input's done count grew since
    the runner started), then one response sits ready on its input, queued by the other machine's model caller and
    not leased yet by its parser. The runner reading this machine's manifest only (before) ends at once; the one
    reading the server's owner records too waits while the upstream machine lives and runs parser, and ends once
    ``end``: its parser ended (its owner record says so, as the engine's stage-ended hook writes it), its process
    ended, or it crashed."""
    campaign = "t" + uuid.uuid4().hex[:10]
    up = _machine(redis_url, campaign, tmp_path, "machine-a")
    down = _machine(redis_url, campaign, tmp_path, "machine-b")
    up.ledger.note_stages(["model_caller", "parser"])
    closed = []

    async def main():
        from geoagent.runtime.redis_queue import open_redis_queue

        queues = {e: open_redis_queue(redis_url, campaign, e) for e in ("requests", "responses", "answers")}
        try:
            await queues["responses"].put_many([("r0", {})])

            def runner(elsewhere) -> StageRunner:
                return StageRunner(Scorer(), queues["answers"], None, StageContext(campaign), burst=True,
                                   foreign_upstream=[("model_caller", queues["requests"]),
                                                     ("parser", queues["responses"])],
                                   stages_elsewhere=elsewhere, stages_started=lambda: (), start_wait_s=60.0,
                                   poll_s=0.05)

            here_only = runner(functools.partial(stages_elsewhere_now, tmp_path / "machine-b", STAGES, None))
            both = runner(functools.partial(stages_elsewhere_now, tmp_path / "machine-b", STAGES, down.ledger))
            ended: dict[str, float] = {}

            async def run(name: str, r: StageRunner) -> None:
                await r.run()
                ended[name] = time.monotonic()

            async with anyio.create_task_group() as tg:
                tg.start_soon(run, "here only", here_only)
                tg.start_soon(run, "both", both)
                await anyio.sleep(0.5)
                # the other machine's parser at work: a response leased, its answer put; meanwhile its model caller
                # queues the next response (not leased yet); the first one acked (done grows: parser taken up)
                got = await queues["responses"].lease(1, 30.0)
                await queues["answers"].put_many([(t.key, {}) for t in got])
                await queues["responses"].put_many([("r1", {})])
                await queues["responses"].ack(got)
                t_put = time.monotonic()
                with anyio.fail_after(10):
                    while "here only" not in ended:
                        await anyio.sleep(0.05)
                await anyio.sleep(2.5)  # the server's records read at least twice (cached 1 s)
                assert "both" not in ended, ended  # the response is on its way: it waits
                t_end = time.monotonic()
                if end == "stage ended":
                    # as the engine's stage-ended hook records it (engine.record_stage_ended), model caller first
                    up.ledger.note_stages(["model_caller", "parser"], {"model_caller", "parser"})
                elif end == "process ended":
                    up.close()
                    closed.append(up)
                else:
                    up.db.stop_heartbeats()  # the record stays; its 1 s heartbeat expires
                with anyio.fail_after(15):
                    while "both" not in ended:
                        await anyio.sleep(0.05)
            assert ended["here only"] - t_put < 3.0, ended  # before: it ended with the response on its way
            assert ended["both"] >= t_end, ended
            assert (await queues["responses"].counts()).ready == 1  # left for a process of the parser
        finally:
            for q in queues.values():
                await q.close()

    with caplog.at_level(logging.WARNING, logger="geoagent.runtime.worker"):
        try:
            anyio.run(main)
        finally:
            for st in (up, down):
                if st not in closed:
                    st.close()

