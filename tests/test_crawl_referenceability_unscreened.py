"""A candidate whose contentious-name screen failed is unscreened and enters no ladder (session 19; adversarial
review break19, finding 2).

Seed 000 Sec. 3.3, "Exclusion of contentious names": a separate pass removes flagged names (a dataset policy). When
the screen's answer for a candidate could not be read even when asked alone, the auditor logged ``sensitive: null``
with an error and never asked again, but built the candidate with ``sensitive=bool(None) == False``: it was drawn
into the ladder exactly like a candidate the screen cleared, and nothing counted it. A failed rating, by contrast,
is dropped: the screen failed open, the rating closed. Now ``RatedCandidate.sensitive`` is None for it, no ladder
draws it, and the crawl summary and ``run.py status`` count it (``unscreened_lines``). A text-only provider double
in the style of ``tests/test_crawl_referenceability.py``; nothing mocks a function.
"""

from __future__ import annotations

import asyncio
import re

import orjson

from geoagent.crawl.ladder import build_ladder, eligible_candidates
from geoagent.crawl.referenceability import (RefCandidate, ReferenceabilityAuditor, unscreened_count,
                                             unscreened_lines)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage


class ScreenCutShort(Provider):
    """Rates every candidate (ok, referenceability 4); answers the contentious-name screen with a cut-off array
    for the candidates named in ``garble`` (a batch holding one of them is cut short) and cleanly otherwise."""

    kind = "scripted-test"
    paid = False

    def __init__(self, garble: set[str]) -> None:
        self.garble = garble

    async def generate(self, request: ModelRequest) -> ModelResponse:
        body = request.prompt.split("Candidates", 1)[-1] if "Candidates" in request.prompt else request.prompt
        items = re.findall(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \(([0-9.]+) km\))?$", body, re.M)
        if "CONTENTIOUS" in request.prompt:
            if any(lab in self.garble for _, lab, _ in items):
                return ModelResponse(text='[{"idx": 0, "sensitive": tr', usage=Usage(10, 10))  # cut short
            arr = [{"idx": int(i), "sensitive": False, "why": "ordinary place"} for i, _, _ in items]
            return ModelResponse(text=orjson.dumps(arr).decode(), usage=Usage(10, 10))
        arr = [{"idx": int(i), "ok": True, "familiarity": 4, "zh": None, "en": lab, "why": "w"} for i, lab, _ in items]
        return ModelResponse(text=orjson.dumps(arr).decode(), usage=Usage(10, 10))


CANDS = [RefCandidate("Q10", "Some Contentious Memorial", 1.0, 0.0, 0.0), RefCandidate("Q11", "Central Station", 1.2, 0.0, 0.0)]


def _audit(tmp_path, **settings):
    aud = ReferenceabilityAuditor(ScreenCutShort({"Some Contentious Memorial"}),
                                  ReferenceabilitySettings(model="aud-1", batch_size=5, **settings), tmp_path)
    return aud, asyncio.run(aud.audit("s1", CANDS))


def test_a_candidate_whose_screen_failed_is_unscreened_and_drawn_into_no_ladder(tmp_path):
    aud, rated = _audit(tmp_path)
    rec = aud.sensitive.get(aud.sens_model, "Q10")
    assert rec is not None and rec.get("sensitive") is None and rec.get("error")  # the screen failed, and is logged
    by_qid = {r.qid: r for r in rated}
    assert by_qid["Q10"].sensitive is None and by_qid["Q10"].familiarity == 4  # rated, not screened
    assert by_qid["Q11"].sensitive is False  # asked alone after the split, screened clean
    assert [c.qid for c in eligible_candidates(rated)] == ["Q11"]
    rows = build_ladder(rated, cell_seed="s", draws_per_cell=2)
    assert {r["qid"] for r in rows} == {"Q11"}
    # counted for the crawl summary and run.py status
    assert unscreened_count(tmp_path) == 1
    (line,) = unscreened_lines(tmp_path)
    assert "1 candidate not screened for contentious names" in line and "no ladder" in line, line


def test_without_the_screen_candidates_are_not_unscreened(tmp_path):
    """``sensitive_screen = false``: no screen was asked for, so nothing is held back for want of one."""
    _, rated = _audit(tmp_path, sensitive_screen=False)
    assert all(r.sensitive is False for r in rated)
    assert {c.qid for c in eligible_candidates(rated)} == {"Q10", "Q11"}
    assert unscreened_count(tmp_path) == 0 and unscreened_lines(tmp_path) == []
