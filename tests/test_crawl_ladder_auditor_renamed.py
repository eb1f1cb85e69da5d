"""A crawl re-run under a renamed referenceability auditor keeps one set of ladders, each named by the model
that rated its site.

Each ladder file is named by its auditor (``ladders/<site>_ladder_<auditor>-en.csv``, the release's layout), and a
run of a crawl with rated sites rebuilds every ladder from the stored ratings
(:func:`geoagent.crawl.stages.apply_review_verdicts`). Renaming ``[crawl.referenceability] model`` (the
``[[models]]`` name) and re-running left the old auditor's files beside the rebuilt ones (session 12); the fix then
named every rebuilt ladder by the config's new auditor, though its ratings were the old one's: ``rated/*.json`` did
not record which model rated (session 13 leftover). The rated record now names the rating model (``rating_model``)
and a ladder is named by it (:func:`geoagent.crawl.stages.rated_auditor`): after a rename the stored sites' ladders
keep the name of the model that rated them, and nothing is set aside. A record without the field (an older
crawl's) took the config's auditor (session 14 leftover), though every decision is logged with its model in
``audit_decisions.jsonl``: the model is now read from there (:func:`geoagent.crawl.stages.logged_rating_model`: the
one model whose logged decisions for the site's city are the record's ratings). Only where the log cannot single one
out (no log, or two models with the same ratings) the config's auditor is taken as before: its ladders under another
name are moved to ``ladders_superseded/`` (kept, read by nothing) with a warning naming how many and from which
auditor. The shipped offline crawl (local fakes, started in-process) through the CLI entry."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from geoagent import constants as C
from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _ladders(state: Path, folder: str = "ladders") -> dict[str, bytes]:
    d = state / folder
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.csv"))} if d.is_dir() else {}


def _crawl_then_rename(tmp_path, capsys, strip_rating_model=False, drop_log=False):
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count('"sandbox-text-auditor"') == 2  # the [[models]] name and [crawl.referenceability] model
    p = tmp_path / "crawl.toml"
    p.write_text(text + f'\n[paths]\nstate = "{tmp_path / "state"}"\nqueues = "{tmp_path / "queues"}"\n')
    assert main(["crawl", str(p), "--no-live"]) == 0
    state = tmp_path / "state" / "crawl-sandbox"
    first = _ladders(state)
    assert first and all(n.endswith("_ladder_sandbox-text-auditor-en.csv") for n in first)
    rated = sorted((state / "rated").glob("*.json"))
    assert rated and all(json.loads(r.read_text())["rating_model"] == "sandbox-text-auditor" for r in rated)
    if strip_rating_model:  # a crawl from before the rated record named its rating model
        for r in rated:
            rec = json.loads(r.read_text())
            del rec["rating_model"], rec["rating_model_id"]
            r.write_text(json.dumps(rec))
    if drop_log:  # nothing to read the rating model from
        (state / C.AUDIT_DECISIONS_FILE).rename(state / "audit_decisions.jsonl.away")
    capsys.readouterr()
    p.write_text(p.read_text().replace('"sandbox-text-auditor"', '"sandbox-text-auditor-v2"'))
    assert main(["crawl", str(p), "--no-live"]) == 0
    return p, state, first, capsys.readouterr().err


def test_a_renamed_auditor_keeps_the_ladders_named_by_the_model_that_rated(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    p, state, first, err = _crawl_then_rename(tmp_path, capsys)
    # before: every ladder renamed to _ladder_sandbox-text-auditor-v2-en.csv, though no site was rated again
    assert _ladders(state) == first
    assert not _ladders(state, C.SUPERSEDED_LADDERS_DIR)
    assert C.SUPERSEDED_LADDERS_DIR not in err
    lad = pl.read_parquet(state / C.EXPORT_DIR / "ladders.parquet")
    assert set(lad["ladder"].unique()) == {"sandbox-text-auditor-en"}
    assert lad["site"].n_unique() == len(first)
    # the stored records keep naming the model that rated them
    assert all(json.loads(r.read_text())["rating_model"] == "sandbox-text-auditor"
               for r in (state / "rated").glob("*.json"))


def test_an_older_crawl_without_the_rating_model_reads_it_from_the_decision_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    p, state, first, err = _crawl_then_rename(tmp_path, capsys, strip_rating_model=True)
    # before: every ladder renamed to the config's new auditor and the old ones set aside with a warning, though
    # audit_decisions.jsonl says which model made each rating
    assert _ladders(state) == first
    assert not _ladders(state, C.SUPERSEDED_LADDERS_DIR)
    assert C.SUPERSEDED_LADDERS_DIR not in err
    lad = pl.read_parquet(state / C.EXPORT_DIR / "ladders.parquet")
    assert set(lad["ladder"].unique()) == {"sandbox-text-auditor-en"}
    # read, not written: rated/ stays as the older crawl left it
    assert all("rating_model" not in json.loads(r.read_text()) for r in (state / "rated").glob("*.json"))


def test_an_older_crawl_whose_log_cannot_say_falls_back_to_the_config_and_sets_the_old_ladders_aside(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    p, state, first, err = _crawl_then_rename(tmp_path, capsys, strip_rating_model=True, drop_log=True)
    second = _ladders(state)
    # one ladder per site, each named by the current auditor (the record cannot say who rated), same ratings
    assert sorted(second) == sorted(n.replace("_ladder_sandbox-text-auditor-en", "_ladder_sandbox-text-auditor-v2-en")
                                    for n in first)
    assert sorted(second.values()) == sorted(first.values())
    # the old auditor's files are kept, byte for byte, where no reader of ladders/ looks
    assert _ladders(state, C.SUPERSEDED_LADDERS_DIR) == first
    # one "warning:" line, as the CLI's other warnings
    warned = [ln for ln in err.splitlines() if C.SUPERSEDED_LADDERS_DIR in ln]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and f"{len(first)} ladder" in warned[0] and "'sandbox-text-auditor'" in warned[0]
    assert "'sandbox-text-auditor-v2'" in warned[0]
    # the export's ladders table holds the current auditor's ladders only
    lad = pl.read_parquet(state / C.EXPORT_DIR / "ladders.parquet")
    assert set(lad["ladder"].unique()) == {"sandbox-text-auditor-v2-en"}
    assert lad["site"].n_unique() == len(first)

    # a third run under the same auditor moves nothing and warns about nothing
    assert main(["crawl", str(p), "--no-live"]) == 0
    assert _ladders(state) == second and _ladders(state, C.SUPERSEDED_LADDERS_DIR) == first
    assert not [ln for ln in capsys.readouterr().err.splitlines() if C.SUPERSEDED_LADDERS_DIR in ln]


def _rated(tmp_path, city="Lyon"):
    state = tmp_path / "st"
    (state / "rated").mkdir(parents=True)
    rec = {"site": {"site": "s1", "city": city}, "rated": [
        {"qid": "Q1", "familiarity": 4, "ok": True, "name_en": "One"},
        {"qid": "Q2", "familiarity": None, "ok": False, "name_en": None}]}
    (state / "rated" / "s1.json").write_text(json.dumps(rec))
    return state, rec


def _log(state, *recs):
    with (state / C.AUDIT_DECISIONS_FILE).open("a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


def test_the_logged_rating_model_is_the_one_whose_decisions_are_the_records_ratings(tmp_path):
    from geoagent.crawl.stages import logged_rating_model

    state, rec = _rated(tmp_path)
    assert logged_rating_model(state, rec) is None  # no log
    d1 = {"qid": "Q1", "label": "One", "ok": True, "familiarity": 4, "name_zh": None, "name_en": "One", "why": "",
          "ts": 1.0, "city": "lyon"}
    d2 = {"qid": "Q2", "label": "Two", "ok": False, "familiarity": None, "name_zh": None, "name_en": None, "why": "",
          "ts": 1.0, "city": "lyon"}
    # the same QIDs rated for another city, by another model: not this site's ratings
    _log(state, {**d1, "model": "other", "city": "paris"}, {**d2, "model": "other", "city": "paris"})
    assert logged_rating_model(state, rec) is None
    _log(state, {**d1, "model": "old-auditor"}, {**d2, "model": "old-auditor"},
         {**d1, "model": "sens|old-auditor"})  # a screening record never names a rating model
    assert logged_rating_model(state, rec) == "old-auditor"
    # a second model whose decisions differ is not this record's rater
    _log(state, {**d1, "model": "new-auditor", "familiarity": 2}, {**d2, "model": "new-auditor"})
    assert logged_rating_model(state, rec) == "old-auditor"
    # a second model with the very same ratings: the log cannot say which one made the record
    _log(state, {**d1, "model": "twin"}, {**d2, "model": "twin"})
    assert logged_rating_model(state, rec) is None
    # a log without cities (a version before ratings were kept per city) is read too
    state2, rec2 = _rated(tmp_path / "b")
    _log(state2, {k: v for k, v in {**d1, "model": "v0"}.items() if k != "city"},
         {k: v for k, v in {**d2, "model": "v0"}.items() if k != "city"})
    assert logged_rating_model(state2, rec2) == "v0"
