"""``run.py crawl CONFIG --watch`` says when it picks up a city added to the config, and counts it.

Walkthrough: adding a ``[[crawl.cities]]`` table to the TOML of a watching crawl worked, silently: no line
said the city was picked up, and the summary ended with "planned 1 cities" while 2 were done; README did
not say that editing the TOML is how a city is added under ``--watch``. Real process (``run.py crawl``,
its fakes in-process on ``*.sandbox.invalid``), real file edit, SIGINT once the new city is crawled.
Takes about 15-25 s (the watcher re-reads the config every 10 s).
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

from geoagent.engine import WATCH_BANNER
from _docs import docs_text

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _without_city(text: str, name: str) -> str:
    """The config text with the ``[[crawl.cities]]`` table of ``name`` left out."""
    head, *tables = text.split("[[crawl.cities]]")
    kept = []
    for t in tables:
        body, sep, rest = t.partition("\n[")  # a city table ends where the next table starts
        if f'city = "{name}"' in body:
            kept.append(None if not sep else "[" + rest)
        else:
            kept.append("[[crawl.cities]]" + t)
    out = head + "".join(k for k in kept if k is not None)
    assert f'city = "{name}"' not in out and out.count("[[crawl.cities]]") == len(tables) - 1
    return out


def _lines_until(proc: subprocess.Popen, sel: selectors.BaseSelector, pattern: str, seen: list[str],
                 timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            if re.search(pattern, line):
                return line
    proc.kill()
    raise AssertionError(f"no line matching {pattern!r}; stdout so far: {''.join(seen)[-2000:]}; "
                         f"stderr: {proc.stderr.read()[-2000:]}")


def _watch_env(tmp_path: Path) -> dict[str, str]:
    """Environment of a sandbox crawl with its queues and state under ``tmp_path``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    env.update(MAPILLARY_TOKEN="MLY|sandbox", GEOAGENT_QUEUES=str(tmp_path / "queues"),
               GEOAGENT_STATE=str(tmp_path / "state"))
    return env


def _start_watch(tmp_path: Path, cfgp: Path) -> tuple[subprocess.Popen, selectors.BaseSelector]:
    """``run.py crawl CFGP --watch`` in a subprocess (:func:`_watch_env`) and a selector on its stdout for
    :func:`_lines_until`."""
    env = _watch_env(tmp_path)
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "crawl", str(cfgp), "--watch", "--no-live"],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    return proc, sel


def test_watch_logs_each_city_added_to_the_config_and_counts_it(tmp_path):
    full = CONFIG.read_text(encoding="utf-8")
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(_without_city(_without_city(full, "Mirror Bay"), "Sprawl Town"), encoding="utf-8")
    proc, sel = _start_watch(tmp_path, cfgp)
    seen: list[str] = []
    try:
        _lines_until(proc, sel, re.escape(WATCH_BANNER), seen, 60)
        # add Mirror Bay (the shipped config's third city) by editing the file, as README says
        cfgp.write_text(_without_city(full, "Sprawl Town"), encoding="utf-8")
        line = _lines_until(proc, sel, r"planned new city", seen, 40)
        assert "'Mirror Bay'" in line and "city:mirrorbay" in line, line
        pool = tmp_path / "state" / "crawl-sandbox" / "city_pool.csv"
        ladders = tmp_path / "state" / "crawl-sandbox" / "ladders"
        deadline = time.monotonic() + 60
        while not (pool.is_file() and "Mirror Bay" in pool.read_text(encoding="utf-8")
                   and ladders.is_dir() and any(p.name.startswith("mirrorbay_") for p in ladders.iterdir())):
            assert proc.poll() is None and time.monotonic() < deadline, "the added city was not crawled"
            time.sleep(0.3)
        time.sleep(2.0)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    out = "".join(seen) + out
    assert out.count("planned new city") == 1, out  # Sandbox City (the run's own plan) is not "new"
    m = re.search(r"planned (\d+) cities(.*)", out)
    assert m, out
    assert int(m.group(1)) == 2 and "1 of them added to the config while watching" in m.group(2), m.group(0)

    text = " ".join(docs_text().split())
    assert "--watch" in text and "planned new city" in text
