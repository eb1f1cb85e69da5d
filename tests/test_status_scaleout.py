"""``run.py status`` of a campaign scaled out over several processes (``run --stages``).

Every process appends its own records to ``state/<campaign>/progress.jsonl``; ``status`` used to read only the
last record, so it showed whichever process wrote last (its stages only, its rates). Now it merges the latest
record of every process of the run: per stage the counts of all of them and the rates of the running ones, the
ETA from those combined rates, and one line per process (pid, stages, running / ended / stopped without its
final record).

End to end: real ``run.py run --stages`` processes against the OpenAI-compatible fake (its own server process,
rate-limited so the run lasts a while), and ``run.py status`` as a real subprocess.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_lock
from geoagent.files import append_jsonl
from geoagent.sandbox.server import free_port, wait_ready
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table

REPO = Path(__file__).resolve().parents[1]
KEY = "sk-" "scaleout-status"
_PROC = re.compile(r"^    pid (\d+) \[([a-z_, ]+)\]: (.*)$", re.M)


def _run(cfgp: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live", *args], cwd=REPO,
                            env={"SOS_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _status(cfgp: Path) -> str:
    proc = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _pids_in_stream(cfg) -> set[int]:
    """The pids the progress records name (each process's records say which process wrote them)."""
    f = Path(cfg.state_dir()) / C.PROGRESS_FILE
    if not f.is_file():
        return set()
    out, records = set(), 0
    for line in f.read_bytes().splitlines():
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        records += 1
        if isinstance(rec, dict) and rec.get("pid"):
            out.add(int(rec["pid"]))
    assert out or records < 6, "the progress records do not say which process wrote them"
    return out


def _processes(text: str) -> dict[int, tuple[str, str]]:
    return {int(m.group(1)): (m.group(2), m.group(3)) for m in _PROC.finditer(text)}


def _stage_done(text: str, stage: str) -> int:
    m = re.search(rf"^ +{stage}: \d+\.\d\d/s  done (\d+) ", text, re.M)
    assert m, text
    return int(m.group(1))


def test_status_merges_every_process_of_a_scaled_out_run(tmp_path):
    port = free_port("127.0.0.1")
    server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                               "--latency-ms", "50", "--api-key", KEY], cwd=REPO)
    procs: list[subprocess.Popen] = []
    try:
        base = f"http://127.0.0.1:{port}"
        wait_ready(base)
        # 20 requests/s for the host, split between the two callers: 320 requests take ~16 s
        # a short visibility timeout: the killed caller's leases come back soon, so the other caller can finish
        cfgp = generic_campaign(tmp_path, name="sos", n=320, cap_usd=1.0, queue={"visibility_timeout_s": 4.0},
                                models=model_table(base_url=base, key_var="SOS_KEY", concurrency=4, rate_requests=20))
        cfg = load_config(cfgp)
        callers = [_run(cfgp, "--stages", "model_caller")]
        time.sleep(0.5)
        callers.append(_run(cfgp, "--stages", "model_caller"))
        collector = _run(cfgp, "--stages", "collector", "--watch")
        procs = [*callers, collector]
        deadline = time.monotonic() + 60
        while len(_pids_in_stream(cfg)) < 3:
            assert time.monotonic() < deadline, "three processes did not all write a progress record in 60 s"
            assert all(p.poll() is None for p in procs), [p.communicate()[1][-1500:] for p in procs if p.poll() is not None]
            time.sleep(0.2)
        time.sleep(1.5)  # a record or two of each

        text = _status(cfgp)
        seen = _processes(text)
        assert set(seen) == {p.pid for p in procs}, text
        for p in callers:
            assert seen[p.pid][0] == "model_caller" and seen[p.pid][1].startswith("running"), text
        assert seen[collector.pid][0] == "collector" and seen[collector.pid][1].startswith("running"), text
        assert "processes: 3 running, 0 ended" in text, text
        # one line per stage, whatever process wrote last: the model caller's counts are both callers'
        done_each = [int(re.search(r"model_caller [\d.]+/s done (\d+)", seen[p.pid][1]).group(1)) for p in callers]
        assert re.search(r"^ +model_caller: \d+\.\d\d/s  done \d+ .*\(2 processes\)", text, re.M), text
        assert _stage_done(text, "model_caller") == sum(done_each), text
        assert re.search(r"^ +collector: \d+\.\d\d/s  done \d+ ", text, re.M), text
        assert "last progress (running: 3 of 3 processes)" in text, text
        # the ETA of the combined rates covers every stage (each has a running process): no per-process scope
        assert "ETA " in text and "of the process that wrote it" not in text, text

        # one caller killed (no final record): the others go on, status tells it apart
        killed = callers[1]
        killed.send_signal(signal.SIGKILL)
        killed.wait(30)
        time.sleep(1.5)
        text = _status(cfgp)
        seen = _processes(text)
        assert seen[killed.pid][1].startswith("stopped without its final record (pid gone"), text
        assert seen[callers[0].pid][1].startswith("running"), text
        assert "processes: 2 running, 0 ended, 1 stopped without a final record" in text, text
        assert re.search(r"^ +model_caller: \d+\.\d\d/s  done \d+ .*\(2 processes, 1 running\)", text, re.M), text

        out, err = callers[0].communicate(timeout=120)
        assert callers[0].returncode == 0, err[-2000:]
        # the collector (--watch) drains what the callers answered, then is stopped
        deadline = time.monotonic() + 60
        while campaign_status(cfg)["queues"][C.EDGE_RESPONSES].ready:
            assert time.monotonic() < deadline
            time.sleep(0.3)
        time.sleep(1.5)
        text = _status(cfgp)
        seen = _processes(text)
        assert seen[callers[0].pid][1].startswith("ended"), text
        assert seen[collector.pid][1].startswith("running"), text
        collector.send_signal(signal.SIGINT)
        collector.communicate(timeout=60)
        text = _status(cfgp)
        seen = _processes(text)
        assert seen[collector.pid][1].startswith("ended") and seen[callers[0].pid][1].startswith("ended"), text
        assert "processes: 0 running, 2 ended, 1 stopped without a final record" in text, text
        # one was killed: no final record
        assert ("last progress (not running (every process of the last run has stopped, 1 of 3 without its final "
                "record; ") in text, text
        assert "ETA" not in text, text
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        server.terminate()
        server.wait(10)


def _record(pid: int, run_id: str, stages: list[dict], t: float, elapsed_s: float, **extra) -> dict:
    """A progress record as :meth:`geoagent.runtime.progress.Progress.snapshot` writes it."""
    base = {"t": t, "campaign": "hw", "elapsed_s": elapsed_s, "stages": stages,
            "queues": {"requests": {"ready": 30, "leased": 4, "done": 10, "dead": 0},
                       "responses": {"ready": 0, "leased": 0, "done": 10, "dead": 0}},
            "spend": None, "eta_s": None, "eta_stage": None, "eta_scope": ["model_caller"], "http": None,
            "host_labels": None, "budget_stopped": False, "finished": False, "pid": pid, "run_id": run_id}
    return {**base, **extra}


def _stage(name: str, done: int, rate: float, **extra) -> dict:
    return {"stage": name, "done": done, "failed": 0, "dead": 0, "missing": 0, "released": 0, "in_flight": 2,
            "held": 0, "rate_per_s": rate, "finished": False, "budget_stopped": False, "last_errors": [],
            "unreachable": {}, "resolved_errors": [], "input_edge": "requests", **extra}


def test_status_words_a_host_wait_of_one_process_while_another_goes_on(tmp_path):
    """Each process has its own breaker: one model caller waits for a model's host, the other does not (yet, or
    no more). ``status`` names the process that waits and says that the other does not, and gives no ETA."""
    cfgp = generic_campaign(tmp_path, name="hw", n=40, models=model_table())
    cfg = load_config(cfgp)
    state = Path(cfg.state_dir())
    now = time.time()
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        wait = {"model": "m", "host": "127.0.0.1:9", "since": now - 20, "next_probe_at": now + 12,
                "cause": "connection refused on 3 consecutive requests", "held": 7}
        waiting = _record(os.getpid(), "run-a", [_stage("model_caller", 5, 0.0, held=7, host_waits=[wait])],
                          now - 0.5, 30.0, eta_waiting=[{"host": "127.0.0.1:9", "stage": "model_caller", "model": "m"}])
        going = _record(other.pid, "run-b", [_stage("model_caller", 9, 3.5)], now - 0.2, 25.0, eta_s=9.0,
                        eta_stage="model_caller")
        append_jsonl(state / C.PROGRESS_FILE, [waiting, going], fsync=False)
        with run_lock(state):
            text = format_status(campaign_status(cfg))
    finally:
        other.kill()
        other.wait(10)
    assert ("model_caller: model m waiting for host 127.0.0.1:9 (" in text
            and f"7 task(s) held) in process pid {os.getpid()}; process pid {other.pid} (also model_caller) is not "
                "waiting for it" in text), text
    assert re.search(r"^ +model_caller: 3\.50/s  done 14 .*\(2 processes\)", text, re.M), text
    assert "ETA unknown while waiting for host 127.0.0.1:9 (model m)" in text, text


def test_read_processes_takes_the_processes_that_ran_together_not_the_runs_before(tmp_path):
    """The latest run is the last record's process plus those whose span (start to latest record) overlaps one
    counted; a run that started after the previous one ended stands alone; records without ``run_id`` (older
    versions) count as one process."""
    from geoagent.runtime.progress import read_processes

    f = tmp_path / "progress.jsonl"

    def rec(run_id, t, elapsed, **kw):
        return {"t": t, "elapsed_s": elapsed, "stages": [], **({"run_id": run_id} if run_id else {}), **kw}

    stream = [rec(None, 100.0, 10.0), rec(None, 110.0, 20.0, finished=True),  # an older version's run, 90..110
              rec("a", 200.0, 0.0), rec("b", 205.0, 2.0), rec("a", 210.0, 10.0, finished=True),  # a: 200..210
              rec("c", 230.0, 1.0),  # c: 229..; overlaps b (203..240) only
              rec("b", 240.0, 37.0), rec("c", 250.0, 21.0)]
    append_jsonl(f, stream, fsync=False)
    got = read_processes(f)
    assert [(r.get("run_id"), r["t"]) for r in got] == [("c", 250.0), ("b", 240.0), ("a", 210.0)]
    # a re-run after all of them ended: alone, as read_last gives it
    append_jsonl(f, [rec("d", 260.0, 1.0), rec("d", 262.0, 3.0, finished=True)], fsync=False)
    assert [(r.get("run_id"), r["t"]) for r in read_processes(f)] == [("d", 262.0)]
    g = tmp_path / "old.jsonl"
    append_jsonl(g, stream[:2], fsync=False)
    assert read_processes(g) == [stream[1]]
    assert read_processes(tmp_path / "absent.jsonl") == []


def _latest_by_pid(cfg) -> dict[int, dict]:
    f = Path(cfg.state_dir()) / C.PROGRESS_FILE
    out: dict[int, dict] = {}
    for line in (f.read_bytes().splitlines() if f.is_file() else []):
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if isinstance(rec, dict) and rec.get("pid"):
            out[int(rec["pid"])] = rec
    return out


def test_status_of_two_real_callers_one_waiting_for_a_model_host_the_other_not(tmp_path):
    """Two ``--stages model_caller --watch`` processes, each with its own breakers: the first finds the model
    ``dead``'s server down and holds its tasks, waiting for the host; the second, started later, has none of
    them to call and is not waiting. ``status`` (a real subprocess) names the waiting process, says that the
    other is not waiting, and gives no ETA."""
    n = 10
    good = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port",
                             str(good_port := free_port("127.0.0.1")), "--api-key", KEY], cwd=REPO)
    dead_host = f"127.0.0.1:{free_port('127.0.0.1')}"  # nothing listens there
    procs: list[subprocess.Popen] = []
    try:
        wait_ready(f"http://127.0.0.1:{good_port}")
        models = (model_table("good", base_url=f"http://127.0.0.1:{good_port}", key_var="SOS_KEY", model="sim-good")
                  + "max_attempts = 2\n"
                  + model_table("dead", base_url=f"http://{dead_host}", key_var="SOS_KEY", model="sim-dead") + "max_attempts = 2\n")
        cfgp = generic_campaign(tmp_path, name="hw2", n=n, cap_usd=1.0, models=models,
                                queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                                       "watch_probe_after_s": 120.0, "watch_probe_max_s": 120.0})
        cfg = load_config(cfgp)
        first = _run(cfgp, "--stages", "model_caller", "--watch")
        procs.append(first)
        deadline = time.monotonic() + 60
        while not any(w.get("model") == "dead" and w.get("held") == n
                      for sd in _latest_by_pid(cfg).get(first.pid, {}).get("stages", []) for w in sd.get("host_waits") or []):
            assert time.monotonic() < deadline and first.poll() is None, "the first caller did not wait for the host"
            time.sleep(0.2)
        second = _run(cfgp, "--stages", "model_caller", "--watch")
        procs.append(second)
        deadline = time.monotonic() + 60
        while second.pid not in _latest_by_pid(cfg):
            assert time.monotonic() < deadline and second.poll() is None, "the second caller wrote no record"
            time.sleep(0.2)
        time.sleep(1.5)
        text = _status(cfgp)
        assert re.search(
            rf"model_caller: model dead waiting for host {dead_host} \(next probe in \d+ s, at \d\d:\d\d:\d\d UTC; "
            rf"unreachable since [-\d: ]+ UTC: connection refused on \d+ consecutive requests; {n} task\(s\) held\) in "
            rf"process pid {first.pid}; process pid {second.pid} \(also model_caller\) is not waiting for it", text), text
        assert "processes: 2 running, 0 ended" in text, text
        assert f"ETA unknown while waiting for host {dead_host} (model dead)" in text, text
        assert re.search(rf"^ +model_caller: \d+\.\d\d/s  done {n} .*\(2 processes\)", text, re.M), text
        for p in procs:
            p.send_signal(signal.SIGINT)
            p.communicate(timeout=60)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(10)
        good.terminate()
        good.wait(10)


def test_process_state_tells_running_ended_killed_and_silent_processes_apart():
    from geoagent.status import SILENT_AFTER_S, process_state

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait(10)  # its pid is gone
    now = time.time()
    me = os.getpid()
    assert process_state({"pid": me, "t": now - 1, "finished": True}, True, now) == "ended"
    assert process_state({"pid": me, "t": now - 1}, True, now) == "running"
    assert process_state({"pid": gone.pid, "t": now - 1}, True, now) == "stopped"  # killed: no final record
    assert process_state({"pid": me, "t": now - 1}, False, now) == "stopped"  # nobody holds run.lock
    assert process_state({"pid": me, "t": now - SILENT_AFTER_S - 5}, True, now) == "silent"
    assert process_state({"t": now - 1}, True, now) == "running"  # a record without pid: by its age


def test_status_after_a_noop_rerun_of_a_scaled_out_campaign_merges_the_run_that_worked(tmp_path):
    """A re-run that finds nothing to do shows the figures of the last run that did work: of a scale-out run,
    every process's (the latest record with work used to be one process's only)."""
    from geoagent.runtime.progress import read_runs

    cfgp = generic_campaign(tmp_path, name="nw", n=30, models=model_table())
    cfg = load_config(cfgp)
    f = Path(cfg.state_dir()) / C.PROGRESS_FILE
    t = time.time() - 100
    worked = [_record(101, "a", [_stage("model_caller", 20, 4.0)], t + 10, 10.0, finished=True),
              _record(102, "b", [_stage("model_caller", 10, 2.0)], t + 11, 9.0, finished=True),
              _record(103, "c", [_stage("collector", 30, 6.0, input_edge="responses")], t + 12, 11.0, finished=True)]
    # a re-run that finds nothing to do: its queues are drained (one with work still queued is no no-op)
    drained = {"requests": {"ready": 0, "leased": 0, "done": 30, "dead": 0},
               "responses": {"ready": 0, "leased": 0, "done": 30, "dead": 0}}
    noop = _record(104, "d", [_stage("model_caller", 0, 0.0), _stage("collector", 0, 0.0)], t + 50, 1.0,
                   finished=True, queues=drained)
    append_jsonl(f, [*worked, noop], fsync=False)
    runs = read_runs(f)
    assert [[r["run_id"] for r in run] for run in runs] == [["d"], ["c", "b", "a"]]
    text = format_status(campaign_status(cfg))
    assert "no work left to do; the figures below are of the last run that did work" in text, text
    assert re.search(r"^ +model_caller: 6\.00/s  done 30 .*\(2 processes\)$", text, re.M), text
    assert re.search(r"^ +collector: 6\.00/s  done 30 ", text, re.M), text
    assert "last progress (run ended: all 3 processes)" in text and "processes: 0 running, 3 ended" in text, text
    assert {int(m.group(1)) for m in _PROC.finditer(text)} == {101, 102, 103}, text


def test_merged_eta_uses_the_running_processes_combined_rates():
    """Two callers at 2/s and 3/s with 50 requests queued: 10 s, not the 25 s or 16.7 s either process wrote;
    a killed caller's rate no longer counts (25 s); a stage no running process runs is named as not timed."""
    from geoagent.runtime.progress import merge_records
    from geoagent.runtime.queue import QueueCounts
    from geoagent.status import format_eta

    pipeline = [("model_caller", "requests", "responses"), ("collector", "responses", None)]
    counts = {"requests": QueueCounts(ready=46, leased=4, done=10), "responses": QueueCounts(done=10)}
    a = _record(1, "a", [_stage("model_caller", 4, 2.0)], 100.0, 5.0)
    b = _record(2, "b", [_stage("model_caller", 6, 3.0)], 100.5, 4.0)
    merged = merge_records([b, a], [True, True], pipeline=pipeline, counts=counts)
    assert merged["eta_s"] == 10.0 and merged["eta_stage"] == "model_caller"
    assert merged["eta_scope"] == ["model_caller"] and merged["eta_untimed"] == ["collector"]
    (mc,) = merged["stages"]
    assert (mc["done"], mc["rate_per_s"], mc["in_flight"], mc["pids"]) == (10, 5.0, 4, [2, 1])
    assert merged["elapsed_s"] == 5.5  # from the earliest start (95.0) to the newest record (100.5)
    one_killed = merge_records([b, a], [False, True], pipeline=pipeline, counts=counts)
    assert one_killed["eta_s"] == 25.0 and one_killed["stages"][0]["done"] == 10
    text = format_eta(merged)
    assert text.startswith("10 s (bounded by model_caller) [from the running processes' combined rates"), text
    assert "no running process for stage(s) collector: not timed" in text, text
