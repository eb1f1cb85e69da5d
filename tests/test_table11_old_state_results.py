"""Table 11's Unparseable for GeoHint results stored before session 12 (no ``extra["parse_method"]``).

A campaign scored on main@7c05358 stored, per answer, ``parse_ok``, ``parse_error`` and, when nothing was parsed,
the answer's ``raw`` text, but no parser method. Re-reported on main, such results were counted by "no place and
no evidence object", which is not the release's "no JSON object": a pattern-read answer (no JSON object) counted as
parsed and an object naming no place (``{"confidence": 0.9}``) as unparseable, so the same answers gave another
column than a fresh run of the same campaign.
"""
from __future__ import annotations

import json

from geoagent.geohint.aggregate import no_json_object
from geoagent.geohint.parse import parse_answer
from geoagent.geohint.result import GeoHintResult


def _stored_before_s12(raw: str) -> GeoHintResult:
    """A result as the campaign scorer of main@7c05358 stored it (its ``extra`` keys, no parse_method)."""
    ans = parse_answer(raw)
    return GeoHintResult(
        key="k", site="s1", image_id="1", model="m", condition="forced_chain", schema="forced_chain", repeat=0,
        city=ans.city, area=ans.area, building=ans.building, parse_ok=ans.ok, evidence=ans.evidence,
        source="campaign", extra={"parse_error": ans.error, "raw": ans.raw if not ans.ok else None})


def _fresh(raw: str) -> GeoHintResult:
    r = _stored_before_s12(raw)
    r.extra["parse_method"] = parse_answer(raw).method
    return r


def test_old_results_count_unparseable_as_fresh_ones():
    answers = [
        "city: 'Paris', area: '1er'",                    # read with a pattern: no JSON object
        json.dumps({"confidence": 0.9}),                # a JSON object naming no place: parsed
        json.dumps({"city": "Paris"}),                  # parsed
        "no idea",                                      # nothing
    ]
    fresh = [no_json_object(_fresh(a)) for a in answers]
    assert fresh == [True, False, False, True]
    assert [no_json_object(_stored_before_s12(a)) for a in answers] == fresh
