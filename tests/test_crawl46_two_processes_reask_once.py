"""Two processes of one crawl make the re-asks one process makes, also with flaky auditor answers (fixreask46).

A candidate whose rating fails alone is re-asked alone with a reminder (``REF_MAX_REASKS`` in all), and a run stops
re-asking a city's candidates once ``REF_MAX_FUTILE_REASKED`` of them had every re-ask fail; the rest keep their
failure, with their re-asks, for a later run. Both limits lived in each process's memory (the auditor's ``_tried``
and ``_futile``), so with two ``run.py crawl`` processes on one state folder (docs/crawls.md, "Several processes, one
state folder") the process that ran a city's rating step cut the re-asks off, and a later site task of that city in
the OTHER process re-asked the candidates just cut off, paying for each re-ask and spending their re-asks (review46
#1: 280-286 text-auditor calls where one process makes 274, 75 re-asks for 63; later runs then had more ratings
failed for good). Now "failed or re-asked in this run" and "re-asks spent in this run" are also read from the logs
(records logged, by any process of the crawl, since its processes running now began: the time the first of them wrote
into ``run.lock``), under the city's claim; and a process that joins a running crawl reopens no site whose re-asks
this run cut off. Before the fix 4 of 4 runs of this test failed (the plain and the staggered start each failed).

The auditor of the two crawl processes is the sandbox's fake with a deterministic fault: it refuses every prompt
that names a candidate whose label's CRC-32 is a multiple of :data:`POISON_MOD` (a refusal is split on down to the
name, which then fails alone; its re-asks are refused too), as tests/test_crawl40_ref.py's ``poisoned`` refuses a
name, registered in each crawl process before ``run.py`` runs.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from geoagent import constants as C
from geoagent.crawl.referenceability import REF_MAX_FUTILE_REASKED, REF_MAX_REASKS, reask_due

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"
TRIES = 2  # before the fix each of 2 tries re-asked more than one process (and 3 of 3 by hand)
#: a label whose CRC-32 is a multiple of this is refused, in any prompt (review46's REV_POISON=40: a few per city,
#: more than REF_MAX_FUTILE_REASKED, so the bound cuts re-asks off)
POISON_MOD = 40
#: seconds each rating answer of the fake takes (its process's loop waits: the other process takes work meanwhile)
DELAY_S = 0.02

#: the crawl process: the fake's rating answers with the refusals, then run.py as from the command line
CHILD = r"""
import re, runpy, sys, time, zlib
import geoagent.crawl.simulate as sim
from geoagent.crawl.referenceability import REF_MARKER
from geoagent.sandbox.responders import register_responder

MOD, DELAY_S = int(sys.argv[1]), float(sys.argv[2])
LINE = re.compile(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \([0-9.]+ km\))?$", re.M)

def refused(ctx):
    time.sleep(DELAY_S)  # a slower auditor: a city's step outlasts the other process's 1 s defer of its sites
    labels = [lab for _, lab in LINE.findall(ctx.prompt.split("Candidates", 1)[-1])]
    if any(zlib.crc32(lab.encode()) % MOD == 0 for lab in labels):
        return "I'm sorry, I cannot rate these places."
    return sim.referenceability_answer(ctx)

register_responder("crawl_referenceability", lambda p: REF_MARKER in p, refused)
sys.argv = ["run.py", *sys.argv[3:]]
runpy.run_path("run.py", run_name="__main__")
"""


def _crawl(root: Path, n: int, *, stagger: bool = False) -> Path:
    """Run ``n`` sandbox crawl processes with the refusing auditor under ``root``, at once or (``stagger``) each after
    the one before logged its first failed rating; the crawl's state folder."""
    env = {**os.environ, "GEOAGENT_STATE": str(root / "state"), "GEOAGENT_QUEUES": str(root / "queues"),
           "MAPILLARY_TOKEN": "MLY|sandbox", "PYTHONPATH": str(REPO)}
    log = root / "state" / CAMPAIGN / C.AUDIT_DECISIONS_FILE
    procs = []
    for _ in range(n):
        if stagger and procs:
            deadline = time.monotonic() + 120
            while not (log.is_file() and b'"error"' in log.read_bytes()) and time.monotonic() < deadline:
                time.sleep(0.05)
        procs.append(subprocess.Popen([sys.executable, "-c", CHILD, str(POISON_MOD), str(DELAY_S), "crawl",
                                       str(CONFIG), "--no-live"], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT))
    outs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0] * n, outs
    return root / "state" / CAMPAIGN


def _rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def _ledger(state: Path) -> list[tuple]:
    """(model, state, calls, billed nUSD) of the campaign's ledger."""
    with sqlite3.connect(state / "campaign.sqlite") as db:
        return sorted(db.execute("SELECT model, state, COUNT(*), SUM(actual_nusd) FROM reservations GROUP BY 1, 2"))


def _reasks(state: Path) -> Counter:
    """The re-ask records of the rating and screening logs: (log, qid, city, re-ask number, read or failed)."""
    out: Counter = Counter()
    for name in (C.AUDIT_DECISIONS_FILE, C.AUDIT_SENSITIVE_FILE):
        for r in _rows(state / name):
            if r.get("reasks"):
                out[(name, r["qid"], r.get("city"), r["reasks"], "error" in r)] += 1
    return out


def _standing_failures(state: Path) -> tuple[int, int]:
    """(ratings failed now, of them with a re-ask left for a later run): the last record of each (QID, city)."""
    last = {(r["model"], r["qid"], r.get("city")): r for r in _rows(state / C.AUDIT_DECISIONS_FILE)}
    failed = [r for r in last.values() if "error" in r]
    return len(failed), sum(1 for r in failed if reask_due(r))


def test_two_crawl_processes_make_the_reasks_of_one(tmp_path):
    single = _crawl(tmp_path / "single", 1)
    ledger, reasks, failures = _ledger(single), _reasks(single), _standing_failures(single)
    # the scenario: each city had REF_MAX_FUTILE_REASKED candidates re-asked in vain, and some left for a later run
    futile = Counter(city for (log, _, city, n, err) in reasks
                     if log == C.AUDIT_DECISIONS_FILE and n == REF_MAX_REASKS and err)
    assert futile == {"sandboxcity": REF_MAX_FUTILE_REASKED, "mirrorbay": REF_MAX_FUTILE_REASKED}, reasks
    assert failures[1] > 0, failures
    for i in range(TRIES):
        # try 1: the second process starts once the first logged a failure (a run joined: one run still, run.lock)
        state = _crawl(tmp_path / f"try{i}", 2, stagger=i % 2 == 1)
        # the same re-asks (before: the other process re-asked those the step's bound had cut off) ...
        assert _reasks(state) == reasks, (i, _reasks(state) - reasks, reasks - _reasks(state))
        # ... so the same calls and spend, and as many failures left with their re-asks for a later run
        assert _ledger(state) == ledger, i
        assert _standing_failures(state) == failures, i


def test_a_claim_without_flock_warns_once_per_lock_file(tmp_path, monkeypatch, caplog):
    """fixreask46 #2: where the state folder's file system has no flock (ENOLCK: an NFS mount without a lock manager,
    some FUSE or SMB mounts) the claim is handed out with the process's own lock only, as before, but no longer
    silently. The file system's refusal is stood in for by ``fcntl.flock`` raising what such a mount raises."""
    import asyncio
    import errno
    import fcntl
    import logging

    from geoagent.crawl.stages import CrawlServices, ref_city_claim

    def no_locks(fh, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    svc = CrawlServices(settings=None, http=None, state_dir=tmp_path, images_root=tmp_path, overpass=None, wdqs=None,
                        mapillary=None, pageviews=None, image_provider=None, ref_provider=None)
    ran: list[str] = []

    async def rate(city: str) -> None:
        async with ref_city_claim(svc, city):
            ran.append(city)

    with caplog.at_level(logging.WARNING, logger="geoagent.crawl.stages"):
        for city in ("mirrorbay", "mirrorbay", "sandboxcity"):
            asyncio.run(rate(city))
    assert ran == ["mirrorbay", "mirrorbay", "sandboxcity"]  # still handed out: the process's own lock
    warned = [r.getMessage() for r in caplog.records if "does not lock files" in r.getMessage()]
    # once per lock file, naming it, what may be repeated and where to read more
    assert len(warned) == 2, warned
    assert str(tmp_path / "ref_cities" / "mirrorbay.lock") in warned[0] and "No locks available" in warned[0]
    assert str(tmp_path / "ref_cities" / "sandboxcity.lock") in warned[1]
    assert "repeat a city's step" in warned[0] and "docs/crawls.md" in warned[0]
