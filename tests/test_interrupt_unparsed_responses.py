"""An interrupt that leaves model answers received but not parsed says so in the summary (walkthrough 2, item 3).

Before, the summary of an interrupted run showed ``responses: ready 4`` and nothing else about them: answers
the run received (and paid for) whose parsing the stop cut off. Now a line counts them and says a re-run
finishes them without a new model call. Real: ``run.py`` in its own process against the OpenAI-compatible fake
(in another), SIGTERM while calls are on the wire; their answers arrive in the grace period, after the parser
stopped taking work. The re-run parses them and makes no new call for them.
"""

from __future__ import annotations

import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests._model_harness import run_with_calls_on_the_wire

KEY = "sk-" "unparsed-summary"
IN_FLIGHT = 4


@pytest.mark.timeout(180)
def test_interrupted_run_counts_answers_received_but_not_parsed(tmp_path):
    repo = Path(__file__).resolve().parents[1]
    with run_with_calls_on_the_wire(tmp_path, name="unparsed", latency_ms=3000, key=KEY, key_var="UNP_KEY",
                                    in_flight=IN_FLIGHT, timeout_s=60.0) as (proc, cfgp, db, env, cmd):
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, err[-2000:]
        m = re.search(r"^ +responses: ready (\d+)  leased (\d+)", out, re.M)
        assert m, out
        left = int(m.group(1)) + int(m.group(2))
        assert left > 0, out  # the answers that came in during the grace period
        assert (f"  {left} model answer{'s' if left != 1 else ''} received (paid where the model charges) but not "
                "parsed yet: left queued by the interrupt; re-run the same command to parse them (no new model "
                "call)") in out, out

        again = subprocess.run(cmd, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr[-2000:]
        assert "not parsed yet" not in again.stdout
        called = int(re.search(r"requests: ready \d+  leased \d+  done (\d+)", out).group(1))
        assert f"this run: {12 - called} new model calls" in again.stdout, (out, again.stdout)  # none for those answers


def test_interim_report_banner_and_stages_process_wording():
    """The reports' interim banner (GeoHint, GeoVerify ``report.md``) counts the unparsed answers too; a
    ``--stages`` process without the parser says nothing about them (the parser's process takes them)."""
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    counts = {"requests": QueueCounts(8, 0, 4, 0), "responses": QueueCounts(3, 1, 0, 0)}
    out = Outcome("c", "interrupted", 130, 12, counts, None)
    assert ("4 model answers received (paid where the model charges) but not parsed yet: left queued by "
            "the interrupt; re-run the same command to parse them (no new model call)") \
        in out.interim_note()
    budget = Outcome("c", "budget exhausted", 3, 12, counts, None)
    assert "left queued by the budget stop" in budget.summary()
    caller = Outcome("c", "interrupted", 130, 12, counts, None, own_stages=["model_caller"])
    assert "not parsed yet" not in caller.summary()
    done = Outcome("c", "complete", 0, 12, {"responses": QueueCounts(0, 0, 12, 0)}, None)
    assert "not parsed yet" not in done.summary()
