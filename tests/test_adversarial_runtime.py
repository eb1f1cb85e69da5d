"""Adversarial runtime use: lost state, two processes of one campaign, tiny caps, requeue, status formatting.

Campaigns run the real engine and CLI against the local OpenAI-compatible fake (which logs every call with
its request key and token usage) or the simulated provider.
"""

from __future__ import annotations

import collections
import contextlib
import os
import shutil
import sys
from pathlib import Path

import anyio
import orjson
import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, EXIT_COMPLETE, run_campaign
from geoagent.runtime.daemon import REPEAT_SIGNAL_S
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]
KEY = made_up_key("sk-", 36, seed="adversarial-runtime-n16")


def _config(tmp: Path, *, base_url: str | None, n: int, cap: float, name: str = "adv-rt") -> Path:
    return generic_campaign(tmp, name=name, n=n, cap_usd=cap,
                            queue={"max_attempts": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05},
                            models=model_table(base_url=base_url, key_var="ADV_RT_KEY", concurrency=8, rate_requests=500))


def _results(tmp: Path, name: str = "adv-rt") -> int:
    import sqlite3

    db = tmp / "state" / name / "campaign.sqlite"
    with sqlite3.connect(db) as conn:
        return conn.execute("SELECT COUNT(*) FROM results").fetchone()[0]


# ---------------------------------------------------------------------------------------------------
# state/ lost, queues/ kept
# ---------------------------------------------------------------------------------------------------


def test_cli_refuses_to_rerun_when_state_was_deleted_but_queues_remain(tmp_path, capsys):
    cfg = _config(tmp_path, base_url=None, n=12, cap=1.0)
    assert main(["run", str(cfg), "--no-live"]) == EXIT_COMPLETE
    assert _results(tmp_path) == 12
    capsys.readouterr()
    shutil.rmtree(tmp_path / "state")
    # before the fix: "complete", exit 0, spend $0 and 0 results stored (the queues said everything was done)
    code = main(["run", str(cfg), "--no-live"])
    err = capsys.readouterr().err
    assert code == 2
    assert "state" in err and "queues" in err and "adv-rt" in err
    assert not (tmp_path / "state" / "adv-rt" / "campaign.sqlite").exists()  # nothing half-created


def test_rerun_after_deleting_queues_but_keeping_state_makes_no_new_calls(tmp_path, monkeypatch):
    monkeypatch.setenv("ADV_RT_KEY", KEY)
    log = tmp_path / "calls.jsonl"
    app = llm_openai.make_app(api_keys=[KEY], token_log=str(log))

    async def go() -> None:
        async with serve(app) as base:
            cfg = load_config(_config(tmp_path, base_url=base, n=20, cap=1.0))
            assert (await run_campaign(cfg, live=False, handle_signals=False)).exit_code == EXIT_COMPLETE
            shutil.rmtree(tmp_path / "queues")
            out = await run_campaign(cfg, live=False, handle_signals=False)
            assert out.exit_code == EXIT_COMPLETE

    anyio.run(go)
    calls = [orjson.loads(line) for line in log.read_text().splitlines()]
    assert len(calls) == 20 and len({c["key"] for c in calls}) == 20
    assert _results(tmp_path) == 20


def test_engine_refuses_to_rerun_when_state_was_deleted_but_queues_remain(tmp_path):
    cfg = load_config(_config(tmp_path, base_url=None, n=12, cap=1.0))
    assert anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False)).exit_code == EXIT_COMPLETE
    shutil.rmtree(tmp_path / "state")
    try:
        out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False))
    except Exception as exc:  # noqa: BLE001 - refusing with a message naming state/ is the fix we want
        assert "state" in str(exc)
        return
    assert out.exit_code != EXIT_COMPLETE, "a campaign whose stored results vanished must not say complete"


# ---------------------------------------------------------------------------------------------------
# two processes of one campaign at once
# ---------------------------------------------------------------------------------------------------


def test_two_processes_of_one_campaign_never_double_spend(tmp_path):
    log = tmp_path / "calls.jsonl"
    app = llm_openai.make_app(api_keys=[KEY], token_log=str(log))
    n = 300
    env = {"ADV_RT_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}

    async def go() -> list[int]:
        async with serve(app) as base:
            cfg = _config(tmp_path, base_url=base, n=n, cap=5.0)
            codes: list[int] = []

            async def one() -> None:
                p = await anyio.run_process([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live"],
                                            env=env, check=False, cwd=tmp_path)
                codes.append(p.returncode)
                if p.returncode:
                    print(p.stdout.decode(errors="replace")[-3000:], p.stderr.decode(errors="replace")[-5000:])

            async with anyio.create_task_group() as tg:
                tg.start_soon(one)
                tg.start_soon(one)
            return codes

    codes = anyio.run(go)
    assert codes == [0, 0]
    calls = [orjson.loads(line) for line in log.read_text().splitlines()]
    by_key = collections.Counter(c["key"] for c in calls if c["status"] == 200)
    assert len(by_key) == n and max(by_key.values()) == 1  # every request exactly once, across both processes
    assert _results(tmp_path) == n
    cfg = load_config(tmp_path / "adv-rt.toml")
    spend = campaign_status(cfg)["spend"]
    expected = sum(c["input_tokens"] * 0.15 + c["output_tokens"] * 0.60 for c in calls if c["status"] == 200) / 1e6
    assert spend["spent_usd"] == pytest.approx(expected, rel=1e-9, abs=1e-12)
    assert spend["calls"] == n and spend["reserved_usd"] == 0


# ---------------------------------------------------------------------------------------------------
# caps
# ---------------------------------------------------------------------------------------------------


def test_cap_zero_with_a_priced_model_is_a_config_error(tmp_path):
    from geoagent.config import ConfigError

    with pytest.raises(ConfigError, match=r"budget\.cap_usd"):
        load_config(_config(tmp_path, base_url="http://127.0.0.1:9", n=5, cap=0.0))


@pytest.mark.parametrize("cap", [0.00001])
def test_cap_below_one_call_makes_no_call_and_exits_budget(tmp_path, monkeypatch, cap):
    monkeypatch.setenv("ADV_RT_KEY", KEY)
    log = tmp_path / "calls.jsonl"
    app = llm_openai.make_app(api_keys=[KEY], token_log=str(log))
    # worst case of one call: (input estimate x 1.25) x 0.15 + 100 x 0.60 USD per 1M tokens > 6e-5 > 1e-5

    async def go():
        async with serve(app) as base:
            cfg = load_config(_config(tmp_path, base_url=base, n=5, cap=cap))
            return await run_campaign(cfg, live=False, handle_signals=False)

    out = anyio.run(go)
    assert out.exit_code == EXIT_BUDGET
    assert not log.exists() or log.read_text().strip() == ""
    assert out.remaining() == 5


def test_status_shows_a_small_cap_without_rounding_it_to_zero(tmp_path):
    cfg = load_config(_config(tmp_path, base_url=None, n=3, cap=0.0005))
    assert anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False)).exit_code == EXIT_COMPLETE
    text = format_status(campaign_status(cfg))
    # before the fix "cap $0.00" next to a non-zero spend read as an overspend
    assert "cap $0.0005" in text


def test_run_summary_shows_a_small_cap_without_rounding_it_to_zero(tmp_path):
    cfg = load_config(_config(tmp_path, base_url=None, n=3, cap=0.0005))
    out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False))
    assert "cap $0.0005" in out.summary()


def test_dead_requeue_with_an_unknown_edge_is_an_error_not_zero(tmp_path, capsys):
    cfg = _config(tmp_path, base_url=None, n=3, cap=1.0)
    assert main(["run", str(cfg), "--no-live"]) == EXIT_COMPLETE
    capsys.readouterr()
    assert main(["dead", str(cfg), "--requeue", "--edge", "reqests"]) == 2
    err = capsys.readouterr().err
    assert "reqests" in err and "requests" in err


# ---------------------------------------------------------------------------------------------------
# forced stops: a second SIGINT, SIGKILL
# ---------------------------------------------------------------------------------------------------


async def _start_and_kill(tmp: Path, base: str, seen: list, *, sig: int, n: int, visibility_s: float) -> Path:
    """Run the campaign in a child process (model host limited to 1 request per 60 s), wait until the
    server has seen its first request, then send ``sig``; return the config path."""
    import signal as _signal

    cfgp = _config(tmp, base_url=base, n=n, cap=5.0)
    text = cfgp.read_text().replace("requests = 500, period_s = 1.0", "requests = 1, period_s = 60.0")
    cfgp.write_text(text.replace("backoff_max_s = 0.05", f"backoff_max_s = 0.05\nvisibility_timeout_s = {visibility_s}"))
    env = {"ADV_RT_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}
    proc = await anyio.open_process([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], env=env)
    with anyio.fail_after(60):
        while not seen:
            await anyio.sleep(0.05)
    await anyio.sleep(1.0)  # the other tasks are now reserved and waiting for the host's rate limit
    proc.send_signal(sig)
    if sig == _signal.SIGINT:
        await anyio.sleep(REPEAT_SIGNAL_S + 0.2)  # a deliberate second press (a quicker repeat is ignored)
        proc.send_signal(sig)
    with anyio.fail_after(60):
        await proc.wait()
    await proc.aclose()
    return cfgp


def _counting_app(seen: list) -> object:
    from aiohttp import web

    app = llm_openai.make_app(api_keys=[KEY])

    @web.middleware
    async def count(request, handler):
        if request.path.endswith("/chat/completions"):
            seen.append(request.headers.get("X-Request-Key"))
        return await handler(request)

    app.middlewares.insert(0, count)
    return app


def test_crash_counts_only_requests_that_were_sent_as_unknown_spend(tmp_path):
    import signal as _signal

    from geoagent.runtime.store import open_campaign_state

    seen: list = []

    async def go() -> Path:
        async with serve(_counting_app(seen)) as base:
            return await _start_and_kill(tmp_path, base, seen, sig=_signal.SIGKILL, n=20, visibility_s=120.0)

    cfgp = anyio.run(go)
    cfg = load_config(cfgp)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=True) as state:  # the dead owner's reservations
        s = state.ledger.summary().to_json()
    assert len(seen) >= 1
    # each request that reached the server may have been billed; requests never sent cannot have been
    assert s["unknown_calls"] <= len(seen), (s["unknown_calls"], len(seen))


def test_rerun_after_a_crash_does_not_wait_out_the_visibility_timeout(tmp_path, monkeypatch):
    import signal as _signal

    monkeypatch.setenv("ADV_RT_KEY", KEY)

    seen: list = []

    async def go() -> int:
        async with serve(_counting_app(seen)) as base:
            cfgp = await _start_and_kill(tmp_path, base, seen, sig=_signal.SIGKILL, n=6, visibility_s=600.0)
            cfgp.write_text(cfgp.read_text().replace("requests = 1, period_s = 60.0", "requests = 500, period_s = 1.0"))
            cfg = load_config(cfgp)
            with anyio.move_on_after(8):
                return (await run_campaign(cfg, live=False, handle_signals=False)).exit_code
            return -1  # still waiting for the dead process's leases

    assert anyio.run(go) == EXIT_COMPLETE


def test_second_sigint_exits_130_without_a_traceback(tmp_path):
    # run, Ctrl-C twice, re-run, Ctrl-C twice, ... (what a hurried user does): the second signal sometimes
    # lands after the pipeline stopped, while queues and the store close; it must still be a clean exit 130
    import signal as _signal

    seen: list = []

    async def go() -> list[tuple[int, bytes]]:
        async with serve(_counting_app(seen)) as base:
            cfgp = _config(tmp_path, base_url=base, n=200, cap=5.0)
            cfgp.write_text(cfgp.read_text().replace("requests = 500, period_s = 1.0", "requests = 40, period_s = 1.0"))
            env = {"ADV_RT_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}
            results = []
            for first_after_s in (2.0, 3.0, 4.0):
                proc = await anyio.open_process([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"],
                                                env=env)
                await anyio.sleep(first_after_s)
                with contextlib.suppress(ProcessLookupError):  # a re-run may already have finished the rest
                    proc.send_signal(_signal.SIGINT)
                await anyio.sleep(REPEAT_SIGNAL_S + 0.1)  # a second press (a quicker repeat is ignored)
                with contextlib.suppress(ProcessLookupError):  # it may have finished stopping already
                    proc.send_signal(_signal.SIGINT)
                err = b""
                with anyio.fail_after(60):
                    try:
                        while True:
                            err += await proc.stderr.receive()
                    except (anyio.EndOfStream, anyio.ClosedResourceError):
                        pass
                    await proc.wait()
                results.append((proc.returncode, err))
                await proc.aclose()
            return results

    for code, err in anyio.run(go):
        # 0: the re-run finished before the first signal; -SIGINT: the second signal came after the command had
        # finished (Python's own exit path)
        assert code in (0, 130, -_signal.SIGINT), err.decode(errors="replace")[-2000:]
        assert b"Traceback" not in err, err.decode(errors="replace")[-2000:]
