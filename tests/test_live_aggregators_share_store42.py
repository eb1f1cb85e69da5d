"""Several live aggregators of one campaign rewrite one report folder from the store, not from their own share
(live42 #1).

Before: two ``run`` processes of a campaign, or ``run --stages aggregator --watch`` beside a full run, each leased
part of the scored rows, and each live aggregator rewrote ``report/`` from what the store held when it started
plus the rows it leased itself: the live report alternated between two partial sums (445 answers, then 170, with
568 stored). Now, while another live process of the campaign runs the aggregator stage (this machine's
``manifest.json``, :func:`geoagent.engine.aggregated_elsewhere`), each live rewrite first rebuilds the sums from
the store, so it covers every stored row whoever leased it; alone, a process never rebuilds.

The other process is real: a child Python process records itself in the campaign's manifest through the
engine's own :meth:`geoagent.runtime.manifest.Manifest.start_run` (``--stages aggregator``, as a scale-out
process does) and stays alive; the stage, the store (the campaign's SQLite file) and the report writer are the
real ones. The rows "the other process leased" are stored (the scorer stores each row before it sends it) and
never handed to this process's stage.
"""

from __future__ import annotations

import csv
import functools
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import anyio
from _model_harness import geoverify_replay_toml

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.data.importer import import_release
from geoagent.engine import aggregated_elsewhere
from geoagent.geoverify.score import scored_rows_from_release
from geoagent.geoverify.stages import SCORED_TABLE, GeoVerifyAggregatorStage
from geoagent.runtime.stage import StageContext, Task
from geoagent.runtime.backend import open_state

REPO = Path(__file__).resolve().parents[1]

#: the child: records a run of --stages aggregator in the campaign's manifest (the engine's call), then waits
OTHER_PROCESS = """
import sys, time
from geoagent.config import load_config
from geoagent.runtime.manifest import Manifest
Manifest(load_config(sys.argv[1])).start_run(command="run", extra={"stages": ["aggregator"]})
print("recorded", flush=True)
time.sleep(120)
"""


def _pooled_answers(report: Path) -> int:
    """The pooled "answers (all arms)" count of the live table (what the breaker sampled)."""
    for row in csv.DictReader(io.StringIO((report / "geoverify_table.csv").read_text(encoding="utf-8"))):
        if (row["section"], row["row"]) == ("Cut off at the output-token limit", "answers (all arms)"):
            return int(row["pooled"])
    raise AssertionError("no 'answers (all arms)' row in geoverify_table.csv")


def _campaign(tmp_path: Path, release_dir: Path):
    cfg_path = tmp_path / "gv.toml"
    cfg_path.write_text(geoverify_replay_toml(tmp_path, "gv-two-aggs", release_dir), encoding="utf-8")
    cfg = load_config(cfg_path)
    Path(cfg.state_dir()).mkdir(parents=True, exist_ok=True)
    rows = scored_rows_from_release(import_release(release_dir))
    items = [(f"{r['trial_id']}|{r['model']}", r) for r in rows]
    return cfg_path, cfg, items


def _run_stage(cfg, items, report: Path, *, with_service: bool) -> tuple[list[int], GeoVerifyAggregatorStage]:
    """Store a third of the rows, start the stage; then per round store 40 rows, hand 20 of them to the stage
    (the other 20: leased by the other process) and flush. Returns the pooled answers of each live rewrite."""
    seen: list[int] = []
    stage = GeoVerifyAggregatorStage(report_interval_s=0.0)
    with open_state(cfg) as state:
        third = len(items) // 3
        state.store.put_results(SCORED_TABLE, items[:third])
        services = {"store": state.store, "report_dir": report}
        if with_service:
            services[C.SERVICE_AGGREGATED_ELSEWHERE] = functools.partial(
                aggregated_elsewhere, cfg.state_dir(), [C.STAGE_AGGREGATOR], state.ledger)
        ctx = StageContext(cfg.name, services)

        async def main() -> None:
            await stage.start(ctx)
            at = third
            for _ in range(4):
                batch = items[at:at + 40]
                at += 40
                state.store.put_results(SCORED_TABLE, batch)  # the scorer stores before it sends
                for key, row in batch[::2]:  # this process's lease; the other half went to the other process
                    await stage.handle(Task(key, row, 0, "l"), ctx)
                stage.live.last_duration_s = 0.0  # no backoff wait (REWRITE_BACKOFF): not under test here
                await stage.flush(ctx)
                await stage.live.wait()
                seen.append(_pooled_answers(report))
            await stage.stop(ctx)

        anyio.run(main)
        stored = state.store.count_results(SCORED_TABLE)
    return seen + [stored], stage


def test_each_live_rewrite_covers_the_store_while_another_process_aggregates(tmp_path, release_dir):
    cfg_path, cfg, items = _campaign(tmp_path, release_dir)
    report = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(cfg_path)], stdout=subprocess.PIPE,
                             text=True, env=env)
    try:
        assert other.stdout.readline().strip() == "recorded"
        assert aggregated_elsewhere(cfg.state_dir(), [C.STAGE_AGGREGATOR])
        seen, stage = _run_stage(cfg, items, report, with_service=True)
    finally:
        other.kill()
        other.wait()
    *live, stored = seen
    third = len(items) // 3
    # every live rewrite: the rows stored by then (a third + 40 per round), not this process's share of them
    assert live == [third + 40 * (i + 1) for i in range(4)], (live, stored)
    # each live rewrite, and the final report at stop (no campaign engine here; review42b #2)
    assert stage.store_rebuilds == 5
    # the other process gone: no rebuild any more (a process alone counts every row itself)
    assert not aggregated_elsewhere(cfg.state_dir(), [C.STAGE_AGGREGATOR])


def test_alone_a_live_rewrite_counts_its_own_rows_and_never_rebuilds(tmp_path, release_dir):
    """Without another aggregator (the service says so) the stage keeps its incremental sums: the rows handed to
    it. Here half of each round is never handed to it, so its live report shows the sums the bug showed beside
    another process: what the store held at its start plus its own rows."""
    _cfg_path, cfg, items = _campaign(tmp_path, release_dir)
    assert not aggregated_elsewhere(cfg.state_dir(), [C.STAGE_AGGREGATOR])  # no manifest entry at all
    seen, stage = _run_stage(cfg, items, tmp_path / "report", with_service=True)
    *live, _stored = seen
    third = len(items) // 3
    assert live == [third + 20 * (i + 1) for i in range(4)]
    assert stage.store_rebuilds == 0


def test_rows_handled_during_a_rebuilding_rewrite_are_counted_once_after_it(tmp_path, release_dir):
    """A task handled while the report thread rebuilds the scope and sums is held whole and checked afterwards:
    counted once (the rebuild already holds it: a redelivery to the aggregator), never lost."""
    _cfg_path, cfg, items = _campaign(tmp_path, release_dir)
    report = tmp_path / "report"
    stage = GeoVerifyAggregatorStage(report_interval_s=0.0)
    gate = {"open": False}

    def slow_elsewhere() -> bool:  # the rebuild starts only once the loop handled a task meanwhile
        deadline = time.monotonic() + 10
        while not gate["open"] and time.monotonic() < deadline:
            time.sleep(0.01)
        return True

    with open_state(cfg) as state:
        ctx = StageContext(cfg.name, {"store": state.store, "report_dir": report,
                                      C.SERVICE_AGGREGATED_ELSEWHERE: slow_elsewhere})

        async def main() -> None:
            await stage.start(ctx)
            state.store.put_results(SCORED_TABLE, items[:50])
            await stage.flush(ctx)  # the rewrite starts, waiting in slow_elsewhere
            assert stage.live.busy
            key, row = items[0]
            await stage.handle(Task(key, row, 0, "l"), ctx)  # held, not checked against the old scope
            assert len(stage._held) == 1
            gate["open"] = True
            await stage.live.wait()
            await stage.stop(ctx)

        anyio.run(main)
    # the live rewrite, and the final report at stop (no campaign engine here; review42b #2)
    assert stage._held == [] and stage.store_rebuilds == 2
    assert stage.agg.scores() and _pooled_answers(report) == 50


def test_after_the_other_aggregator_ends_the_next_rewrite_rebuilds_once_more(tmp_path, release_dir):
    """review42b #2: the other process is killed after it handled its half of round 3. The survivor went back to its
    incremental sums at once: the last rebuild plus its own rows, without the other's rows of round 3 (and every
    rewrite after). Now the first rewrite after ``aggregated_elsewhere()`` turns false rebuilds once more, and every
    rewrite covers the store; after that one the survivor counts its own rows again, as a process alone does."""
    cfg_path, cfg, items = _campaign(tmp_path, release_dir)
    report = tmp_path / "report"
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    other = subprocess.Popen([sys.executable, "-c", OTHER_PROCESS, str(cfg_path)], stdout=subprocess.PIPE,
                             text=True, env=env)
    seen: list[tuple[int, int]] = []
    stage = GeoVerifyAggregatorStage(report_interval_s=0.0)
    try:
        assert other.stdout.readline().strip() == "recorded"
        with open_state(cfg) as state:
            third = len(items) // 3
            state.store.put_results(SCORED_TABLE, items[:third])
            ctx = StageContext(cfg.name, {"store": state.store, "report_dir": report,
                                          C.SERVICE_AGGREGATED_ELSEWHERE: functools.partial(
                                              aggregated_elsewhere, cfg.state_dir(), [C.STAGE_AGGREGATOR],
                                              state.ledger)})

            async def main() -> None:
                await stage.start(ctx)
                at = third
                for rnd in range(5):
                    batch = items[at:at + 40]
                    at += 40
                    state.store.put_results(SCORED_TABLE, batch)
                    if rnd == 2:  # the other process handled its half of this round, then was killed
                        other.kill()
                        other.wait()
                    # half of each round while the other process lives; every row once it is gone (redelivered)
                    for key, row in batch[::2] if rnd <= 2 else batch:
                        await stage.handle(Task(key, row, 0, "l"), ctx)
                    stage.live.last_duration_s = 0.0
                    await stage.flush(ctx)
                    await stage.live.wait()
                    seen.append((state.store.count_results(SCORED_TABLE), _pooled_answers(report)))
                state.store.put_results(SCORED_TABLE, items[at:at + 10])  # handed to no process before stop
                await stage.stop(ctx)
                seen.append((state.store.count_results(SCORED_TABLE), _pooled_answers(report)))

            anyio.run(main)
    finally:
        other.kill()
        other.wait()
    assert all(stored == pooled for stored, pooled in seen[:5]), seen
    # rounds 1-2 rebuilt (the other alive), round 3 once more (it just ended), rounds 4-5 counted their own rows
    assert stage.store_rebuilds == 3, stage.store_rebuilds
    assert seen[5][1] == seen[4][1], seen  # alone at stop: its own sums, no rebuild (the 10 were never handed to it)
