"""A cap under one nano-USD (the ledger's unit) with a priced model is refused at load, as a cap of 0 is (session 36,
runtime36 #7: ``cap_usd = 1e-12`` was accepted and the run then stopped at once, "budget exhausted ... cap $0.0000")."""

from __future__ import annotations

import pytest

from geoagent.config import ConfigError, config_from_dict


def _cfg(cap):
    return config_from_dict({
        "campaign": {"name": "tiny"},
        "budget": {"cap_usd": cap},
        "models": [{"name": "m", "provider": "simulated", "model": "sim", "price_input_usd_per_mtok": 1.0,
                    "price_output_usd_per_mtok": 2.0}],
    })


@pytest.mark.parametrize("cap, says", [(0, "budget.cap_usd: 0 allows no call"),
                                       (1e-12, "budget.cap_usd: 1e-12 (under one nano-USD, the ledger's unit)")])
def test_a_cap_below_one_nano_usd_is_refused_with_a_priced_model(cap, says):
    with pytest.raises(ConfigError, match=r"allows no call of the priced model\(s\) m") as err:
        _cfg(cap)
    assert says in str(err.value)


def test_one_nano_usd_is_a_cap():
    assert _cfg(1e-9).budget.cap_usd == 1e-9
