"""The ``generic`` campaign: N independent prompts per model, stored as results.

It exercises the whole runtime (planner -> requests -> model caller -> responses -> collector) with no
task-specific scoring: ``geoagent/configs/generic_demo.toml`` (a small runnable example; ``run.py demo`` does
not use it), the crash-safety test and the pipeline benchmark use it.

Config section ``[generic]``::

    n_requests = 200          # prompts per model (before each model's sampling_rate)
    image = false             # attach a synthetic placeholder image (image_ref "synthetic:<i>")

The end-of-run summary counts the stored results and, per model, the answers cut off at the output-token
limit (:mod:`geoagent.scoring.truncation`; each result row keeps the provider's ``finish_reason``), with a
legend line and a warning above 1 % naming ``[[models]] max_output_tokens``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from geoagent import constants as C
from geoagent.config import is_sampled, register_section
from geoagent.engine import CampaignKind
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import Message, Stage, StageContext
from geoagent.scoring.truncation import LEGEND_LINE as TRUNCATION_LEGEND
from geoagent.scoring.truncation import TruncationCount, warning_lines
from geoagent.workers.model_caller import ModelCaller
from geoagent.workers.responses import with_stored_finish_reason

RESULTS_TABLE = "results"


class GenericSection(BaseModel):
    """``[generic]``: size of the generic campaign."""

    model_config = ConfigDict(extra="forbid", strict=True)  # as the rest of the config: "6" is no number
    n_requests: int = Field(200, ge=0, description="prompts per model")
    image: bool = False


register_section("generic", GenericSection)


def _section(cfg: Any) -> GenericSection:
    sec = cfg.section("generic")
    if sec is None:
        return GenericSection()
    return sec if isinstance(sec, GenericSection) else GenericSection.model_validate(sec)


class Collector(Stage):
    """``responses`` -> results table ``results`` (one row per request; the end of the generic pipeline)."""

    name = "collector"
    sends_http = False  # no request of its own: a slow model upstream is no pace of its (pace_keys)
    input_edge = C.EDGE_RESPONSES
    output_edge = None
    concurrency = 64
    lease_batch = 256

    batched = True

    @staticmethod
    def _row(task: Task) -> dict[str, Any]:
        p = task.payload
        return {
            "model": p.get("model"),
            "request_key": p.get("request_key"),
            "index": (p.get("meta") or {}).get("index"),
            "text": p.get("text"),
            "input_tokens": p.get("input_tokens"),
            "output_tokens": p.get("output_tokens"),
            "cost_usd": p.get("cost_usd"),
            "cached": p.get("cached"),
            "finish_reason": p.get("finish_reason"),
            # False: the tokens and cost above are the worst case the call was booked at, the provider reported no
            # usable count (the model caller's message carries the field only then: geoagent.runtime.export,
            # "Usage reported")
            "usage_reported": p.get("usage_reported") is not False,
        }

    async def handle(self, task: Task, ctx: StageContext) -> list[Message]:
        await ctx.get("store").aput_result(RESULTS_TABLE, task.key, self._row(task))
        return []

    async def handle_batch(self, tasks: list[Task], ctx: StageContext) -> list[list[Message] | Exception]:
        """All rows of the batch in one transaction (the runner acks the tasks after it committed)."""
        await ctx.get("store").aput_results(RESULTS_TABLE, [(t.key, self._row(t)) for t in tasks])
        return [[] for _ in tasks]


class GenericCampaign(CampaignKind):
    kind = "generic"
    results_tables = (RESULTS_TABLE,)

    def stages(self, cfg: Any) -> list[Stage]:
        return [ModelCaller(), Collector()]

    async def plan(self, cfg: Any, ctx: StageContext) -> Iterator[Message]:
        """A generator of the request messages (the engine streams it into the queue in chunks)."""
        return self._messages(cfg)

    @staticmethod
    def _messages(cfg: Any) -> Iterator[Message]:
        sec = _section(cfg)
        # prompt by prompt, every model's request in turn: a run stopped early (cost cap, Ctrl-C) covers the
        # models evenly (the model caller dispatches in queue order); prompts stay in index order (they are
        # synthetic and alike), so the plan stays a lazy generator
        for i in range(sec.n_requests):
            for m in cfg.models:
                key = f"{m.name}|{i}"
                if not is_sampled(key, m.sampling_rate, cfg.campaign.seed):
                    continue
                yield (
                    key,
                    {
                        "model": m.name,
                        "prompt": f"Generic task {i}: describe in one sentence what a street photo of a city might show.",
                        "image_ref": f"synthetic:{i}" if sec.image else None,
                        "image_id": f"synthetic-{i}" if sec.image else None,
                        "params": {},
                        "meta": {"index": i},
                    },
                )

    def summary_lines(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[str]:
        store = ctx.get("store")
        n = store.count_results(RESULTS_TABLE)
        lines = [f"  results stored: {n}"]
        counts = truncation_by_model(store)
        if counts:
            lines.append("  cut off at the output-token limit: " + "; ".join(
                f"{m} {c.n_truncated} of {c.n} ({c.share:.1%})" for m, c in sorted(counts.items())))
            lines.append(f"  {TRUNCATION_LEGEND}")
            lines += [f"  {w}" for w in warning_lines(counts, setting="[[models]] max_output_tokens", scored=False)]
        return lines


def truncation_by_model(store: Any) -> dict[str, TruncationCount]:
    """Per model, the stored generic results cut off at the output-token limit (rows stored before the
    collector kept finish reasons take theirs from the response store; every answer counts as parsed)."""
    out: dict[str, TruncationCount] = {}
    for _key, row in store.iter_results(RESULTS_TABLE):
        with_stored_finish_reason(row, store)
        out.setdefault(str(row.get("model")), TruncationCount()).add(row.get("finish_reason"), True)
    return out
