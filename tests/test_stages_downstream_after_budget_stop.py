"""A downstream ``--stages`` process started after the campaign stopped at its cost cap does not wait for the model
caller (fixstagesbudget43).

fixstages43 made a ``--stages`` process wait for an upstream stage with ready work that no process has taken up since
it started (its upstream process not started yet). That took in a campaign stopped at its budget cap: a researcher
who ran ``run.py run X --stages geocoder,scorer,aggregator`` to score what the capped campaign got waited for ever
for a model caller that would stop again at once (before fixstages43 it ended, exit 0, naming the command).

Now a foreign upstream stage whose last run ended ``budget exhausted``, stopped by the USD cap, with no more room
under this process's cap than then (:func:`geoagent.engine.upstream_budget_stop`, the rule by which ``status`` says
"raise [budget] cap_usd"), is not waited for; a process whose only work left waits for such stages ends as the
capped run does (``budget exhausted``, exit 4) and writes the report over every answer stored; its closing lines say
what waits for which stage, the cap to raise and the command that takes it. A cap raised enough keeps the wait (a
process that runs the stage would go on).

End to end: the GeoHint campaign of tests/test_lanes_plan_prefix_walk39.py (the sandbox's OpenAI-compatible fake with
prices, a cap that stops it after a few dozen calls), its model calls made by a ``--stages model_caller,parser``
run, then the downstream stages by another run.
"""

from __future__ import annotations

import time

from test_lanes_plan_prefix_walk39 import _toml

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET
from geoagent.runtime.store import open_campaign_state

DOWN = "geocoder,scorer,aggregator"


def _capped(tmp, release_dir, capsys, cap_usd: float = 0.06):
    """The campaign's model calls, made by an upstream-only run until the cap stopped it: (config path, config)."""
    cfgp = tmp / "gh.toml"
    cfgp.write_text(_toml(tmp, release_dir, ("a",), cap_usd), encoding="utf-8")
    assert main(["run", str(cfgp), "--stages", "model_caller,parser", "--no-live"]) == EXIT_BUDGET
    capsys.readouterr()
    return cfgp, load_config(cfgp)


def test_a_downstream_process_after_a_budget_stop_ends_and_reports_what_was_answered(tmp_path, release_dir, capsys,
                                                                                    caplog, monkeypatch):
    monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.0)
    cfgp, cfg = _capped(tmp_path, release_dir, capsys)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        answered = st.store.count_responses()
    assert answered >= 10, answered
    t0 = time.monotonic()
    rc = main(["run", str(cfgp), "--stages", DOWN, "--no-live"])
    out = capsys.readouterr().out
    # before: it waited for ever ("waiting for a process that runs stage model_caller to start")
    assert time.monotonic() - t0 < 120
    assert "waiting for a process that runs stage model_caller" not in caplog.text, caplog.text
    assert "stage geocoder: not waiting for stage model_caller: the campaign's cost cap stopped it" in caplog.text
    assert rc == EXIT_BUDGET and f"campaign {cfg.name}: budget exhausted" in out, out
    # the closing line: what waits for which stage, the budget state, the cap to raise and the command
    line = next((ln for ln in out.splitlines() if "waiting on requests for stage model_caller" in ln), None)
    assert line is not None, out
    assert "no process of the campaign runs stage model_caller now: the campaign's cost cap stopped it" in line, line
    # fixstages44: the cap the run stopped at, and how far to raise it (as `status` says it)
    assert "ended budget exhausted at the $0.0600 cap; billed $" in line and "; it refused a call of up to $" in line
    assert (f"raise [budget] cap_usd in {cfgp} to at least $" in line or
            f"raise [budget] cap_usd in {cfgp} above the $0.0600 it stopped at" in line), line
    assert (f", then `run.py run {cfgp} --stages model_caller` (or `run.py run "
            f"{cfgp}`, every stage) takes its work") in line, line
    assert "report and export left to the process that finishes the campaign" not in out, out
    # the report covers every answer the capped run stored: each one scored (table S0: one row per scored answer)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        scored = st.store.count_results("geohint_scored")
        assert st.store.count_responses() == answered  # nothing new was called
    assert scored == answered, (scored, answered)
    report = (cfg.state_dir() / "report" / "report.md").read_text(encoding="utf-8")
    assert "Interim report: the run ended 'budget exhausted'" in report, report[:2000]
    # its own command makes no model call: the report says what does
    assert "raise [budget] cap_usd, then run the stages the cap stopped (`run.py run CONFIG`, every stage)" in report
    assert f"{scored} scored response" in out, out


def test_a_cap_raised_enough_keeps_the_wait(tmp_path, release_dir, capsys, caplog, monkeypatch):
    """The config's cap raised since the stop leaves room: a process that runs the model caller would go on, so the
    downstream process waits for one as for any upstream stage not taken up yet (here: bounded, then ends as
    before: exit 0, the work left for a process that runs that stage, no report)."""
    monkeypatch.setattr("geoagent.runtime.worker.WAIT_SAID_AFTER_S", 0.0)
    cfgp, cfg = _capped(tmp_path, release_dir, capsys)
    cfgp.write_text(cfgp.read_text(encoding="utf-8").replace("cap_usd = 0.06", "cap_usd = 1.0"), encoding="utf-8")
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "1.5")
    rc = main(["run", str(cfgp), "--stages", DOWN, "--no-live"])
    out = capsys.readouterr().out
    # review43e #2: parser, which no process has taken up either, named beside it
    assert "waiting for a process that runs stages model_caller, parser to start" in caplog.text, caplog.text
    assert "not waiting for stage model_caller" not in caplog.text, caplog.text
    assert rc == 0 and "finished; campaign not complete" in out, out
    assert "no process of the campaign runs stage model_caller now: `run.py run" in out, out
    assert "report and export left to the process that finishes the campaign" in out, out


def test_upstream_budget_stop_follows_the_cap_and_the_refused_call(tmp_path):
    """The verdict's rule over a recorded stop: the cap not raised, or raised too little for the call it refused:
    a reason; raised enough: None; a stop by another stage, or a last run that ended otherwise: None."""
    import asyncio
    import json

    from geoagent.engine import upstream_budget_stop
    from geoagent.runtime.ledger import LedgerSummary

    class Ledger:
        def __init__(self, cap: float, spent: float):
            self.s = LedgerSummary(cap_usd=cap, spent_usd=spent, reserved_usd=0.0, unknown_usd=0.0, overrun_usd=0.0,
                                   calls=3, unknown_calls=0, released_calls=0, input_tokens=0, output_tokens=0,
                                   open_reservations=0, overrun_calls=0)

        async def asummary(self):
            return self.s

    names = ["model_caller", "parser", "collector"]
    refusal = ("budget exhausted: spent $0.095000 + unknown $0.000000 + reserved $0.000000 + this call $0.010000 > "
               "cap $0.100000")

    def record(status: str, stages: list[str] | None, stopped: str = "model_caller") -> None:
        run = {"run_id": "r1", "command": "run", "status": status, "started_unix": 1.0, "stages": stages,
               "summary": {"spend": {"cap_usd": 0.1}}}
        (tmp_path / "manifest.json").write_text(json.dumps({"runs": [run]}), encoding="utf-8")
        rec = {"run_id": "r1", "spend": {"cap_usd": 0.1}, "stages": [
            {"stage": stopped, "budget_stopped": True, "budget_fixes": ["raise [budget] cap_usd and re-run"],
             "budget_refusals": [refusal]}]}
        (tmp_path / "progress.jsonl").write_text(json.dumps(rec, separators=(",", ":")) + "\n", encoding="utf-8")

    def verdict(cap: float) -> str | None:
        return asyncio.run(upstream_budget_stop(tmp_path, names, Ledger(cap, 0.095), "gh.toml", "model_caller"))

    record("budget exhausted", ["model_caller", "parser"])
    # fixstages44: the cap it stopped at, not the config's now, and the cap that leaves room for the refused call
    assert ("ended budget exhausted at the $0.1000 cap; billed $0.0950; it refused a call of up to $0.0100): raise "
            "[budget] cap_usd in gh.toml to at least $0.1050 (billed + that call), then") in verdict(0.1)
    low = verdict(0.104)  # raised, but 0.095 + 0.01 does not fit
    assert low is not None and "at the $0.1000 cap; billed $0.0950" in low, low
    assert "raise [budget] cap_usd in gh.toml (now $0.1040) to at least $0.1050 (billed + that call)" in low, low
    assert verdict(0.2) is None  # raised enough: a process that runs it goes on
    record("budget exhausted", None, stopped="geocoder")  # another stage's cap (the Nominatim one)
    assert verdict(0.1) is None
    record("interrupted", None)
    assert verdict(0.1) is None
