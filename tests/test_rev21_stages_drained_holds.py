"""Adversarial review of commit 38bdb89: what held up.

* a ``--stages collector`` process whose stage drained while its input edge holds a dead letter is still
  ``incomplete`` (exit 3), even though other answers arrived after the drain (the arrivals are said too);
* a ``--stages model_caller,collector`` process: its collector drains only after its own model caller ended, so
  its own answers are never "queued by another process"; the run completes.
"""

from __future__ import annotations


from _late_arrival import arrive_after_drain, hold_ready
from _model_harness import generic_campaign, model_table
from geoagent import constants as C
from geoagent.cli import main
from geoagent.runtime import worker as worker_mod
from geoagent.runtime.queue import open_queue

COLLECTOR = "collector"


def _prepare(tmp_path, name):
    cfg = generic_campaign(tmp_path, name=name, n=10, models=model_table("m"), cap_usd=1.0)
    assert main(["run", str(cfg), "--no-live"]) == 0
    cfg.write_text(cfg.read_text(encoding="utf-8").replace("n_requests = 10", "n_requests = 14"), encoding="utf-8")
    return cfg


def test_drained_with_a_dead_letter_on_its_input_is_still_incomplete(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    name = "late-and-dead"
    cfg = _prepare(tmp_path, name)
    assert main(["run", str(cfg), "--stages", "model_caller", "--no-live"]) == 0
    capsys.readouterr()

    keys = hold_ready(lambda: open_queue(tmp_path / "queues", name, C.EDGE_RESPONSES))
    assert len(keys) == 4
    arrived = arrive_after_drain(monkeypatch, keys=keys[:3])  # 3 arrive, 1 stays dead
    rc = main(["run", str(cfg), "--stages", COLLECTOR, "--no-live"])
    out = capsys.readouterr().out
    assert arrived == [3]
    assert rc == 3 and "incomplete" in out, out
    assert "3 tasks on responses queued by another process after stage collector had finished here" in out, out


def test_a_process_running_both_stages_never_calls_its_own_answers_another_process_s(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    cfg = _prepare(tmp_path, "both-stages")
    seen: list[tuple[str, bool]] = []
    original = worker_mod.StageRunner._input_exhausted

    async def spy(self):
        got = await original(self)
        seen.append((self.stage.name, got))
        return got

    monkeypatch.setattr(worker_mod.StageRunner, "_input_exhausted", spy)
    rc = main(["run", str(cfg), "--stages", "model_caller,collector", "--no-live"])
    out = capsys.readouterr().out
    assert rc == 0 and "complete" in out, out
    assert "queued by another process" not in out, out
    assert ("collector", True) in seen
