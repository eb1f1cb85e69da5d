"""The summary's ``this run:`` line tells requests done before the run started from those another run of the
campaign did at the same time (session 13 review).

Before: ``K requests done by earlier runs`` was every planned answer stored at the run's end minus this process's
own, so with two ``run`` processes of one campaign at once (allowed: they share the queues), a run that started
on a fresh campaign said the other run's answers were "done by earlier runs". Now the answers of the plan stored
when the run starts (after planning) are counted then: those are "done by earlier runs"; the rest that this
process did not do are "done meanwhile by other runs of the campaign". Real ``run.py`` processes against the
OpenAI-compatible fake.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.sandbox.server import spawn, wait_ready
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-concurrent"


def _progress_records(cfg) -> int:
    f = Path(cfg.state_dir()) / "progress.jsonl"
    return len(f.read_bytes().splitlines()) if f.is_file() else 0


def test_a_concurrent_run_s_answers_are_not_called_done_by_earlier_runs(tmp_path, monkeypatch, capsys):
    server, base = spawn("geoagent.sandbox.llm_openai:make_app", api_keys=[KEY])
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="twice", n=60, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="CC_KEY", rate_requests=12))  # ~5 s
        cfg = load_config(cfgp)
        first = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], cwd=REPO,
                                 env={"CC_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while _progress_records(cfg) < 1 and first.poll() is None:
                assert time.monotonic() < deadline, "no progress record within 60 s"
                time.sleep(0.1)
            assert first.poll() is None, "the first run ended before the second started"
            monkeypatch.setenv("CC_KEY", KEY)
            assert main(["run", str(cfgp), "--no-live"]) == 0  # the second run, while the first goes on
            second = capsys.readouterr().out
            out, err = first.communicate(timeout=120)
        finally:
            if first.poll() is None:
                first.kill()
    finally:
        server.terminate()
        server.join(10)
    assert first.returncode == 0, err[-2000:]
    line = next(ln for ln in out.splitlines() if ln.startswith("  this run:"))
    own = int(re.search(r"this run: (\d+) new model calls?", line).group(1))
    other = int(re.search(r"this run: (\d+) new model calls?", next(
        ln for ln in second.splitlines() if ln.startswith("  this run:"))).group(1))
    assert own + other == 60 and other > 0, (line, second)
    # before: "... 0 answers reused (...); 23 requests done by earlier runs" (the first run started on a fresh
    # campaign: no earlier run did any)
    assert "done by earlier runs" not in line, line
    assert f"; {other} requests done meanwhile by other runs of the campaign" in line \
        or f"; {other} request done meanwhile by other runs of the campaign" in line, line
