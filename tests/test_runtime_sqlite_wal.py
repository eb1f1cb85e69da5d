"""Several processes opening a NEW campaign database (or response cache) at the same instant.

Switching a fresh SQLite file to WAL needs a moment of exclusive access and SQLite may answer
"database is locked" at once instead of waiting; before ``geoagent.runtime.sqlite_wal.enable_wal`` the
campaign state failed this way in about half of the trials when 6 processes started together.
"""

from __future__ import annotations

import multiprocessing as mp
import time

import pytest


def _open_state(root: str) -> None:
    from geoagent.runtime.store import open_campaign_state

    state = open_campaign_state("c", root=root, cap_usd=1.0)
    state.ledger.reserve("k", 0.01)
    state.close()


def _open_cache(root: str) -> None:
    from geoagent.clients.cache import ResponseCache

    ResponseCache(f"{root}/cache.sqlite")


def _open_data_store(root: str) -> None:
    from geoagent.data.store import DataStore

    with DataStore(f"{root}/data/data.sqlite") as store:
        store.count("site")


def _opener(target, root: str, start_at: float, out: mp.Queue) -> None:
    """Child: wait for the common start time, open, report "ok" or the error."""
    while time.time() < start_at:
        pass
    try:
        target(root)
        out.put("ok")
    except Exception as exc:  # noqa: BLE001 - reported to the parent
        out.put(f"{type(exc).__name__}: {exc}")


@pytest.mark.parametrize("target", [_open_state, _open_cache, _open_data_store],
                         ids=["campaign-state", "response-cache", "data-store"])
def test_simultaneous_first_opens_never_fail(tmp_path, target):
    ctx = mp.get_context("fork")
    for trial in range(6):
        root = tmp_path / f"t{trial}"
        root.mkdir()
        out = ctx.Queue()
        start_at = time.time() + 0.4
        procs = [ctx.Process(target=_opener, args=(target, str(root), start_at, out)) for _ in range(6)]
        for p in procs:
            p.start()
        results = [out.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(10)
        assert results == ["ok"] * len(procs), (trial, results)
