"""The referenceability audit asks the same questions whatever the order in which sites reach it.

Sites of one city share most of their 6 km candidates. When each site's not-yet-rated candidates were
batched, the batches (and so the prompts, their request keys and the number of calls: an answer cut off
mid-array costs re-asks of the batch's halves) depended on which site came first; on the code before
the per-city rating, auditing the six sites of the demo world in reverse order sent 22 rating calls
instead of 21. Now a city's candidates are merged and cut into fixed batches first
(:mod:`geoagent.crawl.referenceability`).

The re-asks are part of what must not depend on the order, so they are made certain here: the recording
provider cuts off the answer to every first ask of a whole batch (:data:`BATCH` candidates listed), as the
simulated auditor cuts off one answer in ~8 of its own accord. That rule reads the prompt alone, so every
interleaving gets the same cut-off answers. (Until 2026-12-02 the test relied on the simulated auditor's own
cut-offs, drawn from the request keys: once the sandbox WDQS named Wikipedia articles with spaces, as the real
service does, instead of "Eiffel_Tower", the 16 new keys drew none and the split-and-retry path went untested.)

The crawl runs once over the demo world (two admitted cities, local fakes, simulated auditors) up to the
referenceability auditor; copies of that state are then audited in different interleavings: sites one
by one in key order, in reverse order, all at once in a shuffled order (``asyncio.gather``), and by the
real runner with three workers. Every interleaving must send the same rating calls (request keys counted
by the provider), with the same ratings table. The batches are checked against the world: each city's
entities within 6 km of any of its sites, sorted by QID number, cut into batches of 40, each shown
with its distance to the nearest site (haversine written in ``tests/_reference.py``). Two crash cases:
a stop request between two calls (the next run sends exactly the calls not yet sent), and a crash after
the answers were logged but before any decision was (the next run sends no call and ends the same).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from _crawl_upstream import audit_with_three_workers, crawl_upstream, pending_sites
from _reference import csv_rows, haversine_km
from geoagent import constants as C
from geoagent.crawl.demo import SANDBOX_POLICY, sandbox_settings
from geoagent.crawl.image_audit import load_prompt
from geoagent.crawl.referenceability import RAW_ANSWERS_FILE, REF_MARKER
from geoagent.crawl.stages import ReferenceabilityAuditorStage, build_crawl_services
from geoagent.demo import demo_world
from geoagent.providers.base import ModelRequest, ModelResponse, Provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import Abandoned, StageContext
from geoagent.sandbox.city import serve_world

WORLD = demo_world()
BATCH = 40  # the sandbox settings' batch size (ReferenceabilitySettings default)
TEMPLATE = load_prompt("crawl_referenceability.txt")
_LINE = re.compile(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))? \(([0-9.]+) km\)$")


def _n_candidates(prompt: str) -> int:
    """Number of candidate lines of a rating prompt (:func:`_block`)."""
    return len(_block(prompt))


class Recording(Provider):
    """Passes each request to the crawl's own (simulated) provider and records its request key and prompt;
    cuts off (halfway, after a preamble, as the simulated auditor does) the answer to a rating prompt that lists
    a whole batch of :data:`BATCH` candidates, so that every whole batch is re-asked in halves (the halves and
    smaller parts are answered as the simulated auditor answers them); with ``stop_after``, asks the crawl to
    stop once that many calls were answered."""

    kind = "recording-test"
    paid = False

    def __init__(self, inner, svc, stop_after=None):
        self.inner, self.svc, self.stop_after = inner, svc, stop_after
        self.calls: list[tuple[str, str]] = []  # (request key, prompt)
        self.cut: list[str] = []  # request keys whose answer this provider cut off

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls.append((request.key(), request.prompt))
        resp = await self.inner.generate(request)
        if REF_MARKER in request.prompt and _n_candidates(request.prompt) == BATCH:
            resp = dataclasses.replace(resp, text="Here are the ratings:\n" + resp.text[: len(resp.text) // 2])
            self.cut.append(request.key())
        if self.stop_after is not None and len(self.calls) >= self.stop_after:
            self.svc.stopping = True  # the stop request arrives while this answer is read
        return resp

    def ref_keys(self) -> list[str]:
        return [k for k, p in self.calls if REF_MARKER in p]


async def _upstream(root: Path) -> None:
    """Screen, sample, fetch and audit images: the sites wait on the ``sites_for_audit`` edge."""
    await crawl_upstream(root, WORLD, "order")


async def _pending_sites(root: Path) -> list[tuple[str, dict]]:
    return await pending_sites(root, "order")


async def _audit(root: Path, sites, mode: str, *, stop_after=None) -> dict:
    """Run the referenceability stage over ``sites`` in ``mode``: "forward", "reverse", "gather" (all at
    once, shuffled) or "runner" (the pipeline runner, three workers, then the ladder builder)."""
    async with serve_world(WORLD) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
        settings = sandbox_settings(WORLD, sb["endpoints"])
        svc = build_crawl_services(settings, http, state_dir=root / "state", images_root=root / "images",
                                   mapillary_token="MLY|sandbox|test")
        rec = Recording(svc.ref_provider, svc, stop_after)
        svc.ref_provider = rec
        ctx = StageContext("order", {"crawl": svc, "config": settings})
        tasks = [Task(key, payload, 0, "test-lease") for key, payload in sites]
        stopped = False
        if mode == "runner":
            await audit_with_three_workers(root, "order", ctx)
        else:
            stage = ReferenceabilityAuditorStage()
            await stage.start(ctx)
            if mode == "gather":
                random.Random(5).shuffle(tasks)
                await asyncio.gather(*(stage.handle(t, ctx) for t in tasks))
            else:
                for t in (tasks if mode == "forward" else tasks[::-1]):
                    try:
                        await stage.handle(t, ctx)
                    except Abandoned:
                        stopped = True
                        break
        aud = svc.ref_auditor
        return {"rec": rec, "stopped": stopped, "calls": aud.calls, "replayed": aud.replayed}


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def _outcome(state: Path) -> dict:
    """What must not depend on the order: the ratings table, each site's rated candidates, the decisions
    (without their time stamps) and the request keys of the logged rating answers."""
    strip = lambda d: {k: v for k, v in d.items() if k != "ts"}  # noqa: E731
    raw = _lines(state / RAW_ANSWERS_FILE)
    return {
        "table": (state / "candidate_referenceability.csv").read_bytes(),
        "rated": {p.name: json.loads(p.read_text())["rated"] for p in sorted((state / "rated").glob("*.json"))},
        "decisions": sorted((strip(d) for d in _lines(state / C.AUDIT_DECISIONS_FILE)), key=lambda d: d["qid"]),
        "sensitive": sorted((strip(d) for d in _lines(state / C.AUDIT_SENSITIVE_FILE)), key=lambda d: d["qid"]),
        "raw_ref_keys": sorted(r["key"] for r in raw if r["task"] == "crawl_referenceability"),
    }


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("reforder")
    asyncio.run(_upstream(base / "up"))
    shutil.copytree(base / "up", base / "peek")
    sites = asyncio.run(_pending_sites(base / "peek"))
    assert len(sites) == 6, sites  # three sites in each of the two admitted cities
    out = {"base": base, "sites": sites}
    for mode in ("forward", "reverse", "gather", "runner"):
        shutil.copytree(base / "up", base / mode)
        out[mode] = asyncio.run(_audit(base / mode, sites, mode))
    return out


MODES = ("forward", "reverse", "gather", "runner")


def test_every_interleaving_sends_the_same_rating_calls_and_gets_the_same_ratings(runs):
    base = runs["base"]
    ref = {m: runs[m]["rec"].ref_keys() for m in MODES}
    assert len(ref["forward"]) > 2 * 8  # two cities, 8 batches each, plus re-asks (recomputed in the next test)
    # the re-ask path ran: whole batches were cut off, and each was asked again in parts (not whole again)
    raw = [r for r in _lines(base / "forward" / "state" / RAW_ANSWERS_FILE) if r["task"] == "crawl_referenceability"]
    cut = set(runs["forward"]["rec"].cut)
    assert len(cut) >= 2 * 6  # 16 batches, at least 6 whole ones per city
    reasks = [r for r in raw if len(r["qids"]) < BATCH and any(set(r["qids"]) < set(c["qids"]) for c in raw
                                                               if c["key"] in cut)]
    assert len(reasks) >= 2 * len(cut)  # two halves (or more parts) per cut-off batch
    assert runs["forward"]["rec"].svc.ref_auditor.splits >= len(cut)
    for m in MODES:
        assert len(ref[m]) == len(ref["forward"]), m  # the same number of rating calls
        assert sorted(ref[m]) == sorted(ref["forward"]), m  # the same request keys ...
        assert len(set(ref[m])) == len(ref[m]), m  # ... each sent once
        assert runs[m]["replayed"] == 0 and runs[m]["calls"] == len(runs[m]["rec"].calls), m
        assert sorted(runs[m]["rec"].cut) == sorted(runs["forward"]["rec"].cut), m  # the same answers cut off
    outcomes = {m: _outcome(base / m / "state") for m in MODES}
    for m in MODES:
        o = outcomes[m]
        assert o["raw_ref_keys"] == sorted(ref[m]), m  # the auditor's log holds what the provider saw
        assert o == outcomes["forward"], m
        qids = [d["qid"] for d in o["decisions"]]
        assert len(qids) == len(set(qids)), m  # one decision per candidate: nothing rated twice
    # the order really differed: the two cities were rated in opposite orders
    first = {m: [r["city"] for r in _lines(base / m / "state" / C.CRAWL_DECISIONS_FILE) if r["event"] == "ref_city_rating"]
             for m in ("forward", "reverse")}
    assert first["forward"] == first["reverse"][::-1] and len(first["forward"]) == 2


#: fields of a city's rating record (``ref_cities/<city>.json``) that say how the step ran, not what it decided
STEP_FACTS = ("site", "model_calls", "answers_replayed", "rating_batches_asked", "screening_batches_asked", "ts")


def test_each_citys_rating_record_differs_by_order_only_in_the_site_that_ran_the_step(runs):
    """The record of a city's rating step names the site whose task ran it (the first of the city's sites to
    arrive), so it follows the order; everything else in it (the sites gathered, candidates, batches, QIDs) does
    not. The crash test (tests/test_crash_campaigns.py) leaves ``site`` out of its comparison for that reason."""
    base = runs["base"]
    recs = {m: {p.name: json.loads(p.read_text()) for p in sorted((base / m / "state" / "ref_cities").glob("*.json"))}
            for m in MODES}
    assert len(recs["forward"]) == 2, recs["forward"].keys()
    strip = lambda d: {k: v for k, v in d.items() if k not in STEP_FACTS}  # noqa: E731
    for m in MODES:
        assert sorted(recs[m]) == sorted(recs["forward"]), m
        for name, rec in recs[m].items():
            assert rec["site"] in rec["sites"] and len(rec["sites"]) == 3, (m, rec)
            assert strip(rec) == strip(recs["forward"][name]), (m, name)
    for name, rec in recs["forward"].items():  # sites one by one in key order, then in reverse
        assert (rec["site"], recs["reverse"][name]["site"]) == (rec["sites"][0], rec["sites"][-1]), name


def _block(prompt: str) -> list[tuple[str, float]]:
    """(label, km) of each numbered candidate line of a rating prompt."""
    head, tail = TEMPLATE.split("{candidates}")
    body = prompt[len(head):len(prompt) - len(tail)]
    out = []
    for i, line in enumerate(body.splitlines()):
        m = _LINE.match(line)
        assert m and int(m.group(1)) == i, line
        out.append((m.group(2), float(m.group(3))))
    return out


def test_batches_are_each_citys_candidates_in_qid_order_cut_into_fixed_batches(runs):
    """Recomputed from the world: per city, every entity within 6 km of one of its sites, nearest distance
    over the sites, sorted by QID number, cut into batches of 40; each is the first call of its batch."""
    state = runs["base"] / "forward" / "state"
    sites = csv_rows(state / "sites.csv")
    raw = [r for r in _lines(state / RAW_ANSWERS_FILE) if r["task"] == "crawl_referenceability"]
    prompts = dict(runs["forward"]["rec"].calls)
    cities = sorted({s["city"] for s in sites})
    assert len(cities) == 2
    n_batches = 0
    for city in cities:
        near: dict[str, float] = {}
        for s in (s for s in sites if s["city"] == city):
            for e in WORLD.entities:
                d = haversine_km(float(s["lat"]), float(s["lon"]), e.lat, e.lon)
                if d <= 6.0:
                    near[e.qid] = min(d, near.get(e.qid, d))
        order = sorted(near, key=lambda q: int(q[1:]))
        labels = {e.qid: e.label for e in WORLD.entities}
        chunks = [order[i:i + BATCH] for i in range(0, len(order), BATCH)]
        n_batches += len(chunks)
        for chunk in chunks:
            firsts = [r for r in raw if r["qids"] == chunk]
            assert len(firsts) == 1, (city, chunk[:3])  # asked once, whole
            shown = _block(prompts[firsts[0]["key"]])
            assert [lab for lab, _ in shown] == [labels[q] for q in chunk]
            assert all(abs(km - near[q]) <= 0.006 for (_, km), q in zip(shown, chunk))  # nearest site's distance
        # every other call re-asks part of one batch (a cut-off answer split in halves)
        for r in raw:
            if set(r["qids"]) <= set(order):
                assert any(set(r["qids"]) <= set(c) for c in chunks), r["qids"]
    assert len(raw) >= n_batches and n_batches == 16  # 2 cities x ceil(~300 / 40)


def test_a_stop_between_calls_resumes_with_exactly_the_missing_calls(runs):
    """Stopped right after an answer that was cut off (so the stop falls inside a split-and-retry), the next
    run replays that answer from the log and sends every call the uninterrupted run sent after it."""
    base, sites = runs["base"], runs["sites"]
    full = runs["forward"]["rec"].calls
    raw = [r for r in _lines(base / "forward" / "state" / RAW_ANSWERS_FILE)]
    # the first rating answer followed by a re-ask of part of its batch: a split starts there
    cut = next(i for i in range(len(raw) - 1) if raw[i]["task"] == "crawl_referenceability"
               and raw[i + 1]["task"] == "crawl_referenceability" and set(raw[i + 1]["qids"]) < set(raw[i]["qids"]))
    root = base / "stopped"
    shutil.copytree(base / "up", root)
    first = asyncio.run(_audit(root, sites, "forward", stop_after=cut + 1))
    assert first["stopped"] and [k for k, _ in first["rec"].calls] == [k for k, _ in full[:cut + 1]]
    second = asyncio.run(_audit(root, sites, "forward"))
    sent = [k for k, _ in first["rec"].calls] + [k for k, _ in second["rec"].calls]
    assert Counter(sent) == Counter(k for k, _ in full)  # nothing paid twice, nothing missing
    assert second["replayed"] >= 1  # the cut-off answer was read from the log, not asked again
    assert _outcome(root / "state") == _outcome(base / "forward" / "state")


def test_a_crash_after_the_answers_were_logged_sends_no_call(runs):
    """Every answer is logged before it is parsed; a crash before any decision was logged (the decision
    logs, rated sites and city records lost) is finished from the logged answers alone."""
    base, sites = runs["base"], runs["sites"]
    root = base / "crashed"
    shutil.copytree(base / "forward", root)
    state = root / "state"
    for f in (C.AUDIT_DECISIONS_FILE, C.AUDIT_SENSITIVE_FILE, "candidate_referenceability.csv"):
        (state / f).unlink()
    for d in ("rated", "ref_cities"):
        shutil.rmtree(state / d)
    again = asyncio.run(_audit(root, sites, "reverse"))
    assert again["rec"].calls == [] and again["calls"] == 0
    assert again["replayed"] == len(_lines(state / RAW_ANSWERS_FILE))
    assert _outcome(state) == _outcome(base / "forward" / "state")
    assert _city_records(state) == _city_records(base / "forward" / "state")


def test_a_crash_after_the_decisions_were_logged_before_the_city_record_sends_no_call(runs):
    """Killed after a city's step logged every decision but before its record (``ref_cities/<city>.json``) and
    the rated sites were written: the next run redoes the step from the decision log alone (no call, no replay)
    and writes the same city records, apart from the step facts."""
    base, sites = runs["base"], runs["sites"]
    root = base / "unrecorded"
    shutil.copytree(base / "forward", root)
    state = root / "state"
    (state / "candidate_referenceability.csv").unlink()
    for d in ("rated", "ref_cities"):
        shutil.rmtree(state / d)
    again = asyncio.run(_audit(root, sites, "reverse"))
    assert again["rec"].calls == [] and again["calls"] == 0 and again["replayed"] == 0
    assert _outcome(state) == _outcome(base / "forward" / "state")
    assert _city_records(state) == _city_records(base / "forward" / "state")


def _city_records(state: Path) -> dict[str, dict]:
    """Each city's rating record without the step facts (:data:`STEP_FACTS`)."""
    return {p.name: {k: v for k, v in json.loads(p.read_text()).items() if k not in STEP_FACTS}
            for p in sorted((state / "ref_cities").glob("*.json"))}
