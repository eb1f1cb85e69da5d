"""Human decisions on the referenceability review queue (seed 000 Sec. 3.3): parser, and applied to a sandbox
crawl's ladders, trials and resolution table with no model call, ``rated/`` untouched."""

from __future__ import annotations

import csv
import io
import json
import shutil
from pathlib import Path

import pytest

from geoagent.cli import main

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


CRAWL_CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"


def _config_with_review(tmp: Path, verdicts: Path) -> Path:
    text = CRAWL_CONFIG.read_text(encoding="utf-8").replace(
        'model = "sandbox-text-auditor"\n', f'model = "sandbox-text-auditor"\nreview_verdicts = "{verdicts}"\n', 1)
    assert "review_verdicts" in text
    p = tmp / "crawl_rv.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_decisions_added_to_a_finished_crawl_are_applied_by_a_rerun_with_no_new_call(sandbox_crawled, capsys):
    # before: the key was refused ([crawl.referenceability] has no review_verdicts), the queue was never read back and
    # a decision could only be a hand edit of rated/ and ladders/
    isolated_roots, _ = sandbox_crawled  # the finished shipped crawl (run once per session, tests/_crawl_once.py)
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    queue = [json.loads(x) for x in (state / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    in_trials = {(r["site"], r["cand_qid"]) for r in _csv(state / "verify_trials.csv") if r.get("cand_qid")}
    item = next((q for q in queue if (q["site"], q["qid"]) in in_trials), None)
    assert item is not None, (len(queue), sorted(in_trials)[:5])
    assert {t["fam"] for t in _csv(state / "verify_trials.csv")
            if (t["site"], t["cand_qid"]) == (item["site"], item["qid"])} == {str(item["familiarity"])}
    new_fam = 0 if item["familiarity"] >= 3 else 5
    rv = isolated_roots / "review.csv"
    rv.write_text(f"site,qid,decision,reviewer,note\n{item['site']},{item['qid']},{new_fam},ana,pageviews right\n",
                  encoding="utf-8")
    rated_before = {p.name: p.read_bytes() for p in (state / "rated").glob("*.json")}
    trials_before = (state / "verify_trials.csv").read_bytes()
    ladder_before = _ladder_rows(state)
    cfg = _config_with_review(isolated_roots, rv)
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    got = capsys.readouterr()
    assert "this run: 0 new model calls" in got.out, got.out
    assert "new [campaign] name" not in got.err and "affects none of the stored results" not in got.err, got.err
    assert {p.name: p.read_bytes() for p in (state / "rated").glob("*.json")} == rated_before
    resolved = {(r["site"], r["qid"]): r for r in _csv(state / RESOLVED_FILE)}
    r = resolved[(item["site"], item["qid"])]
    assert (r["status"], r["decision"], r["familiarity_final"], r["reviewer"]) == ("resolved", str(new_fam), str(new_fam), "ana")
    assert sum(1 for x in resolved.values() if x["status"] == "pending") == len(resolved) - 1
    trials = [t for t in _csv(state / "verify_trials.csv") if (t["site"], t["cand_qid"]) == (item["site"], item["qid"])]
    assert all(t["fam"] == str(new_fam) for t in trials), trials  # the trial pool takes the decided rating
    assert (state / "verify_trials.csv").read_bytes() != trials_before  # rebuilt with the decided rating
    # the summary says how many trials (model requests) the rebuilt table changed (fixverify41 #3)
    req = lambda rows: {(t["image_id"], t["arm"], t["cand"], t.get("image_ref") or "") for t in rows}  # noqa: E731
    after = req(_csv(state / "verify_trials.csv"))
    before = req(csv.DictReader(io.StringIO(trials_before.decode("utf-8"))))
    assert 0 < len(after - before)
    assert (f"; {len(after - before)} of {len(after)} trials differ from the previous verify_trials.csv "
            f"({len(before - after)} of its trials no longer drawn)") in got.out, got.out
    site_ladders = lambda rows: [r for n, rs in rows.items() if n.startswith(item["site"] + "_ladder_") for r in rs]  # noqa: E731
    assert site_ladders(_ladder_rows(state)) != site_ladders(ladder_before)
    assert all(r["familiarity"] == str(new_fam) for r in site_ladders(_ladder_rows(state)) if r["qid"] == item["qid"])
    log = [json.loads(x) for x in (state / DECISION_LOG_FILE).read_text().splitlines()]
    assert [(x["qid"], x["decision"], x["reviewer"]) for x in log] == [(item["qid"], str(new_fam), "ana")]
    assert "review decisions changed" in got.err and "no model call" in got.err, got.err  # said as an info line
    import polars as pl

    exported = pl.read_parquet(state / "export" / "audit_review_resolved.parquet")
    assert exported.filter(pl.col("status") == "resolved")["familiarity_final"].to_list() == [new_fam]
    assert pl.read_parquet(state / "export" / "audit_review_log.parquet")["reviewer"].to_list() == ["ana"]


def test_a_decision_file_that_does_not_exist_stops_the_crawl_before_any_call(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    rv = isolated_roots / "no_such_dir" / "review.csv"
    rc = main(["crawl", str(_config_with_review(isolated_roots, rv)), "--no-live"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "[crawl.referenceability] review_verdicts" in err and str(rv) in err and "does not exist" in err, err
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()


def test_the_key_expands_home(monkeypatch, tmp_path):
    from geoagent.crawl.settings import ReferenceabilitySettings

    monkeypatch.setenv("HOME", str(tmp_path))
    assert ReferenceabilitySettings(review_verdicts="~/r.csv").review_verdicts == str(tmp_path / "r.csv")
    assert ReferenceabilitySettings().review_verdicts is None


def test_a_decision_matching_no_rated_candidate_is_named_in_a_warning(crawled, tmp_path):
    """A decision for a (site, QID) that no rated candidate of the crawl has (a typo in the QID, another crawl's
    site) changes nothing; the run says so, naming the file line, instead of logging it as if applied."""
    from geoagent.crawl.stages import apply_review_verdicts

    tmp, world, run, apps, counts = crawled
    state = tmp_path / "state"
    shutil.copytree(tmp / "state", state)
    queue = [json.loads(x) for x in (state / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    verdicts = tmp_path / "review.csv"
    with verdicts.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["site", "qid", "decision"], [queue[0]["site"], queue[0]["qid"], "keep"],
                                 [queue[0]["site"], "Q999999999", "4"], ["no_such_site", queue[0]["qid"], "1"]])
    endpoints = {"overpass": "http://127.0.0.1:9/api", "wdqs": "http://127.0.0.1:9/sparql",
                 "pageviews": "http://127.0.0.1:9", "mapillary": "http://127.0.0.1:9"}
    settings = _settings(world, endpoints, referenceability={"pageviews": True, "batch_size": 25,
                                                             "review_verdicts": str(verdicts)})
    from geoagent.config import InputWarning

    with pytest.warns(InputWarning) as caught:  # the CLI prints it as one "warning:" line
        got = apply_review_verdicts(settings, state)
    assert got["unmatched"] == 2
    text = " ".join(str(w.message) for w in caught if issubclass(w.category, InputWarning))
    assert "2 review decisions match no rated candidate" in text, text
    assert "review.csv:3" in text and "review.csv:4" in text and "Q999999999" in text and "no_such_site" in text
    assert "review.csv:2" not in text
    log = [json.loads(x) for x in (state / DECISION_LOG_FILE).read_text().splitlines()]
    assert [(r["site"], r["qid"]) for r in log] == [(queue[0]["site"], queue[0]["qid"])]  # only the applied one


def test_the_summary_and_status_say_how_many_review_items_are_pending_and_resolved(sandbox_crawled, capsys):
    """The queue file is the auditor's append-only record of what it queued (each item ``status: "pending"``, as
    queued; the crawl never rewrites it), and the decisions in force are in ``audit_review_resolved.csv``: before,
    nothing said how many items were still pending once decisions were applied, so a reader of the queue saw every
    item pending. The crawl's summary (printed and ``report/crawl_summary.json``) and ``run.py status`` now count
    them, and the queue file keeps every byte."""
    isolated_roots, first = sandbox_crawled  # the finished shipped crawl (run once per session) and its stdout
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    queue = [json.loads(x) for x in (state / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    n = len({(q["site"], q["qid"]) for q in queue})
    assert n >= 3, n
    out = first
    assert f"referenceability review: {n} items queued (audit_review_queue.jsonl): {n} pending, 0 resolved" in out, out
    summary = json.loads((state / "report" / "crawl_summary.json").read_text())
    assert summary["review"] == {"queued": n, "pending": n, "resolved": 0}

    rv = isolated_roots / "review.csv"
    rv.write_text(f"site,qid,decision,reviewer\n{queue[0]['site']},{queue[0]['qid']},keep,ana\n"
                  f"{queue[1]['site']},{queue[1]['qid']},0,ana\n", encoding="utf-8")
    queue_bytes = (state / "audit_review_queue.jsonl").read_bytes()
    cfg = _config_with_review(isolated_roots, rv)
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    line = f"referenceability review: {n} items queued (audit_review_queue.jsonl): {n - 2} pending, 2 resolved"
    assert line in out and RESOLVED_FILE in out, out
    summary = json.loads((state / "report" / "crawl_summary.json").read_text())
    assert summary["review"] == {"queued": n, "pending": n - 2, "resolved": 2}
    assert (state / "audit_review_queue.jsonl").read_bytes() == queue_bytes  # nothing stored is lost or rewritten
    assert main(["status", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert line in out, out
