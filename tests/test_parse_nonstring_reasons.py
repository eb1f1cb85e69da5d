"""A free-text reason or evidence field that is not a JSON string is absent, never turned into text.

Before (session 12 follow-up): the parsers still wrote a non-string reason as text: the image auditor's and the
referenceability and screening auditors' ``why`` went through ``str()`` (``42`` -> "42", ``NaN`` -> "nan", a list
or an object -> its Python repr), GeoVerify's ``evidence`` / ``reasons`` list kept numbers as text ("3", "2.5"),
and a GeoHint evidence slot holding a list became its items joined (``["not visible"]`` -> "not visible", counted
in Table 11 as a declined slot, where the release's ``analysis/chain_compliance.py`` counts a non-string slot as
answered). Model output is untrusted text: a non-string reason is absent (``""``, as a missing one), the verbatim
answer is kept.
"""

from __future__ import annotations

import json

import pytest

from geoagent.crawl.image_audit import parse_image_audit
from geoagent.crawl.referenceability import parse_ref_batch, parse_sensitive_batch
from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import parse_verdict

NON_STRINGS = ["42", "-3.5", "NaN", "Infinity", "true", "null", '["a", "b"]', '["not visible"]', '{"x": "y"}', "[]"]


@pytest.mark.parametrize("value", NON_STRINGS)
def test_image_audit_why_is_text_only(value):
    text = '{"answer_overlay": false, "scene_type": "street", "quality": 4, "usable": true, "why": %s}' % value
    a = parse_image_audit(text)
    assert a.parsed and a.usable is True and a.why == "" and a.raw == text


def test_image_audit_why_text_is_kept():
    a = parse_image_audit('{"answer_overlay": false, "scene_type": "street", "quality": 4, "why": "clear street"}')
    assert a.why == "clear street"


@pytest.mark.parametrize("value", NON_STRINGS)
def test_referenceability_and_screening_why_are_text_only(value):
    rated = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 3, "zh": null, "en": "X", "why": %s}]' % value, 1)
    assert rated[0]["why"] == "" and rated[0]["familiarity"] == 3
    screened = parse_sensitive_batch('[{"idx": 0, "sensitive": false, "why": %s}]' % value, 1)
    assert screened[0]["why"] == "" and screened[0]["sensitive"] is False


def test_referenceability_why_text_is_kept_and_capped():
    rated = parse_ref_batch(json.dumps([{"idx": 0, "ok": True, "familiarity": 3, "why": "w" * 300}]), 1)
    assert rated[0]["why"] == "w" * 200


@pytest.mark.parametrize("key", ["evidence", "reasons"])
def test_geoverify_evidence_keeps_text_items_only(key):
    v = parse_verdict('{"verdict": "no", "%s": ["a tram", 3, 2.5, true, null, ["x"], {"y": 1}, "a sign"]}' % key)
    assert v.ok and v.evidence == ("a tram", "a sign")


@pytest.mark.parametrize("value", NON_STRINGS)
def test_a_geohint_evidence_slot_that_is_not_text_has_no_text(value):
    text = '{"city": "Paris", "evidence": {"vegetation": %s, "architecture": "stone"}}' % value
    a = parse_answer(text)
    assert a.ok and a.evidence == {"vegetation": "", "architecture": "stone"} and a.raw == text
    assert a.evidence_not_visible() == {"vegetation": False, "architecture": False}
