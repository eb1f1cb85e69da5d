"""Site sampler (seed 000 Sec. 3.2.1): seeded shuffle, spacing before coverage, first three that pass."""

from __future__ import annotations

import asyncio
import csv
import random

import pytest

from geoagent.clients.wdqs import WdEntity
from geoagent.crawl.sampler import RELEASE_SITES_COLUMNS, SITES_COLUMNS, SiteCandidate, merge_candidates, shuffled, site_id, walk_candidates
from geoagent.crawl.settings import CitySpec, SamplerSettings
from geoagent.geo import haversine_km

CITY = CitySpec(city="Test Town", country="TT", continent="EU", lat=50.0, lon=10.0)


def test_site_ids_reproduce_all_90_algorithm_sites(release_dir):
    with (release_dir / "sites.csv").open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["selection_method"] == "algorithm"]
        f.seek(0)
        assert tuple(next(csv.reader(f))) == RELEASE_SITES_COLUMNS == SITES_COLUMNS[:len(RELEASE_SITES_COLUMNS)]
    assert len(rows) == 90
    for r in rows:
        assert site_id(r["city"], r["landmark"]) == r["site"], r["landmark"]
    assert site_id("Paris", "Louvre", taken=["paris_louvre"]) == "paris_louvre_2"


def test_release_sites_respect_the_sampling_rules(release_dir):
    """Released algorithm sites: <= 60 sitelinks, >= 8 perspective images, >= 250 m apart within a city."""
    with (release_dir / "sites.csv").open(encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f) if r["selection_method"] == "algorithm"]
    by_city = {}
    for r in rows:
        assert float(r["sitelinks"]) <= 60 and float(r["sv_perspective"]) >= 8, r["site"]
        by_city.setdefault(r["city"], []).append(r)
    assert all(len(v) == 3 for v in by_city.values())
    for v in by_city.values():
        for i, a in enumerate(v):
            for b in v[i + 1:]:
                assert haversine_km(float(a["lat"]), float(a["lon"]), float(b["lat"]), float(b["lon"])) >= 0.25


def _cands(n=30, seed=0):
    rng = random.Random(seed)
    return [SiteCandidate(f"Q{100 + i}", f"Place {i}", 50 + rng.uniform(-0.02, 0.02), 10 + rng.uniform(-0.03, 0.03),
                          rng.randint(0, 60), "museum", None) for i in range(n)]


def test_shuffle_is_seeded_and_input_order_free():
    c = _cands()
    a = shuffled(c, 42)
    assert [x.qid for x in a] == [x.qid for x in shuffled(list(reversed(c)), 42)]
    assert [x.qid for x in a] != [x.qid for x in shuffled(c, 43)]
    expected = sorted(c, key=lambda x: int(x.qid[1:]))
    random.Random(42).shuffle(expected)
    assert [x.qid for x in a] == [x.qid for x in expected]
    # not the fame order
    assert [x.qid for x in a] != [x.qid for x in sorted(c, key=lambda x: -x.sitelinks)]


def test_spacing_checked_before_any_coverage_call():
    base = SiteCandidate("Q1", "A", 50.0, 10.0, 5, "park", None)
    near = SiteCandidate("Q2", "B", 50.001, 10.0, 5, "park", None)  # ~111 m away
    far1 = SiteCandidate("Q3", "C", 50.01, 10.0, 5, "park", None)
    thin = SiteCandidate("Q4", "D", 50.02, 10.0, 5, "park", None)
    far2 = SiteCandidate("Q5", "E", 50.03, 10.0, 5, "park", None)
    extra = SiteCandidate("Q6", "F", 50.04, 10.0, 5, "park", None)
    calls = []

    async def coverage(lat, lon, radius_m):
        calls.append((lat, lon, radius_m))
        return 3 if lat == thin.lat else 12

    res = asyncio.run(walk_candidates(CITY, [base, near, far1, thin, far2, extra], coverage, SamplerSettings(), 1))
    assert [s["qid"] for s in res.sites] == ["Q1", "Q3", "Q5"]
    assert [w["decision"] for w in res.walk] == ["take", "skip_spacing", "take", "skip_coverage", "take"]
    assert (near.lat, near.lon, 150.0) not in calls and len(calls) == res.coverage_calls == 4  # extra never reached
    assert all(r == 150.0 for _, _, r in calls)
    assert res.sites[0]["selection_method"] == "algorithm" and set(res.sites[0]) == set(SITES_COLUMNS)


def test_merge_candidates_keeps_one_per_qid():
    ents = [WdEntity("Q10", "Fountain Sq", 1, 2, 0.3, 12, "Q483453", "fountain"),
            WdEntity("Q10", "Fountain Sq", 1, 2, 0.3, 12, "Q174782", "square"),
            WdEntity("Q9", "Library", 1, 2, 0.5, 3, "Q7075", "library")]
    m = merge_candidates(ents, ["Q174782", "Q483453", "Q7075"])
    assert [(c.qid, c.type_label) for c in m] == [("Q9", "library"), ("Q10", "square")]


def test_settings_reject_bad_type_qids():
    with pytest.raises(ValueError, match="not a Wikidata item id"):
        SamplerSettings(site_types={"museum": "museum"})
    assert len(SamplerSettings().site_types) == 16


def test_concurrent_table_writers_never_tear_or_lose_the_file(tmp_path):
    """sites.csv and ladder CSVs are rewritten whole by every task (and by every process of a scaled-out
    campaign). With one shared ``<name>.tmp`` a second writer truncated the first one's half-written
    temporary file or found it already renamed (FileNotFoundError). Each write now has a file of its own:
    the result is always one writer's complete table."""
    import threading

    from geoagent.crawl.ladder import LADDER_COLUMNS, read_ladder_csv, write_ladder_csv
    from geoagent.crawl.sampler import SITES_COLUMNS, write_sites_csv

    def site_rows(k):
        return [{c: f"{c}-{k}-{i}" for c in SITES_COLUMNS} for i in range(200)]

    def ladder_rows(k):
        return [{c: f"{c}-{k}-{i}" for c in LADDER_COLUMNS} for i in range(200)]

    errors = []

    def hammer(k):
        try:
            for _ in range(60):
                write_sites_csv(site_rows(k), tmp_path / "sites.csv")
                write_ladder_csv(ladder_rows(k), tmp_path / "s_ladder_a-en.csv")
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=hammer, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with (tmp_path / "sites.csv").open(encoding="utf-8", newline="") as f:
        got = list(csv.DictReader(f))
    assert any(got == site_rows(k) for k in range(4))
    lad = read_ladder_csv(tmp_path / "s_ladder_a-en.csv")
    assert any(lad == ladder_rows(k) for k in range(4))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s_ladder_a-en.csv", "sites.csv"]  # no temporary left
