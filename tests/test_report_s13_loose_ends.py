"""Report loose ends left by session 12 (closing12_notdone.md, "Reports"), each checked against counts made here.

1. GeoHint's cut-off table listed every model and condition as all-zero rows in report.md when nothing was cut off;
   GeoVerify's section already collapsed to one ``0 of N`` row. Both now say it the same way (the CSV keeps every
   row, numbers for machines).
2. Notes (the cut-off definition, a simulated-answers banner, a long note line) were said once only by the demo's own
   printer; the summary writer (``Outcome.summary``, what ``run`` prints) now says each once.
3. The Terms line on fig_hit_by_band.png described error bars the figure did not draw.
4. GeoVerify's CSV flag 'delta_1 small n' said yes beside a delta_1 cell showing plain ``none`` (no mark); since
   walk26 D1 the cell keeps its mark there too (a rule of trial counts).
5. Table 11 was printed from a judged file's forced_chain rows, which hold no evidence object (the paper computes it
   from the raw forced_chain responses).
"""

from __future__ import annotations

import csv
import io

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH


def _answer(key: str, model: str, condition: str, *, finish_reason: str | None = "stop", site: str = "s1",
            parse_ok: bool = True) -> GeoHintResult:
    """One scored GeoHint answer: a hit at 0.2 km (area level) with a hint at 1.0 km, unless ``condition`` is a
    no-context one."""
    ctx = not condition.endswith("baseline")
    return GeoHintResult(
        key=key, site=site, image_id="1", model=model, condition=condition, schema=condition.split("_baseline")[0],
        repeat=0, city="C" if parse_ok else None, area="A" if parse_ok else None, parse_ok=parse_ok,
        resolved_level="area" if parse_ok else "none", error_km=0.2 if parse_ok else None, hit=parse_ok,
        ref_qid="Q1" if ctx else None, dist_km=1.0 if ctx else None, band="0.5-1.5km" if ctx else None,
        tier="high" if ctx else None, extra={"finish_reason": finish_reason})


def _agg(finish_reasons: dict[tuple[str, str], list[str | None]]) -> GeoHintAggregator:
    agg = GeoHintAggregator()
    i = 0
    for (model, cond), reasons in finish_reasons.items():
        for fr in reasons:
            i += 1
            agg.add(_answer(f"k{i}", model, cond, finish_reason=fr))
    return agg


def _md_rows(md: str) -> list[str]:
    return [ln for ln in md.splitlines() if ln.startswith("|") and not ln.startswith("|---")]


# --- 1. cut-off table: one row when nothing was cut off ----------------------------------------------------------
def test_geohint_cutoff_table_is_one_row_when_nothing_was_cut_off():
    """Before: 9 rows (per model and condition, per-model totals, the total), every count 0, in report.md and the
    terminal. Now the total alone, as ``0 of N`` (GeoVerify's ``answers cut off (all arms) | 0 of N``)."""
    agg = _agg({("m-a", "baseline"): ["stop"] * 3, ("m-a", "forced"): ["stop"] * 5,
                ("m-b", "baseline"): ["stop"] * 2, ("m-b", "forced"): ["stop"] * 4})
    t = GH.table_cutoff(agg)
    md = t.to_markdown()
    rows = _md_rows(md)
    assert rows == ["| Model | Condition | Answers cut off |", "| All | all | 0 of 14 |"], rows
    assert "No finish reason" not in md  # 0 everywhere: not shown (GeoVerify shows that row only when not 0)
    assert "cutoff.csv keeps a row per model and condition" in md
    text = GH.render_text(t.to_rich())
    assert "0 of 14" in text and "m-a" not in text
    # the CSV keeps every row and column (numbers for machines)
    csv_rows = list(csv.DictReader(io.StringIO(t.to_csv())))
    assert [(r["Model"], r["Condition"], r["n"], r["Cut off"]) for r in csv_rows] == [
        ("m-a", "baseline", "3", "0"), ("m-a", "forced", "5", "0"), ("m-a", "all", "8", "0"),
        ("m-b", "baseline", "2", "0"), ("m-b", "forced", "4", "0"), ("m-b", "all", "6", "0"), ("All", "all", "14", "0")]


def test_geohint_cutoff_collapsed_row_keeps_a_no_finish_reason_count():
    agg = _agg({("m-a", "forced"): ["stop", None, None], ("m-b", "forced"): ["stop"]})
    rows = _md_rows(GH.table_cutoff(agg).to_markdown())
    assert rows == ["| Model | Condition | Answers cut off | No finish reason |", "| All | all | 0 of 4 | 2 |"], rows


def test_geohint_cutoff_table_keeps_every_row_when_something_was_cut_off():
    agg = _agg({("m-a", "forced"): ["stop", "length", "stop", "stop"], ("m-b", "forced"): ["stop", "stop"]})
    rows = _md_rows(GH.table_cutoff(agg).to_markdown())
    assert rows[0].startswith("| Model | Condition | n | Cut off | Share cut off (%)")
    assert "| m-a | forced | 4 | 1 | 25.0 | 0 | 0 | 0 | 0 |" in rows and "| All | all | 6 | 1 | 16.7 | 0 | 0 | 0 | 0 |" in rows


def test_geohint_report_md_and_raw_route_show_the_collapsed_cutoff(tmp_path):
    agg = _agg({("m-a", "baseline"): ["stop"] * 2, ("m-a", "forced"): ["stop"] * 3})
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=2, n_boot=0, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    block = md.split("### Answers cut off at the output-token limit", 1)[1].split("###", 1)[0]
    assert _md_rows(block) == ["| Model | Condition | Answers cut off |", "| All | all | 0 of 5 |"]
    with (tmp_path / "cutoff.csv").open(newline="", encoding="utf-8") as fh:
        assert len(list(csv.DictReader(fh))) == 4  # m-a baseline, forced, all; All all


# --- 3. Terms: what fig_hit_by_band.png draws ------------------------------------------------------------------
def _terms(md: str) -> str:
    return md.split("Terms:", 1)[1].split("###", 1)[0]


def _synth(n_sites: int) -> GeoHintAggregator:
    from _geohint_synth import synth_results

    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=3, n_sites=n_sites))
    return agg


def test_terms_say_no_error_bars_when_every_interval_is_withheld(tmp_path):
    """Before: Terms said "error bars are 95 % site-bootstrap percentile intervals" above a figure that drew none
    (every regime line from fewer than 5 sites: each interval withheld), and so did the caption under it."""
    agg = _synth(6)
    pts = GH.hit_by_band_points(agg, "forced", "baseline", n_boot=50, seed=0)
    assert not any(q["lo"] == q["lo"] for p in pts.values() for q in p if q["n"])  # by hand: nothing to draw
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=2, n_boot=50, seed=0)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    terms = _terms(md)
    assert "error bars are 95 %" not in terms
    assert "Figure fig_hit_by_band.png: no error bars: every interval is withheld" in terms
    caption = md.split("![hit rate by band](fig_hit_by_band.png)", 1)[1].split("\n\n", 2)[1]
    assert "error bars are 95 %" not in caption
    assert "no error bars: every interval is withheld (50 resamples drawn, seed 0)" in caption


def test_terms_say_no_error_bars_without_a_bootstrap_and_nothing_without_the_figure(tmp_path):
    agg = _synth(6)
    GH.write_report(agg, tmp_path / "a", n_flips=10, n_splits=2, n_boot=0)
    terms = _terms((tmp_path / "a" / "report.md").read_text(encoding="utf-8"))
    assert "Figure fig_hit_by_band.png: no error bars ([geohint] n_boot = 0" in terms and "95 %" not in terms
    GH.write_report(agg, tmp_path / "b", n_flips=10, n_splits=2, n_boot=50, figures=False)
    md = (tmp_path / "b" / "report.md").read_text(encoding="utf-8")
    assert "fig_hit_by_band" not in md  # no figure written: the Terms describe none


def test_terms_keep_the_error_bar_line_when_the_figure_draws_them(tmp_path):
    agg = _synth(14)
    pts = GH.hit_by_band_points(agg, "forced", "baseline", n_boot=50, seed=0)
    assert any(q["lo"] == q["lo"] for p in pts.values() for q in p if q["n"])  # by hand: some bar is drawn
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=2, n_boot=50, seed=0)
    terms = _terms((tmp_path / "report.md").read_text(encoding="utf-8"))
    assert "Figure fig_hit_by_band.png: error bars are 95 % site-bootstrap percentile intervals" in terms


# --- 4. GeoVerify CSV: 'delta_1 small n' follows the delta_1 cell's mark --------------------------------------
def _plain_none_scores():
    """One model whose nearest band has 5 decoy trials (small n) and whose delta_1 is none in the data and in every
    site resample (range none to none): the table shows plain ``none``, no mark (session 12)."""
    import dataclasses

    import polars as pl

    from geoagent.data.model import DECOY_BAND_LABELS
    from geoagent.scoring.sdt import delta_1_small_n, score, small_n_bands

    near, *others = DECOY_BAND_LABELS
    rows = [("m", "s1", "main", "signal", "yes", 25, 25, 0), ("m", "s1", "main", near, "no", 2, 3, 0)]
    rows += [("m", "s1", "main", b, "no", 25, 25, 0) for b in others]  # H = F everywhere: no d' near 1
    cells = pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"], orient="row")
    s = score(cells, pooled=False)["m"]
    assert s.delta_1 is None and small_n_bands(s) == [near] and delta_1_small_n(s)  # by hand: 5 < 20 trials
    return {"m": dataclasses.replace(s, delta_1_ci=("none", "none"))}


def test_delta_1_none_without_a_range_keeps_its_small_n_mark():
    """Session 13 made the CSV's 'delta_1 small n' follow the cell (it said yes beside an unmarked cell). Walk26 D1:
    the cell itself was wrong: a delta_1 "none" resting on a band of 5 trials lost its mark when its bootstrap range
    was none to none, "justified" as "no band reaches d' = 1 ... in any site resample", while a percentile range of
    none to none still allows up to 2.5 % of resamples reaching it (10 of 1000 in the walkthrough). The mark is a
    rule of trial counts (geoagent.scoring.sdt.delta_1_small_n); the cell, the CSV flag and the Small n line now
    all keep it, and the table's note says what a none without a range means."""
    from geoagent.report import geoverify as GV

    scores = _plain_none_scores()
    md = GV.render_markdown(scores)
    row = next(ln for ln in md.splitlines() if ln.startswith("| delta_1 |"))
    assert row == f"| delta_1 | none {GV.SMALL_N_MARK} |", row  # no range, but the mark
    rows = list(csv.reader(io.StringIO(GV.render_csv(scores))))
    by_label = {r[1]: dict(zip(rows[0], r)) for r in rows[1:]}
    assert by_label["0.15-0.3km"]["m_text"] == "small n"  # the band's d' keeps its flag
    assert by_label[GV.DELTA_SMALL_N_ROW]["m_text"] == "yes"
    small = [w for w in GV.small_n_warnings(scores) if w.startswith("Small n (m)")]
    assert small and "delta_1" in small[0], small
    # the flag is defined beside the table the CSV mirrors, without the false "in any site resample"
    assert GV.DELTA_SMALL_N_DEFINITION in md and "any site resample" not in md


def test_delta_1_small_n_csv_flag_stays_yes_where_the_cell_is_marked():
    import dataclasses

    from geoagent.report import geoverify as GV

    scores = {"m": dataclasses.replace(_plain_none_scores()["m"], delta_1_ci=("0.7-1.5km", "none"))}
    md = GV.render_markdown(scores)
    assert next(ln for ln in md.splitlines() if ln.startswith("| delta_1 |")).endswith(f"{GV.SMALL_N_MARK} |")
    rows = list(csv.reader(io.StringIO(GV.render_csv(scores))))
    assert {r[1]: dict(zip(rows[0], r)) for r in rows[1:]}[GV.DELTA_SMALL_N_ROW]["m_text"] == "yes"


# --- 5. Table 11 only from answers whose text was read (the raw forced_chain responses, or a campaign's) --------
def _judged_release(tmp_path):
    """A release folder whose answers_judged.csv holds forced, its no-context baseline and forced_chain rows (the
    judged file keeps parsed fields only: no answer text, no evidence object)."""
    root = tmp_path / "rel"
    (root / "ladders").mkdir(parents=True)
    (root / "sites.csv").write_text("site,city,lat,lon\ns1,Paris,48.88,2.34\ns2,Paris,48.85,2.36\n", encoding="utf-8")
    lines = ["site,model,schema,lang,context,path,city,area,place,conf_area,conf_fine,error_km,resolved_level,"
             "resolved_label,hit"]
    for site, img in (("s1", "101"), ("s2", "202")):
        (root / "ladders" / f"{site}_ladder_deepseek-en.csv").write_text(
            "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"
            "1.5-3.0km,high,,Louvre Pyramid,,Q1,2.0,5,,22,4\n", encoding="utf-8")
        for schema, ctx in (("forced", "none"), ("forced", "high_15_30km_Q1"), ("forced_chain", "high_15_30km_Q1")):
            lines.append(f"{site},m,{schema},en,{ctx},streetview\\{site}\\{img}.jpg,Paris,Marais,Cafe,0.8,0.7,0.4,"
                         "area,Marais,True")
    (root / "answers_judged.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_judged_report_withholds_table11_and_says_why(tmp_path):
    """Before: a judged file holding forced_chain rows got a Table 11 with 'Evidence 0.0 %' (the file keeps no
    evidence object; the paper computes Table 11 from the raw forced_chain responses, seed 000 Reproducibility).
    Table 10 (hit rates, paired with forced) is the judged file's and stays."""
    from geoagent.geohint.judged import replicate_report

    tables, _ = replicate_report(_judged_release(tmp_path), tmp_path / "out", n_flips=10, n_splits=2, figures=False)
    names = [t.name for t in tables]
    assert "table10" in names and "table11" not in names, names
    assert not (tmp_path / "out" / "table11.csv").exists()
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    withheld = next(ln for ln in md.splitlines() if ln.startswith("**Withheld:"))
    assert "Table 11 (its 2 forced_chain answers carry no answer text" in withheld
    assert "python -m geoagent.geohint.raw_import" in withheld and "Tables 10-11" not in withheld


def test_campaign_forced_chain_answers_keep_table11():
    """A campaign's forced_chain answers were read from their text (the scorer records the parser method): Table 11
    is printed, also with no forced answers to pair them with (Table 10 then has no pair)."""
    agg = GeoHintAggregator()
    for i, site in enumerate(("s1", "s2")):
        r = _answer(f"c{i}", "m", "forced_chain", site=site)
        r.evidence = {"infrastructure": "kerbs", "vegetation": "not visible", "architecture": "stone",
                      "language": "Latin", "terrain": "flat"}
        r.extra["parse_method"] = "json"
        agg.add(r)
    agg.add(_answer("b1", "m", "baseline"))
    names = [t.name for t in GH.build_tables(agg, n_flips=10, n_splits=2, n_boot=0)]
    assert "table11" in names and "table10" not in names, names
    t11 = next(t for t in GH.build_tables(agg, n_flips=10, n_splits=2, n_boot=0) if t.name == "table11")
    row = dict(zip(t11.columns, t11.rows[0]))
    assert (row["n"], row["Evidence"], row["Veg."]) == (2, 1.0, 1.0)  # by hand: 2 answers, both "not visible"


def test_forced_warn_alone_is_not_paired_with_itself(tmp_path):
    """Data of forced_warn (and the baseline) only report forced_warn as their condition; Tables 8-9 pair it with
    another condition, so they are withheld and said so (before: forced_warn 'paired' with itself, difference 0)."""
    agg = GeoHintAggregator()
    for i, site in enumerate(("s1", "s2")):
        agg.add(_answer(f"w{i}", "m", "forced_warn", site=site))
        agg.add(_answer(f"b{i}", "m", "baseline", site=site))
    tables = GH.write_report(agg, tmp_path, n_flips=10, n_splits=2, n_boot=0, figures=False)
    names = [t.name for t in tables]
    assert "table8" not in names and "table9" not in names, names
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Tables 8-9 (they pair forced_warn answers with those of another condition; forced_warn is the reported " \
           "one here" in md


# --- 2. notes said once by the summary writer, for every entry point -------------------------------------------
def _outcome(name: str, extra: list[str]):
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    return Outcome(name, "complete", 0, 2, {"requests": QueueCounts(done=2)}, None, extra_lines=extra)


def _campaign_lines(model: str) -> list[str]:
    from geoagent.sandbox.launch import simulated_note
    from geoagent.scoring.truncation import LEGEND_LINE

    small = ("  Small n (pooled): d' † on the decoy side: 0.15–0.3 km (14 decoy trials), fewer than 20 (the signal "
             "side has 52 trials behind H).")
    return [f"  cut off at the output-token limit: 0 of 10 answers (0.0%); {LEGEND_LINE}", small,
            f"  !!! NOTE: {simulated_note([model])}"]


def test_summary_writer_says_each_note_once_across_campaigns():
    """Before: only the demo's own printer said a note once; the summary writer (Outcome.summary, what `run`
    prints) repeated the cut-off definition, the simulated banner and a small-n line in every summary. Now one
    NotesOnce shared by a process's output says each once, and a later summary refers to the definition."""
    from geoagent.notes import CUT_OFF_SEE_ABOVE, NotesOnce
    from geoagent.scoring.truncation import LEGEND_LINE

    notes = NotesOnce()
    first = _outcome("a", _campaign_lines("m")).summary_with_this_run(notes=notes)
    second = _outcome("b", _campaign_lines("m")).summary(notes=notes)
    both = first + "\n" + second
    assert both.count(LEGEND_LINE) == 1 and first.count(LEGEND_LINE) == 1
    assert f"  cut off at the output-token limit: 0 of 10 answers (0.0%); {CUT_OFF_SEE_ABOVE}" in second
    assert both.count("Simulated answers: ") == 1 and both.count("Small n (pooled)") == 1
    # another campaign's banner (another model) is another note: said
    third = _outcome("c", _campaign_lines("other")).summary(notes=notes)
    assert third.count("Simulated answers: other") == 1 and "campaign c: complete" in third


def test_one_summary_says_a_repeated_note_once_and_run_prints_it_so():
    """Within one summary (no shared NotesOnce): a note its lines give twice is said once; `run`'s printer (the CLI's
    summary) goes through the same writer."""
    from geoagent.cli import _summary
    from geoagent.scoring.truncation import LEGEND_LINE

    o = _outcome("a", _campaign_lines("m") + _campaign_lines("m"))
    for text in (o.summary(), _summary(o, (0, 0))):
        assert text.count(LEGEND_LINE) == 1 and text.count("Simulated answers: ") == 1, text
        assert text.count("Small n (pooled)") == 1
        assert text.count("cut off at the output-token limit: 0 of 10 answers") == 2  # the counts stay


def test_table_rows_and_short_lines_are_never_left_out():
    from geoagent.notes import NotesOnce

    notes = NotesOnce()
    row = "│ " + "x" * 120 + " │"
    rule = "=" * 100  # the demo's summary heading sits between two of these
    text = "\n".join([row, row, "  report: a", "  report: a", rule, "demo summary", rule, ""])
    assert notes.say(text) == text


def test_terms_say_the_figure_is_empty_when_no_site_has_a_regime(tmp_path):
    """No no-context answers: Fig. 2 has no line (its caption says why); the Terms line says so, not 'every
    interval is withheld'."""
    agg = GeoHintAggregator()
    for i, site in enumerate(("s1", "s2", "s3", "s4", "s5", "s6")):
        agg.add(_answer(f"f{i}", "m", "forced", site=site))
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=2, n_boot=20)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Figure fig_hit_by_band.png: no line and no error bar: no site has a regime" in _terms(md)
    assert "error bars are 95 %" not in md and "every interval is withheld" not in md
    assert "No regime line" in md  # the caption's reason (empty_figure_note)
