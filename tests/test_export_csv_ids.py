"""Machine-read CSV files: ids stay text when read as README says, value columns of the GeoVerify table
stay numeric.

Walkthrough: polars read ``image_id`` of ``geoverify_scored.csv`` as i64 (Mapillary ids are digits; CSV has no
types), while the Parquet file keeps it text. The stored ids are not changed; README gives the reading
recipe, checked here on ids a number would not keep (a leading zero, 20 digits)."""

from __future__ import annotations

import pandas as pd
import polars as pl

from geoagent.runtime.export import rows_to_frame, write_frame
from _docs import docs_text

IDS = ["0042", "12345678901234567890", "987654321"]


def test_readme_recipe_reads_image_ids_as_the_parquet_has_them(tmp_path):
    frame = rows_to_frame((f"k{i}", {"image_id": v, "hit": i % 2 == 0}) for i, v in enumerate(IDS))
    write_frame(frame, tmp_path / "t.parquet", tmp_path / "t.csv")
    assert pl.read_parquet(tmp_path / "t.parquet")["image_id"].to_list() == IDS
    assert pl.read_csv(tmp_path / "t.csv")["image_id"].dtype != pl.String  # the trap: inferred as a number
    text = " ".join(docs_text().split())
    # the recipe names image_shown too (GeoVerify's shown photo, walk35 #2); a file without that column reads the same
    assert 'pl.read_csv(path, schema_overrides={"image_id": pl.String, "image_shown": pl.String})' in text
    assert "pd.read_csv(path, dtype={\"image_id\": str, \"image_shown\": str})" in text
    got = pl.read_csv(tmp_path / "t.csv", schema_overrides={"image_id": pl.String, "image_shown": pl.String})
    assert got["image_id"].to_list() == IDS
    assert pd.read_csv(tmp_path / "t.csv", dtype={"image_id": str, "image_shown": str})["image_id"].tolist() == IDS
