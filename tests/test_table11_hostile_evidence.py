"""Table 11 on hostile evidence objects, against the release's ``analysis/chain_compliance.py`` definition.

The release parses a response to a JSON object (fence stripped, outermost brace span, ``json.loads``): a response
it reads an object from is never Unparseable, whatever the object says. Each key of its ``evidence`` object is a
slot of the first category word (``infrastructure``, ``vegetation``, ``architecture``, ``language``, ``terrain``)
the lower-cased key contains; our prompt's ``script`` is read as ``language`` but must not take a key the
release counts under another word. Expected figures below are counted by hand from that definition.
"""
from __future__ import annotations

import json

import pytest

from geoagent.geohint.parse import canonical_category, parse_answer

from test_table11_release_counting import CATS, _table11_row


def test_script_does_not_take_a_key_the_release_counts_as_terrain():
    # the release's words are tried in its order and 'script' is none of them: "terrain_and_script" is terrain
    assert canonical_category("terrain_and_script") == "terrain"
    assert canonical_category("script/terrain") == "terrain"
    assert canonical_category("language_terrain") == "script"  # 'language' comes before 'terrain' there
    assert canonical_category("script") == "script"


def test_an_object_naming_two_places_is_parsed_with_every_slot(tmp_path):
    # json.loads reads this object (duplicate spellings are no error): parsed, evidence present, two terrain slots
    raw = json.dumps({"city": "Paris", "City": "Lyon",
                      "evidence": {"terrain": "flat", "terrain_notes": "not visible"}})
    ans = parse_answer(raw)
    assert not ans.ok  # still no place: the conflict keeps it out of every hit table
    assert ans.method == "json"
    assert ans.evidence_slots == {"terrain": [2, 1]}
    row = _table11_row(tmp_path, [raw])
    assert row["n"] == 1 and row["Evidence"] == pytest.approx(1.0)
    assert row["Terrain"] == pytest.approx(0.5)  # 1 of 2 slots; the first-key fallback read 0 of 1
    assert row["Unparseable"] == 0


def test_an_object_without_schema_keys_is_no_unparseable_response(tmp_path):
    # the release parses {"note": ...} to an object (no evidence in it): parsed, not unparseable
    row = _table11_row(tmp_path, [json.dumps({"note": "cannot tell"}), "no idea"])
    assert row["n"] == 2 and row["Evidence"] == pytest.approx(0.0)
    assert row["Unparseable"] == 1
    assert all(row[c] != row[c] for c in CATS)  # no slot: NaN


def test_the_exact_evidence_key_is_read_before_other_spellings(tmp_path):
    # the release reads obj["evidence"]; a later "Evidence": null (or another object) hid it here
    raws = [json.dumps({"city": "Paris", "evidence": {"terrain": "not visible"}, "Evidence": None}),
            json.dumps({"city": "Paris", "evidence": {"terrain": "flat"}, " EVIDENCE ": {"vegetation": "x"}})]
    assert parse_answer(raws[0]).evidence_slots == {"terrain": [1, 1]}
    assert parse_answer(raws[1]).evidence_slots == {"terrain": [1, 0]}
    row = _table11_row(tmp_path, raws)
    assert row["Evidence"] == pytest.approx(1.0) and row["Terrain"] == pytest.approx(0.5)
    assert row["Veg."] != row["Veg."]  # no vegetation slot: NaN
