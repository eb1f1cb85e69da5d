"""A reference-point candidate whose label merely looks like a Wikidata id is a real name.

WDQS's label service answers an item's own id when it has no label in the asked languages; the site sampler
(release ``scripts/00_select_sites.py``: ``df[~df.name.eq(df.qid)]``) treats exactly that as "no label". The
reference-point check used the shape ``Q<digits>`` instead, so a place really named "Q1" (the Gold Coast tower,
Wikidata Q1140620) was dropped from rating and from the ladder's names. Both checks now compare with the item's own id.
"""
from __future__ import annotations

from geoagent.crawl.ladder import RatedCandidate, eligible_candidates, hint_name
from geoagent.crawl.referenceability import RefCandidate, has_no_label


def test_label_shaped_like_another_qid_is_a_label():
    assert not has_no_label(RefCandidate("Q1140620", "Q1", 0.8, -28.0, 153.4))
    assert has_no_label(RefCandidate("Q1140620", "Q1140620", 0.8, -28.0, 153.4))
    assert has_no_label(RefCandidate("Q1140620", " Q1140620 ", 0.8, -28.0, 153.4))
    assert has_no_label(RefCandidate("Q1140620", "", 0.8, -28.0, 153.4))


def test_hint_name_compares_with_own_qid():
    assert hint_name(None, "Q1", None, qid="Q1140620") == "Q1"
    assert hint_name(None, "Q1140620", None, qid="Q1140620") is None
    assert hint_name(None, "Q1140620", "Q1 大厦", qid="Q1140620") == "Q1 大厦"


def test_q1_tower_reaches_the_ladder_names():
    tower = RatedCandidate("Q1140620", "Q1", 0.8, familiarity=4, ok=True)
    bare = RatedCandidate("Q99999999", "Q99999999", 0.9, familiarity=4, ok=True)
    out = eligible_candidates([tower, bare])
    assert [(c.qid, c.name_en) for c in out] == [("Q1140620", "Q1")]
