"""Wikidata items without a label in any asked language are not sent to the paid referenceability rating.

WDQS's label service answers the bare QID for an item with no label in the asked languages
(:data:`geoagent.clients.wdqs.LABEL_LANGUAGES`; items labelled only in Chinese or a local language are rated:
``test_crawl_ref_non_english_label.py``); before, such an item went
into a rating batch as "Q123" (a name the text-only auditor cannot rate, paid for nothing, and a rating that
could reach a ladder). The offline crawl (sandbox fakes, the crawl's own simulated auditor behind a recording
wrapper) of a world with two unlabeled items near a site: no prompt names them, each has a decision record with
the reason, no ladder or table holds them, the rating step counts them and the crawl summary says so.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from _crawl_upstream import crawl_upstream, pending_sites
from geoagent import constants as C
from geoagent.crawl.campaign import CrawlCampaign
from geoagent.crawl.demo import SANDBOX_POLICY, sandbox_settings
from geoagent.crawl.referenceability import REF_MARKER
from geoagent.crawl.stages import ReferenceabilityAuditorStage, build_crawl_services
from geoagent.demo import demo_world
from geoagent.providers.base import ModelRequest, ModelResponse, Provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.sandbox import wdqs as wd
from geoagent.sandbox.city import serve_world

UNLABELED = ("Q987654321", "Q987654322")


def _world():
    world = demo_world()
    c = world.cities[0]
    for i, q in enumerate(UNLABELED):  # a few hundred metres from the centre: within 6 km of every site
        world.entities.append(wd.FakeEntity(q, "", c["lat"] + 0.002 * (i + 1), c["lon"], 2, ("Q43229",)))
    return world


WORLD = _world()


class Recording(Provider):
    kind = "recording-test"
    paid = False

    def __init__(self, inner):
        self.inner = inner
        self.prompts: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append(request.prompt)
        return await self.inner.generate(request)


def test_unlabeled_items_are_logged_not_rated(tmp_path: Path):
    asyncio.run(crawl_upstream(tmp_path, WORLD, "nolabel"))
    sites = asyncio.run(pending_sites(tmp_path, "nolabel"))
    assert sites

    async def audit():
        async with serve_world(WORLD) as sb, HttpClient(default_policy=HostPolicy(**SANDBOX_POLICY)) as http:
            settings = sandbox_settings(WORLD, sb["endpoints"])
            svc = build_crawl_services(settings, http, state_dir=tmp_path / "state", images_root=tmp_path / "images",
                                       mapillary_token="MLY|sandbox|test")
            rec = Recording(svc.ref_provider)
            svc.ref_provider = rec
            ctx = StageContext("nolabel", {"crawl": svc, "config": settings})
            stage = ReferenceabilityAuditorStage()
            await stage.start(ctx)
            for key, payload in sites:
                await stage.handle(Task(key, payload, 0, "test-lease"), ctx)
            summary = CrawlCampaign().summary_lines(None, ctx, None)
            # the same crawl as one rated before the candidate lines carried English Wikipedia titles (no
            # candidate_lines in its decisions): its summary says so (ref_candidate_lines_warning)
            path = tmp_path / "state" / C.AUDIT_DECISIONS_FILE
            text = path.read_text(encoding="utf-8")
            path.write_text("".join(json.dumps({k: v for k, v in json.loads(x).items() if k != "candidate_lines"}) + "\n"
                                    for x in text.splitlines()), encoding="utf-8")
            older = CrawlCampaign().summary_lines(None, ctx, None)
            path.write_text(text, encoding="utf-8")
            return rec, summary, older

    rec, summary, older = asyncio.run(audit())
    assert not any("older candidate lines" in x for x in summary), summary
    (warn,) = [x for x in older if "older candidate lines" in x]
    assert "English Wikipedia title" in warn and "candidate_lines" in warn
    state = tmp_path / "state"
    # the WDQS answer did carry them, labelled with the bare QID
    cand_files = [json.loads(p.read_text()) for p in (state / "ref_candidates").rglob("*.json")]
    labels = {c["qid"]: c["label"] for f in cand_files for c in f.get("candidates", [])}
    assert {labels.get(q) for q in UNLABELED} == set(UNLABELED)

    ref_prompts = [p for p in rec.prompts if REF_MARKER in p]
    assert ref_prompts and rec.prompts
    for p in rec.prompts:  # neither the rating nor the sensitive screen was asked about them
        assert not any(re.search(rf"\b{q}\b", p) for q in UNLABELED)

    decisions = [json.loads(x) for x in (state / C.AUDIT_DECISIONS_FILE).read_text(encoding="utf-8").splitlines()]
    skipped = [d for d in decisions if d["qid"] in UNLABELED]
    assert len(skipped) == len(UNLABELED)  # one per QID (the city's one rating step)
    for d in skipped:
        assert d["not_rated"] == "no_label" and d["ok"] is False and d["familiarity"] is None and "label" in d["why"]
        assert d["label"] == d["qid"]
    assert all("not_rated" not in d for d in decisions if d["qid"] not in UNLABELED)

    steps = [json.loads(x) for x in (state / C.CRAWL_DECISIONS_FILE).read_text(encoding="utf-8").splitlines()]
    steps = [s for s in steps if s.get("event") == "ref_city_rating"]
    assert sum(s["n_not_rated_no_label"] for s in steps) == len(UNLABELED)

    for p in (state / "ladders").glob("*.csv") if (state / "ladders").is_dir() else []:
        assert not any(q in p.read_text(encoding="utf-8") for q in UNLABELED)
    table = (state / "candidate_referenceability.csv").read_text(encoding="utf-8")
    assert not any(q in table for q in UNLABELED)
    line = next(x for x in summary if "not rated" in x)
    assert "2 candidates not rated: no label in any asked language" in line and "not_rated = no_label" in line
