"""The ``--stages`` wait for an upstream stage no process has taken up is one per process, and a bad bound is refused
before anything is created (fixstages44, review44b #2 and #4).

#2 Before: each stage runner of a ``--stages`` process kept its own clock and verdicts for that wait, and a runner
starts asking only once the runners before it in the process have ended, so GeoVerify's ``--stages scorer,aggregator``
waited ``GEOAGENT_UPSTREAM_WAIT_S`` twice over and GeoHint's ``--stages geocoder,scorer,aggregator`` three times (30
minutes by default), with a "waiting for a process that runs stages model_caller, parser" line and a "no process took
up stage model_caller within N s" line per runner. Now the runners of one process share one
:class:`geoagent.runtime.worker.UpstreamWait`: the process waits the bound once, and says each line once.

#4 Before: ``GEOAGENT_UPSTREAM_WAIT_S=-5`` was refused only after the run had planned (tasks queued, manifest.json
recording a failed run), and ``inf`` / ``1e400`` were taken: a wait for ever, the very hang the bound is there to end.
Now ``run --stages`` refuses them (exit 2) before the config is loaded or anything written.

Real ``run.py run`` in-process (the CLI's ``main``) over a GeoHint campaign (simulated model, the release folder) and
the generic one: nothing runs the upstream stages, so the downstream process waits the bound and ends.
"""

from __future__ import annotations

import time

import pytest

from _model_harness import generic_campaign, model_table
from geoagent.cli import main

DOWN = "geocoder,scorer,aggregator"
#: GeoHint's downstream stages wait for two upstream ones; the bound's line names the first
WAIT_LINE = "waiting for a process that runs stages model_caller, parser to start"
BOUND_LINE = "no process took up stage model_caller within 4 s (GEOAGENT_UPSTREAM_WAIT_S)"


def _records(caplog, text: str) -> list:
    return [r for r in caplog.records if text in r.getMessage()]


def test_three_downstream_stages_wait_the_bound_once_with_one_line_each(tmp_path, monkeypatch, capsys, caplog,
                                                                         release_dir):
    """GeoHint's ``--stages geocoder,scorer,aggregator`` with no model caller anywhere: the process ends once the
    bound has run out once (before: three times, 12 s here, 30 minutes by default), its work left for the model
    caller; the waiting line and the bound's line are said once each, by the first runner."""
    from test_lanes_plan_prefix_walk39 import _toml

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.5)
    cfgp = tmp_path / "gh.toml"
    cfgp.write_text(_toml(tmp_path, release_dir, ("a",), 1.0), encoding="utf-8")
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "4")
    rc = main(["run", str(cfgp), "--stages", DOWN, "--no-live"])
    ended = time.time()
    out = capsys.readouterr().out
    assert rc == 0 and "stages geocoder, scorer, aggregator finished; campaign not complete" in out, out
    assert "waiting on requests for stage model_caller" in out, out
    waits, bounds = _records(caplog, WAIT_LINE), _records(caplog, BOUND_LINE)
    assert len(waits) == 1 and waits[0].getMessage().startswith("stage geocoder: its input is drained;"), caplog.text
    assert len(bounds) == 1 and bounds[0].getMessage().startswith("stage geocoder: "), caplog.text
    assert bounds[0].created - waits[0].created >= 4.0 - 0.5 - 0.1  # the line comes 0.5 s into the wait
    # after the bound no runner waits it again (before: the scorer's 4 s, then the aggregator's)
    assert ended - bounds[0].created < 3.9, ended - bounds[0].created


@pytest.mark.parametrize("value", ["-5", "inf", "1e400", "nan", "-inf"])
def test_a_bad_upstream_wait_is_refused_before_anything_is_created(tmp_path, monkeypatch, capsys, value):
    """A negative or non-finite ``GEOAGENT_UPSTREAM_WAIT_S``: exit 2 naming the variable and the value, and no state
    folder, queue or manifest made (nothing planned); without ``--stages`` it is not read (no wait to bound)."""
    monkeypatch.chdir(tmp_path)
    cfg = generic_campaign(tmp_path, name="badwait", n=4, models=model_table("m"))
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", value)
    rc = main(["run", str(cfg), "--stages", "collector", "--no-live"])
    captured = capsys.readouterr()
    assert rc == 2, captured
    assert (f"GEOAGENT_UPSTREAM_WAIT_S must be a finite number of seconds >= 0, got '{value}'"
            in captured.out + captured.err), captured
    assert not (tmp_path / "state").exists() and not (tmp_path / "queues").exists(), sorted(
        p.name for p in tmp_path.iterdir())
    # a whole-campaign run waits for no upstream process: the variable is not its concern
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert (tmp_path / "state" / "badwait" / "manifest.json").is_file()


def test_upstream_wait_s_refuses_non_finite_values(monkeypatch):
    """:func:`geoagent.runtime.daemon.upstream_wait_s`: a finite number of seconds >= 0, else ValueError."""
    from geoagent.runtime.daemon import upstream_wait_s

    for good, seconds in (("0", 0.0), ("2.5", 2.5), ("86400", 86400.0)):
        monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", good)
        assert upstream_wait_s() == seconds
    for bad in ("inf", "Infinity", "1e400", "nan", "-1", "ten"):
        monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", bad)
        with pytest.raises(ValueError, match="GEOAGENT_UPSTREAM_WAIT_S must be a finite number of seconds >= 0"):
            upstream_wait_s()
