"""Response store (put + settle in one transaction), results tables, export to Parquet/CSV, manifest.

The ``state`` tests run against both campaign-state backends (SQLite file, Redis: :mod:`tests._state_backends`)."""

from __future__ import annotations

import hashlib
import json
import textwrap

import polars as pl
import pytest

from geoagent.config import load_config
from geoagent.providers.base import ModelResponse, Usage, request_key
from geoagent.runtime.export import export_all, export_table
from geoagent.runtime.ledger import LedgerError, Reservation
from geoagent.runtime.manifest import PROMPTS_DIR, Manifest, prompt_hashes, read_manifest
from _state_backends import KINDS, open_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture


@pytest.fixture(params=KINDS)
def state(request, tmp_path):
    url = request.getfixturevalue("redis_url") if request.param == "redis" else None
    st = open_state(request.param, url, "c1", tmp_path / "state", cap_usd=1.0)
    yield st
    st.close()


def test_put_stores_and_settles_atomically(state, tmp_path):
    key = request_key("openai", "gpt-x", "prompt", "img1", {"max_output_tokens": 10})
    assert state.store.get(key) is None and not state.store.has(key)
    res = state.ledger.reserve(key, 0.01)
    resp = ModelResponse("answer text", Usage(120, 7), latency_s=0.3, finish_reason="stop", provider_model="gpt-x")
    assert state.store.put(key, {"model_name": "m"}, resp, res, cost_usd=0.0002)
    assert state.store.get(key) == resp
    rec = state.store.get_record(key)
    assert rec["model"] == "m" and rec["cost_usd"] == 0.0002 and rec["reservation_id"] == res.id
    s = state.ledger.summary()
    assert s.spent_usd == pytest.approx(0.0002) and s.reserved_usd == 0 and (s.input_tokens, s.output_tokens) == (120, 7)
    # a second put under the same key keeps the first response, but the call it stands for is still paid
    res2 = state.ledger.reserve(key, 0.01)
    assert not state.store.put(key, {"model_name": "m"}, ModelResponse("other", Usage(1, 1)), res2, cost_usd=0.0001)
    assert state.store.get(key).text == "answer text"
    assert state.ledger.summary().spent_usd == pytest.approx(0.0003)
    assert state.store.count_responses() == 1


def test_failed_settle_rolls_back_the_stored_response(state):
    ghost = Reservation(id=424242, request_key="k", amount_nusd=5)
    if hasattr(state.ledger, "lost_writes"):
        # Redis: a reservation the server lost is booked again with its answer (redis39 #1a); a failed settle is one
        # whose campaign totals are gone too (the server was flushed), and then nothing is written
        from geoagent.runtime.backend import ServerStateLost

        state.db.client.delete(state.db.key("totals"))
        with pytest.raises(ServerStateLost):
            state.store.put("k", {}, ModelResponse("x", Usage(1, 1)), ghost, cost_usd=0.0)
        assert state.store.get("k") is None and state.db.client.exists(state.db.key("totals")) == 0
        return
    with pytest.raises(LedgerError):
        state.store.put("k", {}, ModelResponse("x", Usage(1, 1)), ghost, cost_usd=0.0)
    assert state.store.get("k") is None  # nothing half-written
    assert state.ledger.summary().spent_usd == 0.0


def test_results_tables_and_iteration(state):
    rows = [(f"t{i:04d}", {"site": f"s{i % 7}", "hit": i % 3 == 0, "error_km": i * 0.5}) for i in range(2345)]
    assert state.store.put_results("answers", rows) == 2345
    assert state.store.count_results("answers") == 2345
    got = list(state.store.iter_results("answers", batch=100))
    assert [k for k, _ in got] == sorted(k for k, _ in rows)
    assert dict(got)["t0042"] == {"site": "s0", "hit": True, "error_km": 21.0}
    # overwrite semantics
    assert state.store.put_result("answers", "t0001", {"site": "new"})
    assert state.store.get_result("answers", "t0001") == {"site": "new"}
    assert not state.store.put_result("answers", "t0001", {"site": "newer"}, overwrite=False)
    assert state.store.get_result("answers", "t0001") == {"site": "new"}
    assert state.store.result_tables() == ["answers"]
    with pytest.raises(ValueError):
        state.store.put_result("bad name; drop", "k", {})


def test_result_keys_lists_the_rows_there(state):
    """``result_keys``: every key of the table, in key order across batch boundaries, nothing of another table; a
    row removed outside geoagent is not listed (Redis: its hash field deleted by hand, its key index left)."""
    state.store.put_results("scored", [(f"k{i:03d}", {"i": i}) for i in range(25)])
    state.store.put_results("other", [("k999", {})])
    assert list(state.store.result_keys("scored", batch=7)) == [f"k{i:03d}" for i in range(25)]
    if hasattr(state.store.db, "client"):
        state.store.db.client.hdel(state.store.db.key("t:scored"), "k003")
    else:
        with state.store.db.transaction() as conn:
            conn.execute("DELETE FROM results WHERE tbl = 'scored' AND key = 'k003'")
    assert list(state.store.result_keys("scored", batch=3)) == [f"k{i:03d}" for i in range(25) if i != 3]
    assert list(state.store.result_keys("none")) == []
    with pytest.raises(ValueError):
        list(state.store.result_keys("bad name; drop"))


def test_async_front_ends(state):
    import asyncio

    async def main():
        await state.store.aput_result("scored", "a", {"v": 1})
        return await state.store.aget_result("scored", "a"), await state.store.ahas("zzz")

    assert asyncio.run(main()) == ({"v": 1}, False)


def test_export_parquet_and_csv_roundtrip(state, tmp_path):
    rows = [
        ("k1", {"site": "paris_a", "error_km": 0.75, "hit": True, "tags": ["a", "b"], "parsed": {"city": "Paris", "area": None}}),
        ("k2", {"site": "rome_b", "error_km": None, "hit": False, "tags": [], "parsed": {"city": "Rome", "area": "Trastevere"}}),
        ("k3", {"site": "tokyo_c", "error_km": 12, "hit": False, "mixed": "x"}),
    ]
    state.store.put_results("answers", rows)
    key = "rk"
    res = state.ledger.reserve(key, 0.01)
    state.store.put(key, {"model_name": "m", "image_id": "1"}, ModelResponse("hello", Usage(3, 4)), res, cost_usd=0.001)
    out = tmp_path / "export"
    exported = {e.table: e for e in export_all(state.store, out)}
    assert set(exported) == {"answers", "model_responses"}
    df = pl.read_parquet(out / "answers.parquet")
    assert df.columns == ["key", "site", "error_km", "hit", "tags", "parsed.city", "parsed.area", "mixed"]
    assert df["key"].to_list() == ["k1", "k2", "k3"]
    assert df["error_km"].to_list() == [0.75, None, 12.0]
    assert df["hit"].to_list() == [True, False, False]
    assert df["tags"].to_list() == [["a", "b"], [], None]
    assert df["parsed.area"].to_list() == [None, "Trastevere", None]
    csv = pl.read_csv(out / "answers.csv")
    assert csv.height == 3 and json.loads(csv["tags"][0]) == ["a", "b"]
    assert csv["error_km"].to_list() == [0.75, None, 12.0]
    resp = pl.read_parquet(out / "model_responses.parquet")
    assert resp["text"].to_list() == ["hello"] and resp["input_tokens"].to_list() == [3]
    assert resp["request_meta.image_id"].to_list() == ["1"]
    empty = export_table(state.store, "nothing_here", out)
    assert empty.rows == 0 and pl.read_parquet(empty.parquet).columns == ["key"]


def test_manifest_records_runs_hashes_and_no_secret(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MAN_TEST_KEY", "sk-manifest-secret-777")
    (tmp_path / "c.toml").write_text(
        textwrap.dedent(
            """
            [campaign]
            name = "mc"
            seed = 99
            [budget]
            cap_usd = 1
            [[models]]
            name = "m"
            provider = "openai"
            model = "gpt-x"
            base_url = "http://127.0.0.1:8/v1"
            api_key_env = "MAN_TEST_KEY"
            seed = 5
            """
        )
    )
    cfg = load_config(tmp_path / "c.toml")
    man = Manifest(cfg)
    with man.run(command="run") as outcome:
        outcome["status"] = "budget_exhausted"
        outcome["summary"] = {"spent_usd": 0.5}
    run2 = man.start_run(command="run")
    data = read_manifest(cfg.state_dir())
    assert [r["status"] for r in data["runs"]] == ["budget_exhausted", "running"]
    assert data["runs"][0]["summary"] == {"spent_usd": 0.5} and data["runs"][0]["stopped_at"]
    assert data["runs"][1]["run_id"] == run2
    assert data["seeds"] == {"campaign": 99, "model:m": 5}
    assert data["config"]["models"][0]["api_key_env"] == "MAN_TEST_KEY"
    assert data["package"]["version"] and data["python"]["version"]
    # a generic campaign sends no prompt template: none is recorded (tests/test_drift_prompt_scope.py has the
    # kinds that do); prompt_hashes equals an independent hashlib pass over the template files
    assert data["prompt_templates_sha256"] == {}
    expected = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in PROMPTS_DIR.glob("*.txt")}
    assert {k: v for k, v in prompt_hashes().items() if "/" not in k} == expected
    assert prompt_hashes(tmp_path / "no-such-dir") == {}
    man.stop_run(run2, status="complete")
    assert read_manifest(cfg.state_dir())["runs"][1]["status"] == "complete"
    with pytest.raises(KeyError):
        man.stop_run("nope")
    text = (cfg.state_dir() / "manifest.json").read_text()
    assert "sk-manifest-secret-777" not in text
