"""Two tasks of one process that ask the very same request (same request key, different task keys) are in
flight together: only one call reaches the provider; the others wait for its stored answer (issue 2 point 6,
exactly-once spend; the model caller's per-request-key lock, across processes the ledger's open reservation).

Real stage, OpenAI provider, HTTP client, SQLite ledger and store, and the local OpenAI-compatible fake.
"""

from __future__ import annotations

import asyncio

from _model_harness import CallerRig, billed, photo_task, run, write_model_config
from geoagent.runtime.http import HttpClient
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY_VAR = "GA_TEST_SAME_KEY"
KEY = made_up_key("sk-", 32, seed="sandbox-samekey-n16")


def test_same_request_in_flight_twice_in_one_process_is_paid_once(tmp_path, monkeypatch):
    monkeypatch.setenv(KEY_VAR, KEY)
    app = make_app(seed=5)

    async def main():
        async with serve(app) as base:
            cfg = write_model_config(tmp_path / "c.toml", base, name="samekey", key_var=KEY_VAR)
            async with HttpClient() as http:
                rig = await CallerRig(tmp_path, cfg, http).start()
                # six tasks, three distinct requests (photo 0 asked by t0a/t0b/t0c, photo 1 by t1a/t1b, photo 2)
                tasks = [photo_task(0, key="t0a"), photo_task(0, key="t0b"), photo_task(1, key="t1a"),
                         photo_task(0, key="t0c"), photo_task(1, key="t1b"), photo_task(2, key="t2")]
                outs = await asyncio.gather(*(rig.handle(t) for t in tasks))
                summary = await rig.state.ledger.asummary()
                return outs, rig.reservations(), summary

    outs, reservations, summary = run(main(), 30)
    calls = billed(app["calls"])
    keys = [c["key"] for c in calls]
    assert len(keys) == 3 and len(set(keys)) == 3, keys  # one paid call per distinct request
    # every task got its answer; tasks of one request carry the same stored text
    texts = {}
    for task_key, out in zip(["t0a", "t0b", "t1a", "t0c", "t1b", "t2"], outs):
        assert len(out) == 1
        (_key, payload), = out
        texts.setdefault(task_key[:2], set()).add(payload["text"])
    assert all(len(v) == 1 for v in texts.values()) and len(texts) == 3
    # the ledger: three settled reservations, nothing open, spend = what the server billed
    assert sorted(s for _k, s in reservations) == ["settled"] * 3
    assert summary.calls == 3
