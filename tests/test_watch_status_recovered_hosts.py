"""``run --watch`` while it keeps running: what ``status`` says about hosts that were down.

Two gaps (session 8): (1) an error from a host that has since answered again stayed the "last error" until the
whole campaign was complete; now, as soon as the host answered a request after the error (its breaker's probe
got through, later calls succeeded), ``status`` lists it as ``earlier error (resolved: host H answered again at
HH:MM:SS UTC)`` while the run goes on, and an error of a host still down stays the ``last error``. (5) The ETA
read "0 s" while every task of a model was held waiting for its unreachable host; it now says the ETA is
unknown while waiting for that host.

End to end: the real engine, queues, model caller, HTTP client and OpenAI-compatible fakes; model ``good``
answers at once, ``flaky``'s server comes up on its port during the run, ``dead``'s never does.
``status`` reads the campaign's files as another process would (:func:`geoagent.status.campaign_status`).
"""

from __future__ import annotations

import re
import signal
import time

import anyio

from _model_harness import generic_campaign, model_table, paid_keys
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.progress import eta_waits, read_last
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import free_port, serve
from geoagent.status import campaign_status, format_eta, format_status
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 38, seed="sandbox-recover-n22")


def _model(name: str, base: str, rate: int = 5000) -> str:
    return model_table(name, base_url=base, key_var="GA_TEST_RECOVER_KEY", model=f"sim-{name}",
                       max_output_tokens=64, concurrency=4, rate_requests=rate) + "max_attempts = 2\n"


def _waiting_models(rec: dict) -> set[str]:
    return {w.get("model") for sd in rec.get("stages", []) for w in sd.get("host_waits") or []}


def _config(tmp_path, name: str, n: int, models: str):
    return load_config(generic_campaign(
        tmp_path, name=name, n=n, cap_usd=5.0, models=models,
        queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
               "watch_probe_after_s": 0.3, "watch_probe_max_s": 0.6}))


async def _watch_until(cfg, ready, seen: dict) -> None:
    """Run ``cfg`` in watch mode until ``ready(progress record)`` holds (60 s at most); keep that record and the
    ``status`` text of that moment in ``seen`` ("rec", "status"), then stop the run with SIGINT."""
    stream = cfg.state_dir() / "progress.jsonl"

    async def drive():
        with anyio.fail_after(60):
            while not ready(rec := read_last(stream) or {}):
                await anyio.sleep(0.05)
        seen["rec"] = rec
        seen["status"] = format_status(campaign_status(cfg))
        signal.raise_signal(signal.SIGINT)

    async with anyio.create_task_group() as tg:
        tg.start_soon(drive)
        await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)


def _lines(text: str, start: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith(start)]


def test_watch_eta_is_unknown_while_a_models_tasks_wait_for_its_host_not_0_s(tmp_path, monkeypatch):
    n = 8
    monkeypatch.setenv("GA_TEST_RECOVER_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    dead = f"127.0.0.1:{free_port()}"
    seen: dict[str, object] = {}

    async def main():
        async with serve(good_app) as good_base:
            cfg = _config(tmp_path, "etawait", n, _model("good", good_base) + _model("dead", f"http://{dead}"))
            await _watch_until(cfg, lambda rec: len(paid_keys(good_app)) == n and _waiting_models(rec)
                               and rec["queues"]["requests"]["done"] == n, seen)

    anyio.run(main)
    # every task of model dead is held for its unreachable host: the ETA is unknown, never "0 s"
    rec = seen["rec"]
    assert rec["eta_s"] is None and rec["eta_waiting"] == [{"host": dead, "stage": "model_caller", "model": "dead"}]
    assert format_eta(rec) == f"unknown while waiting for host {dead} (model dead)"
    text = seen["status"]
    assert "ETA 0 s" not in text and f"ETA unknown while waiting for host {dead} (model dead)" in text, text
    # a stage runner's own breaker waiting in watch mode counts too; the final record waits for nothing
    stage_wait = {"stage": "geocoder", "unreachable": {"h:1": {"requests": 5, "last": "x", "next_probe_in_s": 3.0}}}
    assert eta_waits([stage_wait]) == [{"host": "h:1", "stage": "geocoder", "model": None}]
    assert format_eta({"eta_s": None, "eta_waiting": eta_waits([stage_wait])}) == \
        "unknown while waiting for host h:1 (stage geocoder)"
    assert eta_waits([{"stage": "geocoder", "unreachable": {"h:1": {"requests": 5, "last": "x"}}}]) == []


def test_watch_status_marks_a_recovered_hosts_error_resolved_while_the_campaign_runs(tmp_path, monkeypatch):
    n = 12  # requests per model; good is rate-limited (2/s), so the campaign is still running once flaky is back
    monkeypatch.setenv("GA_TEST_RECOVER_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    flaky_app = llm_openai.make_app(api_keys=[KEY])
    flaky_port = free_port()
    flaky = f"127.0.0.1:{flaky_port}"
    seen: dict[str, object] = {}

    async def main():
        async with serve(good_app) as good_base:
            cfg = _config(tmp_path, "recover", n, _model("good", good_base, rate=2) + _model("flaky", f"http://{flaky}"))
            stream = cfg.state_dir() / "progress.jsonl"
            out: dict[str, object] = {}

            async def drive():
                rec: dict = {}
                with anyio.move_on_after(60):  # flaky's host is down: its tasks are held
                    while _waiting_models(rec := read_last(stream) or {}) != {"flaky"}:
                        await anyio.sleep(0.05)
                if _waiting_models(rec) != {"flaky"}:
                    # a rare flake (once in a full CI run beside helper jobs, session 46; not reproduced in 30 runs
                    # at -n 4): what the last record said, and how old it was, so the next failure says where it stood
                    age = time.time() - float(rec.get("t") or 0)
                    stages = [(sd.get("stage"), sd.get("host_waits"), sd.get("last_errors"))
                              for sd in rec.get("stages", [])]
                    raise AssertionError(f"flaky's wait not in the progress record in 60 s: last record {age:.1f} s "
                                         f"old, queues {rec.get('queues')}, stages {stages}")
                seen["status_down"] = format_status(campaign_status(cfg))
                async with serve(flaky_app, "127.0.0.1", flaky_port):  # flaky's server comes up
                    with anyio.fail_after(60):
                        while not (len(paid_keys(flaky_app)) == n
                                   and not _waiting_models(rec := read_last(stream) or {})
                                   and rec["queues"]["requests"]["done"] >= n + 1):
                            await anyio.sleep(0.05)
                    seen["back"] = rec
                    seen["status_back"] = format_status(campaign_status(cfg))
                    seen["good_paid"] = len(paid_keys(good_app))
                    signal.raise_signal(signal.SIGINT)
                    with anyio.fail_after(60):
                        while "outcome" not in out:
                            await anyio.sleep(0.02)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                out["outcome"] = await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)

    anyio.run(main)
    assert seen["good_paid"] < n, "good finished before flaky was back: the campaign was not running any more"
    # while flaky's host is down, its outage is the last error
    down = seen["status_down"]
    assert any(flaky in ln for ln in _lines(down, "last error:")), down
    # flaky's host answered again: its errors are resolved although the campaign is still running
    text = seen["status_back"]
    assert "campaign complete" not in text, text
    assert not any(flaky in ln for ln in _lines(text, "last error:")), text
    resolved = _lines(text, "earlier error (resolved")
    assert resolved and all(re.match(rf"earlier error \(resolved: host {re.escape(flaky)} answered again at "
                                     r"\d\d:\d\d:\d\d UTC\): ", ln) for ln in resolved), text
    # the progress record says so (the live display and other readers use it)
    mc = {sd["stage"]: sd for sd in seen["back"]["stages"]}["model_caller"]
    assert not any(flaky in e for e in mc["last_errors"]), mc
    assert mc["resolved_errors"] and {r["host"] for r in mc["resolved_errors"]} == {flaky}, mc


def test_split_resolved_errors_keeps_dead_letters_hostless_and_recurring_errors_open():
    """Hand-traced: which of a stage's last errors a host's answer resolves."""
    from geoagent.runtime.http import PermanentHTTPError, RetriesExhausted
    from geoagent.runtime.worker import StageStats, error_host, split_resolved_errors

    exc = RetriesExhausted("http://geo.example:8080/w/api.php", 3, "http 503")
    assert error_host(exc, "") == "geo.example:8080"
    assert error_host(None, "CallFailed: host 127.0.0.1:8001 unreachable after 1 attempts") == "127.0.0.1:8001"
    assert error_host(None, "Missing: 3 attempts to https://api.example.org/v1/x failed") == "api.example.org"
    assert error_host(None, "ParseError: no JSON object in the answer") is None
    # a refused key is not the host's trouble, even with the 401 answer's URL behind it
    try:
        try:
            raise PermanentHTTPError(401, "http://api.example.org/v1/chat", "bad key")
        except PermanentHTTPError:
            raise RuntimeError("CallFailed: HTTP 401: bad key") from None
    except RuntimeError as hidden:
        assert error_host(hidden, str(hidden)) is None
    assert error_host(PermanentHTTPError(403, "http://api.example.org/v1/x", "no"), "HTTP 403 from ...") is None

    st = StageStats("geocoder")
    st.note_error("RetriesExhausted: 3 attempts to http://geo.example:8080/w failed", "geo.example:8080")
    st.note_error("Missing: retries exhausted: http 503", "geo.example:8080", dead=True)
    st.note_error("ParseError: no JSON object")
    import time as _time

    _time.sleep(0.01)
    t_answer = _time.time()  # the host answered after those errors
    still, resolved = split_resolved_errors(st, {"geo.example:8080": t_answer})
    # the retried error is resolved by the later answer; the dead letter (its task stays missing) and the
    # error of no host stay open
    assert [r["error"] for r in resolved] == ["RetriesExhausted: 3 attempts to http://geo.example:8080/w failed"]
    assert resolved[0]["host"] == "geo.example:8080" and resolved[0]["answered_at"] == round(t_answer, 3)
    assert still == ["Missing: retries exhausted: http 503", "ParseError: no JSON object"]
    # the same error again after that answer: open again (its time moved on), even though it is not re-listed
    _time.sleep(0.01)
    st.note_error("RetriesExhausted: 3 attempts to http://geo.example:8080/w failed", dedupe=True)
    assert list(st.last_errors).count("RetriesExhausted: 3 attempts to http://geo.example:8080/w failed") == 1
    still, resolved = split_resolved_errors(st, {"geo.example:8080": t_answer})
    assert resolved == [] and len(still) == 3
    # a breaker that closed (its probe got through) resolves its host's errors without the HTTP figures
    st.host_ok_at["geo.example:8080"] = _time.time() + 1.0
    assert [r["error"] for r in split_resolved_errors(st, {})[1]] == [
        "RetriesExhausted: 3 attempts to http://geo.example:8080/w failed"]


def test_stage_runner_breaker_closing_resolves_its_hosts_errors_in_the_progress_record(tmp_path):
    """The stage runner's own breaker (a stage other than the model caller, e.g. the geocoder or a crawl
    stage): once its half-open probe got through, the record written by :class:`Progress` (here without HTTP
    figures, so the breaker's own closing time decides) lists the host's errors as resolved, not as last
    errors, and ``status`` words them so while the run goes on."""
    from geoagent.runtime.daemon import open_edge_queues, run_pipeline
    from geoagent.runtime.http import HttpClient
    from geoagent.runtime.progress import Progress
    from geoagent.runtime.stage import StageContext
    from test_runtime_unreachable_host import FAST, Fetch, Sink, _app

    port = free_port()
    host = f"127.0.0.1:{port}"
    stream = tmp_path / "state" / "progress.jsonl"
    seen: dict[str, object] = {}

    async def main():
        stages = [Fetch(f"http://{host}/x"), Sink()]
        queues = open_edge_queues(tmp_path / "q", "w", stages, backoff_base_s=0.0, backoff_max_s=0.0, max_attempts=5)
        progress = Progress(stream, live=False)
        views: list = []
        try:
            await queues["a"].put_many([(f"k{i}", {"i": i}) for i in range(4)])
            async with HttpClient(default_policy=FAST) as http, anyio.create_task_group() as tg:
                async def drive():
                    rec: dict = {}
                    with anyio.move_on_after(30):
                        while not ((rec := read_last(stream) or {}).get("stages")
                                   and rec["stages"][0].get("unreachable")):
                            await anyio.sleep(0.02)
                    if not (rec.get("stages") and rec["stages"][0].get("unreachable")):
                        # a rare flake (once in seven full CI runs, session 45; not reproduced alone or under load):
                        # what the runner and the client had done, so the next failure says where it stood
                        counts = {e: await q.counts() for e, q in queues.items()}
                        raise AssertionError(
                            f"no unreachable breaker in 30 s: fetch handled {stages[0].calls} requests; client streak "
                            f"{http.unreachable_streak(host)}; queue counts {counts}; last record's fetch stage "
                            f"{(rec.get('stages') or [{}])[0]}")
                    seen["down"] = rec
                    async with serve(_app(), "127.0.0.1", port):
                        with anyio.fail_after(30):
                            while not ((r := read_last(stream) or {}).get("queues", {}).get("a", {}).get("done") == 4
                                       and not r["stages"][0].get("unreachable")):
                                await anyio.sleep(0.02)
                        seen["back"] = r
                        for runner in views:
                            runner.request_stop()

                async def tick(view):
                    views[:] = view.runners
                    await progress(view)

                tg.start_soon(drive)
                await run_pipeline("w", stages, queues, StageContext("w", {"http": http}), burst=False, tick=tick,
                                   tick_interval_s=0.05, handle_signals=False, grace_s=1.0,
                                   runner_options={"unreachable_after": 2, "probe_after_s": 0.3, "probe_max_s": 0.3})
        finally:
            for q in queues.values():
                await q.close()

    anyio.run(main)
    down = seen["down"]["stages"][0]
    assert any(f"host {host} unreachable" in e for e in down["last_errors"]) and down["resolved_errors"] == []
    back = seen["back"]["stages"][0]
    assert not any(host in e for e in back["last_errors"]), back
    assert back["resolved_errors"] and {r["host"] for r in back["resolved_errors"]} == {host}, back
    # `status` of the running campaign (queue a still has work, so it is not complete)
    running = {"campaign": "w", "queues": {}, "progress": {**seen["back"], "finished": False}, "running": True}
    text = format_status(running)
    assert not any(host in ln for ln in _lines(text, "last error:")), text
    assert any(ln.startswith(f"earlier error (resolved: host {host} answered again at ")
               for ln in _lines(text, "earlier error")), text


def test_a_refused_key_stays_the_last_error_while_its_host_answers_the_other_model(tmp_path, monkeypatch):
    """Not every error of a host is resolved by the host answering: a model's refused API key (its
    authentication breaker holds its tasks) is about the key, not the host, so while the same server answers
    another model's calls it stays the ``last error`` and ``status`` keeps saying that authentication failed."""
    n = 10
    monkeypatch.setenv("GA_TEST_RECOVER_KEY", KEY)
    monkeypatch.setenv("GA_TEST_WRONG_KEY", made_up_key("sk-", 32, seed="wrong-n26"))
    app = llm_openai.make_app(api_keys=[KEY])
    seen: dict[str, object] = {}

    async def main():
        async with serve(app) as base:
            bad = model_table("bad", base_url=base, key_var="GA_TEST_WRONG_KEY", model="sim-bad", max_output_tokens=64,
                              concurrency=4, rate_requests=5000) + "max_attempts = 2\n"
            cfg = _config(tmp_path, "authheld", n, _model("good", base, rate=3) + bad)
            # the bad key is refused (breaker open) and good has answers since
            await _watch_until(cfg, lambda rec: bool(rec.get("stages")) and any(sd.get("held") for sd in rec["stages"])
                               and rec["queues"]["requests"]["done"] >= 3, seen)

    anyio.run(main)
    mc = {sd["stage"]: sd for sd in seen["rec"]["stages"]}["model_caller"]
    assert any("authentication failed for model bad" in e for e in mc["last_errors"]), mc
    # nor the refusals before the breaker opened (retried "HTTP 401" answers): the host answering good's calls
    # says nothing about bad's key
    assert not any("authentication failed" in r["error"] or "HTTP 401" in r["error"]
                   for r in mc["resolved_errors"]), mc
    text = seen["status"]
    assert "authentication failed (see last error)" in text, text
    assert any("authentication failed for model bad" in ln for ln in _lines(text, "last error:")), text
