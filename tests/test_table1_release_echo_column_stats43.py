"""Table 1 gives each model's echo rate under the paper's rule beside the report's (stats43 #2).

The report's default echo rule ``name`` (a whole name of the reference point) reads up to 16 points below the rule
of the release scripts that produced the paper's echo figures (``release_first_word``): on the release sample,
claude-opus-5 28.3 % against 44.4 %. Table 1 now ends with ``Echo rate (release_first_word)``, whatever the report's
rule, so a reader compares with the paper without re-running; the columns before it keep their names and places.

Checked on the release's judged answers against an independent pandas implementation of the release's rule (a key
per name: the first 4 characters of a name holding a CJK ideograph, else its first word, lower-cased; keys of 3 or
more characters; found as a substring of the lower-cased "area building").
"""

from __future__ import annotations

import math

import pandas as pd
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.judged import replicate_report
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH

#: table1.csv's columns before stats43 #2, in order: users' scripts read them by name or place
OLD_COLUMNS = ["Model", "n", "Hit rate (fraction)", "0.5-1.5km (fraction)", "1.5-3.0km (fraction)",
               "3.0-6.0km (fraction)", "Echo rate (fraction)", "Hit rate 95 % CI lo (fraction)",
               "Hit rate 95 % CI hi (fraction)", "Echo rate 95 % CI lo (fraction)", "Echo rate 95 % CI hi (fraction)",
               "sites", "CI flag"]
NEW_COLUMN = "Echo rate (release_first_word) (fraction)"


def _release_rule_rates(release_dir) -> pd.Series:
    """Per model, the share of context answers (reference point in the site's ladder) that echo under the release's
    rule, computed with pandas from the judged CSV and the ladders (missing fields read as pandas reads them)."""
    answers = pd.read_csv(release_dir / "answers_judged_sample.csv")
    answers = answers[answers.context != "none"].copy()
    answers["qid"] = answers.context.str.rsplit("_", n=1).str[-1]
    ladders = pd.concat([pd.read_csv(p).assign(site=p.name.split("_ladder")[0])
                         for p in sorted((release_dir / "ladders").glob("*.csv"))])
    rows = answers.merge(ladders[["site", "qid", "name_en", "name_zh"]], on=["site", "qid"], how="inner")
    hay = (rows.area.fillna("").astype(str) + " " + rows.place.fillna("").astype(str)).str.lower()

    def key(names: pd.Series) -> pd.Series:
        names = names.fillna("").astype(str).str.strip().str.lower()
        cjk = names.str.contains("[\u4e00-\u9fff]", regex=True)
        first_word = names.str.split().str[0].fillna("")
        return first_word.where(~cjk, names.str[:4])

    echo = pd.Series(False, index=rows.index)
    for k in (key(rows.name_zh), key(rows.name_en)):
        found = [len(kk) >= 3 and kk in h for kk, h in zip(k, hay)]
        echo |= pd.Series(found, index=rows.index)
    assert len(rows) == 936  # the sample's context answers with a ladder point
    assert int(echo.sum()) == 371  # the release rule's count (tests/test_geohint_echo.py)
    return echo.groupby(rows.model).mean()


@pytest.fixture(scope="module")
def reports(release_dir, tmp_path_factory):
    out = {}
    for rule in ("name", "release_first_word"):
        folder = tmp_path_factory.mktemp(rule)
        replicate_report(release_dir, folder, n_flips=20, n_splits=5, n_boot=0, figures=False, echo_rule=rule)
        out[rule] = folder
    return out


def test_the_column_ends_table1_and_the_others_keep_their_places(reports):
    cols = list(pd.read_csv(reports["name"] / "table1.csv").columns)
    assert cols == OLD_COLUMNS + [NEW_COLUMN]
    md = (reports["name"] / "report.md").read_text(encoding="utf-8").split("### Table 1:")[1].split("### ")[0]
    header = next(line for line in md.splitlines() if line.startswith("| Model"))
    assert header.rstrip(" |").endswith("| CI flag | Echo rate (release_first_word)")
    assert "Echo rate (release_first_word): the same answers' echo rate under the release scripts' rule" in md
    assert "compare this column with the paper" in md


def test_the_paper_rule_column_matches_pandas_under_either_report_rule(reports, release_dir):
    want = _release_rule_rates(release_dir)
    by_rule = {rule: pd.read_csv(folder / "table1.csv").set_index("Model") for rule, folder in reports.items()}
    name, first = by_rule["name"], by_rule["release_first_word"]
    for model, rate in want.items():
        assert name.loc[model, NEW_COLUMN] == pytest.approx(rate, abs=1e-12), model
        # the report's own rule, first_word: both columns are that rule's rate
        assert first.loc[model, "Echo rate (fraction)"] == pytest.approx(rate, abs=1e-12), model
        assert first.loc[model, NEW_COLUMN] == pytest.approx(rate, abs=1e-12), model
    assert set(name.index) == set(want.index)
    # the default rule's column is as before (262 echoes of 936), and reads up to 16 points below the paper's rule
    assert (name["Echo rate (fraction)"] * name["n"]).sum() == pytest.approx(262, abs=1e-9)
    gap = 100 * (name[NEW_COLUMN] - name["Echo rate (fraction)"])
    assert gap.min() > 0 and 16.0 < gap.max() < 16.2  # claude-opus-5: 44.4 against 28.3
    # every other column is the same under both report rules but Echo rate and its interval
    same = [c for c in OLD_COLUMNS[1:] if not c.startswith("Echo rate")]
    pd.testing.assert_frame_equal(name[same], first[same])


def _result(key: str, extra: dict, echo: bool | None) -> GeoHintResult:
    return GeoHintResult(key=key, site="s", image_id="1", model="m", condition="forced", schema="forced", ref_qid="Q1",
                         band="0.5-1.5km", tier="high", dist_km=1.0, echo=echo, extra=extra)


def test_results_without_the_paper_rule_verdict_are_left_out_of_that_column_and_counted():
    both = {"name": False, "release_first_word": True}
    rows = [_result("a", {"echo_rule": "name", "echo_by_rule": both}, False),
            _result("b", {"echo_rule": "release_first_word"}, True),  # scored with that rule alone: counted
            _result("c", {"echo_rule": "release_first_word"}, False),
            _result("old", {}, True)]  # scored with "name" alone, before both verdicts were kept: no verdict
    agg = GeoHintAggregator()
    agg.add_many(rows)
    cell = agg.select(condition="forced")
    assert (cell.release_echoes, cell.release_echo_n) == (2, 3)
    t1 = GH.table1(agg, "forced", n_boot=0)
    assert t1.columns[-1] == GH.RELEASE_ECHO_COLUMN and t1.rows[0][-1] == pytest.approx(2 / 3)
    assert "1 answer with an echo verdict carries none under 'release_first_word'" in t1.notes
    only_old = GeoHintAggregator()
    only_old.add_many([_result("old", {}, True)])
    assert math.isnan(GH.table1(only_old, "forced", n_boot=0).rows[0][-1])  # an em dash, not 0 %
