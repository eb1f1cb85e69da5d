"""Unreachable hosts (runtime): the HTTP layer tells a host that cannot be reached at all (connection refused on
a closed loopback port) from one that answers, counts such requests per host, and the stage runner's breaker
stops a stage after ``unreachable_after`` of them in a row: the tasks that tripped it are released untouched
(no attempt counted), the queue keeps them ready, and a re-run with the host back finishes them. Below the
threshold failures are nacked as before and dead-letter after ``max_attempts`` with their reasons.
(geoagent.runtime.http, geoagent.runtime.worker "Unreachable hosts")"""

from __future__ import annotations

import anyio
from aiohttp import web

from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HostPolicy, HttpClient, RetriesExhausted, host_key
from geoagent.runtime.stage import Stage, StageContext
from geoagent.runtime.worker import unreachable_cause
from geoagent.sandbox.server import free_port, serve

FAST = HostPolicy(rate=1000.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=10.0)


def _app(status: int = 200) -> web.Application:
    async def h(request: web.Request) -> web.Response:
        return web.json_response({"ok": True}, status=status)

    app = web.Application()
    app.router.add_get("/x", h)
    return app


async def _fail(http: HttpClient, url: str) -> RetriesExhausted:
    try:
        await http.request("GET", url)
    except RetriesExhausted as exc:
        return exc
    raise AssertionError("the request did not fail")


def test_http_marks_unreachable_and_counts_the_streak_until_the_host_answers():
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"

    async def main():
        async with HttpClient(default_policy=FAST) as http:
            e1 = await _fail(http, url)
            e2 = await _fail(http, url)
            assert (e1.unreachable, e1.host, e1.streak, e1.attempts) == (True, f"127.0.0.1:{port}", 1, 2)
            assert (e2.unreachable, e2.streak) == (True, 2)
            assert unreachable_cause(e2.last) == "connection refused"
            assert http.unreachable_streak(host_key(url)) == (2, e2.last)
            # the host comes up: one answer resets the streak
            async with serve(_app(), "127.0.0.1", port):
                assert (await http.request("GET", url)).status == 200
            assert http.unreachable_streak(host_key(url)) == (0, e2.last)
            assert (await _fail(http, url)).streak == 1
            # a host that answers, even with 503 every time, is reachable: not unreachable, no streak
            async with serve(_app(503)) as base:
                e503 = await _fail(http, base + "/x")
                assert e503.unreachable is False and e503.last.startswith("http 503")
                assert http.unreachable_streak(host_key(base)) == (0, "")

    anyio.run(main)


def test_unreachable_cause_words():
    assert unreachable_cause("connection: ClientConnectorDNSError: Cannot connect to host www.wikidata.org:443 "
                             "ssl:default [Name or service not known]") == "DNS lookup failed"
    assert unreachable_cause("timeout: ConnectionTimeoutError: Connection timeout to host x") == "connect timeout"
    assert unreachable_cause("connection: ClientConnectorError: [Connect call failed ('127.0.0.1', 9)]") == \
        "connection refused"
    assert unreachable_cause("connection: ClientOSError: something else") == "connection failed"


class Fetch(Stage):
    """One GET per task to ``url`` through the shared client; concurrency 1, so the order is fixed."""

    name = "fetch"
    input_edge = "a"
    output_edge = "b"
    concurrency = 1

    def __init__(self, url: str) -> None:
        self.url = url
        self.calls = 0

    async def handle(self, task, ctx):
        self.calls += 1
        resp = await ctx.get("http").request("GET", self.url)
        return [(task.key, {"status": resp.status})]


class Sink(Stage):
    name = "sink"
    input_edge = "b"
    output_edge = None
    concurrency = 1

    async def handle(self, task, ctx):
        return []


async def _pipeline(tmp_path, url, items, *, max_attempts, unreachable_after):
    stages = [Fetch(url), Sink()]
    queues = open_edge_queues(tmp_path / "q", "u", stages, backoff_base_s=0.0, backoff_max_s=0.0,
                              max_attempts=max_attempts)
    try:
        if items:
            await queues["a"].put_many(items)
        async with HttpClient(default_policy=FAST) as http:
            run = await run_pipeline("u", stages, queues, StageContext("u", {"http": http}), handle_signals=False,
                                     runner_options={"unreachable_after": unreachable_after})
        counts = {e: await q.counts() for e, q in queues.items()}
        dead = await queues["a"].dead_letters(100)
        return stages[0], run.runners[0], counts, dead
    finally:
        for q in queues.values():
            await q.close()


def test_breaker_stops_the_stage_releases_untouched_and_a_rerun_resumes(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}/x"
    items = [(f"k{i:02d}", {"i": i}) for i in range(12)]

    async def main():
        stage, runner, counts, dead = await _pipeline(tmp_path, url, items, max_attempts=5, unreachable_after=3)
        # requests 1 and 2 were nacked (an attempt each), the 3rd tripped the breaker and was released untouched;
        # nothing else was leased
        assert stage.calls == 3
        st = runner.stats
        assert (st.failed, st.dead, st.released, st.done) == (2, 0, 1, 0)
        assert st.blocked and set(st.unreachable) == {f"127.0.0.1:{port}"}
        assert st.unreachable[f"127.0.0.1:{port}"][0] == 3
        assert (counts["a"].ready, counts["a"].leased, counts["a"].done, counts["a"].dead) == (12, 0, 0, 0)
        assert dead == []
        line, = runner.unreachable_lines(counts["a"].ready)
        assert f"fetch: host 127.0.0.1:{port} unreachable (connection refused on 3 consecutive requests)" in line
        assert "12 a left queued" in line and "re-run the same command to resume" in line
        shown = runner.stats.as_dict()["unreachable"][f"127.0.0.1:{port}"]  # progress stream / status
        assert shown["requests"] == 3 and "Connect call failed" in shown["last"]
        # the network is back: the same queues finish, every task once, none dead
        async with serve(_app(), "127.0.0.1", port):
            stage2, runner2, counts2, dead2 = await _pipeline(tmp_path, url, [], max_attempts=5, unreachable_after=3)
        assert stage2.calls == 12 and runner2.stats.done == 12 and not runner2.stats.unreachable
        assert (counts2["a"].done, counts2["a"].ready, counts2["a"].dead, counts2["b"].done) == (12, 0, 0, 12)
        assert dead2 == []

    anyio.run(main)


def test_below_the_threshold_failures_still_dead_letter_after_max_attempts(tmp_path):
    url = f"http://127.0.0.1:{free_port()}/x"
    items = [(f"k{i}", {"i": i}) for i in range(3)]

    async def main():
        stage, runner, counts, dead = await _pipeline(tmp_path, url, items, max_attempts=2, unreachable_after=100)
        assert stage.calls == 3 * 2  # each task delivered max_attempts times
        assert (counts["a"].dead, counts["a"].ready, counts["a"].done) == (3, 0, 0)
        assert runner.stats.dead == 3 and not runner.stats.unreachable and not runner.stats.blocked
        assert sorted(d.key for d in dead) == ["k0", "k1", "k2"]
        assert all(d.attempts == 2 and "RetriesExhausted" in d.reason and "Connect call failed" in d.reason
                   for d in dead)

    anyio.run(main)


def test_eta_is_unknown_not_zero_while_a_stage_with_work_ahead_has_no_rate():
    # the user's case: every request answered (the model caller is done), 543 answers waiting for a geocoder
    # that has finished none (rate 0): the ETA is unknown, not "0 s"; once drained it is 0
    from geoagent.runtime.progress import pipeline_eta
    from geoagent.runtime.queue import QueueCounts

    stages = [("model_caller", "requests", "responses", 10.0), ("parser", "responses", "answers", 50.0),
              ("geocoder", "answers", "located", 0.0), ("scorer", "located", None, 0.0)]
    counts = {"requests": QueueCounts(done=543), "responses": QueueCounts(done=543),
              "answers": QueueCounts(ready=540, leased=3), "located": QueueCounts()}
    assert pipeline_eta(stages, counts) == (None, None)
    counts["answers"] = QueueCounts(done=543)
    counts["located"] = QueueCounts(done=543)
    assert pipeline_eta(stages, counts) == (0.0, None)


def test_status_names_a_stage_stopped_by_an_unreachable_host():
    from geoagent.status import stop_reason

    last = "connection: ClientConnectorDNSError: Cannot connect to host www.wikidata.org:443 [Name or service not known]"
    record = {"stages": [{"stage": "model_caller", "held": 0, "last_errors": []},
                         {"stage": "geocoder", "held": 0, "last_errors": [],
                          "unreachable": {"www.wikidata.org:443": {"requests": 5, "last": last}}}],
              "finished": True}
    assert stop_reason(record) == ("geocoder: host www.wikidata.org:443 unreachable (DNS lookup failed on 5 consecutive "
                                   "requests); its tasks left queued, re-run to resume")
    assert stop_reason({"stages": [{"stage": "geocoder", "unreachable": {}}]}) is None
