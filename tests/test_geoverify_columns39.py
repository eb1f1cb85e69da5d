"""A GeoVerify campaign's models have report columns before their first answer (newuser39 #5: a one-model
campaign whose host was down reported a lone "pooled" column, where a one-model campaign shows the model)."""

from __future__ import annotations

import math

from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.report.geoverify import one_model, render_markdown, shown_scores
from geoagent.scoring.sdt import POOLED, empty_cells, score


def test_a_model_without_answers_gets_its_column_and_the_one_model_layout():
    scores = score(empty_cells(), models=["gpt-4o-mini"])
    assert list(scores) == ["gpt-4o-mini", POOLED]
    s = scores["gpt-4o-mini"]
    assert (s.n_signal, s.n_noise, s.n_hits, s.delta_1) == (0, 0, 0, "undefined") and math.isnan(s.h)
    assert all(b.d_prime is None or math.isnan(b.d_prime) for b in s.bands)
    assert one_model(scores) == "gpt-4o-mini" and list(shown_scores(scores)) == ["gpt-4o-mini"]
    text = render_markdown(scores)
    assert "gpt-4o-mini" in text and "| pooled" not in text


def test_the_aggregator_passes_the_campaigns_models_on():
    agg = GeoVerifyAggregator()
    assert list(agg.scores(models=["b", "a"])) == ["a", "b", POOLED]
    assert list(agg.scores()) == [POOLED]  # without names: as before


def test_the_live_report_stage_gets_the_campaigns_models():
    """review39b: the interim report during a run still showed a lone pooled column."""
    from geoagent.config import config_from_dict
    from geoagent.geoverify.campaign import GeoVerifyCampaign
    from geoagent.geoverify.stages import GeoVerifyAggregatorStage

    cfg = config_from_dict({"campaign": {"name": "gv39", "kind": "geoverify"}, "budget": {"cap_usd": 1.0},
                            "models": [{"name": "solo", "provider": "simulated", "model": "s"}]})
    (agg,) = [s for s in GeoVerifyCampaign().stages(cfg) if isinstance(s, GeoVerifyAggregatorStage)]
    assert agg.models == ("solo",)
    assert list(agg.agg.scores(models=agg.models)) == ["solo", POOLED]


def test_a_note_says_when_the_pooled_column_repeats_the_only_model_with_answers():
    """walk39 #5: with one model's host down, the pooled column repeated the other model's figures without a word."""
    import polars as pl

    from geoagent.report.geoverify import one_model_note

    cells = pl.DataFrame({"model": ["up"], "site": ["s1"], "arm": ["main"], "band": ["signal"], "truth": ["yes"],
                          "n_yes": [3], "n_no": [1], "n_fail": [0]}, schema=empty_cells().schema)
    scores = score(cells, models=["up", "down"])
    assert one_model_note(scores) == "Only up has answers (down: none yet), so the pooled column repeats up's figures."
    assert "Only up has answers" in render_markdown(scores)
