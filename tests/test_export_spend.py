"""The exports carry the ledger per model (walkthrough 24, item 1).

Against a provider that dropped connections after the request was sent, ``status`` said ``$1.9478 settled +
$1.3760 unknown-outcome``, while the exports held only ``model_responses.cost_usd`` (summing to the settled
$1.9478): the unknown-outcome part, which counts against the cap and which the provider may have billed, was
nowhere in them. ``spend.parquet`` / ``spend.csv`` now hold the ledger per model beside the other tables.
"""

from __future__ import annotations

import anyio
import polars as pl
import pytest

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.export import PARQUET_CAMPAIGN_KEY, SPEND_SCHEMA
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_openai
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 33, seed="sandbox-good-n20")


def _config(tmp, base: str) -> str:
    models = "".join(f"""
[[models]]
name = "{name}"
provider = "openai"
model = "sim-gpt-{name}"
base_url = "{base}/v1"
api_key_env = "SPEND_KEY"
price_input_usd_per_mtok = {pin}
price_output_usd_per_mtok = {pout}
max_output_tokens = 200
concurrency = 8
rate = {{ requests = 2000, period_s = 1.0 }}
timeout_s = 1.5
max_attempts = 6
""" for name, pin, pout in (("cheap", 0.15, 0.6), ("dear", 3.0, 15.0)))
    return f"""[campaign]
name = "spend"
kind = "generic"
seed = 3
[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"
[queue]
max_attempts = 14
backoff_base_s = 0.02
backoff_max_s = 0.2
[budget]
cap_usd = 10.0
[generic]
n_requests = 60
""" + models


def test_the_spend_table_holds_settled_and_unknown_outcome_spend_per_model(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SPEND_KEY", KEY)
    # 30 % of requests reset after sending: a task dead-letters only if all its deliveries are reset, 0.3^14 each
    # (at 8 deliveries, 0.3^8 x 120 tasks: about one CI run in 120 failed; one did, session 34)
    app = llm_openai.make_app(faults=FaultConfig(rate=0.3, kinds=("reset",), seed=7), api_keys=[KEY])
    path = tmp_path / "spend.toml"

    async def go():
        async with serve(app) as base:
            path.write_text(_config(tmp_path, base), encoding="utf-8")
            return await run_campaign(load_config(path), live=False, handle_signals=False)

    outcome = anyio.run(go)
    assert outcome.status == "complete", outcome.summary()
    cfg = load_config(path)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        summary, by_model = st.ledger.summary(), st.ledger.spend_by_model()
    assert summary.unknown_usd > 0, "the faults made no unknown-outcome call: the test checks nothing"
    out = tmp_path / "state" / "spend"
    for _ in ("end of run", "export command"):
        spend = pl.read_parquet(out / "spend.parquet")
        assert dict(spend.schema) == SPEND_SCHEMA
        assert spend["model"].to_list() == ["cheap", "dear"]
        responses = pl.read_parquet(out / "model_responses.parquet")
        # settled spend per model is what the stored answers cost; billed adds the unknown-outcome part
        per_model = dict(responses.group_by("model").agg(pl.col("cost_usd").sum()).iter_rows())
        for row in spend.iter_rows(named=True):
            assert row["spent_usd"] == pytest.approx(per_model[row["model"]], abs=1e-9)
            assert row["unknown_usd"] == pytest.approx(by_model[row["model"]]["unknown_usd"], abs=1e-12)
            assert row["billed_usd"] == pytest.approx(row["spent_usd"] + row["unknown_usd"], abs=1e-12)
            assert row["calls"] == responses.filter(pl.col("model") == row["model"]).height
        assert spend["billed_usd"].sum() == pytest.approx(summary.spent_usd + summary.unknown_usd, abs=1e-9)
        assert spend["unknown_calls"].sum() == summary.unknown_calls > 0
        csv = pl.read_csv(out / "spend.csv")
        assert csv["billed_usd"].to_list() == pytest.approx(spend["billed_usd"].to_list(), abs=1e-12)
        meta = pl.read_parquet_metadata(out / "spend.parquet")
        assert meta[PARQUET_CAMPAIGN_KEY] == "spend" and float(meta["geoagent.cap_usd"]) == 10.0
        capsys.readouterr()
        assert main(["export", str(path)]) == 0
        assert "spend: 2 rows -> " in capsys.readouterr().out
