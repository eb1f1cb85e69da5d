"""``budget.cap_usd = 0`` with any priced model is refused at load (exit 2, nothing written).

A fresh user's walkthrough: the refusal covered only priced models of the billing providers on HTTP hosts; a
``simulated`` model with prices above 0 alone loaded, the run created its state and ended "budget exhausted"
after 0 calls (exit 4): the ledger books every call at the model's prices, whatever the provider, so cap 0
allows none of them. Replay models book their recorded usage at their prices the same way.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import ConfigError, load_config


def _write(tmp: Path, models: str) -> Path:
    p = tmp / "z.toml"
    p.write_text(f'[campaign]\nname = "z"\nkind = "generic"\n[paths]\nqueues = "{tmp / "queues"}"\n'
                 f'state = "{tmp / "state"}"\n[budget]\ncap_usd = 0.0\n[generic]\nn_requests = 3\n{models}',
                 encoding="utf-8")
    return p


def _model(name: str, provider: str, pin: float, pout: float) -> str:
    return (f'[[models]]\nname = "{name}"\nprovider = "{provider}"\nmodel = "{name}-1"\n'
            f"price_input_usd_per_mtok = {pin}\nprice_output_usd_per_mtok = {pout}\n")


def test_zero_cap_refuses_a_priced_simulated_model_at_load_and_the_run_writes_nothing(tmp_path, capsys):
    cfg = _write(tmp_path, _model("sim-a", "simulated", 0.0, 0.6))
    with pytest.raises(ConfigError) as ei:
        load_config(cfg)
    assert "budget.cap_usd" in str(ei.value) and "sim-a" in str(ei.value)
    assert main(["run", str(cfg), "--no-live"]) == 2
    assert "sim-a" in capsys.readouterr().err
    assert not (tmp_path / "state").exists() and not (tmp_path / "queues").exists()


def test_zero_cap_refusal_names_every_priced_model_and_spares_free_ones(tmp_path):
    models = (_model("sim-a", "simulated", 0.15, 0.0) + _model("sim-free", "simulated", 0.0, 0.0)
              + _model("sim-b", "simulated", 1.0, 2.0))
    with pytest.raises(ConfigError) as ei:
        load_config(_write(tmp_path, models))
    msg = str(ei.value)
    assert "priced model(s) sim-a, sim-b;" in msg and "sim-free" not in msg
    # free simulated models still run at cap 0
    assert load_config(_write(tmp_path, _model("sim-free", "simulated", 0.0, 0.0))).budget.cap_usd == 0.0
