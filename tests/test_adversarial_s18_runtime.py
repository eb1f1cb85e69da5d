"""Adversarial review, session 18: the runtime changes of the session (the SQLite queue's clock mark started at
the newest time a migrated file records). Cases found by trying to break them; each failed before its fix."""

from __future__ import annotations

import sqlite3

from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path

from test_queue_sqlite_clock_step import T0, FakeClock, _v2_file


def test_a_non_numeric_time_in_a_version_2_file_does_not_stop_its_migration(tmp_path):
    """A version-2 file with a time that is not a number (a ``created_at`` of 'garbage', a blob, a done task's
    ``not_before`` of 'abc': a repair by hand or another tool; REAL affinity keeps such text as text). SQLite's
    ``max()`` ranks text and blobs above every number, so the start of the mark (session 18) read 'garbage' as the
    newest time and every writer's open died with a bare ``ValueError: could not convert string to float``, naming
    no file; before session 18 the file migrated and worked. Such a value is no reading of the clock: it is
    skipped, and the mark starts at the wall clock (the newest numeric time, T0, is older)."""
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, 2, ?, ?)",
                     [("text", b"{}", T0, "garbage"), ("blob", b"{}", T0, b"\x00"), ("nb", b"{}", "abc", T0),
                      ("inf", b"{}", T0, float("inf"))])
    conn.execute("UPDATE counts SET n = n + 4 WHERE state = 2")
    conn.close()
    queue = SQLiteQueue(path, clock=FakeClock(T0 + 10.0))  # before the fix: ValueError
    try:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("SELECT n FROM counts WHERE state = -1").fetchone()[0] == T0 + 10.0
        finally:
            conn.close()
        assert [t.key for t in queue.lease_sync(10, 60)] == ["r1", "r2"]
    finally:
        queue.close_sync()


def test_a_redis_user_without_a_permission_the_queue_scripts_need_is_one_line_not_a_traceback(
        tmp_path, monkeypatch, capsys):
    """An ACL user with the right password that may not run Lua scripts (``-@scripting``: ``EVALSHA`` refused,
    NOPERM) or a command a script calls (``-zrangebyscore``). Neither is an authentication error (no fail-fast
    exit 2 by ``auth_refused``) nor an outage (not retried: a ``ResponseError``); but the queues wrap the refusal
    in a ``QueueError`` that the CLI did not map, so ``run`` ended in a Python traceback of an exception group
    (``Redis refused a queue script: this user has no permissions to run the 'evalsha' command``). Now one
    ``error:`` line naming the server's refusal, exit 2 (a configuration error: re-running does not help), and
    never the password."""
    import redis

    from test_queue_contract import RedisServer, _redis_binary
    from test_redis_auth_fail_fast import FAST_S, WINDOW_S, _campaign, _cli

    srv = RedisServer(_redis_binary(), tmp_path / "redis", "--appendonly", "no")
    (tmp_path / "redis").mkdir(exist_ok=True)
    srv.start()
    secret = "pw-" + "Zq8" * 6
    try:
        admin = redis.Redis(host="127.0.0.1", port=srv.port)
        for user, deny in (("noscript", "-@scripting"), ("nozrange", "-zrangebyscore")):
            admin.execute_command("ACL", "SETUSER", user, "on", f">{secret}", "~*", "+@all", deny)
        admin.close()
        monkeypatch.chdir(tmp_path)
        monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", str(WINDOW_S))
        for user in ("noscript", "nozrange"):
            cfg_path = _campaign(tmp_path, f"perm-{user}")
            monkeypatch.setenv("GA_TEST_REDIS_AUTH", f"redis://{user}:{secret}@127.0.0.1:{srv.port}/0")
            rc, text, took = _cli(["run", str(cfg_path)], capsys)  # before: an ExceptionGroup traceback
            assert rc == 2 and took < FAST_S, (user, rc, took, text)
            (line,) = [ln for ln in text.splitlines() if ln.startswith("error:")]
            assert "[backend] url_env" in line and "refused" in line, line
            assert secret not in text and "redis://" not in text, text
    finally:
        srv.stop()


def test_a_server_back_from_an_outage_requiring_a_password_fails_the_waiting_call_at_once(tmp_path, monkeypatch):
    """A call rides out an outage (the window's probe finds no server); the server comes back on its port but now
    requires a password the URL lacks (restarted with ``requirepass``). The probe's reply is an authentication
    error, an answer: the server is no longer lost and the call's next try fails with the refusal at once, worded
    by ``auth_refused``, not after the rest of the window (held: no fix needed)."""
    import subprocess
    import threading
    import time

    import redis

    from geoagent.runtime.redis_state import redis_client
    from test_queue_contract import RedisServer, _redis_binary

    window_s = 20.0
    monkeypatch.setenv("GEOAGENT_REDIS_RETRY_S", str(window_s))
    srv = RedisServer(_redis_binary(), tmp_path, "--appendonly", "no")
    srv.start()
    client = redis_client(srv.url)  # reached: its calls ride out outages
    restarted = None
    try:
        assert client.set("k", "v")
        srv.stop()
        box: dict[str, object] = {}

        def call() -> None:
            try:
                box["value"] = client.get("k")
            except Exception as exc:  # noqa: BLE001 - checked below
                box["error"] = exc
            box["at"] = time.monotonic()

        t = threading.Thread(target=call)
        t.start()
        time.sleep(2.0)  # the call is retrying in the outage
        assert t.is_alive()
        restarted = subprocess.Popen([str(_redis_binary()), "--port", str(srv.port), "--bind", "127.0.0.1",
                                      "--save", "", "--dir", str(tmp_path), "--requirepass", "pw-" + "Rt5" * 5],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        up = time.monotonic()
        t.join(window_s + 10)
        assert not t.is_alive()
        assert isinstance(box.get("error"), redis.AuthenticationError), box
        assert "not retried" in str(box["error"]) and "Rt5" not in str(box["error"])
        assert box["at"] - up < 5.0, box["at"] - up  # at once after the restart, not at the end of the window
    finally:
        client.close()
        if restarted is not None:
            restarted.terminate()
            restarted.wait(10)


def test_a_recorded_time_implausibly_far_ahead_does_not_move_the_mark(tmp_path):
    """A version-2 file holding one time far ahead of every real clock (a ``created_at`` stored in milliseconds,
    1.7e12 s: year ~55,000; another tool's bug). The mark's start (session 18) took it as the newest reading of the
    clock, so the first write "took out" a step of ~1.7e12 s: every running backoff ended at once (a backoff with
    890 s left was leased at once) and dead tasks' failure times went far negative. A recorded time more than
    :data:`MARK_START_AHEAD_MAX_S` (a year) ahead of the wall clock is no clock step a machine takes back: it is
    ignored, and the backoff keeps its time."""
    from geoagent.runtime.sqlite_queue import MARK_START_AHEAD_MAX_S

    now = T0 + 10.0
    path = queue_path(tmp_path, "camp", "edge")
    _v2_file(path)
    conn = sqlite3.connect(path, isolation_level=None)
    conn.executemany("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, 0, ?, ?)",
                     [("ms", b"{}", T0, now * 1000.0), ("backoff", b"{}", now + 890.0, T0)])
    conn.close()
    clock = FakeClock(now)
    queue = SQLiteQueue(path, clock=clock)
    try:
        conn = sqlite3.connect(path)
        try:
            assert conn.execute("SELECT n FROM counts WHERE state = -1").fetchone()[0] == now
        finally:
            conn.close()
        assert sorted(t.key for t in queue.lease_sync(10, 10_000)) == ["ms", "r1", "r2"]  # before: "backoff" too
        clock.now = now + 891.0
        assert [t.key for t in queue.lease_sync(10, 60)] == ["backoff"]
    finally:
        queue.close_sync()
    # a step back within the bound is still taken from the file (the session's fix stands)
    assert MARK_START_AHEAD_MAX_S >= 30 * 86400
