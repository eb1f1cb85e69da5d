"""``status`` of reservations whose holder process is gone (session 13 review).

Before: after a forced exit (a second Ctrl-C is ``os._exit``: the calls in flight keep their reservations open)
and with no process of the campaign running, ``status`` said ``m: $0 settled (N calls) + $X reserved by 3 calls
still open``, as if calls were on the wire. Nothing will close them but the next run's start-up recovery, which
books them as unknown-outcome spend (:meth:`geoagent.runtime.ledger.Ledger.recover`: the holder's host, pid and
process start time). ``status`` now tells those from the reservations of a live process by the same rule
(:meth:`~geoagent.runtime.ledger.Ledger.gone_open`) and says what the next run does with them.
Real ``run.py`` code against the simulated provider and a real SQLite ledger held by a child process.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.runtime.backend import open_state
from geoagent.status import campaign_status, format_status
from tests._model_harness import generic_campaign, model_table

_HOLD = textwrap.dedent("""
    import os, sys
    from geoagent.runtime.store import open_campaign_state
    st = open_campaign_state(sys.argv[1], root=sys.argv[2], recover=False)
    for i in range(3):
        st.ledger.reserve(f"gone-{i}", 0.01, model="m")
    os._exit(0)  # what a second Ctrl-C does: no settle, no release, no retire
""")


def _campaign(tmp_path):
    cfgp = generic_campaign(tmp_path, name="gone", n=4, cap_usd=1.0, models=model_table())
    assert main(["run", str(cfgp), "--no-live"]) == 0
    return load_config(cfgp)


def test_status_says_the_next_run_books_a_gone_process_reservations_as_unknown_outcome(tmp_path, capsys):
    cfg = _campaign(tmp_path)
    subprocess.run([sys.executable, "-c", _HOLD, cfg.name, str(cfg.state_root())], check=True)
    capsys.readouterr()
    st = campaign_status(cfg)
    assert st["running"] is False
    text = format_status(st)
    # before: "m: $0.0000 settled (4 calls) + $0.0300 reserved by 3 calls still open"
    assert "still open" not in text, text
    assert "m: <$0.0001 settled (4 calls) + $0.0300 reserved by 3 calls of a process that is gone" in text, text
    assert ("reserved by a process that is gone: $0.0300 (3 calls; stopped without closing them: a forced exit or a "
            "kill); the next run of the campaign books them as unknown-outcome spend") in text, text
    # and the next run does: the reservations become unknown-outcome spend, none stays open
    assert main(["run", str(tmp_path / "gone.toml"), "--no-live"]) == 0
    after = campaign_status(cfg)["spend"]
    assert after["open_reservations"] == 0 and after["unknown_calls"] == 3


def test_status_keeps_still_open_for_a_live_holder(tmp_path):
    cfg = _campaign(tmp_path)
    with open_state(cfg, recover=False) as state:  # this process holds them: alive
        for i in range(2):
            state.ledger.reserve(f"live-{i}", 0.01, model="m")
        text = format_status(campaign_status(cfg))
        assert "reserved by 2 calls still open" in text, text
        assert "process that is gone" not in text, text


_HOLD_TWO = textwrap.dedent("""
    import os, sys
    from geoagent.runtime.store import open_campaign_state
    st = open_campaign_state(sys.argv[1], root=sys.argv[2], recover=False)
    st.ledger.reserve("gone-m-0", 0.01, model="m")
    st.ledger.reserve("gone-m-1", 0.01, model="m")
    st.ledger.reserve("gone-x-0", 0.02, model="x")
    os._exit(0)
""")


def test_status_gives_a_gone_process_reservations_per_model(tmp_path):
    """s14-usage: before, the reservations of a gone process were given as a total only; with a live process holding
    others, every model's line said "reserved by N calls still open", the gone ones included."""
    cfg = _campaign(tmp_path)
    subprocess.run([sys.executable, "-c", _HOLD_TWO, cfg.name, str(cfg.state_root())], check=True)
    with open_state(cfg, recover=False) as state:  # this process holds one of model m: alive
        state.ledger.reserve("live-m-0", 0.01, model="m")
        st = campaign_status(cfg)
        text = format_status(st)
    by = st["spend"]["by_model"]
    assert (by["m"]["gone_calls"], by["m"]["gone_usd"]) == (2, 0.02) and by["m"]["open_reservations"] == 3, by
    assert (by["x"]["gone_calls"], by["x"]["gone_usd"]) == (1, 0.02), by
    assert st["spend"]["gone_calls"] == 3  # the total, as before
    # before: "m: ... + $0.0300 reserved by 3 calls still open" and "x: ... + $0.0200 reserved by 1 call still open"
    assert ("m: <$0.0001 settled (4 calls) + $0.0100 reserved by 1 call still open + $0.0200 reserved by 2 calls of a "
            "process that is gone") in text, text
    assert "x: $0.0000 settled (0 calls) + $0.0200 reserved by 1 call of a process that is gone" in text, text
    assert "reserved by a process that is gone: $0.0400 of the $0.0500 reserved (3 calls;" in text, text
