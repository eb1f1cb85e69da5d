"""Swapped-image answers stored under their task's key of before the key named the image are moved to the new key
(review41a #3).

Before: a GeoVerify campaign upgraded past fixverify41 #1 (a swapped-image control's task key now names the image it
shows: ``<trial_id>|shows=<image_ref>|<model>``) answered the new keys from its stored answers (no call) and kept
the rows under the earlier keys too: every later run said "Left out of scoring: 52 stored answers of tasks the
current plan no longer holds (an earlier run's plan: the trial design or the models changed)" and every export held
the rows twice. Now a run moves them before its workers start (:mod:`geoagent.geoverify.rekey`).

Unit cases over both campaign-state backends (SQLite, Redis on a local redis-server); the end-to-end case runs a
GeoVerify campaign over the session's sandbox crawl through the CLI entry.
"""

from __future__ import annotations

import sqlite3

import pytest
from _state_backends import KINDS, open_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

from geoagent.data.model import earlier_task_id
from geoagent.geoverify.rekey import move_swapped_rows, new_key
from geoagent.geoverify.stages import SCORED_TABLE

TID = "100|ctrl_mismatch|Juniper Park"


def _row(tid: str, shown: str, request_key: str, arm: str = "ctrl_mismatch") -> dict:
    return {"trial_id": tid, "arm": arm, "image_shown": shown, "model": "m", "verdict": "no",
            "request_key": request_key}


def _sandbox_campaign(sandbox_crawled, capsys, *args: str):
    """The swapped-image campaign over the session's sandbox crawl, run once with ``args`` (e.g. ``--stages ...``):
    (its config path, the state root)."""
    from test_geoverify_redrawn_mismatch41 import _config

    from geoagent.cli import main

    root, _ = sandbox_crawled
    state = root / "state"
    p = _config(root, state / "crawl-sandbox", state / "images")
    capsys.readouterr()
    assert main(["run", str(p), *args, "--no-live"]) == 0
    capsys.readouterr()
    return p, state


def test_new_key_names_the_image_shown_of_an_earlier_swapped_image_key():
    assert new_key(f"{TID}|m", _row(TID, "200", "r")) == f"{TID}|shows=200|m"
    assert new_key(f"{TID}|m|rec", _row(TID, "200", "r")) == f"{TID}|shows=200|m|rec"  # a replay of a recording
    assert new_key(f"{TID}|shows=200|m", _row(TID, "200", "r")) is None  # already the new key
    assert new_key("100|main|Juniper Park|m", _row("100|main|Juniper Park", "100", "r", arm="main")) is None
    assert new_key(f"{TID}|m", {**_row(TID, "200", "r"), "image_shown": None}) is None
    assert new_key("other|m", _row(TID, "200", "r")) is None  # a key that is not its trial's


@pytest.mark.parametrize("kind", KINDS)
def test_rows_under_earlier_keys_are_moved_once(tmp_path, kind, request):
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    rows = {
        f"{TID}|m": _row(TID, "200", "rA"),  # its new key has no row: moved
        "101|ctrl_mismatch|Loquat Hotel|m": _row("101|ctrl_mismatch|Loquat Hotel", "201", "rB"),  # stored again
        "101|ctrl_mismatch|Loquat Hotel|shows=201|m": _row("101|ctrl_mismatch|Loquat Hotel", "201", "rB"),
        "102|ctrl_mismatch|Fig Tower|m": _row("102|ctrl_mismatch|Fig Tower", "202", "rC-old"),  # another answer there
        "102|ctrl_mismatch|Fig Tower|shows=202|m": _row("102|ctrl_mismatch|Fig Tower", "202", "rC"),
        "103|ctrl_mismatch|Elm Hall|m": _row("103|ctrl_mismatch|Elm Hall", "299", "rD"),  # image redrawn since
        "100|main|Juniper Park|m": _row("100|main|Juniper Park", "100", "rE", arm="main"),
    }
    plan = {f"{TID}|shows=200|m", "101|ctrl_mismatch|Loquat Hotel|shows=201|m",
            "102|ctrl_mismatch|Fig Tower|shows=202|m", "103|ctrl_mismatch|Elm Hall|shows=203|m",
            "100|main|Juniper Park|m"}
    with open_state(kind, url, "rk41", tmp_path) as st:
        st.store.put_results(SCORED_TABLE, list(rows.items()))
        began = []
        got = move_swapped_rows(st.store, SCORED_TABLE, plan, before_write=lambda: began.append(
            sorted(k for k, _ in st.store.iter_results(SCORED_TABLE))))
        assert (got.moved, got.dropped, len(began)) == (1, 1, 1)
        assert began[0] == sorted(rows)  # the work-began mark before anything was written
        after = dict(st.store.iter_results(SCORED_TABLE))
        assert after[f"{TID}|shows=200|m"] == rows[f"{TID}|m"]
        gone = {f"{TID}|m", "101|ctrl_mismatch|Loquat Hotel|m"}
        assert set(after) == set(rows) - gone | {f"{TID}|shows=200|m"}
        assert st.store.get_result(SCORED_TABLE, f"{TID}|m") is None
        assert "2 stored swapped-image answers" in got.line("rk41") and "(1 moved, 1 already stored" in got.line("rk41")
        again = move_swapped_rows(st.store, SCORED_TABLE, plan, before_write=lambda: began.append("again"))
        assert (again.moved, again.dropped, again.line("rk41"), len(began)) == (0, 0, None, 1)


def test_an_upgraded_campaign_no_longer_leaves_its_earlier_keys_out_of_scoring(sandbox_crawled, capsys):
    """The earlier keys' rows (what a campaign run before the key change and re-run after it holds: each answer
    under both keys) are dropped by the next run: its summary, report and export count each answer once."""
    import polars as pl

    from geoagent.cli import main
    from geoagent.runtime.store import open_campaign_state

    p, state = _sandbox_campaign(sandbox_crawled, capsys)
    with open_campaign_state("gv-redraw", root=state) as st:
        rows = dict(st.store.iter_results(SCORED_TABLE))
        earlier = {earlier_task_id(k): r for k, r in rows.items() if "|shows=" in k}
        assert earlier and all(new_key(k, r) in rows for k, r in earlier.items())
        st.store.put_results(SCORED_TABLE, list(earlier.items()))
    n = len(earlier)

    assert main(["run", str(p), "--no-live"]) == 0
    out = capsys.readouterr()
    assert (f"{n} stored swapped-image answers kept under the task key of an earlier geoagent version" in out.err
            and f"(0 moved, {n} already stored there again and kept once)" in out.err), out.err[-3000:]
    assert "Left out of scoring" not in out.out, out.out
    with open_campaign_state("gv-redraw", root=state) as st:
        assert dict(st.store.iter_results(SCORED_TABLE)) == rows
    assert main(["export", str(p)]) == 0
    df = pl.read_parquet(state / "gv-redraw" / "geoverify_scored.parquet")
    assert df.height == len(rows) and df["scored"].all()
    assert main(["run", str(p), "--no-live"]) == 0  # nothing more to move: said once
    assert "swapped-image answer" not in capsys.readouterr().err


def test_a_redis_move_stopped_half_way_loses_no_row(tmp_path, redis_url):  # noqa: F811 - the fixture
    """review41c #4: the Redis move was one MULTI of the rows' write script and the deletes of the earlier keys;
    Redis transactions do not roll back, so when the script failed (a write refused when the server is out of
    memory) the deletes still ran and the moved rows were gone from both keys. Now one script writes every row
    before it deletes any. Staged here by a script error at its first row's key index entry (the table's index key
    holds a string), after that row's write, before the second's: both rows are still stored."""
    import redis

    rows = {f"{TID}|m": _row(TID, "200", "rA"), "101|ctrl_mismatch|Loquat Hotel|m":
            _row("101|ctrl_mismatch|Loquat Hotel", "201", "rB")}
    with open_state("redis", redis_url, "rk41half", tmp_path) as st:
        st.store.put_results(SCORED_TABLE, list(rows.items()))
        client = redis.Redis.from_url(redis_url)
        index = st.store.db.key("tk:" + SCORED_TABLE)
        client.delete(index)
        client.set(index, "not a sorted set")
        moves = [(k, new_key(k, r), r) for k, r in rows.items()]
        with pytest.raises(Exception, match="WRONGTYPE"):
            st.store.move_results(SCORED_TABLE, moves)
        for key, row in rows.items():  # each answer under its earlier key, or its new one, or both
            assert row in (st.store.get_result(SCORED_TABLE, key), st.store.get_result(SCORED_TABLE, new_key(key, row)))
        client.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_row_stored_under_the_new_key_after_the_read_is_kept(tmp_path, kind, request):
    """review41c #3: a row was moved "because the new key had none" by a look outside the write: a row another
    process's scorer (a ``--stages`` run) stored under the new key between that look and the write was overwritten
    by the earlier answer. The write now decides (insert-if-absent; the earlier key is dropped only when the new key
    holds its answer). The other writer acts here at the run's work-began mark, called after the look and before
    the write (another open handle of the same campaign state)."""
    url = request.getfixturevalue("redis_url") if kind == "redis" else None
    a, b, c, d = (f"{n}|ctrl_mismatch|{s}" for n, s in
                  [("100", "Juniper Park"), ("101", "Loquat Hotel"), ("102", "Fig Tower"), ("104", "Elm Hall")])
    rows = {f"{a}|m": _row(a, "200", "rA-old"),  # the scorer stores another answer under its new key meanwhile
            f"{b}|m": _row(b, "201", "rB"),  # the scorer stores the same answer (parsed anew) there meanwhile
            f"{c}|m": _row(c, "202", ""),  # no request key under either key: not the same answer (review41c #7)
            f"{c}|shows=202|m": {**_row(c, "202", ""), "verdict": "yes"},
            f"{d}|m": _row(d, "204", "rD")}  # nobody writes there: moved
    fresh = {f"{a}|shows=200|m": _row(a, "200", "rA-new") | {"verdict": "yes"},
             f"{b}|shows=201|m": _row(b, "201", "rB") | {"verdict": "yes"}}
    plan = {f"{a}|shows=200|m", f"{b}|shows=201|m", f"{c}|shows=202|m", f"{d}|shows=204|m"}
    with open_state(kind, url, "rk41race", tmp_path) as st, open_state(kind, url, "rk41race", tmp_path) as other:
        st.store.put_results(SCORED_TABLE, list(rows.items()))
        got = move_swapped_rows(st.store, SCORED_TABLE, plan,
                                before_write=lambda: other.store.put_results(SCORED_TABLE, list(fresh.items())))
        after = dict(st.store.iter_results(SCORED_TABLE))
        assert after[f"{a}|shows=200|m"] == fresh[f"{a}|shows=200|m"]  # was overwritten by rA-old
        assert after[f"{a}|m"] == rows[f"{a}|m"]  # another answer: stays under its earlier key
        assert after[f"{b}|shows=201|m"] == fresh[f"{b}|shows=201|m"] and f"{b}|m" not in after
        assert after[f"{c}|m"] == rows[f"{c}|m"] and after[f"{c}|shows=202|m"] == rows[f"{c}|shows=202|m"]
        assert after[f"{d}|shows=204|m"] == rows[f"{d}|m"] and f"{d}|m" not in after
        assert (got.moved, got.dropped) == (1, 1)
        assert len(after) == 6 and st.store.count_results(SCORED_TABLE) == 6
        # the store's own decision, without the first look: a same-JSON row counts as the same answer
        moved = st.store.move_results(SCORED_TABLE, [(f"{a}|m", f"{a}|shows=200|m", rows[f"{a}|m"]),
                                                     (f"{c}|m", f"{c}|shows=202|m", rows[f"{c}|m"])])
        assert moved == (0, 0) and st.store.count_results(SCORED_TABLE) == 6
        st.store.put_results(SCORED_TABLE, [(f"{c}|x|m", rows[f"{c}|m"])])
        assert st.store.move_results(SCORED_TABLE, [(f"{c}|x|m", f"{c}|m", rows[f"{c}|m"])]) == (0, 1)
        assert st.store.get_result(SCORED_TABLE, f"{c}|x|m") is None


def test_an_upgraded_campaign_moves_its_earlier_keys_rows_with_no_model_call(sandbox_crawled, capsys):
    """review41c #6, the moved path end to end: a campaign that holds its swapped-image answers only under the
    earlier keys (as one last run before the key change left it) has them moved to the new keys by the next run,
    which answers every task from the store: the sandbox fake serves no request and the ledger books no call, and
    the summary, report and export count each answer once, under its new key."""
    import polars as pl

    from geoagent.cli import main
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox.launch import request_counts

    p, state = _sandbox_campaign(sandbox_crawled, capsys)
    with open_campaign_state("gv-redraw", root=state) as st:
        rows = dict(st.store.iter_results(SCORED_TABLE))
        earlier = [(k, earlier_task_id(k), r) for k, r in rows.items() if "|shows=" in k]
        assert earlier and all(new_key(old, r) == k for k, old, r in earlier)
        # the store as a run before the key change left it: each swapped-image answer under its earlier key only,
        # its response recording that key as the task that asked (request_meta.task_key)
        assert st.store.move_results(SCORED_TABLE, earlier) == (len(earlier), 0)
        assert not any("|shows=" in k for k, _ in st.store.iter_results(SCORED_TABLE))
        calls = st.ledger.summary().calls
    asked_as = {r["request_key"]: old for _, old, r in earlier}
    with sqlite3.connect(state / "gv-redraw" / "campaign.sqlite") as db:
        db.executemany("UPDATE responses SET request_meta = json_set(request_meta, '$.task_key', ?) WHERE key = ?",
                       [(old, rk) for rk, old in asked_as.items()])
    served = request_counts().get("openai", 0)
    assert served >= calls > 0  # the first run called the fake (this process's count)
    n = len(earlier)

    assert main(["run", str(p), "--no-live"]) == 0
    out = capsys.readouterr()
    assert (f"{n} stored swapped-image answers kept under the task key of an earlier geoagent version" in out.err
            and f"({n} moved, 0 already stored there again and kept once)" in out.err), out.err[-3000:]
    assert "Left out of scoring" not in out.out, out.out
    assert request_counts().get("openai", 0) == served  # no model call: every task answered from the store
    with open_campaign_state("gv-redraw", root=state) as st:
        assert st.ledger.summary().calls == calls
        assert dict(st.store.iter_results(SCORED_TABLE)) == rows
    assert main(["export", str(p)]) == 0
    df = pl.read_parquet(state / "gv-redraw" / "geoverify_scored.parquet")
    assert df.height == len(rows) and df["scored"].all()
    # fixgeohint42 #4: the responses keep the task key their call was made under (provenance, not rewritten by the
    # move), and every scored row joins its response by request key, the moved ones under their new key
    resp = pl.read_parquet(state / "gv-redraw" / "model_responses.parquet")
    task_of = dict(zip(resp["key"].to_list(), resp["request_meta.task_key"].to_list(), strict=True))
    assert all(task_of[rk] == old for rk, old in asked_as.items())
    joined = df.join(resp.select("key", "request_meta.task_key"), left_on="request_key", right_on="key", how="inner")
    assert joined.height == df.height
    moved = joined.filter(pl.col("request_key").is_in(list(asked_as)))
    assert moved.height == n and all("|shows=" in k for k in moved["key"].to_list())


def test_earlier_keys_tasks_still_queued_are_scored_under_the_new_keys(sandbox_crawled, capsys):
    """upgrade41 A: a campaign stopped under the earlier geoagent version with its swapped-image tasks queued under
    their earlier keys on the ``responses`` edge: the run with this version moves the stored rows before its workers
    start, and the scorer stored the rows of those tasks under the earlier keys: the run's report said "Left out of
    scoring: N stored answers of tasks the current plan no longer holds" until the next run moved them. The scorer
    now stores them under the new key the plan holds. Staged by a ``--stages model_caller`` run (every answer on
    the responses edge, nothing scored), its swapped-image tasks then queued again under their earlier keys only."""
    import anyio

    from geoagent import constants as C
    from geoagent.cli import main
    from geoagent.config import load_config
    from geoagent.runtime.queue import open_queue
    from geoagent.runtime.store import open_campaign_state

    p, state = _sandbox_campaign(sandbox_crawled, capsys, "--stages", "model_caller")

    async def to_earlier_keys() -> dict[str, str]:
        q = open_queue(load_config(p).queues_root(), "gv-redraw", C.EDGE_RESPONSES)
        try:
            tasks = await q.lease(10_000, 300.0)
            swapped = [t for t in tasks if "|shows=" in t.key]
            earlier = {earlier_task_id(t.key): t.key for t in swapped}
            assert len(earlier) == len(swapped)
            await q.put_many([(old, t.payload) for old, t in zip(earlier, swapped, strict=True)])
            await q.ack(swapped)  # gone from the queue, as under the earlier version, which never queued them
            await q.release([t for t in tasks if "|shows=" not in t.key])
            return earlier
        finally:
            await q.close()

    earlier = anyio.run(to_earlier_keys)
    assert earlier

    assert main(["run", str(p), "--no-live"]) == 0
    out = capsys.readouterr()
    assert "Left out of scoring" not in out.out, out.out
    with open_campaign_state("gv-redraw", root=state) as st:
        rows = dict(st.store.iter_results(SCORED_TABLE))
    assert not set(earlier) & set(rows)  # no row under an earlier key
    assert set(earlier.values()) <= set(rows)
    assert all(rows[new]["image_shown"] in new for new in earlier.values())


def test_a_plan_changed_only_by_the_key_form_is_no_plan_change():
    """upgrade41 B: the first run after the upgrade said "plan changed since the last run: 104 requests new (not
    planned before), 104 planned before no longer in the plan (their stored answers ... are kept but not scored)"
    and then "104 ... moved ...; none is left out of scoring". A planned key whose earlier form the recorded plan
    held is neither new nor dropped now; a truly new task still is."""
    from geoagent.data.model import earlier_task_id
    from geoagent.runtime.scope import PlanDiff

    assert earlier_task_id(f"{TID}|shows=200|m") == f"{TID}|m"
    assert earlier_task_id(f"{TID}|shows=200|m|rec") == f"{TID}|m|rec"
    assert earlier_task_id("100|main|Juniper Park|m") is None
    old = [f"{TID}|m", "100|main|Juniper Park|m", "101|ctrl_mismatch|Fig Tower|m"]
    diff = PlanDiff(old)
    for key in (f"{TID}|shows=200|m", "100|main|Juniper Park|m", "102|ctrl_mismatch|Elm Hall|shows=9|m"):
        diff.see(key)
    assert (diff.new, diff.dropped) == (1, 1)  # Elm Hall new, Fig Tower dropped; Juniper Park's control the same
    same = PlanDiff(old)
    list(same.wrap([(f"{TID}|shows=200|m", {}), ("100|main|Juniper Park|m", {}),
                    ("101|ctrl_mismatch|Fig Tower|shows=7|m", {})]))
    assert (same.new, same.dropped, same.text()) == (0, 0, None)


def test_a_row_under_an_earlier_key_has_its_own_left_out_reason():
    """upgrade41 B: a row under a swapped-image control's earlier key that the move left (its new key holds another
    answer) was left out "(the config changed since)"; nothing in the config changed. Its reason now says why."""
    from geoagent.geoverify.stages import ScoredScope
    from geoagent.runtime.scope import NOT_IN_PLAN, NOT_IN_PLAN_EARLIER_KEY

    scope = ScoredScope({f"{TID}|shows=200|m"})
    assert scope.left_out(f"{TID}|m", _row(TID, "200", "rA-old")) == NOT_IN_PLAN_EARLIER_KEY
    assert "earlier geoagent version" in NOT_IN_PLAN_EARLIER_KEY
    assert scope.left_out(f"{TID}|m", _row(TID, "299", "rA-old")) == NOT_IN_PLAN  # another image: its new key unplanned
    assert scope.left_out("101|ctrl_mismatch|Fig Tower|m", _row("101|ctrl_mismatch|Fig Tower", "1", "r")) == NOT_IN_PLAN
    assert scope.not_planned == 3


def test_the_upgrade_run_says_no_plan_change(sandbox_crawled, capsys):
    """upgrade41 B end to end: the plan record of a run before the key change (each swapped-image key in its
    earlier form) and its rows under the earlier keys: the next run moves them and prints no plan-change line."""

    from geoagent.cli import main
    from geoagent.data.model import earlier_task_id
    from geoagent.runtime.scope import plan_keys_path
    from geoagent.runtime.store import open_campaign_state

    p, state = _sandbox_campaign(sandbox_crawled, capsys)
    with open_campaign_state("gv-redraw", root=state) as st:
        moves = [(k, earlier_task_id(k), r) for k, r in st.store.iter_results(SCORED_TABLE) if "|shows=" in k]
        assert moves and st.store.move_results(SCORED_TABLE, moves) == (len(moves), 0)
    record = plan_keys_path(state / "gv-redraw")
    lines = record.read_text(encoding="utf-8").splitlines()
    old = [f"{m}\t{earlier_task_id(k) or k}" for m, _, k in (ln.partition("\t") for ln in lines)]
    assert old != lines
    record.write_text("".join(f"{ln}\n" for ln in old), encoding="utf-8")

    assert main(["run", str(p), "--no-live"]) == 0
    out = capsys.readouterr()
    assert f"({len(moves)} moved, 0 already stored" in out.err, out.err[-3000:]
    assert "plan changed since the last run" not in out.err + out.out, out.err[-3000:]
    assert "Left out of scoring" not in out.out
