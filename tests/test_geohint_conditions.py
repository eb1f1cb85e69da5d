"""GeoHint conditions: templates in our own words, faithful to the protocol (issue 4 point 1)."""

from __future__ import annotations

import pytest

from geoagent.geohint.conditions import (
    DEFAULT_CONDITIONS,
    PromptBook,
    conditions_from_config,
    get_condition,
    render_prompt,
)
from geoagent.geohint.parse import parse_answer


def test_context_sentence_is_prepended_with_trailing_space():
    p = render_prompt("forced", "Harajuku Station")
    assert p.startswith("I took this photo near Harajuku Station. ")
    base = render_prompt("baseline")
    assert "took this photo" not in base
    # the context conditions differ from the baseline only by the prefix sentence
    assert p[len("I took this photo near Harajuku Station. "):] == base


def test_forced_warned_checklist_and_permissive_contents():
    forced = render_prompt("forced", "X")
    warned = render_prompt("forced_warn", "X")
    chain = render_prompt("forced_chain", "X")
    v1 = render_prompt("v1", "X")
    for key in ('"city"', '"area"', '"building"', '"confidence_area"', '"confidence_building"', '"clues"'):
        assert key in forced
    assert "'unknown' is not an accepted answer" in forced
    assert warned.startswith(forced.rstrip("\n")) and "could be wrong" in warned
    assert chain.startswith(forced.rstrip("\n"))
    for word in ("Infrastructure", "Vegetation", "Architecture", "Script", "Terrain", '"evidence"', '"not visible"'):
        assert word in chain
    assert "do NOT transcribe" in chain  # script only, never the text itself
    assert '"place"' in v1 and "or unknown" in v1 and "not an accepted" not in v1


def test_templates_are_our_own_words(release_dir):
    # Sentences of the paper's appendix A.1 must not appear verbatim (facts carry over, sentences do not).
    paper = [
        "Look at the image carefully and infer.",
        "Output only JSON, no other text",
        "Commit to a specific name even when unsure",
        "Base your answer primarily on what you actually see in the image",
        "Before answering, examine the image for the following categories of geographic evidence",
        "Report the script only, NOT what the text says.",
    ]
    text = "".join(render_prompt(c, "X" if get_condition(c).uses_context else None) for c in DEFAULT_CONDITIONS)
    for sentence in paper:
        assert sentence not in text


def test_config_order_aliases_and_errors():
    conds = conditions_from_config({"geohint": {"conditions": ["checklist", "baseline", "warned", "context"]}})
    assert [c.name for c in conds] == ["forced_chain", "baseline", "forced_warn", "forced"]
    assert [c.name for c in conditions_from_config({})] == list(DEFAULT_CONDITIONS)
    with pytest.raises(KeyError, match=r"geohint.conditions\[1\]"):
        conditions_from_config({"geohint": {"conditions": ["forced", "nope"]}})
    with pytest.raises(ValueError, match="twice"):
        conditions_from_config({"geohint": {"conditions": ["forced", "context"]}})
    with pytest.raises(ValueError, match="needs a reference point"):
        render_prompt("forced")
    with pytest.raises(ValueError, match="takes no reference point"):
        render_prompt("baseline", "X")


def test_edited_templates_are_used(tmp_path):
    book = PromptBook()
    for name in ("geohint_context.txt", "geohint_forced.txt", "geohint_warn.txt", "geohint_chain.txt", "geohint_v1.txt"):
        (tmp_path / name).write_text(book.text(name), encoding="utf-8")
    (tmp_path / "geohint_context.txt").write_text("Snapped near ${reference_point}! ", encoding="utf-8")
    assert render_prompt("forced", "Roppongi", prompts_dir=tmp_path).startswith("Snapped near Roppongi! ")
    with pytest.raises(FileNotFoundError, match="geohint_forced.txt"):
        PromptBook(tmp_path / "missing").render("baseline")


def test_schema_example_in_prompt_is_what_the_parser_reads():
    # an answer shaped exactly like the forced schema parses with every field
    ans = parse_answer('{"city": "Tokyo", "area": "Shibuya", "building": "109", "confidence_area": 0.7, '
                       '"confidence_building": 0.4, "clues": ["sign"], "evidence": {"infrastructure": "not visible", '
                       '"vegetation": "x", "architecture": "y", "script": "CJK", "terrain": "flat"}}')
    assert ans.ok and ans.evidence_not_visible()["infrastructure"] and not ans.evidence_not_visible()["script"]
