"""Crawl auditors: the prompt's example answer and answers cut off by ``max_output_tokens`` (session 36, crawl36).

Before:

* an image audit that repeated the prompt's example (usable, street, quality 4) and then gave its own audit, cut off
  by the token limit, reporting a dashcam overlay naming the street, kept the image (the cut-off audit was never
  read, so nothing conflicted with the example): ``parsed True, keeps_image True, answer_overlay False``;
* a referenceability answer that was the example array alone rated candidate 0 with the example's familiarity 4,
  English name "San Jose Municipal Rose Garden" and Chinese name "<Chinese name>", which became its hint name;
  and the example followed by the model's own array, cut off, whose idx 0 said ``ok false, familiarity 1``, did the
  same.
"""

from __future__ import annotations

import pytest

from geoagent.crawl.image_audit import load_prompt, parse_image_audit
from geoagent.crawl.llmjson import prompt_example
from geoagent.crawl.referenceability import parse_ref_batch, parse_sensitive_batch

AUDIT_EXAMPLE = ('{"answer_overlay": false, "overlay_text": "", "scene_type": "street", "through_glass": false, '
                 '"tourist_infrastructure": false, "quality": 4, "usable": true, '
                 '"why": "sharp street view with shopfronts and a tram stop"}')
OWN_LEAK_CUT = ('{"answer_overlay": true, "overlay_text": "GPS 45.0702N 7.6869E Via Roma", "scene_type": "street", '
                '"through_glass": true, "tourist_infrastructure": false, "quality": 3, "usable": false, '
                '"why": "dashcam overlay names the str')
REF_EXAMPLE = ('[{"idx": 0, "ok": true, "familiarity": 4, "zh": "<Chinese name>", '
               '"en": "San Jose Municipal Rose Garden", "why": "well-known garden people meet at"}]')


def test_the_packaged_templates_show_the_examples_these_tests_use():
    import orjson

    assert prompt_example(load_prompt("crawl_image_audit.txt"), dict, lambda o: "quality" in o) == orjson.loads(AUDIT_EXAMPLE)
    assert prompt_example(load_prompt("crawl_referenceability.txt"), list, lambda a: True) == orjson.loads(REF_EXAMPLE)


def test_image_audit_example_then_own_audit_cut_off_is_unparsed():
    a = parse_image_audit("Format example: " + AUDIT_EXAMPLE + "\nMy audit:\n" + OWN_LEAK_CUT)
    assert not a.parsed and a.keeps_image is None and "cut off" in a.reason
    assert a.raw.endswith("names the str")  # the verbatim answer is kept


def test_image_audit_example_alone_is_unparsed_and_a_prompt_of_ones_own_is_compared():
    a = parse_image_audit(AUDIT_EXAMPLE)
    assert not a.parsed and "example" in a.reason
    # fenced, with prose around it: the same
    assert not parse_image_audit("```json\n" + AUDIT_EXAMPLE + "\n```\nDone.").parsed
    # an edited template shows another example: that one is compared, and the packaged one is an audit like any
    other = AUDIT_EXAMPLE.replace('"quality": 4', '"quality": 5')
    prompt = "Audit the photo. Example:\n" + other
    assert not parse_image_audit(other, prompt).parsed
    b = parse_image_audit(AUDIT_EXAMPLE, prompt)
    assert b.parsed and b.quality == 4 and b.keeps_image is True


def test_image_audit_complete_answers_are_read_as_before():
    own = AUDIT_EXAMPLE.replace('"quality": 4', '"quality": 3').replace("sharp street view", "street view")
    a = parse_image_audit(own)
    assert a.parsed and a.quality == 3 and a.keeps_image is True
    # the example, then a complete own audit that agrees with it: the model's own is read
    b = parse_image_audit("Example: " + AUDIT_EXAMPLE + "\nMine: " + own.replace('"quality": 3', '"quality": 4'))
    assert b.parsed and b.why.startswith("street view")
    # a complete audit followed by prose cut off (no object cut off): read
    c = parse_image_audit(own + "\nThe photo shows a tram st")
    assert c.parsed and c.quality == 3
    # the example, then a complete own audit reporting a leak: the own audit is read (the example is none)
    leak = OWN_LEAK_CUT + 'eet"}'
    e = parse_image_audit("Example: " + AUDIT_EXAMPLE + "\nMine: " + leak)
    assert e.parsed and e.answer_overlay is True and e.keeps_image is False
    d = parse_image_audit(leak)
    assert d.parsed and d.answer_overlay is True and d.keeps_image is False


def test_image_audit_a_cut_off_copy_is_read_as_far_as_it_goes():
    """review36 #8: an audit followed by a cut-off copy that agrees with it so far was unparsed; it is read now, and
    a cut-off copy that already reads otherwise still makes the answer conflicting."""
    own = AUDIT_EXAMPLE.replace('"quality": 4', '"quality": 3').replace("sharp street view", "street view")
    agrees = parse_image_audit(own + "\nAgain: " + own[:120])
    assert agrees.parsed and agrees.quality == 3 and agrees.keeps_image is True
    differs = parse_image_audit(own + "\nAgain: " + own.replace('"answer_overlay": false', '"answer_overlay": true')[:60])
    assert not differs.parsed and "cut off" in differs.reason
    prose = parse_image_audit(own + '\nI would say {"quality": 3, "usab')
    assert prose.parsed and prose.quality == 3


def test_ref_example_alone_rates_nothing():
    assert parse_ref_batch(REF_EXAMPLE, 40) == {}


def test_ref_example_then_own_array_without_idx_0():
    own = '[{"idx": 1, "ok": true, "familiarity": 2, "en": "Place 1"}, {"idx": 2, "ok": true, "familiarity": 2, "en": "Place 2"}]'
    out = parse_ref_batch("Following the format:\n" + REF_EXAMPLE + "\nMy ratings:\n" + own, 3)
    assert 0 not in out and out[1]["name_en"] == "Place 1" and out[2]["familiarity"] == 2


def test_ref_example_then_own_array_cut_off():
    cut = ('[{"idx": 0, "ok": false, "familiarity": 1, "en": "Porta Susa"}, '
           '{"idx": 1, "ok": true, "familiarity": 3, "en": "Pla')
    assert parse_ref_batch("Example given: " + REF_EXAMPLE + "\nAnswer:\n" + cut, 40) == {}


def test_ref_complete_array_then_a_cut_off_repeat():
    full = ('[{"idx": 0, "ok": true, "familiarity": 3, "en": "Porta Susa"}, '
            '{"idx": 1, "ok": true, "familiarity": 2, "en": "Piazza Statuto"}]')
    # the repeat agrees on idx 0 and is cut inside idx 1, agreeing so far: both stand (review36 #8)
    out = parse_ref_batch(full + "\nAgain: " + full[:-25], 2)
    assert set(out) == {0, 1} and out[0]["familiarity"] == 3
    # a repeat that reads idx 0 otherwise: asked again
    other = full.replace('"familiarity": 3', '"familiarity": 5')
    assert 0 not in parse_ref_batch(full + "\n" + other[:-10], 2)


@pytest.mark.parametrize("zh", ["<Chinese name>", " <中文名> ", "<>"])
def test_ref_placeholder_names_are_no_names(zh):
    out = parse_ref_batch(f'[{{"idx": 0, "ok": true, "familiarity": 3, "zh": "{zh}", "en": "<English name>"}}]', 1)
    assert out[0]["name_zh"] is None and out[0]["name_en"] is None and out[0]["familiarity"] == 3


def test_sensitive_screen_keeps_a_real_answer_in_the_examples_words():
    """The screen's example (idx 0, not sensitive, "ordinary railway station") is not set aside: a real station may
    be screened in those words, and a screen set aside leaves it unscreened, never drawn."""
    ex = '[{"idx": 0, "sensitive": false, "why": "ordinary railway station"}]'
    assert parse_sensitive_batch(ex, 1) == {0: {"sensitive": False, "why": "ordinary railway station"}}
    # a cut-off repeat reading idx 0 otherwise is still a disagreement
    assert parse_sensitive_batch(ex + '\n[{"idx": 0, "sensitive": true, "why": "milit', 1) == {}


def test_ref_a_cut_off_restatement_that_agrees_so_far_keeps_the_ratings():
    """review36 #8: a complete array followed by a cut-off restatement dropped every idx the restatement mentioned;
    now only an idx it reads otherwise (as far as it goes) is asked again."""
    full = ('[{"idx": 0, "ok": true, "familiarity": 3, "en": "Porta Susa"}, '
            '{"idx": 1, "ok": true, "familiarity": 2, "en": "Piazza Statuto"}]')
    cut = full[:full.index("Piazza") + 4]  # ... "en": "Piaz
    out = parse_ref_batch(full + "\nAgain: " + cut, 2)
    assert set(out) == {0, 1} and out[1]["name_en"] == "Piazza Statuto"
    other = full.replace('"familiarity": 2', '"familiarity": 4')
    assert set(parse_ref_batch(full + "\nAgain: " + other[:other.index("Piazza")], 2)) == {0}
