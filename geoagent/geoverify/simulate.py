"""Simulated GeoVerify answers for the ``simulated`` provider and the local fake model servers.

Registers responder ``geoverify`` with :mod:`geoagent.sandbox.responders` on import. The claim prompt
carries only the candidate's name, so the true distance cannot be recovered; the answer is drawn from a
model-specific bias instead:

* P(yes) = 0.15 + 0.6 * u(model), with u(model) in [0, 1) from SHA-256 of the model name (a liberal or a
  conservative simulated model), and P(yes) = 0.02 for the blank gray field (``image_id == "blank:gray"``);
* confidence ~ uniform(0.5, 1.0), rounded to 0.05;
* the answer text varies in format like real models: plain JSON (most), fenced JSON, prose around it,
  single quotes, ``"Yes."`` spelling, percent confidence, and about 1 % unparseable text.

All draws use ``ctx.rng`` (seeded by the request key), so the same request always gets the same text.
"""

from __future__ import annotations

import hashlib
import json
import re

BLANK_IMAGE_ID = "blank:gray"
#: P(yes) for the blank gray field (probability, 0-1): the simulated models answer it "no" 98 % of the time
BLANK_P_YES = 0.02
_CAND = re.compile(r'"([^"\n]{1,200})"')


def matches(prompt: str) -> bool:
    """Whether ``prompt`` looks like a GeoVerify claim (asks for a verdict and names a claimed place)."""
    low = prompt.lower()
    return '"verdict"' in low and "claim" in low and "confidence" in low


def model_bias(model: str) -> float:
    """Simulated P(yes) of ``model`` on an image: 0.15 + 0.6 * u, u from SHA-256 of the name."""
    u = int.from_bytes(hashlib.sha256(model.encode()).digest()[:8], "big") / 2**64
    return 0.15 + 0.6 * u


def candidate_from_prompt(prompt: str) -> str | None:
    """The first double-quoted phrase that is not a JSON key word (the candidate name), if any."""
    for m in _CAND.finditer(prompt):
        text = m.group(1)
        if text.lower() not in ("verdict", "yes", "no", "confidence", "evidence") and ":" not in text:
            return text
    return None


_EVIDENCE = (
    "street furniture typical of a dense city centre",
    "no building matching the named place is visible",
    "a large historic facade on the left",
    "tram tracks and overhead wires",
    "a wide square with pedestrians",
    "residential buildings with balconies",
    "a canal or river embankment",
    "signage in a Latin script",
)


def respond(ctx) -> str:  # ctx: geoagent.sandbox.responders.SimContext
    """Answer text for one GeoVerify claim prompt (deterministic given ``ctx.rng``)."""
    rng = ctx.rng
    blank = bool(ctx.image_id) and ctx.image_id.split("#", 1)[0] == BLANK_IMAGE_ID
    p_yes = BLANK_P_YES if blank else model_bias(ctx.model)
    verdict = "yes" if rng.random() < p_yes else "no"
    conf = round(round(rng.uniform(0.5, 1.0) / 0.05) * 0.05, 2)
    evidence = rng.sample(_EVIDENCE, rng.randint(1, 3))
    cand = candidate_from_prompt(ctx.prompt)
    if cand and verdict == "yes":
        evidence[0] = f"the surroundings are consistent with {cand}"
    style = rng.random()
    obj = {"verdict": verdict, "confidence": conf, "evidence": evidence}
    if style < 0.01:
        return "I am not able to judge this photograph with the information given."
    if style < 0.03:
        return repr(obj)  # single quotes
    if style < 0.05:
        obj["verdict"] = verdict.capitalize() + "."
        return json.dumps(obj)
    if style < 0.07:
        obj["confidence"] = f"{round(conf * 100)}%"
        return json.dumps(obj)
    if style < 0.12:
        return "Here is my assessment.\n" + json.dumps(obj, indent=2) + "\nThe verdict is based on visible cues."
    if style < 0.40:
        return "```json\n" + json.dumps(obj, indent=2) + "\n```"
    return json.dumps(obj, indent=2)


def register() -> None:
    """Register the ``geoverify`` responder (idempotent: re-registering replaces it)."""
    from geoagent.sandbox.responders import register_responder

    register_responder("geoverify", matches, respond)


register()
