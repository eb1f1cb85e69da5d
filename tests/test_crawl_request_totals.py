"""``report/crawl_summary.json`` counts the crawl's API requests of this run and of every run of the crawl (user
walkthrough, defect 2).

Before, the file held the last run's requests only, and each re-run overwrote them: a crawl stopped by SIGINT
(overpass 4, wdqs 3, mapillary 52), resumed (wdqs 1, pageviews 356) and re-run once more read all zeros, so a methods
section built from it was wrong after any resume. Each crawl process now keeps its requests in a tally file of its
own (``state/<crawl>/api_requests/``), rewritten at each request, so a run killed with SIGKILL is counted too; the
summary file has ``requests.this_run`` and ``requests.all_runs`` and the crawl's ``counts`` (cities, sites,
images kept and rejected); the console summary says which figure is which. The sandbox crawl
(``geoagent/configs/crawl_sandbox.toml``, local fakes).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"


def _summary(root: Path) -> dict:
    return json.loads((root / "state" / CAMPAIGN / "report" / "crawl_summary.json").read_text(encoding="utf-8"))


def test_rerun_keeps_the_requests_of_earlier_runs(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(CONFIG), "--no-live"]) == 0
    capsys.readouterr()
    first = _summary(isolated_roots)
    sent = {api: st["requests"] for api, st in first["api"].items()}
    assert sent["wdqs"] > 0 and sent["mapillary"] > 0 and sent["pageviews"] > 0, sent
    assert {a: n for a, n in first["requests"]["this_run"].items() if n} == {a: n for a, n in sent.items() if n}
    assert first["requests"]["all_runs"] == first["requests"]["this_run"]
    # walk33 #4: the sandbox serves thumbnails from the Graph API's host: counted under mapillary, and said so
    assert first["requests"]["thumbnails_under_mapillary"] is True and first["requests"]["this_run"]["thumbnails"] == 0

    assert main(["crawl", str(CONFIG), "--no-live"]) == 0  # a re-run: nothing to do, no request
    out = " ".join(capsys.readouterr().out.split())
    again = _summary(isolated_roots)
    assert set(again["requests"]["this_run"].values()) == {0}, again["requests"]
    assert again["requests"]["all_runs"] == first["requests"]["all_runs"], again["requests"]
    assert again["requests"]["earlier_runs_unrecorded"] is False
    assert f"wdqs: 0 requests by this run ({sent['wdqs']} over all runs)" in out, out
    assert "API requests: by this run, and over every run of this crawl in parentheses" in out, out
    # what the crawl holds, whichever run made it
    counts = again["counts"]
    assert counts["cities"] == {"screened": 3, "admitted": 2}
    assert counts["sites"] == 6 and counts["images"]["kept"] > 0
    assert counts["images"]["examined"] == counts["images"]["kept"] + sum(counts["images"]["rejected"].values())
    assert counts["images"]["audited"] == counts["images"]["usable"] + counts["images"]["excluded"]
    assert counts == first["counts"]


def test_a_sigkilled_run_s_requests_are_counted(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    env = {**os.environ, "GEOAGENT_STATE": str(isolated_roots / "state"),
           "GEOAGENT_QUEUES": str(isolated_roots / "queues"), "MAPILLARY_TOKEN": "MLY|sandbox"}
    proc = subprocess.Popen([sys.executable, "run.py", "crawl", str(CONFIG), "--no-live"], cwd=REPO, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    tallies = isolated_roots / "state" / CAMPAIGN / "api_requests"
    killed: dict[str, int] = {}
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:  # killed once it has counted Mapillary requests
            files = list(tallies.glob("*.json")) if tallies.is_dir() else []
            if files:
                try:
                    killed = json.loads(files[0].read_bytes())["requests"]
                except (ValueError, KeyError):
                    killed = {}
                if killed.get("mapillary", 0) >= 3:
                    break
            time.sleep(0.01)
        assert proc.poll() is None, "the crawl ended before it could be killed"
        proc.send_signal(signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    (kept,) = list(tallies.glob("*.json"))
    killed = json.loads(kept.read_bytes())["requests"]  # as the killed process left it
    assert killed.get("mapillary", 0) >= 3, killed

    assert main(["crawl", str(CONFIG), "--no-live"]) == 0  # the resume
    capsys.readouterr()
    req = _summary(isolated_roots)["requests"]
    assert req["processes"] == 2
    assert req["all_runs"] == {api: killed.get(api, 0) + n for api, n in req["this_run"].items()}, (killed, req)
    assert req["all_runs"]["mapillary"] > req["this_run"]["mapillary"]
