"""Tables 6 and 7 say why a slope cell is withheld when its fit fails.

Before (session 13 follow-up): ``geoagent.report.geohint._slope_cells`` turned any ``ValueError`` of the
site-clustered regression into a dash and dropped its reason, although the regression names it ("X'X is singular
(e.g. all hint distances equal)", "need more than 2 rows to fit, have 2", "X'X or X'y is not finite ... in
cluster(s) [...]"): a model whose hint distances are all equal, or with two answers, printed dashes and the notes
said nothing of them. Now each table's notes give one line per reason, said once, naming the cells it blanks
(``No fit (— in cells): reason.``), as GeoVerify's ``No interval (columns): reasons.`` lines do.
"""
from __future__ import annotations

import math

from _geohint_synth import hand_rows, synth_results

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report.geohint import DASH, table6, table7

SINGULAR = "X'X is singular (e.g. all hint distances equal)"
FEW = "need more than 2 rows to fit, have 2"


def _agg() -> GeoHintAggregator:
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=5, n_sites=12))
    # m-flat: every hint 1 km away (the slope is not identified); m-few: two context answers in all
    agg.add_many(hand_rows({"flat1": [1, 0], "flat2": [0, 1]}, {"flat1": [1, 0, 1], "flat2": [0, 0, 1]}, model="m-flat"))
    agg.add_many([r for r in hand_rows({"few1": [1]}, {"few1": [1, 0]}, model="m-few")])
    return agg


def _no_fit_lines(notes: str) -> list[str]:
    return [ln for ln in notes.split("\n\n") if ln.startswith("No fit")]


def test_table6_names_each_reason_once_with_its_cells():
    t = table6(_agg())
    rows = {r[0]: r for r in t.rows}
    assert math.isnan(rows["m-flat"][2]) and math.isnan(rows["m-few"][2])  # beta a dash
    assert math.isfinite(rows["All"][2])
    lines = _no_fit_lines(t.notes)
    # before: no such line (the dashes were unexplained)
    singular = [ln for ln in lines if SINGULAR in ln]
    few = [ln for ln in lines if FEW in ln]
    assert len(singular) == 1 and len(few) == 1, lines
    assert "m-flat beta" in singular[0] and "m-flat beta if reciting" in singular[0], singular
    assert "m-few beta" in few[0] and "m-flat" not in few[0], few
    assert singular[0].startswith(f"No fit ({DASH} in m-flat beta, SE, p; "), singular
    assert not any("m-a" in ln or "All" in ln for ln in lines), lines  # only failed fits are named


def test_table7_names_each_reason_once_with_its_cells():
    t = table7(_agg())
    lines = _no_fit_lines(t.notes)
    singular = [ln for ln in lines if SINGULAR in ln]
    assert len(singular) == 1, lines
    assert "m-flat beta all" in singular[0], singular
    assert len({ln for ln in lines}) == len(lines)


def test_no_line_without_a_failed_fit():
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=5, n_sites=12))
    assert _no_fit_lines(table6(agg).notes) == []


# --- n of a failed fit -------------------------------------------------------------------------------------------
# Before (session 13 review): a row whose fit failed printed n = 0 in Tables 6/7 while its "No fit" line said
# "need more than 2 rows to fit, have 2" (m-few's two context answers) or nothing of its rows at all (m-flat's six
# answers, all with the hint 1 km away): n and the note disagreed. n is now the rows the fit had, made or not.


def test_table6_n_of_a_failed_fit_is_its_rows():
    agg = _agg()
    rows = {r[0]: r for r in table6(agg).rows}
    assert rows["m-few"][1] == 2  # before: 0, while the note says "have 2"
    assert rows["m-flat"][1] == agg.regression(models=["m-flat"], condition="forced").nobs == 6  # before: 0
    assert any(FEW in ln for ln in _no_fit_lines(table6(agg).notes))
    assert rows["All"][1] == sum(rows[m][1] for m in ("m-a", "m-b", "m-c", "m-few", "m-flat"))


def test_table7_n_agrees_with_the_have_count_of_its_no_fit_line():
    import re
    agg = _agg()
    t = table7(agg)
    rows = {r[0]: r for r in t.rows}
    col = {"illegible": t.columns.index("n illegible"), "legible": t.columns.index("n legible"),
           "all": t.columns.index("n all")}
    assert rows["m-few"][col["all"]] == 2  # before: 0
    assert rows["m-flat"][col["all"]] == 6  # before: 0
    checked = 0
    for ln in _no_fit_lines(t.notes):
        have = re.search(r"have (\d+)\.$", ln)
        if not have:
            continue
        cells = ln[ln.index(" in ") + 4:ln.index("):")].split("; ")
        for c in cells:
            m = re.fullmatch(r"(\S+) beta (illegible|legible|all), p \2", c)
            if m:
                assert rows[m.group(1)][col[m.group(2)]] == int(have.group(1)), (c, ln)
                checked += 1
    assert checked >= 2
