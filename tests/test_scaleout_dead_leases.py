"""Scale-out: after a SIGKILL of one process of a campaign, the next run redelivers exactly that process's leases
at once, even while another process of the campaign is alive (walkthrough 2, item 1).

Before: a restarted process expired dead leases only when it was alone (it could take ``run.lock``
exclusively); with another process alive the killed one's leases waited out the visibility timeout (300 s by
default). Now every lease id names its process (:func:`geoagent.runtime.sqlite_queue.lease_owner`) and each
running process holds ``state/<campaign>/leases/<owner>.lock``: a lock that can be taken belongs to a dead
process, so its leases can be expired early; a live process's leases never are.

Real processes: two holders of a campaign run lock, each leasing one task; one is SIGKILLed.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import campaign_run_lock
from geoagent.files import append_jsonl
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table
from tests.test_status_scaleout import _record, _stage

REPO = Path(__file__).resolve().parents[1]

_HOLDER = """
import sys, time
from geoagent.config import load_config
from geoagent.engine import campaign_run_lock
from geoagent.runtime.sqlite_queue import SQLiteQueue
cfg = load_config(sys.argv[1])
with campaign_run_lock(cfg, sweep_s=None):  # no periodic sweep: the restart's start-up scan is under test
    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, "requests", **cfg.queue_options())
    print(q.lease_sync(1)[0].key, flush=True)
    time.sleep(120)
"""


def _holder(cfgp: Path) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, "-c", _HOLDER, str(cfgp)], cwd=REPO, stdout=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")})
    key = proc.stdout.readline().strip()
    assert key, "holder did not lease"
    return proc, key


def test_a_restart_redelivers_a_killed_process_leases_at_once_while_another_process_lives(tmp_path):
    cfgp = generic_campaign(tmp_path, name="dl", n=3, models=model_table())
    cfg = load_config(cfgp)
    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, "requests", **cfg.queue_options())
    q.put_many_sync([(f"t{i}", {"i": i}) for i in range(3)])
    q.close_sync()
    killed, killed_key = _holder(cfgp)
    live, live_key = _holder(cfgp)
    try:
        killed.send_signal(signal.SIGKILL)
        killed.wait(10)
        now = time.time()
        append_jsonl(Path(cfg.state_dir()) / C.PROGRESS_FILE,
                     [_record(killed.pid, "run-k", [_stage("model_caller", 1, 1.0)], now - 1.0, 5.0),
                      _record(live.pid, "run-l", [_stage("model_caller", 1, 1.0)], now - 0.5, 5.0)], fsync=False)

        def killed_line() -> str:
            text = format_status(campaign_status(cfg))
            m = re.search(rf"^    pid {killed.pid} .*$", text, re.M)
            assert m, text
            return m.group(0)

        before = killed_line()
        assert "stopped without its final record" in before, before
        # the live holder runs the campaign: a running process hands them back (its periodic sweep; these
        # holders run none, so that the restart's start-up scan below is what hands them back)
        assert ("its leased tasks are handed back to their queue within about 5 s by a running process of the "
                "campaign (each checks every 5 s for processes that died), else when the next run of the campaign "
                "starts or their visibility timeout ([queue] visibility_timeout_s, 300 s by default, from each lease) "
                "ends, whichever comes first") in before, before
        with campaign_run_lock(cfg) as alone:
            assert alone is False  # the live holder still runs the campaign
            q = SQLiteQueue.open(cfg.queues_root(), cfg.name, "requests", **cfg.queue_options())
            try:
                got = sorted(t.key for t in q.lease_sync(3, visibility_timeout_s=60))
            finally:
                q.close_sync()
        # the killed process's task comes back at once; the live one's stays leased (never expired early)
        assert killed_key in got and live_key not in got, (got, killed_key, live_key)
        assert len(got) == 2, got
        owners = sorted(p.name for p in (Path(cfg.state_dir()) / "leases").iterdir())
        assert len(owners) == 1, owners  # the dead owner's file was removed; the live one's stays
        after = killed_line()  # the restart (now ended) handed them back: status no longer says they will return
        assert ("its leased tasks were handed back to their queue (by a process of the campaign that started or was "
                "running after it stopped)") in after, after
    finally:
        live.kill()
        live.wait(10)


def test_a_running_process_sweeps_a_killed_ones_leases_and_never_a_live_ones(tmp_path):
    """The periodic sweep of a running process (here the test process, every 0.2 s) hands back exactly the
    leases of a process killed while it runs: not its own, not a live holder's, and it leaves a fresh temporary
    owner file (a process starting up, not yet locked) alone. The dead owner's file is removed, as at start."""
    cfgp = generic_campaign(tmp_path, name="sw", n=3, models=model_table())
    cfg = load_config(cfgp)
    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, "requests", **cfg.queue_options())
    q.put_many_sync([(f"t{i}", {"i": i}) for i in range(3)])
    q.close_sync()
    owners = Path(cfg.state_dir()) / "leases"
    with campaign_run_lock(cfg, sweep_s=0.2) as alone:
        assert alone is True
        q = SQLiteQueue.open(cfg.queues_root(), cfg.name, "requests", **cfg.queue_options())
        procs: list[subprocess.Popen] = []
        try:
            mine = [t.key for t in q.lease_sync(1, visibility_timeout_s=600)]
            killed, killed_key = _holder(cfgp)
            procs.append(killed)
            live, live_key = _holder(cfgp)
            procs.append(live)
            assert len({*mine, killed_key, live_key}) == 3
            starting = owners / ".0123456789ab.feedbeef.tmp"  # as _hold_owner_lock makes it, before its flock
            starting.write_bytes(b"")
            killed_file = {f.read_text().strip(): f for f in owners.glob("*.lock")}[str(killed.pid)]
            killed.send_signal(signal.SIGKILL)
            killed.wait(10)
            deadline = time.monotonic() + 10
            while not (got := [t.key for t in q.lease_sync(3, visibility_timeout_s=600)]):
                assert time.monotonic() < deadline, "the sweep did not hand the killed holder's lease back in 10 s"
                time.sleep(0.05)
            assert got == [killed_key], (got, killed_key)
            time.sleep(1.0)  # several more sweeps: nothing else is ever handed back
            assert q.lease_sync(3, visibility_timeout_s=600) == []
            assert q.counts_sync().leased == 3
            assert not killed_file.exists() and starting.exists()
            assert str(live.pid) in {f.read_text().strip() for f in owners.glob("*.lock")}
        finally:
            q.close_sync()
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(10)


def test_a_dry_run_lock_takes_no_owner_file(tmp_path):
    """A dry run is read-only: no ``leases/`` owner file, no recovery."""
    cfg = load_config(generic_campaign(tmp_path, name="dr", n=1, models=model_table()))
    with campaign_run_lock(cfg, simulate=True):
        assert not (Path(cfg.state_dir()) / "leases").exists()


def _leased_by(cfg, owner: str) -> int:
    db = Path(cfg.queues_root()) / cfg.name / "requests.sqlite"
    try:  # the caller may hold its owner lock before it has created (or set up) the queue file
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM tasks WHERE state = 1 AND lease_id LIKE ?",
                                (f"%.{owner}-%",)).fetchone()[0]
    except sqlite3.OperationalError:  # not there yet, or its schema not yet written
        return 0


def test_end_to_end_restarted_model_caller_takes_the_killed_ones_work_at_once(tmp_path):
    """Two ``run.py run --stages model_caller`` processes (default visibility timeout: 300 s); one is SIGKILLed
    with calls on the wire and restarted while the other (``--watch``: alive throughout) still runs. The killed
    one's leases are redelivered at once (by the restart's start-up scan, or by the watching caller's periodic
    sweep, whichever comes first), so the restart ends drained within a minute, not after the 300 s timeout;
    the other ends ``complete`` on Ctrl-C."""
    from geoagent.sandbox.server import free_port, wait_ready
    from geoagent.status import campaign_status

    key = "sk-" "dead-leases-e2e"
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "1500", "--api-key", key], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: list[subprocess.Popen] = []

    def caller(*extra: str) -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live", "--stages",
                              "model_caller", *extra], cwd=REPO, env={"DL_KEY": key, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    def owner_of(proc: subprocess.Popen) -> str | None:
        owners = Path(cfg.state_dir()) / "leases"
        files = {f.read_text().strip(): f.name[:-len(".lock")] for f in owners.glob("*.lock")} if owners.is_dir() else {}
        return files.get(str(proc.pid))

    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="dle", n=24, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="DL_KEY", concurrency=4, timeout_s=30.0))
        cfg = load_config(cfgp)
        doomed = caller()
        deadline = time.monotonic() + 60
        while (doomed_owner := owner_of(doomed)) is None or not _leased_by(cfg, doomed_owner):
            assert time.monotonic() < deadline and doomed.poll() is None, "the caller took no lease in 60 s"
            time.sleep(0.05)
        other = caller("--watch")  # stays alive (watching) until stopped: the restart is never alone
        while owner_of(other) is None:
            assert time.monotonic() < deadline and other.poll() is None, "the second caller did not start"
            time.sleep(0.05)
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        t0 = time.monotonic()
        again = caller()
        out, err = again.communicate(timeout=90)
        assert again.returncode == 0, err[-2000:]
        assert time.monotonic() - t0 < 60, "the killed caller's work waited for its visibility timeout"
        assert other.poll() is None  # alive all along
        assert _leased_by(cfg, doomed_owner) == 0
        req = campaign_status(cfg)["queues"]["requests"]
        assert (req.done, req.ready, req.leased, req.dead) == (24, 0, 0, 0), req
        other.send_signal(signal.SIGINT)
        out2, err2 = other.communicate(timeout=60)
        assert other.returncode == 0, err2[-2000:]
        # handed back by the restart's start-up scan, or by the watching caller's periodic sweep if it came first
        assert any("redelivered now" in text for text in (out, err, out2, err2)), (err[-2000:], err2[-2000:])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.kill()
        server.wait(10)


def test_a_running_process_takes_a_killed_ones_leases_without_a_restart(tmp_path):
    """Issue 2 (scale-out on one machine): two ``run.py run --stages model_caller`` processes on one campaign,
    visibility timeout 600 s; one is SIGKILLed with calls on the wire and NO process of the campaign starts
    afterwards. The survivor hands the killed one's leases back itself while it runs (its periodic dead-owner
    sweep, :data:`geoagent.engine.DEAD_OWNER_SWEEP_S`) and ends with every request answered within seconds,
    not after 600 s. Every request key ends with exactly one stored response, and no key is requested (paid)
    again once its response was stored (the fake server's call log, with arrival times).

    Before: the survivor's leases were its own; the killed process's stayed leased for the whole visibility
    timeout (a burst survivor waits for them: ``leased`` > 0), so it ran past this test's 45 s limit."""
    from geoagent.sandbox.llm_common import CallLog
    from geoagent.sandbox.server import free_port, wait_ready

    key = "sk-" "dead-owner-sweep"
    port = free_port("127.0.0.1")
    calls_log = tmp_path / "calls.jsonl"
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "1500", "--api-key", key, "--log", str(calls_log)], cwd=REPO,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    procs: list[subprocess.Popen] = []

    def caller() -> subprocess.Popen:
        p = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live", "--stages",
                              "model_caller"], cwd=REPO, env={"DS_KEY": key, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")},
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        return p

    def owner_of(proc: subprocess.Popen) -> str | None:
        owners = Path(cfg.state_dir()) / "leases"
        files = {f.read_text().strip(): f.name[:-len(".lock")] for f in owners.glob("*.lock")} if owners.is_dir() else {}
        return files.get(str(proc.pid))

    def wait_leasing(proc: subprocess.Popen, what: str) -> str:
        deadline = time.monotonic() + 60
        while (owner := owner_of(proc)) is None or not _leased_by(cfg, owner):
            assert time.monotonic() < deadline and proc.poll() is None, f"the {what} caller took no lease in 60 s"
            time.sleep(0.05)
        return owner

    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        n = 24
        cfgp = generic_campaign(tmp_path, name="dos", n=n, cap_usd=1.0, queue={"visibility_timeout_s": 600.0},
                                models=model_table(base_url=base, key_var="DS_KEY", concurrency=4, timeout_s=30.0))
        cfg = load_config(cfgp)
        doomed = caller()
        doomed_owner = wait_leasing(doomed, "first")
        survivor = caller()
        wait_leasing(survivor, "second")  # past its start-up scan, which found the first caller alive
        doomed.send_signal(signal.SIGKILL)
        doomed.wait(10)
        t_kill, t0 = time.time(), time.monotonic()
        try:
            out, err = survivor.communicate(timeout=45)
        except subprocess.TimeoutExpired:
            raise AssertionError("the survivor did not end within 45 s of the kill: the killed caller's leases "
                                 "waited for their 600 s visibility timeout") from None
        assert survivor.returncode == 0, err[-2000:]
        assert time.monotonic() - t0 < 30, "the killed caller's work was not handed back promptly"
        # the survivor itself redelivered them (no process started after the kill)
        m = re.search(r"(\d+) task\(s\) leased by a stopped process are redelivered now", err)
        assert m and int(m.group(1)) > 0, err[-2000:]
        assert _leased_by(cfg, doomed_owner) == 0
        assert not (Path(cfg.state_dir()) / "leases" / f"{doomed_owner}.lock").exists()  # removed, as at start
        req = campaign_status(cfg)["queues"]["requests"]
        assert (req.done, req.ready, req.leased, req.dead) == (n, 0, 0, 0), req
        with sqlite3.connect(f"file:{Path(cfg.state_dir()) / C.CAMPAIGN_DB}?mode=ro", uri=True) as conn:
            stored = dict(conn.execute("SELECT key, created_at FROM responses").fetchall())
        assert len(stored) == n, len(stored)  # one stored response per request key (key is the primary key)
        paid = [c for c in CallLog.read(calls_log) if c["status"] == 200]
        assert {c["key"] for c in paid} == set(stored), "the server was paid for keys the store does not hold"
        for c in paid:  # no paid request for a key whose response was already stored
            assert c["t_wall"] < stored[c["key"]], (c["key"], c["t_wall"], stored[c["key"]])
        by_key: dict[str, list[float]] = {}
        for c in paid:
            by_key.setdefault(c["key"], []).append(c["t_wall"])
        # a key paid twice: the killed caller's answer it never stored. The fake logs a call when it answers,
        # 1.5 s (its latency) after the request arrived: a request the killed caller sent just before the kill
        # is logged up to that long after it
        for k, times in by_key.items():
            assert all(t < t_kill + 1.5 + 0.5 for t in sorted(times)[:-1]), (k, times, t_kill)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.kill()
        server.wait(10)
