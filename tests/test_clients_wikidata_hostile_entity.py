"""Adversarial review (session 13): ``wbgetentities`` objects of hostile shape. ``labels``/``aliases`` as a list or a
string, ``descriptions`` as a string, or a P625 statement whose ``mainsnak`` is no object raised
``AttributeError`` out of :meth:`WikidataClient.get_entities`, losing the whole batch of up to 50 ids; a label whose
``value`` is an object became its Python repr as the name ("{'a': 1}"); an ``id`` that is no QID (5) became the
entity's QID. Each such part now counts as absent (the entity keeps its requested QID, and a label-less entity is
named by it, as before). Real client, the Wikidata fake writing the hostile keys over the entity's object."""

from __future__ import annotations

import asyncio

from _geocode_env import FAST, UA

from geoagent.clients.wikidata import WikidataClient
from geoagent.runtime.http import HttpClient
from geoagent.sandbox import wikidata as fake
from geoagent.sandbox.gazetteer import Gazetteer, GazetteerEntry
from geoagent.sandbox.server import serve

HOSTILE = {
    "Q5001": {"labels": [{"language": "en", "value": "Listed"}]},
    "Q5002": {"labels": "Stringy", "aliases": [1, 2]},
    "Q5003": {"descriptions": "a string", "aliases": {"en": "not a list"}},
    "Q5004": {"claims": {"P625": [{"rank": "normal", "mainsnak": "x"}], "P31": [{"rank": "normal", "mainsnak": 7}]}},
    "Q5005": {"labels": {"en": {"value": {"a": 1}}, "fr": {"value": "Bon"}}, "id": 5},
}


def test_hostile_entity_shapes_do_not_lose_the_batch():
    entries = [GazetteerEntry(qid=f"Q{5000 + i}", labels={"en": f"Place {i}"}, lat=10 + i / 1000, lon=20, kind="building",
                              city="X") for i in range(6)]
    app = fake.make_app(Gazetteer(entries))
    app[fake.WIKIDATA_STATE].entity_overrides = HOSTILE

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = WikidataClient(http, user_agent=UA, base_url=base + "/w/api.php", policy=FAST)
            return await c.get_entities([e.qid for e in entries])

    ents = asyncio.run(go())
    assert ents["Q5000"].labels == {"en": "Place 0"} and ents["Q5000"].has_coordinates
    assert ents["Q5001"].labels == {} and ents["Q5001"].label() == "Q5001"
    assert ents["Q5002"].labels == {} and ents["Q5002"].aliases == {}
    assert ents["Q5003"].description == "" and ents["Q5003"].labels == {"en": "Place 3"}
    assert not ents["Q5004"].has_coordinates and ents["Q5004"].classes == ()
    assert ents["Q5005"].qid == "Q5005" and ents["Q5005"].labels == {"fr": "Bon"}
