"""``status`` after a re-run killed before it did any work (review40b #5).

A complete campaign re-run and killed (SIGKILL) after its manifest entry was written but before it leased a task
(the pipeline starting over drained queues) left that entry ``running``, its process gone: ``status`` then said
the last run stopped before writing its final report and export, though the complete run's results, report and
export were all there and the killed run had changed nothing. A run's entry now says whether its work began
(``work_began``: false until it leases its first task, rewrites a stored row or hands off its tables); one whose
work never began is passed over. A re-run that did work and was killed after its last task, before writing its
end, is still cut short.

Real ``run.py`` processes over a generic campaign of the simulated provider; each killed run is ``run.py`` run by a
small script that replaces one function of the run's path by a SIGKILL of its own process (where the run dies).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from _model_harness import generic_campaign, model_table

from geoagent.runtime.manifest import WORK_BEGAN_KEY, end_cut_short

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
CUT_SHORT = "before writing its final report and export"

#: ``run.py ARGS...`` with the function named by argv[1] (``module:attr`` or ``module:Class.attr``) replaced by a
#: SIGKILL of this process: the run dies there, as a ``kill -9`` would
_KILL_AT = """
import inspect, os, runpy, signal, sys
where, sys.argv = sys.argv[1], [sys.argv[2]] + sys.argv[3:]
module, _, attr = where.partition(":")
owner = __import__(module, fromlist=["_"])
*path, name = attr.split(".")
for part in path:
    owner = getattr(owner, part)
if inspect.iscoroutinefunction(getattr(owner, name)):
    async def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
else:
    def die(*a, **k):
        os.kill(os.getpid(), signal.SIGKILL)
setattr(owner, name, die)
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(REPO / "run.py"), *args], env=_env(), capture_output=True, text=True, timeout=300)


def _killed_at(where: str, cfgp: Path) -> None:
    proc = subprocess.run([PY, "-c", _KILL_AT, where, str(REPO / "run.py"), "run", str(cfgp), "--no-live"],
                          env=_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr  # SIGKILL: it died where it was meant to


def _runs(state: Path) -> list[dict]:
    return json.loads((state / "manifest.json").read_text(encoding="utf-8"))["runs"]


def test_a_rerun_killed_before_its_work_began_leaves_the_campaign_complete(tmp_path):
    cfgp = generic_campaign(tmp_path, name="idle41", n=3, models=model_table())
    state = tmp_path / "state" / "idle41"
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    written = {f: (state / f).read_bytes() for f in ("export_note.txt", "results.parquet")}
    # killed while it planned: no entry of its own (it is recorded once its plan is queued)
    _killed_at("geoagent.engine:enqueue_plan", cfgp)
    assert len(_runs(state)) == 1
    # killed after its entry was written, as its pipeline started over drained queues: nothing leased
    _killed_at("geoagent.engine:run_pipeline", cfgp)
    runs = _runs(state)
    assert [r["status"] for r in runs] == ["complete", "running"]
    assert runs[-1][WORK_BEGAN_KEY] is False and end_cut_short(runs) is None
    st = _cli("status", str(cfgp))
    assert "campaign complete: every queue drained, nothing dead-lettered" in st.stdout, st.stdout
    assert CUT_SHORT not in st.stdout
    assert {f: (state / f).read_bytes() for f in written} == written  # the files on disk are the complete run's
    # a run after it, its work done by the first: it calls no model, and its own entry never says work began
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    runs = _runs(state)
    assert [r["status"] for r in runs] == ["complete", "killed", "complete"]
    assert runs[-1][WORK_BEGAN_KEY] is False and runs[-1]["end_written"] is True


def test_a_rerun_killed_after_its_last_task_before_writing_its_end_is_cut_short(tmp_path):
    """The true positive stays (review40a #5): the re-run answered the two requests the grown plan added, and
    was killed before it began writing its end; then one that was killed among them."""
    cfgp = generic_campaign(tmp_path, name="grew41", n=3, models=model_table())
    state = tmp_path / "state" / "grew41"
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    cfgp.write_text(cfgp.read_text(encoding="utf-8").replace("n_requests = 3", "n_requests = 5"), encoding="utf-8")
    _killed_at("geoagent.runtime.manifest:Manifest.record_writing_end", cfgp)
    last = _runs(state)[-1]
    assert last["status"] == "running" and isinstance(last[WORK_BEGAN_KEY], str)  # the time its work began
    st = _cli("status", str(cfgp))
    assert "requests: ready       0  leased     0  done        5" in st.stdout, st.stdout
    assert CUT_SHORT in st.stdout and "campaign complete" not in st.stdout
    # a re-run with no work left, killed while it writes the end: cut short too (its writing_end_since mark)
    _killed_at("geoagent.runtime.export:export_together", cfgp)
    runs = _runs(state)
    assert runs[-1][WORK_BEGAN_KEY] is False and runs[-1].get("writing_end_since")
    assert CUT_SHORT in _cli("status", str(cfgp)).stdout
    # the re-run writes them
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    assert "campaign complete" in _cli("status", str(cfgp)).stdout


def test_a_run_whose_work_never_began_is_passed_over():
    """end_cut_short reads past a run whose ``work_began`` is false, whatever it ended as; an earlier run that did
    work and never wrote its end is still found behind it; an entry without the key (an earlier geoagent) counts
    as having worked."""
    done = {"status": "complete", "end_written": True}
    idle_killed = {"status": "killed", WORK_BEGAN_KEY: False}
    idle_forced = {"status": "forced exit", WORK_BEGAN_KEY: False}
    assert end_cut_short([done, idle_killed, idle_forced]) is None
    worked = {"status": "killed", WORK_BEGAN_KEY: "2026-12-05T00:00:00Z"}
    assert end_cut_short([done, worked, idle_killed]) is worked
    older = {"status": "killed"}
    assert end_cut_short([done, older, idle_forced]) is older
    # the writing mark decides before it: a run with no work of its own killed while it rewrote the files
    writing = {"status": "killed", WORK_BEGAN_KEY: False, "writing_end_since": "2026-12-05T00:00:00Z"}
    assert end_cut_short([done, writing]) is writing
