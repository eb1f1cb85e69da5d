"""A human review decision (or any changed rating) redraws only the ladder cells it moves a candidate out of or
into (ladder draw version 2: a random stream per (band, tier) cell), and a crawl whose ladders were drawn before
keeps its draws (version 1: one stream per site).

Walkthrough (a crawl of the sandbox world, then GeoHint over it): one review decision on a 0.5-1.5 km candidate
(high -> low) changed all twelve draws of the site's 1.5-3 and 3-6 km cells, whose pools it did not touch, so the
GeoHint campaign over the crawl re-asked 64 requests per model and left 144 stored answers out of scoring.
"""

from __future__ import annotations

import csv
import json
import random
import shutil
from collections import defaultdict
from dataclasses import replace

import pytest

from geoagent.crawl.ladder import (
    LADDER_DRAW_FILE,
    LADDER_DRAW_VERSION,
    RatedCandidate,
    build_ladder,
    ladder_draw_version,
)
from tests import test_crawl_pipeline as _pipe
from tests.test_crawl_pipeline import _csv, _settings

#: the sandbox crawl of test_crawl_pipeline (module fixture: one crawl for this module)
crawled = _pipe.crawled

NOWHERE = {"overpass": "http://127.0.0.1:9/api", "wdqs": "http://127.0.0.1:9/sparql",
           "pageviews": "http://127.0.0.1:9", "mapillary": "http://127.0.0.1:9"}  # nothing listens: no call


def _cells(path):
    """A ladder file's rows by (band, tier): the QIDs drawn, in draw order, and the cell's pool size."""
    out = defaultdict(list)
    for r in _csv(path):
        out[(r["band"], r["tier"])].append((r["qid"], r["n_in_cell"]))
    return dict(out)


def _decide(tmp_path, item, familiarity):
    path = tmp_path / "review.csv"
    with path.open("w", encoding="utf-8", newline="") as f:
        csv.writer(f).writerows([["site", "qid", "decision"], [item["site"], item["qid"], str(familiarity)]])
    return path


def _a_decision_that_moves_a_ladder_point(state):
    """A review-queue item whose candidate is drawn in its site's ladder, and the ladder file."""
    queue = [json.loads(x) for x in (state / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    for q in queue:
        for p in (state / "ladders").glob(f"{q['site']}_ladder_*.csv"):
            if any(r["qid"] == q["qid"] for r in _csv(p)):
                return q, p
    pytest.fail("the sandbox crawl should queue a disagreement about a drawn ladder point")


def test_a_review_decision_redraws_only_the_cells_it_changes(crawled, tmp_path):
    from geoagent.crawl.stages import apply_review_verdicts

    tmp, world, _run, _apps, _counts = crawled
    state = tmp_path / "state"
    shutil.copytree(tmp / "state", state)
    assert json.loads((state / LADDER_DRAW_FILE).read_text())["version"] == LADDER_DRAW_VERSION  # a new crawl
    item, ladder = _a_decision_that_moves_a_ladder_point(state)
    apply_review_verdicts(_settings(world, NOWHERE), state)
    before = _cells(ladder)
    new_fam = 0 if item["familiarity"] >= 3 else 5
    review = _decide(tmp_path, item, new_fam)
    apply_review_verdicts(_settings(world, NOWHERE, referenceability={"pageviews": True, "batch_size": 25,
                                                                      "review_verdicts": str(review)}), state)
    after = _cells(ladder)
    band = next(b for (b, _t), rows in before.items() for q, _n in rows if q == item["qid"])
    moved = {(band, item["tier_llm"]), (band, {0: "low", 5: "high"}[new_fam])}
    assert after != before  # the decision moved a drawn point
    order = list(before)  # band order, then tier order: the order version 1 drew the cells in
    first = min(order.index(c) for c in moved if c in before)
    untouched = {cell: rows for cell, rows in before.items() if cell not in moved}
    assert any(order.index(c) > first for c in untouched), "the site should have cells drawn after the changed one"
    # every cell whose pool the decision did not change keeps its draws (before: every cell after the first
    # changed one was redrawn)
    assert {cell: after.get(cell) for cell in untouched} == untouched


def _cands():
    """Two cells of 5 in each band: (band, high) and (band, low)."""
    out = []
    for b, base in enumerate((0.6, 1.6, 3.1)):
        for i in range(5):
            out.append(RatedCandidate(qid=f"Q{b}{i}0", label_raw=f"High {b} {i}", dist_km=base + 0.1 * i, familiarity=5,
                                      name_en=f"High {b} {i}"))
            out.append(RatedCandidate(qid=f"Q{b}{i}1", label_raw=f"Low {b} {i}", dist_km=base + 0.1 * i, familiarity=0,
                                      name_en=f"Low {b} {i}"))
    return out


def test_cell_streams_depend_on_the_cell_only():
    cands = _cands()
    base = build_ladder(cands, cell_seed="7:s1")
    # one near high candidate rated low instead: only the two near cells may change
    changed = [c if c.qid != "Q000" else replace(c, familiarity=0) for c in cands]
    other = build_ladder(changed, cell_seed="7:s1")
    far = [(r["band"], r["tier"], r["qid"]) for r in base if r["band"] != "0.5-1.5km"]
    assert far == [(r["band"], r["tier"], r["qid"]) for r in other if r["band"] != "0.5-1.5km"]
    # the same seed text draws the same ladder; another site's seed another draw
    assert build_ladder(cands, cell_seed="7:s1") == base
    assert build_ladder(cands, cell_seed="7:s2") != base
    with pytest.raises(ValueError, match="exactly one of rng"):
        build_ladder(cands)
    with pytest.raises(ValueError, match="exactly one of rng"):
        build_ladder(cands, rng=random.Random(0), cell_seed="x")


def test_a_crawl_whose_ladders_were_drawn_before_keeps_its_draws(crawled, tmp_path):
    """A crawl with ladders and no draw record (drawn before versions were recorded) is version 1: its ladders
    are rebuilt with one stream per site, exactly as they were drawn; the record then says 1 for good."""
    from geoagent.crawl.stages import _rated_records, apply_review_verdicts

    tmp, world, _run, _apps, _counts = crawled
    state = tmp_path / "state"
    shutil.copytree(tmp / "state", state)
    (state / LADDER_DRAW_FILE).unlink()
    settings = _settings(world, NOWHERE)
    apply_review_verdicts(settings, state)
    assert json.loads((state / LADDER_DRAW_FILE).read_text())["version"] == 1
    assert ladder_draw_version(state) == 1
    for rec in _rated_records(state):
        sid = rec["site"]["site"]
        cands = [RatedCandidate(**r) for r in rec["rated"]]
        old = build_ladder(cands, rng=random.Random(f"{settings.seed}:{sid}"), site_qid=rec["site"].get("qid"),
                           site_names=[rec["site"].get("landmark", "")])
        [path] = (state / "ladders").glob(f"{sid}_ladder_*.csv")
        assert [r["qid"] for r in _csv(path)] == [r["qid"] for r in old]


def test_a_new_crawl_records_the_current_version_and_a_bad_record_is_named(tmp_path):
    assert ladder_draw_version(tmp_path / "new") == LADDER_DRAW_VERSION
    assert ladder_draw_version(tmp_path / "new") == LADDER_DRAW_VERSION  # read back, not decided again
    assert sorted(p.name for p in (tmp_path / "new").iterdir()) == [LADDER_DRAW_FILE]  # no temporary file left
    (tmp_path / "old" / "ladders").mkdir(parents=True)
    (tmp_path / "old" / "ladders" / "s_ladder_a-en.csv").write_text("band\n", encoding="utf-8")
    assert ladder_draw_version(tmp_path / "old") == 1
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / LADDER_DRAW_FILE).write_text('{"version": 9}', encoding="utf-8")
    with pytest.raises(ValueError, match="unknown ladder draw version 9"):
        ladder_draw_version(tmp_path / "bad")


def test_geohint_left_out_note_names_changed_reference_points():
    """The walkthrough's 144 answers left out of scoring were left out because the crawl's ladders changed
    (a review decision), which the note's list of causes did not name (sites, images, conditions, models)."""
    from geoagent.geohint.stages import scored_scope

    scope = scored_scope({"gh|m|s1|i1|forced|Q2|r0"})
    assert not scope.keep("gh|m|s1|i1|forced|Q1|r0", {})
    assert "reference points" in scope.note()


def test_one_place_per_name_in_a_ladder():
    """Walkthrough (the demo with per-cell draws): two places named "Hazel Cafe", 1.35 km and 1.84 km from a site,
    were drawn in two cells, so the GeoHint plan held two requests with one text (16 of 880 answered from the
    other's stored answer, each scored in two bands). Version 2 keeps the nearest of same-named places."""
    cands = _cands() + [
        RatedCandidate(qid="Q901", label_raw="Hazel Cafe", dist_km=1.348, familiarity=1, name_en="Hazel Cafe"),
        RatedCandidate(qid="Q902", label_raw="Hazel Cafe", dist_km=1.841, familiarity=0, name_en="Hazel Cafe"),
        RatedCandidate(qid="Q903", label_raw="Hazel Cafe", dist_km=4.2, familiarity=5, name_en="hazel  café"),
    ]
    for seed in range(20):
        rows = build_ladder(cands, cell_seed=f"{seed}:s", one_name_per_site=True, draws_per_cell=10)
        hazel = [r for r in rows if r["name_en"].lower().startswith("hazel")]
        assert [r["qid"] for r in hazel] == ["Q901"]
        names = [r["name_en"] for r in rows]
        assert len(names) == len(set(names))
    # version 1 (and the per-cell rule alone) keep one per name within a cell only
    rows = build_ladder(cands, cell_seed="0:s", draws_per_cell=10)
    assert {r["qid"] for r in rows} >= {"Q901", "Q902", "Q903"}


def test_a_new_crawl_ladder_names_each_place_once(crawled):
    tmp, _world, _run, _apps, _counts = crawled
    for p in (tmp / "state" / "ladders").glob("*.csv"):
        names = [r["name_en"].casefold() for r in _csv(p)]
        assert len(names) == len(set(names)), p.name


def test_no_release_ladder_names_a_place_twice(release_dir):
    """The rule of version 2 agrees with the release: none of its 109 ladders holds one name in two rows."""
    from geoagent.crawl.ladder import normalise_name

    files = sorted((release_dir / "ladders").glob("*.csv"))
    assert len(files) == 109
    for p in files:
        names = [normalise_name(r["name_en"] or r["label_raw"]) for r in _csv(p)]
        assert len(names) == len(set(names)), p.name
