"""Two-track image audit (seed 000, Sec. 3.2 and App. A.4): a vision-model audit and a human verdict.

The model half rates each kept image on answer leakage (overlaid text naming a place or printing
coordinates), scene type, shooting through glass, tourist infrastructure, quality 0-5 and usability;
our prompt is ``prompts/crawl_image_audit.txt``. The human half is a keep/exclude verdict with a reason,
imported from a CSV. Agreement is reported as raw agreement, Cohen's kappa, and the two disagreement
tables (human excludes / model accepts, and the reverse; the model's side read under App. A.4's rule), plus the
human-kept images the model flagged for answer leakage, for case-by-case review. Exclusion follows the human verdict
(``usable`` column), as in the release's ``image_audit.csv``. The auditor must not be an evaluated model
(:class:`geoagent.crawl.settings.CrawlSettings` refuses such a config).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from geoagent.crawl.llmjson import as_bool, as_int_in, as_text, extract_json_like, prompt_example
from geoagent.crawl.settings import ImageAuditSettings
from geoagent.files import atomic_open, csv_header, csv_rows
from geoagent.llmjson import fenced_blocks, iter_candidates
from geoagent.providers.base import ModelRequest
from geoagent.paths import safe_image_id

SCENE_TYPES = ("street", "indoor", "vehicle_interior", "closeup", "other")
#: keys that mark an object in the answer as the audit itself (not an aside in the prose)
_AUDIT_KEYS = frozenset({"answer_overlay", "scene_type", "quality", "usable"})
PROMPT_MARKER = "STREET-LEVEL PHOTO AUDIT"

#: Columns of the release's ``data/image_audit.csv``, in order.
IMAGE_AUDIT_COLUMNS: tuple[str, ...] = (
    "image", "site", "batch", "usable", "ai_answer_overlay", "ai_overlay_text", "ai_scene_type", "ai_through_glass",
    "ai_tourist_infrastructure", "ai_quality", "ai_usable", "ai_why", "human_verdict", "human_reason",
    "human_verified_by", "human_note",
)
HUMAN_VERDICTS = ("keep", "exclude")

#: The rules :func:`parse_image_audit` reads an answer by. Each stored audit record
#: (``image_audit/<site>/<image>.json``) records the version that read it (``parser_version``; a record without one
#: was read by version 1); a crawl's run reads an earlier version's records again from their stored text
#: (:func:`geoagent.crawl.campaign.reread_stored_audits`). Version 2 (session 37) is session 36's rules: the
#: prompt's example answer is no audit, and cut-off audit objects are compared as far as they go. Version 3 (session
#: 38): a quality written in other than ASCII digits ("４") is no quality (crawl38 #5).
AUDIT_PARSER_VERSION = 3

#: answers asked of the image auditor per image at most: an answer that cannot be read (``parsed`` False: a refusal,
#: prose, a quality of 4.5) is asked again, with the reminder :data:`REASK_TEMPLATE` after the prompt, up to this
#: many answers in all (crawl38 #1: the first unreadable answer was final, and the image was never audited); an
#: image whose every answer is unreadable has no model verdict, and a human verdict decides it
IMAGE_AUDIT_MAX_ANSWERS = 3
#: the reminder appended to the prompt of a re-ask (``geoagent/prompts/``)
REASK_TEMPLATE = "crawl_image_audit_reask.txt"


def reask_prompt(prompt: str, answer: int) -> str:
    """The prompt of the image audit's ``answer``-th ask (1-based): ``prompt`` for the first, ``prompt`` and the
    reminder :data:`REASK_TEMPLATE` for a re-ask, its ``{earlier}`` the number of unreadable answers before it (so
    each ask has a prompt, and a request key, of its own: a re-ask with the first ask's key would get its stored
    answer back)."""
    if answer <= 1:
        return prompt
    return prompt.rstrip("\n") + "\n" + load_prompt(REASK_TEMPLATE).replace("{earlier}", str(answer - 1))


def audit_parser_version(rec: Mapping[str, Any]) -> int:
    """The parser version that read the stored audit record ``rec``: its ``parser_version``, 1 when it has none (a
    record stored before session 37) or holds no positive integer (a hand-edited record: read again)."""
    v = rec.get("parser_version", 1)
    return v if isinstance(v, int) and not isinstance(v, bool) and v >= 1 else 1


def load_prompt(name: str) -> str:
    """Text of ``geoagent/prompts/<name>`` (packaged template)."""
    return resources.files("geoagent").joinpath("prompts", name).read_text(encoding="utf-8")


def usable_by_rule(answer_overlay: bool, scene_type: str, quality: int) -> bool:
    """App. A.4's rule: unusable when overlay text leaks the answer, the scene is not a street, or
    quality <= 1 (tourist infrastructure does not matter)."""
    return (not answer_overlay) and scene_type == "street" and quality > 1


@dataclass(frozen=True, slots=True)
class ImageAudit:
    """One parsed model audit. ``parsed`` False means the text could not be read (``reason`` says why);
    ``raw`` is the model's verbatim text."""

    parsed: bool
    answer_overlay: bool | None = None
    overlay_text: str = ""
    scene_type: str | None = None
    through_glass: bool | None = None
    tourist_infrastructure: bool | None = None
    quality: int | None = None
    usable: bool | None = None
    why: str = ""
    reason: str = ""
    raw: str = ""

    @property
    def usable_rule(self) -> bool | None:
        """Usability recomputed from the fields (None when unparsed)."""
        if not self.parsed or self.answer_overlay is None or self.scene_type is None or self.quality is None:
            return None
        return usable_by_rule(self.answer_overlay, self.scene_type, self.quality)

    @property
    def keeps_image(self) -> bool | None:
        """Whether the model audit keeps the image (the ``usable`` that decides when no human verdict exists):
        the model's own ``usable`` and App. A.4's rule over its fields (:attr:`usable_rule`), so an answer that
        reports overlay text, a non-street scene or quality <= 1 never keeps an image, whatever its ``usable``
        field says (answer leakage is the one hard exclusion, Sec. 3.2). None when unparsed."""
        if not self.parsed or self.usable is None:
            return None
        return bool(self.usable) and self.usable_rule is not False

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ("parsed", "answer_overlay", "overlay_text", "scene_type", "through_glass",
                                             "tourist_infrastructure", "quality", "usable", "why", "reason", "raw")}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "ImageAudit":
        return cls(**{k: d.get(k) for k in cls.__slots__ if k in d})  # type: ignore[attr-defined]


def parse_image_audit(text: str | None, prompt: str | None = None) -> ImageAudit:
    """Parse the model's answer (untrusted text); never raises. Missing ``usable`` is filled by the rule;
    an unknown scene type or a quality outside 0-5 makes the answer unparsed.

    The audit is the first JSON object holding an audit key (fenced blocks first, then the whole text). When the
    answer holds another complete audit object whose fields read differently (``answer_overlay``, ``scene_type``,
    ``quality``, ``usable``, ``through_glass`` or ``tourist_infrastructure``), e.g. the prompt's example repeated
    before the model's own audit, or a correction after it, the answer is unparsed ("conflicting audits in one
    answer"), never the first one: the example reads usable, and taking it kept images whose real audit reported
    overlay text naming the place. The same audit given twice (in a fence and again in the prose) is one audit.

    Session 36 (crawl36 #1, review36 #8): the prompt's example, field for field (its ``why`` too), is no audit at
    all: it is neither read as the audit nor counted as a conflicting one, and an answer whose only audit it is, is
    unparsed (it says nothing of the image). ``prompt`` is the prompt the answer replied to, whose example (its last
    JSON object, :func:`~geoagent.crawl.llmjson.prompt_example`) is compared; None: the packaged
    ``crawl_image_audit.txt``. An audit object cut off by the end of the answer (``max_output_tokens``) is read as
    far as it goes: one whose fields so far differ from the audit read makes the answer conflicting, one that agrees
    so far changes nothing, and an answer whose only audit of its own is cut off is unparsed (the example, then the
    model's own audit reporting overlay text, cut off, kept the image before)."""
    raw = text if isinstance(text, str) else ""
    example = prompt_example(load_prompt("crawl_image_audit.txt") if prompt is None else prompt, dict,
                             lambda o: bool(_AUDIT_KEYS & set(o)))
    objects, partials = _audit_objects(raw)
    own = [o for o in objects if o != example]
    if not own:
        if partials:
            return ImageAudit(False, reason="the answer's own audit is cut off (max_output_tokens?)", raw=raw)
        if example is not None and example in objects:
            return ImageAudit(False, reason="the answer only repeats the prompt's example audit", raw=raw)
    obj = own[0] if own else extract_json_like(raw, dict, lambda o: bool(_AUDIT_KEYS & set(o)))
    if obj is None:
        return ImageAudit(False, reason="no JSON object in the answer", raw=raw)
    audit = _read_audit(obj, raw)
    if audit.parsed:
        seen = {_decision(audit)}
        for other in own:
            read = _read_audit(other, raw)
            if read.parsed:
                seen.add(_decision(read))
        if len(seen) > 1:
            return ImageAudit(False, reason=f"conflicting audits in one answer ({len(seen)} different readings of "
                                            "its audit objects)", raw=raw)
        if any(_differs_so_far(part, audit) for part in partials):
            return ImageAudit(False, reason="an audit object cut off by the end of the answer (max_output_tokens?) "
                                            "reads otherwise than the one given", raw=raw)
    return audit


def _differs_so_far(part: Mapping[str, Any], audit: ImageAudit) -> bool:
    """Whether a cut-off audit object's decision fields that it holds read otherwise than ``audit``'s (each read by
    :func:`_read_audit`'s rules; a field it does not hold, or holds unreadably, is not compared)."""
    checks: list[tuple[str, Any, Any]] = [
        ("answer_overlay", as_bool(part.get("answer_overlay")), audit.answer_overlay),
        ("scene_type", str(part.get("scene_type", "")).strip().lower().replace(" ", "_").replace("-", "_") or None,
         audit.scene_type),
        ("quality", as_int_in(part.get("quality"), 0, 5), audit.quality),
        ("usable", as_bool(part.get("usable")), audit.usable),
        ("through_glass", as_bool(part.get("through_glass")), audit.through_glass),
        ("tourist_infrastructure", as_bool(part.get("tourist_infrastructure")), audit.tourist_infrastructure),
    ]
    return any(key in part and got is not None and got != want for key, got, want in checks)


def _decision(a: ImageAudit) -> tuple[Any, ...]:
    """The fields of a parsed audit that two audit objects of one answer must agree on."""
    return (a.answer_overlay, a.scene_type, a.quality, a.usable, a.through_glass, a.tourist_infrastructure)


def _audit_objects(raw: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every complete JSON object in ``raw`` (fenced blocks, then the whole text; nested ones too, as
    :func:`~geoagent.llmjson.extract_json` searches) that holds an audit key, and every such object cut off by the end
    of the text, as far as it was read."""
    out: list[dict[str, Any]] = []
    cut: list[dict[str, Any]] = []
    for src in [*fenced_blocks(raw), raw]:
        for cand in iter_candidates(src, "{"):
            if cand.ok and isinstance(cand.value, dict) and _AUDIT_KEYS & set(cand.value):
                (cut if cand.truncated else out).append(cand.value)
    return out, cut


def _read_audit(obj: dict[str, Any], raw: str) -> ImageAudit:
    """One audit object's fields (:func:`parse_image_audit`'s rules), unparsed with a reason when invalid."""
    overlay = as_bool(obj.get("answer_overlay"))
    scene = str(obj.get("scene_type", "")).strip().lower().replace(" ", "_").replace("-", "_")
    quality = as_int_in(obj.get("quality"), 0, 5)
    if overlay is None:
        return ImageAudit(False, reason="answer_overlay missing or not a boolean", raw=raw)
    if scene not in SCENE_TYPES:
        return ImageAudit(False, reason=f"scene_type {obj.get('scene_type')!r} is not one of {SCENE_TYPES}", raw=raw)
    if quality is None:
        return ImageAudit(False, reason=f"quality {obj.get('quality')!r} is not an integer 0-5", raw=raw)
    usable = as_bool(obj.get("usable"))
    if usable is None:
        usable = usable_by_rule(overlay, scene, quality)
    overlay_text = obj.get("overlay_text")
    return ImageAudit(
        True, overlay, overlay_text if isinstance(overlay_text, str) else "", scene,  # text only: NaN is none
        as_bool(obj.get("through_glass")), as_bool(obj.get("tourist_infrastructure")), quality, usable,
        as_text(obj.get("why"), 300), "", raw,  # text only: a number or a list is no reason
    )


def build_request(image_id: str, jpeg: bytes, settings: ImageAuditSettings, prompt: str | None = None, *,
                  provider: str | None = None, model: str | None = None, answer: int = 1) -> ModelRequest:
    """The vision request for one image (prompt from ``crawl_image_audit.txt``); ``provider``/``model``
    override the section's (the ``[[models]]`` entry's kind and API model id). ``answer``: which ask of the image
    this is (1-based); a re-ask (2, 3, ...) carries the reminder (:func:`reask_prompt`), so its request key differs
    from the earlier asks', whose stored answers would otherwise be returned again."""
    base = prompt or load_prompt("crawl_image_audit.txt")
    return ModelRequest(
        provider=provider or settings.provider, model=model or settings.model,
        prompt=reask_prompt(base, answer),
        image_id=image_id, image=jpeg, image_mime="image/jpeg",
        params={"max_output_tokens": settings.max_output_tokens, "temperature": settings.temperature, "json_mode": True},
        meta={"task": "crawl_image_audit", **({"answer": answer} if answer > 1 else {})},
    )


# --------------------------------------------------------------------------------------------------
# human verdicts and agreement
# --------------------------------------------------------------------------------------------------

_ID_IN_PATH = re.compile(r"([0-9]{1,32})\.jpe?g$", re.I)


def image_key(path_or_id: str) -> str:
    """Image id from ``streetview\\site\\123.jpg``, ``images/site/123.jpg`` or ``123``, in its canonical form
    (:func:`geoagent.paths.safe_image_id`: ``0123`` and ``123`` are one image).

    Raises
    ------
    ValueError
        No image id there (ASCII digits only: a Unicode digit such as ``"\u00b2"`` is none)."""
    s = str(path_or_id).strip()
    m = _ID_IN_PATH.search(s.replace("\\", "/"))
    try:
        return safe_image_id(m.group(1) if m else s)
    except ValueError:
        raise ValueError(f"cannot find an image id in {path_or_id!r}") from None


def read_human_verdicts(path: str | Path) -> dict[str, dict[str, str]]:
    """Read a human-verdict CSV (columns ``image`` and ``human_verdict``; optional ``human_reason``,
    ``human_verified_by``, ``human_note``; e.g. the release's ``image_audit.csv``).

    Returns
    -------
    dict
        image id -> {"human_verdict", "human_reason", "human_verified_by", "human_note"}.

    Raises
    ------
    ValueError
        Naming the file and line for a missing column, a bad image reference, a verdict other than
        keep/exclude, the same image twice with different verdicts, or text that is not UTF-8 (a UTF-8
        byte-order mark, as Excel's "CSV UTF-8" writes, is fine), a header that repeats a column, or a row with
        more fields than the header (an unquoted comma in a reason would drop the rest of it).
    """
    path = Path(path)
    out: dict[str, dict[str, str]] = {}
    with path.open(encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f, strict=True)  # an unclosed quote must not swallow the later rows (csv_rows)
        fieldnames = csv_header(reader, path)

        def not_utf8(values: Any, line: int) -> None:
            try:
                "".join(str(v) for v in values if v is not None).encode("utf-8")
            except UnicodeEncodeError:
                raise ValueError(f"{path}:{line}: not UTF-8 text; save the file as UTF-8 (Excel: "
                                 "'CSV UTF-8')") from None

        not_utf8(fieldnames or [], 1)
        names = [str(n).strip() for n in fieldnames or []]
        repeated = sorted({n for n in names if n and names.count(n) > 1})
        if repeated:  # a row would silently take the last copy's value
            raise ValueError(f"{path}:1: header repeats column(s) {repeated}; keep one of each")
        for col in ("image", "human_verdict"):
            if col not in names:
                raise ValueError(f"{path}:1: missing column {col!r} (have {fieldnames})")
        reader.fieldnames = names  # "image, human_verdict": spaces around a name are no part of it (as review.py)
        for line, row in csv_rows(reader, path):
            if None in row:  # DictReader's rest key: more fields than the header names (break32 #6)
                extra = row[None] if isinstance(row[None], list) else [row[None]]
                raise ValueError(f"{path}:{line}: {len(extra)} field(s) more than the header's {len(names)} columns "
                                 f"({', '.join(repr(str(x)) for x in extra[:3])}); a comma inside a text such as "
                                 "human_reason needs the text in double quotes")
            not_utf8(row.values(), line)
            verdict = (row.get("human_verdict") or "").strip().lower()
            if verdict not in HUMAN_VERDICTS:
                raise ValueError(f"{path}:{line}: human_verdict must be keep or exclude, got {row.get('human_verdict')!r}")
            try:
                key = image_key(row["image"])
            except ValueError as e:
                raise ValueError(f"{path}:{line}: {e}") from None
            rec = {"human_verdict": verdict, "human_reason": (row.get("human_reason") or "").strip(),
                   "human_verified_by": (row.get("human_verified_by") or "").strip(), "human_note": (row.get("human_note") or "").strip()}
            if key in out and out[key]["human_verdict"] != verdict:
                raise ValueError(f"{path}:{line}: image {key} has conflicting verdicts")
            out[key] = rec
    return out


#: the config key of the human-verdict CSV, as named in messages
HUMAN_VERDICTS_KEY = "[crawl.image_audit] human_verdicts"


def _verdict_references(path: str | Path) -> Iterator[tuple[int, str, str]]:
    """``(line, image reference as written, image id)`` of each row of a human-verdict CSV (already read without
    error by :func:`read_human_verdicts`), in file order; rows whose reference holds no image id are skipped."""
    with Path(path).open(encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
        reader = csv.DictReader(f)
        # the header as read_human_verdicts reads it: spaces around a name are no part of it (" image , ...")
        reader.fieldnames = [str(n).strip() for n in reader.fieldnames or []]
        for row in reader:
            ref = (row.get("image") or "").strip()
            try:
                key = image_key(ref)
            except ValueError:
                continue
            yield reader.line_num, ref, key


def unmatched_human_verdicts(path: str | Path | None, audited_ids: Iterable[str]) -> list[str]:
    """The rows of a human-verdict CSV (:func:`read_human_verdicts`'s format, already read without error) whose
    image is not among ``audited_ids`` (the image ids the crawl audited), each as ``"<file>:<line>: <image>"`` in
    file order: such a verdict decides nothing (a typo in the id, an image of another crawl or one rejected before
    the audit). ``[]`` when the key is unset or every verdict names an audited image. Rows whose image reference
    cannot be read are skipped (:func:`read_human_verdicts` refuses the file for them)."""
    if not path:
        return []
    audited = set(audited_ids)
    return [f"{path}:{line}: {ref}" for line, ref, key in _verdict_references(path) if key not in audited]


def misplaced_human_verdicts(path: str | Path | None, site_of: Mapping[str, str]) -> list[str]:
    """The rows of a human-verdict CSV (already read without error) whose image reference names a folder (the part
    before the file name: ``streetview\\<site>\\<id>.jpg``, ``images/<site>/<id>.jpg``) other than the site of
    that image in this crawl (``site_of``: image id -> site id, of the images it audited), each as ``"<file>:<line>:
    <reference> (image <id> is of site <site>)"`` in file order (break32 #6: a verdict naming the wrong site, or a
    path such as ``../../etc/<id>.jpg``, was applied without a word). The verdict still applies by image id; the
    folder may be a typo, or the row may have been meant for another image. ``[]`` when the key is unset or every
    reference agrees; a bare id names no folder."""
    if not path:
        return []
    out = []
    for line, ref, key in _verdict_references(path):
        parts = [p for p in ref.replace("\\", "/").split("/") if p]
        site = site_of.get(key)
        if len(parts) >= 2 and site is not None and parts[-2] != site:
            out.append(f"{path}:{line}: {ref} (image {key} is of site {site})")
    return out


#: the files :func:`write_agreement` writes into the crawl's state folder
AGREEMENT_FILES = ("image_audit_agreement.json", "image_audit_human_excludes_model_accepts.csv",
                   "image_audit_model_rejects_human_keeps.csv", "image_audit_leak_flags_kept.csv")


def human_verdicts_of(path: str | Path | None) -> dict[str, dict[str, str]]:
    """The human verdicts of a crawl (:data:`HUMAN_VERDICTS_KEY`, read by :func:`read_human_verdicts`), the one
    reader every consumer of the usable decision goes through (``images.csv``, ``image_audit.csv``, the GeoVerify
    trials and with them GeoHint's images, the summary counts). ``{}`` when the key is unset (None or empty).

    Raises
    ------
    FileNotFoundError
        The key names a file that does not exist (a typo must not silently leave every image to the model audit).
    ValueError
        As :func:`read_human_verdicts` (file and line named).
    """
    if not path:
        return {}
    if not Path(path).is_file():
        what = "is not a file" if Path(path).exists() else "does not exist"
        raise FileNotFoundError(f"{HUMAN_VERDICTS_KEY} = {str(path)!r}: {path} {what} (the CSV of human keep/exclude "
                                "verdicts, columns image,human_verdict[,human_reason]; a relative path is read from the "
                                "working folder); fix the path, or remove the key to let the model audit decide")
    return read_human_verdicts(path)


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Cohen's kappa of two raters' labels, ``(p_o - p_e) / (1 - p_e)``.

    Parameters
    ----------
    a, b : sequence of shape (n,)
        Labels of the two raters for the same n items (any hashable categories).

    Returns
    -------
    float
        Kappa in [-1, 1]; NaN when ``p_e == 1`` (both raters used one and the same single label).

    Raises
    ------
    ValueError
        On unequal lengths or no items.

    Source: Cohen (1960); seed 000 Sec. 3.2 reports kappa = 0.185 for human vs model keep/exclude.
    """
    if len(a) != len(b):
        raise ValueError(f"raters labelled different numbers of items ({len(a)} vs {len(b)})")
    n = len(a)
    if n == 0:
        raise ValueError("no items")
    p_o = sum(1 for x, y in zip(a, b) if x == y) / n
    ca, cb = Counter(a), Counter(b)
    p_e = sum(ca[k] * cb.get(k, 0) for k in ca) / (n * n)
    if p_e == 1.0:
        return float("nan")
    return (p_o - p_e) / (1.0 - p_e)


@dataclass(frozen=True, slots=True)
class AuditAgreement:
    """Human vs model agreement over images audited by both."""

    n: int
    n_agree: int
    kappa: float
    human_excludes_model_accepts: list[dict[str, Any]]
    model_rejects_human_keeps: list[dict[str, Any]]
    #: images the human kept although the model flagged answer-revealing overlay text (``ai_answer_overlay``): the
    #: paper's case-by-case review list (Sec. 3.2: "the model's leakage flags reviewed case by case")
    leak_flags_kept: list[dict[str, Any]] = field(default_factory=list)

    @property
    def agreement(self) -> float:
        return self.n_agree / self.n if self.n else float("nan")

    def scene_types_of_model_rejects(self) -> Counter[str]:
        """Scene types among "model rejects, human keeps" (the paper: 17 of 21 are vehicle interiors)."""
        return Counter(str(r.get("ai_scene_type", "")) for r in self.model_rejects_human_keeps)


def _truthy(v: Any) -> bool | None:
    return as_bool(v)


def model_keeps(row: Mapping[str, Any]) -> bool | None:
    """The model's verdict in an ``image_audit.csv`` row under App. A.4's rule, as :attr:`ImageAudit.keeps_image`:
    its ``ai_usable`` field, and not when the row's fields break the rule (``ai_answer_overlay`` true, an
    ``ai_scene_type`` other than ``street``, ``ai_quality`` <= 1; a field left empty does not count). An answer
    that flags overlay text and still says ``usable: true`` does not keep the image. None when ``ai_usable`` is
    empty or unreadable."""
    usable = _truthy(row.get("ai_usable"))
    if not usable:
        return usable
    if _truthy(row.get("ai_answer_overlay")) is True:
        return False
    scene = str(row.get("ai_scene_type") or "").strip()
    if scene and scene != "street":
        return False
    try:
        quality = float(row.get("ai_quality"))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    return not quality <= 1


def agreement(rows: Iterable[Mapping[str, Any]]) -> AuditAgreement:
    """Agreement of the model's verdict (:func:`model_keeps`: ``ai_usable`` under App. A.4's rule) with
    ``human_verdict`` over rows in the ``image_audit.csv`` form (rows lacking either side are skipped), and the
    human-kept images the model flagged for answer-revealing overlay text (:attr:`AuditAgreement.leak_flags_kept`).

    Before session 19 the raw ``ai_usable`` was compared: an answer flagging burned-in coordinates but saying
    ``usable: true`` then "agreed" with a human keep and reached no review table (break19 finding 6)."""
    pairs: list[tuple[bool, bool, Mapping[str, Any]]] = []
    leaks: list[dict[str, Any]] = []
    for r in rows:
        human = (str(r.get("human_verdict") or "")).strip().lower()
        if human == "keep" and _truthy(r.get("ai_answer_overlay")) is True:
            leaks.append(dict(r))
        model = model_keeps(r)
        human = (str(r.get("human_verdict") or "")).strip().lower()
        if model is None or human not in HUMAN_VERDICTS:
            continue
        pairs.append((model, human == "keep", r))
    a = [m for m, _, _ in pairs]
    b = [h for _, h, _ in pairs]
    kappa = cohen_kappa(a, b) if pairs else float("nan")
    return AuditAgreement(
        n=len(pairs), n_agree=sum(1 for m, h, _ in pairs if m == h), kappa=kappa,
        human_excludes_model_accepts=[dict(r) for m, h, r in pairs if m and not h],
        model_rejects_human_keeps=[dict(r) for m, h, r in pairs if h and not m],
        leak_flags_kept=leaks,
    )


def audit_row(image_path: str, site: str, audit: ImageAudit | None, human: Mapping[str, str] | None = None,
              batch: str | int = "") -> dict[str, Any]:
    """One ``image_audit.csv`` row; ``usable`` follows the human verdict when there is one (the release's
    policy), else the model's verdict checked against App. A.4's rule (:attr:`ImageAudit.keeps_image`);
    ``ai_usable`` is the model's ``usable`` field as it answered."""
    human = human or {}
    hv = human.get("human_verdict", "")
    a = audit or ImageAudit(False)

    def fmt(v: Any) -> Any:
        return "" if v is None else v

    usable = (hv == "keep") if hv else (a.keeps_image if a.parsed else "")
    return {
        "image": image_path, "site": site, "batch": batch, "usable": fmt(usable),
        "ai_answer_overlay": fmt(a.answer_overlay), "ai_overlay_text": a.overlay_text, "ai_scene_type": fmt(a.scene_type),
        "ai_through_glass": fmt(a.through_glass), "ai_tourist_infrastructure": fmt(a.tourist_infrastructure),
        "ai_quality": "" if a.quality is None else float(a.quality), "ai_usable": fmt(a.usable), "ai_why": a.why,
        "human_verdict": hv, "human_reason": human.get("human_reason", ""),
        "human_verified_by": human.get("human_verified_by", ""), "human_note": human.get("human_note", ""),
    }


def write_image_audit_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> Path:
    """Write rows with :data:`IMAGE_AUDIT_COLUMNS` (atomic replace)."""
    path = Path(path)
    with atomic_open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(IMAGE_AUDIT_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in IMAGE_AUDIT_COLUMNS})
    return path


def write_agreement(ag: AuditAgreement, out_dir: str | Path) -> list[Path]:
    """Write the agreement summary (``image_audit_agreement.json``: n, agreement, kappa, table sizes, scene
    types of the model's rejections) and three tables as CSVs with :data:`IMAGE_AUDIT_COLUMNS`: the two
    disagreement tables ``image_audit_human_excludes_model_accepts.csv`` and
    ``image_audit_model_rejects_human_keeps.csv``, and ``image_audit_leak_flags_kept.csv`` (human keep, model
    overlay flag: :attr:`AuditAgreement.leak_flags_kept`), in :data:`AGREEMENT_FILES` order."""
    import orjson

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    summary = {"n": ag.n, "n_agree": ag.n_agree, "agreement": ag.agreement, "kappa": ag.kappa,
               "human_excludes_model_accepts": len(ag.human_excludes_model_accepts),
               "model_rejects_human_keeps": len(ag.model_rejects_human_keeps),
               "leak_flags_kept": len(ag.leak_flags_kept),
               "model_rejects_human_keeps_by_scene": dict(ag.scene_types_of_model_rejects())}
    p0 = out_dir / "image_audit_agreement.json"
    from geoagent.files import atomic_write_bytes

    atomic_write_bytes(p0, orjson.dumps(summary, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY))
    p1 = write_image_audit_csv(ag.human_excludes_model_accepts, out_dir / "image_audit_human_excludes_model_accepts.csv")
    p2 = write_image_audit_csv(ag.model_rejects_human_keeps, out_dir / "image_audit_model_rejects_human_keeps.csv")
    p3 = write_image_audit_csv(ag.leak_flags_kept, out_dir / "image_audit_leak_flags_kept.csv")
    return [p0, p1, p2, p3]
