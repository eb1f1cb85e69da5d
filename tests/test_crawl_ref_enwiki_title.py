"""The referenceability auditor is shown each candidate's English Wikipedia title (seed 000 Sec. 3.3: the auditor
returns "a canonical English name" for every entity within 6 km; App. A.3 prints the candidate list as ``{items}``;
the release fills it with ``audit._fmt``: ``<i>. <label> (English name: <enwiki title>)  <d> km from the site``,
the title from the same WDQS query that finds the candidates, ``ladder.wikidata_around``'s ``?enTitle``).

Our query fetched the title (``?title``, stored in ``ref_candidates/<site>.json``) but the prompt showed the label
alone, so a place labelled only in French or Chinese reached the auditor without the English name the release's
auditor read next to it, and one with no label in the asked languages but an English article was not rated at all.
The candidate lines now carry the title (candidate-line version 2, recorded in each decision the crawl makes), and a
crawl holding decisions made with the older lines is told so in its summary."""

from __future__ import annotations

import asyncio
import json
import re

import orjson

from geoagent import constants as C
from geoagent.clients.wdqs import WdqsClient
from geoagent.crawl.referenceability import (
    REF_CANDIDATE_LINES,
    ReferenceabilityAuditor,
    RefCandidate,
    candidates_for_site,
    has_no_label,
    ref_candidate_lines_warning,
    render_candidates,
)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import wdqs as wd_fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 31.63, -8.0


class Recording(Provider):
    """Answers every listed candidate (ok, familiarity 3) and keeps the prompts."""

    kind = "recording-test"
    paid = False

    def __init__(self):
        self.prompts: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.prompts.append(request.prompt)
        # the candidate lines only: the rating prompt's numbered instructions ('1. "ok": ...') are no candidates
        # (answered as idx 1-4 they number past a short batch, an answer set aside whole since crawl40 #2)
        body = request.prompt.split("Candidates", 1)[-1] if "Candidates" in request.prompt else request.prompt
        idx = [int(i) for i in re.findall(r"^(\d+)\. ", body, re.M)]
        if "CONTENTIOUS" in request.prompt:
            arr = [{"idx": i, "sensitive": False, "why": "x"} for i in idx]
        else:
            arr = [{"idx": i, "ok": True, "familiarity": 3, "zh": None, "en": f"EN {i}", "why": "w"} for i in idx]
        return ModelResponse(text=orjson.dumps(arr).decode(), usage=Usage(10, 10))


def _world():
    return [
        wd_fake.FakeEntity("Q501", "", LAT + 0.003, LON, 12, ("Q483110",), title="Stade El Harti",
                           labels={"fr": "Stade municipal El Harti"}),
        wd_fake.FakeEntity("Q502", "Bab Agnaou", LAT + 0.006, LON, 20, ("Q82117",), title="Bab Agnaou"),
        wd_fake.FakeEntity("Q503", "", LAT + 0.009, LON, 3, ("Q16970",), title="Church of the Holy Martyrs"),  # no label
        wd_fake.FakeEntity("Q504", "", LAT + 0.012, LON, 0, ("Q4989906",)),  # no label, no article
        wd_fake.FakeEntity("Q505", "Jardin Secret", LAT + 0.015, LON, 4, ("Q22698",)),  # no article
    ]


def _candidates():
    app = wd_fake.make_app(_world())

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await WdqsClient(http, base + "/sparql", UA).entities_around(LAT, LON, 6.0, page_size=50)

    return candidates_for_site(asyncio.run(go()), LAT, LON, 6.0)


def test_the_auditor_reads_each_candidates_english_wikipedia_title(tmp_path):
    cands = _candidates()
    by = {c.qid: c for c in cands}
    assert by["Q501"].enwiki_title == "Stade El Harti" and by["Q501"].label == "Stade municipal El Harti"
    prov = Recording()
    aud = ReferenceabilityAuditor(prov, ReferenceabilitySettings(model="aud-1", sensitive_screen=True), tmp_path)
    asyncio.run(aud.rate_all(cands, city="marrakech"))
    ref = [p for p in prov.prompts if "REFERENCE-POINT" in p]
    sens = [p for p in prov.prompts if "CONTENTIOUS" in p]
    assert len(ref) == 1 and len(sens) == 1
    for p in (ref[0], sens[0]):
        assert "Stade municipal El Harti (English Wikipedia: Stade El Harti)" in p
        assert "Bab Agnaou (English Wikipedia: Bab Agnaou)" in p
        assert "(English Wikipedia: Church of the Holy Martyrs)" in p  # a bare-QID label with an article is rated
        assert "Q504" not in p  # no label, no article: nothing to rate
        assert re.search(r"^\d+\. Jardin Secret( \(|$)", p, re.M) and "Jardin Secret (English" not in p
    assert re.search(r"^\d+\. Stade municipal El Harti \(English Wikipedia: Stade El Harti\) \(0\.33 km\)$", ref[0], re.M)
    decisions = [json.loads(x) for x in (tmp_path / C.AUDIT_DECISIONS_FILE).read_text().splitlines()]
    d = {r["qid"]: r for r in decisions}
    assert d["Q503"].get("not_rated") is None and d["Q503"]["familiarity"] == 3
    assert d["Q504"]["not_rated"] == "no_label"
    assert all(r["candidate_lines"] == REF_CANDIDATE_LINES for r in decisions)  # recorded per city-scoped decision
    sens_recs = [json.loads(x) for x in (tmp_path / C.AUDIT_SENSITIVE_FILE).read_text().splitlines()]
    assert sens_recs and all(r["candidate_lines"] == REF_CANDIDATE_LINES for r in sens_recs)
    assert ref_candidate_lines_warning(tmp_path) is None


def test_a_candidate_line_without_a_title_is_unchanged_and_a_title_is_one_line():
    c = RefCandidate("Q1", "Plaza\nMayor", 1.234, 0, 0, 3, "Plaza Mayor\n(Madrid)")
    assert render_candidates([c]) == "0. Plaza Mayor (English Wikipedia: Plaza Mayor (Madrid)) (1.23 km)"
    assert render_candidates([RefCandidate("Q2", "Gran Vía", 0.5, 0, 0)], with_distance=False) == "0. Gran Vía"
    assert not has_no_label(RefCandidate("Q3", "Q3", 1.0, 0, 0, 1, "Some Place"))
    assert has_no_label(RefCandidate("Q3", "Q3", 1.0, 0, 0, 1, None))


def test_a_crawl_holding_ratings_made_with_the_older_candidate_lines_is_told(tmp_path):
    old = [{"qid": "Q1", "label": "A", "model": "aud-1", "ok": True, "familiarity": 3, "name_zh": None, "name_en": "A",
            "why": "w", "ts": 1.0, "city": "lima"},
           {"qid": "Q2", "label": "B", "model": "aud-1", "ok": True, "familiarity": 2, "name_zh": None, "name_en": "B",
            "why": "w", "ts": 1.0, "city": "delhi", "candidate_lines": REF_CANDIDATE_LINES}]
    (tmp_path / C.AUDIT_DECISIONS_FILE).write_text("\n".join(json.dumps(r) for r in old) + "\n")
    w = ref_candidate_lines_warning(tmp_path)
    assert w is not None and "1 of 2 cities" in w and "lima" in w and "delhi" not in w
    assert "English Wikipedia" in w


def test_the_crawl_outline_bounds_a_rating_call_whose_lines_carry_titles(monkeypatch):
    """The dry run's "up to" figure for a rating call priced each line's label at its longest; a line now also
    carries the English Wikipedia title (up to 200 characters), so a batch of long labels with long titles reserved
    more than the figure (a cap set to it would refuse the crawl's call)."""
    from pathlib import Path

    from geoagent.config import load_config, reservation_usd
    from geoagent.crawl.campaign import crawl_budget_figures
    from geoagent.crawl.image_audit import load_prompt

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = load_config(Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml")
    settings = cfg.section("crawl")
    rs = settings.referenceability
    m_ref = next(m for m in cfg.models if m.name == rs.model)
    fig = crawl_budget_figures(cfg, settings)
    batch = [RefCandidate(f"Q{i}", "北京市海淀区中关村大街" * 20, rs.radius_km * 0.9, 0.0, 0.0, 1, "Ł" * 200)
             for i in range(rs.batch_size)]
    params = {"max_output_tokens": rs.max_output_tokens, "temperature": rs.temperature}
    factor = float(cfg.budget.input_estimate_factor)
    for key, name, dist in (("rating_usd", "crawl_referenceability.txt", True), ("screen_usd", "crawl_sensitive.txt", False)):
        prompt = load_prompt(name).replace("{candidates}", render_candidates(batch, with_distance=dist))
        assert reservation_usd(m_ref, prompt, params, rs.max_output_tokens, input_estimate_factor=factor) <= fig[key], key


def test_a_bare_qid_kept_out_before_is_rated_once_it_shows_a_title(tmp_path):
    """A crawl resumed across the change holds a ``not_rated`` decision for a bare-QID label that has an English
    Wikipedia article: it is rated now (the rating supersedes the record, last record wins) and only once."""
    settings = ReferenceabilitySettings(model="aud-1", sensitive_screen=False)
    before = [RefCandidate("Q503", "Q503", 1.0, 0, 0, 3, None), RefCandidate("Q505", "Jardin Secret", 1.2, 0, 0, 4, None)]
    asyncio.run(ReferenceabilityAuditor(Recording(), settings, tmp_path).rate_all(before, city="marrakech"))
    now = [RefCandidate("Q503", "Q503", 1.0, 0, 0, 3, "Church of the Holy Martyrs"), before[1]]
    prov = Recording()
    asyncio.run(ReferenceabilityAuditor(prov, settings, tmp_path).rate_all(now, city="marrakech"))
    assert len(prov.prompts) == 1 and "0. Q503 (English Wikipedia: Church of the Holy Martyrs)" in prov.prompts[0]
    assert "Jardin Secret" not in prov.prompts[0]  # decided before: not asked again
    aud = ReferenceabilityAuditor(again := Recording(), settings, tmp_path)
    asyncio.run(aud.rate_all(now, city="marrakech"))
    assert again.prompts == []
    d = aud.decisions.get("aud-1", "Q503", "marrakech")
    assert d is not None and d.get("not_rated") is None and d["familiarity"] == 3


def test_the_sandbox_wdqs_names_an_english_article_with_spaces_as_the_real_service_does():
    """WDQS's ``schema:name`` of an ``en.wikipedia.org`` sitelink article is the sitelink's title, which MediaWiki
    stores with spaces ("Eiffel Tower"; wbgetentities ``sitelinks.enwiki.title`` in api-notes section 3 is the
    same string); only the article's URL (and the pageviews path built from it) uses underscores. The demo
    world's fake answered "Eiffel_Tower" shapes, so the simulated auditor read titles no real crawl shows it."""
    from geoagent.demo import demo_world

    world = demo_world()
    with_title = [e for e in world.entities if e.title and " " in e.label]
    assert with_title  # the demo world has articles whose names hold spaces
    e0 = with_title[0]
    app = wd_fake.make_app(world.entities, subclass_of=world.subclass_of, class_labels=world.class_labels)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await WdqsClient(http, base + "/sparql", UA).entities_around(e0.lat, e0.lon, 1.0, page_size=500)

    got = asyncio.run(go())
    titles = [r.enwiki_title for r in got if r.enwiki_title]
    assert titles and not [t for t in titles if "_" in t], [t for t in titles if "_" in t][:5]
    assert {r.qid: r.enwiki_title for r in got}[e0.qid] == e0.label  # the demo world's titles are its labels
