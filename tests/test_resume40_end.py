"""The end of a run and of an export, cut short or signalled (resume40).

#1 A run killed (or ended by a second signal) while it wrote the campaign's final exports and report left
   ``status`` saying "campaign complete" over interim files; it now says that the last run stopped before writing
   them and to re-run the same command, which writes them without a model call.
#2 A killed export left some tables new and others old (a new Parquet file beside an old CSV), with nothing saying
   so; now every file is renamed into place together at the export's end, ``export_note.txt`` says "Export in
   progress" until then and ends with an "Export complete" paragraph with each file's rows.
#3 Re-running a complete GeoHint campaign rewrote its final report as an "Interim report" at the first live rewrite,
   though nothing had changed; a kill then left it so.
#4 A SIGTERM just after a complete run printed its summary ended it with exit 143 (asyncio's signal receiver had
   reset SIGTERM to its default), not 0.

Real ``run.py`` processes over a generic campaign of the simulated provider (and, for #3, a three-site GeoHint
campaign over the sandbox fakes). To stop a run deterministically inside the end it writes, its ``export_note.txt``
is replaced by a named pipe: the export blocks reading it (after the run recorded that it writes its end) until
the test kills the process.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from _model_harness import SANDBOX_GPT_TOML, generic_campaign, geohint_three_sites_toml, model_table

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable


def _env(**more: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1", **more}


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([PY, str(REPO / "run.py"), *args], env=env or _env(), capture_output=True, text=True,
                          timeout=300)


def _manifest_runs(state: Path) -> list[dict]:
    return json.loads((state / "manifest.json").read_text(encoding="utf-8"))["runs"]


def _wait_for(cond, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def _run_blocked_at_its_end(cfgp: Path, state: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """A re-run of a complete campaign started with ``export_note.txt`` replaced by a named pipe: returned once its
    manifest entry records that it writes its end (the export then waits on the pipe)."""
    note = state / "export_note.txt"
    note.unlink(missing_ok=True)
    os.mkfifo(note)
    n_runs = len(_manifest_runs(state))
    proc = subprocess.Popen([PY, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], env=env or _env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: len(runs := _manifest_runs(state)) > n_runs and runs[-1].get("writing_end_since"),
              "the run's writing_end_since mark")
    return proc


def _unblock(state: Path) -> None:
    (state / "export_note.txt").unlink()


def test_a_sigterm_after_a_complete_run_printed_its_summary_exits_0(tmp_path):
    """#4: the run's signal receiver put SIGTERM back to SIG_DFL when it closed (asyncio's remove_signal_handler),
    so the CLI's end-of-command "ignore a late SIGTERM" did not recognise its handler: exit 143. Each try sends the
    signal as soon as the summary's export line is out."""
    cfgp = generic_campaign(tmp_path, name="term40", n=3, models=model_table())
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    for _ in range(3):
        proc = subprocess.Popen([PY, str(REPO / "run.py"), "run", str(cfgp), "--no-live"], env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.stdout is not None
        for line in proc.stdout:
            if "export:" in line:
                proc.send_signal(signal.SIGTERM)
                break
        rest = proc.stdout.read()
        assert proc.wait(timeout=60) == 0, rest


_KILLED_EXPORT = """
import os, signal, sys
from geoagent.config import load_config
from geoagent.engine import load_kind
from geoagent.runtime.backend import open_state
from geoagent.runtime.export import export_together, with_spend

cfg = load_config(sys.argv[1])
out = sys.argv[2] if len(sys.argv) > 2 else None
kind = load_kind(cfg.campaign.kind)
with open_state(cfg, recover=False) as state:
    def write():
        tables = kind.export(cfg, state.store, out)  # every results table and the responses written...
        os.kill(os.getpid(), signal.SIGKILL)  # ...and the process killed before the spend table and the end
    export_together(cfg, write)
"""


def test_a_killed_export_leaves_the_earlier_tables_whole_and_says_it_did_not_end(tmp_path):
    """#2: a kill inside the export renames nothing (each table keeps its earlier file: same inode), and
    export_note.txt says the export is in progress; `run.py export` then writes the whole set, its note ending
    with the rows of each file. Into an --out folder the kill left with only that note, the export is not refused
    as someone else's folder."""
    cfgp = generic_campaign(tmp_path, name="exp40", n=5, models=model_table())
    state = tmp_path / "state" / "exp40"
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    files = sorted(p for p in state.iterdir() if p.suffix in (".csv", ".parquet"))
    assert {p.stem for p in files} >= {"results", "model_responses", "spend"}, files
    inodes = {p.name: p.stat().st_ino for p in files}
    killed = subprocess.run([PY, "-c", _KILLED_EXPORT, str(cfgp)], env=_env(), capture_output=True, text=True,
                            timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert {p.name: p.stat().st_ino for p in files} == inodes  # none replaced
    assert list(state.glob(".*.tmp"))  # the staged files, never renamed
    note = (state / "export_note.txt").read_text(encoding="utf-8")
    assert note.startswith("Export in progress: campaign exp40.")
    assert not any(par.startswith("Export complete") for par in note.split("\n\n"))
    done = _cli("export", str(cfgp))
    assert done.returncode == 0, done.stdout + done.stderr
    assert not list(state.glob(".*.tmp"))
    last = (state / "export_note.txt").read_text(encoding="utf-8").rstrip("\n").split("\n\n")[-1].splitlines()
    assert last[0].startswith("Export complete: campaign exp40;"), last
    rows = {ln.split(",")[0].strip(): int(ln.rsplit(": ", 1)[1].split()[0]) for ln in last[1:]}
    assert rows == {f"{t}.parquet": pl.read_parquet(state / f"{t}.parquet").height
                    for t in ("results", "model_responses", "spend")}, last
    assert rows["results.parquet"] == 5 and pl.read_csv(state / "results.csv").height == 5

    out = tmp_path / "out"
    killed = subprocess.run([PY, "-c", _KILLED_EXPORT, str(cfgp), str(out)], env=_env(), capture_output=True,
                            text=True, timeout=300)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert not list(out.glob("*.parquet")) and not list(out.glob("*.csv"))
    assert (out / "export_note.txt").read_text(encoding="utf-8").startswith("Export in progress")
    again = _cli("export", str(cfgp), "--out", str(out))
    assert again.returncode == 0, again.stdout + again.stderr
    assert pl.read_csv(out / "results.csv").height == 5 and (out / "spend.parquet").is_file()
    assert "Export complete: campaign exp40;" in (out / "export_note.txt").read_text(encoding="utf-8")


def test_an_export_that_raises_leaves_tables_and_note_as_they_were(tmp_path):
    """#2: an export that fails part-way (here a stored row its last table refuses, as a damaged one is) removes
    what it staged and puts the earlier note back: the earlier export stays whole."""
    from geoagent.config import load_config
    from geoagent.engine import load_kind
    from geoagent.runtime.backend import open_state
    from geoagent.runtime.export import export_together, export_table

    cfgp = generic_campaign(tmp_path, name="raise40", n=3, models=model_table())
    state = tmp_path / "state" / "raise40"
    assert _cli("run", str(cfgp), "--no-live").returncode == 0
    note = (state / "export_note.txt").read_text(encoding="utf-8")
    inodes = {p.name: p.stat().st_ino for p in state.iterdir() if p.suffix in (".csv", ".parquet")}
    cfg = load_config(cfgp)

    def refuse(key, row):
        raise ValueError(f"stored row {key} refused")

    with open_state(cfg, recover=False) as st:
        def write():
            tables = load_kind("generic").export(cfg, st.store)
            return tables + [export_table(st.store, "results", state, stem="again", row_check=refuse)]

        with pytest.raises(ValueError, match="refused"):
            export_together(cfg, write)
    assert {p.name: p.stat().st_ino for p in state.iterdir() if p.suffix in (".csv", ".parquet")} == inodes
    assert (state / "export_note.txt").read_text(encoding="utf-8") == note
    assert not list(state.glob(".*.tmp"))


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM twice"])
def test_a_run_stopped_while_writing_its_end_is_not_complete_until_rerun(tmp_path, how):
    """#1: status says the last run stopped before its final report and export, and to re-run; the re-run calls no
    model (the ledger's calls stay), exits 0, and status then says complete, the note ending 'Export complete'."""
    cfgp = generic_campaign(tmp_path, name="end40", n=6, models=model_table())
    state = tmp_path / "state" / "end40"
    first = _cli("run", str(cfgp), "--no-live")
    assert first.returncode == 0, first.stdout + first.stderr
    calls = _cli("status", str(cfgp)).stdout.split("calls ")[1].split()[0]
    proc = _run_blocked_at_its_end(cfgp, state)
    if how == "SIGKILL":
        proc.kill()
        assert proc.wait(timeout=60) == -signal.SIGKILL
    else:  # a forced exit: the first signal is taken (after every task ended), the second one exits at once
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.8)  # past the repeat window: a second signal, not the first one delivered twice
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130, proc.stderr.read()
        assert _manifest_runs(state)[-1]["status"] == "forced exit"
    _unblock(state)
    status = _cli("status", str(cfgp)).stdout
    assert "campaign complete" not in status, status
    assert "the last run stopped before writing its final report and export" in status, status
    assert "re-run the same command to write them" in status, status
    rerun = _cli("run", str(cfgp), "--no-live")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    after = _cli("status", str(cfgp)).stdout
    assert "campaign complete: every queue drained" in after and "stopped before writing" not in after, after
    assert after.split("calls ")[1].split()[0] == calls  # no model call
    last = _manifest_runs(state)[-1]
    assert last["status"] == "complete" and last["end_written"] is True and "writing_end_since" not in last
    assert (state / "export_note.txt").read_text(encoding="utf-8").split("\n\n")[-1].startswith("Export complete")


def test_a_rerun_of_a_complete_geohint_campaign_keeps_its_final_report(tmp_path, release_dir):
    """#3: the re-run's aggregator loads the stored rows the final report already shows and writes no live rewrite
    of them; killed at its end (as in #1), the report on disk is still the final one, not an 'Interim report'."""
    cfgp = tmp_path / "gh.toml"
    cfgp.write_text(geohint_three_sites_toml("gh40", models=SANDBOX_GPT_TOML,
                                             geohint="n_boot = 0\nreport_interval_s = 0.05",
                                             tables='[images]\nmissing = "placeholder"\n'), encoding="utf-8")
    env = _env(GEOAGENT_RELEASE=str(release_dir), GEOAGENT_QUEUES=str(tmp_path / "q"),
               GEOAGENT_STATE=str(tmp_path / "s"))
    first = _cli("run", str(cfgp), "--no-live", env=env)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    state = tmp_path / "s" / "gh40"
    report = state / "report" / "report.md"
    final = report.read_text(encoding="utf-8")
    assert "Interim report" not in final
    proc = _run_blocked_at_its_end(cfgp, state, env)
    time.sleep(0.5)  # ten live-report intervals: before, the first flush had rewritten it as interim by now
    proc.kill()
    proc.wait(timeout=60)
    _unblock(state)
    assert report.read_text(encoding="utf-8") == final
