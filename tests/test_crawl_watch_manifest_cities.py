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
