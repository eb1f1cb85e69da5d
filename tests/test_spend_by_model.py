"""Spend per model, and what unknown-outcome spend is, where spend is shown (walkthrough 9b items 1 and 4).

Before: the run summary, ``status`` and ``manifest.json`` gave the campaign's spend only (settled +
unknown-outcome + reserved); spend per model could only be had by summing ``cost_usd`` in
``model_responses.parquet``. The ledger records the ``[[models]]`` name with each reservation, so each of them
now shows it per model (settled, unknown-outcome, reserved). And after a ``kill -9`` the summary read
``$0.0243 unknown-outcome`` with nothing to say what that was: where unknown-outcome spend is not zero a line
now says (calls whose outcome is unknown: cut by a kill, a timeout or a dropped connection; the provider may
have billed them).
"""

from __future__ import annotations

import json
from pathlib import Path

import anyio
import pytest

from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.store import open_campaign_state
from geoagent.status import campaign_status, format_status

MODELS = """
[[models]]
name = "cheap"
provider = "simulated"
model = "cheap-1"
price_input_usd_per_mtok = 0.1
price_output_usd_per_mtok = 0.4
max_output_tokens = 100
rate = { requests = 5000, period_s = 1.0 }

[[models]]
name = "dear"
provider = "simulated"
model = "dear-1"
price_input_usd_per_mtok = 2.0
price_output_usd_per_mtok = 8.0
max_output_tokens = 100
rate = { requests = 5000, period_s = 1.0 }
"""


@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("spend")
    cfg = load_config(generic_campaign(tmp, name="permodel", n=12, models=MODELS, cap_usd=50.0))
    out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.status == "complete"
    return cfg, out


def test_the_run_outcome_and_summary_give_spend_per_model(ran):
    cfg, out = ran
    by = out.spend["by_model"]
    assert set(by) == {"cheap", "dear"}
    assert {m: by[m]["calls"] for m in by} == {"cheap": 12, "dear": 12}
    assert sum(by[m]["spent_usd"] for m in by) == pytest.approx(out.spend["spent_usd"], abs=1e-9)
    assert by["dear"]["spent_usd"] > by["cheap"]["spent_usd"] > 0
    assert all(by[m]["unknown_usd"] == 0 and by[m]["reserved_usd"] == 0 for m in by)
    text = out.summary()
    from geoagent.status import format_usd

    assert "  spend per model:" in text
    assert f"    cheap: {format_usd(by['cheap']['spent_usd'])} settled (12 calls)" in text
    assert f"    dear: {format_usd(by['dear']['spent_usd'])} settled (12 calls)" in text
    assert "unknown-outcome:" not in text  # nothing to explain


def test_status_and_manifest_give_spend_per_model(ran):
    cfg, out = ran
    st = campaign_status(cfg)
    assert st["spend"]["by_model"] == out.spend["by_model"]
    text = format_status(st)
    assert "  spend per model:" in text and "    dear: " in text
    manifest = json.loads((Path(cfg.state_dir()) / "manifest.json").read_text())
    run = manifest["runs"][-1]
    assert run["summary"]["spend"]["by_model"] == out.spend["by_model"]
    assert run["summary"]["spend"]["spent_usd"] == pytest.approx(out.spend["spent_usd"])


def test_unknown_outcome_spend_is_explained_where_it_is_shown(ran, tmp_path):
    cfg, out = ran
    # a call cut in flight: reserved for "dear", then its outcome unknown (as a kill's recovery books it)
    with open_campaign_state(cfg.name, root=cfg.state_root()) as state:
        r = state.ledger.reserve("cut-in-flight", 0.0243, model="dear")
        state.ledger.mark_unknown(r, note="owner process gone")
    st = campaign_status(cfg)
    by = st["spend"]["by_model"]
    assert by["dear"]["unknown_usd"] == pytest.approx(0.0243) and by["dear"]["unknown_calls"] == 1
    assert by["cheap"]["unknown_usd"] == 0
    text = format_status(st)
    assert "$0.0243 unknown-outcome" in text
    assert ("  unknown-outcome: $0.0243 (1 call): calls whose outcome is unknown (cut by a kill, a timeout or a "
            "dropped connection); the provider may have billed them, so they count against the cap") in text
    assert "    dear: " in text and "+ $0.0243 unknown-outcome (1 call)" in text
    from geoagent.engine import Outcome

    summary = Outcome(cfg.name, "complete", 0, 24, out.counts, st["spend"], {}).summary()
    assert "  unknown-outcome: $0.0243 (1 call): calls whose outcome is unknown" in summary
