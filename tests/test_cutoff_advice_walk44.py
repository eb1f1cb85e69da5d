"""Walk44 B1: every line about answers cut off at the output-token limit gives one advice, as docs/models.md does.

A GeoHint run whose model was cut off at ``models[1].max_output_tokens = 300`` printed the breaker's line "raise
models[1].max_output_tokens ... and re-run: the requests left queued are then sent under the new limit", then the
summary's "no usable answers: ... raise [geohint] max_output_tokens (or the model's [[models]] max_output_tokens) and
re-run under a new campaign name" and the report's warnings "... and re-run under a new campaign name". Now each
names the key that sets the limit and says: re-run the same command (the requests still queued go out under the
new limit), a new [campaign] name only to start clean. Where a task section sets the limit (``[geohint]
max_output_tokens``), planning wrote it into each queued request, so a raised one reaches none of them (as a
template change does: tests/test_drift_planning_fixed_s36.py): those lines say to use a new name."""

from __future__ import annotations

from geoagent.config import config_from_dict
from geoagent.engine import load_kind, unusable_answer_lines
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report.geohint import truncation_warnings
from geoagent.scoring.truncation import is_planned_limit_key
from geoagent.workers.cutoff_breaker import CutOffBreaker

SAME = "re-run the same command: the requests still queued are then sent under the new limit"
NEW_NAME = "re-run under a new [campaign] name"


def _cfg(geohint: dict) -> object:
    load_kind("geohint")
    return config_from_dict({
        "campaign": {"name": "w44", "seed": 1, "kind": "geohint", "contact": "you@example.org"},
        "budget": {"cap_usd": 1.0}, "geohint": {"release_dir": "/nonexistent", **geohint},
        "models": [{"name": "a", "provider": "simulated", "model": "sim"},
                   {"name": "gem", "provider": "simulated", "model": "sim", "max_output_tokens": 300}]})


def _kind_with_cut_model():
    """A GeoHint campaign kind whose report left 24 answers of model ``gem``, each cut off with nothing parsed."""
    from geoagent.campaigns.geohint import GeoHintCampaign

    agg = GeoHintAggregator()
    for i in range(24):
        agg.add(GeoHintResult(key=f"k{i}|gem", site=f"s{i % 3}", image_id=f"im{i}", model="gem", condition="forced",
                              schema="forced", ref_qid=None, ref_name=None, band=None, tier=None, dist_km=None,
                              parse_ok=False, resolved_level="none", error_km=None, hit=False,
                              extra={"finish_reason": "MAX_TOKENS"}))
    kind = GeoHintCampaign()
    kind._agg = agg  # what report() leaves behind
    return kind, agg


def test_a_models_limit_gets_the_same_advice_in_the_breaker_the_summary_and_the_report():
    cfg = _cfg({})
    kind, agg = _kind_with_cut_model()
    quality = kind.answer_quality(cfg, None)
    assert (quality["gem"].fix, quality["gem"].fix_planned) == ("models[1].max_output_tokens", False)
    (summary,) = unusable_answer_lines(quality)
    b = CutOffBreaker(threshold=1)
    breaker = b.answered("gem", "", "MAX_TOKENS", 300, "models[1].max_output_tokens").message()
    report = truncation_warnings(agg)
    assert report
    for line in (summary, breaker, *report):
        assert SAME in line, line
        assert "new [campaign] name starts clean" in line, line
        assert "re-run under a new campaign name" not in line, line
    assert "raise models[1].max_output_tokens" in summary and "raise models[1].max_output_tokens" in breaker


def test_a_task_sections_limit_is_planned_into_each_request_so_the_lines_say_a_new_name():
    cfg = _cfg({"max_output_tokens": 300})
    kind, _agg = _kind_with_cut_model()
    quality = kind.answer_quality(cfg, None)
    assert (quality["gem"].fix, quality["gem"].fix_planned) == ("geohint.max_output_tokens", True)
    (summary,) = unusable_answer_lines(quality)
    breaker = CutOffBreaker(threshold=1).answered("gem", "", "MAX_TOKENS", 300, "geohint.max_output_tokens").message()
    for line in (summary, breaker):
        assert f"raise geohint.max_output_tokens and {NEW_NAME}" in line, line
        assert "sends the requests still queued with the old limit" in line, line
    # a thinking budget is read when a request is sent: the same command applies it
    assert "params.thinking_budget below the limit and re-run the same command" in breaker


def test_which_keys_are_planned_into_each_request():
    assert is_planned_limit_key("geohint.max_output_tokens")
    assert is_planned_limit_key("crawl.image_audit.max_output_tokens")
    assert not is_planned_limit_key("models[0].max_output_tokens")
    assert not is_planned_limit_key("models[1].params.max_output_tokens")
    assert not is_planned_limit_key(None)
