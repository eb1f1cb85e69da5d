"""The dry run says when a model's rate cannot pace it (walkthrough 25, item 6): ``provider = "simulated"`` without
``base_url`` answers in the run's process, with no HTTP request, and ran at 312 calls/s under ``rate = 4/s`` with
nothing saying why. With a ``base_url`` (the local fake over HTTP) the rate paces it and no note is given."""

from __future__ import annotations

from geoagent.cli import main

CONFIG = """[campaign]
name = "simpace"
kind = "generic"
seed = 1
[budget]
cap_usd = 1.0
[[models]]
name = "sim-a"
provider = "simulated"
model = "sim-a"
{base}rate = {{ requests = 4, period_s = 1.0 }}
[generic]
n_requests = 3
"""


def test_an_in_process_simulator_with_a_rate_gets_a_note(isolated_roots, capsys):
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(base=""), encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert ("sim-a: " in out and "simulated: answers are made in this process, no model is called and its rate does "
            "not pace it: give it base_url") in out, out
    cfg.write_text(CONFIG.format(base='base_url = "http://openai.sandbox.invalid/v1"\n'), encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    assert "does not pace it" not in capsys.readouterr().out
