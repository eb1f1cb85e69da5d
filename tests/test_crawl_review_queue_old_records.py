"""Review-queue records without a ``site`` field are counted under their site, never under "None".

Leftover of session 13: the summary's review counts and the resolution table read each queue record's site as
``str(rec.get("site"))``, so a record without the field was the item ``("None", qid)``: two such items of one QID at
two sites counted once, the table listed site ``None``, and a decision naming the real site never resolved it. The
auditor's own queue log already read such records' site from their ``model`` (``review|<site>``, the form the
first versions wrote beside ``site``; :class:`geoagent.crawl.referenceability.ReviewQueueLog`); the summaries now
read it the same way, then from the one rated site record (``rated/<site>.json``) that lists the QID, and count
a record whose site cannot be known under the label :data:`geoagent.crawl.review.UNKNOWN_SITE`."""

from __future__ import annotations

import csv
import json

from geoagent.crawl.review import UNKNOWN_SITE, queue_site, review_counts, write_resolution


def _queue(state, records):
    (state / "audit_review_queue.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")


def _rated(state, site, qids):
    (state / "rated").mkdir(exist_ok=True)
    (state / "rated" / f"{site}.json").write_text(json.dumps({
        "site": {"site": site, "city": "X"}, "rated": [{"qid": q, "familiarity": 2} for q in qids]}), encoding="utf-8")


def test_old_queue_records_count_under_their_site(tmp_path):
    _rated(tmp_path, "s1", ["Q1", "Q2"])
    _rated(tmp_path, "s2", ["Q1"])
    _rated(tmp_path, "s3", ["Q3"])
    _queue(tmp_path, [
        {"qid": "Q1", "label": "A", "model": "review|s1", "familiarity": 1},   # site only in the old model field
        {"qid": "Q1", "label": "A", "model": "review|s2", "familiarity": 1},   # same QID, another site
        {"qid": "Q3", "label": "C", "model": "auditor", "familiarity": 4},     # no site anywhere: one rated site lists Q3
        {"qid": "Q9", "label": "Z", "model": "auditor", "familiarity": 4},     # no site and no rated record lists Q9
        {"qid": "Q2", "label": "B", "model": "auditor", "site": "s1", "familiarity": 5},
    ])
    assert queue_site({"qid": "Q1", "model": "review|s2"}) == "s2"
    counts = review_counts(tmp_path)
    assert counts == {"queued": 5, "pending": 5, "resolved": 0}  # before: 4 (the two Q1 items were one, "None")

    decisions = {("s2", "Q1"): {"decision": "0", "familiarity": 0, "reviewer": "", "note": "", "source": "r.csv:2"}}
    write_resolution(tmp_path, decisions, {("s1", "Q1"): 1, ("s2", "Q1"): 1, ("s1", "Q2"): 2, ("s3", "Q3"): 2})
    with (tmp_path / "audit_review_resolved.csv").open(encoding="utf-8") as f:
        rows = {(r["site"], r["qid"]): r["status"] for r in csv.DictReader(f)}
    assert rows == {("s1", "Q1"): "pending", ("s2", "Q1"): "resolved", ("s1", "Q2"): "pending",
                    ("s3", "Q3"): "pending", (UNKNOWN_SITE, "Q9"): "pending"}
    assert "None" not in {s for s, _ in rows}
    assert review_counts(tmp_path) == {"queued": 5, "pending": 4, "resolved": 1}
