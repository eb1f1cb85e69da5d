"""Table 11 counts evidence slots and unparseable responses as the release's ``analysis/chain_compliance.py``.

* Every key of an evidence object that names a category is a slot of it (the release loops over ``ev.items()``);
  keys are matched by the release's category words (``infrastructure``, ``vegetation``, ``architecture``,
  ``language`` = Script, ``terrain``) plus our prompt's ``script``. Before: only the first key per category
  counted, and words the release never matched (``climate``, ``flora``, ``building``, ``text``) were categories.
* Unparseable is a response with no JSON object at all (the paper's "2 responses out of 2799 are unparseable",
  "the 2797 that parsed"). Before: the column counted answers naming no place, so an object holding only the
  checklist was "unparsed" though its slots counted.
"""
from __future__ import annotations

import json

import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.parse import canonical_category, parse_answer
from geoagent.geohint.raw_import import import_raw
from geoagent.report.geohint import table11

from test_release_routes_one_request import _line, _write_raw, make_release

CATS = ("Infra.", "Veg.", "Arch.", "Script", "Terrain")


def test_category_words_are_the_release_s():
    assert canonical_category("Terrain, climate, vehicles, road surface") == "terrain"
    assert canonical_category("language") == canonical_category("Script") == "script"
    assert canonical_category("1. Infrastructure") == "infrastructure"
    for key in ("climate", "vehicles", "flora", "building", "text", "infra"):
        assert canonical_category(key) is None, key


def test_every_matching_key_is_a_slot():
    ans = parse_answer(json.dumps({"city": "Paris", "evidence": {
        "terrain": "flat", "terrain_notes": "not visible", "vegetation": "not visible", "climate": "not visible",
        "Language": "Latin", "script_detail": "Not visible", "architecture": None}}))
    assert ans.evidence_slots == {"terrain": [2, 1], "vegetation": [1, 1], "script": [2, 1], "architecture": [1, 0]}


def _table11_row(tmp_path, raws: list[str]) -> dict:
    release = make_release(tmp_path)
    _write_raw(release, [_line(raw, repeat=i) for i, raw in enumerate(raws)])
    rows, _report = import_raw(release)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    t = table11(agg)
    assert len(t.rows) == 1
    return dict(zip(t.columns, t.rows[0]))


def test_table11_counts_every_key_and_only_objectless_answers_as_unparseable(tmp_path):
    ev = {"infrastructure": "bollards", "vegetation": "trees", "architecture": "stone", "language": "Latin",
          "terrain": "flat", "terrain_extra": "not visible"}
    row = _table11_row(tmp_path, [
        json.dumps({"city": "Paris", "area": "1er", "building": "shop", "evidence": ev}),  # 6 slots, terrain 2
        json.dumps({"evidence": {**ev, "vegetation": "not visible"}}),                   # no place: parsed here
        "I cannot tell where this photo was taken.",                                      # no JSON object
    ])
    # by hand: n 3, 2 evidence objects; terrain slots 4 of which 2 not visible; vegetation 1 of 2 not visible
    assert row["n"] == 3 and row["Evidence"] == pytest.approx(2 / 3)
    assert tuple(row[c] for c in CATS) == pytest.approx((0.0, 0.5, 0.0, 0.0, 0.5))
    assert row["Unparseable"] == 1
