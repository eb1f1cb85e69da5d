"""Context-ladder builder (seed 000 Sec. 3.3) against all 109 released ladders."""

from __future__ import annotations

import collections
import csv
import random

import pytest
from scipy.stats import binomtest, chisquare

from geoagent.crawl.ladder import (
    BAND_LABELS,
    LADDER_COLUMNS,
    RatedCandidate,
    band_for,
    build_ladder,
    dedupe_by_qid,
    ladder_file_name,
    read_ladder_csv,
    tier_for,
    write_ladder_csv,
)


def _ladders(release_dir):
    files = sorted((release_dir / "ladders").glob("*.csv"))
    return {f.name.split("_ladder_")[0]: read_ladder_csv(f) for f in files}


def test_release_ladder_columns(release_dir):
    f = next((release_dir / "ladders").glob("*.csv"))
    with f.open(encoding="utf-8") as fh:
        assert tuple(next(csv.reader(fh))) == LADDER_COLUMNS


def test_band_and_tier_reproduce_all_109_release_ladders(release_dir):
    ladders = _ladders(release_dir)
    assert len(ladders) == 109
    n = 0
    for site, rows in ladders.items():
        for r in rows:
            assert band_for(float(r["dist_km"])) == r["band"], (site, r["qid"], r["dist_km"])
            assert tier_for(r["familiarity"]) == r["tier"], (site, r["qid"], r["familiarity"])
            n += 1
    assert n == 3105
    assert set(BAND_LABELS) == {r["band"] for rows in ladders.values() for r in rows}


def test_band_edges():
    assert band_for(0.4999) is None and band_for(0.5) == "0.5-1.5km"
    assert band_for(1.4999) == "0.5-1.5km" and band_for(1.5) == "1.5-3.0km"
    assert band_for(3.0) == "3.0-6.0km" and band_for(5.999) == "3.0-6.0km" and band_for(6.0) is None
    assert [tier_for(v) for v in (0, 1, 2, 3, 4, 5)] == ["low", "low", "mid", "mid", "high", "high"]
    assert tier_for(6) is None and tier_for(None) is None and tier_for("x") is None and tier_for(2.5) is None


def _as_candidates(rows):
    return [RatedCandidate(qid=r["qid"], label_raw=r["label_raw"], dist_km=float(r["dist_km"]),
                           familiarity=int(r["familiarity"]), name_en=r["name_en"], name_zh=r["name_zh"] or None)
            for r in rows]


def test_rebuilding_release_ladders_keeps_cells_and_counts(release_dir):
    """Feeding a released ladder back in with the release's 4 draws per cell returns exactly its rows
    cell by cell (every released cell holds at most 4); with the paper's 2 draws, each cell keeps
    min(2, n) of its rows, and n_taken says so."""
    sites = {}
    with (release_dir / "sites.csv").open(encoding="utf-8") as f:
        for r in csv.DictReader(f):
            sites[r["site"]] = r
    for site, rows in _ladders(release_dir).items():
        cands = _as_candidates(rows)
        own = sites[site]
        for draws in (4, 2):
            out = build_ladder(cands, rng=random.Random(site), draws_per_cell=draws,
                               site_qid=own["qid"], site_names=[own["landmark"]])
            by_cell = collections.defaultdict(set)
            for r in rows:
                by_cell[(r["band"], r["tier"])].add(r["qid"])
            got = collections.defaultdict(set)
            for r in out:
                got[(r["band"], r["tier"])].add(r["qid"])
                assert r["n_taken"] == min(draws, len(by_cell[(r["band"], r["tier"])]))
            assert set(got) <= set(by_cell)
            for cell, qids in by_cell.items():
                if draws == 4:
                    assert got[cell] == qids, (site, cell)
                else:
                    assert got[cell] <= qids and len(got[cell]) == min(2, len(qids)), (site, cell)


def test_release_n_taken_is_min_of_cell_and_four(release_dir):
    for rows in _ladders(release_dir).values():
        per = collections.Counter((r["band"], r["tier"]) for r in rows)
        for r in rows:
            assert int(r["n_taken"]) == per[(r["band"], r["tier"])] == min(int(r["n_in_cell"]), 4)


def _cell(n, fam=4, base=0.6, first_qid=1):
    return [RatedCandidate(qid=f"Q{i + first_qid}", label_raw=f"Place {i}", dist_km=base + 0.1 * i, familiarity=fam, name_en=f"Place {i}")
            for i in range(n)]


def test_draws_are_random_not_sorted_by_distance():
    """Over 2,000 seeds each of 5 candidates in a cell is drawn at the rate 2/5 (binomial test), so the
    nearest are not favoured; and the draws differ across seeds."""
    cands = _cell(5)
    counts = collections.Counter()
    seeds = 2000
    pairs = set()
    for s in range(seeds):
        out = build_ladder(cands, rng=random.Random(s), draws_per_cell=2)
        assert len(out) == 2 and all(r["n_in_cell"] == 5 and r["n_taken"] == 2 for r in out)
        counts.update(r["qid"] for r in out)
        pairs.add(frozenset(r["qid"] for r in out))
    for q in (c.qid for c in cands):
        assert binomtest(counts[q], seeds, 0.4).pvalue > 1e-3, counts
    assert chisquare([counts[c.qid] for c in cands]).pvalue > 1e-3
    assert len(pairs) == 10  # all C(5,2) pairs occur


def test_same_seed_same_ladder_and_order_independent():
    cands = _cell(7)
    a = build_ladder(cands, rng=random.Random(3))
    b = build_ladder(list(reversed(cands)), rng=random.Random(3))
    assert a == b


def test_dedupe_own_site_and_filters():
    cands = [
        RatedCandidate("Q1", "Foo Square", 2.0, 4, name_en="Foo Square"),
        RatedCandidate("Q1", "Foo Square", 1.2, 4, name_en="Foo Square"),  # same QID, nearer: kept
        RatedCandidate("Q2", "Musée d'Orsay", 1.0, 5, name_en="Musée d’Orsay"),  # the site by name
        RatedCandidate("Q3", "Other", 1.0, 5, name_en="Other"),  # the site by QID
        RatedCandidate("Q4", "Rejected", 1.0, 5, ok=False, name_en="Rejected"),
        RatedCandidate("Q5", "Sensitive", 1.0, 5, sensitive=True, name_en="Sensitive"),
        RatedCandidate("Q6", "Unrated", 1.0, None, name_en="Unrated"),
        RatedCandidate("Q7", "Too close", 0.3, 3, name_en="Too close"),
        RatedCandidate("Q8", "Low one", 4.0, 0, name_en="Low one", pageviews=12),
    ]
    assert [c.dist_km for c in dedupe_by_qid(cands) if c.qid == "Q1"] == [1.2]
    out = build_ladder(cands, rng=random.Random(0), site_qid="Q3", site_names=["musee d'orsay"])
    assert [(r["qid"], r["band"], r["tier"], r["dist_km"]) for r in out] == [
        ("Q1", "0.5-1.5km", "high", 1.2), ("Q8", "3.0-6.0km", "low", 4.0)]
    assert out[1]["pageviews"] == 12 and out[0]["pageviews"] == ""


def test_csv_roundtrip(tmp_path):
    out = build_ladder(_cell(3) + _cell(3, fam=1, base=3.2, first_qid=100), rng=random.Random(1))
    p = write_ladder_csv(out, tmp_path / ladder_file_name("paris_cite", "sim", "en"))
    assert p.name == "paris_cite_ladder_sim-en.csv"
    back = read_ladder_csv(p)
    assert [r["qid"] for r in back] == [r["qid"] for r in out]
    assert [r["band"] for r in back] == ["0.5-1.5km"] * 2 + ["3.0-6.0km"] * 2
    with pytest.raises(ValueError):
        ladder_file_name("../etc", "sim")
    with pytest.raises(ValueError):
        build_ladder([], rng=random.Random(0), draws_per_cell=0)
