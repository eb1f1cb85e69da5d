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

from test_geoverify_tau_bands42 import write_build_toml
from test_queue_contract import redis_url  # noqa: F401 - the fixture

REPO = Path(__file__).resolve().parents[1]


def _toml(tmp_path: Path, release_dir: Path, tau_m: str, name: str = "gv-refuse", backend: str = "") -> Path:
    """A build-trials GeoVerify campaign on the simulated model (no key, no network), ``tau_m`` as written."""
    return write_build_toml(tmp_path / f"{name}-{tau_m}.toml", name, release_dir, tau_m, backend)


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
                "config kept on the Redis server) and holds work made at it") in err, err
        assert client.get(key) == record  # not replaced
        assert not (state / name / "manifest.json").exists()
    finally:
        client.close()


# ---- fixguard43 #1: no manifest (moved aside, or a first run killed after queuing its plan): the work tells tau


def _queue_plan_only(cfg_path: Path) -> int:
    """What a first run killed between queuing its plan and recording its start leaves: the campaign's database
    (opened before planning), the plan queued (the real planner and queue), no answer and no manifest. Returns the
    number of tasks queued."""
    from geoagent import constants as C
    from geoagent.config import load_config
    from geoagent.geoverify.plan import plan_campaign
    from geoagent.runtime.backend import open_state
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    cfg = load_config(cfg_path)
    with open_state(cfg):
        pass
    plan = plan_campaign(cfg)
    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
    try:
        q.put_many_sync(plan.messages)
    finally:
        q.close_sync()
    assert not (Path(cfg.state_dir()) / "manifest.json").exists()
    return len(plan.messages)


def test_a_first_run_killed_after_queuing_is_judged_by_its_queued_claims(tmp_path, release_dir, roots, capsys):
    """The crash between enqueue_plan and the manifest's start: a re-run at another tau is refused (before: it ran,
    scored the 150 m claims at 200 m and recorded 200 m as the campaign's tau); the same tau resumes and runs."""
    from geoagent.cli import main

    queues, state = roots
    at150 = _toml(tmp_path, release_dir, "150")
    n = _queue_plan_only(at150)
    assert n > 0
    before = _files(queues, state)
    at200 = _toml(tmp_path, release_dir, "200")
    for extra in ([], ["--simulate"]):
        assert main(["run", str(at200), "--no-live", *extra]) == 2, extra
        err = capsys.readouterr().err
        assert (f"[geoverify] tau_m = 200 m, but campaign gv-refuse was run at tau_m = 150 m (named by the claims of "
                f"its request tasks in {queues / 'gv-refuse' / 'requests.sqlite'}; "
                f"{state / 'gv-refuse' / 'manifest.json'} records no tau) and holds work made at it "
                f"({n} request tasks queued (0 done))") in err, err
        assert "set tau_m back to 150" in err and "Nothing was run or changed" in err
        assert _files(queues, state) == before, extra  # no manifest written, nothing queued, answered or changed
    # the crash-resumed first run at the same tau runs, answers its queued tasks and records 150 m
    assert main(["run", str(at150), "--no-live"]) == 0
    assert "config error" not in capsys.readouterr().err
    answers, scored = _rows(state / "gv-refuse" / "campaign.sqlite")
    assert answers == n and scored == n
    assert orjson.loads((state / "gv-refuse" / "manifest.json").read_bytes())["config"]["geoverify"]["tau_m"] == 150


def test_a_moved_aside_manifest_leaves_the_tau_to_the_queued_claims_then_the_stored_prompts(
        tmp_path, release_dir, roots, capsys):
    """The manifest moved aside (as its own error suggests for a damaged one): the tau is read from the queued claims;
    with the queues gone too, from the prompt hash each stored answer recorded. Same tau: runs, no new call."""
    import shutil

    from geoagent.cli import main

    queues, state = roots
    sdir = state / "gv-refuse"
    at150, at200 = _toml(tmp_path, release_dir, "150"), _toml(tmp_path, release_dir, "200")
    assert main(["run", str(at150), "--no-live"]) == 0
    answers, scored = _rows(sdir / "campaign.sqlite")
    (sdir / "manifest.json").rename(tmp_path / "manifest.aside")
    capsys.readouterr()
    before = _files(queues, state)
    assert main(["run", str(at200), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "was run at tau_m = 150 m (named by the claims of its request tasks in" in err, err
    assert _files(queues, state) == before

    shutil.move(queues / "gv-refuse", tmp_path / "queues.aside")  # its queues gone as well: the stored answers tell
    before = _files(queues, state)
    assert main(["run", str(at200), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert ("was run at tau_m = 150 m (named by the recorded SHA-256 of its stored answers' prompts; "
            f"{sdir / 'manifest.json'} records no tau) and holds work made at it ({answers} answers stored)"
            ) in err, err
    assert _files(queues, state) == before

    calls = _calls(sdir)
    assert main(["run", str(at150), "--no-live"]) == 0  # the same tau: runs, every answer reused
    assert "config error" not in capsys.readouterr().err
    assert _calls(sdir) == calls and _rows(sdir / "campaign.sqlite") == (answers, scored)


def _with_template(p: Path, template: Path) -> Path:
    out = p.with_name(f"{p.stem}-{template.stem}.toml")
    out.write_text(p.read_text(encoding="utf-8").replace("n_boot = 0", f'n_boot = 0\nprompt_template = "{template}"'),
                   encoding="utf-8")
    return out


def test_work_whose_tau_cannot_be_told_is_refused_and_its_labels_are_judged(tmp_path, release_dir, roots, capsys):
    """No manifest and claims no template reading can tell: the truth labels are judged at the new tau (a trial between
    150 and 200 m labelled no refuses 200 m); a template that names tau but cannot read the stored claims refuses
    even the same tau, saying the tolerance cannot be told; a template that names no tau runs on labels that agree."""
    from geoagent.cli import main
    from geoagent.geoverify.prompt import DEFAULT_TEMPLATE_PATH

    queues, state = roots
    sdir = state / "gv-refuse"
    text = DEFAULT_TEMPLATE_PATH.read_text(encoding="utf-8")
    reworded = tmp_path / "reworded.txt"
    reworded.write_text(text.replace("Claim: the", "Claim (reworded): the"), encoding="utf-8")
    no_tau = tmp_path / "no_tau.txt"
    no_tau.write_text(text.replace("no more than {tau_m} metres from", "near"), encoding="utf-8")
    assert "{tau_m}" not in no_tau.read_text(encoding="utf-8")

    at150, at200 = _toml(tmp_path, release_dir, "150"), _toml(tmp_path, release_dir, "200")
    assert main(["run", str(_with_template(at150, no_tau)), "--no-live"]) == 0
    rows = []
    with sqlite3.connect(f"{(sdir / 'campaign.sqlite').as_uri()}?mode=ro", uri=True) as con:
        rows = [orjson.loads(r) for (r,) in con.execute("SELECT row FROM results WHERE tbl = 'geoverify_scored'")]
    between = [r for r in rows if r["arm"] == "main" and r["d_km"] is not None and 0.1501 < r["d_km"] < 0.1999]
    assert between and all(r["truth"] == "no" for r in between)  # the release's pools hold such candidates
    (sdir / "manifest.json").unlink()
    capsys.readouterr()
    before = _files(queues, state)

    assert main(["run", str(_with_template(at200, no_tau)), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert ("[geoverify] tau_m = 200 m, but the tolerance of the work campaign gv-refuse holds (" in err
            and "cannot be told" in err and "its truth labels were made at another tolerance: " in err
            and "labelled 'no' (Eq. 1 at 200 m gives the other answer)" in err), err
    assert "Restore manifest.json" in err and "new [campaign] name" in err
    assert _files(queues, state) == before

    # the claims name tau, but not as this template reads: not even 150 m can be told from them
    assert main(["run", str(_with_template(at150, reworded)), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert ("[geoverify] tau_m = 150 m, but the tolerance of the work campaign gv-refuse holds" in err
            and f"no claim of its work could be read as the template {reworded} filled in" in err), err
    assert _files(queues, state) == before

    # the template that names no tau, at the same tau: the labels agree, the run goes on (no new call)
    calls = _calls(sdir)
    assert main(["run", str(_with_template(at150, no_tau)), "--no-live"]) == 0
    assert "config error" not in capsys.readouterr().err
    assert _calls(sdir) == calls


def test_redis_without_manifest_or_server_record_reads_the_claims_on_the_server(
        tmp_path, release_dir, roots, monkeypatch, capsys, redis_url):  # noqa: F811
    """Neither the manifest nor the server's config record (a first run killed before it recorded either): the
    claims of the request tasks queued on the server name 150 m, so 200 m is refused and 150 m runs."""
    import redis

    from geoagent.cli import main
    from geoagent.runtime.backend import CONFIG_KEY
    from geoagent.runtime.redis_state import state_prefix

    queues, state = roots
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    backend = '[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n'
    name = "gv-refuse-redis-nr"
    assert main(["run", str(_toml(tmp_path, release_dir, "150", name=name, backend=backend)), "--no-live"]) == 0
    capsys.readouterr()
    client = redis.Redis.from_url(redis_url)
    try:
        assert client.delete(state_prefix(name) + CONFIG_KEY) == 1
        (state / name / "manifest.json").unlink()
        at200 = _toml(tmp_path, release_dir, "200", name=name, backend=backend)
        assert main(["run", str(at200), "--no-live"]) == 2
        err = capsys.readouterr().err
        assert ("[geoverify] tau_m = 200 m, but campaign gv-refuse-redis-nr was run at tau_m = 150 m (named by the "
                "claims of its request tasks on the Redis server;") in err, err
        assert client.get(state_prefix(name) + CONFIG_KEY) is None  # the refused config not recorded
        assert not (state / name / "manifest.json").exists()
        assert main(["run", str(_toml(tmp_path, release_dir, "150", name=name, backend=backend)), "--no-live"]) == 0
        assert "config error" not in capsys.readouterr().err
    finally:
        client.close()


def test_a_campaign_stored_at_a_tau_of_no_whole_metres_is_not_told_to_set_it_back(tmp_path, release_dir, roots, capsys):
    """fixguard43 #2: a campaign stored at 149.6 m (allowed before session 43; its manifest recording it): another
    tau is refused without the impossible "set tau_m back to 149.6" (a run refuses 149.6), and status, export and
    dead still load its config."""
    from geoagent.cli import main

    queues, state = roots
    assert main(["run", str(_toml(tmp_path, release_dir, "150")), "--no-live"]) == 0
    mpath = state / "gv-refuse" / "manifest.json"
    manifest = orjson.loads(mpath.read_bytes())
    manifest["config"]["geoverify"]["tau_m"] = 149.6  # as a run of before session 43 recorded it
    mpath.write_bytes(orjson.dumps(manifest))
    capsys.readouterr()
    assert main(["run", str(_toml(tmp_path, release_dir, "200")), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "was run at tau_m = 149.6 m (recorded in" in err, err
    assert "set tau_m back" not in err
    assert "149.6 m is no whole number of metres, which a run no longer takes" in err
    assert "give it a new [campaign] name" in err
    at_old = _toml(tmp_path, release_dir, "149.6")
    assert main(["run", str(at_old), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: {at_old}: geoverify.tau_m: expected a whole number of metres (the claim the "
                          "model reads names tau in whole metres), got 149.6"), err
    assert "not 149.6" not in err and err.count("got 149.6") == 1  # it said "not 149.6, got 149.6"
    for cmd in (["status", str(at_old)], ["export", str(at_old), "--out", str(tmp_path / "exp")],
                ["dead", str(at_old)]):
        assert main(cmd) == 0, cmd
        assert "config error" not in capsys.readouterr().err, cmd
