"""Engine and runtime warnings are ``warning:`` lines on the console, like the CLI's other warnings (session 14).

Before: ``2026-12-02 04:55:01,123 WARNING geoagent.engine: campaign wl: 2 task(s) leased by a stopped process are
redelivered now`` (Python's logging format), beside ``warning: ...`` lines for config, crawl and input warnings.
Now the CLI's console handler (:class:`geoagent.cli.ConsoleLogFormatter`) prints a warning record as
``warning: MESSAGE`` unless ``-v`` asks for the logging format (time, level, logger).

A real run through the local OpenAI-compatible fake: a first ``run.py run`` is SIGKILLed with calls on the wire
(its leases stay), and the next run's start-up scan redelivers them, saying so.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from geoagent.config import load_config
from tests._model_harness import generic_campaign, model_table
from tests.test_scaleout_dead_leases import _leased_by

REPO = Path(__file__).resolve().parents[1]


def test_a_restart_says_the_redelivered_leases_in_a_warning_line_and_v_keeps_the_logging_format(tmp_path):
    from geoagent.sandbox.server import free_port, wait_ready

    key = "sk-" "warning-lines-e2e"
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "1500", "--api-key", key], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: list[subprocess.Popen] = []

    def run(*extra: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live", *extra], cwd=REPO,
                             env={"WL_KEY": key, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    def owner_of(proc: subprocess.Popen) -> str | None:
        owners = Path(cfg.state_dir()) / "leases"
        files = {f.read_text().strip(): f.name[:-len(".lock")] for f in owners.glob("*.lock")} if owners.is_dir() else {}
        return files.get(str(proc.pid))

    def kill_while_leasing() -> None:
        doomed = run()
        deadline = time.monotonic() + 60
        while (owner := owner_of(doomed)) is None or not _leased_by(cfg, owner):
            assert time.monotonic() < deadline and doomed.poll() is None, "the run took no lease in 60 s"
            time.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)

    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="wl", n=4, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="WL_KEY", concurrency=2, timeout_s=30.0))
        cfg = load_config(cfgp)
        kill_while_leasing()
        again = run()
        _, err = again.communicate(timeout=120)
        assert again.returncode == 0, err[-3000:]
        lines = [ln for ln in err.splitlines() if "redelivered now" in ln]
        assert len(lines) == 1, err[-3000:]
        assert re.fullmatch(r"warning: campaign wl: \d+ task\(s\) leased by a stopped process are redelivered now",
                            lines[0]), lines[0]
        assert not re.search(r"^\d{4}-\d\d-\d\d .*(WARNING|ERROR) ", err, re.M), err[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.kill()
        server.wait(10)


def _record(name: str, level: int, msg: str) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_the_console_formatter_says_warnings_as_lines_and_keeps_the_logging_format_with_v():
    from geoagent.cli import ConsoleLogFormatter

    plain, verbose = ConsoleLogFormatter(), ConsoleLogFormatter(verbose=True)
    rec = _record("geoagent.engine", logging.WARNING, "campaign c: 2 task(s) leased by a stopped process are "
                                                      "redelivered now")
    assert plain.format(rec) == "warning: campaign c: 2 task(s) leased by a stopped process are redelivered now"
    assert re.fullmatch(r"\d{4}-\d\d-\d\d [\d:,]+ WARNING geoagent\.engine: campaign c: 2 task\(s\) .* now",
                        verbose.format(rec)), verbose.format(rec)
    assert plain.format(_record("geoagent.runtime.worker", logging.ERROR, "boom")) == "error: boom"
    assert plain.format(_record("asyncio", logging.WARNING, "slow callback")) == "warning: asyncio: slow callback"
