"""The current plan of a campaign, recorded, and the scored rows a report counts (its "scope").

A re-run whose config changed (GeoHint sites or a model removed, GeoVerify ``n_per_band`` lowered on built
trials, generic ``n_requests`` lowered) keeps the answers of the tasks the new plan no longer holds in the
store. The reports score exactly the current plan's tasks (:class:`ScoredScope`), and everything that speaks
for "the campaign" speaks for that same plan:

* the engine records the plan's task keys, with each task's model, as it streams the plan into its queue
  (:class:`PlanRecorder`, file ``state/<campaign>/plan_keys.tsv``: one ``model<TAB>key`` line per planned
  task, written to a temporary name and renamed when the plan is complete, so the file always holds one
  whole plan: the last one a run queued);
* ``run.py export`` runs without a plan: it reads that file (:func:`read_plan_keys`) and marks each exported
  scored row with the report's own rule (the ``scored`` column, :meth:`ScoredScope.keep`);
* the per-model "answered / planned" shares (end-of-run summary, budget-stop lines, ``status``) count the
  plan's tasks done on the plan edge (:func:`answered_in_plan`), not every stored answer.

A campaign that ran before this file existed has no record: its export marks every row as scored (each model
request once), as a report made without a plan does, and the shares fall back to the stored answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from geoagent.files import atomic_stream
from geoagent.textfmt import count_text

#: the current plan's task keys, one ``model<TAB>key`` line per planned task (model empty when the task has none)
PLAN_KEYS_FILE = "plan_keys.tsv"
#: who recorded :data:`PLAN_KEYS_FILE` and how that plan differed from the one before it (:meth:`PlanRecorder.wrap`,
#: ``about``): JSON, written before the record is renamed into place, naming the record by its file identity
PLAN_ABOUT_FILE = "plan_keys.json"

#: why a stored scored row is not scored because its task is not in the current plan (:meth:`ScoredScope.left_out`;
#: the scored exports' reason column: GeoVerify's ``left_out``, GeoHint's ``extra.left_out``)
NOT_IN_PLAN = "not in the current plan: a task an earlier run's plan held (the config changed since)"
#: ... a row under a task key of an earlier geoagent version, whose task the plan holds under its new key
#: (:func:`geoagent.data.model.earlier_task_id`; upgrade41 B): not a config change
NOT_IN_PLAN_EARLIER_KEY = ("not in the current plan under this key: the task key of an earlier geoagent version "
                           "(before a swapped-image control's key named the image it shows); the plan holds the task "
                           "under its new key")


#: :meth:`PlanDiff.text` ``fate``: the dropped tasks still queued are set aside now, unsent
SET_ASIDE = "set aside"
#: ... a ``--watch`` run over a crawl's folder sets none aside: they are sent all the same
SENT_WHILE_WATCHING = "sent while watching"
#: ... a ``--stages`` process that does not run the stage reading the plan edge: that stage's process sets them aside
SET_ASIDE_ELSEWHERE = "set aside by another process"


def plan_keys_path(state_dir: str | os.PathLike[str]) -> Path:
    """``<state_dir>/plan_keys.tsv``: the record of the campaign's current plan (:class:`PlanRecorder`)."""
    return Path(state_dir) / PLAN_KEYS_FILE


def _file_identity(st: os.stat_result) -> list[int]:
    """``[inode, size, mtime ns]`` of a file: the plan record a :data:`PLAN_ABOUT_FILE` speaks of (a rename keeps
    all three; a record written anew changes them)."""
    return [int(st.st_ino), int(st.st_size), int(st.st_mtime_ns)]


class PlanRecorder:
    """Writes the plan's task keys to ``<state_dir>/plan_keys.tsv`` as the plan streams past (flat memory).

    :meth:`wrap` yields the plan's messages unchanged; when the plan is exhausted the temporary file replaces
    the record (an aborted plan leaves the earlier record as it was). Keys or models holding a tab or a
    newline are never written by the campaign kinds (their keys are ``|``-joined ids); such a line would be
    refused by :func:`iter_plan_entries`, so the record is not written then (the campaign falls back to no
    record).
    """

    def __init__(self, state_dir: str | os.PathLike[str]) -> None:
        self.path = plan_keys_path(state_dir)

    def wrap(self, plan: Iterable[Any], about: Callable[[], Mapping[str, Any] | None] | None = None
             ) -> Iterator[Any]:
        """``plan`` unchanged (lazily), each message's key (and payload ``model``) written to the record.

        ``about`` (called once the plan is exhausted, before the record replaces the earlier one): what to say of
        this plan in :data:`PLAN_ABOUT_FILE` (a run's process and how the plan changed, :class:`PlanDiff`), written
        atomically with the record's file identity (inode, size, mtime: kept by the rename), so a reader of the
        record knows the note is about the plan it read (a record written later without a note, a watching run's
        re-plan, leaves a note that no longer matches: it is ignored)."""
        ok = True
        # a locked temporary file of its own, renamed over the record once the plan is complete
        # (geoagent.files.atomic_stream): an aborted plan (an exception, the generator closed early, a kill)
        # leaves the earlier record as it was; a killed one's temporary file goes at the next run's clean-up
        with atomic_stream(self.path, "w") as out:
            for msg in plan:
                key = msg[0] if isinstance(msg, tuple) and msg else None
                payload = msg[1] if isinstance(msg, tuple) and len(msg) > 1 else None
                model = payload.get("model") if isinstance(payload, dict) else None
                model = model if isinstance(model, str) else ""
                if isinstance(key, str) and not any(c in key + model for c in "\t\n\r"):
                    out.write(f"{model}\t{key}\n")
                else:
                    ok = False
                yield msg
            if not ok:
                out.discard()
            elif about is not None and (note := about()) is not None:
                import orjson

                from geoagent.files import atomic_write_bytes

                out.file.flush()  # the size and mtime the record keeps once renamed
                ident = _file_identity(os.fstat(out.file.fileno()))
                atomic_write_bytes(self.path.with_name(PLAN_ABOUT_FILE),
                                   orjson.dumps({**note, "plan_file": ident}))


class PlanDiff:
    """How a plan differs from the one the campaign's last run recorded (:class:`PlanRecorder`, ``plan_keys.tsv``):
    the tasks it holds that the last plan did not (:attr:`new`) and those the last plan held that it no longer
    does (:attr:`dropped`), for the one line a run prints at its start and its dry run prints in its report
    (:meth:`text`). A re-run over a crawl's folder whose output changed (review decisions settled, the crawl re-run:
    ladders and ``verify_trials.csv`` rebuilt) plans other tasks with no config change; without this line only
    the end's "Left out of scoring" hinted at why the run made new calls.

    Read the record before the plan streams (:meth:`of`: a run's :class:`PlanRecorder` replaces it once the plan is
    complete), then :meth:`see` each planned task key (or :meth:`wrap` the plan). Memory: 9 bytes per task of the
    recorded plan (each key's 64-bit ``hash()``, this process's own, never stored; sorted; and a flag), never the
    keys; the planned keys are checked in chunks of :data:`PLAN_DIFF_CHUNK`. Two keys sharing a hash (about 1 in
    10^7 for two plans of 10^6 tasks) would count as one. Task keys are unique within a plan (each kind's keys
    name their task). Time: about 2 s for two plans of 10^6 tasks (the record itself takes longer to write).
    """

    __slots__ = ("_old", "_seen", "_buf", "_earlier", "_new", "note")

    def __init__(self, old_keys: Iterable[str]) -> None:
        import numpy as np

        old = np.sort(np.fromiter((hash(k) for k in old_keys), dtype=np.int64))
        self._old = old[np.concatenate(([True], old[1:] != old[:-1]))] if len(old) else old  # each key once
        self._seen = np.zeros(len(self._old), dtype=bool)
        self._buf: list[int] = []
        #: hash of a buffered key -> hash of its key of an earlier geoagent version (upgrade41 B), this chunk's only
        self._earlier: dict[int, int] = {}
        self._new = 0
        #: :data:`PLAN_ABOUT_FILE` when it speaks of the record read (:meth:`of`), else None
        self.note: dict[str, Any] | None = None

    @classmethod
    def of(cls, state_dir: str | os.PathLike[str]) -> "PlanDiff | None":
        """The diff against the plan recorded in ``state_dir`` (read whole now), or None when the campaign has no
        record (a first run, or one from before the record existed: nothing to compare with)."""
        path = plan_keys_path(state_dir)
        if not path.is_file():
            return None
        with open(path, encoding="utf-8") as fh:  # iter_plan_entries' reading, inlined (a 10^6-task plan: ~1 s)
            ident = _file_identity(os.fstat(fh.fileno()))
            diff = cls(k for line in fh if (k := line.rstrip("\n").partition("\t")[2]))
        try:
            import orjson

            note = orjson.loads((Path(state_dir) / PLAN_ABOUT_FILE).read_bytes())
        except (OSError, ValueError):
            note = None
        if isinstance(note, dict) and note.get("plan_file") == ident:
            diff.note = note
        return diff

    def sibling_change(self) -> dict[str, Any] | None:
        """When the record read (:meth:`of`) was written by another process of this machine that is still running
        (a ``--stages`` scale-out's process that planned first) and its note says how that plan changed since the
        run before: ``{"new", "dropped", "counted_by": {"pid", "host", "planned_at"}}``, the counts it said (its
        own, or those it carried from the process it followed); else None. Read after the whole plan was seen:
        meaningful when this plan is the recorded one (:attr:`new` and :attr:`dropped` both 0)."""
        import socket

        from geoagent.runtime.procs import proc_start

        note = self.note or {}
        change = note.get("change")
        pid = note.get("pid")
        if (not isinstance(change, dict) or not isinstance(pid, int) or isinstance(pid, bool) or pid == os.getpid()
                or note.get("host") != socket.gethostname()):
            return None
        start = proc_start(pid)
        if start is None or start != note.get("proc_start"):  # gone, or its pid taken by another process
            return None
        by = change.get("counted_by") or {"pid": pid, "host": note.get("host"), "planned_at": note.get("planned_at")}
        return {"new": int(change.get("new", 0)), "dropped": int(change.get("dropped", 0)), "counted_by": by}

    def see(self, key: str) -> None:
        """Check one planned task key against the recorded plan."""
        self._note(key)

    def _note(self, key: str) -> None:
        from geoagent.data.model import earlier_task_id

        h = hash(key)
        self._buf.append(h)
        earlier = earlier_task_id(key)
        if earlier is not None:
            self._earlier[h] = hash(earlier)
        if len(self._buf) >= PLAN_DIFF_CHUNK:
            self._flush()

    def wrap(self, plan: Iterable[Any]) -> Iterator[Any]:
        """``plan`` unchanged (lazily), each message's key (``msg[0]``) checked with :meth:`see`."""
        for msg in plan:
            if isinstance(msg, tuple) and msg and isinstance(msg[0], str):
                self._note(msg[0])
            yield msg

    def _flush(self) -> None:
        import numpy as np

        if not self._buf:
            return
        got = np.sort(np.asarray(self._buf, dtype=np.int64))  # sorted: the look-ups walk the record in order
        earlier, self._buf, self._earlier = self._earlier, [], {}
        if not len(self._old):
            self._new += len(got)
            return
        at = np.minimum(np.searchsorted(self._old, got), len(self._old) - 1)
        hit = self._old[at] == got
        self._seen[at[hit]] = True
        missed = got[~hit]
        # a task the recorded plan held under its key of an earlier geoagent version is neither new nor dropped: the
        # run moves its stored answer to the new key (geoagent.geoverify.rekey; upgrade41 B: "104 requests new, 104
        # planned before no longer in the plan", then "104 moved ...; none is left out of scoring")
        alt = [earlier[int(h)] for h in missed if int(h) in earlier] if earlier else []
        if alt:
            alt_h = np.sort(np.asarray(alt, dtype=np.int64))
            at2 = np.minimum(np.searchsorted(self._old, alt_h), len(self._old) - 1)
            hit2 = (self._old[at2] == alt_h) & ~self._seen[at2]
            self._seen[at2[hit2]] = True
            self._new += len(missed) - int(hit2.sum())
        else:
            self._new += len(missed)

    @property
    def new(self) -> int:
        """Planned tasks the recorded plan did not hold (after the whole plan was seen)."""
        self._flush()
        return self._new

    @property
    def dropped(self) -> int:
        """Tasks of the recorded plan this plan does not hold (after the whole plan was seen)."""
        self._flush()
        return int(len(self._old) - self._seen.sum())

    def text(self, never_queued: int | None = None, still_queued: int = 0, *, fate: str = SET_ASIDE) -> str | None:
        """``"plan changed since the last run: N requests new (not planned before), M planned before no longer in
        the plan (their stored answers, where they have one, are kept but not scored)"``, None when the plan is the recorded one.

        ``never_queued``: how many of the planned tasks no earlier run queued (the queue's growth); said when
        fewer than :attr:`new` ("N requests new to the plan (...; K new tasks, queued by no earlier run)", or with
        none "N requests back in the plan (... no new task)", as the config-change line says "no new task was
        planned"): a task an older plan held, planned again, is not asked again when its answer is stored. ``still_queued``: how many of the dropped tasks are still queued, unsent (at most :attr:`dropped`
        is said). ``fate``: what becomes of those: :data:`SET_ASIDE` (default; set aside now,
        :func:`geoagent.engine.set_aside_unplanned`), :data:`SENT_WHILE_WATCHING` (a ``--watch`` run over a
        crawl's folder sets none aside: they are sent all the same, their answers kept but not scored) or
        :data:`SET_ASIDE_ELSEWHERE` (a ``--stages`` process without the stage reading the plan edge: that stage's
        process sets them aside; ``still_queued`` not known)."""
        return plan_change_text(self.new, self.dropped, never_queued, still_queued, fate=fate)


def plan_change_text(new: int, dropped: int, never_queued: int | None = None, still_queued: int = 0, *,
                     fate: str | None = SET_ASIDE) -> str | None:
    """:meth:`PlanDiff.text` from its counts (``new`` and ``dropped`` tasks); None when both are 0. ``fate`` None:
    nothing said of what became of the dropped tasks (another process's count, repeated)."""
    if not new and not dropped:
        return None
    head = "plan changed since the last run: "
    if never_queued is not None and new and never_queued <= 0:  # all queued by an earlier (older) plan
        out = (f"{head}{count_text(new, 'request')} back in the plan (not in the last run's plan, but each queued by "
               "an earlier run: no new task)")
    elif never_queued is not None and never_queued < new:
        out = (f"{head}{count_text(new, 'request')} new to the plan (not in the last run's plan; "
               f"{count_text(never_queued, 'new task')}, queued by no earlier run)")
    else:
        out = f"{head}{count_text(new, 'request')} new (not planned before)"
    out += f", {dropped} planned before no longer in the plan"
    aside = min(max(0, still_queued), dropped)
    if not dropped or fate is None:
        return out
    if fate == SET_ASIDE_ELSEWHERE:
        return out + (" (those still queued are set aside unsent by the process that runs the stage reading the "
                      "planned work; the others' stored answers, where they have one, are kept but not scored)")
    if fate == SENT_WHILE_WATCHING and aside:
        still = "still queued" if aside == dropped else f"{aside} still queued"
        rest = "" if aside == dropped else "; the others' stored answers, where they have one, are kept but not scored"
        return out + (f" ({still}: a --watch run sets none aside, so they are sent all the same and their answers "
                      f"kept but not scored{rest})")
    if aside == dropped:
        return out + " (still queued: set aside unsent)"
    if aside:
        return out + (f" ({aside} still queued: set aside unsent; the others' stored answers, where they have one, "
                      "are kept but not scored)")
    # dropped tasks may have failed, not answered (walk39 #7: "their stored answers" for 170 dead-lettered tasks)
    return out + " (their stored answers, where they have one, are kept but not scored)"


#: planned task keys checked against the recorded plan at once (:class:`PlanDiff`)
PLAN_DIFF_CHUNK = 4096


def iter_plan_entries(state_dir: str | os.PathLike[str]) -> Iterator[tuple[str, str]] | None:
    """``(model, key)`` of each task of the recorded plan, or None when the campaign has no record."""
    path = plan_keys_path(state_dir)
    if not path.is_file():
        return None

    def gen() -> Iterator[tuple[str, str]]:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                model, _, key = line.rstrip("\n").partition("\t")
                if key:
                    yield model, key

    return gen()


def read_plan_keys(state_dir: str | os.PathLike[str]) -> frozenset[str] | None:
    """The recorded plan's task keys (memory: the whole key set), or None when the campaign has no record."""
    entries = iter_plan_entries(state_dir)
    return None if entries is None else frozenset(k for _, k in entries)


def answered_in_plan(state_dir: str | os.PathLike[str], queues_root: str | os.PathLike[str], campaign: str,
                     edge: str, *, chunk: int = 500, queue: Any = None) -> dict[str, int] | None:
    """Per model, how many tasks of the recorded plan are done on the plan edge ``edge`` (answered: the model
    caller stored their answer, on this machine or any other sharing the queue), read-only; None without a record
    or a queue (callers then fall back to the response store's count, cumulative over every plan). ``queue``: the
    edge's reader on a Redis campaign (:func:`geoagent.runtime.backend.plan_edge_reader`, ``count_done_sync``),
    which has no queue file under ``queues_root`` (redispace43: its shares used to count every stored answer,
    also those of tasks an earlier plan held); None: the SQLite file is read."""
    entries = iter_plan_entries(state_dir)
    if entries is None:
        return None
    if queue is not None:
        return queue.count_done_sync(entries)
    from geoagent.runtime.sqlite_queue import count_done

    return count_done(queues_root, campaign, edge, entries, chunk=chunk)


async def done_in_plan(state_dir: str | os.PathLike[str], queue: Any, *, chunk: int = 5000) -> dict[str, int] | None:
    """Per model (the plan record's model column, ``""`` for a payload without one), how many tasks of the recorded
    plan are done now in ``queue`` (the plan edge's :class:`~geoagent.runtime.queue.WorkQueue`, any backend: its
    :meth:`~geoagent.runtime.queue.WorkQueue.done_among`), read in chunks of ``chunk`` keys (memory: one chunk). A
    task whose key of an earlier geoagent version is done counts as done (:func:`geoagent.data.model.earlier_task_id`:
    the run moves its stored answer to the new key, upgrade41 B). None without a record, or when the queue cannot
    tell. For a config change's verdict (:func:`geoagent.runtime.drift.decide`, walk43 #1): done tasks the plan no
    longer holds are left out of scoring, so they mix with nothing."""
    from itertools import islice

    from geoagent.data.model import earlier_task_id

    entries = iter_plan_entries(state_dir)
    if entries is None:
        return None
    out: dict[str, int] = {}
    while part := list(islice(entries, chunk)):
        # each key asked for itself and, where it has one, for its earlier key (both stand for the same task)
        asked = {k: (m, k) for m, k in part}
        asked.update({e: (m, k) for m, k in part if (e := earlier_task_id(k)) is not None and e not in asked})
        done = await queue.done_among(list(asked))
        if done is None:
            return None
        for model, _ in {asked[k] for k in done}:
            out[model] = out.get(model, 0) + 1
    return out


def left_in_plan(state_dir: str | os.PathLike[str], queues_root: str | os.PathLike[str], campaign: str,
                 edge: str, *, chunk: int = 500, queue: Any = None) -> dict[str, int] | None:
    """Per model, how many tasks of the recorded plan are still to do on the plan edge ``edge`` (ready, also
    waiting for a retry, or leased), read-only; None without a record or a queue. One pass over the plan
    record (chunked: memory one chunk), made once when a run starts: the progress record then counts each
    model's tasks left as the run finishes them (:class:`geoagent.runtime.progress.Progress`, ``lane_work``),
    so no refresh of ``status`` or of the live display reads the queue per model. ``queue``: as for
    :func:`answered_in_plan` (``count_left_sync``; redispace43: a Redis campaign had no count, so no pacing).

    The queue's state is the count, not the stored answers against the plan: a task dead-lettered (or set aside)
    is no work left, though it has no answer; one done by another process or machine is none either (Redis keeps
    one state per task for every machine); a task reopened after its result was lost is work left, though its
    answer is stored."""
    entries = iter_plan_entries(state_dir)
    if entries is None:
        return None
    if queue is not None:
        return queue.count_left_sync(entries)
    from geoagent.runtime.sqlite_queue import count_left

    return count_left(queues_root, campaign, edge, entries, chunk=chunk)


def row_digest(row: Mapping[str, Any]) -> bytes:
    """A 16-byte digest of a scored row's content (canonical JSON, sorted keys; BLAKE2b): equal for a redelivered
    row, different for a row scored anew with another outcome (a live aggregator's check that a key it counted
    still holds what it counted)."""
    import hashlib

    import orjson

    return hashlib.blake2b(orjson.dumps(row, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS),
                           digest_size=16).digest()


def counted_anew(digests: dict[str, bytes], key: str, row: Mapping[str, Any]) -> bool:
    """Whether ``row`` (a scored row about to be counted under request ``key``) differs from the content counted
    before under that key, by :func:`row_digest`; ``digests`` (key -> digest, filled by
    :meth:`ScoredScope.items` and here) is updated to the new content. True: the row was scored anew with another
    outcome and a live aggregator must rebuild from the store; False for a first sighting or a redelivery."""
    digest = row_digest(row)
    if digests.setdefault(key, digest) == digest:
        return False
    digests[key] = digest
    return True


def live_missing_kw(live_missing: Callable[[], Mapping[str, Any]] | None, log: Any, report: str,
                    missing_csv: str) -> dict[str, Any]:
    """The missing work's keyword arguments of a live report rewrite (``write_report(..., **kw)``) from
    ``live_missing``, the campaign's ``live_missing`` service (GeoVerify, GeoHint); ``{}`` without one, or when
    it cannot be read: the queues may be briefly unreadable (e.g. locked), so ``log`` (the stage's logger) gets one
    warning naming ``report`` and ``missing_csv``, the tables are still rewritten and the earlier list is kept."""
    if live_missing is None:
        return {}
    try:
        return dict(live_missing())
    except Exception as exc:  # noqa: BLE001 - the tables still go out; the earlier list stays
        log.warning("%s live report: could not read the missing work (%s); %s left as it was", report, exc,
                    missing_csv)
        return {}


def twin_models(models: Iterable[Any]) -> list[tuple[str, str]]:
    """Pairs ``(first name, later name)`` of ``[[models]]`` entries that ask identical requests: the same provider,
    model id and request parameters (:meth:`geoagent.config.ModelConfig.default_params`), whatever their names
    (e.g. "GPT" and "gpt"). The request key hashes the provider, the model id, the prompt, the image and the
    parameters, not the entry's name (:func:`geoagent.providers.base.request_key`), so such twins share one stored
    answer per request: a report that counts each request once (GeoVerify) loses one twin, one that counts every
    task (GeoHint) counts each answer twice. The config already refuses twins that differ only in ``base_url``.
    Entries without :meth:`default_params` (not config model entries) are not compared."""
    import orjson

    first: dict[tuple[Any, ...], str] = {}
    out: list[tuple[str, str]] = []
    for m in models:
        try:
            params = orjson.dumps(m.default_params(), option=orjson.OPT_SORT_KEYS)
        except (AttributeError, TypeError):
            continue
        other = first.setdefault((m.provider, m.model, params), m.name)
        if other != m.name:
            out.append((other, m.name))
    return out


def twin_models_text(twins: list[tuple[str, str]]) -> str:
    """``"models 'a' and 'b' ask identical requests (same provider, model id and parameters)"`` for the pairs of
    :func:`twin_models` (joined with "; ")."""
    return "; ".join(f"models {a!r} and {b!r} ask identical requests (same provider, model id and parameters)"
                     for a, b in twins)


class ScoredScope:
    """Which stored scored rows a report counts: those of the current plan's tasks, each model request once.

    A re-run whose plan changed keeps the answers of the tasks the new plan no longer holds in the store;
    scoring them too pooled two designs (or sites and models the config no longer names). And two tasks can
    ask one request (GeoVerify: a swapped-image control drawing the same image with the same claim): one
    answer, scored once; this scope keeps the first stored row of a request key and counts the rest.

    Parameters
    ----------
    plan_keys : set of str or None
        The current plan's task keys (the scored table's keys); None counts every row.
    table : str
        The results table read by :meth:`rows`.
    request_key : callable, optional
        ``row -> request key or None``; rows with the same request key count once. Default: none repeat.
    fill : callable, optional
        ``(row, store) -> row`` applied to each counted row by :meth:`rows` (e.g. a finish reason from the
        response store).
    changed : str
        What a config change between runs changed, for :meth:`note` (e.g. ``"the trial design or the models"``).
    check : callable, optional
        ``row -> problem or None``: what makes a stored row no row of this table (not a JSON object, a field
        missing or of the wrong type), None when it is one. :meth:`items` raises the store's
        :class:`~geoagent.runtime.store.StoredRowError` (naming the file, table and key) for such a row before it
        is counted; the export checks each row so too (:meth:`checked`, ``export_all(checks=...)``).

    Attributes
    ----------
    not_planned : int
        Stored scored rows left out because their task is not in the current plan.
    repeated : int
        Rows left out because another counted row has the same request key (the same answer).
    repeated_examples : list of str
        Up to 5 ``"<left out key> repeats <counted key>"`` texts.
    """

    def __init__(self, plan_keys: set[str] | frozenset[str] | None, *, table: str,
                 request_key: Callable[[Mapping[str, Any]], Any] | None = None,
                 fill: Callable[[dict[str, Any], Any], dict[str, Any]] | None = None,
                 changed: str = "the config",
                 check: Callable[[Any], str | None] | None = None) -> None:
        self.plan_keys = plan_keys
        self._check = check
        self.table = table
        self._request_key = request_key
        self._fill = fill
        self.changed = changed
        self.not_planned = 0
        self.repeated = 0
        self.repeated_examples: list[str] = []
        self._by_request: dict[str, str] = {}

    def checked(self, store: Any, key: str, row: Any) -> Any:
        """``row`` (stored under ``key`` in ``store``) when it is a row of the table (the ``check`` given, if
        any), else the store's :class:`~geoagent.runtime.store.StoredRowError` naming the file, table and key.

        Raises
        ------
        geoagent.runtime.store.StoredRowError
            ``check`` found a problem (a ``ValueError``: the CLI prints one ``error:`` line, exit 2)."""
        problem = self._check(row) if self._check is not None else None
        if problem is None:
            return row
        from geoagent.runtime.store import StoredRowError

        make = getattr(store, "row_error", None)
        raise (make(self.table, key, problem) if callable(make)
               else StoredRowError(f"table {self.table!r}, row {key!r}: {problem}"))

    def _earlier_key_of_planned(self, key: str, row: Mapping[str, Any]) -> bool:
        """Whether ``key`` (not planned) is the key of an earlier geoagent version of a task the plan holds under
        another key (:data:`NOT_IN_PLAN_EARLIER_KEY`); no kind's keys changed but GeoVerify's, whose scope says."""
        return False

    def keep(self, key: str, row: Mapping[str, Any]) -> bool:
        """Whether the scored row ``row`` stored under ``key`` is counted (updates the tallies)."""
        return self.left_out(key, row) is None

    def left_out(self, key: str, row: Mapping[str, Any]) -> str | None:
        """Why the scored row ``row`` stored under ``key`` is not counted, None when it is (updates the tallies,
        as :meth:`keep`): :data:`NOT_IN_PLAN`, or ``"repeats the model request of <counted key> (one answer,
        counted once)"``. The scored exports' reason column (:meth:`mark`)."""
        if self.plan_keys is not None and key not in self.plan_keys:
            self.not_planned += 1
            return NOT_IN_PLAN_EARLIER_KEY if self._earlier_key_of_planned(key, row) else NOT_IN_PLAN
        rk = self._request_key(row) if self._request_key is not None else None
        if isinstance(rk, str) and rk:
            first = self._by_request.get(rk)
            if first is not None and first != key:
                self.repeated += 1
                if len(self.repeated_examples) < 5:
                    self.repeated_examples.append(f"{key} repeats {first}")
                return f"repeats the model request of {first} (one answer, counted once)"
            self._by_request[rk] = key
        return None

    def rows(self, store: Any) -> Iterator[dict[str, Any]]:
        """The counted rows of the results table (each passed through ``fill`` when given)."""
        for _key, row in self.items(store):
            yield row

    def items(self, store: Any, *, digests: dict[str, bytes] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """``(key, row)`` of the counted rows of the results table, in store order (each row passed through
        ``fill`` when given): :meth:`rows` with the keys. ``digests``: filled with each counted row's
        :func:`row_digest`, taken before ``fill`` (as the scorer sent the row)."""
        for key, row in store.iter_results(self.table):
            if self.keep(key, self.checked(store, key, row)):
                if digests is not None:
                    digests[key] = row_digest(row)
                yield key, (self._fill(row, store) if self._fill is not None else row)

    def mark(self, rows: Iterable[tuple[str, dict[str, Any]]], column: str = "scored", *,
             reason_column: str | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
        """``rows`` (``(key, row)`` in store order) each with ``row[column]`` = :meth:`keep`: the export's
        ``scored`` column, True exactly for the rows the report counts (same rule, same order); with
        ``reason_column``, ``row[reason_column]`` = :meth:`left_out` (None on a counted row), so a reader of the
        export tells a row of a task no longer planned, or a repeated request, from a scored one."""
        for key, row in rows:
            why = self.left_out(key, row)
            row[column] = why is None
            if reason_column is not None:
                row[reason_column] = why
            yield key, row

    def note(self) -> str | None:
        """A sentence on what was left out, for the report and the summary; None when nothing was."""
        parts = []
        if self.not_planned:
            one = self.not_planned == 1
            parts.append(f"{count_text(self.not_planned, 'stored answer')} of tasks the current plan no longer holds "
                         f"(an earlier run's plan: {self.changed} changed) {'is' if one else 'are'} kept in the store "
                         "but not scored")
        if self.repeated:
            one = self.repeated == 1
            parts.append(f"{count_text(self.repeated, 'answer')} {'repeats' if one else 'repeat'} a counted one's model "
                         f"request (same image shown, same claim: one answer) and {'is' if one else 'are'} counted once, "
                         "e.g. " + "; ".join(self.repeated_examples[:2]))
        return ("Left out of scoring: " + "; ".join(parts) + ".") if parts else None
