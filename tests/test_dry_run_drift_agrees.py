"""The dry run and the run agree on whether a config change mixes results (walkthrough 25, item 3).

After a budget stop, a researcher changed one model's prices and replaced another model by a new one. The dry run
warned ``... the answers already stored keep the old ones: results would mix both versions; use a new [campaign]
name``, while the run said ``a price changes no request or answer, so nothing mixes`` and ``this changes which
tasks are planned, not how any is asked ... so nothing mixes`` (which is what it does). The dry run now decides
as the run does and prints the same price line; a change of how requests are asked still gets its warning."""

from __future__ import annotations

from geoagent.cli import main

MODEL = """
[[models]]
name = "{name}"
provider = "simulated"
model = "{name}"
max_output_tokens = {max_out}
concurrency = 2
price_input_usd_per_mtok = {pin}
price_output_usd_per_mtok = {pin}
"""


def _write(path, models, cap=0.05):
    path.write_text(f"""[campaign]
name = "mixcheck"
kind = "generic"
seed = 4
[budget]
cap_usd = {cap}
[generic]
n_requests = 12
""" + "".join(MODEL.format(name=n, pin=pin, max_out=mo) for n, pin, mo in models), encoding="utf-8")


def test_a_price_change_and_a_replaced_model_read_as_no_mix_in_the_dry_run_and_the_run(isolated_roots, capsys):
    cfg = isolated_roots / "mix.toml"
    _write(cfg, [("sim-a", 1.0, 100), ("sim-b", 2.0, 100)])
    assert main(["run", str(cfg), "--no-live"]) == 0
    _write(cfg, [("sim-a", 10.0, 100), ("sim-c", 2.0, 100)])
    capsys.readouterr()
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    dry = capsys.readouterr()
    dry_text = " ".join((dry.out + dry.err).split())
    assert "results would mix" not in dry_text, dry_text
    assert "this changes which tasks are planned, not how any is asked" in dry_text, dry_text
    assert "a price changes no request or answer, so nothing mixes" in dry_text, dry_text
    assert "new tasks are asked like the stored ones, so nothing mixes" in dry_text, dry_text
    assert main(["run", str(cfg), "--no-live"]) == 0
    run = " ".join(capsys.readouterr().err.split())
    assert "results would mix" not in run and "nothing mixes" in run, run


def test_a_changed_request_setting_still_warns_in_the_dry_run(isolated_roots, capsys):
    cfg = isolated_roots / "mix.toml"
    _write(cfg, [("sim-a", 100.0, 100)], cap=0.02)
    assert main(["run", str(cfg), "--no-live"]) == 4  # the cap stops it with requests left queued
    _write(cfg, [("sim-a", 100.0, 50)], cap=0.02)  # max_output_tokens: how a request is asked
    capsys.readouterr()
    main(["run", str(cfg), "--simulate", "--no-live"])
    dry = capsys.readouterr()
    dry_text = " ".join((dry.out + dry.err).split())
    assert "results would mix both versions" in dry_text, dry_text
