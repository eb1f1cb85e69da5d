"""Shared set-up for the tests of work that reaches a ``--stages`` process's input just after its stage drained
(engine: ``arrived_late``; the tests named ``*stages*drain*``).

The arrival is made deterministic with the queue's own operations: the answers a real ``--stages model_caller``
run queued are held as dead letters while the downstream process starts (:func:`hold_ready`), and put back to
ready the moment its runner finds its input exhausted (:func:`arrive_after_drain`), i.e. between the runner's
end and the engine's count. Nothing here is a mock: the queue, the runner and the engine are the real ones.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio

from geoagent.runtime import worker as worker_mod

#: the generic campaign's last stage (geoagent/campaigns/generic.py)
COLLECTOR = "collector"


def hold_ready(open_q: Callable[[], Any]) -> list[str]:
    """Lease every ready task of the queue ``open_q()`` opens and dead-letter it ("held by the test"); return their
    keys, sorted. The queue is closed again."""

    async def go() -> list[str]:
        q = open_q()
        try:
            tasks = await q.lease(100, 300.0)
            for t in tasks:
                await q.dead_letter(t, "held by the test")
            return sorted(t.key for t in tasks)
        finally:
            await q.close()

    return anyio.run(go)


def arrive_after_drain(monkeypatch: Any, stage: str = COLLECTOR, *, keys: Sequence[str] | None = None,
                       then: Callable[[], None] | None = None) -> list[int]:
    """Patch :meth:`StageRunner._input_exhausted` so that the first time ``stage``'s runner finds its input
    exhausted, the held tasks of its input (``keys``, default all) go back to ready (another process's work,
    just after the drain) and ``then()`` runs (e.g. a stop signal in the same window). Returns the list that
    receives how many tasks came back (empty until then)."""
    original = worker_mod.StageRunner._input_exhausted
    arrived: list[int] = []

    async def exhausted_then_work_arrives(self: Any) -> bool:
        got = await original(self)
        if got and self.stage.name == stage and not arrived:
            arrived.append(await self.inq.requeue_dead(list(keys) if keys is not None else None))
            if then is not None:
                then()
        return got

    monkeypatch.setattr(worker_mod.StageRunner, "_input_exhausted", exhausted_then_work_arrives)
    return arrived
