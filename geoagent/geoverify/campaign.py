"""The GeoVerify campaign kind for :mod:`geoagent.engine` (``[campaign] kind = "geoverify"``).

Stages: model caller -> parser -> scorer -> aggregator (live report). Plan: :func:`plan_campaign`.
The final report is rebuilt from the results table ``geoverify_scored`` (so it is complete also when the
aggregator ran in another process) with the configured bootstrap over sites (``n_boot``, default 1000,
seeded by ``boot_seed``; both are printed under the table). The live refresh uses ``live_n_boot``
(default: the same ``n_boot``; about 0.1 s per refresh at 1000 replicates).

The engine looks kinds up as ``geoagent.campaigns.geoverify:GeoVerifyCampaign``; that module re-exports
this class.

The console summary (:meth:`GeoVerifyCampaign.summary_lines`) gives one line per model, each count labelled
with what it counts: ``main arm n`` (parsed main-arm answers: the signal and decoy trials behind H, F, d' and
delta_1), H and F each with the trials behind it ``(k/n)``, d' against the nearest decoy band, delta_1 with
its site-bootstrap range of bands (``0.3–0.7 km [0.15–0.3 km, none]``), ``controls n`` (parsed answers of
each control arm, behind the read-out's control checks), then ``all arms:`` parse failures (with their split
by arm when the answers per arm are known) and cut-off answers, and the read-out; the counts and the delta_1
text are the report table's own (:func:`geoagent.report.geoverify.summary_counts`).
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.textfmt import count_text, fixed_text, mapping_text
from geoagent.data.model import ARM_BLANK, ARM_MAIN, ARM_MISMATCH
from geoagent.data.store import data_db_path
from geoagent.engine import CampaignKind
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.plan import plan_campaign, settings_of
from geoagent.geoverify.stages import (
    SCORED_TABLE,
    SERVICE_LIVE_MISSING,
    SERVICE_PLAN_KEYS,
    ScoredScope,
    geoverify_stages,
)
from geoagent.runtime.stage import Message, Stage, StageContext
from geoagent.scoring.sdt import POOLED
from geoagent.scoring.truncation import LEGEND_LINE as TRUNCATION_LEGEND
from geoagent.scoring.truncation import total


#: what the console summary's counts mean (the report table's legend says the same at length)
SUMMARY_LEGEND = ("main arm n: parsed main-arm answers (signal + decoy trials); (k/n) after H and F: trials "
                  "answered yes / parsed main-arm trials; controls n: parsed answers per control arm (swapped image = "
                  "arm ctrl_mismatch, gray field = arm ctrl_noimage in the CSV files); all arms: "
                  "parse failures and cut-off answers count the answers of every arm")
#: ... and its delta_1 brackets, added when a site bootstrap ran
SUMMARY_LEGEND_RANGE = "; delta_1 [lo, hi]: its range over the site-bootstrap resamples (2.5th-97.5th percentile band)"

#: an undefined number in the console summary (NaN: no, or too few, parsed answers; "-" in the report files)
NA = "n/a"


def _pct(x: float) -> str:
    return NA if x is None or math.isnan(x) else f"{x:.1%}"


def _num(x: float) -> str:
    # a d' or c that rounds to zero prints 0.00, never -0.00 (textfmt.fixed_text)
    return NA if x is None or math.isnan(x) else fixed_text(x, 2)


#: control arms as the report table names them (``n control: swapped image``)
CONTROL_LABELS = {ARM_MISMATCH: "swapped image", ARM_BLANK: "gray field"}


def parse_failures_by_arm(sc: Any) -> dict[str, int] | None:
    """Parse failures of one model's scores per arm (``main``, then the control arms), or None when unknown.

    Derived as answers per arm (the cut-off counts, :attr:`ModelScores.truncation`, count every answer,
    parsed or not) minus the parsed answers of that arm; None when the scores carry no per-arm answer counts
    or the split does not add up to ``n_parse_failures``.
    """
    trunc = getattr(sc, "truncation", None) or {}
    if not trunc:
        return None
    parsed = {ARM_MAIN: sc.n_signal + sc.n_noise, **{arm: sc.controls.get(arm, (0, 0, 0.0))[0] for arm in CONTROL_LABELS}}
    out = {}
    for arm, n_parsed in parsed.items():
        c = trunc.get(arm)
        n_fail = (c.n if c is not None else 0) - n_parsed
        if n_fail < 0:
            return None
        if n_fail:
            out[arm] = n_fail
    if set(trunc) - set(parsed) or sum(out.values()) != sc.n_parse_failures:
        return None
    return out


def aggregate_from_store(store: Any, scope: ScoredScope | None = None) -> GeoVerifyAggregator:
    """A fresh aggregator filled from results table ``geoverify_scored`` in batches (rows scored before
    finish reasons were kept get theirs from the response store, for the cut-off counts). ``scope``
    (:class:`~geoagent.geoverify.stages.ScoredScope`): which rows count (default: every row, each model request
    once); it tallies what it left out."""
    agg = GeoVerifyAggregator()
    batch: list[dict[str, Any]] = []
    for row in (scope or ScoredScope(None)).rows(store):
        batch.append(row)
        if len(batch) >= 5000:
            agg.update(batch)
            batch = []
    agg.update(batch)
    return agg


def missing_work(cfg: Any) -> list[dict[str, Any]]:
    """Dead-lettered GeoVerify work of the campaign (every edge): ``model, key, edge, reason`` per task
    (reason worded for display by :func:`geoagent.status.describe_reason`: HTTP attempts named as such).

    Message keys are ``task_id|model`` on every edge (model names hold no ``|``), so the model is the
    last field. Read from the queue files, so it covers work dead-lettered by any process or earlier run.
    Tasks set aside because the current plan no longer holds them (reason ``superseded: ...``,
    :func:`geoagent.engine.set_aside_unplanned`) are not missing work: left out (the run's summary and
    ``status`` count them apart).
    """
    from geoagent.runtime.queue import SUPERSEDED
    from geoagent.status import dead_letters, describe_reason

    out = []
    for edge, items in dead_letters(cfg, limit=1_000_000_000).items():
        for d in items:
            if str(d.reason).startswith(SUPERSEDED):
                continue
            out.append({"model": d.key.rsplit("|", 1)[-1], "key": d.key, "edge": edge, "reason": describe_reason(d.reason)})
    return out


#: what a run's status says left work queued (:func:`scoring_left_line`), as GeoHint's summary words it
_STOPS_LEAVING_WORK = {"interrupted": "the interrupt", "budget exhausted": "the budget stop"}


def scoring_left_line(outcome: Any) -> str | None:
    """What a stop left queued past the parser, from the engine's ``Outcome`` (its ``status``, ``counts``: queue
    counts by edge at the end of the run, ``own_stages``), or None when nothing was (or the run was not stopped):
    e.g. ``"1 parsed answer not scored yet and 2 scored answers not aggregated yet: left queued by the interrupt;
    re-run the same command to finish (no new model call)."`` Left = ready + leased on the scorer's input edge
    (``answers``) and on the aggregator's (``scored``); a ``--stages`` process counts only the edges its own stages
    read. The engine's lines name requests not sent and answers not parsed; the summary showed ``scored: ready 2``
    in the queue table and no line about it (GeoHint's summary had one)."""
    left_by = _STOPS_LEAVING_WORK.get(str(getattr(outcome, "status", "")))
    if not left_by:
        return None
    counts = getattr(outcome, "counts", None) or {}
    own = getattr(outcome, "own_stages", None) or []

    def left(edge: str, stage: str) -> int:
        c = counts.get(edge)
        return int(c.ready + c.leased) if c is not None and (not own or stage in own) else 0

    parsed, scored = left(C.EDGE_ANSWERS, C.STAGE_SCORER), left(C.EDGE_SCORED, C.STAGE_AGGREGATOR)
    parts = ([f"{count_text(parsed, 'parsed answer')} not scored yet"] if parsed else []) + (
        [f"{count_text(scored, 'scored answer')} not aggregated yet"] if scored else [])
    if not parts:
        return None
    return f"{' and '.join(parts)}: left queued by {left_by}; re-run the same command to finish (no new model call)."


class GeoVerifyCampaign(CampaignKind):
    """GeoVerify (seed 000 Sec. 5): claim verification scored with signal detection theory."""

    kind = "geoverify"
    results_tables = (SCORED_TABLE,)

    def scored_rows(self, ctx: StageContext) -> tuple[str, str, str | None, Any] | None:
        """:meth:`CampaignKind.scored_rows`: the scorer's rows (table ``geoverify_scored``, one per task of its
        input edge ``answers``, its output on ``scored``) and the current plan's task keys."""
        from geoagent.geoverify.stages import SCORED_TABLE, GeoVerifyScorerStage

        keys = ctx.services.get(SERVICE_PLAN_KEYS)
        scorer = GeoVerifyScorerStage
        return None if keys is None else (SCORED_TABLE, scorer.input_edge, scorer.output_edge, keys)

    async def refresh_scored_rows(self, cfg: Any, ctx: StageContext) -> list[str]:
        """:meth:`CampaignKind.refresh_scored_rows`: the stored answers an earlier verdict parser read are parsed
        and scored again from their stored text (:func:`geoagent.geoverify.reparse.refresh_stored_rows`; no model
        call), so the report never mixes two parsers' readings; one ``info:`` line says how many and how many
        changed. Before that, swapped-image answers stored under their task's key of before the key named the image
        shown are moved to the new key (:func:`geoagent.geoverify.rekey.move_swapped_rows`, its own line)."""
        from geoagent.geoverify.rekey import move_swapped_rows
        from geoagent.geoverify.reparse import refresh_stored_rows
        from geoagent.geoverify.stages import SCORED_TABLE

        store = ctx.get("store")
        if store is None or not hasattr(store, "iter_results"):
            return []
        # the run's work begins with the first row rewritten (review40b #5)
        began = ctx.services.get(C.SERVICE_WORK_BEGAN)
        before = began if callable(began) else None
        lines = []
        plan_keys = ctx.services.get(SERVICE_PLAN_KEYS)
        if plan_keys is not None and hasattr(store, "move_results"):
            # answers stored under a swapped-image control's key of before the key named the image (review41a #3)
            lines.append(move_swapped_rows(store, SCORED_TABLE, plan_keys, before_write=before).line(cfg.name))
        lines.append(refresh_stored_rows(store, SCORED_TABLE, before_write=before).line(cfg.name))
        return [ln for ln in lines if ln]

    def stages(self, cfg: Any) -> list[Stage]:
        from geoagent.workers.model_caller import ModelCaller

        s = settings_of(cfg)
        live_boot = s.n_boot if s.live_n_boot is None else s.live_n_boot
        return [ModelCaller(), *geoverify_stages(report_interval_s=s.report_interval_s, n_boot=live_boot,
                                                 seed=s.boot_seed, models=_column_models(cfg), tau_km=s.tau_m / 1000.0)]

    async def plan(self, cfg: Any, ctx: StageContext) -> list[Message]:
        """The plan of :func:`plan_campaign`, after the image check (:func:`geoagent.image_files.check_missing`:
        trials without image files refuse for a model on a real provider unless ``[images] missing =
        "placeholder"``; otherwise their count is :meth:`plan_warnings`' line)."""
        from geoagent.image_files import check_missing, photos_after_placeholders

        # a read-only plan (a run refused for unset keys naming its other problems) stores no data import
        self._plan = plan_campaign(cfg, store_data=not ctx.services.get(C.SERVICE_READ_ONLY))
        # the report and the live aggregator score exactly this plan's tasks (ScoredScope)
        ctx.services[SERVICE_PLAN_KEYS] = frozenset(key for key, _ in self._plan.messages)
        # and the live report lists the missing work as it stands at each rewrite, as report() does at the end
        ctx.services[SERVICE_LIVE_MISSING] = lambda: self.live_missing(cfg)
        # with the header lines the final report has (interim, simulator, replay, placeholder images)
        from geoagent.providers.replay import replay_note
        from geoagent.report.live import LiveBanners

        ctx.services[C.SERVICE_LIVE_BANNERS] = LiveBanners(lambda: _simulated(cfg, ctx), replay_note(cfg),
                                                           lambda: getattr(self, "_image_warning", None))
        self._image_warning = None
        self._refusals: list[str] = []
        if self._plan.images is not None:
            self._image_warning = check_missing(
                ctx.services.get("config_as_written", cfg), self._plan.images,
                fix=("Put the photos there (the trial table's `path` column is relative to that folder: a crawl's "
                     "images folder, state/images, holds <site>/<image_id>.jpg) or fix geoverify.image_root"),
                refusals=self._refusals if ctx.services.get(C.SERVICE_DRY_RUN) else None)
        # tasks queued earlier with placeholder pixels whose photo is there now keep their placeholder request
        self._photo_warning = photos_after_placeholders(cfg, self._plan.messages, key="geoverify.image_root")
        from geoagent.integrate import auditor_overlap_warning

        s = settings_of(cfg)  # seed 000 Sec. 3.3: a crawl's auditor must not be an evaluated model
        self._auditor_warning = auditor_overlap_warning(s.release_dir or cfg.release_dir(), cfg.models)
        # handed to the engine and no longer held here, as GeoHint's plan (scale37 #1: a 100,000-call campaign held its
        # prompts and trial records to its end); what the campaign needs later (keys, per-model counts, trials, image
        # tally) is kept apart
        messages, self._plan.messages = self._plan.messages, []
        return messages

    def plan_warnings(self, cfg: Any) -> list[str]:
        """The plan's image warnings (images sent as placeholder pixels; planned tasks queued earlier with
        placeholder pixels that now have their photo, :func:`geoagent.image_files.photos_after_placeholders`),
        when it has them, and a warning when the planned trials hold the gray-field control (``ctrl_noimage``) but no swapped-image control
        (``ctrl_mismatch``; e.g. trials of a crawl whose cities are all on one continent): the read-out cannot
        check that arm. A table without any control arm (the release sample) gets no warning: no control was
        meant. Also a model that audited the crawl whose folder the trials come from
        (:func:`geoagent.integrate.auditor_overlap_warning`, seed 000 Sec. 3.3), and the sites of ``sites.csv``
        without an image in the trial table, so without a trial (:func:`geoagent.data.importer.sites_without_images`:
        a crawl's sites left with no usable image; crawl40 #4)."""
        from geoagent.data.model import ARM_BLANK, ARM_MISMATCH
        from geoagent.scoring.sdt import MISMATCH_F_MAX

        out = [w for w in (getattr(self, "_image_warning", None), getattr(self, "_photo_warning", None),
                           getattr(self, "_auditor_warning", None)) if w]
        plan = getattr(self, "_plan", None)
        trials = getattr(plan, "trials", None) or []
        from geoagent.data.importer import sites_without_images_text

        bare = sites_without_images_text(getattr(plan, "sites_without_images", None) or [],
                                         getattr(plan, "sites_csv", None) or "sites.csv")
        if bare:
            out.append(bare)
        arms = {t.arm for t in trials}
        if ARM_BLANK in arms and ARM_MISMATCH not in arms:
            out.append(
                f"the {count_text(len(trials), 'trial')} {'holds' if len(trials) == 1 else 'hold'} no swapped-image control (arm {ARM_MISMATCH}): the pre-registered "
                f"read-out will say 'swapped-image control not run' and skip that arm's validity check (F <= "
                f"{MISMATCH_F_MAX:.0%}), so it cannot rule out answers that ignore the image; a crawl whose cities "
                "are all on one continent builds none (the swapped image comes from another continent): add cities "
                "on another continent to the crawl")
        return out

    plan_inputs_label = "trial table"

    def plan_inputs(self, cfg: Any) -> list[Path]:
        """The trial table files of the release folder (:func:`geoagent.data.importer.trial_table_paths`): a
        ``--watch`` run over a crawl's folder plans again when a hand-off of the crawl replaces its
        ``verify_trials.csv`` (:class:`geoagent.engine.WatchReplanTick`)."""
        from geoagent.data.importer import trial_table_paths

        s = settings_of(cfg)
        return trial_table_paths(s.release_dir or cfg.release_dir())

    def check_config_change(self, cfg: Any) -> None:
        """:meth:`CampaignKind.check_config_change`: another ``[geoverify] tau_m`` than the campaign's earlier runs'
        while it holds answers or tasks made at that one is refused (:func:`geoagent.geoverify.tau_guard.
        check_tau_unchanged`; fixtaurefuse43), and so is a ``tau_m`` that is no whole number of metres
        (:func:`geoagent.geoverify.settings.check_whole_metres`: checked where a run plans, not at load, so ``status``
        and ``export`` read a campaign stored at one; fixguard43 #2), with the guard's advice where the campaign holds
        work (:func:`geoagent.geoverify.tau_guard.whole_metres_advice`; review44b #6b)."""
        from geoagent.config import ConfigError
        from geoagent.geoverify.settings import check_whole_metres
        from geoagent.geoverify.tau_guard import check_tau_unchanged, whole_metres_advice

        try:
            check_whole_metres(cfg)
        except ConfigError as exc:
            # review44b #6b: the guard's advice at once (which tau the campaign's work was made at, and whether it
            # can be run on), not a second refusal after tau_m was made whole
            advice = whole_metres_advice(cfg)
            if advice is None:
                raise
            raise ConfigError(exc.source, [f"{exc.problems[0]}; {advice}", *exc.problems[1:]]) from None
        check_tau_unchanged(cfg)

    def config_change_note(self, cfg: Any) -> str | None:
        """:meth:`CampaignKind.config_change_note`: a run of this file refused for its ``tau_m``
        (:func:`geoagent.geoverify.tau_guard.status_note`; review44b #6d)."""
        from geoagent.geoverify.tau_guard import status_note

        return status_note(cfg)

    def check_change_after_plan(self, cfg: Any, changes: Any, *, tasks: int, done: int, answers: int) -> None:
        """:meth:`CampaignKind.check_change_after_plan`: a ``[geoverify] tau_m`` changed since the last recorded run
        while the campaign holds work is refused once planned, before anything is queued
        (:func:`geoagent.geoverify.tau_guard.check_tau_drift`; review44b #1), not warned about as config drift."""
        from geoagent.geoverify.tau_guard import HeldWork, check_tau_drift

        check_tau_drift(cfg, changes, HeldWork(answers=answers, scored=0, tasks=tasks, done=done))

    def plan_refusals(self, cfg: Any) -> list[str]:
        """The image refusal a real run would stop at, kept by a dry run's plan (see
        :meth:`geoagent.engine.CampaignKind.plan_refusals`)."""
        return list(getattr(self, "_refusals", []))

    def expected_photo(self, cfg: Any) -> tuple[tuple[int, int], str]:
        """The photo an image without a file will be sent as (:meth:`geoagent.engine.CampaignKind.expected_photo`):
        the thumbnail of the crawl whose state folder is the release folder (``geoverify.release_dir`` or
        ``[paths] release_dir``), at its ``[crawl.fetcher] thumb_field`` size, when that folder holds the crawl's
        ``manifest.json`` (:func:`geoagent.image_files.expected_photo`); else 1024 x 768."""
        from geoagent.image_files import expected_photo

        s = settings_of(cfg)
        return expected_photo(s.release_dir or cfg.release_dir())

    def missing_photos(self, cfg: Any) -> frozenset[str]:
        """Image ids of the planned trials whose photo has no file under ``geoverify.image_root`` yet
        (:attr:`geoagent.image_files.MissingImages.photo_ids`; the dry run counts them at the expected photo size)."""
        plan = getattr(self, "_plan", None)
        return plan.images.photo_ids if plan is not None and plan.images is not None else frozenset()

    def manifest_extra(self, cfg: Any) -> dict[str, Any]:
        """The planned images and how many have no file (:meth:`geoagent.image_files.MissingImages.to_json`)."""
        plan = getattr(self, "_plan", None)
        return plan.images.to_json() if plan is not None and plan.images is not None else {}

    def empty_plan_reason(self, cfg: Any) -> str:
        """What was empty: the trials (built or read from the release folder), or the models' sampling."""
        s = settings_of(cfg)
        root = Path(s.release_dir or cfg.release_dir())
        plan = getattr(self, "_plan", None)
        n_trials = len(plan.trials) if plan is not None else 0
        if n_trials:
            return (f"{count_text(n_trials, 'trial')} from {root} but 0 requests planned (every model's sampling_rate "
                    "dropped them all?)")
        from geoagent.integrate import stale_trials_reason

        stale = stale_trials_reason(root) if s.trials != "build" else None  # "build" reads no trial table
        # the tables the importer reads (verify_trials.csv or its sample; a crawl's stale table is never read)
        has_csv = any((d / f"verify_trials{x}.csv").is_file() for d in (root, root / "data") for x in ("", "_sample"))
        what = "built" if s.trials == "build" else "read"
        why = stale if stale is not None and not has_csv else ("it has no verify_trials.csv (after a crawl, the crawl writes one into its state folder when it "
               "completes)" if not has_csv else
               "its verify_trials.csv gives no image with a signal candidate within tau and no decoy ladder "
               "(no usable row)")
        return f"0 trials {what} from {root}: {why}"

    async def report(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[Path]:
        from geoagent.providers.replay import replay_note
        from geoagent.report.geoverify import write_report

        from geoagent.runtime.drift import not_sent_of, params_mix_lines

        s = settings_of(cfg)
        scope = self._scope(ctx)
        agg = aggregate_from_store(ctx.get("store"), scope)
        self._scope_note = scope.note()
        self._not_planned = scope.not_planned
        self._scores = agg.scores(n_boot=s.n_boot, seed=s.boot_seed, models=_column_models(cfg), tau_km=s.tau_m / 1000.0)
        out = Path(ctx.services.get("state_dir") or cfg.state_dir()) / C.REPORT_DIR
        return list(write_report(self._scores, out, parse_failures=agg.parse_failures(),
                                 interim=outcome.interim_note(),
                                 image_note=getattr(self, "_image_warning", None),
                                 simulated=_simulated(cfg, ctx),
                                 config_mix=params_mix_lines(ctx.services.get(C.SERVICE_PARAMS_MIX) or {}, not_sent_of(cfg)),
                                 scope_note=self._scope_note, replay_note=replay_note(cfg),
                                 import_notes=self.import_notes(),
                                 **self.live_missing(cfg)).values())  # missing, unreplayed, n_trials

    def import_notes(self) -> list[str]:
        """The planned release's import notes (``file:line: reason``) and the trials whose recorded answers are not
        replayed as recorded, for the report (reports36 #4: only the summary named them); [] before planning."""
        plan = getattr(self, "_plan", None)
        if plan is None:
            return []
        return [str(i) for i in plan.import_report.issues] + list(plan.replay_notes)

    def live_missing(self, cfg: Any) -> dict[str, Any]:
        """The missing work the report lists, now: ``missing`` (:func:`missing_work`, read from the queues),
        ``unreplayed`` and ``n_trials`` of the current plan (None before one), as keyword arguments of
        :func:`geoagent.report.geoverify.write_report`. The live report reads it at each rewrite (ctx service
        :data:`geoagent.geoverify.stages.SERVICE_LIVE_MISSING`; in its worker thread: the queues are opened anew).

        Raises
        ------
        sqlite3.Error, redis.RedisError
            The queues cannot be read (the live report logs it and keeps the previous list).
        """
        plan = getattr(self, "_plan", None)
        return {"missing": missing_work(cfg), "unreplayed": plan.unreplayed if plan is not None else None,
                "n_trials": len(plan.trials) if plan is not None else None}

    @staticmethod
    def _scope(ctx: StageContext) -> ScoredScope:
        """The rows a report counts: the current plan's tasks (when this process planned), each request once."""
        keys = ctx.services.get(SERVICE_PLAN_KEYS)
        return ScoredScope(set(keys) if keys is not None else None)

    def export(self, cfg: Any, store: Any, out_dir: str | Path | None = None) -> list[Any]:
        """:meth:`CampaignKind.export`, with a boolean ``scored`` column in ``geoverify_scored``: True exactly for
        the rows the report scores (:class:`ScoredScope`: the task is in the current plan, and it is the first
        stored answer of its model request). ``run.py export`` runs without a plan: the current plan is the one
        the last run recorded (``state/<campaign>/plan_keys.tsv``, :mod:`geoagent.runtime.scope`), the plan its
        report scored; a campaign without that record marks every row, each request once. So
        ``df.filter(pl.col("scored"))`` gives the report's H, F and counts; the other rows (answers of tasks an
        earlier plan held, repeats) stay in the export for a look at them, and the column ``left_out`` says why
        each is not scored (:meth:`geoagent.runtime.scope.ScoredScope.left_out`: ``NOT_IN_PLAN``'s text, or
        ``repeats the model request of <key> ...``; null on a scored row). An unparsed answer (``parse_ok``
        False; cut off with nothing parsed: ``truncated`` True too) is a scored row, outside H and F as in the
        report."""
        from geoagent.runtime.export import export_all
        from geoagent.runtime.scope import read_plan_keys

        from geoagent.geoverify.reparse import reparse_items
        from geoagent.geoverify.stages import SCORED_TABLE

        scope = ScoredScope(read_plan_keys(cfg.state_dir()))
        # an answer read by an earlier verdict parser and not yet parsed again by a run: exported as the current
        # parser reads it (geoagent.geoverify.reparse; the store is not written)
        return export_all(store, out_dir or cfg.state_dir(),
                          hooks={SCORED_TABLE: lambda rows: scope.mark(reparse_items(rows, store),
                                                                       reason_column="left_out")},
                          checks={SCORED_TABLE: functools.partial(scope.checked, store)}, cfg=cfg,
                          tables=self.results_tables)

    def params_mix(self, cfg: Any, ctx: StageContext) -> dict[str, list[tuple[dict[str, Any], int]]]:
        """:meth:`CampaignKind.params_mix` over the answers the report scores (the current plan's, each once)."""
        from geoagent.runtime.drift import params_mix

        store = ctx.services.get("store")
        if store is None or not hasattr(store, "iter_response_meta"):
            return {}
        scope = self._scope(ctx)
        wanted = {r.get("request_key") for r in scope.rows(store)} - {None}
        return params_mix(store.iter_response_meta(), keys=wanted)

    def answer_quality(self, cfg: Any, ctx: StageContext) -> dict[str, Any]:
        """:meth:`CampaignKind.answer_quality` from the scores :meth:`report` computed (every arm): parsed =
        the main arm's signal and decoy trials plus each control arm's parsed answers; answers = parsed + parse
        failures; cut off from the answers' finish reasons. The pooled column is no model."""
        from geoagent.engine import AnswerQuality
        from geoagent.report.geoverify import FAILURES_CSV, TRUNCATION_SETTING
        from geoagent.config import output_limit_keys
        from geoagent.scoring.truncation import is_planned_limit_key

        keys = output_limit_keys(cfg)  # each model's own key (walk44 B1)

        out = {}
        for model, sc in (getattr(self, "_scores", None) or {}).items():
            if model == POOLED:
                continue
            parsed = sc.n_signal + sc.n_noise + sum(int(c[0]) for c in (sc.controls or {}).values())
            cut = total(sc.truncation).n_truncated if sc.truncation else 0
            key = keys.get(model)
            out[model] = AnswerQuality(parsed + sc.n_parse_failures, parsed, cut, key or TRUNCATION_SETTING,
                                       f"report/{FAILURES_CSV}", fix_planned=is_planned_limit_key(key))
        return out

    def summary_lines(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[str]:
        """The console summary's GeoVerify lines: plan notes, one line per model and pooled (the report table's
        counts), the pooled read-out with its reasons, legends and warnings. With one model the pooled line and its
        Small n lines are left out (they would repeat the model's; :func:`geoagent.report.geoverify.one_model`) and
        the read-out line names the model."""
        from geoagent.report.geoverify import (TABLE_MD, readout_text, dprime_text, one_model, pooled_mean_text,
                                               band_gap_lines, shown_scores,
                                               small_n_note, small_n_warnings, summary_counts, truncation_warnings)

        scores = getattr(self, "_scores", None)
        note = getattr(self, "_scope_note", None)
        not_planned = getattr(self, "_not_planned", 0)
        if scores is None:
            scope = self._scope(ctx)
            scores = aggregate_from_store(ctx.get("store"), scope).scores(models=_column_models(cfg),
                                                                          tau_km=settings_of(cfg).tau_m / 1000.0)
            note, not_planned = scope.note(), scope.not_planned
        if outcome is not None:  # the summary's plan line counts them (walk46 #13)
            outcome.not_planned = not_planned
        lines = [f"  warning: {w}" for w in self.plan_warnings(cfg)]
        if note:
            lines.append(f"  {note}")
        plan = getattr(self, "_plan", None)
        if plan is not None:
            issues = plan.import_report.issues
            lines.append(f"  release import: {plan.import_counts or sum(plan.import_report.imported.values())}; "
                         f"{len(issues)} malformed (details: table meta, key 'import_report', "
                         f"in {data_db_path(cfg.name, cfg.state_root())})" + (":" if issues else ""))
            # the first few in full (file:line: reason), so a file refused whole (a repeated or missing header
            # column) is seen in the summary, not only in the data store
            lines += [f"    {issue}" for issue in issues[:5]]
            if len(issues) > 5:
                lines.append(f"    ... and {len(issues) - 5} more")
            if plan.unreplayed:
                from geoagent.report.geoverify import render_unreplayed

                lines.append(f"  {render_unreplayed(plan.unreplayed, len(plan.trials))}")
            if plan.replay_notes:
                n_rep = len(plan.replay_notes)
                lines.append(f"  recorded answers: {count_text(n_rep, 'trial')} not replayed as recorded:")
                lines += [f"    {note}" for note in plan.replay_notes[:5]]
                if n_rep > 5:
                    lines.append(f"    ... and {n_rep - 5} more (each is also a warning in the log, and listed in the "
                                 "report's import notes)")
            if plan.duplicate_notes:
                n_dup = len(plan.duplicate_notes)
                lines.append(f"  trials skipped: {n_dup} repeat an earlier trial's model request (same image shown, "
                             "same claim), so each answer is scored once:")
                lines += [f"    {note}" for note in plan.duplicate_notes[:10]]
                if n_dup > 10:
                    lines.append(f"    ... and {n_dup - 10} more (each is also a warning in the log)")
            if plan.build_report is not None:
                br = plan.build_report
                lines.append(f"  built trials per band (main arm): {mapping_text(br.per_band())}; images without signal "
                             f"{br.images_without_signal}; unmatched decoys {br.unmatched_decoys}"
                             # the why only for decoys there are (it read as a finding with n_per_band = 0)
                             + (" (drawn from any referenceability tier: none of their band was within one tier of "
                                "the image's signal candidates)" if br.unmatched_decoys else ""))
        later = scoring_left_line(outcome)
        left = [f"  {later}"] if later else []
        if not scores:
            return [*lines, "  GeoVerify: no scored responses", *left]
        # one model: no pooled line repeating it, nor its Small n lines (the report's tables leave it out too)
        single = one_model(scores)
        scores = shown_scores(scores)
        for name, sc in scores.items():
            near = sc.bands[0].d_prime if sc.bands else math.nan
            cut = total(sc.truncation or {})
            cut_text = f"  cut off {cut.n_truncated} ({cut.share:.1%})" if cut.n else ""
            parsed = sc.n_signal + sc.n_noise
            counts = summary_counts(sc)  # the report table's "(k/n)" and delta_1 cell, from the same scores
            delta_1 = counts["delta_1"] if parsed else NA
            controls = ", ".join(f"{label} {sc.controls.get(arm, (0, 0, 0.0))[0]}" for arm, label in CONTROL_LABELS.items())
            split = parse_failures_by_arm(sc) if sc.n_parse_failures else None
            split_text = (" (" + ", ".join(f"{CONTROL_LABELS.get(arm, arm)} {n}" for arm, n in split.items()) + ")"
                          if split else "")
            lines.append(
                f"  {name:>20}: main arm n {parsed}  H {_pct(sc.h)}{counts['H']}  F {_pct(sc.f)}{counts['F']}"
                f"  d'(nearest) {dprime_text(sc, sc.bands[0].band, _num(near)) if sc.bands else _num(near)}"
                f"  delta_1 {delta_1}  controls n {controls}"
                f"  all arms: parse failures {sc.n_parse_failures}{split_text}{cut_text}  read-out {readout_text(sc)}"
            )
        if single:
            lines.append(f"  pre-registered read-out ({single}; one model, so pooled is the same): "
                         f"{readout_text(scores[single])}: " + "; ".join(scores[single].readout.reasons))
        elif POOLED in scores:
            lines.append(f"  pre-registered read-out (pooled): {readout_text(scores[POOLED])}: "
                         + "; ".join(scores[POOLED].readout.reasons) + pooled_mean_text(scores))
        # the range's legend only where a delta_1 cell shows one (none-to-none shows no brackets: _delta_text)
        from geoagent.report.geoverify import delta_none_throughout

        ranged = any(sc.delta_1_ci and not delta_none_throughout(sc) for sc in scores.values())
        lines.append("  " + SUMMARY_LEGEND + (SUMMARY_LEGEND_RANGE if ranged else ""))
        lines.append("  " + TRUNCATION_LEGEND)
        lines += [f"  {w}" for w in [*band_gap_lines(scores), *truncation_warnings(scores)]]
        small = small_n_warnings(scores)
        if small:
            # the summary prints no 'Intervals' line (the report's table does): the note points there
            lines += [f"  {w}" for w in [small_n_note(scores, intervals_at=f"in the report ({TABLE_MD})"), *small]]
        return [*lines, *left]


def _column_models(cfg: Any) -> list[str]:
    """The report names of the campaign's models that have a column whether or not they answered yet: every
    ``[[models]]`` entry but a replay one (which reports under the recorded names its file holds:
    :func:`geoagent.geoverify.plan.check_report_names`). newuser39 #5: a one-model campaign whose host was down
    reported a lone "pooled" column."""
    return [m.name for m in cfg.models if m.provider != "replay"]


def _simulated(cfg: Any, ctx: StageContext) -> list[str]:
    """Models of the campaign whose answers come from the simulator: as each stored answer recorded it
    (``request_meta.provider_kind``, a sandbox fake on any port included), else by the config as written (before
    the sandbox fakes' ports replace their URLs; :func:`geoagent.runtime.export.simulated_answer_models`): the
    report says its figures describe the simulator."""
    from geoagent.runtime.export import simulated_answer_models

    return simulated_answer_models(ctx.services.get("store"), ctx.services.get("config_as_written", cfg),
                                   configured_only=True)
