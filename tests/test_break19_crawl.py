"""Session 19 adversarial review (break19): crawl defects (referenceability audit, review decisions).

Reproductions only (no fixes): each test states the expected behaviour and FAILS on main at 4cd9433.
"""

from __future__ import annotations

import asyncio
import re

import orjson

from geoagent.crawl.ladder import RatedCandidate, build_ladder
from geoagent.crawl.referenceability import RefCandidate, ReferenceabilityAuditor
from geoagent.crawl.review import apply_decisions
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage


class ContentiousScreenGarbled(Provider):
    """A text-only provider double (as tests/test_crawl_referenceability.py's ScriptedProvider): rates every
    candidate (ok, referenceability 4), and answers the contentious-name screen with a cut-off array."""

    kind = "scripted-test"
    paid = False

    async def generate(self, request: ModelRequest) -> ModelResponse:
        body = request.prompt.split("Candidates", 1)[-1] if "Candidates" in request.prompt else request.prompt
        items = re.findall(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \(([0-9.]+) km\))?$", body, re.M)
        if "CONTENTIOUS" in request.prompt:
            return ModelResponse(text='[{"idx": 0, "sensitive": tr', usage=Usage(10, 10))  # cut short
        arr = [{"idx": int(i), "ok": True, "familiarity": 4, "zh": None, "en": lab, "why": "w"} for i, lab, _ in items]
        return ModelResponse(text=orjson.dumps(arr).decode(), usage=Usage(10, 10))


def test_unscreened_candidate_does_not_enter_the_ladder_as_screened_clean(tmp_path):
    """Sec. 3.3 "Exclusion of contentious names": a separate pass removes flagged names (dataset policy). When the
    screen's answer for a candidate cannot be read, the auditor logs ``sensitive: null`` with an error, never asks
    again (the record counts as decided), and builds the candidate with ``sensitive=bool(None) == False``: it is
    drawn into the ladder exactly like a candidate the screen cleared, and nothing says it was never screened.
    A failed rating, by contrast, is dropped (familiarity None): the screen fails open, the rating closed.

    Observed on main: RatedCandidate.sensitive False and a ladder row for Q10.
    Expected: a candidate whose screen failed is kept out (or at least marked/counted as unscreened)."""
    aud = ReferenceabilityAuditor(ContentiousScreenGarbled(), ReferenceabilitySettings(model="aud-1", batch_size=5),
                                  tmp_path)
    cand = RefCandidate("Q10", "Some Contentious Memorial", 1.0, 0.0, 0.0)
    rated = asyncio.run(aud.audit("s1", [cand]))
    rec = aud.sensitive.get(aud.sens_model, "Q10")
    assert rec is not None and rec.get("sensitive") is None and rec.get("error")  # the screen failed, and is logged
    rows = build_ladder(rated, cell_seed="s", draws_per_cell=2)
    assert not any(r["qid"] == "Q10" for r in rows), "a candidate never screened is drawn as a reference point"


def test_review_decision_gives_one_place_one_tier_across_a_citys_ladders():
    """Sec. 3.3: referenceability is a property of the place, rated once per candidate (the crawl rates once per
    city). A human review decision is applied per (site, QID) only, so after correcting a place from 5 to 1 at the
    site where it was queued, every other ladder of the same city still carries it in the HIGH tier: one place,
    two tiers, one hint text scored in two cells of the tier analysis.

    Observed on main: tier 'low' in site A's ladder and 'high' in site B's.
    Expected: one tier for the place in the city (the decision applies to the rating, which is per city), or the
    decision refused/warned when the QID is rated at other sites of the city."""
    place_a = RatedCandidate(qid="Q500", label_raw="Curiosity Museum", dist_km=1.0, familiarity=5, name_en="Curiosity Museum")
    place_b = RatedCandidate(qid="Q500", label_raw="Curiosity Museum", dist_km=1.2, familiarity=5, name_en="Curiosity Museum")
    decisions = {("site_a", "Q500"): {"decision": "1", "familiarity": 1, "reviewer": "r", "note": "", "source": "r.csv:2"}}
    lad_a = build_ladder(apply_decisions("site_a", [place_a], decisions), cell_seed="x:site_a")
    lad_b = build_ladder(apply_decisions("site_b", [place_b], decisions), cell_seed="x:site_b")
    tiers = {r["tier"] for r in lad_a + lad_b if r["qid"] == "Q500"}
    assert len(tiers) == 1, f"one place, tiers {sorted(tiers)} in two ladders of one city"
