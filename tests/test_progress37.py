"""Progress reporting (session 37, progress37).

Before:

* #2 the live display's spend line showed settled spend alone: a run whose calls were cut by connection resets read
  "spend $0.0084 / cap $0.0200" beside "BUDGET EXHAUSTED - draining", though $0.0116 of unknown-outcome spend counted
  against the cap too;
* #3 after a budget stop the display still showed "ETA 23 s" (the rest waits for a higher cap, no time says when it
  ends), and the run's final progress record kept ``eta_s: 22.5`` and the final frame " - draining";
* #5 two processes appending to one JSONL file (``--stages`` processes writing ``progress.jsonl``) could leave empty
  lines: the look at the file's last byte and the write were not one step (195 of 12,000 lines, 4 writers of
  20 KB records), and a naive reader raised on them.
"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import anyio
import orjson
from _model_harness import generic_campaign, model_table
from rich.console import Console

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, run_campaign
from geoagent.files import append_jsonl
from geoagent.runtime.progress import live_table, spend_caption


def _render(rec: dict, final: bool) -> list[str]:
    console = Console(width=100, record=True, color_system=None)
    console.print(live_table(rec, final=final))
    return console.export_text().splitlines()


def _record(**extra) -> dict:
    return {"campaign": "c", "elapsed_s": 20.0, "stages": [{"stage": "model_caller", "done": 9, "in_flight": 2,
                                                            "failed": 0, "dead": 0, "rate_per_s": 1.0}],
            "spend": {"spent_usd": 0.00837, "unknown_usd": 0.01156, "reserved_usd": 0.0, "cap_usd": 0.02},
            "eta_s": None, **extra}


def test_the_spend_line_counts_unknown_outcome_and_reserved_spend():
    assert spend_caption({"spent_usd": 0.00837, "unknown_usd": 0.01156, "reserved_usd": 0.0, "cap_usd": 0.02}) == (
        "spend $0.0084 + $0.0116 unknown-outcome / cap $0.0200")
    assert spend_caption({"spent_usd": 0.01, "unknown_usd": 0.0, "reserved_usd": 0.002, "cap_usd": 0.02}) == (
        "spend $0.0100 + $0.0020 reserved / cap $0.0200")
    assert spend_caption({"spent_usd": 0.01, "cap_usd": 0.02}) == "spend $0.0100 / cap $0.0200"
    lines = _render(_record(budget_stopped=True), final=False)
    assert any("spend $0.0084 + $0.0116 unknown-outcome / cap $0.0200" in ln for ln in lines), lines


def test_no_eta_after_a_budget_stop_and_no_draining_in_the_final_frame():
    draining = _render(_record(budget_stopped=True, eta_s=22.5, eta_stage="model_caller"), final=False)
    assert not any("ETA" in ln for ln in draining), draining
    assert any("BUDGET EXHAUSTED - draining" in ln for ln in draining), draining
    final = _render(_record(budget_stopped=True, finished=True), final=True)
    assert any("BUDGET EXHAUSTED" in ln for ln in final) and not any("draining" in ln for ln in final), final


def test_a_budget_stopped_runs_records_carry_no_eta(tmp_path):
    cfg = load_config(generic_campaign(tmp_path, name="bud37", n=60, cap_usd=0.0003,
                                       models=model_table("sim", max_output_tokens=300, concurrency=2)))
    out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.exit_code == EXIT_BUDGET
    records = [orjson.loads(line) for line in (cfg.state_dir() / C.PROGRESS_FILE).read_bytes().splitlines() if line]
    stopped = [r for r in records if r.get("budget_stopped")]
    assert stopped and stopped[-1]["finished"]
    assert all(r["eta_s"] is None and r["eta_stage"] is None for r in stopped)  # before: the final record said 22.5 s


def _writer(path: str, tag: int, n: int) -> None:
    for i in range(n):
        append_jsonl(path, [{"w": tag, "i": i, "pad": "x" * 20_000}], fsync=False)


def test_concurrent_appenders_leave_no_empty_line(tmp_path: Path):
    path = tmp_path / "progress.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(path), tag, 800)) for tag in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""  # ends with a newline
    body = lines[:-1]
    assert len(body) == 3200 and all(body), sum(not ln for ln in body)
    assert sorted((r["w"], r["i"]) for r in map(orjson.loads, body)) == [(w, i) for w in range(4) for i in range(800)]
