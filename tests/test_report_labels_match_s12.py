"""Report CSVs carry the row labels Markdown shows (session 12 walkthrough).

Before, ``geoverify_table.csv`` said ``F 0.15-0.3km`` where ``geoverify_table.md`` said ``F 0.15–0.3 km``, so rows
could not be matched across the formats by their label; GeoHint's band rows (Table 5, the building vs no-context
table) likewise. Now the CSV keeps the ASCII label as a stable key and adds the shown label: ``label`` (GeoVerify,
last column), ``<name> label`` (GeoHint, after the table's own columns). Checked against the Markdown files the
reports write (their table rows parsed here), on the release sample (GeoVerify) and synthetic GeoHint results.
"""

from __future__ import annotations

import csv
import io

from _geohint_synth import synth_results

from geoagent.data.importer import import_release
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.report import geohint as GH
from geoagent.report import geoverify as GV


def _md_rows(md: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in md.splitlines()
            if ln.startswith("|") and not ln.startswith("|---")]


def test_geoverify_csv_label_matches_markdown(release_dir, tmp_path):
    agg = GeoVerifyAggregator()
    agg.update(scored_rows_from_release(import_release(release_dir)))
    paths = GV.write_report(agg.scores(), tmp_path, plot=False)
    rows = list(csv.reader(io.StringIO(paths["csv"].read_text(encoding="utf-8"))))
    header = rows[0]
    assert header[-1] == "label" and header[:2] == ["section", "row"]
    md_labels = {r[0] for r in _md_rows(paths["md"].read_text(encoding="utf-8"))}
    by_key = {r[1]: r[-1] for r in rows[1:]}
    assert by_key["F 0.15-0.3km"] == "F 0.15–0.3 km" and by_key["0.15-0.3km"] == "0.15–0.3 km"
    assert by_key["H (signal accepted)"] == "H (signal accepted)"
    # every row Markdown has too (the CSV's own rows: counts as numbers, the delta_1 range and small-n flag)
    own = (*GV.DELTA_RANGE_ROWS, GV.DELTA_SMALL_N_ROW, "answers (all arms)")
    # nothing of the release was cut off: Markdown collapses the cut-off section to its "answers cut off (all
    # arms)" row (session 12 walkthrough: ten all-zero rows), the CSV keeps the shares and "cut off and unparsed"
    own += tuple(r[1] for r in rows[1:] if r[0] == "Cut off at the output-token limit"
                 and r[1].startswith(("share cut off", "cut off and unparsed")))
    shared = [r for r in rows[1:] if not r[1].startswith(("n ", "answers, ")) and r[1] not in own]
    assert shared and all(r[-1] in md_labels for r in shared), [r[-1] for r in shared if r[-1] not in md_labels]
    # the per-model groups of four keep their places (positional readers)
    # the first model's group of four keeps its place (the models in the paper's Table 12 order: farthest-band d')
    first = header[2]
    assert header[2:6] == [first, f"{first}_lo", f"{first}_hi", f"{first}_text"]


def test_geohint_band_rows_carry_the_shown_label(tmp_path):
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=7))
    tables = {t.name: t for t in GH.write_report(agg, tmp_path, n_flips=200, n_splits=10)}
    banded = [t for t in tables.values() if "Band" in t.columns]
    assert banded
    for t in banded:
        rows = list(csv.reader(io.StringIO((tmp_path / f"{t.name}.csv").read_text(encoding="utf-8"))))
        header = rows[0]
        # the label is the last column but the permutation p flags ("<name>_is_floor", session 15) that follow it
        n_flags = sum(h.endswith("_is_floor") for h in header)
        assert header[len(header) - 1 - n_flags] == "Band label" and all(
            h.endswith("_is_floor") for h in header[len(header) - n_flags:]), (t.name, header)
        i, j = header.index("Band"), header.index("Band label")
        md_cells = {c for r in _md_rows(t.to_markdown()) for c in r}
        for r in rows[1:]:
            assert r[j] == GH.band_title(r[i]) and r[j] in md_cells
        assert any("–" in r[j] and "-" in r[i] for r in rows[1:])
