"""Referenceability auditor: re-asks within the run (session 41, fixref41 #1-#3).

Before (#1): a rating that failed alone was asked again with the reminder only by a LATER run, so a city whose
single failures were more than 10% of its candidates failed its rating step on the first run (exit 3,
``incomplete``) though the reminder would have rated them; only ``run.py dead CONFIG --requeue`` and another run got
them re-asked. Now each is asked again alone with the reminder at once, up to ``REF_MAX_REASKS`` times, and the 10%
rule is judged on what still failed after that; a step's re-asks that rate nothing stop after
``REF_MAX_FUTILE_REASKED`` candidates (an auditor whose output is broken costs a bounded few calls more).

Before (#2): the summary's "older candidate lines" warning counted every auditor model's records, also a model the
config no longer names.

Before (#3): a contentious-name screen that could not be read alone was never asked again: the candidate stayed
unscreened (drawn into no ladder) for good. Now the screen follows the rating's rule, with a reminder of its own.

Real crawls of the shipped sandbox config (``run.py crawl --no-live``) and the auditor against the local
OpenAI-compatible fake (geoagent.sandbox.llm_openai); answers switched by the fake's responders, as in
tests/test_crawl40_ref.py.
"""

from __future__ import annotations

import contextlib
import io
import json
import zlib

import geoagent.crawl.simulate as sim
from geoagent import constants as C
from geoagent.crawl.referenceability import (
    FAILURE_ISOLATED,
    RAW_ANSWERS_FILE,
    REF_MAX_REASKS,
    SENS_MARKER,
    JsonlLog,
    rating_failed_count,
    unscreened_count,
)
from geoagent.crawl.stages import city_key
from geoagent.sandbox.responders import register_responder
from tests._crawl_once import SANDBOX_CRAWL_CONFIG, SANDBOX_TOKEN
from tests.test_crawl40_ref import LABELS, _cands, _decisions, _lines_of, answers, one_based, rate

#: words of every reminder (rating and screen) after a prompt, in no first prompt
REMINDED = "could not be read"
REFUSAL = "I'm sorry, I cannot rate these places."


def _refused_name(label: str) -> bool:
    """A fixed fifth or so of the sandbox world's names, refused unless reminded: more than 10% of each city."""
    return zlib.crc32(label.encode()) % 5 == 0


def flaky_rating(ctx) -> str:
    if REMINDED not in ctx.prompt and any(_refused_name(lab) for _, lab in _lines_of(ctx.prompt)):
        return REFUSAL
    return sim.referenceability_answer(ctx)


def flaky_screen(ctx) -> str:
    names = ctx.prompt.split("Names:", 1)[-1]
    if REMINDED not in ctx.prompt and any(_refused_name(lab) for _, lab in _lines_of("Candidates\n" + names)):
        return "I cannot discuss these names."
    return sim.sensitive_answer(ctx)


@contextlib.contextmanager
def screen_answers(fn):
    register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, fn)
    try:
        yield
    finally:
        register_responder("crawl_sensitive", lambda p: SENS_MARKER in p, sim.sensitive_answer)


def _crawl(tmp_path, monkeypatch, config=SANDBOX_CRAWL_CONFIG) -> tuple[int, str]:
    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["crawl", str(config), "--no-live"])
    return code, out.getvalue()


def _state(tmp_path):
    return next(p for p in (tmp_path / "state").iterdir() if (p / RAW_ANSWERS_FILE).is_file())


def test_a_city_whose_flaky_answers_exceed_a_tenth_completes_in_its_first_run(tmp_path, monkeypatch):
    # fixref41 #1: before, more than 10% of a city failing alone failed its step (exit 3); the re-asks came only
    # after `run.py dead --requeue` and another run
    with answers(flaky_rating):
        code, text = _crawl(tmp_path, monkeypatch)
    state = _state(tmp_path)
    steps = [json.loads(x) for x in (state / "crawl_decisions.jsonl").read_text(encoding="utf-8").splitlines()]
    city_steps = [s for s in steps if s.get("event") == "ref_city_rating"]
    # the world really is that flaky: every city's refused names are more than a tenth of its candidates
    refused = {(r["qid"], r["city"]) for r in _decisions(state) if "error" in r}
    per_city: dict[str, int] = {}
    for _, c in refused:
        per_city[c] = per_city.get(c, 0) + 1
    sizes = {city_key(s["city"]): s["n_candidates"] for s in city_steps}
    assert sizes and set(per_city) == set(sizes) and all(per_city[c] > 0.10 * sizes[c] for c in sizes), (per_city, sizes)
    assert code == 0 and "complete" in text.splitlines()[0], text
    assert not any("error" in s for s in city_steps) and all(s["n_rating_failed"] == 0 for s in city_steps)
    # each refused name was asked again alone with the reminder in this run and rated
    last = {(r["qid"], r.get("city")): r for r in _decisions(state)}
    assert all("error" not in last[k] and last[k]["reasks"] == 1 for k in refused)
    assert sum(s["n_reasked"] for s in city_steps) == len(refused)
    assert rating_failed_count(state) == 0 and "ratings of" not in text
    assert list(state.glob("ladders/*.csv"))


def test_a_failed_screen_is_asked_again_with_a_reminder_in_the_same_run(tmp_path, monkeypatch):
    # fixref41 #3: before, a screen that could not be read alone left its candidate unscreened for good
    prompts: list[str] = []

    def seen(ctx) -> str:
        prompts.append(ctx.prompt)
        return flaky_screen(ctx)

    with screen_answers(seen):
        code, text = _crawl(tmp_path, monkeypatch)
    assert code == 0, text
    state = _state(tmp_path)
    reminded = [p for p in prompts if REMINDED in p]
    assert reminded and all(len(_lines_of("Candidates\n" + p.split("Names:", 1)[-1])) == 1 for p in reminded)
    assert all('"sensitive"' in p for p in reminded)  # the screen's own reminder, not the rating's
    sens = JsonlLog(state / C.AUDIT_SENSITIVE_FILE).records.values()
    assert unscreened_count(state) == 0 and "not screened for contentious names" not in text, text
    again = [r for r in sens if r.get("reasks")]
    # each name whose screen was refused, asked again with the reminder (a name in both cities is one prompt: the
    # second city's re-ask replays its stored answer) and screened
    assert {_lines_of("Candidates\n" + p.split("Names:", 1)[-1])[0][1] for p in reminded} == {r["label"] for r in again}
    assert all(r["sensitive"] is not None and "error" not in r and r["reasks"] == 1 for r in again)
    # the failures before the re-asks stay in the log, with how they came about
    failures = [json.loads(x) for x in (state / C.AUDIT_SENSITIVE_FILE).read_text(encoding="utf-8").splitlines()
                if '"error"' in x]
    assert failures and all(r["failure"] == FAILURE_ISOLATED and r["reasks"] == 0 for r in failures)


def test_the_candidate_lines_warning_counts_the_current_auditor_models_records(tmp_path, monkeypatch):
    # fixref41 #2: records an earlier auditor model made with the older candidate lines (as an older version left
    # them) kept the warning after the config named a new model that rated every candidate again
    code, text = _crawl(tmp_path, monkeypatch)
    assert code == 0 and "older candidate lines" not in text
    state = _state(tmp_path)
    for name, model in ((C.AUDIT_DECISIONS_FILE, "old-auditor"), (C.AUDIT_SENSITIVE_FILE, "sens|old-auditor")):
        path = state / name
        recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        old = [{k: v for k, v in {**r, "model": model}.items() if k != "candidate_lines"} for r in recs if r.get("city")]
        path.write_text("".join(json.dumps(r) + "\n" for r in old + recs), encoding="utf-8")
    code, text = _crawl(tmp_path, monkeypatch)
    assert code == 0 and "older candidate lines" not in text, text
    # the current model's own older records are still told
    path = state / C.AUDIT_DECISIONS_FILE
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    mine = next(r for r in recs if r["model"] == "sandbox-text-auditor" and r.get("city"))
    path.write_text(path.read_text(encoding="utf-8")
                    + json.dumps({k: v for k, v in mine.items() if k != "candidate_lines"}) + "\n", encoding="utf-8")
    code, text = _crawl(tmp_path, monkeypatch)
    assert "1 of " in text and "older candidate lines" in text, text


def test_a_format_fault_alone_fails_the_step_after_a_bounded_few_re_asks(tmp_path):
    # fixref41 #1, the bound: batches of one, every answer numbered from 1: each candidate fails alone; its re-asks
    # (which cannot help) stop after a few candidates, and the step still fails on the share
    cands = _cands([f"{lab} {i}" for i, lab in enumerate(LABELS * 4)][:40])
    with answers(one_based):
        aud, err, calls = rate(tmp_path, cands, batch_size=1)
    assert err is not None and not err.gave_up and err.failed == 5  # more than 10% of 40
    from geoagent.crawl.referenceability import REF_MAX_FUTILE_REASKED

    assert calls == 5 + REF_MAX_REASKS * REF_MAX_FUTILE_REASKED, calls
    assert aud.reasked == REF_MAX_FUTILE_REASKED
