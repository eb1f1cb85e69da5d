"""The collapsed GeoHint cut-off table (nothing cut off: one row ``All | all | 0 of N``) aligns its count to the
right, as the full table's counts and GeoVerify's ``0 of N`` cells (session 14). Before: the cell was a ``text``
column, left-aligned in Markdown (``---``) and in the terminal."""

from __future__ import annotations

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH


def _agg(n: int, *, no_reason: int = 0) -> GeoHintAggregator:
    agg = GeoHintAggregator()
    for i in range(n):
        agg.add(GeoHintResult(
            key=f"k{i}", site="s1", image_id="1", model="m-a", condition="forced", schema="forced", repeat=i,
            city="C", area="A", parse_ok=True, resolved_level="area", error_km=0.2, hit=True, ref_qid="Q1",
            dist_km=1.0, band="0.5-1.5km", tier="high", extra={"finish_reason": None if i < no_reason else "stop"}))
    return agg


def test_markdown_right_aligns_the_count_cell():
    md = GH.table_cutoff(_agg(14)).to_markdown()
    lines = [ln for ln in md.splitlines() if ln.startswith("|")]
    assert lines == ["| Model | Condition | Answers cut off |", "|---|---|---:|", "| All | all | 0 of 14 |"], lines
    md = GH.table_cutoff(_agg(4, no_reason=2)).to_markdown()
    assert "|---|---|---:|---:|" in md.splitlines()


def test_terminal_right_aligns_the_count_cell():
    text = GH.render_text(GH.table_cutoff(_agg(14)).to_rich())
    header = next(ln for ln in text.splitlines() if ln.startswith("\u2503") and "Answers cut off" in ln)
    row = next(ln for ln in text.splitlines() if "0 of 14" in ln)
    # the cell's text ends where its header ends (right-aligned), not where it starts
    assert row.index("0 of 14") + len("0 of 14") == header.index("Answers cut off") + len("Answers cut off"), text
