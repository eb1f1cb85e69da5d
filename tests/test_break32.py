"""Break helper, session 32: untrusted answers and input files.

#1 GeoVerify: an answer that states the opposite verdict in other words than ``verdict:`` ("Final answer: No",
   "My verdict is no.", "Verdict — No") or under another verdict key of another object (``final_verdict``) was
   scored with its first verdict. Now a conflict (a parse failure, counted, never scored).
#2 A replay file with two records for one trial: the import report said it kept the first, the replay provider
   answered with the last. Both now keep the first (a recorded failure gives way to a later answer).
#3 A server echoing the key as HTML character references (``&#90;&#113;...``) put it whole in the dead-letter
   reason, the progress stream, the missing-work CSV and ``status``.
#4 GeoHint: a second guess in a nested object (``{"guess": {"city": "Lyon"}, "city": "Paris"}``) or in the prose
   after the answer's object ("Correction: area: Belleville") was ignored and the first guess geocoded. NOT changed:
   two rounds of rules for it failed far more valid answers than they caught (a recheck: 23 of 36 realistic
   answers, e.g. "Final answer: City: Munich" after "München", a ``location`` object, a ranked ``second_guess``);
   the answer's own top-level fields stay the answer. The valid answers are pinned below.
#5 GeoHint: an answer whose object runs past the reader's 200,000 characters was labelled "truncated".
#6 Human verdicts: a row with more fields than the header, and a reference naming another site's folder, were
   applied without a word.
#7 A UTF-8 byte-order mark at the start of a replay JSONL file refused the file (TOML and CSV took it).
"""

from __future__ import annotations

import csv
import random
import string
import warnings
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest
from aiohttp import web

from _model_harness import run_against_handler
from geoagent.config import InputWarning
from geoagent.crawl.image_audit import misplaced_human_verdicts, read_human_verdicts
from geoagent.data.importer import ImportReport, read_raw_jsonl
from geoagent.geohint.parse import parse_answer
from geoagent.geoverify.parse import parse_verdict
from geoagent.llmjson import MAX_CHARS
from geoagent.providers.replay import ReplayIndex
from geoagent.secrets import entity_spellings, redact

# -- #1 ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", [
    '{"verdict": "yes", "confidence": 0.8}\nFinal answer: No',
    '{"verdict": "yes"}\nCorrection: the verdict should be "no".',
    '{"verdict": "yes"}\n# Verdict\nNo',
    '{"verdict": "yes"}\n| Verdict | No |',
    '{"verdict": "yes", "revised_answer": "no"}',
    '{"verdict": "yes"}\nMy verdict is no.',
    '{"verdict": "yes"}\nVerdict \u2014 No',
    '{"verdict": "yes"}\n{"final_verdict": "no"}',
    '{"verdict": "no"}\n{"finalAnswer": "Yes."}',
    'verdict: yes\n\nOn reflection the final verdict is: no',
])
def test_the_opposite_verdict_in_other_words_is_a_conflict(text):
    p = parse_verdict(text)
    assert not p.ok and p.verdict is None and p.reason == "conflicting verdicts in one answer (yes and no)", p
    assert p.raw == text


@pytest.mark.parametrize("text, verdict", [
    ('{"verdict": "yes"}\nFinal answer: yes', "yes"),
    ('{"verdict": "no"}\nThe answer is no longer in doubt.', "no"),  # "no longer": no verdict word standing alone
    ('{"verdict": "no", "answer_confidence": 0.8}', "no"),  # a verdict-named key that holds no yes/no
    ('{"verdict": "yes"}\nAnswer: yes or no? I said yes.', "yes"),  # the question repeated
    # break32b #2: a step's answer, and keys about the answer rather than one
    ('Is there any sign? Answer: No.\n{"verdict": "yes", "confidence": 0.9}', "yes"),
    ('{"verdict": "yes", "confidence": 0.9}\n\nIs the photo taken at night? Answer: No.', "yes"),
    ('{"verdict": "yes", "confidence": 0.8, "answer_changed": false}', "yes"),
    ('{"verdict": "no", "confidence": 0.8, "needs_human_decision": true}', "no"),
    ('{"verdict": "yes", "confidence": 0.9, "decision_rule": "no"}', "yes"),
    # recheck32: sub-checks' decisions and conclusions, and keys about the answer
    ('**Check 1.** Any sign in another language? Decision: No.\n**Check 2.** Left-hand traffic? Decision: No.\n'
     '```json\n{"verdict": "yes", "confidence": 0.8}\n```', "yes"),
    ('Are there any contradictions with the claim? Conclusion: No.\n\n{"verdict": "yes"}', "yes"),
    ('Initial conclusion: yes, it looks Parisian. But the sign is Cyrillic.\n{"verdict": "no"}', "no"),
    ('{"verdict": "yes", "answer_revised": "no"}', "yes"),
    ('{"verdict": "yes", "final_answer_changed": "no"}', "yes"),
    ('{"verdict": "no", "is_final_answer": "yes"}', "no"),
    ('{"verdict": "yes", "overall_decision_certain": "no"}', "yes"),
    ('{"verdict": "yes"}\nFinal answer: yes (the tower matches).', "yes"),
    ('{"verdict": "no", "evidence": ["the final answer: yes would need a river"]}', "no"),  # inside the evidence
])
def test_agreeing_or_verdict_free_prose_still_parses(text, verdict):
    p = parse_verdict(text)
    assert p.ok and p.verdict == verdict, p


def test_the_release_sample_parses_as_before():
    path = Path(__file__).resolve().parents[2] / "shared" / "reference" / "geocontext" / "verify_raw_sample.jsonl"
    if not path.is_file():
        pytest.skip("GeoContext release sample not found (../shared/reference/geocontext)")
    rows = [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]
    parsed = [parse_verdict(r["raw"]) for r in rows]
    # the paper: "Every returned response parsed" (seed 000 Sec. 6.4); the sample's 336 answers all do
    assert len(parsed) == 336 and all(p.ok for p in parsed)
    assert sum(p.verdict == "yes" for p in parsed) == 107 and sum(p.verdict == "no" for p in parsed) == 229


# -- #2 ------------------------------------------------------------------------------------------------------


def test_the_import_report_and_the_replay_answer_by_the_same_record(tmp_path):
    t1, t2 = "100010003227|main|Osmanthus Botanical Garden", "100010003228|main|Peony Park"
    lines = [
        {"trial_id": t1, "model": "rec", "raw": '{"verdict": "yes"}'},
        {"trial_id": t2, "model": "rec", "raw": None, "error": "HTTP 500"},
        {"trial_id": t1, "model": "rec", "raw": '{"verdict": "no"}'},
        {"trial_id": t2, "model": "rec", "raw": '{"verdict": "no"}'},  # the retry that got an answer
    ]
    path = tmp_path / "verify_raw.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    report = ImportReport()
    imported = {r.trial_id: r.raw for r in read_raw_jsonl(path, report)}
    idx = ReplayIndex(path, ("trial_id", "model"))
    replayed = {t: idx.get(f"{t}|rec")["raw"] for t in (t1, t2)}
    assert imported == replayed == {t1: '{"verdict": "yes"}', t2: '{"verdict": "no"}'}
    assert [(i.line, i.reason.split("; ")[-1]) for i in report.issues] == [
        (3, "kept the first"), (4, "kept this one (the earlier record is a recorded failure)")]


# -- #3 ------------------------------------------------------------------------------------------------------


def _key() -> str:
    rng = random.Random(32)  # drawn at run time: no key-shaped literal in the sources
    return "".join(rng.choice(string.ascii_letters + string.digits + "+/=") for _ in range(40))


def test_entity_spellings_cover_decimal_hex_and_partial_references():
    key = _key()
    dec = "".join(f"&#{ord(c)};" for c in key)
    hexa = "".join(f"&#X{ord(c):X};" for c in key)
    partial = "".join(c if c.isalnum() else f"&#{ord(c)};" for c in key)
    for echoed in (dec, hexa, partial):
        masked = redact(f"<p>Bad key: {echoed}</p>", [key])
        assert echoed not in masked and "***" in masked, masked
    assert key not in entity_spellings(key)
    assert entity_spellings("a&b<c>d\"e'f0123") >= {"a&amp;b&lt;c&gt;d&quot;e&#x27;f0123",
                                                     "a&amp;b&lt;c&gt;d&quot;e&#39;f0123"}


def test_an_html_echo_of_the_key_never_reaches_queues_state_or_status(tmp_path, monkeypatch):
    key = _key()
    monkeypatch.setenv("B32_HTML_KEY", key)
    echoed = "".join(f"&#{ord(c)};" for c in key)

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(text=f"<html><body>Bad key: {echoed}</body></html>", status=400, content_type="text/html")

    out, status, texts = run_against_handler(tmp_path, name="htmlecho", key_var="B32_HTML_KEY", handler=refuse, n=3,
                                             export=True)
    assert out.counts["requests"].dead == 3, out.summary()
    assert "Bad key: ***" in status, status
    assert not any(echoed in t or key in t for t in texts)


# -- #4 (not changed: the valid answers that must keep parsing), #5 ---------------------------------------------


@pytest.mark.parametrize("text", [
    '{"city": "Paris", "area": "Le Marais"}\nNote: the area: Le Marais is known for its museums.',
    '{"city": "Paris", "area": "8th arrondissement - Madeleine"}\n**Area:** Madeleine',
    '{"city": "Paris", "area": "Le Marais", "building": "Hotel"}\nBuilding: unknown, area: not sure, city: same',
    # break32b #1: restated in other spellings, a confidence, or a description nested in the evidence or the clues
    '{"city": "Paris", "area": "Le Marais"}\nCity: Paris, France\nArea: Marais (4th)\nConfidence in city: high',
    '{"city": "Paris", "area": "Le Marais"}\nConfidence levels - City: 95%, Area: 70%',
    '{"city": "Paris", "area": "Le Marais", "evidence": {"architecture": {"city": "typical of Paris"}}}',
    '{"city": "Paris", "area": "Le Marais", "clues": [{"clue": "sign", "city": "Lutetia"}]}',
    '{"city": "Paris", "area": "Le Marais", "alternatives": [{"city": "Lyon", "confidence": 0.1}]}',
    '{"city": "Paris", "area": "Le Marais"}\nCorrection: city: PARIS (France)',
    '{"city": "Paris", "area": "Le Marais", "building": "Hotel"}\nActually building: \u2014',
    'Possible city: Lyon. Looking closer at the signs:\n```json\n{"city": "Paris", "area": "Le Marais"}\n```',
    '{"city": "Paris", "clues": [{"clue": "sign", "place": "Louvre"}], "building": "Louvre Pyramid"}',
    '{"city": "Paris", "area": "Le Marais"}' + " and so on" * 30000,  # a long tail after a complete object
    # recheck32: a final answer that agrees in other words, and nested objects naming the place otherwise
    '{"city": "Paris", "area": "Montmartre"}\n\nFinal answer: Area: 18th arrondissement (Montmartre)',
    '{"city": "Paris", "area": "Montmartre", "location": {"country": "France", "city": "Paris, France"}}',
    '{"city": "Paris", "area": "Montmartre", "second_guess": {"city": "Lyon", "probability": 0.15}}',
])
def test_reasoning_before_the_answer_and_agreeing_prose_still_parse(text):
    a = parse_answer(text)
    assert a.ok and a.city == "Paris", a


def test_an_object_past_the_readers_limit_is_too_long_not_truncated():
    text = '{"city": "Mirror Bay' + "x" * 220_000 + '", "area": "x"}'
    a = parse_answer(text)
    assert not a.ok and a.city is None and a.error.startswith(
        f"answer too long: its JSON object runs past the first {MAX_CHARS:,} characters"), a
    assert not a.truncated and len(a.raw) == len(text)


# -- #6 ------------------------------------------------------------------------------------------------------


def _verdicts(tmp_path: Path, rows: list[list[str]]) -> Path:
    p = tmp_path / "human.csv"
    with p.open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["image", "human_verdict", "human_reason"])
        w.writerows(rows)
    return p


def test_a_row_with_more_fields_than_the_header_is_refused(tmp_path):
    p = _verdicts(tmp_path, [["a/100010003206.jpg", "keep", "fine"]])
    p.write_text(p.read_text() + "a/100010003207.jpg,exclude,blurry,too dark\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"human\.csv:3: 1 field\(s\) more than the header's 3 columns \('too dark'\)"):
        read_human_verdicts(p)


def test_a_reference_naming_another_sites_folder_is_warned_about(tmp_path):
    p = _verdicts(tmp_path, [["mirrorbay_osmanthus/100010003206.jpg", "exclude", ""],
                             ["mirrorbay_peony/100010003206.jpg", "exclude", ""],
                             ["../../etc/100010003207.jpg", "keep", ""],
                             ["100010003208", "keep", ""],
                             ["streetview\\mirrorbay_peony\\100010003208.jpg", "keep", ""]])
    site_of = {"100010003206": "mirrorbay_osmanthus", "100010003207": "mirrorbay_osmanthus",
               "100010003208": "mirrorbay_peony"}
    assert misplaced_human_verdicts(p, site_of) == [
        f"{p}:3: mirrorbay_peony/100010003206.jpg (image 100010003206 is of site mirrorbay_osmanthus)",
        f"{p}:4: ../../etc/100010003207.jpg (image 100010003207 is of site mirrorbay_osmanthus)"]
    # the crawl's hand-off says so (over the image_audit/<site>/<id>.json files it wrote)
    from geoagent.crawl.campaign import _warn_unmatched_verdicts

    state = tmp_path / "state"
    for image, site in site_of.items():
        (state / "image_audit" / site).mkdir(parents=True, exist_ok=True)
        (state / "image_audit" / site / f"{image}.json").write_text("{}", encoding="utf-8")
    svc = SimpleNamespace(state_dir=state, settings=SimpleNamespace(image_audit=SimpleNamespace(human_verdicts=str(p))))
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        _warn_unmatched_verdicts(svc)
    said = [str(w.message) for w in got if issubclass(w.category, InputWarning)]
    assert len(said) == 1 and said[0].startswith("2 human verdicts of [crawl.image_audit] human_verdicts name a folder "
                                                 "other than the site of their image"), said


# -- #7 ------------------------------------------------------------------------------------------------------


def test_a_replay_file_that_starts_with_a_bom_is_read(tmp_path):
    path = tmp_path / "verify_raw.jsonl"
    rec = {"trial_id": "100010003227|main|Osmanthus Botanical Garden", "model": "rec", "raw": '{"verdict": "no"}'}
    path.write_bytes(b"\xef\xbb\xbf" + orjson.dumps(rec) + b"\n")
    idx = ReplayIndex(path, ("trial_id", "model"))
    assert idx.get(f"{rec['trial_id']}|rec")["raw"] == '{"verdict": "no"}'
    report = ImportReport()
    assert [r.raw for r in read_raw_jsonl(path, report)] == ['{"verdict": "no"}']
