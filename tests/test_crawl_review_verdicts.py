"""Human decisions on the referenceability review queue (seed 000 Sec. 3.3): parser, and applied to a sandbox
crawl's ladders, trials and resolution table with no model call, ``rated/`` untouched."""

from __future__ import annotations

import csv
import json
import shutil

import pytest

from geoagent.crawl.review import DECISION_LOG_FILE, RESOLVED_FILE, read_review_verdicts, review_verdicts_of
from geoagent.runtime.drift import is_applied_after_key
from tests import test_crawl_pipeline as _pipe
from tests.test_crawl_pipeline import _csv, _settings

#: the sandbox crawl of test_crawl_pipeline (module fixture: one crawl for this module)
crawled = _pipe.crawled


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_parser_reads_keep_and_corrected_ratings(tmp_path):
    p = _write(tmp_path / "r.csv", "\ufeffsite,qid,decision,reviewer,note\ns1,Q42,keep,ana,fine\ns1,q7, 3 ,bo,\n")
    got = read_review_verdicts(p)
    assert got[("s1", "Q42")]["decision"] == "keep" and got[("s1", "Q42")]["familiarity"] is None
    assert got[("s1", "Q42")]["reviewer"] == "ana" and got[("s1", "Q42")]["note"] == "fine"
    assert got[("s1", "Q7")]["familiarity"] == 3 and got[("s1", "Q7")]["source"] == f"{p}:3"


@pytest.mark.parametrize("text, where, what", [
    ("site,qid\ns1,Q1\n", 1, "missing column 'decision'"),
    ("site,qid,decision\ns1,Q1,keep\ns1,Q2,6\n", 3, "decision must be keep"),
    ("site,qid,decision\ns1,Q1,high\n", 2, "decision must be keep"),
    ("site,qid,decision\ns1,X1,keep\n", 2, "qid must be a Wikidata id"),
    ("site,qid,decision\n,Q1,keep\n", 2, "empty site or qid"),
    ("site,qid,decision\ns1,Q1,keep\ns1,Q1,2\n", 3, "conflicting decisions"),
])
def test_parser_names_key_file_and_line(tmp_path, text, where, what):
    p = _write(tmp_path / "r.csv", text)
    with pytest.raises(ValueError) as e:
        read_review_verdicts(p)
    assert f"{p}:{where}:" in str(e.value) and what in str(e.value)
    assert "[crawl.referenceability] review_verdicts" in str(e.value)


def test_missing_file_and_not_utf8_are_named(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"\[crawl.referenceability\] review_verdicts.*does not exist"):
        review_verdicts_of(tmp_path / "nope.csv")
    p = tmp_path / "latin1.csv"
    p.write_bytes("site,qid,decision,note\ns1,Q1,keep,caf\xe9\n".encode("latin-1"))
    with pytest.raises(ValueError, match="not UTF-8"):
        review_verdicts_of(p)
    assert review_verdicts_of(None) == {}


def test_review_verdicts_are_applied_after_the_calls():
    assert is_applied_after_key("crawl.referenceability.review_verdicts")
    assert not is_applied_after_key("crawl.referenceability.model")


def _ladder_rows(state):
    out = {}
    for p in sorted((state / "ladders").glob("*.csv")):
        out[p.name] = _csv(p)
    return out


def test_review_decisions_rebuild_ladders_and_trials_without_calls(crawled, tmp_path):
    """A corrected rating moves the candidate's tier in its site's ladder and in the trial pool; ``keep`` changes
    nothing; rated/ keeps the model's record; the queue items are marked resolved; each decision logged once."""
    from geoagent.crawl.export import crawl_records
    from geoagent.crawl.stages import apply_review_verdicts

    tmp, world, run, apps, counts = crawled
    state = tmp_path / "state"
    shutil.copytree(tmp / "state", state)
    queue = [json.loads(x) for x in (state / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    assert queue, "the sandbox crawl should queue some (pageviews, model) disagreements"
    # a queued item whose candidate is in its site's ladder (the model's rating), flipped to the opposite tier
    model_ladder_qids = {(p.name, r["qid"]) for p in (state / "ladders").glob("*.csv") for r in _csv(p)}
    item = next(q for q in queue if any(n.startswith(q["site"] + "_ladder_") and qid == q["qid"] for n, qid in model_ladder_qids))
    new_fam = 0 if item["familiarity"] >= 3 else 5
    keep_item = next(q for q in queue if q is not item)
    rows = [["site", "qid", "decision", "reviewer", "note"], [item["site"], item["qid"], str(new_fam), "ana", "checked"]]
    rows.append([keep_item["site"], keep_item["qid"], "keep", "ana", ""])
    verdicts = tmp_path / "review.csv"
    with verdicts.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows(rows)
    rated_before = {p.name: p.read_bytes() for p in (state / "rated").glob("*.json")}
    endpoints = {"overpass": "http://127.0.0.1:9/api", "wdqs": "http://127.0.0.1:9/sparql",
                 "pageviews": "http://127.0.0.1:9", "mapillary": "http://127.0.0.1:9"}  # nothing listens: no call
    plain = _settings(world, endpoints)
    apply_review_verdicts(plain, state)
    ladders_model = _ladder_rows(state)
    points_model = {(p.site_id, p.qid): p for p in crawl_records(state, tmp / "images")["reference_points"]}

    settings = _settings(world, endpoints, referenceability={"pageviews": True, "batch_size": 25,
                                                             "review_verdicts": str(verdicts)})
    got = apply_review_verdicts(settings, state)
    assert got["resolved"] == len(rows) - 1 and got["pending"] == len(queue) - got["resolved"]
    assert {p.name: p.read_bytes() for p in (state / "rated").glob("*.json")} == rated_before
    from geoagent.crawl.ladder import tier_for

    ladders = _ladder_rows(state)
    site_rows = [r for n, rows_ in ladders.items() if n.startswith(item["site"] + "_ladder_") for r in rows_ if r["qid"] == item["qid"]]
    model_rows = [r for n, rows_ in ladders_model.items() if n.startswith(item["site"] + "_ladder_") for r in rows_
                  if r["qid"] == item["qid"]]
    assert ladders != ladders_model and model_rows
    assert all(r["tier"] == item["tier_llm"] and r["familiarity"] == str(item["familiarity"]) for r in model_rows)
    assert all(r["tier"] == tier_for(new_fam) and r["familiarity"] == str(new_fam) for r in site_rows)
    points = {(p.site_id, p.qid): p for p in crawl_records(state, tmp / "images", review_verdicts=verdicts)["reference_points"]}
    key = (item["site"], item["qid"])
    assert points_model[key].referenceability == item["familiarity"]
    assert points[key].referenceability == new_fam and points[key].tier == tier_for(new_fam)
    resolved = {(r["site"], r["qid"]): r for r in _csv(state / RESOLVED_FILE)}
    assert resolved[key]["status"] == "resolved" and resolved[key]["familiarity_final"] == str(new_fam)
    assert resolved[key]["familiarity_model"] == str(item["familiarity"]) and resolved[key]["reviewer"] == "ana"
    k = resolved[(keep_item["site"], keep_item["qid"])]
    assert k["status"] == "resolved" and k["decision"] == "keep" and k["familiarity_final"] == str(keep_item["familiarity"])
    log = [json.loads(x) for x in (state / DECISION_LOG_FILE).read_text().splitlines()]
    assert len(log) == len(rows) - 1 and log[0]["reviewer"] == "ana" and log[0]["ts"] > 0
    again = apply_review_verdicts(settings, state)  # a re-run logs nothing twice
    assert again["logged"] == 0 and len((state / DECISION_LOG_FILE).read_text().splitlines()) == len(rows) - 1
