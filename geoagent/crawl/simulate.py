"""Simulated answers for the crawl's audit prompts (image audit, referenceability, sensitive names).

Registered with :func:`geoagent.sandbox.responders.register_responder` on import, so the ``simulated``
provider and the local OpenAI/Anthropic/Gemini fakes answer the crawl prompts in their formats. Answers
are deterministic (``ctx.rng`` is seeded by the request key) and plausible: most street images pass,
some are vehicle interiors, close-ups, blurry or carry a dashcam stamp with coordinates; reference
points get a referenceability from their kind (stations and squares high, plaques and districts
rejected) with noise; one referenceability answer in ~8 for a batch of more than 4 candidates is cut
off mid-array, which exercises the auditor's split-and-retry path.
"""

from __future__ import annotations

import hashlib
import random
import re

import orjson

from geoagent.crawl.image_audit import PROMPT_MARKER
from geoagent.crawl.referenceability import REF_MARKER, SENS_MARKER
from geoagent.sandbox.responders import SimContext, register_responder

#: a candidate line (:func:`geoagent.crawl.referenceability.render_candidates`): index, label, English Wikipedia
#: title if any, distance if any
_LINE = re.compile(r"^\s*(\d+)\.\s+(.*?)(?:\s+\(English Wikipedia: (.*?)\))?(?:\s+\(([0-9.]+) km\))?\s*$")
_HIGH = ("station", "square", "plaza", "bridge", "market", "cathedral", "gate", "tower", "park")
_MID = ("church", "museum", "theatre", "theater", "library", "university", "garden", "fountain", "stadium", "hall")
_REJECT = ("district", "ward", "subdistrict", "plaque", "grave", "room", "line", "network", "incident", "festival")
_SENSITIVE = ("war criminal", "slave trader", "fascist")


def _candidates(prompt: str, marker_block: str = "Candidates") -> list[tuple[int, str, float | None]]:
    out = []
    for line in prompt.splitlines():
        m = _LINE.match(line)
        if m and not line.lstrip().startswith(("1. \"", "2. \"", "3. \"", "4. \"")):
            out.append((int(m.group(1)), m.group(2), float(m.group(4)) if m.group(4) else None))
    return out


def image_audit_answer(ctx: SimContext) -> str:
    """One image-audit JSON object (App. A.4 fields)."""
    r = ctx.rng.random()
    overlay, text, scene, glass, quality, why = False, "", "street", False, ctx.rng.choice([3, 4, 4, 4, 5]), "clear street view with buildings"
    if r < 0.07:
        scene, glass, quality, why = "vehicle_interior", True, 3, "dashboard and wipers visible"
    elif r < 0.11:
        overlay, quality = True, 4
        text = f"DASHCAM {ctx.rng.randint(10, 28)}/0{ctx.rng.randint(1, 9)}/2023 N: {ctx.rng.uniform(-60, 60):.5f} E: {ctx.rng.uniform(-120, 120):.5f}"
        why = "dashcam stamp prints coordinates"
    elif r < 0.15:
        scene, quality, why = "closeup", 2, "a wall fills the frame"
    elif r < 0.20:
        quality, why = 1, "heavily blurred frame"
    tourist = ctx.rng.random() < 0.1
    usable = (not overlay) and scene == "street" and quality > 1
    return orjson.dumps({"answer_overlay": overlay, "overlay_text": text, "scene_type": scene, "through_glass": glass,
                         "tourist_infrastructure": tourist, "quality": quality, "usable": usable, "why": why}).decode()


def _item_rng(ctx: SimContext, label: str) -> random.Random:
    # per-candidate randomness: a candidate gets the same rating whatever batch it is asked in, so the
    # simulated crawl's results do not depend on the order in which sites reach the auditor
    digest = hashlib.sha256(f"{ctx.model}\x00{ctx.seed}\x00{label}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def referenceability_answer(ctx: SimContext) -> str:
    """A JSON array rating every listed candidate (occasionally cut off, see module docstring)."""
    cands = _candidates(ctx.prompt.split("Candidates", 1)[-1])
    out = []
    for idx, label, _ in cands:
        low = label.lower()
        rng = _item_rng(ctx, label)
        if any(w in low for w in _REJECT):
            ok, fam = False, rng.choice([0, 1])
        elif any(w in low for w in _HIGH):
            ok, fam = True, rng.choice([3, 4, 4, 5, 5])
        elif any(w in low for w in _MID):
            ok, fam = True, rng.choice([1, 2, 3, 3, 4])
        else:
            ok, fam = rng.random() < 0.85, rng.choice([0, 1, 1, 2, 3])
        out.append({"idx": idx, "ok": ok, "familiarity": fam, "zh": None, "en": label, "why": "simulated rating"})
    text = orjson.dumps(out).decode()
    if len(cands) > 4 and ctx.rng.random() < 0.125:
        return "Here are the ratings:\n" + text[: len(text) // 2]
    return text


def sensitive_answer(ctx: SimContext) -> str:
    """A JSON array of ``{idx, sensitive, why}`` (flags only names containing a listed phrase)."""
    cands = _candidates(ctx.prompt.split("Names:", 1)[-1])
    out = []
    for idx, label, _ in cands:
        sens = any(w in label.lower() for w in _SENSITIVE)
        out.append({"idx": idx, "sensitive": sens, "why": "glorifies a contentious figure" if sens else "ordinary place"})
    return orjson.dumps(out).decode()


register_responder("crawl_image_audit", lambda p: PROMPT_MARKER in p, image_audit_answer)
register_responder("crawl_referenceability", lambda p: REF_MARKER in p, referenceability_answer)
register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, sensitive_answer)
