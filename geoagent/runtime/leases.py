"""Lease heartbeat: a stage runner keeps the leases of the tasks it works on from expiring.

A task's lease lasts ``visibility_timeout_s`` from the moment it is leased, so that a crashed worker's tasks
come back. A live worker may legitimately need longer: a task leased ahead waits for a free slot first, and
one task may spend minutes in HTTP retries, rate-limit waits and host pauses (the public Overpass: 1 request
per 10 s, 4 attempts with backoff up to 120 s). Without renewal its lease expires meanwhile, another worker
(or the same runner's next lease) takes the task and does it again, and the first finisher's ack meets a
stale lease ("stale lease ignored"). :class:`LeaseKeeper` renews, every third of the visibility timeout, the
lease of every task the runner has leased and not yet settled (:meth:`WorkQueue.extend`), for another full
visibility timeout. A crashed process renews nothing, so its tasks still come back one visibility timeout
later at the latest (a campaign run hands a dead process's leases back sooner: :func:`geoagent.engine.run_lock`,
its start-up scan and periodic dead-owner sweep; that hand-back counts one delivery of each task, a timeout alone
counts none, since the holder of a timed-out lease may be alive, as below). Held tasks (:mod:`geoagent.runtime.worker`, "Held tasks") are settled as far as the keeper goes: their
leases expire as designed. A backend without ``extend`` (it returns None) is simply not renewed. A lease that expires
anyway while a worker of the runner is still on its task (the wall clock, which lease deadlines use, stepped forward
past the visibility timeout, or the process was stopped that long) and comes back to the same runner at its next
lease is kept for that worker (:meth:`LeaseKeeper.relet`; :mod:`geoagent.runtime.worker`, "Leases taken again").

Renewal has a ceiling: a task hanging in :meth:`Stage.handle` (a call that never returns) must not keep its
lease for the life of the process (days under ``run --watch``). When a worker starts handling a task the runner
sets its deadline (:meth:`LeaseKeeper.limit`: the stage's task ceiling, ``[queue] task_timeout_s``;
:mod:`geoagent.runtime.worker`, "Task ceiling"); the runner cancels the task at that moment and gives it back
(nacked with its reason), and the keeper renews its lease no more after it, so even a handler that ignores the
cancellation loses the task one visibility timeout later, like a crashed worker's (logged once per task).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable

import anyio

from geoagent.runtime.queue import Task, WorkQueue

log = logging.getLogger(__name__)

#: leases are renewed every visibility timeout divided by this
RENEW_DIVISOR = 3.0


class LeaseKeeper:
    """Renews the leases of one runner's unsettled tasks (module docstring).

    Parameters
    ----------
    queue : WorkQueue
        The runner's input queue.
    visibility_timeout_s : float
        The lease length the runner leases with, in seconds (> 0); renewed every third of it, for a full one.
    """

    def __init__(self, queue: WorkQueue, visibility_timeout_s: float) -> None:
        if not visibility_timeout_s > 0:
            raise ValueError(f"visibility_timeout_s must be > 0, got {visibility_timeout_s!r}")
        self.queue = queue
        self.visibility_timeout_s = float(visibility_timeout_s)
        self._live: dict[str, Task] = {}
        #: task key -> the lease id its worker holds, for a task leased again here while that worker was still on
        #: it (:meth:`relet`): ``_live`` then holds the new lease, and the worker's task still settles it
        self._held_as: dict[str, str] = {}
        #: task key -> ``time.monotonic()`` after which its lease is renewed no more (module docstring)
        self._until: dict[str, float] = {}
        self.renewals = 0  # leases renewed (for tests and diagnostics)
        self.given_up = 0  # leases no longer renewed because their task passed its ceiling

    def add(self, tasks: Iterable[Task]) -> None:
        """Tasks just leased: keep their leases until :meth:`drop` (or the deadline :meth:`limit` sets)."""
        for t in tasks:
            self._live[t.key] = t

    def _holds(self, task: Task) -> bool:
        """Whether ``task`` (a worker's) is the one this keeper renews, under its own lease or a newer one."""
        cur = self._live.get(task.key)
        return cur is not None and (cur.lease_id == task.lease_id or self._held_as.get(task.key) == task.lease_id)

    def relet(self, task: Task) -> bool:
        """``task`` was just leased, but this keeper already holds its key under an older lease: the lease expired
        while a worker of the runner was still on the task (the wall clock stepped forward past the visibility
        timeout: a suspend and resume, an NTP step; or the process was stopped that long), and the queue handed
        it out again, here. Renew the new lease from now on, for the worker already on the task, and return True
        (the runner does not hand it to a second worker); False when the key is not held here."""
        cur = self._live.get(task.key)
        if cur is None or cur.lease_id == task.lease_id:
            return False
        self._held_as.setdefault(task.key, cur.lease_id)
        self._live[task.key] = task
        return True

    def limit(self, task: Task, until: float) -> None:
        """Renew ``task``'s lease no more after ``until`` (``time.monotonic()`` seconds; ``math.inf``: no limit, also
        lifting one set before): its ceiling, set when a worker starts handling it, lifted while the task waits for
        its host's slots (module docstring; :mod:`geoagent.runtime.worker`, "Task ceiling")."""
        if self._holds(task):
            if until < math.inf:
                self._until[task.key] = until
            else:
                self._until.pop(task.key, None)

    def drop(self, tasks: Iterable[Task]) -> None:
        """Tasks settled (handled: outputs pending commit, failed, held or released): stop renewing them."""
        for t in tasks:
            if self._holds(t):
                del self._live[t.key]
                self._until.pop(t.key, None)
                self._held_as.pop(t.key, None)

    async def run(self) -> None:
        """Renew every ``visibility_timeout_s / 3`` seconds until cancelled (the runner's task group)."""
        while True:
            await anyio.sleep(self.visibility_timeout_s / RENEW_DIVISOR)
            if not await self.renew():
                return

    async def renew(self) -> bool:
        """Renew the live leases once; False when the queue cannot extend leases (nothing more to do)."""
        if self._until:
            now = time.monotonic()
            over = [self._live[k] for k, until in self._until.items() if until <= now and k in self._live]
            for t in over:
                log.warning("task %s on %s: still being handled past its ceiling; its lease is renewed no more and "
                            "expires within %g s", t.key, getattr(self.queue, "name", "?"), self.visibility_timeout_s)
            self.given_up += len(over)
            self.drop(over)
        tasks = list(self._live.values())
        if not tasks:
            return True
        try:
            stale = await self.queue.extend(tasks, self.visibility_timeout_s)
        except Exception as exc:  # noqa: BLE001 - a failed renewal is retried at the next beat
            log.warning("could not renew %d lease(s) on %s: %s", len(tasks), getattr(self.queue, "name", "?"), exc)
            return True
        if stale is None:
            return False
        self.renewals += len(tasks) - len(stale)
        gone = set(stale)
        for t in tasks:
            if t.key in gone and self._live.get(t.key) is t:
                del self._live[t.key]
                self._until.pop(t.key, None)
                self._held_as.pop(t.key, None)
        return True
