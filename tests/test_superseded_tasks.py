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
from geoagent.status import campaign_status, format_status
from _made_up_keys import made_up_key

GOOD_KEY = made_up_key("sk-", 33, seed="sandbox-good-n20")


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
    # the collector-only run plans and ends (no wait for a model caller to start: fixstages43)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")
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
            # the researcher lowers n_requests to 6: tasks m|6 .. m|9 are no longer planned; the dry run says so
            # and changes nothing
            _toml(tmp_path, 6, base)
            dry = await run_campaign(load_config(path), simulate=True, live=False, handle_signals=False)
            dry_text = dry.summary()
            assert "total: 2 calls to make (4 already done by earlier runs)" in dry_text, dry_text
            assert "4 queued by an earlier run that this plan no longer holds will be set aside unsent" in dry_text
            q = _requests_queue(tmp_path)
            try:
                assert await q.counts() == QueueCounts(ready=6, done=4)
            finally:
                await q.close()
            capsys.readouterr()
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err = capsys.readouterr().err
            paid_second = _paid(app)
            status_text = format_status(campaign_status(load_config(path)))
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
            return mid, second, err, status_text, paid_second, rc or rc2, listed, requeued, after, third

    mid, second, err, status_text, paid, cli, listed, requeued, after_requeue, third = anyio.run(main)
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

    # `status` counts them apart and calls the campaign complete
    assert "(4 superseded)" in status_text and "campaign complete: every queue drained" in status_text
    assert "set aside: 4 tasks superseded" in status_text and "dead requests/" not in status_text
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
    # the collector-only run plans and ends (no wait for a model caller to start: fixstages43)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")
    app = llm_openai.make_app(api_keys=[GOOD_KEY])

    async def main():
        async with serve(app) as base:
            path = _toml(tmp_path, 5, base)
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                               only_stages=["collector"])
            _toml(tmp_path, 2, base)
            shrunk = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            _toml(tmp_path, 4, base)
            dry = (await run_campaign(load_config(path), simulate=True, live=False, handle_signals=False)).summary()
            # the two set aside that this plan holds again are counted as queued: they will be called
            assert "total: 2 calls to make (2 already done by earlier runs)" in dry, dry
            assert "2 queued by an earlier run are counted as queued" in dry and "set aside unsent" not in dry
            capsys.readouterr()
            grown = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            return shrunk, grown, capsys.readouterr().err

    shrunk, grown, err = anyio.run(main)
    assert shrunk.status == "complete" and shrunk.counts["requests"] == QueueCounts(done=2, dead=3)
    assert "2 tasks set aside by an earlier run as no longer planned are in the current plan again" in err
    assert "set aside 1" not in err  # m|4 stays aside from the earlier run, nothing new to set aside
    assert grown.status == "complete" and grown.counts["requests"] == QueueCounts(done=4, dead=1)
    assert len(_paid(app)) == 4 and sum(_paid(app).values()) == 4


def test_geoverify_fewer_trials_after_an_interrupted_run_sends_only_the_current_plan(isolated_roots, monkeypatch,
                                                                                    capsys):
    """The walkthrough's case: ``trials = "build"`` planned with ``n_per_band = 3`` and stopped before its calls,
    then run with ``n_per_band = 2``: only the current plan's requests are called (each once), the rest are set
    aside and the campaign ends complete (sandbox crawl -> GeoVerify, simulated model, through the CLI)."""
    import re

    from test_geoverify_plan_change import CRAWL, _gv

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    # the parser-only run plans and ends (no wait for a model caller to start: fixstages43)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")
    assert cli_main(["crawl", str(CRAWL), "--no-live"]) == 0
    state = isolated_roots / "state"
    crawl_dir, images = state / "crawl-sandbox", state / "images"
    p = _gv(isolated_roots, crawl_dir, images, 3, 100.0)
    capsys.readouterr()
    # the n_per_band = 3 plan is queued, none of it sent (a process without the model caller, as if stopped)
    assert cli_main(["run", str(p), "--no-live", "--stages", "parser"]) == 0
    q = open_queue(isolated_roots / "queues", "gv-design", "requests")
    try:
        queued_first = anyio.run(q.counts)
    finally:
        anyio.run(q.close)
    assert queued_first.ready > 0 and queued_first.done == 0
    p = _gv(isolated_roots, crawl_dir, images, 2, 100.0)
    capsys.readouterr()
    assert cli_main(["run", str(p), "--no-live"]) == 0
    got = capsys.readouterr()
    calls = int(re.search(r"; calls (\d+)", got.out).group(1))
    line = re.search(r"set aside (\d+) queued tasks of edge requests that the current plan no longer holds; they will "
                     r"not be sent \(superseded: not in the current plan \(config changed: geoverify.n_per_band: 3 -> 2",
                     got.err)
    assert line, got.err
    aside = int(line.group(1))
    assert got.out.startswith("campaign gv-design: complete")
    assert f"dead {aside} ({aside} superseded)" in got.out and "missing:" not in got.out
    # every request sent is one the current plan holds, once: the calls are the queue's done tasks, no more than the
    # plan's requests (on main the 242 set aside were called too)
    planned = int(re.search(r"planned (\d+) requests", got.out).group(1))
    q = open_queue(isolated_roots / "queues", "gv-design", "requests")
    try:
        after = anyio.run(q.counts)
    finally:
        anyio.run(q.close)
    assert after == QueueCounts(done=calls, dead=aside)
    assert 0 < calls <= planned < calls + aside
