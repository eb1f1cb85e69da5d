"""One rule for a Wikidata item id's shape (:func:`geoagent.qid.is_qid`: ``Q`` and ASCII digits, no leading
zero), and one rule for a label that is an item's missing name (equal to the item's own id, never the shape).

Before: the sandbox gazetteer and the GeoHint geocode stage tested ``q[1:].isdigit()`` and the judged route's
context label ``Q\\d+``, which take superscript and non-ASCII digits (``"Q²"``, ``"Q٣"``) for an id, while the
WDQS client and the crawl settings took ``Q[1-9][0-9]*``. The site sampler's label rule was already the item's
own id (kept here with the referenceability and ladder ones: ``tests/test_crawl_qid_shaped_label.py``).
"""
from __future__ import annotations

import pytest

from geoagent.crawl.sampler import SiteCandidate, unnamed
from geoagent.geohint.judged import parse_context_label
from geoagent.qid import is_qid
from geoagent.sandbox.gazetteer import GazetteerEntry

NOT_IDS = ["Q0", "Q042", "q42", "Q", "Q\u00b2", "Q\u0663", "Q\uff14\uff12", "Q42\n", " Q42", "Q4 2", "P31", None, 42]


@pytest.mark.parametrize("v", ["Q1", "Q42", "Q1140620"])
def test_ids(v):
    assert is_qid(v)


@pytest.mark.parametrize("v", NOT_IDS)
def test_not_ids(v):
    assert not is_qid(v)


@pytest.mark.parametrize("qid", ["Q\u00b2", "Q\u0663", "Q042"])
def test_gazetteer_entry_refuses_a_non_id(qid):
    with pytest.raises(ValueError, match="bad qid"):
        GazetteerEntry(qid, {"en": "Tower"}, 45.0, 7.0, "building", "Sandbox City")
    assert GazetteerEntry("Q42", {"en": "Tower"}, 45.0, 7.0, "building", "Sandbox City").qid == "Q42"


def test_context_label_qid_is_ascii():
    assert parse_context_label("high_05_15km_Q1069457") == ("high", "0.5-1.5km", "Q1069457")
    for label in ("high_05_15km_Q\u0663", "high_05_15km_Q\u00b2", "high_\u0660\u0665_15km_Q1"):
        with pytest.raises(ValueError, match="neither 'none' nor tier_band_QID"):
            parse_context_label(label)


def test_sampler_label_rule_is_the_items_own_id():
    def cand(label: str) -> SiteCandidate:
        return SiteCandidate("Q1140620", label, -28.0, 153.4, 5, "skyscraper", 0.8)

    assert not unnamed(cand("Q1"))  # a place named like an id (the Gold Coast tower) has a name
    assert unnamed(cand("Q1140620")) and unnamed(cand(" Q1140620 ")) and unnamed(cand(""))
