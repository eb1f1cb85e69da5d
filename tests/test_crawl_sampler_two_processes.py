"""Two crawl processes sampling overlapping cities at once keep a landmark under one city only.

Leftover of session 13: sampler version 5 skips a candidate already a site of another city of the crawl (the city
sampled first keeps the landmark), sampling one city at a time; but the "one at a time" was an asyncio lock, per
process, so two ``--stages site_sampler`` processes sampling at once both read "no city claimed it" and both took
it (the trials' hand-off only warned). The stage now also holds a cross-process file lock
(:func:`geoagent.crawl.stages.sampling_lock`, ``fcntl.flock`` on ``<state_dir>/sampling.lock``). Two real processes
(tests/_sampler_proc_child.py), each serving the sandbox fakes and running the sampler stage on one of two cities
1.1 km apart (Mirror Bay and Mirror Bay North, which share Peony Bell Tower, Q6000034), started together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.test_crawl_crawl2_s13 import MIRROR_BAY_NORTH, _config

REPO = Path(__file__).resolve().parents[1]
CHILD = REPO / "tests" / "_sampler_proc_child.py"


def test_two_sampler_processes_at_once_keep_a_shared_landmark_under_one_city(isolated_roots):
    cfg = _config(isolated_roots, MIRROR_BAY_NORTH)
    state = isolated_roots / "state" / "crawl-sandbox"
    state.mkdir(parents=True)
    go = isolated_roots / "go"
    env = {**os.environ, "MAPILLARY_TOKEN": "MLY|sandbox", "PYTHONPATH": str(REPO)}
    procs = [subprocess.Popen([sys.executable, str(CHILD), str(cfg), str(state), city, str(go)], cwd=isolated_roots,
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for city in ("Mirror Bay", "Mirror Bay North")]
    try:
        for p in procs:
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        go.touch()
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    by_city = {o["city"]: o["sites"] for o in outs}
    assert by_city["Mirror Bay"] and by_city["Mirror Bay North"]  # each city has sites of its own
    holders = [c for c, qids in by_city.items() if "Q6000034" in qids]
    assert len(holders) == 1, by_city  # before: a site of both cities
    other = "Mirror Bay North" if holders == ["Mirror Bay"] else "Mirror Bay"
    rec = json.loads((state / "sampling" / f"{other.lower().replace(' ', '')}.json").read_text(encoding="utf-8"))
    assert [(w["qid"], w["city"]) for w in rec["walk"] if w["decision"] == "skip_other_city"] == [
        ("Q6000034", holders[0])]

