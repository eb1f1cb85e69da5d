"""Context ladder (seed 000 Sec. 3.3) fidelity checks against the release: the rules its ladders obey must
hold for the ladders we write, and our distance computation must reproduce its ``dist_km``."""

from __future__ import annotations

import csv
import random
from types import SimpleNamespace

from geoagent.crawl.ladder import RatedCandidate, band_for, build_ladder, read_ladder_csv, tier_for
from geoagent.crawl.referenceability import candidates_for_site


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


def test_release_ladder_distances_reproduce_from_coordinates(release_dir):
    """The GeoVerify trial table gives the coordinates of ladder candidates. Running them through our
    candidate step (haversine from the site's sites.csv coordinate, within 6 km) and ladder builder gives
    each released row's ``dist_km`` exactly (3 decimals) and its band: the ladder distance is measured from
    the site, not from the camera."""
    with (release_dir / "sites.csv").open(encoding="utf-8") as f:
        sites = {r["site"]: r for r in csv.DictReader(f)}
    with (release_dir / "verify_trials_sample.csv").open(encoding="utf-8") as f:
        trials = list(csv.DictReader(f))
    checked = set()
    for t in trials:
        path = next((release_dir / "ladders").glob(f"{t['site']}_ladder_*.csv"))
        released = {r["name_en"]: r for r in read_ladder_csv(path)}
        row = released.get(t["cand"])
        if row is None or (t["site"], row["qid"]) in checked:
            continue
        site = sites[t["site"]]
        ent = SimpleNamespace(qid=row["qid"], label=row["label_raw"], lat=float(t["cand_lat"]), lon=float(t["cand_lon"]),
                              sitelinks=None, enwiki_title=None)
        [c] = candidates_for_site([ent], float(site["lat"]), float(site["lon"]), 6.0)
        rated = RatedCandidate(qid=c.qid, label_raw=c.label, dist_km=c.dist_km, familiarity=int(row["familiarity"]),
                               name_en=row["name_en"])
        [out] = build_ladder([rated], rng=random.Random(0), site_qid=site["qid"], site_names=[site["landmark"]])
        assert (out["dist_km"], out["band"], out["tier"]) == (float(row["dist_km"]), row["band"], row["tier"]), (t["site"], row)
        checked.add((t["site"], row["qid"]))
    assert len(checked) >= 10  # the sample holds 17 sites' trials; at least this many candidates are in their ladders


def test_one_place_with_two_wikidata_items_takes_one_slot():
    """A place can have several Wikidata items (a station entered twice); the release de-duplicates a cell by
    name before drawing, so one reference point never fills two slots of a cell, and ``n_in_cell`` counts
    places (no released ladder repeats a name). The nearer item is kept."""
    cands = [_cand("Q10", 1.30, name="Shibuya Station"), _cand("Q11", 1.10, name="shibuya station"),
             _cand("Q12", 1.20, name="Shibuya Stn", label="Shibuya Station"),  # same place by its raw label
             _cand("Q13", 1.40, name="Hachiko Square")]
    rows = build_ladder(cands, rng=random.Random(0), draws_per_cell=4)
    assert sorted(r["qid"] for r in rows) == ["Q11", "Q13"]
    assert {r["n_in_cell"] for r in rows} == {2} and {r["n_taken"] for r in rows} == {2}
    # different cells are different conditions: the same name in another band is kept there
    rows = build_ladder(cands + [_cand("Q14", 2.0, name="Shibuya Station")], rng=random.Random(0), draws_per_cell=4)
    assert sorted(r["qid"] for r in rows) == ["Q11", "Q13", "Q14"]


def test_release_ladders_never_repeat_a_name_in_a_cell(release_dir):
    """Rebuilding every released ladder from its own rows keeps every name once per cell (the release's
    property that the rule above reproduces)."""
    from geoagent.crawl.ladder import normalise_name

    for path in sorted((release_dir / "ladders").glob("*.csv")):
        rows = read_ladder_csv(path)
        cands = [RatedCandidate(qid=r["qid"], label_raw=r["label_raw"], dist_km=float(r["dist_km"]),
                                familiarity=int(r["familiarity"]), name_en=r["name_en"]) for r in rows]
        out = build_ladder(cands, rng=random.Random(path.name), draws_per_cell=4)
        assert len(out) == len(rows), path.name
        seen = set()
        for r in out:
            key = (r["band"], r["tier"], normalise_name(r["name_en"]))
            assert key not in seen, (path.name, key)
            seen.add(key)
