"""The cap holds exactly at its boundary for calls of any size: a reservation is rounded up to whole nano-USD,
and the binary-float noise of ``usd * 1e9`` must not add a nano-USD to an amount that is a whole number of them.

Before, the rounding tolerated a fixed 1e-6 nano-USD of noise, less than the noise of amounts above about $32
(``32.02 * 1e9 = 32020000000.000004``): such a reservation came out one nano-USD high, so a cap of exactly two
such calls ($64.04) refused the second one, and 1,754 of the cent amounts up to $1,000 were off."""

from __future__ import annotations

import pytest

from _state_backends import open_ledger, spec  # noqa: F401 - the two-backend fixture
from geoagent.runtime.ledger import BudgetExhausted, usd_to_nano
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture


def test_whole_nano_amounts_round_up_to_themselves():
    off = [c for c in range(1, 100_001) if usd_to_nano(c / 100, round_up=True) != c * 10_000_000]
    assert off == [], f"{len(off)} cent amounts rounded up past themselves, e.g. ${off[0] / 100}"
    assert usd_to_nano(32.02, round_up=True) == 32_020_000_000
    assert usd_to_nano(1e-10, round_up=True) == 1  # a sub-nano reservation still holds something
    assert usd_to_nano(0.0000000011, round_up=True) == 2  # a real fraction still rounds up


def test_a_cap_of_exactly_two_large_calls_pays_for_both(spec):
    led = open_ledger(spec, 64.04)
    led.reserve("a", 32.02)
    led.reserve("b", 32.02)  # spent + reserved == cap: allowed (refused before by one nano-USD)
    with pytest.raises(BudgetExhausted):
        led.reserve("c", 1e-9)
    assert led.summary().remaining_usd == 0.0
    led.db.close()
