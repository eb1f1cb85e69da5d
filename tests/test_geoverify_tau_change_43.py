"""A GeoVerify campaign re-run at another ``[geoverify] tau_m`` (fixtau43).

Task keys did not name tau, so a re-run at 200 m of a build campaign asked at 150 m found each task done and scored
the answer to the 150 m claim with its 150 m truth and band: a candidate 180 m away, a decoy at 150 m (truth no),
counted as noise at 200 m, where its trial is a signal trial ("built trials per band: signal 21", H over 16). Now a
task key names a tau other than 150 m (``...|tau=200m|<model>``), each scored row records the tau it was asked at,
and the report counts only rows of the campaign's tau. Rows stored before the fix take the manifest's tau (moved to
the key that names it), or none when the manifest records a change of tau_m (then never scored).
"""

from __future__ import annotations

import sqlite3

import orjson
import polars as pl
import pytest

from geoagent.data.model import key_tau_km, task_id_at_tau, untagged_task_key
from geoagent.geoverify.tau import legacy_tau_m, row_tau_m, tagged_key


def _toml(tmp_path, release_dir, tau_m: float):
    p = tmp_path / "gv.toml"
    p.write_text(f"""
[campaign]
name = "gv43-tauchange"
kind = "geoverify"
seed = 7
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[geoverify]
trials = "build"
release_dir = "{release_dir}"
tau_m = {tau_m}
n_boot = 0
""", encoding="utf-8")
    return p


def _run(path, capsys) -> str:
    from geoagent.cli import main

    assert main(["run", str(path), "--no-live"]) == 0
    out = capsys.readouterr()
    return out.out + out.err


def _scored(state_dir) -> pl.DataFrame:
    return pl.read_parquet(state_dir / "geoverify_scored.parquet")


def _calls(said: str) -> int:
    line = next(ln for ln in said.splitlines() if ln.strip().startswith("this run:"))
    return int(line.split("this run:")[1].split()[0])


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    return tmp_path


def test_a_rerun_at_another_tau_scores_only_answers_asked_at_it(dirs, release_dir, capsys):
    from geoagent.config import load_config

    p = _toml(dirs, release_dir, 150)
    cfg = load_config(p)
    said150 = _run(p, capsys)
    first = _scored(cfg.state_dir())
    assert first["scored"].all() and (first["tau_m"] == 150.0).all()
    signal150 = first.filter((pl.col("arm") == "main") & (pl.col("truth") == "yes")).height

    _toml(dirs, release_dir, 200)
    said = _run(p, capsys)
    # the re-run plans every trial at 200 m anew: new keys, new calls (the claim names 200 m now)
    assert "results would mix" not in said
    assert "[geoverify] tau_m 150 -> 200 m: a trial asked at another claim tolerance is another task" in said
    assert _calls(said) == _calls(said150)
    rows = _scored(cfg.state_dir())
    counted = rows.filter(pl.col("scored"))
    assert counted.height == first.height
    assert (counted["tau_m"] == 200.0).all() and counted["key"].str.contains(r"\|tau=200m\|sim$").all()
    # the reproduction: candidates 150-200 m away were decoys at 150 m; at 200 m they are signal trials, and the
    # answers to the 150 m claim (truth no) are kept, not scored
    moved = rows.filter((pl.col("arm") == "main") & (pl.col("d_km") >= 0.15) & (pl.col("d_km") < 0.2))
    assert moved.height > 0
    assert set(moved.filter(pl.col("scored"))["truth"]) == {"yes"}
    assert set(moved.filter(pl.col("scored"))["band"]) == {"signal"}
    old = moved.filter(~pl.col("scored"))
    assert set(old["truth"]) == {"no"} and set(old["tau_m"]) == {150.0}
    assert set(old["left_out"]) == {"not in the current plan: a task an earlier run's plan held (the config changed "
                                    "since)"}
    # H counts every signal trial of the 200 m design (before the fix: the 16 of the 150 m one)
    signal200 = counted.filter((pl.col("arm") == "main") & (pl.col("truth") == "yes")).height
    assert signal200 > signal150
    built = next(ln for ln in said.splitlines() if "built trials per band" in ln)
    assert f"signal {signal200}," in built
    h = said.split("sim: main arm")[1].split("F ")[0]  # "n 170  H 66.7% (14/21)  "
    assert h.rstrip().endswith(f"/{signal200})")
    assert "0.15-0.3km" not in set(counted["band"])

    # back to 150 m: the answers asked at 150 m are scored again, with no model call
    _toml(dirs, release_dir, 150)
    said = _run(p, capsys)
    assert _calls(said) == 0
    again = _scored(cfg.state_dir()).filter(pl.col("scored"))
    assert sorted(again["key"]) == sorted(first["key"]) and (again["tau_m"] == 150.0).all()


def _results_dbs(state_dir, queues_dir):
    dbs = []
    for p in [*state_dir.rglob("*.sqlite"), *queues_dir.rglob("*.sqlite")]:
        with sqlite3.connect(p) as con:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if "results" in names:
            dbs.append(p)
    return dbs


def _as_before_the_fix(dbs) -> int:
    """Store the scored rows as a run before fixtau43 did: no tau_m, under the key that names no tau."""
    n = 0
    for db in dbs:
        with sqlite3.connect(db) as con:
            rows = con.execute("SELECT key, row FROM results WHERE tbl = 'geoverify_scored'").fetchall()
            for key, raw in rows:
                row = orjson.loads(raw)
                row.pop("tau_m", None)
                con.execute("DELETE FROM results WHERE tbl = 'geoverify_scored' AND key = ?", (key,))
                con.execute("INSERT INTO results (tbl, key, row, updated_at) VALUES ('geoverify_scored', ?, ?, 0)",
                            (untagged_task_key(key) or key, orjson.dumps(row).decode()))
                n += 1
    return n


def test_rows_stored_before_the_fix_take_the_manifests_tau_and_move_to_its_keys(dirs, release_dir, capsys):
    from geoagent.config import load_config

    p = _toml(dirs, release_dir, 200)
    cfg = load_config(p)
    _run(p, capsys)
    first = _scored(cfg.state_dir())
    n = _as_before_the_fix(_results_dbs(cfg.state_dir(), dirs / "queues"))
    assert n == first.height
    said = _run(p, capsys)
    assert (f"info: campaign gv43-tauchange: {n} stored answers from before geoagent recorded the claim tolerance of "
            f"each answer now record tau_m = 200 m, the one the campaign's manifest.json records; {n} of them now "
            "under the task key that names it") in said
    assert _calls(said) == 0 and "Left out of scoring" not in said
    rows = _scored(cfg.state_dir())
    assert rows["scored"].all() and (rows["tau_m"] == 200.0).all()
    assert sorted(rows["key"]) == sorted(first["key"])


def test_rows_stored_before_the_fix_of_a_campaign_whose_tau_changed_are_never_scored(dirs, release_dir, capsys):
    from geoagent.config import load_config

    p = _toml(dirs, release_dir, 150)
    cfg = load_config(p)
    _run(p, capsys)
    n = _as_before_the_fix(_results_dbs(cfg.state_dir(), dirs / "queues"))
    # the manifest of a campaign a run before the fix re-ran at 200 m: which tau each row was asked at is unknown
    mpath = cfg.state_dir() / "manifest.json"
    m = orjson.loads(mpath.read_bytes())
    m["config_mix"] = [{"changed": {"geoverify.tau_m": [150.0, 200.0]}, "tasks_added": 8, "tasks_before": n}]
    mpath.write_bytes(orjson.dumps(m))
    said = _run(p, capsys)
    assert f"warning: campaign gv43-tauchange: {n} stored answers from before geoagent recorded" in said
    assert f"{n} stored answers of planned tasks were asked at another (or an unknown) claim tolerance" in said
    rows = _scored(cfg.state_dir())
    assert not rows["scored"].any()
    assert "tau_m" not in rows.columns or rows["tau_m"].is_null().all()  # the export leaves out a column of no value
    assert rows["left_out"].str.starts_with("asked at an unknown claim tolerance").all()


def test_task_keys_name_a_tau_other_than_the_papers():
    assert task_id_at_tau("1|main|Big Ben", 0.15) == "1|main|Big Ben"
    assert task_id_at_tau("1|main|Big Ben", 0.2) == "1|main|Big Ben|tau=200m"
    assert task_id_at_tau("1|ctrl_mismatch|X|shows=9", 0.0999) == "1|ctrl_mismatch|X|shows=9|tau=99.9m"
    assert key_tau_km("1|main|Big Ben|tau=200m|sim") == pytest.approx(0.2)
    assert key_tau_km("1|main|Big Ben|sim") is None
    assert untagged_task_key("1|main|Big Ben|tau=200m|sim") == "1|main|Big Ben|sim"
    row = {"trial_id": "1|ctrl_mismatch|X"}
    assert tagged_key("1|ctrl_mismatch|X|shows=9|sim", row, 200.0) == "1|ctrl_mismatch|X|shows=9|tau=200m|sim"
    assert tagged_key("1|ctrl_mismatch|X|sim", row, 150.0) == "1|ctrl_mismatch|X|sim"
    assert tagged_key("1|ctrl_mismatch|X|tau=200m|sim", row, 200.0) is None
    # a row's tau: its own, else its key's, else the manifest's
    assert row_tau_m("k|tau=200m|m", {"tau_m": 100.0}, 150.0) == 100.0
    assert row_tau_m("k|tau=200m|m", {}, 150.0) == 200.0
    assert row_tau_m("k|m", {}, 150.0) == 150.0 and row_tau_m("k|m", {}, None) is None


def test_legacy_tau_is_the_manifests_unless_a_change_of_it_mixed_results():
    assert legacy_tau_m(None) is None and legacy_tau_m({}) is None
    assert legacy_tau_m({"config": {"geoverify": {"tau_m": 200.0}}}) == 200.0
    assert legacy_tau_m({"config": {"geoverify": {}}}) == 150.0
    assert legacy_tau_m({"config": {}}) == 150.0
    mixed = {"config": {"geoverify": {"tau_m": 200.0}},
             "config_mix": [{"changed": {"geoverify.n_per_band": [2, 3]}}]}
    assert legacy_tau_m(mixed) == 200.0
    mixed["config_mix"].append({"changed": {"geoverify.tau_m": [150.0, 200.0]}})
    assert legacy_tau_m(mixed) is None
