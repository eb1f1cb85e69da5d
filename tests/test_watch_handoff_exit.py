"""A ``--watch`` run's idle hand-off thread reads no live container, and the run's exit path awaits it.

Defects (issue 2, watch mode, session 9):

1. ``run.py crawl ... --watch``: the idle hand-off (:meth:`geoagent.crawl.campaign.CrawlCampaign.idle_handoff`)
   ran in a worker thread and read the crawl services' live state there: the Mapillary client's set of
   thumbnail CDN hosts (:meth:`geoagent.crawl.stages.CrawlServices.api_stats`), which the event loop adds to as
   a new city's thumbnails come in. A host added mid-hand-off failed it with "RuntimeError: Set changed size
   during iteration" (logged as a warning, retried at the next change). Now the engine takes a snapshot of that
   state on the loop's thread (:meth:`geoagent.engine.CampaignKind.handoff_snapshot`) and the thread reads only
   the snapshot.
2. When the pipeline itself raised while a hand-off was writing, the engine skipped ``wait()``: the hand-off's
   failure went unlogged, and the process went on closing its services under the thread. Now the exit path
   awaits the hand-off in progress (shielded from cancellation) and logs its failure before the error goes on.
   The tables are written atomically (a temporary file of their own renamed over the target,
   :func:`geoagent.files.atomic_open`), so a failed hand-off leaves no partial table and no temporary file.

Deterministic: (1) the CDN host set of the real crawl services (built by the engine's own services over the
sandbox crawl config) blocks an iteration made off the loop's thread until the loop has added a host; (2) a
campaign kind whose second stage fails to start once the first hand-off is writing, real engine and queues.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import anyio
import pytest

from geoagent import engine
from geoagent.config import config_from_dict, load_config
from geoagent.crawl.campaign import SUMMARY_FILE, CrawlCampaign
from geoagent.crawl.stages import services_from_context
from geoagent.files import atomic_open
from geoagent.runtime.daemon import PipelineRun
from geoagent.runtime.queue import open_queue
from geoagent.runtime.stage import Stage
from geoagent.sandbox.launch import launch

REPO = Path(__file__).resolve().parents[1]
CRAWL_CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
FAILED = "idle hand-off failed"


class _GatedHosts(set):
    """A set of host names whose iteration from any thread but the one that made it (the event loop's)
    stops after its first item until ``proceed`` is set (``entered`` says it got there), so the loop can add a
    host in the middle of a reading thread's iteration, as a new city's first thumbnail does."""

    def __init__(self, items):
        super().__init__(items)
        self.owner = threading.get_ident()
        self.entered = threading.Event()
        self.proceed = threading.Event()
        self.readers: set[int] = set()

    def __iter__(self):
        me = threading.get_ident()
        self.readers.add(me)
        first = True
        for item in super().__iter__():
            yield item
            if first and me != self.owner:
                first = False
                self.entered.set()
                self.proceed.wait(10)


async def _finish_one(q, key: str) -> None:
    await q.put(key, {"k": key})
    tasks = await q.lease(1, 60.0)
    await q.ack(tasks)


async def _no_progress(view) -> None:
    return None


def test_crawl_idle_handoff_thread_reads_a_snapshot_not_the_live_host_set(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cfg0 = load_config(CRAWL_CONFIG)
    seen: dict[str, object] = {}

    async def main():
        async with launch(cfg0) as cfg, engine.open_services(cfg, require_keys=False) as ctx:
            svc = services_from_context(ctx)
            hosts = _GatedHosts({"cdn-a.sandbox.test", "cdn-b.sandbox.test"})
            svc.mapillary.thumb_hosts = hosts
            q = open_queue(tmp_path / "q", "h", "a")
            try:
                view = PipelineRun("h", [], {"a": q})
                on_tick = engine.kind_handoff_tick(CrawlCampaign(), cfg, ctx, _no_progress, export=False)
                await _finish_one(q, "k1")
                await on_tick(view)  # every queue idle after new work: the hand-off starts in its thread
                with anyio.fail_after(10):  # until the thread is inside the host set, or done without it
                    while on_tick.busy() and not hosts.entered.is_set():
                        await anyio.sleep(0.01)
                hosts.add("cdn-c.sandbox.test")  # the loop goes on: a new city's thumbnails on a new host
                hosts.proceed.set()
                await on_tick.wait()
                seen["readers"] = set(hosts.readers)
                seen["summary"] = Path(cfg.state_dir()) / "report" / SUMMARY_FILE
            finally:
                await q.close()

    with caplog.at_level(logging.WARNING, logger="geoagent.engine"):
        anyio.run(main)
    failed = [r.getMessage() for r in caplog.records if FAILED in r.getMessage()]
    assert failed == [], failed  # before: "RuntimeError: Set changed size during iteration"
    assert seen["readers"] == {threading.get_ident()}, "the hand-off thread iterated the live host set"
    assert Path(seen["summary"]).is_file()


# -- a pipeline that raises while a hand-off is writing ------------------------------------------------------

_started = threading.Event()  # the hand-off is writing
_go = threading.Event()  # the pipeline has failed: the hand-off may end
_ended = threading.Event()  # the hand-off's thread is done
_TABLE = "handoff_table.csv"


class _Done(Stage):
    """Acknowledges each task (the work whose drain starts the hand-off)."""

    name = "done"
    input_edge = "a"
    output_edge = None
    concurrency = 1

    async def handle(self, task, ctx):
        return []


class _FailsToStart(Stage):
    """Fails to start once the first hand-off is writing: the pipeline raises (a stage's start-up error)."""

    name = "broken"
    input_edge = "b"
    output_edge = None
    concurrency = 1

    async def start(self, ctx):
        with anyio.fail_after(30):
            while not _started.is_set():
                await anyio.sleep(0.02)
        _go.set()
        raise RuntimeError("stage broken failed to start")

    async def handle(self, task, ctx):
        return []


class CrashingKind(engine.CampaignKind):
    """One task on edge ``a``; its idle hand-off writes :data:`_TABLE` atomically and fails halfway."""

    kind = "generic"
    plan_edge = "a"
    plan_unit = "tasks"

    def stages(self, cfg):
        return [_Done(), _FailsToStart()]

    async def plan(self, cfg, ctx):
        return [("k1", {"k": 1})]

    async def report(self, cfg, ctx, outcome):
        return []

    def idle_handoff(self, cfg, ctx, *, export, complete, **kw):
        try:
            _started.set()
            _go.wait(10)
            with atomic_open(Path(cfg.state_dir()) / _TABLE, "w") as f:
                f.write("site,trial\n")
                f.write("s1,t1\n")
                raise OSError("disk full")
        finally:
            _ended.set()


def test_pipeline_failure_awaits_the_handoff_in_progress_and_logs_its_failure(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setitem(engine.KINDS, "generic", f"{__name__}:CrashingKind")
    for ev in (_started, _go, _ended):
        ev.clear()
    cfg = config_from_dict({
        "campaign": {"name": "handoff-crash", "kind": "generic", "seed": 1},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "sim", "provider": "simulated", "model": "sim-1", "max_output_tokens": 10}],
    })
    state = tmp_path / "state" / "handoff-crash"

    with caplog.at_level(logging.WARNING, logger="geoagent.engine"), pytest.raises(BaseException) as info:
        anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=False, watch=True))
    # when the run's error comes out, the hand-off has ended and its failure is in the log
    assert _ended.is_set(), "the run ended with its hand-off still writing"
    assert "stage broken failed to start" in repr(info.value) or any(
        "stage broken failed to start" in repr(e) for e in getattr(info.value, "exceptions", ()))
    failed = [r.getMessage() for r in caplog.records if FAILED in r.getMessage()]
    assert len(failed) == 1 and "disk full" in failed[0], failed
    # atomic write: no partial table, no temporary file
    left = sorted(p.name for p in state.iterdir()) if state.is_dir() else []
    assert _TABLE not in left and not [n for n in left if _TABLE.split(".")[0] in n], left
