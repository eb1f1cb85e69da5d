"""GeoVerify pipeline pieces: the planner function and the parser, scorer and aggregator stages.

Data flow (constants.EDGE_*)::

    plan_requests(trials, models) -> requests -> [model caller] -> responses
        -> GeoVerifyParserStage -> answers -> GeoVerifyScorerStage -> scored -> GeoVerifyAggregatorStage
        -> report

Message keys are ``f"{task_id}|{model}"`` on every edge (a stable trial x model key): the task id is the release's
``trial_id`` (``image_id|arm|cand``, which keys the release's raw responses: the replay key), and on a swapped-image
control also the image it shows (``...|ctrl_mismatch|cand|shows=<image_ref>``, :func:`geoagent.data.model.
make_task_id`), so a redrawn image is a new task (fixverify41 #1).

Services read from the :class:`~geoagent.runtime.stage.StageContext` (all optional except where said):
``store`` (the campaign's ResponseStore: response text by request key, and the ``geoverify_scored``
results table), ``report_dir`` (folder of the live report; default ``<state_dir>/report``, with
``state_dir`` the service of that name or ``<state root>/<campaign>``),
``geoverify_report_interval_s`` (minimum seconds from the end of one live report rewrite, done in a worker
thread, to the next; default 5; stretched to 4x the last rewrite's duration when that is longer,
:data:`geoagent.report.live.REWRITE_BACKOFF`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent import paths
from geoagent.data.importer import Release
from geoagent.data.model import ARM_BLANK, ARM_MISMATCH, BLANK_IMAGE_REF, TASK_SHOWS_TAG, VerifyTrial, make_trial_id
from geoagent.geoverify.aggregate import GeoVerifyAggregator, scored_row_problem
from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, ParsedVerdict, parse_verdict
from geoagent.geoverify.prompt import render_claim
from geoagent.geoverify.reparse import row_parser_version
from geoagent.geoverify.score import scored_row
from geoagent.report.live import LiveAggregatorStage
from geoagent.runtime.queue import Task
from geoagent.runtime.scope import ScoredScope as _ScoredScope
from geoagent.runtime.stage import Message, PermanentFailure, Stage, StageContext
from geoagent.textfmt import finish_reason_text
from geoagent.workers.responses import response_text, with_stored_finish_reason

log = logging.getLogger(__name__)

TASK_NAME = "geoverify"
SCORED_TABLE = "geoverify_scored"
DEFAULT_MAX_OUTPUT_TOKENS = 512
#: image id prefix of a mismatched-image trial whose table row does not say which image it shows
MISMATCH_UNKNOWN_REF = "mismatch:unknown"


def message_key(task_id: str, model: str) -> str:
    """Stable trial x model key ``f"{task_id}|{model}"``: of a trial's task id (:attr:`VerifyTrial.task_id`) the
    message key; of its release ``trial_id`` the replay key (the release's raw responses are keyed so)."""
    return f"{task_id}|{model}"


def trial_meta(t: VerifyTrial) -> dict[str, Any]:
    """Trial fields carried in request ``meta`` (JSON-able; ``site`` as in scored rows)."""
    d = t.to_dict()
    d["trial_id"] = t.trial_id
    d["site"] = t.site_id
    return d


def _image_fields(t: VerifyTrial, image_root: str | Path | None, paths_by_image: dict[str, str]) -> tuple[str | None, str | None]:
    """(image_id, image_ref) for the model caller: blank field, or the shown image's file if it exists,
    else only its id (the caller then attaches a deterministic placeholder: the release has no pixels)."""
    if t.arm == ARM_BLANK:
        # the same gray field for every blank trial, but an image id of its own per trial, so that each
        # blank-arm trial is its own request (own key, own answer) rather than one shared cached answer
        return f"{BLANK_IMAGE_REF}#{t.image_id}", BLANK_IMAGE_REF
    if t.arm == ARM_MISMATCH and not t.image_ref:
        # a trial table without image_ref (the public release's) does not name the image shown: an id of
        # its own (no pixels), never the trial's own image, whose request is the main trial's
        return f"{MISMATCH_UNKNOWN_REF}#{t.image_id}", None
    shown = t.image_ref if t.arm == ARM_MISMATCH else t.image_id
    rel = paths_by_image.get(shown)
    if image_root is not None and rel:
        p = Path(image_root) / rel
        if p.is_file():
            return shown, str(p)
    return shown, None


def request_identity(t: VerifyTrial) -> tuple[str, str]:
    """``(image id shown, candidate)``: what makes a trial's model request for a given model and prompt
    template (the request key hashes these with the model and its params). Two trials with the same
    identity get one answer, so a trial list must not repeat one (:func:`geoagent.geoverify.plan.unique_trials`)."""
    return _image_fields(t, None, {})[0] or "", t.cand


def plan_requests(
    trials: Iterable[VerifyTrial],
    models: Sequence[str],
    *,
    template: str | None = None,
    max_output_tokens: int | None = None,
    image_root: str | Path | None = None,
    tau_km: float = C.GEOVERIFY_TAU_KM,
    replay_model_of: Mapping[str, str] | None = None,
    pairs: Collection[tuple[str, str]] | None = None,
) -> list[Message]:
    """Request messages (edge ``requests``) for every trial x model.

    Parameters
    ----------
    trials : iterable of VerifyTrial
    models : sequence of str
        Model names as in the campaign config (``models[].name``).
    template : str, optional
        Claim template text (default: ``prompts/geoverify_claim.txt``).
    max_output_tokens : int or None
        Output cap in tokens for every model (enters the request key and the cost reservation); None
        (default) leaves each model's own ``[[models]] max_output_tokens``.
    image_root : path, optional
        Folder the trials' ``path`` values are relative to (a crawl's ``state/images``: ``<site>/<id>.jpg``;
        a release copy: ``streetview/<site>/<id>.jpg``); files that exist are sent, otherwise only the image
        id (placeholder pixels; the campaign counts them and may refuse, :mod:`geoagent.image_files`).
    replay_model_of : mapping, optional
        Config model name -> recorded model name used in ``meta.replay_key`` (default: the name itself),
        so a config entry ``name = "haiku", provider = "replay", model = "claude-haiku-4-5"`` finds the
        release's records of ``claude-haiku-4-5``.
    pairs : collection of (trial_id, recorded model), optional
        Plan only these pairs (e.g. those the release has raw responses for); default all.

    Returns
    -------
    list of (key, payload)
        Payload: ``model, prompt, image_id, image_ref, params{max_output_tokens}, meta{task, trial_id,
        replay_key, trial}``; key ``f"{task_id}|{model}"`` (:attr:`VerifyTrial.task_id`: the trial id, plus the image
        shown on a swapped-image control; duplicates dropped); ``meta.trial_id`` and ``meta.replay_key`` keep the
        release trial id.

    Raises
    ------
    ValueError
        An empty candidate name.
    """
    trials = list(trials)
    paths_by_image = {t.image_id: t.path for t in trials if t.path}
    out: list[Message] = []
    seen: set[str] = set()
    for t in trials:
        prompt = render_claim(t.cand, template, tau_km)
        image_id, image_ref = _image_fields(t, image_root, paths_by_image)
        meta_trial = trial_meta(t)
        for model in models:
            recorded = (replay_model_of or {}).get(model, model)
            if pairs is not None and (t.trial_id, recorded) not in pairs:
                continue
            # the task id, not the trial id: a swapped-image control whose image was redrawn is a new task
            # (fixverify41 #1), while the replay key keeps the release's trial id
            key = message_key(t.task_id, model)
            if key in seen:
                continue
            seen.add(key)
            out.append(
                (
                    key,
                    {
                        "model": model,
                        "prompt": prompt,
                        "image_id": image_id,
                        "image_ref": image_ref,
                        "params": {} if max_output_tokens is None else {"max_output_tokens": int(max_output_tokens)},
                        "meta": {
                            "task": TASK_NAME,
                            "trial_id": t.trial_id,
                            "replay_key": message_key(t.trial_id, recorded),
                            "trial": meta_trial,
                        },
                    },
                )
            )
    return out


def release_replay_plan(rel: Release, notes: list[str] | None = None
                        ) -> tuple[list[VerifyTrial], set[tuple[str, str]], list[str]]:
    """Trials, (trial_id, model) pairs and model names for replaying a release's raw responses.

    Trials come from the trial table; a raw record whose trial is not in the table (e.g. the full raw
    file with the sampled table) gets a trial rebuilt from the record's own fields (coordinates from the
    image table when known, else NaN). Records with a recorded API error are left out.

    Session 36 (reports36 #3), left out with a line appended to ``notes`` (one per trial; the caller logs them):

    * the records of a trial whose table row was refused as malformed (:attr:`Release.refused_trials`): the row's
      import note says why, and its trial is not rebuilt from the records behind the refusal's back;
    * a record whose ``trial_id`` is not ``image_id|arm|cand`` of its own fields (which trial it answers is unknown);
    * a record whose site id is not a safe name (:func:`geoagent.paths.safe_name`: it becomes a folder and a cluster).

    And the records of one rebuilt trial that disagree on its truth, band or site are noted (the first rebuilds it).
    """
    trials = {t.trial_id: t for t in rel.trials}
    rebuilt: dict[str, tuple[str | None, str | None, str | None]] = {}  # trial id -> (truth, band, site) of its first record
    noted: set[str] = set()
    pairs: set[tuple[str, str]] = set()
    models: set[str] = set()

    def note(tid: str, text: str) -> None:
        if notes is not None and tid not in noted:
            noted.add(tid)
            notes.append(text)

    for r in rel.raw:
        if r.error is not None:
            continue
        models.add(r.model)
        if r.trial_id in rel.refused_trials and r.trial_id not in trials:
            note(r.trial_id, f"trial {r.trial_id!r}: its row in the trial table was refused as malformed (see the "
                             "import notes), so its recorded answers are not replayed")
            continue
        if r.trial_id in rebuilt:  # another record of a trial rebuilt from an earlier record
            if rebuilt[r.trial_id] != (r.truth, r.band, r.site_id or trials[r.trial_id].site_id):
                t0 = rebuilt[r.trial_id]
                note(r.trial_id, f"recorded answers for trial {r.trial_id!r} disagree on its truth, band or site "
                                 f"({t0} against model {r.model!r}'s {(r.truth, r.band, r.site_id)}): the first "
                                 "record's are used")
        elif r.trial_id not in trials:
            if not (r.image_id and r.arm and r.cand and r.truth):
                pairs.add((r.trial_id, r.model))  # no trial to rebuild: left out of ``used`` below
                continue
            if r.trial_id != make_trial_id(r.image_id, r.arm, r.cand):
                note(r.trial_id, f"recorded answer of model {r.model!r} for trial {r.trial_id!r}: its own fields name "
                                 f"trial {make_trial_id(r.image_id, r.arm, r.cand)!r}, so which trial it answers is "
                                 "unknown; not replayed")
                continue
            im = rel.images.get(r.image_id)
            site = r.site_id or (im.site_id if im else "")
            try:
                paths.safe_name(site, what="site id")
            except ValueError as exc:
                note(r.trial_id, f"recorded answers for trial {r.trial_id!r}: {exc}; not replayed")
                continue
            rebuilt[r.trial_id] = (r.truth, r.band, site)
            trials[r.trial_id] = VerifyTrial(
                image_id=r.image_id, site_id=site, arm=r.arm, cand=r.cand,
                img_lat=im.lat if im else math.nan, img_lon=im.lon if im else math.nan, cand_lat=None,
                cand_lon=None, referenceability=r.referenceability, d_km=r.d_km, band=r.band, truth=r.truth,
                continent=im.continent if im else None, path=im.path if im else None,
                image_ref=r.image_id if r.arm == "main" else None,
            )
        pairs.add((r.trial_id, r.model))
    used = [trials[tid] for tid in sorted({tid for tid, _ in pairs}) if tid in trials]
    return used, pairs, sorted(models)


def _trial_of(payload: dict[str, Any]) -> dict[str, Any]:
    trial = payload.get("trial")
    if trial is None:
        trial = (payload.get("meta") or {}).get("trial")
    if not isinstance(trial, dict) or "trial_id" not in trial:
        raise PermanentFailure("message has no GeoVerify trial (trial or meta.trial, with trial_id)")
    return trial


class GeoVerifyParserStage(Stage):
    """``responses`` -> ``answers``: parse the answer text (never raises on bad text)."""

    name = C.STAGE_PARSER
    sends_http = False  # no request of its own: a slow model upstream is no pace of its (pace_keys)
    input_edge = C.EDGE_RESPONSES
    output_edge = C.EDGE_ANSWERS
    concurrency = 16

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        p = task.payload
        trial = _trial_of(p)
        text = await response_text(p, ctx)
        # queued cleaned, as the scored row stores it (fixreason43 #1); the response store keeps the reason as sent
        finish = finish_reason_text(p.get("finish_reason"))
        parsed = parse_verdict(text, finish)
        answer = {
            "model": ((p.get("meta") or {}).get("report_model")) or p.get("model"),
            "request_key": p.get("request_key"),
            "trial": trial,
            "parsed": parsed.to_json(),
            "parser_version": VERDICT_PARSER_VERSION,
            "input_tokens": p.get("input_tokens"),
            "output_tokens": p.get("output_tokens"),
            "finish_reason": finish,
        }
        if not parsed.ok:
            answer["raw"] = text  # kept with the failure (the store keeps it too)
        return [(task.key, answer)]


def _parsed_from_json(d: dict[str, Any]) -> ParsedVerdict:
    return ParsedVerdict(
        ok=bool(d.get("ok")),
        verdict=d.get("verdict"),
        confidence=d.get("confidence"),
        evidence=tuple(d.get("evidence") or ()),
        reason=d.get("reason"),
        rules=tuple(d.get("rules") or ()),
    )


async def _current_parse(answer: dict[str, Any], ctx: StageContext) -> tuple[ParsedVerdict, int]:
    """The parse of a queued answer and the parser version that made it: the answer's own (``parsed``), or, for an
    answer queued by an earlier parser (``parser_version`` absent or lower: :mod:`geoagent.geoverify.reparse`), a
    new parse of its text (the ``raw`` it carries, else the stored response's); when no text is found, its own
    parse with its version."""
    version = row_parser_version(answer)
    if version >= VERDICT_PARSER_VERSION:
        return _parsed_from_json(answer.get("parsed") or {}), version
    finish = finish_reason_text(answer.get("finish_reason"))  # queued uncleaned before verdict parser 11
    if "raw" in answer:
        return parse_verdict(answer["raw"], finish), VERDICT_PARSER_VERSION
    key = answer.get("request_key")
    try:
        text = await response_text({"request_key": key}, ctx) if isinstance(key, str) and key else None
    except PermanentFailure:
        text = None
    if text is None:
        return _parsed_from_json(answer.get("parsed") or {}), version
    return parse_verdict(text, finish), VERDICT_PARSER_VERSION


class GeoVerifyScorerStage(Stage):
    """``answers`` -> ``scored``: one flat scored row per answer; also written to results table
    ``geoverify_scored`` (key = message key) when a ``store`` service exists."""

    name = C.STAGE_SCORER
    sends_http = False  # no request of its own: a slow model upstream is no pace of its (pace_keys)
    input_edge = C.EDGE_ANSWERS
    output_edge = C.EDGE_SCORED
    concurrency = 16

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        p = task.payload
        trial = _trial_of(p)
        model = p.get("model")
        if not model:
            raise PermanentFailure("answer has no model")
        parsed, version = await _current_parse(p, ctx)
        try:
            row = scored_row(trial, model, parsed, finish_reason=p.get("finish_reason"), parser_version=version)
        except KeyError as exc:
            raise PermanentFailure(f"trial lacks field {exc}") from None
        row["request_key"] = p.get("request_key")
        row["input_tokens"] = p.get("input_tokens")
        row["output_tokens"] = p.get("output_tokens")
        if not row["parse_ok"]:
            row["raw"] = p.get("raw")
        store = ctx.services.get("store")
        key = task.key
        if store is not None:
            key = await _store_scored(task.key, row, store, ctx)
        return [(key, row)]


async def _store_scored(key: str, row: dict[str, Any], store: Any, ctx: StageContext) -> str:
    """Store ``row`` (the scored row of task ``key``) in the results table and return the key it is stored under:
    ``key``, or, for a swapped-image control's task queued under its key of before the key named the image shown (a
    campaign stopped under an earlier geoagent version and run with this one), the new key
    :func:`geoagent.geoverify.rekey.new_key` names, when the current plan holds it (ctx service
    :data:`SERVICE_PLAN_KEYS`; any new key when the process has no plan) and it holds no other answer (none, or one
    of the same request). The run's move of the stored rows (:func:`geoagent.geoverify.rekey.move_swapped_rows`)
    runs before the workers start, so a row this scorer stored under the earlier key stayed there, left out of
    scoring until the next run moved it (upgrade41 A).

    The store decides between the new key and ``key`` inside its write (``store.put_result_unless_other``: one
    SQLite transaction or one Redis script): a look before the write let another process's scorer store another
    answer under the new key in between, which this write then overwrote (fixgeohint42 #3). Another answer under
    the new key stays, and this one is stored under ``key``, left out of scoring, as the move leaves it (review41c
    #3)."""
    from geoagent.geoverify.rekey import new_key

    new = new_key(key, row)
    plan = ctx.services.get(SERVICE_PLAN_KEYS)
    if new is None or (plan is not None and new not in plan):
        await store.aput_result(SCORED_TABLE, key, row)
        return key
    return await store.aput_result_unless_other(SCORED_TABLE, new, row, key)


#: ctx service: the message keys of the campaign's current plan (set by the campaign kind when it plans), so the
#: live aggregator scores only those (:class:`ScoredScope`)
SERVICE_PLAN_KEYS = "geoverify_plan_keys"
#: ctx service: a callable returning the missing work the report lists, as keyword arguments of
#: :func:`geoagent.report.geoverify.write_report` (``missing``, ``unreplayed``, ``n_trials``), read anew at each live
#: rewrite (in its worker thread); set by the campaign kind when it plans
#: (:meth:`geoagent.geoverify.campaign.GeoVerifyCampaign.live_missing`). Without it the live report leaves
#: ``geoverify_missing.csv`` as it is.
SERVICE_LIVE_MISSING = "geoverify_live_missing"


class ScoredScope(_ScoredScope):
    """Which stored scored rows a GeoVerify report counts: those of the current plan's tasks, each model request
    once (:class:`geoagent.runtime.scope.ScoredScope` over results table ``geoverify_scored``).

    A re-run whose plan changed (``n_per_band`` 3 -> 2 on a built trial table) keeps the answers of the tasks the
    new plan no longer holds in the store; scoring them too pooled two designs (the summary's built trials per
    band no longer matched the scored data). And two trials of different designs can show the same image with
    the same claim (a swapped-image control drawing the same image): one request, one answer, which must be
    scored once. Seed 000 Sec. 5 / App. A.2: a trial is an image and a candidate name ("only the image and the
    candidate name change"), so two trials asking the same request are one trial; the plan already keeps one
    (:func:`geoagent.geoverify.trials.unique_trials`), and this scope keeps the first stored answer of a request
    key and counts the rest. Counted rows get their finish reason from the response store where they lack one
    (:func:`with_stored_finish_reason`).

    A row is never counted for a task that names another image than the row shows (fixverify41 #1): a swapped-image
    control's task key names the image its trial shows (``...|ctrl_mismatch|cand|shows=<image_ref>|model``,
    :func:`geoagent.data.model.make_task_id`), and a row stored under such a key whose ``image_shown`` is another
    image (or none) is left out and counted (:attr:`other_image`). Before the task key named the image, a
    redrawn image kept its trial's task and the answer about the old image was scored for the new trial.

    Parameters
    ----------
    plan_keys : set of str or None
        The current plan's message keys (``task_id|model``, the scored table's keys); None counts every row.

    Attributes
    ----------
    other_image : int
        Rows left out because their key names another image than the row shows (beside the base class's tallies).
    """

    def __init__(self, plan_keys: set[str] | frozenset[str] | None) -> None:
        super().__init__(plan_keys, table=SCORED_TABLE, request_key=lambda row: row.get("request_key"),
                         check=scored_row_problem,
                         fill=with_stored_finish_reason, changed="the trial design or the models")
        self.other_image = 0
        self.other_image_examples: list[str] = []

    def left_out(self, key: str, row: Mapping[str, Any]) -> str | None:
        """As the base class's (:meth:`geoagent.runtime.scope.ScoredScope.left_out`), and a row of a planned task
        whose key names another image than the row shows (:func:`key_image_problem`) is left out, before its
        request key is registered (so it never stands for another row's request)."""
        if self.plan_keys is None or key in self.plan_keys:
            why = key_image_problem(key, row)
            if why is not None:
                self.other_image += 1
                if len(self.other_image_examples) < 5:
                    self.other_image_examples.append(key)
                return why
        return super().left_out(key, row)

    def _earlier_key_of_planned(self, key: str, row: Mapping[str, Any]) -> bool:
        """A swapped-image row under its task's key of before the key named the image shown, whose new key
        (:func:`geoagent.geoverify.rekey.new_key`) the plan holds (upgrade41 B)."""
        from geoagent.geoverify.rekey import new_key

        new = new_key(key, dict(row))
        return new is not None and self.plan_keys is not None and new in self.plan_keys

    def note(self) -> str | None:
        """The base class's sentence, and how many rows showed another image than their task names."""
        base = super().note()
        if not self.other_image:
            return base
        one = self.other_image == 1
        part = (f"{self.other_image} stored answer{'' if one else 's'} of a swapped-image control "
                f"show{'s' if one else ''} another image than {'its' if one else 'their'} task names (the trial's "
                f"image was redrawn) and {'is' if one else 'are'} not scored, e.g. {self.other_image_examples[0]}")
        return f"{base[:-1]}; {part}." if base else f"Left out of scoring: {part}."


def key_image_problem(key: str, row: Mapping[str, Any]) -> str | None:
    """Why a scored ``row`` stored under ``key`` answers another image than the key's task shows, else None.

    Only a swapped-image control's key names an image (``<trial_id>|shows=<image_ref>|<model>``,
    :func:`geoagent.data.model.make_task_id`); the row's ``image_shown`` must be that image. A key that names
    none (another arm, a trial table without ``image_ref``, a key of another shape) is not judged.
    """
    tid = row.get("trial_id")
    if row.get("arm") != ARM_MISMATCH or not isinstance(tid, str) or not key.startswith(f"{tid}|{TASK_SHOWS_TAG}"):
        return None
    shown = row.get("image_shown")
    if shown is not None and key.startswith(f"{tid}|{TASK_SHOWS_TAG}{shown}|"):
        return None
    return (f"shows image {shown!r}, not the one its task names: the trial's swapped image was redrawn after it "
            "was answered")


class GeoVerifyAggregatorStage(LiveAggregatorStage):
    """``scored`` -> (none): updates the incremental aggregator; rewrites the report on flush (rate-limited,
    in a worker thread) and at stop (awaited).

    On start it rebuilds its counts from results table ``geoverify_scored`` (if a store exists), so a
    restart after a crash loses nothing; rows delivered again are recognised by (trial_id, model). It counts the
    rows of the campaign's current plan, and rebuilds so again when the campaign plans anew while it runs (a
    ``--watch`` re-plan, :meth:`_follow_plan`).

    The live rewrite runs off the event loop (:class:`~geoagent.report.live.LiveReport`), at most one at a
    time, at least ``max(report_interval_s, REWRITE_BACKOFF x the previous rewrite's duration)`` after the
    previous one ended (:meth:`LiveReport.gap_s`: a slow report is rewritten less often, so its share of the
    campaign's CPU stays bounded); a flush while one runs skips. Each live rewrite lists the missing work as it
    stands then (ctx service :data:`SERVICE_LIVE_MISSING`: dead-lettered and unreplayed trials), so
    ``geoverify_missing.csv`` and the table's "missing" note follow the run (a re-run after ``run.py dead
    --requeue`` empties them as the trials are answered) instead of keeping the previous run's list. While
    it runs, handled rows stay in the pending batch (the aggregator is not updated), so the thread reads
    one consistent state. The final report at :meth:`stop` waits for a rewrite in flight, merges every
    pending row and is written to completion before ``stop`` returns. The machinery is
    :class:`geoagent.report.live.LiveAggregatorStage`'s; GeoVerify's own: rows are merged in batches of 256
    (``drain_at``; one polars update each) and a batch the aggregator rejects stays pending
    (``keep_rejected_batch``), an empty report is written too, a failing final report raises, and
    :meth:`write_report` returns the paths written (Table 12 text/Markdown/CSV + plot; also kept in
    ``report_paths``).
    """

    what = "GeoVerify"
    plan_keys_service = SERVICE_PLAN_KEYS
    live_missing_service = SERVICE_LIVE_MISSING
    interval_service = "geoverify_report_interval_s"
    _log = log
    drain_at = 256
    keep_rejected_batch = True
    final_guarded = False

    def __init__(self, *, report_interval_s: float | None = None, n_boot: int = 0, seed: int = 0,
                 models: Sequence[str] = (), tau_km: float = C.GEOVERIFY_TAU_KM) -> None:
        self.agg = GeoVerifyAggregator()
        super().__init__(report_interval_s=report_interval_s)
        self.n_boot = n_boot
        self.seed = seed
        #: the campaign's claim tolerance (km): the decoy bands scored and the tau the report's terms name
        self.tau_km = tau_km
        #: the campaign's models with a column before their first answer, as in the final report (review39b)
        self.models = tuple(models)
        self.report_paths: dict[str, Path] = {}

    @property
    def missing_csv(self) -> str:  # type: ignore[override]
        """:data:`geoagent.report.geoverify.MISSING_CSV` (imported when a rewrite needs it, as the report is)."""
        from geoagent.report.geoverify import MISSING_CSV

        return MISSING_CSV

    def _new_aggregator(self) -> GeoVerifyAggregator:
        return GeoVerifyAggregator()

    def _scope(self, plan_keys: Collection[str] | None) -> ScoredScope:
        return ScoredScope(set(plan_keys) if plan_keys is not None else None)

    def _rebuild(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        batch: list[dict[str, Any]] = []
        for _key, row in rows:
            batch.append(row)
            if len(batch) >= 5000:
                self.agg.update(batch)
                batch = []
        self.agg.update(batch)

    def _add_rows(self, rows: list[dict[str, Any]]) -> int:
        return self.agg.update(rows)

    def _write_report(self, out_dir: Path, missing_kw: dict[str, Any]) -> dict[str, Path]:
        from geoagent.report.geoverify import write_report

        self.report_paths = write_report(
            self.agg.scores(n_boot=self.n_boot, seed=self.seed, models=self.models, tau_km=self.tau_km), out_dir,
            parse_failures=self.agg.parse_failures(),
            **missing_kw,
        )
        return self.report_paths


def geoverify_stages(**aggregator_kw: Any) -> list[Stage]:
    """The three GeoVerify stages after the model caller, in data-flow order."""
    return [GeoVerifyParserStage(), GeoVerifyScorerStage(), GeoVerifyAggregatorStage(**aggregator_kw)]
