"""Referenceability auditor: unreadable and misnumbered answers (session 40, crawl40 #1 and #2).

Before (#1): an auditor whose answers carried no ``idx`` (otherwise correct JSON) had every 40-candidate batch halved
down to single candidates (about 79 calls a batch, 39x the spend of the crawl), every decision logged as "unparseable
answer", every ladder empty, and the crawl ended ``complete`` (exit 0); a failed rating counted as decided, so a
re-run never asked it again. Now one element without ``idx`` is the answer for a batch of one; a split whose two halves
both come back unreadable stops; failures are logged (error, raw) but are no decisions; the step fails (retryable,
then dead-lettered: ``incomplete``, exit 3) and the summary and ``run.py status`` count "ratings of N candidates
failed".

Before (crawl40b #1, #2): that fix failed a whole city's rating step (no ladder for any of its sites, the crawl
``incomplete``) for one candidate whose answer could not be read even alone, and a re-run replayed the same stored
answer, so the failure could never become a rating. Now such an isolated failure is logged (``failure`` isolated),
the candidate is in no ladder and counted, and the step completes (unless more than 10% of its candidates failed);
a later run asks it again alone with a reminder after the prompt (a new request key), at most twice across runs.

Before (#2): an answer numbered 1..N instead of 0..N-1 moved every rating and English name onto the next candidate
(536 of 550 decisions wrong), without a word. Now an answer numbering any element outside 0..n-1 is set aside whole
(the screen reads by the same idx), and so is a rating answer whose English names mostly are other candidates'
labels (a numbering shifted within range).

The auditor asks the local OpenAI-compatible fake (geoagent.sandbox.llm_openai) over HTTP; the answers are switched
by replacing the fake's ``crawl_referenceability`` responder (as tests/test_crawl38.py switches the image audit's).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import re
from collections.abc import Callable

import orjson

import geoagent.crawl.simulate as sim
from geoagent import constants as C
from geoagent.crawl.image_audit import load_prompt
from geoagent.crawl.referenceability import (
    FAILURE_ISOLATED,
    FAILURE_SYSTEMATIC,
    RAW_ANSWERS_FILE,
    REF_MARKER,
    REF_MAX_REASKS,
    REF_PARSER_VERSION,
    REF_REASK_TEMPLATE,
    AuditorOutputUnreadable,
    RefCandidate,
    ReferenceabilityAuditor,
    moved_names_problem,
    parse_ref_batch,
    parse_sensitive_batch,
    rating_failed_count,
    rating_failed_lines,
    ref_parser_warning,
)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.sandbox.responders import register_responder
from tests._crawl_once import SANDBOX_CRAWL_CONFIG, SANDBOX_TOKEN

LABELS = ["Alder Station", "Birch Park", "Cedar Church", "Dove Theatre", "Elm Market", "Fir Bridge", "Gull Museum",
          "Hazel Square", "Iris Library", "Juniper Gate", "Kestrel Hall", "Linden Fountain"]
POISON = "Poison Hall"
#: the reminder's words before its count: in the prompt of every re-ask, in no other prompt
REMINDER = load_prompt(REF_REASK_TEMPLATE).split("{earlier}")[0]
_LINE = re.compile(r"^(\d+)\. (.*?)(?: \(English Wikipedia: .*?\))?(?: \([0-9.]+ km\))?$", re.M)


def _lines_of(prompt: str) -> list[tuple[int, str]]:
    return [(int(i), lab) for i, lab in _LINE.findall(prompt.split("Candidates", 1)[-1])]


def _ratings(prompt: str) -> list[dict]:
    """A correct, complete answer: each candidate under its own idx, its label as its English name."""
    return [{"idx": i, "ok": True, "familiarity": len(lab) % 6, "zh": None, "en": lab, "why": "w"}
            for i, lab in _lines_of(prompt)]


def correct(ctx) -> str:
    return orjson.dumps(_ratings(ctx.prompt)).decode()


def no_idx(ctx) -> str:  # scenario ref_noidx: otherwise correct JSON, no idx
    return orjson.dumps([{k: v for k, v in el.items() if k != "idx"} for el in _ratings(ctx.prompt)]).decode()


def one_based(ctx) -> str:  # scenario ref_onebased: numbered 1..N
    return orjson.dumps([{**el, "idx": el["idx"] + 1} for el in _ratings(ctx.prompt)]).decode()


def rotated(ctx) -> str:  # numbered within range, but each element speaks of the candidate after its idx
    els = _ratings(ctx.prompt)
    n = len(els)
    return orjson.dumps([{**el, "idx": (el["idx"] - 1) % n} for el in els]).decode()


def poisoned(ctx) -> str:  # a refusal whenever a poisoned name is in the batch; the others answered correctly
    if any(lab.startswith(POISON) for _, lab in _lines_of(ctx.prompt)):
        return "I'm sorry, I cannot rate these places."
    return correct(ctx)


def reminded(ctx) -> str:  # as poisoned, but the reminder after the prompt gets a correct answer
    return correct(ctx) if REMINDER in ctx.prompt else poisoned(ctx)


@contextlib.contextmanager
def answers(fn: Callable):
    """The fake's rating answers given by ``fn`` for the block, the simulator's own after it."""
    register_responder("crawl_referenceability", lambda p: REF_MARKER in p, fn)
    try:
        yield
    finally:
        register_responder("crawl_referenceability", lambda p: REF_MARKER in p, sim.referenceability_answer)


def _cands(labels=LABELS) -> list[RefCandidate]:
    return [RefCandidate(f"Q{100 + i}", lab, 0.5 + i / 10, 0.0, 0.0) for i, lab in enumerate(labels)]


def rate(tmp_path, cands, *, batch_size: int, city: str | None = "newtown", times: int = 1, model: str = "aud-1",
         sensitive_screen: bool = False):
    """Rate ``cands`` with an auditor asking the local OpenAI fake (``times`` over with the same auditor: a task's
    retries in one run; ``model``: the auditor model; ``sensitive_screen``: screen them too); returns (auditor, the
    last error raised or None, calls the fake answered)."""
    from geoagent.providers import ProviderSettings, make_provider
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.sandbox.llm_common import CALLS_KEY
    from geoagent.sandbox.llm_openai import make_app
    from geoagent.sandbox.server import serve

    async def main():
        app = make_app(require_auth=False)
        async with serve(app) as base:
            policy = HostPolicy(rate=1000, period_s=1.0, concurrency=2, max_attempts=1, timeout_s=10.0)
            async with HttpClient(default_policy=policy) as http:
                prov = make_provider(ProviderSettings(kind="openai", model=model, base_url=base + "/v1"), http)
                aud = ReferenceabilityAuditor(prov, ReferenceabilitySettings(model=model, batch_size=batch_size,
                                                                             sensitive_screen=sensitive_screen),
                                              tmp_path, request_model=("openai", model))
                for _ in range(times):
                    err = None
                    try:
                        await aud.rate_all(cands, city=city)
                    except AuditorOutputUnreadable as e:
                        err = e
            return aud, err, len(app[CALLS_KEY])

    return asyncio.run(main())


def _decisions(tmp_path) -> list[dict]:
    p = tmp_path / C.AUDIT_DECISIONS_FILE
    return [json.loads(x) for x in p.read_text(encoding="utf-8").splitlines()] if p.is_file() else []


def test_answers_without_idx_stop_after_both_halves_fail_and_are_no_decisions(tmp_path):
    cands = _cands(LABELS * 4)[:40]
    cands = [RefCandidate(f"Q{100 + i}", f"{c.label} {i}", c.dist_km, 0.0, 0.0) for i, c in enumerate(cands)]
    with answers(no_idx):
        aud, err, calls = rate(tmp_path, cands, batch_size=40)
    # the whole batch, then its two halves: both unreadable, so no further split (was about 79 calls)
    assert calls == 3 and aud.unreadable == 3 and aud.splits == 1
    assert err is not None and err.gave_up and err.failed == 40
    assert "ratings of 40 of 40 candidates failed for city 'newtown'" in str(err)
    recs = _decisions(tmp_path)
    assert len(recs) == 40 and all(r["familiarity"] is None and r["ok"] is None for r in recs)
    assert all(r["error"].startswith("unparseable answer") and r["raw"].startswith("[{") for r in recs)
    assert all(r["parser_version"] == REF_PARSER_VERSION and r["city"] == "newtown" for r in recs)
    assert all(r["failure"] == FAILURE_SYSTEMATIC and r["reasks"] == 0 for r in recs)  # crawl40b #1
    assert rating_failed_count(tmp_path) == 40
    line = rating_failed_lines(tmp_path)[0]
    assert "ratings of 40 candidates failed" in line and "40 failed with their city's whole rating step" in line
    # a retry of the task replays the stored answers: no call, no second copy of a failure, the same error; a
    # systematic failure is never asked alone with the reminder (40 calls of an auditor whose output is broken)
    with answers(correct):
        again, err2, calls2 = rate(tmp_path, cands, batch_size=40)
    assert calls2 == 0 and again.replayed == 3 and again.reasked == 0 and err2 is not None and err2.failed == 40
    # what gets new answers (review40a #1): a changed auditor or request; an unchanged one replays
    assert err2.gave_up and "another auditor model" in str(err2) and "a changed request is asked anew" in str(err2)
    assert len(_decisions(tmp_path)) == 40


def test_one_element_without_idx_is_the_answer_for_a_batch_of_one(tmp_path):
    assert parse_ref_batch('[{"ok": true, "familiarity": 4, "en": "Birch Park"}]', 1)[0]["familiarity"] == 4
    assert parse_ref_batch('[{"ok": true, "familiarity": 4}]', 2) == {}  # which of two: unknown
    assert parse_ref_batch('[{"ok": true, "familiarity": 4}, {"ok": true, "familiarity": 1}]', 1) == {}
    with answers(no_idx):
        aud, err, calls = rate(tmp_path, _cands()[:3], batch_size=1)
    assert err is None and calls == 3 and aud.unreadable == 0
    by = {r["qid"]: r for r in _decisions(tmp_path)}
    assert [by[f"Q{100 + i}"]["name_en"] for i in range(3)] == LABELS[:3]
    assert by["Q101"]["familiarity"] == len("Birch Park") % 6


def test_an_answer_numbered_from_one_moves_no_rating(tmp_path):
    with answers(one_based):
        aud, err, calls = rate(tmp_path, _cands(), batch_size=6)
    assert err is not None and err.gave_up and calls == 3  # the first batch and its halves; the second not asked
    recs = _decisions(tmp_path)
    assert recs and all(r["familiarity"] is None and r["name_en"] is None for r in recs)  # no shifted rating kept
    assert "outside 0..5" in recs[0]["error"] or "outside 0..2" in recs[0]["error"]
    # Birch Park's rating was given to Alder Station before; no decision of the first batch carries another's name
    assert not any(r.get("name_en") for r in recs)
    # the screen reads by the same idx
    why: list[str] = []
    assert parse_sensitive_batch('[{"idx": 1, "sensitive": false}, {"idx": 2, "sensitive": true}]', 2,
                                 problems=why) == {}
    assert why and "outside 0..1" in why[0]


def test_a_numbering_shifted_within_range_is_caught_by_the_english_names(tmp_path):
    with answers(rotated):
        aud, err, calls = rate(tmp_path, _cands(), batch_size=6)
    assert err is not None and calls == 3
    recs = _decisions(tmp_path)
    assert all(r["familiarity"] is None for r in recs)
    assert "English names" in recs[0]["error"] and "numbering shifted" in recs[0]["error"]
    # the rule itself: names that are the candidates' own, or shared by two candidates, are no shift
    batch = _cands(["Central Station", "Central Station", "Old Mill"])
    own = {i: {"name_en": c.label} for i, c in enumerate(batch)}
    assert moved_names_problem(own, batch) is None
    assert moved_names_problem({0: {"name_en": "Old Mill"}, 2: {"name_en": "Central Station"}}, batch) is not None
    # one name that is another candidate's label is no pattern
    assert moved_names_problem({0: {"name_en": "Old Mill"}, 1: {"name_en": "Central Station"}}, batch) is None


def _raw(tmp_path) -> list[dict]:
    return [json.loads(x) for x in (tmp_path / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines()]


def test_one_candidate_that_cannot_be_read_is_left_out_and_asked_again_alone_with_a_reminder(tmp_path):
    labels = LABELS[:4] + [POISON] + LABELS[4:11]
    cands = _cands(labels)
    with answers(poisoned):  # twice with the same auditor: a retry in the same run asks nothing again
        aud, err, calls = rate(tmp_path, cands, batch_size=6, times=2)
    # isolated down to the one candidate (the other half of each split was readable), the others rated, and the
    # step completes (crawl40b #1: it failed the city before)
    assert err is None
    by = {r["qid"]: r for r in _decisions(tmp_path)}
    assert by["Q104"]["error"].startswith("unparseable answer") and "cannot rate" in by["Q104"]["raw"]
    assert by["Q104"]["familiarity"] is None and by["Q104"]["ok"] is None
    assert all(by[c.qid]["familiarity"] == len(c.label) % 6 for c in cands if c.label != POISON)
    assert rating_failed_count(tmp_path) == 1
    # fixref41 #1: asked alone, then at once again alone with the reminder, twice (each a request key of its own),
    # in the run that failed it (crawl40b #2: one re-ask per later run before); still refused, a failure with its
    # re-asks spent; the retry replayed them (no second call)
    assert aud.reasked == 1 and by["Q104"]["failure"] == FAILURE_ISOLATED and by["Q104"]["reasks"] == REF_MAX_REASKS
    alone = [r for r in _raw(tmp_path) if r["qids"] == ["Q104"]]
    assert len(alone) == 1 + REF_MAX_REASKS and len({r["key"] for r in alone}) == len(alone)
    assert [r.get("reasks") for r in _decisions(tmp_path) if r["qid"] == "Q104"] == [0, 1, 2]  # every failure logged
    # a later run has nothing to ask again
    with answers(poisoned):
        again, err2, calls2 = rate(tmp_path, cands, batch_size=6)
    assert err2 is None and calls2 == 0 and again.reasked == 0


def test_a_reask_that_is_read_rates_the_candidate_in_the_same_run(tmp_path):
    prompts: list[str] = []

    def second_reminder(ctx) -> str:  # read only when reminded of 2 earlier replies
        prompts.append(ctx.prompt)
        return correct(ctx) if "your 2 earlier replies" in ctx.prompt else poisoned(ctx)

    cands = _cands(LABELS[:4] + [POISON] + LABELS[4:11])
    with answers(second_reminder):
        aud, err, calls = rate(tmp_path, cands, batch_size=6)
    assert err is None and aud.reasked == 1
    reminders = [p for p in prompts if REMINDER in p]
    assert len(reminders) == 2 and all(_lines_of(p) == [(0, POISON)] for p in reminders)
    # the unreadable answers so far, in words (review40a #8c: it read "so far (2)")
    assert "your earlier reply to it could not be read" in reminders[0]
    assert "your 2 earlier replies to it could not be read" in reminders[1]
    rec = {r["qid"]: r for r in _decisions(tmp_path)}["Q104"]
    assert rec["familiarity"] == len(POISON) % 6 and "error" not in rec and rec["reasks"] == 2
    assert rating_failed_count(tmp_path) == 0 and rating_failed_lines(tmp_path) == []
    assert [r.get("reasks") for r in _decisions(tmp_path) if r["qid"] == "Q104"] == [0, 1, 2]
    with answers(second_reminder):
        _, err2, calls2 = rate(tmp_path, cands, batch_size=6)
    assert err2 is None and calls2 == 0


def test_a_candidate_is_asked_again_at_most_twice(tmp_path):
    cands = _cands(LABELS[:4] + [POISON] + LABELS[4:11])
    for run in range(REF_MAX_REASKS + 2):
        with answers(poisoned):
            aud, err, calls = rate(tmp_path, cands, batch_size=6)
        assert err is None
        assert aud.reasked == (1 if run == 0 else 0), run  # fixref41 #1: both re-asks in the first run
    last = {r["qid"]: r for r in _decisions(tmp_path)}["Q104"]
    assert last["reasks"] == REF_MAX_REASKS and last["failure"] == FAILURE_ISOLATED
    assert len([r for r in _raw(tmp_path) if r["qids"] == ["Q104"]]) == 1 + REF_MAX_REASKS


def test_single_failures_of_more_than_a_tenth_of_the_candidates_fail_the_step(tmp_path):
    # two poisoned names in different batches: each isolated alone (no split gives up), 2 of 12 > 10%
    labels = LABELS[:1] + [POISON] + LABELS[1:7] + [POISON + " 2"] + LABELS[7:10]
    with answers(poisoned):
        aud, err, calls = rate(tmp_path, _cands(labels), batch_size=6)
    assert err is not None and not err.gave_up and err.failed == 2 and "more than 10%" in str(err)
    assert all(r["failure"] == FAILURE_ISOLATED for r in _decisions(tmp_path) if "error" in r)
    # one of 12 is within the share: the step completes
    with answers(poisoned):
        _, err2, _ = rate(tmp_path / "one", _cands(LABELS[:1] + [POISON] + LABELS[1:11]), batch_size=6)
    assert err2 is None


def test_a_failure_logged_by_an_earlier_version_is_read_again_from_its_stored_answer(tmp_path):
    cands = _cands()[:2]
    with answers(no_idx):  # each asked alone, answered without idx: read since version 2
        _, err, calls = rate(tmp_path, cands, batch_size=1)
    assert err is None and calls == 2
    # the log as version 1 left it: the answer could not be read, a failure that counted as decided
    old = [{"qid": c.qid, "label": c.label, "model": "aud-1", "ok": None, "familiarity": None, "name_zh": None,
            "name_en": None, "why": "", "ts": 1.0, "error": "unparseable answer", "raw": "[...]", "city": "newtown",
            "candidate_lines": 2} for c in cands]
    with (tmp_path / C.AUDIT_DECISIONS_FILE).open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in old)
    assert rating_failed_count(tmp_path) == 2
    assert "1 of 1 cities hold ratings read by an earlier version" in (ref_parser_warning(tmp_path) or "")
    with answers(poisoned):  # not asked: the stored answers are replayed and read by this version's rules
        again, err2, calls2 = rate(tmp_path, cands, batch_size=1)
    assert err2 is None and calls2 == 0 and again.replayed == 2
    last = {r["qid"]: r for r in _decisions(tmp_path)}
    assert [last[c.qid]["name_en"] for c in cands] == LABELS[:2]
    assert all(last[c.qid]["parser_version"] == REF_PARSER_VERSION for c in cands)
    assert rating_failed_count(tmp_path) == 0 and ref_parser_warning(tmp_path) is None


def test_a_crawl_whose_auditor_drops_idx_ends_incomplete_and_says_so(tmp_path, monkeypatch):
    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)
    out = io.StringIO()
    with answers(no_idx), contextlib.redirect_stdout(out):
        code = main(["crawl", str(SANDBOX_CRAWL_CONFIG), "--no-live"])
    text = out.getvalue()
    assert code == 3 and "incomplete" in text.splitlines()[0], text
    state = next(p for p in (tmp_path / "state").iterdir() if (p / RAW_ANSWERS_FILE).is_file())
    raw = [json.loads(x) for x in (state / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines()]
    asked = [r for r in raw if r["task"] == "crawl_referenceability"]
    assert 0 < len(asked) <= 3 * 2, len(asked)  # at most 3 answers for each of the 2 admitted cities
    n = rating_failed_count(state)
    assert n > 0 and f"referenceability: ratings of {n} candidates failed" in text, text
    steps = [json.loads(x) for x in (state / "crawl_decisions.jsonl").read_text(encoding="utf-8").splitlines()]
    failed = [s for s in steps if s.get("event") == "ref_city_rating" and s.get("n_rating_failed")]
    assert failed and all(s["n_unreadable_answers"] >= 0 and "unreadable" in s["error"] for s in failed)
    assert not list(state.glob("ladders/*.csv"))
    status = io.StringIO()
    with contextlib.redirect_stdout(status):
        main(["status", str(SANDBOX_CRAWL_CONFIG)])
    assert f"ratings of {n} candidates failed" in status.getvalue(), status.getvalue()


def test_a_crawl_with_unreadable_candidates_completes_and_a_re_run_rates_those_left(tmp_path, monkeypatch):
    from geoagent.cli import main
    from geoagent.crawl.referenceability import REF_MAX_FUTILE_REASKED

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)
    poison: list[str] = []
    mode = {"reminded": False}

    def refused(ctx) -> str:  # the first 5 names the crawl asks about are refused (with a reminder too, at first)
        lines = _lines_of(ctx.prompt)
        if not poison:
            poison.extend(lab for _, lab in lines[:5])
        if not (mode["reminded"] and REMINDER in ctx.prompt) and any(lab in poison for _, lab in lines):
            return "I'm sorry, I cannot rate these places."
        return sim.referenceability_answer(ctx)

    def crawl() -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        with answers(refused), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["crawl", str(SANDBOX_CRAWL_CONFIG), "--no-live"])
        return code, out.getvalue(), err.getvalue()

    def rated_of(p) -> dict[str, dict]:
        return {r["qid"]: r for r in json.loads(p.read_text(encoding="utf-8"))["rated"]}

    code, text, _ = crawl()
    # crawl40b #1: the city's step completes without the candidates; the run is complete, with the line
    assert code == 0 and "complete" in text.splitlines()[0], text
    state = next(p for p in (tmp_path / "state").iterdir() if (p / RAW_ANSWERS_FILE).is_file())
    last0 = {(r["qid"], r.get("city")): r for r in _decisions(state)}
    failed = [r for r in last0.values() if "error" in r]
    # the names (the sandbox world has some twice), in each city whose sites list them
    assert failed and all(r["label"] in poison and r["failure"] == FAILURE_ISOLATED for r in failed)
    assert all("cannot rate" in r["raw"] for r in failed)
    # fixref41 #1: each re-asked twice with the reminder in this run, until REF_MAX_FUTILE_REASKED of a city had
    # every re-ask fail: the others keep theirs for a later run
    spent = [r for r in failed if r["reasks"] == REF_MAX_REASKS]
    failed = [r for r in failed if r["reasks"] == 0]
    assert failed and spent and len(spent) + len(failed) == sum(1 for r in last0.values() if "error" in r)
    per_city = {c: sum(1 for r in spent if r["city"] == c) for c in {r["city"] for r in spent}}
    assert all(n <= REF_MAX_FUTILE_REASKED for n in per_city.values()) and REF_MAX_FUTILE_REASKED in per_city.values()
    qids = {r["qid"] for r in failed}
    n = len(failed) + len(spent)
    line = f"referenceability: ratings of {n} candidate{'s' if n > 1 else ''} failed"
    assert line in text and "not in any ladder" in text and "by re-running the same `run.py crawl CONFIG`" in text, text
    assert f"{len(spent)} had their {REF_MAX_REASKS} re-asks" in text, text
    status = io.StringIO()
    with contextlib.redirect_stdout(status):
        main(["status", str(SANDBOX_CRAWL_CONFIG)])
    assert line in status.getvalue(), status.getvalue()
    steps = [json.loads(x) for x in (state / "crawl_decisions.jsonl").read_text(encoding="utf-8").splitlines()]
    city_steps = [s for s in steps if s.get("event") == "ref_city_rating"]
    assert city_steps and sum(s["n_rating_failed"] for s in city_steps) == n and not any("error" in s for s in city_steps)
    assert sum(s["n_reasked"] for s in city_steps) == len(spent)
    ladders = sorted(state.glob("ladders/*.csv"))
    assert ladders and not any(q in p.read_text(encoding="utf-8") for p in ladders for q in qids)
    holding = [p for p in sorted(state.glob("rated/*.json")) if qids & set(rated_of(p))]
    assert holding and all(r["familiarity"] is None for p in holding for q, r in rated_of(p).items() if q in qids)
    mode["reminded"] = True  # the auditor reads a reminder from now on

    # crawl40b #2: the same command again reopens those sites' tasks and asks each alone with the reminder
    keys_before = {json.loads(x)["key"] for x in (state / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines()}
    code, text2, err2 = crawl()
    assert code == 0, text2
    assert f"{len(holding)} task" in err2 and "queued again on edge sites_for_audit" in err2, err2
    raw = [json.loads(x) for x in (state / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines()]
    new = [r for r in raw if r["key"] not in keys_before]
    # each re-ask a request of its own (new key), about one failed candidate alone
    assert new and all(r["task"] == "crawl_referenceability" and len(r["qids"]) == 1 and r["qids"][0] in qids
                       for r in new)
    last = {(r["qid"], r.get("city")): r for r in _decisions(state)}
    assert all("error" not in last[(r["qid"], r["city"])] and last[(r["qid"], r["city"])]["reasks"] == 1
               for r in failed)
    # those whose re-asks were spent stay failed (another auditor model would rate them)
    assert rating_failed_count(state) == len(spent) and f"ratings of {len(spent)} candidate" in text2
    assert "by re-running" not in text2
    from geoagent.config import load_config
    from geoagent.crawl.stages import write_site_ladder

    settings = load_config(SANDBOX_CRAWL_CONFIG).section("crawl")
    for p in holding:  # every site listing one has its rating now, and its ladder is the one drawn from it
        assert all(r["familiarity"] is not None for q, r in rated_of(p).items() if q in qids)
        rec = json.loads(p.read_text(encoding="utf-8"))
        ladder = next(state.glob(f"ladders/{p.stem}_ladder_*.csv"))
        drawn = ladder.read_bytes()
        assert write_site_ladder(settings, state, rec["site"], rec, {}) == ladder and ladder.read_bytes() == drawn
    steps = [json.loads(x) for x in (state / "crawl_decisions.jsonl").read_text(encoding="utf-8").splitlines()]
    reasks = [s for s in steps if s.get("event") == "ref_rating_reask"]
    assert sorted(s["site"] for s in reasks) == sorted(p.stem for p in holding)
    assert sum(s["model_calls"] for s in reasks) == len(new) and all(s["n_still_failed"] == 0 for s in reasks)
    # a third run has nothing to ask again
    code, _, err3 = crawl()
    assert code == 0 and "queued again" not in err3
    assert len((state / RAW_ANSWERS_FILE).read_text(encoding="utf-8").splitlines()) == len(raw)
