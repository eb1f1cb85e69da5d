"""``status`` (another process) says that a ``run --watch`` campaign waits for an unreachable host, and stops saying
it once the host is back.

Two breakers wait for a host in watch mode: the model caller's per-host breaker (its model's tasks are held while
the host is probed after growing cool-downs; geoagent.workers.model_caller, "Unreachable-host breaker") and the
stage runner's breaker (the whole stage waits; geoagent.runtime.worker, "Unreachable hosts"). The running process
records each wait in its progress stream (``state/<campaign>/progress.jsonl``: when the host became unreachable,
when it is probed next, how many tasks wait); ``status`` words it per model / stage:
``model_caller: model dead waiting for host H (next probe in S s, at HH:MM:SS UTC; unreachable since T: ...;
N task(s) held)``.

End to end: the real engine, queues, HTTP client and the OpenAI-compatible fake on a port that is first closed,
then bound; ``status`` is run as a real subprocess (``python run.py status CONFIG``) while the campaign runs.
"""

from __future__ import annotations

import calendar
import re
import signal
import sys
import time
from pathlib import Path

import anyio

from _model_harness import generic_campaign, model_table, paid_keys
from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.runtime.daemon import open_edge_queues, run_pipeline
from geoagent.runtime.http import HttpClient
from geoagent.runtime.progress import Progress, read_last
from geoagent.runtime.stage import StageContext
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import free_port, serve
from geoagent.status import format_status, stop_reason
from test_runtime_unreachable_host import FAST, Fetch, Sink, _app
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]
KEY = made_up_key("sk-", 36, seed="sandbox-waits-n22")
COOLDOWN_S = 8.0  # [queue] watch_probe_after_s = watch_probe_max_s
_MODEL_WAIT = re.compile(
    r"model_caller: model dead waiting for host (?P<host>\S+) \(next probe in (?P<in_s>\d+) s, at "
    r"(?P<at>\d\d:\d\d:\d\d) UTC; unreachable since (?P<since>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d) UTC: connection "
    r"refused on (?P<streak>\d+) consecutive requests; (?P<held>\d+) task\(s\) held\)")


def _model(name: str, base: str) -> str:
    return model_table(name, base_url=base, key_var="GA_TEST_WAITS_KEY", model=f"sim-{name}", max_output_tokens=64,
                       concurrency=4, rate_requests=5000) + "max_attempts = 2\n"


def _utc_s(text: str) -> float:
    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M:%S")))


async def _status(cfg_path: Path) -> str:
    """``python run.py status CONFIG`` in a subprocess (as from another terminal); its stdout."""
    proc = await anyio.run_process([sys.executable, "run.py", "status", str(cfg_path)], cwd=REPO, check=False)
    assert proc.returncode == 0, proc.stderr.decode()
    return proc.stdout.decode()


def test_status_subprocess_shows_the_model_waiting_for_its_host_then_not_once_it_is_back(tmp_path, monkeypatch):
    n = 12  # requests per model
    monkeypatch.setenv("GA_TEST_WAITS_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    dead_app = llm_openai.make_app(api_keys=[KEY])
    port = free_port()
    host = f"127.0.0.1:{port}"
    seen: dict[str, object] = {}
    t_start = time.time()

    async def main():
        async with serve(good_app) as good_base:
            cfg_path = generic_campaign(tmp_path, name="waits", n=n, cap_usd=5.0,
                                        models=_model("good", good_base) + _model("dead", f"http://{host}"),
                                        queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
                                               # a cool-down long enough to be seen counting down
                                               # (and no probe in flight while status runs, on a loaded machine)
                                               "watch_probe_after_s": COOLDOWN_S,
                                               "watch_probe_max_s": COOLDOWN_S})
            cfg = load_config(cfg_path)
            progress_file = cfg.state_dir() / C.PROGRESS_FILE
            out: dict[str, object] = {}

            def last_record() -> dict:
                return read_last(progress_file) or {}

            def waits_in(rec: dict) -> list:
                return [w for sd in rec.get("stages", []) for w in sd.get("host_waits") or []]

            async def drive():
                # the good model is done and every dead-model task is held by the open breaker
                with anyio.fail_after(60):
                    while not (len(paid_keys(good_app)) == n and any(
                            w.get("held") == n for w in waits_in(last_record()))):
                        await anyio.sleep(0.05)
                seen["record"] = last_record()
                seen["waiting_text"] = await _status(cfg_path)
                seen["status_at"] = time.time()
                seen["dead_calls_during_outage"] = len(dead_app["calls"])
                async with serve(dead_app, "127.0.0.1", port):  # the model server comes up on its port
                    with anyio.fail_after(60):  # every task done, and a record written after that
                        while not (last_record().get("queues", {}).get(C.EDGE_REQUESTS, {}).get("done") == 2 * n
                                   and not waits_in(last_record())):
                            await anyio.sleep(0.05)
                    seen["back_text"] = await _status(cfg_path)
                    signal.raise_signal(signal.SIGINT)  # Ctrl-C to the watching process
                    with anyio.fail_after(60):
                        while "outcome" not in out:
                            await anyio.sleep(0.02)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                out["outcome"] = await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)
            return out["outcome"]

    outcome = anyio.run(main)
    assert outcome.status == "complete" and outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    assert seen["dead_calls_during_outage"] == 0
    # the record as written: one wait, of model dead on its host, with every one of its n tasks held
    rec = seen["record"]
    waits = [w for sd in rec["stages"] for w in sd.get("host_waits") or []]
    assert len(waits) == 1 and waits[0]["model"] == "dead" and waits[0]["host"] == host and waits[0]["held"] == n
    assert t_start - 1 <= waits[0]["since"] <= rec["t"] <= waits[0]["next_probe_at"] <= rec["t"] + COOLDOWN_S + 0.5
    # status, from another process: the model waits for its host, with when and how many
    text = seen["waiting_text"]
    m = _MODEL_WAIT.search(text)
    assert m is not None, text
    assert m["host"] == host and int(m["held"]) == n and int(m["streak"]) >= 1
    since = _utc_s(m["since"])
    assert t_start - 1 <= since <= seen["status_at"]
    # "next probe in S s" counts from the status process's clock to the recorded probe time
    assert 0 <= int(m["in_s"]) <= COOLDOWN_S
    at = _utc_s(time.strftime("%Y-%m-%d ", time.gmtime(waits[0]["next_probe_at"])) + m["at"])
    assert abs(at - waits[0]["next_probe_at"]) <= 1.0
    # the vaguer line it replaces is not printed next to it
    assert "a model's host unreachable (see last error)" not in text
    # once the host answered and the held tasks ran: no waiting line any more
    back = seen["back_text"]
    assert "waiting for host" not in back and "unreachable since" not in back, back
    assert f"done {2 * n:>8}" in back


def test_status_says_the_stage_waits_for_its_host_from_the_progress_stream_then_not(tmp_path):
    """The stage runner's own breaker (a stage that is not the model caller): the record written by
    :class:`Progress` carries when the host became unreachable and the next probe's time; ``status`` adds how many
    tasks wait queued on the stage's input edge."""
    port = free_port()
    host = f"127.0.0.1:{port}"
    fetch = Fetch(f"http://{host}/x")
    n_tasks = 5
    seen: dict[str, object] = {}
    stream = tmp_path / "state" / "progress.jsonl"
    t_start = time.time()

    async def main():
        stages = [fetch, Sink()]
        queues = open_edge_queues(tmp_path / "q", "w", stages, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=5)
        progress = Progress(stream, live=False)
        try:
            await queues["a"].put_many([(f"k{i}", {"i": i}) for i in range(n_tasks)])
            async with HttpClient(default_policy=FAST) as http, anyio.create_task_group() as tg:
                async def drive():
                    with anyio.fail_after(30):
                        while not ((rec := read_last(stream) or {}).get("stages")
                                   and rec["stages"][0].get("unreachable")):
                            await anyio.sleep(0.02)
                    seen["record"] = rec
                    seen["now"] = time.time()
                    async with serve(_app(), "127.0.0.1", port):
                        with anyio.fail_after(30):
                            while not ((r := read_last(stream) or {}).get("queues", {}).get("a", {}).get("done")
                                       == n_tasks and not r["stages"][0].get("unreachable")):
                                await anyio.sleep(0.02)
                        seen["back"] = r
                        for runner in views:
                            runner.request_stop()

                views = []

                async def tick(view):
                    views[:] = view.runners
                    await progress(view)

                tg.start_soon(drive)
                await run_pipeline("w", stages, queues, StageContext("w", {"http": http}), burst=False, tick=tick,
                                   tick_interval_s=0.05, handle_signals=False, grace_s=1.0,
                                   runner_options={"unreachable_after": 2, "probe_after_s": 3.0, "probe_max_s": 3.0})
        finally:
            for q in queues.values():
                await q.close()

    anyio.run(main)
    rec = seen["record"]
    info = rec["stages"][0]["unreachable"][host]
    assert rec["stages"][0]["input_edge"] == "a"
    assert t_start - 1 <= info["since"] <= rec["t"]
    # the next probe is the cool-down (3 s) after the breaker opened, just after "since"; not bounded by the record's
    # time: on a loaded machine the first record that shows the wait was read after the probe time had passed (a
    # full CI run beside other jobs, session 44: t 1.5 s past next_probe_at)
    assert info["since"] + 3.0 <= info["next_probe_at"] <= info["since"] + 3.0 + 2.0
    reason = stop_reason(rec, now=seen["now"])
    # nothing can be done while the host is down: every task waits, ready or leased (the probe)
    queued = rec["queues"]["a"]["ready"] + rec["queues"]["a"]["leased"]
    assert queued == n_tasks and rec["queues"]["a"]["done"] == 0
    assert re.fullmatch(
        rf"fetch: waiting for host {re.escape(host)} \(next probe in [0-3] s, at \d\d:\d\d:\d\d UTC; unreachable since "
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC: connection refused on 2 consecutive requests; {queued} task\(s\) "
        r"queued on a\)", reason), reason
    # the same record read after the process was killed (no final record, no run.lock held): no present tense
    gone = format_status({"campaign": "w", "queues": {}, "progress": rec, "running": False})
    assert "waiting for host" not in gone and f"host {host} unreachable" in gone
    back = seen["back"]
    assert stop_reason(back, now=time.time()) is None


def test_host_breaker_waiting_records_each_model_of_an_open_host_in_watch_mode_only():
    from geoagent.workers.model_caller import HostBreaker

    b = HostBreaker(threshold=1)
    b.configure(watch=True, probe_after_s=30.0, probe_max_s=60.0)
    b.set_host("a", "h:1")
    b.set_host("b", "h:1")
    b.set_host("c", "h:2")
    assert b.waiting() == []  # nothing open
    t0 = time.time()
    b.failure("a", "h:1", 1, "connection: Connect call failed")
    for key, model in [("k1", "a"), ("k2", "a"), ("k3", "b")]:
        b.hold(model, key)
    waits = b.waiting()
    assert [(w["model"], w["host"], w["held"], w["probing"]) for w in waits] == [("a", "h:1", 2, False),
                                                                               ("b", "h:1", 1, False)]
    assert all(w["cause"] == "connection refused on 1 request" for w in waits)
    assert t0 - 0.001 <= waits[0]["since"] <= time.time() + 0.001  # recorded to the millisecond
    assert 30.0 - 0.5 <= waits[0]["next_probe_at"] - t0 <= 30.0 + 0.5  # the first cool-down, in Unix time
    b.next_probe_at["h:1"] = 0.0  # the cool-down is over: a probe goes out
    assert b.try_probe("b", "k3") and all(w["probing"] for w in b.waiting())
    b.probe_done("b", True)  # the host answered: nobody waits any more
    assert b.waiting() == []
    burst = HostBreaker(threshold=1)  # a burst run never probes: it does not wait, it stops (report_lines)
    burst.set_host("a", "h:1")
    burst.failure("a", "h:1", 1, "connection: refused")
    assert burst.is_open("a") is not None and burst.waiting() == []


def test_stop_reason_words_model_waits_while_running_probing_and_after_the_process_died():
    since = _utc_s("2026-12-01 05:40:00")
    wait = {"model": "dead", "host": "127.0.0.1:9", "since": since, "next_probe_at": since + 90.0, "probing": False,
            "held": 7, "cause": "DNS lookup failed on 5 consecutive requests"}
    stage = {"stage": "model_caller", "held": 7, "host_waits": [wait],
             "last_errors": ["HostStop: model dead: host 127.0.0.1:9 unreachable (...)"]}
    record = {"t": since + 60.0, "stages": [stage]}
    # 20 s after the record was written, 10 s before the probe
    assert stop_reason(record, now=since + 80.0) == (
        "model_caller: model dead waiting for host 127.0.0.1:9 (next probe in 10 s, at 05:41:30 UTC; unreachable "
        "since 2026-12-01 05:40:00 UTC: DNS lookup failed on 5 consecutive requests; 7 task(s) held)")
    # past the probe time, with the probe on its way
    probing = {**record, "stages": [{**stage, "host_waits": [{**wait, "probing": True}]}]}
    assert "(next probe in 0 s (a probe is in flight); unreachable since" in stop_reason(probing, now=since + 95.0)
    # no process holds the run lock any more: the wait is over, worded in the past
    assert stop_reason(record, now=since + 80.0, running=False) == (
        "model_caller: model dead: host 127.0.0.1:9 unreachable since 2026-12-01 05:40:00 UTC: DNS lookup failed on "
        "5 consecutive requests, when the run stopped; re-run to resume (its held tasks are redelivered)")
    # without a wait record: a burst run, which holds the model's tasks (host_holds) and names the model
    hold = {"model": "dead", "host": "127.0.0.1:9", "since": since, "held": 7, "cause": "..."}
    plain = {"stages": [{**stage, "host_waits": [], "host_holds": [hold]}]}
    # the model named, not "see last error": the last error may be another model's (walk28 status walkthrough)
    assert stop_reason(plain) == ("a model's host unreachable (model dead: host 127.0.0.1:9 unreachable (...)): that "
                                  "model's tasks are held, the other models' go on")
    # the ETA of a burst run is its own end's: the held tasks are left queued, not timed
    from geoagent.status import format_eta

    eta = format_eta({**plain, "eta_s": 12.0, "eta_stage": "model_caller"})
    assert eta == ("12 s (bounded by model_caller); not timed: the held tasks of model dead: host 127.0.0.1:9 "
                   "unreachable (...) (left queued at the end; re-run to resume)"), eta
    assert format_eta({**plain, "eta_s": 0.0, "finished": True}) == "0 s"
    # another model's later errors push nothing aside: the held model is still the one named, also once five
    # later errors have pushed its HostStop line out of the stage's last errors (they keep the 5 latest)
    other = {"stages": [{**stage, "host_waits": [], "host_holds": [hold],
                         "last_errors": [f"HTTP 400 (model good): bad {i}" for i in range(5)]}]}
    assert "(model dead: host 127.0.0.1:9 unreachable (...)): that model's tasks" in stop_reason(other)
    # an older stream (no host_holds): no model is named from message text, nothing is made up
    old = {"stages": [{**stage, "host_waits": []}]}
    assert stop_reason(old) is None and format_eta({**old, "eta_s": 3.0}) == "3 s"


def test_a_long_reason_is_cut_with_a_mark():
    """Walk28 status walkthrough: last-error lines were cut at 160 characters mid-word, without a sign of it."""
    from geoagent.status import REASON_CHARS, clip_reason

    long = "HostStop: model dead: host 127.0.0.1:9 unreachable (connection refused on 5 consecutive requests); " \
           "check [[models]] base_url of 'dead' / is the server running?; its requests are held unsent"
    assert clip_reason(long) == long  # 190 characters: whole now
    longer = long + " " + "x" * 300
    cut = clip_reason(longer)
    assert len(cut) <= REASON_CHARS and cut.endswith(" [...]") and cut.startswith(long)
    assert clip_reason(None) == ""


def test_held_models_wording_several_killed_and_watch_mode():
    """Walk28 break review: several held models read "that model's tasks"; a killed burst run still said "are held,
    the other models' go on"; a watch-mode wait was also called "left queued at the end" by the ETA."""
    from geoagent.status import format_eta, held_host_models

    holds = [{"model": "a", "host": "h1:1", "since": 0.0, "held": 4, "cause": "x"},
             {"model": "b", "host": "h2:2", "since": 1.0, "held": 5, "cause": "y"},
             {"model": "c", "host": "h2:2", "since": 1.0, "held": 0, "cause": "y"}]
    rec = {"stages": [{"stage": "model_caller", "held": 9, "host_waits": [], "host_holds": holds, "last_errors": []}]}
    assert held_host_models(rec) == ["model a: host h1:1 unreachable (x)", "models b, c: host h2:2 unreachable (y)"]
    assert stop_reason(rec) == ("models' hosts unreachable (model a: host h1:1 unreachable (x); models b, c: host h2:2 "
                                "unreachable (y)): those models' tasks are held, the other models' go on")
    assert stop_reason(rec, running=False).endswith("those models' tasks were left queued, re-run to resume")
    # watch mode: the waits are the ETA's "waiting for", never "left queued at the end"
    wait = {"model": "a", "host": "h1:1", "since": 0.0, "next_probe_at": 90.0, "held": 9}
    watch = {"stages": [{**rec["stages"][0], "host_waits": [wait], "host_holds": holds[:1]}], "eta_s": 5.0}
    assert held_host_models(watch) == [] and "left queued" not in format_eta(watch)


def test_host_breaker_holding_records_each_model_of_an_open_host_in_a_burst_run_only():
    """Session 29's note: status read a burst run's held models back out of the HostStop message text, and lost
    them once later errors pushed that message out of the 5 last errors; the breaker now reports them as data."""
    from geoagent.workers.model_caller import HostBreaker

    b = HostBreaker(threshold=1)
    for model, host in [("a", "h:1"), ("b", "h:1"), ("c", "h:2")]:
        b.set_host(model, host)
    assert b.holding() == []  # nothing open
    t0 = time.time()
    b.failure("a", "h:1", 1, "connection: Connect call failed")
    for key, model in [("k1", "a"), ("k2", "a"), ("k1", "a")]:  # a task held twice counts once
        b.hold(model, key)
    holds = b.holding()
    assert [(h["model"], h["host"], h["held"], h["cause"]) for h in holds] == [
        ("a", "h:1", 2, "connection refused on 1 request"), ("b", "h:1", 0, "connection refused on 1 request")]
    assert t0 - 0.001 <= holds[0]["since"] <= time.time() + 0.001
    assert "Connect call failed" not in repr(holds)  # words, no error text copied
    watch = HostBreaker(threshold=1)  # watch mode reports the same models as waits (waiting), not holds
    watch.configure(watch=True)
    watch.set_host("a", "h:1")
    watch.failure("a", "h:1", 1, "connection: refused")
    watch.hold("a", "k1")
    assert watch.holding() == [] and [w["model"] for w in watch.waiting()] == ["a"]


def test_merged_records_sum_each_models_holds_over_the_processes_that_count():
    """Two ``--stages model_caller`` processes of a burst run each hold tasks of the same dead model: the merged
    record has one entry per model and host, ``held`` summed, with the processes that report it."""
    from geoagent.runtime.progress import merge_records
    from geoagent.status import held_host_models

    def rec(pid, held, t):
        hold = {"model": "dead", "host": "h:9", "since": 100.0, "held": held, "cause": "connection refused on 5 "
                "consecutive requests"}
        return {"t": t, "pid": pid, "started": 90.0, "campaign": "c", "finished": False,
                "stages": [{"stage": "model_caller", "held": held, "host_holds": [hold], "last_errors": [],
                            "done": 1, "rate_per_s": 0.0}]}

    merged = merge_records([rec(1, 3, 110.0), rec(2, 4, 111.0)], [True, True], now=111.0)
    (sd,) = merged["stages"]
    assert sd["held"] == 7 and sd["host_holds"] == [{"model": "dead", "host": "h:9", "since": 100.0, "held": 7,
                                                     "cause": "connection refused on 5 consecutive requests",
                                                     "pids": [1, 2]}]
    assert held_host_models(merged) == ["model dead: host h:9 unreachable (connection refused on 5 consecutive "
                                        "requests)"]
