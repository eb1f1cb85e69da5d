"""The generic campaign's ``results`` export follows its declared schema (s15).

Before: where a ``results`` row's answer was stored in the response store, the export added a column ``raw`` after
the declared ones: a second copy of ``text`` (the raw-text fill-in of the scored tables, whose rows keep no answer
text, :func:`geoagent.runtime.export.with_raw_text`, ran on every table). The generic row already holds the
model's answer text verbatim in ``text`` (the model caller's ``response.text``, the ``text`` of
``model_responses`` under the same key), so the column was a duplicate outside ``TABLE_SCHEMAS["results"]``,
present in one export and absent in another (rows without a stored response). Now the fill-in runs only on tables
whose schema declares it (``geoverify_scored``'s ``raw``, ``geohint_scored``'s ``extra.raw``) and on tables with no
declared schema; ``results`` keeps exactly its declared columns. End to end: a generic campaign on the simulated
provider, ``run.py export``, real Parquet and CSV files.
"""

from __future__ import annotations

import polars as pl

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.runtime.export import RESPONSES_TABLE, TABLE_SCHEMAS


def test_generic_results_export_has_exactly_its_declared_columns_and_text_is_the_raw_answer(tmp_path, capsys):
    cfg = generic_campaign(tmp_path, name="gen-raw", n=6, models=model_table("m"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert main(["export", str(cfg)]) == 0
    capsys.readouterr()
    out = tmp_path / "state" / "gen-raw"
    results = pl.read_parquet(out / "results.parquet")
    assert results.height == 6
    # before: [..., "simulated", "raw"]
    assert results.columns == ["key", *TABLE_SCHEMAS["results"]], results.columns
    assert pl.read_csv(out / "results.csv").columns == results.columns
    # the model's answer text is in ``text``, verbatim: the stored response's text under the row's request key
    responses = pl.read_parquet(out / f"{RESPONSES_TABLE}.parquet").select(pl.col("key").alias("request_key"),
                                                                          pl.col("text").alias("stored"))
    joined = results.join(responses, on="request_key", how="left")
    assert joined.height == 6 and joined["stored"].null_count() == 0
    assert (joined["text"] == joined["stored"]).all()
    assert results["text"].str.len_chars().min() > 0
