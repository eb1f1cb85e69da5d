"""Exported crawl tables have declared column types: a column empty in one crawl keeps its type, so two
crawls' exports concatenate (fresh-user finding, crawl part)."""

import json

import polars as pl

from geoagent.crawl.export import crawl_table_schemas, export_crawl_tables


def _crawl(sd, *, filled: bool):
    sd.mkdir(parents=True)
    q = "0.8" if filled else ""
    (sd / "image_audit.csv").write_text(
        "image,site,batch,usable,ai_answer_overlay,ai_overlay_text,ai_scene_type,ai_through_glass,"
        "ai_tourist_infrastructure,ai_quality,ai_usable,ai_why,human_verdict,human_reason,human_verified_by,human_note\n"
        f"0012,s1,7,{'True' if filled else ''},,,,,,{q},,,,,,\n", encoding="utf-8")
    rec = {"qid": "Q1", "label": "Tower", "model": "m", "ok": True, "familiarity": 3,
           "name_zh": "塔" if filled else None, "name_en": "Tower", "why": "x", "ts": 1.5, "city": "c"}
    (sd / "audit_decisions.jsonl").write_text(json.dumps(rec) + "\n", encoding="utf-8")


def test_empty_and_filled_crawl_exports_concatenate(tmp_path):
    out = {}
    for name, filled in (("empty", False), ("filled", True)):
        _crawl(tmp_path / name, filled=filled)
        out[name] = {t.table: pl.read_parquet(t.parquet) for t in export_crawl_tables(tmp_path / name)}
    schemas = crawl_table_schemas()
    for table in ("image_audit", "audit_decisions"):
        e, f = out["empty"][table], out["filled"][table]
        assert dict(e.schema) == dict(f.schema) == schemas[table]
        both = pl.concat([e, f])
        assert both.height == 2
    ia = pl.concat([out["empty"]["image_audit"], out["filled"]["image_audit"]])
    assert ia["ai_quality"].to_list() == [None, 0.8] and ia["usable"].to_list() == [None, True]
    assert ia["image"].to_list() == ["0012", "0012"]  # an id keeps its leading zero
    ad = pl.concat([out["empty"]["audit_decisions"], out["filled"]["audit_decisions"]])
    assert ad["name_zh"].to_list() == [None, "塔"]


def test_bad_value_in_declared_column_is_kept(tmp_path):
    sd = tmp_path / "c"
    sd.mkdir()
    (sd / "candidate_referenceability.csv").write_text("qid,sitelinks,familiarity\nQ1,12,high\n", encoding="utf-8")
    (t,) = [t for t in export_crawl_tables(sd) if t.table == "candidate_referenceability"]
    df = pl.read_parquet(t.parquet)
    assert df["familiarity"].to_list() == ["high"] and df["sitelinks"].to_list() == [12]
