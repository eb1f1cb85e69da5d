"""Nominatim's ``wikidata`` extratag is taken only as a Wikidata item id (crawl43 #2).

Before: any string was taken as the place's QID, and a place the geocoder located through Nominatim carried it as the
answer's ``qid`` (a scored row's ``extra.qid``): ``"Q1;Q2"`` (OSM's list form), a URL, or a value with
control and bidirectional formatting characters reached the export as an item id. OSM tag values are free text; now a
value that is no single item id (``geoagent.qid.is_qid``, surrounding whitespace taken off) is no tag, and the place
counts as one without an item (its ``osm:<type>/<id>`` key stands in).

Real client and geocoder against the local Nominatim and Wikidata fakes (``tests/_geocode_env.py``'s gazetteer); the
Nominatim fake sends the tag values under test (``NominatimFakeState.wikidata_tags``).
"""

from __future__ import annotations

import asyncio

import pytest
from _geocode_env import CONTACT, FAST, GAZETTEER, UA

from geoagent.clients.nominatim import NominatimClient, wikidata_tag
from geoagent.clients.wikidata import WikidataClient
from geoagent.geohint.geocode import Geocoder, ParsedAnswer
from geoagent.runtime.http import HttpClient
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve

HARAJUKU = "Q99000002"
TRUTH = (35.6710, 139.7030)  # a point near Harajuku (test truth)

HOSTILE = ["Q99000002;Q1", "q99000002", "Q099000002", "https://www.wikidata.org/wiki/Q99000002",
           "Q99000002\u202e", "\u202eQ99000002", "Q99000002\x1b[31m", "Q９９", "", "=HYPERLINK(\"x\")", 99000002,
           ["Q99000002"], None]


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_value_that_is_no_item_id_is_no_tag(value):
    assert wikidata_tag(value) is None


@pytest.mark.parametrize("value", ["Q99000002", " Q99000002", "Q99000002\n"])
def test_an_item_id_is_taken_without_its_surrounding_whitespace(value):
    assert wikidata_tag(value) == HARAJUKU


def _search_and_locate(tag):
    """(the Nominatim place's ``wikidata``, the located answer) for Harajuku, whose extratag the fake sends as
    ``tag``; the fake Wikidata does not know Harajuku, so the geocoder takes Nominatim's place."""
    gaz = Gazetteer.from_jsonl(GAZETTEER)
    wd_gaz = Gazetteer([e for e in gaz if e.qid != HARAJUKU])
    nm_app = nm_fake.make_app(gaz, min_interval_s=0.0)
    nm_app[nm_fake.NOMINATIM_STATE].wikidata_tags[HARAJUKU] = tag

    async def go():
        async with serve(wd_fake.make_app(wd_gaz)) as wd_url, serve(nm_app) as nm_url, \
                HttpClient(default_policy=FAST) as http:
            wd = WikidataClient(http, user_agent=UA, base_url=wd_url + "/w/api.php", policy=FAST,
                                maxlag_min_wait_s=0.05)
            nm = NominatimClient(http, contact=CONTACT, base_url=nm_url, policy=FAST)
            (place,) = await nm.search("Harajuku, Tokyo")
            loc = await Geocoder(wd, nm).locate(ParsedAnswer(city="Tokyo", area="Harajuku", building="unknown"),
                                                true_lat=TRUTH[0], true_lon=TRUTH[1])
            return place, loc

    return asyncio.run(go())


@pytest.mark.parametrize("tag", ["Q99000002;Q1", "Q99000002\u202e\x1b", 99000002])
def test_a_hostile_tag_from_the_fake_leaves_the_place_without_an_item(tag):
    place, loc = _search_and_locate(tag)
    assert place.wikidata is None
    assert loc.resolved_level == "area" and loc.source == "nominatim" and loc.label == "Harajuku", loc.trace
    assert loc.qid == f"osm:{place.key}" and loc.qid.startswith("osm:node/")
    (step,) = [t for t in loc.trace if t.level == "area" and t.outcome == "resolved"]
    assert step.qid == loc.qid  # the trace (geocode_trace) holds no such text either


def test_a_well_formed_tag_is_the_answers_item():
    place, loc = _search_and_locate(" Q99000002 ")
    assert place.wikidata == HARAJUKU and loc.qid == HARAJUKU and loc.source == "nominatim"
