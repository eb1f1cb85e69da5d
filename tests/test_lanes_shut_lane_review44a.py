"""review44a #3: a model whose key was refused (its lane shut: ``Stage.lane_open`` False) gets no lane quota, so the
model caller no longer leases its whole backlog only to hold it (Held tasks) while the other models work: its tasks
stay queued, visible to every other process, and the run still ends (it holds them once nothing else is left).

The real engine against the local OpenAI-compatible fake (``geoagent/sandbox/llm_openai``), which answers 401 to any
key but the one it was given: model ``ok`` has that key, model ``no`` another one.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table

from geoagent.config import load_config
from geoagent.engine import EXIT_AUTH, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

GOOD_KEY = made_up_key("sk-", 33, seed="shut-lane-good-44")
WRONG_KEY = made_up_key("sk-", 33, seed="shut-lane-wrong-44")
N = 60


def _by_lane(path: Path) -> dict[tuple[str, int], int]:
    """(lane, state) -> tasks, read as another process would (0 ready, 1 leased, 2 done, 3 dead)."""
    if not path.exists():
        return {}
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5)
    try:
        return {(lane, st): n for lane, st, n in
                conn.execute("SELECT lane, state, count(*) FROM tasks GROUP BY 1, 2")}
    except sqlite3.OperationalError:  # not made yet
        return {}
    finally:
        conn.close()


def test_a_refused_models_tasks_stay_queued_while_the_others_work(tmp_path, monkeypatch):
    app = llm_openai.make_app(api_keys=[GOOD_KEY])
    monkeypatch.setenv("OK_KEY", GOOD_KEY)
    monkeypatch.setenv("NO_KEY", WRONG_KEY)
    seen: list[dict[tuple[str, int], int]] = []

    async def main():
        async with serve(app) as base:
            models = (model_table("ok", base_url=base, key_var="OK_KEY", model="sim-ok", max_output_tokens=32,
                                  concurrency=2, rate_requests=20)
                      + model_table("no", base_url=base, key_var="NO_KEY", model="sim-no", max_output_tokens=32,
                                    concurrency=2, rate_requests=20))
            cfg = load_config(generic_campaign(tmp_path, name="shut", n=N, cap_usd=5.0, models=models,
                                               queue={"max_attempts": 5}))
            path = tmp_path / "queues" / "shut" / "requests.sqlite"
            outcome = None

            async def run() -> None:
                nonlocal outcome
                outcome = await run_campaign(cfg, live=False, handle_signals=False, export=False)

            with anyio.fail_after(120):  # the run ends (before the fix too); a hang would be a regression
                async with anyio.create_task_group() as tg:
                    tg.start_soon(run)
                    while outcome is None:
                        await anyio.sleep(0.05)
                        counts = _by_lane(path)
                        if counts.get(("ok", 0), 0) and counts.get(("ok", 2), 0) >= N // 4:
                            seen.append(counts)  # ok's work under way, a quarter done: no's breaker long open
            return outcome

    outcome = anyio.run(main)
    assert outcome.exit_code == EXIT_AUTH
    c = outcome.counts["requests"]
    assert c.done == N and c.ready == N and c.dead == 0  # every ok task done; no's all queued again at the end
    assert seen, "no sample taken while ok still had work"
    # before: ~all of no's N tasks leased (held) from its breaker's opening on; now only those in hand then
    assert max(s.get(("no", 1), 0) for s in seen) <= 4, seen
    assert min(s.get(("no", 0), 0) for s in seen) >= N - 4, seen
