"""Two processes of one crawl in one state folder run each city's referenceability rating step once (fixcrawl46).

docs/crawls.md ("Several processes, one state folder") lets two ``run.py crawl`` processes share a crawl. Each took
sites of one city off the queue and both ran the city's rating step (the first site of a city to arrive rates the
candidates of all its sites): nothing was paid twice for the same request (the response store and the logs answered
the second process), but both did the work and both counted it: two ``ref_city_rating`` records of the city in
``crawl_decisions.jsonl``, ``ref_cities/<city>.json`` overwritten with the second step's counts (``model_calls`` 2,
``rating_batches_asked`` 0), and now and then a batch the first process had half decided asked anew with its
undecided candidates only (a new request, paid: 69 calls where one process makes 68). The step now runs under the
city's claim (:func:`geoagent.crawl.stages.ref_city_claim`, an ``flock`` on ``ref_cities/<city key>.lock``); a site
whose city another process is rating goes back to the queue for a second and finds its city rated when it comes
back. Before the fix every one of 3 two-process crawls (and 3 of 3 earlier by hand) logged a city's step twice.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.crawl.referenceability import RAW_ANSWERS_FILE, REF_CITIES_DIR
from geoagent.crawl.stages import REF_CLAIM_RETRY_S, CityRatedElsewhere, CrawlServices, ref_city_claim

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"
TRIES = 3  # the race: before the fix each of 3 tries ran a city's step in both processes


def _crawl(root: Path, n: int) -> Path:
    """Run ``n`` ``run.py crawl`` processes of the sandbox crawl at once under ``root``; its state folder."""
    env = {**os.environ, "GEOAGENT_STATE": str(root / "state"), "GEOAGENT_QUEUES": str(root / "queues"),
           "MAPILLARY_TOKEN": "MLY|sandbox"}
    procs = [subprocess.Popen([sys.executable, "run.py", "crawl", str(CONFIG), "--no-live"], cwd=REPO, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(n)]
    outs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
    assert [p.returncode for p in procs] == [0] * n, outs
    return root / "state" / CAMPAIGN


def _steps(state: Path) -> list[dict]:
    """The ``ref_city_rating`` records of the decision log, without what differs between equal runs (``ts``; ``site``:
    which of the city's sites' tasks ran the step)."""
    rows = [json.loads(x) for x in (state / C.CRAWL_DECISIONS_FILE).read_bytes().splitlines() if x.strip()]
    return sorted(({k: v for k, v in r.items() if k not in ("ts", "site")} for r in rows
                   if r.get("event") == "ref_city_rating"), key=lambda r: r["city"])


def _markers(state: Path) -> dict[str, dict]:
    """``ref_cities/<city key>.json`` by city key, without ``site`` (as :func:`_steps`)."""
    return {p.stem: {k: v for k, v in json.loads(p.read_bytes()).items() if k != "site"}
            for p in sorted((state / REF_CITIES_DIR).glob("*.json"))}


def _ledger(state: Path) -> list[tuple]:
    """(model, state, calls, billed nUSD) of the campaign's ledger."""
    with sqlite3.connect(state / "campaign.sqlite") as db:
        return sorted(db.execute("SELECT model, state, COUNT(*), SUM(actual_nusd) FROM reservations GROUP BY 1, 2"))


def _city_owners(state: Path) -> dict[str, set[str]]:
    """City key -> the ledger owners (one per process) of the referenceability calls for its candidates: each
    call's request key is its answer's ``key`` in ``audit_raw_answers.jsonl``, whose ``qids`` are the city's."""
    city_of = {q: key for key, m in _markers(state).items() for q in m["qids"]}
    qids_of = {r["key"]: r["qids"] for r in (json.loads(x) for x in (state / RAW_ANSWERS_FILE).read_bytes().splitlines()
                                             if x.strip())}
    out: dict[str, set[str]] = {}
    with sqlite3.connect(state / "campaign.sqlite") as db:
        for key, owner in db.execute("SELECT request_key, owner FROM reservations WHERE request_key IN (%s)"
                                     % ",".join("?" * len(qids_of)), list(qids_of)):
            for city in {city_of[q] for q in qids_of[key]}:
                out.setdefault(city, set()).add(owner)
    return out


def test_two_crawl_processes_rate_each_city_once(tmp_path):
    single = _crawl(tmp_path / "single", 1)
    steps, markers, ledger = _steps(single), _markers(single), _ledger(single)
    assert [s["city"] for s in steps] == ["Mirror Bay", "Sandbox City"] and all(s["model_calls"] for s in steps)
    for i in range(TRIES):
        state = _crawl(tmp_path / f"try{i}", 2)
        got = _steps(state)
        # one step per city (before: a second record of a city, from the process that ran its step again)
        assert Counter(s["city"] for s in got) == Counter(s["city"] for s in steps), (i, got)
        # ... with the counts of an uninterrupted single-process crawl, in the log and in the city's record
        assert got == steps, i
        assert _markers(state) == markers, i
        # the ledger: the same calls and spend (before: now and then one call more, a half-decided batch asked anew)
        assert _ledger(state) == ledger, i
        # every rating and screening call of a city was made by one process
        owners = _city_owners(state)
        assert set(owners) == set(markers) and all(len(o) == 1 for o in owners.values()), (i, owners)


def _services(state: Path) -> CrawlServices:
    # the claim reads the state folder and the process's locks only
    return CrawlServices(settings=None, http=None, state_dir=state, images_root=state, overpass=None, wdqs=None,
                         mapillary=None, pageviews=None, image_provider=None, ref_provider=None)


HOLDER = """
import fcntl, sys, time
f = open(sys.argv[1], "a+b")
fcntl.flock(f, fcntl.LOCK_EX)
print("held", flush=True)
time.sleep(120)
"""


def test_a_city_claimed_by_another_process_defers_the_site_until_that_process_ends(tmp_path):
    svc = _services(tmp_path)
    lock = tmp_path / REF_CITIES_DIR / "mirrorbay.lock"
    lock.parent.mkdir()
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock)], stdout=subprocess.PIPE, text=True)
    ran: list[str | None] = []

    async def rate(city: str | None) -> None:
        async with ref_city_claim(svc, city):
            ran.append(city)

    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(CityRatedElsewhere) as e:
            asyncio.run(rate("mirrorbay"))
        # a Deferred: the runner releases the task for this long, no attempt counted
        assert e.value.delay_s == REF_CLAIM_RETRY_S and "mirrorbay" in str(e.value)
        asyncio.run(rate("sandboxcity"))  # another city's claim is free: its step runs meanwhile
        asyncio.run(rate(None))  # the sites whose city has no key: a claim of their own
        assert ran == ["sandboxcity", None]
    finally:
        holder.kill()  # dies holding the claim: the kernel releases it
        holder.wait(timeout=30)
    asyncio.run(rate("mirrorbay"))
    assert ran == ["sandboxcity", None, "mirrorbay"]
    assert sorted(p.name for p in lock.parent.iterdir()) == ["_no_city.lock", "mirrorbay.lock", "sandboxcity.lock"]


def test_the_claim_is_held_for_the_block_only(tmp_path):
    from geoagent.crawl.stages import state_flock

    svc = _services(tmp_path)
    lock = tmp_path / REF_CITIES_DIR / "mirrorbay.lock"

    async def claim_then_look() -> None:
        async with ref_city_claim(svc, "mirrorbay"):
            # another open of the file, as another process's (a flock belongs to the open file): refused
            async with state_flock(lock, poll_s=None) as held:
                assert held is False
        async with state_flock(lock, poll_s=None) as held:  # let go at the block's end
            assert held is True

    asyncio.run(claim_then_look())
