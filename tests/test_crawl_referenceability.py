"""Referenceability auditor (seed 000 Sec. 3.3, App. A.3): batching, split-and-retry, logs, review queue."""

from __future__ import annotations

import asyncio
import json
import re

import orjson
import pytest

from geoagent import constants as C
from geoagent.clients.wdqs import WdEntity
from geoagent.crawl.image_audit import load_prompt
from geoagent.crawl.referenceability import (
    DECISION_KEYS,
    SENSITIVE_KEYS,
    RefCandidate,
    ReferenceabilityAuditor,
    candidates_for_site,
    pageview_tiers,
    parse_ref_batch,
)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage


class ScriptedProvider(Provider):
    """A provider whose answers follow a rule over the prompt (a test double of the Provider interface)."""

    kind = "scripted-test"
    paid = False

    def __init__(self, *, garble_above: int = 10**6, drop_label: str | None = None, always_garble: str | None = None):
        self.garble_above = garble_above
        self.drop_label = drop_label
        self.always_garble = always_garble
        self.batches: list[list[str]] = []
        self.kinds: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        assert request.image is None  # text-only auditor
        body = request.prompt.split("Candidates", 1)[-1] if "Candidates" in request.prompt else request.prompt.split("Names:", 1)[-1]
        items = re.findall(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \(([0-9.]+) km\))?$", body, re.M)
        labels = [lab for _, lab, _ in items]
        self.batches.append(labels)
        self.kinds.append("sens" if "CONTENTIOUS" in request.prompt else "ref")
        if "CONTENTIOUS" in request.prompt:
            text = orjson.dumps([{"idx": int(i), "sensitive": "Glorious" in lab, "why": "x"} for i, lab, _ in items]).decode()
        elif len(items) > self.garble_above or (self.always_garble and self.always_garble in labels):
            text = "Sorry, here you go: [{\"idx\": 0, \"ok\": tru"
        else:
            arr = [{"idx": int(i), "ok": "District" not in lab, "familiarity": (len(lab) % 6), "zh": None, "en": lab.upper(), "why": "w"}
                   for i, lab, _ in items if lab != self.drop_label]
            text = "```json\n" + orjson.dumps(arr).decode() + "\n```"
        return ModelResponse(text=text, usage=Usage(10, 10))


def _cands(n):
    return [RefCandidate(f"Q{10 + i}", f"Place {i}" + (" District" if i % 7 == 0 else ""), 0.5 + i * 0.05, 0, 0) for i in range(n)]


def _auditor(tmp_path, provider, **kw):
    return ReferenceabilityAuditor(provider, ReferenceabilitySettings(model="aud-1", **kw), tmp_path)


def _lines(p):
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()]


def test_unparseable_batches_are_split_and_retried(tmp_path):
    prov = ScriptedProvider(garble_above=3)
    aud = _auditor(tmp_path, prov, batch_size=10)
    rated = asyncio.run(aud.audit("s1", _cands(10)))
    assert all(r.familiarity is not None for r in rated)
    sizes = [len(b) for b, k in zip(prov.batches, prov.kinds) if k == "ref"]
    assert sizes[0] == 10 and max(sizes[1:]) <= 5 and sum(s for s in sizes if s <= 3) == 10
    assert aud.splits >= 2
    decisions = _lines(tmp_path / C.AUDIT_DECISIONS_FILE)
    assert sorted(d["qid"] for d in decisions) == sorted(c.qid for c in _cands(10))
    # the batch's numbering is per prompt: names come back to the right QID
    by = {d["qid"]: d for d in decisions}
    assert by["Q13"]["name_en"] == "PLACE 3" and by["Q13"]["familiarity"] == len("Place 3") % 6


def test_missing_item_is_asked_again_and_hopeless_one_logged_as_failure(tmp_path):
    prov = ScriptedProvider(drop_label="Place 4", always_garble="Place 4")
    aud = _auditor(tmp_path, prov, batch_size=6)
    # crawl40 #1, crawl40b #1: a failed rating is no decision made quietly; failed alone, it leaves the candidate
    # unrated (in no ladder) and the others are rated
    rated = {r.qid: r for r in asyncio.run(aud.audit("s1", _cands(6)))}
    assert rated["Q14"].familiarity is None
    d = {x["qid"]: x for x in _lines(tmp_path / C.AUDIT_DECISIONS_FILE)}
    assert d["Q14"]["ok"] is None and d["Q14"]["error"].startswith("unparseable answer") and d["Q14"]["raw"]
    # fixref41 #1: asked again alone with the reminder in the same run, both times garbled too
    assert d["Q14"]["failure"] == "isolated" and d["Q14"]["reasks"] == 2
    assert len([b for b in prov.batches if b == ["Place 4"]]) == 3  # asked alone at the end, then re-asked twice
    assert all(d[q]["familiarity"] is not None for q in d if q != "Q14")  # the others rated, never guessed


def test_log_formats_match_release_samples(tmp_path, release_dir):
    rel_dec = [json.loads(x) for x in (release_dir / "audit_decisions_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    rel_sen = [json.loads(x) for x in (release_dir / "audit_sensitive_sample.jsonl").read_text(encoding="utf-8").splitlines()]
    assert tuple(rel_dec[0]) == DECISION_KEYS and tuple(rel_sen[0]) == SENSITIVE_KEYS
    prov = ScriptedProvider()
    asyncio.run(_auditor(tmp_path, prov).audit("s1", _cands(5) + [RefCandidate("Q99", "Glorious Leader Shrine", 2.0, 0, 0)]))
    ours = _lines(tmp_path / C.AUDIT_DECISIONS_FILE)
    sens = _lines(tmp_path / C.AUDIT_SENSITIVE_FILE)
    assert all(tuple(d) == DECISION_KEYS for d in ours)
    assert all(tuple(s) == SENSITIVE_KEYS for s in sens)
    for ref, mine in ((rel_dec[0], ours[0]), (rel_sen[0], sens[0])):
        for k in ref:
            assert type(mine[k]) is type(ref[k]) or ref[k] is None or mine[k] is None, k
    assert sens[-1]["model"] == "sens|aud-1" and sens[-1]["auditor"] == "aud-1" and sens[-1]["sensitive"] is True
    assert rel_sen[0]["model"].startswith("sens|")


def test_restart_reuses_logged_decisions(tmp_path):
    prov = ScriptedProvider()
    asyncio.run(_auditor(tmp_path, prov).audit("s1", _cands(8)))
    n = len(prov.batches)
    prov2 = ScriptedProvider()
    rated = asyncio.run(_auditor(tmp_path, prov2).audit("s2", _cands(8)))
    assert prov2.batches == [] and n > 0 and len(rated) == 8
    with (tmp_path / C.AUDIT_DECISIONS_FILE).open("ab") as f:  # a torn last line from a crash is skipped
        f.write(b'{"qid": "Q1", "mod')
    asyncio.run(_auditor(tmp_path, ScriptedProvider()).audit("s3", _cands(8)))


def test_candidates_for_site_dedupes_and_keeps_all_within_radius():
    ents = [WdEntity("Q1", "A", 0.0, 0.0100, 9.0, 3), WdEntity("Q1", "A", 0.0, 0.0200, 9.0, 3, enwiki_title="A_(x)"),
            WdEntity("Q2", "B", 0.0, 0.0600, 9.0, 500), WdEntity("Q3", "C", 0.0, 0.0450, 9.0, 0)]
    c = candidates_for_site(ents, 0.0, 0.0, 6.0)
    assert [x.qid for x in c] == ["Q1", "Q3"]  # Q2 is 6.67 km away
    assert c[0].dist_km == pytest.approx(1.1119, abs=1e-3) and c[0].enwiki_title == "A_(x)"


def test_pageview_review_queue(tmp_path):
    from geoagent.crawl.ladder import RatedCandidate

    aud = _auditor(tmp_path, ScriptedProvider(), pageviews=True)
    views = {"Q1": 5846, "Q2": 2294, "Q3": 10, "Q4": 900, "Q5": 400, "Q6": 50}
    rated = [RatedCandidate("Q1", "Rosicrucian Park", 1.0, 1), RatedCandidate("Q2", "Municipal Rose Garden", 1.0, 4),
             RatedCandidate("Q3", "Main Station", 1.0, 5), RatedCandidate("Q4", "X", 1.0, 2),
             RatedCandidate("Q5", "Y", 1.0, 3), RatedCandidate("Q6", "Z", 1.0, 0, ok=False)]
    assert pageview_tiers(views) == {"Q3": "low", "Q6": "low", "Q5": "mid", "Q4": "mid", "Q2": "high", "Q1": "high"}
    items = aud.review_items("sj", rated, views)
    # Rosicrucian Park: many readers (high) but rated 1 (low); Main Station: few readers but rated 5
    assert sorted(i["qid"] for i in items) == ["Q1", "Q3"]
    assert all(i["status"] == "pending" for i in items)


def test_parse_ref_batch_defensive():
    assert parse_ref_batch("no json here", 3) is None
    got = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 4}, {"idx": 0, "ok": false, "familiarity": 1},'
                          ' {"idx": 1, "ok": "yes", "familiarity": 9}, {"idx": 7, "ok": true, "familiarity": 2}, "junk"]', 3)
    # idx 0 rated two ways: left out, asked again (s15-parse; was the first element's rating); 1 and 7 invalid
    assert got == {}
    got = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 4}, {"idx": 0, "ok": true, "familiarity": 4, "why": "x"},'
                          ' {"idx": 1, "ok": "yes", "familiarity": 9}, {"idx": 2, "ok": true, "familiarity": 2, "zh": 3}, "junk"]', 3)
    assert got == {0: {"ok": True, "familiarity": 4, "name_zh": None, "name_en": None, "why": ""},
                   2: {"ok": True, "familiarity": 2, "name_zh": None, "name_en": None, "why": ""}}
    # crawl40 #2: an idx outside 0..n-1 (7 of 3) is a shifted numbering: the whole answer is set aside
    why: list[str] = []
    assert parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 4}, {"idx": 7, "ok": true, "familiarity": 2}]', 3,
                           problems=why) == {}
    assert why and "7 outside 0..2" in why[0]


def test_prompt_states_referenceability_is_not_fame():
    p = load_prompt("crawl_referenceability.txt")
    assert "NOT fame" in p and "{candidates}" in p
    for f in ('"ok"', '"familiarity"', '"zh"', '"en"', '"why"', '"idx"'):
        assert f in p


def test_sitelink_band_share_on_release_sample(release_dir):
    """Sec. 3.2.1: sitelinks 5-40 hold 76.7 % of the highly referenceable candidates (all 8,649) and span
    every level 0-5. The released sample (first 1,129 rows) gives the same picture."""
    import csv

    import numpy as np

    from geoagent.crawl.referenceability import CANDIDATE_REF_COLUMNS, sitelink_band_share

    with (release_dir / "candidate_referenceability_sample.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CANDIDATE_REF_COLUMNS
    share, n_high, levels = sitelink_band_share(rows)
    links = np.array([int(r["sitelinks"]) for r in rows])
    fam = np.array([int(r["familiarity"]) for r in rows])
    high = fam >= 4
    assert n_high == int(high.sum())
    assert share == pytest.approx(((links[high] >= 5) & (links[high] <= 40)).mean())
    assert abs(share - 0.767) < 0.02
    assert levels == {0, 1, 2, 3, 4, 5}


def test_append_after_a_torn_line_keeps_every_new_decision(tmp_path):
    """A crash mid-append leaves a torn last line; the restarted auditor's records must not be glued onto
    it (they were: the first new record shared the torn line and was lost on the next load)."""
    prov = ScriptedProvider()
    asyncio.run(_auditor(tmp_path, prov, batch_size=4).audit("s1", _cands(4)))
    path = tmp_path / C.AUDIT_DECISIONS_FILE
    with path.open("ab") as f:
        f.write(b'{"qid": "Q999", "model": "aud-1", "ok": tr')  # the crash
    more = [RefCandidate(f"Q{200 + i}", f"Later {i}", 1.0, 0, 0) for i in range(3)]
    asyncio.run(_auditor(tmp_path, ScriptedProvider(), batch_size=2).audit("s2", more))
    reloaded = ReferenceabilityAuditor(ScriptedProvider(), ReferenceabilitySettings(model="aud-1"), tmp_path).decisions
    want = {c.qid for c in _cands(4)} | {c.qid for c in more}
    assert {k[1] for k in reloaded.records} == want  # keys (model, qid, city)
    good = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.startswith('{"qid":"')]
    assert sorted(d["qid"] for d in good) == sorted(want)  # each record on its own line, none duplicated
    # a restart with nothing to append leaves the file as it is
    size = path.stat().st_size
    prov3 = ScriptedProvider()
    asyncio.run(_auditor(tmp_path, prov3).audit("s3", more))
    assert prov3.batches == [] or all(k == "sens" for k in prov3.kinds)
    assert path.stat().st_size == size


class UntrustedProvider(Provider):
    """Answers like a real model might: prose around the JSON, a rating as a string, one outside 0-5,
    one with a field missing; asked again, it answers those cleanly."""

    kind = "untrusted-test"
    paid = False

    def __init__(self):
        self.answers: list[str] = []

    async def generate(self, request: ModelRequest) -> ModelResponse:
        body = request.prompt.split("Candidates", 1)[-1] if "Candidates" in request.prompt else request.prompt.split("Names:", 1)[-1]
        items = re.findall(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \(([0-9.]+) km\))?$", body, re.M)
        if "CONTENTIOUS" in request.prompt:
            text = orjson.dumps([{"idx": int(i), "sensitive": False} for i, _, _ in items]).decode()
        elif len(items) == 4:
            text = ('Sure! Here is my assessment of the places.\n[{"idx": 0, "ok": true, "familiarity": "4", "en": "A"},'
                    ' {"idx": 1, "ok": true, "familiarity": 7, "en": "B"}, {"idx": 2, "familiarity": 2, "en": "C"},'
                    ' {"idx": 3, "ok": "yes", "familiarity": 3.0, "en": "D"}]\nLet me know if you need more.')
        else:
            text = orjson.dumps([{"idx": int(i), "ok": False, "familiarity": 1, "en": lab} for i, lab, _ in items]).decode()
        self.answers.append(text)
        return ModelResponse(text=text, usage=Usage(5, 5))


def test_untrusted_ratings_are_never_guessed_and_every_answer_is_logged_raw(tmp_path):
    from geoagent.crawl.referenceability import RAW_ANSWERS_FILE

    cands = [RefCandidate(f"Q{50 + i}", f"Spot {i}", 1.0 + i, 0, 0) for i in range(4)]
    prov = UntrustedProvider()
    rated = asyncio.run(_auditor(tmp_path, prov, batch_size=4).audit("s1", cands))
    fam = {r.qid: r.familiarity for r in rated}
    # "4" -> 4 and 3.0 -> 3 are read; 7 (outside 0-5) and a missing "ok" are asked again, never clamped
    assert fam == {"Q50": 4, "Q51": 1, "Q52": 1, "Q53": 3}
    raw = _lines(tmp_path / RAW_ANSWERS_FILE)
    assert [r["raw"] for r in raw] == prov.answers  # verbatim, one line per call, in call order
    ref_calls = [r for r in raw if r["task"] == "crawl_referenceability"]
    assert ref_calls[0]["qids"] == ["Q50", "Q51", "Q52", "Q53"]
    assert sorted(q for r in ref_calls[1:] for q in r["qids"]) == ["Q51", "Q52"]
    assert {r["model"] for r in raw} == {"aud-1"}
    # every decision can be traced to the raw answer it came from
    for d in _lines(tmp_path / C.AUDIT_DECISIONS_FILE):
        assert any(d["qid"] in r["qids"] for r in ref_calls)


def test_bracketed_aside_before_the_answer_does_not_hide_it():
    """'[Note] ...' reads as a JSON array on its own; the answer array after it was ignored, so every
    candidate of the batch was re-asked and, with a model that always writes the aside, logged as failed."""
    answer = '[{"idx": 0, "ok": true, "familiarity": 3, "en": "Old Mill"}, {"idx": 1, "ok": false, "familiarity": 0}]'
    for prose in ("[Note] ratings below.\n" + answer, "Scale [0-5]; [unknown] = 0.\n" + answer + "\n[end]"):
        got = parse_ref_batch(prose, 2)
        assert got is not None and sorted(got) == [0, 1], prose
        assert got[0]["familiarity"] == 3 and got[0]["name_en"] == "Old Mill" and got[1]["ok"] is False
    # nothing that looks like an answer: still an (empty) array result, so every candidate is asked again
    assert parse_ref_batch("[Note] I cannot rate these.", 2) == {}


def test_rerun_of_a_site_adds_no_duplicate_review_items(tmp_path):
    """The site's audit is re-run when the process died after the review queue was appended but before the
    site's result was stored; the queue then got every pending item a second time. Pageviews come from the
    local pageviews fake (a title it does not know answers 404 = no views)."""
    from geoagent.clients.pageviews import PageviewsClient
    from geoagent.crawl.referenceability import REVIEW_QUEUE_FILE
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.sandbox import pageviews as pv_fake
    from geoagent.sandbox.server import serve

    # familiarity = len(label) % 6 (ScriptedProvider): "Aaaaa" 5, "Bbbbbb" 0, "Cc" 2, "Ddd" 3, "Eeee" 4, "F" 1
    labels = ["Aaaaa", "Bbbbbb", "Cc", "Ddd", "Eeee", "F"]
    cands = [RefCandidate(f"Q{300 + i}", lab, 1.0 + 0.1 * i, 0, 0, enwiki_title=lab) for i, lab in enumerate(labels)]
    daily = {"Aaaaa": 1, "Bbbbbb": 5000, "Cc": 40, "Ddd": 60, "Eeee": 2}  # "F" unknown: 404
    fast = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, timeout_s=5)

    async def go():
        async with serve(pv_fake.make_app(daily)) as base, HttpClient(default_policy=fast) as http:
            for _ in range(2):  # the first run, then the re-run after a crash
                aud = ReferenceabilityAuditor(ScriptedProvider(), ReferenceabilitySettings(model="aud-1", pageviews=True),
                                              tmp_path, pageviews=PageviewsClient(http, base, "geoagent-test (mailto:t@example.org)"))
                await aud.audit("site_x", cands)

    asyncio.run(go())
    lines = _lines(tmp_path / REVIEW_QUEUE_FILE)
    keys = [(r["site"], r["qid"]) for r in lines]
    assert len(keys) == len(set(keys)) > 0
    # each item names the rating model whose tier disagrees with the pageviews (not a "review|<site>" tag)
    assert {(r["model"], r["site"]) for r in lines} == {("aud-1", "site_x")}
    # by hand: view tertiles low {F, Aaaaa}, mid {Eeee, Cc}, high {Ddd, Bbbbbb}; rating tiers differ by 2 for two
    assert sorted(q for _, q in keys) == ["Q300", "Q301"]  # Aaaaa: rated 5, few readers; Bbbbbb: rated 0, most read


def test_review_queue_of_an_older_version_keys_its_items_by_site(tmp_path):
    """Logs written before the review queue named the rating model hold ``model = "review|<site>"``: their
    items are found by (site, QID) like the new ones, so a re-run adds no second copy."""
    from geoagent.crawl.referenceability import REVIEW_QUEUE_FILE, ReviewQueueLog

    path = tmp_path / REVIEW_QUEUE_FILE
    path.write_text('{"qid": "Q300", "model": "review|site_x", "site": "site_x", "status": "pending"}\n'
                    '{"qid": "Q301", "model": "review|site_y", "status": "pending"}\n'
                    '{"qid": "Q302", "model": "aud-1", "site": "site_x", "status": "pending"}\n', encoding="utf-8")
    log = ReviewQueueLog(path)
    assert log.has("site_x", "Q300") and log.has("site_y", "Q301") and log.has("site_x", "Q302")
    assert not log.has("site_y", "Q300") and not log.has("site_x", "Q301")
