"""Exported results tables have declared column types (fresh-user finding: an all-empty ``error_km`` was
``Null`` in one campaign's Parquet and ``pl.concat`` with another campaign's ``Float64`` failed)."""

import polars as pl

from geoagent.geohint.parse import EVIDENCE_CATEGORIES
from geoagent.geohint.stages import SCORED_TABLE as GEOHINT_TABLE, score_located
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import scored_row
from geoagent.runtime.export import TABLE_SCHEMAS, export_table, rows_to_frame
from geoagent.runtime.store import open_campaign_state


def _located(i: int, *, geocoded: bool) -> dict:
    meta = {"task": "geohint", "site": f"s{i}", "condition": "forced_chain", "schema": "forced", "ref_qid": "Q1", "ref_name": "Old Tower",
            "band": "0.5-1.5km", "tier": "high", "dist_km": 1.2, "site_lat": 48.0, "site_lon": 11.0}
    if geocoded:
        parsed = {"ok": True, "city": "Munich", "area": "Old Tower", "building": None, "confidence_area": 0.7,
                  "evidence": {c: "not visible" for c in EVIDENCE_CATEGORIES}}
        located = {"resolved_level": "area", "lat": 48.01, "lon": 11.0, "resolved_label": "Old Tower, Munich",
                   "qid": "Q1"}
    else:  # the sandbox-geocoder run: nothing parsed or geocoded
        parsed = {"ok": False, "error": "no JSON object", "raw": "I cannot tell."}
        located = {"resolved_level": "none"}
    return {"model": "m", "image_id": f"img{i}", "request_key": f"rk{i}", "finish_reason": "stop",
            "meta": meta, "parsed": parsed, "located": located}


def _export_geohint(tmp_path, name: str, geocoded: bool, batch_rows: int = 20_000) -> pl.DataFrame:
    st = open_campaign_state(name, root=tmp_path)
    rows = [(f"k{i}", score_located(f"k{i}", _located(i, geocoded=geocoded)).to_json()) for i in range(5)]
    if not geocoded:
        for _, r in rows:
            r["extra"]["parse_error"] = None  # every column of the sandbox run's finding empty
    st.store.put_results(GEOHINT_TABLE, rows)
    t = export_table(st.store, GEOHINT_TABLE, tmp_path / name, batch_rows=batch_rows)
    st.close()
    return pl.read_parquet(t.parquet)


def test_geohint_empty_and_filled_exports_concatenate(tmp_path):
    empty = _export_geohint(tmp_path, "empty", geocoded=False)
    filled = _export_geohint(tmp_path, "filled", geocoded=True)
    for col in ("error_km", "lat", "lon"):
        assert empty.schema[col] == pl.Float64 and empty[col].null_count() == 5
        assert filled.schema[col] == pl.Float64 and filled[col].null_count() == 0
    for col in ("resolved_label", "extra.qid", "extra.parse_error", "evidence.script"):
        assert empty.schema[col] == pl.String and empty[col].null_count() == 5
    assert "evidence" not in empty.columns and "evidence" not in filled.columns
    assert pl.Null not in empty.schema.values()
    assert empty.schema == filled.schema
    both = pl.concat([empty, filled])
    assert both.height == 10 and both["error_km"].null_count() == 5
    # haversine of 0.01 deg latitude: 1.112 km (hand-computed: 6371.0088 * 0.01 * pi/180)
    assert abs(filled["error_km"][0] - 1.1119) < 1e-3
    assert filled["evidence.script"].to_list() == ["not visible"] * 5


def test_geohint_batched_export_keeps_declared_types(tmp_path):
    a = _export_geohint(tmp_path, "one", geocoded=False)
    b = _export_geohint(tmp_path, "many", geocoded=False, batch_rows=2)
    assert a.schema == b.schema and a.equals(b)


def test_geoverify_parse_failures_only_keep_types(tmp_path):
    trial = {"trial_id": "t1", "site": "s1", "arm": "main", "band": "signal", "truth": "yes", "d_km": 0.05}
    failed = scored_row(trial, "m", parse_verdict("no idea"))
    ok = scored_row(trial, "m", parse_verdict('{"verdict": "yes", "confidence": 0.8}'))
    schema = TABLE_SCHEMAS["geoverify_scored"]
    a, b = rows_to_frame([("k1", failed)], schema), rows_to_frame([("k2", ok)], schema)
    assert a.schema["conf"] == pl.Float64 and a["conf"][0] is None
    assert a.schema["correct"] == pl.Boolean and a.schema["cand"] == pl.String
    assert pl.concat([a, b])["conf"].to_list() == [None, 0.8]


def test_undeclared_all_null_column_is_text_and_bad_value_kept():
    df = rows_to_frame([("k1", {"d_km": "far", "new": None})], {"d_km": pl.Float64})
    assert df.schema["new"] == pl.String
    assert df.schema["d_km"] == pl.String and df["d_km"][0] == "far"  # kept, not dropped


def test_declared_evidence_columns_match_parser():
    assert [c for c in TABLE_SCHEMAS["geohint_scored"] if c.startswith("evidence.")] == [
        f"evidence.{c}" for c in EVIDENCE_CATEGORIES]
