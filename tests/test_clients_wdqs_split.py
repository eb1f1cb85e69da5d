"""WDQS spatial-split fallback: an area query that hits the 60 s deadline is asked again in boxes.

The local fake's ``timeout_above_km2`` mode answers every query over a larger area with the real timeout
shapes (text/plain 500 with ``java.util.concurrent.TimeoutException``, or JSON cut midway followed by the
Blazegraph stack trace). The split answer must hold exactly the rows of the same query asked whole (from
a fake without the fault), in the same order; the expected item set is also recomputed here with a
haversine of our own.
"""

from __future__ import annotations

import asyncio
import math
import random

import pytest

from geoagent.clients.mapillary import bbox_around
from geoagent.clients.wdqs import WdqsAreaTooDense, WdqsClient, WdqsTimeout
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import wdqs as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)
LAT0, LON0 = 48.8566, 2.3522
MUSEUM, PARK, CHURCH, HUMAN = "Q33506", "Q22698", "Q16970", "Q5"


def _km(lat, lon):
    """Haversine from the centre, km (mean Earth radius 6371.0088 km), written independently of geoagent.geo."""
    p1, p2 = math.radians(LAT0), math.radians(lat)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon - LON0) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(a))


def _world(n=500, seed=3):
    rng = random.Random(seed)
    ents = []
    for i in range(n):
        cls = rng.choice([MUSEUM, PARK, CHURCH, HUMAN])
        ents.append(fake.FakeEntity(qid=f"Q{rng.randint(1, 10**7)}", label=f"Thing {i}", lat=LAT0 + rng.uniform(-0.08, 0.08),
                                    lon=LON0 + rng.uniform(-0.12, 0.12), sitelinks=rng.choice([0, 5, 30, 61, 200]),
                                    instance_of=(cls,), title=f"Thing {i}" if i % 2 else None))
    # an item exactly on the middle lines of the first split: it lies on the edge of all four quadrants
    w, s, e, n = bbox_around(LAT0, LON0, 6000.0)
    ents.append(fake.FakeEntity(qid="Q4242", label="On the edge", lat=(s + n) / 2, lon=(w + e) / 2, sitelinks=5,
                                instance_of=(MUSEUM,)))
    # a church that is also a museum: two rows (one per type) in the candidate query, whole or split
    ents.append(fake.FakeEntity(qid="Q4343", label="Church museum", lat=LAT0 + 0.01, lon=LON0 - 0.01, sitelinks=3,
                                instance_of=(MUSEUM, CHURCH)))
    return ents


async def _ask(ents, fn, *, threshold=None, mode="500"):
    app = fake.make_app(ents, class_labels={MUSEUM: "museum", PARK: "park", CHURCH: "church"})
    st = app[fake.WDQS_STATE]
    st.timeout_above_km2, st.timeout_mode = threshold, mode
    records: list[dict] = []
    async with serve(app) as base, HttpClient(default_policy=FAST) as http:
        client = WdqsClient(http, base + "/sparql", UA)
        got = await fn(client, records.append)
    return got, records, st, client


def _around(radius_km=6.0, page_size=60, depth=4):
    return lambda c, log: c.entities_around(LAT0, LON0, radius_km, page_size=page_size, area="city Testville",
                                            max_split_depth=depth, on_split=log)


@pytest.mark.parametrize("mode", ["500", "truncated"])
def test_split_entities_equal_the_whole_query(mode):
    ents = _world()
    whole, rec0, st0, _ = asyncio.run(_ask(ents, _around()))
    split, records, st, client = asyncio.run(_ask(ents, _around(), threshold=40.0, mode=mode))
    assert rec0 == [] and st0.area_timeouts == 0
    assert split == whole  # same rows, same order, same distances
    expected = {e.qid for e in ents if _km(e.lat, e.lon) <= 6.0}
    assert {e.qid for e in split} == expected and len(split) == len(expected) > 150
    assert [e.qid for e in split].count("Q4242") == 1  # returned by all four quadrants, kept once
    # 6 km circle = 113 km^2 > 40: the whole query timed out ONCE (a deadline answer is not repeated,
    # though FAST allows 2 attempts), then one split into four 6 x 6 km boxes (36 km^2 <= 40), which all answered
    assert st.area_timeouts == 1 and client.splits == 1
    assert [r["depth"] for r in records] == [0] and len(records[0]["parts"]) == 4
    assert records[0]["area"] == "city Testville" and "timed out" in records[0]["reason"]
    assert records[0]["box_km2"] == pytest.approx(144.0, rel=0.01)


def test_split_twice_when_the_quadrants_time_out_too():
    ents = _world()
    whole, _, _, _ = asyncio.run(_ask(ents, _around()))
    split, records, st, client = asyncio.run(_ask(ents, _around(), threshold=20.0))
    assert split == whole
    # 36 km^2 quadrants > 20 split again into 3 x 3 km boxes (9 km^2); every one of the 16 reaches the circle
    # (its nearest point is at most 3 * sqrt(2) = 4.24 km from the centre)
    assert sorted(r["depth"] for r in records) == [0, 1, 1, 1, 1] and client.splits == 5
    boxes = [q for q in st.queries if "wikibase:box" in q]
    assert {round(fake.area_km2(q)) for q in boxes} == {36, 9}


def test_split_site_candidates_keep_one_row_per_type():
    ents = _world()

    def ask(c, log):
        return c.site_candidates(LAT0, LON0, 3.0, [MUSEUM, PARK, CHURCH], 60, page_size=40, area="city Testville",
                                 on_split=log)

    whole, _, _, _ = asyncio.run(_ask(ents, ask))
    split, records, _, _ = asyncio.run(_ask(ents, ask, threshold=10.0))
    assert split == whole and records
    assert [(e.qid, e.type_qid) for e in split if e.qid == "Q4343"] == [("Q4343", CHURCH), ("Q4343", MUSEUM)]
    expected = {(e.qid, t) for e in ents for t in e.instance_of
                if t != HUMAN and e.sitelinks <= 60 and _km(e.lat, e.lon) <= 3.0}
    assert {(e.qid, e.type_qid) for e in split} == expected


def test_depth_limit_fails_naming_the_area():
    ents = _world(100)
    with pytest.raises(WdqsAreaTooDense, match="city Testville") as err:
        asyncio.run(_ask(ents, _around(depth=2), threshold=1.0))
    assert isinstance(err.value, WdqsTimeout) and err.value.depth == 2
    w, s, e, n = err.value.box  # the part that still failed: a quarter of a quarter of the circle's box
    assert (n - s) == pytest.approx((bbox_around(LAT0, LON0, 6000.0)[3] - bbox_around(LAT0, LON0, 6000.0)[1]) / 4)


def test_split_off_keeps_the_timeout():
    with pytest.raises(WdqsAreaTooDense, match="splitting is off"):
        asyncio.run(_ask(_world(50), _around(depth=0), threshold=1.0))


def test_far_boxes_are_not_asked():
    """A box whose nearest point lies beyond the radius holds no answer: it is skipped, not queried."""
    ents = _world()
    whole, _, _, _ = asyncio.run(_ask(ents, _around()))
    split, records, st, _ = asyncio.run(_ask(ents, _around(depth=3), threshold=3.0))
    assert split == whole
    boxes = [fake.query_area(q)[3] for q in st.queries if "wikibase:box" in q]
    # the 64 depth-3 boxes (1.5 x 1.5 km) of the corners lie wholly outside the circle: never asked
    smallest = {b for b in boxes if fake.area_km2(_box_query(b)) < 3.0}
    assert 0 < len(smallest) < 64
    assert all(_km(min(max(LAT0, b[1]), b[3]), min(max(LON0, b[0]), b[2])) <= 6.0 * 1.01 + 0.05 for b in boxes)
    assert max(r["depth"] for r in records) == 2


def _box_query(box):
    from geoagent.clients.wdqs import around_query

    return around_query(LAT0, LON0, 6.0, limit=1, offset=0, box=box)


def test_box_reach_check_across_the_antimeridian():
    """The far-box check measures to the nearer edge, also across +-180 degrees (hand-computed cases)."""
    from geoagent.clients.wdqs import _box_reaches_circle

    # centre at 179.99 E on the equator: a box starting at 180 W (= 180 E) is 0.01 deg = 1.11 km away
    assert _box_reaches_circle((-180.0, -0.1, -179.9, 0.1), 0.0, 179.99, 2.0)
    assert not _box_reaches_circle((-180.0, -0.1, -179.9, 0.1), 0.0, 179.99, 1.0)
    # the same box seen from 179.9 W's far side (0.5 deg = 55.6 km east of its east edge)
    assert not _box_reaches_circle((-180.0, -0.1, -179.9, 0.1), 0.0, -179.4, 50.0)
    assert _box_reaches_circle((-180.0, -0.1, -179.9, 0.1), 0.0, -179.4, 56.0)
