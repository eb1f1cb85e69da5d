"""The GeoHint request plan: image x model x condition x reference point (seed 000 Sec. 4, 6).

* Every context condition gets one request per image x model x reference point of the site's ladder;
  baseline conditions (no hint) get ``baseline_repeats`` requests per image x model.
* Strictly paired: the sampling decision is made per *unit* (model, site, image, reference point),
  never per condition, so forced, forced_warn and forced_chain share image, model and reference point
  whenever any of them is planned (Sec. 6.3: "strictly paired").
* Per-model sampling rates (the paper samples claude-opus-5 at one third, Sec. 6) are deterministic
  under the campaign seed: a unit is kept by :func:`geoagent.config.is_sampled` (SHA-256 of the seed and
  the unit key, mapped to [0, 1), compared with the rate). Each request records its rate in ``meta.sample_rate``; :class:`PlanSummary` records
  rates and kept/total units per model for the manifest.
"""

from __future__ import annotations

import hashlib

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geoagent.config import is_sampled, plan_rank
from geoagent.data.model import ContextLadder, Image, ReferencePoint, Site, ladder_band
from geoagent.geohint.conditions import Condition, PromptBook

DEFAULT_MAX_OUTPUT_TOKENS = 1024


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """A model in the campaign: provider kind, model id, sampling rate in (0, 1]."""

    model: str
    provider: str = "simulated"
    sample_rate: float = 1.0
    #: ``(selection method, rate)`` pairs: the rate for the sites whose ``selection_method`` (sites.csv) is that
    #: one, ``sample_rate`` for the others (:meth:`rate_for`). Seed 000 Sec. 6: "claude-opus-5 is sampled at one
    #: third the rate of the others on the automatic batch" (the 19 hand-picked sites at the full rate)
    rates_by_selection: tuple[tuple[str, float], ...] = ()

    def __post_init__(self) -> None:
        for what, rate in (("sample_rate", self.sample_rate), *((f"sample rate for {k!r} sites", r)
                                                                 for k, r in self.rates_by_selection)):
            if not 0.0 < float(rate) <= 1.0:
                raise ValueError(f"{what} of model {self.model!r} must be in (0, 1], got {rate!r}")

    def rate_for(self, selection_method: str | None) -> float:
        """The sampling rate of this model's units at a site selected by ``selection_method`` (None: unknown)."""
        for method, rate in self.rates_by_selection:
            if method == selection_method:
                return float(rate)
        return float(self.sample_rate)

    def rates_in_use(self, methods: Iterable[str | None]) -> dict[str | None, float]:
        """``{selection method: rate}`` for the sites' ``methods`` (None or "" for a site without one): the rates
        this model is actually sampled at, so a ``default`` no site falls under is not reported (walk39 #9)."""
        return {m: self.rate_for(m or None) for m in methods}


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One planned model request (the payload of a ``requests`` message, see :meth:`payload`)."""

    key: str
    provider: str
    model: str
    prompt: str
    image_id: str
    image_ref: str | None
    params: dict[str, Any]
    meta: dict[str, Any]

    def payload(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "model": self.model,
            "prompt": self.prompt,
            "image_id": self.image_id,
            "image_ref": self.image_ref,
            "params": dict(self.params),
            "meta": dict(self.meta),
        }


@dataclass(slots=True)
class PlanSummary:
    """What the plan contains, for the campaign manifest."""

    seed: int
    conditions: list[str]
    baseline_repeats: int
    sample_rates: dict[str, float] = field(default_factory=dict)
    #: per model, the rates of sites by ``selection_method`` where ``[geohint] sample_rates`` gives a table
    #: (:attr:`ModelSpec.rates_by_selection`); ``sample_rates`` is then the rate of the other sites
    sample_rates_by_selection: dict[str, dict[str, float]] = field(default_factory=dict)
    units_total: dict[str, int] = field(default_factory=dict)
    units_kept: dict[str, int] = field(default_factory=dict)
    requests_by_condition: dict[str, int] = field(default_factory=dict)
    requests_by_model: dict[str, int] = field(default_factory=dict)
    sites_without_ladder: list[str] = field(default_factory=list)
    sites_without_images: list[str] = field(default_factory=list)
    #: the ``selection_method`` values of the planned sites ("" for a site without one): which rates of a
    #: ``[geohint] sample_rates`` table apply to any site (walk39 #9: a ``default`` that covers no site was shown
    #: as the model's rate)
    selection_methods: list[str] = field(default_factory=list)
    #: usable ladder points left out because their distance lies in no band (0.5-6 km, seed 000 Sec. 3.3):
    #: asked about, they fell out of every band table (geohint39 #5)
    points_outside_bands: int = 0
    #: usable ladder points in bands left out by ``points_per_cell`` (:func:`cell_draw`)
    points_not_drawn: int = 0

    def to_json(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__slots__}


def unit_key(model: str, site_id: str, image_id: str, ref: str) -> str:
    """Sampling key of one unit (model, site, image, reference point or ``baseline``)."""
    return f"geohint|{model}|{site_id}|{image_id}|{ref}"


def unit_sampled(seed: int, model: str, site_id: str, image_id: str, ref: str, rate: float) -> bool:
    """Whether a unit is kept at ``rate`` (:func:`geoagent.config.is_sampled`: SHA-256 of seed and key)."""
    return is_sampled(unit_key(model, site_id, image_id, ref), rate, seed)


def message_key(model: str, site_id: str, image_id: str, condition: str, ref: str, repeat: int) -> str:
    """Queue idempotency key of one planned request (readable, unique within a campaign)."""
    return f"gh|{model}|{site_id}|{image_id}|{condition}|{ref}|r{repeat}"


def cell_draw(points: Sequence[ReferencePoint], per_cell: int, *, seed: int, site_id: str) -> list[ReferencePoint]:
    """At most ``per_cell`` of ``points`` per ladder cell (band x tier; band from the distance where a point has
    none), in their given order: within a cell the points with the smallest SHA-256 of ``seed``, ``site_id`` and
    the point's reference id (:func:`_ref_id`), so the draw of a cell does not depend on the other cells, the
    points' order or the models, and a larger ``per_cell`` keeps every point a smaller one kept. Seed 000
    Sec. 3.3: "2 draws per cell gives up to 18 reference points per site".

    Raises
    ------
    ValueError
        ``per_cell`` < 1.
    """
    if per_cell < 1:
        raise ValueError(f"points_per_cell must be >= 1, got {per_cell}")
    cells: dict[tuple[str | None, str | None], list[tuple[bytes, int]]] = {}
    for i, p in enumerate(points):
        band = p.band if p.band is not None or p.dist_km is None else ladder_band(p.dist_km)
        cell = (band, p.tier)
        digest = hashlib.sha256(f"{seed}|{site_id}|{_ref_id(p)}".encode("utf-8")).digest()
        cells.setdefault(cell, []).append((digest, i))
    keep = {i for members in cells.values() for _, i in sorted(members)[:per_cell]}
    return [p for i, p in enumerate(points) if i in keep]


def _image_ref(img: Image, image_root: str | Path | None) -> str | None:
    if image_root is None or not img.path:
        return None
    p = Path(image_root) / img.path
    return str(p) if p.is_file() else None


def _ref_id(p: ReferencePoint) -> str:
    return p.qid or f"name:{p.name_en}"


def plan_requests(
    sites: Mapping[str, Site],
    images: Iterable[Image],
    ladders: Mapping[str, ContextLadder],
    models: Sequence[ModelSpec],
    conditions: Sequence[Condition],
    *,
    seed: int = 0,
    baseline_repeats: int = 1,
    context_repeats: int = 1,
    params: Mapping[str, Any] | None = None,
    prompts: PromptBook | None = None,
    images_per_site: int | None = None,
    points_per_cell: int | None = None,
    image_root: str | Path | None = None,
) -> tuple[list[PlannedRequest], PlanSummary]:
    """Build the full request plan.

    Parameters
    ----------
    sites : mapping site_id -> Site
    images : iterable of Image
        Images to ask about (their ``site_id`` must be in ``sites``).
    ladders : mapping site_id -> ContextLadder
        Reference points per site; points without a name or ``dist_km`` are skipped.
    models : sequence of ModelSpec
    conditions : sequence of Condition
        In the configured order (``geohint.conditions``).
    seed : int
        Campaign seed for the per-model sampling.
    baseline_repeats, context_repeats : int
        Requests per unit for baseline and context conditions; repeats beyond the first carry
        ``params["seed"] = repeat`` so each is a distinct request key.
    params : mapping
        Sampling parameters for every request; without ``max_output_tokens`` each model's own
        ``[[models]] max_output_tokens`` applies (merged by the model caller).
    prompts : PromptBook, optional
        Template source (packaged templates by default).
    images_per_site : int, optional
        Keep at most this many images per site (in id order), for small demos.
    points_per_cell : int, optional
        Keep at most this many reference points per ladder cell (band x referenceability tier) of a site: a
        seeded draw (:func:`cell_draw`), the same for every image, model and condition of the site, so the
        conditions stay paired. The paper's design draws 2 per cell, up to 18 per site (seed 000 Sec. 3.3); the
        released ladders hold up to 4 per cell (3,105 points, 1,688 within 2 per cell). Default: every point.
    image_root : path, optional
        Folder holding images at their ``path``; a file that exists is sent (``image_ref``), otherwise
        ``image_ref`` is None and the model caller attaches deterministic placeholder pixels (the
        release ships no pixels; the campaign counts such images and refuses them for a model on a real
        provider unless ``[images] missing = "placeholder"``, :mod:`geoagent.image_files`).

    Returns
    -------
    (list of PlannedRequest, PlanSummary)
        Requests in queue order: units (an image's baseline, or one of its reference points) in a seeded random
        order (:func:`geoagent.config.plan_rank` of ``site|image|unit`` and ``seed``; a reference point's unit at
        the later of its own rank and its image's baseline's, so every prefix of the queue holds the planned
        baseline of each context request in it; with a ``sample_rate`` below 1 a model's baseline unit and its
        reference-point units are drawn apart, so some context requests have no baseline of their model in the
        plan at all), each unit's requests by model, condition, repeat. So every model's and condition's requests of one unit are next to each
        other and a run stopped early (cost cap, Ctrl-C) covers the models evenly and a random sample of the
        units, spread over the sites (ranked by site, a capped run held one site of six, walk28 #3); the order
        changes no key.

    Raises
    ------
    ValueError
        Repeats below 1, or an image of an unknown site.
    """
    if baseline_repeats < 1 or context_repeats < 1:
        raise ValueError("baseline_repeats and context_repeats must be >= 1")
    book = prompts or PromptBook()
    base_params = dict(params or {})  # no max_output_tokens here: each model's own applies
    summary = PlanSummary(seed=seed, conditions=[c.name for c in conditions], baseline_repeats=baseline_repeats)
    methods = {site.selection_method for site in sites.values()}
    summary.selection_methods = sorted({m or "" for m in methods})
    for m in models:
        summary.sample_rates[m.model] = float(m.sample_rate)
        if m.rates_by_selection:
            # a key no site has samples nothing at its rate, the model then answers every item at full cost
            # (review39b #4: "automatic" for the release's "algorithm")
            unknown = sorted(k for k, _ in m.rates_by_selection if k not in methods)
            if unknown:
                known = ", ".join(repr(x) for x in sorted(x for x in methods if x)) or "none: no site has one"
                raise ValueError(f"[geohint] sample_rates[{m.model!r}]: no planned site has selection_method "
                                 f"{', '.join(map(repr, unknown))} (the sites' values: {known})")
            summary.sample_rates_by_selection[m.model] = dict(m.rates_by_selection)
        summary.units_total[m.model] = 0
        summary.units_kept[m.model] = 0
        summary.requests_by_model[m.model] = 0
    by_site: dict[str, list[Image]] = {}
    for img in images:
        if img.site_id not in sites:
            raise ValueError(f"image {img.image_id!r} belongs to unknown site {img.site_id!r}")
        by_site.setdefault(img.site_id, []).append(img)
    context_conds = [c for c in conditions if c.uses_context]
    baseline_conds = [c for c in conditions if not c.uses_context]
    out: list[PlannedRequest] = []
    prompt_cache: dict[tuple[str, str | None], str] = {}  # one string per (condition, reference name): shared

    def emit(cond: Condition, spec: ModelSpec, site: Site, img: Image, point: ReferencePoint | None, repeat: int) -> None:
        p = dict(base_params)
        if repeat > 0:
            p["seed"] = repeat
        ref_name = point.name_en if point else None
        meta = {
            "task": "geohint",
            "site": site.site_id,
            "condition": cond.name,
            "schema": cond.schema,
            "repeat": repeat,
            "ref_qid": point.qid if point else None,
            "ref_name": ref_name,
            "ref_name_zh": point.name_zh if point else None,  # the release's echo rule keys on it
            "ref_names": list(dict.fromkeys(n for n in (point.name_en, point.label_raw, point.name_zh) if n)) if point else [],
            "band": point.band if point else None,
            "tier": point.tier if point else None,
            "dist_km": point.dist_km if point else None,
            "referenceability": point.referenceability if point else None,
            "sample_rate": spec.rate_for(site.selection_method),
            "site_lat": site.lat,
            "site_lon": site.lon,
            "site_city": site.city,
        }
        key = message_key(spec.model, site.site_id, img.image_id, cond.name, _ref_id(point) if point else "none", repeat)
        prompt = prompt_cache.get((cond.name, ref_name))
        if prompt is None:
            prompt = prompt_cache[(cond.name, ref_name)] = book.render(cond, ref_name)
        out.append(
            PlannedRequest(
                key=key,
                provider=spec.provider,
                model=spec.model,
                prompt=prompt,
                image_id=img.image_id,
                image_ref=_image_ref(img, image_root),
                params=p,
                meta=meta,
            )
        )
        summary.requests_by_condition[cond.name] = summary.requests_by_condition.get(cond.name, 0) + 1
        summary.requests_by_model[spec.model] += 1

    # units (an image's baseline, or one of its reference points) are queued in a seeded random order, every
    # model's, condition's and repeat's request of a unit next to each other: sites in random order with all of
    # a site's units together made a run stopped at the cap hold one site of six (walk28 #3)
    units_out: list[tuple[tuple[Any, bool, Any], list[PlannedRequest]]] = []
    for site_id in sorted(by_site):
        site = sites[site_id]
        imgs = sorted(by_site[site_id], key=lambda i: i.image_id)
        if images_per_site is not None:
            imgs = imgs[:images_per_site]
        ladder = ladders.get(site_id)
        points = [p for p in (ladder.points if ladder else ()) if p.name_en and p.dist_km is not None and p.usable]
        banded = [p for p in points if p.band is not None or ladder_band(p.dist_km) is not None]
        if context_conds:  # a baseline-only plan asks no point: none is "left out" (review39c #10)
            summary.points_outside_bands += len(points) - len(banded)
        points = banded
        if points_per_cell is not None:
            kept = cell_draw(points, points_per_cell, seed=seed, site_id=site_id)
            if context_conds:
                summary.points_not_drawn += len(points) - len(kept)
            points = kept
        if context_conds and not points:
            summary.sites_without_ladder.append(site_id)
        for img in imgs:
            # one unit (baseline, then each reference point) at a time, every model's requests of it in turn
            units: list[ReferencePoint | None] = ([None] if baseline_conds else []) + (points if context_conds else [])
            for point in units:
                ref = "baseline" if point is None else _ref_id(point)
                conds, repeats = (baseline_conds, baseline_repeats) if point is None else (context_conds, context_repeats)
                start = len(out)
                for spec in models:
                    summary.units_total[spec.model] += 1
                    if not unit_sampled(seed, spec.model, site_id, img.image_id, ref,
                                        spec.rate_for(site.selection_method)):
                        continue
                    summary.units_kept[spec.model] += 1
                    for cond in conds:
                        for r in range(repeats):
                            emit(cond, spec, site, img, point, r)
                if len(out) > start:
                    own = plan_rank(f"{site_id}|{img.image_id}|{ref}", seed)
                    # a reference point's unit goes after its image's baseline (max of the two ranks): a run stopped
                    # early holds the baseline of every context answer it holds, which the paired no-context
                    # comparisons (error ratio, regime split) need; ties: the baseline first
                    base = plan_rank(f"{site_id}|{img.image_id}|baseline", seed) if baseline_conds else own
                    units_out.append(((max(own, base), point is not None, own), out[start:]))
                    del out[start:]
    units_out.sort(key=lambda u: u[0])  # a stable sort: equal ranks (none in practice) keep the planner's order
    out = [r for _, unit in units_out for r in unit]
    summary.sites_without_ladder.sort()
    summary.sites_without_images = sorted(s for s in sites if s not in by_site)
    return out, summary


def check_report_names(names: Iterable[str]) -> None:
    """Refuse a ``[[models]]`` entry whose name the GeoHint report cannot hold apart from another row or field:
    ``"All"`` (:data:`geoagent.report.geohint.POOLED_ROW`, the pooled row of Tables 6 and 7 and of the cut-off
    and unresolved tables: the model's row and the pooled one would read alike) and a name holding ``|`` (the
    separator of the request keys ``gh|model|site|image|condition|ref|rN``, :func:`message_key`, which
    ``missing.csv`` reads the model back from).

    Raises
    ------
    ValueError
        Naming the entry, why, and the fix (rename it).
    """
    from geoagent.report.geohint import POOLED_ROW

    for name in names:
        if name == POOLED_ROW:
            raise ValueError(
                f"GeoHint: [[models]] entry {name!r}: the report's pooled row (every model together) of Tables 6 and 7 "
                f"and of the cut-off and unresolved tables is named {POOLED_ROW!r}, so this model's row would read "
                "like it. Rename the entry")
        if "|" in name:
            raise ValueError(
                f"GeoHint: [[models]] entry {name!r} holds '|', which separates the fields of the campaign's request "
                "keys (gh|model|site|image|condition|ref|rN; missing.csv reads the model back from them). Rename the "
                "entry without '|'")


def models_from_config(config: Any) -> list[ModelSpec]:
    """Model specs from a campaign config.

    Accepts a :class:`geoagent.config.CampaignConfig` (``models[].name``, ``provider``,
    ``sampling_rate``; ``[geohint] sample_rates`` overrides per model name, with a rate or a table of rates by the
    site's ``selection_method``, ``default`` for the other sites) or a plain dict with the same
    keys (``model`` and ``sample_rate`` are accepted as synonyms of ``name`` and ``sampling_rate``). The
    spec's ``model`` is the config's model *name*, which is what request payloads carry.

    Raises
    ------
    ValueError
        A model entry without a name.
    """
    if isinstance(config, Mapping):
        section = config.get("geohint") or {}
        entries = config.get("models") or []
    else:
        sec = config.section("geohint")
        section = sec.model_dump() if hasattr(sec, "model_dump") else dict(sec)
        entries = list(config.models)
    rates = dict(section.get("sample_rates") or {})
    out = []
    for i, m in enumerate(entries):
        if isinstance(m, str):
            m = {"name": m}
        get = m.get if isinstance(m, Mapping) else (lambda k, d=None, _m=m: getattr(_m, k, d))
        name = get("name") or get("model")
        if not name:
            raise ValueError(f"models[{i}] has no name")
        own = get("sampling_rate", get("sample_rate", 1.0)) or 1.0
        rate = rates.get(name, own)
        by_selection: tuple[tuple[str, float], ...] = ()
        if isinstance(rate, Mapping):  # { algorithm = 0.3333 }: by the site's selection_method; "default": the rest
            by_selection = tuple(sorted((str(k), float(v)) for k, v in rate.items() if k != "default"))
            rate = rate.get("default", own)
        out.append(ModelSpec(model=str(name), provider=str(get("provider", "simulated")), sample_rate=float(rate),
                             rates_by_selection=by_selection))
    return out


def synthetic_images(sites: Mapping[str, Site], per_site: int = 1) -> list[Image]:
    """Placeholder images for offline demos: ``per_site`` images per site at the site's coordinate.

    The release lists no image ids for most sites; these ids are SYNTHETIC (``9`` followed by digits
    from SHA-256 of the site id and index, 16 digits) and carry no pixels (the model caller then attaches
    its deterministic placeholder). Never use them as data.
    """
    import hashlib

    out = []
    for sid in sorted(sites):
        s = sites[sid]
        for i in range(per_site):
            digits = int.from_bytes(hashlib.sha256(f"{sid}|{i}".encode()).digest()[:8], "big") % 10**15
            out.append(Image(image_id=f"9{digits:015d}", site_id=sid, lat=s.lat, lon=s.lon, source="synthetic"))
    return out
