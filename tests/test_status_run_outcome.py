"""``status`` names the outcome manifest.json recorded for the run whose progress it shows (walkthrough 9, G).

Before, after an interrupted, incomplete, budget-stopped or failed run ``status`` said only ``last progress
(run ended)``. Here: a generic campaign whose model's server (a local aiohttp fake) answers every call with
400, so the run ends incomplete (exit 3); then the same campaign against the simulated model ends complete.
"""

from __future__ import annotations

import json

from geoagent.cli import main
from test_adversarial_inputs import GENERIC, _FixedAnswerServer


def test_status_names_the_recorded_outcome_of_the_last_run(tmp_path, capsys):
    server = _FixedAnswerServer(400, b'{"error": {"message": "bad request"}}')
    cfg = tmp_path / "g.toml"
    cfg.write_text(GENERIC.format(tmp=tmp_path).replace(
        'provider = "simulated"\nmodel = "sim-1"', f'provider = "openai"\nmodel = "m-1"\nbase_url = "{server.base_url}"'))
    try:
        assert main(["run", str(cfg), "--no-live"]) == 3
    finally:
        server.close()
    runs = json.loads((tmp_path / "state" / "adv-state" / "manifest.json").read_text(encoding="utf-8"))["runs"]
    assert runs[-1]["status"] == "incomplete"
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "last progress (run ended: incomplete, as manifest.json recorded)" in out, out

    done = tmp_path / "done.toml"
    done.write_text(GENERIC.format(tmp=tmp_path).replace('name = "adv-state"', 'name = "adv-done"'))
    assert main(["run", str(done), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["status", str(done)]) == 0
    assert "last progress (run ended: complete, as manifest.json recorded)" in capsys.readouterr().out
