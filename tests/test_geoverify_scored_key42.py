"""The scorer's write of a swapped-image task queued under its earlier key decides its key inside the write
(fixgeohint42 #3).

Before: :class:`geoagent.geoverify.stages.GeoVerifyScorerStage` looked under the new key (``store.aget_result``) and
then wrote (``store.aput_result``, overwrite): a row another process's scorer stored under the new key between the
look and the write was overwritten by this answer. Now one store call decides and writes
(``put_result_unless_other``: one SQLite transaction, one Redis script), as ``store.move_results`` does for the
run's move (review41c #3).

The other writer is another open handle of the same campaign state (another process's scorer); it writes at the
last moment before this scorer's write reaches the results table: :class:`OtherWriterFirst` delegates every call to
the real store and runs the other writer once, just before the first call that writes the scored table. Under the
earlier look-then-write that is after the look, so the interleaving is deterministic. Both backends (SQLite, Redis on
the test module's redis-server).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from _state_backends import KINDS, open_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.stages import SCORED_TABLE, SERVICE_PLAN_KEYS, GeoVerifyScorerStage
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext

TID = "100|ctrl_mismatch|Juniper Park"
OLD, NEW = f"{TID}|m", f"{TID}|shows=200|m"
#: the swapped-image control's trial as its task carries it (``image_ref``: the image it shows)
TRIAL = {"trial_id": TID, "image_id": "100", "image_ref": "200", "site": "s1", "arm": "ctrl_mismatch",
         "band": "control", "truth": "no", "cand": "Juniper Park", "d_km": None, "referenceability": 3.0}


def _answer(request_key: str, verdict: str = "no") -> dict[str, Any]:
    """An ``answers`` payload of the trial, parsed by the current parser."""
    from geoagent.geoverify.parse import VERDICT_PARSER_VERSION

    return {"model": "m", "request_key": request_key, "trial": TRIAL, "finish_reason": "stop",
            "parsed": parse_verdict(f'{{"verdict": "{verdict}", "confidence": 0.8}}').to_json(),
            "parser_version": VERDICT_PARSER_VERSION}


class OtherWriterFirst:
    """The campaign's real store, with ``other`` (a callable: another process's write) run once, just before the
    first call through this object that writes results table ``geoverify_scored``."""

    WRITES = ("put_result", "put_results", "aput_result", "aput_results", "put_result_unless_other",
              "aput_result_unless_other", "move_results")

    def __init__(self, store: Any, other: Callable[[], None]) -> None:
        self.store, self.other, self.ran = store, other, False

    def __getattr__(self, name: str) -> Any:
        real = getattr(self.store, name)
        if name not in self.WRITES:
            return real

        def first_the_other(table: str, *args: Any, **kwargs: Any) -> Any:
            if table == SCORED_TABLE and not self.ran:
                self.ran = True
                self.other()
            return real(table, *args, **kwargs)

        return first_the_other


def _score(store: Any, key: str, answer: dict[str, Any]) -> tuple[str, dict]:
    """The scorer's ``(key, row)`` for the task ``key`` of ``answer``, with ``store`` as its store service and the
    plan holding the new key; run on a thread of its own (its own event loop: another process's scorer runs while
    this test's scorer waits in its own loop)."""
    ctx = StageContext(campaign="sk42", services={"store": store, SERVICE_PLAN_KEYS: {NEW}})
    out: list[Any] = []
    thread = threading.Thread(target=lambda: out.extend(
        asyncio.run(GeoVerifyScorerStage().handle(Task(key, answer, 0, "l1"), ctx))))
    thread.start()
    thread.join(60)
    assert len(out) == 1, "the scorer did not finish"
    return out[0]


@pytest.mark.parametrize("kind", KINDS)
def test_another_answer_stored_under_the_new_key_during_the_scoring_is_kept(tmp_path, kind, request):
    """Another process's scorer stores another answer (request ``rB``) under the new key after this scorer began
    the old-key task (request ``rA``): that row stays, and this one goes under the task's own (earlier) key, left out
    of scoring as the move leaves it. Before, the look saw no row and the write overwrote ``rB``'s."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    with open_state(kind, url, "sk42a", tmp_path) as st, open_state(kind, url, "sk42a", tmp_path) as other:
        theirs: dict[str, tuple[str, dict]] = {}
        # the other process's scorer of the new-key task (the plan's): its row goes under the new key
        proxy = OtherWriterFirst(st.store, lambda: theirs.setdefault(
            NEW, _score(other.store, NEW, _answer("rB", "yes"))))
        key, row = _score(proxy, OLD, _answer("rA"))
        assert proxy.ran and theirs[NEW][0] == NEW
        assert key == OLD and row["request_key"] == "rA"
        stored = dict(st.store.iter_results(SCORED_TABLE))
        assert stored == {NEW: theirs[NEW][1], OLD: row}
        assert stored[NEW]["request_key"] == "rB"  # was overwritten by rA's row


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_answer_stored_under_the_new_key_meanwhile_is_replaced_by_this_scoring(tmp_path, kind, request):
    """The other process stored this answer (the same request) under the new key meanwhile: this scoring of it is
    written there (as a redelivered task overwrites its own row), not under the earlier key."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    with open_state(kind, url, "sk42b", tmp_path) as st, open_state(kind, url, "sk42b", tmp_path) as other:
        earlier = {"trial_id": TID, "arm": "ctrl_mismatch", "image_shown": "200", "model": "m", "request_key": "rA",
                   "verdict": None}
        proxy = OtherWriterFirst(st.store, lambda: other.store.put_result(SCORED_TABLE, NEW, earlier))
        key, row = _score(proxy, OLD, _answer("rA"))
        assert proxy.ran and key == NEW
        stored = dict(st.store.iter_results(SCORED_TABLE))
        assert stored == {NEW: row} and row["verdict"] == "no"


@pytest.mark.parametrize("kind", KINDS)
def test_two_scorers_of_the_old_key_task_with_different_answers_keep_both(tmp_path, kind, request):
    """Two processes score the same old-key task from two answers (two requests: e.g. the task delivered again after
    a prompt change): the first write takes the new key, the second finds another answer there and goes under the
    earlier key; neither row is lost, whichever order they reach the store in."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    for n, first in enumerate(("rA", "rB")):
        second = "rB" if first == "rA" else "rA"
        with open_state(kind, url, f"sk42c{n}", tmp_path) as st, \
                open_state(kind, url, f"sk42c{n}", tmp_path) as other:
            got: dict[str, tuple[str, dict]] = {}
            proxy = OtherWriterFirst(st.store, lambda: got.setdefault(first, _score(other.store, OLD, _answer(first))))
            got[second] = _score(proxy, OLD, _answer(second, "yes"))
            assert (got[first][0], got[second][0]) == (NEW, OLD)
            stored = dict(st.store.iter_results(SCORED_TABLE))
            assert stored == {NEW: got[first][1], OLD: got[second][1]}


@pytest.mark.parametrize("kind", KINDS)
def test_the_store_decides_at_the_write(tmp_path, kind, request):
    """``put_result_unless_other`` alone: a free key is taken; a key holding the same request is overwritten; a key
    holding another request, or a row without a request key (never the same answer, review41c #7), or a row that
    is not JSON the store can read as a row, is kept and the fallback key written."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    with open_state(kind, url, "sk42d", tmp_path) as st:
        s = st.store
        assert s.put_result_unless_other(SCORED_TABLE, "k1", {"request_key": "r1", "v": 1}, "f1") == "k1"
        assert s.put_result_unless_other(SCORED_TABLE, "k1", {"request_key": "r1", "v": 2}, "f1") == "k1"
        assert s.get_result(SCORED_TABLE, "k1") == {"request_key": "r1", "v": 2}
        assert s.put_result_unless_other(SCORED_TABLE, "k1", {"request_key": "r2", "v": 3}, "f1") == "f1"
        assert s.get_result(SCORED_TABLE, "k1") == {"request_key": "r1", "v": 2}
        assert s.get_result(SCORED_TABLE, "f1") == {"request_key": "r2", "v": 3}
        s.put_result(SCORED_TABLE, "k2", {"v": 0})
        assert s.put_result_unless_other(SCORED_TABLE, "k2", {"v": 0}, "f2") == "f2"  # no request key: not the same
        assert s.put_result_unless_other(SCORED_TABLE, "k3", {"request_key": "", "v": 4}, "f3") == "k3"
        assert s.put_result_unless_other(SCORED_TABLE, "k3", {"request_key": "", "v": 5}, "f3") == "f3"
        assert sorted(s.result_keys(SCORED_TABLE)) == ["f1", "f2", "f3", "k1", "k2", "k3"]
        assert s.count_results(SCORED_TABLE) == 6 and SCORED_TABLE in s.result_tables()
