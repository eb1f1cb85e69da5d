"""A GeoVerify re-run at another ``[geoverify] tau_m`` over stored work is refused (fixtaurefuse43).

Trials' truth and bands are fixed at planning by tau and the task keys do not name tau, so a re-run of a campaign at
another tau scored the answers asked at the old one as trials at the new one (before: only the config-drift warning
"results would mix"). Now such a run, its dry run and a ``--stages`` process are refused (exit 2) before anything is
created, changed or called, naming the key, both values, why and the ways out; nothing stored changes, and the
manifest does not record the refused config. The same tau (150 vs 150.0) runs as before with no new call; a new
campaign name at the new tau runs; a campaign that holds no work may change tau.
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from test_queue_contract import redis_url  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]


def _toml(tmp_path: Path, release_dir: Path, tau_m: str, name: str = "gv-refuse", backend: str = "") -> Path:
    """A build-trials GeoVerify campaign on the simulated model (no key, no network), ``tau_m`` as written."""
    p = tmp_path / f"{name}-{tau_m}.toml"
    p.write_text(f"""
[campaign]
name = "{name}"
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
{backend}""", encoding="utf-8")
    return p


def _files(*roots: Path) -> dict[str, str]:
    """Every file under ``roots``: path -> SHA-256 of its bytes."""
    return {str(f): hashlib.sha256(f.read_bytes()).hexdigest()
            for root in roots for f in sorted(root.rglob("*")) if f.is_file()}


def _rows(db: Path) -> tuple[int, int]:
    """(stored responses, geoverify_scored rows) of a campaign database."""
    with sqlite3.connect(f"{db.as_uri()}?mode=ro", uri=True) as con:
        return (con.execute("SELECT COUNT(*) FROM responses").fetchone()[0],
                con.execute("SELECT COUNT(*) FROM results WHERE tbl = 'geoverify_scored'").fetchone()[0])


def _calls(state_dir: Path) -> int:
    with sqlite3.connect(f"{(state_dir / 'campaign.sqlite').as_uri()}?mode=ro", uri=True) as con:
        return con.execute("SELECT calls FROM ledger_totals").fetchone()[0]


@pytest.fixture
def roots(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    return tmp_path / "queues", tmp_path / "state"


def test_a_rerun_at_another_tau_is_refused_and_changes_nothing(tmp_path, release_dir, roots, capsys):
    from geoagent.cli import main

    queues, state = roots
    at150 = _toml(tmp_path, release_dir, "150")
    assert main(["run", str(at150), "--no-live"]) == 0
    capsys.readouterr()
    sdir = state / "gv-refuse"
    answers, scored = _rows(sdir / "campaign.sqlite")
    assert answers > 0 and scored > 0
    manifest = orjson.loads((sdir / "manifest.json").read_bytes())
    n_runs = len(manifest["runs"])
    assert manifest["config"]["geoverify"]["tau_m"] == 150
    before = _files(queues, state)

    at200 = _toml(tmp_path, release_dir, "200")
    for extra in ([], ["--simulate"]):
        assert main(["run", str(at200), "--no-live", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert err.startswith(f"config error: {at200}: [geoverify] tau_m = 200 m, but campaign gv-refuse was run at "
                              f"tau_m = 150 m (recorded in {sdir / 'manifest.json'}) and holds work made at it "
                              f"({answers} answers stored"), err
        assert ("the answers asked at 150 m would be scored as trials at 200 m (a candidate between 150 and 200 m "
                "away is signal at 200 m and a decoy at 150 m)") in err, err
        assert "Nothing was run or changed" in err
        assert "give it a new [campaign] name" in err and "set tau_m back to 150" in err
        assert "results would mix" not in err  # the refusal comes alone, before the drift lines
        # byte for byte: the store, the queues, the manifest (no run recorded, not the refused config)
        assert _files(queues, state) == before, extra
    # a --stages process (scale-out) is refused the same way, also one that only scores
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    for stages in ("scorer", "model_caller,parser,scorer,aggregator"):
        proc = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(at200), "--no-live", "--stages", stages],
                              capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2, (stages, proc.stderr)
        assert "[geoverify] tau_m = 200 m, but campaign gv-refuse was run at tau_m = 150 m" in proc.stderr
    # run_campaign itself refuses too (callers other than `run.py run`: the check runs before anything is made)
    import anyio

    from geoagent.config import ConfigError, load_config
    from geoagent.engine import run_campaign

    with pytest.raises(ConfigError, match=r"\[geoverify\] tau_m = 200 m, but campaign gv-refuse was run at tau_m = 150"):
        anyio.run(lambda: run_campaign(load_config(at200), live=False))
    assert _files(queues, state) == before

    # the same tolerance written as 150.0: no change, the run goes on and asks nothing again
    calls = _calls(sdir)
    again = _toml(tmp_path, release_dir, "150.0")
    assert main(["run", str(again), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "tau_m" not in err, err
    assert _calls(sdir) == calls and _rows(sdir / "campaign.sqlite") == (answers, scored)
    assert len(orjson.loads((sdir / "manifest.json").read_bytes())["runs"]) == n_runs + 1

    # the way out the refusal names: a new campaign name at 200 m runs (and asks its own claims)
    fresh = _toml(tmp_path, release_dir, "200", name="gv-refuse-200")
    assert main(["run", str(fresh), "--no-live"]) == 0
    capsys.readouterr()
    assert _rows(state / "gv-refuse-200" / "campaign.sqlite")[0] > 0
    md = (state / "gv-refuse-200" / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert "tau = 200 m" in md


def test_a_campaign_that_holds_no_work_may_change_tau(tmp_path, release_dir, roots, capsys):
    import shutil

    from geoagent.cli import main

    queues, state = roots
    assert main(["run", str(_toml(tmp_path, release_dir, "150")), "--no-live"]) == 0
    # its answers and queues removed (started over on purpose); the manifest still records 150 m
    shutil.rmtree(queues / "gv-refuse")
    for f in (state / "gv-refuse").glob("campaign.sqlite*"):
        f.unlink()
    capsys.readouterr()
    assert main(["run", str(_toml(tmp_path, release_dir, "200")), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "config error" not in err
    assert orjson.loads((state / "gv-refuse" / "manifest.json").read_bytes())["config"]["geoverify"]["tau_m"] == 200


def test_redis_refuses_another_tau_from_the_server_record_even_with_accept_config_change(
        tmp_path, release_dir, roots, monkeypatch, capsys, redis_url):  # noqa: F811
    """Another machine (no manifest of the campaign here) starting the campaign at another tau: the server's record
    names the old one; ``--accept-config-change`` does not let answers asked at 150 m be scored at 200 m."""
    import redis

    from geoagent.cli import main
    from geoagent.runtime.backend import CONFIG_KEY
    from geoagent.runtime.redis_state import state_prefix

    queues, state = roots
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    backend = '[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n'
    name = "gv-refuse-redis"
    assert main(["run", str(_toml(tmp_path, release_dir, "150", name=name, backend=backend)), "--no-live"]) == 0
    capsys.readouterr()
    client = redis.Redis.from_url(redis_url)
    try:
        key = state_prefix(name) + CONFIG_KEY
        record = client.get(key)
        assert orjson.loads(record)["config"]["geoverify"]["tau_m"] == 150
        (state / name / "manifest.json").unlink()  # as on a machine that never ran it
        at200 = _toml(tmp_path, release_dir, "200", name=name, backend=backend)
        assert main(["run", str(at200), "--no-live", "--accept-config-change"]) == 2
        err = capsys.readouterr().err
        assert ("[geoverify] tau_m = 200 m, but campaign gv-refuse-redis was run at tau_m = 150 m (recorded in the "
                "config recorded on the Redis server) and holds work made at it") in err, err
        assert client.get(key) == record  # not replaced
        assert not (state / name / "manifest.json").exists()
    finally:
        client.close()
