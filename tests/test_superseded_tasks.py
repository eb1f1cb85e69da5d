"""Tasks an earlier plan left queued that the current plan no longer holds are set aside, never sent.

Walkthrough (money, issue 2): a GeoVerify campaign interrupted with work queued, re-run with fewer trials
(``n_per_band`` 3 -> 2), leased and paid for every task the earlier plan had left ready, answers the scorer
then left out: 1,067 calls for a 678-request plan. The same holds for GeoHint ``images_per_site`` and generic
``n_requests``. Here a generic campaign on the local OpenAI-compatible fake: real engine, queues, ledger and HTTP.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio

from geoagent.cli import main as cli_main
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.runtime.queue import QueueCounts, open_queue
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

GOOD_KEY = "sk-" "sandbox-good-0123456789abcdefghij"


def _toml(tmp: Path, n: int, base: str) -> Path:
    p = tmp / "shrink.toml"
    p.write_text(f"""
[campaign]
name = "shrink"
kind = "generic"
seed = 11
[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"
[budget]
cap_usd = 5.0
[generic]
n_requests = {n}
[[models]]
name = "m"
provider = "openai"
model = "sim-gpt"
base_url = "{base}/v1"
api_key_env = "SHRINK_KEY"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 100
concurrency = 4
rate = {{ requests = 2000, period_s = 1.0 }}
timeout_s = 5.0
""", encoding="utf-8")
    return p


def _paid(app) -> Counter:
    return Counter(r["key"] for r in app["calls"] if r["status"] == 200)


def _requests_queue(tmp: Path):
    return open_queue(tmp / "queues", "shrink", "requests")


def test_a_smaller_plan_sets_aside_the_tasks_it_no_longer_holds(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHRINK_KEY", GOOD_KEY)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])
    dropped = [f"m|{i}" for i in range(6, 10)]

    async def main():
        async with serve(app) as base:
            path = _toml(tmp_path, 4, base)
            first = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            assert first.status == "complete" and len(_paid(app)) == 4
            # the plan grows to 10 and the run is cut off before any of the 6 new tasks is sent (a process that
            # plans but runs no model caller: the new tasks stay ready, as after an interrupt)
            _toml(tmp_path, 10, base)
            mid = await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                                     only_stages=["collector"])
            q = _requests_queue(tmp_path)
            try:
                assert await q.counts() == QueueCounts(ready=6, done=4)
            finally:
                await q.close()
            # the researcher lowers n_requests to 6: tasks m|6 .. m|9 are no longer planned
            _toml(tmp_path, 6, base)
            capsys.readouterr()
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err = capsys.readouterr().err
            paid_second = _paid(app)
            # the CLI, as the researcher would: list the dead tasks, then requeue them
            rc = cli_main(["dead", str(path)])
            listed = capsys.readouterr().out
            rc2 = cli_main(["dead", str(path), "--requeue"])
            requeued = capsys.readouterr().out
            q = _requests_queue(tmp_path)
            try:
                after = await q.counts()
            finally:
                await q.close()
            _toml(tmp_path, 10, base)  # the researcher reverts
            third = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            return mid, second, err, paid_second, rc or rc2, listed, requeued, after, third

    mid, second, err, paid, cli, listed, requeued, after_requeue, third = anyio.run(main)
    # no request for a dropped task reached the paid model (on main: 10 calls); the 2 kept new ones were sent once
    # (the fake logs each request's X-Request-Key, a hash of the request: 6 distinct, each paid once)
    assert len(paid) == 6 and sum(paid.values()) == 6, paid
    assert mid.counts["requests"].ready == 6  # a process without the model caller sets nothing aside
    # the run says how many were set aside and why, and ends complete (a superseded task is no failure)
    assert ("set aside 4 queued tasks of edge requests that the current plan no longer holds; they will not be "
            "sent (superseded: not in the current plan (config changed: generic.n_requests: 10 -> 6))") in err
    assert second.status == "complete" and second.exit_code == EXIT_COMPLETE
    assert second.counts["requests"] == QueueCounts(done=6, dead=4)
    assert second.missing == 0 and second.superseded == {"requests": 4}
    summary = second.summary()
    assert "missing:" not in summary
    assert "dead 4 (4 superseded)" in summary and "set aside: 4 tasks superseded, not in the current plan" in summary

    # `dead` lists them with the reason; `--requeue` brings them back; a re-run with the plan reverted sends them
    assert (cli, listed, requeued) == (0, listed, requeued)
    for key in dropped:
        assert key in listed
    assert "superseded: not in the current plan (config changed: generic.n_requests: 10 -> 6)" in listed
    assert "requeued 4 dead tasks" in requeued
    assert after_requeue == QueueCounts(ready=4, done=6)
    assert third.status == "complete" and third.counts["requests"] == QueueCounts(done=10)
    assert len(_paid(app)) == 10 and sum(_paid(app).values()) == 10


def test_a_plan_that_holds_set_aside_tasks_again_queues_them_again(tmp_path, monkeypatch, capsys):
    """Without ``--requeue``: reverting the config is enough, the set-aside tasks it plans again are sent."""
    monkeypatch.setenv("SHRINK_KEY", GOOD_KEY)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])

    async def main():
        async with serve(app) as base:
            path = _toml(tmp_path, 5, base)
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                               only_stages=["collector"])
            _toml(tmp_path, 2, base)
            shrunk = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            _toml(tmp_path, 4, base)
            capsys.readouterr()
            grown = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            return shrunk, grown, capsys.readouterr().err

    shrunk, grown, err = anyio.run(main)
    assert shrunk.status == "complete" and shrunk.counts["requests"] == QueueCounts(done=2, dead=3)
    assert "2 tasks set aside by an earlier run as no longer planned are in the current plan again" in err
    assert "set aside 1" not in err  # m|4 stays aside from the earlier run, nothing new to set aside
    assert grown.status == "complete" and grown.counts["requests"] == QueueCounts(done=4, dead=1)
    assert len(_paid(app)) == 4 and sum(_paid(app).values()) == 4
