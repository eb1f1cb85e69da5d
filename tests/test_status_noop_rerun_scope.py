"""``status`` after a re-run that found nothing to do labels the stage lines as the figures of the last run that
did work, as the line above them says (session 12's run-scope labels).

Before: "last run (...): no work left to do; the figures below are of the last run that did work" and, under it,
"stages, last run only": the last run (the no-op one) had done nothing, the figures were an earlier run's.
"""
from __future__ import annotations

from _model_harness import generic_campaign, model_table
from geoagent.cli import main


def test_stage_lines_after_a_noop_rerun_are_the_last_run_that_did_work(tmp_path, capsys):
    cfgp = generic_campaign(tmp_path, name="noop", n=4, models=model_table("a") + model_table("b"))
    assert main(["run", str(cfgp), "--no-live"]) == 0
    assert main(["run", str(cfgp), "--no-live"]) == 0  # nothing left: no work
    capsys.readouterr()
    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    assert "the figures below are of the last run that did work" in out, out
    header = next(ln for ln in out.splitlines() if ln.strip().startswith("stages,"))
    assert "stages, last run that did work only" in header, out
    assert "per model (last run that did work): a done 4, b done 4" in out, out
