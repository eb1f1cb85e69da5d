"""Stored swapped-image answers moved to the task keys that name the image shown (review41a #3).

Session 41 (fixverify41 #1) made a swapped-image control's task key name the image it shows
(``<trial_id>|shows=<image_ref>|<model>``, :func:`geoagent.data.model.make_task_id`); its answers were stored under
``<trial_id>|<model>`` before. On the first run after the upgrade the plan holds the new keys only, the model caller
answers them from the stored answers (same request: no call) and the scorer stores their rows again under the new
keys, while the rows under the earlier keys stayed: every later report said "Left out of scoring: N stored answers of
tasks the current plan no longer holds (an earlier run's plan: the trial design or the models changed)" and every
export held them again as ``scored = False``, though nothing had changed but the key.

A run now moves them before its workers start (:func:`move_swapped_rows`, called by
:meth:`geoagent.geoverify.campaign.GeoVerifyCampaign.refresh_scored_rows`): a stored row under an earlier key of a
swapped-image control (arm ``ctrl_mismatch``, key ``<trial_id>|<rest>`` with no ``shows=``) whose ``image_shown`` is
the image of a planned new key ``<trial_id>|shows=<image_shown>|<rest>`` is

* moved to the new key when that key has no row yet (the answer is about the image the task shows: what the scorer
  would have stored there; the task is still queued, and the scorer writes its row again when it is answered);
* dropped when the new key's row is the same answer (the same ``request_key``, in both rows and not empty: the
  scorer stored it again there; rows without a request key never count as the same answer, review41c #7);
* left as it is when the new key holds another answer (another request: the earlier answer stays out of scoring,
  as any answer of a task no longer planned).

A row whose image is not the one a planned key names (the trial's image was redrawn) is left as it is too. The
store decides between the three at the write (``store.move_results``): a row is written only under a new key that
has none then, and its earlier key dropped only when the new key holds its answer, so a row a scorer of another
process (a ``--stages`` run) stored under the new key after this run read it is kept, never overwritten by the
earlier answer (review41c #3). Each batch is one SQLite transaction or one Redis script that writes before it
deletes, so a run killed midway loses no row (at worst a row is under both keys, and the next run drops the
earlier one); a store with nothing to move is only read.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

from geoagent.data.model import ARM_MISMATCH, TASK_SHOWS_TAG
from geoagent.runtime.store import same_answer

#: rows moved or dropped per transaction
BATCH = 1000


def new_key(key: str, row: dict[str, Any]) -> str | None:
    """The task key naming the image shown (``<trial_id>|shows=<image_shown>|<rest>``) of a swapped-image control's
    row stored under its earlier key ``<trial_id>|<rest>``; None for any other row (another arm, a key that already
    names an image, a row without its trial id or image)."""
    tid, shown = row.get("trial_id"), row.get("image_shown")
    if row.get("arm") != ARM_MISMATCH or not isinstance(tid, str) or not isinstance(shown, str) or not shown:
        return None
    if not key.startswith(f"{tid}|") or key.startswith(f"{tid}|{TASK_SHOWS_TAG}"):
        return None
    return f"{tid}|{TASK_SHOWS_TAG}{shown}{key[len(tid):]}"


@dataclass(slots=True)
class Moved:
    """What :func:`move_swapped_rows` did: ``moved`` rows written under their new key, ``dropped`` rows whose answer
    the new key already held."""

    moved: int = 0
    dropped: int = 0

    def line(self, campaign: str) -> str | None:
        """The ``info:`` line a run prints, None when nothing moved."""
        n = self.moved + self.dropped
        if not n:
            return None
        return (f"info: campaign {campaign}: {n} stored swapped-image answer{'' if n == 1 else 's'} kept under "
                "the task key of an earlier geoagent version (before a swapped-image control's key named the image "
                f"it shows: <trial_id>|{TASK_SHOWS_TAG}<image>|<model>) {'is' if n == 1 else 'are'} now under the "
                f"new key ({self.moved} moved, {self.dropped} already stored there again and kept once); no model "
                "call, and none is left out of scoring for it.")


def move_swapped_rows(store: Any, table: str, plan_keys: Collection[str], *,
                      before_write: Callable[[], None] | None = None) -> Moved:
    """Move the rows of results table ``table`` stored under a swapped-image control's earlier task key to the new
    key of the plan (module docstring); ``plan_keys``: the current plan's task keys. ``before_write`` is called
    once before the first write (the run's work-began mark). Returns the counts."""
    out = Moved()
    moves: list[tuple[str, str, dict[str, Any]]] = []

    def flush() -> None:
        nonlocal before_write, moves
        if not moves:
            return
        if before_write is not None:
            before_write()
            before_write = None
        moved, dropped = store.move_results(table, moves)
        out.moved += moved
        out.dropped += dropped
        moves = []

    for key, row in store.iter_results(table):
        if not isinstance(row, dict):
            continue
        new = new_key(key, row)
        if new is None or new not in plan_keys:
            continue
        # a first look, so that a store holding other answers under the new keys is only read; the store decides
        # again at the write, since a scorer may store under the new key meanwhile (review41c #3)
        there = store.get_result(table, new)
        if there is not None and there != row and not same_answer(there, row):
            continue  # another answer under the new key: this one stays out of scoring, as any of an earlier plan
        moves.append((key, new, row))
        if len(moves) >= BATCH:
            flush()
    flush()
    return out

__all__ = ["BATCH", "Moved", "move_swapped_rows", "new_key"]
