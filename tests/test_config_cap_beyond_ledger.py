"""``budget.cap_usd`` above what the ledger can hold is refused at load (exit 2, nothing written).

The ledger counts integer nano-USD in 64-bit SQLite integers (and Redis's): a cap above about $9.22e9 cannot be
stored. A user who writes a huge cap for "no cap" (``cap_usd = 1e10``) got an ``OverflowError: Python int too
large to convert to SQLite INTEGER`` traceback once the campaign folder had been made, and ``1e300`` an
``OverflowError: cannot convert float infinity to integer``. The limit is :data:`geoagent.config.MAX_CAP_USD`.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import MAX_CAP_USD, ConfigError, load_config
from geoagent.runtime.ledger import usd_to_nano


def _write(tmp: Path, cap: str) -> Path:
    p = tmp / "c.toml"
    p.write_text(f'[campaign]\nname = "c"\nkind = "generic"\n[paths]\nqueues = "{tmp / "queues"}"\n'
                 f'state = "{tmp / "state"}"\n[budget]\ncap_usd = {cap}\n[generic]\nn_requests = 2\n'
                 '[[models]]\nname = "sim"\nprovider = "simulated"\nmodel = "sim-1"\n'
                 'price_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.6\n', encoding="utf-8")
    return p


@pytest.mark.parametrize("cap", ["1e10", "100000000000.0", "1e300"])
def test_a_cap_the_ledger_cannot_hold_is_a_config_error_and_nothing_is_written(tmp_path, capsys, cap):
    cfg = _write(tmp_path, cap)
    with pytest.raises(ConfigError) as ei:
        load_config(cfg)
    assert "budget.cap_usd" in str(ei.value)
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "budget.cap_usd" in err and "Traceback" not in err
    assert not (tmp_path / "state").exists() and not (tmp_path / "queues").exists()


def test_the_largest_cap_allowed_fits_the_ledger_and_runs(tmp_path, capsys):
    assert usd_to_nano(MAX_CAP_USD) < 2 ** 63
    cfg = _write(tmp_path, repr(MAX_CAP_USD))
    assert load_config(cfg).budget.cap_usd == MAX_CAP_USD
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert "complete" in capsys.readouterr().out
