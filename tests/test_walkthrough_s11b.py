"""A second fresh-user walkthrough of main (session 11): one test per point found."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest


from geoagent.cli import main
from _docs import docs_text

REPO = Path(__file__).resolve().parents[1]


def _ran_campaign(tmp_path, capsys, name: str) -> Path:
    from _model_harness import generic_campaign, model_table

    cfgp = generic_campaign(tmp_path, name=name, n=3, models=model_table())
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    return cfgp


def test_dead_with_a_wrong_queues_root_diagnoses_it_and_exits_2(tmp_path, capsys, monkeypatch):
    # before: "campaign wd not started (no queues yet): nothing dead-lettered", exit 0
    cfgp = _ran_campaign(tmp_path, capsys, "wd")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "wrong"))
    assert main(["dead", str(cfgp)]) == 2
    cap = capsys.readouterr()
    text = cap.out + cap.err
    assert "not started" not in text and "nothing dead-lettered" not in text, text
    assert "queues root is probably wrong" in text, text
    assert str((tmp_path / "queues").resolve()) in text, text
    assert not (tmp_path / "wrong").exists()


def test_status_with_a_wrong_queues_root_names_the_root_to_point_at_and_exits_2(tmp_path, capsys, monkeypatch):
    # before: exit 0, and "its runs kept their queues in <root>/<campaign> (point $GEOAGENT_QUEUES or [paths]
    # queues there)": the variable takes the root, so following it literally looked in <root>/<campaign>/<campaign>
    cfgp = _ran_campaign(tmp_path, capsys, "ws")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "wrong"))
    assert main(["status", str(cfgp)]) == 2
    out = capsys.readouterr().out
    root = (tmp_path / "queues").resolve()
    assert f"$GEOAGENT_QUEUES or [paths] queues at {root} " in out, out
    assert "queues there" not in out
    # the advice works when followed literally
    monkeypatch.setenv("GEOAGENT_QUEUES", str(root))
    assert main(["status", str(cfgp)]) == 0
    assert "campaign complete" in capsys.readouterr().out


def test_status_and_dead_help_document_exit_2_for_a_wrong_queues_root(capsys):
    from geoagent.cli import COMMAND_EXIT_CODES

    for cmd in ("status", "dead"):
        assert "queues root" in COMMAND_EXIT_CODES[cmd][2], cmd
    readme = docs_text()
    assert "the queues root is probably wrong" in readme


def test_run_with_a_wrong_queues_root_after_runs_is_refused_naming_both_folders(tmp_path, capsys, monkeypatch):
    # before: a second, empty set of queues started silently under the wrong root, exit 0
    cfgp = _ran_campaign(tmp_path, capsys, "wr")
    wrong = tmp_path / "wrong"
    monkeypatch.setenv("GEOAGENT_QUEUES", str(wrong))
    manifest = (tmp_path / "state" / "wr" / "manifest.json").read_bytes()
    assert main(["run", str(cfgp), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert str((tmp_path / "queues" / "wr").resolve()) in err and str(wrong / "wr") in err, err
    assert "GEOAGENT_QUEUES" in err
    assert not wrong.exists()
    assert (tmp_path / "state" / "wr" / "manifest.json").read_bytes() == manifest


def test_run_after_the_recorded_queues_folder_was_removed_warns_and_runs(tmp_path, capsys, monkeypatch):
    cfgp = _ran_campaign(tmp_path, capsys, "wm")
    shutil.rmtree(tmp_path / "queues")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "new"))
    assert main(["run", str(cfgp), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "warning:" in err and str((tmp_path / "queues" / "wm").resolve()) in err, err
    # the new folder is recorded: no warning next time
    assert main(["run", str(cfgp), "--no-live"]) == 0
    assert str((tmp_path / "queues" / "wm").resolve()) not in capsys.readouterr().err


def test_redis_run_records_no_queues_folder_and_warns_of_appendonly_as_a_warning_line(tmp_path):
    # before: the manifest recorded queues_dir = <queues root>/<campaign>, a folder a Redis run never creates;
    # the appendonly warning printed as a raw logging line "2026-12-01 ... WARNING geoagent.runtime.redis_state:"
    import os
    import subprocess
    import sys

    from _model_harness import generic_campaign, model_table
    from test_queue_contract import RedisServer, _redis_binary

    server = RedisServer(_redis_binary(), tmp_path / "redis", "--appendonly", "no")
    (tmp_path / "redis").mkdir()
    server.start()
    try:
        cfgp = generic_campaign(tmp_path, name="rq", n=3, models=model_table())
        cfgp.write_text(cfgp.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n',
                        encoding="utf-8")
        env = {**os.environ, "PYTHONPATH": str(REPO), "GA_TEST_REDIS": server.url}
        r = subprocess.run([sys.executable, "run.py", "run", str(cfgp), "--no-live"], cwd=REPO, env=env,
                           capture_output=True, text=True, timeout=180)
    finally:
        server.stop()
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    runs = json.loads((tmp_path / "state" / "rq" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert runs and all("queues_dir" not in run for run in runs), runs
    assert not (tmp_path / "queues").exists()
    lines = [ln for ln in r.stderr.splitlines() if "appendonly" in ln]
    assert len(lines) == 1 and lines[0].startswith("warning: "), r.stderr
    assert "WARNING geoagent" not in r.stderr


def test_dead_limit_note_says_the_cap_is_per_edge(tmp_path, capsys):
    # before: "showing 53 of 303 dead tasks (use --limit N, or --limit 0 for all)": the cap is per edge
    from test_cli_usability import _config, _dead_tasks

    from geoagent.cli import _load

    cfgp = _config(tmp_path)
    cfg = _load(str(cfgp))
    _dead_tasks(cfg, "requests", 3)
    _dead_tasks(cfg, "responses", 300)
    assert main(["dead", str(cfgp)]) == 0
    err = capsys.readouterr().err
    assert "showing 53 of 303 dead tasks, at most 50 per edge (responses: 50 of 300;" in err, err
    assert "--limit N per edge" in err, err


def test_judged_without_intervals_names_its_own_option_not_the_config_key(release_dir, tmp_path, capsys):
    # before: "no intervals: [geohint] n_boot = 0" (a campaign key) for `judged --n-boot 0`
    from geoagent.geohint.judged import main as judged

    out_dir = tmp_path / "o"
    assert judged([str(release_dir), str(out_dir), "--flips", "20", "--splits", "3", "--n-boot", "0"]) == 0
    out = capsys.readouterr().out
    assert "no intervals: --n-boot 0" in out, out[:3000]
    assert "[geohint] n_boot = 0" not in out
    assert "[geohint] n_boot = 0" not in (out_dir / "report.md").read_text(encoding="utf-8")


def test_judged_negative_n_boot_names_only_the_bad_option(release_dir, tmp_path, capsys):
    from geoagent.geohint.judged import main as judged

    with pytest.raises(SystemExit) as e:
        judged([str(release_dir), str(tmp_path / "o"), "--n-boot", "-1"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--n-boot must be 0 or more, got -1" in err and "--boot-seed" not in err.split("error:")[-1], err


def test_raw_import_file_help_and_demo_help_read_right(capsys):
    from geoagent.cli import build_parser
    from geoagent.geohint.raw_import import main as raw_main

    with pytest.raises(SystemExit):
        raw_main(["--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "None" not in help_text.split("--file FILE", 1)[1].split("--", 1)[0], help_text
    sub = build_parser("run.py")._subparsers._group_actions[0]
    demo_help = next(a.help for a in sub._choices_actions if a.dest == "demo")
    assert "embedded default campaign" not in demo_help and "GeoHint" in demo_help, demo_help


def test_wikidata_retry_after_is_capped_at_one_day_like_every_other_host(caplog):
    # before: the Wikidata client read Retry-After itself: "Retry-After: 1000000000" paused the host ~31.7 years
    from geoagent.clients.wikidata import WikidataClient
    from geoagent.runtime.http import RETRY_AFTER_MAX_S

    c = WikidataClient.__new__(WikidataClient)
    c.maxlag_min_wait_s, c.host = 5.0, "www.wikidata.org"
    with caplog.at_level("WARNING", logger="geoagent.runtime.http"):
        assert c._wait_after("maxlag", {"lag": 12.0}, {"Retry-After": "1000000000"}, 1) == RETRY_AFTER_MAX_S
        assert c._wait_after("ratelimited", {}, {"retry-after": "1000000000"}, 1) == RETRY_AFTER_MAX_S
    assert "www.wikidata.org" in caplog.text and "RETRY_AFTER_MAX_S" in caplog.text
    assert c._wait_after("maxlag", {"lag": 12.0}, {"Retry-After": "3"}, 1) == 3.0
    assert c._wait_after("maxlag", {"lag": 12.0}, {"Retry-After": "inf"}, 1) == 12.0  # no HTTP number: the lag


def _outcome(status: str, **kw):
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    counts = {"requests": QueueCounts(ready=4896, leased=0, done=104, dead=0),
              "responses": QueueCounts(ready=3, leased=0, done=101, dead=0)}
    return Outcome("rs", status, 130, 5000, counts, None, **kw)


def test_redis_interrupt_summary_says_the_work_is_left_in_the_shared_queues():
    # before: "4896 requests not sent yet: left queued by the interrupt; re-run the same command to send them"
    # while another machine's process was still sending them
    out = _outcome("interrupted", shared_queues=True)
    line = out.unsent_line()
    assert "4896 requests not sent yet" in line and "shared queues" in line and "other machines" in line, line
    assert "left queued by the interrupt" not in line
    parsed = out.unparsed_line()
    assert "shared queues" in parsed and "left queued by the interrupt" not in parsed, parsed
    note = out.interim_note()
    assert "this machine" in note and "other machines" in note, note
    # one machine's queues: as before
    assert "left queued by the interrupt" in _outcome("interrupted").unsent_line()


def test_redis_status_eta_says_it_is_this_machines_rate():
    from geoagent.runtime.queue import QueueCounts
    from geoagent.status import format_status

    st = {"campaign": "rs", "queues": {"requests": QueueCounts(ready=40, leased=2, done=10, dead=0)},
          "running": True, "redis": True,
          "progress": {"t": 0.0, "elapsed_s": 12.0, "eta_s": 30.0, "eta_stage": "model_caller", "stages": []}}
    line = next(ln for ln in format_status(st).splitlines() if "ETA" in ln)
    assert "this machine's rate" in line, line
    st["redis"] = False
    line = next(ln for ln in format_status(st).splitlines() if "ETA" in ln)
    assert "this machine" not in line, line
    readme = docs_text()
    assert "this machine's rate" in readme


def test_a_429_whose_retry_after_outlasts_the_backoff_is_redelivered_not_dead_at_the_first_delivery(tmp_path,
                                                                                                  monkeypatch):
    # before: every call answered 429 with a Retry-After longer than the host's backoff_max_s: the HTTP client
    # stopped after one attempt "so a queue can nack with that delay" (geoagent/runtime/http.py), but the model
    # caller took that as retries exhausted (Missing): dead-lettered at its first delivery whatever [queue]
    # max_attempts said (here 2)
    import anyio

    from test_cost_dead_letter_deliveries import KEY, _cfg

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.faults import FaultConfig
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("DEAD_TEST_KEY", KEY)
    app = llm_openai.make_app(faults=FaultConfig(rate=1.0, kinds=("429",), retry_after_s=0.3), api_keys=[KEY])

    async def go():
        async with serve(app) as base:
            p = _cfg(tmp_path, base)
            host = base.split("//", 1)[1].rstrip("/")
            p.write_text(p.read_text().replace("max_attempts = 8", "max_attempts = 2")
                         + f'\n[hosts."{host}"]\nrate = 1000\nbackoff_max_s = 0.05\nmax_attempts = 3\n', encoding="utf-8")
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    out = anyio.run(go)
    dead = out.dead["requests"]
    assert out.counts["requests"].dead == 3
    assert [d.attempts for d in dead] == [2, 2, 2], dead  # [queue] max_attempts deliveries, not 1
    assert all("429" in d.reason and "Retry-After" in d.reason for d in dead), dead
    assert out.spend["reserved_usd"] == 0 and out.spend["open_reservations"] == 0
