"""Adversarial review of the runtime, session 13 (s13-break): each test failed on main before its fix.

Real processes only: ``run.py`` in a subprocess against the local fakes of :mod:`geoagent.sandbox`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from _model_harness import generic_campaign, model_table

from geoagent.sandbox.server import spawn, wait_ready

REPO = Path(__file__).resolve().parents[1]


def _run_py(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` from the repository (this checkout's package first on the path)."""
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=timeout)


def _files_holding(folder: Path, needle: bytes) -> list[Path]:
    return sorted(p for p in folder.rglob("*") if p.is_file() and needle in p.read_bytes())


def test_key_echoed_json_escaped_by_a_401_never_reaches_state_queues_or_status(tmp_path):
    """A proxy that repeats the refused key in its 401 body, in JSON that writes "/" as "\\/" (PHP's json_encode
    does), put the key, so escaped, in the queue database (the task's last error), progress.jsonl and the
    output of ``status``: the scrubbing matched the key's plain spelling only. A key with "/" and "+" is the
    base64 alphabet some gateways issue."""
    key = "AbCd/EfGh" + "+IjKl/MnOpQrStUv"  # split: no key-shaped literal in the sources
    proc, base = spawn("geoagent.sandbox.llm_openai:make_app", api_keys=["accepted-" + "key-0123456789"],
                       echo_key=True)
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="echo", n=3,
                                models=model_table(base_url=base, key_var="S13_ECHO_KEY", concurrency=2))
        env = {"S13_ECHO_KEY": key}
        run = _run_py("run", str(cfgp), env=env)
        status = _run_py("status", str(cfgp), env=env)
        dead = _run_py("dead", str(cfgp), env=env)
    finally:
        proc.terminate()
        proc.join(10)
    assert "authentication failed" in run.stdout + run.stderr, run.stdout + run.stderr
    assert "401" in status.stdout  # the error is still shown, without the key
    for out in (run.stdout, run.stderr, status.stdout, status.stderr, dead.stdout, dead.stderr):
        assert "EfGh" not in out, out
    assert _files_holding(tmp_path, b"EfGh") == []


def test_status_after_a_run_stopped_by_a_cap_lowered_below_the_spend_is_no_finished_campaign(tmp_path):
    """A campaign resumed with more requests and a cap lowered below what it already spent stops at once
    ("budget exhausted", nothing dispatched, half the plan still queued). ``status`` took that run, which
    finished no task, for a no-op re-run of a done campaign: "last run: no work left to do", the earlier run's
    figures "run ended: complete" and "m 20/20 (100%)" answered, hiding both the cap and the 20 queued requests."""
    cfgp = generic_campaign(tmp_path, name="lowcap", n=6, models=model_table(), cap_usd=1.0)
    first = _run_py("run", str(cfgp))
    assert first.returncode == 0 and "complete" in first.stdout, first.stdout + first.stderr
    text = cfgp.read_text(encoding="utf-8").replace("n_requests = 6", "n_requests = 12")
    cfgp.write_text(text.replace("cap_usd = 1.0", "cap_usd = 1e-07"), encoding="utf-8")
    second = _run_py("run", str(cfgp))
    assert "budget exhausted" in second.stdout, second.stdout + second.stderr
    status = _run_py("status", str(cfgp)).stdout
    assert "ready       6" in status, status
    assert "no work left to do" not in status, status
    assert "run ended: complete" not in status, status
    assert "budget exhausted" in status, status
    assert "6/12 (50%)" in status, status


def _limit_file_size(max_bytes: int):
    """A ``preexec_fn``: files of the child grow to ``max_bytes`` at most (RLIMIT_FSIZE); a write past it fails
    with EFBIG (Python ignores SIGXFSZ), as writes fail on a full disk."""
    import resource

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_bytes, max_bytes))

    return apply


@pytest.mark.parametrize("limit_kib", [300, 1200])  # full while planning; full mid-run, answers coming in
def test_a_full_disk_ends_the_run_with_one_error_line_and_the_rerun_resumes(tmp_path, limit_kib):
    """Writes that fail for want of space (here RLIMIT_FSIZE: SQLite reports "disk I/O error") ended ``run`` with
    a traceback of up to 16 chained exceptions (exit 1), while a data root that is a file or read-only gets one
    ``error:`` line. Now one line names the file and says what to do; nothing acknowledged is lost: the re-run,
    with space again, completes every request and pays each at most once beyond the unknown-outcome calls the
    ledger booked (answers on the wire when the store failed)."""
    cfgp = generic_campaign(tmp_path, name="full", n=3000, models=model_table(concurrency=16))
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.run([sys.executable, "run.py", "run", str(cfgp)], cwd=REPO, env=env, capture_output=True,
                           text=True, timeout=180, preexec_fn=_limit_file_size(limit_kib * 1024))
    assert "Traceback" not in first.stderr, first.stderr[-3000:]
    lines = [ln for ln in first.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and ".sqlite" in lines[0] and "re-run the same command" in lines[0], first.stderr[-3000:]
    assert first.returncode == 3, (first.returncode, first.stderr[-2000:])
    second = _run_py("run", str(cfgp), timeout=300)
    assert second.returncode == 0 and "complete" in second.stdout, second.stdout + second.stderr
    assert "done 3000  dead 0" in second.stdout


@pytest.mark.parametrize("usage, price_out", [
    ({"prompt_tokens": 10, "completion_tokens": 1e300}, None),     # a JSON number with an integral value
    ({"prompt_tokens": 10, "completion_tokens": 10 ** 25}, None),  # a JSON integer past 64-bit nano-USD
    ({"prompt_tokens": "\u00b2", "completion_tokens": 5}, None),   # a numeric string of a non-ASCII digit
    # a plausible count at a price no model has, whose cost would pass 64-bit nano-USD when stored: since session
    # 16 such a price is refused at load (models[].price_*_usd_per_mtok <= 1e6 USD per 1M tokens; with at most
    # MAX_USAGE_TOKENS = 1e9 tokens per count no call's cost can pass it), before anything is sent
    ({"prompt_tokens": 10, "completion_tokens": 10 ** 9}, 1e7),
])
def test_implausible_usage_never_leaves_a_reservation_open(tmp_path, usage, price_out):
    """A provider reporting a token count out of any range (1e300 completion tokens) made the settlement fail
    ("TypeError: Integer exceeds 64-bit range" when the cost in nano-USD went into SQLite): the answer was not
    stored, its reservation stayed OPEN after the run ("reserved by calls still open" with no process running)
    and the dead-letter reason named the TypeError. Never left open, never settled as a number.

    A usage no call can have is no usage (s13-usage): the answer text was read and billed once, so it is kept,
    settled at its reservation (the worst case) and marked not reported, as an answer without ``usage`` is; asked
    again, the same gateway would answer the same counts and bill again. A plausible count whose cost the ledger
    cannot store (a price no model has) stays booked as unknown-outcome spend and the task is retried."""
    from _model_harness import ledger_figures

    from geoagent.config import load_config

    log = tmp_path / "calls.jsonl"
    proc, base = spawn("_hostile_usage:make_app", usage=usage, log=str(log))
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="usage", n=2, queue={"max_attempts": 2},
                                models=model_table(base_url=base, key_var="S13_USAGE_KEY", concurrency=2))
        if price_out is not None:  # worst case per call 100 tokens x price: the cap must allow one call
            text = cfgp.read_text(encoding="utf-8").replace("cap_usd = 1.0", "cap_usd = 100000.0")
            cfgp.write_text(text.replace("price_output_usd_per_mtok = 0.60", f"price_output_usd_per_mtok = {price_out}"),
                            encoding="utf-8")
        run = _run_py("run", str(cfgp), env={"S13_USAGE_KEY": "usage-test-" + "key-0123456789"})
    finally:
        proc.terminate()
        proc.join(10)
    out = run.stdout + run.stderr
    if price_out is not None and price_out > 1e6:
        assert run.returncode == 2 and "price_output_usd_per_mtok: expected a number <= 1000000.0" in out, out
        assert not log.exists() or log.read_text() == "", "a refused config sent a request"
        return
    problems, totals = ledger_figures(load_config(cfgp))
    assert problems == []
    assert totals["reserved_nusd"] == 0, totals  # nothing left open once the run ended
    n_calls = len(log.read_text().splitlines())
    if price_out is None:  # kept: one billed call per task, booked at the worst case, said once
        assert "done 2  dead 0" in out, out
        assert n_calls == 2 and totals["unknown_nusd"] == 0 and totals["results"] == 2, (n_calls, totals)
        assert "warning: model 'm' answered 2 calls without a usage count: booked at the worst case" in out, out
        return
    assert "dead 2" in out, out
    assert n_calls == 4  # 2 tasks x 2 deliveries, each answered (billed) by the fake
    assert totals["unknown_nusd"] > 0 and totals["results"] == 0, totals
    dead = _run_py("dead", str(cfgp)).stdout
    assert "TypeError" not in dead and "ValueError" not in dead, dead
    assert "the answer could not be stored" in dead, dead


def test_overrun_warning_names_output_past_max_output_tokens(tmp_path):
    """A provider that bills more output than ``max_output_tokens`` allows (5,000 completion tokens for a limit of
    100: a gateway that ignores the limit) passes the reservation by its output; the run's warning said "the
    provider billed more input than the worst case assumed" and sent the user to image_input_tokens and
    input_estimate_factor, neither of which bounds output."""
    proc, base = spawn("_hostile_usage:make_app", usage={"prompt_tokens": 10, "completion_tokens": 5000})
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="overrun", n=2,
                                models=model_table(base_url=base, key_var="S13_OVER_KEY", concurrency=2))
        run = _run_py("run", str(cfgp), env={"S13_OVER_KEY": "overrun-test-" + "key-0123456789"})
    finally:
        proc.terminate()
        proc.join(10)
    warn = [ln for ln in run.stdout.splitlines() if "billed more than reserved" in ln]
    assert len(warn) == 1, run.stdout + run.stderr
    assert "max_output_tokens" in warn[0] and "billed more input than" not in warn[0], warn[0]


def test_queues_and_state_in_one_folder_never_take_the_state_files_for_queues(tmp_path):
    """``[paths] queues`` and ``state`` naming one folder (``data/``) is accepted, and the campaign runs; but every
    place that found the queues by listing ``*.sqlite`` in the campaign's queues folder took the state's own
    ``campaign.sqlite`` (store and ledger) and ``hosts.sqlite`` for queues: ``status`` listed a "campaign" and a
    "hosts" queue, and opening them as queues (the run's lease hand-back, status, dead) wrote a queue's tables
    into the ledger's database."""
    import sqlite3

    cfgp = generic_campaign(tmp_path, name="onefolder", n=4, models=model_table())
    text = cfgp.read_text(encoding="utf-8")
    cfgp.write_text(text.replace(f'"{tmp_path / "queues"}"', f'"{tmp_path / "data"}"')
                    .replace(f'"{tmp_path / "state"}"', f'"{tmp_path / "data"}"'), encoding="utf-8")
    run = _run_py("run", str(cfgp))
    assert run.returncode == 0 and "complete" in run.stdout, run.stdout + run.stderr
    again = _run_py("run", str(cfgp))
    assert again.returncode == 0, again.stdout + again.stderr
    status = _run_py("status", str(cfgp)).stdout
    dead = _run_py("dead", str(cfgp), "--requeue")
    assert dead.returncode == 0, dead.stdout + dead.stderr
    edges = [ln.split(":")[0].strip() for ln in status.splitlines() if "ready" in ln and "leased" in ln]
    assert edges == ["requests", "responses"], status
    folder = tmp_path / "data" / "onefolder"
    for name in ("campaign.sqlite", "hosts.sqlite"):
        with sqlite3.connect(folder / name) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        assert "tasks" not in tables, (name, tables)


def test_sigterm_while_planning_stops_like_ctrl_c(tmp_path):
    """A SIGTERM (a supervisor's stop, ``kill PID``) that lands while a large plan is being queued, before the
    pipeline installs its signal handling, killed the process silently by the signal's default action (exit
    -15: no line, nothing said about resuming), where a Ctrl-C at the same moment says "interrupted (Ctrl-C)
    before the run started its workers ...; re-run the same command to start or resume" (exit 130). The queued
    part of the plan stays queued."""
    import signal
    import time

    from _crash_harness import queue_rows

    cfgp = generic_campaign(tmp_path, name="termplan", n=200_000, models=model_table(), cap_usd=100.0)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "run.py", "run", str(cfgp)], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        qfile = tmp_path / "queues" / "termplan" / "requests.sqlite"
        deadline = time.monotonic() + 60
        while queue_rows(qfile) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        n_before = queue_rows(qfile)
        assert 0 < n_before < 200_000, n_before  # signalled while planning
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert proc.returncode == 130, (proc.returncode, out[-1000:], err[-2000:])
    assert "interrupted (SIGTERM) before the run started its workers" in err, err[-2000:]
    assert "re-run the same command to start or resume" in err and "Traceback" not in err, err[-2000:]
    assert queue_rows(qfile) >= n_before
