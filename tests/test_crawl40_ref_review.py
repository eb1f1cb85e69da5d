"""Referenceability auditor: review40a's findings on the unreadable-answer rules (session 40).

Before (#1): two refused names in one batch failed their whole city for good. When both halves of a split came back
unreadable, whatever the reason, every candidate of the split was logged ``systematic`` and the step raised
AuditorOutputUnreadable; a retry and ``run.py dead --requeue`` replayed the same stored answers, and no re-ask with the
reminder was ever made. Two refused names in different halves of a 12-candidate batch: 12 of 12 failed. Now only a
fault of the answers' format seen on both halves gives a split up; a refusal (no JSON array) is split on down to the
names, the split stopping once more of the city failed alone than its share allows; the step's failures are asked
again alone with the reminder before the city's batches, so a requeued step gets further.

Before (#4): the summary's "ratings failed" line and the parser warning counted every auditor model's records, so an
old model's failures stayed after a switch to a new model that rated those QIDs.

Before (#7): two processes running the referenceability stage each re-asked (and paid for) the same candidate.

Before (#8a-c): a site rated alone (no city record) had its single failures reported as its city's failed step; the
share error promised re-asks after they were used up; the reminder read "so far (1)".

The auditor asks the local OpenAI-compatible fake (geoagent.sandbox.llm_openai), as in tests/test_crawl40_ref.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re

import orjson

import geoagent.crawl.simulate as sim
from geoagent import constants as C
from geoagent.crawl.referenceability import (
    FAILURE_ISOLATED,
    FAILURE_SYSTEMATIC,
    REF_MAX_FUTILE_REASKED,
    REF_MAX_REASKS,
    SENS_MARKER,
    JsonlLog,
    ReferenceabilityAuditor,
    rating_failed_count,
    rating_failed_lines,
    rating_failures,
    ref_parser_warning,
)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.sandbox.responders import register_responder
from tests.test_crawl40_ref import (
    LABELS,
    POISON,
    REMINDER,
    _cands,
    _decisions,
    _lines_of,
    _raw,
    answers,
    correct,
    one_based,
    poisoned,
    rate,
    reminded,
)

#: 24 names: two refused names among them are within the 10% a city's step may lose
LABELS24 = LABELS + [f"{lab} North" for lab in LABELS]


def _two_poisoned(labels, at=(1, 8)) -> list[str]:
    out = list(labels)
    for n, i in enumerate(at):
        out[i] = f"{POISON} {'ABCDEFGH'[n]}"
    return out


def refusing(ctx) -> str:  # an auditor that never answers in JSON
    return "I'm sorry, I cannot rate these places."


def test_two_refused_names_in_one_batch_are_two_single_failures_not_the_citys(tmp_path):
    # the reviewer's repro: two refused names in different halves of one batch of 12
    labels = _two_poisoned(LABELS)
    with answers(poisoned):
        aud, err, calls = rate(tmp_path, _cands(labels), batch_size=12)
    recs = {r["qid"]: r for r in _decisions(tmp_path)}
    # 10 ratings and 2 failures in isolation (before: 12 of 12 systematic, after 3 calls)
    assert sorted(q for q, r in recs.items() if "error" in r) == ["Q101", "Q108"]
    assert all(recs[q]["failure"] == FAILURE_ISOLATED for q in ("Q101", "Q108"))
    assert sum(1 for r in recs.values() if r.get("familiarity") is not None) == 10
    # 2 of 12 is more than the 10% a step may lose, also after each was asked again alone with the reminder twice
    # (fixref41 #1): it fails, but as single failures (no split given up)
    assert err is not None and not err.gave_up and err.failed == 2 and calls == 13 + 2 * REF_MAX_REASKS
    assert f"2 had their {REF_MAX_REASKS} re-asks" in str(err) and "with a re-ask left" not in str(err)
    # an auditor that reads the reminder rates both in the first run (fixref41 #1: before, the step failed and
    # `run.py dead --requeue` and another run were needed): one re-ask each, and the step completes
    with answers(reminded):
        again, err2, calls2 = rate(tmp_path / "reminded", _cands(labels), batch_size=12)
    assert err2 is None and calls2 == 13 + 2 and again.reasked == 2
    assert rating_failed_count(tmp_path / "reminded") == 0
    # within the share (2 of 24) the step completes in the first run
    with answers(poisoned):
        _, err3, _ = rate(tmp_path / "24", _cands(_two_poisoned(LABELS24)), batch_size=12)
    assert err3 is None and rating_failed_count(tmp_path / "24") == 2


def test_a_split_into_two_single_candidates_is_two_isolated_failures(tmp_path):
    labels = _two_poisoned(LABELS24, at=(4, 5))
    with answers(poisoned):  # batches of 2: the fixed batch [4, 5] holds both refused names
        aud, err, calls = rate(tmp_path, _cands(labels), batch_size=2)
    assert err is None and calls == 12 + 2 + 2 * REF_MAX_REASKS  # each also re-asked twice (fixref41 #1)
    failed = {r["qid"]: r["failure"] for r in _decisions(tmp_path) if "error" in r}
    assert failed == {"Q104": FAILURE_ISOLATED, "Q105": FAILURE_ISOLATED}


def test_a_format_fault_on_both_halves_still_stops_the_step(tmp_path):
    with answers(one_based):  # numbered from 1 on both halves: the auditor's format, not a name
        aud, err, calls = rate(tmp_path, _cands(LABELS24), batch_size=12)
    assert err is not None and err.gave_up and calls == 3
    assert {r["failure"] for r in _decisions(tmp_path)} == {FAILURE_SYSTEMATIC}
    # what a re-run cannot fix: the message and the summary line say what gets new answers (#1)
    assert "another auditor model" in str(err) and "temperature, max_output_tokens" in str(err)
    line = rating_failed_lines(tmp_path)[0]
    assert "12 failed with their city's whole rating step" in line and "another auditor model" in line
    # a new auditor model asks anew: its ratings stand, and the old model's failures count no more (#4)
    with answers(correct):
        _, err2, calls2 = rate(tmp_path, _cands(LABELS24), batch_size=12, model="aud-2")
    assert err2 is None and calls2 == 2
    assert rating_failed_count(tmp_path) == 0 and rating_failed_lines(tmp_path) == []
    assert rating_failed_count(tmp_path, model="aud-1") == 12 and rating_failed_count(tmp_path, model="aud-2") == 0


def test_an_auditor_that_never_answers_in_json_is_stopped_and_its_reasks_are_bounded(tmp_path):
    cands = _cands([f"{lab} {i}" for i, lab in enumerate(LABELS * 4)][:40])
    with answers(refusing):
        aud, err, calls = rate(tmp_path, cands, batch_size=40)
    # refusals are split on, but only until more than 10% of the city (4 of 40) failed alone: 5 failures, then no
    # further call (before this fix's split rule, asking every candidate alone: 79 calls); the first
    # REF_MAX_FUTILE_REASKED of them were asked again with the reminder, twice each, in vain, and then no more
    # (fixref41 #1: the re-asks of a broken auditor are bounded)
    assert err is not None and not err.gave_up and err.failed == 5
    assert aud.reasked == REF_MAX_FUTILE_REASKED
    assert calls <= 2 * 5 + 2 * 6 + REF_MAX_REASKS * REF_MAX_FUTILE_REASKED, calls
    assert "the split stopped there (35 of the city's candidates not asked yet)" in str(err)
    left = 5 - REF_MAX_FUTILE_REASKED
    assert f"the next run asks the {left} with a re-ask left again alone" in str(err)
    # the later (requeued) run re-asks those alone with the reminder, then replays
    with answers(refusing):
        again, err2, calls2 = rate(tmp_path, cands, batch_size=40)
    assert err2 is not None and calls2 == left * REF_MAX_REASKS and again.reasked == left
    with answers(refusing):
        last, err3, calls3 = rate(tmp_path, cands, batch_size=40)
    # re-asks spent: no call, and the error no longer promises a re-ask (#8b)
    assert calls3 == 0 and err3 is not None and "with a re-ask left" not in str(err3)
    assert f"5 had their {REF_MAX_REASKS} re-asks: a re-run gets no new answer" in str(err3)
    assert "another auditor model" in str(err3)


def test_a_city_failed_by_the_earlier_split_rule_completes_when_read_again(tmp_path):
    labels = _two_poisoned(LABELS24)
    with answers(poisoned):
        _, err, calls = rate(tmp_path, _cands(labels), batch_size=12)
    assert err is None
    # the log as the earlier rule left it: the whole first batch failed as systematic
    old = [{**r, "ok": None, "familiarity": None, "name_en": None, "error": "unparseable answer: no JSON array in "
            "the answer", "raw": "I'm sorry", "failure": FAILURE_SYSTEMATIC, "reasks": 0}
           for r in _decisions(tmp_path) if r["qid"] in {f"Q{100 + i}" for i in range(12)}]
    with (tmp_path / C.AUDIT_DECISIONS_FILE).open("a", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in old)
    assert rating_failed_count(tmp_path) == 12
    with answers(poisoned):  # the stored answers, read by this version's rule: no call
        again, err2, calls2 = rate(tmp_path, _cands(labels), batch_size=12)
    assert err2 is None and calls2 == 0
    assert {r["qid"]: r.get("failure") for r in rating_failures(tmp_path)} == {"Q101": FAILURE_ISOLATED,
                                                                               "Q108": FAILURE_ISOLATED}


def _screen_refusing(ctx) -> str:  # the screen refuses a batch holding a poisoned name
    names = [(int(i), lab) for i, lab in re.findall(r"^(\d+)\. (.*)$", ctx.prompt.split("Names:", 1)[-1], re.M)]
    if any(lab.startswith(POISON) for _, lab in names):
        return "I cannot discuss these names."
    return orjson.dumps([{"idx": i, "sensitive": False, "why": "ordinary"} for i, _ in names]).decode()


def test_two_refused_names_in_one_screen_batch_leave_only_them_unscreened(tmp_path):
    register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, _screen_refusing)
    try:
        with answers(reminded):
            aud, err, _ = rate(tmp_path, _cands(_two_poisoned(LABELS24)), batch_size=12, sensitive_screen=True)
    finally:
        register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, sim.sensitive_answer)
    assert err is None
    sens = JsonlLog(tmp_path / C.AUDIT_SENSITIVE_FILE).records.values()
    # before: both halves refused, the whole batch of 12 unscreened (drawn into no ladder)
    assert sorted(r["qid"] for r in sens if r.get("sensitive") is None) == ["Q101", "Q108"]
    assert sum(1 for r in sens if r.get("sensitive") is False) == 22


def test_the_failed_line_counts_the_current_auditor_models_records(tmp_path):
    labels = _two_poisoned(LABELS24)
    with answers(poisoned):
        rate(tmp_path, _cands(labels), batch_size=12)
    # an old log's decisions by another model, read by the earlier answer rules
    old = [{"qid": c.qid, "label": c.label, "model": "aud-0", "ok": True, "familiarity": 3, "name_zh": None,
            "name_en": None, "why": "", "ts": 1.0, "city": "newtown", "candidate_lines": 2} for c in _cands(labels)]
    text = (tmp_path / C.AUDIT_DECISIONS_FILE).read_text(encoding="utf-8")
    (tmp_path / C.AUDIT_DECISIONS_FILE).write_text("".join(json.dumps(r) + "\n" for r in old) + text, encoding="utf-8")
    assert ref_parser_warning(tmp_path) is None  # aud-1's records are the later: aud-0's count no more
    assert ref_parser_warning(tmp_path, model="aud-0") is not None
    assert rating_failed_count(tmp_path) == 2
    # the other way round: aud-1's failures, then a switch to aud-2 that rates them
    with answers(correct):
        _, err, _ = rate(tmp_path, _cands(labels), batch_size=12, model="aud-2")
    assert err is None and rating_failed_count(tmp_path) == 0 and rating_failed_lines(tmp_path) == []
    assert rating_failed_count(tmp_path, model="aud-1") == 2


#: 48 names, four refused ones in different batches of 12: within the 10% (4.8), and one more than the re-asks of a run
#: are made for (REF_MAX_FUTILE_REASKED): the fourth keeps its re-asks for a later run
LABELS48 = LABELS24 + [f"{lab} South" for lab in LABELS24]
FOUR_AT = (1, 13, 25, 37)


def test_a_site_rated_alone_reports_its_single_failures_as_re_asked_by_a_re_run(tmp_path):
    labels = _two_poisoned(LABELS48, at=FOUR_AT)
    with answers(poisoned):
        _, err, _ = rate(tmp_path, _cands(labels), batch_size=12)
    assert err is None and rating_failed_count(tmp_path) == 4
    # no ref_cities record (no sampling record: the site was rated alone); before, its failures were reported as
    # "failed with their city's whole rating step ... dead --requeue"
    line = rating_failed_lines(tmp_path)[0]
    assert "1 failed alone, but so many that their city's rating step failed" in line  # nothing says it completed
    assert f"3 had their {REF_MAX_REASKS} re-asks" in line
    (tmp_path / "rated").mkdir()
    site = {"site": "s1", "city": "Newtown", "lat": 0.0, "lon": 0.0}
    rated = [{"qid": c.qid, "familiarity": None if c.label.startswith(POISON) else 1} for c in _cands(labels)]
    (tmp_path / "rated" / "s1.json").write_text(json.dumps({"site": site, "rated": rated}), encoding="utf-8")
    line = rating_failed_lines(tmp_path)[0]
    assert "1 will be asked again alone, with a reminder, by re-running the same `run.py crawl CONFIG`" in line
    assert "whole rating step" not in line and "requeue" not in line


def test_a_reask_made_by_another_process_is_not_paid_again(tmp_path):
    from geoagent.providers import ProviderSettings, make_provider
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.sandbox.llm_common import CALLS_KEY
    from geoagent.sandbox.llm_openai import make_app
    from geoagent.sandbox.server import serve

    labels = _two_poisoned(LABELS48, at=FOUR_AT)
    with answers(poisoned):  # the fourth failure (Q137) keeps its re-asks for a later run (REF_MAX_FUTILE_REASKED)
        _, err, _ = rate(tmp_path, _cands(labels), batch_size=12)
    assert err is None and rating_failed_count(tmp_path) == 4

    async def main():
        app = make_app(require_auth=False)
        async with serve(app) as base:
            policy = HostPolicy(rate=1000, period_s=1.0, concurrency=2, max_attempts=1, timeout_s=10.0)
            async with HttpClient(default_policy=policy) as http:
                prov = make_provider(ProviderSettings(kind="openai", model="aud-1", base_url=base + "/v1"), http)

                def auditor():
                    return ReferenceabilityAuditor(prov, ReferenceabilitySettings(model="aud-1", batch_size=12,
                                                                                 sensitive_screen=False),
                                                   tmp_path, request_model=("openai", "aud-1"))

                one, two = auditor(), auditor()  # two processes: each read the logs before the other appended
                await one.rate_all(_cands(labels), city="newtown")
                after_one = len(app[CALLS_KEY])
                await two.rate_all(_cands(labels), city="newtown")
                return one, two, after_one, len(app[CALLS_KEY])

    with answers(poisoned):
        one, two, after_one, total = asyncio.run(main())
    assert one.reasked == 1 and after_one == REF_MAX_REASKS
    assert two.reasked == 0 and total == REF_MAX_REASKS  # before: the second process re-asked (and paid) too
    assert [r["reasks"] for r in _decisions(tmp_path) if r["qid"] == "Q137"] == [0, 1, 2]
    assert len([r for r in _raw(tmp_path) if r["qids"] == ["Q137"]]) == 1 + REF_MAX_REASKS


def test_the_reminder_says_how_many_earlier_replies_in_words(tmp_path):
    prompts: list[str] = []

    def seen(ctx) -> str:
        prompts.append(ctx.prompt)
        return poisoned(ctx)

    cands = _cands(LABELS[:4] + [POISON] + LABELS[4:11])
    for _ in range(1 + REF_MAX_REASKS):
        with answers(seen):
            rate(tmp_path, cands, batch_size=6)
    reminders = [p for p in prompts if REMINDER in p]
    assert len(reminders) == 2 and all(_lines_of(p) == [(0, POISON)] for p in reminders)
    assert "your earlier reply to it could not be read" in reminders[0]
    assert "your 2 earlier replies to it could not be read" in reminders[1]
    assert not any(re.search(r"\(\d\)", p) for p in reminders)
    with contextlib.suppress(StopIteration):
        next(p for p in prompts if REMINDER not in p and "earlier repl" in p)
        raise AssertionError("the reminder's words in a prompt that is no re-ask")


def test_names_the_screen_never_asked_are_asked_by_a_later_run(tmp_path):
    """review40b #2: a screen that stopped splitting at too many failed names logged the rest of its batch, never
    asked, as failures: they were out of every ladder for good. Now they have no record and a later run asks them;
    only the refused names stay unscreened."""
    from geoagent.crawl.referenceability import JsonlLog
    from geoagent.sandbox.responders import register_responder

    labels = _two_poisoned(LABELS24, at=(1, 4, 7))
    refused = {c.qid for c in _cands(labels) if POISON in c.label}
    register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, _screen_refusing)
    try:
        with answers(reminded):
            for _ in range(3):
                rate(tmp_path, _cands(labels), batch_size=12, sensitive_screen=True)
    finally:
        register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, sim.sensitive_answer)
    sens = JsonlLog(tmp_path / C.AUDIT_SENSITIVE_FILE).records.values()
    unscreened = {r["qid"] for r in sens if r.get("sensitive") is None}
    assert unscreened and unscreened <= refused, (unscreened, refused)
    assert not any("not asked" in (r.get("error") or "") for r in sens)
