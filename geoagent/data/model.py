"""The data model shared by crawl, importer and evaluations: sites, images, reference points, ladders.

Frozen dataclasses, one per record kind, plus the two GeoVerify record kinds the release carries
(:class:`VerifyTrial`, a row of the trial table, and :class:`RawVerifyResponse`, one raw model answer).
Every record has a ``key()`` that is unique within its kind; :mod:`geoagent.data.store` stores records
by (kind, key).

Sources: seed 000 Sec. 3 (sites, images, context ladders, referenceability 0-5 and tiers),
Sec. 5.2 (GeoVerify trials, bands, tau = 150 m), Sec. 5.4 (control arms).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any

from geoagent import constants as C

# --- GeoVerify arms (names as in the release's trial table and raw responses) -----------------
ARM_MAIN = "main"
ARM_MISMATCH = "ctrl_mismatch"  # same candidate, image from another continent (Sec. 5.4)
ARM_BLANK = "ctrl_noimage"  # same candidate, uniform gray field (Sec. 5.4)
ARMS = (ARM_MAIN, ARM_MISMATCH, ARM_BLANK)
BLANK_IMAGE_REF = "blank:gray"  # image_ref of the blank-image control arm

BAND_SIGNAL = "signal"
TRUTH_YES = "yes"
TRUTH_NO = "no"

TIER_HIGH, TIER_MID, TIER_LOW = "high", "mid", "low"
TIERS = (TIER_LOW, TIER_MID, TIER_HIGH)  # ordered: index difference = tier distance


def band_label(lo_km: float, hi_km: float) -> str:
    """Release spelling of a distance band, e.g. ``(1.5, 3.0) -> "1.5-3.0km"``."""
    return f"{float(lo_km)}-{float(hi_km)}km"


#: the paper's decoy band labels (tau = 150 m, Sec. 5.2); for another tau: :func:`decoy_band_labels`
DECOY_BAND_LABELS = tuple(band_label(lo, hi) for lo, hi in C.GEOVERIFY_DECOY_BANDS_KM)
LADDER_BAND_LABELS = tuple(band_label(lo, hi) for lo, hi in C.LADDER_BANDS_KM)

#: decimals (km) of a first-band lower edge that starts at tau: 1e-6 km = 1 mm, so a tau in whole (or tenths
#: of) metres keeps its value in the label (99.9 m -> ``0.0999-0.3km``) without float noise (0.09990000000000002)
_EDGE_DECIMALS = 6


@functools.lru_cache(maxsize=64)
def decoy_bands_km(tau_km: float = C.GEOVERIFY_TAU_KM) -> tuple[tuple[float, float], ...]:
    """GeoVerify decoy bands ``((lo, hi), ...)`` in km, nearest first, for the claim tolerance ``tau_km``.

    Seed 000 Sec. 5.2: "The nearest band starts immediately above tau on purpose" (tau = 150 m there, the bands
    :data:`geoagent.constants.GEOVERIFY_DECOY_BANDS_KM`). For any other tau below the nearest band's upper edge
    (0.3 km; the settings refuse 300 m or more) the nearest band starts at tau: ``tau_km = 0.1`` gives
    ``(0.1, 0.3), (0.3, 0.7), ...``, so the distances between tau and 150 m are probed too (fixverify42 #1: they fell
    in no band and were never drawn as decoys), and ``tau_km = 0.2`` gives ``(0.2, 0.3), ...`` (fixverify43 #1: a
    candidate nearer than tau is signal, so the decoys of that band always lay in [0.2, 0.3), but the band was
    labelled ``0.15-0.3km``, edges it did not have). At the paper's 150 m the bands and labels are the paper's
    (docs/judgement-calls.md, "The nearest decoy band starts at tau"). ``tau_km`` at or past 0.3 (refused by the
    settings) keeps the paper's bands.
    """
    (lo, hi), *rest = C.GEOVERIFY_DECOY_BANDS_KM
    if tau_km < hi:
        lo = round(float(tau_km), _EDGE_DECIMALS)
    return ((lo, hi), *rest)


@functools.lru_cache(maxsize=64)
def decoy_band_labels(tau_km: float = C.GEOVERIFY_TAU_KM) -> tuple[str, ...]:
    """Labels of :func:`decoy_bands_km` (``tau_km = 0.1``: ``("0.1-0.3km", "0.3-0.7km", ...)``); the paper's
    :data:`DECOY_BAND_LABELS` for tau = 150 m."""
    return tuple(band_label(lo, hi) for lo, hi in decoy_bands_km(tau_km))


def band_edges(label: str | None) -> tuple[float, float] | None:
    """``(lo_km, hi_km)`` of a band label in the release spelling (``"0.15-0.3km"`` -> ``(0.15, 0.3)``), or None
    for anything else (``signal``, empty, a malformed label)."""
    if not label or not label.endswith("km"):
        return None
    lo, sep, hi = label[:-2].partition("-")
    try:
        out = (float(lo), float(hi))
    except ValueError:
        return None
    return out if sep and 0.0 <= out[0] < out[1] else None


def is_decoy_band_label(label: str | None) -> bool:
    """Whether ``label`` is a decoy band of some tolerance tau >= 1 m (:func:`decoy_band_labels`): one of the
    paper's :data:`DECOY_BAND_LABELS`, or a nearest band that starts at another tau below 300 m (``0.1-0.3km``,
    ``0.2-0.3km``: fixverify42 #1, fixverify43 #1). Which tau a trial table's bands belong to is the planner's check
    (:func:`geoagent.geoverify.plan.check_bands`)."""
    if label in DECOY_BAND_LABELS:
        return True
    edges = band_edges(label)
    _, hi = C.GEOVERIFY_DECOY_BANDS_KM[0]
    return (edges is not None and edges[1] == hi and 0.001 <= edges[0] < hi
            and label == band_label(round(edges[0], _EDGE_DECIMALS), hi))


def tier_of(referenceability: int | float | None) -> str | None:
    """Referenceability tier (Sec. 3.3): 4-5 ``high``, 2-3 ``mid``, 0-1 ``low``; None stays None.

    Raises
    ------
    ValueError
        If the score lies outside [0, 5].
    """
    if referenceability is None:
        return None
    r = float(referenceability)
    if not 0.0 <= r <= 5.0:
        raise ValueError(f"referenceability must be in [0, 5], got {referenceability!r}")
    if r >= 4:
        return TIER_HIGH
    if r >= 2:
        return TIER_MID
    return TIER_LOW


def verify_band(d_km: float, tau_km: float = C.GEOVERIFY_TAU_KM) -> str | None:
    """GeoVerify band of a camera-candidate distance (Sec. 5.2).

    Returns ``"signal"`` when ``d_km < tau_km``, the decoy band label (``"0.15-0.3km"`` ...) when
    ``lo <= d_km < hi`` for one of :func:`decoy_bands_km` ``(tau_km)`` (the nearest starts at tau: ``"0.1-0.3km"``
    for 0.1, ``"0.2-0.3km"`` for 0.2), else None (farther than the last band). Units: km.
    """
    if d_km < tau_km:
        return BAND_SIGNAL
    for i, ((lo, hi), label) in enumerate(zip(decoy_bands_km(tau_km), decoy_band_labels(tau_km))):
        # the nearest band holds every distance from tau on (its label's edge is tau rounded to 1 mm)
        if (i == 0 or lo <= d_km) and d_km < hi:
            return label
    return None


def ladder_band(dist_km: float) -> str | None:
    """Context-ladder band (Sec. 3.3) of a site-to-reference distance in km, or None outside them."""
    for (lo, hi), label in zip(C.LADDER_BANDS_KM, LADDER_BAND_LABELS):
        if lo <= dist_km < hi:
            return label
    return None


@functools.lru_cache(maxsize=None)
def _field_names(cls: type) -> tuple[str, ...]:
    """The dataclass field names of ``cls``, in order (once per class)."""
    return tuple(f.name for f in dataclasses.fields(cls))


class _Record:
    """Mixin: ``to_dict`` / ``from_dict`` for flat frozen dataclasses."""

    __slots__ = ()
    kind: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The fields as a dict, by name. The records are flat (every field a scalar), so the values are taken as
        they are: ``dataclasses.asdict``'s deep copy gives the same dict and cost 11 s of a 100,000-call GeoVerify
        plan (scale37 #3). A record with a nested field overrides this (:class:`ContextLadder`)."""
        return {name: getattr(self, name) for name in _field_names(type(self))}

    @classmethod
    def from_dict(cls, d: dict[str, Any]):
        names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        return cls(**{k: v for k, v in d.items() if k in names})


@dataclass(frozen=True, slots=True)
class Site(_Record):
    """A site: a landmark-centred location at which images are taken (Sec. 3.1-3.2).

    Units: ``lat``/``lon`` in degrees. ``continent`` is kept as released (two-letter code).
    """

    kind = "site"
    site_id: str
    city: str
    country: str
    continent: str
    lat: float
    lon: float
    landmark: str | None = None
    qid: str | None = None
    type: str | None = None
    sitelinks: float | None = None
    sv_perspective: float | None = None
    selection_method: str | None = None

    def key(self) -> str:
        return self.site_id


@dataclass(frozen=True, slots=True)
class Image(_Record):
    """A street-level image at a site. ``lat``/``lon`` are the camera position (degrees).

    ``path`` is relative to the campaign's image root, always with ``/`` separators.
    ``captured_at`` is ISO 8601 UTC text when known; ``compass_angle_deg`` in degrees.
    """

    kind = "image"
    image_id: str
    site_id: str
    lat: float
    lon: float
    captured_at: str | None = None
    compass_angle_deg: float | None = None
    source: str = "mapillary"
    path: str | None = None
    continent: str | None = None

    def key(self) -> str:
        return self.image_id


@dataclass(frozen=True, slots=True)
class ReferencePoint(_Record):
    """A Wikidata place usable as a location hint (Sec. 3.3).

    Either ``lat``/``lon`` (degrees) or ``dist_km`` (km from the site centre) is known; ladders in the
    release carry only ``dist_km``. ``referenceability`` is the audited 0-5 score; ``tier`` follows it.
    """

    kind = "reference_point"
    qid: str | None
    name_en: str | None
    name_zh: str | None = None
    lat: float | None = None
    lon: float | None = None
    dist_km: float | None = None
    referenceability: int | None = None
    usable: bool = True
    band: str | None = None
    tier: str | None = None
    pageviews: int | None = None
    site_id: str | None = None
    label_raw: str | None = None
    n_in_cell: int | None = None
    n_taken: int | None = None

    def key(self) -> str:
        return f"{self.site_id}|{self.qid or self.name_en}"


@dataclass(frozen=True, slots=True)
class ContextLadder(_Record):
    """A site's context ladder: reference points by band x tier (Sec. 3.3)."""

    kind = "ladder"
    site_id: str
    points: tuple[ReferencePoint, ...] = field(default_factory=tuple)

    def key(self) -> str:
        return self.site_id

    def to_dict(self) -> dict[str, Any]:
        return {"site_id": self.site_id, "points": [p.to_dict() for p in self.points]}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ContextLadder":
        return cls(site_id=d["site_id"], points=tuple(ReferencePoint.from_dict(p) for p in d.get("points", ())))

    def cell(self, band: str, tier: str) -> tuple[ReferencePoint, ...]:
        """Reference points of one (band, tier) cell."""
        return tuple(p for p in self.points if p.band == band and p.tier == tier)


def make_trial_id(image_id: str, arm: str, cand: str) -> str:
    """Release trial id ``image_id|arm|cand`` (the raw responses are keyed by (trial_id, model))."""
    return f"{image_id}|{arm}|{cand}"


#: what a swapped-image control's task id puts before the image it shows (:func:`make_task_id`)
TASK_SHOWS_TAG = "shows="


def make_task_id(trial_id: str, arm: str, image_ref: str | None) -> str:
    """A trial's task id in a campaign's plan and queues: its release ``trial_id``, and on a swapped-image control
    (arm ``ctrl_mismatch``) that names the image it shows also ``|shows=<image_ref>``.

    The release trial id ``image_id|arm|cand`` (:func:`make_trial_id`) does not say which image a ``ctrl_mismatch``
    trial shows (Sec. 5.4: an image of another continent, drawn by the trial builder). A crawl that grows (more
    sites, a re-run, a review verdict) can redraw that image under the same trial id; keyed by the trial id alone,
    the queue kept the old task (its put is idempotent by key) and the old answer, about the old image, was
    scored as the new trial's (fixverify41 #1: 66 of 120 swapped-image answers showed another image than the
    trial table named). Keyed by the image too, a redrawn image is a new task (a new request) and the old task
    leaves the plan (its answer is kept, not scored). The trial id itself, which the release's raw responses are
    keyed by, does not change; neither does the task id of a trial of another arm or of one whose table names no
    image (the public release's trial table has no ``image_ref``)."""
    if arm == ARM_MISMATCH and image_ref:
        return f"{trial_id}|{TASK_SHOWS_TAG}{image_ref}"
    return trial_id


def earlier_task_id(task_key: str) -> str | None:
    """The key a task of key ``task_key`` had before a swapped-image control's task id named the image it shows
    (:func:`make_task_id`, fixverify41 #1): ``<trial_id>|<rest>`` for ``<trial_id>|shows=<image_ref>|<rest>``; None
    for a key that names no image shown. Used to tell a plan changed only by the key's form from a changed plan
    (upgrade41 B); :func:`geoagent.geoverify.rekey.new_key` maps the other way, from a stored row."""
    head, tag, tail = task_key.partition(f"|{TASK_SHOWS_TAG}")
    if not tag:
        return None
    _, sep, rest = tail.partition("|")
    return f"{head}|{rest}" if sep else head


@dataclass(frozen=True, slots=True)
class VerifyTrial(_Record):
    """One GeoVerify trial: image x candidate x arm (Sec. 5.2, 5.4).

    ``image_id`` is the image whose camera position defines the truth; ``image_ref`` is what the model
    is shown (the same id for ``main``, another continent's image id for ``ctrl_mismatch``,
    ``"blank:gray"`` for ``ctrl_noimage``). Distances in km, coordinates in degrees. ``truth`` is
    ``"yes"`` iff ``d_km < tau`` (Eq. 1) on the main arm; control arms are all ``"no"``.
    """

    kind = "verify_trial"
    image_id: str
    site_id: str
    arm: str
    cand: str
    img_lat: float
    img_lon: float
    cand_lat: float | None
    cand_lon: float | None
    referenceability: float | None
    d_km: float | None
    band: str | None
    truth: str
    continent: str | None = None
    path: str | None = None
    image_ref: str | None = None
    cand_qid: str | None = None

    @property
    def trial_id(self) -> str:
        return make_trial_id(self.image_id, self.arm, self.cand)

    @property
    def task_id(self) -> str:
        """The trial's task id in a campaign's plan (:func:`make_task_id`): ``trial_id``, plus the image shown on
        a swapped-image control."""
        return make_task_id(self.trial_id, self.arm, self.image_ref)

    def key(self) -> str:
        return self.trial_id


@dataclass(frozen=True, slots=True)
class RawVerifyResponse(_Record):
    """One recorded GeoVerify model answer from the release (``verify_raw*.jsonl``).

    ``raw`` is the model's verbatim text (untrusted). Token counts in tokens.
    """

    kind = "verify_raw"
    trial_id: str
    model: str
    raw: str | None
    input_tokens: int = 0
    output_tokens: int = 0
    stop_reason: str | None = None
    error: str | None = None
    ts: float | None = None
    image_id: str | None = None
    site_id: str | None = None
    arm: str | None = None
    band: str | None = None
    cand: str | None = None
    truth: str | None = None
    d_km: float | None = None
    referenceability: float | None = None

    @property
    def replay_key(self) -> str:
        return f"{self.trial_id}|{self.model}"

    def key(self) -> str:
        return self.replay_key


RECORD_TYPES: dict[str, type] = {
    t.kind: t for t in (Site, Image, ReferencePoint, ContextLadder, VerifyTrial, RawVerifyResponse)
}
