"""``run --stages``: each scale-out process reports its own model calls and does not call a campaign
``complete`` while other stages still have work (walkthrough defects). Real ``run.py`` processes against the
OpenAI-compatible fake, run as its own server process with model latency so the two model callers overlap.
"""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import orjson

from geoagent import constants as C
from geoagent.sandbox.server import free_port, wait_ready
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-scaleout"
N = 80


def _run(cfgp: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live", *args], cwd=REPO,
                            env={"SO_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _own_calls(out: str) -> int:
    m = re.search(r"this run: (\d+) new model calls? by this process; (\d+) answers? reused \(stored by an earlier run, used instead of a call\)", out)
    assert m, out
    return int(m.group(1))


def test_stages_processes_report_their_own_calls_and_no_false_complete(tmp_path):
    port = free_port("127.0.0.1")
    log = tmp_path / "calls.jsonl"
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "150", "--api-key", KEY, "--log", str(log)], cwd=REPO)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="so", n=N, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="SO_KEY", concurrency=4))
        # two model-caller processes share the requests queue; no collector runs yet
        procs = [_run(cfgp, "--stages", "model_caller")]
        time.sleep(0.5)
        procs.append(_run(cfgp, "--stages", "model_caller"))
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err[-2000:]  # exit codes as documented: 0, the process's stages finished
            outs.append(out)
        for out in outs:
            # its own stage is done, the collector's input still waits: not "complete"
            assert "campaign so: stage model_caller finished; campaign not complete: other stages still have work" in out, out
            assert "campaign so: complete" not in out
        with sqlite3.connect(tmp_path / "state" / "so" / C.CAMPAIGN_DB) as conn:
            ledger_calls = conn.execute("SELECT calls FROM ledger_totals WHERE id = 1").fetchone()[0]
        server_keys = Counter(orjson.loads(line)["key"] for line in log.read_bytes().splitlines() if line.strip())
        assert ledger_calls == N == len(server_keys) and set(server_keys.values()) == {1}
        # each process counted only its own calls: together exactly the campaign's
        assert sum(_own_calls(out) for out in outs) == N

        # the collector process makes no model call and, as the last one, finishes the campaign
        p = _run(cfgp, "--stages", "collector")
        out, err = p.communicate(timeout=120)
        assert p.returncode == 0, err[-2000:]
        assert "campaign so: complete" in out, out
        assert "this run: no model calls by this process (it ran stage collector; the model caller's process reports its calls)" in out, out
        assert "new model call" not in out
    finally:
        server.terminate()
        server.wait(10)
