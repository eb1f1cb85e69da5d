"""The start's "plan changed since the last run: ..." line (``geoagent.runtime.scope.PlanDiff``): recorded in the
manifest, said by every process of a ``--stages`` scale-out, and true of a ``--watch`` run.

Before (session 19):
(a) its counts were printed and lost: the campaign manifest (``state/<campaign>/manifest.json``) did not record
    them, so a result could not be traced to the plan change of the run that made it;
(b) a campaign split by ``--stages`` over processes said it only in the process that planned first: that process
    replaces the plan record (``plan_keys.tsv``) as soon as it has queued the plan, so a process started after it
    compared its plan with its sibling's, found no change and said nothing, as if the plan were the last run's.
    Now that process says the change its sibling counted, naming it ("as counted by process PID ...");
(c) a ``--watch`` run over a crawl's folder sets no task aside (its plan follows files another campaign may still
    be writing), yet the line said of the tasks no longer planned "their stored answers are kept but not scored",
    while those still queued were sent all the same; it now says so.

Real runs through the CLI and the engine: the simulated provider (generic campaign) and the local OpenAI fake
(a GeoVerify campaign over a release-form folder cut from the release sample, as ``test_watch_replan_trials``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]


def _runs(state: Path) -> list[dict]:
    path = state / C.MANIFEST_FILE
    return json.loads(path.read_text(encoding="utf-8")).get("runs", []) if path.is_file() else []


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process start times from /proc")
def test_every_process_of_a_stages_split_says_the_plan_change_and_the_manifest_records_it(tmp_path, monkeypatch,
                                                                                          capsys):
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="split-plan", n=10, models=model_table("m"), cap_usd=1.0)
    state = tmp_path / "state" / "split-plan"
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    first = _runs(state)[-1]
    assert "plan_change" not in first, first  # a first run: no plan to compare with
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 14"), encoding="utf-8")

    # the model caller's process plans first and keeps running (--watch); the collector's plans after it
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--stages", "model_caller",
                             "--watch", "--no-live"], cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while not any(r.get("pid") == proc.pid for r in _runs(state)):  # planned, queued and its entry written
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=10)
            time.sleep(0.1)
        rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
        got = capsys.readouterr()
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
    assert rc == 0, got.out + got.err
    said_a = [ln for ln in err.splitlines() if "plan changed since the last run" in ln]
    said_b = [ln for ln in got.err.splitlines() if "plan changed since the last run" in ln]
    head = "plan changed since the last run: 4 requests new (not planned before), 0 planned before no longer in the plan"
    assert len(said_a) == 1 and head in said_a[0], err
    # before: nothing (its plan is the sibling's record, so it found no change)
    assert len(said_b) == 1 and head in said_b[0], got.err
    assert f"as counted by process {proc.pid} of this campaign, which queued this plan at" in said_b[0], said_b

    runs = {r.get("pid"): r for r in _runs(state)}
    a, b = runs[proc.pid], runs[os.getpid()]
    assert a["plan_change"]["new"] == 4 and a["plan_change"]["dropped"] == 0, a  # before: no plan_change
    assert a["plan_change"]["said"] in said_a[0], a
    assert b["plan_change"]["new"] == 0 and b["plan_change"]["dropped"] == 0, b  # its own plan: the sibling's
    same = b["plan_change"]["same_plan_as"]
    assert (same["new"], same["dropped"], same["counted_by"]["pid"]) == (4, 0, proc.pid), b

    # a later run of the whole campaign (the split ended): its plan is the last run's, nothing to say
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert "plan changed" not in capsys.readouterr().err
    assert _runs(state)[-1]["plan_change"] == {"new": 0, "dropped": 0}


def _watch_config(rel: Path, name: str):
    from geoagent.config import config_from_dict

    return config_from_dict({
        "campaign": {"name": name, "kind": "geoverify", "seed": 3},
        "budget": {"cap_usd": 5.0},
        "models": [{"name": "sandbox-gpt", "provider": "openai", "model": "sandbox-gpt",
                    "base_url": "http://openai.sandbox.invalid/v1", "price_input_usd_per_mtok": 0.15,
                    "price_output_usd_per_mtok": 0.6, "max_output_tokens": 50, "concurrency": 2,
                    "rate": {"requests": 10, "period_s": 1.0}}],
        "geoverify": {"release_dir": str(rel), "report_interval_s": 3600},
    })


def test_a_watch_run_says_the_tasks_no_longer_planned_still_queued_are_sent(release_dir, tmp_path, monkeypatch,
                                                                            capsys):
    from geoagent import engine
    from test_watch_replan_trials import _last_record, _release

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    rel = _release(release_dir, tmp_path / "crawl", 60)
    cfg = _watch_config(rel, "watch-plan-line")
    state = tmp_path / "state" / cfg.name

    def done() -> int:
        return int(((_last_record(state).get("queues") or {}).get(C.EDGE_REQUESTS) or {}).get("done") or 0)

    async def first_run():  # stopped by Ctrl-C after a few answers: most of the plan is left queued
        async def drive():
            with anyio.fail_after(60):
                while done() < 4:
                    await anyio.sleep(0.05)
            signal.raise_signal(signal.SIGINT)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            return await engine.run_campaign(cfg, live=False, handle_signals=True, export=False)

    out1 = anyio.run(first_run)
    assert out1.status == "interrupted" and out1.counts[C.EDGE_REQUESTS].ready > 0, out1.status
    capsys.readouterr()

    _release(release_dir, rel, 30)  # the crawl's table now holds the first 30 rows: the others are no longer planned
    box: dict = {}

    async def watching():
        async def drive():
            with anyio.fail_after(120):
                while True:
                    q = _last_record(state).get("queues") or {}
                    if q and all(c["ready"] == 0 and c["leased"] == 0 for c in q.values()) and done() > 4:
                        break
                    await anyio.sleep(0.1)
            signal.raise_signal(signal.SIGINT)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            box["o"] = await engine.run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)

    anyio.run(watching)
    err = capsys.readouterr().err
    (line,) = [ln for ln in err.splitlines() if "plan changed since the last run" in ln]
    assert " 0 requests new" in line, line
    # before: "(their stored answers are kept but not scored)", while the watching run sent them
    assert "a --watch run sets none aside, so they are sent all the same" in line, line
    outcome = box["o"]
    counts = outcome.counts[C.EDGE_REQUESTS]
    assert counts.dead == 0 and counts.ready == 0 and counts.leased == 0, counts  # sent, none set aside
    entry = _runs(state)[-1]["plan_change"]
    assert entry["still_queued"] > 0 and entry["still_queued_fate"] == "sent while watching", entry
    assert entry["dropped"] >= entry["still_queued"] and entry["said"] in line, entry


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process start times from /proc")
def test_the_plan_note_speaks_only_for_its_record_and_a_live_sibling(tmp_path):
    """plan_keys.json: read only while it names the record read (a re-plan written without a note leaves it
    stale), and repeated only for another process of this machine that is still the one that wrote it."""
    import socket

    from geoagent.runtime.procs import proc_start
    from geoagent.runtime.scope import (SET_ASIDE_ELSEWHERE, PlanDiff, PlanRecorder, plan_change_text)

    sibling = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        def note(pid: int) -> dict:
            return {"pid": pid, "proc_start": proc_start(pid), "host": socket.gethostname(),
                    "planned_at": "2026-12-02T22:00:00Z", "change": {"new": 3, "dropped": 1}}

        plan = [(f"k{i}", {"model": "m"}) for i in range(5)]
        list(PlanRecorder(tmp_path).wrap(plan, about=lambda: note(sibling.pid)))
        diff = PlanDiff.of(tmp_path)
        list(diff.wrap(plan))
        assert (diff.new, diff.dropped) == (0, 0)
        assert diff.sibling_change() == {"new": 3, "dropped": 1, "counted_by": {
            "pid": sibling.pid, "host": socket.gethostname(), "planned_at": "2026-12-02T22:00:00Z"}}
        list(PlanRecorder(tmp_path).wrap(plan, about=lambda: note(os.getpid())))
        assert PlanDiff.of(tmp_path).sibling_change() is None  # this process's own note
        list(PlanRecorder(tmp_path).wrap(plan, about=lambda: note(sibling.pid)))
        list(PlanRecorder(tmp_path).wrap(plan))  # rewritten without a note (a watching run's re-plan)
        assert PlanDiff.of(tmp_path).note is None
        list(PlanRecorder(tmp_path).wrap(plan, about=lambda: note(sibling.pid)))
    finally:
        sibling.kill()
        sibling.wait()
    assert PlanDiff.of(tmp_path).sibling_change() is None  # its process is gone: it was the last run
    assert plan_change_text(2, 30, fate=SET_ASIDE_ELSEWHERE) == (
        "plan changed since the last run: 2 requests new (not planned before), 30 planned before no longer in the "
        "plan (those still queued are set aside unsent by the process that runs the stage reading the planned "
        "work; the others' stored answers, where they have one, are kept but not scored)")
