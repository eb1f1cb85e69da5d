"""Answer parsers, session 40 (walk39 #4a-c, geohint39 #2).

Before:
* #4a: a short preamble before the reasoning ("Sure. <think>...</think> {...}") left the reasoning in: its draft
  naming Lyon made a GeoHint answer "conflicting answers", its draft "yes" a GeoVerify one;
* #4b: Magistral's ``[THINK]...[/THINK]`` was not recognised at all (the same conflicts);
* #4c: a reasoning block the model never closed, its text ending in the JSON answer, with the provider saying the
  model finished (``stop``, ``end_turn``, ``STOP``), was no answer; the finish reason did not reach the parsers;
* geohint39 #2: "Springfield, IL" then "Springfield, Illinois" was two places ("conflicting answers", a miss).

The texts below are written as the models write them (Qwen3 / DeepSeek-R1 style ``<think>`` through an
OpenAI-compatible server, Magistral ``[THINK]``), with the tag mentioned in a JSON string or in prose after the answer,
and cut off at the token limit, as negative cases. The raw text is always kept as it came.
"""

from __future__ import annotations

import json

import pytest

from geoagent.geohint.parse import ANSWER_PARSER_VERSION, parse_answer, same_place_text
from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, parse_verdict
from geoagent.llmjson import MAX_PREAMBLE_CHARS, without_reasoning
from geoagent.scoring.truncation import is_finished
from _one_site_release import one_site_release

PARIS = ('```json\n{"city": "Paris", "area": "Le Marais", "building": "Hôtel de Ville", "confidence_area": 0.6, '
         '"confidence_building": 0.3, "clues": ["Haussmann facades", "French street signs"]}\n```')
LYON_DRAFT = ("The signage is French and the quay looks like the Saône, so maybe\n"
              '{"city": "Lyon", "area": "Presqu\'île"}\n'
              "but the cream stone facades and the zinc roofs are Haussmann, and the town hall's roofline matches Paris.")
VERIFY_DRAFT = ('The candidate is the Old Mill. A first guess: {"verdict": "yes", "confidence": 0.9}. But the mill in '
                "the photo has a brick chimney and the candidate's is stone, so it is not the same building.")
VERIFY_NO = '{"verdict": "no", "confidence": 0.7, "evidence": ["brick chimney, the candidate\'s is stone"]}'


# --- walk39 #4a: a short preamble before the reasoning ---------------------------------------------------------
@pytest.mark.parametrize("preamble", ["Sure.", "Okay, let me look at the photo carefully.", "Sure!\n\n"])
def test_reasoning_after_a_short_preamble_is_cut(preamble):
    text = f"{preamble} <think>\n{LYON_DRAFT}\n</think>\n\n{PARIS}"
    a = parse_answer(text)
    assert (a.ok, a.city, a.area, a.error) == (True, "Paris", "Le Marais", None), a
    assert a.raw == text
    v = parse_verdict(f"{preamble}\n<think>\n{VERIFY_DRAFT}\n</think>\n{VERIFY_NO}")
    assert (v.ok, v.verdict, v.confidence) == (True, "no", 0.7), v


def test_the_preamble_is_kept_so_a_verdict_in_it_still_counts():
    """A "Yes." before the reasoning is not dropped with it: against the final "no" it is still a conflict."""
    assert without_reasoning("Sure. <think>x</think>\n{}") == "Sure. \n{}"
    v = parse_verdict(f"Yes.\n<think>\n{VERIFY_DRAFT}\n</think>\n{VERIFY_NO}")
    assert not v.ok and "conflicting" in v.reason, v


@pytest.mark.parametrize("text", [
    # the tag inside a string of the answer's JSON (closed, after a short text): the answer is the whole text
    '{"city": "Paris", "area": "Le Marais", "clues": ["graffiti reading <think> ... </think> on a shutter"]}',
    "Answer: {'city': 'Paris', 'area': 'Le Marais', 'clues': ['a sticker: [THINK] big [/THINK]']}",
    # prose after the answer mentions the tags
    '```json\n{"city": "Paris", "area": "Le Marais"}\n```\nI answered directly, without a <think> ... </think> block.',
    '{"city": "Paris", "area": "Le Marais"}\nNote: no [THINK] reasoning [/THINK] was needed.',
])
def test_a_tag_in_a_json_string_or_in_prose_after_the_answer_is_text(text):
    assert without_reasoning(text, finished=True) is text
    a = parse_answer(text, "stop")
    assert (a.ok, a.city, a.area, a.truncated) == (True, "Paris", "Le Marais", False), a


def test_a_long_text_before_a_tag_is_no_preamble():
    """An answer in prose longer than a preamble that then mentions a closed tag pair keeps every word."""
    prose = "No. " + "The candidate mill has a stone chimney; the one in the photo is brick. " * 4
    assert len(prose) > MAX_PREAMBLE_CHARS
    text = prose + "(I kept my notes out: <think></think>.)"
    assert without_reasoning(text) is text
    v = parse_verdict(text)
    assert (v.ok, v.verdict) == (True, "no")


def test_an_unclosed_opener_after_a_preamble_is_text():
    """Prose that mentions an opener is not the start of reasoning cut off (review39b #1 keeps holding)."""
    text = 'I will not use <thinking> here. {"city": "Paris", "area": "Le Marais"}'
    assert without_reasoning(text, finished=True) is text
    assert parse_answer(text, "stop").city == "Paris"


# --- walk39 #4b: Magistral's [THINK] ... [/THINK] -------------------------------------------------------------
def test_magistral_reasoning_is_cut():
    text = f"[THINK]\n{LYON_DRAFT}\n[/THINK]\n\n{PARIS}"
    a = parse_answer(text, "stop")
    assert (a.ok, a.city, a.area) == (True, "Paris", "Le Marais"), a
    assert a.raw == text
    v = parse_verdict(f"[THINK]{VERIFY_DRAFT}[/THINK]\n\n{VERIFY_NO}", "stop")
    assert (v.ok, v.verdict) == (True, "no"), v
    # the same rules as <think>: after a preamble, the template's closer first, any case
    assert parse_answer(f"Sure. [THINK]{LYON_DRAFT}[/THINK]{PARIS}").city == "Paris"
    assert parse_answer(f"{LYON_DRAFT}\n[/THINK]\n{PARIS}").city == "Paris"
    assert parse_answer(f"[think]{LYON_DRAFT}[/think]{PARIS}").city == "Paris"


def test_a_block_is_closed_by_its_own_family():
    """A <think> block that mentions Magistral's tags (or the reverse) is not closed or nested by them."""
    text = f"<think>Magistral would write [THINK] here. {LYON_DRAFT}</think>\n{PARIS}"
    assert parse_answer(text).city == "Paris"
    assert without_reasoning("[THINK]a </think> b[/THINK]c") == "c"


def test_magistral_reasoning_cut_off_is_no_answer():
    text = f"[THINK]\n{LYON_DRAFT}\nSo the answer is {{\"city\": \"Par"
    a = parse_answer(text, "length")
    assert not a.ok and "no answer after the model's reasoning" in a.error and a.raw == text


# --- walk39 #4c: an unclosed block the model finished itself --------------------------------------------------
UNCLOSED = f"<think>\nOkay, the user wants the location of this street photo.\n{LYON_DRAFT}\nFinal answer:\n{PARIS}\n"


@pytest.mark.parametrize("finish", ["stop", "end_turn", "STOP"])
def test_an_unclosed_block_ending_in_the_answer_of_a_finished_output_reads_that_answer(finish):
    assert is_finished(finish)
    a = parse_answer(UNCLOSED, finish)
    assert (a.ok, a.city, a.area, a.method) == (True, "Paris", "Le Marais", "json"), a
    assert a.raw == UNCLOSED
    text = f"<think>\n{VERIFY_DRAFT}\nSo:\n{VERIFY_NO}"
    v = parse_verdict(text, finish)
    assert (v.ok, v.verdict, v.confidence, v.raw) == (True, "no", 0.7, text), v


@pytest.mark.parametrize("finish", ["length", "max_tokens", "MAX_TOKENS", None, "content_filter", "stop_sequence"])
def test_an_unclosed_block_of_a_cut_off_or_unknown_output_stays_no_answer(finish):
    """Truncated (or not known to be whole): the object at the end may be a draft the model would have revised."""
    a = parse_answer(UNCLOSED, finish)
    assert not a.ok and "no answer after the model's reasoning" in a.error, a
    v = parse_verdict(f"<think>\n{VERIFY_DRAFT}\nSo:\n{VERIFY_NO}", finish)
    assert not v.ok and "reasoning" in v.reason, v


@pytest.mark.parametrize("text", [
    f"<think>\n{LYON_DRAFT}\n" + '{"city": "Paris"} is what I will answer once I have checked the bridge',  # prose last
    f"<think>\n{LYON_DRAFT}\n" + '{"city": "Paris", "area": "Le Mar',  # the object never closed
    f"<think>\n{LYON_DRAFT}",  # no object at the end at all
    "<think>\n" + "{" * 200,
])
def test_a_finished_unclosed_block_not_ending_in_a_complete_object_is_no_answer(text):
    a = parse_answer(text, "stop")
    assert not a.ok and "no answer after the model's reasoning" in a.error, a


def test_the_last_object_wins_over_the_objects_nested_in_it_and_the_drafts_before_it():
    text = '<think>draft {"verdict": "yes"}\nfinal:\n{"verdict": "no", "checks": [{"verdict": "yes"}]}'
    assert without_reasoning(text, finished=True) == '{"verdict": "no", "checks": [{"verdict": "yes"}]}'
    v = parse_verdict(text, "end_turn")
    assert (v.ok, v.verdict) == (True, "no"), v
    # read as leniently as any answer: a percent, single quotes, a trailing comma
    v = parse_verdict("<think>hmm, the chimney is brick.\n{'verdict': 'no', 'confidence': 70%,}", "stop")
    assert (v.ok, v.verdict, v.confidence) == (True, "no", 0.7), v


def test_the_new_rules_stay_cheap_on_hostile_text():
    """The preamble's closer search and the search for a final object are bounded (review39b #2's rule)."""
    import time

    t0 = time.perf_counter()
    for text in ("Sure. " + "<think>" * 30000 + "</think>" * 29999 + "{}", "<think>" + '{"a": ' * 50000 + "1" + "}" * 50000,
                 "<think>" + "{" * 200000 + "}", "<think>" + "x{}" * 100000 + "}", "ok [THINK]" * 60000):
        without_reasoning(text, finished=True)
    assert time.perf_counter() - t0 < 5.0


def test_the_finish_reason_reaches_the_geohint_raw_importer(tmp_path):
    """The release importer passes each line's usage.stop_reason: end_turn reads the answer, max_tokens does not."""
    from geoagent.geohint.raw_import import import_raw

    root = one_site_release(tmp_path)

    def line(stop: str, repeat: int) -> str:
        return json.dumps({"path": "streetview\\s1\\111.jpg", "location": "s1", "condition": "day", "hour": 12,
                           "model": "m", "lang": "en", "repeat": repeat, "context": "none", "schema": "forced_chain",
                           "ts": 1.0, "raw": UNCLOSED, "error": None,
                           "usage": {"input_tokens": 10, "output_tokens": 900, "stop_reason": stop}})

    (root / "forced_chain_raw.jsonl").write_text(line("end_turn", 0) + "\n" + line("max_tokens", 1) + "\n",
                                                 encoding="utf-8")
    rows, _ = import_raw(root)
    assert [(r.parse_ok, r.city, r.extra["finish_reason"]) for r in rows] == [
        (True, "Paris", "end_turn"), (False, None, "max_tokens")]
    assert all(r.extra["raw"] == UNCLOSED and r.extra["parser_version"] == ANSWER_PARSER_VERSION for r in rows)


def test_the_finish_reason_reaches_the_geoverify_scorer(tmp_path):
    """An answer queued by parser 9 is parsed again by the scorer with the finish reason it carries."""
    import asyncio

    from geoagent.geoverify.stages import GeoVerifyScorerStage
    from geoagent.providers.base import ModelResponse, Usage
    from geoagent.runtime.queue import Task
    from geoagent.runtime.stage import StageContext
    from geoagent.runtime.store import open_campaign_state

    trial = {"trial_id": "img1|main|Old Mill", "image_id": "img1", "site": "s1", "arm": "main", "band": "signal",
             "truth": "yes", "cand": "Old Mill", "d_km": 0.05, "referenceability": 3.0}
    text = f"<think>\n{VERIFY_DRAFT}\nSo:\n{VERIFY_NO}\n"

    async def main_():
        with open_campaign_state("p40", root=tmp_path) as st:
            st.store.put("k", {"model": "m"}, ModelResponse(text=text, usage=Usage(100, 900), latency_s=0.1,
                                                            finish_reason="stop"), None)
            ctx = StageContext(campaign="p40", services={"store": st.store})
            old = {"model": "m", "request_key": "k", "trial": trial, "parser_version": 9,
                   "parsed": parse_verdict(text).to_json()}
            stage = GeoVerifyScorerStage()
            (_, done), = await stage.handle(Task("a", {**old, "finish_reason": "stop"}, 0, "l1"), ctx)
            (_, cut), = await stage.handle(Task("b", {**old, "finish_reason": "length"}, 0, "l2"), ctx)
            return done, cut

    done, cut = asyncio.run(main_())
    assert (done["parse_ok"], done["verdict"], done["parser_version"]) == (True, "no", VERDICT_PARSER_VERSION)
    assert cut["parse_ok"] is False and cut["verdict"] is None


# --- geohint39 #2 (rest): a qualifier in another spelling ------------------------------------------------------
@pytest.mark.parametrize("a, b, same", [
    ("Springfield, IL", "Springfield, Illinois", True),
    ("Austin, TX, USA", "Austin, Texas, United States", True),
    ("Washington, D.C.", "Washington, DC", True),
    ("New Orleans, LA", "New Orleans, Louisiana", True),
    ("Toronto, ON", "Toronto, Ontario", True),
    ("Paris, France", "Paris, Ile-de-France, France", True),  # one's qualifiers among the other's
    ("Springfield, IL", "Springfield, MO", False),
    ("Springfield, Illinois", "Springfield, Missouri", False),
    ("Delhi, IN", "Delhi, India", False),  # a two-letter qualifier is a state code, never a country's
    ("IL", "Illinois", False),  # the name itself is never read as an abbreviation
    ("Paris", "Paris, Texas", True),  # bare vs qualified: one answer (the docstring says so)
    ("Paris, France", "Paris, Texas", False),
])
def test_qualifiers_in_other_spellings_name_one_place(a, b, same):
    assert same_place_text(a, b) is same and same_place_text(b, a) is same
    assert same_place_text(a.casefold(), b.casefold()) is same  # the clash checks compare case-folded texts


def test_an_answer_repeating_its_city_with_the_state_spelt_out_is_one_answer():
    text = ('```json\n{"city": "Springfield, IL", "area": "Downtown", "building": "Old State Capitol", '
            '"confidence_area": 0.5, "confidence_building": 0.4, "clues": ["Greek Revival dome"]}\n```\n'
            'Summary: {"city": "Springfield, Illinois", "building": "Old State Capitol"}')
    a = parse_answer(text, "stop")
    assert (a.ok, a.city, a.building, a.error) == (True, "Springfield, IL", "Old State Capitol", None), a
    a = parse_answer('{"city": "Springfield, IL", "City": "Springfield, Illinois", "area": "Downtown"}')
    assert (a.ok, a.city) == (True, "Springfield, IL"), a
    a = parse_answer('{"city": "Springfield, IL"} or rather {"city": "Springfield, MO"}')
    assert not a.ok and "conflicting answers" in a.error, a


def test_the_docstring_says_a_bare_name_agrees_with_any_qualified_one():
    assert '"Paris" and "Paris, Texas" read as\n    one answer' in same_place_text.__doc__


# --- the release's raw responses parse as before ---------------------------------------------------------------
def test_the_release_raw_responses_are_read_as_before(release_dir):
    """All 343 raw rows of the release samples (336 GeoVerify, 7 forced_chain) hold no reasoning: the new rules leave
    every text as it is, with or without its recorded finish reason, and every GeoVerify answer still parses."""
    rows = []
    for name in ("verify_raw_sample.jsonl", "forced_chain_raw_sample.jsonl"):
        rows += [(name, json.loads(line)) for line in (release_dir / name).read_text(encoding="utf-8").splitlines()
                 if line.strip()]
    assert len(rows) == 343
    for name, r in rows:
        raw, stop = r["raw"], (r.get("usage") or {}).get("stop_reason")
        assert without_reasoning(raw, finished=True) is raw
        parse = parse_verdict if name.startswith("verify") else parse_answer
        assert parse(raw, stop).to_json() == parse(raw).to_json()
        if parse is parse_verdict:
            assert parse(raw, stop).ok


def test_versions_name_the_change():
    assert ANSWER_PARSER_VERSION >= 5 and VERDICT_PARSER_VERSION >= 10
