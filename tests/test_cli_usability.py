"""What a first-time user of the CLI (``run.py``) tripped over, one test per point.

* the ETA covers the whole pipeline, not only the model-calling stage;
* ``dead --edge`` filters the listing, an unknown edge is refused, a truncated listing says so;
* output piped into ``head`` ends quietly (no BrokenPipeError traceback);
* ``status`` lists queues in pipeline order, prints money in one format, says when a campaign is complete;
* ``--help`` documents every argument and the exit codes, under the invoked program's name;
* an unknown ``--stages`` name is one plain sentence;
* an interrupted run says how to resume, the signal line says what Ctrl-C does, a re-run says what it reused.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import EXIT_CODES_EPILOG, build_parser, main
from geoagent.config import load_config
from geoagent.runtime.progress import pipeline_eta
from geoagent.runtime.queue import QueueCounts
from geoagent.status import campaign_status, format_status, format_usd
from _docs import docs_text
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]
KEY = made_up_key("sk-", 30, seed="cli-usability-n16")


def _config(tmp: Path, *, n: int = 5, name: str = "cliu", base_url: str | None = None, rate: int = 2000) -> Path:
    return generic_campaign(tmp, name=name, n=n, cap_usd=1.0,
                            models=model_table(base_url=base_url, key_var="CLIU_KEY", rate_requests=rate))


def _ledger_calls(tmp: Path, name: str = "cliu") -> int:
    import sqlite3

    with sqlite3.connect(tmp / "state" / name / C.CAMPAIGN_DB) as conn:
        return conn.execute("SELECT calls FROM ledger_totals WHERE id = 1").fetchone()[0]


# -- 1. ETA of the whole pipeline ------------------------------------------------------------------------

GEOHINT = [("model_caller", "requests", "responses"), ("parser", "responses", "answers"),
           ("geocoder", "answers", "located"), ("scorer", "located", "scored"), ("aggregator", "scored", None)]


def _stages(rates: dict[str, float]) -> list[tuple[str, str, str | None, float]]:
    return [(n, i, o, rates.get(n, 0.0)) for n, i, o in GEOHINT]


def test_eta_is_bounded_by_the_geocoder_backlog_not_the_model_caller():
    # the user's case: every request answered, 3,805 answers waiting for a geocoder running at 78/s
    counts = {"requests": QueueCounts(done=3805), "responses": QueueCounts(done=3805),
              "answers": QueueCounts(ready=3800, leased=5), "located": QueueCounts(), "scored": QueueCounts()}
    rates = {"model_caller": 900.0, "parser": 2000.0, "geocoder": 78.0, "scorer": 500.0, "aggregator": 1000.0}
    eta, stage = pipeline_eta(_stages(rates), counts)
    # geocoder 3805 / 78 = 48.78 s; scorer and aggregator see the same 3805 coming (yield 1 before any is
    # known): 3805 / 500 = 7.6 s and 3805 / 1000 = 3.8 s; the model caller has nothing left
    assert stage == "geocoder"
    assert eta == pytest.approx(3805 / 78)


def test_eta_counts_work_still_upstream_with_the_observed_yield():
    # 1,000 requests still queued; 100 answered so far. The parser (10/s) is slower than the caller (50/s):
    # it still has its own 20 queued responses plus every one of the 1,000 requests ahead of it
    counts = {"requests": QueueCounts(ready=990, leased=10, done=100), "responses": QueueCounts(ready=20, done=80),
              "answers": QueueCounts(done=80), "located": QueueCounts(done=80), "scored": QueueCounts(done=80)}
    rates = {"model_caller": 50.0, "parser": 10.0, "geocoder": 200.0, "scorer": 200.0, "aggregator": 200.0}
    eta, stage = pipeline_eta(_stages(rates), counts)
    assert (eta, stage) == (pytest.approx((20 + 1000) / 10), "parser")
    # a fan-out stage: 10 cities gave 30 sites so far (yield 3); 5 cities left -> 15 more sites for a 1/s stage
    fan = [("sampler", "cities", "sites", 100.0), ("fetcher", "sites", None, 1.0)]
    eta, stage = pipeline_eta(fan, {"cities": QueueCounts(ready=5, done=10), "sites": QueueCounts(done=30)})
    assert (eta, stage) == (pytest.approx(15.0), "fetcher")


def test_eta_is_zero_when_drained_and_unknown_before_any_rate():
    drained = {e: QueueCounts(done=10) for e in ("requests", "responses", "answers", "located", "scored")}
    assert pipeline_eta(_stages({}), drained) == (0.0, None)
    fresh = {"requests": QueueCounts(ready=10)}
    assert pipeline_eta(_stages({}), fresh) == (None, None)
    # a rate measured downstream only still leaves the stage that has no rate out, not the whole ETA
    assert pipeline_eta(_stages({"parser": 5.0}), fresh) == (pytest.approx(2.0), "parser")


def test_eta_of_a_scale_out_process_counts_the_work_still_upstream_in_other_processes():
    # `--stages parser`: the model caller runs in another process (rate None here). 1,000 requests are still
    # queued upstream and 20 responses wait for the parser (10/s): all 1,020 are ahead of it, so its ETA is
    # 102 s, not the 2 s of its own queue; the other process's stage is not timed by this one
    counts = {"requests": QueueCounts(ready=990, leased=10, done=100), "responses": QueueCounts(ready=20, done=80),
              "answers": QueueCounts(done=80), "located": QueueCounts(done=80), "scored": QueueCounts(done=80)}
    stages = [(n, i, o, 10.0 if n == "parser" else None) for n, i, o in GEOHINT]
    assert pipeline_eta(stages, counts) == (pytest.approx((20 + 1000) / 10), "parser")
    # only the model caller elsewhere, everything else here (aggregator slowest at 4/s): 1,100 ahead of it
    rates = {"parser": 1000.0, "geocoder": 1000.0, "scorer": 1000.0, "aggregator": 4.0}
    stages = [(n, i, o, rates.get(n)) for n, i, o in GEOHINT]
    assert pipeline_eta(stages, counts) == (pytest.approx((1000 + 20) / 4), "aggregator")


def test_status_shows_the_pipeline_eta_and_its_bounding_stage():
    st = {"campaign": "c", "queues": {}, "spend": None, "dead": {}, "host_labels": {},
          "progress": {"finished": False, "elapsed_s": 3.0, "stages": [], "eta_s": 48.8, "eta_stage": "geocoder"}}
    assert "ETA 49 s (bounded by geocoder)" in format_status(st)
    st["progress"].update(eta_s=None, eta_stage=None)
    assert "ETA unknown" in format_status(st) and "ETA None" not in format_status(st)
    # a --stages process's record says what its ETA covers
    st["progress"].update(eta_s=102.0, eta_stage="parser", eta_scope=["parser"])
    text = format_status(st)
    assert "ETA 102 s (bounded by parser) [for stage(s) parser of the process that wrote it" in text


# -- 2. dead --edge / --limit ----------------------------------------------------------------------------


def _dead_tasks(cfg, edge: str, n: int) -> None:
    from geoagent.runtime.queue import open_queue

    async def go() -> None:
        q = open_queue(cfg.queues_root(), cfg.name, edge, **cfg.queue_options())
        try:
            await q.put_many([(f"{edge}-{i:04d}", {"i": i}) for i in range(n)])
            while tasks := await q.lease(100, 60.0):
                for t in tasks:
                    await q.dead_letter(t, f"PermanentFailure: broken {t.key}")
        finally:
            await q.close()

    anyio.run(go)


@pytest.fixture
def dead_campaign(tmp_path):
    from geoagent.cli import _load

    cfgp = _config(tmp_path)
    cfg = _load(str(cfgp))
    _dead_tasks(cfg, "requests", 3)
    _dead_tasks(cfg, "responses", 300)
    return cfgp


def test_dead_edge_filters_the_listing_and_says_when_it_is_truncated(dead_campaign, capsys):
    assert main(["dead", str(dead_campaign), "--edge", "requests"]) == 0
    out, err = capsys.readouterr()
    rows = out.splitlines()
    assert len(rows) == 3 and all(r.startswith("requests\t") for r in rows)
    assert err == ""  # the whole list was shown

    assert main(["dead", str(dead_campaign), "--edge", "responses"]) == 0
    out, err = capsys.readouterr()
    rows = out.splitlines()
    assert len(rows) == 50 and all(r.startswith("responses\t") for r in rows)
    assert "showing 50 of 300 dead tasks on edge responses (use --limit N, or --limit 0 for all)" in err

    assert main(["dead", str(dead_campaign), "--limit", "400"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 303 and err == ""


def test_dead_limit_0_lists_them_all_as_the_summary_hint_says(dead_campaign, capsys):
    # walkthrough s11: the summary's `... and N more on EDGE (`run.py dead CONFIG --edge EDGE` lists them all)`
    # ran into the default --limit 50 ("showing 50 of 78"); `--limit 0` lists every task, and the hints say it
    from geoagent.engine import dead_lines_hint_example

    assert main(["dead", str(dead_campaign), "--edge", "responses", "--limit", "0"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 300 and err == ""
    assert main(["dead", str(dead_campaign), "--limit", "0"]) == 0
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 303 and err == ""
    assert "`run.py dead CONFIG --edge responses --limit 0` lists them all" in dead_lines_hint_example("responses", 5)
    readme = docs_text()
    assert "`run.py dead CONFIG --edge EDGE --limit 0` lists them all" in readme
    assert "--edge EDGE` lists them all" not in readme.replace("--edge EDGE --limit 0` lists", "")
    with pytest.raises(SystemExit):
        main(["dead", str(dead_campaign), "--limit", "-1"])


def test_dead_unknown_edge_is_refused_naming_the_queues(dead_campaign, capsys):
    assert main(["dead", str(dead_campaign), "--edge", "nosuch"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == "error: campaign cliu has no queue nosuch; its queues are: requests, responses"
    with pytest.raises(SystemExit):  # a negative limit (0 means all, test_dead_limit_0_lists_them_all_...)
        main(["dead", str(dead_campaign), "--limit", "-1"])


# -- 3. output piped into head ---------------------------------------------------------------------------


@pytest.mark.parametrize("args", [["status"], ["dead"]])
def test_closed_stdout_pipe_ends_quietly(dead_campaign, args):
    # the reader goes away at once (``| head -0``): `status` hits the closed pipe when it flushes at exit,
    # `dead` (303 lines, more than a pipe buffer) in the middle of its listing
    extra = ["--limit", "400"] if args == ["dead"] else []
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), *args, str(dead_campaign), *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode(errors="replace")
    assert proc.wait(timeout=60) == 1, err
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err


# -- 4. status: pipeline order, one money format, "complete" ---------------------------------------------


def test_format_usd_is_one_format():
    assert [format_usd(x) for x in (0.181521, 0.0232, 1.23, 1234.5, 0.0005, 0.0, None)] == [
        "$0.1815", "$0.0232", "$1.2300", "$1,234.5000", "$0.0005", "$0.0000", "$0.0000"]
    assert format_usd(0.00001) == "<$0.0001"  # not a misleading $0.0000 next to a non-zero spend


def test_status_lists_queues_in_pipeline_order(tmp_path):
    from geoagent.cli import _load
    from geoagent.runtime.queue import open_queue

    text = (REPO / "geoagent" / "configs" / "demo_geohint.toml").read_text(encoding="utf-8")
    # the demo template with its placeholders filled as run.py demo would
    text = text.replace("{crawl_dir}", str(tmp_path / "crawl")).replace("{images_dir}", str(tmp_path / "images"))
    text = text.replace("[paths]\n", f'[paths]\nqueues = "{tmp_path / "q"}"\nstate = "{tmp_path / "s"}"\n', 1)
    cfgp = tmp_path / "gh.toml"
    cfgp.write_text(text, encoding="utf-8")
    cfg = _load(str(cfgp))

    async def make() -> None:
        for edge in ("scored", "answers", "requests", "located", "responses"):  # created out of order
            await open_queue(cfg.queues_root(), cfg.name, edge, **cfg.queue_options()).close()

    anyio.run(make)
    st = campaign_status(cfg)
    assert list(st["queues"]) == ["requests", "responses", "answers", "located", "scored"]
    lines = [ln.split(":")[0].strip() for ln in format_status(st).splitlines() if "ready" in ln]
    assert lines == ["requests", "responses", "answers", "located", "scored"]


def test_status_of_a_complete_campaign_says_so_with_one_money_format(tmp_path, capsys):
    cfgp = _config(tmp_path)
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    assert "campaign complete: every queue drained, nothing dead-lettered" in out
    amounts = re.findall(r"\$[\d,]+\.(\d+)", out)
    assert len(amounts) >= 4 and {len(d) for d in amounts} == {4}, out
    # not complete while something is dead
    _dead_tasks(load_config(cfgp), "responses", 1)
    assert main(["status", str(cfgp)]) == 0
    assert "campaign complete" not in capsys.readouterr().out


# -- 5. --help -------------------------------------------------------------------------------------------


def _subparsers(p: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_argument_has_help_and_exit_codes_match_the_engine():
    from geoagent import engine

    p = build_parser("geoagent")
    for name, sp in _subparsers(p).items():
        for a in sp._actions:
            assert a.help, f"{name} {a.dest} has no help text"
        assert "exit codes:" in sp.format_help()
    codes = {int(m.group(1)): m.group(2) for m in re.finditer(r"(?m)^  (\d+)\s+(\w+)", EXIT_CODES_EPILOG)}
    assert codes[engine.EXIT_COMPLETE].startswith("complete")
    assert codes[engine.EXIT_CONFIG] == "config"
    assert codes[engine.EXIT_INCOMPLETE] == "incomplete"
    assert codes[engine.EXIT_BUDGET] == "budget"
    assert codes[engine.EXIT_INTERRUPTED] == "interrupted"
    assert codes[engine.EXIT_AUTH] == "authentication"
    assert codes[1] == "nothing"  # `export` of a campaign that never ran (tests/test_cli_state_folders.py)
    assert codes[engine.EXIT_NO_USABLE_ANSWERS] == "no"  # "no usable answers" (walkthrough 9b)
    assert set(codes) == {0, 1, 2, 3, 4, 5, 6, 130}


def test_usage_names_the_invoked_program(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/usr/local/bin/geoagent", "--help"])
    assert build_parser().format_usage().startswith("usage: geoagent ")
    monkeypatch.setattr(sys, "argv", ["run.py"])
    assert build_parser().format_usage().startswith("usage: run.py ")


# -- 6. unknown --stages ---------------------------------------------------------------------------------


def test_unknown_stage_is_one_plain_sentence(tmp_path, capsys):
    cfgp = _config(tmp_path)
    assert main(["run", str(cfgp), "--stages", "model_caller,foo", "--no-live"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: unknown stage foo; this campaign has: model_caller, collector"
    assert not (tmp_path / "state" / "cliu").exists()  # refused before the campaign was opened


def test_key_errors_print_without_quotes(tmp_path, capsys):
    cfgp = _config(tmp_path)
    cfgp.write_text(cfgp.read_text().replace('kind = "generic"', 'kind = "nosuchkind"'))
    assert main(["run", str(cfgp), "--no-live"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(("error: unknown campaign kind", "config error:")) and not err.startswith('error: "'), err


# -- 7. interrupted run, signal line, calls of this run --------------------------------------------------


def test_interrupted_run_says_how_to_resume_and_a_rerun_counts_its_own_calls(tmp_path, capsys, monkeypatch):
    import sqlite3
    import time

    from geoagent.sandbox.server import spawn, wait_ready

    server, base = spawn("geoagent.sandbox.llm_openai:make_app", api_keys=[KEY])
    try:
        wait_ready(base)
        cfgp = _config(tmp_path, n=120, base_url=base, rate=20)  # about 6 s of calls
        proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfgp), "--no-live"],
                                env={"CLIU_KEY": KEY, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", "")},
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        db = tmp_path / "state" / "cliu" / C.CAMPAIGN_DB
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if db.is_file() and _ledger_calls(tmp_path) >= 5:
                    break
            except sqlite3.OperationalError:  # the file exists a moment before the run created its tables
                pass
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = (b.decode(errors="replace") for b in proc.communicate(timeout=90))
        if proc.returncode == 0:
            pytest.skip("the run finished before the signal (machine much faster than expected)")
        assert proc.returncode == 130, err
        assert "stopping on SIGINT (Ctrl-C): finishing in-flight work" in err, err
        assert "press Ctrl-C again to exit at once (work in flight is redone on resume; a repeat within half a second of the first counts as the same stop)" in err and "signal 2" not in err, err
        assert out.rstrip().endswith("re-run the same command to resume"), out
        calls_1 = _ledger_calls(tmp_path)
        assert f"this run: {calls_1} new model call" in out, out

        # the re-run (in this process) makes only the calls that are left, and says so
        monkeypatch.setenv("CLIU_KEY", KEY)
        cfgp.write_text(cfgp.read_text().replace("requests = 20,", "requests = 2000,"))
        assert main(["run", str(cfgp), "--no-live"]) == 0
        rerun = capsys.readouterr().out
        total = _ledger_calls(tmp_path)
        assert 0 < total - calls_1 < 120
        assert f"this run: {total - calls_1} new model call" in rerun, rerun
    finally:
        server.terminate()
        server.join(10)

    # queues lost, state kept: a fresh plan finds every answer stored and pays for none of them again (the
    # fake server is gone: a call would fail)
    shutil.rmtree(tmp_path / "queues" / "cliu")
    assert main(["run", str(cfgp), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "this run: 0 new model calls; 120 answers reused (stored by an earlier run, used instead of a call)" in out, out
    assert _ledger_calls(tmp_path) == total


def test_stop_reason_tells_an_authentication_stop_from_a_budget_stop():
    from geoagent.status import stop_reason

    stage = {"stage": "model_caller", "last_errors": []}
    assert stop_reason({"budget_stopped": False, "stages": [stage]}) is None
    assert stop_reason({"budget_stopped": True, "stages": [stage]}) == "budget exhausted"
    # a model's breaker holds its tasks (the run goes on for the other models): not a budget stop
    auth = {**stage, "held": 3, "last_errors": ["AuthStop: authentication failed for model m (HTTP 401): check M_KEY"]}
    assert stop_reason({"budget_stopped": False, "stages": [auth]}).startswith("authentication failed")
    both = stop_reason({"budget_stopped": True, "stages": [auth]})
    assert both.startswith("budget exhausted; authentication failed")
    ended = stop_reason({"budget_stopped": False, "finished": True, "stages": [auth]})
    assert ended == "authentication failed (see last error): that model's tasks were left queued"
    # an auth error with nothing held (an isolated 401 between successes, retried) is no stop reason
    assert stop_reason({"budget_stopped": False, "stages": [{**auth, "held": 0}]}) is None
