"""Batched export of a large results table equals the one-frame export (same Parquet schema and rows, same CSV)."""

import polars as pl
from geoagent.runtime.store import open_campaign_state
from geoagent.runtime.export import export_table

def test_batched_equals_single(tmp_path):
    st = open_campaign_state("x", root=tmp_path)
    rows = []
    for i in range(1050):
        r = {"a": i, "b": (i if i % 300 else f"s{i}"), "c": {"d": i * 0.5, "e": [i, i + 1]}, "f": None if i < 500 else "late", "g": [i]}
        rows.append((f"k{i:05d}", r))
    st.store.put_results("t", rows)
    one = export_table(st.store, "t", tmp_path / "one")
    many = export_table(st.store, "t", tmp_path / "many", batch_rows=100)
    assert one.rows == many.rows == 1050
    a, b = pl.read_parquet(one.parquet), pl.read_parquet(many.parquet)
    assert a.schema == b.schema
    assert a.equals(b)
    ca, cb = pl.read_csv(one.csv, infer_schema=False), pl.read_csv(many.csv, infer_schema=False)
    assert ca.equals(cb)
    st.close()
