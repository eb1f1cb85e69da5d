"""docs/exports.md, the data dictionary of the exported tables, stays true (session 19, walk19 section 6).

Real exports are run once per test run (about 30 s; tests/_once_per_run.py): ``run.py demo --workdir`` (a crawl, a GeoVerify and a
GeoHint campaign on the local fakes; the two campaigns export at their end), ``run.py export`` of the demo's crawl
(its tables and auditor responses under ``state/demo-crawl/export/``) and a three-request ``generic`` campaign on
the simulated provider (``results``). Every column of every exported Parquet and CSV file must be named, as
```name```, under its table's heading ``### `table``` in docs/exports.md, and every table documented there must be
one the code exports. A column added to an export without a line in the page fails here.

Also the small export defects of the same walkthrough section:
(a) in a release replay, the join of ``geoverify_scored`` to ``model_responses`` is ``request_key`` = ``key``, and
    ``provider_model`` is the scored row's ``model`` (the page says so; checked on the replay when the release is
    present);
(b) a crawl CSV whose declared numeric column is empty in every row (``crawl_decisions.csv``'s geometry) is read
    by :func:`geoagent.crawl.export.read_crawl_csv` with its declared type, not as text; the page gives a recipe for
    any exported CSV, checked here on every file;
(c) ``geoverify_table.csv``: the page says a row is identified by (``section``, ``row``).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from _docs import DOCS_DIR, REPO

EXPORTS_MD = DOCS_DIR / "exports.md"


def _sections() -> dict[str, str]:
    """``### `table``` heading -> the text under it (to the next heading) of docs/exports.md."""
    text = EXPORTS_MD.read_text(encoding="utf-8")
    out: dict[str, str] = {}
    parts = re.split(r"(?m)^(#{2,3} .*)$", text)
    for head, body in zip(parts[1::2], parts[2::2]):
        m = re.fullmatch(r"### `([A-Za-z0-9_]+)`", head.strip())
        if m:
            out[m.group(1)] = body
    return out


def _undocumented(table: str, columns, sections: dict[str, str]) -> list[str]:
    body = sections.get(table, "")
    return [c for c in columns if f"`{c}`" not in body]


def _run(*args: str, cwd: Path = REPO, timeout: int = 240) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
    env["PYTHONPATH"] = str(REPO)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    p = subprocess.run([sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, (args, p.stdout[-3000:], p.stderr[-3000:])
    return p


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, list[Path]]:
    """table name -> the Parquet files of it that the real exports wrote (demo campaigns, demo crawl export,
    a generic campaign)."""
    from _model_harness import generic_campaign, model_table
    from _once_per_run import once_per_run

    def build(root: Path) -> None:
        _run("demo", "--workdir", str(root / "demo"), "--no-live", timeout=300)
        _run("export", str(root / "demo" / "state" / "demo-configs" / "demo_crawl.toml"))
        gen = generic_campaign(root, name="gen-export", n=3, models=model_table("sim"))
        _run("run", str(gen), "--no-live")

    # the tests only read these files: one build per run, whichever xdist worker gets a test of this module first
    root = once_per_run(tmp_path_factory, "exports-doc", build)
    state = root / "demo" / "state"
    files = [*state.glob("*/*.parquet"), *state.glob("*/export/*.parquet"), *(root / "state").glob("*/*.parquet")]
    out: dict[str, list[Path]] = {}
    for f in files:
        out.setdefault(f.stem, []).append(f)
    return out


def test_every_exported_column_is_documented_under_its_table(exported):
    sections = _sections()
    want = {"geoverify_scored", "geohint_scored", "results", "model_responses", "city_pool", "sites", "images",
            "image_audit", "candidate_referenceability", "candidate_referenceability_by_city", "ladders",
            "audit_decisions", "audit_sensitive", "audit_review_queue", "crawl_decisions"}
    assert want <= set(exported), sorted(want - set(exported))
    missing = {}
    for table, files in exported.items():
        for f in files:
            cols = pl.read_parquet_schema(f)
            csv_cols = pl.read_csv(f.with_suffix(".csv"), n_rows=0).columns
            assert csv_cols == list(cols), f  # the CSV has the Parquet file's columns, in order
            if gaps := _undocumented(table, cols, sections):
                missing[str(f.relative_to(f.parents[2]))] = gaps
    assert not missing, f"exported columns not in docs/exports.md under their table's heading: {missing}"


def test_every_declared_column_is_documented_and_every_documented_table_is_exported():
    """The declared schemas (also of tables the exports above do not produce: the human review tables)."""
    from geoagent.crawl.export import CRAWL_DECISIONS_COLUMNS, CRAWL_DECISIONS_TABLE, crawl_table_schemas
    from geoagent.runtime.export import SPEND_SCHEMA, SPEND_TABLE, TABLE_SCHEMAS

    declared = {**{t: list(s) for t, s in TABLE_SCHEMAS.items()}, SPEND_TABLE: list(SPEND_SCHEMA),
                **{t: list(s) for t, s in crawl_table_schemas().items()},
                CRAWL_DECISIONS_TABLE: list(CRAWL_DECISIONS_COLUMNS)}
    sections = _sections()
    missing = {t: gaps for t, cols in declared.items() if (gaps := _undocumented(t, cols, sections))}
    assert not missing, missing
    assert set(sections) == set(declared), (sorted(set(sections) - set(declared)), sorted(set(declared) - set(sections)))


def test_units_the_walkthrough_found_nowhere_are_stated():
    text = EXPORTS_MD.read_text(encoding="utf-8")
    sections = _sections()
    assert "Unix time" in sections["model_responses"] and "`created_at`" in sections["model_responses"]
    assert "ISO 8601" in sections["images"]
    assert re.search(r"`L_district` \| Float64 \| km", sections["city_pool"])
    assert re.search(r"`conf` \| Float64 \| 0-1", sections["geoverify_scored"])
    assert re.search(r"`familiarity` \| Int64 \| 0-5", sections["ladders"])
    assert "**answer**" in sections["geohint_scored"]  # lat/lon: the answer's geocoded point, not the site's
    assert "log10 km per km of" in text


def test_the_documented_csv_recipe_reads_every_exported_csv_with_the_parquet_types(exported):
    """(b) docs/exports.md's recipe: ``schema_overrides`` from the Parquet file's schema (list columns left as
    text). Before, no page said how; ``pl.read_csv`` with defaults reads all-empty numeric columns as String."""
    assert "schema_overrides={c: t for c, t in schema.items() if not isinstance(t, pl.List)}" in \
        EXPORTS_MD.read_text(encoding="utf-8")
    for files in exported.values():
        for f in files:
            schema = pl.read_parquet_schema(f)
            df = pl.read_csv(f.with_suffix(".csv"),
                             schema_overrides={c: t for c, t in schema.items() if not isinstance(t, pl.List)})
            want = {c: (pl.String if isinstance(t, pl.List) else t) for c, t in schema.items()}
            assert dict(df.schema) == want, f
            assert df.height == pl.read_parquet(f).height, f


def test_read_crawl_csv_gives_an_all_empty_declared_column_its_declared_type(exported):
    """(b) ``read_crawl_csv`` says it reads any of the crawl's CSVs (state folder or export/): before, the
    geometry columns of a ``crawl_decisions.csv`` without a WDQS split (all empty) came back String, and so did
    ``depth`` / ``n_parts``; now they have the Parquet file's types. Columns with values are inferred as before."""
    from geoagent.crawl.export import read_crawl_csv

    (pq,) = exported["crawl_decisions"]
    parquet = pl.read_parquet_schema(pq)
    df = read_crawl_csv(pq.with_suffix(".csv"))
    for c in ("center_lat", "center_lon", "radius_km", "box_west", "box_south", "box_east", "box_north", "box_km2"):
        assert df[c].null_count() == df.height, c  # the demo's crawl made no WDQS split: all empty
        assert df.schema[c] == pl.Float64, (c, df.schema[c])
    assert df.schema["depth"] == parquet["depth"] == pl.Int64
    assert df.schema["n_parts"] == pl.Int64
    assert df.schema["ts"] == pl.Float64 and df.schema["stage"] == pl.String


def test_the_page_says_how_replay_answers_join_their_responses(release_dir, tmp_path):
    """(a) In a release replay ``model_responses.model`` is the config entry (``release-replay``) and
    ``geoverify_scored.model`` the recorded model. The page says the join is ``request_key`` = ``key`` and that
    ``provider_model`` is the recorded model; checked on the replay of the release sample."""
    from _model_harness import geoverify_replay_toml

    body = _sections()["model_responses"]
    text = EXPORTS_MD.read_text(encoding="utf-8")
    assert "release-replay" in body and "`provider_model`" in body
    assert "`geoverify_scored.request_key`" in text and "= `model_responses.key`" in text
    cfg = tmp_path / "rep.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, "rep-join", release_dir), encoding="utf-8")
    _run("run", str(cfg), "--no-live")
    state = tmp_path / "state" / "rep-join"
    scored = pl.read_parquet(state / "geoverify_scored.parquet")
    resp = pl.read_parquet(state / "model_responses.parquet")
    assert resp["model"].unique().to_list() == ["release-replay"]
    joined = scored.join(resp.select("key", "provider_model"), left_on="request_key", right_on="key")
    assert joined.height == scored.height > 0
    assert (joined["model"] == joined["provider_model"]).all()
    assert set(scored["model"]) == set(resp["provider_model"])


def test_the_page_says_a_geoverify_table_row_is_keyed_by_section_and_row(exported):
    """(c) ``row`` alone repeats across sections (band-only d' rows, ``median``, ``nearest band``)."""
    text = EXPORTS_MD.read_text(encoding="utf-8")
    assert "(`section`, `row`)" in text and "geoverify_table.csv" in text
    (gv,) = exported["geoverify_scored"]
    table = pl.read_csv(gv.parent / "report" / "geoverify_table.csv", infer_schema_length=0)
    assert table.select("section", "row").is_duplicated().sum() == 0  # the documented key is unique


def test_the_page_names_every_text_row_of_the_geoverify_table(exported):
    """walk46 #11: the page's list of the rows whose value is text (model column empty, ``<model>_text`` filled)
    lacked ``delta_1 small n`` (and the read-out's ``pre-registered``); a reader filtering the model columns
    missed them. Every such row of the demo's table is named on the page, in the note on ``geoverify_table.csv``."""
    note = re.sub(r"\s+", " ", EXPORTS_MD.read_text(encoding="utf-8"))
    note = note[note.index("* `geoverify_table.csv` (Table 12)"):]
    note = note[:note.index("* GeoHint `table6.csv`")]
    (gv,) = exported["geoverify_scored"]
    table = pl.read_csv(gv.parent / "report" / "geoverify_table.csv", infer_schema_length=0)
    models = [c[:-len("_text")] for c in table.columns if c.endswith("_text")]
    text_rows = {r for m in models
                 for r in table.filter(pl.col(m).is_null() & pl.col(f"{m}_text").is_not_null())["row"].to_list()}
    assert {"delta_1", "pre-registered"} <= text_rows, text_rows  # the demo's table has both kinds
    assert not [r for r in text_rows if f"`{r}`" not in note], (text_rows, note)
    assert "`delta_1 small n`" in note  # the row the demo may not flag, named all the same
