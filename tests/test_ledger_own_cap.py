"""Each process keeps to the lower of its own config's cap and the campaign's (walkthrough 25, item 1).

A researcher's run A started with ``cap_usd = 0.60``; a second run B of the same campaign, started with 0.90 and
stopped after a few seconds, wrote 0.90 into the shared ledger, and A went on to spend $0.8065, past the cap it was
started with (and the config said 0.60 again). Now a reservation is checked against the lower of the campaign's
cap and the reserving process's own, so raising the cap in one run gives more to that run only, while lowering it
still stops every process; the process that changes the cap while another runs warns. Both backends.
"""

from __future__ import annotations

import warnings

import pytest

from _state_backends import open_ledger, spec  # noqa: F401 - the two-backend fixture
from geoagent.config import SetupWarning
from geoagent.runtime.ledger import BudgetExhausted
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture


def _fill(led, prefix: str, each: float) -> int:
    """Reserve ``each`` USD until the ledger refuses; return how many fitted."""
    n = 0
    while True:
        try:
            led.reserve(f"{prefix}{n}", each, model="m")
        except BudgetExhausted:
            return n
        n += 1


def test_a_higher_cap_of_a_later_run_does_not_raise_the_cap_of_a_run_already_going(spec):
    a = open_ledger(spec, 0.60)
    try:
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            b = open_ledger(spec, 0.90)
        try:
            said = " ".join(str(w.message) for w in got if issubclass(w.category, SetupWarning))
            assert "cap" in said and "$0.90" in said and "$0.60" in said, said
            if spec[0] == "sqlite":  # the SQLite ledger sees the other process of this machine running
                assert "1 other process of this campaign is running" in said, said
                assert "the one already running goes on under its own cap where that is lower than $0.90" in said, said
            assert a.summary().cap_usd == pytest.approx(0.60) and b.summary().cap_usd == pytest.approx(0.90)
            assert _fill(a, "a", 0.10) == 6  # A: its own $0.60, not the campaign's new $0.90
            with pytest.raises(BudgetExhausted) as exc:
                a.reserve("a-more", 0.01, model="m")
            assert exc.value.cap_usd == pytest.approx(0.60)
            assert _fill(b, "b", 0.10) == 3  # B: up to its $0.90 (0.60 held by A)
        finally:
            b.db.close()
    finally:
        a.db.close()


def test_a_lower_cap_of_a_later_run_stops_a_run_already_going(spec):
    a = open_ledger(spec, 0.60)
    try:
        assert _fill(a, "a", 0.10) == 6
        # below what is held: nothing more for anyone, and the line says spend ends above the new cap (walk31 #1)
        with pytest.warns(SetupWarning, match=r"no process starts another call: the campaign has already spent or "
                          r"reserved \$0\.60, above the new cap.*so its spend ends above \$0\.30"):
            c = open_ledger(spec, 0.30)
        c.db.close()
        with pytest.raises(BudgetExhausted) as exc:
            a.reserve("a-more", 0.01, model="m")
        assert exc.value.cap_usd == pytest.approx(0.30)
        assert a.summary().cap_usd == pytest.approx(0.30)
    finally:
        a.db.close()


def test_no_warning_when_no_other_process_runs(spec):
    a = open_ledger(spec, 0.60)
    a.retire()
    a.db.close()
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        b = open_ledger(spec, 0.90)  # a budget-stopped campaign re-run with a raised cap: the usual case
    b.db.close()
    if spec[0] == "sqlite":
        assert not [w for w in got if issubclass(w.category, SetupWarning)], [str(w.message) for w in got]


def test_a_lower_cap_still_above_the_spend_says_where_the_running_process_stops(spec):
    a = open_ledger(spec, 0.60)
    try:
        held = [a.reserve(f"a{i}", 0.10, model="m") for i in range(6)]
        for r in held[:4]:
            a.release(r)  # $0.20 still reserved, under the new cap
        with pytest.warns(SetupWarning, match=r"stop.* at \$0\.30 at the latest") as got:
            c = open_ledger(spec, 0.30)
        c.db.close()
        assert not any("spend ends above" in str(w.message) for w in got)
        assert _fill(a, "a-more", 0.10) == 1  # up to $0.30
    finally:
        a.db.close()
