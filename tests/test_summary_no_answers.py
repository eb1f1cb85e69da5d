"""Console summaries of runs that parsed no answers (wrong key: exit 5; a cap below one call: exit 4) print
``n/a`` for undefined numbers and the read-out ``no data``, never ``nan%`` or ``inconclusive``.

The GeoVerify run goes through the real engine (plan from the release, model caller, HTTP client, ledger)
against the local OpenAI-compatible fake, which refuses any key but its own with 401.
"""

from __future__ import annotations

import tomllib

import anyio
import pytest

from geoagent.config import config_from_dict, packaged_config_path
from geoagent.engine import EXIT_AUTH, EXIT_BUDGET, run_campaign
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.campaign import GeoVerifyCampaign
from geoagent.report.geoverify import render_markdown
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.scoring import sdt
from _made_up_keys import made_up_key

GOOD_KEY = made_up_key("sk-", 33, seed="sandbox-good-n20")
WRONG_KEY = made_up_key("sk-", 33, seed="sandbox-wrong-n19")


def _geoverify_doc(tmp_path, base_url: str, *, cap_usd: float) -> dict:
    doc = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    doc["campaign"]["name"] = "gv-nodata"
    doc["paths"] = {"queues": str(tmp_path / "queues"), "state": str(tmp_path / "state")}
    doc["budget"]["cap_usd"] = cap_usd
    doc["queue"] = {"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05}
    doc["models"] = [{"name": "gpt", "provider": "openai", "model": "sim-gpt", "base_url": f"{base_url}/v1",
                      "api_key_env": "GV_TEST_KEY", "price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.60,
                      "max_output_tokens": 64, "concurrency": 4, "rate": {"requests": 5000, "period_s": 1.0}}]
    # the release gives image ids, not pixels: a model behind a server (this local fake) gets placeholders only
    # with the opt-in (geoagent.image_files)
    doc["images"] = {"missing": "placeholder"}
    return doc


def _pooled_line(lines: list[str]) -> str:
    return next(line for line in lines if line.strip().startswith("pooled:"))


@pytest.mark.parametrize(("key", "cap_usd", "exit_code"), [(WRONG_KEY, 5.0, EXIT_AUTH), (GOOD_KEY, 1e-9, EXIT_BUDGET)],
                         ids=["wrong-key", "cap-below-one-call"])
def test_geoverify_run_without_answers_summary_prints_na_and_no_data(release_dir, tmp_path, monkeypatch, key, cap_usd,
                                                                     exit_code):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("GV_TEST_KEY", key)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])

    async def main():
        async with serve(app) as base:
            cfg = config_from_dict(_geoverify_doc(tmp_path, base, cap_usd=cap_usd))
            return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    assert out.exit_code == exit_code, out.summary()
    # the campaign's one model has its line before its first answer, where a lone pooled line stood (newuser39 #5)
    line = next(ln for ln in out.extra_lines if ln.strip().startswith("gpt:"))
    assert not any(ln.strip().startswith("pooled:") for ln in out.extra_lines)
    assert "nan" not in line.lower() and "inconclusive" not in line
    assert "n 0  H n/a  F n/a  d'(nearest) n/a  delta_1 n/a" in line
    assert line.rstrip().endswith("read-out no data")
    readout = next(ln for ln in out.extra_lines if "pre-registered read-out (gpt" in ln)
    assert "no data: " in readout
    assert "nan" not in out.summary().lower()


def test_empty_scores_read_no_data_in_summary_and_report():
    scores = GeoVerifyAggregator().scores()
    assert scores[sdt.POOLED].readout.verdict == sdt.READOUT_NO_DATA
    camp = GeoVerifyCampaign()
    camp._scores = scores  # what report() leaves behind for the summary
    lines = camp.summary_lines(None, None, None)
    pooled = _pooled_line(lines)
    assert "H n/a  F n/a  d'(nearest) n/a  delta_1 n/a" in pooled and "read-out no data" in pooled
    md = render_markdown(scores)
    assert "| pre-registered | no data |" in md and "| H (signal accepted) | - |" in md


@pytest.mark.parametrize(
    ("near", "far", "verdict"),
    [
        (float("nan"), float("nan"), "no data"),  # nothing to read
        (float("nan"), 1.6, "inconclusive"),  # the far band alone decides nothing
        (2.5, float("nan"), "uninformative"),  # the near band alone already decides
        (0.3, 1.6, "informative"),
    ],
)
def test_readout_no_data_only_when_neither_dprime_is_defined(near, far, verdict):
    assert sdt.readout(near, far, 0.3, None, None).verdict == verdict
    # a failed control still makes the run invalid, with or without main-arm data
    assert sdt.readout(near, far, float("nan"), 0.5, None).verdict == "invalid"


def test_geohint_summary_without_scored_answers_prints_no_rates():
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.campaign import GeoHintCampaign

    camp = GeoHintCampaign()
    camp._agg = GeoHintAggregator()  # what report() leaves behind when nothing was scored
    lines = camp.summary_lines(None, None, None)
    assert lines[-1] == "  GeoHint: no scored responses"
    assert not any("nan" in line.lower() for line in lines)
