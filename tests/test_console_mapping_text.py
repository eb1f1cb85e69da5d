"""User-facing lines show small mappings as ``key value`` text, never a Python dict (fresh-user finding:
``main arm per band {'signal': 26, ...}``, ``sampling rates {...}``, ``error rate 9.6% {'connection': 36}``)."""

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.campaign import GeoHintCampaign
from geoagent.geohint.plan import PlanSummary
from geoagent.status import format_status
from geoagent.textfmt import mapping_text, value_text


def test_mapping_text_by_hand():
    assert mapping_text({"signal": 26, "0.15-0.3km": 5, "0.3-0.7km": 48}) == "signal 26, 0.15-0.3km 5, 0.3-0.7km 48"
    assert mapping_text({"connection": 36}) == "connection 36"
    assert mapping_text({}) == "none" and mapping_text(None, empty="-") == "-"
    assert [value_text(x) for x in (1.0, 1 / 3, 2, True, "x")] == ["1", "0.3333", "2", "True", "x"]


def test_status_error_counts_are_text():
    http = {"api.example:443": {"requests": 375, "retries": 4, "errors": {"connection": 36}}}
    progress = {"finished": True, "elapsed_s": 1.0, "stages": [], "http": http}
    text = format_status({"campaign": "c", "queues": {}, "spend": None, "progress": progress, "dead": {}})
    assert "error rate 9.6% (connection 36)" in text  # 36 / 375 = 9.6 %
    assert "{" not in text and "'connection'" not in text


def test_geohint_plan_line_is_text():
    camp = GeoHintCampaign()
    camp._summary = PlanSummary(seed=1, conditions=["baseline", "forced"], baseline_repeats=2,
                                sample_rates={"opus": 1 / 3, "haiku": 1.0}, units_total={"opus": 30, "haiku": 30},
                                units_kept={"opus": 10, "haiku": 30},
                                requests_by_condition={"baseline": 80, "forced": 40})
    camp._agg = GeoHintAggregator()
    line = next(ln for ln in camp.summary_lines(None, None, None) if ln.strip().startswith("plan:"))
    assert line.strip() == ("plan: 120 requests by condition (baseline 80, forced 40); sampling rates "
                            "(opus 0.3333, haiku 1); units kept per model (opus 10 of 30, haiku 30 of 30)")


def test_crawl_trials_note_is_text(tmp_path):
    import asyncio
    import csv
    from collections import Counter
    from types import SimpleNamespace

    from geoagent.crawl.campaign import _write_trials
    from geoagent.crawl.demo import run_sandbox_crawl

    asyncio.run(run_sandbox_crawl(tmp_path / "run"))
    no_human = SimpleNamespace(image_audit=SimpleNamespace(human_verdicts=None),
                               referenceability=SimpleNamespace(review_verdicts=None))  # the crawl's settings: no human decisions
    svc = SimpleNamespace(state_dir=tmp_path / "run" / "state", images_root=tmp_path / "run" / "images", settings=no_human)
    note = _write_trials(SimpleNamespace(campaign=SimpleNamespace(seed=0)), svc)
    with open(svc.state_dir / "verify_trials.csv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["arm"] == "main"]
    counts = Counter(r["band"] for r in rows)
    assert counts["signal"] > 0
    assert f"main arm per band signal {counts['signal']}, 0.15-0.3km {counts['0.15-0.3km']}," in note
    assert "{" not in note
