"""The crawl as a campaign kind for the engine (``[campaign] kind = "crawl"``, ``run.py crawl CONFIG``).

The planner puts the ``[[crawl.cities]]`` on the ``cities`` edge (keys stable, so re-running resumes);
the stages are :func:`geoagent.crawl.stages.crawl_stages`; their services are built from the engine's
(``config``, ``http``, ``providers``, ``state_dir``) on first use. ``[crawl] watch = true`` (or the
engine's watch mode plus that flag) keeps re-reading the config for new cities. The report is
``report/crawl_summary.json`` with the output files and the per-API request and error counts; the export
(end of a run, ``run.py export``) writes the crawl's tables to ``export/`` as Parquet and CSV.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.textfmt import count_text, mapping_text
from geoagent.crawl.image_audit import IMAGE_AUDIT_MAX_ANSWERS
from geoagent.crawl.settings import CrawlConfigError, CrawlSettings
from geoagent.crawl.stages import city_messages, crawl_stages, services_from_context
from geoagent.engine import CampaignKind
from geoagent.runtime.stage import Message, Stage, StageContext

_log = logging.getLogger(__name__)


def _settings(cfg: Any) -> CrawlSettings:
    s = cfg.section("crawl")
    if not isinstance(s, CrawlSettings):
        raise CrawlConfigError(f"{getattr(cfg, 'source', 'config')}: a crawl campaign needs a [crawl] section")
    return s


def _mapillary_is_fake(settings: CrawlSettings) -> bool:
    """Whether ``[crawl.endpoints] mapillary`` is the sandbox's offline fake (``*.sandbox.invalid``)."""
    from geoagent.sandbox.launch import fake_name

    try:
        return fake_name(str(settings.endpoints.mapillary or "")) is not None
    except ValueError:  # a *.sandbox.invalid host naming no fake: launch refuses it with its own message
        return False


class CrawlCampaign(CampaignKind):
    """Screen cities, sample sites, fetch and audit images, rate reference points, build ladders."""

    kind = "crawl"
    plan_edge = C.EDGE_CITIES
    plan_unit = "cities"
    #: its records (sampling/, sites.csv, rated/, ladders/) and images are files of the state folder: on Redis every
    #: process must share that folder (redis41 #1)
    one_state_folder = True

    def stages(self, cfg: Any) -> list[Stage]:
        _settings(cfg)
        return crawl_stages()

    def required_keys(self, cfg: Any) -> list[tuple[str, str]]:
        """The Mapillary token (``[crawl.endpoints] mapillary_token_env``): every crawl stage process builds the
        Mapillary client, so the engine looks it up before the run creates any queue or state file."""
        settings = _settings(cfg)
        var = settings.endpoints.mapillary_token_env
        what = "the Mapillary token, [crawl.endpoints] mapillary_token_env"
        if _mapillary_is_fake(settings):  # walk24 #6: the hint was only in crawl_sandbox.toml's comments and docs/campaigns.md
            what += f"; the sandbox's Mapillary fake accepts any value of the form MLY|..., e.g. {var}='MLY|sandbox'"
        return [(var, what)]

    def key_value_problem(self, cfg: Any, var: str, value: str) -> str | None:
        """A Mapillary token (the variable ``[crawl.endpoints] mapillary_token_env`` names) that does not start with
        ``MLY|`` (:func:`geoagent.clients.mapillary.token_problem`; crawl40 #8), with the sandbox fake's convention
        when the crawl's Mapillary endpoint is the offline fake; None for any other variable or a token."""
        from geoagent.clients.mapillary import token_problem

        settings = _settings(cfg)
        if var != settings.endpoints.mapillary_token_env:
            return None
        problem = token_problem(var, value)
        if problem and _mapillary_is_fake(settings):
            problem += f"; the offline fake accepts any value of the form MLY|..., e.g. {var}='MLY|sandbox'"
        return problem

    async def plan(self, cfg: Any, ctx: StageContext) -> Iterable[Message]:
        """The cities to screen. A human-verdict CSV (``[crawl.image_audit] human_verdicts``) is read first: the
        image auditor reads it after each site's audit calls, so a file it cannot read would dead-letter every
        site after they were paid for; here it stops the run before any call (exit 2: ``FileNotFoundError``
        naming the key and file when it does not exist, ``ValueError`` naming file:line when it is malformed).

        A run (not a dry run) of a crawl that has audited images then rebuilds its image tables from the stored
        audits under these verdicts (:func:`geoagent.crawl.stages.rewrite_image_tables`; no request): verdicts
        added to a finished crawl reach ``images.csv``, ``image_audit.csv``, the agreement files and the
        export this run writes; the hand-off then builds ``verify_trials.csv`` with them. Audits an earlier
        audit parser read are read again first, from their stored answers (:func:`reread_stored_audits`).

        Before that, a run (not a dry run) corrects the capture times its selection records hold from before the
        ``captured_at`` rule (:func:`correct_stored_capture_times`: a value sent in seconds kept as a time in 1970),
        with a decision per site and one warning.

        The human review decisions (``[crawl.referenceability] review_verdicts``) are read here too (same errors,
        :func:`geoagent.crawl.review.review_verdicts_of`), and a run of a crawl that has rated sites rebuilds every
        ladder with them and writes the resolution table and decision log
        (:func:`geoagent.crawl.stages.apply_review_verdicts`; no request, ``rated/`` untouched). Before that, ladders
        built under another referenceability auditor than the config's are moved to ``ladders_superseded/`` with a
        warning (:func:`geoagent.crawl.stages.set_aside_other_auditor_ladders`): ``ladders/`` holds the current
        auditor's only.

        A config whose ``[crawl.endpoints]`` name the sandbox's fakes and whose cities include one the sandbox world
        does not hold gets one warning line naming it (:func:`sandbox_world_note`), in the dry run and the run."""
        from geoagent.crawl.image_audit import human_verdicts_of
        from geoagent.crawl.review import review_verdicts_of

        settings = _settings(cfg)
        human_verdicts_of(settings.image_audit.human_verdicts)
        review_verdicts_of(settings.referenceability.review_verdicts)
        services = getattr(ctx, "services", {}) or {}
        note = sandbox_world_note(_settings(services.get("config_as_written") or cfg))
        if note:  # a "warning: ..." line on the CLI's console (said once per process: Python's warning filter)
            import warnings

            from geoagent.config import ConfigWarning

            warnings.warn(note, ConfigWarning, stacklevel=2)
        state_dir = Path(services.get("state_dir") or cfg.state_dir())
        if not services.get(C.SERVICE_DRY_RUN) and not services.get(C.SERVICE_READ_ONLY):
            correct_stored_capture_times(state_dir)
        if (not services.get(C.SERVICE_DRY_RUN) and not services.get(C.SERVICE_READ_ONLY)
                and (state_dir / "image_audit").is_dir()):
            from geoagent.crawl.stages import rewrite_image_tables

            reread_stored_audits(state_dir)
            rewrite_image_tables(settings, state_dir, _images_root(cfg))
        if not services.get(C.SERVICE_DRY_RUN) and not services.get(C.SERVICE_READ_ONLY):
            from geoagent.crawl.stages import set_aside_other_auditor_ladders

            set_aside_other_auditor_ladders(settings, state_dir)
        if (not services.get(C.SERVICE_DRY_RUN) and not services.get(C.SERVICE_READ_ONLY)
                and (state_dir / "rated").is_dir()):
            from geoagent.crawl.stages import apply_review_verdicts

            apply_review_verdicts(settings, state_dir)
        return city_messages(settings.cities)

    def tasks_to_reopen(self, cfg: Any, ctx: StageContext) -> list[tuple[str, list[str], str]]:
        """The referenceability tasks (edge ``sites_for_audit``, key ``site:<id>``) of the sites whose stored
        ratings hold a candidate whose rating failed alone in an earlier run with a re-ask left
        (:func:`geoagent.crawl.stages.sites_with_reasks_due`, crawl40b #2): the re-asks are made in the run that
        meets the failure (fixref41 #1), so those left are the ones a stop or the bound on re-asks that read nothing
        (:data:`~geoagent.crawl.referenceability.REF_MAX_FUTILE_REASKED`) kept it from making. Handled again, the
        stage asks each such candidate alone with a reminder and redraws the site's ladder. None in a dry run or
        read-only look."""
        from geoagent.crawl.referenceability import REF_MAX_REASKS
        from geoagent.crawl.stages import sites_with_reasks_due

        services = getattr(ctx, "services", {}) or {}
        if services.get(C.SERVICE_DRY_RUN) or services.get(C.SERVICE_READ_ONLY):
            return []
        sites = sites_with_reasks_due(_settings(cfg), Path(services.get("state_dir") or cfg.state_dir()))
        if not sites:
            return []
        return [(C.EDGE_SITES_FOR_AUDIT, [f"site:{s}" for s in sites],
                 "their candidates whose referenceability ratings failed alone, with re-asks an earlier run left "
                 f"unmade (a stop, or its bound on re-asks that read nothing; each candidate is re-asked at most "
                 f"{REF_MAX_REASKS} times in all), are asked again, each alone with a reminder, and their ladders "
                 "redrawn")]

    def config_at_end(self, cfg: Any, ctx: StageContext) -> Any | None:
        """``cfg`` (the config as written) with the ``[[crawl.cities]]`` the run ended with when its ``--watch``
        planned cities added to the config file (:func:`geoagent.crawl.stages.cities_run_with`, in the file's
        order), so the manifest records them and a re-run of the unchanged file reports no config change; None
        when the run planned none anew (or did not watch). Only the cities are taken from the file: another edit
        made while watching was not run with, and the next run's drift check names it. ``cfg`` itself when every
        city recorded was taken back (:func:`geoagent.crawl.stages.watch_config_cities` ``on_not_queued``), so the
        entry records the start's config again."""
        from geoagent.crawl.stages import SERVICE_WATCHED_CITIES, cities_run_with

        seen = ctx.services.get(SERVICE_WATCHED_CITIES)
        if not isinstance(seen, dict) or not (seen.get("added") or seen.get("recorded")):
            return None
        if not seen.get("added"):  # every city it recorded was taken back (queued by another process): the start's
            return cfg
        raw = dict(cfg.tasks.get("crawl") or {})
        cities = cities_run_with(_settings(cfg).cities, seen["added"], seen.get("last_read"))
        raw["cities"] = [c.model_dump(mode="json", exclude_unset=False) for c in cities]
        return cfg.model_copy(update={"tasks": {**cfg.tasks, "crawl": raw}})

    def dry_run_outline(self, cfg: Any) -> list[str]:
        """The crawl's budget outline for the dry run (:func:`crawl_budget_outline`), and a warning when the
        configured cities cannot give swapped-image control trials (all on one continent:
        :func:`geoagent.geoverify.trials.one_continent_note`)."""
        from geoagent.geoverify.trials import one_continent_note

        settings = _settings(cfg)
        note = one_continent_note(c.continent for c in settings.cities) if settings.cities else None
        return crawl_budget_outline(cfg, settings) + ([f"  warning: {note}"] if note else [])

    def empty_plan_reason(self, cfg: Any) -> str:
        return (f"0 cities planned from {getattr(cfg, 'source', cfg.name)}: [[crawl.cities]] is empty (add cities, "
                "or run with --watch to wait for them)")

    async def report(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[Path]:
        """The end of a run: ``verify_trials.csv`` (:func:`_handoff_trials`: written when the crawl is
        ``complete``; when it ends ``incomplete`` an earlier one is moved aside) and
        ``report/crawl_summary.json`` (:func:`_write_summary`), after the review resolution table is brought up to
        date with the sites rated during the run (:func:`_refresh_review_resolution`)."""
        svc = services_from_context(ctx)
        _refresh_review_resolution(svc)
        trials = _handoff_trials(cfg, svc, outcome.status, dict(_dead_of(outcome.counts)))
        self._trials_note = trials["note"]
        return [_write_summary(cfg, svc, outcome.status, trials, watching=False)]

    def exported_tables(self) -> frozenset[str]:
        """:meth:`CampaignKind.exported_tables` and the crawl's own tables (its decision log and
        :func:`geoagent.crawl.export.crawl_table_schemas`)."""
        from geoagent.crawl.export import CRAWL_DECISIONS_TABLE, crawl_table_schemas

        return super().exported_tables() | {CRAWL_DECISIONS_TABLE, *crawl_table_schemas()}

    def export(self, cfg: Any, store: Any, out_dir: str | Path | None = None) -> list[Any]:
        """The crawl's tables (city pool, sites, images, image audit, candidate referenceability, ladders,
        audit logs, the crawl's decision log) as Parquet and CSV under ``state/<campaign>/export/``
        (:func:`geoagent.crawl.export.export_crawl_tables`), plus the response store's tables when it holds
        any (the crawl's audits are kept in its own files, so it usually holds none); ``out_dir``: another folder
        (``run.py export --out DIR``, which refuses the crawl's own output folder)."""
        from geoagent.crawl.export import export_crawl_tables, write_crawl_export_note
        from geoagent.runtime.export import export_all, progress_note

        out = Path(out_dir) if out_dir is not None else Path(cfg.state_dir()) / C.EXPORT_DIR
        progress = progress_note(cfg)  # the queues read once for every table and the note
        tables = export_crawl_tables(cfg.state_dir(), out, cfg=cfg, progress=progress)
        if store.count_responses() or store.result_tables():
            tables += export_all(store, out, include_responses=store.count_responses() > 0, cfg=cfg, progress=progress)
        # after export_all: one note for every table
        write_crawl_export_note(out, tables, cfg, cfg.state_dir(), progress=progress)
        return tables

    def simulated_answer_models(self, cfg: Any, store: Any = None) -> list[str]:
        """Names of the auditors whose answers came from geoagent's simulator, for ``run.py export``'s line: as
        recorded with each answer in the crawl's own files (every auditor answer is there, metered or not;
        :func:`geoagent.crawl.export.crawl_simulated` with the state folder), the config's rule for auditors that
        recorded nothing. ``store`` is not read (the kind's hook has the campaign kinds' signature)."""
        from geoagent.crawl.export import crawl_simulated

        return crawl_simulated(cfg, cfg.state_dir())[3]

    def handoff_snapshot(self, cfg: Any, ctx: StageContext) -> dict[str, Any]:
        """On the event loop's thread, before an idle hand-off: the crawl services (whose paths do not change)
        and their per-API request counts (:meth:`geoagent.crawl.stages.CrawlServices.api_stats`, computed now:
        it iterates the Mapillary client's set of thumbnail CDN hosts and the HTTP client's hosts, which the
        running stages add to). ``{"svc": CrawlServices, "api": {api: counts}}``."""
        svc = services_from_context(ctx)
        return {"svc": svc, "api": svc.api_stats()}

    def idle_handoff(self, cfg: Any, ctx: StageContext, *, export: bool, complete: bool,
                     snapshot: Any = None) -> list[str]:
        """``run.py crawl CONFIG --watch`` went idle (every queue drained after new work): write the hand-off
        tables now, as the end of a run does, so an evaluation campaign can use the folder while the crawl
        keeps watching: ``verify_trials.csv`` (only when nothing is dead-lettered, as at the end of a run
        that ends ``complete``; with dead-lettered tasks an earlier ``verify_trials.csv`` is moved aside to
        ``verify_trials.stale.csv``, as at the end of a run that ends ``incomplete``: :func:`_handoff_trials`),
        unless the run does not export (``geoagent.engine.run_campaign(export=False)``) ``export/`` (:meth:`export`), and ``report/crawl_summary.json``
        (:func:`_write_summary`, with ``"watching": true``). ``sites.csv``, ``images.csv`` and ``ladders/``
        are written by the stages as they go. Each file is written atomically (a temporary file renamed over
        it), and writing again gives the same tables. Runs in a worker thread, never two at once
        (:class:`geoagent.engine.IdleHandoffTick`), reading the services' in-process state only from
        ``snapshot`` (:meth:`handoff_snapshot`, taken on the loop's thread; None: taken here, for a caller
        on the loop's thread); the tables it reads are files, the queues and store SQLite databases."""
        from geoagent.status import dead_counts

        snap = snapshot if snapshot is not None else self.handoff_snapshot(cfg, ctx)
        svc = snap["svc"]
        status = "complete" if complete else "incomplete"
        _refresh_review_resolution(svc)
        trials = _handoff_trials(cfg, svc, status, {} if complete else dead_counts(cfg))
        self._trials_note = trials["note"]
        parts = [trials["note"]]
        if export:  # the config as written: a sandbox auditor fake is known by its *.sandbox.invalid URL
            from geoagent.runtime.export import export_together, with_spend

            written = ctx.services.get("config_as_written", cfg)  # and the ledger per model beside them (rev24 #5)
            tables = export_together(written, lambda: with_spend(self.export(written, ctx.get("store")),
                                                                 ctx.services.get("ledger"), written))
            parts.append(f"export: {len(tables)} tables in {Path(cfg.state_dir()) / C.EXPORT_DIR}")
        summary = _write_summary(cfg, svc, status, trials, watching=True, api=snap["api"])
        parts.append(f"summary: {summary}")
        return ["crawl --watch: idle (every queue drained); hand-off tables written: " + "; ".join(parts)]

    def status_lines(self, cfg: Any) -> list[str]:
        """For ``run.py status``: why the crawl's folder has no ``verify_trials.csv`` when its last hand-off
        (the end of a run, or an idle drain under ``--watch``) did not write one, or the hand-off's warning about
        the one it wrote (no swapped-image control: :func:`_no_mismatch_warning`), from
        ``report/crawl_summary.json``'s ``verify_trials`` (``[]`` when it was written without a warning or there
        is no summary); then the cities the screener did not admit, each with its reasons
        (:func:`geoagent.crawl.screener.not_admitted_lines`, from the stored screening records); then how many
        referenceability review items are pending and resolved (:func:`geoagent.crawl.review.review_counts_line`,
        from the queue and the resolution table the last run wrote); then how many candidates no ladder draws
        because their contentious-name screen could not be read (:func:`unscreened_lines`), and how many
        candidates' ratings failed (:func:`rating_failed_lines`, crawl40 #1). The cities that got
        fewer sites than ``sites_per_city`` come after the cities not admitted (:func:`shortfall_lines`), then the sites
        left without a usable image (:func:`no_usable_image_lines`)."""
        from geoagent.crawl.referenceability import rating_failed_lines, unscreened_lines
        from geoagent.crawl.review import review_counts, review_counts_line
        from geoagent.crawl.screener import not_admitted_lines

        try:
            rejected = not_admitted_lines(cfg.state_dir(), _settings(cfg).screener)
        except (OSError, CrawlConfigError):
            rejected = []
        try:
            review = review_counts_line(review_counts(cfg.state_dir()))
        except OSError:
            review = None
        try:
            try:  # the current auditor model's records decide (review40a #4)
                auditor = _settings(cfg).referenceability.model
            except CrawlConfigError:
                auditor = None
            unscreened = rating_failed_lines(cfg.state_dir(), auditor) + unscreened_lines(cfg.state_dir())
        except OSError:
            unscreened = []
        try:
            short = shortfall_lines(cfg.state_dir(), _settings(cfg))
        except (OSError, CrawlConfigError):
            short = []
        try:
            short += no_usable_image_lines(cfg.state_dir(), _images_root(cfg))
        except OSError:
            pass
        return self._trials_status_lines(cfg) + rejected + short + ([f"  {review}"] if review else []) + unscreened

    def _trials_status_lines(self, cfg: Any) -> list[str]:
        path = Path(cfg.state_dir()) / C.REPORT_DIR / SUMMARY_FILE
        try:
            vt = orjson.loads(path.read_bytes()).get("verify_trials") if path.is_file() else None
        except (OSError, orjson.JSONDecodeError, AttributeError):
            return []
        if isinstance(vt, dict) and vt.get("written") and vt.get("warning"):
            return [f"  verify_trials.csv warning: {vt['warning']}"]
        if not isinstance(vt, dict) or vt.get("written") is not False:
            return []
        line = f"  verify_trials.csv not written: {vt.get('reason') or 'the crawl is not complete'}"
        if vt.get("stale"):
            line += (f"; the earlier one, built from an earlier state of the crawl, was moved to {vt['stale']} "
                     "(campaigns do not read it)")
        return [line]

    def summary_lines(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[str]:
        svc = services_from_context(ctx)
        lines = [f"  crawl outputs: {svc.state_dir} (sites.csv, ladders/, image_audit.csv), images: {svc.images_root}"]
        lines += request_lines(svc)
        lines.append("  queue counts are per-site tasks (one task fetches or audits all of a site's images); "
                     + image_counts_line(image_counts(svc.state_dir, svc.images_root),
                                         downloaded=svc.downloads_this_run))
        from geoagent.crawl.referenceability import not_rated_count, rating_failed_lines, unscreened_lines

        from geoagent.crawl.review import review_counts, review_counts_line

        review = review_counts_line(review_counts(svc.state_dir))
        if review:
            lines.append(f"  {review}")
        n_unlabeled = not_rated_count(svc.state_dir)
        if n_unlabeled:
            lines.append(f"  referenceability: {count_text(n_unlabeled, 'candidate')} not rated: no label in any "
                         "asked language and no English Wikipedia article (WDQS gave the bare QID, a name the auditor cannot "
                         "rate nor a hint use); "
                         "each is a decision in audit_decisions.jsonl with not_rated = no_label")
        lines += rating_failed_lines(svc.state_dir, svc.settings.referenceability.model)
        lines += unscreened_lines(svc.state_dir)
        from geoagent.crawl.screener import not_admitted_lines

        lines += not_admitted_lines(svc.state_dir, svc.settings.screener)
        lines += shortfall_lines(svc.state_dir, svc.settings)
        lines += no_usable_image_lines(svc.state_dir, svc.images_root)
        note = getattr(self, "_trials_note", None)
        if note:
            lines.append(f"  {note}")
        from geoagent.crawl.stages import other_city_skips

        n_skip = other_city_skips(svc.state_dir)
        if n_skip:
            lines.append(f"  site sampler: {count_text(n_skip, 'candidate')} skipped as already a site of another city "
                         "of this crawl (cities whose sampling discs overlap; one landmark is one site: the city "
                         "sampled first keeps it, cities being sampled one at a time in the order the screener "
                         "admits them); sampling/<city>.json walk decision skip_other_city")
        from geoagent.crawl.sampler import recorded_versions, sampler_version_warning

        warning = sampler_version_warning(recorded_versions(svc.state_dir / "sampling"))
        if warning:
            lines.append(f"  {warning}")
        from geoagent.crawl.stages import label_language_warning

        warning = label_language_warning(svc.state_dir)
        if warning:
            lines.append(f"  {warning}")
        from geoagent.crawl.referenceability import ref_candidate_lines_warning, ref_parser_warning

        auditor = svc.settings.referenceability.model  # its records only: another model's are reused by nothing
        for warning in (ref_candidate_lines_warning(svc.state_dir, auditor),
                        ref_parser_warning(svc.state_dir, auditor)):
            if warning:
                lines.append(f"  {warning}")
        return lines


def request_counts(svc: Any, api: dict[str, Any] | None = None) -> dict[str, Any]:
    """The crawl APIs' requests (every attempt sent, retries included), for ``crawl_summary.json`` ``requests``:
    ``this_run`` (API -> requests sent by this process: ``api``, per-API stats taken on the event loop's thread, else
    ``svc.api_stats()`` now), ``all_runs`` (API -> requests of every run of the crawl, this one included, every
    process of ``--stages`` too, and runs stopped by SIGINT or killed: the tally files,
    :func:`geoagent.crawl.tally.request_totals`), ``processes`` (tally files summed), ``unreadable`` (tally files
    left out), ``earlier_runs_unrecorded`` (True: the crawl ran before the tallies, 2026-12-03, and those runs'
    requests are not in ``all_runs``) and ``tally_error`` (why this process's tally file could not be written, or
    None). Both maps have the same APIs (``overpass``, ``wdqs``, ``mapillary``, ``pageviews``, ``thumbnails``).
    ``thumbnails_under_mapillary``: True when this process downloaded thumbnails from the Graph API's own host (the
    sandbox's fake serves them so): their downloads count under ``mapillary`` and ``thumbnails`` stays 0 (walk33 #4)."""
    from geoagent.crawl.tally import TALLY_APIS, request_totals

    stats = svc.api_stats() if api is None else api
    totals = request_totals(svc.state_dir)
    apis = list(dict.fromkeys([*TALLY_APIS, *stats, *totals["requests"]]))
    this_run = {a: int((stats.get(a) or {}).get("requests", 0)) for a in apis}
    return {"this_run": this_run, "all_runs": {a: int(totals["requests"].get(a, 0)) for a in apis},
            "processes": totals["processes"], "unreadable": totals["unreadable"],
            "earlier_runs_unrecorded": totals["earlier_runs_unrecorded"],
            "tally_error": getattr(getattr(svc, "tally", None), "error", None),
            "thumbnails_under_mapillary": _thumbnails_under_mapillary(svc)}


def _thumbnails_under_mapillary(svc: Any) -> bool:
    """Whether the crawl's thumbnail requests go to the Graph API's own host (counted under ``mapillary``)."""
    mapillary = getattr(svc, "mapillary", None)
    hosts = getattr(mapillary, "thumb_hosts", None)
    return bool(hosts) and getattr(mapillary, "host", None) in hosts


def crawl_counts(state_dir: str | Path, images_root: str | Path) -> dict[str, Any]:
    """What the crawl holds now, for ``crawl_summary.json`` ``counts``: ``cities`` (``screened``: rows of
    ``city_pool.csv``; ``admitted``: its rows with ``eligible`` True), ``sites`` (rows of ``sites.csv``) and
    ``images`` (:func:`image_counts`: ``kept``, thumbnails kept by the selection and used; ``examined``, kept +
    ``rejected`` after download; ``rejected`` and ``skipped`` (before download), each reason -> count; ``audited``,
    rows of ``images.csv``, of which ``usable`` and ``excluded``; ``unreadable``, kept images without a model or
    human verdict: their audit answers could not be read). A file not written yet counts 0."""
    import csv

    folder = Path(state_dir)

    def rows(name: str) -> list[dict[str, str]]:
        if not (folder / name).is_file():
            return []
        with open(folder / name, newline="", encoding="utf-8") as f:
            return list(csv.DictReader(f))

    pool = rows("city_pool.csv")
    c = image_counts(folder, images_root)
    images = {"kept": c["kept"], "examined": c["kept"] + sum(c["rejected"].values()),
              "rejected": dict(c["rejected"]), "skipped": dict(c["skipped"]), "audited": c["audited"],
              "usable": c["usable"], "excluded": c["excluded"], "unreadable": c["unreadable"]}
    return {"cities": {"screened": len(pool), "admitted": sum(r.get("eligible") == "True" for r in pool)},
            "sites": len(rows("sites.csv")), "images": images}


def request_lines(svc: Any) -> list[str]:
    """The summary's per-API lines: this run's requests, retries and error rate, then the requests over every run
    of the crawl (:func:`request_counts`), e.g. ``wdqs: 1 request by this run (4 over all runs), 0 retries, error
    rate 0.0%`` (retries and error rate: this run's), after a head line saying which is which and warning when
    runs before the tallies (2026-12-03) are missing from the totals or this run's tally could not be written."""
    from geoagent.status import describe_answers

    stats = svc.api_stats()
    rc = request_counts(svc, stats)
    head = ("  API requests: by this run, and over every run of this crawl in parentheses (every attempt, retries "
            f"included; the tallies of {count_text(rc['processes'], 'process', 'processes')} that sent any, runs "
            "stopped or killed included: api_requests/; crawl_summary.json requests.this_run, requests.all_runs)")
    if rc["earlier_runs_unrecorded"]:
        head += ("; warning: runs of this crawl before 2026-12-03 kept no count, so their requests are not in the "
                 "totals")
    if rc["tally_error"]:
        head += f"; warning: this run's requests could not be kept: {rc['tally_error']}"
    lines = [head]
    for api in rc["this_run"]:
        st = stats.get(api)
        n, total = rc["this_run"][api], rc["all_runs"][api]
        if st is None and not total:
            continue
        line = f"  {api:>10}: {count_text(n, 'request')} by this run ({total} over all runs)"
        if st is not None:
            answers = describe_answers(st["answers"], st["answer_notes"])
            line += f", {st['retries']} retries, error rate {st['error_rate']:.1%}" + (f"; {answers}" if answers else "")
        lines.append(line)
    return lines


def shortfall_lines(state_dir: str | Path, settings: CrawlSettings) -> list[str]:
    """The summary's and ``run.py status``'s warning about the cities that got fewer sites than
    ``[crawl.sampler] sites_per_city`` (:func:`geoagent.crawl.sampler.site_shortfall_lines`, from the sampling
    records ``<state_dir>/sampling/<city key>.json``; ``settings``: the config's, for records that do not hold the
    settings they were sampled with); ``[]`` when every sampled city got its sites. The crawl still ends
    ``complete`` (exit 0): the sampler did all it was asked, under its thresholds."""
    from geoagent.crawl.sampler import site_shortfall_lines, site_shortfalls

    folder = Path(state_dir) / "sampling"
    short = site_shortfalls(folder, settings.sampler)
    return site_shortfall_lines(short, len(list(folder.glob("*.json")))) if short else []


def correct_stored_capture_times(state_dir: str | Path) -> dict[str, dict[str, list[str]]]:
    """Correct, in the crawl's own selection records (``image_selection/<site>.json``), the capture times stored
    before the ``captured_at`` rule (:func:`geoagent.crawl.fetcher.correct_campaign_selections`: a value plausible
    only as seconds, which the client before the rule kept as milliseconds, a time in 1970, is read as seconds; any
    other time before 1990 is unknown). Each site corrected gets one ``crawl_decisions.jsonl`` record (stage
    ``imagery_fetcher``, ``event`` ``"mapillary_captured_at"``, ``stored`` true, the image ids:
    :func:`geoagent.crawl.fetcher.captured_at_correction_note`), logged before the records are rewritten (a kill
    between the two repeats the record at the next run), and one warning (:class:`geoagent.config.InputWarning`: a
    ``warning:`` line on the CLI's console) gives the counts. Returns ``{site: image ids changed}``; ``{}`` (no
    record, no warning) when nothing was left to correct, so a second run says nothing.

    Raises
    ------
    OSError
        A record or the decision log could not be written."""
    import time
    import warnings

    from geoagent.config import InputWarning
    from geoagent.crawl.fetcher import SELECTION_DIR, captured_at_correction_note, correct_campaign_selections
    from geoagent.files import append_jsonl

    state_dir = Path(state_dir)

    def log(fixed: dict[str, dict[str, list[str]]]) -> None:  # before the records are rewritten
        ts = round(time.time(), 3)
        append_jsonl(state_dir / C.CRAWL_DECISIONS_FILE,
                     [{"ts": ts, "stage": C.STAGE_FETCHER, "site": site, **captured_at_correction_note(f)}
                      for site, f in fixed.items()])

    fixed = correct_campaign_selections(state_dir, before_writing=log)
    if not fixed:
        return fixed
    n_sec = sum(len(f["converted_from_seconds"]) for f in fixed.values())
    n_unknown = sum(len(f["unknown"]) for f in fixed.values())
    warnings.warn(f"{count_text(n_sec + n_unknown, 'image')} of {count_text(len(fixed), 'site')} kept a capture time "
                  "stored before the captured_at rule (a value sent in seconds kept as milliseconds: a time in "
                  "1970): "
                  f"{n_sec} read as seconds now, {n_unknown} unknown (a time before 1990 either way); corrected in "
                  f"{state_dir / SELECTION_DIR} (each image's captured_at_note), one mapillary_captured_at decision "
                  f"per site in {C.CRAWL_DECISIONS_FILE}", InputWarning, stacklevel=2)
    return fixed


def reread_stored_audits(state_dir: str | Path) -> dict[str, list[str]]:
    """Read again, by the current rules (:data:`geoagent.crawl.image_audit.AUDIT_PARSER_VERSION`), the stored image
    audits (``image_audit/<site>/<image>.json``) an earlier parser read, from the answer text each keeps
    (``audit.raw``; no model call, no spend), so a crawl resumed after an upgrade does not mix two parsers' readings
    in ``image_audit.csv`` and ``images.csv``. The prompt whose example is compared is the current
    ``crawl_image_audit.txt`` (the one the stage sends).

    A record whose reading is unchanged only gets the current ``parser_version``. One read otherwise keeps its
    earlier reading as ``audit_before`` (with ``parser_version_before``), gets the new one as ``audit``, and gets one
    ``crawl_decisions.jsonl`` record (stage ``image_auditor``, ``event`` ``"image_audit_reread"``, the image, whether
    the audit kept the image before and now, and the new reason), logged before the record is rewritten (a kill
    between the two repeats the record at the next run). One warning (:class:`geoagent.config.InputWarning`) gives
    the counts when any reading changed. A record that cannot be read (torn JSON, no ``audit``) is left as it is (the
    stage redoes a torn one). Returns ``{site: image ids whose reading changed}``; ``{}`` when none did, so a second
    run says nothing.

    Raises
    ------
    OSError
        A record or the decision log could not be written."""
    import time
    import warnings

    from geoagent.config import InputWarning
    from geoagent.crawl import image_audit as ia
    from geoagent.files import append_jsonl, atomic_write_bytes

    state_dir = Path(state_dir)
    root = state_dir / "image_audit"
    changed: dict[str, list[str]] = {}
    if not root.is_dir():
        return changed
    prompt = ia.load_prompt("crawl_image_audit.txt")
    n_keeps = 0
    for path in sorted(root.glob("*/*.json")):
        try:
            rec = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if (not isinstance(rec, dict) or not isinstance(rec.get("audit"), dict)
                or ia.audit_parser_version(rec) >= ia.AUDIT_PARSER_VERSION):
            continue
        before = ia.ImageAudit.from_json(rec["audit"])
        after = ia.parse_image_audit(before.raw, prompt)
        new = {**rec, "parser_version": ia.AUDIT_PARSER_VERSION}
        if after.to_json() != before.to_json():
            site, iid = str(rec.get("site") or path.parent.name), str(rec.get("image_id") or path.stem)
            keeps_before, keeps_now = before.keeps_image, after.keeps_image
            n_keeps += keeps_before != keeps_now
            append_jsonl(state_dir / C.CRAWL_DECISIONS_FILE, [{
                "ts": round(time.time(), 3), "stage": C.STAGE_IMAGE_AUDITOR, "site": site, "event": "image_audit_reread",
                "image_id": iid, "parser_version_before": ia.audit_parser_version(rec),
                "parser_version": ia.AUDIT_PARSER_VERSION, "keeps_image_before": keeps_before,
                "keeps_image": keeps_now, "reason": after.reason}])
            new.update(audit=after.to_json(), audit_before=rec["audit"],
                       parser_version_before=ia.audit_parser_version(rec))
            changed.setdefault(site, []).append(iid)
        atomic_write_bytes(path, orjson.dumps(new, option=orjson.OPT_INDENT_2))
    if changed:
        n = sum(len(v) for v in changed.values())
        warnings.warn(f"{count_text(n, 'stored image audit')} of {count_text(len(changed), 'site')} read otherwise by "
                      f"the current audit rules (version {ia.AUDIT_PARSER_VERSION}) than when stored, from the "
                      f"answers' kept text (no call): {n_keeps} of them now keep or drop the image otherwise; the "
                      f"earlier readings are kept as audit_before in {root}, one image_audit_reread decision each in "
                      f"{C.CRAWL_DECISIONS_FILE}", InputWarning, stacklevel=2)
    return changed


def sandbox_world_note(settings: CrawlSettings) -> str | None:
    """One line naming the ``[[crawl.cities]]`` the sandbox fakes know nothing about, or None.

    ``settings`` as written (before :func:`geoagent.sandbox.launch.launch` points the endpoints at local ports):
    when ``[crawl.endpoints]`` name any of the crawl's fakes (``overpass``, ``wdqs``, ``pageviews``, ``mapillary`` on
    ``*.sandbox.invalid``), which serve only the demo's world (:func:`geoagent.demo.demo_world`), every configured
    city with none of its data within :data:`geoagent.sandbox.city.WORLD_DATA_RADIUS_KM` of its centre
    (:func:`geoagent.sandbox.city.cities_outside_world`) is named. None when no endpoint is a fake or every city
    lies in the world."""
    from geoagent.sandbox.launch import WORLD_FAKES, fake_name

    ep = settings.endpoints
    fakes = []
    for api in WORLD_FAKES:
        try:
            name = fake_name(str(getattr(ep, api, "") or ""))
        except ValueError:  # a *.sandbox.invalid host naming no fake: launch refuses it with its own message
            name = None
        if name in WORLD_FAKES:
            fakes.append(api)
    if not fakes or not settings.cities:
        return None
    from geoagent.demo import demo_world
    from geoagent.sandbox.city import WORLD_DATA_RADIUS_KM, cities_outside_world

    world = demo_world()
    outside = cities_outside_world([(c.city, c.lat, c.lon) for c in settings.cities], world)
    if not outside:
        return None
    known = ", ".join(str(c["city"]) for c in world.cities)
    them = "it" if len(outside) == 1 else "them"
    return (f"{count_text(len(outside), 'city', 'cities')} of [[crawl.cities]] "
            f"({', '.join(repr(n) for n in outside)}) lie{'s' if len(outside) == 1 else ''} outside the sandbox world: "
            f"[crawl.endpoints] {', '.join(fakes)} name the local fakes (*.sandbox.invalid), which know only {known} "
            f"(no place, entity or image within {WORLD_DATA_RADIUS_KM:g} km of {them}), so the crawl finds nothing "
            f"there and does not admit {them}; to crawl a real city, drop [crawl.endpoints] (the public APIs)")


def images_kept(state_dir: str | Path) -> int:
    """Rows of the crawl's ``images.csv`` (audited images kept; 0 when it is not written yet)."""
    import csv

    path = Path(state_dir) / "images.csv"
    if not path.is_file():
        return 0
    with open(path, newline="", encoding="utf-8") as f:
        return sum(1 for _ in csv.DictReader(f))


#: why the fetcher left an image out (its selection record's ``rejected[].reason``, :mod:`geoagent.crawl.fetcher`),
#: by the reason's start: (category, before download?)
_REJECTION_KINDS = (("captured before captured_after", "captured before [crawl.fetcher] captured_after", True),
                    ("panorama", "panoramas", True),
                    ("not a perspective camera", "not perspective (fisheye or another non-perspective camera)", True),
                    ("within ", "within min_separation_m of a kept image", True),
                    ("no thumbnail", "no thumbnail to be had", True),
                    ("too dark", "too dark (brightness filter)", False), ("near-duplicate", "near-duplicates", False))
#: the categories of :data:`_REJECTION_KINDS` named in the plural, as one image reads (``1 near-duplicate``)
_SINGULAR = {"panoramas": "panorama", "near-duplicates": "near-duplicate"}


def image_counts(state_dir: str | Path, images_root: str | Path) -> dict[str, Any]:
    """How many images the crawl looked at, kept, and why it left the others out.

    Reads this campaign's selection record of each site (:func:`geoagent.crawl.fetcher.campaign_selections`:
    ``<state_dir>/image_selection/<site>.json``, made by its own ``[crawl.fetcher]`` settings; never another
    campaign's selection in the shared images root; ``kept`` and ``rejected`` with a ``reason``) and
    ``images.csv`` (the audited kept images, ``usable`` True/False). Returns ``kept``
    (thumbnails on disk), ``skipped`` (category -> count, left out before download: panoramas, fisheye or other
    cameras that are not perspective, within
    ``min_separation_m`` of a kept image, no thumbnail), ``rejected`` (category -> count, left out after
    download: too dark, the brightness filter; near-duplicates; ``other``: an unreadable JPEG), ``usable`` and
    ``excluded`` (images.csv rows the audit kept / excluded; a human verdict overrides the model's),
    ``audited`` (rows of images.csv), ``unreadable`` (kept images not in images.csv whose stored audit answers could
    not be read, the last of up to :data:`~geoagent.crawl.image_audit.IMAGE_AUDIT_MAX_ANSWERS` asks: no model
    verdict, and no human verdict yet), ``shared`` (copies of images kept under a farther site too, not counted in
    ``kept``: each is used under the nearest site only, :func:`geoagent.crawl.export.image_owners`) and, when ``image_audit.csv`` is there, ``human`` (images.csv rows decided by
    a human verdict: ``image_audit.csv`` rows with a ``human_verdict`` whose ``image`` is an images.csv ``path``)."""
    import csv

    from geoagent.crawl.fetcher import campaign_selections

    from geoagent.crawl.export import image_owners

    out: dict[str, Any] = {"kept": 0, "skipped": {}, "rejected": {}, "usable": 0, "excluded": 0, "audited": 0,
                           "shared": 0}
    selections = campaign_selections(state_dir, images_root)
    owners = image_owners(state_dir, selections)
    for site, meta in selections.items():
        kept = [k for k in meta.get("kept") or [] if isinstance(k, dict)]
        used = sum(owners.get(str(k.get("image_id")), site) == site for k in kept)
        out["kept"] += used  # an image kept under several sites counts once, under the site that uses it
        out["shared"] += len(kept) - used
        for r in meta.get("rejected") or []:
            reason = str(r.get("reason", "")) if isinstance(r, dict) else ""
            kind = next(((name, before) for start, name, before in _REJECTION_KINDS if reason.startswith(start)),
                        ("other (unreadable image)", False))
            bucket = out["skipped"] if kind[1] else out["rejected"]
            bucket[kind[0]] = bucket.get(kind[0], 0) + 1
    path = Path(state_dir) / "images.csv"
    listed: set[str] = set()  # images.csv's image ids
    listed_paths: set[str] = set()  # and its paths (image_audit.csv names images by path)
    if path.is_file():
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                out["audited"] += 1
                out["usable" if row.get("usable") == "True" else "excluded"] += 1
                listed.add(str(row.get("image_id") or ""))
                listed_paths.add(str(row.get("path") or ""))
    # images whose stored audit answers could not be read, and no human verdict decided (not in images.csv)
    out["unreadable"] = 0
    for site, meta in selections.items():
        for k in meta.get("kept") or []:
            iid = str(k.get("image_id")) if isinstance(k, dict) else ""
            if not iid or iid in listed or owners.get(iid, site) != site:
                continue
            rec_path = Path(state_dir) / "image_audit" / site / f"{iid}.json"
            try:
                rec = orjson.loads(rec_path.read_bytes()) if rec_path.is_file() else None
            except (OSError, orjson.JSONDecodeError):
                rec = None
            if isinstance(rec, dict) and isinstance(rec.get("audit"), dict) and not rec["audit"].get("parsed"):
                out["unreadable"] += 1
    audits = Path(state_dir) / "image_audit.csv"
    if audits.is_file():
        with open(audits, newline="", encoding="utf-8") as f:
            out["human"] = sum(1 for r in csv.DictReader(f)
                               if (r.get("human_verdict") or "").strip() and str(r.get("image") or "") in listed_paths)
    return out


def sites_without_usable_images(state_dir: str | Path, images_root: str | Path) -> list[dict[str, Any]]:
    """The sites of ``sites.csv`` the crawl has finished with that hold no usable image (crawl40 #4: such a site has
    no row in ``verify_trials.csv`` and no request in a GeoHint plan, and nothing said so), in ``sites.csv`` order.

    A site counts once its selection record is there (:func:`geoagent.crawl.fetcher.campaign_selections`) and each
    image it uses (kept, and not used under a nearer site: :func:`geoagent.crawl.export.image_owners`) has its audit
    (a row of ``images.csv``, or a stored audit record whose answers could not be read); a site still being fetched
    or audited is not listed. Each entry: ``site``, ``city``; ``kept`` (images the site uses), ``excluded`` (of them,
    ``images.csv`` rows with ``usable`` False: the audit, or a human verdict, excluded them), ``no_verdict`` (kept
    images whose audit answers could not be read), ``used_elsewhere`` (kept images used under a nearer site),
    ``rejected`` (the fetcher's rejections and skips, category -> count, as :func:`image_counts`) and ``why`` (one
    phrase for the summary)."""
    import csv

    from geoagent.crawl.export import image_owners
    from geoagent.crawl.fetcher import campaign_selections

    folder = Path(state_dir)
    if not (folder / "sites.csv").is_file():
        return []
    with open(folder / "sites.csv", newline="", encoding="utf-8") as f:
        sites = [(r.get("site") or "", r.get("city") or "") for r in csv.DictReader(f)]
    usable: dict[str, int] = {}
    audited: dict[str, set[str]] = {}
    excluded: dict[str, int] = {}
    if (folder / "images.csv").is_file():
        with open(folder / "images.csv", newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                site = row.get("site") or ""
                audited.setdefault(site, set()).add(str(row.get("image_id") or ""))
                if row.get("usable") == "True":
                    usable[site] = usable.get(site, 0) + 1
                else:
                    excluded[site] = excluded.get(site, 0) + 1
    selections = campaign_selections(folder, images_root)
    owners = image_owners(folder, selections)
    out: list[dict[str, Any]] = []
    for site, city in sites:
        meta = selections.get(site)
        if meta is None or usable.get(site):
            continue  # not fetched yet, or it has a usable image
        kept = [str(k.get("image_id")) for k in meta.get("kept") or [] if isinstance(k, dict)]
        used = [i for i in kept if owners.get(i, site) == site]
        no_verdict = 0
        for iid in used:
            if iid in audited.get(site, set()):
                continue
            rec = _load_json(folder / "image_audit" / site / f"{iid}.json")
            if not (isinstance(rec, dict) and isinstance(rec.get("audit"), dict) and not rec["audit"].get("parsed")):
                break  # not audited yet: the site is still on its way
            no_verdict += 1
        else:
            rejected: dict[str, int] = {}
            for r in meta.get("rejected") or []:
                reason = str(r.get("reason", "")) if isinstance(r, dict) else ""
                kind = next((name for start, name, _ in _REJECTION_KINDS if reason.startswith(start)),
                            "other (unreadable image)")
                rejected[kind] = rejected.get(kind, 0) + 1
            n_excl = excluded.get(site, 0)
            if used:
                why = ", ".join(part for part in (
                    f"{n_excl} excluded by the image audit" if n_excl else "",
                    f"{no_verdict} without a verdict (unreadable audit answers)" if no_verdict else "") if part)
                why = f"{count_text(len(used), 'image')} kept: {why}"
            elif kept:
                why = f"its {count_text(len(kept), 'kept image')} {'is' if len(kept) == 1 else 'are'} used under a nearer site"
            else:
                fetcher = (meta.get("selection") or {}).get("fetcher") or {}
                since = fetcher.get("captured_after") if isinstance(fetcher, dict) else None
                dated = f" captured on or after captured_after {since}" if since else ""
                why = ("no image kept by the fetcher: "
                       + (", ".join(f"{n} {k}" for k, n in rejected.items()) if rejected else
                          f"none found within [crawl.fetcher] radius_m{dated}"))
            out.append({"site": site, "city": city, "kept": len(used), "excluded": n_excl, "no_verdict": no_verdict,
                        "used_elsewhere": len(kept) - len(used), "rejected": rejected, "why": why})
    return out


def _load_json(path: Path) -> Any:
    """The JSON in ``path``, or None (missing, unreadable)."""
    try:
        return orjson.loads(path.read_bytes()) if path.is_file() else None
    except (OSError, orjson.JSONDecodeError):
        return None


#: the most sites :func:`no_usable_image_lines` names one per line
NO_USABLE_IMAGE_LINES = 10


def no_usable_image_lines(state_dir: str | Path, images_root: str | Path) -> list[str]:
    """The summary's and ``run.py status``'s warning per site of ``sites.csv`` left without a usable image
    (:func:`sites_without_usable_images`): ``  warning: site X (City): usable images: 0 (why); GeoVerify and GeoHint
    plan nothing for it``, at most :data:`NO_USABLE_IMAGE_LINES` lines, then a count of the rest; ``[]`` when every
    finished site has one."""
    sites = sites_without_usable_images(state_dir, images_root)
    lines = [f"  warning: site {s['site']} ({s['city']}): usable images: 0 ({s['why']}); GeoVerify and GeoHint plan "
             "nothing for it (it stays in sites.csv; crawl_summary.json sites_without_usable_images)"
             for s in sites[:NO_USABLE_IMAGE_LINES]]
    if len(sites) > NO_USABLE_IMAGE_LINES:
        lines.append(f"  warning: and {len(sites) - NO_USABLE_IMAGE_LINES} more site(s) with usable images: 0 "
                     "(crawl_summary.json sites_without_usable_images lists them all)")
    return lines


def image_counts_line(c: dict[str, Any], downloaded: int | None = None) -> str:
    """The summary's image line from :func:`image_counts`: ``images kept: 32 of 45 examined (13 rejected
    after download: 10 too dark (brightness filter), 3 near-duplicates; 33 skipped before download: ...);
    thumbnails downloaded by this run: 0 (the other 45 read from disk: ...); audit: 26 usable, 6 excluded
    (images.csv column usable; ...)``, the parenthesis saying how many of them a human verdict decided (``human``).

    "Examined": thumbnails whose pixels the selection looked at (kept + rejected after download), whoever
    downloaded them (this run, an earlier run, or another crawl whose selection with the same settings this
    one reused). ``downloaded``: thumbnails this process downloaded (``CrawlServices.downloads_this_run``);
    None leaves that part out."""
    order = [name for _, name, _ in _REJECTION_KINDS]

    def parts(d: dict[str, int]) -> str:
        return ", ".join(f"{d[k]} {_SINGULAR.get(k, k) if d[k] == 1 else k}"
                         for k in sorted(d, key=lambda k: order.index(k) if k in order else len(order)))

    rejected, skipped = sum(c["rejected"].values()), sum(c["skipped"].values())
    examined = c['kept'] + rejected
    line = f"images kept: {c['kept']} of {examined} examined"
    why = []
    if rejected:
        why.append(f"{rejected} rejected after download: {parts(c['rejected'])}")
    if skipped:
        why.append(f"{skipped} skipped before download: {parts(c['skipped'])}")
    if why:
        line += " (" + "; ".join(why) + ")"
    if downloaded is not None:
        line += f"; thumbnails downloaded by this run: {downloaded}"
        if downloaded < examined:
            line += (f" (the other {examined - downloaded} read from disk: thumbnails, or the records of rejected ones, "
                     "fetched by an earlier run, or by another crawl whose selection with the same [crawl.fetcher] "
                     "settings was reused)")
    line += f"; audit: {c['usable']} usable, {c['excluded']} excluded (images.csv column usable"
    n_human, n_audited = c.get("human"), c["audited"]
    if n_human is None or not n_audited:
        line += ")"
    elif n_human == 0:  # seed 000 Sec. 3.2: "exclusion runs off the human verdict"
        line += ("; decided by the model audit alone: no human verdicts ([crawl.image_audit] human_verdicts), on "
                 "which seed 000 Sec. 3.2 excludes images)")
    elif n_human >= n_audited:
        line += f"; all {n_audited} by a human verdict)"
    else:
        line += f"; {n_human} by a human verdict, {n_audited - n_human} by the model audit alone)"
    unread = int(c.get("unreadable") or 0)
    if unread:
        line += (f", {unread} without a model verdict (the auditor's answers could not be read: asked up to "
                 f"{IMAGE_AUDIT_MAX_ANSWERS} times, once for an image audited before session 38; a human verdict in "
                 "[crawl.image_audit] human_verdicts decides them: image_audit/<site>/<image>.json keeps every answer)")
    if c["audited"] + unread != c["kept"]:
        line += f", {c['kept'] - c['audited'] - unread} not audited yet"
    if c.get("shared"):
        line += (f"; {c['shared']} more {'copy' if c['shared'] == 1 else 'copies'} of kept images under a farther site "
                 "too, used (and audited) under the nearest site only")
    return line


#: the crawl's summary, in ``state/<campaign>/report/``
SUMMARY_FILE = "crawl_summary.json"
#: where a ``verify_trials.csv`` built from an earlier state of the crawl is moved when a hand-off cannot
#: write a new one (the crawl is not complete); campaigns read only ``verify_trials.csv``
STALE_TRIALS_FILE = "verify_trials.stale.csv"


def _dead_of(counts: Any) -> Iterable[tuple[str, int]]:
    """``(edge, dead-lettered tasks)`` for each edge of ``counts`` (edge -> QueueCounts) that has some."""
    return [(e, int(c.dead)) for e, c in (counts or {}).items() if getattr(c, "dead", 0)]


def _handoff_trials(cfg: Any, svc: Any, status: str, dead: dict[str, int]) -> dict[str, Any]:
    """The trial table of a hand-off (the end of a run with ``status``, or an idle drain under ``--watch``).

    ``complete``: write ``verify_trials.csv`` (:func:`_write_trials`) and remove a ``verify_trials.stale.csv``
    left by an earlier hand-off. ``incomplete`` (tasks dead-lettered, ``dead``: edge -> count, or work left
    queued): write none, as a run that ends incomplete never did, and move a ``verify_trials.csv`` already in
    the folder (built from an earlier state of the crawl: it misses what was crawled since and would be read
    by a campaign as if current) to :data:`STALE_TRIALS_FILE`, atomically (:func:`os.replace`). Any other
    status (interrupted, budget exhausted, a refused token) leaves the file as it is: a re-run resumes.

    First the image tables are rebuilt under the current human verdicts (:func:`_apply_human_verdicts`); when the
    verdict file cannot be read now (moved or edited into a bad one since the run started) nothing is written
    and an earlier ``verify_trials.csv`` is left as it is (the reason says why).

    Returns ``{"written": bool, "note": summary line, "reason": why not written or None, "stale": the stale
    file's name when one was moved aside or is there, else None}`` (and, when written, ``"warning"``: the
    note's warning about the trials, e.g. no swapped-image control, or None)."""
    import os

    folder = Path(svc.state_dir)
    current, stale = folder / "verify_trials.csv", folder / STALE_TRIALS_FILE
    try:
        _apply_human_verdicts(svc)
    except (FileNotFoundError, ValueError) as exc:  # the file was checked at the start: moved or edited since
        reason = f"the human verdicts could not be applied: {exc}"
        return {"written": False, "note": f"verify_trials.csv not written: {reason}", "reason": reason,
                "stale": STALE_TRIALS_FILE if stale.is_file() else None}
    if status == "complete":
        _warn_unmatched_verdicts(svc)
        note = _write_trials(cfg, svc)
        written = current.is_file() and not note.startswith("no GeoVerify trials written")
        if written and stale.is_file():
            stale.unlink()
        return {"written": written, "note": note, "reason": None if written else note, "stale": None,
                "warning": note.partition("; warning: ")[2] or None}
    if status != "incomplete":
        return {"written": False, "note": None, "stale": None,
                "reason": f"the run ended {status}; verify_trials.csv left as it was (re-run to resume)"}
    n_dead = sum(dead.values())
    reason = (f"{n_dead} task(s) dead-lettered ({mapping_text(dead)}; see `run.py dead`), as a crawl that ends "
              "incomplete writes no trials" if n_dead else
              "the crawl is incomplete (work left queued; see `run.py status`), so no trials were built")
    moved = False
    if current.is_file():
        os.replace(current, stale)
        moved = True
    note = f"verify_trials.csv not written: {reason}"
    if moved:
        note += f"; the earlier one moved to {STALE_TRIALS_FILE} (built from an earlier state of the crawl)"
    return {"written": False, "note": note, "reason": reason, "stale": STALE_TRIALS_FILE if stale.is_file() else None}


def _images_root(cfg: Any) -> Path:
    """The crawl's images folder, as :func:`geoagent.crawl.stages.services_from_context` sets it:
    ``<state root>/images``."""
    from geoagent import paths

    state_root = cfg.state_root() if hasattr(cfg, "state_root") else paths.state_root()
    return Path(state_root) / C.IMAGES_DIR


def _apply_human_verdicts(svc: Any) -> None:
    """Rebuild ``image_audit.csv``, ``images.csv`` and the agreement files from the stored model audits and the
    current ``[crawl.image_audit] human_verdicts`` (:func:`geoagent.crawl.stages.rewrite_image_audit_csv`; no
    request), so a hand-off's trials, summary counts and export use the verdicts of this run's config also
    when every image was audited by an earlier run (verdicts added to a finished crawl). Nothing before the
    first image audit (no ``image_audit/`` folder)."""
    if (Path(svc.state_dir) / "image_audit").is_dir():
        from geoagent.crawl.stages import rewrite_image_audit_csv

        rewrite_image_audit_csv(svc)


def _refresh_review_resolution(svc: Any) -> None:
    """Bring ``audit_review_resolved.csv`` up to date with the review queue and the sites rated during the run
    (:func:`geoagent.crawl.stages.refresh_review_resolution`; no request). Nothing before the first rated site
    (no ``rated/`` folder). A decision file that became unreadable since the run's start (which read it) is
    said in a warning (:class:`geoagent.config.InputWarning`): the table keeps what the start of the run wrote, and the end of the run goes on."""
    if (Path(svc.state_dir) / "rated").is_dir():
        from geoagent.crawl.stages import refresh_review_resolution

        try:
            refresh_review_resolution(svc.settings, svc.state_dir)
        except (OSError, ValueError) as exc:
            import warnings

            from geoagent.config import InputWarning

            warnings.warn(f"the review resolution table (audit_review_resolved.csv) was not brought up to date: {exc}",
                          InputWarning, stacklevel=2)


def _warn_unmatched_verdicts(svc: Any) -> None:
    """Warn once (:class:`geoagent.config.InputWarning`: a ``warning:`` line on the CLI's console) naming the human verdicts (``[crawl.image_audit] human_verdicts``) whose image the crawl
    did not audit (:func:`geoagent.crawl.image_audit.unmatched_human_verdicts` over ``image_audit/<site>/<id>.json``):
    they decide nothing, and a typo in an image id must not pass unseen (a review decision naming no rated
    candidate is named the same way, :func:`geoagent.crawl.review.apply_review_decisions`). Called by a hand-off
    of a complete crawl only: before, the images of sites not audited yet would be named too."""
    import warnings

    from geoagent.config import InputWarning
    from geoagent.crawl.image_audit import HUMAN_VERDICTS_KEY, misplaced_human_verdicts, unmatched_human_verdicts

    root = Path(svc.state_dir) / "image_audit"
    site_of = {p.stem: p.parent.name for p in root.glob("*/*.json")} if root.is_dir() else {}
    unmatched = unmatched_human_verdicts(svc.settings.image_audit.human_verdicts, site_of)
    misplaced = misplaced_human_verdicts(svc.settings.image_audit.human_verdicts, site_of)
    if misplaced:
        n = len(misplaced)
        more = f"; and {n - 10} more" if n > 10 else ""
        warnings.warn(f"{n} human verdict{'' if n == 1 else 's'} of {HUMAN_VERDICTS_KEY} name{'s' if n == 1 else ''} a "
                      "folder other than the site of {} image (applied by the image id all the same; check that the "
                      "row is meant for that image): {}{}".format("its" if n == 1 else "their",
                                                                  "; ".join(misplaced[:10]), more),
                      InputWarning, stacklevel=2)
    if unmatched:
        n = len(unmatched)
        more = f"; and {n - 10} more" if n > 10 else ""
        warnings.warn(f"{n} human verdict{'' if n == 1 else 's'} of {HUMAN_VERDICTS_KEY} name{'s' if n == 1 else ''} no "
                      "image this crawl audited (a typo in the image id, an image of another crawl, or one rejected "
                      f"before the audit), so {'it decides' if n == 1 else 'they decide'} nothing: "
                      f"{'; '.join(unmatched[:10])}{more}", InputWarning, stacklevel=2)


def _write_summary(cfg: Any, svc: Any, status: str, trials: dict[str, Any], *, watching: bool,
                   api: dict[str, Any] | None = None) -> Path:
    """Write ``report/crawl_summary.json`` atomically: ``status`` (as the run would end now), ``watching`` (True
    when written at an idle hand-off of a ``--watch`` run that goes on, False at the end of a run),
    ``written_at`` (Unix time, s), ``verify_trials`` (``written``, ``reason`` when not, ``stale``: see
    :func:`_handoff_trials`; ``warning``: what the written trials lack, e.g. no swapped-image control),
    ``api`` (per-API request and error counts: the given ``api``, taken on the event loop's thread by an idle
    hand-off, else ``svc.api_stats()`` now), ``files`` (the CSV files of the crawl's folder, relative to it),
    ``images_root`` and ``sampler_versions`` (``current``: :data:`geoagent.crawl.sampler.SAMPLER_VERSION`;
    ``cities_by_version``: :func:`geoagent.crawl.sampler.recorded_versions`, so a crawl resumed across a change of
    the sampling rules is seen as such), ``review`` (the referenceability review queue's items: ``queued``,
    ``pending``, ``resolved``: :func:`geoagent.crawl.review.review_counts`), ``site_shortfall`` (the cities that
    got fewer sites than ``sites_per_city``, with the walk's skip counts and the site types without a candidate:
    :func:`geoagent.crawl.sampler.site_shortfalls`; ``[]`` when none), ``requests`` (the crawl APIs' requests of
    this run and of every run of the crawl: :func:`request_counts`; ``api`` has this run's only), ``counts`` (the
    crawl's cities, sites and images: :func:`crawl_counts`) and ``sites_without_usable_images`` (the sites of
    ``sites.csv`` no campaign can use: :func:`sites_without_usable_images`; ``[]`` when none). Returns its path."""
    import time

    from geoagent.crawl.review import review_counts
    from geoagent.crawl.sampler import SAMPLER_VERSION, recorded_versions, site_shortfalls
    from geoagent.files import atomic_write_bytes

    out = Path(cfg.state_dir()) / C.REPORT_DIR / SUMMARY_FILE
    files = sorted(str(p.relative_to(svc.state_dir)) for p in svc.state_dir.glob("**/*.csv"))
    vt = {"written": bool(trials.get("written")), "reason": trials.get("reason"), "stale": trials.get("stale"),
          "warning": trials.get("warning")}
    return atomic_write_bytes(out, orjson.dumps(
        {"status": status, "watching": watching, "written_at": round(time.time(), 3), "verify_trials": vt,
         "api": svc.api_stats() if api is None else api, "files": files, "images_root": str(svc.images_root),
         "sampler_versions": {"current": SAMPLER_VERSION,
                              "cities_by_version": recorded_versions(svc.state_dir / "sampling")},
         "review": review_counts(svc.state_dir),
         "site_shortfall": site_shortfalls(svc.state_dir / "sampling", svc.settings.sampler),
         "requests": request_counts(svc, api), "counts": crawl_counts(svc.state_dir, svc.images_root),
         "sites_without_usable_images": sites_without_usable_images(svc.state_dir, svc.images_root)},
        option=orjson.OPT_INDENT_2))


def _write_trials(cfg: Any, svc: Any) -> str:
    """Write ``verify_trials.csv`` into the crawl's state folder (:func:`geoagent.integrate.write_verify_trials`
    with the demo's arguments: seed of ``[campaign]``, 2 trials per band, 2 per control arm; the images usable
    under the crawl's ``[crawl.image_audit] human_verdicts``, as in ``images.csv``), so a GeoVerify or
    GeoHint campaign with ``release_dir`` = this folder and ``image_root`` = the images folder runs on it.
    Returns the summary line (also when the crawl gave nothing to build trials from)."""
    from geoagent.integrate import write_verify_trials

    before = _trial_requests(Path(svc.state_dir) / "verify_trials.csv")
    try:
        path, build = write_verify_trials(svc.state_dir, svc.images_root, seed=int(cfg.campaign.seed or 0),
                                          n_per_band=2, n_control=2,
                                          human_verdicts=svc.settings.image_audit.human_verdicts,
                                          review_verdicts=svc.settings.referenceability.review_verdicts)
    except (FileNotFoundError, ValueError) as exc:
        return f"no GeoVerify trials written: {exc}"
    redrawn = (f"; swapped-image controls (ctrl_mismatch) redrawn {build.mismatch_redrawn}, dropped {build.mismatch_dropped} "
               "(each trial is its own model request)" if build.mismatch_redrawn or build.mismatch_dropped else "")
    redrawn += _trials_changed_text(before, _trial_requests(Path(path)))
    warning = "; ".join(w for w in (_no_mismatch_warning(svc.state_dir, build), _shared_sites_warning(svc.state_dir, svc.images_root)) if w)
    return (f"GeoVerify trials: {path} (main arm per band {mapping_text(build.per_band())}{redrawn}); use it with release_dir = "
            f"\"{svc.state_dir}\", image_root = \"{svc.images_root}\"" + (f"; warning: {warning}" if warning else ""))


def _trial_requests(path: Path) -> set[tuple[str, ...]] | None:
    """The model requests of a ``verify_trials.csv``: one ``(image_id, arm, cand, image_ref)`` per row (what a GeoVerify
    campaign over it asks: the image, and the claim; the swapped image too), or None when there is no readable file."""
    import csv

    try:
        with open(path, newline="", encoding="utf-8") as f:
            return {(r.get("image_id") or "", r.get("arm") or "", r.get("cand") or "", r.get("image_ref") or "")
                    for r in csv.DictReader(f)}
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def _trials_changed_text(before: set[tuple[str, ...]] | None, after: set[tuple[str, ...]] | None) -> str:
    """``"; 175 of 414 trials differ from the previous verify_trials.csv (...)"`` when the rewritten table asks other
    requests than the one it replaced, else "" (no earlier table, or the same requests).

    fixverify41 #3: a few review decisions can redraw many trials (the decoys are tier-matched to each image's
    signal candidates, so re-rating one signal candidate redraws every decoy band of every image of its site: 6
    decisions moved 175 of 414 trials, 350 new paid calls of a two-model campaign), with no line saying so."""
    if before is None or after is None or before == after:
        return ""
    new, gone = len(after - before), len(before - after)
    return (f"; {new} of {len(after)} trials differ from the previous verify_trials.csv ({gone} of its trials no longer "
            "drawn): a GeoVerify campaign over this folder asks the new ones anew, one paid call per model each")


def _no_mismatch_warning(state_dir: Path, build: Any) -> str | None:
    """Why the trials just built hold no swapped-image control (``ctrl_mismatch``) although control arms were
    drawn (``build``: :class:`geoagent.geoverify.trials.BuildReport`), or None when they hold some: the sites'
    continents (``sites.csv``) are one or none (:func:`geoagent.geoverify.trials.one_continent_note`), else no
    usable image of another continent was left to show."""
    import csv

    from geoagent.data.model import ARM_MISMATCH
    from geoagent.geoverify.trials import one_continent_note

    if any(arm == ARM_MISMATCH and n for (arm, _b), n in build.counts.items()) or not build.images_without_mismatch:
        return None
    with open(Path(state_dir) / "sites.csv", newline="", encoding="utf-8") as f:
        note = one_continent_note(r.get("continent") for r in csv.DictReader(f))
    return note or ("no swapped-image control trials (ctrl_mismatch) were built: no usable image of another "
                    "continent than each claim's site was left to show; a GeoVerify campaign over these trials "
                    "reads out 'swapped-image control not run'")


def _shared_sites_warning(state_dir: str | Path, images_root: str | Path | None = None, *,
                          limit: int = 5) -> str | None:
    """Landmarks that are a site of more than one city, and images the fetcher kept under more than one site, or
    None when there are none. Since sampler version 5 (:data:`geoagent.crawl.sampler.SAMPLER_VERSION`) the sampler
    skips a landmark already a site of another city, so a shared landmark comes from cities sampled before that
    (their stored sites are kept on resume: resampling would change them silently); an image is used under one site
    only, the nearest (:func:`geoagent.crawl.export.image_owners`: ``images.csv`` and ``verify_trials.csv`` hold it
    once), and the site left without it loses those images. Said where the trials are announced (summary,
    ``run.py status``, ``report/crawl_summary.json`` ``verify_trials.warning``). Read from ``sites.csv`` (``qid``,
    ``landmark``, ``site``, ``city``) and the campaign's selection records
    (:func:`geoagent.crawl.fetcher.campaign_selections`; ``images_root`` None: ``<state_dir>/../images``, the default
    images root); at most ``limit`` landmarks are named."""
    import csv

    from geoagent.crawl.fetcher import campaign_selections

    folder = Path(state_dir)
    sites_by_qid: dict[str, list[tuple[str, str]]] = {}
    landmark: dict[str, str] = {}
    if (folder / "sites.csv").is_file():
        with open(folder / "sites.csv", newline="", encoding="utf-8") as f:
            for r in csv.DictReader(f):
                sites_by_qid.setdefault(r.get("qid") or "", []).append((r.get("site") or "", r.get("city") or ""))
                landmark.setdefault(r.get("qid") or "", r.get("landmark") or "")
    shared = {q: v for q, v in sorted(sites_by_qid.items()) if q and len({c for _s, c in v}) > 1}
    sites_by_image: dict[str, set[str]] = {}
    root = Path(images_root) if images_root is not None else folder.parent / "images"
    for site, meta in campaign_selections(folder, root).items():
        for k in meta.get("kept") or []:
            if isinstance(k, dict):
                sites_by_image.setdefault(str(k.get("image_id")), set()).add(site)
    n_images = sum(len(v) > 1 for v in sites_by_image.values())
    if not shared and not n_images:
        return None
    parts = []
    if shared:
        named = "; ".join(f"{landmark.get(q) or q} ({q}): " + ", ".join(f"{s} ({c})" for s, c in v) for q, v in list(shared.items())[:limit])
        more = f"; and {len(shared) - limit} more" if len(shared) > limit else ""
        from geoagent.crawl.sampler import recorded_versions

        versions = {c: v for v, cs in recorded_versions(folder / "sampling").items() for c in cs}
        cities = {c for q in shared for _s, c in shared[q]}
        old = sorted(c for c in cities if not versions.get(c, "").isdigit() or int(versions[c]) < 5)
        why = (f"sampled before sampler version 5 skipped a landmark already a site of another city ({', '.join(old)})"
               if old else "sampled at once by two processes of the crawl (--stages: each samples one city at a "
               "time, not across processes)")
        parts.append(f"{count_text(len(shared), 'landmark')} {'is' if len(shared) == 1 else 'are'} a site of more "
                     f"than one city ({named}{more}), {why}; the stored sites are kept (resampling would change "
                     "them): crawl again under a new [campaign] name for one site per landmark")
    if n_images:
        parts.append(f"{count_text(n_images, 'image')} {'was' if n_images == 1 else 'were'} kept under more than one "
                     "site (sites whose image discs overlap): each is used under the site nearest to it only "
                     "(images.csv, verify_trials.csv)")
    return "; ".join(parts)


#: per-city candidate count the dry run prices the referenceability audit at, as an example (the real count is
#: known only once the Wikidata queries ran), unless the Wikidata endpoint is the offline fake
#: (:func:`outline_candidates`)
OUTLINE_CANDIDATES = 1000


def cities_without_images(settings: CrawlSettings) -> list[str]:
    """The ``[[crawl.cities]]`` (names, config order) where the crawl can audit no image because ``[crawl.endpoints]
    mapillary`` is the offline fake (``*.sandbox.invalid``, or its local URL while served:
    :func:`geoagent.sandbox.launch.served_fake_name`) and the city lies outside the world it serves
    (:func:`geoagent.sandbox.city.cities_outside_world`: no image there, so the screener does not admit it and no
    site of it is sampled). [] against a real endpoint, where what the crawl finds is known only once it ran
    (walk24 #5: the dry run's outline counted image audits for such a city while warning that it is outside the
    world). Raises nothing."""
    from geoagent.sandbox.launch import served_fake_name

    if not settings.cities or served_fake_name(str(settings.endpoints.mapillary or "")) != "mapillary":
        return []
    from geoagent.demo import demo_world
    from geoagent.sandbox.city import cities_outside_world

    return cities_outside_world([(c.city, c.lat, c.lon) for c in settings.cities], demo_world())


def outline_candidates(settings: CrawlSettings) -> tuple[list[int], str | None]:
    """How many referenceability candidates the dry run prices for each configured city (config order), and
    where the count comes from (None: :data:`OUTLINE_CANDIDATES`, an example).

    Against a real Wikidata endpoint the count is known only once the crawl's queries ran, so every city is
    priced at :data:`OUTLINE_CANDIDATES` (1,000). When ``[crawl.endpoints] wdqs`` is the offline fake
    (``*.sandbox.invalid``, or its local URL while served: :func:`geoagent.sandbox.launch.served_fake_name`), what
    it can return is known: the fake
    serves :func:`geoagent.demo.demo_world` (fixed seed, whatever the config's), and a city's candidates are
    items within ``[crawl.referenceability] radius_km`` of a site, its sites within ``[crawl.sampler] radius_km``
    of the city's coordinates, so the count of the world's distinct items within the sum of both radii (km,
    haversine) of the city is an upper bound (the sandbox world: 309 for Sandbox City and Mirror Bay, 0 for
    Sprawl Town at the default radii 3 + 6 km). Returns ``(counts, basis)``; ``basis`` is a phrase for the
    outline. Raises nothing (a ``*.sandbox.invalid`` host naming no fake is priced as a real endpoint)."""
    n = len(settings.cities)
    from geoagent.sandbox.launch import served_fake_name

    # as written, or rewritten to the fake's local URL once geoagent.sandbox.launch serves it
    if served_fake_name(settings.endpoints.wdqs) != "wdqs":
        return [OUTLINE_CANDIDATES] * n, None
    from geoagent.demo import demo_world
    from geoagent.geo import haversine_km

    reach = settings.sampler.radius_km + settings.referenceability.radius_km
    items = {e.qid: (e.lat, e.lon) for e in demo_world().entities}
    counts = [sum(1 for lat, lon in items.values() if haversine_km(c.lat, c.lon, lat, lon) <= reach)
              for c in settings.cities]
    return counts, (f"the offline fake's Wikidata items within {reach:g} km of each city: sampler radius_km "
                    f"{settings.sampler.radius_km:g} + referenceability radius_km {settings.referenceability.radius_km:g}")


#: the character the outline's candidate labels are made of: 4 UTF-8 bytes, the most the reservation rule counts
#: for one character (:func:`geoagent.config.estimate_input_tokens`), so no label of the same length costs more
#: (a Chinese city's labels: 3 bytes a character; Latin with diacritics: up to 2)
OUTLINE_LABEL_CHAR = "\U0001F5FA"
#: the tallest thumbnail the outline prices, as a multiple of its width (a portrait photo: 3:4, 9:16, up to 1:2)
OUTLINE_MAX_PORTRAIT = 2.0


def _worst_thumbnail_px(m: Any, width_px: int, params: dict[str, Any]) -> tuple[int, int]:
    """The (width, height) in px, width ``width_px`` (Mapillary sizes thumbnails by width) and height from a quarter
    of it to :data:`OUTLINE_MAX_PORTRAIT` times it, whose image the ledger reserves the most input tokens for
    (:func:`geoagent.config.reserved_image_tokens` by ``m``'s provider and model id; the square when no documented
    rule applies: the model's ``image_input_tokens`` then, whatever the size)."""
    from geoagent.config import reserved_image_tokens

    best, best_px = -1, (width_px, width_px)
    for h in range(max(1, width_px // 4), int(width_px * OUTLINE_MAX_PORTRAIT) + 1):
        billed = reserved_image_tokens(m.provider, getattr(m, "openai_rules_id", m.model), (width_px, h), params)
        if billed is None:
            return width_px, width_px
        if billed[0] > best:
            best, best_px = billed[0], (width_px, h)
    return best_px


def crawl_budget_figures(cfg: Any, settings: CrawlSettings) -> dict[str, Any]:
    """The worst cases behind :func:`crawl_budget_outline` (USD per call; None for a model without prices).

    Returns ``{"image_audit_usd", "rating_usd", "screen_usd", "max_image_audits", "batch_size", "image_bounded",
    "barren_cities"}`` (``barren_cities``: :func:`cities_without_images`, left out of ``max_image_audits``)
    (``image_bounded`` False for a ``thumb_field`` without a width, ``thumb_original_url``: then the image audit's
    figure is for a 2048-px-wide photo and not an upper bound):
    one image audit's reservation (the image as the costliest thumbnail of the fetcher's size,
    :func:`_worst_thumbnail_px`: Mapillary's ``thumb_1024_url`` is 1024 px wide, and a portrait photo's is taller
    than wide, which Claude, Gemini and OpenAI's patch-billed models bill more than a square), one rating call's
    and one sensitivity-screen call's reservation for a full batch of candidates (each label and each English
    Wikipedia title at 200 characters, the most a prompt line keeps of either, of 4 UTF-8 bytes each:
    :data:`OUTLINE_LABEL_CHAR`), and the most image audits
    the config allows (cities x ``sites_per_city`` x ``max_images_per_site``, the cities where the offline Mapillary
    fake has no image left out). Priced by the rule the ledger reserves with
    (:func:`geoagent.config.reservation_usd`, ``[budget] input_estimate_factor`` included).
    """
    import re

    from geoagent.config import reservation_usd
    from geoagent.crawl.image_audit import load_prompt
    from geoagent.crawl.referenceability import RefCandidate, render_candidates

    models = {m.name: m for m in getattr(cfg, "models", [])}
    factor = float(cfg.budget.input_estimate_factor)

    def priced(name: str) -> Any:
        m = models.get(name)
        return m if m is not None and m.paid and (m.price_input_usd_per_mtok > 0 or m.price_output_usd_per_mtok > 0) else None

    ia, rs = settings.image_audit, settings.referenceability
    barren = cities_without_images(settings)
    out: dict[str, Any] = {
        "image_audit_usd": None, "rating_usd": None, "screen_usd": None, "batch_size": rs.batch_size,
        "barren_cities": barren,
        "max_image_audits": ((len(settings.cities) - len(barren)) * settings.sampler.sites_per_city
                             * settings.fetcher.max_images_per_site),
        # a thumb_field without a width (thumb_original_url): originals have no fixed size, so the image audit's
        # figure is for a 2048-px-wide photo and bounds nothing (a larger original costs more under tiled billing)
        "image_bounded": re.search(r"(\d+)", settings.fetcher.thumb_field) is not None,
    }
    if (m_img := priced(ia.model)) is not None:
        side = int(d.group(1)) if (d := re.search(r"(\d+)", settings.fetcher.thumb_field)) else 2048
        params = {"max_output_tokens": ia.max_output_tokens, "temperature": ia.temperature, "json_mode": True}
        out["image_audit_usd"] = reservation_usd(m_img, load_prompt("crawl_image_audit.txt"), params, ia.max_output_tokens,
                                                 input_estimate_factor=factor, has_image=True,
                                                 size_px=_worst_thumbnail_px(m_img, side, params))
    if (m_ref := priced(rs.model)) is not None:
        # the costliest label a prompt line keeps: 200 characters (render_candidates) of 4 UTF-8 bytes each, the
        # most the reservation rule counts per character (estimate_input_tokens: a non-ASCII character's bytes)
        # (and as long an English Wikipedia title, which the line shows too: REF_CANDIDATE_LINES 2)
        batch = [RefCandidate(qid=f"Q{i}", label=OUTLINE_LABEL_CHAR * 200, dist_km=rs.radius_km, lat=0.0, lon=0.0,
                              enwiki_title=OUTLINE_LABEL_CHAR * 200)
                 for i in range(rs.batch_size)]
        params = {"max_output_tokens": rs.max_output_tokens, "temperature": rs.temperature}
        for key, name, dist in (("rating_usd", "crawl_referenceability.txt", True), ("screen_usd", "crawl_sensitive.txt", False)):
            prompt = load_prompt(name).replace("{candidates}", render_candidates(batch, with_distance=dist))
            out[key] = reservation_usd(m_ref, prompt, params, rs.max_output_tokens, input_estimate_factor=factor)
    return out


def crawl_budget_outline(cfg: Any, settings: CrawlSettings) -> list[str]:
    """What the crawl's model calls may cost, for the dry run (``run.py crawl CONFIG --simulate``).

    How many calls a crawl makes depends on what it finds (cities admitted, sites sampled, images kept,
    candidates near the sites), so the outline gives each auditor's worst case per call
    (:func:`crawl_budget_figures`) and the bounds the config sets: one image audit per kept image (seed 000
    Sec. 3.2, App. A.4), at most cities x ``sites_per_city`` x ``max_images_per_site``; two referenceability
    calls (the 0-5 rating and the sensitivity screen, Sec. 3.3) per batch of ``batch_size`` candidates of a
    city, shown for :data:`OUTLINE_CANDIDATES` candidates in a city (re-asks of an unparseable batch, split in
    halves, come on top); then the total of those worst cases against ``[budget] cap_usd``
    (:func:`_outline_total`). Returns lines indented for the dry-run report; a model without prices reads "free".
    """
    import math

    f = crawl_budget_figures(cfg, settings)
    ia, rs = settings.image_audit, settings.referenceability
    n_img, n_cities = f["max_image_audits"], len(settings.cities)
    lines = ["  crawl budget outline (each call's worst case, as the ledger reserves it; how many calls there are "
             "depends on what the crawl finds):"]
    def count(n: int, one: str, many: str) -> str:
        return f"{n} {one if n == 1 else many}"

    barren = f["barren_cities"]
    left_out = (f"; {', '.join(repr(n) for n in barren)} left out: the offline Mapillary fake has "
                "no image there" if barren else "")
    bound = (f"at most {n_img:,} calls ({count(n_cities - len(barren), 'city', 'cities')} x "
             f"{count(settings.sampler.sites_per_city, 'site', 'sites')} x "
             f"{count(settings.fetcher.max_images_per_site, 'image', 'images')} per site{left_out})")
    if f["image_audit_usd"] is not None:
        each = f["image_audit_usd"]
        if f["image_bounded"]:
            lines.append(f"    image audit (model {ia.model!r}): {bound}, up to ${each:.4f} each: at most ${each * n_img:.2f}")
        else:
            lines.append(f"    image audit (model {ia.model!r}): {bound}; {settings.fetcher.thumb_field} sends originals, "
                         f"which have no fixed size: ${each:.4f} for a 2048-px-wide photo (${each * n_img:.2f} for "
                         "all), more for larger ones (no per-call bound; the cap still holds)")
    else:
        lines.append(f"    image audit (model {ia.model!r}): {bound}, free (no prices)")
    how = f"2 calls (rating, sensitivity screen) per {rs.batch_size} candidates within {rs.radius_km:g} km of a city's sites"
    if f["rating_usd"] is not None:
        per_batch = f["rating_usd"] + f["screen_usd"]
        counts, basis = outline_candidates(settings)
        most = max(counts, default=0) if basis else OUTLINE_CANDIDATES
        n_batches = math.ceil(most / rs.batch_size)
        which = f"{most:,} candidates in a city" if not basis else f"at most {most:,} candidates in a city ({basis})"
        lines.append(f"    referenceability (model {rs.model!r}): {how}, up to ${per_batch:.4f} per {rs.batch_size}; "
                     f"{which}: {2 * n_batches} calls, up to ${per_batch * n_batches:.2f}, "
                     "plus re-asks: an answer that does not cover every candidate is asked again in halves")
    else:
        lines.append(f"    referenceability (model {rs.model!r}): {how}, free (no prices)")
    lines.extend(_outline_total(cfg, settings, f))
    lines.append(f"    the [budget] cap (${cfg.budget.cap_usd:,.2f}) holds: no call starts that could pass it")
    return lines


def _outline_total(cfg: Any, settings: CrawlSettings, f: dict[str, Any]) -> list[str]:
    """The outline's total against the cap (:func:`crawl_budget_outline`), as the evaluation campaigns' dry run
    gives it (:func:`geoagent.engine.estimate_lines`: ``worst $W, cap $C (within cap)`` and ``!!! OVER CAP``).

    Worst case, USD: every image audit the config allows (``max_image_audits``) at its worst case, plus the
    referenceability calls for each configured city's candidates (:func:`outline_candidates`: the offline fake's
    own count when ``wdqs`` is the fake, else :data:`OUTLINE_CANDIDATES`) (2 calls per batch of ``batch_size``,
    each batch at its worst case); a model without prices counts $0. Against a real endpoint the candidate count
    is illustrative (the real one depends on what the crawl finds); re-asks of unparseable batches are not in it.
    Over the cap, the second line says how many candidates per city the cap pays for at the worst case once every
    image audit is paid (whole batches). The cap itself never depends on this figure: the ledger stops the crawl
    before any call that could pass it (exit 4). Returns one or two lines, indented as the outline's."""
    import math

    cap = float(cfg.budget.cap_usd)
    n_cities = len(settings.cities)
    img = (f["image_audit_usd"] or 0.0) * f["max_image_audits"]
    per_batch = (f["rating_usd"] or 0.0) + (f["screen_usd"] or 0.0)
    counts, basis = outline_candidates(settings)
    ref = per_batch * sum(math.ceil(c / f["batch_size"]) for c in counts)
    worst = img + ref
    within = worst <= cap + 1e-12
    bound = "" if f["image_bounded"] else " (image audits of originals at a 2048-px photo: not an upper bound)"
    if basis is None:
        cands = (f"{OUTLINE_CANDIDATES:,} candidates in each of {count_text(n_cities, 'city', 'cities')}; the real "
                 "count depends on what the crawl finds")
    else:
        cands = f"{', '.join(f'{c:,}' for c in counts)} candidates in the {count_text(n_cities, 'city', 'cities')}: {basis}"
    lines = [f"    total (worst case): ${worst:.4f} = image audits ${img:.4f} + referenceability ${ref:.4f} "
             f"({cands}){bound}; cap ${cap:,.2f} ({'within' if within else 'OVER'} cap)"]
    if not within:
        if per_batch > 0 and n_cities and cap > img:
            # + 1e-9: a quotient that is whole in decimal must not floor to one less
            fit = int((cap - img) / n_cities / per_batch + 1e-9) * f["batch_size"]
            pays = (f"after every image audit at its worst case, the cap pays for about {fit:,} candidates per city "
                    "at theirs")
        else:
            pays = "the cap does not pay for every image audit at its worst case"
        lines.append(f"    !!! OVER CAP: the worst case ${worst:.4f} exceeds [budget] cap_usd ${cap:,.2f}: a crawl that "
                     f"finds that much stops at the cap (exit 4) before it finishes; {pays}. Raise cap_usd, or plan "
                     "fewer cities, sites_per_city or max_images_per_site")
    return lines
