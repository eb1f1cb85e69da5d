"""Adversarial review s11 (adv4): the demo's config-as-written record, late signals, the queues-root checks and
the model caller's paused nack, each through the local fakes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DEMO_CAMPAIGNS = ("demo-crawl", "demo-geoverify", "demo-geohint")


def _demo(workdir: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
    env["PYTHONPATH"] = str(REPO)
    return subprocess.run([sys.executable, str(REPO / "run.py"), "demo", "--workdir", str(workdir), "--no-live"],
                          cwd=workdir.parent, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def fresh_demo(tmp_path_factory) -> tuple[Path, Path]:
    """One fresh demo, run once per test run for the tests below and the other users of tests/_fresh_demo.py
    (each a full demo of about 20-40 s on 2 cores); each test works on a copy of it (:func:`_copy_of_fresh_demo`),
    so they stay independent of each other and of order.

    The demo runs in ``<tmp>/work``, which is then renamed to ``<tmp>/pristine``: the folder the demo recorded
    no longer exists, so a copy placed anywhere is a demo workdir moved away from where it ran (a run that
    still used a recorded path would find nothing there). Returns ``(pristine folder, recorded workdir)``."""
    import _fresh_demo

    return _fresh_demo.fresh_demo(tmp_path_factory)


def _copy_of_fresh_demo(fresh_demo: tuple[Path, Path], to: Path) -> Path:
    shutil.copytree(fresh_demo[0], to, symlinks=True)
    return to


def _as_an_earlier_demo_recorded(state: Path) -> None:
    """Rewrite each demo manifest's recorded config as a demo before fa4d31b recorded it: the fakes named by
    their random loopback ports (``http://127.0.0.1:PORT``), with a ``[hosts]`` entry per port."""
    ports: dict[str, int] = {}

    def loopback(m: re.Match) -> str:
        port = ports.setdefault(m.group(1), 40000 + len(ports))
        return f"http://127.0.0.1:{port}"

    for name in DEMO_CAMPAIGNS:
        path = state / name / "manifest.json"
        data = json.loads(path.read_text(encoding="utf-8"))
        cfg = json.loads(re.sub(r"http://([a-z]+)\.sandbox\.invalid", loopback, json.dumps(data["config"])))
        cfg["hosts"] = {**(cfg.get("hosts") or {}),
                        **{f"127.0.0.1:{p}": {"rate": 5000.0, "period_s": 1.0, "concurrency": 8} for p in ports.values()}}
        if name == "demo-crawl":  # the old demo also set a thumbnails policy (pacing of the thumbnails fake)
            cfg["crawl"]["policies"] = {"thumbnails": {"rate": 5000.0, "period_s": 1.0, "concurrency": 8}}
        data["config"] = cfg
        path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.slow
def test_demo_after_an_earlier_demos_state_with_loopback_ports_prints_no_drift(tmp_path, fresh_demo):
    # before: a workdir holding an earlier session's demo state (its manifests recorded the fakes' loopback ports)
    # made every later demo print 'models changed since its last run (models[0].base_url: http://127.0.0.1:36979/v1
    # -> http://openai.sandbox.invalid/v1) ... Use a new [campaign] name to run with the change' and pacing lines
    # for hosts.127.0.0.1:PORT, on every demo from then on (the change was 'not applied', so the manifest kept the
    # loopback config)
    # a finished fresh demo (the fixture's, copied here: it ran in another folder, which a moved workdir may
    # do without any drift line, test_demo_in_a_moved_workdir_prints_no_drift_for_its_own_folders)
    work = _copy_of_fresh_demo(fresh_demo, tmp_path / "work")
    _as_an_earlier_demo_recorded(work / "state")
    for attempt in ("second", "third"):
        p = _demo(work)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        both = p.stdout + p.stderr
        changed = [ln for ln in both.splitlines() if "changed since its last run" in ln]
        assert "Use a new [campaign] name" not in both, (attempt, changed)
        assert not any("127.0.0.1" in ln for ln in changed), (attempt, changed)
        if attempt == "second":  # at most the old thumbnails policy, said once as the pacing it is
            assert all("limits or pacing changed" in ln and "crawl.policies.thumbnails" in ln for ln in changed), changed
        else:
            assert not changed, changed
    for name in DEMO_CAMPAIGNS:
        data = json.loads((work / "state" / name / "manifest.json").read_text(encoding="utf-8"))
        assert "127.0.0.1" not in json.dumps(data.get("config")), name
        assert "config_not_applied" not in data, name


def test_crawl_policies_are_pacing_not_a_call_setting():
    # before: '[crawl.policies.overpass] rate' changed on a finished crawl read as 'crawl changed since its last
    # run ... Use a new [campaign] name to run with the change' (kept 'not applied', said on every run), though
    # the policies are [hosts]-like limits (rate, concurrency, timeouts, attempts) that change no request
    from geoagent.runtime.drift import is_pacing_key

    for key in ("crawl.policies", "crawl.policies.overpass", "crawl.policies.thumbnails.rate",
                "crawl.policies.wdqs.connect_timeout_s"):
        assert is_pacing_key(key), key
    assert not is_pacing_key("crawl.endpoints.overpass")
    assert not is_pacing_key("crawl.policiesx")


def test_env_root_naming_the_files_folder_by_another_spelling_is_no_override(tmp_path, monkeypatch):
    # before: $GEOAGENT_QUEUES naming [paths] queues's own folder through a symlink or a path relative to the
    # working folder printed 'warning: ... [paths] queues = '/x/q' is overridden by $GEOAGENT_QUEUES = 'q' (the
    # environment wins); unset GEOAGENT_QUEUES to use the file's folder' (the comparison was textual), though
    # the run used that very folder (its docstring: none 'when both name the same folder')
    from geoagent.config import load_config, root_override_warnings

    q = tmp_path / "q"
    q.mkdir()
    (tmp_path / "qlink").symlink_to(q)
    (tmp_path / "other").mkdir()
    p = tmp_path / "c.toml"
    p.write_text(f'[campaign]\nname = "c"\nkind = "generic"\n[paths]\nqueues = "{q}"\nstate = "{tmp_path / "s"}"\n'
                 '[budget]\ncap_usd = 1.0\n[generic]\nn_requests = 1\n[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim"\n',
                 encoding="utf-8")
    cfg = load_config(p)
    monkeypatch.chdir(tmp_path)
    for same in ("q", "./q/", str(tmp_path / "qlink"), str(tmp_path / "other" / ".." / "q")):
        monkeypatch.setenv("GEOAGENT_QUEUES", same)
        assert root_override_warnings(cfg) == [], same
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "other"))
    assert len(root_override_warnings(cfg)) == 1


def test_a_stop_signal_that_cut_nothing_short_is_on_the_outcome(tmp_path, monkeypatch):
    # before: a SIGINT whose stop left nothing queued ended the run 'complete' (exit 0) and the Outcome kept no
    # trace of it (only late_signal, for a signal after the pipeline ended): `demo` went on to the next
    # campaign (GeoVerify, then GeoHint, seconds of calls) after the user's Ctrl-C, as it checked only
    # exit_code == 130 and late_signal
    import signal
    import threading

    import anyio

    from test_cost_dead_letter_deliveries import KEY, _cfg

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("DEAD_TEST_KEY", KEY)
    app = llm_openai.make_app(api_keys=[KEY])

    async def go():
        async with serve(app) as base:
            cfg = load_config(_cfg(tmp_path, base))
            done = threading.Event()

            def later() -> None:  # once every request is done, as a --watch process waits for more
                import sqlite3
                import time

                qfile = tmp_path / "q" / "dead" / "responses.sqlite"
                for _ in range(400):
                    time.sleep(0.05)
                    try:
                        with sqlite3.connect(qfile) as conn:
                            if conn.execute("SELECT count(*) FROM tasks WHERE state != 2").fetchone()[0] == 0 \
                                    and conn.execute("SELECT count(*) FROM tasks").fetchone()[0] == 3:
                                break
                    except sqlite3.Error:
                        pass
                time.sleep(0.5)
                os.kill(os.getpid(), signal.SIGINT)
                done.set()

            threading.Thread(target=later, daemon=True).start()
            return await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)

    out = anyio.run(go)
    assert (out.status, out.exit_code) == ("complete", 0)
    assert out.stop_signal == "SIGINT"


def _simulated_cfg(root: Path) -> Path:
    p = root / "c.toml"
    p.write_text(f'[campaign]\nname = "c"\nkind = "generic"\n[paths]\nqueues = "{root / "q"}"\nstate = "{root / "s"}"\n'
                 '[budget]\ncap_usd = 1.0\n[generic]\nn_requests = 2\n'
                 '[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim"\n', encoding="utf-8")
    return p


def test_a_campaign_moved_with_its_queues_and_state_runs_on_without_the_not_carried_over_warning(tmp_path, capsys):
    # before: moving a campaign's root (queues and state together) and pointing the file at it, the next run said
    # 'warning: campaign c: its earlier runs kept their queues in /old/q/c, which no longer exists; this run starts
    # its queues in /new/q/c (tasks dead-lettered or left queued there are not carried over ...)', though the new
    # folder holds those very queues (moved along) and the run used them
    import shutil

    from geoagent.cli import main

    old = tmp_path / "old"
    old.mkdir()
    assert main(["run", str(_simulated_cfg(old)), "--no-live"]) == 0
    new = tmp_path / "new"
    shutil.move(str(old), str(new))
    p = _simulated_cfg(new)
    capsys.readouterr()
    assert main(["run", str(p), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "not carried over" not in err and "no longer exists" not in err, err
    # the recorded queues gone (deleted) and none where this run looks: it does start over, and still says so
    shutil.rmtree(new / "q")
    p.write_text(p.read_text(encoding="utf-8").replace(str(new / "q"), str(tmp_path / "q2")), encoding="utf-8")
    assert main(["run", str(p), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "no longer exists" in err and "not carried over" in err, err


@pytest.mark.slow
def test_demo_in_a_moved_workdir_prints_no_drift_for_its_own_folders(tmp_path, fresh_demo):
    # before: `mv work work2; demo --workdir work2` said 'info: campaign demo-geoverify: geoverify changed since its
    # last run (geoverify.image_root: '/x/work/state/images' -> '/x/work2/state/images'; geoverify.release_dir:
    # ...) ... Use a new [campaign] name to run with the change' (and the same for GeoHint) on that demo and every
    # later one (a change 'not applied'): the demo's own folders, moved with it, read as changed call settings
    # the fixture's fresh demo ran in a folder that is gone now (renamed); its copy here is that workdir moved
    ran_in = fresh_demo[1]
    assert not ran_in.exists()
    _copy_of_fresh_demo(fresh_demo, tmp_path / "work2")
    p = _demo(tmp_path / "work2")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    both = p.stdout + p.stderr
    assert "changed since its last run" not in both, [ln for ln in both.splitlines() if "changed since" in ln]
    assert "this run: 0 new model calls" in both
    for name in DEMO_CAMPAIGNS:
        data = json.loads((tmp_path / "work2" / "state" / name / "manifest.json").read_text(encoding="utf-8"))
        assert str(ran_in) + "/" not in json.dumps(data.get("config")), name
