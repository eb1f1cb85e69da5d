"""Loose ends of the rule "an answer cut off at the output-token limit with nothing parsed is no answer"
(:mod:`geoagent.scoring.truncation`), one section per defect.

Expected values come from the hand-made answers below (which were cut off, which parsed, which hit), never
from the code under test.
"""

from __future__ import annotations

import polars as pl
import pytest

from _model_harness import SANDBOX_GPT_TOML, SANDBOX_GEOCODER_TOML
from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.geohint.campaign import GeoHintCampaign, aggregate_from_store
from geoagent.geohint.stages import SCORED_TABLE, score_located
from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.store import open_campaign_state
from geoagent.scoring.truncation import NO_ANSWER_CUT_OFF

register_all_sections()


# --- 1. the scored GeoHint export stores a no-answer as null, with the reason --------------------------------
def _payload(i: int, *, finish_reason: str | None, parsed: bool, hit: bool = False, echo: bool = False) -> dict:
    """A located GeoHint answer of model m, condition forced, site s<i % 2>, hint "Old Tower" 1.2 km away."""
    meta = {"task": "geohint", "site": f"s{i % 2}", "condition": "forced", "schema": "forced", "ref_qid": "Q1",
            "ref_name": "Old Tower", "band": "0.5-1.5km", "tier": "high", "dist_km": 1.2, "site_lat": 48.0,
            "site_lon": 11.0}
    if parsed:
        p = {"ok": True, "city": "Munich", "area": "Old Tower" if echo else "Elsewhere", "building": None}
        # 0.001 deg latitude = 0.11 km (a hit), 0.05 deg = 5.6 km (a miss)
        loc = {"resolved_level": "area", "lat": 48.001 if hit else 48.05, "lon": 11.0}
    else:
        p = {"ok": False, "error": "no JSON object", "raw": ""}
        loc = {"resolved_level": "none"}
    return {"model": "m", "image_id": f"img{i}", "request_key": f"rk{i}", "finish_reason": finish_reason,
            "meta": meta, "parsed": p, "located": loc}


def test_score_located_gives_a_cut_off_empty_answer_no_hit_and_no_echo_verdict_and_says_why():
    cut = score_located("k1", _payload(1, finish_reason="length", parsed=False))
    assert cut.hit is None and cut.echo is None
    assert "echo_by_rule" not in cut.extra
    assert cut.extra["no_answer"] == NO_ANSWER_CUT_OFF
    # an answer the model finished that did not parse stays a miss and a non-echo (the release's rule)
    done = score_located("k2", _payload(2, finish_reason="stop", parsed=False))
    assert done.hit is False and done.echo is False and done.extra.get("no_answer") is None
    # cut off but parsed: an answer, scored
    parsed = score_located("k3", _payload(3, finish_reason="length", parsed=True, hit=True, echo=True))
    assert parsed.hit is True and parsed.echo is True and parsed.extra.get("no_answer") is None


def _cfg(tmp_path):
    return config_from_dict({
        "campaign": {"name": "gh-na", "kind": "geohint", "contact": "ops@example.org"},
        "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "m", "provider": "simulated", "model": "m"}]})


def test_scored_export_stores_no_answers_as_null_and_reproduces_the_report(tmp_path):
    """Model m, forced: 3 hits (2 echoes), 2 misses, 1 finished unparsed (a miss), and 3 answers cut off with
    nothing parsed: one scored now, one stored by the earlier scorer (hit False, echo False, echo verdicts
    False), one stored before finish reasons were kept (its stored response says length). Report: hit rate
    3 / 6, echo rate 2 / 6; the export's scored rows give the same with the no-answers null."""
    cfg = _cfg(tmp_path)
    rows = [score_located(f"k{i}", _payload(i, finish_reason="stop", parsed=True, hit=i < 3, echo=i < 2)).to_json()
            for i in range(5)]
    rows.append(score_located("k5", _payload(5, finish_reason="stop", parsed=False)).to_json())
    rows.append(score_located("k6", _payload(6, finish_reason="length", parsed=False)).to_json())
    old = score_located("k7", _payload(7, finish_reason="stop", parsed=False)).to_json()
    old["extra"]["finish_reason"] = "length"  # as the scorer before the fix stored it: a miss, a non-echo
    assert old["hit"] is False and old["echo"] is False and old["extra"]["echo_by_rule"]["name"] is False
    rows.append(old)
    older = score_located("k8", _payload(8, finish_reason="stop", parsed=False)).to_json()
    del older["extra"]["finish_reason"]  # scored before finish reasons were carried
    rows.append(older)
    with open_campaign_state("gh-na", root=tmp_path / "state", cap_usd=0.0) as st:
        st.store.put("rk8", {"model": "m"}, ModelResponse("", Usage(10, 256), finish_reason="length"), None)
        for i, r in enumerate(rows):
            st.store.put_result(SCORED_TABLE, f"k{i}", r)
        agg = aggregate_from_store(st.store)
        GeoHintCampaign().export(cfg, st.store)
    c = agg.select(model="m", condition="forced")
    assert (c.n, c.hits, c.echo_n, c.echoes, agg.n_no_answer()) == (6, 3, 6, 2, 3)
    df = pl.read_parquet(cfg.state_dir() / "geohint_scored.parquet").sort("key")
    no = df.filter(pl.col("key").is_in(["k6", "k7", "k8"]))
    assert no["hit"].to_list() == [None] * 3 and no["echo"].to_list() == [None] * 3
    assert no["extra.echo_by_rule"].to_list() == [None] * 3
    assert no["extra.no_answer"].to_list() == [NO_ANSWER_CUT_OFF] * 3
    assert no["scored"].to_list() == [True] * 3                      # the plan's rows, as the report's scope
    assert df.filter(~pl.col("key").is_in(["k6", "k7", "k8"]))["extra.no_answer"].null_count() == 6
    scored = df.filter(pl.col("scored"))
    # Polars' mean and count skip nulls: the export's figures are the report's
    assert scored["hit"].count() == c.n and scored["hit"].mean() == pytest.approx(c.hit_rate) == 0.5
    assert scored["echo"].mean() == pytest.approx(c.echo_rate) == pytest.approx(2 / 6)
    assert scored.filter(pl.col("extra.no_answer").is_not_null()).height == agg.n_no_answer()
    csv = pl.read_csv(cfg.state_dir() / "geohint_scored.csv", infer_schema_length=None).sort("key")
    assert csv.filter(pl.col("key") == "k7")["hit"].to_list() == [None]


# --- 2. GeoVerify: cut-off counts per arm, n of N, for the share and for "cut off and unparsed" -------------
def _gv_scores():
    """Model m: main arm 10 signal answers (3 cut off: 2 empty, 1 parsed), swapped image 4 (1 cut off empty),
    gray field 5 (none cut off); 19 answers, 4 cut off, 3 of them with nothing parsed."""
    from geoagent.data.model import ARM_BLANK, ARM_MAIN, ARM_MISMATCH
    from geoagent.geoverify.aggregate import GeoVerifyAggregator
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.score import scored_row

    yes = '{"verdict": "yes", "confidence": 0.8}'
    plan = ([(ARM_MAIN, "signal", "yes", "", "length")] * 2 + [(ARM_MAIN, "signal", "yes", yes, "length")]
            + [(ARM_MAIN, "signal", "yes", yes, "stop")] * 7
            + [(ARM_MISMATCH, "control", "no", "", "length")] + [(ARM_MISMATCH, "control", "no", yes, "stop")] * 3
            + [(ARM_BLANK, "control", "no", yes, "stop")] * 5)
    rows = [scored_row({"trial_id": f"t{i}", "site": f"s{i % 3}", "arm": arm, "band": band, "truth": truth},
                       "m", parse_verdict(text), finish_reason=reason)
            for i, (arm, band, truth, text, reason) in enumerate(plan)]
    agg = GeoVerifyAggregator()
    agg.update(rows)
    return {"m": agg.scores()["m"]}


def _md_cells(md: str) -> dict[str, str]:
    return {p[1].strip(): p[2].strip() for line in md.splitlines() if (p := line.split("|")) and len(p) > 3}


def test_geoverify_cut_off_rows_give_counts_per_arm():
    from geoagent.report import geoverify as GV

    scores = _gv_scores()
    cells = _md_cells(GV.render_markdown(scores))
    assert cells["answers cut off (all arms)"] == "4 of 19"
    assert cells["share cut off, main arm"] == "30.0 % (3 of 10)"
    assert cells["share cut off, control: swapped image"] == "25.0 % (1 of 4)"
    assert cells["share cut off, control: gray field"] == "0.0 % (0 of 5)"
    assert cells["cut off and unparsed"] == "3 of 19"
    assert cells["cut off and unparsed, main arm"] == "2 of 10"
    assert cells["cut off and unparsed, control: swapped image"] == "1 of 4"
    assert cells["cut off and unparsed, control: gray field"] == "0 of 5"
    text = GV.render_terminal(scores)
    assert "cut off and unparsed, main arm" in text and "30.0 % (3 of 10)" in text
    # the CSV gives the same counts as numbers, per arm
    import csv as _csv
    import io

    rows = {r["row"]: r["m"] for r in _csv.DictReader(io.StringIO(GV.render_csv(scores)))}
    assert rows["answers (all arms)"] == "19" and rows["answers cut off (all arms)"] == "4"
    assert (rows["answers, main arm"], rows["answers cut off, main arm"], rows["cut off and unparsed, main arm"]) \
        == ("10", "3", "2")
    assert (rows["answers, control: swapped image"], rows["answers cut off, control: swapped image"],
            rows["cut off and unparsed, control: swapped image"]) == ("4", "1", "1")
    assert float(rows["share cut off, main arm"]) == pytest.approx(0.3)
    assert rows["cut off and unparsed"] == "3"


# --- 3. the cut-off warning names the no-answers as the rule does, in both tasks --------------------------
def test_cut_off_warning_calls_the_answers_with_nothing_parsed_no_answer_in_both_tasks():
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.report import geohint as GH
    from geoagent.report import geoverify as GV
    from geoagent.scoring.truncation import TruncationCount, warning_lines

    (w,) = warning_lines({"m": TruncationCount(n=100, n_truncated=4, n_truncated_unparsed=1)}, setting="X")
    assert "(4 of 100) were cut off at the output-token limit (1 of them with nothing parsed: no answer, left out " \
           "of every rate)" in w
    assert "unparsed" not in w
    (w0,) = warning_lines({"m": TruncationCount(n=100, n_truncated=4)}, setting="X")
    assert "were cut off at the output-token limit; results are biased" in w0   # no "(0 of them ...)"
    # GeoVerify: 3 of m's 19 answers cut off with nothing parsed (section 2's answers)
    (gv,) = GV.truncation_warnings(_gv_scores())
    assert "(4 of 19) were cut off" in gv and "(3 of them with nothing parsed: no answer, left out of every rate)" in gv
    # GeoHint: 2 of 10 answers of m in forced cut off empty
    agg = GeoHintAggregator()
    for i in range(10):
        cut = i < 2
        agg.add(score_located(f"k{i}", _payload(i, finish_reason="length" if cut else "stop", parsed=not cut,
                                                hit=True)))
    (gh,) = GH.truncation_warnings(agg)
    assert "(2 of 10) were cut off" in gh and "(2 of them with nothing parsed: no answer, left out of every rate)" in gh


# --- 4. GeoHint report.md header: its counts are the tables' counts, and it says what each is ---------------
def _header_agg():
    """Model m: forced 6 responses (3 hits), 2 forced answers cut off empty (no answer), 1 forced answer whose
    reference point has no hint distance (left out), baseline 3 responses: 12 answers, 9 responses."""
    from geoagent.geohint.aggregate import GeoHintAggregator

    agg = GeoHintAggregator()
    for i in range(6):
        agg.add(score_located(f"f{i}", _payload(i, finish_reason="stop", parsed=True, hit=i < 3)))
    for i in (6, 7):
        agg.add(score_located(f"f{i}", _payload(i, finish_reason="length", parsed=False)))
    lost = _payload(8, finish_reason="stop", parsed=True, hit=True)
    lost["meta"]["dist_km"] = None
    agg.add(score_located("f8", lost))
    for i in range(3):
        base = _payload(10 + i, finish_reason="stop", parsed=True, hit=i == 0)
        base["meta"].update(condition="baseline", ref_qid=None, ref_name=None, band=None, tier=None, dist_km=None)
        agg.add(score_located(f"b{i}", base))
    return agg


def test_geohint_report_header_counts_are_the_tables_counts(tmp_path):
    import csv as _csv

    from geoagent.report import geohint as GH

    agg = _header_agg()
    GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, n_boot=0, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    with (tmp_path / "table1.csv").open(newline="", encoding="utf-8") as fh:
        t1 = {r["Model"]: r for r in _csv.DictReader(fh)}
    assert t1["m"]["n"] == "6"
    head = md.split("Terms:")[0]
    assert "12 scored responses" not in head
    assert "9 scored responses, 2 sites, models: m;" in head
    assert "Those 9 scored responses are the answers the tables count (every condition: baseline 3, forced 6; " \
           "Table 1's n counts a model's forced ones)" in head
    assert ("left out of every table: 2 answers cut off at the output-token limit with nothing parsed (no answer; "
            "table 'cutoff') and 1 context answer whose reference point has no hint distance; 12 answers scored "
            "in all") in head
    assert "Answers cut off at the output-token limit: 2 of 12" in head   # of every scored answer, as said


def test_geohint_summary_line_counts_responses_as_the_report_header(tmp_path):
    from geoagent.geohint.campaign import GeoHintCampaign

    kind = GeoHintCampaign()
    kind._agg = _header_agg()
    kind._scope_note = None
    lines = kind.summary_lines(_cfg(tmp_path), None, None)
    text = "\n".join(lines)
    assert "GeoHint: 9 scored responses over" in text and "12 scored responses" not in text
    assert "left out of every table: 2 answers cut off at the output-token limit with nothing parsed" in text


# --- 5. [geohint] boot_seed, as [geoverify] boot_seed ------------------------------------------------------
def _boot_doc(tmp_path, **geohint) -> dict:
    return {"campaign": {"name": "gh-bs", "kind": "geohint", "seed": 1, "contact": "ops@example.org"},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "budget": {"cap_usd": 1.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
            **({"geohint": geohint} if geohint else {})}


def test_geohint_boot_seed_is_validated_and_defaults_to_the_campaign_seed(tmp_path):
    from geoagent.config import ConfigError
    from geoagent.geohint.settings import GeoHintSettings

    assert GeoHintSettings().boot_seed is None            # None: the [campaign] seed, as before the key
    assert config_from_dict(_boot_doc(tmp_path, boot_seed=0)).section("geohint").boot_seed == 0
    assert config_from_dict(_boot_doc(tmp_path, boot_seed=12345)).section("geohint").boot_seed == 12345
    for bad in (-1, "5", 2.5, True):                     # numpy's generator takes no negative seed
        with pytest.raises(ConfigError) as err:
            config_from_dict(_boot_doc(tmp_path, boot_seed=bad))
        assert "geohint.boot_seed" in str(err.value)


def test_geohint_boot_seed_is_a_scoring_only_key(tmp_path):
    from geoagent.runtime.manifest import Manifest, config_changes

    Manifest(config_from_dict(_boot_doc(tmp_path))).start_run()
    assert config_changes(config_from_dict(_boot_doc(tmp_path))).scoring == {}   # the default changes nothing
    changed = config_changes(config_from_dict(_boot_doc(tmp_path, boot_seed=7)))
    assert changed.calls == [] and changed.scoring == {"geohint.boot_seed": (None, 7)}


def test_geohint_boot_seed_seeds_the_bootstrap_only_and_its_default_keeps_the_results(tmp_path):
    """A report with seed 1 and no boot_seed is the report of before (Table 1 and Fig. 2 drawn with seed 1);
    boot_seed 9 changes the intervals' seed (their caption says 9) and nothing else (Table 3's splits and the
    permutation flips keep seed 1)."""
    from _geohint_synth import synth_results

    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.report import geohint as GH

    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=4, n_sites=14))  # >= 5 sites per regime: Fig. 2 has intervals
    kw = dict(n_flips=50, n_splits=5, seed=1, figures=False, n_boot=40)
    same = {t.name: t for t in GH.write_report(agg, tmp_path / "a", **kw)}
    before = GH.table1(agg, "forced", n_boot=40, seed=1)

    def cells(t):  # NaN as None, so rows compare cell by cell (the synthetic results carry no release_first_word
        return [[None if isinstance(v, float) and v != v else v for v in r] for r in t.rows]  # verdict: NaN)

    assert cells(same["table1"]) == cells(before)
    other = {t.name: t for t in GH.write_report(agg, tmp_path / "b", boot_seed=9, **kw)}
    assert cells(other["table1"]) == cells(GH.table1(agg, "forced", n_boot=40, seed=9)) != cells(before)
    assert any("seed 9" in n for n in other["table1"].notes_lines())
    for name in ("table3", "table8", "table10"):
        assert other[name].rows == same[name].rows and other[name].notes_lines() == same[name].notes_lines()
    assert any("seed 1" in n for n in other["table3"].notes_lines() + other["table8"].notes_lines())
    md = (tmp_path / "b" / "report.md").read_text(encoding="utf-8")
    assert "40 resamples of the" in md and "seed 9" in md
    assert GH.hit_by_band_points(agg, "forced", n_boot=40, seed=9) != GH.hit_by_band_points(agg, "forced", n_boot=40,
                                                                                                seed=1)


def test_geohint_campaign_passes_boot_seed_to_the_report_stages(tmp_path):
    from geoagent.geohint.campaign import bootstrap_params
    from geoagent.geohint.stages import GeoHintAggregatorStage

    # unset: the [campaign] seed (1) draws the bootstrap, as before the key; the flips and splits keep it always
    for doc, want in ((_boot_doc(tmp_path), 1), (_boot_doc(tmp_path, boot_seed=23), 23)):
        assert bootstrap_params(config_from_dict(doc)) == (1000, want)  # the demo's console Table 1 reads it too
        stage = next(s for s in GeoHintCampaign().stages(config_from_dict(doc)) if isinstance(s, GeoHintAggregatorStage))
        assert (stage.seed, stage.boot_seed) == (1, want)


def test_geohint_campaign_report_uses_records_and_captions_its_boot_seed(tmp_path, release_dir):
    """Through the CLI with the local OpenAI-compatible fake and the geocoder fakes: [campaign] seed 1,
    [geohint] boot_seed 11: the intervals say seed 11 and the manifest has 11 (that the campaign seed still
    seeds the splits and flips: the report test above)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    cfg = tmp_path / "gh.toml"
    cfg.write_text("""
[campaign]
name = "gh-bs"
kind = "geohint"
seed = 1
contact = "mailto:you@example.org"

[budget]
cap_usd = 5.0

""" + SANDBOX_GPT_TOML + """
[geohint]
conditions = ["baseline", "forced"]
images = "synthetic"
sites = ["tokyo_shibuya", "nyc_soho", "paris_marais"]
images_per_site = 1
n_boot = 30
n_splits = 4
boot_seed = 11

""" + SANDBOX_GEOCODER_TOML + """""", encoding="utf-8")
    env = {**os.environ, "GEOAGENT_QUEUES": str(tmp_path / "q"), "GEOAGENT_STATE": str(tmp_path / "s"),
           "GEOAGENT_RELEASE": str(release_dir), "PYTHONPATH": str(repo)}
    done = subprocess.run([sys.executable, str(repo / "run.py"), "run", str(cfg), "--no-live"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    state = tmp_path / "s" / "gh-bs"
    md = (state / "report" / "report.md").read_text(encoding="utf-8")
    assert "site-bootstrap percentile intervals (30 resamples of the 3 sites, seed 11" in md       # Table 1
    # Fig. 2: 3 sites, every interval withheld (< 5 sites): no error bars, the resamples and seed still named
    assert "no error bars: every interval is withheld (30 resamples drawn, seed 11)" in md        # Fig. 2
    assert json.loads((state / "manifest.json").read_text())["config"]["geohint"]["boot_seed"] == 11
