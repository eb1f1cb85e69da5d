"""Hot-path trims of the model-call pipeline (benchmarks/README.md, session 10) keep their behaviour.

* the secrets of a request are cached per (URL, credential headers, params): a per-call header that carries no
  credential (the request key) no longer defeats the cache, and the result is the one computed from scratch;
* ``ResponseStore.put_shielded`` queues the store + settle job at once and commits it even when the awaiting
  task is cancelled (as ``asyncio.shield(store.aput(...))`` did), so a stored answer is never lost to a stop;
* the model caller's per-key turn still serialises two tasks of one request key and forgets the key after.
"""

from __future__ import annotations

import asyncio

from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime import http as H
from geoagent.runtime.store import open_campaign_state
from geoagent.workers.model_caller import ModelCaller

URL = "http://127.0.0.1:9/v1/chat/completions?api_key=qs-secret-value-1234"
TOKEN = "tok-" + "abcdefghijklmnopqrst"


def test_request_secrets_cache_ignores_headers_without_credentials():
    H._request_secrets_cached.cache_clear()
    shown = []
    for i in range(5):
        headers = {"Content-Type": "application/json", "X-Request-Key": f"{i:064x}", "Authorization": f"Bearer {TOKEN}"}
        secrets, url = H._request_secrets(URL, None, headers)
        # what the uncached computation gives for the very same request
        expect = H._secrets_of(URL, None, headers)
        assert secrets == expect
        assert TOKEN in secrets and "qs-secret-value-1234" in secrets
        assert f"{i:064x}" not in secrets
        assert "qs-secret-value-1234" not in url
        shown.append(url)
    info = H._request_secrets_cached.cache_info()
    assert (info.misses, info.hits) == (1, 4)
    assert len(set(shown)) == 1
    # a different credential is a different entry, never the cached one
    other = "tok-" + "zyxwvutsrqponmlkjihg"
    secrets, _ = H._request_secrets(URL, None, {"X-Request-Key": "1", "Authorization": f"Bearer {other}"})
    assert other in secrets and TOKEN not in secrets


def test_has_secret_header_by_name():
    assert H._has_secret_header({"X-Api-Key": "v"})
    assert H._has_secret_header({"authorization": "Bearer x"})
    assert not H._has_secret_header({"X-Api-Key": ""})  # no value: nothing to protect
    assert not H._has_secret_header({"X-Request-Key": "abc", "Content-Type": "application/json"})
    assert not H._has_secret_header(None)


def test_put_shielded_commits_although_the_waiter_is_cancelled(tmp_path):
    async def main() -> None:
        st = open_campaign_state("c", root=tmp_path, cap_usd=10.0)
        try:
            res = st.ledger.reserve("k1", 0.5, model="m")
            resp = ModelResponse(text="answer", usage=Usage(100, 20))

            async def waiter() -> None:
                await st.store.put_shielded("k1", {"model": "m"}, resp, res, cost_usd=0.01)

            task = asyncio.create_task(waiter())
            await asyncio.sleep(0)  # the job is queued; cancel the waiter before the commit resolves it
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
            for _ in range(200):  # the database thread commits it anyway
                if await st.store.ahas("k1"):
                    break
                await asyncio.sleep(0.01)
            stored = await st.store.aget("k1")
            assert stored is not None and stored.text == "answer"
            totals = st.ledger.summary()
            assert abs(totals.spent_usd - 0.01) < 1e-9 and totals.reserved_usd == 0 and totals.calls == 1
        finally:
            st.close()

    asyncio.run(main())


def test_one_call_per_key_serialises_and_forgets():
    async def main() -> None:
        mc = ModelCaller(concurrency=4)
        order: list[str] = []

        async def call(name: str, key: str, hold_s: float) -> None:
            async with mc._one_call_per_key(key):
                order.append(f"{name}+")
                await asyncio.sleep(hold_s)
                order.append(f"{name}-")

        await asyncio.gather(call("a", "k", 0.05), call("b", "k", 0.0), call("c", "other", 0.0))
        assert order.index("a-") < order.index("b+")  # same key: one after the other
        assert order.index("c+") < order.index("a-")  # another key does not wait
        assert mc._key_locks == {}

        # a task cancelled while waiting for the key's turn leaves no entry behind
        async def holder() -> None:
            async with mc._one_call_per_key("k"):
                await asyncio.sleep(0.2)

        h = asyncio.create_task(holder())
        await asyncio.sleep(0.01)
        w = asyncio.create_task(call("w", "k", 0.0))
        await asyncio.sleep(0.01)
        assert mc._key_locks["k"][1] == 2
        w.cancel()
        try:
            await w
        except asyncio.CancelledError:
            pass
        assert mc._key_locks["k"][1] == 1
        await h
        assert mc._key_locks == {}

    asyncio.run(main())
