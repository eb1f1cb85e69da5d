"""``run.py status``: read a campaign's durable state from another process (never changes it).

Reads every queue file under ``queues/<campaign>/``, the ledger in ``state/<campaign>/campaign.sqlite`` and
the last record of ``state/<campaign>/progress.jsonl`` (rates, ETA, in-flight work of a running campaign); of a
run scaled out over several processes (``run --stages``), the latest record of each of its processes, merged
(:func:`geoagent.runtime.progress.read_processes`, :func:`geoagent.runtime.progress.merge_records`), with one
line per process: running, ended, or stopped without its final record (:func:`process_state`).

Two retry layers, named apart wherever a dead letter or an error is shown (``run.py dead``, ``status``, the
reports' missing-work lists): a *delivery* is one lease of a task from its queue (``[queue] max_attempts``
deliveries at most; the queue's ``attempts`` count, shown as ``deliveries=N``), and within one delivery the
HTTP client makes up to the host's ``max_attempts`` *HTTP attempts*. The stored reason text keeps its
original words ("retries exhausted after 2 attempts", which counts HTTP attempts);
:func:`describe_reason` rewrites them for display only.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.textfmt import count_text, mapping_text, one_line_text
from geoagent.runtime.progress import (did_work, merge_records, read_last_with_work, read_processes, read_runs,
                                       record_as_of, record_counts)
from geoagent.runtime.procs import pid_alive
from geoagent.runtime.queue import DeadLetter, QueueCounts
from geoagent.runtime.stage import BudgetStop, other_budget_fixes
from geoagent.runtime.worker import LANE_RATE_WINDOW_S, STALL_MIN_S, unreachable_cause


_HTTP_RETRIES = re.compile(r"\bretries exhausted after (\d+) attempts?\b")
_HTTP_ATTEMPTS_TO = re.compile(r"\b(\d+) attempts? to (\S+) failed\b")


def describe_reason(reason: str | None) -> str:
    """A stored failure reason worded for display: the HTTP client's attempt counts (within one queue
    delivery) are named as such, e.g. ``"Missing: retries exhausted after 1 attempts: http 500"`` ->
    ``"Missing: retries exhausted after 1 HTTP attempt(s) in the last delivery: http 500"`` and
    ``"RetriesExhausted: 3 attempts to URL failed"`` -> ``"... 3 HTTP attempt(s) to URL failed"``; any other text is
    returned as is (None -> ``""``), its terminal control characters escaped (:func:`geoagent.textfmt.inert_text`:
    a reason may quote an API's error body, untrusted text). The stored text is never changed."""
    from geoagent.textfmt import one_line_text

    text = one_line_text(reason or "")  # a reason stored before one_line_text may hold line breaks
    text = _HTTP_RETRIES.sub(r"retries exhausted after \1 HTTP attempt(s) in the last delivery", text)
    return _HTTP_ATTEMPTS_TO.sub(r"\1 HTTP attempt(s) to \2 failed", text)


#: most characters of a stored reason one ``status`` line shows (:func:`clip_reason`)
REASON_CHARS = 240


def clip_reason(reason: str | None, limit: int = REASON_CHARS) -> str:
    """:func:`describe_reason` of ``reason``, cut to ``limit`` characters with ``" [...]"`` at the end when it was
    longer: a cut line says so (walk28 status walkthrough: two last-error lines ended mid-word at 160 characters,
    before the model's name and the hint that followed it)."""
    text = describe_reason(reason)
    return text if len(text) <= limit else text[: limit - 6].rstrip() + " [...]"


def pipeline_edges(cfg: Any) -> list[str]:
    """The campaign's edges in pipeline (data-flow) order, as ``run`` lists them ([] if the kind is unknown)."""
    from geoagent.engine import load_kind

    try:
        stages = load_kind(cfg.campaign.kind).stages(cfg)
    except Exception:  # noqa: BLE001 - a status display falls back to alphabetical order
        return []
    edges: list[str] = []
    for s in stages:
        for e in (s.input_edge, s.output_edge):
            if e and e not in edges:
                edges.append(e)
    return edges


def pipeline_stages(cfg: Any) -> list[tuple[str, str, str | None]]:
    """The campaign's stages in data-flow order as ``(name, input edge, output edge or None)`` ([] if the
    kind or its config section cannot be loaded)."""
    from geoagent.engine import load_kind

    try:
        stages = load_kind(cfg.campaign.kind).stages(cfg)
    except Exception:  # noqa: BLE001 - a status display shows what it can
        return []
    return [(s.name, s.input_edge, s.output_edge) for s in stages]


class _RedisEdge:
    """A queue of a ``[backend] kind = "redis"`` campaign, where :func:`_queue_files` lists a file (``stem``: edge)."""

    __slots__ = ("stem",)

    def __init__(self, edge: str) -> None:
        self.stem = edge


def _queue_files(cfg: Any) -> list[Any]:
    """The campaign's queue files, in pipeline order (files of edges no stage names last, alphabetically); on
    Redis, the pipeline's edges that have a queue on the server (:class:`_RedisEdge`, in pipeline order)."""
    from geoagent.runtime.backend import redis_edges, uses_redis

    if uses_redis(cfg):
        return [_RedisEdge(e) for e in redis_edges(cfg, pipeline_edges(cfg))]
    from geoagent.runtime.sqlite_queue import queue_files

    files = queue_files(Path(cfg.queues_root()) / cfg.name)
    order = {e: i for i, e in enumerate(pipeline_edges(cfg))} if files else {}
    return sorted(files, key=lambda f: (order.get(f.stem, len(order)), f.stem))


def check_edge(cfg: Any, edge: str | None) -> None:
    """Raise ``ValueError`` naming the campaign's queues when ``edge`` is given and is not one of them.

    Raises
    ------
    ValueError
        ``edge`` is not one of the campaign's queues (a typo must not look like "nothing dead there").
    """
    if not edge:
        return
    known = [f.stem for f in _queue_files(cfg)] or pipeline_edges(cfg)
    if edge not in known:
        raise ValueError(f"campaign {cfg.name} has no queue {edge}; its queues are: {', '.join(known) or 'none yet'}")


def _open(cfg: Any, path: Path, *, write: bool = False) -> Any:
    """The existing queue file ``path`` of the campaign; ``write=False`` (a look) leaves a file of an older schema
    version as it is (:class:`~geoagent.runtime.sqlite_queue.SQLiteQueue` ``migrate``), ``write=True`` upgrades it."""
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    if isinstance(path, _RedisEdge):
        from geoagent.runtime.backend import SyncRedisQueue, redis_url

        return SyncRedisQueue(redis_url(cfg), cfg.name, path.stem, **cfg.queue_options())
    queue = SQLiteQueue.open(cfg.queues_root(), cfg.name, path.stem, migrate=write, **cfg.queue_options())
    if not write and queue.schema_version == 0:  # no tables yet: another process is making it (review45a #6)
        queue.close_sync()
        return _QueueNotMade(path.stem)
    return queue


class _QueueNotMade:
    """A look's view of a queue file whose tables another process has not made yet (``user_version`` 0): it holds
    no task. Made whole (:func:`geoagent.runtime.sqlite_wal.create_whole`) no such file appears; one made in place
    (a file system without hard links, or an older version) is in that state for an instant."""

    def __init__(self, name: str) -> None:
        self.name = name

    def counts_sync(self) -> QueueCounts:
        return QueueCounts()

    def dead_letters_sync(self, limit: int) -> list[DeadLetter]:
        return []

    def dead_keys_sync(self, reason_prefix: str = "") -> list[str]:
        return []

    def ready_payloads_sync(self, limit: int) -> list[dict[str, Any]]:
        return []

    def close_sync(self) -> None:
        pass


def _walk_urls(obj: Any, key: str = "") -> list[tuple[str, str]]:
    """``(key, url)`` for every http(s) URL string in a task table (``key``: the innermost table key)."""
    if isinstance(obj, str):
        return [(key, obj)] if obj.startswith(("http://", "https://")) else []
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _walk_urls(v, str(k))]
    if isinstance(obj, (list, tuple)):
        return [kv for v in obj for kv in _walk_urls(v, key)]
    return []


#: added to the label of a host that was a local fake of the run (:func:`host_labels` with ``written``): its
#: loopback port was that run's own, gone with it
FAKE_OF_THE_RUN = "a local fake started by its run"


def host_labels(cfg: Any, written: Any = None) -> dict[str, str]:
    """Readable names of the hosts a campaign config names: ``{host: label}``.

    ``host`` is the HTTP layer's key (:func:`geoagent.runtime.http.host_key`: ``"hostname:port"`` or
    ``"hostname"``). A model's ``base_url`` host is labelled ``model <name>`` (names joined when several
    models share a server); a URL in a task table (e.g. ``[crawl.endpoints] pageviews = ...``,
    ``[geohint.geocoder] wikidata_url = ...``) is labelled ``<key> API`` with a trailing ``_url`` dropped.
    Local fakes on ``127.0.0.1:<port>`` are otherwise told apart by their port only. With ``written`` (the
    config as written, whose URLs on ``*.sandbox.invalid`` ``cfg``, the config as run, has on loopback ports), a
    host that was such a fake gets ``; a local fake started by its run`` (:data:`FAKE_OF_THE_RUN`): its port was the
    run's own and is gone with it (walkthrough s18: ``status`` showed the bare port as if a server listened).
    """
    from geoagent.runtime.http import host_key
    from geoagent.sandbox.launch import fake_name

    def is_fake(url: str | None) -> bool:
        try:
            return bool(url) and fake_name(url) is not None
        except ValueError:  # an unknown *.sandbox.invalid host: the run refused it
            return False

    names: dict[str, list[str]] = {}
    fakes: set[str] = set()
    written_models = {m.name: m for m in getattr(written, "models", None) or []}
    for m in getattr(cfg, "models", []):
        if m.base_url:
            names.setdefault(host_key(m.base_url), []).append(f"model {m.name}")
            if is_fake(getattr(written_models.get(m.name), "base_url", None)):
                fakes.add(host_key(m.base_url))
    urls = _walk_urls(getattr(cfg, "tasks", {}) or {})
    as_written = _walk_urls(getattr(written, "tasks", {}) or {}) if written is not None else []
    for i, (key, url) in enumerate(urls):
        api = key[: -len("_url")] if key.endswith("_url") else key
        names.setdefault(host_key(url), []).append(f"{api} API")
        if len(as_written) == len(urls) and as_written[i][0] == key and is_fake(as_written[i][1]):
            fakes.add(host_key(url))
    return {h: ", ".join(dict.fromkeys(v)) + (f"; {FAKE_OF_THE_RUN}" if h in fakes and not is_fake(f"http://{h}")
                                              else "")
            for h, v in names.items() if h}


def campaign_status(cfg: Any) -> dict[str, Any]:
    """Snapshot of a campaign: ``queues`` (edge -> QueueCounts), ``spend`` (ledger summary dict or None),
    ``progress`` (last progress record or None; for a run of several processes, their latest records merged,
    with ``processes`` each given its ``state``, :func:`process_state`), ``dead`` (edge -> recent DeadLetters),
    ``host_labels``
    (host -> readable name, from the config, overlaid by the labels the runs recorded for their local fakes
    and for hosts they found that no config key names, e.g. the crawl's Mapillary thumbnail CDN
    (:class:`geoagent.runtime.progress.Progress`): those of the last run and, where ``progress_with_work`` is
    shown instead, those of that run)), ``kind_lines`` (lines the campaign kind adds,
    :meth:`geoagent.engine.CampaignKind.status_lines`: a crawl says why it wrote no ``verify_trials.csv``),
    ``queues_dir`` (the absolute folder its queue files are looked for in), ``roots_relative`` (whether that
    folder depends on the working directory), ``state_missing`` (:func:`missing_state_text`: the line for queues
    holding work with no state under the state root, or None) and ``redis`` (the Redis backend: counts of every
    machine, rates and ETA of this machine's processes)."""
    from geoagent.runtime.backend import open_state, state_exists, uses_redis
    from geoagent.runtime.queue import SUPERSEDED

    queues: dict[str, QueueCounts] = {}
    dead: dict[str, list[DeadLetter]] = {}
    superseded: dict[str, int] = {}
    emptied: list[str] = []
    older_by_edge: dict[str, tuple[int, list[dict[str, Any]]]] = {}  # Redis: older_consumers_text
    if uses_redis(cfg):  # a server that lost the campaign shows empty queues: no "campaign complete" (redis36 #1)
        from geoagent.runtime.backend import check_server_holds

        check_server_holds(cfg)
    for f in _queue_files(cfg):
        if isinstance(f, Path) and f.stat().st_size == 0:
            # an emptied queue file holds no task (a run plans it again, reusing stored answers); opening it to
            # look would try to create its tables in a read-only look (runtime36 #2: a traceback). What it held is
            # unknown: never "complete" (review36 #2)
            queues[f.stem] = QueueCounts()
            emptied.append(f.stem)
            continue
        q = _open(cfg, f)
        try:
            queues[f.stem] = q.counts_sync()
            if isinstance(f, _RedisEdge):  # older processes miss its lane tasks (review44d #2)
                waiting, older = q.older_consumers_sync()
                if older:
                    older_by_edge[f.stem] = (waiting, older)
            if queues[f.stem].dead:
                # tasks set aside as no longer planned (superseded) are counted apart and not listed as failures
                n_aside = len(q.dead_keys_sync(SUPERSEDED)) if hasattr(q, "dead_keys_sync") else 0
                if n_aside:
                    superseded[f.stem] = n_aside
                failed = [d for d in q.dead_letters_sync(5 + n_aside) if not d.reason.startswith(SUPERSEDED)][:5]
                if failed:
                    dead[f.stem] = failed
        finally:
            q.close_sync()
    spend = None
    ready_stored: tuple[int, int] | None = None  # (stored, queued) of the idle requests (_ready_stored)
    alive: bool | None = None  # Redis: a process of the campaign runs on some machine (its heartbeat)
    answered: dict[str, int] = {}
    if state_exists(cfg) and not uses_redis(cfg):
        from geoagent.engine import _blank_state_db, blank_state_db_text

        db = Path(cfg.state_dir()) / C.CAMPAIGN_DB
        if db.is_file() and _blank_state_db(db):  # the run's own refusal (runtime36 #2: a traceback here)
            raise ValueError(f"campaign {cfg.name}: its state {db} (stored responses, results, spend) "
                             f"{blank_state_db_text(db)}; restore it from a copy ('run' refuses to go on without it)")
    if state_exists(cfg):
        with open_state(cfg, recover=False, make_state_dir=False) as state, \
                _one_moment(state):  # status only reads; its figures of one moment (race45 #6)
            spend = state.ledger.summary().to_json()
            spend["by_model"] = state.ledger.spend_by_model()
            # the ledger keeps the cap its last run set; the config's may have been changed since (raised after a
            # budget stop): status shows the one the next run uses (walk24 #2)
            spend["config_cap_usd"] = float(cfg.budget.cap_usd)
            from geoagent.engine import gone_reservations, gone_reservations_by_model

            # open reservations whose holder is gone (a forced exit, a kill), by the rule the next run's start-up
            # recovery books them as unknown-outcome spend with: not "still open" calls (spend_detail_lines)
            gone_usd, gone_n = gone_reservations(state.ledger)
            if gone_n:
                spend["gone_usd"], spend["gone_calls"] = gone_usd, gone_n
                # and per model (s14): which model's reservations a gone process left open (spend_detail_lines)
                for name, (m_usd, m_n) in gone_reservations_by_model(state.ledger).items():
                    if name in spend["by_model"]:
                        spend["by_model"][name].update(gone_usd=m_usd, gone_calls=m_n)
            answered = state.store.count_responses_by_model()
            others_alive = getattr(state.ledger, "others_alive", None)
            alive = bool(others_alive()) if uses_redis(cfg) and callable(others_alive) else None
            ready_stored = _ready_stored(cfg, state.store, queues, alive)
    # answers to the current plan's requests only (the recorded plan's tasks done): answers kept from tasks an
    # earlier plan held would overstate a model's share (geoagent.runtime.scope)
    from geoagent.runtime.backend import plan_edge_reader
    from geoagent.runtime.scope import answered_in_plan

    # on Redis counted on the server (redispace43: before, every stored answer, also an earlier plan's)
    in_plan = answered_in_plan(cfg.state_dir(), cfg.queues_root(), cfg.name, C.EDGE_REQUESTS,
                               queue=plan_edge_reader(cfg, C.EDGE_REQUESTS))
    if in_plan is not None:
        answered = in_plan
    from geoagent.engine import dead_owner_pids, run_lock_held

    progress_file = Path(cfg.state_dir()) / C.PROGRESS_FILE
    running = run_lock_held(Path(cfg.state_dir()))
    # fixstatus43 #3: the processes manifest.json records here, so one whose records other processes' pushed out of
    # the window read is still found
    records = read_processes(progress_file, known=_local_processes(Path(cfg.state_dir())))
    progress = (_merged(cfg, records, running, queues, dead_owner_pids(Path(cfg.state_dir())))
                if len(records) > 1 else (records[0] if records else None))
    if len(records) == 1 and running is not False and not records[0].get("finished"):
        # a running (or frozen) process's record read now: its rates fall and its stages' idle time grows with
        # the record's age, and a stage stalled meanwhile makes the ETA unknown (a stopped process's: as it left)
        progress = record_as_of(records[0], time.time(), queues or None)
    # a finished run that found nothing to do (a re-run of a done campaign): show the last run that worked
    worked = None
    if progress is not None and found_nothing_to_do(progress):
        run = next((r for r in read_runs(progress_file) if any(did_work(rec) for rec in r)), [])
        # of a scale-out run, every process's figures (its queue counts as recorded: the ETA is not shown)
        worked = _merged(cfg, run, running, None) if len(run) > 1 else read_last_with_work(progress_file)
    # the run records its own labels: a *.sandbox.invalid URL in the config became 127.0.0.1:<port> there, a
    # new port each run; the labels of the record whose figures are shown (``worked`` when set) win
    labels = {**host_labels(cfg), **((progress or {}).get("host_labels") or {}),
              **((worked or {}).get("host_labels") or {})}
    from geoagent.engine import load_kind

    try:
        kind_lines = load_kind(cfg.campaign.kind).status_lines(cfg)
    except Exception:  # noqa: BLE001 - a status display shows what it can
        kind_lines = []
    if spend is not None and spend.get("gone_calls") and (bookers := _gone_bookers(progress, running)):
        spend["gone_booked_by"] = bookers  # live42 #3: a surviving process books them, not only the next run
    run_cap = ((progress or {}).get("spend") or {}).get("cap_usd")
    if spend is not None and isinstance(run_cap, (int, float)):
        # the cap the last (or running) run reserved against, as its own progress record says: the lower of its
        # config's and the campaign's (geoagent.runtime.ledger.Ledger), which the ledger's stored cap, the last
        # started process's, is not (rev25 #3)
        spend["run_cap_usd"] = float(run_cap)
    from geoagent.runtime.hostshare import board_pauses

    outcomes, unended = _run_statuses(Path(cfg.state_dir()))
    end_cut, end_mark = _end_cut_short(Path(cfg.state_dir())), None
    if uses_redis(cfg):  # redis41 #3: the machine that wrote (or was writing) the end may be another one
        end_cut, end_mark = _server_end(cfg, end_cut, alive)
    return {"campaign": cfg.name, "queues": queues, "spend": spend, "progress": progress, "dead": dead,
            "pauses": _redis_pauses(cfg) if uses_redis(cfg) else board_pauses(cfg.state_dir()),
            "superseded": superseded, "kind_lines": kind_lines, "emptied": emptied,
            "host_labels": labels, "running": running, "progress_with_work": worked,
            "stages": pipeline_stages(cfg) if not queues else [], "answered_by_model": answered,
            "queues_dir": (Path(cfg.queues_root()) / cfg.name).absolute(),
            "run_outcomes": outcomes, "runs_unended": unended,
            # the newest run that began writing the campaign's final exports and report did not finish them
            "end_cut_short": end_cut,
            # the newest run that began its start-up refresh of stored rows and did not finish it (upgrade41 #4)
            "refresh_cut_short": _refresh_cut_short(Path(cfg.state_dir())),
            # (stored, queued): the idle requests that have an answer stored, when no process runs (upgrade41 #4)
            "ready_stored": ready_stored,
            # Redis: the end mark on the server, when it decided end_cut_short (its host, state; None otherwise)
            "end_mark": end_mark,
            # the newest run was started with --watch: drained queues while it runs are it idling, not finishing
            "watching": _last_run_watched(Path(cfg.state_dir())),
            # the Redis backend has no queues folder to be looked for in the wrong place
            # read before the queue folder is listed again: a run records itself after making its queue files, so a
            # run recorded and still no queue file means they are gone (race45 #3: the listing above, then a first
            # run's files and record, then this read, said "deleted or moved?" of queues in place)
            "state_ran": _state_ran_without_queues(cfg) if not queues and not uses_redis(cfg) else None,
            "roots_relative": not Path(cfg.queues_root()).is_absolute(),
            # relative roots, nothing here, but the campaign's queues or state beside its config: run from there
            "ran_elsewhere": ran_in_another_folder(cfg) if not queues and spend is None else None,
            # queues with work but no state under this state root (a wrong $GEOAGENT_STATE): not "complete"
            "state_missing": missing_state_text(cfg, queues) if spend is None else None,
            # Redis: the counts are the campaign's (every machine), the rates and ETA this machine's processes'
            "redis": uses_redis(cfg), "kind": cfg.campaign.kind,
            # Redis: edge -> (tasks waiting in the models' streams, consumers of an older version, which cannot lease
            # them)
            "older_consumers": older_by_edge}


def _redis_pauses(cfg: Any) -> dict[str, float]:
    """The pauses on a ``kind = "redis"`` campaign's host-share board on the server (every machine's): ``{host or
    limit key: seconds left}``; {} when the server cannot be reached (status shows what it can)."""
    from geoagent.runtime.backend import redis_url
    from geoagent.runtime.hostshare_redis import redis_board_pauses

    try:
        url = redis_url(cfg)
        return redis_board_pauses(url, cfg.name) if url else {}
    except Exception:  # noqa: BLE001 - a status display shows what it can
        return {}


def _one_moment(state: Any) -> Any:
    """:meth:`geoagent.runtime.ledger.CampaignDB.snapshot` of a SQLite campaign state (its figures read as of one
    moment); nothing on Redis, whose reads are each their own."""
    snap = getattr(state.db, "snapshot", None)
    return snap() if callable(snap) else contextlib.nullcontext()


def _state_ran_without_queues(cfg: Any) -> dict[str, Any] | None:
    """:func:`_state_ran` of campaign ``cfg`` when its queue folder, listed after the manifest was read, holds no
    queue file; None when it does now (a run that started since made them)."""
    ran = _state_ran(Path(cfg.state_dir()))
    return ran if ran is not None and not _queue_files(cfg) else None


def _state_ran(state_dir: Path) -> dict[str, Any] | None:
    """What the state folder says of earlier runs, for a status that found no queues: ``state_dir``, ``runs``
    (how many runs manifest.json records), ``last_status`` and ``queues_dir`` (the queues folder the last run
    recorded, absolute; None for a run of a version that did not record it); None when no run is recorded."""
    from geoagent.runtime.manifest import read_manifest

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return None
    runs = [r for r in (man.get("runs") if isinstance(man, dict) else None) or [] if isinstance(r, dict)]
    if not runs:
        return None
    last = runs[-1]
    qdir = next((r.get("queues_dir") for r in reversed(runs) if isinstance(r.get("queues_dir"), str)), None)
    return {"state_dir": str(state_dir.absolute()), "runs": len(runs), "last_status": last.get("status"),
            "queues_dir": qdir}


def no_task_queued_text(running: bool) -> str:
    """What ``status`` says (and ``export`` refuses with) of a campaign whose queue files hold no task at all: a
    run made them and was stopped (Ctrl-C) or failed while planning, before it queued its first task, or
    (``running``: a process holds the campaign's ``run.lock``) is planning now. One line, no indent."""
    return "no task queued yet: " + (
        "a run is planning the campaign now" if running else
        "a run made the queues but stopped (or failed) while planning, before it queued its first task; "
        "nothing was sent: re-run the same command to plan and start it")


def stopped_while_planning(cfg: Any) -> str | None:
    """:func:`no_task_queued_text` when campaign ``cfg`` has queue files that hold no task (none ready, leased,
    done or dead on any edge) and its state folder records no run (``manifest.json``); else None. A campaign
    that ran before (its queues lost, say) and whose new run was stopped while planning is not one: what it
    stored is still there. ``export`` refuses such a campaign (exit 1) as one that never ran."""
    from geoagent.engine import run_lock_held

    if _state_ran(Path(cfg.state_dir())) is not None:
        return None  # it ran: decided without reading the queues (a damaged queue file leaves the export its say)
    counts = queue_counts(cfg)
    if not counts or any(c.total for c in counts.values()):
        return None
    return no_task_queued_text(bool(run_lock_held(Path(cfg.state_dir()))))


def wrong_queues_root(cfg: Any) -> str | None:
    """The diagnosis (one line) when campaign ``cfg`` has no queue files under its queues root although its
    state folder's manifest records runs (:func:`wrong_queues_root_text`); None when it has queue files, or no
    run is recorded (a campaign not started), or on the Redis backend (no queues folder). ``status`` and
    ``dead`` print it and exit 2."""
    from geoagent.runtime.backend import uses_redis

    if uses_redis(cfg) or _queue_files(cfg):
        return None
    ran = _state_ran_without_queues(cfg)  # the record read first, then the folder again (review45a #4)
    return wrong_queues_root_text(ran, (Path(cfg.queues_root()) / cfg.name).absolute()) if ran else None


def missing_state_text(cfg: Any, queues: dict[str, QueueCounts]) -> str | None:
    """The line ``status`` shows (and exits 2 on) when campaign ``cfg``'s queues hold work but its state root has
    no state of it (no ``campaign.sqlite`` in ``<state root>/<campaign>``): ``$GEOAGENT_STATE`` or ``[paths]
    state`` pointed elsewhere than the runs used, or the state folder deleted or moved. Without it the drained
    queues read "campaign complete", with no spend. The line names the root (absolute), what set it
    (:meth:`geoagent.config.CampaignConfig.state_root_source`), the queues and the state folder they were used
    with (their ``state_root.json``, :func:`geoagent.engine.recorded_state_dir`) with the root to point at.
    None on the Redis backend (its state is on the server), when the state exists, or when the queues hold no
    task (nothing ran: as for a campaign never started)."""
    from geoagent.runtime.backend import state_exists, uses_redis

    done = sum(c.done for c in queues.values())
    left = sum(c.ready + c.leased + c.dead for c in queues.values())
    if uses_redis(cfg) or not (done or left) or state_exists(cfg):
        return None
    from geoagent.engine import recorded_state_dir

    here = Path(cfg.state_dir()).absolute()
    qdir = (Path(cfg.queues_root()) / cfg.name).absolute()
    head = (f"no state of campaign {cfg.name} found under the state root {Path(cfg.state_root()).absolute()} (set "
            f"by {cfg.state_root_source()}): no {here / C.CAMPAIGN_DB}, yet its queues in {qdir} hold work "
            f"({done} tasks done, {left} queued or dead, over its {len(queues)} edges): its spend and answers are not "
            "shown, and it is not known "
            "to be complete")
    rec = recorded_state_dir(qdir)
    where = f" (recorded in {qdir / C.QUEUES_STATE_FILE})"
    if rec is not None and (rec / C.CAMPAIGN_DB).is_file() and rec.resolve() != here.resolve():
        return (head + f"; the queues were used with the state folder {rec}{where}: point ${C.ENV_STATE_ROOT} or "
                f"[paths] state at {rec.parent}")
    if rec is not None and rec.resolve() == here.resolve():
        return (head + f"; its runs kept their state in this folder{where}, which is gone or holds no "
                f"{C.CAMPAIGN_DB} (deleted or moved?): restore it, or point ${C.ENV_STATE_ROOT} or [paths] state at "
                "the root it was moved to")
    return (head + f"; the state root is probably wrong: point ${C.ENV_STATE_ROOT} or [paths] state at the root "
            f"the runs used (the folder that holds {cfg.name}/)")


def roots_relative_hint(command: str, cwd: str | Path | None = None) -> str:
    """The clause ``status``, ``dead`` and ``export`` add (leading space, parenthesised) where they find no queues
    or state of a campaign whose data roots depend on the working directory (a relative ``[paths]`` value or the
    default ``queues/``, ``state/``): the likely cause is running ``command`` from another folder than the
    campaign's. ``cwd``: the working directory to name in it (None: not named). The caller decides whether its
    root is relative; this only words it, so the three commands say it alike."""
    here = f", {cwd}," if cwd is not None else ""
    return (f" (the data roots are relative to the working directory{here} unless the config's [paths] queues / "
            f"state or ${C.ENV_QUEUES_ROOT} / ${C.ENV_STATE_ROOT} set them: run {command} from the folder the "
            "campaign ran in)")


def ran_in_another_folder(cfg: Any) -> Path | None:
    """The folder campaign ``cfg`` ran in, when that is not the working directory: for a campaign whose queues and
    state roots are both relative to the working directory (the defaults ``queues/``, ``state/`` or relative
    ``[paths]`` / environment values) and that has neither queue files nor a state database under it, the nearest
    folder, from its config file's folder up, that holds either under the same relative roots (configs kept in the
    project folder or a subfolder of it). None otherwise: absolute roots, the Redis backend, a config not read from
    a file, the campaign found under the working directory, or found nowhere (a campaign never run). Then, for a
    config kept elsewhere, the newest folder its earlier runs ran from that still holds them
    (:mod:`geoagent.runtime.runs_index`)."""
    from geoagent.runtime.backend import uses_redis
    from geoagent.runtime.sqlite_queue import queue_files

    queues, state = Path(cfg.queues_root()), Path(cfg.state_root())
    source = str(getattr(cfg, "source", "") or "")
    if uses_redis(cfg) or queues.is_absolute() or state.is_absolute() or not source or source.startswith("<"):
        return None

    def holds(folder: Path) -> bool:
        return bool(queue_files(folder / queues / cfg.name)) or (folder / state / cfg.name / C.CAMPAIGN_DB).is_file()

    here = Path.cwd().resolve()
    if holds(here):
        return None
    # from the config's folder as given (a symlinked config or configs/ folder lies in the project it is used in) and
    # from where it really is
    given = Path(os.path.normpath(Path(source).expanduser().absolute().parent))  # "a/../b" -> "b", links kept
    real = given.resolve()
    seen: set[Path] = set()
    for d in (given, *given.parents, real, *real.parents):
        if d in seen:
            continue
        seen.add(d)
        if d.resolve() != here and holds(d):
            return d
    # a config kept outside the folder it is run from: the folders its earlier runs ran from (walk25 #2)
    from geoagent.runtime.runs_index import run_folders

    for d in run_folders(cfg):
        if d != here and holds(d):
            return d
    return None


def ran_in_another_folder_text(command: str, folder: Path) -> str:
    """The line ``status``, ``dead`` and ``export`` give (exit 2) for a campaign :func:`ran_in_another_folder`
    found in ``folder``; ``command``: what to run from there (``"status"``; ``"it"`` for ``run`` and ``crawl``)."""
    return (f"no queues or state of the campaign under the working directory {Path.cwd()}, but it ran in {folder} "
            f"(its data roots are relative to the working directory): run {command} from {folder}")


def wrong_queues_root_text(ran: dict[str, Any], queues_dir: Any) -> str:
    """The line for a campaign whose queues were looked for in ``queues_dir`` (absent or empty) while its state
    folder records runs (``ran``: :func:`_state_ran`): which root the runs used, to point ``$GEOAGENT_QUEUES``
    / ``[paths] queues`` at (the root, the folder that holds ``<campaign>/``, not the campaign's folder); or,
    when the runs recorded this same folder, that its queues are gone."""
    n = int(ran.get("runs") or 0)
    head = (f"no queues found in {queues_dir}, but the state folder {ran['state_dir']} shows the campaign ran "
            f"({n} run{'' if n == 1 else 's'}, the last {ran.get('last_status') or 'unknown'})")
    was = ran.get("queues_dir")
    if not was:
        return (head + f": the queues root is probably wrong; point ${C.ENV_QUEUES_ROOT} or [paths] queues at the "
                "root the runs used (the folder that holds the campaign's queue folder)")
    if queues_dir is not None and str(Path(str(queues_dir)).resolve()) == str(Path(was).resolve()):
        return (head + ": its runs kept their queues in this folder, which is gone or empty (deleted or moved?): "
                f"restore it, or point ${C.ENV_QUEUES_ROOT} or [paths] queues at the root it was moved to")
    root = Path(was).parent
    return (head + f": the queues root is probably wrong; its runs kept their queues in {was}: point "
            f"${C.ENV_QUEUES_ROOT} or [paths] queues at {root} (the root, which holds {Path(was).name}/)")


def _last_run_watched(state_dir: Path) -> bool:
    """Whether the newest run manifest.json records was started in watch mode (its entry's ``watch``; False when
    it does not say, or there is no readable manifest), or any run it records as still ``running`` was: of a
    ``--stages`` split, a ``--watch`` process idling on drained queues after a later, plain process of the
    campaign ended (that one is the newest entry) still holds the campaign, and is waiting, not finishing."""
    from geoagent.runtime.manifest import read_manifest

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return False
    runs = man.get("runs") if isinstance(man, dict) else None
    last = runs[-1] if isinstance(runs, list) and runs and isinstance(runs[-1], dict) else {}
    return bool(last.get("watch")) or any(isinstance(r, dict) and r.get("watch") and r.get("status") == "running"
                                          for r in runs or [])


def _end_cut_short(state_dir: Path) -> str | None:
    """How the newest run that began writing the campaign's final exports and report ended without finishing them
    (its manifest.json entry's status: ``"running"`` for one killed outright, ``"forced exit"``, ``"failed"``;
    :func:`geoagent.runtime.manifest.end_cut_short`, which passes over runs killed before their work began:
    review40b #5), or None: it finished them, or the manifest does not tell (no readable manifest, or one written
    before the mark existed)."""
    from geoagent.runtime.manifest import end_cut_short, read_manifest

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return None
    runs = man.get("runs") if isinstance(man, dict) else None
    run = end_cut_short(runs if isinstance(runs, list) else [])
    return str(run.get("status") or "running") if run is not None else None


def _local_processes(state_dir: Path) -> list[dict[str, Any]]:
    """The campaign's processes ``manifest.json`` records on this machine
    (:func:`geoagent.runtime.manifest.local_run_processes`); ``[]`` without a readable manifest."""
    from geoagent.runtime.manifest import local_run_processes, read_manifest

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return []
    runs = man.get("runs") if isinstance(man, dict) else None
    return local_run_processes(runs if isinstance(runs, list) else [])


def _refresh_cut_short(state_dir: Path) -> dict[str, Any] | None:
    """The manifest entry of the newest run that began its start-up refresh of stored rows and stopped before
    finishing it, when no later run finished one (:func:`geoagent.runtime.manifest.refresh_cut_short`, upgrade41
    #4), or None (no readable manifest too)."""
    from geoagent.runtime.manifest import read_manifest, refresh_cut_short

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return None
    runs = man.get("runs") if isinstance(man, dict) else None
    return refresh_cut_short(runs if isinstance(runs, list) else [])


#: ``status`` counts the stored answers among at most this many idle requests (:func:`_ready_stored`): a request key
#: is a hash of its payload, so a larger queue would make ``status`` slow
READY_STORED_MAX = 20_000


def _ready_stored(cfg: Any, store: Any, queues: dict[str, QueueCounts], alive: bool | None) -> tuple[int, int] | None:
    """``(stored, queued)``: of the requests idle in the campaign's ``requests`` queue (ready, or under an expired
    lease), how many have an answer in the response store under their request key (the model caller's lookup:
    :func:`geoagent.workers.model_caller.build_request`), so the next run takes them with no model call
    (upgrade41 #4: after a killed upgrade run, ``status`` showed them as work left to pay for). Only when no process
    of the campaign runs: none holds it on this machine, and on Redis none on any machine (``alive``: the ledger's
    heartbeats, :meth:`geoagent.runtime.redis_state.RedisLedger.others_alive`). None with none idle, more than
    :data:`READY_STORED_MAX`, or a queue that cannot be read.

    Read only on both backends, and bounded alike (fixstatus43 #1: on Redis it counted nothing): the payloads come
    from the queue's own snapshot read (SQLite: one query; Redis: the chunked walk of
    :meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.ready_payloads` and one ``HMGET`` per chunk) and the
    lookups are batched (``has_many``: on Redis one pipelined round trip per 1,000 keys), so 20,000 queued requests
    cost a few dozen round trips, not 40,000."""
    from geoagent.engine import run_lock_held
    from geoagent.runtime.backend import uses_redis

    idle = queues.get(C.EDGE_REQUESTS)
    if idle is None or not idle.ready + idle.leased or idle.ready > READY_STORED_MAX or not hasattr(store, "has_many"):
        return None
    here = run_lock_held(Path(cfg.state_dir()))
    # on Redis a machine without the campaign's state folder has no run.lock to ask (None): the heartbeats decide
    if alive or here or (here is None and not uses_redis(cfg)):
        return None
    path = next((f for f in _queue_files(cfg) if getattr(f, "stem", None) == C.EDGE_REQUESTS), None)
    if path is None:
        return None
    from geoagent.providers.base import request_key
    from geoagent.runtime.stage import PermanentFailure
    from geoagent.workers.model_caller import build_request

    q = _open(cfg, path)
    try:
        payloads = q.ready_payloads_sync(READY_STORED_MAX)
    except Exception:  # noqa: BLE001 - a status display shows what it can
        return None
    finally:
        q.close_sync()
    if not payloads:
        return None
    wanted: list[list[str]] = []  # per payload, the keys its answer may be stored under
    for payload in payloads:
        try:
            _, req = build_request(cfg, payload)
        except PermanentFailure:  # a model no longer configured, no prompt: its task fails, nothing stored counts
            continue
        # a placeholder request's answer stored before pixel_source entered the key, as the model caller finds it
        wanted.append([req.key()] + ([request_key(req.provider, req.model, req.prompt, req.image_id, req.params)]
                                     if req.pixel_source is not None else []))
    try:
        found = store.has_many([k for keys in wanted for k in keys])
    except Exception:  # noqa: BLE001 - a status display shows what it can
        return None
    stored, at = 0, 0
    for keys in wanted:
        stored += any(found[at:at + len(keys)])
        at += len(keys)
    return stored, len(payloads)


def refresh_cut_text(run: dict[str, Any]) -> str:
    """The ``status`` line of a start-up refresh of stored rows a stop cut short (:func:`_refresh_cut_short`,
    upgrade41 #4)."""
    how = {"running": "killed", "failed": "it failed"}.get(str(run.get("status") or "running"),
                                                             str(run.get("status")))
    return (f"the last run stopped inside its start-up refresh of the stored rows (run {run.get('run_id', '?')} on "
            f"host {run.get('host', '?')}, {how}; it began rewriting rows at {run.get('refresh_began', '?')}): rows "
            "an earlier geoagent version stored are being brought up to this version's rules (moved to their "
            "current task keys, or read again from their stored answers: no model call), and the rest are not yet; "
            "the next `run.py run CONFIG` finishes that first, before any task, and the report and export on disk "
            "are an earlier run's until a run ends")


#: added to ``last progress (...)`` when its figures are a run's before the one cut short inside its start-up refresh
#: (fixstatus43 #2: they read "run ended: complete" under the line saying the last run was cut short)
BEFORE_REFRESH_TEXT = ("; not of the last run, which was cut short inside its start-up refresh and wrote no progress "
                       "record")


def refresh_cut_before(cut: dict[str, Any] | None, record: dict[str, Any]) -> bool:
    """Whether progress record ``record`` (a merged one: any of its ``processes``) is of a run other than ``cut``, the
    manifest entry of a start-up refresh cut short (:func:`_refresh_cut_short`), i.e. of a run before it: a run
    writes its first progress record only once its refresh is done (:func:`geoagent.engine` starts the
    :class:`~geoagent.runtime.progress.Progress` after it), so the cut run has none (fixstatus43 #2). False for
    ``cut`` None."""
    if not cut:
        return False
    ids = {str(q.get("run_id")) for q in record.get("processes") or []} or {str(record.get("run_id"))}
    return str(cut.get("run_id")) not in ids


def older_consumers_text(edge: str, waiting: int, older: list[dict[str, Any]]) -> str:
    """The ``status`` warning for a Redis queue whose models' streams hold ``waiting`` tasks while consumers that look
    like processes of a geoagent version before those streams (``older``:
    :meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.older_consumers`) have not left it: such a process cannot
    lease those tasks and, alone, waits for them for ever (review44d #2)."""
    def who(c: dict[str, Any]) -> str:
        where = f"host {c['host']}, pid {c['pid']}" if c.get("host") else "no process recorded"
        state = {True: "running", None: "may be running"}.get(c.get("running"), "")
        # review44g #1: what it holds and how long the server has not delivered to it, so a consumer of a process
        # gone long ago on another machine (0 held, idle for hours) can be told from one at work
        held = (f", holds {c['pending']}, idle {_duration(float(c['idle_s']))}"
                if isinstance(c.get("pending"), int) and isinstance(c.get("idle_s"), (int, float)) else "")
        return f"{c['name']} ({where}{', ' + state if state else ''}{held})"

    n = len(older)
    return (f"warning: queue {edge}: about {waiting} task(s) wait in the models' streams, which a geoagent version "
            f"before them cannot lease, and {n} consumer{'s' if n != 1 else ''} of such a version "
            f"{'have' if n != 1 else 'has'} not left the queue: {'; '.join(who(c) for c in older[:5])}"
            + (f"; and {n - 5} more" if n > 5 else "")
            + ". Stop those processes and run this version on every machine (docs/scale-out.md)")


def ready_stored_text(stored: int, queued: int) -> str | None:
    """The ``status`` line of the queued requests that have an answer stored (:func:`_ready_stored`), or None when
    none has."""
    if not stored:
        return None
    if stored == queued:
        return (f"all {queued} requests queued have an answer stored: the next run takes those answers (no model "
                "call, no spend for them)")
    return (f"{stored} of the {queued} requests queued have an answer stored: the next run takes those answers (no "
            f"model call for them); {queued - stored} need a call")


def _server_end(cfg: Any, local: str | None, alive: bool | None) -> tuple[str | None, dict[str, Any] | None]:
    """``(end_cut_short, end_mark)`` of a Redis campaign: the end mark the runs of every machine keep on the server
    (:func:`geoagent.runtime.backend.server_end_mark`) decides, since the run that wrote the final report and
    exports, or was killed writing them, may have run on another machine, whose manifest this one cannot read
    (redis41 #3: a machine that ran only the model caller said "campaign complete"). ``local``: what this machine's
    manifest says (:func:`_end_cut_short`), kept when the server holds no mark (a campaign of an earlier version)
    and for a run of this machine that failed. ``alive``: a process of the campaign runs now on some machine.

    Marks: ``written`` (the last run to begin work, or one after it, wrote the end: None); ``writing`` or
    ``working`` while a process of the campaign runs (it may still write it: None, and the mark is returned with
    ``"pending": True`` for the line that says so); ``writing`` or ``working`` with no process left (the end was
    cut short, or the last run that worked never wrote it): ``local`` when it names a failure of this machine's,
    else ``"killed"``."""
    from geoagent.runtime.backend import END_WRITTEN, server_end_mark

    mark = server_end_mark(cfg)
    if mark is None:
        return local, None
    if mark.get("state") == END_WRITTEN:
        return None, None
    if alive:
        return None, {**mark, "pending": True}
    return (local if local == "failed" else "killed"), mark


#: manifest.json's status of a run ended by a second Ctrl-C or signal (:meth:`geoagent.runtime.manifest.Manifest.mark_forced_exit`)
FORCED_EXIT = "forced exit"
#: how ``status`` names such a run's end (walk44 B5), where a run killed otherwise reads "stopped without its final record"
FORCED_EXIT_TEXT = ("the last run was ended at once by a second Ctrl-C or signal (forced exit, as manifest.json "
                    "recorded), before its final record; ")


def _run_statuses(state_dir: Path) -> tuple[dict[str, str], set[str]]:
    """``(outcomes, unended)`` from manifest.json: run id -> the status recorded for each run that ended
    (``complete``, ``interrupted``, ``incomplete``, ``budget exhausted``, ``failed``, ...;
    :class:`geoagent.runtime.manifest.Manifest`), and the ids of the runs it still records as ``running`` (a run cut
    before it recorded its end, e.g. by a second Ctrl-C, or one going now); ``({}, set())`` when there is no
    readable manifest."""
    from geoagent.runtime.manifest import read_manifest

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return {}, set()
    runs = man.get("runs") if isinstance(man, dict) else None
    recorded = [(str(r["run_id"]), str(r["status"])) for r in runs or []
                if isinstance(r, dict) and r.get("run_id") and r.get("status")]
    return ({run: status for run, status in recorded if status != "running"},
            {run for run, status in recorded if status == "running"})


def _merged(cfg: Any, records: list[dict[str, Any]], running: bool | None,
            queues: dict[str, QueueCounts] | None, dead_pids: set[int] | None = None) -> dict[str, Any]:
    """The latest records of a scale-out run's processes merged into one
    (:func:`geoagent.runtime.progress.merge_records`), each process given its :func:`process_state` and, when
    stopped, ``leases``: ``"pending"`` (its pid is in ``dead_pids``, :func:`geoagent.engine.dead_owner_pids`:
    no other process handed its leases back yet), ``"returned"`` (a later run, or the periodic sweep of a process
    still running, did) or None (``dead_pids`` None:
    unknown)."""
    now = time.time()
    states = [process_state(r, running, now) for r in records]
    merged = merge_records(records, [st == "running" for st in states], pipeline=pipeline_stages(cfg) or None,
                           counts=queues or None, now=now, silent=[st == "silent" for st in states])
    for proc, st in zip(merged["processes"], states):
        proc["state"] = st
        if st == "stopped" and dead_pids is not None:
            proc["leases"] = "pending" if proc.get("pid") in dead_pids else "returned"
    return merged


def format_usd(x: float | None) -> str:
    """USD amount for display, with its ``$``: the one money format of the CLI (``status``, ``dead``, the live
    display): always 4 decimals with thousands separators (``$0.0232``, ``$1.2300``, ``$1,234.5000``); a
    non-zero amount below $0.00005 reads ``<$0.0001`` rather than a misleading ``$0.0000``."""
    amount = float(x or 0.0)
    if 0 < abs(amount) < 0.00005:
        return "<$0.0001" if amount > 0 else ">-$0.0001"
    return f"-${-amount:,.4f}" if amount < 0 else f"${amount:,.4f}"


def cap_text(spend: dict[str, Any], *, running: bool = False) -> str:
    """``"cap $C"`` for ``status``'s spend line: the cap of the campaign's ledger (set by its last run) when the
    config's ``[budget] cap_usd`` (``spend["config_cap_usd"]``) is the same or unknown; else the config's, the one
    the next run uses, naming the last run's (``running``: a run is going under the ledger's, and the config's
    applies from the next run). The last run's cap is the one its progress record gives (``spend["run_cap_usd"]``,
    the cap it reserved against) when there is one, else the ledger's."""
    stored, cfg_cap = spend.get("run_cap_usd", spend.get("cap_usd")), spend.get("config_cap_usd")
    if cfg_cap is None or stored is None or abs(float(cfg_cap) - float(stored)) < 5e-10:
        return f"cap {format_usd(stored)}"
    if running:
        return (f"cap {format_usd(stored)} (the running run's; the config's [budget] cap_usd {format_usd(cfg_cap)} "
                "applies from the next run)")
    return f"cap {format_usd(cfg_cap)} ([budget] cap_usd in the config; the last run ran under {format_usd(stored)})"


#: the command that prices the work a campaign has left (the dry run counts stored answers as free)
COST_OF_REST_CMD = "run.py run CONFIG --simulate"


def budget_resume_hint(spend: dict[str, Any], refused_usd: float | None = None) -> str:
    """What ``status`` says to do after the cost cap stopped the last run: re-run when the config's cap was raised
    above the one it stopped at and leaves room for the call the cap refused, else raise ``[budget] cap_usd`` first
    (as the run's summary says), to at least the billed spend plus that call when it is known.

    ``refused_usd``: the largest worst case among the calls the cap refused (USD; :func:`refused_call_usd`), None
    when not recorded. Review rev24 (3): a cap raised by less than that call read "re-run to go on", and the re-run
    stopped again at once without a call. The cap the last run stopped at is the one its progress record gives
    (``spend["run_cap_usd"]``) when there is one, else the ledger's. A call refused while other calls held
    reservations may need less than the cap the run stopped at (billed + its worst case under that cap); the hint
    then asks for a cap above the one it stopped at, never for a lower one (walk28 #5: "to at least $0.0083" under
    a cap of $0.0100)."""
    stored, cfg_cap = spend.get("run_cap_usd", spend.get("cap_usd")), spend.get("config_cap_usd")
    billed = float(spend.get("spent_usd") or 0.0) + float(spend.get("unknown_usd") or 0.0)
    need = None if refused_usd is None else billed + float(refused_usd)
    if need is None:
        at_least = ""
    elif stored is not None and need <= float(stored) + 5e-10:
        at_least = (f" above the {format_usd(stored)} it stopped at (billed {format_usd(billed)}; the calls it refused, "
                    f"a worst case of up to {format_usd(refused_usd)} each, were refused while other calls held "
                    "reservations)")
    else:
        # rounded UP to the shown cent fraction: $0.040029 shown "$0.0400" asked for the cap the run stopped at
        at_least = (f" to at least {format_usd(math.ceil(need * 1e4 - 1e-6) / 1e4)} (billed {format_usd(billed)} + the {format_usd(refused_usd)} "
                    "worst case of the call it refused)")
    if cfg_cap is not None and stored is not None and float(cfg_cap) > float(stored) + 5e-10:
        if need is not None and float(cfg_cap) < need - 5e-10:
            return (f"the config's [budget] cap_usd ({format_usd(cfg_cap)}) is above the {format_usd(stored)} the last "
                    f"run stopped at but too low for the call it refused: raise it{at_least} and re-run the same "
                    "command to go on")
        return (f"the config's [budget] cap_usd ({format_usd(cfg_cap)}) is above the {format_usd(stored)} the last run "
                "stopped at: re-run the same command to go on")
    return f"to go on: raise [budget] cap_usd in the config{at_least} and re-run the same command"


def refused_call_usd(progress: dict[str, Any]) -> float | None:
    """The largest "this call $X" (USD) among the cost cap's refusals a progress record's stages kept
    (``last_errors``, ``budget_refusals``), or None when there is none: a cap that leaves room for it leaves room
    for each kind of call refused (a crawl's image audit and referenceability calls differ; walk28 #5)."""
    amounts = [float(m["call"]) for sd in progress.get("stages") or []
               for e in [*(sd.get("last_errors") or []), *(sd.get("budget_refusals") or [])]
               if (m := _BUDGET_REFUSAL.match(str(e)))]
    return max(amounts) if amounts else None


def stop_reason(progress: dict[str, Any], *, now: float | None = None, running: bool | None = None) -> str | None:
    """What stopped (some) dispatching, or what it waits for, from a progress record, or None.

    ``"budget exhausted"`` when the cost cap stopped the run; ``"authentication failed (see last error):
    ..."`` when a model's authentication breaker holds its tasks (a stage holds tasks, ``held`` > 0, and its
    last errors say why; the other models' tasks go on); ``"model M stopped: host H answered HTTP 404 (path or model
    not found) to 5 requests in a row: ..."`` when it holds them because the host does not serve the model's path or
    id (:func:`not_found_models`; walk39 #6); ``"<stage>: host <host> unreachable (...); its tasks
    left queued"`` for a stage stopped by its unreachable-host breaker (:mod:`geoagent.runtime.worker`);
    ``"<stage>: waiting for host <host> (next probe in N s, at HH:MM:SS UTC; unreachable since <T> UTC: <cause>;
    K task(s) queued on <edge>)"`` while a watch-mode stage waits for it; ``"model_caller: model <M> waiting for
    host <host> (next probe in N s, at ...; unreachable since <T> UTC: <cause>; K task(s) held)"`` for each model
    whose host the model caller waits for in watch mode (the record's ``host_waits``,
    :meth:`geoagent.workers.model_caller.HostBreaker.waiting`); otherwise ``"a model's host unreachable (model M:
    host H unreachable (...)): ..."`` (:func:`held_host_models`) when the model caller holds the tasks of a model whose host could not be reached
    (:mod:`geoagent.workers.model_caller`, "Unreachable-host breaker"); all that happened, joined by ``"; "``.

    ``now`` (Unix time, s; default: the clock now) is what the next probe's time is counted from: ``status``
    reads a record another process wrote up to a tick ago. ``running`` False (no process holds the campaign's
    ``run.lock``: the run was killed before its last record) words a wait as over: ``host H unreachable since
    T ... when the run stopped``.
    """
    now = time.time() if now is None else float(now)
    waiting = running is not False and not progress.get("finished")
    stages = progress.get("stages", [])
    errors = [e for sd in stages for e in sd.get("last_errors", [])]
    host_waits = [(sd, w) for sd in stages for w in (sd.get("host_waits") or []) if isinstance(w, dict)]
    auth = any(sd.get("held") for sd in stages) and any("authentication failed" in e or " for billing (" in e
                                                         for e in errors)
    billing = auth and not any("authentication failed" in e for e in errors)  # break34: a billing stop, said so
    held = [] if host_waits else held_host_models(progress)  # a burst run's held models (host_holds)
    reasons = []
    if progress.get("budget_stopped"):
        reasons.append("budget exhausted")
    if auth:
        reasons.append(("billing refused" if billing else "authentication failed") + " (see last error): " + (
            "that model's tasks were left queued" if progress.get("finished")
            else "that model's tasks are held, the other models' go on"))
    for what in not_found_models(progress):  # named from data: "last error" may be another model's
        reasons.append(f"{what}: " + ("its tasks were left queued, re-run to resume once its base_url or model is fixed"
                                      if progress.get("finished") or running is False
                                      else "its tasks are held, the other models' go on"))
    if held:  # named here: "last error" may be another model's (walk28 status walkthrough)
        several = len(held) > 1 or any(h.startswith("models ") for h in held)
        those = "those models'" if several else "that model's"
        reasons.append(("models' hosts unreachable" if several else "a model's host unreachable")
                       + f" ({'; '.join(held)}): " + (
            f"{those} tasks were left queued, re-run to resume" if progress.get("finished") or running is False
            else f"{those} tasks are held, the other models' go on"))
    for what in cut_off_models(progress):
        reasons.append(f"{what}: " + ("its tasks were left queued, re-run to resume once raised"
                                      if progress.get("finished") or running is False
                                      else "its tasks are held, the other models' go on"))
    for sd, w in host_waits:
        since = f"since {_utc(w.get('since'))}: {w.get('cause') or 'unreachable'}"
        which = _which_processes(sd, w.get("pids") or [], waiting=waiting)
        if waiting:
            reasons.append(f"{sd.get('stage')}: model {w.get('model')} waiting for host {w.get('host')} "
                           f"({_next_probe(w, now)}; unreachable {since}; {int(w.get('held') or 0)} task(s) held)"
                           + which)
        else:
            reasons.append(f"{sd.get('stage')}: model {w.get('model')}: host {w.get('host')} unreachable {since}, when "
                           "the run stopped; re-run to resume (its held tasks are redelivered)" + which)
    queues = progress.get("queues") or {}
    for sd in stages:
        for host, info in (sd.get("unreachable") or {}).items():
            info = info if isinstance(info, dict) else {}
            cause = (f"{unreachable_cause(str(info.get('last', '')))} on {info.get('requests', '?')} consecutive "
                     "requests")
            if waiting and info.get("next_probe_in_s") is not None:  # watch mode: the stage waits (half-open)
                edge = sd.get("input_edge")
                q = queues.get(edge) if edge else None
                queued = (f"; {int(q.get('ready', 0)) + int(q.get('leased', 0))} task(s) queued on {edge}"
                          if isinstance(q, dict) else "")
                since = f" since {_utc(info['since'])}" if info.get("since") is not None else ""
                reasons.append(f"{sd.get('stage')}: waiting for host {host} ({_next_probe(info, now)}; unreachable"
                               f"{since}: {cause}{queued})" + _which_processes(sd, info.get("pids") or [], waiting=True))
                continue
            reasons.append(f"{sd.get('stage')}: host {host} unreachable ({cause}); its tasks left queued, re-run "
                           "to resume" + _which_processes(sd, info.get("pids") or [], waiting=False))
    return "; ".join(reasons) or None


def not_found_models(progress: dict[str, Any]) -> list[str]:
    """``["model b stopped: host 127.0.0.1:8001 (POST /chat/completions) answered HTTP 404 (path or model not found)
    to 5 requests in a row"]``: one per model the model caller stopped because its host answered that its path or
    model id does not exist (the stages' ``not_found`` records,
    :meth:`geoagent.workers.model_caller.AuthBreaker.not_found_stops`; walk39 #6), first-seen order; ``[]`` when
    none. The body excerpt is left to the last errors and the run's summary (it may be long)."""
    out: list[str] = []
    seen: set[str] = set()
    for sd in progress.get("stages", []):
        for c in sd.get("not_found") or []:
            if not isinstance(c, dict) or c.get("model") is None or str(c["model"]) in seen:
                continue
            seen.add(str(c["model"]))
            n = int(c.get("failures") or 0)
            times = "1 request" if n == 1 else f"{n} requests in a row"
            out.append(f"model {c['model']} stopped: host {c.get('host') or '?'} answered HTTP {c.get('status')} "
                       f"({C.NOT_FOUND_WHAT}) to {times}")
    return out


def cut_off_models(progress: dict[str, Any]) -> list[str]:
    """``["model flash stopped: its last 10 answers came back empty at the output-token limit (max_output_tokens =
    300); raise models[0].max_output_tokens"]``: one per model the model caller stopped because its answers kept
    coming back empty, cut off at the limit (the stages' ``cut_off`` records,
    :meth:`geoagent.workers.cutoff_breaker.CutOffBreaker.stops`), first-seen order; ``[]`` when none."""
    out: list[str] = []
    seen: set[str] = set()
    for sd in progress.get("stages", []):
        for c in sd.get("cut_off") or []:
            if not isinstance(c, dict) or c.get("model") is None or str(c["model"]) in seen:
                continue
            seen.add(str(c["model"]))
            empty, of = int(c.get("empty") or 0), int(c.get("of") or 0)
            which = f"its last {empty} answers" if empty == of else f"{empty} of its last {of} answers"
            limit = (f" (max_output_tokens = {c['max_output_tokens']})"
                     if isinstance(c.get("max_output_tokens"), int) else "")
            if c.get("earlier_at"):  # opened on the first answer of its probation (cutoff_breaker, "Across runs")
                which, limit = "its answers", limit + f", as recorded at {c['earlier_at']}, and again in this run"
            out.append(f"model {c['model']} stopped: {which} came back empty at the output-token limit{limit}; raise "
                       f"{c.get('key') or 'its max_output_tokens'}")
    return out


def held_host_models(progress: dict[str, Any]) -> list[str]:
    """``["model m: host H unreachable (connection refused on 5 consecutive requests)"]``: per unreachable host
    (first-seen order) the models whose tasks the model caller holds for it in a run without watch mode, from the
    stages' ``host_holds`` records (:meth:`geoagent.workers.model_caller.HostBreaker.holding`; several models of one
    host: ``models a, b: host H ...``); ``[]`` when none holds any. A model a watch-mode run waits for
    (``host_waits``) is worded by :func:`stop_reason` and the ETA's "waiting for" instead. A record written before
    ``host_holds`` existed names none (its ``HostStop`` error is still among the last errors ``status`` shows)."""
    hosts: dict[str, tuple[list[str], str]] = {}
    for sd in progress.get("stages", []):
        if not sd.get("held"):
            continue
        waited = {str(w.get("model")) for w in sd.get("host_waits") or [] if isinstance(w, dict)}
        for h in sd.get("host_holds") or []:
            if not isinstance(h, dict) or h.get("model") is None or str(h["model"]) in waited:
                continue
            models, _ = hosts.setdefault(str(h.get("host")), ([], str(h.get("cause") or "unreachable")))
            if str(h["model"]) not in models:
                models.append(str(h["model"]))
    return [f"{'model' if len(models) == 1 else 'models'} {', '.join(models)}: host {host} unreachable ({cause})"
            for host, (models, cause) in hosts.items()]


def _next_probe(info: dict[str, Any], now: float) -> str:
    """``next probe in 12 s, at 05:40:31 UTC`` from a wait's ``next_probe_at`` (Unix time, s) counted from
    ``now``; ``next probe in 0 s (a probe is in flight)`` while one is; a record without ``next_probe_at`` (an
    older run's) gives its ``next_probe_in_s`` as written."""
    if info.get("probing"):
        return "next probe in 0 s (a probe is in flight)"
    at = info.get("next_probe_at")
    if isinstance(at, (int, float)):
        return f"next probe in {max(0.0, float(at) - now):.0f} s, at {time.strftime('%H:%M:%S', time.gmtime(at))} UTC"
    return f"next probe in {float(info.get('next_probe_in_s') or 0.0):.0f} s"


def found_nothing_to_do(record: dict[str, Any]) -> bool:
    """Whether a progress record is the final one of a run that found nothing to do (a re-run of a done
    campaign): finished, no task finished, retried or dead-lettered (:func:`did_work`), not stopped by the cost
    cap and, where the record counts its queues, none left ready or leased. A run that stopped at once with work
    queued (a cap lowered below the spend, every model's key refused) did no work either, but it is no no-op:
    ``status`` shows it, not the last run that worked ("run ended: complete")."""
    if not record.get("finished") or did_work(record) or record.get("budget_stopped"):
        return False
    if any(sd.get("budget_stopped") or sd.get("held") for sd in record.get("stages", [])):
        return False
    queues = record.get("queues")
    return not (isinstance(queues, dict) and any(
        isinstance(c, dict) and (c.get("ready") or c.get("leased")) for c in queues.values()))


def is_complete(queues: dict[str, QueueCounts], superseded: dict[str, int] | None = None) -> bool:
    """Whether a campaign's queues are all drained with nothing dead-lettered (and there are queues); the dead
    tasks set aside as no longer planned (``superseded``: edge -> count, :func:`campaign_status`) are no
    failure."""
    aside = superseded or {}
    return bool(queues) and all(not (c.ready or c.leased or c.dead - aside.get(e, 0)) for e, c in queues.items())


#: what a queue's ``leased`` count (and the live display's ``leased`` column) is: not calls on the wire. A stage
#: leases more than it sends at once (the model caller up to 1.5 x each model's ``concurrency``,
#: docs/how-it-works.md, "Workers"), so 24 leased next to two models of concurrency 8 is no broken limit: the HTTP
#: layer sends at most 8 of each
LEASED_MEANS = ("leased: taken by a process, being handled or waiting for a slot; a model's leased requests may "
                "outnumber its concurrency, at most that many are sent at once")

#: the line ``status`` prints when the campaign has work left and no process runs it
RESUME_HINT = ("    re-run the same command to resume (finished work is kept; what was left queued or in flight is sent "
               "then)")


#: the line ``status`` prints when the last process of the campaign ended ``stages finished`` (``--stages``), work is
#: left queued and no process runs the campaign
STAGES_LEFT_HINT = ("    no process runs the campaign, and the last one to end ran only some of its stages (--stages): "
                    "the work left queued waits for the stages that take it; run them again, or the whole campaign "
                    "(no --stages), to finish it and write its report and export")


#: the line ``status`` prints for a drained campaign whose last run stopped while it wrote its final exports and
#: report (:func:`geoagent.runtime.manifest.end_cut_short`)
END_CUT_SHORT_TEXT = ("campaign work done (every queue drained, nothing dead-lettered), but the last run stopped "
                      "before writing its final report and export (killed, or a forced exit, before or while writing them): "
                      "the report and exports on disk may be interim or partly rewritten; re-run the same command "
                      "to write them (every task is done: it calls no model)")


#: the line ``status`` prints for a drained Redis campaign whose end the server does not record as written while a
#: process of the campaign still runs on some machine (:func:`_server_end`, redis41 #3)
END_PENDING_TEXT = ("campaign work done (every queue drained, nothing dead-lettered), but a process of the campaign "
                    "still runs (on this or another machine: its heartbeat on the Redis server) and the final report "
                    "and export are not recorded as written yet: the process that finishes the campaign writes them "
                    "on its machine when it ends")


def end_mark_text(mark: dict[str, Any] | None) -> str:
    """What :data:`END_CUT_SHORT_TEXT` adds when the Redis server's end mark decided it (:func:`_server_end`):
    which run, on which host, left the end unwritten; ``""`` otherwise."""
    if not mark:
        return ""
    what = ("began writing them" if mark.get("state") == "writing" else
            "began work after they were last written and did not write them again")
    return (f" (the Redis server records that run {mark.get('run_id', '?')} on host {mark.get('host', '?')} "
            f"{what}, and no process of the campaign runs now; on any machine sharing the campaign the re-run "
            "writes them into its own state folder)")


def _stages_done_status() -> str:
    from geoagent.engine import STATUS_STAGES_DONE

    return STATUS_STAGES_DONE


def format_status(st: dict[str, Any]) -> str:
    """Human-readable status text (plain, so it can be piped or logged)."""
    lines = [f"campaign {st['campaign']}"]
    # no state found for queues with work: the spend and the runs' outcomes are unknown, so never "complete"
    complete = (is_complete(st["queues"], st.get("superseded")) and not st.get("state_missing")
                and not st.get("emptied"))
    ran = st.get("state_ran")
    if not st["queues"] and ran:
        # the state folder shows runs: the queues were looked for in the wrong place, not "not started"
        lines.append("  " + wrong_queues_root_text(ran, st.get("queues_dir")))
    elif not st["queues"] and st.get("ran_elsewhere"):
        lines.append("  " + ran_in_another_folder_text("status", st["ran_elsewhere"]))
    elif not st["queues"]:
        where = f" in {st['queues_dir']}" if st.get("queues_dir") else ""
        lines.append(f"  no queues yet (campaign not started){where}"
                     + (roots_relative_hint("status") if st.get("roots_relative") else ""))
        if st.get("stages"):
            lines.append("  stages (input edge -> output edge): " + "; ".join(
                f"{name} ({src} -> {dst or '-'})" for name, src, dst in st["stages"]))
    if st["queues"]:
        # the queues (and the spend below) count every run; the stage lines further down the last run's only
        leased = any(c.leased for c in st["queues"].values())
        lines.append("  queues, every run of the campaign" + (f" ({LEASED_MEANS}):" if leased else ":"))
    for edge, c in st["queues"].items():
        aside = (st.get("superseded") or {}).get(edge, 0)
        lines.append(f"  {edge:>16}: ready {c.ready:>7}  leased {c.leased:>5}  done {c.done:>8}  dead {c.dead:>5}"
                     + (f" ({aside} superseded)" if aside else ""))
    for edge in st.get("emptied") or ():
        lines.append(f"  {edge}: its queue file is empty (0 bytes: emptied outside geoagent), so what it held is "
                     "unknown and the campaign is not shown complete: restore the file from a copy, or re-run (a run "
                     "plans the requests again and reuses the answers already stored, paying for none twice)")
    if st.get("state_missing"):  # in place of the spend line: a wrong state root, said plainly
        lines.append("  " + st["state_missing"])
    s = st.get("spend")
    if s:
        lines.append(
            f"  spend: {format_usd(s.get('spent_usd'))} settled + {format_usd(s.get('unknown_usd'))} unknown-outcome"
            f" + {format_usd(s.get('reserved_usd'))} reserved, {cap_text(s, running=bool(st.get('running')))}; "
            f"calls {s.get('calls', 0)}"
        )
        from geoagent.engine import over_cap_lines, overrun_lines, spend_detail_lines, unreported_usage_lines

        lines.extend(spend_detail_lines(s))
        lines.extend(overrun_lines(s))
        lines.extend(over_cap_lines(s))
        lines.extend(unreported_usage_lines(s))
    ended = list((st.get("run_outcomes") or {}).values())[-1:]  # the newest run that ended, as recorded
    if complete and not any(c.ready or c.leased or c.done or c.dead for c in st["queues"].values()):
        # queue files without a single task: a run made them and was stopped (Ctrl-C) or failed while planning,
        # before it queued its first task (or is planning now); nothing was done, so nothing is complete
        lines.append("  " + no_task_queued_text(bool(st.get("running"))))
    elif complete and ended == ["no usable answers"]:  # geoagent.engine.STATUS_NO_USABLE (exit 6)
        lines.append("  campaign not usable: every queue drained, nothing dead-lettered, but the last run ended "
                     "'no usable answers' (a model answered and none of its answers parsed; that run's summary "
                     "names the model and the cause)")
    elif complete and st.get("running") and not st.get("watching"):
        # the queues drained but a process still holds the campaign: the run's end (report, export) is being
        # written (or a re-run is starting); the files on disk are not the final ones yet
        lines.append("  campaign work done (every queue drained, nothing dead-lettered), but a run of it is still "
                     "going: it is finishing (writing the report and export) or starting; the files on disk are "
                     "final once it ends")
    elif complete and (st.get("end_mark") or {}).get("pending") and not st.get("running"):
        # redis41 #3: another machine's process runs and the server does not record the end as written yet
        lines.append("  " + END_PENDING_TEXT)
    elif complete and st.get("end_cut_short") not in (None, "failed") and not st.get("running"):
        # resume40 #1: the queues drained, but the run writing the final exports and report was killed (or ended
        # by a second signal) among them: what is on disk may be interim or half rewritten
        lines.append("  " + END_CUT_SHORT_TEXT + end_mark_text(st.get("end_mark")))
    elif complete:
        aside_n = sum((st.get("superseded") or {}).values())
        # tasks set aside sit among the dead ones (walk39 #7: "dead 237 (237 superseded)" then "nothing dead-lettered")
        lines.append("  campaign complete: every queue drained, nothing dead-lettered"
                     + (f" but the {aside_n} set aside (not in the current plan)" if aside_n else ""))
    if ended == ["failed"] and not st.get("running"):
        # the run's work may have ended, but its end did not: the report and exports on disk are older
        lines.append("  the last run ended in an error (manifest.json records it 'failed'; its console said why): "
                     "the report and exports were not rewritten by it, the files on disk may be older than the "
                     "queues: fix the cause and re-run the same command")
    if st.get("refresh_cut_short") and not st.get("running"):  # upgrade41 #4
        lines.append("  " + refresh_cut_text(st["refresh_cut_short"]))
    if st.get("ready_stored") and not st.get("running"):  # upgrade41 #4: queued is not "to be paid for"
        text = ready_stored_text(*st["ready_stored"])
        if text:
            lines.append("  " + text)
    for edge, (waiting, older) in (st.get("older_consumers") or {}).items():
        lines.append("  " + older_consumers_text(edge, waiting, older))
    aside = sum((st.get("superseded") or {}).values())
    if aside:
        lines.append(f"  set aside: {aside} task{'s' if aside != 1 else ''} superseded, not in the current plan (the "
                     "config changed since an earlier run queued them): not missing work (never sent, or failed before they were "
                     "set aside: the reason keeps that failure); `run.py dead CONFIG` "
                     "lists them, `--requeue` brings them back")
    lines.extend(st.get("kind_lines") or [])
    p = st.get("progress")
    last_outcome = ended[0] if ended else None  # as manifest.json recorded the newest run that ended
    # work left and no process running: a resume hint, unless the last run failed (its own line says what to do)
    left = any(c.ready or c.leased for c in st["queues"].values()) and not complete and last_outcome != "failed"
    if not p and left and st.get("running") is False:  # killed before its first progress record
        lines.append(RESUME_HINT)
    if p:
        ended = bool(p.get("finished"))
        running = st.get("running")  # None: unknown (no run.lock)
        worked = st.get("progress_with_work")
        earlier = False  # the figures below are an earlier run's (the last one did no work)
        if ended and worked is not None:
            lines.append(f"  last run (ended {_utc(p.get('t'))}): no work left to do; the figures below are of the "
                         f"last run that did work, last recorded {_utc(worked.get('t'))}")
            p = worked
            ended = bool(p.get("finished"))
            earlier = True
        procs = p.get("processes") or []  # a scale-out run's processes (merged record), else []
        n_running = sum(1 for q in procs if q.get("state") == "running")
        outcome = None  # as manifest.json recorded the end of the run these figures are of (read when it ended)
        # fixstatus43 #2: a run killed inside its start-up refresh wrote no progress record (its pipeline had not
        # begun), so these figures are a run's before it, not the last run's, whose end the line above names
        before_refresh = (not earlier and not st.get("running") and refresh_cut_before(st.get("refresh_cut_short"), p))
        if ended:
            outcomes = st.get("run_outcomes") or {}
            outcome = outcomes.get(str(p.get("run_id"))) if not procs else None
            # a newer run ended without a progress record of its own (it failed while starting): these figures
            # are an earlier run's
            older = bool(outcome) and not earlier and str(p.get("run_id")) != list(outcomes)[-1]
            state, eta = (("of an earlier run, which ended" if older or before_refresh else "run ended")
                          + (f": all {len(procs)} processes" if procs else "")
                          + (f": {outcome}, as manifest.json recorded" if outcome else "")), ""
        elif running is False:
            leased = sum(c.leased for c in st["queues"].values())
            stopped = sum(1 for q in procs if q.get("state") == "stopped")
            # on Redis the queue's leased count is the whole campaign's: it holds other machines' live leases too
            # (redis39 #3), so it is not said to be this machine's work that the next run redelivers
            redelivered = (f"{leased} task{'s are' if leased != 1 else ' is'} leased campaign-wide (processes on "
                           "other machines may hold some); those of stopped processes are redelivered to the next "
                           "run here, or to a running one elsewhere once their leases expire" if st.get("redis") else
                           f"{leased} leased task{'s are' if leased != 1 else ' is'} redelivered on the next run")
            # walk44 B5: a run ended by a second Ctrl-C (or signal) is recorded "forced exit" by manifest.json: say
            # so, not only "stopped without its final record", which reads like a crash
            forced = (st.get("run_outcomes") or {}).get(str(p.get("run_id"))) == FORCED_EXIT
            state = ("not running (" + (f"every process of the last run has stopped, {stopped} of {len(procs)} without "
                                        "its final record; " if procs
                                        else FORCED_EXIT_TEXT if forced
                                        else "the last run stopped without its final record; ")
                     + (f"{redelivered}, which passes on any whose answer was stored before the stop without "
                        "calling again, so calls can exceed done requests until then)"
                        if leased else "no task is left leased" + (" campaign-wide)" if st.get("redis") else ")")))
            eta = ""  # no ETA when no process is running
        elif procs and n_running and p.get("stopping"):  # every running process took a stop signal (review45a #5)
            state = (f"stopping on {_signal_words(p['stopping'])}: {n_running} of {len(procs)} processes finishing "
                     "their calls in flight, then saving; re-run the same commands to resume once they have ended")
            eta = ""
        elif procs:
            state = f"running: {n_running} of {len(procs)} processes"
            eta = f", ETA {format_eta(p)}" if n_running else ""
        elif running and p.get("stopping"):  # walk45 #4: the run took SIGTERM or Ctrl-C and is winding down
            state = (f"stopping on {_signal_words(p['stopping'])}: finishing the calls in flight, then saving; re-run "
                     "the same command to resume once it has ended")
            eta = ""
        else:
            state = "running" if running else "running, or killed before its last record"
            eta = f", ETA {format_eta(p)}"
        if eta and st.get("redis"):  # the progress records are this machine's; the queue counts the campaign's
            eta += (" [from this machine's rate: processes on other machines are not counted, the queue counts "
                    "are the whole campaign's]")
        if before_refresh:
            state += BEFORE_REFRESH_TEXT
        lines.append(f"  last progress ({state}), elapsed {p.get('elapsed_s', 0):.0f} s{eta}")
        # how the run that wrote these figures ended: a scale-out run's record is its processes' (the manifest's
        # newest ended run stands for them); None: the manifest holds no end for it, and when it records the run as
        # still running, it was cut before recording one (a second Ctrl-C: walk25 #4, which then read "run ended"
        # with no way on); an unreadable manifest tells nothing (rev25 #4: a budget stop then got the hint too)
        stopped_as = outcome if not procs else last_outcome
        cut = str(p.get("run_id")) in (st.get("runs_unended") or set())  # its end never recorded (rev25 #4)
        if (ended and not complete and not running and (stopped_as in ("interrupted", "killed", "forced exit") or (
                stopped_as is None and cut and left and running is False))) or (
                running is False and not ended and left):  # a hard stop (SIGKILL, a second Ctrl-C) writes no end
            lines.append(RESUME_HINT)
        elif ended and left and running is False and not st.get("redis") and last_outcome == _stages_done_status():
            # the last process ran some stages only (--stages) and ended when they had drained: what another
            # process queued after that (engine, "stages finished") waits for a process that no longer runs (on
            # Redis, processes on other machines may: this machine cannot tell)
            lines.append(STAGES_LEFT_HINT)
        # a complete campaign has no open condition: its stages' errors (a model's host down for a while under
        # --watch, a retried 503) were all overcome, so they are history (the progress log keeps them), not
        # the "last error" of the campaign
        error_label = ("earlier error (resolved: every task completed since)" if complete
                       else "last error")
        over = ended or running is False  # the figures are as the run left them: no idle time, no live rate
        # running None: no run.lock to tell ("running, or killed before its last record")
        which = ("last run that did work" if earlier else "earlier run" if before_refresh
                 else "last run" if over else "this run" if running or procs else "this or the last run")
        if p.get("stages") and running is False and not ended:
            # no final record: the figures are the last record's, not the run's end
            lines.append(f"    stages, {which} only, as of its last progress record ({_utc(p.get('t'))}): work it "
                         "finished after that record shows only in the queue counts and calls above (which cover "
                         "every run of the campaign):")
        elif p.get("stages"):
            lines.append(f"    stages, {which} only (the queue counts and calls above cover every run of the campaign):")
        for sd in p.get("stages", []):
            pids, live = sd.get("pids") or [], sd.get("rate_pids") or []
            shared = ""  # a stage run by several processes: counts of all, rate of the running ones
            if procs and not over and not live:  # none of its processes runs: its rate is no rate now
                shared = (f"  ({len(pids)} processes, none running: no rate counted)" if len(pids) > 1
                          else "  (its process is not running: no rate counted)")
            elif len(pids) > 1:
                shared = f"  ({len(pids)} processes" + (f", {len(live)} running" if n_running and len(live) != len(pids)
                                                       else "") + ")"
            idle = "" if over else idle_note(sd, st["queues"] or record_counts(p))
            lines.append(f"    {sd['stage']:>24}: {sd['rate_per_s']:.2f}/s  done {sd['done']}  retried {sd['failed']}"
                         f"  dead {sd['dead']}{shared}" + (f"  {idle}" if idle else ""))
            lanes = sd.get("lanes")
            if isinstance(lanes, dict) and lanes:  # several models: which one is slow (no live rate once over)
                # "left": the model's tasks still queued (the ETA times them by the model's own rate)
                lines.append(f"      per model ({which}): " + ", ".join(
                    f"{k} " + ("" if over else f"{float(v.get('rate_per_s') or 0.0):.2f}/s ") + f"done {v.get('done')}"
                    + (f" left {v['left']}" if not over and v.get("left") is not None else "")
                    for k, v in lanes.items() if isinstance(v, dict))
                    # the stage's rate is over its recent commits, each model's over about 10 s: they need not add up
                    + ("" if over else f" (rates over the last {LANE_RATE_WINDOW_S:g} s)"))
            # each distinct once; the cap's refusals of the calls in flight as one line (budget_refusals_merged)
            # (that line whole: its amounts are the point, and their number is bounded), after the stage's last two
            # real errors: the refusals are kept apart (the record's budget_refusals; in last_errors before s14)
            for err in dict.fromkeys(describe_reason(e) if e.endswith(_REFUSED_TAIL) else clip_reason(e)
                                     for e in stage_error_lines(sd)):
                lines.append(f"      {error_label}: {err}")
            # errors of a host that answered again since (the running process split them off): history too
            for r in (sd.get("resolved_errors") or [])[-2:]:
                if isinstance(r, dict):
                    at = r.get("answered_at")
                    when = (time.strftime("%H:%M:%S", time.gmtime(at)) + " UTC") if isinstance(at, (int, float)) else "?"
                    label = (error_label if complete  # complete: the stronger statement
                             else f"earlier error (resolved: host {r.get('host')} answered again at {when})")
                    lines.append(f"      {label}: {clip_reason(str(r.get('error')))}")
        if procs:
            lines.extend(process_lines(procs, running, time.time()))
        reason = stop_reason(p, now=time.time(), running=running)
        if reason:
            lines.append(f"  {reason}")
        if p.get("budget_stopped") and (ended or running is False) and not complete and st.get("spend"):
            # a stop by another cap than the USD one (the geocoder's Nominatim cap) says its own fix (docs audit 33)
            other = other_budget_fixes(f for sd in p.get("stages") or [] for f in sd.get("budget_fixes") or [])
            lines.extend("  to go on: " + f for f in other)
            if not other or any(BudgetStop.fix in (sd.get("budget_fixes") or ()) for sd in p.get("stages") or []):
                lines.append("  " + budget_resume_hint(st["spend"], refused_call_usd(p)))
                # the dry run prices the work left (stored answers free) on SQLite only, and not a crawl's (its calls
                # follow from what it finds: its dry run gives the whole crawl's worst case)
                if not st.get("redis") and st.get("kind") != "crawl":
                    lines.append(f"  what the rest costs: `{COST_OF_REST_CMD}` estimates the work left (answers "
                                 "already stored cost nothing there)")
        lines.extend(coverage_lines(p.get("planned_by_model") or {}, st.get("answered_by_model") or {},
                                    budget_stopped=bool(p.get("budget_stopped")), complete=complete))
        http = p.get("http")
        if http and not ended and running is False:
            # a run stopped without its final record (kill -9): its last calls came after the last record (walk30
            # #9: "calls 85" beside "84 requests" read as a lost call)
            lines.append(f"    http counters as of the last progress record ({_utc(p.get('t'))}): requests sent after "
                         "it are not in them")
        if http:
            labels = st.get("host_labels") or {}
            for host, hs in http.items():
                errs = sum((hs.get("errors") or {}).values())
                rate = errs / hs["requests"] if hs.get("requests") else 0.0
                # normal answers of the endpoint (a pageviews 404), not errors
                answers = describe_answers(hs.get("answers") or {}, hs.get("answer_notes") or {})
                name = f"{host} ({labels[host]})" if labels.get(host) else host
                lines.append(f"    http {name}: {count_text(hs.get('requests', 0), 'request')}, {count_text(hs.get('retries', 0), 'retry', 'retries')},"
                             f" error rate {rate:.1%}" + (f" ({mapping_text(hs['errors'])})" if hs.get("errors") else "")
                             + (f"; {answers}" if answers else ""))
            if running and not ended:
                # newuser39 #8a: three counts of one run's calls, explained only once it had stopped
                lines.append("    (while a run goes these counts differ: spend's calls are settled model calls, a "
                             "queue's done its tasks handed on, http requests every request sent, retries and calls "
                             "on the wire included)")
    pauses = st.get("pauses") or {}
    if pauses:
        labels = st.get("host_labels") or {}
        for key, left in pauses.items():
            host = key.split("/", 1)[0]
            name = f"{key} ({labels[host]})" if labels.get(host) else key
            what = "model" if "/" in key else "host"
            lines.append(f"  paused: {what} {name} for another {_duration(left)} (until "
                         f"{_utc(time.time() + left)}; a Retry-After, at most the host's max_retry_after_s): its tasks wait, a run started "
                         f"now waits too")
    for edge, items in st.get("dead", {}).items():
        for d in items:
            lines.append(f"  dead {edge}/{one_line_text(d.key)} (deliveries {d.attempts}): {clip_reason(d.reason)}")
    return "\n".join(lines)


#: a stage's error for a call the cost cap refused (:class:`geoagent.runtime.ledger.BudgetExhausted`, as stored:
#: ``"BudgetStop: budget exhausted: spent $S + unknown $U + reserved $R + this call $X > cap $C"``)
_BUDGET_REFUSAL = re.compile(r"^(?P<head>\w+: )?budget exhausted: spent \$(?P<spent>[\d.]+) \+ unknown \$(?P<unknown>[\d.]+)"
                             r" \+ reserved \$(?P<reserved>[\d.]+) \+ this call \$(?P<call>[\d.]+) > cap \$(?P<cap>[\d.]+)$")
#: the end of the merged refusals' line (:func:`budget_refusals_merged`)
_REFUSED_TAIL = " calls refused at the cap)"


def stage_error_lines(sd: dict[str, Any]) -> list[str]:
    """The errors ``status`` shows for a stage record ``sd``: its last two real errors (``last_errors``), then the cost
    cap's refusals as one entry (:func:`budget_refusals_merged` over ``budget_refusals``, and over any refusal an
    older record kept in ``last_errors``), oldest first. The refusals never take a real error's place."""
    errors = [str(e) for e in sd.get("last_errors") or []]
    real = [e for e in errors if not _BUDGET_REFUSAL.match(e)]
    refused = [e for e in errors if _BUDGET_REFUSAL.match(e)] + [str(e) for e in sd.get("budget_refusals") or []]
    return real[-2:] + budget_refusals_merged(refused)[-1:]


def budget_refusals_merged(errors: list[str]) -> list[str]:
    """A stage's ``last_errors`` (oldest first) with the cost cap's refusals merged into one, for display.

    When the cap stops a run, every task in flight that asks for its reservation is refused
    (:class:`geoagent.runtime.ledger.BudgetExhausted`), each with its own request's worst case ("this call $X") and
    the ledger's figures of that moment: ``status`` showed them as two nearly identical ``last error`` lines. The
    refusals become one entry, at the place of the latest: each amount that differs among them shown as the range
    ``$lo to $hi`` (USD, 6 decimals, as stored), the others as they are, followed by ``" (the last N calls refused at
    the cap)"`` when there were several (N: those among the stage's last errors, which keeps 5). Other errors are returned
    as they are; the stored record is never changed."""
    hits = [(i, m) for i, e in enumerate(errors) if (m := _BUDGET_REFUSAL.match(e))]
    if len(hits) < 2:
        return list(errors)

    def span(field: str) -> str:
        vals = sorted({float(m[field]) for _, m in hits})
        return f"${vals[0]:.6f}" if len(vals) == 1 else f"${vals[0]:.6f} to ${vals[-1]:.6f}"

    i_last, last = hits[-1]
    merged = (f"{last['head'] or ''}budget exhausted: spent {span('spent')} + unknown {span('unknown')} + reserved "
              f"{span('reserved')} + this call {span('call')} > cap {span('cap')} (the last {len(hits)}{_REFUSED_TAIL}")
    at = {i for i, _ in hits}
    return [merged if i == i_last else e for i, e in enumerate(errors) if i not in at or i == i_last]


def idle_note(sd: dict[str, Any], counts: dict[str, QueueCounts]) -> str:
    """Beside a stage's rate in ``status``: ``"idle: nothing completed for N s although K task(s) are ready on
    E"`` (or ``... K task(s) are leased (being worked on or waiting for a slot)``: stalled) or ``"idle: nothing completed for N s (nothing ready on E:
    waiting for upstream work)"`` (starved; ``"... its K leased task(s) are held by other processes ..."`` when
    the edge's tasks are leased by other processes) when the stage record's ``idle_s`` has reached its ``stall_after_s``
    (:meth:`geoagent.runtime.worker.StageStats.stall_after_s`); ``""`` while it completes work, when finished, or
    for a record without ``idle_s``. ``counts``: edge -> QueueCounts now. The rate beside it falls meanwhile
    (:meth:`geoagent.runtime.worker.StageStats.rate_per_s`); this says why."""
    idle = sd.get("idle_s")
    if idle is None or sd.get("finished") or float(idle) < float(sd.get("stall_after_s") or STALL_MIN_S):
        return ""
    edge = sd.get("input_edge")
    ready = counts.get(edge, QueueCounts()).ready if edge else 0
    head = f"idle: nothing completed for {float(idle):.0f} s"
    if ready:
        return f"{head} although {ready} task(s) are ready on {edge}"
    if int(sd.get("in_flight") or 0):
        return f"{head} although {int(sd['in_flight'])} task(s) are leased (being worked on or waiting for a slot)"
    held = counts.get(edge, QueueCounts()).leased if edge else 0
    if held:  # leased elsewhere: not upstream work (walk27 #1: a killed process's leases read as "upstream")
        return (f"{head} (nothing ready on {edge}: its {held} leased task(s) are held by other processes; a stopped "
                "process's come back once it is found gone, or when their lease times out, [queue] "
                "visibility_timeout_s)")
    return f"{head} (nothing ready on {edge}: waiting for upstream work)"


def coverage_lines(planned: dict[str, int], answered: dict[str, int], *, budget_stopped: bool = False,
                   complete: bool = False) -> list[str]:
    """Per model, the planned model calls that have a stored answer, as the run's summary words them
    (``answered before the cap, per model (stored answers / planned calls): a 160/339 (47%), b 0/339 (0%)``)
    with its warning for a model left with none or far fewer than the others
    (:meth:`geoagent.engine.Outcome.coverage_warnings`). ``planned``: the last run's plan (its progress
    record's ``planned_by_model``); ``answered``: per model, the recorded plan's tasks answered
    (:func:`geoagent.runtime.scope.answered_in_plan`; the response store's count for a campaign without a
    plan record). Empty without a plan
    or once the campaign is complete."""
    if not planned or complete:
        return []
    from geoagent.engine import Outcome

    cov = Outcome("", "", 0, sum(planned.values()), {}, None, planned_by_model=dict(planned),
                  answered_by_model={n: int(answered.get(n, 0)) for n in planned})
    when = "before the cap" if budget_stopped else "so far"
    return ([f"  answered {when}, per model (stored answers / planned calls): {cov.coverage_text()}"]
            + [f"  !!! WARNING: {w}" for w in cov.coverage_warnings()])


_HTTP_STATUS_REASON = re.compile(r"http (\d{3})")


def describe_answers(answers: dict[str, int], notes: dict[str, str] | None = None) -> str:
    """The answers a client declared normal for its endpoint (the HTTP layer's ``expected_status``), worded for
    display: ``{"http 404": 12}`` with the note ``{"http 404": "articles without views in the date range"}``
    -> ``"12 expected 404 answers (articles without views in the date range; not errors)"``; without a note the
    parenthesis says that the client declared them normal. Several statuses are joined by ``"; "``; ``{}`` ->
    ``""``."""
    parts = []
    for reason, n in answers.items():
        m = _HTTP_STATUS_REASON.fullmatch(reason)
        what = m.group(1) if m else reason
        why = (notes or {}).get(reason) or "declared a normal answer of this endpoint by its client"
        parts.append(f"{n} expected {what} answer{'s' if n != 1 else ''} ({why}; not errors)")
    return "; ".join(parts)


def _utc(t: Any) -> str:
    """A progress record's ``t`` (Unix s) as ``2026-11-30 17:05:12 UTC``; ``?`` when absent."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(t))) if isinstance(t, (int, float)) else "?"


#: a running process writes a progress record every second (:func:`geoagent.runtime.daemon.run_pipeline`'s tick);
#: one of a scale-out run whose latest record is older than this is not counted as running, s
SILENT_AFTER_S = 15.0



def _gone_bookers(progress: dict[str, Any] | None, running: bool | None) -> list[int]:
    """The pids of the campaign's processes on this machine that are running now and run the model caller, from
    ``progress`` (the record ``status`` shows: a scale-out run's merged one, whose ``processes`` carry their
    :func:`process_state`, or one process's) and ``running`` (:func:`geoagent.engine.run_lock_held`); [] when none is
    known. Such a process books the open reservations of a process that is gone as unknown-outcome spend while it
    runs: its model caller runs the ledger's recovery every 5 s while one of their requests, handed back to the queue,
    waits on the gone process's reservation, or while it waits for budget room
    (:meth:`geoagent.workers.model_caller.ModelCaller` budget wait; live42 #3)."""
    if not progress:
        return []
    procs = progress.get("processes")
    if procs:
        return [int(p["pid"]) for p in procs if p.get("state") == "running" and isinstance(p.get("pid"), int)
                and C.STAGE_MODEL_CALLER in (p.get("stages") or [])]
    pid = progress.get("pid")
    names = [f.get("stage") for f in progress.get("stages") or [] if isinstance(f, dict)]
    if (running and not progress.get("finished") and isinstance(pid, int) and pid_alive(pid) is not False
            and C.STAGE_MODEL_CALLER in names):
        return [pid]
    return []


def process_state(record: dict[str, Any], running: bool | None, now: float) -> str:
    """What became of the process that wrote a progress record of a scale-out run: ``"ended"`` (its final
    record), ``"stopped"`` (no final record and its pid gone, or no process holds the campaign's ``run.lock``:
    killed), ``"silent"`` (its pid exists but its last record is older than :data:`SILENT_AFTER_S`: stalled, or
    the pid now belongs to another program) or ``"running"``. ``running``: :func:`geoagent.engine.run_lock_held`;
    ``now``: Unix time, s."""
    if record.get("finished"):
        return "ended"
    if running is False or pid_alive(record.get("pid")) is False:
        return "stopped"
    if now - float(record.get("t") or 0.0) > SILENT_AFTER_S:
        return "silent"
    return "running"


def process_lines(processes: list[dict[str, Any]], running: bool | None, now: float) -> list[str]:
    """The processes of a scale-out run, for ``status``: a header counting them by state and one line per
    process (newest record first): pid, stages, state, start, and its own rate and count per stage.
    ``processes``: :func:`geoagent.runtime.progress.merge_records`'s list, each with its ``state``
    (:func:`process_state`)."""
    from geoagent.engine import DEAD_OWNER_SWEEP_S

    states = [p.get("state") for p in processes]
    head = f"  processes: {states.count('running')} running, {states.count('ended')} ended"
    if states.count("stopped"):
        head += f", {states.count('stopped')} stopped without a final record"
    if states.count("silent"):
        head += f", {states.count('silent')} silent"
    lines = [head]
    for p in processes:
        t, state = float(p.get("t") or 0.0), p.get("state")
        started, note = f"started {_hms(p.get('started'))}", ""
        if state == "ended":
            what = f"ended ({started}, ended {_hms(t)})"
        elif state == "running" and p.get("stopping"):
            what = (f"stopping on {_signal_words(p['stopping'])}, finishing its calls in flight ({started}, last "
                    f"record {max(0.0, now - t):.1f} s ago)")
        elif state == "running":
            what = f"running ({started}, last record {max(0.0, now - t):.1f} s ago)"
        elif state == "stopped":
            why = "no process of the campaign holds run.lock" if running is False else "pid gone"
            what = f"stopped without its final record ({why}: killed?; {started}, last record {_hms(t)})"
            if p.get("leases") == "returned":
                note = ("; its leased tasks were handed back to their queue (by a process of the campaign that "
                        "started or was running after it stopped)")
            elif running:
                note = (f"; its leased tasks are handed back to their queue within about {DEAD_OWNER_SWEEP_S:g} s "
                        "by a running process of the campaign (each checks every "
                        f"{DEAD_OWNER_SWEEP_S:g} s for processes that died), else when the next run of the "
                        "campaign starts or their visibility timeout ([queue] visibility_timeout_s, 300 s by "
                        "default, from each lease) ends, whichever comes first")
            else:
                note = ("; its leased tasks return to their queue when the next run of the campaign starts (any "
                        "process), or when their visibility timeout ([queue] visibility_timeout_s, 300 s by default, "
                        "from each lease) ends, whichever comes first")
        else:
            what = (f"silent ({started}; no record for {now - t:.0f} s although pid {p.get('pid')} exists: stalled, or "
                    "the pid now belongs to another program; not counted as running)")
        figures = "; ".join(
            f"{f.get('stage')} {float(f.get('rate_per_s') or 0.0):.2f}/s done {f.get('done')}" if state == "running"
            else f"{f.get('stage')} done {f.get('done')}" for f in p.get("figures") or [])
        lines.append(f"    pid {p.get('pid')} [{', '.join(str(x) for x in p.get('stages') or [])}]: {what}"
                     + (f"; {figures}" if figures else "") + note)
    return lines


def _signal_words(name: Any) -> str:
    """A stop signal's name as the console says it: ``Ctrl-C (SIGINT)`` for SIGINT, else the name (``SIGTERM``)."""
    return "Ctrl-C (SIGINT)" if name == "SIGINT" else str(name)


def _duration(seconds: float) -> str:
    """``seconds`` as ``"3 h 20 min"``, ``"12 min"`` or ``"40 s"`` (for the ``paused:`` lines of ``status``)."""
    s = max(0, int(round(seconds)))
    if s >= 3600:
        return f"{s // 3600} h {s % 3600 // 60} min"
    return f"{s // 60} min" if s >= 60 else f"{s} s"


def _hms(t: Any) -> str:
    """A Unix time (s) as ``17:05:12 UTC``; ``?`` when absent."""
    return time.strftime("%H:%M:%S UTC", time.gmtime(float(t))) if isinstance(t, (int, float)) else "?"


def _which_processes(sd: dict[str, Any], pids: list[Any], *, waiting: bool) -> str:
    """For a merged scale-out record: which processes report a host wait (``pids``) and, while they wait, which
    other running processes of the same stage do not (each process has its own breakers); ``""`` for a
    one-process record (no ``pids``)."""
    if not pids:
        return ""
    text = f" in process{'es' if len(pids) > 1 else ''} " + ", ".join(f"pid {q}" for q in pids)
    others = [q for q in sd.get("rate_pids") or [] if q not in pids]
    if waiting and others:
        text += (f"; process{'es' if len(others) > 1 else ''} " + ", ".join(f"pid {q}" for q in others)
                 + f" (also {sd.get('stage')}) {'are' if len(others) > 1 else 'is'} not waiting for it")
    return text


def format_eta(progress: dict[str, Any], *, compact: bool = False) -> str:
    """``"20 s (bounded by geocoder)"`` from a progress record's ``eta_s`` / ``eta_stage``; ``"unknown"``
    when no stage has a measured rate yet; ``"unknown while waiting for host H (model M)"`` (or ``(stage S)``;
    several joined by ``and``) while a watch-mode run holds work for an unreachable host (the record's
    ``eta_waiting``, :func:`geoagent.runtime.progress.eta_waits`); ``"unknown: stage S has completed nothing for N s
    with K task(s) ready on E"`` (or ``K task(s) leased``; several joined by ``;``) while a stage with work ready
    is stalled (the record's ``eta_stalled``, :func:`geoagent.runtime.progress.stalled_stages`): its rate is old,
    so no time is given from it; ``"estimating (model_caller: 2 of 5 completions over 3 of 5 s measured)"`` right
    after a start or resume, while no stage with work ahead has its rate measured well enough yet (the record's
    ``eta_estimating``, :meth:`geoagent.runtime.worker.StageStats.eta_ready`); ``compact`` (the live display's caption,
    which an 80-column terminal must hold on one line) says the same as ``"estimating: model_caller 2/5 done, 3/5 s"``
    (completions and seconds measured, each of the number needed) and words the scope of a ``--stages`` process
    as ``" [stage(s) S only, with the work upstream]"``. A record of a ``--stages`` process (``eta_scope`` lists its
    stages) says that its ETA covers only those stages, over the work still upstream of them too; a record merged
    from a scale-out run's processes (:func:`geoagent.runtime.progress.merge_records`) is timed by the running
    processes' combined capacities and names the stages no running process times."""
    eta = progress.get("eta_s")
    scope = progress.get("eta_scope")
    covers = (f" [for stage(s) {', '.join(scope)} of the process that wrote it, counting the work still "
              "upstream; other processes' stages not timed]") if scope else ""
    if scope and progress.get("processes"):  # merged from a scale-out run's processes
        untimed = progress.get("eta_untimed") or []
        covers = (f" [from the running processes' combined rates, for stage(s) {', '.join(scope)}, counting the work "
                  "still upstream" + (f"; no running process for stage(s) {', '.join(untimed)}: not timed"
                                      if untimed else "") + "]")
    if scope and compact:  # the live display: its own process's record
        covers = f" [stage(s) {', '.join(scope)} only, with the work upstream]"
    waiting = [w for w in progress.get("eta_waiting") or [] if isinstance(w, dict)]
    if waiting:
        what = [f"host {w.get('host')} (" + (f"model {w['model']}" if w.get("model") else f"stage {w.get('stage')}")
                + ")" for w in waiting]
        return "unknown while waiting for " + " and ".join(what) + covers
    stalled = [s for s in progress.get("eta_stalled") or [] if isinstance(s, dict)]
    if stalled:
        return "unknown: " + "; ".join(
            f"stage {s.get('stage')} has completed nothing for {float(s.get('idle_s') or 0.0):.0f} s with "
            + (f"{s['ready']} task(s) ready on {s.get('input_edge')}" if s.get("ready")
               else f"{s.get('in_flight')} task(s) leased") for s in stalled) + covers
    estimating = [e for e in progress.get("eta_estimating") or [] if isinstance(e, dict)]
    if eta is None and estimating:
        from geoagent.runtime.worker import ETA_MIN_COMPLETIONS, ETA_MIN_WINDOW_S

        if compact:
            return "estimating: " + "; ".join(
                f"{e.get('stage')} {min(int(e.get('done') or 0), ETA_MIN_COMPLETIONS)}/{ETA_MIN_COMPLETIONS} done, "
                f"{min(float(e.get('over_s') or 0.0), ETA_MIN_WINDOW_S):.0f}/{ETA_MIN_WINDOW_S:.0f} s"
                for e in estimating) + covers
        return "estimating (" + "; ".join(
            f"{e.get('stage')}: {min(int(e.get('done') or 0), ETA_MIN_COMPLETIONS)} of {ETA_MIN_COMPLETIONS} "
            f"completions over {min(float(e.get('over_s') or 0.0), ETA_MIN_WINDOW_S):.0f} of {ETA_MIN_WINDOW_S:.0f} s "
            "measured" for e in estimating) + ")" + covers
    # a run without watch mode holds an unreachable host's model tasks and leaves them queued at its end: the ETA
    # is that end's, and says so (walk28 status walkthrough: it read as the time to finish the whole plan)
    held = [] if progress.get("finished") else held_host_models(progress) + cut_off_models(progress)
    untimed = ("; not timed: the held tasks of " + "; ".join(held) + " (left queued at the end; re-run to resume)"
               if held else "")
    cap = cap_reached_clause(progress)
    if eta is None:
        return "unknown (no rate measured yet for a stage with work ahead)" + covers + untimed + cap
    stage = progress.get("eta_stage")
    return f"{eta:.0f} s" + (f" (bounded by {stage})" if stage and eta > 0 else "") + covers + untimed + cap


def cap_reached_clause(progress: dict[str, Any]) -> str:
    """``"; the cap is reached in about N more calls (~T s); the rest needs about $X more"`` when the budget cap
    will stop a running run before its plan is done (newuser41 #B: "ETA 138 s" for all 1,918 calls at $0.3069 of a
    $0.40 cap; the run stopped budget exhausted 268 calls later), else "".

    From a progress record: the cap left after the settled and unknown-outcome spend (``cap_usd - total_usd``; the
    calls in flight are counted at the mean cost below, not at their worst-case reservations: review41c #5, with 16
    calls in flight reserving $0.003 each at a mean of $0.0003 it said "135 more calls" for about 278) over the mean
    cost of a settled call (``spent_usd / calls``) is N, counted from now with the calls in flight among them; it
    applies when N is below the model calls left (``queues.requests`` ready + leased). T: N over the model caller's
    measured capacity (``capacity_per_s`` of the stage reading ``requests``, once ``eta_ready``; left out before).
    $X: the calls left at that mean cost, less the cap left (what ``[budget] cap_usd`` must rise by to finish).
    Rough by design (the models' costs differ, and each call reserves its worst case first, so a call is refused
    once the cap left is below that: the stop comes a little sooner); "" for a finished record, one with no settled
    spend yet, or without a requests edge (the crawl). The live display's caption shows the same clause."""
    spend = progress.get("spend") or {}
    queue = (progress.get("queues") or {}).get(C.EDGE_REQUESTS) or {}
    try:
        calls, spent = int(spend.get("calls") or 0), float(spend.get("spent_usd") or 0.0)
        cap = float(spend["cap_usd"])
        # settled + unknown outcome; the open reservations are the calls in flight, counted at the mean below
        total = spend.get("total_usd")
        left_usd = cap - (float(total) if total is not None else spent + float(spend.get("unknown_usd") or 0.0))
        calls_left = int(queue.get("ready") or 0) + int(queue.get("leased") or 0)
    except (KeyError, TypeError, ValueError):
        return ""
    if progress.get("finished") or progress.get("budget_stopped") or calls <= 0 or spent <= 0 or calls_left <= 0:
        return ""
    mean = spent / calls
    n = max(0, int(left_usd / mean))
    if n >= calls_left:
        return ""
    caller = next((st for st in progress.get("stages") or [] if isinstance(st, dict)
                   and st.get("input_edge") == C.EDGE_REQUESTS), {})
    rate = float(caller.get("capacity_per_s") or 0.0) if caller.get("eta_ready") else 0.0
    when = f" (~{n / rate:.0f} s)" if rate > 0 else ""
    more = calls_left * mean - max(0.0, left_usd)
    return (f"; the cap is reached in about {count_text(n, 'more call')}{when} of the {calls_left} left (at "
            f"{format_usd(mean)} per settled call); the rest needs about {format_usd(more)} more")


def superseded_counts(cfg: Any, edge: str | None = None) -> dict[str, int]:
    """How many dead tasks per edge were set aside as superseded (reason ``superseded: ...``: no longer in the
    plan; only edges with some; ``edge``: only that one)."""
    from geoagent.runtime.queue import SUPERSEDED

    return _per_edge(cfg, edge, lambda q: len(q.dead_keys_sync(SUPERSEDED)))


def _per_edge(cfg: Any, edge: str | None, read: Callable[[Any], Any]) -> dict[str, Any]:
    """``read(queue)`` for each queue of the campaign (pipeline order; ``edge``: only that one), keeping the
    non-empty results by edge name. Raises ``ValueError`` for an unknown ``edge`` (see :func:`check_edge`)."""
    check_edge(cfg, edge)
    out = {}
    for f in _queue_files(cfg):
        if edge and f.stem != edge:
            continue
        q = _open(cfg, f)
        try:
            value = read(q)
        finally:
            q.close_sync()
        if value:
            out[f.stem] = value
    return out


def dead_letters(cfg: Any, limit: int = 50, edge: str | None = None) -> dict[str, list[DeadLetter]]:
    """Dead-lettered tasks per edge (pipeline order), most recent first, at most ``limit`` per edge.

    Raises
    ------
    ValueError
        ``edge`` is given and is not one of the campaign's queues (see :func:`check_edge`).
    """
    return _per_edge(cfg, edge, lambda q: q.dead_letters_sync(limit))


def queue_counts(cfg: Any) -> dict[str, QueueCounts]:
    """Counts of every queue the campaign has on disk (pipeline order); ``{}`` when it has none (not started).
    Creates nothing."""
    out: dict[str, QueueCounts] = {}
    for f in _queue_files(cfg):
        q = _open(cfg, f)
        try:
            out[f.stem] = q.counts_sync()
        finally:
            q.close_sync()
    return out


def dead_counts(cfg: Any, edge: str | None = None) -> dict[str, int]:
    """How many tasks are dead-lettered per edge (only edges with some; ``edge``: only that one)."""
    return _per_edge(cfg, edge, lambda q: q.counts_sync().dead)


def run_baseline(cfg: Any, *, look: bool = False) -> tuple[int, int]:
    """``(model calls settled, request tasks done)`` of a campaign before a run; ``(0, 0)`` when it has no
    state yet (nothing is created). The run's summary subtracts them to tell this run's new calls from the
    stored answers it reused. ``look``: a dry run's, which reads the files read-only."""
    from geoagent.runtime.backend import open_state, redis_edges, state_exists, uses_redis

    from geoagent.runtime.sqlite_queue import queue_path
    from geoagent.runtime.sqlite_wal import reading_only

    calls = done = 0
    # ``look`` (a dry run): read only, no ledger owner registered, no -wal made beside a queue file (cli36 #5); a run
    # opens the files as it will use them, so a read-only folder is refused here, naming the file
    with reading_only() if look else contextlib.nullcontext():
        if state_exists(cfg):
            with open_state(cfg, recover=False) as state:
                calls = state.ledger.summary().calls
        qfile: Any = Path(queue_path(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS))
        if uses_redis(cfg):
            qfile = _RedisEdge(C.EDGE_REQUESTS) if redis_edges(cfg, [C.EDGE_REQUESTS]) else None
        if qfile is not None and (isinstance(qfile, _RedisEdge) or (qfile.is_file() and qfile.stat().st_size)):
            q = _open(cfg, qfile)
            try:
                done = q.counts_sync().done
            finally:
                q.close_sync()
    return calls, done


def requeue_dead(cfg: Any, edge: str | None = None) -> int:
    """Put dead tasks (of one edge, or all) back to ready; returns how many.

    Raises
    ------
    ValueError
        ``edge`` is not one of the campaign's queues (a typo must not look like "nothing to requeue").
    """
    n = 0
    check_edge(cfg, edge)
    for f in _queue_files(cfg):
        if edge and f.stem != edge:
            continue
        q = _open(cfg, f, write=True)
        try:
            n += q.requeue_dead_sync()
        finally:
            q.close_sync()
    return n
