"""Every id column of a crawl's tables is text: in the exported Parquet, in the exported CSV and in the state
folder's CSVs when read the documented way.

Walkthrough: ``state/<crawl>/export/images.parquet`` had ``image_id: Int64`` (Polars inferred it from the
all-digit Mapillary ids of ``images.csv``), while README says ids are text and the Parquet file keeps every
column's type (GeoVerify/GeoHint exports already had ``String``). Checked over a real sandbox crawl through the
CLI (``MAPILLARY_TOKEN='MLY|sandbox' run.py crawl geoagent/configs/crawl_sandbox.toml``): the expected id
columns per table are listed here by hand, and the values are compared with the state folder's CSVs read by
the standard library's ``csv`` module (text, no type guessing).
"""

from __future__ import annotations

import csv
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from geoagent.crawl.export import is_id_column, read_crawl_csv
from _docs import docs_text

REPO = Path(__file__).resolve().parents[1]

#: table -> its id columns, written out by hand from the column lists of the crawl writers
EXPECTED_IDS = {
    "city_pool": {"city", "country", "continent"},
    "sites": {"site", "city", "country", "continent", "qid"},
    "images": {"image_id", "site"},
    "image_audit": {"image", "site", "batch"},
    "candidate_referenceability": {"qid"},
    "candidate_referenceability_by_city": {"qid", "city"},
    "ladders": {"site", "ladder", "qid"},
    "crawl_decisions": {"city", "site"},
}


def _text_rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def crawl_dir(tmp_path_factory) -> Path:
    """The shipped sandbox crawl's folder (the session's one crawl, restored for this module: tests/_crawl_once.py)."""
    from tests._crawl_once import sandbox_crawl_for_module

    root, _ = sandbox_crawl_for_module(tmp_path_factory)
    out = root / "state" / "crawl-sandbox"
    assert (out / "export" / "images.parquet").is_file()
    return out


def test_every_exported_id_column_is_text_in_parquet(crawl_dir):
    export = crawl_dir / "export"
    seen = set()
    for table, ids in EXPECTED_IDS.items():
        df = pl.read_parquet(export / f"{table}.parquet")
        for col in ids & set(df.columns):
            seen.add((table, col))
            assert df.schema[col] == pl.String, (table, col, df.schema[col])
        # and no id column anywhere in any exported table is a number
    for p in sorted(export.glob("*.parquet")):
        for col, dtype in pl.read_parquet_schema(p).items():
            if is_id_column(col):
                assert dtype in (pl.String, pl.Null), (p.name, col, dtype)
    assert ("images", "image_id") in seen and ("sites", "qid") in seen and ("ladders", "qid") in seen


def test_exported_image_ids_equal_the_state_folder_text(crawl_dir):
    want = [r["image_id"] for r in _text_rows(crawl_dir / "images.csv")]
    assert want and all(w.isdigit() for w in want)  # the case that fooled type inference
    assert pl.read_parquet(crawl_dir / "export" / "images.parquet")["image_id"].to_list() == want
    # the exported CSV, read with the helper or with README's recipe, gives the same text
    assert read_crawl_csv(crawl_dir / "export" / "images.csv")["image_id"].to_list() == want
    # the state folder's own CSV, read with the helper
    state = read_crawl_csv(crawl_dir / "images.csv")
    assert state.schema["image_id"] == pl.String and state["image_id"].to_list() == want
    assert state.schema["lat"] == pl.Float64  # value columns keep their inferred types
    sites_q = [r["qid"] for r in _text_rows(crawl_dir / "sites.csv")]
    assert pl.read_parquet(crawl_dir / "export" / "sites.parquet")["qid"].to_list() == sites_q
    audit = [r["image"] for r in _text_rows(crawl_dir / "image_audit.csv")]
    assert pl.read_parquet(crawl_dir / "export" / "image_audit.parquet")["image"].to_list() == audit


def test_readme_recipe_covers_every_crawl_id_column(crawl_dir):
    text = " ".join(docs_text().split())
    assert "read_crawl_csv" in text
    want = [r["image_id"] for r in _text_rows(crawl_dir / "images.csv")]
    got = pd.read_csv(crawl_dir / "export" / "images.csv", dtype={"image_id": str, "site": str})
    assert got["image_id"].tolist() == want


def test_read_crawl_csv_keeps_leading_zeros_and_long_ids(tmp_path):
    p = tmp_path / "images.csv"
    p.write_text("image_id,site,lat,batch\n0042,a_b,1.5,7\n12345678901234567890,a_b,2.0,8\n", encoding="utf-8")
    df = read_crawl_csv(p)
    assert df["image_id"].to_list() == ["0042", "12345678901234567890"]
    assert df["batch"].to_list() == ["7", "8"]
    assert df.schema["lat"] == pl.Float64
    assert pl.read_csv(p)["image_id"].dtype != pl.String  # what a guessing reader does
