"""GeoVerify report: Table 12 layout in Markdown/CSV/terminal and the psychometric PNG."""

from __future__ import annotations

import csv
import io

import polars as pl
import pytest
from PIL import Image as PILImage

from geoagent.data.importer import import_release
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.report import geoverify as R
from geoagent.scoring.sdt import CI_MIN_SITES


@pytest.fixture(scope="module")
def scores(release_dir):
    agg = GeoVerifyAggregator()
    agg.update(scored_rows_from_release(import_release(release_dir)))
    return agg.scores()


def test_csv_values_and_layout(scores):
    rows = list(csv.reader(io.StringIO(R.render_csv(scores))))
    header = rows[0]
    assert header[:2] == ["section", "row"]
    # (session 12) ordered by farthest-band d', highest first, as the paper's Table 12 (was alphabetical)
    models = ["qwen3-vl-8b", "gemini-flash", "qwen3-vl-235b", "claude-haiku-4-5", "pooled"]
    assert header[2:-1] == [x for m in models for x in (m, f"{m}_lo", f"{m}_hi", f"{m}_text")]
    assert header[-1] == "label"  # (session 12) the row's label as Markdown shows it, last
    by_label = {r[1]: dict(zip(header[2:], r[2:])) for r in rows[1:]}
    assert all(by_label["H (signal accepted)"][f"{m}_lo"] == "" for m in models)  # no bootstrap: empty
    # rows of Table 12, in order
    labels = [r[1] for r in rows[1:]]
    want = ["H (signal accepted)", "F (decoy accepted)", "control: swapped image", "control: gray field",
            "0.15-0.3km", "0.3-0.7km", "0.7-1.5km", "1.5-3.0km", "3.0-6.0km", "delta_1",
            "nearest band", "farthest band", "median", "share >= 0.8"]
    assert [lab for lab in labels if lab in want] == want
    for m, s in scores.items():
        assert float(by_label["H (signal accepted)"][m]) == pytest.approx(s.h)
        assert float(by_label["F (decoy accepted)"][m]) == pytest.approx(s.f)
        assert float(by_label["0.15-0.3km"][m]) == pytest.approx(s.bands[0].d_prime)
        assert float(by_label["F 0.15-0.3km"][m]) == pytest.approx(s.bands[0].f)
        assert float(by_label["farthest band"][m]) == pytest.approx(s.bands[-1].c)
        assert by_label["delta_1"][f"{m}_text"] == (s.delta_1 or "none") and by_label["delta_1"][m] == ""
        assert by_label["control: swapped image"][m] == ""  # the sample has no control arms
        assert by_label["pre-registered"][f"{m}_text"] == s.readout.verdict and by_label["pre-registered"][m] == ""
    # one band spelling in the CSV's keys and values: the data's ASCII label, as in the scored results and the
    # delta_1 value; only the last column, label, shows the Markdown spelling (session 12)
    text = R.render_csv(scores)
    no_label = "\n".join(",".join(r[:-1]) for r in rows)
    assert "–" not in no_label and " km" not in no_label
    assert {r[-1] for r in rows[1:] if r[1] == "F 0.15-0.3km"} == {"F 0.15–0.3 km"}
    assert [lab for lab in labels if lab.startswith("F ") and lab[2].isdigit()] == [f"F {b.band}" for b in scores["pooled"].bands]
    assert all(by_label["delta_1"][f"{m}_text"] in {"none", "undefined", *(b.band for b in s.bands)} for m, s in scores.items())
    assert "delta_1 range lo" not in by_label  # no bootstrap, no range rows
    # every value column reads as numbers, every _text column as text (walkthrough: an "invalid" read-out
    # made polars read every value column as strings)
    frame = pl.read_csv(io.StringIO(text))
    for m in models:
        for c in (m, f"{m}_lo", f"{m}_hi"):  # numbers, or no value at all (no bootstrap: polars says String)
            assert frame.schema[c].is_numeric() or frame[c].null_count() == frame.height, (c, frame.schema[c])
        assert frame.schema[m].is_numeric() and frame.schema[f"{m}_text"] == pl.String
    # Markdown and the terminal keep the pretty form
    assert "| F 0.15–0.3 km |" in R.render_markdown(scores) and "F 0.15–0.3 km" in R.render_terminal(scores)


@pytest.fixture(scope="module")
def boot_scores(release_dir):
    agg = GeoVerifyAggregator()
    agg.update(scored_rows_from_release(import_release(release_dir)))
    return agg.scores(n_boot=400, seed=5)


def test_intervals_in_csv_markdown_terminal(boot_scores):
    bands = [b.band for b in boot_scores["pooled"].bands]
    rows = list(csv.reader(io.StringIO(R.render_csv(boot_scores))))
    header = rows[0]
    by_label = {r[1]: dict(zip(header[2:], r[2:])) for r in rows[1:]}
    checks = {"H (signal accepted)": "H", "F (decoy accepted)": "F", "0.15-0.3km": f"d'[{bands[0]}]",
              "3.0-6.0km": f"d'[{bands[-1]}]", "F 0.3-0.7km": f"F[{bands[1]}]",
              "nearest band": f"c[{bands[0]}]", "farthest band": f"c[{bands[-1]}]"}
    for m, s in boot_scores.items():
        for label, key in checks.items():
            if key not in s.ci:  # trials from fewer than 5 sites: withheld (session 10), empty cells
                assert s.ci_sites[key] < CI_MIN_SITES and by_label[label][f"{m}_lo"] == by_label[label][f"{m}_hi"] == ""
                continue
            lo, hi = s.ci[key]
            assert float(by_label[label][f"{m}_lo"]) == pytest.approx(lo)
            assert float(by_label[label][f"{m}_hi"]) == pytest.approx(hi)
            assert lo <= hi
        if s.delta_1_ci is not None:
            assert (by_label["delta_1 range lo"][f"{m}_text"], by_label["delta_1 range hi"][f"{m}_text"]) == s.delta_1_ci
        assert by_label["delta_1"][f"{m}_lo"] == by_label["delta_1"][f"{m}_hi"] == ""  # bands are text
        assert by_label["median"][f"{m}_hi"] == ""
    md = R.render_markdown(boot_scores)
    p = boot_scores["pooled"]
    lo, hi = p.ci[f"d'[{bands[0]}]"]
    assert f"{p.bands[0].d_prime:.2f} [{lo:.2f}, {hi:.2f}]" in md
    lo, hi = p.ci["H"]
    assert f"{100 * p.h:.1f} % [{100 * lo:.1f}, {100 * hi:.1f}]" in md
    lo, hi = p.ci[f"c[{bands[0]}]"]
    assert f"{p.bands[0].c:+.2f} [{lo:+.2f}, {hi:+.2f}]" in md
    assert "400 bootstrap resamples of sites (seed 5" in md
    txt = R.render_terminal(boot_scores)
    lo, hi = p.ci[f"d'[{bands[0]}]"]
    assert f"{p.bands[0].d_prime:.2f} [{lo:.2f}, {hi:.2f}]" in txt
    assert "400 bootstrap" in txt


def test_markdown_and_terminal(scores):
    md = R.render_markdown(scores)
    head = md.splitlines()[0]
    assert head.count("|") == len(scores) + 2 and "pooled" in head
    assert f"{100 * scores['pooled'].h:.1f} %" in md
    txt = R.render_terminal(scores)
    assert "GeoVerify" in txt and "qwen3-vl-8b" in txt and "\x1b[" not in txt
    assert R.render_markdown({}).startswith("_no scored")


def test_write_report_repeatedly(scores, tmp_path):
    for _ in range(2):  # live refresh: same call again overwrites atomically
        paths = R.write_report(scores, tmp_path)
    assert set(paths) == {"md", "csv", "txt", "png"}
    with PILImage.open(paths["png"]) as im:
        assert im.format == "PNG" and im.size[0] > 300
    assert not list(tmp_path.glob(".*.tmp"))
    assert R.write_report({}, tmp_path / "empty").keys() == {"md", "csv", "txt"}


def test_parse_failures_listed(release_dir, tmp_path):
    rows = scored_rows_from_release(import_release(release_dir))
    bad = [{**r, "trial_id": r["trial_id"] + "#x", "verdict": None, "conf": None, "parse_reason": "no JSON object found"}
           for r in rows[:3]]
    agg = GeoVerifyAggregator()
    agg.update(rows + bad)
    fails = agg.parse_failures()
    assert [f["trial_id"] for f in fails] == sorted(r["trial_id"] for r in bad)
    paths = R.write_report(agg.scores(), tmp_path, parse_failures=fails)
    md = paths["md"].read_text(encoding="utf-8")
    assert "Parse failures (3)" in md and "no JSON object found" in md
    lines = paths["failures"].read_text(encoding="utf-8").splitlines()
    assert lines[0] == "model,trial_id,reason" and len(lines) == 4
    assert sum(s.n_parse_failures for m, s in agg.scores().items() if m != "pooled") == 3


def test_delta_1_none_with_range_none_to_none_is_none_without_a_range_everywhere(boot_scores):
    """delta_1 none whose bootstrap range is [none, none] (no band reaches d' = 1 in the data nor at either end of
    the 95 % range) is shown as ``none`` with no brackets and no few-cluster mark (was ``none [none, none]§ †``),
    in Markdown, the terminal, the console summary and the CSV's text cells; its small-n mark stays (walk26 D1:
    a rule of trial counts, which the bootstrap range does not lift)."""
    import dataclasses

    base = boot_scores["claude-haiku-4-5"]
    s = dataclasses.replace(base, delta_1=None, delta_1_ci=("none", "none"), ci_sites={**base.ci_sites, "H": 6})
    assert R.few_cluster(s, R.DELTA_KEY)  # the marks would apply: few clusters, small n
    assert R.delta_1_small_n(s)
    scores = {"m": s}
    none = f"none {R.SMALL_N_MARK}"
    assert R.summary_counts(s)["delta_1"] == none
    md_row = next(line for line in R.render_markdown(scores).splitlines() if line.startswith("| delta_1"))
    assert [c.strip() for c in md_row.strip("|").split("|")][1] == none, md_row
    txt_row = next(line for line in R.render_terminal(scores, width=200).splitlines() if "delta_1" in line
                   and "│" in line)
    assert txt_row.split("│")[2].strip() == none, txt_row
    rows = list(csv.reader(io.StringIO(R.render_csv(scores))))
    by_label = {r[1]: dict(zip(rows[0][2:], r[2:])) for r in rows[1:]}
    assert by_label["delta_1"]["m_text"] == "none"  # the CSV's text cell carries no mark: its own row flags it
    assert by_label[R.DELTA_SMALL_N_ROW]["m_text"] == "yes"
    assert by_label["delta_1 range lo"]["m_text"] == by_label["delta_1 range hi"]["m_text"] == ""
    # a range that is not none-to-none keeps its brackets and marks
    s2 = dataclasses.replace(s, delta_1_ci=("0.7-1.5km", "none"))
    assert R.summary_counts(s2)["delta_1"] == "none [0.7–1.5 km, none]§ †"
