"""Adversarial review of how model output is read (session 15, s15-parse): each test failed on main before its fix,
except the guards that say what must stay as it was (agreeing audits, a real quoted key, an unchanged case).

The parsers are pure functions over the model's verbatim text, so these tests call them directly with the hostile
answer; the recorded-answer tests read a copy of the release sample (the importer and the replay provider read
files, no server is involved).
"""

from __future__ import annotations

import pytest

from geoagent.crawl.image_audit import parse_image_audit
from geoagent.crawl.referenceability import parse_ref_batch, parse_sensitive_batch
from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import parse_verdict

# the example object of prompts/crawl_image_audit.txt, as a model repeats it before its own answer
AUDIT_EXAMPLE = ('{"answer_overlay": false, "overlay_text": "", "scene_type": "street", "through_glass": false, '
                 '"tourist_infrastructure": false, "quality": 4, "usable": true, '
                 '"why": "sharp street view with shopfronts and a tram stop"}')
AUDIT_LEAK = ('{"answer_overlay": true, "overlay_text": "Rue de Rivoli, Paris", "scene_type": "street", '
              '"through_glass": false, "tourist_infrastructure": false, "quality": 4, "usable": false, '
              '"why": "caption bar names the street"}')
# the example array of prompts/crawl_referenceability.txt
REF_EXAMPLE = ('[{"idx": 0, "ok": true, "familiarity": 4, "zh": "<Chinese name>", '
               '"en": "San Jose Municipal Rose Garden", "why": "well-known garden people meet at"}]')


# --- GeoVerify: a confidence too large for a float -------------------------------------------------

def test_geoverify_confidence_too_large_for_a_float_keeps_the_verdict():
    """A confidence written as a 400-digit integer (a looping model) made ``float()`` raise OverflowError inside
    the parser: the answer became a parse failure ("parser error: OverflowError ...") and its clear verdict was
    lost from H and F. Like ``1e309`` (infinite), it is an unusable confidence: the verdict stands, confidence
    None, rule ``confidence_invalid``."""
    big = "9" * 400
    for text in ('{"verdict": "yes", "confidence": ' + big + '}',
                 '{"verdict": "no", "confidence": -' + big + ', "evidence": ["tram"]}'):
        p = parse_verdict(text)
        assert p.ok, p.reason
        assert p.verdict in ("yes", "no")
        assert p.confidence is None
        assert "confidence_invalid" in p.rules
        assert p.raw == text
    assert parse_verdict('{"verdict": "no", "confidence": -' + big + ', "evidence": ["tram"]}').evidence == ("tram",)


# --- image audit: the prompt's example repeated before the real audit ------------------------------

def test_image_audit_echoed_example_then_a_leaking_audit_is_no_keep():
    """A model that repeats the prompt's example audit (usable, no overlay) and then gives its own, which reports
    overlay text naming the street, was read as the example: the image was kept although the answer says it
    leaks the place (answer leakage is the one hard exclusion, seed 000 Sec. 3.2). Two audits in one answer that
    disagree are now an unparsed answer (the image is not kept without a human verdict), never the first one.
    Session 36: the prompt's example itself, field for field, is no audit at all, so here the model's own audit is
    read (the image is not kept either way); two audits of the model's own that disagree stay unparsed."""
    text = "Format, for example:\n" + AUDIT_EXAMPLE + "\n\nMy audit of this photo:\n" + AUDIT_LEAK
    a = parse_image_audit(text)
    assert a.parsed and a.answer_overlay is True and a.keeps_image is False
    assert a.raw == text
    assert parse_image_audit(AUDIT_LEAK + "\nActually:\n" + AUDIT_EXAMPLE).keeps_image is False
    # the leaking audit first and a correction of the model's own after it: no first guess
    own_clean = AUDIT_EXAMPLE.replace("a tram stop", "a bus stop")
    c = parse_image_audit(AUDIT_LEAK + "\nActually:\n" + own_clean)
    assert not c.parsed and c.keeps_image is None and "conflicting" in c.reason
    # in a code fence and repeated in the prose, the same audit twice is one audit
    same = "```json\n" + AUDIT_LEAK + "\n```\nSo: " + AUDIT_LEAK
    b = parse_image_audit(same)
    assert b.parsed and b.answer_overlay is True and b.keeps_image is False


def test_image_audit_agreeing_audits_differing_only_in_wording_stay_parsed():
    """Two objects with the same decision fields (overlay, scene, quality, usable, glass, tourist) and other
    wording of ``why`` are one audit (the first is taken, as before; session 36: the first that is not the prompt's
    example verbatim, so here the model's own wording)."""
    other = AUDIT_EXAMPLE.replace("sharp street view with shopfronts and a tram stop", "clear street")
    a = parse_image_audit(AUDIT_EXAMPLE + "\n" + other)
    assert a.parsed and a.keeps_image is True and a.why == "clear street"
    own = other.replace('"quality": 4', '"quality": 5')
    b = parse_image_audit(own + "\n" + own.replace("clear street", "a clear street view"))
    assert b.parsed and b.quality == 5 and b.why == "clear street"


# --- referenceability: the prompt's example array repeated before the real ratings ----------------

def test_ref_batch_echoed_example_array_is_not_candidate_zeros_rating():
    """A rating answer that repeats the prompt's example array (idx 0: ok, familiarity 4, en "San Jose Municipal
    Rose Garden") before the real array was read as the example: candidate 0 got familiarity 4 and the example's
    English name, which becomes its hint name in the ladders ("I took this photo near San Jose Municipal Rose
    Garden" for a Paris site), while the real answer's rating of it was dropped. Now every array in the answer is
    read; an idx that two elements rate differently is left undecided (asked again), the others are taken. Since
    session 36 the prompt's example element itself is no reading at all, so candidate 0 gets the model's own rating
    (it was asked again from session 15 on)."""
    real = ('[{"idx": 0, "ok": false, "familiarity": 1, "zh": null, "en": "3rd arrondissement", "why": "admin area"}, '
            '{"idx": 1, "ok": true, "familiarity": 3, "zh": null, "en": "Place des Vosges", "why": "square"}]')
    out = parse_ref_batch("Like the example " + REF_EXAMPLE + " here are my ratings:\n" + real, 2)
    assert out is not None
    assert out[0]["familiarity"] == 1 and out[0]["name_en"] == "3rd arrondissement"  # never the example's rating
    assert out[1]["familiarity"] == 3 and out[1]["name_en"] == "Place des Vosges"
    # one array rating an idx twice with different values: undecided too (was: the first element won)
    twice = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 5}, {"idx": 0, "ok": false, "familiarity": 0}]', 1)
    assert twice == {}
    # the same rating twice (fenced and repeated) is one rating
    one = '[{"idx": 0, "ok": true, "familiarity": 2, "en": "Louvre"}]'
    again = parse_ref_batch("```json\n" + one + "\n```\n" + one, 1)
    assert again is not None and again[0]["familiarity"] == 2


def test_sensitive_batch_conflicting_elements_leave_the_candidate_unscreened():
    """The screening pass: an idx said sensitive and not sensitive (two arrays, or twice in one) was screened by
    the first element (a sensitive place could pass as not sensitive); now it is asked again."""
    text = '[{"idx": 0, "sensitive": false}] corrected: [{"idx": 0, "sensitive": true}, {"idx": 1, "sensitive": false}]'
    out = parse_sensitive_batch(text, 2)
    assert out is not None and 0 not in out and out[1]["sensitive"] is False


# --- a confidence written with a decimal comma --------------------------------------------------

def test_geoverify_decimal_comma_confidence_is_not_read_as_zero():
    """``{"verdict": "yes", "confidence": 0,85}`` (a decimal comma: no JSON) fell to the pattern reader, which read
    the digits before the comma: confidence 0.0 where the model stated 0.85, pulling down the report's median
    confidence on false acceptances and its share >= 0.8. A decimal comma is now an unusable confidence (None,
    rule ``confidence_invalid``), as the same text inside a JSON string (``"0,85"``) already was; the verdict
    stands."""
    for text in ('{"verdict": "yes", "confidence": 0,85}', "Verdict: yes\nConfidence: 0,85"):
        p = parse_verdict(text)
        assert p.ok and p.verdict == "yes"
        assert p.confidence is None, text
        assert "confidence_invalid" in p.rules
    # a list separator after the number is no decimal comma
    assert parse_verdict("verdict: no, confidence: 1, because the tram lines differ").confidence == 1.0
    assert parse_verdict('{"verdict": "yes", "confidence": "0,85"}').confidence is None  # unchanged


def test_geohint_decimal_comma_confidence_is_not_read_as_zero():
    """The GeoHint pattern reader (no JSON object: ``0,85`` breaks it) read ``"confidence_area": 0,85`` as 0.0;
    now it is no confidence (None), the places still read."""
    p = parse_answer('{"city": "Paris", "area": "Le Marais", "confidence_area": 0,85, "confidence_building": 0.2}')
    assert p.ok and p.city == "Paris" and p.area == "Le Marais"
    assert p.confidence_area is None
    assert p.confidence_building == 0.2
    assert parse_answer('{"city": "Paris", "confidence": 0,7}').confidence_area is None


# --- a huge looping answer read by GeoHint's pattern fallback --------------------------------------

@pytest.mark.timeout(60)
def test_geohint_pattern_fallback_over_a_long_looping_answer_reads_linearly():
    """An answer with no usable JSON object and a long run of ``"key": "value"`` pairs (a model looping until a
    large output limit) went to the pattern fallback, which tested every pattern match against every JSON string
    span of the text: quadratic, 5 s at 40,000 characters and minutes at 200,000 (a stage worker stalled on one
    answer). The span test is now a binary search; the timeout is a hang guard, not a benchmark."""
    unit = '"clue": "tram", '
    text = 'city: "Lisbon", ' + unit * (200_000 // len(unit))
    ans = parse_answer(text)
    assert ans.ok and ans.method == "regex" and ans.city == "Lisbon"
    assert ans.raw == text


def test_geohint_pattern_fallback_clue_starting_like_a_field_is_no_field():
    """The pattern fallback skipped a ``key: value`` pattern starting strictly inside a JSON string, but a clue whose
    text starts like a field (``["city: 'Lyon'"]``) matched from the string's opening quote, read as a quoted key:
    the city was "Lyon", taken from the clue, ahead of the answer's own ``"city": "Paris"`` (the object is malformed,
    a comma missing, so the fallback reads it)."""
    ans = parse_answer('{"clues": ["city: \'Lyon\'"], "city": "Paris" "area": "Belem"}')
    assert ans.ok and ans.method == "regex"
    assert (ans.city, ans.area) == ("Paris", "Belem")
    # a real quoted key is still read
    assert parse_answer('"city": "Porto" "area": "Ribeira"').city == "Porto"


# --- a recorded answer holding a lone surrogate escape (an emoji cut in half) ------------------------

def _surrogate_release(release_dir, tmp_path):
    """A copy of the release sample whose first GeoVerify raw answer ends with half an emoji, written as Python's
    ``json.dumps`` writes it (``"\\ud83d"``, default ``ensure_ascii``); returns (folder, that record)."""
    import json
    import shutil

    folder = tmp_path / "release"
    shutil.copytree(release_dir, folder)
    path = folder / "verify_raw_sample.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    rec = json.loads(lines[0])
    rec["raw"] = rec["raw"] + " \ud83d"
    lines[0] = json.dumps(rec)
    assert "\\ud83d" in lines[0]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder, rec


def test_release_raw_answer_with_a_lone_surrogate_escape_is_imported(release_dir, tmp_path):
    """A GeoVerify raw answer in the release whose text ends with half an emoji (a lone UTF-16 surrogate escape,
    which Python's json module writes and reads) was dropped by the importer as "invalid JSON: no low surrogate in
    string" (orjson refuses it): the model's answer was missing from the replayed campaign (336 -> 335 responses).
    It is read as ``json.loads`` reads it, the lone half replaced by U+FFFD (the providers' rule for such an API
    body), so the answer and its verdict are kept."""
    from geoagent.data.importer import import_release

    folder, rec = _surrogate_release(release_dir, tmp_path)
    rel = import_release(folder)
    assert len(rel.raw) == 336
    assert not [i for i in rel.report.issues if "surrogate" in i.reason]
    got = next(r for r in rel.raw if r.trial_id == rec["trial_id"] and r.model == rec["model"])
    assert got.raw.endswith(" \ufffd")
    got.raw.encode("utf-8")  # storable
    assert parse_verdict(got.raw).verdict == parse_verdict(rec["raw"][:-2]).verdict


def test_replay_file_with_a_lone_surrogate_escape_replays(release_dir, tmp_path):
    """The replay provider refused the whole release file at start ("not valid JSON") for one such line; it now
    replays it, the lone half as U+FFFD, and every other record as before."""
    import asyncio

    from geoagent.providers import ModelRequest, ProviderSettings, make_provider

    folder, rec = _surrogate_release(release_dir, tmp_path)
    prov = make_provider(ProviderSettings(kind="replay", model="any", replay_path=str(folder / "verify_raw_sample.jsonl"),
                                          replay_key_field="replay_key", replay_key_fields=("trial_id", "model"),
                                          replay_text_field="raw", replay_usage_field="usage"))
    req = ModelRequest(provider="replay", model=rec["model"], prompt="(not used)",
                       meta={"replay_key": [rec["trial_id"], rec["model"]]})
    out = asyncio.run(prov.generate(req))
    assert out.text == rec["raw"][:-1] + "\ufffd"
    out.text.encode("utf-8")


# --- GeoHint's pattern fallback keeps a value's escapes -------------------------------------------

def test_geohint_pattern_fallback_decodes_escapes_in_values():
    """An answer the JSON reader cannot read (a comma missing) is read by the pattern fallback, which kept each
    value's backslash escapes as written: the city ``S\\u00e3o Paulo`` (an ``ensure_ascii`` writer's São Paulo)
    went to the geocoders with a literal backslash-u and resolved to nothing, ``The \\"Old\\" Mill`` and
    ``Xi\\'an`` kept their backslashes. The values are now decoded as the JSON reader decodes a string."""
    a = parse_answer('{"city": "S\\u00e3o Paulo" "area": "Liberdade"}')
    assert a.method == "regex" and a.city == "São Paulo" and a.area == "Liberdade"
    b = parse_answer('{"city": "Paris" "building": "The \\"Old\\" Mill \\ud83d\\udccd"}')
    assert b.method == "regex" and b.building == 'The "Old" Mill \U0001f4cd'
    c = parse_answer("{'city': 'Xi\\'an' 'area': 'Beilin'}")
    assert c.method == "regex" and c.city == "Xi'an"
    d = parse_answer('{"city": "Oslo" "area": "half \\ud83d"}')  # a lone half: U+FFFD, storable
    assert d.area == "half \ufffd"
