"""Review decisions removed from a crawl: the ladders go back byte for byte to those the model's ratings built."""

from __future__ import annotations

import csv
import json
import shutil

from tests import test_crawl_pipeline as _pipe
from tests.test_crawl_pipeline import _settings

crawled = _pipe.crawled

_NO_HOST = {"overpass": "http://127.0.0.1:9/api", "wdqs": "http://127.0.0.1:9/sparql",
            "pageviews": "http://127.0.0.1:9", "mapillary": "http://127.0.0.1:9"}


def _bytes(state):
    return {p.name: p.read_bytes() for p in sorted((state / "ladders").glob("*.csv"))}


def test_removing_every_decision_restores_the_model_ladders_byte_for_byte(crawled, tmp_path):
    from geoagent.crawl.stages import apply_review_verdicts

    tmp, world, run, apps, counts = crawled
    state = tmp_path / "state"
    shutil.copytree(tmp / "state", state)
    original = _bytes(state)
    rated = [json.loads(p.read_text()) for p in sorted((state / "rated").glob("*.json"))]
    rows = [["site", "qid", "decision", "reviewer", "note"]]
    for rec in rated:  # every rated candidate flipped: the hardest edit to undo
        for r in rec["rated"]:
            if r.get("familiarity") is not None:
                rows.append([rec["site"]["site"], r["qid"], str(5 - int(r["familiarity"])), "ana", "\u00e9t\u00e9"])
    verdicts = tmp_path / "review.csv"
    with verdicts.open("w", encoding="utf-8-sig", newline="") as f:
        csv.writer(f, lineterminator="\r\n").writerows(rows + rows[1:3])  # BOM, CRLF, repeated rows
    decided = _settings(world, _NO_HOST, referenceability={"pageviews": True, "batch_size": 25,
                                                           "review_verdicts": str(verdicts)})
    got = apply_review_verdicts(decided, state)
    assert got["unmatched"] == 0 and got["logged"] == len(rows) - 1
    assert _bytes(state) != original
    verdicts.unlink()
    plain = _settings(world, _NO_HOST, referenceability={"pageviews": True, "batch_size": 25})
    apply_review_verdicts(plain, state)
    assert _bytes(state) == original
