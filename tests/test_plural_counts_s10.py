"""Counts in the GeoHint summary and report agree with their noun (fresh-user walkthrough, session 10: a
one-site campaign printed ``GeoHint: 18 scored responses over 1 sites``; the regime labels of Tables 2 and 5
read ``illegible (1 sites)``, Table 4's and Fig. 3's notes ``1 models``)."""

from __future__ import annotations

from geoagent.config import config_from_dict
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.campaign import GeoHintCampaign
from geoagent.report import geohint as GH

from _geohint_synth import synth_results


def _one_site_agg() -> GeoHintAggregator:
    a = GeoHintAggregator()
    a.add_many(synth_results(seed=4, n_sites=1, models=("m-a",)))
    return a


def test_summary_line_says_1_site(tmp_path):
    kind = GeoHintCampaign()
    kind._agg = _one_site_agg()
    kind._scope_note = None
    cfg = config_from_dict({
        "campaign": {"name": "gh-one", "kind": "geohint", "contact": "ops@example.org"},
        "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "m-a", "provider": "simulated", "model": "m-a"}]})
    text = "\n".join(kind.summary_lines(cfg, None, None))
    assert "scored responses over 1 site;" in text and "1 sites" not in text, text


def test_report_labels_and_notes_say_1_site_1_model(tmp_path):
    agg = _one_site_agg()
    tables = GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, seed=1, n_boot=20, figures=False)
    text = "\n".join(t.to_markdown() for t in tables) + (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "(1 sites)" not in text and " 1 sites" not in text and "1 models" not in text, text
    # one model is named, not counted (session 12: "Model m-a", was "All models pooled (1 model: m-a)")
    assert "(1 site)" in text and ", 1 site, models" in text and "Model m-a" in text and "(1 model:" not in text


def test_geoverify_small_n_line_says_1_signal_trial():
    import polars as pl

    from geoagent.report.geoverify import small_n_warnings
    from geoagent.scoring import sdt

    rows = [("m", "s1", "main", "signal", "yes", 1, 0, 0), ("m", "s1", "main", "0.15-0.3km", "no", 3, 30, 0)]
    scores = sdt.score(pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row"), bands=("0.15-0.3km",),
                       pooled=False)
    text = " ".join(small_n_warnings(scores))
    assert "1 signal trial behind H" in text and "1 signal trials" not in text, text
