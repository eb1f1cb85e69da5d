"""A second signal ends a run at once (``os._exit(130)``): ``manifest.json`` records that run as ``forced exit``
with its stop time, instead of ``running`` until the next run found the process gone and called it ``killed``
(session 29's note: the manifest, the campaign's audit trail, misnamed how such a run ended).

The campaign runs the real CLI in a child process against the local OpenAI-compatible fake, every request of
which stalls, so the first Ctrl-C's graceful stop is still waiting for the calls in flight when the second comes.
"""

from __future__ import annotations

from _made_up_keys import made_up_key

import contextlib
import os
import signal
import sys
from pathlib import Path

import anyio
import orjson

from _model_harness import generic_campaign, model_table
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.runtime.daemon import REPEAT_SIGNAL_S
from geoagent.runtime.manifest import Manifest, read_manifest
from geoagent.sandbox import llm_openai
from geoagent.sandbox.faults import FaultConfig, find_fault_state
from geoagent.sandbox.server import serve
from geoagent.status import RESUME_HINT, campaign_status, format_status

REPO = Path(__file__).resolve().parents[1]
KEY = made_up_key("sk-forced-exit-", 24, seed="s30")


def _config(tmp: Path, base_url: str) -> Path:
    return generic_campaign(tmp, name="forced", n=30, cap_usd=5.0,
                            queue={"max_attempts": 4, "backoff_base_s": 0.01, "backoff_max_s": 0.05},
                            models=model_table(base_url=base_url, key_var="FORCED_KEY", concurrency=4,
                                               rate_requests=500))


def test_a_second_signal_is_recorded_as_forced_exit_and_the_rerun_keeps_that_record(tmp_path, monkeypatch):
    stall = FaultConfig(rate=1.0, kinds=("timeout",), timeout_delay_s=60.0)
    app = llm_openai.make_app(faults=stall, api_keys=[KEY])

    async def go() -> tuple[int, bytes, dict, str, dict]:
        async with serve(app) as base:
            cfgp = _config(tmp_path, base)
            env = {"FORCED_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_STOP_GRACE_S": "60",
                   "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}
            proc = await anyio.open_process([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"],
                                            env=env)
            with anyio.fail_after(60):  # the first calls are out (and stall) before the first Ctrl-C
                while find_fault_state(app).total == 0:
                    await anyio.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            await anyio.sleep(REPEAT_SIGNAL_S + 0.5)  # a second press, while the stop waits for the stalled calls
            proc.send_signal(signal.SIGINT)
            err = b""
            with anyio.fail_after(60):
                with contextlib.suppress(anyio.EndOfStream, anyio.ClosedResourceError):
                    while True:
                        err += await proc.stderr.receive()
                await proc.wait()
            code = proc.returncode
            await proc.aclose()
            cfg = load_config(cfgp)
            man = read_manifest(cfg.state_dir())
            status_text = format_status(campaign_status(cfg))
            find_fault_state(app).update(rate=0.0)  # the server answers again: the re-run completes the campaign
            monkeypatch.setenv("FORCED_KEY", KEY)
            again = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            assert again.exit_code == EXIT_COMPLETE, again.summary()
            return code, err, man, status_text, read_manifest(cfg.state_dir())

    code, err, man, status_text, after = anyio.run(go)
    assert code == 130, err.decode(errors="replace")[-2000:]
    assert b"second signal: exiting at once" in err and b"Traceback" not in err
    (run,) = man["runs"]
    assert run["status"] == "forced exit" and run["stopped_at"] and run["duration_s"] > 0, run
    assert RESUME_HINT in status_text, status_text
    # walk44 B5: status names the forced exit, not only "stopped without its final record" (which reads like a crash)
    assert "not running (the last run was ended at once by a second Ctrl-C or signal (forced exit, as manifest.json " \
           "recorded), before its final record; " in status_text, status_text
    first, second = after["runs"]
    assert first["status"] == "forced exit" and "killed_found_by" not in first  # not taken for a SIGKILL
    assert second["status"] == "complete"


def test_mark_forced_exit_never_waits_for_the_lock_nor_overwrites_a_recorded_end(tmp_path):
    import fcntl

    cfg = load_config(_config(tmp_path, "http://127.0.0.1:9"))
    manifest = Manifest(cfg, state_dir=cfg.state_dir())
    run_id = manifest.start_run(command="run")
    lock = manifest.path.with_suffix(manifest.path.suffix + ".lock")
    with open(lock, "a+") as held:  # another writer holds the lock: nothing is written, nothing waits
        fcntl.flock(held, fcntl.LOCK_EX)
        assert manifest.mark_forced_exit(run_id) is False
        fcntl.flock(held, fcntl.LOCK_UN)
    assert read_manifest(cfg.state_dir())["runs"][0]["status"] == "running"
    assert manifest.mark_forced_exit(run_id) is True
    assert read_manifest(cfg.state_dir())["runs"][0]["status"] == "forced exit"
    manifest.stop_run(run_id, status="complete")  # an end recorded (the run finished before the exit) is kept
    assert manifest.mark_forced_exit(run_id) is False
    assert read_manifest(cfg.state_dir())["runs"][0]["status"] == "complete"
    assert manifest.mark_forced_exit("no-such-run") is False  # never raises
    assert orjson.loads(manifest.path.read_bytes())["runs"][0]["run_id"] == run_id
