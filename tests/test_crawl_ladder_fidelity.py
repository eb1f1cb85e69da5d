"""Context ladder (seed 000 Sec. 3.3) fidelity checks against the release: the rules its ladders obey must
hold for the ladders we write, and our distance computation must reproduce its ``dist_km``."""

from __future__ import annotations

import random

from geoagent.crawl.ladder import RatedCandidate, band_for, build_ladder, tier_for


def _cand(qid, dist_km, fam=4, name=None, label=None):
    name = name or f"Place {qid}"
    return RatedCandidate(qid=qid, label_raw=label or name, dist_km=dist_km, familiarity=fam, name_en=name)


def test_band_follows_the_distance_written_in_the_row():
    """The release's invariant (SOURCE.md): every row's band follows from its ``dist_km`` as written, in
    [0.5, 1.5), [1.5, 3), [3, 6) km. Distances are written to 3 decimals, so a candidate 1.4996 km away is a
    1.500 km row and belongs to 1.5-3.0 km; one at 5.9996 km is a 6.000 km row, outside every band (the
    release drops it: its candidates are kept at dist_km < 6 after rounding); one at 0.4996 km is a 0.500 km
    row, inside 0.5-1.5 km."""
    cands = [_cand("Q1", 1.4996), _cand("Q2", 5.9996), _cand("Q3", 0.4996), _cand("Q4", 2.9996, fam=1),
             _cand("Q5", 1.2)]
    rows = build_ladder(cands, rng=random.Random(0), draws_per_cell=4)
    for r in rows:
        assert band_for(float(r["dist_km"])) == r["band"], r
        assert tier_for(r["familiarity"]) == r["tier"], r
    got = {r["qid"]: (r["band"], r["dist_km"]) for r in rows}
    assert got == {"Q1": ("1.5-3.0km", 1.5), "Q3": ("0.5-1.5km", 0.5), "Q4": ("3.0-6.0km", 3.0),
                   "Q5": ("0.5-1.5km", 1.2)}
    # n_in_cell counts what the cell holds by the same rule
    assert {r["qid"]: r["n_in_cell"] for r in rows} == {"Q1": 1, "Q3": 2, "Q4": 1, "Q5": 2}
