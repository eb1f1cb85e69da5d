"""A ``run.py crawl CONFIG --watch`` run records the config it ended with: the cities added while it watched.

Walkthrough: with the sandbox crawl watching, ``Mirror Bay`` was added to the config and crawled ("planned new
city 'Mirror Bay'", "planned 3 cities (1 of them added ...)"), but the run's manifest entry recorded the
planned count of its start and the config without the new city, so a plain re-run of the same file said
``info: ... crawl changed since its last run (crawl.cities: added {'city': 'Mirror Bay'...})``: a change that
did not happen (and, with another change, "the change affects none of the stored results" although Mirror
Bay's are stored). Real process (``run.py crawl``, its fakes in-process on ``*.sandbox.invalid``), real file
edit, SIGINT once the new city is crawled, then a real re-run. Takes about 25-40 s.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time

import orjson

from geoagent.engine import WATCH_BANNER
from tests.test_crawl_watch_new_city import (CONFIG, REPO, _lines_until, _start_watch, _watch_env,
                                             _without_city)


def test_watch_run_records_the_cities_it_added_so_a_rerun_sees_no_change(tmp_path):
    full = CONFIG.read_text(encoding="utf-8")
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(_without_city(_without_city(full, "Mirror Bay"), "Sprawl Town"), encoding="utf-8")
    proc, sel = _start_watch(tmp_path, cfgp)
    seen: list[str] = []
    folder = tmp_path / "state" / "crawl-sandbox"
    try:
        _lines_until(proc, sel, re.escape(WATCH_BANNER), seen, 60)
        cfgp.write_text(_without_city(full, "Sprawl Town"), encoding="utf-8")
        _lines_until(proc, sel, r"planned new city 'Mirror Bay'", seen, 40)
        ladders = folder / "ladders"
        deadline = time.monotonic() + 60
        while not (ladders.is_dir() and any(p.name.startswith("mirrorbay_") for p in ladders.iterdir())):
            assert proc.poll() is None and time.monotonic() < deadline, "the added city was not crawled"
            time.sleep(0.3)
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + out
    assert re.search(r"planned 2 cities", out), out[-3000:]

    man = orjson.loads((folder / "manifest.json").read_bytes())
    run = man["runs"][-1]
    assert run["planned"] == 2 and run["summary"]["planned"] == 2, run
    cities = [c["city"] for c in man["config"]["crawl"]["cities"]]
    assert cities == ["Sandbox City", "Mirror Bay"], cities
    assert run["config_sha256"] == man["config_sha256"] and man["config_sha256"] in man["config_history"], run

    # a plain re-run of the same file: the config is the one the last run ended with, no change to report
    res = subprocess.run([sys.executable, str(REPO / "run.py"), "crawl", str(cfgp), "--no-live"], cwd=REPO,
                         env=_watch_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "changed since its last run" not in res.stderr, res.stderr
    assert "Mirror Bay" not in res.stderr, res.stderr


def test_a_watch_run_killed_outright_has_recorded_each_city_it_added(tmp_path):
    """SIGKILL gives the run no end to write its manifest at: the cities it planned while watching must be recorded
    as each is planned (the manifest is written atomically, so a kill leaves the last record whole). The killed
    run's manifest shows the added city in its config and planned count, and a plain re-run of the same file
    reports no config change (before: ``crawl changed since its last run (crawl.cities: added {'city': 'Mirror
    Bay', ...})``, the manifest holding the start's config with one city)."""
    full = CONFIG.read_text(encoding="utf-8")
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(_without_city(_without_city(full, "Mirror Bay"), "Sprawl Town"), encoding="utf-8")
    folder = tmp_path / "state" / "crawl-sandbox"
    proc, sel = _start_watch(tmp_path, cfgp)
    seen: list[str] = []

    def cities() -> list[str]:
        man = orjson.loads((folder / "manifest.json").read_bytes())
        return [c["city"] for c in man["config"]["crawl"]["cities"]]

    try:
        _lines_until(proc, sel, re.escape(WATCH_BANNER), seen, 60)
        deadline = time.monotonic() + 10  # the run's entry is written just after the banner
        while not (folder / "manifest.json").is_file() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert cities() == ["Sandbox City"]
        cfgp.write_text(_without_city(full, "Sprawl Town"), encoding="utf-8")
        _lines_until(proc, sel, r"planned new city 'Mirror Bay'", seen, 40)
        deadline = time.monotonic() + 10  # the record follows the line; without it, kill after 10 s anyway
        while cities() != ["Sandbox City", "Mirror Bay"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL

    man = orjson.loads((folder / "manifest.json").read_bytes())
    run = man["runs"][-1]
    assert run["status"] == "running" and run["stopped_at"] is None  # no end was written: a kill
    assert cities() == ["Sandbox City", "Mirror Bay"], man["config"]["crawl"]["cities"]
    assert run["planned"] == 2, run
    assert run["config_sha256"] == man["config_sha256"] and man["config_sha256"] in man["config_history"], run
    assert run["config_sha256_at_start"] != run["config_sha256"] and run["config_sha256_at_start"] in man["config_history"]
    assert not list(folder.glob("manifest.json.*tmp"))  # written atomically: no temporary file left over

    # a plain re-run of the same file: the killed run ran with Mirror Bay, no change to report; it finishes the city
    res = subprocess.run([sys.executable, str(REPO / "run.py"), "crawl", str(cfgp), "--no-live"], cwd=REPO,
                         env=_watch_env(tmp_path), capture_output=True, text=True, timeout=180)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "changed since its last run" not in res.stderr, res.stderr
    assert "Mirror Bay" not in res.stderr, res.stderr
    man = orjson.loads((folder / "manifest.json").read_bytes())
    assert man["runs"][-2]["run_id"] == run["run_id"] and man["runs"][-2]["status"] == "killed"
    assert man["runs"][-1]["status"] == "complete"
    assert any(p.name.startswith("mirrorbay_") for p in (folder / "ladders").iterdir())
