"""A crawl's auditors answered by geoagent's simulator are flagged in the crawl's exports and manifest, as the
evaluation campaigns' simulated models are (column ``simulated``, Parquet metadata ``geoagent.simulated_note``,
``export/export_note.txt``, manifest ``simulated_models``).

Before: the crawl's export read nothing of the config (and its ``--watch`` hand-off was given the running config,
whose sandbox URLs are rewritten to ``127.0.0.1:PORT``), and :func:`geoagent.sandbox.launch.simulated_models` knew
only ``[[models]]``, so the sandbox crawl's image audit, referenceability ratings and sensitive-place flags
(answered by the local OpenAI-compatible fake) and the default ``[crawl.*] provider = "simulated"`` auditors
looked like a real model's in ``image_audit.parquet``, ``audit_decisions.parquet``, ... and the manifest.
"""
from __future__ import annotations

import tomllib
from pathlib import Path

import orjson
import polars as pl
import pytest

from geoagent.config import load_config
from geoagent.sandbox.launch import simulated_auditors, simulated_models

REPO = Path(__file__).resolve().parents[1]
CRAWL = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
AUDITORS = ["sandbox-vision-auditor", "sandbox-text-auditor"]


@pytest.fixture(scope="module")
def crawl_state(tmp_path_factory):
    """The shipped sandbox crawl's folder (the session's one crawl, restored for this module: tests/_crawl_once.py)."""
    from tests._crawl_once import sandbox_crawl_for_module

    root, _ = sandbox_crawl_for_module(tmp_path_factory)
    return root / "state" / "crawl-sandbox"


def test_manifest_names_the_simulated_auditors(crawl_state):
    manifest = orjson.loads((crawl_state / "manifest.json").read_bytes())
    assert manifest["simulated_models"] == AUDITORS


@pytest.mark.parametrize("table", ["image_audit", "candidate_referenceability", "audit_decisions",
                                   "audit_sensitive", "ladders"])
def test_auditor_tables_carry_the_simulated_column(crawl_state, table):
    df = pl.read_parquet(crawl_state / "export" / f"{table}.parquet")
    assert df.height > 0 and df.schema["simulated"] == pl.Boolean
    assert df["simulated"].to_list() == [True] * df.height
    csv = pl.read_csv(crawl_state / "export" / f"{table}.csv", infer_schema_length=0)
    assert set(csv["simulated"].to_list()) == {"true"}


@pytest.mark.parametrize("table", ["sites", "images", "image_audit", "audit_decisions", "crawl_decisions"])
def test_every_crawl_table_carries_the_note(crawl_state, table):
    meta = pl.read_parquet_metadata(crawl_state / "export" / f"{table}.parquet")
    note = meta["geoagent.simulated_note"]
    assert "sandbox-vision-auditor, sandbox-text-auditor answered from geoagent's simulator" in note
    text = (crawl_state / "export" / "export_note.txt").read_text(encoding="utf-8")
    assert note in text and f"{table}.csv / {table}.parquet" in text


def _config(tmp_path, drop_models: bool, providers: str = "") -> object:
    raw = CRAWL.read_text(encoding="utf-8")
    if drop_models:  # the auditors' models are no [[models]] entry: [crawl.*] provider answers them
        data = tomllib.loads(raw)
        assert [m["name"] for m in data["models"]] == AUDITORS
        raw = raw.replace('[crawl.image_audit]\nprovider = "openai"', f'[crawl.image_audit]\nprovider = "{providers}"')
        raw = raw.replace('[crawl.referenceability]\nprovider = "openai"',
                          '[crawl.referenceability]\nprovider = "simulated"')
        head, _, rest = raw.partition("[[models]]")
        raw = head + "[crawl]" + rest.split("\n[crawl]", 1)[1]
    p = tmp_path / "c.toml"
    p.write_text(raw, encoding="utf-8")
    return load_config(p)


def test_simulated_provider_auditors_are_named(tmp_path):
    cfg = _config(tmp_path, drop_models=True, providers="simulated")
    assert not cfg.models
    assert simulated_auditors(cfg) == {"image_audit": "sandbox-vision-auditor",
                                       "referenceability": "sandbox-text-auditor"}
    assert simulated_models(cfg) == AUDITORS


def test_sandbox_fake_auditors_are_named(tmp_path):
    cfg = _config(tmp_path, drop_models=False)
    assert simulated_auditors(cfg) == {"image_audit": "sandbox-vision-auditor",
                                       "referenceability": "sandbox-text-auditor"}
    assert simulated_models(cfg) == AUDITORS
