"""Table 11 from a mix of raw-read forced_chain answers and a judged file's forced_chain rows (session 14).

Before: one judged row (parsed fields only, no text, no evidence object) among the answers withheld Table 11
entirely ("Withheld: Table 11 (2 of its 9 forced_chain answers carry no answer text ..."), although the answers
whose text was read could give it. Now Table 11 is computed from those and its notes say how many judged rows
were left out; only when every answer is a judged row is it withheld.
"""

from __future__ import annotations

import json

import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.raw_import import import_raw
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH

CATS = ("infrastructure", "vegetation", "architecture", "script", "terrain")


def _judged(key: str, model: str, *, context: bool = True, site: str = "s1") -> GeoHintResult:
    """A judged file's forced_chain row: parsed fields, no text, no parser method, no evidence object."""
    return GeoHintResult(
        key=key, site=site, image_id="1", model=model, condition="forced_chain" if context else "forced_chain_baseline",
        schema="forced_chain", repeat=0, city="C", area="A", parse_ok=True, resolved_level="area", error_km=0.2,
        hit=True, ref_qid="Q1" if context else None, dist_km=1.0 if context else None,
        band="0.5-1.5km" if context else None, tier="high" if context else None, source="release")


def _read(key: str, model: str, evidence: dict | None, *, parse_ok: bool = True, method: str = "json") -> GeoHintResult:
    r = _judged(key, model)
    r.parse_ok, r.evidence = parse_ok, evidence
    r.extra["parse_method"] = method
    return r


def _t11(agg):
    return next((t for t in GH.build_tables(agg, n_flips=10, n_splits=2, n_boot=0) if t.name == "table11"), None)


def test_hand_case_mixed_with_judged_rows():
    nv = "not visible"
    agg = GeoHintAggregator()
    agg.add(_read("r1", "m", dict(zip(CATS, ("kerbs", nv, "stone", "Latin", nv)))))
    agg.add(_read("r2", "m", dict(zip(CATS, (nv, nv, "brick", "CJK", "flat")))))
    agg.add(_read("r3", "m", None, parse_ok=False, method="failed"))  # no JSON object: unparseable, no evidence
    agg.add(_judged("j1", "m"))
    agg.add(_judged("j2", "m", context=False))
    t = _t11(agg)
    assert t is not None
    row = dict(zip(t.columns, t.rows[0]))
    # by hand: 3 read answers, 2 with evidence; vegetation 2 of 2 not visible, infrastructure 1 of 2, terrain 1 of 2
    assert (row["n"], row["Evidence"], row["Infra."], row["Veg."], row["Arch."], row["Script"], row["Terrain"],
            row["Unparseable"]) == (3, 2 / 3, 0.5, 1.0, 0.0, 0.0, 0.5, 1)
    assert "Left out: 2 forced_chain answers of a judged file, whose text was never read" in t.notes
    assert GH.table11_withheld(agg) == ""
    # judged rows alone: still withheld, and said why
    only = GeoHintAggregator()
    only.add(_judged("j1", "m"))
    only.add(_judged("j2", "m", context=False))
    assert _t11(only) is None
    assert GH.table11_withheld(only).startswith("Table 11 (its 2 forced_chain answers carry no answer text")


def test_release_raw_answers_give_the_same_table_with_judged_rows_beside_them(release_dir, tmp_path):
    """The release's raw forced_chain sample alone, and with a judged row per raw answer beside it: the same
    Table 11 rows; the evidence count checked against the raw JSON lines read here."""
    rows, _ = import_raw(release_dir)
    assert rows
    alone = GeoHintAggregator()
    mixed = GeoHintAggregator()
    for r in rows:
        alone.add(r)
        mixed.add(r)
    for i, r in enumerate(rows):
        j = _judged(f"j{i}", r.model, site=r.site)
        mixed.add(j)
    t_alone, t_mixed = _t11(alone), _t11(mixed)
    assert t_alone is not None and t_mixed is not None
    assert t_mixed.rows == t_alone.rows
    assert f"Left out: {len(rows)} forced_chain answers of a judged file" in t_mixed.notes
    # independent: lines of the raw file whose text holds an "evidence" object
    n_lines = with_ev = 0
    with (release_dir / "forced_chain_raw_sample.jsonl").open(encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            n_lines += 1
            with_ev += '"evidence"' in (d.get("raw") or "")
    assert sum(r[1] for r in t_mixed.rows) == n_lines == len(rows)
    assert sum(r[1] * r[2] for r in t_mixed.rows) == pytest.approx(with_ev)
    GH.write_report(mixed, tmp_path, n_flips=10, n_splits=2, n_boot=0, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Table 11:" in md and "carry no answer text" not in md
