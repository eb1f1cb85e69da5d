"""Turn one parsed GeoVerify answer into a scored row (the payload of edge ``scored``).

A scored row is flat: trial fields (``trial_id, image_id, site, arm, band, truth, cand, d_km,
referenceability``), ``model``, the parsed ``verdict`` (``"yes"``/``"no"``, or None for a parse failure),
``conf`` (float in [0, 1] or None), ``correct`` (verdict == truth; None on failure), ``parse_reason``, the
provider's ``finish_reason`` cleaned (:func:`geoagent.textfmt.finish_reason_text`: no control or bidirectional
formatting characters, whitespace runs one space; verdict parser 11, fixreason43 #1; the response store keeps it as
sent) and ``truncated`` (the answer was cut off at the
output-token limit, :func:`geoagent.scoring.truncation.is_truncated`; a cut-off answer that parsed is scored,
one that did not is no answer: a parse failure, outside H and F like every parse failure; the rule shared with
GeoHint is :func:`geoagent.scoring.truncation.is_no_answer`).
Source: seed 000 Sec. 5.2 (Eq. 1 truth), Sec. 5.3 (answers feed H and F).
"""

from __future__ import annotations

from typing import Any

from geoagent.data.importer import Release
from geoagent.data.model import ARM_MAIN, ARM_MISMATCH, BLANK_IMAGE_REF
from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, ParsedVerdict, parse_verdict
from geoagent.scoring.truncation import is_output_limit, is_truncated, is_withheld
from geoagent.textfmt import finish_reason_text

SCORED_FIELDS = (
    "trial_id", "model", "image_id", "image_shown", "site", "arm", "band", "truth", "cand", "d_km", "referenceability",
    "verdict", "conf", "correct", "parse_ok", "parse_reason", "finish_reason", "truncated", "parser_version",
)


def cut_off_reason(parsed: ParsedVerdict, finish_reason: str | None) -> str | None:
    """``parsed.reason``, saying so when the provider cut the answer off at the output-token limit
    (:func:`is_truncated`): an empty answer cut off is one whose whole cap went on hidden reasoning / thinking
    tokens (OpenAI reasoning models, Gemini thinking models: :mod:`geoagent.providers.sampling`), not a model
    that answered nothing. An answer the provider's content filter stopped (:func:`is_withheld`: ``SAFETY``,
    ``content_filter``, ``refusal``, ...) says so too. Parsed answers keep their reason (None). The reason is quoted
    cleaned (:func:`geoagent.textfmt.finish_reason_text`): it is the server's text, and the parse reason is stored,
    exported and listed in ``geoverify_parse_failures.csv`` (fixreason43 #1)."""
    finish_reason = finish_reason_text(finish_reason)
    if not parsed.ok and is_withheld(finish_reason):
        what = "empty answer" if not (parsed.raw or "").strip() else parsed.reason
        return (f"{what} (stopped by the provider's content filter, finish reason {finish_reason}: no answer, "
                "outside H and F)")
    if parsed.ok or not is_truncated(finish_reason):
        return parsed.reason
    if not is_output_limit(finish_reason):  # the context window, not the limit (read as is_truncated reads it: rev43b #1)
        what = "empty answer" if not (parsed.raw or "").strip() else parsed.reason
        return (f"{what} (cut off at the end of the model's context window, finish reason {finish_reason}: a higher "
                "max_output_tokens does not help)")
    if not (parsed.raw or "").strip():
        return (f"empty answer cut off at the output-token limit (finish reason {finish_reason}): a reasoning or "
                "thinking model spent the whole max_output_tokens on hidden reasoning tokens; raise max_output_tokens")
    return f"{parsed.reason} (cut off at the output-token limit, finish reason {finish_reason})"


def image_shown(trial: dict[str, Any]) -> str | None:
    """The id of the photo a trial shows the model (Sec. 5.4): the trial's own ``image_id`` on the main arm, the other
    continent's photo (``image_ref``) on ``ctrl_mismatch``, None on ``ctrl_noimage`` (a gray field) and on a
    ``ctrl_mismatch`` trial whose table does not name it (the public release's trial table has no ``image_ref``).
    The scored row's ``image_id`` stays the photo whose camera position defines the truth (walk33 #7). A stored scored
    row passed as the trial (parsed again: :mod:`geoagent.geoverify.reparse`) keeps the ``image_shown`` it has."""
    if "image_ref" not in trial and "image_shown" in trial:
        return trial["image_shown"]  # a stored scored row read again (geoverify.reparse): what it recorded
    arm = trial.get("arm")
    if arm == ARM_MAIN:
        return None if trial.get("image_id") is None else str(trial["image_id"])
    ref = trial.get("image_ref")
    if arm == ARM_MISMATCH and ref not in (None, "") and str(ref) != BLANK_IMAGE_REF:
        return str(ref)
    return None


def scored_row(trial: dict[str, Any], model: str, parsed: ParsedVerdict, *, finish_reason: str | None = None,
               parser_version: int = VERDICT_PARSER_VERSION) -> dict[str, Any]:
    """Scored row from trial fields (a ``VerifyTrial.to_dict()``-like mapping plus ``trial_id``) and a parse.

    ``finish_reason``: the provider's finish reason stored with the answer (None when not recorded), raw or already
    cleaned; the row holds it cleaned (:func:`geoagent.textfmt.finish_reason_text`; None for a blank one), as
    GeoHint's rows do (fixreason43 #1).
    ``parser_version``: the :data:`~geoagent.geoverify.parse.VERDICT_PARSER_VERSION` that made ``parsed`` (an
    answer queued by an earlier version and not parsed again keeps its own).

    Raises
    ------
    KeyError
        A required trial field (``trial_id, site, arm, band, truth``) is missing.
    """
    truth = trial["truth"]
    # the server's text as data: stored, exported and quoted in parse_reason without control or bidi characters
    finish_reason = finish_reason_text(finish_reason)
    return {
        "trial_id": trial["trial_id"],
        "model": model,
        "image_id": None if trial.get("image_id") is None else str(trial.get("image_id")),
        "image_shown": image_shown(trial),
        "site": trial.get("site_id") or trial["site"],
        "arm": trial["arm"],
        "band": trial["band"],
        "truth": truth,
        "cand": trial.get("cand"),
        "d_km": trial.get("d_km"),
        "referenceability": trial.get("referenceability"),
        "verdict": parsed.verdict if parsed.ok else None,
        "conf": parsed.confidence if parsed.ok else None,
        "correct": (parsed.verdict == truth) if parsed.ok else None,
        "parse_ok": parsed.ok,
        "parse_reason": cut_off_reason(parsed, finish_reason),
        "finish_reason": finish_reason,
        "truncated": is_truncated(finish_reason),
        "parser_version": parser_version,
    }


def scored_rows_from_release(rel: Release) -> list[dict[str, Any]]:
    """Parse and score every raw response of an imported release (records with an API error are skipped,
    as in the release's own analysis; duplicates of (trial_id, model) keep the first)."""
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for r in rel.raw:
        if r.error is not None or r.replay_key in seen:
            continue
        seen.add(r.replay_key)
        trial = {
            "trial_id": r.trial_id, "image_id": r.image_id, "site": r.site_id, "arm": r.arm, "band": r.band,
            "truth": r.truth, "cand": r.cand, "d_km": r.d_km, "referenceability": r.referenceability,
        }
        rows.append(scored_row(trial, r.model, parse_verdict(r.raw, r.stop_reason), finish_reason=r.stop_reason))
    return rows
