"""The GeoHint campaign kind for :mod:`geoagent.engine` (``[campaign] kind = "geohint"``).

Stages: model caller -> parser -> geocoder -> scorer -> aggregator (live report). The plan imports the
release (``[geohint] release_dir`` or the config's ``release_dir``) into the campaign's data store and
emits one request per image x model x condition x reference point (:func:`geoagent.geohint.stages.plan_from_config`).
Images: the release's (only sites with images in its trial table), synthetic placeholders
(:func:`geoagent.geohint.plan.synthetic_images`; the release ships no pixels) or both (``images = "auto"``).
The final report is rebuilt from the results table ``geohint_scored``, so it is complete also when the
aggregator ran in another process. The echo rule (``[geohint] echo_rule``) goes to the scorer and the
aggregator, is recorded in each run's manifest entry (``echo_rule``) and is named in the report; so are the
regime threshold (``[geohint] regime_threshold``, every regime split of the report and the summary) and the
slope tables' p-value reference (``[geohint] p_reference``, ``"normal"`` or ``"t"``; manifest ``p_reference``).
Both are scoring settings: changing them between runs re-scores the report from the stored answers and is
not call drift (:func:`geoagent.runtime.manifest.config_changes`).
"""

from __future__ import annotations

import functools
import math
import sys

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.textfmt import count_text, mapping_text
from geoagent.data.importer import Release, check_plannable, import_release
from geoagent.data.model import Image
from geoagent.engine import CampaignKind
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.echo import DEFAULT_ECHO_RULE, describe_echo_rule
from geoagent.geohint.plan import PlanSummary, synthetic_images
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.settings import GeoHintSettings
from geoagent.image_files import MissingImages, check_missing, photos_after_placeholders, tally
from geoagent.geohint.stages import (
    SCORED_TABLE,
    SERVICE_LIVE_MISSING,
    SERVICE_PLAN_KEYS,
    GeoHintAggregatorStage,
    GeoHintParserStage,
    GeoHintScorerStage,
    export_rows,
    plan_from_config,
    scored_scope,
)
from geoagent.runtime.scope import ScoredScope
from geoagent.runtime.stage import Message, Stage, StageContext
from geoagent.scoring.regime import DEFAULT_THRESHOLD, threshold_text
from geoagent.scoring.truncation import LEGEND_LINE as TRUNCATION_LEGEND
from geoagent.scoring.truncation import total


def settings_of(cfg: Any) -> GeoHintSettings:
    """The validated ``[geohint]`` table of ``cfg`` (defaults when absent)."""
    sec = cfg.section("geohint") if hasattr(cfg, "section") else None
    if sec is None:
        return GeoHintSettings()
    return sec if isinstance(sec, GeoHintSettings) else GeoHintSettings.model_validate(sec or {})


def campaign_seed(cfg: Any) -> int:
    """The ``[campaign] seed`` (0 when unset): the GeoHint report's seed of Table 3's splits and the permutation
    flips of Tables 8-10 and the image-paired comparisons (each test its own stream derived from this seed and the
    test's label: :func:`geoagent.scoring.permutation.flip_seed_sequence`), and of its bootstrap unless
    ``[geohint] boot_seed`` is set (:func:`bootstrap_params`)."""
    return int(getattr(getattr(cfg, "campaign", None), "seed", 0) or 0)


def bootstrap_params(cfg: Any) -> tuple[int, int]:
    """``(n_boot, seed)`` of the GeoHint report's site-bootstrap intervals (Table 1, Fig. 2): ``[geohint] n_boot``
    (resamples, 0 = none) and the seed :func:`geoagent.report.geohint.write_report` draws them with (its
    ``boot_seed``): ``[geohint] boot_seed`` where set, else the ``[campaign] seed`` (:func:`campaign_seed`, as
    before the key). The one source of both for every place that draws those intervals (the final report, the
    live report, the demo's console Table 1), so their intervals cannot differ (the demo's console table drew
    with seed 0 while report.md used the campaign's: ``[28.2, 87.1]`` against ``[34.1, 83.7]``). The campaign
    seed alone still draws Table 3's splits and the permutation flips."""
    s = settings_of(cfg)
    return int(s.n_boot), (campaign_seed(cfg) if s.boot_seed is None else int(s.boot_seed))


def campaign_images(release: Release, mode: str, per_site: int | None) -> list[Image]:
    """Images to plan: ``release``, ``synthetic`` or ``auto`` (release images where a site has any,
    ``per_site`` synthetic placeholders, default 1, elsewhere)."""
    real = [im for im in release.images.values() if im.site_id in release.sites]
    if mode == "release":
        return real
    with_real = {im.site_id for im in real}
    missing = {s: v for s, v in release.sites.items() if mode == "synthetic" or s not in with_real}
    synth = synthetic_images(missing, per_site=per_site or 1)
    return synth if mode == "synthetic" else real + synth


#: config key of GeoHint's image folder (named in messages)
IMAGE_ROOT_KEY = "geohint.image_root"


def image_tally(messages: list[Message], images: list[Image], image_root: str | None, mode: str) -> MissingImages:
    """The images the planned GeoHint requests show, and those sent without a file (placeholder pixels):
    described by the file looked for (``<image_root>/<path>``), the table path when ``image_root`` is not
    set, or why there is none (a synthetic placeholder for a site without release images, ``images = mode``;
    an image without a path). Synthetic placeholders are tallied as such (:attr:`MissingImages.synthetic`): the
    images mode planned them, so the messages say so instead of asking for an ``image_root`` that does not apply."""
    by_id = {im.image_id: im for im in images}

    def describe(p: Any) -> str:
        im = by_id.get(str(p.get("image_id")))
        if im is None or im.source == "synthetic":
            site = im.site_id if im is not None else (p.get("meta") or {}).get("site")
            return f"synthetic placeholder {p.get('image_id')} for site {site} (images = {mode!r})"
        if not im.path:
            return f"image {im.image_id} of site {im.site_id} (no path in the trial table)"
        return str(Path(image_root) / im.path) if image_root else im.path

    def synthetic(p: Any) -> bool:  # a placeholder the images mode asked for: no file is looked for
        im = by_id.get(str(p.get("image_id")))
        return im is None or im.source == "synthetic"

    return tally([(k, p) for k, p in messages], describe, task="GeoHint", key=IMAGE_ROOT_KEY, image_root=image_root,
                 synthetic=synthetic, synthetic_setting=f"geohint.images = {mode!r}",
                 synthetic_fix=('to send photos, set geohint.images = "release" (the trial table\'s images) and '
                                "geohint.image_root to the folder its paths are relative to"))


def synthetic_refusal_line(found: MissingImages, mode: str) -> str | None:
    """The dry run's first line when ``run`` would refuse the plan's synthetic placeholders for a real model
    (newuser41 #A: the fix was buried mid-way in a 1,500-character warning, under a headline that totalled a plan
    ``run`` never makes): ``92 of 109 images are synthetic placeholders (images = "auto"), refused for a real model:
    set [geohint] images = "release" (its 17 trial-table images: 1918 of the 12638 planned
    calls)``, with ``and geohint.image_root ...`` when those images have no file either. None when no image of
    ``found`` (:func:`image_tally`) is a synthetic placeholder. Call it only when the plan was refused."""
    syn = found.n_synthetic
    if not syn:
        return None
    head = (f"{syn} of {count_text(found.n_images, 'image')} {'is a synthetic placeholder' if syn == 1 else 'are synthetic placeholders'} "
            f"(images = \"{mode}\"), refused for a real model: set [geohint] images = \"release\"")
    n_real = found.n_images - syn
    if mode == "auto":  # the trial table's images are in this plan: what keeping only them plans is known
        k = found.image_requests - found.synthetic_requests
        head += (f" (its {count_text(n_real, 'trial-table image')}: {k} of the {found.image_requests} planned calls)"
                 if n_real else " (no planned site has a trial-table image: choose [geohint] sites that do)")
    if found.n_no_file:
        head += f" and {IMAGE_ROOT_KEY} to the folder of their photos ({found.n_no_file} without a file now)"
    return head


def aggregate_from_store(store: Any, *, echo_rule: str = DEFAULT_ECHO_RULE,
                         regime_threshold: float = DEFAULT_THRESHOLD, scope: ScoredScope | None = None
                         ) -> GeoHintAggregator:
    """A fresh aggregator filled from results table ``geohint_scored``, counting echo under ``echo_rule`` and
    splitting regimes at ``regime_threshold`` (rows scored before finish reasons were kept get theirs from the
    response store, for the cut-off counts). ``scope`` (:func:`geoagent.geohint.stages.scored_scope`): which
    rows count (default: every row); it tallies what it left out."""
    agg = GeoHintAggregator(echo_rule=echo_rule, regime_threshold=regime_threshold)
    for row in (scope or scored_scope(None)).rows(store):
        agg.add(GeoHintResult.from_json(row))
    return agg


def _missing_work(cfg: Any) -> list[dict[str, Any]]:
    """Dead-lettered GeoHint work on every edge: ``model, key, edge, reason`` (keys are ``gh|model|...``; reason
    worded for display by :func:`geoagent.status.describe_reason`: HTTP attempts named as such). Tasks set
    aside because the current plan no longer holds them (reason ``superseded: ...``) are not missing: left out."""
    from geoagent.runtime.queue import SUPERSEDED
    from geoagent.status import dead_letters, describe_reason

    out = []
    for edge, items in dead_letters(cfg, limit=1_000_000_000).items():
        for d in items:
            if str(d.reason).startswith(SUPERSEDED):
                continue
            parts = d.key.split("|")
            out.append({"model": parts[1] if len(parts) > 1 else "", "key": d.key, "edge": edge, "reason": describe_reason(d.reason)})
    return out


def _geocoder_left(outcome: Any) -> tuple[int, int]:
    """``(dead, queued)``: answers dead-lettered on the geocoder's input edge and left there (ready or leased)
    at the end of the run, from the engine's ``Outcome`` (``(0, 0)`` without one)."""
    c = (getattr(outcome, "counts", None) or {}).get(C.EDGE_ANSWERS)
    return (int(c.dead), int(c.ready + c.leased)) if c is not None else (0, 0)


#: what a run's status says left answers queued for the geocoder (:func:`_answers_left_by`)
_STOPS_LEAVING_WORK = {"interrupted": "the interrupt", "budget exhausted": "the budget stop"}


def _scoring_left(outcome: Any) -> tuple[int, int]:
    """``(located, scored)``: tasks left (ready or leased) on the scorer's and the aggregator's input edges at
    the end of the run, from the engine's ``Outcome`` (``(0, 0)`` without one)."""
    counts = getattr(outcome, "counts", None) or {}

    def left(edge: str) -> int:
        c = counts.get(edge)
        return int(c.ready + c.leased) if c is not None else 0

    return left(C.EDGE_LOCATED), left(C.EDGE_SCORED)


def _answers_left_by(outcome: Any) -> str | None:
    """The stop that left answers queued for the geocoder (``"the interrupt"``, ``"the budget stop"``), or
    None when the geocoder itself stopped (its host unreachable: a ``geocoder: ...`` stop reason) or the run
    ended otherwise: then the queued answers are failed lookups (:func:`geocoder_failure_warning`)."""
    if any(str(r).startswith(f"{C.STAGE_GEOCODER}:") for r in getattr(outcome, "stop_reasons", None) or []):
        return None
    return _STOPS_LEAVING_WORK.get(str(getattr(outcome, "status", "")))


def hit_text(cell: Any) -> str:
    """A cell's hit rate for a console line (``"61.7%"``), or ``"—"`` when it is undetermined: no answer behind
    it geocoded (:attr:`geoagent.geohint.aggregate.Cell.geocoded_hit_rate` is NaN), so 0 % would measure the
    geocoder, not the model; report.md's tables print the same em dash (docs/geocontext-release.md, "undetermined,
    not 0")."""
    rate = cell.geocoded_hit_rate
    return "—" if math.isnan(rate) else f"{rate:.1%}"


class GeoHintCampaign(CampaignKind):
    """GeoHint (seed 000 Sec. 4, 6): where was this photo taken, given a true but coarse hint."""

    kind = "geohint"
    results_tables = (SCORED_TABLE,)

    def scored_rows(self, ctx: StageContext) -> tuple[str, str, str | None, Any] | None:
        """:meth:`CampaignKind.scored_rows`: the scorer's rows (table ``geohint_scored``, one per task of its input
        edge ``located``, its output on ``scored``) and the current plan's task keys."""
        from geoagent.geohint.stages import SCORED_TABLE, GeoHintScorerStage

        keys = ctx.services.get(SERVICE_PLAN_KEYS)
        scorer = GeoHintScorerStage
        return None if keys is None else (SCORED_TABLE, scorer.input_edge, scorer.output_edge, keys)

    async def refresh_scored_rows(self, cfg: Any, ctx: StageContext) -> list[str]:
        """:meth:`CampaignKind.refresh_scored_rows`: the stored answers an earlier answer parser read are read again
        from their stored text (:func:`geoagent.geohint.reparse.refresh_stored_rows`; no model call), so the report
        never mixes two parsers' readings: where the place read is unchanged only the parse fields and the version
        change; where it changed, the answer is geocoded (the campaign's geocoder stage, its rate limits and cache)
        and scored again, by a process that runs the geocoder, from the request this run's plan holds under its key
        (:meth:`planned_requests`). One ``info:`` line says how many were read again, changed and geocoded again."""
        from geoagent.geohint.reparse import Regeocoder, refresh_stored_rows

        store = ctx.services.get("store")
        if store is None or not hasattr(store, "iter_results"):
            return []
        own = ctx.services.get(C.SERVICE_OWN_STAGES)
        regeocoder = None
        if own is None or C.STAGE_GEOCODER in own:
            regeocoder = Regeocoder(ctx, self.planned_requests, echo_rule=settings_of(cfg).echo_rule)
        # the run's work begins with the first row rewritten (review41a #2, as GeoVerify's: review40b #5)
        began = ctx.services.get(C.SERVICE_WORK_BEGAN)
        line = (await refresh_stored_rows(store, SCORED_TABLE, regeocoder,
                                          before_write=began if callable(began) else None)).line(cfg.name)
        return [line] if line else []

    def planned_requests(self, keys: set[str]) -> dict[str, dict[str, Any]]:
        """The ``requests`` payloads (``model, prompt, image_id, image_ref, params, meta``) of the plan :meth:`plan`
        made last, of those of ``keys`` it holds. The plan is made again from the inputs it was made from (it is
        deterministic under the campaign's seed; only its messages of ``keys`` are kept): :meth:`plan` hands its
        messages to the engine, which queues them, and this instance keeps only their keys
        (``ctx.services[SERVICE_PLAN_KEYS]``), not every request's prompt and meta. A call makes the whole plan
        again, and only when ``keys`` holds a key of the plan: a stale answer of a task no longer planned stays stale,
        and asking for it made the whole plan again at every run (review41a #5). ``{}`` with no plan made when none
        of ``keys`` is planned, or before :meth:`plan`."""
        replan = getattr(self, "_replan", None)
        keys = keys & getattr(self, "_plan_keys", frozenset())
        if replan is None or not keys:
            return {}
        return {key: payload for key, payload in replan() if key in keys}

    def stages(self, cfg: Any) -> list[Stage]:
        from geoagent.geohint.geocode_stage import GeocodeStage
        from geoagent.workers.model_caller import ModelCaller

        s = settings_of(cfg)
        n_boot, boot_seed = bootstrap_params(cfg)  # the campaign seed draws the flips and splits
        return [
            ModelCaller(),
            GeoHintParserStage(),
            GeocodeStage(),
            GeoHintScorerStage(echo_rule=s.echo_rule),
            GeoHintAggregatorStage(report_interval_s=s.report_interval_s, n_flips=s.n_flips, n_splits=s.n_splits,
                                   n_boot=n_boot, seed=campaign_seed(cfg), boot_seed=boot_seed,
                                   echo_rule=s.echo_rule, p_reference=s.p_reference,
                                   regime_threshold=s.regime_threshold),
        ]

    plan_inputs_label = "trial table"

    def _plan_lines(self) -> list[str]:
        """``  plan: N requests by condition (...); sampling rates (...); units kept per model (...)`` for the
        plan this instance made last (:meth:`plan`), ``[]`` before one: the run's summary and the dry run print it."""
        summary = getattr(self, "_summary", None)
        if summary is None:
            return []
        left = [f"{summary.points_not_drawn} not drawn ([geohint] points_per_cell)"] * bool(summary.points_not_drawn) + [
            f"{summary.points_outside_bands} outside the bands (0.5-6 km)"] * bool(summary.points_outside_bands)
        # a model with a table shows the rate of each planned site's selection method (a site without one:
        # "other"), never a default that no site falls under (walk39 #9)
        tables = {m: {(k or "other"): t.get(k, summary.sample_rates.get(m, 1.0))
                      for k in (summary.selection_methods or sorted(t))}
                  for m, t in summary.sample_rates_by_selection.items()}
        plain = {m: r for m, r in summary.sample_rates.items() if m not in tables}
        return [f"  plan: {sum(summary.requests_by_condition.values())} requests by condition "
                f"({mapping_text(summary.requests_by_condition)}); "
                "sampling rates (" + "; ".join(
                    [mapping_text(plain)] * bool(plain)
                    + [f"{m} by selection_method: {mapping_text(t)}" for m, t in sorted(tables.items())])
                + "); units kept per model ("
                + ", ".join(f"{m} {summary.units_kept.get(m, 0)} of {n}" for m, n in summary.units_total.items())
                + ")" + (f"; reference points left out: {', '.join(left)}" if left else "")]

    def dry_run_outline(self, cfg: Any) -> list[str]:
        """The plan's split by condition (as the run's summary prints it: docs/campaigns.md, "plan: 1874 requests by
        condition"; walkthrough s18), then the public hosts the geocoder will call (``[geohint.geocoder]`` URLs
        that are not local servers or sandbox fakes: :func:`geoagent.config.is_local_host`), so a dry run offline
        or behind a firewall says so before the model calls are paid; no hosts line when every geocoder URL is
        local."""
        from urllib.parse import urlsplit

        from geoagent.config import is_local_host
        from geoagent.geohint.geocode_stage import GeocoderSettings

        plan = self._plan_lines()
        try:
            g = GeocoderSettings.from_config(cfg)
        except (TypeError, ValueError):  # the run's own check names the problem
            return plan
        hosts = sorted({h for h in (urlsplit(u).hostname for u in (g.wikidata_url, g.nominatim_url) if u)
                        if h and not is_local_host(h)})
        if not hosts:
            return plan
        return [*plan, f"  geocoding: every answer is geocoded through {', '.join(hosts)} (public services: network "
                "needed; if they cannot be reached the run stops incomplete, exit 3, with the paid answers kept "
                "for the next run; [geohint.geocoder] wikidata_url / nominatim_url point it at other servers)"]

    def plan_inputs(self, cfg: Any) -> list[Path]:
        """The trial table files of the release folder (:func:`geoagent.data.importer.trial_table_paths`; its
        main-arm rows are the release images GeoHint plans): a ``--watch`` run over a crawl's folder plans
        again when a hand-off of the crawl replaces its ``verify_trials.csv``
        (:class:`geoagent.engine.WatchReplanTick`). ``sites.csv`` and ``ladders/``, which a crawl writes as it
        goes, are read again then, not watched on their own."""
        from geoagent.data.importer import trial_table_paths

        s = settings_of(cfg)
        return trial_table_paths(s.release_dir or cfg.release_dir())

    def manifest_extra(self, cfg: Any) -> dict[str, Any]:
        """The echo rule, the slope p-value reference and the regime threshold this run scores and reports
        with (also when ``[geohint]`` is absent: the defaults); after a plan, the planned images and how many
        have no file (:meth:`geoagent.image_files.MissingImages.to_json`), and the plan's summary
        (:class:`geoagent.geohint.plan.PlanSummary`: requests, units and sampling per model, reference points not
        drawn or outside the bands)."""
        s = settings_of(cfg)
        images = getattr(self, "_images", None)
        summary = getattr(self, "_summary", None)
        return {"echo_rule": s.echo_rule, "p_reference": s.p_reference, "regime_threshold": s.regime_threshold,
                **(images.to_json() if images is not None else {}),
                # the plan's counts: points drawn or left out, sampling by model and selection method (walk39 #2)
                **({"plan_summary": summary.to_json()} if summary is not None else {})}

    def plan_refusals(self, cfg: Any) -> list[str]:
        """The image refusal a real run would stop at, kept by a dry run's plan (see
        :meth:`geoagent.engine.CampaignKind.plan_refusals`)."""
        return list(getattr(self, "_refusals", []))

    def plan_headlines(self, cfg: Any) -> list[str]:
        """The short line naming the fix for synthetic images refused for a real model
        (:func:`synthetic_refusal_line`; :meth:`geoagent.engine.CampaignKind.plan_headlines`)."""
        return list(getattr(self, "_headlines", []))

    def expected_photo(self, cfg: Any) -> tuple[tuple[int, int], str]:
        """The photo an image without a file will be sent as (:meth:`geoagent.engine.CampaignKind.expected_photo`):
        the thumbnail of the crawl whose state folder is the release folder (``geohint.release_dir`` or
        ``[paths] release_dir``), at its ``[crawl.fetcher] thumb_field`` size, when that folder holds the crawl's
        ``manifest.json`` (:func:`geoagent.image_files.expected_photo`); else 1024 x 768."""
        from geoagent.image_files import expected_photo

        s = settings_of(cfg)
        return expected_photo(s.release_dir or cfg.release_dir())

    def missing_photos(self, cfg: Any) -> frozenset[str]:
        """Image ids of the plan whose photo has no file under ``geohint.image_root`` yet, not synthetic
        placeholders by design (:attr:`geoagent.image_files.MissingImages.photo_ids`; the dry run counts them at
        the expected photo size)."""
        images = getattr(self, "_images", None)
        return images.photo_ids if images is not None else frozenset()

    def plan_warnings(self, cfg: Any) -> list[str]:
        """The plan's warnings: malformed rows of the release import (each one a site, ladder point or trial
        left out of the plan; the first five in full, ``file:line: reason``), and the image warnings (images
        sent as placeholder pixels; planned requests queued earlier with placeholder pixels that now have their
        photo, :func:`geoagent.image_files.photos_after_placeholders`), and a model that audited the crawl whose
        folder the plan reads (:func:`geoagent.integrate.auditor_overlap_warning`, seed 000 Sec. 3.3), and the planned
        sites of ``sites.csv`` without any image to ask about (:attr:`geoagent.geohint.plan.PlanSummary.sites_without_images`:
        a crawl's sites left with no usable image; crawl40 #4), when there are any."""
        out = []
        issues = getattr(self, "_import_issues", None) or []
        if issues:
            shown = "; ".join(str(i) for i in issues[:5]) + (f"; ... and {len(issues) - 5} more" if len(issues) > 5 else "")
            out.append(f"release import: {len(issues)} problem(s) (a malformed row is left out of the plan): {shown}")
        from geoagent.data.importer import sites_without_images_text

        summary = getattr(self, "_summary", None)
        bare = sites_without_images_text(list(getattr(summary, "sites_without_images", None) or []),
                                         getattr(self, "_sites_csv", None) or "sites.csv")
        return out + [w for w in (bare, getattr(self, "_image_warning", None), getattr(self, "_photo_warning", None),
                                  getattr(self, "_auditor_warning", None)) if w]

    async def plan(self, cfg: Any, ctx: StageContext) -> list[Message]:
        from geoagent.data.store import DataStore

        s = settings_of(cfg)
        release = import_release(s.release_dir or cfg.release_dir(), state_root=cfg.state_root())
        # a sites.csv (or, for images from the trial table, a trial table) none of whose rows can be read: refused
        check_plannable(release, trials=s.images != "synthetic")
        self._import_issues = list(release.report.issues)
        from geoagent.integrate import auditor_overlap_warning

        # seed 000 Sec. 3.3: a crawl's auditor must not be an evaluated model
        self._auditor_warning = auditor_overlap_warning(s.release_dir or cfg.release_dir(), cfg.models)
        if not ctx.services.get(C.SERVICE_READ_ONLY):  # a read-only plan (engine.preflight_refusals) stores nothing
            with DataStore.for_campaign(cfg.name, cfg.state_root()) as ds:
                ds.put_many(release.records())
                ds.set_meta("import_report", release.report.to_json())
                ds.set_meta("release_root", str(release.root))
        full = release
        sites = release.sites
        if s.sites is not None:
            unknown = sorted(set(s.sites) - set(sites))
            if unknown:
                from geoagent.config import name_unknown

                named = name_unknown(unknown, sites)  # the first few with a suggestion, the rest counted
                where = "" if str(cfg.source).startswith("<") else f"{cfg.source}: "
                raise ValueError(f"{where}geohint.sites: unknown site id{'s' if len(unknown) > 1 else ''} {named} "
                                 f"(not in {release.root / 'sites.csv'})")
            sites = {k: v for k, v in sites.items() if k in set(s.sites)}
            release = Release(root=release.root, sites=sites, ladders=release.ladders,
                              images={k: v for k, v in release.images.items() if v.site_id in sites})
        images = campaign_images(release, s.images, s.images_per_site)
        from geoagent.sandbox.launch import simulated_models

        if simulated_models(ctx.services.get("config_as_written", cfg)):  # the in-process simulator's models
            # the simulator answers from the folder this plan reads (a crawl's output, [geohint] release_dir),
            # not from the GeoContext release it would index by itself: it "sees" each planned image's site
            from geoagent.geohint import simulate

            simulate.configure(full.sites, full.ladders, [*full.images.values(), *images], merge=True)
        self._plan_inputs = {"sites": len(sites), "images": len(images), "ladders": len(release.ladders),
                             # which trial table the release images came from, and how many sites it covers
                             # (newuser40 #7: the empty plan's reason blamed an unfinished crawl)
                             "trials_file": full.trials_file,
                             "sites_with_images": len({im.site_id for im in full.images.values()})}
        messages, summary = plan_from_config(cfg, sites, images, release.ladders)
        # the same plan made again, for the requests of stored answers to geocode again (planned_requests)
        self._replan = lambda: plan_from_config(cfg, sites, images, release.ladders)[0]
        # the report and the live aggregator score exactly this plan's requests (scored_scope)
        # (and planned_requests makes the plan again only for keys it holds)
        self._plan_keys = ctx.services[SERVICE_PLAN_KEYS] = frozenset(key for key, _ in messages)
        # and the live report lists the missing work as it stands at each rewrite, as report() does at the end
        ctx.services[SERVICE_LIVE_MISSING] = lambda: self.live_missing(cfg)
        # with the header lines the final report has (interim, simulator, replay, placeholder images)
        from geoagent.providers.replay import replay_note
        from geoagent.report.live import LiveBanners

        ctx.services[C.SERVICE_LIVE_BANNERS] = LiveBanners(lambda: _simulated(cfg, ctx), replay_note(cfg),
                                                           lambda: getattr(self, "_image_warning", None))
        self._summary: PlanSummary = summary
        self._sites_csv = release.root / "sites.csv"
        self._images = image_tally(messages, images, s.image_root, s.images)
        self._refusals: list[str] = []
        self._image_warning = check_missing(
            ctx.services.get("config_as_written", cfg), self._images,
            fix=("Put the photos there (the trial table's `path` column is relative to that folder: a crawl's images "
                 "folder, state/images, holds <site>/<image_id>.jpg) or fix geohint.image_root; with images = "
                 "\"release\" only the trial table's images are planned, never synthetic placeholders"),
            refusals=self._refusals if ctx.services.get(C.SERVICE_DRY_RUN) else None)
        # the dry run's first line names that refusal's fix when synthetic images are what it refuses (newuser41 #A)
        self._headlines = [line] if self._refusals and (line := synthetic_refusal_line(self._images, s.images)) else []
        # requests queued earlier with placeholder pixels whose photo is there now keep their placeholder request
        self._photo_warning = photos_after_placeholders(cfg, messages, key="geohint.image_root")
        known = ctx.services.get("sites")
        if isinstance(known, dict):  # planned again (--watch, a changed trial table): the geocoder's mapping too
            known.update(sites)
        elif known is None:
            ctx.services["sites"] = dict(sites)
        return messages

    def empty_plan_reason(self, cfg: Any) -> str:
        """What was empty: the release's sites, its images (``images = "release"`` takes them from the
        trial table ``verify_trials.csv``) or the ladders."""
        s = settings_of(cfg)
        root = Path(s.release_dir or cfg.release_dir())
        st = getattr(self, "_plan_inputs", None) or {}
        n_sites, n_images, n_ladders = st.get("sites", 0), st.get("images", 0), st.get("ladders", 0)
        if not n_sites:
            issues = [i for i in (getattr(self, "_import_issues", None) or []) if Path(i.file).name == "sites.csv"]
            why = ("no site (sites.csv empty or missing)" if not issues else
                   f"no usable site: {len(issues)} malformed row(s) of sites.csv left out (first: {issues[0]})")
        elif not n_images:
            from geoagent.integrate import stale_trials_reason

            stale = stale_trials_reason(root) if s.images == "release" else None
            table = st.get("trials_file")
            if stale is not None:
                why = f"{count_text(n_sites, 'site')} but no image (images = {s.images!r}): {stale}"
            elif table is not None:
                why = (f"{count_text(n_sites, 'site')} but no image (images = {s.images!r}): the trial table "
                       f"{table} lists images of {count_text(st.get('sites_with_images', 0), 'site')}, none of "
                       "the planned ones; choose [geohint] sites among them, or images = \"synthetic\"")
            else:
                why = (f"{count_text(n_sites, 'site')} but no image (images = {s.images!r}; release images come from "
                       "verify_trials.csv, which a crawl writes into its state folder when it completes)")
        elif not n_ladders:
            why = f"{count_text(n_sites, 'site')} and {count_text(n_images, 'image')} but no context ladder (ladders/*.csv)"
        else:
            why = (f"{count_text(n_sites, 'site')}, {count_text(n_images, 'image')}, {count_text(n_ladders, 'ladder')}, "
                   "but no unit matched the config")
        return f"0 GeoHint units planned from {root}: {why}"

    async def report(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[Path]:
        from geoagent.providers.replay import replay_note
        from geoagent.report.geohint import write_report
        from geoagent.runtime.drift import not_sent_of, params_mix_lines

        s = settings_of(cfg)
        scope = scored_scope(ctx.services.get(SERVICE_PLAN_KEYS))
        agg = aggregate_from_store(ctx.get("store"), echo_rule=s.echo_rule, regime_threshold=s.regime_threshold,
                                   scope=scope)
        self._agg = agg
        self._scope_note = scope.note()
        self._not_planned = scope.not_planned
        out = Path(ctx.services.get("state_dir") or cfg.state_dir()) / C.REPORT_DIR
        # written with no answer scored too: the report counts the current plan's answers only, so the last run's
        # report, left in place, would describe answers the plan no longer holds (its scope note says so)
        n_boot, boot_seed = bootstrap_params(cfg)
        write_report(agg, out, n_flips=s.n_flips, n_splits=s.n_splits, n_boot=n_boot, seed=campaign_seed(cfg),
                     boot_seed=boot_seed,
                     **self.live_missing(cfg),  # missing
                     interim=outcome.interim_note(), p_reference=s.p_reference,
                     answers_queued=_geocoder_left(outcome)[1], answers_left_by=_answers_left_by(outcome),
                     image_note=getattr(self, "_image_warning", None),
                     simulated=_simulated(cfg, ctx),
                     config_mix=params_mix_lines(ctx.services.get(C.SERVICE_PARAMS_MIX) or {}, not_sent_of(cfg)),
                     scope_note=self._scope_note, replay_note=replay_note(cfg), sampling_note=sampling_note(
                         cfg, getattr(getattr(self, "_summary", None), "selection_methods", None)))
        return sorted(p for p in out.iterdir() if p.suffix in {".md", ".csv", ".png"})

    def live_missing(self, cfg: Any) -> dict[str, Any]:
        """The missing work the report lists, now: ``missing`` (:func:`_missing_work`, dead-lettered requests read
        from the queues, superseded ones left out), as keyword arguments of
        :func:`geoagent.report.geohint.write_report`. The live report reads it at each rewrite (ctx service
        :data:`geoagent.geohint.stages.SERVICE_LIVE_MISSING`; in its worker thread: the queues are opened anew).

        Raises
        ------
        sqlite3.Error, redis.RedisError
            The queues cannot be read (the live report logs it and keeps the previous list).
        """
        return {"missing": _missing_work(cfg)}

    def export(self, cfg: Any, store: Any, out_dir: str | Path | None = None) -> list[Any]:
        """:meth:`CampaignKind.export`, with a boolean ``scored`` column in ``geohint_scored``: True exactly for the
        rows the report scores (:func:`scored_scope`: the request is in the current plan). ``run.py export`` runs
        without a plan: the current plan is the one the last run recorded (``state/<campaign>/plan_keys.tsv``,
        :mod:`geoagent.runtime.scope`), the plan its report scored; a campaign without that record marks every
        row. So ``df.filter(pl.col("scored"))`` gives the report's counts and rates: a row cut off at the
        output-token limit with nothing parsed (no answer, :func:`geoagent.scoring.truncation.is_no_answer`; only
        the table ``cutoff`` counts it) has ``hit`` and ``echo`` null and its reason in ``extra.no_answer``
        (:func:`geoagent.geohint.stages.as_no_answer`, also for rows stored before the scorer wrote them so), so
        Polars' ``mean`` and ``count`` of ``hit`` and ``echo`` skip it as the report does; a context answer whose
        reference point has no hint distance, which the report leaves out of every table, is marked False with
        the reason in ``extra.left_out`` (:func:`geoagent.geohint.stages.export_rows`); answers of sites or
        models an earlier plan held stay in the export, marked False. An answer read by an earlier answer parser
        that no run has read again yet is exported as the current parser reads it where the place it names is
        unchanged (:func:`geoagent.geohint.reparse.reparse_items`; the store is not written); one naming another
        place now, or without a stored text, keeps its earlier reading (``extra.parser_version`` says which), and
        a ``warning:`` line on stderr says how many (the next run geocodes the former again)."""
        from geoagent.runtime.export import export_all
        from geoagent.runtime.scope import read_plan_keys

        from geoagent.geohint.reparse import StaleView

        scope = scored_scope(read_plan_keys(cfg.state_dir()))
        # an answer read by an earlier answer parser and not yet read again by a run: exported as the current parser
        # reads it where its place is unchanged (the store is not written); one naming another place keeps its
        # earlier reading until a run geocodes it again, and a warning says how many (fixreparse41)
        stale = StaleView(store)
        rows = export_rows(scope, store)
        tables = export_all(store, out_dir or cfg.state_dir(), hooks={SCORED_TABLE: lambda it: rows(stale.items(it))},
                            checks={SCORED_TABLE: functools.partial(scope.checked, store)}, cfg=cfg,
                            tables=self.results_tables)
        if (line := stale.warning(cfg.name, SCORED_TABLE)) is not None:
            print(line, file=sys.stderr)
        return tables

    def answer_quality(self, cfg: Any, ctx: StageContext) -> dict[str, Any]:
        """:meth:`CampaignKind.answer_quality` from the aggregate :meth:`report` made: per model, every scored
        answer (all conditions; also those cut off with nothing parsed, which no rate counts), those that parsed
        (``parse_ok``), those cut off at the output-token limit."""
        from geoagent.engine import AnswerQuality
        from geoagent.report.geohint import TRUNCATION_SETTING
        from geoagent.config import output_limit_keys
        from geoagent.scoring.truncation import is_planned_limit_key

        keys = output_limit_keys(cfg)  # each model's own key (walk44 B1)

        agg = getattr(self, "_agg", None)
        if agg is None or not agg.keys:
            return {}
        out = {}
        for m in agg.answered_models:
            c = agg.select(model=m)
            cut = total({k: v for k, v in agg.truncation.items() if k[0] == m}).n_truncated if agg.truncation else 0
            key = keys.get(m)
            out[m] = AnswerQuality(c.n + agg.n_no_answer(model=m), c.n - c.n_parse_fail, cut, key or TRUNCATION_SETTING,
                                   "the report's compliance table (Unparseable: no JSON object) and "
                                   "model_responses.parquet", fix_planned=is_planned_limit_key(key))
        return out

    def summary_lines(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[str]:
        from geoagent.report.geohint import (default_conditions, geocoder_failure_warning, geocoder_rules_warning,
                                             left_out_text, scoring_left_note, truncation_warnings,
                                             unresolved_warnings, zero_err_warnings)

        lines = [f"  warning: {w}" for w in self.plan_warnings(cfg)]
        lines += self._plan_lines()
        s = settings_of(cfg)
        echo_rule = s.echo_rule
        agg = getattr(self, "_agg", None)
        note = getattr(self, "_scope_note", None)
        not_planned = getattr(self, "_not_planned", 0)
        if agg is None:
            scope = scored_scope(ctx.services.get(SERVICE_PLAN_KEYS))
            agg = aggregate_from_store(ctx.get("store"), echo_rule=echo_rule, regime_threshold=s.regime_threshold,
                                       scope=scope)
            note, not_planned = scope.note(), scope.not_planned
        if outcome is not None:  # the summary's plan line counts them (walk46 #13)
            outcome.not_planned = not_planned
        if note:
            lines.append(f"  {note}")
        lines.append(f"  echo rule {describe_echo_rule(echo_rule)}")
        failed = geocoder_failure_warning(*_geocoder_left(outcome), left_by=_answers_left_by(outcome))
        # work a stop left past the geocoder too (geocoded, not scored; scored, not aggregated)
        later = scoring_left_note(*_scoring_left(outcome), left_by=_STOPS_LEAVING_WORK.get(str(getattr(outcome, "status", ""))))
        left = [f"  {x}" for x in (failed, later) if x]
        if not agg.keys:
            return [*lines, "  GeoHint: no scored responses", *left]
        # the no-context condition report.md splits by (default_conditions: ``v1_baseline`` for a permissive-schema
        # campaign); the aggregator's default, ``baseline``, gave such a campaign no regime at all
        baseline = default_conditions(agg)[1]
        regimes = agg.regimes(condition=baseline)
        n_leg = sum(v == "legible" for v in regimes.values())
        n_undetermined = len(agg.undetermined_sites(baseline))
        lines.append(f"  GeoHint: {count_text(agg.select().n, 'scored response')} over {count_text(len(agg.sites), 'site')}; "
                     f"regimes: {n_leg} legible, {len(regimes) - n_leg} illegible"
                     + (f", {n_undetermined} undetermined (no no-context answer geocoded)" if n_undetermined else "")
                     + f" (threshold {threshold_text(agg.regime_threshold)} no-context hit rate)")
        if left_out_text(agg):  # the responses above are the answers the tables count (report header)
            lines.append(f"  {left_out_text(agg)}")
        regime_left_out = agg.regime_left_out_models(baseline)
        if regime_left_out:  # stats42 #1: their undetermined no-context rate assigns no site
            lines.append(f"  regimes assigned without the no-context answers of {', '.join(regime_left_out)} (none "
                         "geocoded: hit rate undetermined, not 0)")
        n_no_regime = len(agg.sites) - len(regimes) - n_undetermined
        if n_no_regime:
            lines.append(f"  {n_no_regime} site{'' if n_no_regime == 1 else 's'} without a no-context answer "
                         f"{'has' if n_no_regime == 1 else 'have'} no regime")
        for m in agg.answered_models:
            for cond in sorted({cc for mm, cc in agg.truncation if mm == m} | set(agg.conditions)):
                c = agg.select(model=m, condition=cond)
                if c.n:
                    # echo is a text match, scored whether or not the answer geocoded: given whenever scored
                    echo = f"  echo {c.echo_rate:.1%}" if c.echo_n else ""
                    lines.append(f"  {m:>20} {cond:<12} n {c.n:>6}  hit {hit_text(c)}{echo}  unparsed {c.n_parse_fail}"
                                 f"  unresolved {c.n_none} ({c.unresolved_share:.1%})")
                no_answer = agg.n_no_answer(model=m, condition=cond)
                if no_answer:  # in no rate: the cap (or the provider's filter), not the model, ended them
                    withheld = agg.n_no_answer_withheld(model=m, condition=cond)
                    how = "cut off, nothing parsed" if not withheld else (
                        f"cut off or stopped by the provider's content filter ({withheld}), nothing parsed")
                    lines.append(f"  {m:>20} {cond:<12} no answer ({how}) {no_answer}: left out of every rate")
        cut = total(agg.truncation)
        lines.append(f"  cut off at the output-token limit: {cut.n_truncated} of {count_text(cut.n, 'answer')}"
                     + (f" ({cut.share:.1%})" if cut.n else "") + f"; {TRUNCATION_LEGEND}")
        lines += [f"  {w}" for w in truncation_warnings(agg)]
        lines += [f"  {w}" for w in unresolved_warnings(agg)]
        lines += [f"  {w}" for w in zero_err_warnings(agg)]  # review44c #1
        # at every run while any counted answer keeps other geocoding rules, from the stored rows (fixgeohint42 #2)
        lines += [f"  {w}" for w in (geocoder_rules_warning(agg, getattr(cfg, "name", None)),) if w]
        lines += left
        return lines


def sampling_note(cfg: Any, selection_methods: Sequence[str] | None = None) -> str | None:
    """The report's sentence on the models that answer only a share of the units (``[[models]] sampling_rate``,
    ``[geohint] sample_rates``, by the site's selection method too), None when every model answers every unit
    (walk39 #8: the report never said why one model's n was a third of the others'). Seed 000 Sec. 6 samples
    claude-opus-5 at a third on the automatic batch.

    ``selection_methods``: the planned sites' ``selection_method`` values (:attr:`PlanSummary.selection_methods`,
    "" for a site without one) where the plan is known: a table's rates are then those of these sites only, so a
    ``default`` no site falls under is not named and a table that gives every planned site one rate is that
    rate (walk39 #9); None: every rate the config writes."""
    from geoagent.geohint.plan import models_from_config

    try:
        specs = models_from_config(cfg)
    except (ValueError, TypeError):
        return None
    parts, uneven = [], False
    for m in specs:
        if selection_methods is not None and m.rates_by_selection:
            in_use = m.rates_in_use(selection_methods)
            table = [(k, r) for k, r in m.rates_by_selection if k in in_use]
            other = {r for k, r in in_use.items() if k not in dict(m.rates_by_selection)}
        else:
            table, other = list(m.rates_by_selection), {m.sample_rate}
        rates = {r for _, r in table} | other
        if not rates or min(rates) >= 1:  # answers every unit (review39c #9: "1 at algorithm sites (1 elsewhere)")
            continue
        if len(rates) > 1:
            uneven = True
            parts.append(f"{m.model} " + ", ".join(f"{r:g} at {k} sites" for k, r in table)
                         + "".join(f" ({r:g} elsewhere)" for r in other))
        else:
            parts.append(f"{m.model} {min(rates):g}")
    if not parts:
        return None
    return ("Sampling: " + "; ".join(parts) + " of the units (site, image, reference point; seeded, every condition "
            "of a unit together, so comparisons stay paired). Such a model's n is smaller"
            + ("; its rates are not reweighted: sites where it answers every unit weigh more in its rates than in "
               "another model's." if uneven else "."))


def _simulated(cfg: Any, ctx: StageContext) -> list[str]:
    """Models of the campaign whose answers come from the simulator: as each stored answer recorded it
    (``request_meta.provider_kind``, a sandbox fake on any port included), else by the config as written (before
    the sandbox fakes' ports replace their URLs; :func:`geoagent.runtime.export.simulated_answer_models`): the
    report says its figures describe the simulator."""
    from geoagent.runtime.export import simulated_answer_models

    return simulated_answer_models(ctx.services.get("store"), ctx.services.get("config_as_written", cfg),
                                   configured_only=True)
