"""The geocoder and its gazetteer on the real GeoContext release (skipped when the release is absent)."""

from __future__ import annotations

import asyncio
import csv
import math
import random
from collections import Counter

import pytest
from _geocode_env import geocode_env, km

from geoagent.geohint.geocode import LocatedAnswer, ParsedAnswer, level_from_release
from geoagent.geohint.placenames import fold, is_linear_name
from geoagent.sandbox.gazetteer import Gazetteer

pytestmark = pytest.mark.release


def _rows(path):
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_release_levels_and_hit_rule_reproduce_the_judged_sample(release_dir):
    """Our level vocabulary and LocatedAnswer.hit reproduce the release's ``hit`` on every row."""
    rows = _rows(release_dir / "answers_judged_sample.csv")
    assert len(rows) == 966
    levels = Counter()
    for i, r in enumerate(rows):
        level = level_from_release(r["resolved_level"])
        levels[level] += 1
        err = float(r["error_km"]) if r["error_km"] else None
        loc = LocatedAnswer(resolved_level=level, error_km=err, label=r["resolved_label"] or None)
        assert loc.hit == (r["hit"] == "True"), (i, r)
        row = loc.as_release_row()
        assert row["resolved_level"] == r["resolved_level"] and row["resolved_label"] == r["resolved_label"]
        if err is not None:
            assert row["error_km"] == pytest.approx(err, abs=5e-4)
    assert levels == Counter({"area": 773, "city": 109, "building": 71, "none": 13})
    # the city-level rows include sub-kilometre distances that are censored, not hits (fault 4)
    assert any(r["resolved_level"] == "city" and float(r["error_km"]) < 1 and r["hit"] == "False" for r in rows)


def test_release_gazetteer_places_ladder_points_at_their_released_distance(release_dir):
    gaz = Gazetteer.from_release(release_dir, seed=0)
    sites = {r["site"]: r for r in _rows(release_dir / "sites.csv")}
    kinds = Counter(e.kind for e in gaz)
    assert kinds["city"] == len(_rows(release_dir / "city_pool.csv")) == 58
    # every site with a QID keeps its real coordinate
    for r in sites.values():
        e = gaz.get(r["qid"])
        if e is not None and not e.synthetic:
            assert (e.lat, e.lon) == (float(r["lat"]), float(r["lon"]))
    ladders_of: Counter[str] = Counter()
    for path in sorted((release_dir / "ladders").glob("*.csv")):
        ladders_of.update({row["qid"] for row in _rows(path)})
    checked = 0
    for path in sorted((release_dir / "ladders").glob("*.csv")):
        site = sites[path.name.split("_ladder")[0]]
        for row in _rows(path):
            e = gaz.get(row["qid"])
            if e is None or not e.synthetic or ladders_of[row["qid"]] > 1:
                # a real site entry, or a point of several ladders: placed at its distance from each as far as they
                # allow (session 37: tests/test_sandbox_gazetteer_release_s37.py)
                continue
            assert e.origin == site["site"]
            assert km(float(site["lat"]), float(site["lon"]), e.lat, e.lon) == pytest.approx(float(row["dist_km"]), abs=1e-6)
            checked += 1
    assert checked > 1500
    again = Gazetteer.from_release(release_dir, seed=0)
    other = Gazetteer.from_release(release_dir, seed=1)
    synth = [e for e in gaz if e.synthetic and ladders_of[e.qid] == 1][:50]
    assert all((again.get(e.qid).lat, again.get(e.qid).lon) == (e.lat, e.lon) for e in synth)
    assert sum((other.get(e.qid).lat, other.get(e.qid).lon) != (e.lat, e.lon) for e in synth) == len(synth)


def test_geocoding_a_hint_echo_gives_the_hint_distance(release_dir):
    """An answer that names the ladder reference point resolves to it, so error_km equals its dist_km;
    an answer naming the site's own landmark resolves at building level with error 0."""
    gaz = Gazetteer.from_release(release_dir, seed=0)
    sites = {r["site"]: r for r in _rows(release_dir / "sites.csv")}
    name_count = Counter(fold(n) for e in gaz for _, _, n in e.names(None))
    rng = random.Random(4)
    cases = []
    for path in rng.sample(sorted((release_dir / "ladders").glob("*.csv")), 12):
        site = sites[path.name.split("_ladder")[0]]
        for row in _rows(path):
            e = gaz.get(row["qid"])
            name = row["name_en"]
            if e is None or not e.synthetic or name_count[fold(name)] != 1 or is_linear_name(name) or "(" in name:
                continue
            if e.origin != site["site"]:
                continue  # placed relative to another site
            cases.append((site, name, row["qid"], float(row["dist_km"])))
            break
    assert len(cases) >= 8

    async def go():
        async with geocode_env(gaz) as env:
            out = []
            for site, name, _, _ in cases:
                lat, lon = float(site["lat"]), float(site["lon"])
                out.append(await env.geocoder.locate(ParsedAnswer(site["city"], "unknown", name), true_lat=lat, true_lon=lon))
            own = next(s for s in sites.values() if s["qid"] and not is_linear_name(s["landmark"]) and name_count[fold(s["landmark"])] == 1)
            landmark = await env.geocoder.locate(
                ParsedAnswer(own["city"], "unknown", own["landmark"]), true_lat=float(own["lat"]), true_lon=float(own["lon"])
            )
            return out, landmark

    located, landmark = asyncio.run(go())
    for (site, name, qid, dist_km), loc in zip(cases, located):
        assert loc.resolved_level == "building" and loc.qid == qid, (site["site"], name, loc.trace)
        assert loc.error_km == pytest.approx(dist_km, abs=1e-6)
        assert loc.hit == (dist_km < 1.0)
    assert landmark.resolved_level == "building" and math.isclose(landmark.error_km, 0.0, abs_tol=1e-9)


def test_release_sample_streets_named_as_the_area_and_what_our_rules_make_of_them(release_dir):
    """The release scores a street named in the area field at its point (its linearity test runs at place level
    only); ours passes it over when its Wikidata class is a street's and tries the area's next name (module doc of
    ``geoagent.geohint.geocode``, point 4). The figures docs/judgement-calls.md ("GeoHint geocoder judgement calls")
    gives, computed from the sample itself: the release's area-level hits whose resolved item is a street by name
    (:func:`is_linear_name`, to find them; our geocoder decides by class), and for each the outcome under our rules
    when the street is a street by class: the area's next name variant that the release itself resolved at that
    site, with the release's own distance for it (the sample holds no coordinates, so the distance is the
    release's for that name there; the building level is taken to fail as in the release, whose place level
    resolved none of the five: two places are streets by name, deferred by ours too, one is "unknown", two are a
    bank branch and a tea shop)."""
    from geoagent.geohint.placenames import name_variants, primary_name

    rows = _rows(release_dir / "answers_judged_sample.csv")
    # 22 areas whose primary name is a street by the name rule; among them districts (Shinbashi, Kyobashi), which
    # our area level keeps (it decides by class)
    linear_areas = [r for r in rows if is_linear_name(primary_name(r["area"]))]
    assert len(linear_areas) == 22 and {"Shinbashi", "Kyobashi"} <= {r["area"] for r in linear_areas}
    street_hits = [r for r in rows if r["resolved_level"] == "area" and r["hit"] == "True"
                   and is_linear_name(r["resolved_label"])]
    assert len(rows) == 966 and len(street_hits) == 5
    assert sum(is_linear_name(r["place"]) for r in street_hits) == 2 and sum(r["place"] == "unknown" for r in street_hits) == 1
    resolved = {}  # (site, folded name) -> the release's error_km for it at area (or place) level
    for r in rows:
        if r["resolved_level"] in ("area", "place") and r["resolved_label"]:
            resolved.setdefault((r["site"], fold(r["resolved_label"])), float(r["error_km"]))
    after = []
    for r in street_hits:
        variants = name_variants(r["area"])
        i = next(k for k, v in enumerate(variants) if fold(v) == fold(r["resolved_label"]))
        nxt = next((v for v in variants[i + 1:] if (r["site"], fold(v)) in resolved and not is_linear_name(v)), None)
        after.append((r["resolved_label"], float(r["error_km"]), nxt, resolved.get((r["site"], fold(nxt or "")))))
    assert sorted(after) == sorted([
        ("Miyamasuzaka", 0.333, "Shibuya", 0.527),
        ("Aoyama-dori", 0.753, "Shibuya", 0.527),
        ("Varick Street", 0.264, "Hudson Square", 0.464),
        ("Rue de Rivoli", 0.652, "Tuileries Garden", 2.681),
        ("Rue Vieille-du-Temple", 0.142, "Le Marais", 0.14),
    ])
    # four stay area-level hits on the district the answer also named; one (Rue de Rivoli) becomes a miss
    assert sum(d is not None and d < 1.0 for *_, d in after) == 4
