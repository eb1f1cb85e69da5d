"""The GeoVerify tau guard reads the work where the manifest agrees, and says what it means (review44b #5, #6).

#5: a manifest that records the config's tau is checked against the work all the same (one queued claim, or a
stored prompt's hash): a hand-edited manifest (200 m over work made at 150 m) let a 200 m run score 150 m labels.
#6a: dead-lettered request tasks are counted apart ("238 request tasks queued (0 done)" was said of dead letters).
#6b: a campaign stored at a tau of no whole metres gets the guard's advice at once, and the refusal of 150.5 -> 150
no longer says the new campaign "costs no extra call" (both taus render "150 metres"). #6c: "recorded in the config
recorded on the Redis server" (the Redis test of test_geoverify_tau_refuse43 reads the new words). #6d: ``status``
of a config a run would refuse for its tau says so in one line.
"""

from __future__ import annotations

import shutil

import orjson

from test_geoverify_tau_refuse43 import _files, _queue_plan_only, _toml, roots  # noqa: F401 - roots: the fixture


def test_a_hand_edited_manifest_agreeing_with_the_config_is_checked_against_the_work(tmp_path, release_dir, roots,
                                                                                   capsys):
    from geoagent.cli import main

    queues, state = roots
    sdir = state / "gv-refuse"
    assert main(["run", str(_toml(tmp_path, release_dir, "150")), "--no-live"]) == 0
    mpath = sdir / "manifest.json"
    manifest = orjson.loads(mpath.read_bytes())
    manifest["config"]["geoverify"]["tau_m"] = 200  # hand-edited over work made at 150 m
    mpath.write_bytes(orjson.dumps(manifest))
    capsys.readouterr()
    before = _files(queues, state)
    at200 = _toml(tmp_path, release_dir, "200")
    assert main(["run", str(at200), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: {at200}: [geoverify] tau_m = 200 m, but campaign gv-refuse was run at "
                          f"tau_m = 150 m (named by the claims of its request tasks in "
                          f"{queues / 'gv-refuse' / 'requests.sqlite'}, though {mpath} records 200 m) and holds work "
                          "made at it ("), err
    assert "set tau_m back to 150" in err
    assert _files(queues, state) == before
    # its queues gone too: the prompt hash each stored answer recorded tells 150 m
    shutil.move(queues / "gv-refuse", tmp_path / "queues.aside")
    before = _files(queues, state)
    assert main(["run", str(at200), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert (f"was run at tau_m = 150 m (named by the recorded SHA-256 of its stored answers' prompts, though {mpath} "
            "records 200 m)") in err, err
    assert _files(queues, state) == before


def test_dead_lettered_request_tasks_are_counted_apart(tmp_path, release_dir, roots, capsys):
    """Every queued task dead-lettered (each call failed: the real queue's dead letter): said as dead-lettered."""
    from geoagent import constants as C
    from geoagent.cli import main
    from geoagent.config import load_config
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    queues, state = roots
    at150 = _toml(tmp_path, release_dir, "150")
    n = _queue_plan_only(at150)
    cfg = load_config(at150)
    q = SQLiteQueue.open(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
    try:
        for task in q.lease_sync(n):
            q.dead_letter_sync(task, "PermanentFailure: HTTP 400")
        assert q.counts_sync().dead == n
    finally:
        q.close_sync()
    at200 = _toml(tmp_path, release_dir, "200")
    assert main(["run", str(at200), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert f"and holds work made at it ({n} request tasks dead-lettered): " in err, err
    assert "queued (0 done)" not in err


def test_a_campaign_stored_at_150_5_m_gets_the_guards_advice_at_once_and_no_false_cost(tmp_path, release_dir, roots,
                                                                                    capsys):
    from geoagent.cli import main

    queues, state = roots
    assert main(["run", str(_toml(tmp_path, release_dir, "150")), "--no-live"]) == 0
    mpath = state / "gv-refuse" / "manifest.json"
    manifest = orjson.loads(mpath.read_bytes())
    manifest["config"]["geoverify"]["tau_m"] = 150.5  # as a run of before session 43 recorded it
    mpath.write_bytes(orjson.dumps(manifest))
    capsys.readouterr()

    at_old = _toml(tmp_path, release_dir, "150.5")
    assert main(["run", str(at_old), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"config error: {at_old}: geoverify.tau_m: expected a whole number of metres (the claim the "
                          f"model reads names tau in whole metres), got 150.5; campaign gv-refuse was run at tau_m = "
                          f"150.5 m (recorded in {mpath}) and holds work made at it ("), err
    assert ("150.5 m is no whole number of metres either, so this campaign cannot be run on at any tau (status, "
            "export and dead still read it): give the run a new [campaign] name, with tau_m = 150 to ask the claims it "
            "asked (they named 150 metres)") in err, err

    # 150: refused, the new campaign's cost worded right (its claims are this campaign's: asked again)
    at150 = _toml(tmp_path, release_dir, "150")
    assert main(["run", str(at150), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "was run at tau_m = 150.5 m (recorded in" in err, err
    assert "costs no extra call" not in err
    assert ("give it a new [campaign] name (its claims name 150 metres, as this campaign's did, so it asks them again: "
            "a model call each, its answers stored apart from this campaign's)") in err, err
    # 200: other claims, so no stored answer could be reused: no extra call
    assert main(["run", str(_toml(tmp_path, release_dir, "200")), "--no-live"]) == 2
    assert "it costs no extra call" in capsys.readouterr().err


def test_a_whole_campaign_run_at_150_5_is_told_to_set_tau_m_to_its_tau(tmp_path, release_dir, roots, capsys):
    from geoagent.cli import main

    queues, state = roots
    assert main(["run", str(_toml(tmp_path, release_dir, "150")), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["run", str(_toml(tmp_path, release_dir, "150.5")), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "got 150.5; campaign gv-refuse was run at tau_m = 150 m (recorded in" in err, err
    assert "to go on with it, set tau_m to 150; for another tolerance, give the run a new [campaign] name" in err


def test_status_of_a_config_a_run_would_refuse_says_so(tmp_path, release_dir, roots, capsys):
    from geoagent.cli import main

    queues, state = roots
    at150 = _toml(tmp_path, release_dir, "150")
    assert main(["run", str(at150), "--no-live"]) == 0
    capsys.readouterr()
    at200 = _toml(tmp_path, release_dir, "200")
    assert main(["status", str(at200)]) == 0
    out = capsys.readouterr().out
    note = [ln for ln in out.splitlines() if ln.startswith("note: `run` of")]
    assert note == [f"note: `run` of {at200} would be refused (exit 2): its [geoverify] tau_m = 200 m, but the "
                    "campaign's work was made at 150 m; `run` says why and the ways out"], out
    assert main(["status", str(at150)]) == 0
    assert "would be refused" not in capsys.readouterr().out
    at_frac = _toml(tmp_path, release_dir, "150.5")
    assert main(["status", str(at_frac)]) == 0
    assert (f"note: `run` of {at_frac} would be refused (exit 2): its [geoverify] tau_m is no whole number of metres"
            in capsys.readouterr().out)
