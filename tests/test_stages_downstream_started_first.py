"""A ``--stages`` process started before the process of its upstream stages waits for it (fixstages43).

Before: docs/scale-out.md's one-machine example (``run --stages model_caller,parser &`` then ``run --stages
geocoder,scorer,aggregator``) worked only with a ``sleep 3`` between the two lines. Started the other way round, or
back to back (the upstream process still planning), the downstream process found its input empty, no upstream
task leased and no live process running the upstream stages, and ended at once: exit 0, ``campaign NAME: stages
geocoder, scorer, aggregator finished; campaign not complete: other stages still have work``; the upstream process
then made every model call and ended too (exit 0), leaving every answer on ``answers`` for a geocoder nobody ran
and no report. Two machines started by a scheduler in any order met the same trap.

Now a foreign upstream stage with ready tasks that no process has taken up since the downstream process started
(no process on this machine recorded running it since then in manifest.json, none of its input's tasks seen leased,
its input's done/dead counts unchanged: :meth:`geoagent.runtime.worker.StageRunner._upstream_taken_up`) keeps the
downstream process waiting, with a warning line naming the stage and the command that takes its work; it still ends
at once when the upstream work is all done, and on SIGINT/SIGTERM.

Real processes (``run.py`` subprocesses) over a GeoHint campaign (simulated model, a release-form folder made here,
the sandbox's Wikidata and Nominatim fakes served in each process), on SQLite (one machine: one state folder) and
on Redis (two "machines": a state folder each, one local redis-server); the generic campaign in-process for the
stop and the nothing-to-wait-for cases.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

REPO = Path(__file__).resolve().parents[1]
WAIT_LINE = "its input is drained; waiting for a process that runs stage model_caller to start"
#: GeoHint's downstream stages wait for two upstream ones (review43e #2)
WAIT_BOTH = "its input is drained; waiting for a process that runs stages model_caller, parser to start"


def _geohint_toml(folder: Path, name: str, release: Path, *, redis: bool) -> Path:
    """The GeoHint campaign of tests/test_redis_stages_split.py (one simulated model over ``release``), on SQLite or
    (``redis``) on the server named by ``GA_TEST_REDIS``."""
    from test_redis_stages_split import _geohint_campaign

    p = _geohint_campaign(folder, name, release)
    if not redis:
        text = p.read_text(encoding="utf-8")
        p.write_text(text[: text.index("[backend]")], encoding="utf-8")
    return p


def _start(cfg: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live", *args], cwd=REPO,
                            env=env, stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def _wait_for(proc: subprocess.Popen, log: Path, text: str, timeout_s: float) -> None:
    """Wait until ``log`` holds ``text``; fail when ``proc`` ends first or after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while text not in log.read_text(encoding="utf-8", errors="replace"):
        assert proc.poll() is None, f"ended (exit {proc.returncode}) before saying {text!r}:\n" + log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def _env(state_root: Path, redis: str | None) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_STATE": str(state_root)}
    env.pop("GEOAGENT_RELEASE", None)
    env.pop("GEOAGENT_QUEUES", None)
    if redis:
        env["GA_TEST_REDIS"] = redis
    return env


def _downstream_first(tmp_path: Path, redis: str | None) -> None:
    from test_geohint_sim_campaign_folder import _release_folder

    release = _release_folder(tmp_path / "crawl")
    # one machine (SQLite: both processes share the state folder) or two (Redis: a state folder each)
    down_root, up_root = tmp_path / "m1", tmp_path / ("m2" if redis else "m1")
    cfg = _geohint_toml(tmp_path / "split", "ghfirst", release, redis=bool(redis))
    down_log, up_log = tmp_path / "down.log", tmp_path / "up.log"
    down = _start(cfg, _env(down_root, redis), down_log, "--stages", "geocoder,scorer,aggregator")
    up = None
    try:
        # before: the downstream process ended at once, exit 0, "stages geocoder, scorer, aggregator finished;
        # campaign not complete"; now it waits, and says so (after WAIT_SAID_AFTER_S, 5 s), naming the command
        # review43e #2: both upstream stages no process has taken up, in one command (it named model_caller only)
        _wait_for(down, down_log, WAIT_BOTH, 120)
        assert "--stages model_caller,parser` (or `run.py run" in down_log.read_text(), down_log.read_text()[-3000:]
        time.sleep(2.0)
        up = _start(cfg, _env(up_root, redis), up_log, "--stages", "model_caller,parser")
        assert up.wait(240) == 0, up_log.read_text()[-3000:]
        assert down.wait(240) == 0, down_log.read_text()[-3000:]
    finally:
        for p in (down, up):
            if p is not None and p.poll() is None:
                p.kill()
    log_down, log_up = down_log.read_text(), up_log.read_text()
    assert "campaign ghfirst: complete" in log_down, log_down[-3000:]
    assert "stages model_caller, parser finished; campaign not complete" in log_up, log_up[-3000:]
    assert "ghfirst: complete" not in log_up, log_up[-3000:]

    one = _geohint_toml(tmp_path / "one", "ghone", release, redis=bool(redis))
    single = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(one), "--no-live"], cwd=REPO,
                            env=_env(tmp_path / "m3", redis), capture_output=True, text=True, timeout=240)
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    # the report (written by the downstream process, which found the campaign drained) scores what one process does
    t1 = [(root / n / "report" / "table1.csv").read_text(encoding="utf-8")
          for root, n in ((down_root, "ghfirst"), (tmp_path / "m3", "ghone"))]
    assert t1[0].strip() and t1[0] == t1[1], t1


def test_a_downstream_process_started_first_waits_for_the_upstream_one_sqlite(tmp_path):
    _downstream_first(tmp_path, None)


def test_a_downstream_machine_started_first_waits_for_the_upstream_machine_redis(tmp_path, redis_url):  # noqa: F811
    _downstream_first(tmp_path, redis_url)


def test_a_downstream_process_waiting_for_its_upstream_to_start_stops_on_sigterm(tmp_path, monkeypatch, capsys,
                                                                                  caplog):
    """No upstream process ever starts: the downstream process waits (it used to end at once), says why, and a stop
    signal ends it as any run's stop does (exit 130, "interrupted"), naming the work left and what takes it."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.0)
    cfg = generic_campaign(tmp_path, name="no-up", n=8, models=model_table("m"))
    said = threading.Event()

    def stop_once_said() -> None:  # the signal once the wait is said (the CLI's log lines reach caplog)
        deadline = time.monotonic() + 60
        while WAIT_LINE not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
        said.set()
        time.sleep(1.0)  # it goes on waiting
        os.kill(os.getpid(), signal.SIGTERM)

    t0 = time.monotonic()
    threading.Thread(target=stop_once_said, daemon=True).start()
    rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
    out = capsys.readouterr().out
    assert said.is_set() and time.monotonic() - t0 >= 1.0
    assert caplog.text.count(WAIT_LINE) == 1, caplog.text
    assert f"`run.py run {cfg} --stages model_caller` (or `run.py run {cfg}`, every stage) takes them" in caplog.text
    assert rc == 130 and "campaign no-up: interrupted" in out, out
    assert "8 tasks waiting on requests for stage model_caller" in out, out


def test_a_downstream_process_ends_at_once_when_the_upstream_work_is_done(tmp_path, monkeypatch, capsys, caplog):
    """The campaign's upstream work complete (the last run ended complete, nothing new planned): nothing to wait
    for, the ``--stages collector`` process ends at once, the campaign complete."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.0)
    cfg = generic_campaign(tmp_path, name="all-done", n=8, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    t0 = time.monotonic()
    rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
    out = capsys.readouterr().out
    assert rc == 0 and "campaign all-done: complete" in out, out
    assert "waiting for" not in caplog.text, caplog.text
    assert time.monotonic() - t0 < 30


def test_stages_run_since_counts_the_runs_alive_since_the_start(tmp_path):
    """What the engine passes as ``stages_started``: the stages of this machine's runs recorded running (alive or
    gone since), or started or stopped at or after this process's start; not a run that ended before it, not this
    process's own, not another machine's, not another command's; a run recording no stages runs them all."""
    import socket

    from geoagent.runtime.manifest import stages_run_since

    here, now = socket.gethostname(), time.time()
    names = ["a", "b", "c", "d"]

    def entry(stages, status, started, took=None, **kw):
        e = {"run_id": f"r{started}", "status": status, "host": here, "pid": 1, "started_unix": started,
             "stages": stages, **kw}
        return {**e, **({"duration_s": took} if took is not None else {})}

    runs = [entry(["a"], "incomplete", now - 100, 50),  # ended before the start: not counted
            entry(["b"], "complete", now - 100, 99.5),  # ended 0.5 s after it (since = now - 1)
            entry(["c"], "running", now - 100),  # running (alive, or gone since)
            entry(["d"], "complete", now - 100, 10, command="export"),  # not a run
            entry(["d"], "running", now, host="other-machine"),
            entry(["d"], "running", now, pid=os.getpid())]  # this process
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    assert stages_run_since(tmp_path, names, now - 1) == {"b", "c"}
    runs.append(entry(None, "killed", now))  # started since: every stage
    (tmp_path / "manifest.json").write_text(json.dumps({"runs": runs}), encoding="utf-8")
    assert stages_run_since(tmp_path, names, now - 1) == set(names)
    assert stages_run_since(tmp_path / "nowhere", names, now) == set()



def test_geoagent_upstream_wait_s_bounds_the_wait(tmp_path, monkeypatch, capsys, caplog):
    """``GEOAGENT_UPSTREAM_WAIT_S``: a bounded wait ends as before it (exit 0, the work left for a process that runs
    the upstream stage, said), after that many seconds; a value that is no number of seconds is refused, exit 2."""
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="bounded", n=8, models=model_table("m"))
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "1.5")
    t0 = time.monotonic()
    rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
    out = capsys.readouterr().out
    assert rc == 0 and "stage collector finished; campaign not complete" in out, out
    assert time.monotonic() - t0 >= 1.5
    assert ("stage collector: no process took up stage model_caller within 1.5 s (GEOAGENT_UPSTREAM_WAIT_S)"
            in caplog.text), caplog.text
    assert "8 tasks waiting on requests for stage model_caller; no process of the campaign runs stage" in out, out
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "soon")
    rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
    captured = capsys.readouterr()
    assert rc == 2 and "GEOAGENT_UPSTREAM_WAIT_S must be a finite number of seconds >= 0, got 'soon'" in (
        captured.out + captured.err + caplog.text), captured


def test_the_wait_is_bounded_by_default(monkeypatch):
    """review43e #1: unset, the wait lasted for ever, so a downstream-only run started after its upstream process had
    stopped with work left (its host down) hung a script or a cron job; now it ends after 10 minutes as before."""
    from geoagent.runtime.daemon import DEFAULT_UPSTREAM_WAIT_S, upstream_wait_s

    monkeypatch.delenv("GEOAGENT_UPSTREAM_WAIT_S", raising=False)
    assert upstream_wait_s() == DEFAULT_UPSTREAM_WAIT_S == 600.0
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "  ")
    assert upstream_wait_s() == 600.0
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")
    assert upstream_wait_s() == 0.0
