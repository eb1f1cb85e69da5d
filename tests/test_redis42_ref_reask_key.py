"""Referenceability re-asks across processes (session 42, redis41 #4).

Before: a rating re-ask (a candidate asked again alone with the reminder) showed the candidate with the distance from
the site whose task made it, while the city's step had shown the distance from the nearest of the city's sites. Two
processes of a Redis scale-out handling two sites of one city re-asked one candidate under two request keys, so the
campaign's response store could not answer the second from the first: paid twice; and the reminder ("This was asked
before") spoke of a question never asked with that distance. Now a re-ask shows the candidate as its city's step did
(``city_lines``; the crawl reads the city's stored candidate lists), one request key for every site; an answer stored
under the earlier key (the site's line) is replayed, not paid again.

Also before: a process whose auditor had read the logs before another process rated a city found that city's
candidates unrated and asked them all again in the site's own batches (the site's distances: new keys, paid twice).
Now every ``rate_all`` reads what other processes appended first.

The auditor asks the local OpenAI-compatible fake (geoagent.sandbox.llm_openai), as in tests/test_crawl40_ref.py;
the crawl test runs the shipped sandbox crawl (``run.py crawl --no-live``).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re

import orjson

from geoagent import constants as C
from geoagent.crawl.referenceability import (
    FAILURE_ISOLATED,
    RAW_ANSWERS_FILE,
    REF_CITIES_DIR,
    RefCandidate,
    ReferenceabilityAuditor,
    merge_site_candidates,
    rating_failed_count,
)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.crawl.stages import REF_CANDIDATES_DIR, city_lines
from tests.test_crawl40_ref import REMINDER, _cands, _decisions, _lines_of, _raw, answers, correct, poisoned, reminded
from tests.test_crawl40_ref_review import FOUR_AT, LABELS48, _two_poisoned

#: the candidate that keeps its re-asks for a later run after :func:`_seed` (REF_MAX_FUTILE_REASKED)
LEFT = "Q137"
_KM = re.compile(r"\(([0-9.]+) km\)")


def _seed(tmp_path) -> list[RefCandidate]:
    """Rate a city of 48 (its lines, as its step showed them) whose fourth refused name keeps its re-asks."""
    from tests.test_crawl40_ref import rate

    cands = _cands(_two_poisoned(LABELS48, at=FOUR_AT))
    with answers(poisoned):
        _, err, _ = rate(tmp_path, cands, batch_size=12)
    assert err is None and rating_failed_count(tmp_path) == 4
    return cands


def _farther(cands: list[RefCandidate], km: float = 1.0) -> list[RefCandidate]:
    """The same candidates as a farther site of the city lists them (its own distances)."""
    return [RefCandidate(c.qid, c.label, c.dist_km + km, c.lat, c.lon, c.sitelinks, c.enwiki_title) for c in cands]


def _auditors(tmp_path, n: int, body):
    """Run ``body(auditors, app)`` with ``n`` auditors on one state folder (processes of one crawl, each with the
    logs as they were when it started) against one local fake; returns its result."""
    from geoagent.providers import ProviderSettings, make_provider
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.sandbox.llm_openai import make_app
    from geoagent.sandbox.server import serve

    async def main():
        app = make_app(require_auth=False)
        async with serve(app) as base:
            policy = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, timeout_s=10.0)
            async with HttpClient(default_policy=policy) as http:
                prov = make_provider(ProviderSettings(kind="openai", model="aud-1", base_url=base + "/v1"), http)
                auds = [ReferenceabilityAuditor(prov, ReferenceabilitySettings(model="aud-1", batch_size=12,
                                                                               sensitive_screen=False),
                                                tmp_path, request_model=("openai", "aud-1")) for _ in range(n)]
                return await body(auds, app)

    return asyncio.run(main())


def test_two_sites_re_ask_a_shared_candidate_with_one_request_key(tmp_path):
    cands = _seed(tmp_path)
    near, far = cands, _farther(cands)
    lines = {c.qid: c for c in merge_site_candidates({"s_near": near, "s_far": far})}
    prompts: list[str] = []

    def seen(ctx) -> str:
        prompts.append(ctx.prompt)
        return reminded(ctx)

    async def body(auds, app):  # two processes, each handling one site of the city, at the same moment
        await asyncio.gather(auds[0].audit("s_near", near, city="newtown", city_lines=lines),
                             auds[1].audit("s_far", far, city="newtown", city_lines=lines))

    with answers(seen):
        _auditors(tmp_path, 2, body)
    again = [p for p in prompts if REMINDER in p]
    assert len(again) == 2 and all(_lines_of(p) == [(0, "Poison Hall D")] for p in again), again
    # before: "(1.87 km)" from one site and "(2.87 km)" from the other, two request keys; now the city's line in
    # both, so the campaign's response store answers the second process from the first
    assert again[0] == again[1] and _KM.findall(again[0]) == [f"{lines[LEFT].dist_km:.2f}"]
    keys = {r["key"] for r in _raw(tmp_path) if r["qids"] == [LEFT]}
    assert len(keys) == 2  # the first ask alone and one re-ask, not one more for the other site
    last = [r for r in _decisions(tmp_path) if r["qid"] == LEFT][-1]
    assert "error" not in last and last["reasks"] == 1


def test_a_re_ask_stored_under_the_sites_line_is_replayed_not_paid(tmp_path):
    # the earlier version's re-ask of the far site (its own distance) was answered and stored, and the process was
    # killed before the decision was logged: the re-run's re-ask shows the city's line (another key), and the stored
    # answer stands for it
    cands = _seed(tmp_path)
    far = _farther(cands)
    lines = {c.qid: c for c in cands}
    c_far = next(c for c in far if c.qid == LEFT)

    async def store_old(auds, app):
        aud = auds[0]
        prompt = aud._reask_prompt(c_far, 1)  # the earlier version's prompt: the far site's line
        assert f"({c_far.dist_km:.2f} km)" in prompt
        answer = orjson.dumps([{"idx": 0, "ok": True, "familiarity": 2, "zh": None, "en": "Poison Hall D",
                                "why": "stored"}]).decode()
        aud.raw.append({"task": "crawl_referenceability", "model": "aud-1",
                        "key": aud._request(prompt, "crawl_referenceability").key(), "qids": [LEFT], "raw": answer,
                        "ts": 0.0})

    async def rerun(auds, app):
        from geoagent.sandbox.llm_common import CALLS_KEY

        await auds[0].audit("s_far", far, city="newtown", city_lines=lines)
        return len(app[CALLS_KEY]), auds[0].replayed

    _auditors(tmp_path, 1, store_old)
    with answers(reminded):
        calls, replayed = _auditors(tmp_path, 1, rerun)
    assert calls == 0 and replayed == 1
    last = [r for r in _decisions(tmp_path) if r["qid"] == LEFT][-1]
    assert last["familiarity"] == 2 and last["why"] == "stored" and last["reasks"] == 1


def test_a_process_whose_logs_predate_its_citys_step_asks_nothing_again(tmp_path):
    near = _cands()
    far = _farther(near)
    merged = merge_site_candidates({"s_near": near, "s_far": far})

    async def body(auds, app):
        from geoagent.sandbox.llm_common import CALLS_KEY

        one, two = auds  # both started before the city was rated; ``one`` rates it
        await one.rate_all(merged, city="newtown")
        after_city = len(app[CALLS_KEY])
        await two.audit("s_far", far, city="newtown", city_lines={c.qid: c for c in merged})
        return after_city, len(app[CALLS_KEY]) - after_city

    with answers(correct):
        after_city, again = _auditors(tmp_path, 2, body)
    assert after_city == 1 and again == 0  # before: the far site's 12 candidates asked again under its distances
    assert all("error" not in r for r in _decisions(tmp_path))


def _crawl() -> tuple[int, str]:
    from geoagent.cli import main
    from tests._crawl_once import SANDBOX_CRAWL_CONFIG

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["crawl", str(SANDBOX_CRAWL_CONFIG), "--no-live"])
    return code, out.getvalue()


def test_the_crawl_re_asks_for_a_farther_site_with_its_citys_line(sandbox_crawled, monkeypatch):
    # a candidate of two sites of a city, its failure with re-asks left (a stop cut them off) and no rating on the
    # farther site's record: the re-run reopens that site's task, whose re-ask before showed that site's distance
    root, _ = sandbox_crawled
    state = root / "state" / "crawl-sandbox"
    city = "sandboxcity"
    sites = json.loads((state / REF_CITIES_DIR / f"{city}.json").read_text(encoding="utf-8"))["sites"]
    per_site = {s: {c["qid"]: c for c in json.loads((state / REF_CANDIDATES_DIR / f"{s}.json").read_text(
        encoding="utf-8"))["candidates"]} for s in sites}
    site_of = {s: json.loads((state / "rated" / f"{s}.json").read_text(encoding="utf-8"))["site"] for s in sites}
    lines = city_lines(state, site_of[sites[0]])
    assert set(lines) == {q for cs in per_site.values() for q in cs}
    # a QID two sites list at different distances (shown as different numbers), the farther site not the nearest
    qid, far = next((q, s) for q in sorted(lines) for s in sites
                    if q in per_site[s] and f"{per_site[s][q]['dist_km']:.2f}" != f"{lines[q].dist_km:.2f}")
    decisions = state / C.AUDIT_DECISIONS_FILE
    rated = [json.loads(x) for x in decisions.read_text(encoding="utf-8").splitlines()]
    rec = next(r for r in rated if r["qid"] == qid and r.get("city") == city and "error" not in r)
    failure = {**{k: v for k, v in rec.items() if k not in ("ok", "familiarity", "name_zh", "name_en")},
               "ok": None, "familiarity": None, "error": "unparseable answer: no JSON array in the answer", "raw": "",
               "failure": FAILURE_ISOLATED, "reasks": 0}
    with decisions.open("a", encoding="utf-8") as f:
        f.write(json.dumps(failure) + "\n")
    path = state / "rated" / f"{far}.json"
    rec_far = json.loads(path.read_text(encoding="utf-8"))
    rec_far["rated"] = [{**r, "familiarity": None} if r["qid"] == qid else r for r in rec_far["rated"]]
    path.write_text(json.dumps(rec_far), encoding="utf-8")
    prompts: list[str] = []

    def seen(ctx) -> str:
        import geoagent.crawl.simulate as sim

        prompts.append(ctx.prompt)
        return sim.referenceability_answer(ctx)

    raw0 = len((state / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines())
    with answers(seen):
        code, text = _crawl()
    assert code == 0, text
    again = [p for p in prompts if REMINDER in p]
    assert len(again) == 1, prompts
    # before: the farther site's own distance; now the city's line, as its step showed it
    assert _KM.findall(again[0]) == [f"{lines[qid].dist_km:.2f}"]
    assert f"({per_site[far][qid]['dist_km']:.2f} km)" not in again[0]
    assert len((state / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines()) == raw0 + 1
    last = [r for r in _decisions(state) if r["qid"] == qid and r.get("city") == city][-1]
    assert "error" not in last and last["reasks"] == 1
