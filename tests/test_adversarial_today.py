"""Adversarial tests of the runtime (review of 2026-11-30): stage runner pool, batched stages, send gate,
billing of retried malformed bodies, a task redelivered to a second process while in flight."""

from __future__ import annotations

import asyncio
import time

import anyio
import pytest
from _model_harness import CallerRig, cost_usd, photo_task, run, write_model_config
from _model_harness import billed as billed_by_server

from geoagent.runtime.daemon import open_edge_queues
from geoagent.runtime.stage import BudgetStop, Stage, StageContext
from geoagent.runtime.worker import StageRunner
from _made_up_keys import made_up_key

KEY_VAR, KEY_VALUE = "ADV_TODAY_KEY", made_up_key("sk-", 26, seed="adv-today-n16")


class _BudgetThenHang(Stage):
    """Task 'b0' hits the cap while the others are on the wire and never answer (a hung server)."""

    name = "caller"
    input_edge = "a"
    output_edge = None
    concurrency = 4

    def __init__(self) -> None:
        self.started: set[str] = set()

    async def handle(self, task, ctx):
        self.started.add(task.key)
        if task.key == "b0":
            await anyio.sleep(0.2)  # the others are in flight by now
            raise BudgetStop("cap reached")
        await anyio.sleep_forever()
        return []


def test_stop_after_budget_stop_still_bounded_by_grace(tmp_path):
    """A budget stop followed by SIGINT (request_stop) must still release hung in-flight tasks after grace_s.

    The runner only applies ``grace_s`` if the stop flag was set when the lease loop exited; after a
    budget stop it waits for in-flight tasks forever, ignoring a later request_stop.
    """

    async def main():
        queues = open_edge_queues(tmp_path / "q", "t", [_BudgetThenHang()], backoff_base_s=0.01, backoff_max_s=0.02)
        q = queues["a"]
        await q.put_many([(f"b{i}", {}) for i in range(4)])
        stage = _BudgetThenHang()
        runner = StageRunner(stage, q, None, StageContext("t"), grace_s=0.5)
        t0 = time.monotonic()
        elapsed = None
        async with anyio.create_task_group() as tg:
            tg.start_soon(runner.run)
            with anyio.move_on_after(1.0):
                await runner.finished.wait()  # budget stopped, but 3 calls still hang
            assert runner.budget_stopped or runner._budget.is_set()
            runner.request_stop()  # SIGINT: in-flight work gets grace_s=0.5 s, then is released
            with anyio.move_on_after(4.0):
                await runner.finished.wait()
            elapsed = time.monotonic() - t0
            finished = runner.finished.is_set()
            tg.cancel_scope.cancel()
        counts = await q.counts()
        await q.close()
        return finished, elapsed, counts

    finished, elapsed, counts = anyio.run(main)
    assert finished, f"runner still waiting for hung tasks {elapsed:.1f} s after budget stop + request_stop(grace 0.5 s)"
    assert counts.leased == 0 and counts.ready == 4


class _GarbageBatch(Stage):
    """A batched stage whose handle_batch returns, for one task, output the queue cannot store."""

    name = "sink"
    input_edge = "a"
    output_edge = "b"
    concurrency = 2
    batched = True
    lease_batch = 16

    async def handle(self, task, ctx):  # pragma: no cover - handle_batch is used
        raise AssertionError

    def __init__(self, garbage) -> None:
        self.garbage = garbage

    async def handle_batch(self, tasks, ctx):
        return [self.garbage(t) if t.key == "k3" else [(t.key, {"v": 1})] for t in tasks]


async def _run_stage_to_end(stage, queues):
    """Run ``stage`` over its edge queues until its runner returns (failing after 10 s), then close the queues.

    Returns ``(error, input counts, output counts)``; ``error`` is what the runner raised, or None.
    """
    inq, outq = queues[stage.input_edge], queues[stage.output_edge]
    runner = StageRunner(stage, inq, outq, StageContext("t"), grace_s=0.5)
    error = None
    try:
        with anyio.fail_after(10):
            await runner.run()
    except BaseException as exc:  # noqa: BLE001 - what we test
        error = exc
    counts_in, counts_out = await inq.counts(), await outq.counts()
    for q in queues.values():
        await q.close()
    return error, counts_in, counts_out


_GARBAGE = {
    "unserialisable payload": lambda t: [(t.key, {"tags": {"not", "json"}})],  # a set
    "result not a list": lambda t: 42,
    "message not a (key, payload) pair": lambda t: ["k3-only-a-key"],
}


@pytest.mark.parametrize("kind", sorted(_GARBAGE))
def test_garbage_output_of_one_task_does_not_crash_runner_or_strand_the_others(tmp_path, kind):
    """One task's unstorable output must fail that task (nack/dead-letter), not the commit of its group.

    Today ``_commit`` swaps ``_pending`` out, ``put_many`` raises TypeError, the exception kills the
    runner ("never raises for task-level errors"), and every innocent task of the group stays leased
    (not acked, not released) until its visibility timeout; on every restart the poison task does it again.
    """

    async def main():
        stage = _GarbageBatch(_GARBAGE[kind])
        queues = open_edge_queues(tmp_path / "q", "t", [stage], backoff_base_s=0.01, backoff_max_s=0.02, max_attempts=2)
        await queues["a"].put_many([(f"k{i}", {}) for i in range(10)])
        return await _run_stage_to_end(stage, queues)  # stage edges: "a" -> "b"

    error, ca, cb = anyio.run(main)
    assert error is None, f"runner raised for one task's bad output: {error!r} (input counts after: {ca})"
    assert ca.leased == 0, f"{ca.leased} innocent tasks left leased (stranded until the visibility timeout)"
    assert ca.done == 9 and cb.total == 9 and ca.dead == 1


@pytest.mark.parametrize(
    "city_json",
    [
        "Lyon \\ud83d\\udccd",  # a VALID escaped emoji (surrogate pair, as ensure_ascii JSON writers emit it)
        "Lyon \\ud800",  # a lone surrogate escape
    ],
)
def test_model_answer_with_escaped_surrogates_does_not_kill_the_parser_stage(tmp_path, city_json):
    """Untrusted model text reaches the same crash through a real stage: GeoHint's parser ("never raises on
    bad text") decodes the answer's JSON escape ``\\ud800`` into a lone surrogate, its output message
    cannot be encoded by the queue, and the runner's commit raises: the whole campaign process dies, the
    other answers of the commit group stay leased, and every restart re-parses the same answer and dies
    again (the campaign can never finish). Expected: that one task fails (dead letter / nack), the rest
    of the answers go through.
    """
    from geoagent.geohint.stages import GeoHintParserStage

    good = '{"city": "Lyon", "area": "Presqu\'ile", "building": "Opera", "evidence": "sign"}'
    bad = '{"city": "%s", "area": "x", "building": "y", "evidence": "z"}' % city_json  # as the model wrote it

    async def main():
        stage = GeoHintParserStage()
        queues = open_edge_queues(tmp_path / "q", "t", [stage], backoff_base_s=0.01, backoff_max_s=0.02, max_attempts=2)
        msgs = [(f"r{i}", {"model": "m", "request_key": f"rk{i}", "image_id": f"img{i}",
                           "meta": {"task": "geohint", "site": f"s{i}", "condition": "image_only"},
                           "text": bad if i == 3 else good, "input_tokens": 10, "output_tokens": 20,
                           "finish_reason": "stop"}) for i in range(12)]
        await queues[stage.input_edge].put_many(msgs)
        return await _run_stage_to_end(stage, queues)

    error, ci, co = anyio.run(main)
    assert error is None, f"parser stage runner died on one model answer: {error!r} (input counts after: {ci})"
    # the lenient reader now yields valid text (surrogates paired or replaced), so every answer goes through;
    # were one still unencodable, only that task would be dead-lettered
    assert ci.leased == 0 and ci.done + ci.dead == 12 and co.total == ci.done


def test_ledger_never_below_server_billing_when_a_malformed_2xx_is_retried(tmp_path, monkeypatch):
    """A 2xx with a malformed body is billed by the provider (the fake logs it as a billed call, status 200,
    with its usage) and the HTTP layer retries it inside the same request. When the retry succeeds, the
    model caller settles the reservation with the LAST attempt's usage only: the billed malformed attempt
    is neither settled nor counted as unknown-outcome spend (``HttpResponse.possibly_billed`` is dropped
    by the provider and never reaches the caller). billing.py's rule "the ledger can exceed the
    provider's bill but never fall short of it" fails, and so does issue 2's "ledger equals the usage the
    server returned" under the 20 % faults of the Faults acceptance (malformed JSON bodies included).
    """
    from geoagent.runtime.http import HttpClient
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.faults import FaultConfig
    from geoagent.sandbox.server import serve
    from geoagent.workers.model_caller import CallFailed

    monkeypatch.setenv(KEY_VAR, KEY_VALUE)
    price_in, price_out = 2.0, 10.0

    async def go():
        app = llm_openai.make_app(api_keys=[KEY_VALUE], faults=FaultConfig(rate=0.3, kinds=("malformed",), seed=7))
        async with serve(app) as base, HttpClient() as http:
            cfg = write_model_config(tmp_path / "m.toml", base, name="malformed", key_var=KEY_VAR, price_in=price_in,
                                     price_out=price_out, concurrency=4, max_attempts=8)
            rig = await CallerRig(tmp_path, cfg, http).start()
            outcomes, retried = [], []
            for i in range(20):  # one at a time: the server's fault draws are deterministic (seeded, in order)
                for attempt in range(8):  # as the runner does: a retryable failure is nacked and redelivered
                    try:
                        await rig.handle(photo_task(i, attempts=attempt))
                        outcomes.append("ok")
                        break
                    except CallFailed:
                        retried.append(i)
                else:
                    outcomes.append("missing")
            await asyncio.sleep(0.2)  # fire-and-forget ledger jobs, if any
            summary = rig.state.ledger.summary()
            rig.state.close()
            return outcomes, summary, billed_by_server(app["calls"]), retried

    outcomes, summary, billed, retried = run(go(), 60)
    assert retried  # some attempts did get a malformed (billed) body
    server_usd = sum(cost_usd(c["input_tokens"], c["output_tokens"], price_in, price_out) for c in billed)
    ledger_usd = summary.spent_usd + summary.unknown_usd
    assert outcomes == ["ok"] * 20 and len(billed) > 20  # every request answered; some after a billed malformed 2xx
    assert ledger_usd + 1e-12 >= server_usd, (
        f"ledger ${ledger_usd:.6f} (settled {summary.spent_usd:.6f} + unknown {summary.unknown_usd:.6f}) is below "
        f"the ${server_usd:.6f} the server billed for {len(billed)} calls ({len(outcomes)} requests)"
    )


def test_task_redelivered_to_a_second_process_while_in_flight_is_not_paid_twice(tmp_path, monkeypatch):
    """Exactly-once spend across the processes of one campaign (``--stages model_caller`` twice).

    A lease has no renewal, so a task that waits longer than ``visibility_timeout_s`` (behind the host's
    rate limit, now split among processes by hostshare, or behind a slow model) is leased again by the
    other process while the first still holds it. The send gate only looks for a STORED response, and
    the per-key lock is per process, so both processes send the same request: the server bills the same
    request key twice, with no crash at all. Seen for real: 3 processes (2 x ``--stages model_caller``),
    model host 40 req/s, concurrency 64, ``visibility_timeout_s = 2``: 241 billed calls for 240 keys.
    Here the two processes are two model-caller instances with their own HTTP client and campaign-DB
    connection (own ledger owner), handling the same task at once, as after such a redelivery.
    """
    from geoagent.runtime.http import HttpClient
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.llm_common import add_latency
    from geoagent.sandbox.server import serve

    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def go():
        app = add_latency(llm_openai.make_app(api_keys=[KEY_VALUE]), 0.5)  # a model that takes 0.5 s to answer
        async with serve(app) as base:
            cfg = write_model_config(tmp_path / "dup.toml", base, name="dup", key_var=KEY_VAR, concurrency=4)

            async def process(delay_s: float):
                await asyncio.sleep(delay_s)
                async with HttpClient() as http:
                    rig = CallerRig(tmp_path, cfg, http)  # its own campaign-DB connection (own ledger owner)
                    try:
                        await rig.start()
                        # the same task: lease 1 (expired) in process A, lease 2 in process B
                        return await rig.handle(photo_task(1, lease_id=f"L{delay_s}"))
                    finally:
                        rig.state.close()

            a, b = await asyncio.gather(process(0.0), process(0.2))
            return a, b, billed_by_server(app["calls"])

    a, b, billed = run(go(), 30)
    assert a[0][1]["text"] == b[0][1]["text"]
    assert len(billed) == 1, f"the same request key was sent and billed {len(billed)} times"
