"""GeoVerify trial builder (seed 000 Sec. 5.2 trials, Sec. 5.4 control arms).

Per image:

* **signal** trials: every pool candidate with haversine distance < tau (150 m) from the camera, truth yes;
* **noise** trials: up to ``n_per_band`` candidates from each decoy band (0.15-0.3, 0.3-0.7, 0.7-1.5,
  1.5-3 and 3-6 km; with another tau the nearest band starts at tau, e.g. 0.1-0.3 km or 0.2-0.3 km:
  :func:`geoagent.data.model.decoy_bands_km`), truth no, matched on referenceability to the image's signal candidates: draws prefer
  the same tier, then a tier one step away, and fall back to any tier only where the cell has nothing
  closer (counted as *unmatched*);
* **control arms** on ``n_control`` of the image's main-arm candidates: ``ctrl_mismatch`` (same candidate,
  image from another continent, ``image_ref`` = that image's id) and ``ctrl_noimage`` (``image_ref`` =
  ``"blank:gray"``). All control trials are noise (truth no); they keep the main trial's band and d_km.

Every trial is its own model request: no two trials show the same image with the same claim. Two images
of one site share their candidate pool, so both can put a control on the same candidate and draw the same
image of the other continent (or an image whose own main arm already names that candidate); one answer
would then be scored for two trials. Such a mismatched-image draw is **redrawn** (Sec. 5.4 gives every
image its k controls): uniformly, with ``random.Random(f"{seed}|{image_id}|redraw|{cand}")``, among the
other continent's images not yet shown with that claim; where none is left it is dropped (counted in
``BuildReport.mismatch_dropped``; the image keeps its blank control). Conflicts are settled in order of
(image_id, candidate), the first keeping its draw.

Designs are **nested** (design version :data:`TRIAL_BUILDER_VERSION`): for a fixed seed, lowering
``n_per_band`` or ``n_control`` keeps a subset of the trials and raising it a superset, so answers already paid
for stay in the plan. Each draw has a random stream of its own, derived from the seed and the draw's identity:

* decoys of one (image, band) cell: ``random.Random(f"{seed}|{image_id}|{band}")``, drawn one after another
  (the tier matching above), so the cell's ``k`` draws are the first ``k`` of its ``k + 1``; from a tau of 150 m
  up the nearest band's stream keeps the paper's name ``0.15-0.3km`` whatever the band's label
  (:func:`_cell_stream_band`);
* control candidates: the image's main-arm candidates ordered by their place in their cell's draw order
  (signal candidates by distance, decoys by draw), ties by a key from
  ``random.Random(f"{seed}|{image_id}|control|{cand}")``; the first ``n_control`` get the two control arms.
  That is a uniform draw among the candidates drawn first in each cell (the nearest signal candidate and one
  decoy per band), extended to those drawn second only when ``n_control`` exceeds them; so the controls do
  not change with ``n_per_band`` (nor with ``max_signal``) as long as the cells keep those first draws, and
  ``n_control`` + 1 adds one;
* the mismatched image of a control: ``random.Random(f"{seed}|{image_id}|mismatch|{cand}")`` over the other
  continent's images in image-id order.

Each image's draws depend only on the seed and that image, not on the order of images; a redraw depends on
the draws of the images it collided with, never on their order either. Version 1 (before 2026-12-01) drew
everything of an image from one stream, so one decoy fewer in a band redrew every later band and the
controls; a build campaign resumed across that change plans other trials (docs/campaigns.md, "The trial builder is
versioned"; CHANGELOG.md).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from dataclasses import replace as replace_trial

from geoagent import constants as C
from geoagent.data.model import (
    ARM_BLANK,
    ARM_MAIN,
    ARM_MISMATCH,
    BAND_SIGNAL,
    BLANK_IMAGE_REF,
    DECOY_BAND_LABELS,
    TIERS,
    TRUTH_NO,
    TRUTH_YES,
    Image,
    ReferencePoint,
    VerifyTrial,
    decoy_band_labels,
    tier_of,
    verify_band,
)
from geoagent.geo import continent_code, haversine_km

#: version of the trial design :func:`build_trials` draws (labelling the nearest band of a tau above 150 m by its real
#: lower edge, ``0.2-0.3km`` for 200 m, fixverify43 #1, drew the same trials: no version): 4 = as 3, and with a tau
#: below 150 m the nearest decoy band starts at tau (3, before 2026-12-06: at 150 m whatever tau, so the distances
#: between tau and 150 m were never drawn; fixverify42 #1); 3 = as 2, and of candidates sharing a name the nearest to
#: the image is the claim's place (2, before 2026-12-05: the first in pool order); 2 = nested draws (one stream per band
#: cell, controls and mismatched images drawn apart from the decoys); 1 = one stream per image (before 2026-12-01). The
#: same inputs and seed give other trials under another version.
TRIAL_BUILDER_VERSION = 4


#: what each trial builder version changed, oldest first: ``(version, below_km)``, the version's change reaching the
#: trials of every tau (``below_km`` None) or only of a tau below ``below_km`` (km). :func:`trial_builder_version` reads
#: it; a new version adds its row here (checked at import: the last row is :data:`TRIAL_BUILDER_VERSION`).
TRIAL_BUILDER_CHANGES: tuple[tuple[int, float | None], ...] = (
    (1, None),  # one stream per image
    (2, None),  # nested draws: one stream per band cell
    (3, None),  # of candidates sharing a name, the nearest to the image is the claim's place
    (4, C.GEOVERIFY_DECOY_BANDS_KM[0][0]),  # the nearest band starts at tau: only a tau below 150 m draws otherwise
)
if TRIAL_BUILDER_CHANGES[-1][0] != TRIAL_BUILDER_VERSION:  # not an assert: it must fail under python -O too
    raise RuntimeError(f"geoagent.geoverify.trials: TRIAL_BUILDER_VERSION is {TRIAL_BUILDER_VERSION} but "
                       f"TRIAL_BUILDER_CHANGES ends at {TRIAL_BUILDER_CHANGES[-1][0]}: add the new version's row "
                       "(the taus it changes)")


def trial_builder_version(tau_km: float = C.GEOVERIFY_TAU_KM) -> int:
    """The trial builder version a campaign with claim tolerance ``tau_km`` (km) records
    (:func:`geoagent.runtime.manifest.design_versions`): the newest version that changed the trials of such a
    campaign (:data:`TRIAL_BUILDER_CHANGES`). Version 4 changed only designs with tau below 150 m (the nearest band
    starts at tau), so a campaign at tau >= 150 m records 3: the same trials, and no "trial builder changed" warning
    (nor, on a Redis campaign, a refusal) for a change that plans nothing new. A campaign at tau < 150 m planned under
    version 3 is told of the change (:func:`geoagent.runtime.manifest.config_changes`), and its tasks the new plan no
    longer holds are set aside, never silently re-used."""
    for version, below_km in reversed(TRIAL_BUILDER_CHANGES):
        if below_km is None or tau_km < below_km:
            return version
    return TRIAL_BUILDER_CHANGES[0][0]


def label_trial(
    img_lat: float, img_lon: float, cand_lat: float, cand_lon: float, tau_km: float = C.GEOVERIFY_TAU_KM
) -> tuple[float, str | None, str]:
    """``(d_km, band, truth)`` of a camera-candidate pair (Eq. 1): truth ``yes`` iff ``d_km < tau_km``."""
    d = haversine_km(img_lat, img_lon, cand_lat, cand_lon)
    return d, verify_band(d, tau_km), TRUTH_YES if d < tau_km else TRUTH_NO


@dataclass
class BuildReport:
    """Counts from one build: trials per (arm, band), images without signal, unmatched decoys, short cells;
    ``bands``: the decoy band labels of the build's tau (:func:`geoagent.data.model.decoy_band_labels`)."""

    counts: Counter = field(default_factory=Counter)
    bands: tuple[str, ...] = field(default_factory=decoy_band_labels)
    n_images: int = 0
    images_without_signal: int = 0
    unmatched_decoys: int = 0
    short_cells: int = 0  # (image, band) cells with fewer candidates than n_per_band
    images_without_mismatch: int = 0
    #: mismatched-image draws that repeated an earlier trial's request (same image shown, same claim) and
    #: were drawn again, and those for which no unused image was left (dropped)
    mismatch_redrawn: int = 0
    mismatch_dropped: int = 0

    def per_band(self, arm: str = ARM_MAIN) -> dict[str, int]:
        return {b: self.counts.get((arm, b), 0) for b in (BAND_SIGNAL, *self.bands)}


def _tier_index(p: ReferencePoint) -> int | None:
    t = p.tier or tier_of(p.referenceability)
    return TIERS.index(t) if t in TIERS else None


def _pick_decoys(
    rng: random.Random, cell: list[ReferencePoint], targets: list[int | None], k: int
) -> tuple[list[ReferencePoint], int]:
    """Draw up to ``k`` decoys from one band cell, matching tiers to ``targets`` in turn."""
    remaining = list(cell)
    chosen: list[ReferencePoint] = []
    unmatched = 0
    for j in range(min(k, len(remaining))):
        target = targets[j % len(targets)] if targets else None
        pool = remaining
        if target is not None:
            same = [p for p in remaining if _tier_index(p) == target]
            near = [p for p in remaining if (ti := _tier_index(p)) is not None and abs(ti - target) <= 1]
            if same:
                pool = same
            elif near:
                pool = near
            else:
                unmatched += 1
        p = pool[rng.randrange(len(pool))]
        chosen.append(p)
        remaining.remove(p)
    return chosen, unmatched


def build_trials(
    images: Sequence[Image],
    pools: Mapping[str, Iterable[ReferencePoint]],
    *,
    seed: int = 0,
    n_per_band: int | None = 2,
    max_signal: int | None = None,
    n_control: int = 2,
    tau_km: float = C.GEOVERIFY_TAU_KM,
    continents: Mapping[str, str] | None = None,
) -> tuple[list[VerifyTrial], BuildReport]:
    """Build GeoVerify trials for ``images`` from per-site candidate pools.

    Parameters
    ----------
    images : sequence of Image
        Camera positions (degrees); ``continent`` is used for the mismatched-image arm (else
        ``continents[site_id]``).
    pools : mapping site_id -> iterable of ReferencePoint
        Audited, usable candidates with ``lat``/``lon``; points without coordinates or ``usable=False``
        are ignored. Names (``name_en``) are what the model sees: of candidates sharing one, the nearest to the
        image is the claim's place (ties: the smaller QID text), and the others are not drawn.
    seed : int
        Build seed; with the same inputs the same trials come out.
    n_per_band : int or None
        Decoys drawn per band per image (None = every candidate in the band); the draws for ``n`` are the
        first ``n`` of those for ``n + 1`` (nested designs, module docstring).
    max_signal : int or None
        Cap on signal trials per image, nearest first (None = all within tau).
    n_control : int
        Main-arm candidates per image that also get the two control arms (0 = no controls): the first
        ``n_control`` in draw-depth order (module docstring), so they do not depend on ``n_per_band``.
    tau_km : float
        Claim tolerance in km (the paper's 150 m: 0.15); with another tau the nearest decoy band starts at tau
        (:func:`geoagent.data.model.decoy_bands_km`, band labels such as ``0.1-0.3km`` or ``0.2-0.3km``). A candidate
        nearer than tau is always signal, never a decoy (Eq. 1).
    continents : mapping site_id -> continent, optional

    Returns
    -------
    (trials, report) : list of VerifyTrial, BuildReport
    """
    bands = decoy_band_labels(tau_km)
    rep = BuildReport(bands=bands)
    trials: list[VerifyTrial] = []
    cont_of = dict(continents or {})
    by_continent: dict[str, list[Image]] = {}
    for im in sorted(images, key=lambda im: im.image_id):  # draws must not depend on the order of images
        c = _continent_key(im.continent or cont_of.get(im.site_id))
        if c:
            by_continent.setdefault(c, []).append(im)
    others_of: dict[str | None, list[Image]] = {}
    for im in images:
        rep.n_images += 1
        cont = _continent_key(im.continent or cont_of.get(im.site_id))
        signal: list[tuple[float, ReferencePoint]] = []
        cells: dict[str, list[tuple[float, ReferencePoint]]] = {b: [] for b in bands}
        # of candidates sharing a name (the model sees the name alone) the claim is about the nearest: "within
        # 150 m of St Mary's Church" is true if either is, so the nearest decides the band and the truth (ties: the
        # smaller QID text, as the ladder's one_per_place); not the first in pool order (geoverify38 #1)
        nearest: dict[str, tuple[float, str, str | None, ReferencePoint]] = {}
        for p in pools.get(im.site_id, ()):
            if not p.usable or p.lat is None or p.lon is None or not p.name_en:
                continue
            d, band, _ = label_trial(im.lat, im.lon, p.lat, p.lon, tau_km)
            key = (d, p.qid or "", band, p)
            if p.name_en not in nearest or key[:2] < nearest[p.name_en][:2]:
                nearest[p.name_en] = key
        for d, _, band, p in nearest.values():
            if band == BAND_SIGNAL:
                signal.append((d, p))
            elif band is not None:
                cells[band].append((d, p))
        signal.sort(key=lambda x: (x[0], x[1].name_en))
        if max_signal is not None:
            signal = signal[:max_signal]
        if not signal:
            rep.images_without_signal += 1
        dist = {p.name_en: d for d, p in signal}
        main: list[VerifyTrial] = []

        def mk(p: ReferencePoint, d: float, band: str, truth: str, arm: str = ARM_MAIN, ref: str | None = None) -> VerifyTrial:
            return VerifyTrial(
                image_id=im.image_id, site_id=im.site_id, arm=arm, cand=p.name_en or "", img_lat=im.lat,
                img_lon=im.lon, cand_lat=p.lat, cand_lon=p.lon,
                referenceability=None if p.referenceability is None else float(p.referenceability),
                d_km=round(d, 4), band=band, truth=truth, continent=cont, path=im.path,
                image_ref=ref if ref is not None else im.image_id, cand_qid=p.qid,
            )

        depth: dict[str, int] = {}  # a main candidate's place in its cell's draw order (0 = drawn first)
        for j, (d, p) in enumerate(signal):
            main.append(mk(p, d, BAND_SIGNAL, TRUTH_YES))
            depth[p.name_en or ""] = j
        targets = [_tier_index(p) for _, p in signal]
        for i, band in enumerate(bands):
            cell = sorted(cells[band], key=lambda x: x[1].name_en or "")
            for _, p in cell:
                dist[p.name_en] = next(d for d, q in cell if q is p)
            k = len(cell) if n_per_band is None else n_per_band
            if len(cell) < k:
                rep.short_cells += 1
            # the cell's own stream: its k draws are the first k of its k + 1 draws (nested designs)
            stream = _cell_stream_band(i, band, tau_km)
            chosen, unmatched = _pick_decoys(random.Random(f"{seed}|{im.image_id}|{stream}"), [p for _, p in cell],
                                             targets, k)
            rep.unmatched_decoys += unmatched
            for j, p in enumerate(chosen):
                main.append(mk(p, dist[p.name_en], band, TRUTH_NO))
                depth[p.name_en or ""] = j
        trials.extend(main)
        if n_control > 0 and main:
            ctrl = sorted(main, key=lambda t: (depth[t.cand], _control_key(seed, im.image_id, t.cand)))[:n_control]
            others = others_of.setdefault(cont, [o for c, ims in sorted(by_continent.items()) if c != cont for o in ims])
            for t in ctrl:
                p = ReferencePoint(qid=t.cand_qid, name_en=t.cand, lat=t.cand_lat, lon=t.cand_lon,
                                   referenceability=None if t.referenceability is None else int(t.referenceability))
                d = t.d_km if t.d_km is not None else 0.0
                if others:
                    other = others[random.Random(f"{seed}|{im.image_id}|mismatch|{t.cand}").randrange(len(others))]
                    trials.append(mk(p, d, t.band or "", TRUTH_NO, ARM_MISMATCH, other.image_id))
                else:
                    rep.images_without_mismatch += 1
                trials.append(mk(p, d, t.band or "", TRUTH_NO, ARM_BLANK, BLANK_IMAGE_REF))
    trials = _unique_mismatch(trials, others_of, seed, rep)
    for t in trials:
        rep.counts[(t.arm, t.band)] += 1
    return trials, rep


def _cell_stream_band(i: int, band: str, tau_km: float) -> str:
    """The band name in the seed of the decoy stream of band ``i`` (0 = nearest) labelled ``band``, at tolerance
    ``tau_km`` (km): the label, except for the nearest band of a tau from 150 m up, whose stream keeps the paper's
    label ``0.15-0.3km``. Until fixverify43 #1 that band was labelled ``0.15-0.3km`` whatever such a tau (its decoys
    already started at tau: nearer candidates are signal); keeping the stream's name keeps its draws, so giving it
    its real label (``0.2-0.3km`` for 200 m) plans no new trial, needs no new trial builder version, and sets no
    paid answer aside. Below 150 m the stream is named by the label since trial builder 4 (fixverify42 #1)."""
    (paper_lo, _), *_ = C.GEOVERIFY_DECOY_BANDS_KM
    return DECOY_BAND_LABELS[0] if i == 0 and tau_km >= paper_lo else band


def _control_key(seed: int, image_id: str, cand: str) -> float:
    """Uniform [0, 1) order key of one candidate of one image for the control draw: depends on nothing else."""
    return random.Random(f"{seed}|{image_id}|control|{cand}").random()


def _continent_key(c: str | None) -> str | None:
    # tables written before continents were checked (a crawl's sites.csv with "eu" beside "EU") still pair
    # by continent code, not by spelling; an unknown value keeps its upper-cased self
    try:
        return continent_code(c) or None
    except ValueError:
        return str(c).strip().upper() or None


def one_continent_note(continents: Iterable[str | None]) -> str | None:
    """Why no swapped-image control (``ctrl_mismatch``) can be built from images of these ``continents`` (one
    entry per city or image; empty / None = not given), or None when at least two distinct continents are
    given.

    The swapped-image arm shows an image from *another continent* than the claim's site (seed 000's design,
    :func:`build_trials`), so images of one continent build none, and a GeoVerify read-out over the trials
    says "swapped-image control not run" (:func:`geoagent.scoring.sdt.readout`: its validity check of that
    arm is skipped). A lone ``AN`` is named as North America (the release's code for it, which most readers
    take for Antarctica: :data:`geoagent.constants.CONTINENT_CODES`)."""
    named = sorted({k for k in map(_continent_key, continents) if k})
    if len(named) >= 2:
        return None
    where = f"every city is on one continent ({named[0]})" if named else "no city names its continent"
    if named == ["AN"]:  # most readers take AN for Antarctica; the release (and this project) use it for North America
        where += ", which is North America in the release's continent codes (NA is read as AN)"
    return (f"no swapped-image control trials (ctrl_mismatch) can be built: {where}, and that arm shows an "
            "image from another continent than the claim's site; add cities on another continent "
            "([[crawl.cities]] with continent = ...), else a GeoVerify campaign over these trials reads out "
            "'swapped-image control not run' (the pre-registered check of that arm is skipped)")


def _unique_mismatch(
    trials: list[VerifyTrial], others_of: Mapping[str | None, Sequence[Image]], seed: int, rep: BuildReport
) -> list[VerifyTrial]:
    """Redraw (or drop) mismatched-image trials whose (image shown, claim) repeats another trial's.

    Main trials hold their requests; mismatch trials are settled in order of (image_id, cand): the first
    with a request keeps it, a later one is redrawn among ``others_of[its continent]`` not shown with that
    claim by any trial (kept or first-drawn), else dropped. Blank trials show a gray field of their own
    per image (:func:`geoagent.geoverify.stages.plan_requests`), so they never repeat.
    """
    taken = {(t.image_ref or t.image_id, t.cand) for t in trials if t.arm == ARM_MAIN}
    drawn = Counter((t.image_ref, t.cand) for t in trials if t.arm == ARM_MISMATCH)
    replace: dict[int, VerifyTrial | None] = {}
    order = sorted((i for i, t in enumerate(trials) if t.arm == ARM_MISMATCH),
                   key=lambda i: (trials[i].image_id, trials[i].cand))
    for i in order:
        t = trials[i]
        if (t.image_ref, t.cand) not in taken:
            taken.add((t.image_ref, t.cand))
            continue
        free = [o for o in others_of.get(t.continent, ())
                if (o.image_id, t.cand) not in taken and not drawn[(o.image_id, t.cand)]]
        if free:
            o = free[random.Random(f"{seed}|{t.image_id}|redraw|{t.cand}").randrange(len(free))]
            replace[i] = replace_trial(t, image_ref=o.image_id)
            taken.add((o.image_id, t.cand))
            rep.mismatch_redrawn += 1
        else:
            replace[i] = None
            rep.mismatch_dropped += 1
    if not replace:
        return trials
    return [replace.get(i, t) for i, t in enumerate(trials) if replace.get(i, t) is not None]


def pools_from_trials(trials: Iterable[VerifyTrial]) -> dict[str, list[ReferencePoint]]:
    """Candidate pools per site recovered from a trial table (name, coordinates, referenceability).

    Used to rebuild the release's trials from coordinates; the release ladders carry distances only.
    """
    pools: dict[str, dict[str, ReferencePoint]] = {}
    for t in trials:
        if t.cand_lat is None or t.cand_lon is None:
            continue
        site = pools.setdefault(t.site_id, {})
        if t.cand not in site:
            ref = None if t.referenceability is None else int(round(t.referenceability))
            site[t.cand] = ReferencePoint(qid=t.cand_qid, name_en=t.cand, lat=t.cand_lat, lon=t.cand_lon,
                                          referenceability=ref, tier=tier_of(ref), site_id=t.site_id)
    return {s: list(v.values()) for s, v in pools.items()}
