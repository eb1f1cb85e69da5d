"""The sandbox gazetteer built from the release (session 37, geohint37 #1 and #2).

Before:

* #1 a ladder point that is a city (Paris, Q90, in the ladder of paris_pont at 0.778 km; San Francisco, Stockholm)
  was added as a building at its released distance, so an answer naming "Paris" as its area resolved at area level
  0.778 km from the site: a hit, the paper's fault 4 (Sec. 4.3: a city named as the area is city level);
* #2 a reference point in several sites' ladders was placed from the first site only: "Nishi-Nippori Station" lay
  11.293 km from tokyo_yanaka, whose ladder gives 0.553 km, so an answer repeating the hint there scored an
  error/hint-distance ratio far from 1.
"""

from __future__ import annotations

import csv
from collections import defaultdict

import pytest

from geoagent.geo import haversine_km
from geoagent.sandbox.gazetteer import Gazetteer, place_at_distances


def _ladders(release_dir):
    by_qid = defaultdict(list)
    for path in sorted((release_dir / "ladders").glob("*.csv")):
        site = path.name.split("_ladder")[0]
        with path.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                by_qid[row["qid"]].append((site, float(row["dist_km"]), row["name_en"]))
    return by_qid


def test_ladder_points_lie_at_their_released_distances(release_dir):
    with (release_dir / "sites.csv").open(encoding="utf-8") as fh:
        sites = {r["site"]: (float(r["lat"]), float(r["lon"])) for r in csv.DictReader(fh)}
    gaz = Gazetteer.from_release(release_dir, seed=0)
    one_site = several = exact_several = 0
    for qid, seen in _ladders(release_dir).items():
        e = gaz.get(qid)
        if e is None or not e.synthetic:
            continue
        errors = [abs(haversine_km(*sites[s], e.lat, e.lon) - d) for s, d, _n in seen]
        if len({s for s, _d, _n in seen}) == 1:
            one_site += 1
            assert max(errors) < 1e-6, (qid, errors)
        else:
            several += 1
            exact_several += max(errors) < 0.01
    # the shared points whose released distances a point on the sphere can meet (to 10 m) now lie there; before
    # session 37 only the first site's distance held. The rest are no triangle (e.g. "Brauroneion": 1.153, 0.502
    # and 1.174 km from three Athens sites): their least-squares point
    # (measured on the release: 1,634 points of one site, 596 of several, 501 of them within 10 m of every distance)
    assert one_site > 1500 and several > 500
    assert exact_several >= several * 0.8, (exact_several, several)
    nishi = gaz.get("Q636845")  # Nishi-Nippori Station: 0.553 km from tokyo_yanaka, 5.916 km from tokyo_artizon
    assert nishi is not None
    for site, d in (("tokyo_yanaka", 0.553), ("tokyo_artizon", 5.916)):
        assert abs(haversine_km(*sites[site], nishi.lat, nishi.lon) - d) < 0.01, (site, d)


def test_a_ladder_point_named_as_a_city_is_left_to_the_city_entry(release_dir):
    gaz = Gazetteer.from_release(release_dir, seed=0)
    for qid, name in (("Q90", "Paris"), ("Q62", "San Francisco"), ("Q1754", "Stockholm")):
        assert gaz.get(qid) is None, name
    cities = [e for e in gaz if e.kind == "city" and e.labels.get("en") == "Paris"]
    assert len(cities) == 1


def test_place_at_distances_meets_two_circles_and_keeps_one():
    a, b = (48.8566, 2.3522), (48.8606, 2.3376)  # about 1.17 km apart
    start = (48.85, 2.36)
    lat, lon = place_at_distances(start, [(*a, 0.9), (*b, 0.8)])
    assert haversine_km(lat, lon, *a) == pytest.approx(0.9, abs=1e-6)
    assert haversine_km(lat, lon, *b) == pytest.approx(0.8, abs=1e-6)
    one = place_at_distances(start, [(*a, haversine_km(*start, *a))])
    assert one == start  # already on its only circle


def test_a_ladder_point_named_as_another_city_of_the_folder_stays(tmp_path):
    """review37 #3: the first version left out a ladder point named as ANY city of the folder: London's "Victoria"
    (a district) went, and an answer naming it geocoded to Victoria, Canada. Only the site's own city is left out."""
    (tmp_path / "ladders").mkdir()
    (tmp_path / "sites.csv").write_text(
        "site,city,country,continent,landmark,qid,wd_type,lat,lon\n"
        "london_x,London,UK,EU,Somewhere,Q1001,building,51.5,-0.14\n", encoding="utf-8")
    (tmp_path / "city_pool.csv").write_text(
        "city,country,continent,lat,lon\nLondon,UK,EU,51.51,-0.13\nVictoria,CA,NA,48.43,-123.37\n", encoding="utf-8")
    (tmp_path / "ladders" / "london_x_ladder_test.csv").write_text(
        "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity\n"
        "0-0.5km,high,,Victoria,Victoria,Q216185,0.35,4\n"
        "0.5-1.5km,high,,London,London,Q84,1.0,5\n", encoding="utf-8")
    gaz = Gazetteer.from_release(tmp_path, seed=0)
    victoria = gaz.get("Q216185")
    assert victoria is not None and victoria.kind == "building"
    assert haversine_km(51.5, -0.14, victoria.lat, victoria.lon) == pytest.approx(0.35, abs=1e-6)
    assert gaz.get("Q84") is None  # the site's own city: its city entry answers for it
