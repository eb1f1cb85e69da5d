"""Campaign engine: open the services, plan the work, run the stages, report and export.

``run_campaign(cfg)`` is what ``python run.py run CONFIG`` calls. Re-running it with the same config resumes:
the plan is re-enqueued idempotently (existing task keys are no-ops), stored responses are never paid for
twice, and counts and spend are read from the durable queues and ledger, so they are cumulative across
restarts.

Outcomes and exit codes
-----------------------
=====================  =====  =====================================================================
status                 code   meaning
=====================  =====  =====================================================================
complete               0      every planned task reached the end of the pipeline
incomplete             3      some work is missing (dead-lettered: retries exhausted or permanent error;
                              not tasks set aside as no longer planned, :func:`set_aside_unplanned`),
                              or left queued because a stage stopped: a host it needs could not be reached
                              (:mod:`geoagent.runtime.worker`, "Unreachable hosts"; the summary names the
                              host and what to check; re-run the same command to resume), or a model's
                              host could not be reached (:mod:`geoagent.workers.model_caller`,
                              "Unreachable-host breaker": that model's tasks left queued, the other
                              models' work ran to the end), or a model's answers came back empty at its
                              output-token limit 10 times in a row (:mod:`geoagent.workers.cutoff_breaker`:
                              that model's tasks left queued; raise its max_output_tokens and re-run), or
                              a model's host answered 5 times in a row that its path or model does not
                              exist (HTTP 404/405, or a 400 "model not found": a wrong base_url path or
                              model id on a local server or gateway, :mod:`geoagent.workers.model_caller`,
                              "Not-found breaker": that model's tasks left queued, none dead-lettered;
                              fix the config and re-run)
budget exhausted       4      the cost cap stopped dispatching; the rest of the work is reported
authentication failed  5      a model's host refused its API key (HTTP 401/403, or Gemini's 400
                              API_KEY_INVALID, 5 times in a row), or refused its account for billing
                              (HTTP 402, a 429 insufficient_quota / enforced_spend_limit_reached: at
                              once): that model's tasks were left queued
                              untouched (none dead-lettered, nothing spent), every other model's work
                              ran to the end; set the key variable named in the message (or add credit)
                              and re-run. Also: the crawl's Mapillary token refused, or the GeoHint
                              geocoder refused by Nominatim or Wikidata (HTTP 403: its answers left queued)
no usable answers      6      every planned task reached the end, but a model answered and none of its
                              answers parsed (all cut off at the output-token limit, or none readable): its
                              scores would be empty, not low (issue 2 point 10: failures are never answers);
                              the summary names the model and the cause (cut off: raise max_output_tokens).
                              Answers only partly cut off stay a warning in a ``complete`` run
interrupted            130    stopped by SIGINT/SIGTERM with work left; re-run the same command to resume
stages finished        0      (``--stages``) this process's stages finished, nothing of theirs dead-lettered,
                              but other stages (other processes) still have work queued or in flight: the
                              campaign is not complete yet; its last process reports it (``incomplete``
                              if any edge holds dead letters, whichever process dead-lettered them). Work
                              another process queued on a stage's input after that stage drained it is
                              said ("N tasks on responses queued by another process after stage S
                              had finished here"), not counted as this process's
=====================  =====  =====================================================================

(2 is a config error: a bad file, missing API keys, an impossible campaign, a first run whose plan is empty
(no queue yet and nothing planned: :meth:`CampaignKind.empty_plan_reason` says what was empty; the state folder
the run made is removed; not in ``--watch`` mode); printed by the CLI. A dry run (``--simulate``) that predicts
one of these refusals also ends 2, after its whole report, whose last line says why.)
The table as text for the CLI's help epilog is :data:`EXIT_CODES_HELP`.

A process stopped by SIGINT/SIGTERM when its own stages are drained (their input edges and every edge
upstream of them have nothing ready or leased: a ``--watch`` process waiting for work, or a run whose last
tasks ended as the signal came; or, without ``--watch``, each of its stages had already found its input
exhausted and ended by itself, whatever another process queued there since) ends like a finished run
(``complete``, 0, or ``incomplete`` when some of that work was dead-lettered; ``stages finished``, 0, when other
stages still have work), not ``interrupted``. A
signal after the pipeline ended (the report, the export) cuts nothing short either
(:class:`geoagent.runtime.daemon.LateSignals`): the summary says it came after every task had ended.

Campaign kinds (``[campaign] kind``) are looked up in :data:`KINDS` and imported lazily.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import functools
import importlib
import json
import logging
import math
import os
import secrets
import sys
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import anyio

from geoagent import __version__
from geoagent import constants as C
from geoagent.files import remove_stale_temp_files
from geoagent.notes import NotesOnce
from geoagent.textfmt import count_text, one_line_text
from geoagent.runtime.daemon import PipelineRun, open_edge_queues, run_pipeline
from geoagent.runtime.progress import Progress
from geoagent.runtime.queue import FAILED_BEFORE, SUPERSEDED, DeadLetter, QueueCounts
from geoagent.runtime.scope import (SENT_WHILE_WATCHING, SET_ASIDE, SET_ASIDE_ELSEWHERE, PlanDiff, PlanRecorder,
                                    plan_change_text)
from geoagent.runtime.stage import BudgetStop, Message, Stage, StageContext, other_budget_fixes

log = logging.getLogger(__name__)

EXIT_COMPLETE = 0
EXIT_CONFIG = 2
EXIT_INCOMPLETE = 3
EXIT_BUDGET = 4
EXIT_AUTH = 5
EXIT_INTERRUPTED = 130
#: ctx.services key of the run's :class:`geoagent.runtime.daemon.LateSignals` (None: signals not handled)
SERVICE_LATE_SIGNALS = "late_signals"
#: ctx.services key of what ``run --accept-config-change`` accepted (None without the flag): the run manifest's
#: ``accepted_config_change`` (``given_at``, ``changed_keys`` as names only, ``server_record_replaced``, ``note``;
#: :class:`geoagent.runtime.backend.ServerConfigCheck`)
SERVICE_ACCEPTED_CONFIG_CHANGE = "accepted_config_change"
#: services key: another process of the campaign held its run lock when this run took it (:attr:`Outcome.others_at_start`)
SERVICE_OTHERS_AT_START = "others_at_start"
#: services key of the run's :class:`PlanLock` (None: a dry run), let go by :func:`_run` once the manifest records the
#: run (review44b #1)
SERVICE_PLAN_LOCK = "plan_lock"

#: status of a run stopped by a model's authentication breaker (:mod:`geoagent.workers.model_caller`)
STATUS_AUTH = "authentication failed"
#: status of a ``--stages`` process whose own stages finished while other stages still have work (exit 0)
STATUS_STAGES_DONE = "stages finished"

#: exit code of a run in which a model answered but none of its answers could be used (:data:`STATUS_NO_USABLE`)
EXIT_NO_USABLE_ANSWERS = 6
#: status of a run that would be ``complete`` but a model gave answers of which none parsed (every answer cut
#: off at the output-token limit, or none readable): issue 2 point 10, failures are never answers
STATUS_NO_USABLE = "no usable answers"


@dataclass(frozen=True)
class AnswerQuality:
    """One model's answers as a report counted them (answers, not tokens): ``answers`` every answer counted,
    ``parsed`` those that parsed (usable), ``cut_off`` those stopped at the output-token limit (parsed or
    not); ``fix`` names the key that raises the cap (the model's own, :func:`geoagent.config.output_limit_keys`:
    ``models[1].max_output_tokens`` or ``geohint.max_output_tokens``), ``fix_planned`` whether that key is planned
    into each request (a task section's: :func:`~geoagent.scoring.truncation.is_planned_limit_key`) and
    ``failures`` where the unparsed answers are listed."""

    answers: int
    parsed: int
    cut_off: int = 0
    fix: str = "max_output_tokens"
    failures: str = "the report's parse-failure list"
    fix_planned: bool = False


def unusable_answer_lines(quality: Mapping[str, AnswerQuality]) -> list[str]:
    """One summary line per model that answered but whose answers none parsed (``answers > 0``,
    ``parsed == 0``), naming the cause: ``  no usable answers: M: 345 answers, none parsed (345 cut off at the
    output-token limit: raise models[1].max_output_tokens and re-run the same command: ...)``
    (:func:`~geoagent.scoring.truncation.rerun_advice`), or, when none was cut off, where the unparsed answers are
    listed. [] when every model that answered has a usable answer."""
    from geoagent.scoring.truncation import rerun_advice

    out = []
    for model, q in quality.items():
        if q.answers <= 0 or q.parsed > 0:
            continue
        if q.cut_off:
            # walk44 B1: the advice of the breaker's line and docs/models.md (it said "re-run under a new campaign
            # name" where the breaker said re-run the same command)
            cause = f"{q.cut_off} cut off at the output-token limit: {rerun_advice(q.fix, planned=q.fix_planned)}"
        else:
            cause = f"none cut off: see {q.failures} for what the model answered"
        out.append(f"  no usable answers: {model}: {q.answers} answer{'s' if q.answers != 1 else ''}, none parsed "
                   f"({cause}); its scores are empty, not low")
    return out


#: the exit-code table for the CLI's ``--help`` epilog (one source for the codes)
EXIT_CODES_HELP = (
    "exit codes: 0 complete (a --watch process stopped once its stages are drained included; a --stages "
    "process whose stages finished while other stages still have work says so and also ends 0); "
    "2 config error (bad file, missing API keys, a campaign that can make no call, a first run that plans nothing); "
    "3 incomplete (work dead-lettered, see `run.py dead CONFIG`, or left queued, e.g. a host could not be "
    "reached: the summary says why; re-run the same command to resume); "
    "4 budget exhausted (raise [budget] cap_usd and re-run; or the GeoHint geocoder's Nominatim request cap: re-run, "
    f"the summary says so); {EXIT_AUTH} authentication failed (a model's "
    "host answered 401/403 repeatedly, or refused its account for billing: that model's work stays queued while the "
    "other models finish; or the "
    "Mapillary API refused the crawl's token: the crawl stops; or Nominatim or Wikidata refused the GeoHint geocoder "
    "(HTTP 403): its answers stay queued; fix what the summary names and re-run; no task is lost); "
    f"{EXIT_NO_USABLE_ANSWERS} no usable answers (a model answered but none of its answers parsed, e.g. every "
    "answer cut off at max_output_tokens: the summary names the model and the cause); "
    "130 interrupted (re-run the same command to resume)"
)

#: a model whose share of planned calls answered is below this fraction of the best model's share is
#: flagged in an incomplete run's summary and report (:meth:`Outcome.coverage_warnings`)
COVERAGE_FAR_FEWER = 0.5

#: the line a --watch process prints at start (also when stdout is not a terminal)
WATCH_BANNER = "watching the queues; Ctrl-C to stop"

#: campaign kind -> "module:Class"
KINDS: dict[str, str] = {
    "generic": "geoagent.campaigns.generic:GenericCampaign",
    "geoverify": "geoagent.campaigns.geoverify:GeoVerifyCampaign",
    "geohint": "geoagent.campaigns.geohint:GeoHintCampaign",
    "crawl": "geoagent.campaigns.crawl:CrawlCampaign",
}


class CampaignKind(abc.ABC):
    """One kind of campaign: which stages run, what the planner enqueues, how the report is written."""

    kind: str
    #: the edge the planner fills
    plan_edge: str = C.EDGE_REQUESTS
    #: what one message of the plan is, for the summary ("planned 3 cities")
    plan_unit: str = "requests"
    #: whether the kind keeps records its stages read back in the state folder (a crawl: sampling/, sites.csv,
    #: images), so that on Redis every process must share one state folder: checked at start
    #: (:func:`geoagent.runtime.backend.check_one_state_folder`, redis41 #1). An evaluation keeps its answers and
    #: results on the server; its folder holds this machine's own files only (manifest, plan keys, progress)
    one_state_folder: bool = False

    @abc.abstractmethod
    def stages(self, cfg: Any) -> list[Stage]:
        """The campaign's stages in data-flow order."""

    @abc.abstractmethod
    async def plan(self, cfg: Any, ctx: StageContext) -> Iterable[Message]:
        """Every message of ``plan_edge`` (keys stable across runs, so re-planning is a no-op)."""

    async def report(self, cfg: Any, ctx: StageContext, outcome: "Outcome") -> list[Path]:
        """Write the campaign's report files under ``state/<campaign>/report``; return their paths."""
        return []

    def summary_lines(self, cfg: Any, ctx: StageContext, outcome: "Outcome") -> list[str]:
        """Extra lines for the end-of-run summary."""
        return []

    def answer_quality(self, cfg: Any, ctx: StageContext) -> dict[str, AnswerQuality]:
        """Per model (``[[models]]`` name), the answers the report counted and how many of them parsed,
        for :func:`unusable_answer_lines` (called after :meth:`report`); {} when the kind parses no answers
        (a generic campaign, a crawl) or counted none. Kinds that parse answers override it."""
        return {}

    #: results tables this kind always exports, empty ones too, with their declared schema
    #: (:data:`geoagent.runtime.export.TABLE_SCHEMAS`): a campaign with no answer yet still writes them
    results_tables: tuple[str, ...] = ()

    def exported_tables(self) -> frozenset[str]:
        """Names (file stems) of the Parquet tables :meth:`export` writes whatever the store holds: the stored
        model responses, the spend table and :attr:`results_tables`. ``run.py export --out DIR`` refuses a folder
        holding another campaign's file of one of these names (``geoagent.cli``). Kinds exporting tables of their
        own (a crawl) add them."""
        from geoagent.runtime.export import RESPONSES_TABLE, SPEND_TABLE

        return frozenset({RESPONSES_TABLE, SPEND_TABLE, *self.results_tables})

    def export(self, cfg: Any, store: Any, out_dir: str | Path | None = None) -> list[Any]:
        """Write the campaign's results as Parquet and CSV (end of a run and ``run.py export``); return the
        :class:`~geoagent.runtime.export.ExportedTable` list. Default: every results table of the response
        store (:attr:`results_tables` also when empty) and the stored model responses, under ``out_dir``
        (``run.py export --out DIR``; None: ``state/<campaign>/``)."""
        from geoagent.runtime.export import export_all

        return export_all(store, out_dir or cfg.state_dir(), cfg=cfg, tables=self.results_tables)

    def empty_plan_reason(self, cfg: Any) -> str:
        """Why the plan was empty, for the error a first run that plans nothing ends with (called after
        :meth:`plan`; kinds override it to name the input that was empty)."""
        if not getattr(cfg, "models", None):  # break34 config #5: a file without [[models]] blamed its data paths
            return (f"campaign {cfg.name!r} planned 0 {self.plan_unit}: the config has no [[models]] entry, so there is "
                    "no model to ask; add one (geoagent/configs/example.toml shows every key)")
        return (f"campaign {cfg.name!r} planned 0 {self.plan_unit}: its inputs hold nothing to do "
                "(check the config's data paths and filters)")

    def scored_rows(self, ctx: StageContext) -> tuple[str, str, str | None, Collection[str]] | None:
        """``(table, edge, output edge, plan keys)`` when a stage of this kind writes one row of results table
        ``table`` per task of ``edge`` under the task's key before it acknowledges the task and puts its output on
        ``output edge`` (GeoVerify's and GeoHint's scorer), with the current plan's task keys (set by :meth:`plan`);
        None (the default) otherwise. A planned task done on ``edge`` whose row is gone was removed outside
        geoagent: the run reopens it (:func:`rescore_lost_rows`)."""
        return None

    def tasks_to_reopen(self, cfg: Any, ctx: StageContext) -> list[tuple[str, list[str], str]]:
        """``(edge, task keys, why)`` of tasks done by an earlier run that this run is to handle again, though the
        plan (whose keys are no-ops once done) does not bring them back: a crawl's sites whose candidates' ratings
        failed alone and are to be asked again (:meth:`geoagent.crawl.campaign.CrawlCampaign.tasks_to_reopen`). The
        engine moves those done back to ready before the workers start (:func:`reopen_kind_tasks`); called after
        :meth:`plan`, on real runs only. Default: none."""
        return []

    async def refresh_scored_rows(self, cfg: Any, ctx: StageContext) -> list[str]:
        """Bring the stored scored rows up to this code's rules where that needs no model call, before the workers
        start (GeoVerify: answers read by an earlier verdict parser are parsed again from their stored text,
        :mod:`geoagent.geoverify.reparse`; GeoHint: also geocoded again where the place read changed,
        :mod:`geoagent.geohint.reparse`, by the process that runs the geocoder: ``ctx.services``
        :data:`~geoagent.constants.SERVICE_OWN_STAGES`); return the lines for stderr. Default: nothing to do."""
        return []

    def manifest_extra(self, cfg: Any) -> dict[str, Any]:
        """Kind-specific fields recorded in each run's manifest entry (e.g. GeoHint's echo rule)."""
        return {}

    def config_at_end(self, cfg: Any, ctx: StageContext) -> Any | None:
        """The config the run ended with, when it took in more of its config file while it ran (a ``--watch``
        crawl planning cities added to ``[[crawl.cities]]``), for the manifest
        (:meth:`geoagent.runtime.manifest.Manifest.stop_run`), so the next run's drift check compares against
        what ran; ``cfg`` is the config as written. None (the default): the config of its start."""
        return None

    def plan_warnings(self, cfg: Any) -> list[str]:
        """Warnings about the plan just made (called after :meth:`plan`; e.g. images sent as placeholder
        pixels, :mod:`geoagent.image_files`): the dry run prints each as a ``warning:`` line; a real run's
        kind puts them in its summary lines."""
        return []

    def check_config_change(self, cfg: Any) -> None:
        """Refuse a run of ``cfg`` (and its dry run, and every ``--stages`` process) whose config differs from the
        one recorded for the campaign's earlier runs in a way its stored work cannot follow: raise (the CLI exits 2).
        Called by :func:`run_campaign` before anything is created, written or called, so a refusal loses and
        rewrites nothing and the manifest does not record the refused config, and again under the campaign's
        :class:`PlanLock` (review44b #1: a run started together with another checks once that one's plan is queued
        and its config recorded); must only read. Other changes are the
        config-drift check's, after planning (:func:`config_drift_after_plan`). Default: no refusal; GeoVerify
        refuses another ``[geoverify] tau_m`` over stored work (:func:`geoagent.geoverify.tau_guard.
        check_tau_unchanged`, fixtaurefuse43)."""

    def config_change_note(self, cfg: Any) -> str | None:
        """One line for ``status`` of ``cfg`` when :meth:`check_config_change` would refuse a run of this file
        (review44b #6d: ``status`` of a GeoVerify config at another tau than the campaign's work said nothing of
        it), None otherwise. Must only read. Default: None."""
        return None

    def check_change_after_plan(self, cfg: Any, changes: Any, *, tasks: int, done: int, answers: int) -> None:
        """The backstop of :meth:`check_config_change`, called by a real run once its plan is made and before any of
        it is queued (:func:`check_change_after_plan`; review44b #1): raise when ``changes`` (the
        :class:`~geoagent.runtime.manifest.ConfigChanges` since the campaign's last recorded run) hold a change its
        work cannot follow while the campaign holds work (``tasks`` in the plan edge's queue, ``done`` of them,
        ``answers`` stored), instead of the config-drift warning. Default: none; GeoVerify refuses a changed
        ``[geoverify] tau_m`` (:func:`geoagent.geoverify.tau_guard.check_tau_drift`)."""

    def plan_refusals(self, cfg: Any) -> list[str]:
        """Problems of the plan just made that a real run refuses to start for (exit 2), kept instead of raised
        when :meth:`plan` ran for a dry run (``ctx.services[constants.SERVICE_DRY_RUN]``; e.g. photos without a file
        for a real model, :func:`geoagent.image_files.check_missing`): the dry run still estimates the campaign,
        prints each as a ``warning:`` line beside the missing API keys and exits 2 naming them all. Empty by
        default."""
        return []

    def plan_headlines(self, cfg: Any) -> list[str]:
        """Short lines the dry run prints first, under its headline (called after :meth:`plan`): what one of
        :meth:`plan_refusals` takes to fix, said before an estimate of a plan ``run`` would refuse (GeoHint's
        synthetic images for a real model, newuser41 #A). Empty by default."""
        return []

    def missing_photos(self, cfg: Any) -> frozenset[str]:
        """Image ids of the plan just made (called after :meth:`plan`) whose photo has no file yet (not
        synthetic placeholders by design, :attr:`geoagent.image_files.MissingImages.photo_ids`): the dry run
        estimates their requests to real models at the photo size the campaign will send
        (:meth:`expected_photo`), not the placeholder's. Empty by default."""
        return frozenset()

    def expected_photo(self, cfg: Any) -> tuple[tuple[int, int], str]:
        """``((width, height) in px, what it is)``: the photo the run will send for an image of
        :meth:`missing_photos`, which the dry run estimates its requests at (called after :meth:`plan`).
        Default: :data:`geoagent.workers.images.EXPECTED_PHOTO_SIZE_PX` (1024 x 768, the crawl's default
        thumbnail); GeoVerify and GeoHint read the ``thumb_field`` of the crawl their release folder is
        (:func:`geoagent.image_files.expected_photo`)."""
        from geoagent.image_files import expected_photo

        return expected_photo(None)

    def required_keys(self, cfg: Any) -> list[tuple[str, str]]:
        """``(variable NAME, what needs it)`` for every secret the kind's own API clients need besides the
        ``[[models]]`` keys (e.g. the crawl's Mapillary token); :func:`check_keys` looks them all up before
        a run creates anything."""
        return []

    def key_value_problem(self, cfg: Any, var: str, value: str) -> str | None:
        """Why the value of ``var`` (one of :meth:`required_keys`, set) cannot be the key it is for, e.g. the crawl's
        Mapillary token not starting with ``MLY|``; None (default) when it may be. :func:`check_keys` refuses the run
        for it before anything is created, the dry run warns. The message names the variable, never the value."""
        return None

    def idle_handoff(self, cfg: Any, ctx: StageContext, *, export: bool, complete: bool,
                     snapshot: Any = None) -> list[str]:
        """Write the tables another campaign reads from this one (its hand-off), called by a ``--watch`` run
        each time every queue has drained after new work was done (:func:`idle_handoff_tick`), so the folder
        is usable while the process keeps watching instead of only after it stops. ``export``: the run
        exports (``run_campaign(export=...)``, True for ``run.py``); ``complete``: nothing is dead-lettered either (what a run's end calls
        ``complete``); ``snapshot``: what :meth:`handoff_snapshot` returned for this hand-off. Writes must be
        atomic and idempotent (the end of the run writes them again). It runs in a worker thread
        (:class:`IdleHandoffTick`), never two at once, so it must not touch the event loop, and must read the
        process's mutable state (sets and dicts the running stages add to) only from ``snapshot``: iterating a
        live one while the loop adds to it fails ("Set changed size during iteration"). Files, databases with
        their own locking and immutable values (the config, paths) may be read directly. Returns lines to
        print (empty: nothing to hand off; the default)."""
        return []

    #: what the files of :meth:`plan_inputs` are called in the watch lines (``"trial table"``)
    plan_inputs_label: str = "plan inputs"

    def plan_inputs(self, cfg: Any) -> list[Path]:
        """Files :meth:`plan` reads that another process may rewrite while a ``--watch`` run of this campaign
        goes on (a watching crawl's idle hand-off replaces the ``verify_trials.csv`` a GeoVerify or GeoHint
        campaign over its folder reads). A ``--watch`` run fingerprints them (content hashes; an absent file
        counts as absent) before it plans and again at each idle point (every queue drained), and when they
        changed it plans again and queues the new tasks (:class:`WatchReplanTick`). ``[]`` (the default):
        nothing is watched, the run keeps the plan it started with."""
        return []

    def handoff_snapshot(self, cfg: Any, ctx: StageContext) -> Any:
        """Called on the event loop's thread right before an idle hand-off starts in its worker thread: copies
        of the mutable in-process state :meth:`idle_handoff` reads (e.g. the crawl's per-API request counts,
        whose hosts the running stages add to), handed to it as ``snapshot``, so the thread reads only data no
        one changes. None by default (a kind whose hand-off reads no such state)."""
        return None


    def dry_run_outline(self, cfg: Any) -> list[str]:
        """Lines (indented) the dry run prints after its estimate about what a run does beyond the planned model
        calls: for a kind whose model calls arise along the way (the crawl's audits), what those calls may cost;
        for GeoHint, the public services its geocoder calls. ``[]`` by default."""
        return []

    def params_mix(self, cfg: Any, ctx: StageContext) -> dict[str, list[tuple[dict[str, Any], int]]]:
        """Stored answers per model and distinct request settings, for the models with more than one
        (:func:`geoagent.runtime.drift.params_mix`); this default counts every stored answer, a kind whose
        report covers only some (GeoVerify: the current plan's trials) narrows it."""
        from geoagent.runtime.drift import params_mix

        store = ctx.services.get("store")
        return params_mix(store.iter_response_meta()) if store is not None and hasattr(store, "iter_response_meta") else {}

    def status_lines(self, cfg: Any) -> list[str]:
        """Lines ``run.py status`` adds for this kind, read from the campaign's files (never changing them;
        e.g. the crawl: why its folder has no ``verify_trials.csv``); ``[]`` by default."""
        return []


def load_kind(kind: str) -> CampaignKind:
    """Instantiate the campaign kind ``kind`` (raises ``KeyError`` naming the known kinds)."""
    try:
        target = KINDS[kind]
    except KeyError:
        raise KeyError(f"unknown campaign kind {kind!r}; known: {sorted(KINDS)}") from None
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)()


def reused_phrase(n: int, *, others_at_start: bool = False) -> str:
    """What the ``this run:`` line says of ``n`` request tasks this run finished from the response store:
    ``"2 answers reused (stored by an earlier run, used instead of a call)"``; ``others_at_start`` (another run of
    the campaign was going when this one started, :attr:`Outcome.others_at_start`): ``"(stored by another run of
    the campaign, ...)"``, since that run may have stored them (e.g. one killed after storing, before its ack);
    for ``n`` = 0 the parenthesis only defines the term and keeps the usual wording."""
    by = "another run of the campaign" if others_at_start and n > 0 else "an earlier run"
    return f"{n} answer{'s' if n != 1 else ''} reused (stored by {by}, used instead of a call)"


def done_before_phrase(n: int, meanwhile: int = 0, *, known: bool = True, others_at_start: bool = False) -> str:
    """``"; 120 requests done by earlier runs"`` for ``n`` planned requests already answered when this run
    started (nothing left to ask for them), then ``"; 20 requests done meanwhile by other runs of the campaign"``
    for ``meanwhile`` answered while it ran by another ``run`` process of the campaign (they share the queues);
    each left out when 0, ``""`` when both are. ``known=False``: the answers at the start were not read, so
    ``n`` (every answer not this process's) is ``"done by other runs"``, earlier or at the same time.
    ``others_at_start``: another run of the campaign was going when this one started (:attr:`Outcome.others_at_start`),
    so ``n`` reads ``"done before this run started (another run of the campaign was already going)"``: some of
    them are that run's, not an earlier run's."""
    def reqs(k: int) -> str:
        return f"{k} request{'s' if k != 1 else ''}"

    if not known:
        return f"; {reqs(n)} done by other runs" if n > 0 else ""
    before = ("done before this run started (another run of the campaign was already going)" if others_at_start
              else "done by earlier runs")
    return ((f"; {reqs(n)} {before}" if n > 0 else "")
            + (f"; {reqs(meanwhile)} done meanwhile by other runs of the campaign" if meanwhile > 0 else ""))


#: the spend line's clause when every model is simulated (:attr:`Outcome.spend_note`)
SIMULATED_SPEND_NOTE = "at the config's illustrative prices; nothing billed: every model is simulated"


@dataclass(slots=True)
class Outcome:
    """The end of one run of a campaign."""

    campaign: str
    status: str
    exit_code: int
    planned: int
    counts: dict[str, QueueCounts]
    spend: dict[str, Any] | None
    dead: dict[str, list[DeadLetter]] = field(default_factory=dict)
    elapsed_s: float = 0.0
    report_files: list[Path] = field(default_factory=list)
    export_files: list[Path] = field(default_factory=list)
    extra_lines: list[str] = field(default_factory=list)
    #: stored answers of tasks an earlier plan held and the current one does not (the kind's scope, its "Left out of
    #: scoring" line): the queues' done counts hold them beside the planned ones, which the plan line says (walk46
    #: #13: "planned 345 requests" above "requests: ... done 515" read as a miscount); 0 when none or not known
    not_planned: int = 0
    #: why the run stopped early, one line each (e.g. a model's authentication failure)
    stop_reasons: list[str] = field(default_factory=list)
    #: what one planned message is ("requests"; a crawl plans "cities")
    plan_unit: str = "requests"
    #: a clause after the spend line's figures when every model of the run is simulated (provider "simulated" or
    #: a sandbox model fake: a *.sandbox.invalid one, or stored answers marked by one on a port of its own): its prices are the config's illustrative ones, nothing was billed
    spend_note: str = ""
    #: the stages this process ran when only some were asked for (``--stages``), else empty
    own_stages: list[str] = field(default_factory=list)
    #: what lifts the budget stops this run met (:attr:`geoagent.runtime.stage.BudgetStop.fix`), in order; empty: the
    #: USD cap's
    budget_fixes: list[str] = field(default_factory=list)
    #: model calls this process settled (paid) in this run; None when not measured (e.g. a dry run)
    process_calls: int | None = None
    #: request tasks this process's model caller finished in this run (new calls + answers reused from the store);
    #: None when this process ran no model caller
    process_answered: int | None = None
    #: per model: model calls in the plan (request tasks) and stored answers (cumulative over runs, at most
    #: the planned number); empty when the plan holds no model calls (a crawl) or nothing was measured
    planned_by_model: dict[str, int] = field(default_factory=dict)
    answered_by_model: dict[str, int] = field(default_factory=dict)
    #: stored answers to the plan's requests when this run started (once planned, before any worker ran; the sum
    #: of :attr:`answered_by_model` read then): those are "done by earlier runs", the rest this process did not do
    #: were done meanwhile by another run of the campaign (two ``run`` processes at once share the queues); None
    #: when not read (every answer not this process's is then said done by other runs)
    answered_at_start: int | None = None
    #: of :attr:`process_calls`, the answers ``replay`` models read from their recorded file (no model was
    #: called), per file as the config names it
    process_replayed: dict[str, int] = field(default_factory=dict)
    #: whether the campaign has a model that is not ``replay`` (else the line names no "new model calls")
    calls_models: bool = True
    #: of :attr:`planned`, the messages a stage planned while the run watched (a crawl ``--watch`` picking up
    #: cities added to the config; :data:`geoagent.constants.SERVICE_PLANNED_DURING_RUN`)
    planned_while_watching: int = 0
    #: how :attr:`planned_while_watching` came about, in the summary's ``planned`` line
    watched_how: str = "added to the config while watching"
    #: per edge: dead tasks set aside because the current plan no longer holds them (reason
    #: :data:`~geoagent.runtime.queue.SUPERSEDED`; :func:`set_aside_unplanned`): not failures, not missing
    superseded: dict[str, int] = field(default_factory=dict)
    #: the signal (``"SIGINT"``) that came after every task had ended (report, export), cutting nothing short
    late_signal: str | None = None
    #: the signal (``"SIGINT"``) that stopped the pipeline, also one that cut nothing short (its stop left nothing
    #: queued: the run ends ``complete``); None when no signal stopped it. A caller that runs more (``demo``) stops
    stop_signal: str | None = None
    #: the queues are shared with other machines (``[backend] kind = "redis"``): work this process left queued
    #: may be taken by processes elsewhere, so the summary does not call it left by this process's stop
    shared_queues: bool = False
    #: another process of the campaign held its run lock on this machine when this run took it (a second shell
    #: joining a running campaign): the answers stored at the start are then not all "done by earlier runs"
    others_at_start: bool = False

    @property
    def missing(self) -> int:
        """Tasks that ended in a dead-letter queue on any edge (missing results, never wrong answers), less those
        set aside as no longer planned (:attr:`superseded`)."""
        return sum(c.dead for c in self.counts.values()) - sum(self.superseded.values())

    def interim_note(self) -> str | None:
        """A sentence for reports written when the run stopped with work pending, else None; it counts the answers
        received but not parsed yet (:meth:`unparsed_line`), names each model's answered / planned calls and warns
        about models whose statistics are not comparable (:meth:`coverage_warnings`)."""
        pending = sum(c.ready + c.leased for c in self.counts.values())
        if self.status == "complete" or not pending:
            return None
        # walk43 #4: "with 1900 task(s) still queued or in flight" beside "Answered per model: a 40/950, b 40/950"
        # read as nothing done: a task is queued on one stage at a time, so say which and how many were answered
        left = f"{pending} task(s) not yet through the last stage"
        answered = self._answered_text()
        if self.shared_queues:  # Redis: other machines' processes may still be working on them
            note = (f"this machine's run ended '{self.status}' with {left} of the campaign (queued or in flight in "
                    f"the shared queues{answered}; processes on other machines may still be working on them); "
                    "the tables cover only what was answered so far (the process that finds the campaign drained "
                    "writes the final report, on its machine; re-run the same command here to take part again)")
        else:
            note = (f"the run ended '{self.status}' with {left} (queued or in flight on one of the stages{answered}); "
                    f"the tables cover only what was answered so far ({self._finish_hint()})")
        unparsed = self.unparsed_line()
        if unparsed:  # answers already received (and paid) that are in no table yet
            note += ". " + unparsed.strip()[0].upper() + unparsed.strip()[1:]
        if self.planned_by_model:
            note += f". Answered per model: {self.coverage_text()}"
            warnings = self.coverage_warnings()
            if warnings:
                note += ". WARNING: " + "; ".join(warnings)
        return note

    def _answered_text(self) -> str:
        """``"; 80 of 1900 model requests answered"`` (every model's answered / planned calls,
        :attr:`planned_by_model`), or ``""`` for a run that planned no model request (a crawl)."""
        planned = sum(self.planned_by_model.values())
        if not planned:
            return ""
        got = sum(min(p, self.answered_by_model.get(n, 0)) for n, p in self.planned_by_model.items())
        return f"; {got} of {planned} model requests answered"

    def _budget_fix(self) -> str:
        """What lifts this run's budget stop(s): :attr:`budget_fixes`, else the USD cap's fix."""
        return "; ".join(self.budget_fixes) or BudgetStop.fix

    def _finish_hint(self) -> str:
        """What finishes a run stopped with work pending, by its status: a budget stop needs a higher cap (the
        same command alone stops again at once, walk33 #2; another cap's stop says its own fix), an authentication
        stop a working key."""
        if self.status == "budget exhausted":
            if other_budget_fixes(self.budget_fixes):
                return self._budget_fix()
            if self.own_stages:  # fixstagesbudget43: a --stages process's own command makes no model call
                return ("raise [budget] cap_usd, then run the stages the cap stopped (`run.py run CONFIG`, every stage) "
                        "to finish")
            return "raise [budget] cap_usd, then re-run the same command to finish"
        if self.status == STATUS_AUTH:
            return "fix the API key variable the run's summary names, then re-run the same command to finish"
        return "re-run the same command to finish"

    def coverage_text(self) -> str:
        """``a 54/80 (68%), ge 0/40 (0%)``: each model's answered / planned model calls."""
        parts = []
        for name, planned in self.planned_by_model.items():
            got = min(planned, self.answered_by_model.get(name, 0))
            parts.append(f"{name} {got}/{planned} ({got / planned:.0%})" if planned else f"{name} 0/0")
        return ", ".join(parts)

    def coverage_warnings(self, *, far_fewer: float = COVERAGE_FAR_FEWER) -> list[str]:
        """One sentence per model whose share of planned calls answered is 0, or below ``far_fewer`` x the best
        model's share: its statistics rest on no or far fewer calls than the others', so comparisons between
        the models are not like for like. Empty when every model is covered alike (or only one model ran)."""
        shares = {n: min(p, self.answered_by_model.get(n, 0)) / p for n, p in self.planned_by_model.items() if p}
        if len(shares) < 2:
            return []
        best_name = max(shares, key=lambda n: shares[n])
        best = shares[best_name]
        out = []
        for name, share in shares.items():
            planned = self.planned_by_model[name]
            got = min(planned, self.answered_by_model.get(name, 0))
            if got == 0 and best > 0:
                out.append(f"{name} has no answer (0 of {planned} planned calls): it has no statistics and "
                           "cannot be compared with the other models")
            elif share < far_fewer * best:
                out.append(f"{name} has far fewer answers ({got} of {planned} planned, {share:.0%}, against "
                           f"{best:.0%} for {best_name}): its statistics are not comparable with the other models'")
        return out

    def unsent_line(self) -> str | None:
        """``  N requests not sent yet: left queued by the interrupt; re-run the same command to send them`` when an
        interrupt left model requests queued (ready or leased on the ``requests`` edge) and this process runs the
        model caller (``N requests not answered yet: ...`` when the campaign's ledger holds unknown-outcome calls:
        such a call's request was sent, possibly billed, and went back to the queue); None otherwise (a budget stop has its own line; a ``--stages`` process without the model
        caller leaves them to the model caller's process). Redis (:attr:`shared_queues`): "left in the shared queues
        (other processes of the campaign ... may be sending them)"; a run started beside another run of the campaign
        (:attr:`others_at_start`): "left in the campaign's queues (another run ... may be sending them)"."""
        n = self.remaining(C.EDGE_REQUESTS)
        if self.status != "interrupted" or not n or (self.own_stages and C.STAGE_MODEL_CALLER not in self.own_stages):
            return None
        if self.shared_queues:
            return (f"  {n} request{'s' if n != 1 else ''} not sent yet: left in the shared queues (other processes of "
                    "the campaign, on this machine or other machines, may be sending them); re-run the same command "
                    "here to take part again")
        if self.others_at_start:  # another run was going when this one started: it may be sending them now
            return (f"  {n} request{'s' if n != 1 else ''} not sent yet: left in the campaign's queues (another run "
                    "of the campaign was going when this one started and may be sending them); re-run the same "
                    "command to take part again")
        unknown_calls = int((self.spend or {}).get("unknown_calls") or 0)
        if unknown_calls:
            # a request whose call's outcome is unknown (timeout, reset, unusable 2xx body) went back to the queue
            # after it was sent, possibly billed: "not sent yet" would deny that spend (walkthrough s16)
            return (f"  {n} request{'s' if n != 1 else ''} not answered yet: left queued by the interrupt (some may "
                    "have been sent already: a request whose call had an unknown outcome, "
                    f"{unknown_calls} such call{'s' if unknown_calls != 1 else ''} above, went back to the queue to be "
                    "sent again); "
                    "re-run the same command to send them")
        return (f"  {n} request{'s' if n != 1 else ''} not sent yet: left queued by the interrupt; re-run the same "
                "command to send them")

    def unparsed_line(self) -> str | None:
        """``  N model answers received (paid where the model charges) but not parsed yet: left queued by the
        interrupt; re-run the same command to parse them (no new model call)`` when a stop (interrupt, budget
        stop) left answers on the ``responses`` edge (ready or leased) and this process runs the parser; None
        otherwise (a ``--stages`` process without the parser leaves them to the parser's process)."""
        left_by = {"interrupted": "the interrupt", "budget exhausted": "the budget stop"}.get(self.status)
        n = self.remaining(C.EDGE_RESPONSES)
        if not left_by or not n or (self.own_stages and C.STAGE_PARSER not in self.own_stages):
            return None
        if self.shared_queues:
            return (f"  {n} model answer{'s' if n != 1 else ''} received (paid where the model charges) but not "
                    "parsed yet: left in the shared queues (processes on other machines may be parsing them); re-run "
                    "the same command here to take part again (no new model call)")
        return (f"  {n} model answer{'s' if n != 1 else ''} received (paid where the model charges) but not parsed "
                f"yet: left queued by {left_by}; re-run the same command to parse them (no new model call)")

    def remaining(self, edge: str = C.EDGE_REQUESTS) -> int:
        c = self.counts.get(edge)
        return c.ready + c.leased if c else 0

    def headline(self) -> str:
        """The summary's first line: ``campaign X: <status> (<s> s)``; for a ``--stages`` process whose
        stages finished while other stages still work, ``campaign X: stages A, B finished; campaign not
        complete: other stages still have work (<s> s)``."""
        if self.status == STATUS_STAGES_DONE:
            return (f"campaign {self.campaign}: stage{'s' if len(self.own_stages) != 1 else ''} "
                    f"{', '.join(self.own_stages)} finished; campaign not complete: other stages still have work "
                    f"({self.elapsed_s:.1f} s)")
        return f"campaign {self.campaign}: {self.status} ({self.elapsed_s:.1f} s)"

    def this_run_line(self) -> str | None:
        """``  this run: N new model calls; M answers reused (stored by an earlier run, used instead of a call); K
        requests done by earlier runs`` from this process's own figures
        (:attr:`process_calls`, :attr:`process_answered`; ``by this process`` for a ``--stages`` process, and a
        process without the model caller says so), or None when they were not measured (a dry run). M counts
        request tasks this run finished with an answer already in the response store (a task queued again whose
        answer an earlier run had stored: no call); K (:func:`done_before_phrase`, left out when 0) the stored
        answers of the plan whose tasks were done before this run started (a re-run of a finished campaign:
        ``0 new model calls; 0 answers reused (...); 120 requests done by earlier runs``).

        Answers of ``replay`` models are no model call: they read ``K answers replayed from <file>``
        (:attr:`process_replayed`), and a campaign of replay models only names no new model calls."""
        if self.process_calls is None or self.status == "dry run":
            return None
        own = self.own_stages
        answered = self.process_answered
        # a crawl process of a --stages split that ran an auditor made model calls without a model caller (crawl40
        # #6: "no model calls by this process" beside its 29 vision calls): those go the common way below
        if answered is None and own and not self.process_calls:
            who = ("the auditors' process reports their calls" if self.plan_unit == "cities"
                   else "the model caller's process reports its calls")
            return (f"  this run: no model calls by this process (it ran stage{'s' if len(own) != 1 else ''} "
                    f"{', '.join(own)}; {who})")
        settled = int(self.process_calls)
        reused = max(0, (answered or 0) - settled)  # answered None: a campaign kind without a model caller
        new_calls = max(0, settled - sum(self.process_replayed.values()))
        parts = [f"{new_calls} new model call{'s' if new_calls != 1 else ''}"] if (self.calls_models or new_calls) else []
        # every replay file when replay is all there is, else those that answered something
        parts += [f"{n} answer{'s' if n != 1 else ''} replayed from {path}" for path, n in self.process_replayed.items()
                  if n or not parts]
        others = max(0, sum(self.answered_by_model.values()) - (answered or 0)) if answered is not None else 0
        if self.answered_at_start is None:
            done = done_before_phrase(others, known=False)
        else:  # answered before this run started, and the rest another run of the campaign did meanwhile
            before = min(others, max(0, self.answered_at_start))
            done = done_before_phrase(before, others - before, others_at_start=self.others_at_start)
        return (f"  this run: {'; '.join(parts)}{' by this process' if own else ''}; "
                f"{reused_phrase(reused, others_at_start=self.others_at_start)}"
                f"{done}")

    def summary_with_this_run(self, notes: NotesOnce | None = None) -> str:
        """:meth:`summary` with :meth:`this_run_line` under its spend line (what ``run`` and ``demo`` print);
        ``notes`` as there."""
        lines = self._summary_lines()
        line = self.this_run_line()
        if line is not None:
            at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("  spend ")), len(lines))
            lines.insert(at, line)
        return (notes or NotesOnce()).say("\n".join(lines))

    def summary(self, notes: NotesOnce | None = None) -> str:
        """The run's summary, one line per fact (headline, plan, queues, spend, the campaign kind's lines, reports).

        Each note is said once (:class:`geoagent.notes.NotesOnce`: the cut-off definition, a simulated-answers
        banner, a GeoVerify small-n note, :data:`geoagent.notes.NOTE_OPENINGS`): within this summary, and with ``notes`` (one instance shared by everything a
        process prints, e.g. the demo's three summaries and its tables) across them; None: a fresh one."""
        return (notes or NotesOnce()).say("\n".join(self._summary_lines()))

    def _summary_lines(self) -> list[str]:
        """The summary's lines before any note is said once (:meth:`summary`)."""
        lines = [self.headline()]
        lines.extend(f"  {r}" for r in self.stop_reasons)
        watched = (f" ({self.planned_while_watching} of them {self.watched_how})"
                   if self.planned_while_watching else "")
        earlier = (f" (the done counts below also hold {self.not_planned} of an earlier plan, no longer planned: "
                   "kept, not scored)" if self.not_planned else "")
        lines.append(f"  planned {self.planned} {self.plan_unit}{watched}{earlier}")
        for edge, c in self.counts.items():
            aside = self.superseded.get(edge, 0)
            lines.append(f"  {edge:>10}: ready {c.ready}  leased {c.leased}  done {c.done}  dead {c.dead}"
                         + (f" ({aside} superseded)" if aside else ""))
        if self.spend:
            s = self.spend
            # money still held by open reservations (calls in flight, e.g. another --stages process's) is shown
            # when there is any, so the line never hides spend that `status` will count
            held = float(s.get("reserved_usd") or 0.0)
            lines.append(
                f"  spend {usd(s.get('spent_usd'))} settled + {usd(s.get('unknown_usd'))} unknown-outcome"
                + (f" + {usd(held)} reserved by calls still open" if held > 0 else "")
                + f" of cap {usd(s.get('cap_usd'))}; calls {s.get('calls', 0)}"
                + (f" ({self.spend_note})" if self.spend_note and float(s.get("spent_usd") or 0.0) > 0 else "")
            )
            lines.extend(spend_detail_lines(s))
            lines.extend(overrun_lines(s))
            lines.extend(over_cap_lines(s))
            lines.extend(unreported_usage_lines(s))
        if self.status == STATUS_AUTH and (C.EDGE_REQUESTS not in self.counts or not self.remaining()):
            # no model requests edge (the crawl's refused Mapillary token or auditor key), or none left (GeoHint's
            # refused geocoder): the stop line above says what is queued and what to do
            lines.append("  not done: the work above stays queued untouched; do what the line above says (a key "
                         "variable: set it; a billing refusal: add credit or raise the provider's limit) and re-run the "
                         "same command")
        elif self.status == STATUS_AUTH:
            lines.append(f"  not dispatched: {count_text(self.remaining(), 'request')} stay queued (those of the model(s) above, "
                         "and any other work left); set the key variable (for a billing refusal: add credit or raise "
                         "the provider's limit) and re-run the same command")
        if self.status == "budget exhausted":
            if C.EDGE_REQUESTS in self.counts:
                left = f"{count_text(self.remaining(), 'request')} not dispatched"
            else:  # no model requests edge (the crawl): its paid calls come from tasks on its own edges (walk28 #4)
                left = f"{count_text(sum(c.ready + c.leased for c in self.counts.values()), 'task')} left queued"
            lines.append(f"  budget exhausted: {left}; {self._budget_fix()}")
            s = self.spend or {}
            if not s.get("calls") and not any(float(s.get(k) or 0.0) for k in ("spent_usd", "unknown_usd", "reserved_usd")):
                # nothing booked by any run: the very first call's worst case was over the cap on its own
                lines.append(f"  not one call fitted under the cap: a single call's worst-case reservation (prompt, "
                             f"images and all of max_output_tokens) is above cap_usd {usd(s.get('cap_usd'))}; "
                             "`run CONFIG --simulate` prints that worst case per call and how many calls a cap pays for")
        unsent = self.unsent_line()
        if unsent:
            lines.append(unsent)
        unparsed = self.unparsed_line()
        if unparsed:
            lines.append(unparsed)
        if self.planned_by_model and self.status not in ("complete", "dry run") and self.remaining():
            when = "before the cap" if self.status == "budget exhausted" else "so far"
            lines.append(f"  answered {when}, per model (stored answers / planned calls): {self.coverage_text()}")
            lines.extend(f"  !!! WARNING: {w}" for w in self.coverage_warnings())
        aside = sum(self.superseded.values())
        if aside:
            lines.append(f"  set aside: {aside} task{'s' if aside != 1 else ''} superseded, not in the current plan "
                         "(the config changed since an earlier run queued them): never sent, or failed before they "
                         "were set aside (the reason keeps that failure); not counted as missing; "
                         "`run.py dead CONFIG` lists them, `--requeue` brings them back")
        if self.missing:
            lines.append(f"  missing: {count_text(self.missing, 'task')} dead-lettered (list them with `run.py dead CONFIG`, retry with `--requeue`); scorers exclude them")
            from geoagent.status import describe_reason

            for edge, items in self.dead.items():
                for d in items[:DEAD_LISTED]:
                    lines.append(f"    {edge}/{_cut(one_line_text(d.key), DEAD_KEY_CHARS)} (deliveries {d.attempts}): "
                                 f"{_cut(describe_reason(d.reason), DEAD_REASON_CHARS, DEAD_FULL_TEXT)}")
                # a cut list says how many it left out and where they are (it listed 3 of 4, silently)
                on_edge = self.counts[edge].dead if edge in self.counts else len(items)
                more = max(on_edge - self.superseded.get(edge, 0), len(items)) - min(len(items), DEAD_LISTED)
                if more > 0:
                    lines.append(dead_lines_hint_example(edge, more))
        lines.extend(self.extra_lines)
        for p in self.report_files:
            lines.append(f"  report: {p}")
        for p in self.export_files:  # each table's Parquet file; its CSV is written beside it
            lines.append(f"  export: {p} (and {Path(p).with_suffix('.csv').name})")
        return lines


#: the summary lists at most this many dead letters per edge, then says how many more (`run.py dead CONFIG`)
DEAD_LISTED = 3


def dead_lines_hint_example(edge: str, more: int) -> str:
    """The summary line after the first :data:`DEAD_LISTED` dead tasks of ``edge``: how many more there are
    and the command that lists every one (``--limit 0``: ``dead`` lists at most 50 per edge by default)."""
    return f"    ... and {more} more on {edge} (`run.py dead CONFIG --edge {edge} --limit 0` lists them all)"
#: the summary's dead-letter lines: a task key is shown whole up to this many characters (keys are short: an
#: edge's key names its city, site or request), a reason up to DEAD_REASON_CHARS; a longer text ends with
#: DEAD_FULL_TEXT (where to read it whole)
DEAD_KEY_CHARS = 120
DEAD_REASON_CHARS = 400
DEAD_FULL_TEXT = " ... (`run.py dead CONFIG` shows the full text)"


def _cut(text: str, limit: int, more: str = "...") -> str:
    """``text`` whole when it has at most ``limit`` characters, else its first ``limit`` and ``more``."""
    return text if len(text) <= limit else text[:limit].rstrip() + more


#: what unknown-outcome spend is, said wherever a summary or ``status`` shows some (walkthrough 9b: after a
#: ``kill -9`` the summary showed "$0.0243 unknown-outcome" and nothing tied it to the kill)
UNKNOWN_OUTCOME_MEANING = ("calls whose outcome is unknown (cut by a kill, a timeout or a dropped connection); the "
                           "provider may have billed them, so they count against the cap")


def spend_detail_lines(spend: Mapping[str, Any]) -> list[str]:
    """The lines under a spend line (run summary, ``status``): what the unknown-outcome spend is, when there is
    any (``  unknown-outcome: $0.0243 (1 call): calls whose outcome is unknown ...``,
    :data:`UNKNOWN_OUTCOME_MEANING`), then the spend per model (``spend["by_model"]``,
    :meth:`geoagent.runtime.ledger.Ledger.spend_by_model`): one line per model, ``    NAME: $X settled (N
    calls)`` plus its unknown-outcome and reserved amounts where not zero. Amounts in USD; [] when there is
    nothing to add.

    ``spend["gone_usd"]`` / ``spend["gone_calls"]`` (USD, count; ``status`` sets them,
    :func:`geoagent.status.campaign_status`): the open reservations whose holder process is gone
    (:func:`gone_reservations`, e.g. after a forced exit); a line says the next run books them as
    unknown-outcome spend, or, with ``spend["gone_booked_by"]`` (pids of the campaign's processes still running with
    the model caller, :func:`geoagent.status.campaign_status`), that those book them once their model caller takes up
    one of those requests again, else the next run does (live42 #3). Per model, a ``by_model`` entry's ``gone_usd``
    / ``gone_calls`` (``status`` sets them, :func:`gone_reservations_by_model`) split its open reservations:
    ``+ $X reserved by N calls still open`` for those of live processes and ``+ $Y reserved by K calls of a process
    that is gone`` for the others. Without per-model
    figures (an older record), every model's open reservations read "of a process that is gone" where every open
    reservation is such, else "still open"."""
    out: list[str] = []
    unknown = float(spend.get("unknown_usd") or 0.0)
    if unknown > 0:
        n = int(spend.get("unknown_calls") or 0)
        out.append(f"  unknown-outcome: {usd(unknown)} ({n} call{'s' if n != 1 else ''}): {UNKNOWN_OUTCOME_MEANING}")
    n_gone = int(spend.get("gone_calls") or 0)
    # every open reservation is a gone process's: none is a call in flight
    all_gone = n_gone > 0 and n_gone >= int(spend.get("open_reservations") or 0)
    by = spend.get("by_model") or {}
    per_model = any("gone_calls" in m for m in by.values())  # status: each model's gone share (s14)
    gone_word = "of a process that is gone"
    if by:
        out.append("  spend per model:")
        for name, m in by.items():
            line = f"    {name or '(no model named)'}: {usd(m.get('spent_usd'))} settled ({_calls(m.get('calls'))})"
            if float(m.get("unknown_usd") or 0.0) > 0:
                line += f" + {usd(m.get('unknown_usd'))} unknown-outcome ({_calls(m.get('unknown_calls'))})"
            reserved, n_open = float(m.get("reserved_usd") or 0.0), int(m.get("open_reservations") or 0)
            if reserved > 0 and per_model:
                g_usd, g_n = float(m.get("gone_usd") or 0.0), min(n_open, int(m.get("gone_calls") or 0))
                if n_open > g_n:
                    line += f" + {usd(max(0.0, reserved - g_usd))} reserved by {_calls(n_open - g_n)} still open"
                if g_n:
                    line += f" + {usd(g_usd)} reserved by {_calls(g_n)} {gone_word}"
            elif reserved > 0:
                held = gone_word if all_gone else "still open"
                line += f" + {usd(reserved)} reserved by {_calls(n_open)} {held}"
            out.append(line)
    if n_gone:
        reserved = float(spend.get("reserved_usd") or 0.0)
        share = "" if all_gone else f" of the {usd(reserved)} reserved"
        head = (f"  reserved by a process that is gone: {usd(spend.get('gone_usd'))}{share} ({_calls(n_gone)}; "
                "stopped without closing them: a forced exit or a kill); ")
        bookers = [str(p) for p in spend.get("gone_booked_by") or []]
        if bookers:
            # live42 #3: "the next run" read as if the processes still running would leave them alone; their model
            # caller books them (ledger recovery) once one of those requests comes back to it
            who = (f"process {bookers[0]}" if len(bookers) == 1
                   else "processes " + ", ".join(bookers[:-1]) + f" and {bookers[-1]}")
            one = len(bookers) == 1
            caller = "its model caller takes" if one else "a model caller of theirs takes"
            out.append(head + f"{who} of the campaign, still running, {'books' if one else 'book'} them as "
                       f"unknown-outcome spend at their reservations once {caller} up one of their requests again "
                       "(the gone process's leased tasks are handed back to the queue) or waits for budget room, else "
                       "the next run of the campaign does at its start (they already count against the cap)")
        else:
            out.append(head + "the next run of the campaign books them as unknown-outcome spend at their "
                       "reservations (they already count against the cap)")
    return out


def _calls(n: Any) -> str:
    n = int(n or 0)
    return f"{n} call{'s' if n != 1 else ''}"


def overrun_lines(spend: Mapping[str, Any]) -> list[str]:
    """The warning for calls the provider billed above their reservation (a ledger summary's
    ``overrun_calls`` / ``overrun_usd``); none when there were none. Such a call means the worst case
    assumed too little: more input than estimated (an image or prompt billed above the estimate), or more
    output than ``max_output_tokens`` allows (a provider or gateway that does not honour the limit), so calls in
    flight could pass the cap."""
    n = int(spend.get("overrun_calls") or 0)
    if not n:
        return []
    return [f"  !!! WARNING: {n} call{'s' if n != 1 else ''} billed more than reserved ({usd(spend.get('overrun_usd'))}"
            " above their reservations in all): the provider billed more than the worst case assumed, so calls in "
            "flight could pass the cap (after the first, the model's later calls of that kind in the run reserved at least "
            "what it had billed); "
            "more input than estimated: raise [[models]] image_input_tokens or [budget] "
            "input_estimate_factor; more output than [[models]] max_output_tokens allows: the provider does not "
            "honour the limit (model_responses.parquet lists each call's output_tokens)"]


def over_cap_lines(spend: Mapping[str, Any]) -> list[str]:
    """The line for spend above the cap that overruns (:func:`overrun_lines`) do not explain: the ledger starts no call
    whose worst case could pass the cap in force when it reserves, so the cap was lowered after more than it had
    been spent or reserved (a later config, or another run of the campaign, set a lower ``cap_usd``; walk31 #1: both
    runs ended at $0.3481 of a $0.30 cap with no word why). [] otherwise. ``spend``: a ledger summary's JSON."""
    cap = float(spend.get("cap_usd") or 0.0)
    total = float(spend.get("spent_usd") or 0.0) + float(spend.get("unknown_usd") or 0.0)
    if total <= cap + 1e-9 or total - float(spend.get("overrun_usd") or 0.0) <= cap + 1e-9:
        return []
    return [f"  note: spend {usd(total)} is above the cap: the cap was lowered to {usd(cap)} when more than that "
            "was already spent or reserved (a later run's config set it); no call started past the cap in force when "
            "it reserved, and spend already made stays"]


def unreported_usage_lines(spend: Mapping[str, Any]) -> list[str]:
    """One warning per model whose answers came without a usage count (a ledger's ``by_model`` entries with
    ``unreported_calls``: :meth:`geoagent.runtime.ledger.Ledger.spend_by_model`), e.g. ``  warning: model 'm'
    answered 3 calls without a usage count: booked at the worst case ($0.0003)``; those answers are stored
    and settled at their reservations (:func:`geoagent.workers.billing.booked_answer`), so the spend shown
    is an upper bound for them. [] when there were none."""
    out: list[str] = []
    for name, m in (spend.get("by_model") or {}).items():
        n = int(m.get("unreported_calls") or 0)
        if n:
            out.append(f"  warning: model '{name}' answered {_calls(n)} without a usage count: booked at the worst "
                       f"case ({usd(m.get('unreported_usd'))})")
    return out


def usd(amount: float | None) -> str:
    """USD for summaries, in the CLI's one money format (:func:`geoagent.status.format_usd`: 4 decimals)."""
    from geoagent.status import format_usd

    return format_usd(amount)


def check_keys(cfg: Any, kind: CampaignKind, *, dotenv_path: str | Path | None = None) -> None:
    """Look up every key a run needs (the paid models' ``api_key_env`` and the kind's
    :meth:`CampaignKind.required_keys`) in the environment and ``.env``, before anything is created.

    Raises
    ------
    geoagent.secrets.SecretNotFound
        One message naming every missing variable and what needs it (never a value); the CLI exits 2.
    ValueError
        A configured name is not a valid variable name, a value holds control characters, or a value cannot be the
        key it is for (:meth:`CampaignKind.key_value_problem`).
    """
    from geoagent.secrets import SecretNotFound

    missing, others = missing_keys(cfg, kind, dotenv_path=dotenv_path)
    if missing or others:
        raise SecretNotFound(missing_keys_text(cfg, missing, others, dotenv_path=dotenv_path))


def finished_campaign_hint(cfg: Any) -> str:
    """The sentence a run refused for a missing key adds when campaign ``cfg``'s last run ended ``complete``
    (its manifest, :func:`geoagent.runtime.manifest.read_manifest`), "" otherwise (none, another status, a
    manifest that cannot be read: the refusal's own message stands alone).

    A re-run of a finished campaign plans again, and a planned task may need a key (a config changed since adds
    work), so the keys are still required; but a researcher re-running it only to look at it or to write its
    tables again needs none: ``status`` and ``export`` read the state without calling anything (walk24 #6)."""
    from geoagent.runtime.manifest import read_manifest

    try:
        manifest = read_manifest(cfg.state_dir())
    except (OSError, ValueError):
        return ""
    runs = (manifest or {}).get("runs") or []
    last = runs[-1] if runs and isinstance(runs[-1], dict) else {}
    if last.get("status") != "complete":
        return ""
    when = last.get("stopped_at")
    return (f". Campaign {cfg.name}'s last run ended complete{f' ({when})' if isinstance(when, str) else ''}: "
            "to look at it or write its tables again, `run.py status CONFIG` and `run.py export CONFIG` need no "
            "key; a run needs the keys because it plans again, and a config changed since may add work")


def missing_keys_text(cfg: Any, missing: list[tuple[str, str]], others: Sequence[tuple[str, str]] = (), *,
                      dotenv_path: str | Path | None = None) -> str:
    """:func:`geoagent.secrets.missing_keys_message` for campaign ``cfg``: with the hint of a ``.env`` beside its
    campaign file that sets a missing variable but is not the one read (walk32 #1)."""
    from geoagent.secrets import missing_keys_message

    return missing_keys_message(missing, dotenv_path=dotenv_path, others=list(others),
                                config_source=getattr(cfg, "source", None))


def missing_keys(cfg: Any, kind: CampaignKind, *, dotenv_path: str | Path | None = None,
                 unreadable: list[str] | None = None) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """``(models' missing keys, the kind's other missing keys)``: the variables :func:`check_keys` refuses a run
    for, as ``(variable NAME, model name)`` and ``(variable NAME, what needs it)`` pairs (never a value).

    A dry run (``--simulate``) lists the same variables as one warning instead of refusing. ``unreadable``: a list
    to collect the messages of variables that cannot be read instead of raising (as
    :func:`geoagent.secrets.missing_api_keys`).

    Raises
    ------
    ValueError
        Without ``unreadable``: a configured name is not a valid variable name, a value holds control characters, or
        a value of the kind's own keys cannot be the key (:meth:`CampaignKind.key_value_problem`; with
        ``unreadable``, its message is collected there too).
    """
    from geoagent.secrets import missing_api_keys, read_or_note

    missing = missing_api_keys(cfg, dotenv_path=dotenv_path, unreadable=unreadable)
    others = []
    for var, who in kind.required_keys(cfg):
        readable, found = read_or_note(var, unreadable, dotenv_path=dotenv_path)
        if readable and found is None:
            others.append((var, who))
        elif found is not None and (problem := kind.key_value_problem(cfg, var, found.reveal())):
            # a value that cannot be the key (crawl40 #8: a Mapillary token "sandbox"): refused as an unreadable one
            if unreadable is None:
                raise ValueError(problem)
            if problem not in unreadable:
                unreadable.append(problem)
    return missing, others


def check_run_here(cfg: Any) -> None:
    """Refuse a run (or a dry run) from another folder than the one campaign ``cfg`` ran in.

    With data roots relative to the working directory (the defaults ``queues/``, ``state/``), a run started from
    another folder finds no queues, state or ledger of the campaign and starts it over there: every call is sent
    (and paid) again, under a cap of its own. :func:`geoagent.status.ran_in_another_folder` finds the folder the
    campaign ran in (its queues or state under its config file's folder or a folder above it).

    Raises
    ------
    ValueError
        Naming that folder, the command to run from it, and how to run a separate copy here on purpose (absolute
        ``$GEOAGENT_QUEUES`` and ``$GEOAGENT_STATE``, or another ``[campaign] name``).
    """
    from geoagent.status import ran_in_another_folder, ran_in_another_folder_text

    folder = ran_in_another_folder(cfg)
    if folder is not None:
        raise ValueError(
            f"campaign {cfg.name}: {ran_in_another_folder_text('it', folder)}; from here it would start over in "
            f"{Path.cwd()}, sending (and paying for) every call again. To run a separate copy here on purpose, set "
            f"${C.ENV_QUEUES_ROOT} and ${C.ENV_STATE_ROOT} to absolute folders, or give it another [campaign] name")


def check_state_matches_queues(cfg: Any) -> None:
    """Refuse to run when ``queues/<campaign>/`` holds work but ``state/<campaign>/campaign.sqlite`` is gone, or
    when the campaign's folder holds a campaign of another kind.

    The queues would report every acknowledged task as done while the stored responses, results and the
    ledger's spend are lost: the run would end "complete" with nothing scored and the cap reset to $0 spent.
    A file of another ``[campaign] kind`` under a name already used (a config copied from another campaign,
    its name kept) would enqueue its work into that campaign's queues, spend from its ledger and mix both in
    its results: refused before anything is written (the manifest records the kind of every run; on Redis the
    server records it too, :func:`geoagent.runtime.backend.check_server_kind`, for the other machines).

    Raises
    ------
    ValueError
        Naming both folders and the two ways out (restore the state, or delete the queues to start over); or
        naming the manifest, both kinds and the fix (a new ``[campaign] name``).
    """
    from geoagent.runtime.manifest import read_manifest

    qdir = Path(cfg.queues_root()) / cfg.name
    db = Path(cfg.state_dir()) / C.CAMPAIGN_DB
    try:
        recorded = (read_manifest(cfg.state_dir()) or {}).get("kind")
    except ValueError:  # a damaged manifest: `run` says so when it records the run; `export` needs none
        recorded = None
    kind = getattr(getattr(cfg, "campaign", None), "kind", None)
    if isinstance(recorded, str) and kind and recorded != kind:
        raise ValueError(
            f"campaign {cfg.name}: {Path(cfg.state_dir()) / C.MANIFEST_FILE} records a {recorded} campaign under "
            f"this name, and {getattr(cfg, 'source', 'this file')} is a {kind} campaign; give it its own "
            "[campaign] name (its queues, spend and results would otherwise mix with the other's)"
        )
    from geoagent.runtime.backend import check_backend_unchanged, check_server_kind, uses_redis

    check_backend_unchanged(cfg)  # a campaign moved to the other backend would pay for everything again
    if uses_redis(cfg):  # queues and ledger/store live together on the Redis server
        check_server_kind(cfg)  # another machine's campaign of another kind under this name
        from geoagent.runtime.backend import check_server_holds

        check_server_holds(cfg)  # a server that lost the campaign this machine ran there (a dry run is refused too)
        return
    from geoagent.runtime.sqlite_queue import queue_files

    if any(f.stat().st_size > 0 for f in queue_files(qdir)) and (not db.exists() or _blank_state_db(db)):
        what = "is missing" if not db.exists() else blank_state_db_text(db)
        raise ValueError(
            f"campaign {cfg.name}: the queues in {qdir} hold work from an earlier run but its state "
            f"{db} (stored responses, results, spend) {what}; {_state_root_hint(cfg, qdir)}restore the state "
            f"folder, or, to start the campaign over (every request sent and paid again), delete {qdir}"
        )


def blank_state_db_text(db: Path) -> str:
    """What is wrong with a campaign database :func:`_blank_state_db` finds without a ledger, for ``run``'s refusal
    and ``status``: its data lay in a ``-wal`` SQLite cannot use, or the file is empty."""
    wal = Path(f"{db}-wal")
    try:
        wal_bytes = wal.stat().st_size if wal.is_file() else 0
    except OSError:
        wal_bytes = 0
    if wal_bytes:  # the data lay in the -wal, which SQLite cannot use
        return (f"holds no ledger SQLite can read: its data lay in {wal.name} ({wal_bytes:,} bytes), which is damaged "
                "or belongs to another copy of the database and is left as it is (keep both files together)")
    return "is empty (no ledger in it: emptied or replaced outside geoagent)"


def _blank_state_db(db: Path) -> bool:
    """Whether the campaign database ``db`` (a file that exists) holds no ledger: 0 bytes, or a SQLite file without
    the ledger's totals row (emptied or swapped outside geoagent). A run would otherwise create a new ledger at $0
    and spend the cap again (break25 #1: ``: > campaign.sqlite`` let a budget-stopped campaign bill $0.0184 against a
    $0.01 cap). False for a file that cannot be read as SQLite (the run's own open says it is damaged) and on any
    other error. Opens the file as immutable, read-only: nothing is created beside it and a ``-wal`` is left as it
    is; beside a non-empty ``-wal`` (the ledger may be there only) read-only with that ``-wal`` read too, which
    never writes to it: a ``-wal`` SQLite cannot use (damaged, or another database's) is ignored by every open, and a
    run's read-write open would then start a new ledger at $0 and overwrite it (runtime38 #1: 158 paid answers and
    their spend gone, the run "complete")."""
    import sqlite3

    try:
        if db.stat().st_size == 0:  # not opened: SQLite would delete a -wal beside it, which may hold the data
            return True
        wal = Path(f"{db}-wal")
        if wal.exists() and wal.stat().st_size > 0:
            # read-only, not immutable: the -wal's frames are read (an -shm is made beside it when missing, as the
            # run's own open would make it); a -wal SQLite cannot use leaves the file as it is alone
            uri = f"file:{db}?mode=ro"
        else:
            # immutable: no lock, no -shm or -wal made beside it (a read-only open in WAL mode makes both, which a
            # run refused for another reason must not leave behind); the file holds all there is (no WAL content)
            uri = f"file:{db}?mode=ro&immutable=1"
        conn = sqlite3.connect(uri, uri=True, timeout=30.0)
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "ledger_totals" not in tables:
                return True
            return conn.execute("SELECT COUNT(*) FROM ledger_totals").fetchone()[0] == 0
        finally:
            conn.close()
    except (OSError, sqlite3.Error):
        return False


def _state_root_hint(cfg: Any, qdir: Path) -> str:
    """The start of the missing-state error's advice: the state folder the queues were used with (their
    ``state_root.json``, :data:`geoagent.constants.QUEUES_STATE_FILE`) when it holds the campaign's database,
    and what set this run's state root (``$GEOAGENT_STATE`` or ``[paths] state``); "" when the record names no
    such folder."""
    value = recorded_state_dir(qdir)
    if value is None or not (value / C.CAMPAIGN_DB).is_file():
        return ""
    try:  # the folder this run uses already (its database emptied): nothing to point elsewhere (runtime36 #4)
        if value.resolve() == Path(cfg.state_dir()).resolve():
            return ""
    except OSError:
        pass
    env = os.environ.get(C.ENV_STATE_ROOT)
    why = f"${C.ENV_STATE_ROOT}={env}" if env else cfg.state_root_source()
    return (f"the queues were used with the state folder {value} (recorded in {qdir / C.QUEUES_STATE_FILE}), which "
            f"holds it: this run's state root comes from {why}; point it at {value.parent}, or ")


def recorded_state_dir(qdir: Path) -> Path | None:
    """The state folder ``qdir/state_root.json`` (:data:`geoagent.constants.QUEUES_STATE_FILE`) records for the
    campaign's queues in ``qdir``; None when there is no readable record (:func:`check_queues_state_root`)."""
    try:
        value = json.loads((qdir / C.QUEUES_STATE_FILE).read_text(encoding="utf-8")).get("state_dir")
    except (OSError, ValueError, AttributeError):
        return None
    return Path(value) if isinstance(value, str) and value else None


def check_queues_root_as_recorded(cfg: Any) -> str | None:
    """Refuse a run whose queues folder is not the one the campaign's earlier runs recorded while that one still
    holds the campaign's queue files; return a warning line when the recorded folder is gone.

    Each run records its queues folder (``queues_dir``, absolute) in the state folder's ``manifest.json``. A run
    pointed at another queues root (``$GEOAGENT_QUEUES``, ``[paths] queues``) would start a second, empty set
    of queues next to the stored answers: it would reuse those, and never see the tasks dead-lettered or left
    queued in the real queues. Not checked on the Redis backend (no queues folder), nor when no run recorded a
    folder (a first run, or runs of a version before the record).

    Returns
    -------
    str or None
        A ``warning: ...`` line when the recorded folder no longer exists or holds no queue file (deleted or
        moved on purpose: the run goes on, and records its own folder) and this run's folder holds none either
        (it starts over); None when the folders agree, or when the recorded one is gone and this one holds
        queue files (the campaign moved with its queues: the run goes on with them).

    Raises
    ------
    ValueError
        Naming both folders, the root the earlier runs used and the fix, when the recorded folder holds queue
        files.
    """
    from geoagent.runtime.backend import uses_redis
    from geoagent.runtime.manifest import read_manifest

    if uses_redis(cfg):
        return None
    try:
        man = read_manifest(cfg.state_dir()) or {}
    except (OSError, ValueError):  # a damaged manifest: the run says so when it records
        return None
    runs = [r for r in (man.get("runs") if isinstance(man, dict) else None) or [] if isinstance(r, dict)]
    was = next((r.get("queues_dir") for r in reversed(runs) if isinstance(r.get("queues_dir"), str)), None)
    if not was:
        return None
    here = Path(cfg.queues_root()) / cfg.name
    recorded = Path(was)
    if _same_folder(recorded, here):
        return None
    def holds_queues(folder: Path) -> bool:
        from geoagent.runtime.sqlite_queue import queue_files

        return any(f.is_file() and f.stat().st_size > 0 for f in queue_files(folder))

    held = holds_queues(recorded)
    if not held and holds_queues(here):
        # the recorded folder is gone or empty and this one holds queue files: the campaign moved with its
        # queues (root renamed, copied to another disk); this run goes on with them, nothing starts over
        return None
    if held:
        raise ValueError(
            f"campaign {cfg.name}: its earlier runs kept their queues in {recorded} (recorded in "
            f"{Path(cfg.state_dir()) / C.MANIFEST_FILE}), which still holds them, but this run's queues folder is "
            f"{here.absolute()}: it would start a second, empty set of queues and never see the work dead-lettered "
            f"or left queued in the first. Point ${C.ENV_QUEUES_ROOT} or [paths] queues at {recorded.parent} (the "
            f"root, which holds {recorded.name}/); to start over on new queues, move or delete {recorded} first"
        )
    return (f"warning: campaign {cfg.name}: its earlier runs kept their queues in {recorded}, which "
            f"{'holds no queue file' if recorded.exists() else 'no longer exists'}; this run starts its queues in "
            f"{here.absolute()} (tasks dead-lettered or left queued there are not carried over; stored answers are "
            "reused)")


def _same_folder(a: Path, b: Path) -> bool:
    """Whether folders ``a`` and ``b`` are one (the same inode where both exist: a symlink or another spelling
    of it; else the same absolute path)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return str(a.resolve()) == str(b.resolve())


def check_queues_state_root(cfg: Any, *, record: bool = False) -> None:
    """Refuse a run whose state folder is not the one the campaign's queues belong to; with ``record``, write it.

    ``queues/<campaign>/state_root.json`` (:data:`geoagent.constants.QUEUES_STATE_FILE`) records the absolute
    state folder (``state/<campaign>``) of the runs that used these queues. Every process of a campaign must use
    that pair: a process whose state folder is another one holds its run and owner locks there, finds no other
    process of the campaign alive, and so hands back every lease in the queues at start (:func:`run_lock`'s
    ``when_alone``), the live ones of the processes on the recorded folder included: their tasks would be done
    twice. So when the recorded folder still exists and is not this run's, this raises. The scale-out
    (``--stages`` processes with the same roots) records one folder; roots moved together (``GEOAGENT_QUEUES``
    and ``GEOAGENT_STATE`` pointed at the moved folders) leave a record naming a folder that no longer exists,
    which this run's folder then replaces (with ``record``). Queues of an earlier version (no record) get one.

    ``record`` False: read only (the start of a run of a campaign without queue files yet, before its locks:
    nothing is written, so a run refused later leaves no queues folder). True (the start of a run whose queues
    hold work, and right before a run opens its queues): also create the record when there is none,
    exclusively (of two processes starting at once with different state folders the second is refused), or
    replace one naming a folder that is gone. A dry run calls neither. A record that cannot be read counts as
    none.

    Raises
    ------
    ValueError
        Naming the queues folder, the recorded state folder, this run's, and the fixes.
    """
    from geoagent.files import atomic_write_text
    from geoagent.runtime.backend import uses_redis

    if uses_redis(cfg):
        # Redis queues have no folder to record in; each machine has its own state folder by design, and leases
        # expire on the server's clock (no start-up hand-back of live leases)
        return
    qdir = Path(cfg.queues_root()) / cfg.name
    here = Path(cfg.state_dir()).resolve()
    path = qdir / C.QUEUES_STATE_FILE

    def new_record() -> str:
        return json.dumps({"state_dir": str(here), "campaign": cfg.name}) + "\n"

    other = recorded_state_dir(qdir)
    if other is not None and not _same_folder(other, here):
        if other.is_dir():
            raise ValueError(
                f"campaign {cfg.name}: the queues in {qdir.resolve()} belong to the state folder {other} (recorded "
                f"in {path.name} there), but this run's state folder is {here}; two state folders on one "
                "campaign's queues would hand back each other's leases (tasks done twice). Run with the state "
                f"root the other processes use (${C.ENV_STATE_ROOT} or [paths] state, so that the campaign's "
                f"folder is {other}), or give this run its own queues root (${C.ENV_QUEUES_ROOT} or [paths] "
                f"queues); if you copied the state folder here and no process uses {other} any more, delete "
                f"the record {path} (it holds only that folder's name; keep both state folders until the run "
                "is checked) and run again"
            )
        if record:  # the recorded folder is gone (moved with the queues, or removed): the queues are this one's
            atomic_write_text(path, new_record())
        return
    if other is None and record:
        qdir.mkdir(parents=True, exist_ok=True)
        tmp = qdir / f".{C.QUEUES_STATE_FILE}.{os.getpid()}.{secrets.token_hex(4)}"
        tmp.write_text(new_record(), encoding="utf-8")
        try:
            if path.exists():  # damaged: replaced
                os.replace(tmp, path)
            else:
                try:
                    os.link(tmp, path)  # exclusive: fails when another process recorded meanwhile
                except FileExistsError:
                    check_queues_state_root(cfg, record=False)  # that process's folder must be this one's
                except OSError:  # no hard links on this file system: not exclusive, still recorded
                    os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


@contextlib.contextmanager
def run_lock(state_dir: Path, when_alone: Callable[[], Any] | None = None, *, owner: bool = False,
             when_dead: Callable[[list[str]], Any] | None = None,
             sweep_s: float | None = None, each_sweep: Callable[[], Any] | None = None,
             read_only_ok: bool = False, also_clean: Sequence[Path] = ()) -> Iterator[bool]:
    """Hold ``state/<campaign>/run.lock`` (shared) for a run; yield True when no other process ran it.

    Every process of a campaign (scale-out with ``--stages`` included) holds the lock shared. A process that
    can take it exclusively knows that no other is alive, so every lease in the campaign's queues belongs
    to a process that died (SIGKILL, power cut). ``when_alone`` runs while the exclusive lock is still held
    (other processes of the campaign wait for their shared lock meanwhile, so none can lease yet): that is
    where the caller expires those leases, instead of waiting out the visibility timeout. ``flock`` locks
    die with their process.

    A process that finds itself alone writes the time into the file (:func:`run_began`: when the processes of the
    campaign running now began, fixreask46); a process that joins them reads it after its shared lock is held, so
    every process running at once reads one time.

    ``owner``: also hold ``state/<campaign>/leases/<owner>.lock`` exclusively for the run, ``<owner>`` being
    this process's :func:`~geoagent.runtime.sqlite_queue.lease_owner` id (embedded in every lease id it takes;
    the file appears already locked: made under a temporary name, locked, then renamed). Then every owner file
    of another process that can be locked now belongs to a process that died (a live one holds its lock from
    before its first lease to after its last): ``when_dead`` gets those owner ids (also when other processes of
    the campaign are alive) to expire exactly their leases, and the dead owners' files are removed. A file of
    this process stays while any of its runs of the campaign is on (counted per folder). With ``owner``, the
    temporary files that writers of dead processes left under ``state_dir`` (a SIGKILL inside an atomic write
    of a report, export or table, or while a new SQLite file was made whole) are removed
    (:func:`geoagent.files.remove_stale_temp_files`), and those directly in each folder of ``also_clean`` (the
    campaign's queue folder: a queue file made whole, review45a #8).

    ``sweep_s`` (with ``owner`` and ``when_dead``): while the run is on, a background thread repeats that scan
    every ``sweep_s`` seconds (:class:`_DeadOwnerSweep`), so a process of the campaign killed meanwhile has its
    leases handed back by the processes still running, without waiting for one to start. None: the scan runs
    at start only. The thread is stopped (and joined, for at most :data:`SWEEP_STOP_WAIT_S`) before the owner and run locks are let go. ``each_sweep``:
    also called by that thread after every scan, whatever it found (the Redis backend's hand-back of this
    machine's gone consumers, whose state folder may be another than this run's).

    Raises
    ------
    ValueError
        ``sweep_s`` not > 0.
    """
    import fcntl

    while True:
        try:
            state_dir.mkdir(parents=True, exist_ok=True)
        except FileNotFoundError as exc:  # a root that cannot hold folders (/proc/...): said as a bare errno before
            raise ValueError(f"cannot make the campaign's state folder {state_dir}: {exc.strerror} (check [paths] "
                             f"state in the config and ${C.ENV_STATE_ROOT})") from None
        try:
            fh = open(state_dir / "run.lock", "a+b")
        except FileNotFoundError:
            continue  # a clean-up removed the folder between mkdir and open: make it again
        except OSError as exc:
            # ``read_only_ok`` (a dry run): an archived campaign on a read-only file system is locked through a
            # read-only descriptor (flock needs none to write; review36b #1: the dry run failed on run.lock)
            if not (read_only_ok and exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM)
                    and (state_dir / "run.lock").is_file()):
                raise
            fh = open(state_dir / "run.lock", "rb")
        try:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alone = True
            except BlockingIOError:
                alone = False
                fcntl.flock(fh, fcntl.LOCK_SH)  # waits while a clean-up (exclusive) may remove the folder
            if not _same_file(fh, state_dir / "run.lock"):
                # the folder was removed (discard_unstarted_state) while we waited: this lock guards
                # nothing any other process can see, so take the lock of the folder as it is now
                fh.close()
                continue
            if alone and not read_only_ok:  # a dry run changes nothing in the folder (review46b #4)
                _note_run_began(fh)
            if alone and when_alone is not None:
                when_alone()
            fcntl.flock(fh, fcntl.LOCK_SH)
            if owner:
                _hold_owner_lock(state_dir)
                remove_stale_temp_files(state_dir)  # of writers killed mid-write (their pid is gone)
                for folder in also_clean:
                    remove_stale_temp_files(folder, recursive=False)
            sweep: _DeadOwnerSweep | None = None
            try:
                if owner:
                    # alone: when_alone expired every lease already; the dead owners' files are only removed
                    hand_back_dead_owners(state_dir, None if alone else when_dead)
                    if sweep_s is not None and when_dead is not None:
                        sweep = _DeadOwnerSweep(state_dir, when_dead, sweep_s, each_sweep)
                yield alone
            finally:
                if sweep is not None:
                    sweep.stop()
                if owner:
                    _release_owner_lock(state_dir)
                fcntl.flock(fh, fcntl.LOCK_UN)
            return
        finally:
            fh.close()


OWNERS_DIR = C.OWNER_LOCKS_DIR
#: a temporary owner file younger than this (s) is left alone by the scan: its process may be between
#: creating and locking it
STALE_OWNER_TMP_S = 60.0
_OWNER_LOCKS: dict[str, list[Any]] = {}  # resolved state folder -> [open locked file, runs holding it, pid]


def _hold_owner_lock(state_dir: Path) -> None:
    """Hold ``<state_dir>/leases/<lease_owner>.lock`` exclusively (see :func:`run_lock`); counted per folder."""
    import fcntl

    from geoagent.runtime.sqlite_queue import lease_owner

    key = str(Path(state_dir).resolve())
    if key in _OWNER_LOCKS and _OWNER_LOCKS[key][2] == os.getpid():  # another run of it in this process
        _OWNER_LOCKS[key][1] += 1
        return
    folder = Path(state_dir) / OWNERS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    me = lease_owner()
    while True:
        tmp = folder / f".{me}.{os.urandom(4).hex()}.tmp"
        fh = open(tmp, "a+b")
        fcntl.flock(fh, fcntl.LOCK_EX)  # a fresh file: nobody else holds it (a scanner leaves fresh ones alone)
        fh.write(str(os.getpid()).encode())  # for status: which process's leases wait for the next run
        fh.flush()
        try:
            os.replace(tmp, folder / f"{me}.lock")  # appears locked: no other process finds it free while we live
        except FileNotFoundError:  # a scanner took it for a dead one's between open and flock: make another
            fh.close()
            continue
        break
    _OWNER_LOCKS[key] = [fh, 1, os.getpid()]


def _release_owner_lock(state_dir: Path) -> None:
    """Undo one :func:`_hold_owner_lock`; the last one removes the file and lets the lock go."""
    from geoagent.runtime.sqlite_queue import lease_owner

    key = str(Path(state_dir).resolve())
    entry = _OWNER_LOCKS.get(key)
    if entry is None or entry[2] != os.getpid():
        return
    entry[1] -= 1
    if entry[1] > 0:
        return
    del _OWNER_LOCKS[key]
    with contextlib.suppress(FileNotFoundError):
        (Path(state_dir) / OWNERS_DIR / f"{lease_owner()}.lock").unlink()  # unlinked while still locked
    entry[0].close()


def _dead_owners(state_dir: Path, held: contextlib.ExitStack) -> list[tuple[str, Path]]:
    """The owner files in ``<state_dir>/leases/`` that can be locked now (their process died): (owner id or
    ``""`` for a temporary file left by a process killed while making it, path). Their locks stay held (closed
    by ``held``) so the caller can expire the owners' leases and remove the files first."""
    import fcntl

    from geoagent.runtime.sqlite_queue import lease_owner

    folder = Path(state_dir) / OWNERS_DIR
    me = f"{lease_owner()}.lock"
    out: list[tuple[str, Path]] = []
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        if path.name == me or not (path.name.endswith(".lock") or path.name.endswith(".tmp")):
            continue
        if path.name.endswith(".tmp"):
            try:
                if time.time() - path.stat().st_mtime < STALE_OWNER_TMP_S:
                    continue  # maybe a process making its owner file right now (locked only after open)
            except FileNotFoundError:
                continue
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            continue  # its process ended meanwhile and removed it
        held.callback(fh.close)
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # alive
        if not _same_file(fh, path):
            continue  # removed (and maybe remade) meanwhile
        stem = path.name[:-len(".lock")] if path.name.endswith(".lock") else ""
        out.append((stem if stem and all(c in "0123456789abcdef" for c in stem) else "", path))
    return out


def hand_back_dead_owners(state_dir: Path, when_dead: Callable[[list[str]], Any] | None) -> list[str]:
    """One scan of ``<state_dir>/leases/`` for owner files whose lock can be taken now (their process died,
    :func:`_dead_owners`): call ``when_dead`` with those owner ids (sorted; not called when there are none, or
    when ``when_dead`` is None) while their locks are held, then remove the files; return the owner ids.

    Used by :func:`run_lock` at start and by its periodic sweep (:class:`_DeadOwnerSweep`). Each file is tried
    with a non-blocking ``flock``: a live process holds its own, so its leases are never expired; of two
    processes scanning at once only one takes a dead owner's lock (the other finds it held and skips it, and
    finds the file gone on its next scan). When ``when_dead`` raises, no file is removed (a later scan or run
    tries again) and the exception propagates.
    """
    with contextlib.ExitStack() as held:
        dead = _dead_owners(state_dir, held)  # their locks held until the files are gone
        owners = sorted({o for o, _ in dead if o})
        if owners and when_dead is not None:
            when_dead(owners)
        for _, path in dead:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return owners


#: seconds between two dead-owner scans of a running process of a campaign (:class:`_DeadOwnerSweep`). A scan
#: lists ``state/<campaign>/leases/`` and tries each other process's owner lock without waiting (one open, one
#: non-blocking ``flock``, one close per running process: microseconds); queue files are opened only when an
#: owner is found dead. It runs on its own thread, so no lease, ack or call pays for it. 5 s puts a killed
#: process's work back within seconds (the survivors then lease it at their next poll) instead of the visibility
#: timeout (300 s by default), at a cost of well under a millisecond every 5 s per process.
DEAD_OWNER_SWEEP_S = 5.0


#: longest wait (s) of a run's end for a dead-owner scan under way (:meth:`_DeadOwnerSweep.stop`)
SWEEP_STOP_WAIT_S = 5.0


class _DeadOwnerSweep:
    """A daemon thread that calls :func:`hand_back_dead_owners` every ``period_s`` seconds until :meth:`stop`,
    then ``each_sweep`` (if given).

    A scan that fails (e.g. a queue file busy past its timeout) is logged as a warning and tried again at the
    next period; the dead owner's file stays until a scan succeeds.

    Raises
    ------
    ValueError
        ``period_s`` not > 0.
    """

    def __init__(self, state_dir: Path, when_dead: Callable[[list[str]], Any], period_s: float,
                 each_sweep: Callable[[], Any] | None = None) -> None:
        import threading

        if not float(period_s) > 0:
            raise ValueError(f"sweep period must be > 0 s, got {period_s!r}")
        self.state_dir, self.when_dead, self.period_s = Path(state_dir), when_dead, float(period_s)
        self.each_sweep = each_sweep
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="geoagent-dead-owner-sweep", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                hand_back_dead_owners(self.state_dir, self.when_dead)
                if self.each_sweep is not None:
                    self.each_sweep()
            except Exception as exc:  # a sweep must never end the run; the next one tries again
                log.warning("dead-owner sweep of %s failed (tried again in %g s): %s", self.state_dir,
                            self.period_s, exc)

    def stop(self) -> None:
        """Stop the thread and wait for a scan under way to end, for at most :data:`SWEEP_STOP_WAIT_S` seconds: a
        scan of a Redis campaign whose server went away would hold the end of the run for the clients' retry
        window (45 s; rev27 #2). A scan still going then ends on its own (a daemon thread; it hands back only the
        leases of processes found gone)."""
        self._stop.set()
        self._thread.join(SWEEP_STOP_WAIT_S)


def dead_owner_pids(state_dir: Path) -> set[int] | None:
    """The pids of the campaign's processes that died holding an owner file (``state/<campaign>/leases/``, see
    :func:`run_lock`): their leases have not been handed back early by a later run yet. None when the campaign
    has no ``leases/`` folder (it never ran with this version). Read-only: each lock is tried without waiting
    and let go at once."""
    owners = _owner_pids(state_dir)
    return None if owners is None else {pid for pid, alive in owners if not alive}


def _owner_pids(state_dir: Path) -> list[tuple[int, bool]] | None:
    """``(pid, alive)`` of each owner file under ``state/<campaign>/leases/`` that names a pid: alive when its lock
    is held (its process runs: :func:`_hold_owner_lock`), else it died. None without the folder. Read-only: each
    lock is tried without waiting and let go at once (:func:`dead_owner_pids`, :func:`_live_owners_began`)."""
    import fcntl

    folder = Path(state_dir) / OWNERS_DIR
    if not folder.is_dir():
        return None
    out: list[tuple[int, bool]] = []
    for path in sorted(folder.glob("*.lock")):
        try:
            fh = open(path, "rb")
        except FileNotFoundError:
            continue
        with fh:
            try:
                fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                alive = False
            except BlockingIOError:
                alive = True
            text = fh.read(32).decode("ascii", "replace").strip()
            if not alive:
                fcntl.flock(fh, fcntl.LOCK_UN)
        if text.isdigit():
            out.append((int(text), alive))
    return out


def _note_run_began(fh: Any) -> None:
    """Write ``{"began": Unix s, "pid", "pid_start", "host"}`` into the run lock's open file ``fh`` (held exclusively:
    no other process of the campaign is alive, so this one begins a run): :func:`run_began`. A read-only file is left
    as it is (a dry run writes nothing: :func:`run_lock` does not call this for one)."""
    import socket

    from geoagent.runtime.procs import proc_start

    try:
        fh.truncate(0)
        fh.write(json.dumps({"began": time.time(), "pid": os.getpid(), "pid_start": proc_start(os.getpid()),
                             "host": socket.gethostname()}).encode())
        fh.flush()
    except (OSError, ValueError):  # io.UnsupportedOperation: opened read-only
        pass


def run_began(state_dir: Path) -> float | None:
    """When the processes of the campaign at ``state_dir`` that run now began, Unix s, for "logged in this run" (the
    referenceability auditor's re-ask limits, fixreask46): the time the first of them, finding no other alive, wrote
    into ``run.lock`` (:func:`run_lock`), while that process still runs, so a process that started beside it (another
    ``run.py`` of the campaign on this state folder) reads the same time. Once that process has ended while others
    of its run go on, a process joining them gets the earliest start of the campaign's processes alive now (their
    owner files, ``leases/<owner>.lock``, locked; review46b #1: before, a process started after the first had ended
    counted the ended one's failures as its run's, and re-asked none of them). Read by a process that holds the run
    lock; None without the file or a time in it (an earlier geoagent wrote none), or when no start can be read (not
    Linux; the caller then counts from its own start). Creates nothing."""
    import socket

    from geoagent.runtime.procs import process_alive

    try:
        rec = json.loads((Path(state_dir) / "run.lock").read_bytes() or b"null")
    except (OSError, ValueError):
        return None
    began = rec.get("began") if isinstance(rec, dict) else None
    if not isinstance(began, (int, float)) or isinstance(began, bool):
        return None
    pid, host = rec.get("pid"), rec.get("host")
    if host not in (None, socket.gethostname()) or not isinstance(pid, int) or isinstance(pid, bool):
        return float(began)  # another machine's process (a shared state folder): its life cannot be read here
    started = rec.get("pid_start") if isinstance(rec.get("pid_start"), str) else None
    if process_alive(pid, started):
        return float(began)
    return _live_owners_began(state_dir)


def _live_owners_began(state_dir: Path) -> float | None:
    """The earliest start (Unix s) of the processes of this machine whose owner file under
    ``<state_dir>/leases/`` is locked now (alive: :func:`_owner_pids`); None when none can be read."""
    from geoagent.runtime.procs import process_started_unix

    starts = [t for pid, alive in _owner_pids(state_dir) or () if alive and pid > 0
              and (t := process_started_unix(pid)) is not None]
    return min(starts) if starts else None


def run_lock_held(state_dir: Path) -> bool | None:
    """Whether some process of the campaign is running now (holds :func:`run_lock`); None when the campaign
    has no ``run.lock`` (it never ran). Creates nothing.

    Tries the lock exclusively without waiting and lets it go at once: a run starting in that instant finds
    itself "not alone" and only skips expiring dead leases early (they return after their visibility timeout).
    """
    import fcntl

    try:
        fh = open(Path(state_dir) / "run.lock", "rb")
    except FileNotFoundError:
        return None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fh, fcntl.LOCK_UN)
        return False


def _same_file(fh: Any, path: Path) -> bool:
    """Whether the open file ``fh`` is still the file at ``path`` (not unlinked or replaced)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    fst = os.fstat(fh.fileno())
    return (st.st_dev, st.st_ino) == (fst.st_dev, fst.st_ino)


#: seconds a run waits for another process's plan lock before it says so on stderr (once)
PLAN_LOCK_SAY_AFTER_S = 10.0


class PlanLock:
    """``state/<campaign>/plan.lock`` (:data:`geoagent.constants.PLAN_LOCK_FILE`) held exclusively by a run from
    the re-check of its config against the campaign's earlier runs (:meth:`CampaignKind.check_config_change`) to
    the manifest's record of its start, its plan queued in between (review44b #1).

    Why: the check reads what the campaign holds (the manifest's config, the queued tasks); two first runs started
    together both found nothing there, both passed, and queued their plans side by side (GeoVerify at tau = 150 and
    200 m: the queue held claims of both, the manifest recorded one tau, the report scored the other's labels).
    Under this lock the second run checks again once the first has queued its plan and recorded its config, so it
    is refused as a later run would be. Processes of one run spread over ``--stages`` take it in turn too (each
    queues the same plan). On Redis it serialises the runs of one machine only; the config recorded on the server
    refuses other machines' (:func:`geoagent.runtime.backend.check_server_config`).

    The wait blocks the calling thread (called before the run starts its event-loop work: the sandbox fakes, the
    stages); it polls so as to say once on stderr that it waits, after :data:`PLAN_LOCK_SAY_AFTER_S`. Like :func:`run_lock`, a lock
    taken on a file that a clean-up removed meanwhile (:func:`discard_unstarted_state`) is taken again on the
    folder as it is now. :meth:`release` may be called more than once."""

    def __init__(self, state_dir: Path, campaign: str = "") -> None:
        self.path = Path(state_dir) / C.PLAN_LOCK_FILE
        self.campaign = campaign
        self._fh: Any = None

    async def acquire(self) -> list[Path]:
        """Wait for the lock and take it; returns the folders it made for its file (:func:`_absent_dirs`: the
        campaign's state folder first, then state root folders made for it; [] when they existed), for the
        clean-up of a run that ends before its plan is queued. The wait polls with ``anyio.sleep``, so Ctrl-C (a
        cancellation) ends it at once (review44e #4: a blocking sleep held the event loop, and the first Ctrl-C
        took effect only once the other process let the lock go).

        Raises
        ------
        ValueError
            The state folder cannot be made (a root that cannot hold folders), naming it."""
        import fcntl

        said = False
        t0 = time.monotonic()
        while True:
            created = _absent_dirs(self.path.parent)
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                fh = open(self.path, "a+b")
            except FileNotFoundError as exc:
                if self.path.parent.is_dir():
                    continue  # a clean-up removed the folder between mkdir and open: make it again
                raise ValueError(f"cannot make the campaign's state folder {self.path.parent}: {exc.strerror} "
                                 f"(check [paths] state in the config and ${C.ENV_STATE_ROOT})") from None
            while True:
                try:
                    fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if not said and time.monotonic() - t0 >= PLAN_LOCK_SAY_AFTER_S:
                        print(f"info: campaign {self.campaign}: waiting for another process of the campaign to queue "
                              f"its plan (it holds {self.path}); Ctrl-C stops waiting", file=sys.stderr)
                        said = True
                    try:
                        await anyio.sleep(0.05)
                    except BaseException:
                        fh.close()  # cancelled (Ctrl-C): the lock was not taken; no file handle left open
                        raise
            if _same_file(fh, self.path):
                self._fh = fh
                return created
            fh.close()  # the folder was removed while we waited: lock the one there now

    def release(self) -> None:
        """Let the lock go (closing the file); nothing when not held."""
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()


def expire_dead_leases(cfg: Any, owners: Sequence[str] | None = None) -> int:
    """Hand back the leases of dead processes in the campaign's existing queue files; return how many.

    ``owners`` None: every lease (only when no process of the campaign is alive); else only the leases taken by
    those :func:`~geoagent.runtime.sqlite_queue.lease_owner` ids (processes whose owner lock was free:
    :func:`run_lock`), while other processes of the campaign go on with theirs.

    Each lease handed back counts one delivery of its task (its process ended while working on it: killed, out of
    memory, crashed; docs/campaigns.md, "[queue] max_attempts"): the task is ready again at once, behind the tasks
    already ready, or dead-lettered once its deliveries reach ``[queue] max_attempts`` (reason
    :func:`~geoagent.runtime.queue.process_ended_reason`), so a task that kills every process that takes it is not
    retried for ever. A warning line says how many were redelivered, and one more how many were dead-lettered.

    On Redis (``[backend] kind = "redis"``) ``owners`` is not used: the leases of every consumer recorded on this
    machine (same host name and boot id) whose process is gone are handed back
    (:meth:`~geoagent.runtime.redis_queue.RedisStreamsQueue.hand_back_gone_local`), whoever's owner lock found it;
    those of other machines come back after their visibility timeout (no delivery counted). Raises
    :class:`~geoagent.runtime.backend.BackendError` when the server cannot be used.
    """
    from geoagent.runtime.backend import uses_redis
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    if uses_redis(cfg):
        n, dead = _hand_back_redis_leases(cfg)
        if n - dead:
            log.warning("campaign %s: %d task(s) leased by a stopped process on this machine are redelivered now",
                        cfg.name, n - dead)
    else:
        folder = Path(cfg.queues_root()) / cfg.name
        n = dead = 0
        from geoagent.runtime.sqlite_queue import queue_files

        for f in queue_files(folder):
            q = SQLiteQueue.open(cfg.queues_root(), cfg.name, f.stem, **cfg.queue_options())
            try:
                n += q.expire_leases_sync() if owners is None else q.expire_leases_of_sync(owners)
                dead += q.handed_back_dead
            finally:
                q.close_sync()
        if n - dead:
            log.warning("campaign %s: %d task(s) leased by a stopped process are redelivered now", cfg.name, n - dead)
    if dead:
        log.warning("campaign %s: %d task(s) dead-lettered: their process ended while working on them (killed, "
                    "out of memory or crashed) at the last of their [queue] max_attempts deliveries; `run.py dead` "
                    "lists them with the reason", cfg.name, dead)
    return n


def _hand_back_redis_leases(cfg: Any) -> tuple[int, int]:
    """Hand back the leases of this machine's gone processes in every Redis queue of the campaign; return how many,
    and how many of them were dead-lettered."""
    from geoagent.runtime.backend import SyncRedisQueue, redis_edges, redis_url
    from geoagent.status import pipeline_edges

    url = redis_url(cfg)
    if url is None:
        return 0, 0
    n = dead = 0
    for e in redis_edges(cfg, pipeline_edges(cfg)):
        q = SyncRedisQueue(url, cfg.name, e, **cfg.queue_options())
        n += q.hand_back_gone_local_sync()
        dead += q.handed_back_dead
    return n, dead


def campaign_run_lock(cfg: Any, *, simulate: bool = False,
                      sweep_s: float | None = DEAD_OWNER_SWEEP_S) -> contextlib.AbstractContextManager[bool]:
    """:func:`run_lock` of a campaign run, with the recovery of dead processes' leases: at start all of them
    when no other process of the campaign is alive, else exactly those of the processes that died (their owner
    locks were free); then, while the run is on, every ``sweep_s`` seconds (default
    :data:`DEAD_OWNER_SWEEP_S`; None: at start only) exactly those of the processes that died since. A dry run
    (``simulate``) is read-only: it takes no owner lock and recovers nothing.

    On Redis the sweep also hands back, every ``sweep_s``, the leases of every gone consumer of this machine
    (:func:`expire_dead_leases`), found by its recorded pid, not by an owner file of this state folder: two
    processes of one machine with state folders of their own (``$GEOAGENT_STATE``) recover each other's work too
    (walk27 #1: a SIGKILLed one's leases waited out the 300 s visibility timeout)."""
    from geoagent.runtime.backend import uses_redis

    if simulate:
        return run_lock(Path(cfg.state_dir()), read_only_ok=True)
    return run_lock(Path(cfg.state_dir()), when_alone=lambda: expire_dead_leases(cfg), owner=True,
                    when_dead=lambda owners: expire_dead_leases(cfg, owners), sweep_s=sweep_s,
                    each_sweep=(lambda: expire_dead_leases(cfg)) if uses_redis(cfg) else None,
                    also_clean=() if uses_redis(cfg) else (Path(cfg.queues_root()) / cfg.name,))


@contextlib.asynccontextmanager
async def open_services(
    cfg: Any, *, dotenv_path: str | Path | None = None, require_keys: bool = True, dry_run: bool = False
) -> AsyncIterator[StageContext]:
    """Open the process-wide services of a campaign and yield the stage context.

    Services: ``config``, ``http`` (one :class:`~geoagent.runtime.http.HttpClient` per process with the
    config's per-host policies and each model's own limit key, :func:`geoagent.config.http_limits`),
    ``state`` / ``ledger`` / ``store`` (``state/<campaign>/campaign.sqlite``),
    ``providers`` (model name -> provider), ``state_dir``, ``queues_root``.

    ``dry_run``: the ledger is opened without storing the config's ``[budget] cap_usd`` and without crash
    recovery of other processes' reservations: a run of the campaign going on in another process reads its cap
    from the ledger at every reservation, so a dry run of an edited config (a bigger cap, to see what it
    would buy) must not change it, nor settle anything.

    Every host (and every model limit key) the client calls shares its rate, concurrency and ``Retry-After``
    pauses with the other processes of the campaign on this machine (:mod:`geoagent.runtime.hostshare`, board
    ``state/<campaign>/hosts.sqlite``), or with ``[backend] kind = "redis"`` on every machine (the board on the
    campaign's Redis server, :mod:`geoagent.runtime.hostshare_redis`); a lone process keeps the full limits.
    """
    from geoagent.config import http_limits, provider_settings
    from geoagent.providers.base import provider_class
    from geoagent.runtime.hostshare import HostShare, board_path
    from geoagent.runtime.http import HttpClient
    from geoagent.runtime.backend import open_state, redis_url

    from geoagent.secrets import SecretNotFound, missing_api_keys
    from geoagent.workers.model_caller import AUTH_BREAKER_SERVICE, AuthBreaker

    # a key variable that cannot be read (a .env line that does not parse, control characters) stops a run here; a
    # dry run reports it at its end (_estimate_outcome; walk31 #4), after its whole report
    missing = missing_api_keys(cfg, dotenv_path=dotenv_path, unreadable=None if require_keys else [])
    if missing and require_keys:  # every missing variable at once, before anything is opened
        raise SecretNotFound(missing_keys_text(cfg, missing, dotenv_path=dotenv_path))
    url = redis_url(cfg, dotenv_path=dotenv_path)  # [backend] kind = "redis": queues and state on that server
    state = open_state(cfg, cap_usd=None if dry_run else cfg.budget.cap_usd, recover=not dry_run)
    contact = getattr(cfg.campaign, "contact", None) or "set [campaign] contact"
    # per-host policies, each model's own limit key on its host (providers limit per model) and host ceilings
    http = HttpClient(**http_limits(cfg), user_agent=f"geoagent/{__version__} ({contact})")
    providers: dict[str, Any] = {}
    try:
        # the host-share board: this machine's SQLite file, or (kind = "redis") the campaign's keys on the server,
        # shared by every machine (geoagent.runtime.hostshare_redis)
        board: Any = board_path(cfg.state_dir())
        if url is not None:
            from geoagent.runtime.hostshare_redis import RedisBoard

            board = RedisBoard(url, cfg.name)
        # a dry run sends nothing: it joins no host-share board (which it would write)
        async with http, (contextlib.nullcontext() if dry_run else HostShare(board, http)):
            for m in cfg.models:
                settings = provider_settings(cfg, m.name, dotenv_path=dotenv_path, require_key=require_keys)
                providers[m.name] = provider_class(settings.kind)(settings, http)
            ctx = StageContext(
                cfg.name,
                {
                    "config": cfg,
                    "http": http,
                    "state": state,
                    "ledger": state.ledger,
                    "store": state.store,
                    "providers": providers,
                    "state_dir": cfg.state_dir(),
                    "queues_root": cfg.queues_root(),
                    "open_queue": functools.partial(_open_queue, cfg, url),
                    "missing_api_keys": missing,
                    AUTH_BREAKER_SERVICE: AuthBreaker(config_on_server=url is not None),  # Redis records the config
                },
            )
            try:
                yield ctx
            finally:
                for p in providers.values():
                    with contextlib.suppress(Exception):
                        await p.aclose()
                # what stages opened for the whole process (the geocode cache: review41a #1), last opened first
                for close in reversed(ctx.services.get(C.SERVICE_CLOSE_AT_END) or []):
                    try:
                        close()
                    except Exception as exc:  # noqa: BLE001 - the others are closed all the same
                        log.warning("campaign %s: closing %r failed: %s", cfg.name, close, exc)
    finally:
        state.close()


async def run_campaign(
    cfg: Any,
    *,
    simulate: bool = False,
    live: bool | None = None,
    only_stages: Sequence[str] | None = None,
    watch: bool = False,
    handle_signals: bool = True,
    dotenv_path: str | Path | None = None,
    export: bool = True,
    gazetteer: Any = None,
    accept_config_change: bool = False,
    on_planned: Callable[[], None] | None = None,
) -> Outcome:
    """Plan and run campaign ``cfg`` to completion (or the cap, or a signal); see the module docstring.

    Parameters
    ----------
    cfg : CampaignConfig
        Validated campaign config (:func:`geoagent.config.load_config`).
    simulate : bool
        Dry run: plan and estimate calls, tokens, USD and duration; make no call and enqueue nothing. A
        campaign with no state yet gets none (the folder opened for planning is removed afterwards). Its
        outcome exits 0, or 2 (:data:`EXIT_CONFIG`) when it predicts that the real run would refuse to start:
        a key variable it needs is not set (the models' and the kind's own, e.g. ``MAPILLARY_TOKEN``), or a
        first run plans nothing. The whole report is still made; its warning says what is missing and its last
        line (``exit 2: ...``) why the exit is 2. Tasks an earlier run queued are estimated as queued (their
        original requests), those it finished are not counted (:func:`run_would_handle`).
    live : bool or None
        Live terminal display (default: when stdout is a TTY).
    only_stages : sequence of str or None
        Run only these stages in this process (scale-out: other processes run the rest; implies ``watch``
        for stages whose upstream is elsewhere).
    watch : bool
        Daemon mode: keep polling the queues instead of finishing when they drain.
    accept_config_change : bool
        Redis backend: replace the config recorded on the server by this one when they differ in what changes
        requests or results (a deliberate change for every machine; otherwise such a run is refused, exit 2:
        :func:`geoagent.runtime.backend.check_server_config`). No effect on SQLite.
    on_planned : callable or None
        Called once (no argument) when the plan was made: a dry run's before its estimate, a run's once its plan is
        queued, before any stage starts; never when the run is refused before (a missing key, template or
        release file, an empty first plan). The CLI prints its notes on the config's changes there
        (:func:`geoagent.cli._warn_config_drift`), so a refusal comes alone.

    URLs on ``*.sandbox.invalid`` hosts start the local fake APIs in-process for the run
    (:mod:`geoagent.sandbox.launch`; ``gazetteer``: the places its Wikidata and Nominatim fakes know, default
    built from the release folder), and the manifest records the config as written, never their local ports. Every key the run needs is looked up first (:func:`check_keys`; not for
    a dry run), so a missing one creates nothing. A run that fails later but before its plan is enqueued
    (a bad plan) removes the state folder it created (:func:`discard_unstarted_state`).
    """
    from geoagent.sandbox.launch import launch

    t0 = time.monotonic()
    from geoagent.runtime.daemon import mark_end_recorded

    mark_end_recorded(False)  # a run starts: a signal stops it again
    kind = load_kind(cfg.campaign.kind)
    check_state_matches_queues(cfg)
    check_run_here(cfg)
    # a change the campaign's stored work cannot follow (GeoVerify's tau_m, fixtaurefuse43): refused before any
    # folder, record (manifest, runs index, the Redis server's config) or call is made
    kind.check_config_change(cfg)
    recorded_kind = False
    recorded_config: Any = None
    recorded_folder = None
    late: Any = None
    plan_lock: PlanLock | None = None
    written = cfg  # the manifest records the config as written, not its local sandbox ports
    created = _absent_dirs(Path(cfg.state_dir()))  # folders this run makes (the campaign's, maybe the root)
    if simulate:
        # the dry run predicts the run's refusal of a queues root other than the one the earlier runs recorded
        # (cli36 #6: it estimated against the empty folder, exit 0, and the run then refused, exit 2), and says
        # what the run would say of a recorded folder that is gone (review36b #5)
        moved = check_queues_root_as_recorded(cfg)
        if moved:
            print(moved, file=sys.stderr)
    if not simulate:
        from geoagent.secrets import SecretNotFound

        moved = check_queues_root_as_recorded(cfg)  # refused (ValueError) before anything is created
        if moved:
            print(moved, file=sys.stderr)

        try:
            check_keys(cfg, kind, dotenv_path=dotenv_path)  # before any folder, lock or queue file is made
        except SecretNotFound as exc:
            # the plan's own refusals too (photos without a file for a real model), as the dry run names them:
            # one message, not a second refusal once the variables are set
            more = await preflight_refusals(cfg, kind, dotenv_path=dotenv_path)
            finished = finished_campaign_hint(cfg)  # walk24 #6: a re-run of a finished campaign to look at it
            if not more and not finished:
                raise
            raise SecretNotFound(f"{exc}" + "".join(f". Also: {m}" for m in more)
                                 + (". Nothing was run" if more else "") + finished) from None
    try:
        if not simulate:
            from geoagent.runtime.backend import check_server_kind
            from geoagent.runtime.runs_index import record_run_folder

            # review44b #1: the check above, made again under the campaign's plan lock, which this run holds until
            # its manifest records its config (_run): a run started together with another (at another tau) is
            # refused once that one has queued its plan, instead of queuing its own beside it. A refusal here ends
            # in the clean-up below: the folder the lock made is removed when nothing was queued
            plan_lock = PlanLock(Path(cfg.state_dir()), cfg.name)
            try:
                created = await plan_lock.acquire()
            except BaseException:
                # interrupted while another process holds the lock: the folder (if made) is that process's, which
                # may be about to queue into it; the clean-up below must not remove it (review44e #4)
                created = []
                raise
            kind.check_config_change(cfg)
            # where this config runs from, for a run of it from another folder (check_run_here); after the refusals
            # above, so a run refused for a missing key or another queues root leaves no entry (it ran nothing here)
            record_run_folder(cfg)
            # before the run lock's start-up recovery could hand back live leases; queues that hold work (of a
            # version before the record) get their record now, so a second state folder started meanwhile is refused
            check_queues_state_root(cfg, record=_has_queues(cfg))

            # Redis: the kind recorded on the server, before anything is queued
            recorded_kind = check_server_kind(cfg, record=True)
        from geoagent.runtime.backend import check_server_config

        # Redis: the config recorded on the server (machines sharing the campaign run the same requests)
        recorded_config, config_line, accepted = check_server_config(cfg, record=not simulate,
                                                                     accept_change=accept_config_change)
        if config_line:
            print(config_line, file=sys.stderr)
        if accept_config_change:  # recorded in the run's manifest entry (audit): given, when, which keys (names only)
            accepted = {"given_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **(accepted or {
                "server_record_replaced": False, "changed_keys": [],
                "note": "no effect: the flag acts on the config recorded on a Redis server "
                        "([backend] kind = \"redis\")"})}
        if kind.one_state_folder:
            from geoagent.runtime.backend import check_one_state_folder

            # Redis: a crawl's records and images are in its state folder, so its processes must share that folder
            # (redis41 #1: a second machine dead-lettered image tasks and each export was a fragment)
            recorded_folder = check_one_state_folder(cfg, record=not simulate)
        from geoagent.runtime.daemon import LateSignals

        # a signal after the pipeline ended (report, export, closing): recorded, cuts nothing short (_run installs it)
        late = LateSignals() if handle_signals and not simulate else None
        # a dry run is read-only: it leaves the start-up recovery of dead processes' leases to the real run
        from geoagent.runtime.backend import state_exists, uses_redis
        from geoagent.runtime.sqlite_wal import reading_only

        # a dry run of a campaign that ran reads its ledger, store and queues without writing them (no ledger owner,
        # no schema step, no -wal made beside a queue file, no data import stored again; cli36 #5: campaign.sqlite
        # changed, and the dry run failed on a read-only archive); one of a new campaign plans in the state folder
        # it opens, which is removed afterwards (discard_unstarted_state)
        look = simulate and not uses_redis(cfg) and state_exists(cfg)
        with campaign_run_lock(cfg, simulate=simulate) as alone, (reading_only() if look else contextlib.nullcontext()):
            async with launch(cfg, gazetteer=gazetteer) as cfg, open_services(cfg, dotenv_path=dotenv_path, require_keys=not simulate,
                                                                dry_run=simulate) as ctx:
                if look:
                    ctx.services[C.SERVICE_READ_ONLY] = True  # the plan imports the release without storing it
                ctx.services["config_as_written"] = written
                # another run held the campaign (Outcome): on this machine's run lock, or (Redis) a process of any
                # machine alive on the server
                others_alive = getattr(ctx.services["ledger"], "others_alive", None)
                ctx.services[SERVICE_OTHERS_AT_START] = not alone or bool(others_alive is not None and others_alive())
                from geoagent.sandbox.launch import provider_kinds

                # what answers each model, recorded with each stored answer (request_meta.provider_kind)
                ctx.services[C.SERVICE_PROVIDER_KINDS] = provider_kinds(written)
                ctx.services[SERVICE_ACCEPTED_CONFIG_CHANGE] = accepted if accept_config_change else None
                ctx.services["dotenv_path"] = dotenv_path  # where kinds' own clients look up their keys
                ctx.services[SERVICE_LATE_SIGNALS] = late
                ctx.services[SERVICE_PLAN_LOCK] = plan_lock  # let go once the manifest records the run (_run)
                outcome = await _run(cfg, kind, ctx, t0, simulate=simulate, live=live,
                                     only_stages=only_stages, watch=watch, handle_signals=handle_signals, export=export,
                                     on_planned=on_planned)
    except BaseException as exc:
        # e.g. a missing API key or a bad plan (exit 2)
        from geoagent.runtime.backend import ServerStateLost

        try:
            # a server that lost the campaign mid-run holds no queue either: the folder records that it ran there,
            # which the next run's refusal reads (redis36 #1)
            discarded = not isinstance(exc, ServerStateLost) and discard_unstarted_state(written, created)
        except Exception:  # noqa: BLE001 - e.g. the Redis server went away: keep the folder, raise the run's error
            discarded = False
        if discarded and recorded_kind:  # (it found no queue on the server)
            from geoagent.runtime.backend import forget_server_kind

            forget_server_kind(cfg)  # nothing ran: the name is free again, as the removed folder's manifest
        if discarded and recorded_config:
            from geoagent.runtime.backend import forget_server_config

            forget_server_config(cfg)  # nothing ran: the next first run records its own config
        if discarded and recorded_folder:
            from geoagent.runtime.backend import forget_one_state_folder

            forget_one_state_folder(cfg, recorded_folder)  # its marker went with the folder
        raise
    finally:
        if plan_lock is not None:  # a run that ended before its manifest recorded it
            plan_lock.release()
        if late is not None:
            late.restore()
    if late is not None and late.received:
        outcome.late_signal = late.received
        outcome.extra_lines.append(f"  note: {late.received} came after every task had ended: it cut nothing short, "
                                   f"the run ends {outcome.status} (exit {outcome.exit_code})")
    if simulate:
        discard_unstarted_state(written, created)  # a dry run leaves nothing under state/
    return outcome


async def preflight_refusals(cfg: Any, kind: "CampaignKind", *, dotenv_path: str | Path | None = None) -> list[str]:
    """What a real run would refuse to start for besides unset key variables, found by planning as the dry run
    does (read-only: no queue file, no state folder left, :func:`discard_unstarted_state`): the kind's
    :meth:`CampaignKind.plan_refusals` (GeoVerify, GeoHint: photos without a file for a real model,
    :func:`geoagent.image_files.needs_photos`) and a first run that plans nothing (:meth:`CampaignKind.empty_plan_reason`). Called by
    :func:`run_campaign` when key variables are missing, so its refusal names every problem at once, as the dry
    run's does. [] for a kind without plan refusals of its own (e.g. the crawl: its plan is not made here), and
    when planning fails otherwise (the keys' message stands; the run once they are set says the rest).

    Creates and changes nothing under ``state/``, also when the campaign's folder exists (empty, or an earlier
    run's): the plan runs with a bare context (no ledger, store, HTTP client, host board or run lock is opened)
    and :data:`geoagent.constants.SERVICE_READ_ONLY` set, so it imports the release without storing it. (Before,
    it opened the campaign's services: in an existing folder ``campaign.sqlite``, ``hosts.sqlite``,
    ``data/data.sqlite`` and ``run.lock`` were left behind, or an earlier run's rewritten, by a refused run.)"""
    from geoagent.sandbox.launch import launch

    if type(kind).plan_refusals is CampaignKind.plan_refusals:
        return []
    try:
        async with launch(cfg) as lcfg:
            ctx = StageContext(cfg.name, {
                "config": lcfg,
                "config_as_written": cfg,
                "dotenv_path": dotenv_path,
                "state_dir": lcfg.state_dir(),
                "queues_root": lcfg.queues_root(),
                "missing_api_keys": [],
                C.SERVICE_DRY_RUN: True,  # the plan keeps its refusals instead of raising them
                C.SERVICE_READ_ONLY: True,  # and stores nothing
            })
            plan = list(await kind.plan(lcfg, ctx))
            out = list(kind.plan_refusals(lcfg))
            if not plan and not _has_queues(cfg):
                out.append(kind.empty_plan_reason(lcfg))
            return out
    except Exception:  # noqa: BLE001 - a plan that fails here fails the same way once the keys are set
        return []


def _absent_dirs(path: Path) -> list[Path]:
    """``path`` and its missing ancestors, deepest first ([] when ``path`` exists)."""
    out: list[Path] = []
    while not path.exists() and path != path.parent:
        out.append(path)
        path = path.parent
    return out


def discard_unstarted_state(cfg: Any, created: Sequence[Path]) -> bool:
    """Remove the state folder a run created but never started (a dry run, or a failure before the plan
    was enqueued); return whether it did.

    ``created`` is what :func:`_absent_dirs` listed before the run: the campaign's state folder first, then
    any state root folders made for it. Until the plan is enqueued the folder holds only what opening the
    campaign wrote (an empty ledger and response store, the host board, a data import, the run lock). It is
    kept when the campaign's queue files exist (a run started, in this process or another) or when another
    process holds the campaign's run lock (checked with an exclusive ``flock``, held while removing), or
    when the folder was removed and made again meanwhile (the lock file is no longer the one locked). A run
    that waited in :func:`run_lock` while the folder was removed takes the new folder's lock.
    """
    import fcntl
    import shutil

    from geoagent.runtime.backend import uses_redis

    if not created:
        return False
    state_dir = Path(created[0])
    qdir = Path(cfg.queues_root()) / cfg.name

    def started() -> bool:
        from geoagent.runtime.sqlite_queue import queue_files

        return _has_queues(cfg) if uses_redis(cfg) else bool(queue_files(qdir))

    if started() or not state_dir.is_dir():
        return False
    try:
        fh = open(state_dir / "run.lock", "a+b")
    except OSError:
        return False
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # another process of this campaign is running: the folder is its now
        if started() or not _same_file(fh, state_dir / "run.lock"):
            return False  # a run started, or the folder was removed and made again by another run meanwhile
        shutil.rmtree(state_dir, ignore_errors=True)
    for parent in created[1:]:
        try:
            Path(parent).rmdir()  # only when empty
        except OSError:
            break
    return not state_dir.exists()


async def _run(
    cfg: Any,
    kind: CampaignKind,
    ctx: StageContext,
    t0: float,
    *,
    simulate: bool,
    live: bool | None,
    only_stages: Sequence[str] | None,
    watch: bool,
    handle_signals: bool,
    export: bool,
    on_planned: Callable[[], None] | None = None,
) -> Outcome:
    from geoagent.runtime.manifest import WORK_BEGAN_KEY, Manifest, stages_run_elsewhere, stages_run_since
    from geoagent.status import host_labels
    from geoagent.workers.cutoff_breaker import CUTOFF_BREAKER_SERVICE
    from geoagent.workers.model_caller import AUTH_BREAKER_SERVICE, HOST_BREAKER_SERVICE

    # fixstages43: this process's start (wall clock, before it plans); a --stages process waits for an upstream
    # stage no other process has run since then (manifest.stages_run_since)
    started_unix = time.time()
    ctx.services["watch"] = watch
    ctx.services[C.SERVICE_CAMPAIGN_WRITES_REPORT] = True  # kind.report() below writes the final report
    watched_inputs = kind.plan_inputs(cfg) if watch and not simulate else []
    # taken before the plan reads them: a change while it plans is seen at the first idle point (re-planned)
    baseline = InputsFingerprint.take(watched_inputs) if watched_inputs else None
    ctx.services[C.SERVICE_DRY_RUN] = simulate  # a dry run's plan keeps a refusal for its report (plan_refusals)
    if only_stages and not simulate:
        # review44e #1: the owner record on Redis names this process's stages before it plans (a release import
        # takes seconds): a record without them counts as running every stage, so a downstream process on another
        # machine took this one for its upstream and ended early once the record named only downstream stages
        note_early = getattr(ctx.services.get("ledger"), "note_stages", None)
        named = [s.name for s in kind.stages(cfg) if s.name in set(only_stages)]
        if callable(note_early) and named:
            note_early(named)
    plan = await kind.plan(cfg, ctx)
    if simulate:
        planned = list(plan)  # a lazy plan's refusal (a missing template) comes here
        if on_planned is not None:
            on_planned()
        return _estimate_outcome(cfg, kind, planned, ctx, t0)
    stages = all_stages = kind.stages(cfg)  # all_stages: the whole pipeline, also under --stages
    if only_stages:
        unknown = set(only_stages) - {s.name for s in stages}
        if unknown:
            from geoagent.config import did_you_mean

            names = [s.name for s in stages]
            raise KeyError(f"unknown stage(s) {', '.join(f'{u!r}{did_you_mean(u, names)}' for u in sorted(unknown))}; "
                           f"this campaign has {names}")
        stages = [s for s in stages if s.name in set(only_stages)]
        # fixstages44 #3: on Redis, the owner record names this process's stages, so a --stages process on another
        # machine waits for them as for one on its own (engine.stages_elsewhere_now)
        note_stages = getattr(ctx.services.get("ledger"), "note_stages", None)
        if callable(note_stages):
            note_stages([s.name for s in stages])
    if not watch:
        plan = _refuse_empty_first_plan(cfg, kind, plan)
    check_queues_state_root(cfg, record=True)
    from geoagent.runtime.backend import redis_url, uses_redis

    queues = open_edge_queues(cfg.queues_root(), cfg.name, kind.stages(cfg), redis_url=redis_url(cfg),
                              **cfg.queue_options())
    plan_change: dict[str, Any] | None = None  # the manifest's record of the start's plan-change line
    try:
        # the plan is streamed into the queue in chunks, so a campaign of millions of requests never
        # holds them all in memory (kinds may return a list or a generator)
        planned_by_model: dict[str, int] = {}
        if kind.plan_edge == C.EDGE_REQUESTS:
            plan = _count_models(plan, planned_by_model)
        # how this plan differs from the one the last run recorded (read before PlanRecorder replaces it): said
        # at the start, so a re-run over a crawl's folder rebuilt since (no config change) says why it calls
        diff = plan_diff = PlanDiff.of(cfg.state_dir()) if kind.plan_edge == C.EDGE_REQUESTS else None
        if diff is not None:
            plan = diff.wrap(plan)
        # the plan's task keys recorded (state/<campaign>/plan_keys.tsv) for what speaks for the current plan
        # without planning: the export's `scored` column, the answered / planned shares (geoagent.runtime.scope),
        # with a note of this process and how the plan changed (plan_keys.json), which another process of a
        # scale-out that plans after it reads (its plan is then the recorded one: PlanDiff.sibling_change)
        plan = PlanRecorder(cfg.state_dir()).wrap(plan, about=(lambda: _plan_note(plan_diff))
                                                  if kind.plan_edge == C.EDGE_REQUESTS else None)
        plan_q = queues.get(kind.plan_edge)
        before = {e: await q.counts() for e, q in queues.items()}
        # review44b #1 backstop: a change the stored work cannot follow that the check before planning did not see
        # (a run that got past it some other way) is refused here, before anything of this plan is queued
        check_change_after_plan(cfg, kind, ctx, before.get(kind.plan_edge))
        # when this process answers for the plan edge: the tasks an earlier plan left idle or set aside, checked
        # off against the plan as it streams (set_aside_unplanned); None for a fresh queue (nothing to compare)
        whole = plans_whole_edge(cfg, kind, stages, only_stages, watch)
        # the model-calling kinds key every later edge by the request's key: their failed tasks of requests the plan
        # no longer holds are set aside too (review39a #1)
        later = ({e: q for e, q in queues.items() if e != kind.plan_edge} if kind.plan_edge == C.EDGE_REQUESTS
                 else None)
        check = await PlanCheck.of(plan_q, later) if plan_q is not None and whole else None
        # what becomes of the tasks the plan no longer holds that are still queued, for the plan-change line: set
        # aside here; sent all the same by a --watch run over a crawl's folder (counted, never set aside); or
        # set aside by the process of the stage that reads the planned edge (a --stages process without it)
        fate = SET_ASIDE if whole else (SENT_WHILE_WATCHING if watch and kind.plan_inputs(cfg) and (
            not only_stages or any(s.input_edge == kind.plan_edge for s in stages)) else SET_ASIDE_ELSEWHERE)
        counted = (await PlanCheck.of(plan_q) if diff is not None and plan_q is not None and fate == SENT_WHILE_WATCHING
                   else None)
        n_planned = await enqueue_plan(plan, plan_q, check=check or counted)
        if on_planned is not None:  # planned and queued: the run goes on
            on_planned()
        # what the config change means is decided now that the plan is queued: does it add work next to
        # answers made under the old settings? (decided before planning, it said "affects none of it" and then
        # planned 114 new requests)
        plan_after = (await plan_q.counts()) if plan_q else None
        if diff is not None:
            plan_before = before.get(kind.plan_edge)
            grown = (max(0, plan_after.total - plan_before.total)
                     if plan_after is not None and plan_before is not None else None)
            still = len((check or counted).unplanned) if (check or counted) is not None else 0
            plan_change = {"new": diff.new, "dropped": diff.dropped}
            changed = diff.text(never_queued=grown, still_queued=still, fate=fate)
            if changed:
                plan_change.update({"still_queued": still, "still_queued_fate": fate, **(
                    {"queued_by_no_earlier_run": grown} if grown is not None and grown < diff.new else {})})
            elif (sib := diff.sibling_change()) is not None:
                # a --stages scale-out's process that planned after another: its plan is the one that process
                # recorded, so the change since the last run is the one it counted (said here too, and whose)
                by = sib["counted_by"]
                changed = plan_change_text(sib["new"], sib["dropped"], fate=None)
                if changed:
                    changed += (f" (as counted by process {by.get('pid')} of this campaign, which queued this plan "
                                f"at {by.get('planned_at')}; a process of the campaign still running recorded it, and "
                                "this process planned the same)")
                    plan_change["same_plan_as"] = sib
            if changed:
                print(f"info: campaign {cfg.name}: {changed}.", file=sys.stderr)
                plan_change["said"] = changed
            diff = counted = None
        # tasks set aside earlier that this plan holds again are queued again first: the drift verdict per model
        # counts them as work left (bring_back_planned)
        left_out = check.left_out if check is not None else 0  # before bring_back_planned empties check.back
        back_lines = await bring_back_planned(cfg, plan_q, check) if check is not None else []
        drift = await config_drift_after_plan(cfg, kind, ctx, before, plan_after, left_out=left_out, plan_q=plan_q,
                                              aside=(check.unplanned | check.failed) if check is not None else ())
        for ln in back_lines:
            print(ln, file=sys.stderr)
        if check is not None:
            # tasks an earlier plan left queued that this plan no longer holds are set aside (dead, reason
            # "superseded: ..."), never sent; set-aside tasks this plan holds again come back
            for ln in await set_aside_unplanned(cfg, plan_q, check, drift):
                print(ln, file=sys.stderr)
            check = None
        for ln in await rescore_lost_rows(cfg, kind, ctx, queues):
            print(ln, file=sys.stderr)
        for ln in await reopen_kind_tasks(cfg, kind, ctx, queues):
            print(ln, file=sys.stderr)
    except BaseException:
        for q in queues.values():
            await q.close()
        raise
    if watch:
        print(WATCH_BANNER, flush=True)  # also when stdout is not a terminal (no live display there)
    lane_work = _lane_work(cfg, kind, planned_by_model, only_stages)
    # the model caller paces its lanes by each model's work left (geoagent.runtime.worker, "Lanes")
    ctx.services[C.SERVICE_LANE_WORK] = (lane_work or {}).get(C.STAGE_MODEL_CALLER) or {}
    # the plan's answers stored before any worker of this run ran: the summary tells "done by earlier runs" from
    # answers another run of the campaign stores meanwhile (Outcome.answered_at_start)
    answered_at_start = sum(_answered_by_model(ctx, planned_by_model, cfg, kind.plan_edge).values())
    manifest = Manifest(ctx.services.get("config_as_written", cfg), state_dir=cfg.state_dir())
    run_id = manifest.start_run(command="run", extra={"planned": n_planned, "stages": [s.name for s in stages],
                                                      # false until the run's work begins (note_work_began)
                                                      WORK_BEGAN_KEY: False,
                                                      # --watch: `status` reads drained queues as idling, not
                                                      # as the run finishing its report (geoagent.status)
                                                      "watch": bool(watch),
                                                      # how the plan differs from the last run's (the start's
                                                      # "plan changed since the last run" line, its counts)
                                                      **({"plan_change": plan_change} if plan_change else {}),
                                                      # where its queues are: `status` with another queues root
                                                      # names this folder (geoagent.status.format_status)
                                                      # (none on Redis: its queues live on the server)
                                                      **({} if uses_redis(cfg) else {"queues_dir": str(
                                                          (Path(cfg.queues_root()) / cfg.name).resolve())}),
                                                      # run --accept-config-change: when, which keys (names)
                                                      **({"accepted_config_change": accepted} if (
                                                          accepted := ctx.services.get(SERVICE_ACCEPTED_CONFIG_CHANGE))
                                                         else {}),
                                                      **kind.manifest_extra(cfg)}, drift=drift)
    # review44b #1: the manifest records this run's config (its tau among it): a run of the campaign that waited for
    # the plan lock checks against it now
    plan_lock = ctx.services.get(SERVICE_PLAN_LOCK)
    if plan_lock is not None:
        plan_lock.release()
    params_mix: dict[str, Any] | None = None
    spend_json: dict[str, Any] | None = None  # the ledger's totals and spend per model, for the manifest
    n_plan_start = n_planned  # the manifest's "planned": this plus what the run planned while watching

    def record_run_so_far() -> None:
        # what the end of the run records (below), recorded now: a run killed outright never gets there
        n_now = n_plan_start + int((ctx.services.get(C.SERVICE_PLANNED_DURING_RUN) or [0])[0])
        manifest.record_progress(run_id, planned=n_now,
                                 config=kind.config_at_end(ctx.services.get("config_as_written", cfg), ctx))

    ctx.services[C.SERVICE_RECORD_RUN_SO_FAR] = record_run_so_far
    began_lock, began = threading.Lock(), [False]
    # the run-start refresh of stored rows: "on" while it runs, "wrote" once it wrote a row (upgrade41 #4)
    refreshing: list[str | None] = [None]

    def note_work_began() -> None:
        # review40b #5: once, before the run first changes what its end is made from (a task leased, a stored row
        # rewritten, a --watch hand-off; a thread of its own may call it): until then a kill left the files on disk
        # as an earlier run wrote them, and `status` does not call their end unwritten
        with began_lock:
            if not began[0]:
                manifest.record_work_began(run_id)
                from geoagent.runtime.backend import END_WORKING, mark_end_on_server

                mark_end_on_server(cfg, run_id, END_WORKING)  # Redis: every machine's status reads it (redis41 #3)
                began[0] = True
            if refreshing[0] == "on":  # the refresh's first write: `status` names a refresh a kill cut short
                manifest.record_refresh(run_id, done=False)
                refreshing[0] = "wrote"

    ctx.services[C.SERVICE_WORK_BEGAN] = note_work_began
    status = "interrupted"
    view: PipelineRun | None = None
    sim: list[str] | None = None  # an evaluation's models whose stored answers came from the simulator (its end)
    end_written = False  # the exports and report below were written to the end (the manifest's mark is cleared)
    try:
        # rows an earlier version's rules scored, brought up to these rules before any worker runs (no model call);
        # after the run is recorded, so a damaged row met here ends it as "failed", as the workers' would
        ctx.services[C.SERVICE_OWN_STAGES] = frozenset(s.name for s in stages)
        # live42 #1: every live aggregator of the campaign rebuilds from the store before its live rewrite, not only
        # from the rows it leased, while another process may run that stage too
        ctx.services[C.SERVICE_AGGREGATED_ELSEWHERE] = functools.partial(
            aggregated_elsewhere, cfg.state_dir(), [s.name for s in all_stages], ctx.services.get("ledger"))
        # upgrade41 #4: the refresh's writes (through the work-began hook) and its end are marked in the manifest,
        # so `status` after a kill inside it says that the next run finishes it (kinds without one mark nothing)
        refreshes = type(kind).refresh_scored_rows is not CampaignKind.refresh_scored_rows
        refreshing[0] = "on" if refreshes else None
        for ln in await kind.refresh_scored_rows(cfg, ctx):
            print(ln, file=sys.stderr)
        with began_lock:
            refreshing[0] = None
        if refreshes:
            manifest.record_refresh(run_id, done=True)
        ledger = ctx.get("ledger")
        progress = Progress(
            cfg.state_dir() / C.PROGRESS_FILE,
            spend=lambda: ledger.summary().to_json(),
            live=live,
            pipeline=[(s.name, s.input_edge, s.output_edge) for s in kind.stages(cfg)],  # ETA: work upstream too
            http=lambda: {h: asdict(st) for h, st in ctx.get("http").stats().items()},
            # cfg as run: local fakes' 127.0.0.1 ports named, and said to be the run's fakes
            host_labels=host_labels(cfg, ctx.services.get("config_as_written")),
            planned_by_model=planned_by_model,  # `status` names each model's answered / planned calls
            run_id=run_id,  # `status` merges the records of a scale-out run's processes by it
            lane_work=lane_work,  # the ETA: each model's tasks left at its own rate
            # a long Retry-After pause gets a console line once a minute (host, time left, calls waiting)
            pauses=lambda: ctx.get("http").pauses_in_force(),
        )
        tick: Any = progress
        handoff: IdleHandoffTick | None = None
        if watch and not only_stages:  # a scale-out process (--stages) leaves the hand-off to the last one
            tick = handoff = kind_handoff_tick(kind, cfg, ctx, progress, export=export)
        if baseline is not None and (not only_stages or any(s.input_edge == kind.plan_edge for s in stages)):
            # a watching evaluation over a crawl's folder: plan the trials its hand-offs add (the process that
            # runs the stage reading the planned edge, when the campaign is spread over processes)
            tick = WatchReplanTick(tick, kind, cfg, ctx, queues[kind.plan_edge], baseline,
                                   planned_by_model=planned_by_model, progress=progress)
        try:
            view = await run_pipeline(
                cfg.name,
                stages,
                queues,
                ctx,
                burst=not watch,
                tick=tick,
                handle_signals=handle_signals,
                runner_options={"visibility_timeout_s": cfg.queue.visibility_timeout_s, "lease_ahead": True,
                                "probe_after_s": cfg.queue.watch_probe_after_s,
                                "probe_max_s": cfg.queue.watch_probe_max_s,
                                "task_timeout_s": cfg.queue.task_timeout_s},
                pipeline=all_stages if only_stages else None,
                # fixstages44 #3: on Redis also the stages of the campaign's live processes on other machines
                stages_elsewhere=functools.partial(stages_elsewhere_now, cfg.state_dir(),
                                                   [s.name for s in all_stages], ledger) if only_stages else None,
                # fixstages43: a downstream process started before its upstream one waits for it to start
                stages_started=functools.partial(stages_run_since, cfg.state_dir(), [s.name for s in all_stages],
                                                  started_unix) if only_stages else None,
                # fixstagesbudget43: not a stage the cost cap stopped, its cap leaving no room (it would stop again)
                upstream_stop=functools.partial(
                    upstream_budget_stop, cfg.state_dir(), [s.name for s in all_stages], ledger,
                    getattr(cfg, "source", None) or "CONFIG") if only_stages else None,
                # a stage of this process that ended no longer keeps other processes waiting for its input (also
                # of a whole-campaign run: a --watch run whose model caller stopped, every key refused, goes on)
                stage_ended=functools.partial(record_stage_ended, manifest, run_id, ledger,
                                              [s.name for s in stages] if only_stages else None, set()),
                # a second signal ends the process at once: the manifest says so rather than "running"
                forced_exit=functools.partial(manifest.mark_forced_exit, run_id),
                grace_s=campaign_stop_grace_s(cfg),
            )
        except BaseException:
            if handoff is not None:
                # the pipeline raised (or was cancelled) while a hand-off may be writing in its thread: wait
                # for it, so its failure is logged and it does not write on while the services close
                with anyio.CancelScope(shield=True):
                    await handoff.wait(ending=True)
            raise
        late = ctx.services.get(SERVICE_LATE_SIGNALS)
        if late is not None:  # from here on a signal cuts nothing short (LateSignals); the pipeline's is gone
            late.on_forced_exit = functools.partial(manifest.mark_forced_exit, run_id)
            late.install(stopped=view.stopped_by_signal)
        if handoff is not None:
            # an idle hand-off still writing in its thread ends first: the report and export below write the
            # same files, and must be the last to
            await handoff.wait()
        # calls cut off when the grace period ended closed their reservations fire-and-forget on the
        # database thread (geoagent.workers.billing.close_failed_call): wait for those writes, so the
        # summary, report and export read the ledger after them (a summary of "$0 unknown-outcome" while
        # `status` a second later shows the cut-off calls' reservations was the walkthrough's finding)
        await settle_pending_ledger_writes(ledger)
        counts = await view.counts()
        from geoagent.runtime.backend import check_server_holds

        # Redis: empty queues on a server that lost the campaign (restarted without persistence, flushed) are no
        # finished campaign (redis36 #1: "complete" with 0 of 60 done)
        check_server_holds(cfg, ran_here=True)
        campaign_drained = not any(c.ready or c.leased for c in counts.values())
        # fixstagesbudget43: the work left waits only for stages the cost cap stopped (their cap leaving no room, no
        # process at them): this process takes the campaign as far as its budget goes, so it ends as the capped
        # run does ("budget exhausted") and writes the report over the answers stored, as that run would have
        budget_stops: dict[str, str | None] = {}
        if only_stages and not campaign_drained:
            own_names = {s.name for s in stages}
            for st in all_stages:
                c = counts.get(st.input_edge)
                if st.name not in own_names and c is not None and c.ready and not c.leased:
                    budget_stops[st.name] = await upstream_budget_stop(
                        cfg.state_dir(), [x.name for x in all_stages], ledger,
                        getattr(cfg, "source", None) or "CONFIG", st.name)
        stopped_inputs = {st.input_edge for st in all_stages if budget_stops.get(st.name)}
        capped_drained = bool(stopped_inputs) and all(e in stopped_inputs for e, c in counts.items()
                                                      if c.ready or c.leased)
        # a scale-out process (--stages) answers for its own stages' input edges while other processes still
        # work (their queued or leased work, and their dead letters, are theirs to report); the process that
        # finishes the campaign answers for every edge, so work dead-lettered by a process that ended earlier
        # still makes the campaign ``incomplete``
        judged = (set(counts) if not only_stages or campaign_drained or capped_drained
                  else {s.input_edge for s in stages})
        # a --stages process's stage that drained its input (docs/scale-out.md, "Scale-out on one machine") left
        # nothing there: what another process queued on that edge after it is theirs, not this process's failure
        # (its stage, ready there: waiting for a process to take them; tasks leased there are another's at work)
        arrived_late = {r.stage.input_edge: (r.stage.name, counts[r.stage.input_edge].ready)
                        for r in view.runners if only_stages and r.stats.drained and r.stage.input_edge in counts}
        # tasks set aside because the current plan no longer holds them are no failure of the run
        superseded = {e: n for e, q in queues.items() if counts[e].dead and (n := await count_superseded(q))}
        dead = {e: await q.dead_letters(20 + superseded.get(e, 0)) for e, q in queues.items() if counts[e].dead}
        dead = {e: items[:20] for e, d in dead.items()
                if (items := [x for x in d if not x.reason.startswith(SUPERSEDED)])}
        auth = ctx.services.get(AUTH_BREAKER_SERVICE)
        model_hosts = ctx.services.get(HOST_BREAKER_SERVICE)
        blocked = any(r.stats.blocked for r in view.runners if r.stage.name == C.STAGE_MODEL_CALLER)
        left = counts[C.EDGE_REQUESTS].ready if blocked and C.EDGE_REQUESTS in counts else None
        hosts_down = model_hosts is not None and bool(model_hosts.opened)
        # every model stopped, some by an unreachable host: the host lines say what was left queued
        auth_lines = auth.report_lines(None if hosts_down else left) if auth is not None else []
        # models whose host answered that their path or model does not exist, K times in a row (walk39 #6: their
        # tasks held, left queued untouched): a config to fix, not a credential, so the run ends incomplete
        nf_lines = (auth.report_lines(None if hosts_down or auth_lines else left, not_found=True)
                    if auth is not None else [])
        # other refused credentials a stage reports (the crawl's Mapillary token, an auditor's key or account): one line
        # per stage with work left queued (the first such stage's line when none has). Whether or not its runner saw
        # the refusal before it stopped leasing (review35 #2: a stop, a budget stop or a drained input can end the
        # lease loop first, and the refusal went unsaid)
        token_lines: list[tuple[str, int]] = []
        for r in view.runners:
            lines_of = getattr(r.stage, "auth_lines", None)
            for ln in (lines_of() if callable(lines_of) else []):
                ready = counts[r.stage.input_edge].ready if r.stage.input_edge in counts else 0
                token_lines.append((f"{r.stage.name}: {ln}; {ready} {r.stage.input_edge} left queued (re-run the same "
                                    "command once that is fixed to resume)", ready))
        token_lines = [t for t in token_lines if t[1]] or token_lines[:1]
        auth_lines += [ln for ln, _ in token_lines]
        # models whose host could not be reached (model caller's breaker: their tasks left queued, untouched),
        # then stages stopped by the runner's unreachable-host breaker
        unreachable_lines = model_hosts.report_lines(left) if hosts_down else []
        # models stopped because their answers kept coming back empty at the output-token limit (left queued)
        cutoff = ctx.services.get(CUTOFF_BREAKER_SERVICE)
        cut_lines = (cutoff.report_lines(None if hosts_down or auth_lines or nf_lines else left)
                     if cutoff is not None else [])
        unreachable_lines = nf_lines + cut_lines + unreachable_lines
        unreachable_lines += [ln for r in view.runners for ln in r.unreachable_lines(
            counts[r.stage.input_edge].ready if r.stage.input_edge in counts else None)]
        # every runner of this process drained its input and ended by itself (burst mode): a signal that came as
        # they wound down cut nothing short, whatever another process queued on their input since (arrived_late)
        drained = (bool(view.runners) and all(r.stats.drained for r in view.runners)) or stages_drained(
            kind.stages(cfg), [s.name for s in stages], counts)
        if view.stopped_by_signal and not drained:
            # a signal whose stop left work: interrupted. One that came when every task had ended (the queues
            # were drained meanwhile, or it landed as the last stage finished) cut nothing short: the run ends
            # as its work did, as a --watch process stopped when drained does
            status, code = "interrupted", EXIT_INTERRUPTED
        elif auth_lines:
            status, code = STATUS_AUTH, EXIT_AUTH
        elif view.budget_stopped or capped_drained:
            status, code = "budget exhausted", EXIT_BUDGET
        elif hosts_down or nf_lines or cut_lines or any(c.dead - superseded.get(e, 0) or ((c.ready or c.leased) and e not in arrived_late)
                               for e, c in counts.items() if e in judged):
            status, code = "incomplete", EXIT_INCOMPLETE
        elif only_stages and any(c.ready or c.leased for c in counts.values()):
            # this process's stages are done, other processes' stages are not: not "complete"
            status, code = STATUS_STAGES_DONE, EXIT_COMPLETE
        else:
            status, code = "complete", EXIT_COMPLETE
        callers = [r for r in view.runners if r.stage.name == C.STAGE_MODEL_CALLER]
        spend_json = {**ledger.summary().to_json(), "by_model": ledger.spend_by_model()}
        # messages planned while watching (a crawl --watch picking up cities added to its config) count too
        n_watched = int((ctx.services.get(C.SERVICE_PLANNED_DURING_RUN) or [0])[0])
        n_planned += n_watched
        outcome = Outcome(
            cfg.name, status, code, n_planned, counts, spend_json, dead,
            elapsed_s=time.monotonic() - t0, stop_reasons=auth_lines + unreachable_lines, plan_unit=kind.plan_unit,
            own_stages=[s.name for s in stages] if only_stages else [],
            budget_fixes=list(dict.fromkeys(f for r in view.runners for f in r.stats.budget_fixes)),
            process_calls=ledger.calls_settled_here(),
            process_answered=sum(r.stats.done for r in callers) if callers else None,
            planned_by_model=planned_by_model,
            answered_by_model=_answered_by_model(ctx, planned_by_model, cfg, kind.plan_edge),
            answered_at_start=answered_at_start,
            planned_while_watching=n_watched,
            superseded=superseded,
            shared_queues=uses_redis(cfg),
            others_at_start=bool(ctx.services.get(SERVICE_OTHERS_AT_START)),
            **({"watched_how": f"planned from the changed {kind.plan_inputs_label} while watching"}
               if baseline is not None else {}),
            **_replay_figures(cfg, ledger),
        )
        for line in auth_lines + unreachable_lines:
            log.error("campaign %s: %s", cfg.name, line)
        # the report and the exports describe the whole campaign: a scale-out process writes them only
        # when the campaign as a whole is drained (the last process to finish), so a partial report from
        # a process that ended early never replaces the final one
        if only_stages and not campaign_drained and not capped_drained:
            outcome.extra_lines = [
                f"  {n} task{'s' if n != 1 else ''} on {edge} queued by another process after stage {name} had "
                f"finished here; run `--stages {','.join(s.name for s in stages)}` again (or with --watch) to take them"
                for edge, (name, n) in arrived_late.items() if n]
            outcome.extra_lines.append("  report and export left to the process that finishes the campaign "
                                       "(other stages still have work queued or in flight)")
            # redis41 #5: the last line says what waits for which stage and what takes it (a model caller's answers
            # waiting for a collector that stopped read as finished, or lost)
            every = kind.stages(cfg)
            others_alive = getattr(ledger, "others_alive", None)
            outcome.extra_lines += waiting_lines(
                every, [s.name for s in stages], counts,
                elsewhere=stages_run_elsewhere(cfg.state_dir(), [s.name for s in every]),
                others_alive=bool(others_alive()) if callable(others_alive) else None,
                config=getattr(cfg, "source", None) or "CONFIG", budget_stops=budget_stops)
            return outcome
        # resume40 #1: the files below are rewritten one by one (each an interim one until this run's are written);
        # a kill or a forced exit among them must not leave `status` saying "campaign complete" over them: the mark
        # stays in the manifest until stop_run (end_written) clears it
        manifest.record_writing_end(run_id)
        from geoagent.runtime.backend import END_WRITING, mark_end_on_server

        mark_end_on_server(cfg, run_id, END_WRITING)  # Redis: for the other machines' status (redis41 #3)
        if export:
            # the config as written: a sandbox model fake is known by its *.sandbox.invalid URL (the export's
            # simulated column), which the running copy has replaced by a local port
            from geoagent.runtime.export import export_together, with_spend

            written = ctx.services.get("config_as_written", cfg)
            # every table renamed into place together, the note last (resume40 #2)
            outcome.export_files = [t.parquet for t in export_together(written, lambda: with_spend(
                kind.export(written, ctx.get("store")), ctx.get("ledger"), written))]
        if kind.plan_edge == C.EDGE_REQUESTS:
            # answers made under different request settings (a config changed between runs): the reports and
            # the summary say so, the manifest counts them
            from geoagent.runtime.drift import params_mix_json

            from geoagent.runtime.drift import mixed_setting_names, restrict_mix
            from geoagent.runtime.manifest import read_manifest

            # only a recorded change that mixed (config_mix) makes a mix, and only in the settings it changed: a
            # plan varies some settings by design (a GeoHint repeat's seed, a replay's released model)
            names = mixed_setting_names(read_manifest(cfg.state_dir()))
            from geoagent.runtime.drift import not_sent_of

            # compared by what the requests carried: a setting the model was not sent makes no group of its own
            mix = restrict_mix(kind.params_mix(cfg, ctx), names, not_sent_of(cfg)) if names else {}
            ctx.services[C.SERVICE_PARAMS_MIX] = mix
            params_mix = params_mix_json(mix)
        outcome.report_files = await kind.report(cfg, ctx, outcome)
        outcome.extra_lines = kind.summary_lines(cfg, ctx, outcome)
        if capped_drained:  # fixstagesbudget43: what waits for which stage, the cap to raise and what takes it
            from geoagent.runtime.manifest import stages_run_elsewhere

            outcome.extra_lines += waiting_lines(
                all_stages, [s.name for s in stages], counts,
                elsewhere=stages_run_elsewhere(cfg.state_dir(), [s.name for s in all_stages]), others_alive=None,
                config=getattr(cfg, "source", None) or "CONFIG", budget_stops=budget_stops)
        outcome.stop_signal = view.stop_signal if view.stopped_by_signal else None
        if view.stopped_by_signal and status != "interrupted" and not watch:
            outcome.extra_lines.append("  note: the stop signal came when every task had ended: it cut nothing short")
        unusable = unusable_answer_lines(kind.answer_quality(cfg, ctx))
        if unusable:
            # a model with answers and none usable: a "complete" run would read as done with empty scores
            outcome.stop_reasons = outcome.stop_reasons + [ln.strip() for ln in unusable]
            for line in unusable:
                log.error("campaign %s: %s", cfg.name, line.strip())
            if status == "complete":
                status, code = STATUS_NO_USABLE, EXIT_NO_USABLE_ANSWERS
                outcome.status, outcome.exit_code = status, code
        if params_mix:
            from geoagent.runtime.drift import MIX_WARNING, not_sent_of, params_mix_lines

            outcome.extra_lines += [f"  warning: {MIX_WARNING}:"] + [
                f"    {ln}" for ln in params_mix_lines(ctx.services[C.SERVICE_PARAMS_MIX], not_sent_of(cfg))]
        if kind.plan_edge == C.EDGE_REQUESTS:  # an evaluation: say when its answers came from the simulator
            from geoagent.runtime.export import simulated_answer_models
            from geoagent.sandbox.launch import simulated_note

            # what the stored answers recorded (a sandbox fake on a port of one's own too), else the config's rule
            sim = simulated_answer_models(ctx.services.get("store"), ctx.services.get("config_as_written", cfg),
                                          configured_only=True)
            if sim:
                outcome.extra_lines.append("  !!! NOTE: " + simulated_note(sim, task=cfg.campaign.kind))
                if cfg.models and all(m.name in sim for m in cfg.models):
                    outcome.spend_note = SIMULATED_SPEND_NOTE
        end_written = True
        from geoagent.runtime.backend import END_WRITTEN

        mark_end_on_server(cfg, run_id, END_WRITTEN)  # only over this run's own writing mark (redis41 #3)
        return outcome
    except BaseException as exc:
        if not isinstance(exc, (KeyboardInterrupt, anyio.get_cancelled_exc_class())):
            # an error, not a stop: the pipeline or a stage's start raised (a damaged stored row), or the work
            # ended but writing its end failed (a report folder not writable, a full disk); the manifest must
            # call it neither complete nor interrupted (status would say "re-run to resume", which meets the
            # same error): its report and exports were not (all) rewritten
            status = "failed"
        raise
    finally:
        for q in queues.values():
            await q.close()
        # messages planned while watching (a crawl --watch's added cities) count in the entry's "planned", and
        # the config it ended with (those cities) is recorded: the next run's drift check compares against it
        n_planned_all = n_plan_start + int((ctx.services.get(C.SERVICE_PLANNED_DURING_RUN) or [0])[0])
        try:
            ended = kind.config_at_end(ctx.services.get("config_as_written", cfg), ctx)
        except Exception as exc:  # noqa: BLE001 - the manifest keeps the config of the start; the run's end goes on
            log.warning("campaign %s: the config this run ended with is not recorded: %s", cfg.name, exc)
            ended = None
        manifest.stop_run(run_id, status=status, summary={"planned": n_planned_all, **(
            {"spend": spend_json} if spend_json is not None else {})}, params_mix=params_mix,
            planned=n_planned_all, config=ended, simulated_answers=sim, end_written=end_written)


class IdleHandoffTick:
    """A tick callback for a ``--watch`` run: ``tick(view)``, then, when every queue of the campaign is idle
    (nothing ready or leased on any edge) and the done / dead counts changed since the last hand-off (new
    work finished: the first drain, a city added to a watched crawl's config), ``handoff(complete)`` once
    (``complete``: no edge holds dead letters; :meth:`CampaignKind.idle_handoff`).

    The hand-off runs in a worker thread of its own, off the progress loop: the tick returns at once, so the
    live display, the progress stream and the workers go on while a large crawl's tables are written. Never
    two at once: while one runs, idle ticks start none (a change seen meanwhile is handed off at the first
    idle tick after it ended). The lines it returns are printed and logged from the loop, at the next tick or
    at :meth:`wait`, which the engine awaits before the end of the run writes the report and tables itself,
    so a stop never races a hand-off in progress (each table is also written atomically: a temporary file of
    its own renamed over it); when the pipeline raises instead of ending, the engine awaits it too
    (``wait(ending=True)``) before the error goes on, so its failure is logged. With ``snapshot``, that callable
    runs on the loop's thread just before each hand-off and its result is the hand-off's second argument: the
    thread reads copies of the loop's mutable state, never the live sets the stages add to
    (:meth:`CampaignKind.handoff_snapshot`). Idle ticks with nothing new write nothing, so the tables' files
    keep their time stamps. A failing hand-off is logged as a warning and retried at the next change; it
    never stops the run."""

    def __init__(self, tick: Any, handoff: Callable[..., list[str]],
                 snapshot: Callable[[], Any] | None = None) -> None:
        self.tick = tick
        self.handoff = handoff
        #: called on the loop's thread before each hand-off; its result is the hand-off's second argument
        self.snapshot = snapshot
        self._last: Any = None
        self._future: Any = None  # concurrent.futures.Future of the hand-off in progress (or not yet collected)
        self._pool: Any = None

    def busy(self) -> bool:
        """Whether a hand-off is running in its thread now."""
        return self._future is not None and not self._future.done()

    async def __call__(self, view: Any) -> None:
        await self.tick(view)
        self._collect()
        if view.stopped_by_signal or view.finished_at is not None or self.busy():
            return  # the end of the run writes the report and hand-off itself (after wait()); one at a time
        counts = await view.counts()
        if any(c.ready or c.leased for c in counts.values()):
            return
        mark = tuple(sorted((e, c.done, c.dead) for e, c in counts.items()))
        if mark == self._last or not any(c.done for c in counts.values()):
            return
        self._last = mark
        # tasks set aside as no longer planned (superseded) are no failure: they leave the hand-off complete
        queues = getattr(view, "queues", None) or {}
        aside = {e: await count_superseded(queues[e]) for e, c in counts.items() if c.dead and e in queues}
        args: tuple[Any, ...] = (not any(c.dead - aside.get(e, 0) for e, c in counts.items()),)
        if self.snapshot is not None:
            try:  # on the loop's thread: the thread then reads only these copies
                args += (self.snapshot(),)
            except Exception as exc:  # noqa: BLE001 - as a failed hand-off: logged, retried at the next change
                from geoagent.runtime.http import exception_text

                log.warning("idle hand-off failed (retried when new work is done, and at the end of the run): %s",
                            exception_text(exc))
                return
        if self._pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="idle-handoff")
        self._future = self._pool.submit(self.handoff, *args)

    def _collect(self, *, ending: bool = False) -> None:
        """Print and log the lines of a hand-off that has ended (a warning if it failed); no-op otherwise.
        ``ending``: the run is ending on an error (the warning then says the tables were not rewritten)."""
        fut = self._future
        if fut is None or not fut.done():
            return
        self._future = None
        from geoagent.runtime.http import exception_text

        exc = fut.exception()
        if exc is not None:  # the watching run goes on; retried at the next change, and the end of the run writes
            why = ("the run is ending on an error: re-run to write the hand-off tables" if ending else
                   "retried when new work is done, and at the end of the run")
            log.warning("idle hand-off failed (%s): %s", why, exception_text(exc))
            return
        for line in fut.result() or []:
            log.info("%s", line)
            print(line, flush=True)

    async def wait(self, *, ending: bool = False) -> None:
        """Wait for the hand-off in progress, if any, to end (polling, so a cancel still gets through) and print
        its lines, or log its failure; then free the thread. The engine awaits it before the end of the run
        writes the tables, and (``ending``, shielded from cancellation) when the pipeline raised, so a failing
        hand-off is logged and no thread writes on after the run has closed its services."""
        while self.busy():
            await anyio.sleep(0.05)
        self._collect(ending=ending)
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None


def idle_handoff_tick(tick: Any, handoff: Callable[..., list[str]],
                      snapshot: Callable[[], Any] | None = None) -> IdleHandoffTick:
    """The tick callback of a ``--watch`` run that hands off at each idle drain (:class:`IdleHandoffTick`: the
    hand-off runs in a worker thread, one at a time; await its ``wait()`` before the end of the run writes).
    ``handoff(complete)``, or ``handoff(complete, snapshot())`` with ``snapshot`` (called on the loop's thread)."""
    return IdleHandoffTick(tick, handoff, snapshot)


def kind_handoff_tick(kind: CampaignKind, cfg: Any, ctx: StageContext, tick: Any, *, export: bool) -> IdleHandoffTick:
    """The idle hand-off tick of a ``--watch`` run of ``kind`` (what the engine runs): ``tick`` (the progress
    callback), then at each idle drain with new work :meth:`CampaignKind.idle_handoff` in a worker thread
    (:class:`IdleHandoffTick`). ``export``: the run exports (``run_campaign(export=...)``, True for ``run.py``).
    Each hand-off first records that the run's work began (``ctx.services[constants.SERVICE_WORK_BEGAN]``, when
    set): it rewrites the tables and report, so a kill among them leaves them unfinished (review40b #5)."""

    def handoff(complete: bool, snap: Any) -> list[str]:
        began = ctx.services.get(C.SERVICE_WORK_BEGAN)
        if callable(began):
            began()
        return kind.idle_handoff(cfg, ctx, export=export, complete=complete, snapshot=snap)

    return idle_handoff_tick(tick, handoff, snapshot=lambda: kind.handoff_snapshot(cfg, ctx))


@dataclass(frozen=True)
class InputsFingerprint:
    """What a set of plan input files held: per path, its ``(size, mtime_ns, inode)`` (``stats``, None when
    absent) and the SHA-256 of its bytes (``digests``, None when absent or unreadable). Two fingerprints with
    the same digests are the same inputs, whatever the time stamps (a crawl's hand-off rewriting the same
    table changes nothing)."""

    paths: tuple[str, ...]
    stats: tuple[tuple[int, int, int] | None, ...]
    digests: tuple[str | None, ...]

    @staticmethod
    def stat(paths: Sequence[str | Path]) -> tuple[tuple[int, int, int] | None, ...]:
        """``(size in bytes, mtime in ns, inode)`` of each path, None for one that cannot be stat'ed."""
        out: list[tuple[int, int, int] | None] = []
        for p in paths:
            try:
                st = os.stat(p)
            except OSError:
                out.append(None)
                continue
            out.append((st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(out)

    @classmethod
    def take(cls, paths: Sequence[str | Path]) -> "InputsFingerprint":
        """Stat and hash ``paths`` now (reads each file whole; blocking: call it off the event loop for big
        files). The stats are taken before the bytes, so a file replaced in between shows as changed later."""
        import hashlib

        stats = cls.stat(paths)
        digests: list[str | None] = []
        for p in paths:
            try:
                digests.append(hashlib.sha256(Path(p).read_bytes()).hexdigest())
            except OSError:
                digests.append(None)
        return cls(tuple(str(p) for p in paths), stats, tuple(digests))

    def changed(self, other: "InputsFingerprint") -> list[str]:
        """The paths whose content differs between ``self`` and ``other`` (created, removed or rewritten)."""
        return [p for p, a, b in zip(self.paths, self.digests, other.digests) if a != b]


class WatchReplanTick:
    """A tick callback for a ``--watch`` run whose kind names :meth:`CampaignKind.plan_inputs` (a GeoVerify or
    GeoHint campaign over a crawl's folder): ``tick(view)``, then, at each idle point (nothing ready or leased
    on any edge, the run not stopping and not budget-stopped), a look at those files: their size, time stamp
    and inode each tick, their content hash (in a worker thread) only when one of those moved. When the
    content differs from what the last plan read, the kind plans again (:meth:`CampaignKind.plan`, the same
    planning a plain re-run does, on the loop's thread) and the plan is queued: a task key already queued, done
    or dead-lettered is a no-op (:meth:`~geoagent.runtime.queue.WorkQueue.put_many`), so only the new trials'
    requests are added, and a request whose answer is stored is answered from the store by the model caller,
    never asked again; the ledger's cost cap holds for the new calls as for the others.

    The new tasks count in the run's planned figures as a re-run's plan would: the ``planned_by_model`` dicts
    (the engine's, for the summary, and ``progress.planned_by_model``, for the progress stream and ``status``)
    and ``ctx.services[SERVICE_PLANNED_DURING_RUN]`` (the summary's ``planned N``). One line is printed and
    logged per re-plan (``watch: the trial table changed since planning (...): re-planned, N new requests
    queued ...``); a re-plan that raises (a table that no longer imports, images a real model would get as
    placeholders) is a warning line saying to fix it or re-run, and the run goes on with what it had."""

    def __init__(self, tick: Any, kind: CampaignKind, cfg: Any, ctx: StageContext, queue: Any,
                 baseline: InputsFingerprint, *, planned_by_model: dict[str, int], progress: Any = None) -> None:
        self.tick = tick
        self.kind, self.cfg, self.ctx, self.queue = kind, cfg, ctx, queue
        self.planned_by_model = planned_by_model
        self.progress = progress
        self._fp = baseline
        self._stats = baseline.stats
        self._warnings = set(kind.plan_warnings(cfg))
        #: re-plans done (lines printed), for tests and the summary
        self.replans: list[str] = []

    async def __call__(self, view: Any) -> None:
        await self.tick(view)
        if view.stopped_by_signal or view.finished_at is not None or view.budget_stopped:
            return
        stats = InputsFingerprint.stat(self._fp.paths)
        if stats == self._stats:
            return
        counts = await view.counts()
        if any(c.ready or c.leased for c in counts.values()):
            return  # idle points only: the work planned so far first
        fp = await anyio.to_thread.run_sync(InputsFingerprint.take, list(self._fp.paths))
        self._stats = fp.stats
        changed = fp.changed(self._fp)
        if not changed:
            return
        self._fp = fp
        await self._replan(changed)

    async def _replan(self, changed: list[str]) -> None:
        from geoagent.runtime.http import exception_text
        from geoagent.textfmt import mapping_text

        kind, label = self.kind, self.kind.plan_inputs_label
        names = ", ".join(changed)
        try:
            plan = await kind.plan(self.cfg, self.ctx)
            n, added, by_model = await enqueue_new(PlanRecorder(self.cfg.state_dir()).wrap(plan), self.queue)
        except Exception as exc:  # noqa: BLE001 - the watching run goes on with what it had
            line = (f"watch: the {label} changed since planning ({names}), but planning again failed: "
                    f"{exception_text(exc)}; fix it (it is looked at again when it changes) or re-run to "
                    f"include its new {kind.plan_unit}")
            log.info("%s", line)  # said on stdout below: a warning record would repeat it on stderr
            print(line, flush=True)
            self.replans.append(line)
            return
        if added:
            counter = self.ctx.services.setdefault(C.SERVICE_PLANNED_DURING_RUN, [0])
            counter[0] += added
            for model, k in by_model.items():
                self.planned_by_model[model] = self.planned_by_model.get(model, 0) + k
                pbm = getattr(self.progress, "planned_by_model", None)
                if isinstance(pbm, dict) and pbm is not self.planned_by_model:
                    pbm[model] = pbm.get(model, 0) + k
        per_model = f" ({mapping_text(by_model)})" if by_model else ""
        line = (f"watch: the {label} changed since planning ({names}): planned again, {added} new "
                f"{kind.plan_unit} queued{per_model}; {n - added} already queued or done (not asked again)")
        log.info("%s", line)
        print(line, flush=True)
        self.replans.append(line)
        for w in kind.plan_warnings(self.cfg):
            if w not in self._warnings:
                self._warnings.add(w)
                log.info("%s", w)  # said on stdout below: a warning record would repeat it on stderr
                print(f"warning: {w}", flush=True)


async def enqueue_new(plan: Iterable[Message], queue: Any, *,
                      chunk: int | None = None) -> tuple[int, int, dict[str, int]]:
    """Put the planned messages into ``queue`` in chunks (as :func:`enqueue_plan`: existing task keys are
    no-ops) and count what was new. Returns ``(planned, added, added per model)``: the messages in ``plan``,
    those whose key the queue did not hold in any state, and of those the model-call payloads per ``model``."""
    chunk = chunk or PLAN_CHUNK
    n = added = 0
    by_model: dict[str, int] = {}
    batch: list[Message] = []

    async def flush() -> None:
        nonlocal added
        groups: dict[str | None, list[Message]] = {}
        for msg in batch:
            payload = msg[1] if isinstance(msg, tuple) and len(msg) > 1 else None
            model = payload.get("model") if isinstance(payload, dict) else None
            groups.setdefault(model if isinstance(model, str) else None, []).append(msg)
        for model, msgs in groups.items():
            k = await queue.put_many(msgs)
            added += k
            if model is not None and k:
                by_model[model] = by_model.get(model, 0) + k
        batch.clear()

    for msg in plan:
        n += 1
        batch.append(msg)
        if len(batch) >= chunk:
            await flush()
    if batch:
        await flush()
    return n, added, by_model


def _open_queue(cfg: Any, url: str | None, edge: str) -> Any:
    """The queue of ``edge`` on the campaign's backend (the ``open_queue`` service: Redis when ``url``, else the
    SQLite file under ``cfg.queues_root()``)."""
    if url is not None:
        from geoagent.runtime.redis_queue import open_redis_queue

        return open_redis_queue(url, cfg.name, edge, **cfg.queue_options())
    from geoagent.runtime.queue import open_queue

    return open_queue(cfg.queues_root(), cfg.name, edge, **cfg.queue_options())


async def settle_pending_ledger_writes(ledger: Any) -> None:
    """Wait until every ledger write queued so far on the campaign database's thread has committed.

    A call cancelled in flight (the stop's grace period ended) hands its unknown-outcome mark or release to
    the database thread without awaiting it (:func:`geoagent.workers.billing.close_failed_call`); the thread
    runs its jobs in order, so an empty job queued now completes after all of them. Call it before reading
    the ledger for the run's summary. No-op for a ledger without that thread (``ledger.db.run``).
    """
    run = getattr(getattr(ledger, "db", None), "run", None)
    if run is None:
        return
    with anyio.CancelScope(shield=True):  # the summary must not read half-settled totals, even on a 2nd signal
        await run(_no_op)


def _no_op() -> None:
    return None


def stages_drained(all_stages: Sequence[Stage], own: Sequence[str], counts: dict[str, QueueCounts]) -> bool:
    """Whether this process's stages are drained: their input edges, and every edge upstream of them, have
    nothing ready or leased.

    ``all_stages`` is the campaign's pipeline in data-flow order, ``own`` the names of the stages this
    process runs, ``counts`` the queue counts by edge. Used to tell a ``--watch`` process stopped after the
    campaign finished (complete) from one stopped with work left (interrupted).
    """
    own_set = set(own)
    last = max((i for i, s in enumerate(all_stages) if s.name in own_set), default=-1)
    edges = {s.input_edge for s in all_stages[: last + 1]}
    return all(not (counts[e].ready or counts[e].leased) for e in edges if e in counts)


async def upstream_budget_stop(state_dir: Any, all_stages: Sequence[str], ledger: Any, config: str,
                               stage: str) -> str | None:
    """Why no process can run stage ``stage`` on under the campaign's cost cap, or None (fixstagesbudget43).

    A sentence when the last run that ran the stage ended ``budget exhausted``, stopped by the USD cap
    (:func:`geoagent.runtime.manifest.last_budget_stop`), and ``ledger`` (this process's: it reserves against its
    config's ``[budget] cap_usd``, the cap a process started now gets) leaves no more room than then: its cap is not
    above the one that run stopped at, or the billed spend (settled + unknown outcome, USD) plus the largest call
    that run's cap refused does not fit under it. That is the rule by which ``status`` says "raise [budget] cap_usd"
    rather than "re-run" (:func:`geoagent.status.budget_resume_hint`). A cap raised enough: None, a process that
    runs the stage goes on.

    ``config``: the config path as given, for the command named. A ``--stages`` process does not wait for a stage
    named so (:class:`geoagent.runtime.worker.StageRunner` ``upstream_stop``), and its closing lines say it
    (:func:`waiting_lines` ``budget_stops``)."""
    from geoagent.runtime.manifest import last_budget_stop

    stop = last_budget_stop(state_dir, stage, all_stages)
    if stop is None:
        return None
    s = await ledger.asummary()
    billed, cap_now = s.spent_usd + s.unknown_usd, s.cap_usd
    stopped_at, refused = stop["cap_usd"], stop["refused_usd"]
    raised = stopped_at is not None and cap_now > stopped_at + 5e-10
    if raised and (refused is None or billed + refused <= cap_now + 5e-10):
        return None
    call = f"; it refused a call of up to {usd(refused)}" if refused is not None else ""
    at = f" at the {usd(stopped_at)} cap" if stopped_at is not None else ""
    # the config's cap, where it is not the one the run stopped at (raised too little)
    now = f" (now {usd(cap_now)})" if stopped_at is None or abs(cap_now - stopped_at) > 5e-10 else ""
    return (f"the campaign's cost cap stopped it (run {stop['run_id']} ended budget exhausted{at}; billed "
            f"{usd(billed)}{call}): raise [budget] cap_usd in {config}{now}{cap_to_raise_to(billed, refused, stopped_at)}"
            f", then `run.py run {config} --stages {stage}` "
            f"(or `run.py run {config}`, every stage) takes its work")


def cap_to_raise_to(billed: float, refused: float | None, stopped_at: float | None) -> str:
    """How far to raise ``[budget] cap_usd`` after the cap stopped a stage, as ``status`` says it
    (:func:`geoagent.status.budget_resume_hint`), for :func:`upstream_budget_stop`'s line: ``" to at least $X"``,
    the billed spend (USD) plus the largest call the cap refused (rounded up to the shown fraction of a cent), when
    that is above the cap the run stopped at (USD, None: not recorded); else ``" above the $S it stopped at"``;
    ``""`` when neither is known. fixstages44: the line quoted the config's cap now as "the cap", neither the one
    the run stopped at nor how far to raise it."""
    from geoagent.status import format_usd

    need = None if refused is None else billed + float(refused)
    if need is not None and (stopped_at is None or need > stopped_at + 5e-10):
        # rounded UP to the shown cent fraction, as status does (a $0.040029 need shown "$0.0400" asked too little)
        return f" to at least {format_usd(math.ceil(need * 1e4 - 1e-6) / 1e4)} (billed + that call)"
    if stopped_at is not None:
        return f" above the {format_usd(stopped_at)} it stopped at"
    return ""


def waiting_lines(all_stages: Sequence[Stage], own: Sequence[str], counts: dict[str, QueueCounts], *,
                  elsewhere: set[str], others_alive: bool | None, config: str,
                  budget_stops: dict[str, str | None] | None = None) -> list[str]:
    """The closing lines of a ``--stages`` process that ends while other stages have work (redis41 #5): one per
    stage this process does not run whose input edge holds tasks (ready or leased), saying how many wait there,
    that answers on :data:`~geoagent.constants.EDGE_RESPONSES` are stored (kept in the response store: no model call
    is made for them again) and what takes them: a process running that stage now, or the command to run.

    Parameters
    ----------
    all_stages : sequence of Stage
        The campaign's pipeline in data-flow order.
    own : sequence of str
        The stages this process ran.
    counts : dict
        Queue counts by edge (:class:`geoagent.runtime.queue.QueueCounts`).
    elsewhere : set of str
        Stages other live processes of the campaign run on this machine
        (:func:`geoagent.runtime.manifest.stages_run_elsewhere`).
    others_alive : bool or None
        Whether another process of the campaign is alive on any machine (Redis: the ledger's ``others_alive``,
        whose records do not name stages); None where that is not known (SQLite: ``elsewhere`` says it).
    config : str
        The config path as given (``CONFIG`` when unknown), for the command named.
    budget_stops : dict or None
        Stage -> :func:`upstream_budget_stop` (fixstagesbudget43): a stage the cost cap stopped, its cap leaving no
        room, is said so, with the cap to raise before the command (alone it would stop again at once).

    Returns
    -------
    list of str
        In pipeline order; ``[]`` when no other stage's input holds work.
    """
    out = []
    for st in all_stages:
        c = counts.get(st.input_edge)
        n = (c.ready + c.leased) if c is not None else 0
        if st.name in own or not n:
            continue
        what = (f"{n} answer{'s' if n != 1 else ''} stored (kept in the response store: no model call is made "
                f"for them again), "
                f"waiting on {st.input_edge} for stage {st.name}" if st.input_edge == C.EDGE_RESPONSES
                else f"{n} task{'s' if n != 1 else ''} waiting on {st.input_edge} for stage {st.name}")
        cmd = f"`run.py run {config} --stages {st.name}` (or `run.py run {config}`, every stage)"
        if (budget_stops or {}).get(st.name) and st.name not in elsewhere and not (c is not None and c.leased):
            who = f"no process of the campaign runs stage {st.name} now: {budget_stops[st.name]}"
        elif st.name in elsewhere:
            who = f"another process of the campaign on this machine runs stage {st.name} and takes them"
        elif c is not None and c.leased:
            who = (f"{c.leased} of them leased by a process of the campaign now; if it stops, {cmd} takes the rest")
        elif others_alive:
            who = (f"another process of the campaign is running on some machine (its stages not known here): if "
                   f"none runs stage {st.name}, {cmd} takes them")
        else:
            who = f"no process of the campaign runs stage {st.name} now: {cmd} takes them"
        out.append(f"  {what}; {who}")
    return out


def _refuse_empty_first_plan(cfg: Any, kind: CampaignKind, plan: Iterable[Message]) -> Iterable[Message]:
    """``plan`` unchanged (its first message peeked, a generator stays lazy), or a :class:`ConfigError` when
    it is empty and the campaign has no queue yet (a first run with nothing to do: it would end "complete"
    with nothing done). Raised before any queue is made, so the run's state folder is removed
    (:func:`discard_unstarted_state`). A campaign that has queues (a resumed run) may plan 0 new messages."""
    import itertools

    from geoagent.config import ConfigError

    it = iter(plan)
    first = next(it, _NOTHING)
    if first is not _NOTHING:
        return itertools.chain([first], it)
    if _has_queues(cfg):
        return []
    raise ConfigError(str(getattr(cfg, "source", None) or cfg.name), [f"{kind.empty_plan_reason(cfg)}; nothing was run"])


_NOTHING = object()


def _has_queues(cfg: Any) -> bool:
    """Whether campaign ``cfg`` has queue files (it ran before), under ``queues/<campaign>/``; on Redis
    (``[backend] kind = "redis"``): whether a queue of one of its edges exists on the server."""
    from geoagent.runtime.backend import redis_edges, uses_redis

    if uses_redis(cfg):
        from geoagent.status import pipeline_edges

        return bool(redis_edges(cfg, pipeline_edges(cfg)))
    qdir = Path(cfg.queues_root()) / cfg.name
    from geoagent.runtime.sqlite_queue import queue_files

    return bool(queue_files(qdir))

def _count_models(plan: Iterable[Message], counts: dict[str, int]) -> Iterator[Message]:
    """``plan`` unchanged (lazily), counting each model-call payload's ``model`` into ``counts``."""
    for msg in plan:
        payload = msg[1] if isinstance(msg, tuple) and len(msg) > 1 else None
        model = payload.get("model") if isinstance(payload, dict) else None
        if isinstance(model, str):
            counts[model] = counts.get(model, 0) + 1
        yield msg


def _lane_work(cfg: Any, kind: Any, planned_by_model: Mapping[str, int],
               only_stages: Sequence[str] | None) -> dict[str, dict[str, int]] | None:
    """``{model caller: {model: tasks left}}`` when a run starts, for the progress record's per-model ETA
    (:class:`geoagent.runtime.progress.Progress`, ``lane_work``): the recorded plan's request tasks still ready
    or leased, per model (:func:`geoagent.runtime.scope.left_in_plan`, one read-only pass over the plan record).
    None (the ETA takes the stage's rate alone) for a plan of one model (no lanes), for a plan edge other than
    ``requests``, for a ``--stages`` process (another process's model caller may finish some of them), and
    when the record or the queue cannot be read. A Redis campaign counts on the server (redispace43: it had no
    queue file, so no count: its models were never paced)."""
    if only_stages or kind.plan_edge != C.EDGE_REQUESTS or len(planned_by_model) < 2:
        return None
    from geoagent.runtime.backend import plan_edge_reader
    from geoagent.runtime.scope import left_in_plan

    try:
        left = left_in_plan(cfg.state_dir(), cfg.queues_root(), cfg.name, C.EDGE_REQUESTS,
                            queue=plan_edge_reader(cfg, C.EDGE_REQUESTS))
    except _plan_count_errors(cfg):
        return None
    return {C.STAGE_MODEL_CALLER: dict(left)} if left else None


def _plan_count_errors(cfg: Any) -> tuple[type[BaseException], ...]:
    """What a count over the recorded plan (:func:`_lane_work`, :func:`_answered_by_model`) may raise when the queue
    cannot be read, and is then done without: a file's errors, and for a Redis campaign also the queue's and
    redis-py's (redispace43; a server that fails here fails the run's workers next, with their own message)."""
    from geoagent.runtime.backend import uses_redis

    if not uses_redis(cfg):
        return (OSError, ValueError, sqlite3.Error)
    from redis.exceptions import RedisError

    from geoagent.runtime.queue import QueueError

    return (OSError, ValueError, sqlite3.Error, QueueError, RedisError)


def _answered_by_model(ctx: StageContext, planned: dict[str, int], cfg: Any = None,
                       plan_edge: str = C.EDGE_REQUESTS) -> dict[str, int]:
    """Answers per planned model to the current plan's requests: the recorded plan's tasks done on the plan
    edge (:func:`geoagent.runtime.scope.answered_in_plan`; answers kept from tasks an earlier plan held are not
    counted), or {}; a Redis campaign's counted on the server (redispace43). Without a record or queue (or
    ``cfg``): the response store's count, cumulative over runs."""
    if not planned:
        return {}
    if cfg is not None:
        from geoagent.runtime.backend import plan_edge_reader
        from geoagent.runtime.scope import answered_in_plan

        try:
            got = answered_in_plan(cfg.state_dir(), cfg.queues_root(), cfg.name, plan_edge,
                                   queue=plan_edge_reader(cfg, plan_edge))
        except _plan_count_errors(cfg):
            got = None
        if got is not None:
            return {name: got.get(name, 0) for name in planned}
    store = ctx.services.get("store")
    if store is None or not hasattr(store, "count_responses_by_model"):
        return {}
    got = store.count_responses_by_model()
    return {name: got.get(name, 0) for name in planned}


#: planned messages put into the plan edge per transaction (bounds the planner's memory)
PLAN_CHUNK = 10_000


def _replay_figures(cfg: Any, ledger: Any) -> dict[str, Any]:
    """``process_replayed`` (answers this process's ``replay`` models read, per file) and ``calls_models``
    for :class:`Outcome`; a campaign without replay models needs no ledger scan."""
    models = list(getattr(cfg, "models", None) or [])
    replay = [m for m in models if m.provider == "replay"]
    if not replay:
        return {}
    by_model = ledger.calls_settled_here_by_model()
    out: dict[str, int] = {}
    for m in replay:
        path = str(cfg.replay_path(m) or m.replay.path or m.name)
        out[path] = out.get(path, 0) + by_model.get(m.name, 0)
    return {"process_replayed": out, "calls_models": len(replay) < len(models)}


def _per_model_drift_note(written: Any, state_dir: Any, est: Any, stored: dict[str, int]) -> str | None:
    """The dry run's parenthesis on a change confined to some models' own settings
    (:func:`geoagent.runtime.drift.changed_model_names`) when none of them both has planned tasks done
    (``stored``: per model, :func:`run_would_handle`) and calls to make in this run (``est.by_model``): why nothing
    mixes, as the run's own line says (:func:`geoagent.runtime.drift.decide`; walk31 #2). None otherwise (the
    totals' note stands)."""
    from geoagent.runtime.drift import changed_model_names, split_by_model
    from geoagent.runtime.manifest import config_changes

    try:
        changes = config_changes(written, state_dir=state_dir)
    except (ValueError, OSError):
        return None
    changed = changed_model_names(changes.calls, changes.call_keys, [m.name for m in written.models])
    if not changed:
        return None
    calls = {n: getattr(e, "calls", 0) for n, e in (est.by_model or {}).items()}
    mixing, done, fresh = split_by_model(changed, {m: (stored.get(m, 0), calls.get(m, 0)) for m in changed})
    if mixing:
        return None
    parts = ([f"every task of model{'s' if len(done) > 1 else ''} {', '.join(done)} is done, so the change reaches "
              "none of the answers stored (a new [campaign] name runs it with the change)"] if done else []) + (
        [f"model{'s' if len(fresh) > 1 else ''} {', '.join(fresh)} {'have' if len(fresh) > 1 else 'has'} no task "
         "answered yet, so all answers use the new settings"] if fresh else [])
    return (f"(the call settings of {len(changed)} model(s) changed since the last run: {'; '.join(parts)}: no "
            "model's results mix two settings)")


def _calls_changed(written: Any, state_dir: Any) -> bool | str:
    """Whether the call settings of ``written`` (the config as written) changed since the campaign's last
    recorded run (:func:`geoagent.runtime.manifest.config_changes`, its ``calls``: models, task sections, prompt
    templates). True when that cannot be told (a damaged manifest): the dry run's note then stays. ``"plan"``
    when every changed key only chooses which tasks are planned (a whole ``[[models]]`` entry added or removed,
    ``n_requests``, ...: :func:`geoagent.runtime.drift.only_plan_scope`) and no prompt template changed: the
    run then says nothing mixes (:func:`geoagent.runtime.drift.decide`), and so does the dry run (walk25 #3: it
    warned that results would mix for a model replaced by another)."""
    from geoagent.runtime.drift import only_plan_scope
    from geoagent.runtime.manifest import config_changes

    try:
        changes = config_changes(written, state_dir=state_dir)
    except (ValueError, OSError):
        return True
    if not changes.calls:
        return False
    return "plan" if changes.call_keys and only_plan_scope(changes.calls, changes.call_keys) else True


def _left_before(kind: CampaignKind, before: Mapping[str, Any], plan_before: Any) -> int:
    """Tasks an earlier run left ready, leased or dead that the changed settings could reach: a model-calling kind's
    requests (its plan edge: answers already received on the later edges are sent no more, runtime36 #3 counted them
    as "will be sent with the new settings"), every edge's for the others (a crawl's stages read their settings
    when they handle a task)."""
    if kind.plan_edge == C.EDGE_REQUESTS:
        return plan_before.ready + plan_before.leased + plan_before.dead
    return sum(c.ready + c.leased + c.dead for c in before.values())


def check_change_after_plan(cfg: Any, kind: CampaignKind, ctx: StageContext, plan_before: Any) -> None:
    """Refuse (raise) a run whose config changed since the campaign's last recorded run in a way its stored work
    cannot follow (:meth:`CampaignKind.check_change_after_plan`: GeoVerify's ``tau_m``), decided once the plan is
    made and before any of it is queued (review44b #1: two first runs started together both passed
    :meth:`CampaignKind.check_config_change`, and the config-drift check after planning only warned). ``plan_before``:
    the plan edge's :class:`~geoagent.runtime.queue.QueueCounts` before this plan (None: no plan queue); the
    response store's answers are counted too. Nothing for a kind without such a check, a campaign without an
    earlier recorded run, or a damaged manifest (the run's start says what is wrong with it)."""
    from geoagent.runtime.manifest import config_changes

    if type(kind).check_change_after_plan is CampaignKind.check_change_after_plan:
        return
    try:
        changes = config_changes(ctx.services.get("config_as_written", cfg), state_dir=cfg.state_dir())
    except ValueError:
        return
    store = ctx.services.get("store")
    answers = int(store.count_responses()) if store is not None and hasattr(store, "count_responses") else 0
    kind.check_change_after_plan(cfg, changes, tasks=int(plan_before.total) if plan_before is not None else 0,
                                 done=int(plan_before.done) if plan_before is not None else 0, answers=answers)


async def config_drift_after_plan(cfg: Any, kind: CampaignKind, ctx: StageContext, before: Mapping[str, Any],
                                  plan_after: Any, *, left_out: int = 0, plan_q: Any = None,
                                  aside: Collection[str] = ()) -> Any:
    """What a change of the call settings since the campaign's last run means for this run, decided after its
    plan was queued (:func:`geoagent.runtime.drift.decide`); its lines go to stderr. ``before``: every edge's
    :class:`~geoagent.runtime.queue.QueueCounts` before the plan was queued; ``plan_after``: the plan edge's
    after (None: the kind has no plan queue); ``left_out``: tasks among ``before``'s ready, leased or dead that
    are no request of this run (:attr:`PlanCheck.left_out`: set aside now, or earlier and not planned again), so
    they are not counted as earlier requests that would mix with this run's. ``plan_q``: the plan edge's queue;
    when the change is confined to some models' own settings (:func:`geoagent.runtime.drift.changed_model_names`)
    and the plan edge is the model requests', its unfinished tasks are counted per model
    (:meth:`~geoagent.runtime.queue.WorkQueue.tasks_by_model`: done, and not done), so results are said to mix
    only for a model that has both (walk31 #2); ``aside``: the keys of the tasks the run sets aside next
    (:attr:`PlanCheck.unplanned`), never sent, so not counted as a model's work left. Returns the
    :class:`~geoagent.runtime.drift.DriftDecision` (for the manifest), or None when the campaign has no earlier
    run or its manifest cannot be read."""
    from geoagent.runtime.drift import changed_keys_text as _changed_keys_text
    from geoagent.runtime.drift import decide, setting_lines
    from geoagent.runtime.manifest import config_changes

    written = ctx.services.get("config_as_written", cfg)
    try:
        changes = config_changes(written, state_dir=cfg.state_dir())
    except ValueError:  # a damaged manifest: the run's start says so
        return None
    for line in setting_lines(cfg.name, changes, _changed_keys_text, written):
        print(line, file=sys.stderr)
    plan_before = before.get(kind.plan_edge)
    if plan_before is None or plan_after is None:
        return None
    # walk43 #1: done tasks the plan no longer holds (a release_dir switched to a crawl's folder) are left out of
    # scoring, so only those it still holds can mix with this run's answers (before: "this run planned 345 new
    # tasks ... next to 170 done under the old ones, so results would mix", and the manifest recorded a config_mix,
    # while the 170 were no longer planned and nothing mixed)
    in_plan = None
    if kind.plan_edge == C.EDGE_REQUESTS and plan_q is not None and plan_before.done and changes.calls:
        from geoagent.runtime.scope import done_in_plan

        in_plan = await done_in_plan(cfg.state_dir(), plan_q)
    done_before = plan_before.done if in_plan is None else min(plan_before.done, sum(in_plan.values()))
    changed_models = by_model = None
    if kind.plan_edge == C.EDGE_REQUESTS and plan_q is not None and plan_before.total and changes.call_keys:
        from geoagent.runtime.drift import changed_model_names

        changed_models = changed_model_names(changes.calls, changes.call_keys, [m.name for m in cfg.models])
        if changed_models:
            # per model: its tasks done (answered under the old settings: an answer another model name stored for
            # the same request counts too) and those not done (sent with the new settings)
            counts = await plan_q.tasks_by_model(not_counting=aside)
            if counts is None:  # a queue that cannot count per model (Redis): the store's answers per model
                counts = _answers_by_model(ctx, plan_after, len(aside))
            if counts is not None:
                by_model = {m: counts.get(m, (0, 0)) for m in changed_models}
                if in_plan is not None:  # a model's done tasks the plan still holds (walk43 #1)
                    by_model = {m: (min(done, in_plan.get(m, 0)), left) for m, (done, left) in by_model.items()}
    decision = decide(cfg.name, changes.calls, changes.call_keys, tasks_before=plan_before.total,
                      done_before=done_before, added=max(0, plan_after.total - plan_before.total),
                      done_not_planned=None if in_plan is None else plan_before.done - done_before,
                      left_before=max(0, _left_before(kind, before, plan_before) - left_out),
                      keys_text=_changed_keys_text(changes.call_keys) if changes.call_keys else "",
                      changed_models=changed_models, by_model=by_model, kind=getattr(cfg.campaign, "kind", None))
    for ln in decision.lines:
        print(ln, file=sys.stderr)
    return decision


def _answers_by_model(ctx: StageContext, plan_after: Any, aside: int) -> dict[str | None, tuple[int, int]] | None:
    """Per model ``(answers stored, tasks maybe left)`` in the shape of
    :meth:`~geoagent.runtime.queue.WorkQueue.tasks_by_model`, for a plan queue that cannot count its tasks per
    model (Redis: it would read every payload on the server): the response store's answers per model (one read,
    :meth:`count_responses_by_model`) stand for the done tasks, and every model is given the plan edge's unfinished
    tasks after planning (``plan_after``, less the ``aside`` tasks the run sets aside next) as its own, an upper
    bound. So a changed model with no answer stored is judged fresh (nothing of it mixes), and one with answers
    mixes whenever any task is left, as the totals said (redis41 #2: a model the not-found breaker stopped before
    it answered once, its ``model`` fixed, recorded a config_mix on Redis and not on SQLite). None when the store
    cannot count (the caller decides from the totals)."""
    store = ctx.services.get("store")
    if store is None or not hasattr(store, "count_responses_by_model"):
        return None
    answered = store.count_responses_by_model()
    left = max(0, int(plan_after.total) - int(plan_after.done) - int(aside))
    return {m: (int(n), left) for m, n in answered.items()}


def _plan_note(diff: PlanDiff | None) -> dict[str, Any]:
    """What a run's plan record says of itself (:data:`geoagent.runtime.scope.PLAN_ABOUT_FILE`, written when the
    plan has streamed past ``diff``): this process (pid, its start time, host), when it planned (UTC), and how
    the plan changed since the last run's (``{"new", "dropped"}``; for a plan equal to one a live sibling process
    recorded, that sibling's counts and who counted them; None on a first run or an unchanged plan)."""
    import socket
    from datetime import UTC, datetime

    from geoagent.runtime.procs import proc_start

    change: dict[str, Any] | None = None
    if diff is not None:
        change = {"new": diff.new, "dropped": diff.dropped} if diff.new or diff.dropped else diff.sibling_change()
    return {"pid": os.getpid(), "proc_start": proc_start(os.getpid()), "host": socket.gethostname(),
            "planned_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"), "change": change}


def plans_whole_edge(cfg: Any, kind: CampaignKind, stages: Sequence[Stage], only_stages: Sequence[str] | None,
                     watch: bool) -> bool:
    """Whether this process's plan is the whole intended content of the plan edge, so that a queued task whose
    key it does not hold may be set aside (:func:`set_aside_unplanned`): not for a ``--stages`` process that
    runs no stage reading the plan edge (the process that does answers for it), nor for a ``--watch`` process
    whose plan follows input files another campaign may still be writing (:meth:`CampaignKind.plan_inputs`, e.g.
    an evaluation over a crawl's folder: a plan read mid-way could hold fewer tasks than intended). Only for the
    model requests edge (an evaluation's paid calls): a crawl's ``cities`` edge also takes cities that a
    ``--watch`` run reads from its config as it goes, and tasks put there by hand."""
    if kind.plan_edge != C.EDGE_REQUESTS:
        return False
    if only_stages and not any(s.input_edge == kind.plan_edge for s in stages):
        return False
    return not (watch and kind.plan_inputs(cfg))


def superseded_reason(drift: Any) -> str:
    """The dead-letter reason of a task set aside because the current plan no longer holds it:
    ``superseded: not in the current plan (config changed: geoverify.n_per_band: 3 -> 2)``; a new version of
    the trial builder (manifest ``designs``) reads ``(trial builder changed: geoverify.trial_builder: 1 -> 2)``;
    without a recorded config change (a plan input changed, or no manifest), ``(the config or its inputs
    changed)``."""
    from geoagent.runtime.drift import DESIGN_KEYS, changed_keys_text

    changed = (getattr(drift, "record", None) or {}).get("changed") or {}
    config = {k: tuple(v) for k, v in changed.items() if k not in DESIGN_KEYS}
    design = {k: tuple(v) for k, v in changed.items() if k in DESIGN_KEYS}
    whys = ([f"config changed: {changed_keys_text(config)}"] if config else [])
    whys += ([f"trial builder changed: {changed_keys_text(design)}"] if design else [])
    why = "; ".join(whys) or "the config or its inputs changed"
    return f"{SUPERSEDED} not in the current plan ({why})"


async def count_superseded(queue: Any) -> int:
    """How many dead tasks of ``queue`` were set aside as superseded (0 when the backend cannot list them)."""
    keys = await queue.dead_keys(SUPERSEDED) if hasattr(queue, "dead_keys") else None
    return len(keys or [])


#: tasks moved to dead per compare-and-set batch when setting aside superseded tasks
SET_ASIDE_CHUNK = 500


def campaign_stop_grace_s(cfg: Any) -> float:
    """Seconds the calls in flight may finish after a stop request (Ctrl-C, SIGTERM): ``$GEOAGENT_STOP_GRACE_S`` when
    set (:func:`geoagent.runtime.daemon.stop_grace_s`), else the default 30 s, raised to the longest ``timeout_s`` of
    the campaign's paid models (at most :data:`geoagent.runtime.daemon.MAX_STOP_GRACE_S`): a paid call cut at the
    stop was billed, booked unknown-outcome and is sent again on resume (money39 #1: a reasoning model's calls,
    600 s each, were all cut at 30 s and paid twice). The grace is a ceiling: a stop waits only as long as the calls
    in flight take.

    Raises
    ------
    ValueError
        ``$GEOAGENT_STOP_GRACE_S`` is not a number of seconds in its range.
    """
    from geoagent.runtime.daemon import MAX_STOP_GRACE_S, STOP_GRACE_ENV, STOP_GRACE_S, stop_grace_s

    grace = stop_grace_s()
    if os.environ.get(STOP_GRACE_ENV, "").strip():
        return grace
    from geoagent.config import model_call_policy

    paid = []
    for m in getattr(cfg, "models", ()):
        if getattr(m, "paid", False):
            # the timeout the calls get: a [hosts] entry that writes one wins over the model's (review39c #4)
            pol = model_call_policy(cfg, m) if getattr(m, "host", None) else None
            paid.append(float(pol.timeout_s if pol is not None else m.timeout_s))
    return min(MAX_STOP_GRACE_S, max([STOP_GRACE_S, *paid]))


class PlanCheck:
    """What a plan is checked against while it streams into its queue (:func:`enqueue_plan`), for
    :func:`set_aside_unplanned`: the keys of the tasks an earlier plan left idle in the queue (ready, or under
    an expired lease) and of those it set aside as superseded, read before planning. Each planned key is
    checked off as it passes, so memory holds only those earlier tasks, never the whole plan (a
    1,000,000-task campaign keeps its flat planning memory; a fresh queue has none to hold).

    Attributes
    ----------
    unplanned : set of str
        Idle task keys the plan has not held (so far; after planning: the ones to set aside).
    failed : set of str
        Keys of tasks a failure dead-lettered that the plan has not held (after planning: the ones to set aside
        with their failure kept, :meth:`~geoagent.runtime.queue.WorkQueue.set_aside_dead`, so they no longer count
        as missing work of this plan: export38 #1).
    back : set of str
        Set-aside (superseded) task keys the plan holds again (to queue again, or dead again with the failure
        they had: :meth:`~geoagent.runtime.queue.WorkQueue.restore_failed`).
    downstream : dict of str -> EdgeFailures
        The later edges of a kind whose every edge is keyed by the request's key (the model-calling kinds: a
        request's response, answer, ... carry its key): per edge, its failed dead keys the plan has not held and
        its set-aside ones the plan holds again (review39a #1: a dropped request whose parse or geocoding had
        failed still ended every run ``incomplete``).
    """

    __slots__ = ("unplanned", "failed", "_aside", "back", "downstream")

    def __init__(self, idle: Iterable[str], aside: Iterable[str], failed: Iterable[str] = (),
                 downstream: "dict[str, EdgeFailures] | None" = None) -> None:
        self.unplanned, self._aside, self.back = set(idle), set(aside), set()
        self.failed = set(failed) - self._aside
        self.downstream = downstream or {}

    @classmethod
    async def of(cls, queue: Any, downstream: Mapping[str, Any] | None = None) -> "PlanCheck | None":
        """The check of ``queue`` read now (before planning), or None when the queue holds no idle task and no
        dead one, and no edge of ``downstream`` (edge -> queue, keyed as ``queue``) a dead one (a fresh campaign,
        or every task done: nothing can be set aside or brought back)."""
        idle = await queue.ready_keys()
        aside = await queue.dead_keys(SUPERSEDED) or []
        failed = set(await queue.dead_keys() or ()) - set(aside)
        later: dict[str, EdgeFailures] = {}
        for edge, q in (downstream or {}).items():
            dead = set(await q.dead_keys() or ())
            if dead:
                later_aside = set(await q.dead_keys(SUPERSEDED) or ())
                later[edge] = EdgeFailures(q, dead - later_aside, later_aside)
        return cls(idle, aside, failed, later) if idle or aside or failed or later else None

    @property
    def left_out(self) -> int:
        """Earlier tasks of the queue this plan sends none of (after planning): the idle ones it no longer holds
        (set aside next), the failed ones it no longer holds, and those set aside before that it does not hold
        again."""
        return len(self.unplanned) + len(self.failed) + len(self._aside) - len(self.back)

    def see(self, key: str) -> None:
        """Check off one planned task key."""
        self.unplanned.discard(key)
        self.failed.discard(key)
        if key in self._aside:
            self.back.add(key)
        for edge in self.downstream.values():
            edge.see(key)


class EdgeFailures:
    """A later edge's part of a :class:`PlanCheck`: ``queue``; ``failed``, its failed dead keys the plan has not held
    (so far); ``aside``, its set-aside keys; ``back``, those of them the plan holds again."""

    __slots__ = ("queue", "failed", "aside", "back")

    def __init__(self, queue: Any, failed: set[str], aside: set[str]) -> None:
        self.queue, self.failed, self.aside, self.back = queue, failed, aside, set()

    def see(self, key: str) -> None:
        """Check off one planned task key."""
        self.failed.discard(key)
        if key in self.aside:
            self.back.add(key)


async def bring_back_planned(cfg: Any, queue: Any, check: PlanCheck) -> list[str]:
    """Requeue the tasks of the plan edge ``queue`` an earlier run set aside as no longer planned that the current
    plan holds again (``check.back``, emptied: read :attr:`PlanCheck.left_out` before); return the line for stderr
    (none when there were none). The run
    does this before it judges a config change (:func:`config_drift_after_plan`), so those tasks count as work
    left to send under the new settings (break31 #1: counted after, a model's change was called one that mixes
    nothing, then 7 of its tasks were sent under it next to 3 answers made under the old setting)."""
    lines = await _restore_downstream(cfg, check)
    if not check.back:
        return lines
    back = sorted(check.back)
    # a task a failure had dead-lettered before it was set aside gets its failure back (still dead: missing work
    # of this plan, `dead --requeue` retries it), never a paid retry the researcher did not ask for
    restored = set(await queue.restore_failed(back) or ()) if hasattr(queue, "restore_failed") else set()
    n = await queue.requeue_dead([k for k in back if k not in restored]) if len(restored) < len(back) else 0
    check.back.clear()
    lines += [f"info: campaign {cfg.name}: {n} task{'s' if n != 1 else ''} set aside by an earlier run as no longer "
              "planned are in the current plan again: queued again"] if n else []
    if restored:
        m = len(restored)
        lines.append(f"info: campaign {cfg.name}: {m} task{'s' if m != 1 else ''} of edge {queue.name} that had failed "
                     "before an earlier run set them aside are in the current plan again: dead-lettered again with "
                     f"their failure (`run.py dead {getattr(cfg, 'source', None) or 'CONFIG'}` lists them, "
                     "`--requeue` retries them)")
    return lines


async def _restore_downstream(cfg: Any, check: PlanCheck) -> list[str]:
    """Give the later edges' set-aside tasks the plan holds again their failure back (:attr:`PlanCheck.downstream`,
    their ``back`` emptied); the lines for stderr."""
    lines = []
    for edge, part in check.downstream.items():
        if not part.back:
            continue
        restored = await part.queue.restore_failed(sorted(part.back)) or []
        part.back.clear()
        if restored:
            m = len(restored)
            lines.append(f"info: campaign {cfg.name}: {m} task{'s' if m != 1 else ''} of edge {edge} that had failed "
                         "before an earlier run set them aside are in the current plan again: dead-lettered again "
                         f"with their failure (`run.py dead {getattr(cfg, 'source', None) or 'CONFIG'}` lists them, "
                         "`--requeue` retries them)")
    return lines


async def _set_aside_failed(cfg: Any, edge: str, queue: Any, keys: Iterable[str], reason: str) -> list[str]:
    """Relabel the failed dead tasks ``keys`` of ``queue`` as set aside (:meth:`~geoagent.runtime.queue.WorkQueue.
    set_aside_dead`); the line for stderr (none when none moved)."""
    keys = sorted(keys)
    if not keys or not hasattr(queue, "set_aside_dead"):
        return []
    relabelled: list[str] = []
    for i in range(0, len(keys), SET_ASIDE_CHUNK):
        relabelled += await queue.set_aside_dead(keys[i:i + SET_ASIDE_CHUNK], reason) or []
    if not relabelled:
        return []
    m = len(relabelled)
    return [f"info: campaign {cfg.name}: set aside {m} dead-lettered task{'s' if m != 1 else ''} of edge {edge} that "
            f"the current plan no longer holds; no longer counted as missing work ({reason}; each keeps its failure "
            f"after {FAILED_BEFORE.strip()!r}, and a plan that holds it again restores it)"]


async def set_aside_unplanned(cfg: Any, queue: Any, check: PlanCheck, drift: Any = None) -> list[str]:
    """Set aside the tasks of the plan edge ``queue`` that an earlier plan queued and the current plan no longer
    holds (``check.unplanned``, :class:`PlanCheck`, after :func:`enqueue_plan` streamed the plan through it),
    and bring back the set-aside ones it holds again (``check.back``); return the lines for stderr (none when
    nothing changed).

    A re-run whose config plans fewer tasks (``[geoverify] n_per_band`` 3 -> 2, ``trials = "build"``, GeoHint
    ``images_per_site`` or ``[generic] n_requests`` lowered) used to lease and pay for every task the earlier
    plan left ready, answers the scorer then left out (a walkthrough paid 1,067 calls for a 678-request plan).
    Now each such task that is still idle (ready, or under an expired lease: never one a live process holds) goes
    to dead with :func:`superseded_reason` through :meth:`~geoagent.runtime.queue.WorkQueue.dead_letter_ready`,
    a compare-and-set per task that other processes leasing meanwhile cannot race; ``run.py dead CONFIG`` lists
    them, ``--requeue`` brings them back, and a later plan that holds a key again requeues it here. Tasks done are
    left as they are. A task a failure had dead-lettered that the plan no longer holds (``check.failed``) is set
    aside too (:meth:`~geoagent.runtime.queue.WorkQueue.set_aside_dead`: still dead, its failure kept in the
    reason after :data:`~geoagent.runtime.queue.FAILED_BEFORE`), so it is no longer missing work that ends the run
    ``incomplete`` (export38 #1); a later plan that holds it again gives it its failure back
    (:func:`bring_back_planned`).
    """
    lines = await bring_back_planned(cfg, queue, check)
    reason = superseded_reason(drift)
    lines += await _set_aside_failed(cfg, queue.name, queue, check.failed, reason)
    check.failed.clear()
    for edge, part in check.downstream.items():
        lines += await _set_aside_failed(cfg, edge, part.queue, part.failed, reason)
        part.failed.clear()
    unplanned = sorted(check.unplanned)
    if not unplanned:
        return lines
    # without a recorded config change (e.g. tasks set aside earlier, requeued by hand with `dead --requeue` and
    # still not planned), a task keeps the reason it was set aside with before, not the vaguer generic one
    groups: dict[str, list[str]] = {reason: unplanned}
    if reason == superseded_reason(None):
        earlier = await queue.earlier_reasons(unplanned, SUPERSEDED) if hasattr(queue, "earlier_reasons") else None
        if earlier:
            groups = {}
            for key in unplanned:
                # a failure kept in the earlier reason was cleared by the hand requeue that brought the task back: it
                # is set aside plain, so a later plan holding it sends it (review39a #5)
                groups.setdefault(earlier.get(key, reason).split(FAILED_BEFORE, 1)[0], []).append(key)
    moved: list[str] = []
    for why, keys in groups.items():
        for i in range(0, len(keys), SET_ASIDE_CHUNK):
            moved += await queue.dead_letter_ready(keys[i:i + SET_ASIDE_CHUNK], why) or []
    if len(groups) == 1:
        reason = next(iter(groups))
    elif groups:
        reason = "; ".join(sorted(groups))
    if moved:
        lines.append(f"info: campaign {cfg.name}: set aside {len(moved)} queued task{'s' if len(moved) != 1 else ''} "
                     f"of edge {queue.name} that the current plan no longer holds; they will not be sent "
                     f"({reason}). `run.py dead {getattr(cfg, 'source', None) or 'CONFIG'}` lists them, "
                     "`--requeue` brings them back.")
    return lines


async def rescore_lost_rows(cfg: Any, kind: CampaignKind, ctx: StageContext, queues: Mapping[str, Any]) -> list[str]:
    """Reopen the planned tasks whose results row was removed after they were scored; return the lines for stderr
    (none when no row is missing).

    The scorer writes a task's row (:meth:`CampaignKind.scored_rows`) before it acknowledges the task, so a task
    done on its input edge has its row unless the row was deleted from the store outside geoagent (by hand, after
    a :class:`~geoagent.runtime.store.StoredRowError` named it). Before, such a task was lost silently: a put of its
    key is a no-op, so no run scored it again, and the report counted one answer fewer with no missing work. Now
    each one goes back to ready on that edge (:meth:`~geoagent.runtime.queue.WorkQueue.reopen_done`, a
    compare-and-set) and the scorer scores it again from the payload queued there (the parsed or geocoded answer:
    no new model call, no spend); on the scorer's output edge it is reopened too where done there, so the live
    aggregator gets the row again (its count is by key: a row it counted already stays counted once).

    Which tasks: the planned keys without a row (one pass over the table's keys), then those of them done on the
    input edge (read), then those of these whose row is still absent (point reads). A task is done only after its
    row was written, so one done at the second read and rowless at the third lost its row; a task another
    process scores meanwhile is either not done yet at the second read or has its row at the third. Only these are
    written (the tasks not scored yet stay as they are). Skipped while nothing on the input edge is done.
    """
    spec = kind.scored_rows(ctx)
    store = ctx.get("store")
    if spec is None or store is None or not hasattr(store, "result_keys"):
        return []
    table, edge, out_edge, planned = spec
    queue = queues.get(edge)
    if queue is None or not planned or not (await queue.counts()).done:
        return []
    rowless = set(planned)
    rowless.difference_update(store.result_keys(table))
    done = (await queue.done_among(sorted(rowless)) or []) if rowless else []
    gone = sorted(set(done) - store.result_keys_among(table, done)) if done else []
    moved = (await queue.reopen_done(gone) or 0) if gone else 0
    if not moved:
        return []
    out_queue = queues.get(out_edge) if out_edge else None
    if out_queue is not None:
        await out_queue.reopen_done(gone)
    where = getattr(getattr(store, "db", None), "path", None) or "the campaign's store"
    tasks = "task" if moved == 1 else "tasks"
    return [f"info: campaign {cfg.name}: {moved} planned {tasks} scored by an earlier run had no row in results table "
            f"{table!r} of {where} (removed outside geoagent): queued on edge {edge} to be scored again from "
            "the answer queued there (no new model call, no spend)"]


async def reopen_kind_tasks(cfg: Any, kind: CampaignKind, ctx: StageContext, queues: Mapping[str, Any]) -> list[str]:
    """Move the done tasks that the kind names (:meth:`CampaignKind.tasks_to_reopen`) back to ready on their edges
    (:meth:`~geoagent.runtime.queue.WorkQueue.reopen_done`: a compare-and-set; a ready, leased or dead task is left as
    it is); return one line per edge that moved any, naming how many and why (none when nothing moved)."""
    lines = []
    for edge, keys, why in kind.tasks_to_reopen(cfg, ctx):
        queue = queues.get(edge)
        if queue is None or not keys:
            continue
        moved = await queue.reopen_done(list(keys)) or 0
        if moved:
            tasks = "task" if moved == 1 else "tasks"
            lines.append(f"info: campaign {cfg.name}: {moved} {tasks} done by an earlier run queued again on edge "
                         f"{edge}: {why}")
    return lines


async def enqueue_plan(plan: Iterable[Message], queue: Any, *, chunk: int = PLAN_CHUNK,
                       check: PlanCheck | None = None) -> int:
    """Put the planned messages into ``queue`` in chunks of ``chunk``; return how many were planned.

    Consumes ``plan`` lazily (a generator is never materialised), so memory stays flat for any campaign
    size. Existing task keys are no-ops (idempotent re-planning on resume). ``queue`` None only counts.
    ``check`` (when given) sees every planned task key (:class:`PlanCheck`: what :func:`set_aside_unplanned`
    compares the queue with).
    """
    n = 0
    batch: list[Message] = []
    for msg in plan:
        n += 1
        if check is not None:
            check.see(msg[0])
        if queue is None:
            continue
        batch.append(msg)
        if len(batch) >= chunk:
            await queue.put_many(batch)
            batch = []
    if batch:
        await queue.put_many(batch)
    return n


def default_endpoint_lines(cfg: Any) -> list[str]:
    """One note per billing model without ``base_url``: the provider's own API it calls
    (:attr:`geoagent.config.ModelConfig.default_base_url`) and the variable its key is read from
    (:attr:`geoagent.config.ModelConfig.key_env`: ``api_key_env``, else the provider's usual one); the dry run
    shows them and ``run``/``crawl`` print them at start."""
    out = []
    for m in getattr(cfg, "models", None) or []:
        url = getattr(m, "default_base_url", None)
        if not url:
            continue
        via = ("[[models]] api_key_env" if m.api_key_env else f"api_key_env not set: {m.provider}'s usual variable")
        out.append(f"  note: model {m.name} has no base_url: it calls {url} ({m.provider}'s own API) with the key "
                   f"in {m.key_env} ({via}); set base_url for another server")
    return out


def _estimate_outcome(cfg: Any, kind: CampaignKind, messages: list[Message], ctx: StageContext, t0: float) -> Outcome:
    from geoagent.config import estimate

    out = Outcome(cfg.name, "dry run", EXIT_COMPLETE, len(messages), {}, None, elapsed_s=time.monotonic() - t0,
                  plan_unit=kind.plan_unit)
    # every variable a real run would refuse to start without: the models' keys and the kind's own (the
    # crawl's Mapillary token), looked up as check_keys does
    dotenv_path = ctx.services.get("dotenv_path")
    # the config as written: the kind names a sandbox fake's key rule from its *.sandbox.invalid URL
    command = "crawl" if kind.kind == "crawl" else "run"
    # a key variable on a .env line that cannot be parsed, or with control characters, is collected, not raised
    # (walk31 #4: the dry run stopped there with no report; `run` refuses it, so the dry run says so at its end)
    unreadable: list[str] = []
    missing, others = missing_keys(ctx.services.get("config_as_written", cfg), kind, dotenv_path=dotenv_path,
                                   unreadable=unreadable)
    n_vars = len({var for var, _ in missing} | {var for var, _ in others})
    them = "they are" if n_vars > 1 else "it is"
    warning = ([f"  warning: {missing_keys_text(cfg, missing, others, dotenv_path=dotenv_path)}; `{command}` "
                f"will refuse to start until {them} set"] if n_vars else [])
    warning += [f"  warning: {u}; `{command}` will refuse to start (exit 2) until it is fixed" for u in unreadable]
    warning += [f"  warning: {w}" for w in kind.plan_warnings(cfg)]
    plan_refusals = kind.plan_refusals(cfg)
    photo_px, photo_basis = kind.expected_photo(cfg)
    w, h = photo_px
    refusals_at = len(warning)  # their lines go here once the estimate says what it counted (newuser40 #1)

    def refusal_lines(counted_photos: bool, counted_placeholders: bool = False) -> list[str]:
        from geoagent.workers.images import PLACEHOLDER_SIZE_PX

        pw, ph = PLACEHOLDER_SIZE_PX
        parts = [f"a photo without a file at {w}x{h} ({photo_basis})"] * counted_photos + [
            f"the {pw}x{ph} placeholder of each image that has no photo at all (a synthetic image: a plan with "
            "photos, e.g. [geohint] images = \"release\" and an image_root, costs more)"] * counted_placeholders
        return [f"  warning: {r}; `{command}` will refuse to start (exit 2) until this is fixed; the estimate below "
                f"counts {', and '.join(parts) or 'the images as the plan holds them'}" for r in plan_refusals]
    if plan_refusals:
        out.exit_code = EXIT_CONFIG
        # the fix first, in one line, before the plan and estimate `run` refuses (newuser41 #A)
        out.stop_reasons = [f"`{command}` would refuse this plan (exit 2): {h}" for h in kind.plan_headlines(cfg)]
    if not messages and not _has_queues(cfg):  # a real first run refuses it (_refuse_empty_first_plan)
        warning.append(f"  warning: {kind.empty_plan_reason(cfg)}; `{command}` will refuse to start (exit 2)")
        out.exit_code = EXIT_CONFIG  # the dry run predicts the refusal: it exits as the run would

    # which API a model without base_url calls, and the key variable it reads
    warning += default_endpoint_lines(cfg)
    from geoagent.runtime.backend import redis_limits

    warning += [f"  warning: {w}" for w in redis_limits(cfg)]  # what a Redis campaign's dry run cannot count
    # what the real run would refuse to start for: the dry run exits 2 as the run would, after its report
    refusals = []
    if n_vars:
        from geoagent.secrets import empty_where

        names = list(dict.fromkeys([var for var, _ in missing] + [var for var, _ in others]))
        empty = [v for v in names if empty_where(v, dotenv_path=dotenv_path)]  # `NAME=`: not "not set" (walk19)
        unset = [v for v in names if v not in empty]
        said = ([f"{', '.join(unset)} not set"] if unset else []) + ([f"{', '.join(empty)} set but empty"] if empty else [])
        refusals.append(f"{'variables' if n_vars > 1 else 'variable'} {'; '.join(said)}")
        out.exit_code = EXIT_CONFIG
    if unreadable:
        # "or used": a value that cannot be the key it is for (CampaignKind.key_value_problem) is collected here too
        refusals.append("an API key variable that cannot be read or used" if len(unreadable) == 1 else
                        f"{len(unreadable)} API key variables that cannot be read or used")
        out.exit_code = EXIT_CONFIG
    if plan_refusals:
        refusals.append("images without a file for a real model")
    if not messages and not _has_queues(cfg):
        refusals.append("a first run that plans nothing")
    if kind.plan_edge != C.EDGE_REQUESTS:
        warning[refusals_at:refusals_at] = refusal_lines(True)
        # e.g. the crawl: its model calls (audits) arise along the way, not in the plan
        out.extra_lines = warning + [
            f"  dry run: the plan is {len(messages)} message(s) on edge {kind.plan_edge!r}; this campaign kind makes"
            " its model calls along the way, so they cannot be counted in advance (the [budget] cap still holds)",
            *kind.dry_run_outline(cfg),
        ]
    else:
        done_by_model: dict[str, int] = {}
        payloads, earlier = run_would_handle(cfg, kind, messages, done_by_model)
        gone_usd, gone_calls = gone_reservations(ctx.get("ledger"))
        from geoagent.sandbox.launch import simulated_models

        written = ctx.services.get("config_as_written", cfg)
        from geoagent.image_files import needs_photos

        fakes = [n for n in simulated_models(written) if cfg.model(n).provider != "simulated"]
        est = estimate(cfg, payloads, store=ctx.get("store"), providers=ctx.services.get("providers"),
                       image_base_dir=ctx.services.get("image_base_dir"), spent_usd=booked_usd(ctx.get("ledger")),
                       fake_models=fakes, missing_photos=kind.missing_photos(cfg),
                       photo_models=[m.name for m in written.models if needs_photos(m)], photo_size_px=photo_px)
        est.photo_basis = photo_basis
        # the clause says what the estimate counted: the expected photo, or (synthetic images, which never get a
        # photo) the placeholder the plan holds (newuser40 #1: it named 1024x768 beside a 640x480 estimate)
        from geoagent.config import IMAGE_KIND_PLACEHOLDER

        warning[refusals_at:refusals_at] = refusal_lines(
            any(me.photos_no_file for me in est.by_model.values()),
            any(me.image_tokens_by_kind.get(IMAGE_KIND_PLACEHOLDER, [0])[0] for me in est.by_model.values()))
        (est.done_earlier, est.dead_earlier, est.queued_earlier, est.superseded_earlier,
         est.unreadable_earlier) = earlier
        est.config_changed = _calls_changed(written, cfg.state_dir())
        if est.config_changed is True and est.calls and not est.dead_earlier:
            # calls to make next to answers stored: judged per model when the change is one model's own
            est.drift_note = _per_model_drift_note(written, cfg.state_dir(), est, done_by_model)
        est.gone_usd, est.gone_calls = gone_usd, gone_calls
        # how the plan differs from the one the last run recorded, as the run says it at its start
        diff = PlanDiff.of(cfg.state_dir())
        if diff is not None:
            for key, _ in messages:
                diff.see(key)
        changed = (diff.text(never_queued=len(payloads) - earlier[2], still_queued=earlier[3])
                   if diff is not None else None)
        if changed is None and diff is not None and (sib := diff.sibling_change()) is not None:
            # a scale-out's process still running recorded this plan: the change it counted, and whose
            by = sib["counted_by"]
            changed = plan_change_text(sib["new"], sib["dropped"], fate=None)
            if changed:
                changed += (f" (as counted by process {by.get('pid')} of this campaign, which queued this plan at "
                            f"{by.get('planned_at')}; a process of the campaign still running recorded it)")
        out.extra_lines = warning + ["  dry run (no call made, nothing enqueued):",
                                     *([f"    {changed}"] if changed else []),
                                     *("  " + line for line in estimate_lines(est, cfg)),
                                     *kind.dry_run_outline(cfg)]
    if out.exit_code == EXIT_CONFIG:  # the last line says why the exit is 2
        why = f"{'; '.join(refusals)}; " if refusals else ""
        out.extra_lines.append(f"  exit 2: `{command}` would refuse to start ({why}see the "
                               f"warning{'s' if len(refusals) > 1 else ''} above)")
    return out


def _changed_settings_note(queued: int, new: int, done: int, dead: int = 0) -> str:
    """The dry run's parenthesis on a campaign whose call settings changed since its last run: ``queued`` tasks an
    earlier run left queued, ``new`` calls planned anew, ``done`` answered already, ``dead`` dead-lettered (not
    counting those set aside as no longer planned). It says what the run does with them, as the run's own drift
    line says once it has planned (:mod:`geoagent.runtime.drift`): queued tasks are sent with the new settings, and
    so are dead-lettered ones once requeued; stored answers keep the old ones."""
    parts = []
    if queued:
        parts.append(f"the {count_text(queued, 'task')} an earlier run left queued {'is' if queued == 1 else 'are'} "
                     "sent with the new [[models]] settings (only " + ("its" if queued == 1 else "their") + " prompt "
                     "text and a task section's max_output_tokens stay as planned)")
    if dead:
        parts.append(f"the {count_text(dead, 'dead-lettered task')} would be sent with the new settings too if "
                     "requeued")
    if new:
        parts.append(f"the {count_text(new, 'new request')} use{'s' if new == 1 else ''} the new settings")
    if done:
        stored = f"the {count_text(done, 'answer')} already stored {'keeps' if done == 1 else 'keep'} the old ones"
        if not parts:
            return (f"(the call settings changed since the last run: every planned task is done, so the change "
                    f"reaches none of them ({stored}); use a new [campaign] name to run with the change)")
        return (f"(the call settings changed since the last run: {', '.join(parts)}, while {stored}: results would "
                "mix both versions; use a new [campaign] name to apply the change to every task)")
    if not parts:
        return "(the call settings changed since the last run; no task of this plan was answered with the old ones)"
    return f"(the call settings changed since the last run: {', '.join(parts)}; no answer is stored yet)"


def booked_usd(ledger: Any) -> float:
    """USD the campaign's ledger already counts against the cap when a run starts: settled spend + unknown-outcome
    spend of earlier runs (:attr:`geoagent.runtime.ledger.LedgerSummary.total_usd`), plus the open reservations
    of processes that are gone (a crashed run's calls in flight, :func:`gone_reservations`), which the run's
    start-up recovery turns into unknown-outcome spend; 0.0 without a ledger.

    Reads only (:meth:`geoagent.runtime.ledger.Ledger.summary`, :meth:`~geoagent.runtime.ledger.Ledger.gone_open`):
    the dry run starts its cap check and its dispatch replay from it, as the run's reservations do, and changes
    nothing in ``state/`` (the gone owners' reservations stay open until a run recovers them).
    """
    if ledger is None:
        return 0.0
    return float(ledger.summary().total_usd) + gone_reservations(ledger)[0]


def stages_elsewhere_now(state_dir: str | os.PathLike[str], all_stages: Sequence[str], ledger: Any = None) -> set[str]:
    """The stages the campaign's other live processes run now (a ``--stages`` runner's ``stages_elsewhere``,
    :class:`geoagent.runtime.worker.StageRunner`): those this machine's manifest in ``state_dir`` records
    (:func:`geoagent.runtime.manifest.stages_run_elsewhere`; ``all_stages``: the campaign's stage names, for a run
    recording none), and on Redis (``ledger`` with ``stages_elsewhere``) those the owner records of the live
    processes on every machine name (:meth:`geoagent.runtime.redis_state.RedisLedger.stages_elsewhere`).

    fixstages44 #3: seeing only this machine's manifest, a downstream machine took a response the upstream machine's
    model caller had just queued, not yet leased by its parser, for work nobody would do, and ended (both processes
    "campaign not complete", no report, about 4 runs in 10). The wait this adds lasts while such a process lives and
    runs that stage: its stage's end is recorded (:func:`record_stage_ended`), and a crashed process's heartbeat
    expires. Raises what the server's client raises when it cannot be reached (its queues meet the same)."""
    from geoagent.runtime.manifest import stages_run_elsewhere

    out = stages_run_elsewhere(state_dir, all_stages)
    on_server = getattr(ledger, "stages_elsewhere", None)
    if callable(on_server):
        out |= on_server(all_stages)
    return out


def record_stage_ended(manifest: Any, run_id: str, ledger: Any, own: Sequence[str] | None, ended: set[str],
                       stage: str) -> None:
    """Record that stage ``stage`` of run ``run_id`` ended while the run goes on: in manifest.json
    (:meth:`geoagent.runtime.manifest.Manifest.record_stage_ended`), and, on Redis (``ledger`` with
    ``note_stages``), in this process's owner record, ``ended`` (the set of the stages ended so far, kept by the
    caller) with it, so no process on another machine waits for it either (fixstages44 #3). ``own``: the stages this
    process runs (None: every stage). The pipeline's ``stage_ended`` hook (:func:`geoagent.runtime.daemon.run_pipeline`
    logs a failure)."""
    manifest.record_stage_ended(run_id, stage)
    note_stages = getattr(ledger, "note_stages", None)
    if callable(note_stages):
        ended.add(stage)
        note_stages(own, ended)


def aggregated_elsewhere(state_dir: str | os.PathLike[str], all_stages: Sequence[str], ledger: Any = None) -> bool:
    """Whether another live process of the campaign may run the aggregator stage now (live42 #1): one this machine's
    manifest in ``state_dir`` records as running it (:func:`geoagent.runtime.manifest.stages_run_elsewhere`;
    ``all_stages``: the campaign's stage names, for a run recording none), or, on Redis (``ledger`` with
    ``others_alive``), any other process of the campaign alive on the server, on any machine: the server does not
    record which stages a process runs, so that one is taken to run it. The ctx service
    :data:`geoagent.constants.SERVICE_AGGREGATED_ELSEWHERE` (:mod:`geoagent.report.live`: each live rewrite then
    rebuilds from the store). Reads the manifest (and a Redis ledger's owner records); raises what the server's
    client raises when it cannot be reached."""
    from geoagent.runtime.manifest import stages_run_elsewhere

    if C.STAGE_AGGREGATOR in stages_run_elsewhere(state_dir, all_stages):
        return True
    others_alive = getattr(ledger, "others_alive", None)
    return bool(others_alive()) if callable(others_alive) else False


def gone_reservations_by_model(ledger: Any) -> dict[str, tuple[float, int]]:
    """:func:`gone_reservations` per model name (:meth:`geoagent.runtime.ledger.Ledger.gone_open_by_model`): name
    -> ``(USD, count)``, only models with such reservations; ``{}`` without a ledger. Read-only."""
    if ledger is None:
        return {}
    return {str(m): (float(u), int(n)) for m, (u, n) in ledger.gone_open_by_model().items()}


def gone_reservations(ledger: Any) -> tuple[float, int]:
    """``(USD, count)`` of the ledger's open reservations whose owner process is gone (by the ledger's own
    liveness rule, :meth:`geoagent.runtime.ledger.Ledger.gone_open`): spend a crashed run booked that the next
    run counts as unknown outcome. Read-only; ``(0.0, 0)`` without a ledger."""
    if ledger is None:
        return 0.0, 0
    usd_gone, n = ledger.gone_open()
    return float(usd_gone), int(n)


def run_would_handle(cfg: Any, kind: CampaignKind, messages: Sequence[Message],
                     done_by_model: dict[str, int] | None = None
                     ) -> tuple[list[dict[str, Any]], tuple[int, int, int, int, int]]:
    """The request payloads a real run of ``cfg`` would hand the model caller now, for the dry run, and
    ``(done, dead, queued, set_aside, unreadable)``: planned tasks an earlier run already finished, planned tasks it
    dead-lettered (neither is handled again; ``dead --requeue`` brings the dead back), tasks an earlier run
    queued that are still pending (also those it set aside as no longer planned that this plan holds again: the
    run queues them again), queued tasks this plan no longer holds, which the run sets aside unsent
    (:func:`set_aside_unplanned`; held by nobody: one in flight in another process is counted as queued), and
    queued tasks the run would hand out whose stored payload cannot be read (a damaged or hand-edited queue file,
    :attr:`geoagent.runtime.sqlite_queue.QueuedPlan.unreadable`), which its lease dead-letters unsent (review43d #1).

    Enqueuing is idempotent by task key, so a task planned earlier keeps its queued payload whatever the
    config says now (a changed ``max_output_tokens`` or prompt does not reach it): the run handles the queue's
    pending tasks as queued, then the planned messages whose key is not queued yet. Without a queue (a first
    run) that is the whole plan. Read-only: no queue file is created (:func:`geoagent.runtime.sqlite_queue.read_planned`).
    ``done_by_model``: a dict to fill with the planned tasks done, per the model their payload names (for the
    per-model config-change note, :func:`_per_model_drift_note`).
    """
    from geoagent.runtime.sqlite_queue import read_planned

    queued = read_planned(cfg.queues_root(), cfg.name, kind.plan_edge, (k for k, _ in messages))
    if queued is None:
        return [p for _, p in messages], (0, 0, 0, 0, 0)
    done = sum(1 for st in queued.states.values() if st == "done")
    if done_by_model is not None:  # planned tasks done, per the model their payload names
        for k, p in messages:
            if queued.states.get(k) == "done" and isinstance(p.get("model"), str):
                done_by_model[p["model"]] = done_by_model.get(p["model"], 0) + 1
    # a superseded task whose payload cannot be read is requeued by the run like the others (then dead-lettered)
    bad_aside = [k for k in queued.unreadable if queued.states.get(k) == "dead"]
    dead = sum(1 for st in queued.states.values() if st == "dead") - len(queued.superseded) - len(bad_aside)
    new = [p for k, p in messages if k not in queued.states]
    planned = {k for k, _ in messages}
    bad_pending = [k for k in queued.unreadable if queued.states.get(k) != "dead"]
    # an idle unplanned task is set aside by key, unread; any other unreadable one is leased and dead-lettered
    aside = [k for k in [*(k for k, _ in queued.pending), *bad_pending] if k in queued.idle and k not in planned]
    kept = [(k, p) for k, p in queued.pending if k in planned or k not in queued.idle]
    bad = [k for k in bad_pending if k in planned or k not in queued.idle]
    if not plans_whole_edge(cfg, kind, [], None, False):  # a kind whose plan edge is never trimmed
        aside, kept, bad = [], list(queued.pending), bad_pending
    kept += list(queued.superseded.items())  # set aside earlier, planned again: queued again
    names = {m.name for m in cfg.models}
    # a queued task of a model no longer in the config is dead-lettered by the run, not called
    pending = [p for _, p in kept if not isinstance(p.get("model"), str) or p["model"] in names]
    return pending + new, (done, dead, len(pending), len(aside), len(bad) + len(bad_aside))


def estimate_lines(est: Any, cfg: Any) -> list[str]:
    """The dry run's lines for estimate ``est`` of campaign ``cfg``, each figure labelled with what it assumes.

    "expected" USD assumes each answer uses ``expected_output_tokens`` when the model sets it, else every
    answer uses all ``max_output_tokens`` (an upper bound, said so on the line; for a model that spends hidden
    reasoning tokens, :func:`geoagent.config.spends_hidden_reasoning`, the line says that ``expected_output_tokens``
    must count them, since they are billed as output); "worst" is what the ledger
    reserves. The duration counts model calls only (rate and concurrency limits of each model's host), not
    other stages (e.g. geocoding), and names what it assumes: ``expected_latency_s`` per call, the
    concurrency and the rate limit. Replay and offline simulated models call no model: their line says so
    instead of a duration (a simulated model behind a local fake is paced by its rate alone). A worst case
    over the cap gets an ``OVER CAP`` line (``worst case over cap ... but the expected $E fits`` when the dispatch
    replay fits every call at its expected cost: the total then says ``(worst case over cap; the expected cost
    fits: see below)``, not ``(OVER cap)``), then how many calls of each model the run would make before the
    cap stops it (:func:`geoagent.config.simulate_dispatch`) with a warning for a model left with none or far
    fewer than the others (:meth:`Outcome.coverage_warnings`) and a note naming the models whose expected cost
    takes every answer at its ``max_output_tokens`` (the run makes more calls when answers are shorter), and the
    plan averages: the calls the cap pays for at the mean worst case per call (cap / mean worst case) and at the
    mean expected cost (cap / mean expected cost), which the simulated stop may lie outside of (walk24 #3: it
    follows the models' order and pace, so a cheaper model's calls made first fit more).
    """
    from geoagent.config import model_time_basis, spends_hidden_reasoning

    lines = []
    for name, m in est.by_model.items():
        mc = cfg.model(name)
        per_call = round(m.output_tokens / m.calls) if m.calls else 0
        if m.recorded or m.unanswered:  # replay with the file read: its recorded usage, not an assumption
            assumed = f"the recorded token usage of {m.recorded} answer(s) in the replay file"
            if m.unanswered:
                assumed += (f"; {m.unanswered} request(s) have no usable recorded answer (no record or a recorded "
                            "failure) and would end missing")
        elif mc.expected_output_tokens is not None:
            assumed = f"assuming {per_call} output tokens per call ([[models]] expected_output_tokens)"
            if spends_hidden_reasoning(mc):  # billed as output: a visible answer's length alone is far too low
                assumed += (f"; {mc.model} also spends hidden reasoning tokens, billed as output, so "
                            "expected_output_tokens must count them with the answer (the output tokens a small "
                            "run's answers report), else this figure is too low")
        else:
            assumed = (f"assuming every answer uses all its max_output_tokens ({per_call} per call); "
                       "set expected_output_tokens for a closer figure")
        if mc.provider == "replay" and not (m.recorded or m.unanswered):
            assumed += "; the run records each answer's token usage from the file"
        if not m.recorded:
            assumed = f"{_input_assumption(m, mc, getattr(est, 'photo_basis', ''))}; {assumed}"
        reserved = ("reserved per call: (prompt + system prompt) chars/3 + 16"
                    + (f" + per image max({mc.image_input_tokens} ([[models]] image_input_tokens), the documented "
                       "bill for its size)" if m.images else "")
                    + f", x {est_factor(cfg):g} ([budget] input_estimate_factor), + max_output_tokens; "
                    f"{m.worst_input_tokens} in before the factor")
        lines.append(
            f"  {name}: {count_text(m.calls, 'call')}, {m.input_tokens} in / {m.output_tokens} out tokens, "
            f"${m.cost_usd:.4f} expected ({assumed}), worst ${m.worst_case_usd:.4f} ({reserved}); "
            f"{_model_time(m, mc, cfg)}"
        )
        if m.image_tokens_max > mc.image_input_tokens:
            w, h = m.image_size_max or (0, 0)
            lines.append(
                f"  note: {name}: a {w}x{h} image is billed about {m.image_tokens_max} input tokens ({m.image_rule}), "
                f"above [[models]] image_input_tokens {mc.image_input_tokens}: the reservations count the documented "
                "bill for such images (included in the worst case above)"
            )
    timed = [n for n in est.by_model if model_time_basis(cfg.model(n)) != "none"]
    time_part = (f"about {est.duration_s:.0f} s of model calls (model-call time only: excludes geocoding and other "
                 "stages, so the whole run takes longer)" if timed or not est.by_model else
                 "no model-call time (replay and simulated answers call no model; other stages not included)")
    earlier = []
    if getattr(est, "done_earlier", 0):
        earlier.append(f"{est.done_earlier} planned request(s) already done by an earlier run keep their answers "
                       "and are not called again")
    if getattr(est, "dead_earlier", 0):
        earlier.append(f"{est.dead_earlier} dead-lettered by an earlier run are not retried (`run.py dead CONFIG "
                       "--requeue` would)")
    if getattr(est, "queued_earlier", 0):
        earlier.append(f"{est.queued_earlier} queued by an earlier run are counted as queued")
    if getattr(est, "superseded_earlier", 0):
        earlier.append(f"{est.superseded_earlier} queued by an earlier run that this plan no longer holds will be "
                       "set aside unsent (superseded; `run.py dead CONFIG --requeue` would bring them back)")
    if getattr(est, "unreadable_earlier", 0):
        from geoagent.runtime.queue import UNREADABLE_PAYLOAD
        from geoagent.runtime.sqlite_queue import queue_path

        # review43d #1: the dry run raised "error: unexpected end of data ..." on such a row, naming no file or key
        where = queue_path(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
        earlier.append(f"{est.unreadable_earlier} queued by an earlier run have a stored payload that cannot be read "
                       f"as a JSON object (a damaged or hand-edited queue file {where}): the run dead-letters each "
                       f"unsent when it meets it (`run.py dead CONFIG` lists them, reason '{UNREADABLE_PAYLOAD} ...'; "
                       "restore the file from a copy to run them)")
    if earlier:
        # the note on config changes only when the call settings changed since the last run (or cannot be told);
        # what it says is what the run does (geoagent.runtime.drift: queued tasks are sent with the new settings)
        changed = getattr(est, "config_changed", True)
        lines.append("  planned earlier: " + "; ".join(earlier) + (
            " (the config changed which tasks are planned since the last run, not how any is asked: new tasks are "
            "asked like the stored ones, so nothing mixes)" if changed == "plan" else
            " " + est.drift_note if changed and getattr(est, "drift_note", None) else
            " " + _changed_settings_note(getattr(est, "queued_earlier", 0),
                                         max(0, est.calls - getattr(est, "queued_earlier", 0)),
                                         getattr(est, "done_earlier", 0), getattr(est, "dead_earlier", 0))
            if changed else ""))
    # what the total leaves out, in the words of the "planned earlier" line (one count per reason, only non-zero)
    left_out = ([f"{est.done_earlier} already done by earlier runs"] if getattr(est, "done_earlier", 0) else []) + (
        [f"{est.cached} answered from stored responses"] if est.cached else []) + (
        [f"{est.repeated} more planned request(s) repeat another's request key and get its answer"]
        if est.repeated else [])
    spent = getattr(est, "spent_usd", 0.0)
    left = max(0.0, est.cap_usd - spent)
    gone_usd, gone_calls = getattr(est, "gone_usd", 0.0), getattr(est, "gone_calls", 0)
    gone_part = (f", with ${gone_usd:.4f} reserved by {gone_calls} call(s) of a run that is gone (crashed), which "
                 "the run counts as unknown-outcome spend" if gone_calls else "")
    spent_part = (f" (${spent:.4f} already spent by earlier runs of this campaign: settled + unknown outcome, "
                  f"in its ledger{gone_part}; ${left:.4f} left for these calls)" if spent > 0 else "")
    # walk46 #6: only the worst case over the cap while every call fits at its expected cost (the dispatch replay
    # below says "all N calls fit") read "(OVER cap)" and "!!! OVER CAP", as if the run would fail; the loud form
    # is kept for a plan whose expected cost itself does not fit
    worst_only = (not est.within_cap and est.calls_before_cap is not None and est.calls_before_cap >= est.calls)
    verdict = ("within cap" if est.within_cap else
               "worst case over cap; the expected cost fits: see below" if worst_only else "OVER cap")
    lines.append(
        f"  total: {count_text(est.calls, 'call')} to make" + (f" ({'; '.join(left_out)})" if left_out else "")
        + f", ${est.cost_usd:.4f} expected, "
        f"worst ${est.worst_case_usd:.4f}, cap {usd(est.cap_usd)}{spent_part}"
        f" ({verdict}); {time_part}"
    )
    if not est.within_cap and est.calls:
        # + 1e-9: a quotient that is a whole number in decimal (40 x 0.025 / 0.04) must not floor to one less
        fit_worst = int(est.calls * left / est.worst_case_usd + 1e-9) if est.worst_case_usd > 0 else est.calls
        fit_exp = (min(est.calls, int(est.calls * left / est.cost_usd + 1e-9)) if est.cost_usd > 0
                   else est.calls)
        what = (f"the ${left:.4f} left of [budget] cap_usd {usd(est.cap_usd)} after the ${spent:.4f} already spent"
                if spent > 0 else f"[budget] cap_usd {usd(est.cap_usd)}")
        if worst_only:
            lines.append(
                f"  worst case over cap: the worst case ${est.worst_case_usd:.4f} exceeds {what}, but the expected "
                f"${est.cost_usd:.4f} fits. Raise cap_usd or plan fewer requests to run them all even at their worst "
                "case."
            )
        else:
            lines.append(
                f"  !!! OVER CAP: the worst case ${est.worst_case_usd:.4f} exceeds {what}. "
                "Raise cap_usd or plan fewer requests to run them all even at their worst case."
            )
        cap_word = "cap left" if spent > 0 else "cap"
        from geoagent.config import _caller_lanes  # the model caller's lanes, as simulate_dispatch replays them

        lanes = _caller_lanes(cfg)
        lane_part = ("" if lanes is None else
                     ", each model in its own lane (at most " + ", ".join(_lane_text(n, c, cfg) for n, c in lanes.items())
                     + " of its requests handled at once; a full lane's next requests wait while the other lanes' "
                     "go on, so a model held back by its own limits does not hold back the others"
                     + ("; paced by each model's share of its calls ([queue] model_pacing = \"plan\"), so none runs "
                        "ahead of the others" if cfg.queue.model_pacing == "plan" else "") + ")")
        dispatch = ("simulated as the run dispatches them: in queue order" + lane_part + ", each model at its own "
                    "concurrency, rate and expected_latency_s; each call reserves its worst case and settles at its "
                    "expected cost")
        if est.calls_before_cap is not None and est.calls_before_cap >= est.calls:
            # every call fits at the expected cost: the run stops at the cap only if calls cost more than that
            lines.append(
                f"  all {est.calls} calls fit at their expected cost ({dispatch}); the run would reach the cap only if "
                f"calls cost more than expected, up to their worst case: at the worst case the cap pays for about "
                f"{fit_worst} of the {est.calls}" + _image_assumption_note(est, cfg)
            )
        elif est.calls_before_cap is not None:
            per_model = ", ".join(f"{name} {m.calls_before_cap} of {m.calls}" for name, m in est.by_model.items())
            full_out = [name for name, m in est.by_model.items()
                        if cfg.model(name).expected_output_tokens is None and not m.recorded]
            answering = [name for name, m in est.by_model.items() if m.calls]
            if full_out and set(answering) <= set(full_out):
                # every expected figure is the max_output_tokens upper bound: the stop is a pessimistic forecast,
                # and the sentence opens with that condition (walk23 #5: a run of short answers finished in the cap)
                lead = (f"  if every answer used all its max_output_tokens (what the expected cost assumes: no "
                        f"expected_output_tokens set for {', '.join(full_out)}), ")
                tail = ("; shorter answers let the run make more calls than this, possibly all of them: set "
                        "expected_output_tokens (the output tokens a small run's answers report) for a closer forecast")
            else:
                lead = "  "
                tail = (f"; the expected cost of {', '.join(full_out)} takes every answer at its max_output_tokens (no "
                        "expected_output_tokens set): shorter answers let the run make more calls than this"
                        if full_out else "")
            lines.append(
                f"{lead}the run would stop at the cap (exit 4) after about {est.calls_before_cap} of the {est.calls} "
                f"calls, per model: {per_model} ({dispatch}; the first call whose worst case no longer fits next "
                "to the settled spend stops the run)" + tail + _image_assumption_note(est, cfg)
            )
            # the run's own rule for models whose statistics are not comparable
            shares = Outcome("", "dry run", 0, est.calls, {}, None,
                             planned_by_model={n: m.calls for n, m in est.by_model.items()},
                             answered_by_model={n: m.calls_before_cap or 0 for n, m in est.by_model.items()})
            lines.extend(f"  !!! WARNING: before the cap, {w}" for w in shares.coverage_warnings())
        lines.append(
            f"  plan averages: at the mean worst case per call the cap pays for about {fit_worst} of the "
            f"{est.calls} calls ({cap_word} / mean worst case per call); at the mean expected cost per call, about "
            f"{fit_exp} ({cap_word} / mean expected cost per call). These average over every planned call"
            + ("; the simulated stop above follows the order and pace of each model's calls and counts the "
               "reservations still open when it comes, so it can lie outside both (more calls when the cheaper "
               "model's are made first)"
               if est.calls_before_cap is not None and est.calls_before_cap < est.calls else "") + "."
        )
    return lines


def _lane_text(name: str, cap: int, cfg: Any) -> str:
    """``"a 12 (concurrency 8 + 4 leased ahead)"``: model ``name``'s lane cap in the model caller (tasks of it held at
    once, :func:`geoagent.workers.model_caller.lane_cap`) and how it is made up. walk46 #5: "at most a 12" for
    ``concurrency = 8`` left the reader to find the rule in docs/how-it-works.md."""
    from geoagent.config import _caller_concurrency

    conc = _caller_concurrency(cfg.model(name))
    return f"{name} {cap} (concurrency {conc} + {cap - conc} leased ahead)"


def _image_assumption_note(est: Any, cfg: Any) -> str:
    """``"; this forecast rests on ..."`` naming each model whose images are counted at the per-image assumption
    (``[[models]] image_input_tokens``: no documented billing rule for its provider and model id, or images of
    unknown size) rather than at a documented bill, else ``""``. The budget-stop forecast depends on it: images
    that bill more stop the run sooner."""
    parts = []
    for name, m in est.by_model.items():
        unsized = getattr(m, "images", 0) - getattr(m, "images_sized", 0)
        if unsized <= 0 or getattr(m, "recorded", 0):
            continue
        mc = cfg.model(name)
        parts.append(f"{name} ({unsized} image(s) at {mc.image_input_tokens} input tokens each, [[models]] "
                     f"image_input_tokens: no documented billing rule for {mc.provider} {mc.model} or the image size "
                     "is unknown)")
    if not parts:
        return ""
    return ("; this forecast rests on the per-image token assumption for " + ", ".join(parts)
            + ": if the provider bills those images more, the run stops sooner (set image_input_tokens to the "
            "provider's figure)")


def est_factor(cfg: Any) -> float:
    """The campaign's ``[budget] input_estimate_factor``."""
    return float(cfg.budget.input_estimate_factor)


def _input_assumption(m: Any, mc: Any, photo_basis: str = "") -> str:
    """What one model's expected input tokens assume (see :func:`geoagent.config.estimate`); ``photo_basis``:
    what a photo without a file is counted as (:meth:`CampaignKind.expected_photo`; default the crawl's default
    thumbnail, :data:`geoagent.image_files.DEFAULT_PHOTO_BASIS`)."""
    text = "input expected: prompt chars/4"
    if getattr(m, "non_ascii_chars", 0):
        text += f" (ASCII; {m.non_ascii_chars} non-ASCII chars at 1 token each)"
    if not m.images:
        return text
    unsized = m.images - m.images_sized
    if m.images_sized:
        kinds = getattr(m, "image_tokens_by_kind", None) or {}
        if len(kinds) > 1:  # photos and a generated control image apart: one mean would hide both
            # n counts requests carrying an image, not distinct images (newuser39 #8c: "318 images" of 28)
            parts = ", ".join(f"{kind}: about {round(tok / n)} tokens each ({n} request{'' if n == 1 else 's'} with one)"
                              for kind, (n, tok) in kinds.items())
            text += f" + per image from its size ({m.image_rule}): {parts}"
        else:
            mean = round(m.image_tokens_sized / m.images_sized)
            how = "" if m.image_rule.startswith("local fake") else " from its size"  # the fakes bill any size alike
            text += f" + about {mean} tokens per image{how} ({m.image_rule})"
        if unsized:
            text += f"; {unsized} image(s) of unknown size at {mc.image_input_tokens} ([[models]] image_input_tokens)"
        if getattr(m, "photos_no_file", 0):
            w, h = m.photo_size_assumed
            from geoagent.image_files import DEFAULT_PHOTO_BASIS

            if getattr(m, "photos_as_placeholder", False):
                text += (f"; {m.photos_no_file} image(s) whose photo has no file counted at {w}x{h}, the placeholder "
                         f"pixels the run sends for them ([images] missing = \"placeholder\"), not the photo "
                         f"({photo_basis or DEFAULT_PHOTO_BASIS})")
            else:
                text += (f"; {m.photos_no_file} image(s) whose photo has no file yet counted at {w}x{h}, the photo "
                         f"the run will send ({photo_basis or DEFAULT_PHOTO_BASIS}), not the 640x480 placeholder")
    else:
        text += (f" + {mc.image_input_tokens} per image ([[models]] image_input_tokens; no documented rule for "
                 f"{mc.provider} {mc.model} or the image size is unknown)")
    return text


def _model_time(m: Any, mc: Any, cfg: Any) -> str:
    """The duration part of one model's dry-run line, naming what it assumes (see :func:`estimate_lines`)."""
    from geoagent.config import model_time_basis

    basis = getattr(m, "time_basis", None) or model_time_basis(mc)  # the estimate's: a local fake's is "rate"
    if basis == "none":
        if mc.provider == "replay":
            return f"no model-call time (replay: answers are read from the recorded file {cfg.replay_path(mc)})"
        paced = " and its rate does not pace it" if "rate" in getattr(mc, "model_fields_set", ()) else ""
        return ("no model-call time (simulated: answers are made in this process, no model is called" + paced
                + (': give it base_url = "http://openai.sandbox.invalid/v1" to have the local fake answer it over '
                   "HTTP, paced by its rate" if paced else "") + ")")
    from geoagent.config import hosts_entry, model_limit_key, model_time_limit, models_by_host, models_by_limit_key

    # the HTTP layer's keys: the model's own limit on its host (shared only by entries naming the same API
    # model there), and its host's [hosts] entry as a ceiling over all the host's models
    req, per, conc, host = model_time_limit(cfg, mc)
    rate = f"{req:g} per {per:g} s"
    key = model_limit_key(mc)
    same = [o for o in models_by_limit_key(cfg).get(key or "", []) if o is not mc]
    if same:
        rate += (f" (model {mc.model!r} on {mc.host} is also called by {', '.join(repr(o.name) for o in same)}: "
                 "one limit for them)")
    others = [o for o in models_by_host(cfg).get(mc.host or "", []) if o is not mc and o not in same]
    with_others = f" (shared with {', '.join(repr(o.name) for o in others)})" if others else ""
    if host is not None:
        rate += f", its host's [hosts] ceiling {host.rate:g} per {host.period_s:g} s{with_others}"
        conc = min(conc, host.concurrency)
    elif hosts_entry(cfg, mc.host) is not None:  # no rate or concurrency of its own: the [hosts] entry alone
        rate += f", its host's [hosts] limit{with_others}"
    if basis == "rate":
        what = "simulated behind" if mc.provider == "simulated" else f"its {mc.provider} API served by"
        # the limits it is paced by, as the latency line names them (a [hosts] ceiling shared with other models
        # explains a total longer than this line's time)
        return (f"model-call time about {m.duration_s:.0f} s ({what} a local fake that answers at once: "
                f"paced by its rate limit alone, {m.throughput_per_s:.3g} calls/s: its rate limit of {rate})")
    lat = mc.expected_latency_s
    lat_s = f"{lat:.1f}" if lat == round(lat, 1) else f"{lat:g}"  # "2.0 s", "0.05 s"
    return (f"model-call time about {m.duration_s:.0f} s at {m.throughput_per_s:.3g} calls/s (assuming "
            f"{lat_s} s per call ([[models]] expected_latency_s): the lower of concurrency "
            f"{conc} / {lat_s} s and its rate limit of {rate})")
