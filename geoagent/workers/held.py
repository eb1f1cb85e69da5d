"""What a model caller's breaker (authentication, path or model not found, unreachable host, empty answers) holds: per model, the keys of
the tasks it held unsent because that model's breaker is open (:mod:`geoagent.runtime.worker`, "Held tasks"), for
the end-of-run lines and the progress stream."""

from __future__ import annotations


class HeldTasks:
    """Per-model sets of held task keys (distinct keys: a task held twice counts once). Subclasses set
    ``self._held = {}`` in their ``__init__``."""

    _held: dict[str, set[str]]

    def hold(self, model: str, task_key: str) -> None:
        """Record that task ``task_key`` of ``model`` was held unsent because the model's breaker is open."""
        self._held.setdefault(model, set()).add(task_key)

    def held(self, model: str) -> int:
        """Tasks of ``model`` held unsent by its open breaker in this process (distinct task keys)."""
        return len(self._held.get(model, ()))
