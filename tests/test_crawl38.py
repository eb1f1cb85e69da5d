"""Crawl (session 38, crawl38).

Before (#1): an image audit answer that could not be read (a refusal, a ``quality`` of 4.5) was final: the record
was stored with ``parsed`` false, the image never asked again and left out of ``images.csv`` (no GeoVerify trial, no
GeoHint image), and the summary said "13 not audited yet" for good, a re-run making no call. Now an unreadable
answer is asked again with a reminder, up to 3 answers in all, each kept; an image whose every answer is unreadable
is counted apart ("without a model verdict") for a human verdict to decide.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json

import pytest

import geoagent.crawl.simulate as sim
from geoagent.cli import main
from geoagent.crawl.image_audit import IMAGE_AUDIT_MAX_ANSWERS
from geoagent.sandbox.responders import register_responder
from tests._crawl_once import SANDBOX_CRAWL_CONFIG, SANDBOX_TOKEN

REFUSAL = "I'm sorry, I can't help with identifying locations in images."
REMINDER = "could not be read as the JSON object described above"


def _kind(image_id: str) -> int:
    return int(hashlib.sha256((image_id or "").encode()).hexdigest(), 16) % 4


def _auditor(ctx) -> str:
    """0: refuses every time; 1: refuses once, then answers; 2, 3: answers at once (the simulator's answer)."""
    kind = _kind(ctx.image_id)
    if kind == 0 or (kind == 1 and REMINDER not in ctx.prompt):
        return REFUSAL
    return sim.image_audit_answer(ctx)


@pytest.fixture
def refusing_auditor():
    register_responder("crawl_image_audit", lambda p: sim.PROMPT_MARKER in p, _auditor)
    try:
        yield
    finally:  # the simulator's own responder again, in its place
        register_responder("crawl_image_audit", lambda p: sim.PROMPT_MARKER in p, sim.image_audit_answer)


def test_an_unreadable_image_audit_is_asked_again_and_an_image_never_read_is_counted_apart(
        tmp_path, monkeypatch, refusing_auditor):
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["crawl", str(SANDBOX_CRAWL_CONFIG), "--no-live"]) == 0
    state = next(p for p in (tmp_path / "state").iterdir() if (p / "image_audit").is_dir())
    records = {p.stem: json.loads(p.read_bytes()) for p in (state / "image_audit").glob("*/*.json")}
    by_kind: dict[int, list[dict]] = {}
    for iid, rec in records.items():
        by_kind.setdefault(_kind(iid), []).append(rec)
    assert by_kind.get(0) and by_kind.get(1) and by_kind.get(2), {k: len(v) for k, v in by_kind.items()}
    for rec in by_kind[0]:  # never readable: 3 answers, all kept, no verdict
        assert rec["answers"] == IMAGE_AUDIT_MAX_ANSWERS and not rec["audit"]["parsed"]
        assert [e["raw"] for e in rec["earlier"]] == [REFUSAL] * (IMAGE_AUDIT_MAX_ANSWERS - 1)
        assert rec["audit"]["raw"] == REFUSAL and all(e["reason"] and e["input_tokens"] for e in rec["earlier"])
    for rec in by_kind[1]:  # read at the second ask; the first answer kept
        assert rec["answers"] == 2 and rec["audit"]["parsed"] and [e["raw"] for e in rec["earlier"]] == [REFUSAL]
    for rec in by_kind[2] + by_kind.get(3, []):
        assert rec["audit"]["parsed"] and "answers" not in rec and "earlier" not in rec
    listed = (state / "images.csv").read_text(encoding="utf-8")
    assert not any(r["image_id"] in listed for r in by_kind[0])
    assert all(r["image_id"] in listed for r in by_kind[1])
    summary = json.loads((state / "report" / "crawl_summary.json").read_bytes())
    images = summary["counts"]["images"]
    assert images["unreadable"] == len(by_kind[0]) and images["audited"] == len(records) - len(by_kind[0])
    text = out.getvalue()
    assert f"{len(by_kind[0])} without a model verdict (the auditor's answers could not be read" in text, text
    assert "not audited yet" not in text, text
    # a re-run asks nothing again: every image has its answers
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["crawl", str(SANDBOX_CRAWL_CONFIG), "--no-live"]) == 0
    assert "this run: 0 new model calls" in out.getvalue(), out.getvalue()


HOSTILE = "A\x00B\x1b[31mred\x07 Tower\u202e\n  Gate"


def test_labels_and_names_reach_tables_and_prompts_without_control_characters():
    """crawl38 #2: a Wikidata label or an auditor's name with NUL, ESC, BEL, a bidi override or a line break went
    into sites.csv, the ladders and the GeoVerify claim as it came."""
    from geoagent.clients.wdqs import entity_from_binding
    from geoagent.crawl.ladder import hint_name
    from geoagent.geoverify.prompt import render_claim
    from geoagent.textfmt import label_text

    assert label_text(HOSTILE) == "AB[31mred Tower Gate"
    assert label_text("Nasīm\u200c Bāgh") == "Nasīm\u200c Bāgh"  # a joiner some scripts need stays
    binding = {"item": {"value": "http://www.wikidata.org/entity/Q42"},
               "coord": {"value": "Point(2.35 48.85)"}, "itemLabel": {"value": HOSTILE},
               "title": {"value": "Tower\x1b Gate"}}
    ent = entity_from_binding(binding)
    assert ent.label == "AB[31mred Tower Gate" and ent.enwiki_title == "Tower Gate"
    too_long = entity_from_binding({**binding, "itemLabel": {"value": "x" * 251}})
    assert too_long.label == "Q42"  # longer than Wikidata allows: no label (the sampler skips an unnamed site)
    assert hint_name(HOSTILE, "raw", qid="Q1") == "AB[31mred Tower Gate"
    claim = render_claim(HOSTILE)
    assert "AB[31mred Tower   Gate" in claim and not any(ord(c) < 32 and c != "\n" for c in claim.replace("\n", ""))
    assert "\u202e" not in claim and "\x1b" not in claim


def test_ratings_in_other_digits_are_no_ratings():
    """crawl38 #5: float() read a fullwidth or Arabic-Indic 4 as a rating of 4."""
    from geoagent.crawl.llmjson import as_int_in

    assert [as_int_in(v, 0, 5) for v in ("４", "٤", " 4 ", 4, 4.0, "4.5")] == [None, None, 4, 4, 4, None]
