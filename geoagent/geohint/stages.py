"""GeoHint pipeline pieces: the planner function and the parser, scorer and aggregator stages.

Data flow (constants.EDGE_*)::

    plan_messages(...) -> requests -> [model caller] -> responses -> GeoHintParserStage -> answers
        -> [geocoder] -> located -> GeoHintScorerStage -> scored -> GeoHintAggregatorStage -> report

Message keys are the planner's ``gh|model|site|image|condition|reference point|r<repeat>`` on every edge.

Payloads
--------
``requests``: ``model, prompt, image_id, image_ref, params{max_output_tokens, ...}, meta`` with ``meta``
= ``task="geohint", site, condition, schema, repeat, ref_qid, ref_name, ref_name_zh, ref_names, band, tier,
dist_km, referenceability, sample_rate, site_lat, site_lon, site_city`` (see :mod:`geoagent.geohint.plan`).

``responses`` (model caller): ``request_key, model, text, input_tokens, output_tokens, finish_reason, meta``.

``answers`` (parser): ``model, request_key, image_id, meta, parsed`` where ``parsed`` is
:meth:`ParsedAnswer.to_json` (``ok, raw, city, area, building, confidence_area, confidence_building,
clues, evidence, country, method, error, truncated``), plus token counts.

``located`` (geocoder): the answer payload plus ``resolved_level`` (``building/area/city/none``), ``lat``,
``lon``, ``error_km`` and optionally ``label``/``resolved_label``, ``qid``, ``ref_aliases``; the same
fields nested under ``located`` are accepted too.

``scored`` (scorer): :meth:`GeoHintResult.to_json` (the provider's finish reason in
``extra["finish_reason"]``, for the cut-off counts of :mod:`geoagent.scoring.truncation`); ``echo`` under the campaign's ``[geohint] echo_rule``,
every rule's verdict in ``extra["echo_by_rule"]`` and the chosen rule in ``extra["echo_rule"]``
(:mod:`geoagent.geohint.echo`). An answer cut off at the output-token limit with nothing parsed (no answer,
:func:`geoagent.scoring.truncation.is_no_answer`) has ``hit``, ``echo`` and ``resolved_level`` None and no echo
verdicts, and
``extra["no_answer"]`` says why (:data:`geoagent.scoring.truncation.NO_ANSWER_CUT_OFF`; absent on every
other row).

Services read from the :class:`~geoagent.runtime.stage.StageContext` (all optional): ``store`` (response
text by request key; results table ``geohint_scored``), ``report_dir`` (folder of the live report; default
``<state_dir>/report``, with ``state_dir`` the service of that name, the run's ``[paths] state`` folder, or
``<state root>/<campaign>``: :func:`geoagent.report.live.live_report_dir`), ``geohint_report_interval_s`` (minimum seconds from the end
of one live report rewrite, done in a worker thread, to the next; default 5; stretched to 4x the last
rewrite's duration when that is longer, :data:`geoagent.report.live.REWRITE_BACKOFF`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.data.model import ContextLadder, Image, Site
from geoagent.geo import haversine_km
from geoagent.geohint.aggregate import (CHECKLIST_CONDITIONS, NO_HINT_DISTANCE, GeoHintAggregator,
                                       without_hint_distance)
from geoagent.geohint.conditions import Condition, PromptBook
from geoagent.geohint.echo import DEFAULT_ECHO_RULE, check_echo_rule, echo_by_rule
from geoagent.geohint.parse import ANSWER_PARSER_VERSION, finish_reason_text, parse_answer
from geoagent.geohint.plan import ModelSpec, PlanSummary, plan_requests
from geoagent.geohint.reparse import current_payload
from geoagent.geohint.result import GeoHintResult
from geoagent.report.live import LiveAggregatorStage
from geoagent.runtime.queue import Task
from geoagent.runtime.scope import ScoredScope
from geoagent.runtime.stage import Message, PermanentFailure, Stage, StageContext
from geoagent.scoring.geohint import is_hit, normalize_level
from geoagent.scoring.truncation import is_no_answer, no_answer_reason
from geoagent.workers.responses import response_text, with_stored_finish_reason

log = logging.getLogger(__name__)

TASK_NAME = "geohint"
SCORED_TABLE = "geohint_scored"


def plan_messages(
    sites: Mapping[str, Site],
    images: Iterable[Image],
    ladders: Mapping[str, ContextLadder],
    models: Sequence[ModelSpec],
    conditions: Sequence[Condition],
    **kw: Any,
) -> tuple[list[Message], PlanSummary]:
    """Planner function: ``(key, payload)`` messages for the ``requests`` edge plus the plan summary.

    Keyword arguments go to :func:`geoagent.geohint.plan.plan_requests` (seed, baseline_repeats,
    params, prompts, images_per_site, image_root). Payloads carry no ``provider`` (the model caller
    resolves the provider from the campaign config's model entry).
    """
    reqs, summary = plan_requests(sites, images, ladders, models, conditions, **kw)
    out: list[Message] = []
    for i, r in enumerate(reqs):  # each request's dicts handed over (no copy), the request dropped as it goes
        reqs[i] = None  # type: ignore[call-overload]
        out.append((r.key, {"model": r.model, "prompt": r.prompt, "image_id": r.image_id, "image_ref": r.image_ref,
                            "params": r.params, "meta": r.meta}))
    return out, summary


def plan_from_config(
    cfg: Any,
    sites: Mapping[str, Site],
    images: Iterable[Image],
    ladders: Mapping[str, ContextLadder],
) -> tuple[list[Message], PlanSummary]:
    """Planner driven by a :class:`~geoagent.config.CampaignConfig`: models (names, sampling rates) from
    ``[[models]]`` and ``[geohint] sample_rates``; conditions, repeats, image cap, prompts folder, image
    root and output cap from ``[geohint]``; the seed from ``[campaign] seed``.

    Raises
    ------
    ValueError
        Two ``[[models]]`` entries that ask identical requests (:func:`geoagent.runtime.scope.twin_models`): they
        would share one stored answer per request, which every pooled statistic would count twice; an entry named
        ``All`` or holding ``|`` (:func:`geoagent.geohint.plan.check_report_names`).
    """
    from geoagent.geohint.conditions import conditions_from_config
    from geoagent.geohint.plan import check_report_names, models_from_config
    from geoagent.geohint.settings import GeoHintSettings
    from geoagent.runtime.scope import twin_models, twin_models_text

    check_report_names(str(getattr(m, "name", "")) for m in getattr(cfg, "models", []))
    twins = twin_models(getattr(cfg, "models", []))
    if twins:
        raise ValueError(f"GeoHint: {twin_models_text(twins)}: one answer per request would be stored for both and "
                         "counted under each name, so every pooled statistic would count it twice; drop one, or make "
                         "them differ (e.g. a `seed`, or another `params` value) to ask the model twice")

    sec = cfg.section("geohint")
    if not isinstance(sec, GeoHintSettings):
        sec = GeoHintSettings.model_validate(sec or {})
    return plan_messages(
        sites,
        images,
        ladders,
        models_from_config(cfg),
        conditions_from_config({"geohint": {"conditions": sec.conditions}}),
        seed=int(getattr(cfg.campaign, "seed", 0) or 0),
        baseline_repeats=sec.baseline_repeats,
        context_repeats=sec.context_repeats,
        params={} if sec.max_output_tokens is None else {"max_output_tokens": sec.max_output_tokens},
        prompts=PromptBook(sec.prompts_dir, source=getattr(cfg, "source", None)) if sec.prompts_dir else None,
        images_per_site=sec.images_per_site,
        points_per_cell=sec.points_per_cell,
        image_root=sec.image_root,
    )


def _meta(payload: Mapping[str, Any]) -> dict[str, Any]:
    meta = payload.get("meta")
    if not isinstance(meta, Mapping) or meta.get("task") != TASK_NAME or "site" not in meta or "condition" not in meta:
        raise PermanentFailure("message meta is not a GeoHint request's (needs task='geohint', site, condition)")
    return dict(meta)


class GeoHintParserStage(Stage):
    """``responses`` -> ``answers``: parse the answer text defensively (never raises on bad text). The answer
    carries the parsed fields and ``parser_version``, not the verbatim text (kept once, in the response store)."""

    name = C.STAGE_PARSER
    sends_http = False  # no request of its own: a slow model upstream is no pace of its (pace_keys)
    input_edge = C.EDGE_RESPONSES
    output_edge = C.EDGE_ANSWERS
    concurrency = 16

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        p = task.payload
        meta = _meta(p)
        text = await response_text(p, ctx)
        if text is None:
            raise PermanentFailure("response payload has neither text nor request_key")
        finish = finish_reason_text(p.get("finish_reason"))  # cleaned as the parsed fields are (crawl43 #3)
        parsed = parse_answer(text, finish)
        answer = {
            "model": p.get("model"),
            "request_key": p.get("request_key"),
            "image_id": p.get("image_id"),
            "meta": meta,
            # the parsed fields without the verbatim text: it is in the response store (request_key), and an answer
            # of many tokens copied onto every later edge was stored 4 times; the export fills extra.raw from there
            "parsed": {k: v for k, v in parsed.to_json().items() if k != "raw"},
            "parser_version": ANSWER_PARSER_VERSION,
            "input_tokens": p.get("input_tokens"),
            "output_tokens": p.get("output_tokens"),
            "finish_reason": finish,
        }
        return [(task.key, answer)]


def _f(x: Any) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def score_located(key: str, payload: Mapping[str, Any], *, echo_rule: str = DEFAULT_ECHO_RULE) -> GeoHintResult:
    """Turn one ``located`` payload into a :class:`GeoHintResult` (hit, echo, d_ref, fields).

    Echo (Sec. 6.2.1) is computed under every rule of :data:`geoagent.geohint.echo.ECHO_RULES`:
    ``echo`` holds the verdict of ``echo_rule`` (``[geohint] echo_rule``), ``extra["echo_by_rule"]`` all
    of them, ``extra["echo_rule"]`` the chosen rule. The ``"name"`` rule matches the point's names
    (``meta.ref_names``, ``ref_name`` and the geocoder's Wikidata ``ref_aliases``); the
    ``"release_first_word"`` rule uses ``meta.ref_name`` (English) and ``meta.ref_name_zh`` (Chinese;
    absent in plans made before it was recorded, then the English name alone is used).

    An answer cut off at the output-token limit with nothing parsed (``finish_reason`` ``length``,
    ``max_tokens`` or ``MAX_TOKENS`` and ``parsed.ok`` false), or stopped by the provider's content filter with
    nothing parsed (``SAFETY``, ``content_filter``, ``refusal``, ...), is no answer
    (:func:`geoagent.scoring.truncation.is_no_answer`): ``hit`` and ``echo`` are None (not False), it carries
    no echo verdicts and ``extra["no_answer"]`` says which (:func:`~geoagent.scoring.truncation.no_answer_reason`), so
    the stored row and the ``geohint_scored`` export say what every report does with it (no rate counts it);
    its ``resolved_level`` is None (there was no answer to geocode), whereas ``"none"`` is a real answer the
    geocoder resolved nothing for.

    Raises
    ------
    PermanentFailure
        The payload lacks GeoHint meta, a model, or any resolution level, or has a negative ``error_km``.
    ValueError
        Unknown ``echo_rule``.
    """
    check_echo_rule(echo_rule)
    meta = _meta(payload)
    model = payload.get("model")
    if not model:
        raise PermanentFailure("located answer has no model")
    loc = payload.get("located") if isinstance(payload.get("located"), Mapping) else payload
    if "resolved_level" not in loc:
        raise PermanentFailure("located answer has no resolved_level (geocoder output expected)")
    try:
        level = normalize_level(loc.get("resolved_level"))
    except ValueError as exc:
        raise PermanentFailure(str(exc)) from None
    lat, lon = _f(loc.get("lat")), _f(loc.get("lon"))
    error_km = _f(loc.get("error_km"))
    if error_km is not None and error_km < 0:
        raise PermanentFailure(f"located answer has a negative error_km ({error_km!r} km)")
    site_lat, site_lon = _f(meta.get("site_lat")), _f(meta.get("site_lon"))
    if error_km is None and level != "none" and None not in (lat, lon, site_lat, site_lon):
        error_km = haversine_km(site_lat, site_lon, lat, lon)
    if level == "none":
        error_km = None
    parsed = payload.get("parsed") if isinstance(payload.get("parsed"), Mapping) else {}
    area, building = parsed.get("area"), parsed.get("building")
    has_ref = bool(meta.get("ref_qid") or meta.get("ref_name"))
    # a payload queued by an earlier parser may carry the reason uncleaned: stored and judged cleaned (crawl43 #3)
    finish = finish_reason_text(payload.get("finish_reason"))
    no_answer = is_no_answer(finish, bool(parsed.get("ok")))
    echo = None
    by_rule: dict[str, bool] | None = None
    if has_ref and not no_answer:
        names = [*(meta.get("ref_names") or []), meta.get("ref_name"), *(meta.get("ref_aliases") or []), *(loc.get("ref_aliases") or [])]
        by_rule = echo_by_rule(area, building, names, name_en=meta.get("ref_name"), name_zh=meta.get("ref_name_zh"),
                               cities=[meta.get("site_city")])
        echo = by_rule[echo_rule]
    return GeoHintResult(
        key=key,
        site=str(meta["site"]),
        image_id=str(payload.get("image_id") or meta.get("image_id") or ""),
        model=str(model),
        condition=str(meta["condition"]),
        schema=str(meta.get("schema") or "forced"),
        repeat=int(meta.get("repeat") or 0),
        ref_qid=meta.get("ref_qid"),
        ref_name=meta.get("ref_name"),
        band=meta.get("band"),
        tier=meta.get("tier"),
        dist_km=_f(meta.get("dist_km")),
        city=parsed.get("city"),
        area=area,
        building=building,
        confidence_area=_f(parsed.get("confidence_area")),
        confidence_building=_f(parsed.get("confidence_building")),
        parse_ok=bool(parsed.get("ok")),
        evidence=parsed.get("evidence") if isinstance(parsed.get("evidence"), dict) else None,
        resolved_level=None if no_answer else level,
        resolved_label=loc.get("resolved_label") or loc.get("label"),
        lat=lat,
        lon=lon,
        error_km=error_km,
        hit=None if no_answer else is_hit(error_km, level),
        echo=echo,
        source="campaign",
        extra={
            "request_key": payload.get("request_key"),
            "sample_rate": meta.get("sample_rate"),
            "qid": loc.get("qid"),
            # how the point was found: wikidata, nominatim, or answer-coordinates (the answer gave it; no lookup)
            "geocode_source": loc.get("geocode_source"),
            # the geocoding rules that located it (geohint.geocode.GEOCODER_RULES_VERSION); None: located before
            # it was recorded (newuser41 #1: a campaign resumed across a rules change mixes versions)
            "geocoder_rules": loc.get("geocoder_rules") if isinstance(loc.get("geocoder_rules"), int) else None,
            "parse_error": parsed.get("error"),
            "parse_method": parsed.get("method"),
            # the parser's rules that read it (geohint.parse.ANSWER_PARSER_VERSION); None: parsed before recorded
            "parser_version": payload.get("parser_version") if isinstance(payload.get("parser_version"), int) else None,
            **({"evidence_slots": parsed["evidence_slots"]} if isinstance(parsed.get("evidence_slots"), dict) else {}),
            # an answer queued before the parser left its text out keeps it here; the export fills it in from the
            # response store otherwise (geoagent.runtime.export: extra.raw of every row)
            "raw": parsed.get("raw") if not parsed.get("ok") else None,
            "finish_reason": finish,
            **({"echo_rule": echo_rule, "echo_by_rule": by_rule} if by_rule is not None else {}),
            **({"no_answer": no_answer_reason(finish)} if no_answer else {}),
        },
    )


def as_no_answer(row: dict[str, Any]) -> dict[str, Any]:
    """A stored ``geohint_scored`` row (:meth:`GeoHintResult.to_json`) as :func:`score_located` writes a no-answer
    today, when it is one (:func:`geoagent.scoring.truncation.is_no_answer` of ``extra["finish_reason"]`` and
    ``parse_ok``): ``hit`` and ``echo`` None, no ``extra["echo_by_rule"]`` / ``extra["echo_rule"]``,
    ``extra["no_answer"]`` = :func:`~geoagent.scoring.truncation.no_answer_reason`. Rows scored before that
    (stored with ``hit`` and ``echo`` False, ``resolved_level`` ``"none"``) and rows whose finish reason came
    from the response store get the same values in the export: ``resolved_level`` None too. Any other row is returned unchanged. ``row`` is modified in place."""
    extra = row.get("extra")
    if not isinstance(extra, dict) or not is_no_answer(extra.get("finish_reason"), bool(row.get("parse_ok"))):
        return row
    row["hit"] = None
    row["echo"] = None
    row["resolved_level"] = None  # nothing to geocode: not the geocoder's "none" (it resolved nothing)
    extra.pop("echo_by_rule", None)
    extra.pop("echo_rule", None)
    extra["no_answer"] = no_answer_reason(extra.get("finish_reason"))
    return row


#: added to :data:`~geoagent.geohint.aggregate.NO_HINT_DISTANCE` in ``extra.left_out`` of a forced_chain (or
#: forced_chain_baseline) answer without a hint distance: Table 11, the evidence checklist, counts every
#: forced_chain answer (:data:`~geoagent.geohint.aggregate.CHECKLIST_CONDITIONS`, module doc of the aggregator)
NO_HINT_DISTANCE_TABLE_11 = "; counted in Table 11 only (the evidence checklist counts every forced_chain answer)"


def export_rows(scope: ScoredScope, store: Any) -> Any:
    """The ``geohint_scored`` export's ``rows_hook`` (:func:`geoagent.runtime.export.export_table`): each
    ``(key, row)`` with the ``scored`` column of ``scope`` (:meth:`ScoredScope.mark`: the current plan's rows),
    the finish reason from ``store`` where the row lacks it (as the report reads it) and a no-answer stored as one
    (:func:`as_no_answer`). A row the scope leaves out (its task is not in the current plan, or it repeats a
    counted request) has ``scored`` False and the reason in ``extra["left_out"]``
    (:meth:`geoagent.runtime.scope.ScoredScope.left_out`: :data:`~geoagent.runtime.scope.NOT_IN_PLAN`). A
    context answer whose reference point has no hint distance
    (:func:`geoagent.geohint.aggregate.without_hint_distance`; not a no-answer, which the table ``cutoff``
    counts) is left out of every table by the report, so its ``scored`` is False and ``extra["left_out"]`` says
    why (:data:`~geoagent.geohint.aggregate.NO_HINT_DISTANCE`, followed by :data:`NO_HINT_DISTANCE_TABLE_11` for a
    forced_chain answer, which Table 11 counts; its stored ``hit`` and ``echo`` are kept): the
    ``scored`` column is True exactly for the rows the report counts, and ``extra.left_out`` is null exactly on
    them: a reader tells a scored row (``extra.no_answer`` null), a scored no-answer (``extra.no_answer`` set:
    the table ``cutoff`` counts it) and a row left out (``extra.left_out`` says why) apart. Lazy, in store
    order; nothing stored is changed."""

    def hook(rows: Iterable[tuple[str, dict[str, Any]]]) -> Any:
        for key, row in rows:
            why = scope.left_out(key, row)
            row["scored"] = why is None
            row = as_no_answer(_fill_finish_reason(row, store))
            extra = row.get("extra")
            if not isinstance(extra, dict):
                extra = row["extra"] = {}
            extra["left_out"] = why
            if (why is None and extra.get("no_answer") is None
                    and without_hint_distance(row.get("ref_qid"), row.get("ref_name"), row.get("dist_km"))):
                row["scored"] = False
                extra["left_out"] = (NO_HINT_DISTANCE + NO_HINT_DISTANCE_TABLE_11
                                     if row.get("condition") in CHECKLIST_CONDITIONS else NO_HINT_DISTANCE)
            yield key, row

    return hook


class GeoHintScorerStage(Stage):
    """``located`` -> ``scored``: hit (Sec. 4.2), echo (Sec. 6.2.1) under ``echo_rule`` (see
    :func:`score_located`), d_ref; also written to the results table ``geohint_scored`` (key = message key)
    when a ``store`` service exists."""

    name = C.STAGE_SCORER
    sends_http = False  # no request of its own: a slow model upstream is no pace of its (pace_keys)
    input_edge = C.EDGE_LOCATED
    output_edge = C.EDGE_SCORED
    concurrency = 16

    def __init__(self, *, echo_rule: str = DEFAULT_ECHO_RULE) -> None:
        self.echo_rule = check_echo_rule(echo_rule)

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        # an answer located under an earlier answer parser takes the current parse where its place is unchanged;
        # one naming another place now keeps its row's earlier version, for the next run's refresh (fixreparse41)
        payload = await current_payload(task.payload, ctx, geocoded=True)
        row = score_located(task.key, payload, echo_rule=self.echo_rule).to_json()
        store = ctx.services.get("store")
        if store is not None:
            await store.aput_result(SCORED_TABLE, task.key, row)
        return [(task.key, row)]


#: ctx service: the message keys of the campaign's current plan (set by the campaign kind when it plans), so the
#: live aggregator and the report score only those (:func:`scored_scope`)
SERVICE_PLAN_KEYS = "geohint_plan_keys"
#: ctx service: a callable returning the missing work the report lists, as keyword arguments of
#: :func:`geoagent.report.geohint.write_report` (``missing``: dead-lettered requests on every edge), read anew at
#: each live rewrite (in its worker thread); set by the campaign kind when it plans
#: (:meth:`geoagent.geohint.campaign.GeoHintCampaign.live_missing`). Without it the live report leaves
#: ``missing.csv`` as it is and says nothing of missing requests.
SERVICE_LIVE_MISSING = "geohint_live_missing"


def _fill_finish_reason(row: dict[str, Any], store: Any) -> dict[str, Any]:
    """A scored row with its ``extra`` finish reason from the response store (rows scored before finish reasons
    were kept)."""
    if isinstance(row.get("extra"), dict):
        with_stored_finish_reason(row["extra"], store)
    return row


def scored_scope(plan_keys: Iterable[str] | None) -> ScoredScope:
    """Which stored rows of ``geohint_scored`` a GeoHint report counts: exactly the current plan's requests
    (``plan_keys``, the message keys ``gh|model|...``; None counts every row). A re-run with sites or a model
    removed from the config keeps their answers in the store; scoring them reported sites and models the config
    no longer names (a walkthrough: 12 sites cut to 6, "719 scored responses over 7 sites", ``table1.csv``
    with a removed model's row). Counted rows get their finish reason from the response store where they lack
    one. (:class:`geoagent.runtime.scope.ScoredScope`; GeoHint rows have no top-level request key, so no row is
    left out as a repeat.)"""
    return ScoredScope(set(plan_keys) if plan_keys is not None else None, table=SCORED_TABLE,
                       fill=_fill_finish_reason, check=GeoHintResult.row_problem,
                       changed="the sites, images, conditions, the ladders' reference points or the models")


class GeoHintAggregatorStage(LiveAggregatorStage):
    """``scored`` -> (none): feeds the per-site aggregator; rewrites the report on flush (rate-limited,
    in a worker thread) and at stop (awaited).

    On start it rebuilds from the results table ``geohint_scored`` (if a store exists), so a restart
    loses nothing; a row delivered again is recognised by its key and ignored. It counts the rows of the
    campaign's current plan, and rebuilds so again when the campaign plans anew while it runs (a ``--watch``
    re-plan, :meth:`_follow_plan`).

    The live rewrite runs off the event loop (:class:`~geoagent.report.live.LiveReport`), at most one at a
    time, at least ``max(report_interval_s, REWRITE_BACKOFF x the previous rewrite's duration)`` after the
    previous one ended (:meth:`LiveReport.gap_s`: a slow report is rewritten less often, so its share of the
    campaign's CPU stays bounded); a flush while one runs skips. Each live rewrite lists the missing work as it
    stands then (ctx service :data:`SERVICE_LIVE_MISSING`: dead-lettered requests), so ``missing.csv`` and the
    "Incomplete" note of ``report.md`` follow the run (a re-run after ``run.py dead --requeue`` empties them as the
    requests are answered) instead of keeping the previous run's list. While
    it runs, newly handled rows are held back and added when it is done, so the thread reads one
    consistent state of the aggregator. The final report at :meth:`stop` waits for a rewrite in flight,
    adds every held row and is written to completion before ``stop`` returns. The machinery is
    :class:`geoagent.report.live.LiveAggregatorStage`'s; GeoHint's own: each row is added as it comes
    (``drain_at`` 1), a malformed row is a permanent failure, a report of 0 responses is written too (as
    GeoVerify's: a re-run's earlier report described answers its plan no longer holds), a failing final report is logged, not raised (``final_guarded``), and
    :meth:`write_report` returns the tables (also kept in ``tables``).

    ``echo_rule`` (``[geohint] echo_rule``) is the rule the aggregator counts as echo and the report names;
    ``p_reference`` (``[geohint] p_reference``, ``"normal"`` or ``"t"``) the slope tables' p-value reference;
    ``regime_threshold`` (``[geohint] regime_threshold``) the no-context hit rate from which a site is legible;
    ``n_boot`` (``[geohint] n_boot``, >= 0, 0 = none) the site-bootstrap resamples of the report's intervals,
    ``boot_seed`` (``[geohint] boot_seed``) their seed (None = ``seed``, the ``[campaign] seed``).
    """

    what = "GeoHint"
    plan_keys_service = SERVICE_PLAN_KEYS
    live_missing_service = SERVICE_LIVE_MISSING
    interval_service = "geohint_report_interval_s"
    missing_csv = "missing.csv"
    _log = log
    drain_at = 1
    keep_rejected_batch = False
    final_guarded = True

    def __init__(
        self,
        *,
        report_interval_s: float | None = None,
        n_flips: int = 10_000,
        n_splits: int = 200,
        n_boot: int = 1000,
        seed: int = 0,
        boot_seed: int | None = None,
        figures: bool = True,
        echo_rule: str = DEFAULT_ECHO_RULE,
        p_reference: str = "normal",
        regime_threshold: float = 0.5,
    ) -> None:
        from geoagent.report.geohint import check_p_reference

        self.agg = GeoHintAggregator(echo_rule=echo_rule, regime_threshold=regime_threshold)
        self.p_reference = check_p_reference(p_reference)
        super().__init__(report_interval_s=report_interval_s)
        self.n_flips, self.n_splits, self.seed, self.figures = n_flips, n_splits, seed, figures
        self.n_boot = n_boot
        self.boot_seed = boot_seed
        self.tables: list[Any] = []

    def _new_aggregator(self) -> GeoHintAggregator:
        return GeoHintAggregator(echo_rule=self.agg.echo_rule, regime_threshold=self.agg.regime_threshold)

    def _scope(self, plan_keys: Iterable[str] | None) -> ScoredScope:
        return scored_scope(plan_keys)

    def _rebuild(self, rows: Iterable[tuple[str, dict[str, Any]]]) -> None:
        for _key, row in rows:
            self.agg.add(GeoHintResult.from_json(row))

    def _row(self, task: Task) -> GeoHintResult:
        try:
            return GeoHintResult.from_json(task.payload)
        except (TypeError, ValueError) as exc:
            raise PermanentFailure(f"scored row is malformed: {exc}") from None

    def _add_rows(self, rows: list[GeoHintResult]) -> int:
        return self.agg.add_many(rows)

    def _write_report(self, out_dir: Path, missing_kw: dict[str, Any]) -> list[Any]:
        from geoagent.report.geohint import write_report

        self.tables = write_report(
            self.agg, out_dir, n_flips=self.n_flips, n_splits=self.n_splits, seed=self.seed, figures=self.figures,
            p_reference=self.p_reference, n_boot=self.n_boot, boot_seed=self.boot_seed, **missing_kw,
        )
        return self.tables


def geohint_stages(*, echo_rule: str = DEFAULT_ECHO_RULE, **aggregator_kw: Any) -> dict[str, Stage]:
    """The GeoHint stages this module owns, by edge position: ``parser``, ``scorer``, ``aggregator``
    (the geocoder stage, between parser and scorer, lives in :mod:`geoagent.geohint.geocode`); scorer and
    aggregator use ``echo_rule``."""
    return {
        "parser": GeoHintParserStage(),
        "scorer": GeoHintScorerStage(echo_rule=echo_rule),
        "aggregator": GeoHintAggregatorStage(echo_rule=echo_rule, **aggregator_kw),
    }


__all__ = [
    "GeoHintAggregatorStage",
    "GeoHintParserStage",
    "GeoHintScorerStage",
    "PromptBook",
    "SCORED_TABLE",
    "as_no_answer",
    "export_rows",
    "geohint_stages",
    "plan_from_config",
    "plan_messages",
    "score_located",
]
