"""The dry run counts the money earlier runs of the campaign already spent.

A fresh user's walkthrough: a campaign stopped at its cap with $0.2949 settled, the cap raised to 0.80; the dry
run compared the 218 calls left with the whole cap from zero spend ("all 218 calls fit at their expected cost")
and the run stopped at $0.7963 with 35 requests not dispatched (exit 4); at cap 1.40 it printed "(within cap)"
though $0.29 spent + $1.34 worst > $1.40. The ledger counts settled + unknown-outcome spend against the cap at
every reservation, so the dry run now starts from it (read from ``state/``, nothing written) and says so.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import anyio

from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, run_campaign

# one call at a time; worst case 100 output tokens at $10/Mtok = $0.001 per call (no input price); the simulated
# answers bill about 11 output tokens ($0.00011), which expected_output_tokens says
MODELS = """
[[models]]
name = "a"
provider = "simulated"
model = "a-1"
price_output_usd_per_mtok = 10.0
max_output_tokens = 100
expected_output_tokens = 11
concurrency = 1
"""
N = 40
WORST_USD = 0.001


def _run(cfg, **kw):
    return anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False, **kw))


def _dry(cfg):
    return anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False))


def _stopped_campaign(tmp: Path) -> tuple[float, int]:
    """Run the campaign at a cap of $0.0025 until it stops; return (booked USD, calls left to make)."""
    first = _run(load_config(generic_campaign(tmp, name="sp", n=N, models=MODELS, cap_usd=0.0025)))
    assert first.status == "budget exhausted" and first.exit_code == EXIT_BUDGET
    booked = first.spend["spent_usd"] + first.spend["unknown_usd"]
    assert booked > 0 and first.spend["calls"] < N
    return booked, N - first.spend["calls"]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_dry_run_after_a_budget_stop_compares_the_calls_left_with_the_cap_left(tmp_path):
    booked, left = _stopped_campaign(tmp_path)
    # a cap that holds every call left at its worst case from zero spend, but not next to what is booked
    cap = left * WORST_USD + booked / 2
    cfg = load_config(generic_campaign(tmp_path, name="sp", n=N, models=MODELS, cap_usd=cap))
    db = tmp_path / "state" / "sp" / "campaign.sqlite"
    before = _digest(db)
    dry = _dry(cfg)
    text = dry.summary()
    assert dry.exit_code == 0
    assert _digest(db) == before  # a dry run writes nothing (the raised cap is not stored either)
    assert f"total: {left} calls to make" in text
    assert f"${booked:.4f} already spent by earlier runs of this campaign" in text
    assert f"${cap - booked:.4f} left for these calls" in text
    assert "over cap" in text and "(within cap)" not in text  # main said "(within cap)": 0 + worst <= cap
    # walk46 #6: only the worst case is over what is left, every call fits at its expected cost: said so, not the
    # loud "(OVER cap)" / "!!! OVER CAP" of a plan whose expected cost does not fit (test_campaign_run_checks)
    assert "(worst case over cap; the expected cost fits: see below)" in text and "OVER" not in text
    assert "  worst case over cap: the worst case $" in text and f"calls fit at their expected cost" in text


def test_dry_run_forecast_of_a_raised_cap_starts_from_the_spend_already_booked(tmp_path):
    booked, left = _stopped_campaign(tmp_path)
    # room for about 9 more calls at ~$0.00011 beside the last $0.001 reservation; from zero spend (main) the dry
    # run forecast the stop near the end of the calls left (or "all fit")
    cap = booked + 0.002
    cfg = load_config(generic_campaign(tmp_path, name="sp", n=N, models=MODELS, cap_usd=cap))
    dry = _dry(cfg)
    text = dry.summary()
    forecast = None
    for line in text.splitlines():
        if "the run would stop at the cap (exit 4) after about" in line:
            forecast = int(line.split("after about ", 1)[1].split(" ", 1)[0])
    assert forecast is not None, text
    run = _run(cfg)
    assert run.status == "budget exhausted" and run.exit_code == EXIT_BUDGET
    made = run.spend["calls"] - (N - left)
    # the forecast settles each call at its expected $0.00011; the simulated answers bill 8-13 tokens: +-2 calls
    assert abs(forecast - made) <= 2, (forecast, made, text)
