"""The raw-answer log is replayed by request key without holding the answers in memory.

``audit_raw_answers.jsonl`` holds every verbatim auditor answer of a crawl; a re-run answers a request
whose key is logged from there. It used to be loaded whole into a dict of answer texts, which grows
without bound over a crawl of hundreds of cities. Now one streaming pass builds request key -> byte offset
and an answer is read from its line when replayed (:class:`geoagent.crawl.referenceability.RawAnswerLog`).
Checked here: a re-run after the decision logs were lost replays every answer (no call) and ends with the
same decisions; the index holds integers that point at the start of the line of their key (offsets
recomputed from the file's bytes); a torn last line (a crash mid-append) and keyless lines of an older
version are skipped, and the next answer is appended on a fresh line and replayed from there; the memory
kept by the index of a large log is a small fraction of the answers' size (tracemalloc).
"""

from __future__ import annotations

import asyncio
import json
import tracemalloc

import orjson

from geoagent import constants as C
from geoagent.crawl.referenceability import RAW_ANSWERS_FILE, RawAnswerLog, RefCandidate, ReferenceabilityAuditor
from geoagent.crawl.settings import ReferenceabilitySettings
from tests.test_crawl_referenceability import ScriptedProvider, _cands


def _auditor(tmp_path, prov, **kw):
    return ReferenceabilityAuditor(prov, ReferenceabilitySettings(model="aud-1", **kw), tmp_path)


def _line_starts(path) -> dict[str, int]:
    """Request key -> byte offset of the first line holding it, from the file's bytes (a line is counted
    when it parses as a JSON object with a string key and answer)."""
    out: dict[str, int] = {}
    pos = 0
    for line in path.read_bytes().split(b"\n"):
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if isinstance(rec, dict) and isinstance(rec.get("key"), str) and isinstance(rec.get("raw"), str):
            out.setdefault(rec["key"], pos)
        pos += len(line) + 1
    return out


def _strip(path) -> list[dict]:
    return sorted(({k: v for k, v in json.loads(x).items() if k != "ts"} for x in path.read_text().splitlines()),
                  key=lambda d: d["qid"])


def test_rerun_replays_every_logged_answer_from_offsets(tmp_path):
    prov = ScriptedProvider(garble_above=3)  # cut-off answers: splits, so several calls per batch
    first = _auditor(tmp_path, prov, batch_size=10)
    asyncio.run(first.audit("s1", _cands(12)))
    raw_path = tmp_path / RAW_ANSWERS_FILE
    n_raw = len(raw_path.read_text().splitlines())
    assert first.calls == n_raw == len(prov.batches) > 4 and first.replayed == 0
    # the index built while appending equals the one recomputed from the bytes, and holds only offsets
    assert first.raw.offsets == _line_starts(raw_path)
    assert all(type(v) is int for v in first.raw.offsets.values())
    decisions = _strip(tmp_path / C.AUDIT_DECISIONS_FILE)
    sens = _strip(tmp_path / C.AUDIT_SENSITIVE_FILE)
    for f in (C.AUDIT_DECISIONS_FILE, C.AUDIT_SENSITIVE_FILE):
        (tmp_path / f).unlink()  # a crash after the answers were logged, before any decision was
    prov2 = ScriptedProvider(garble_above=3)
    again = _auditor(tmp_path, prov2, batch_size=10)
    asyncio.run(again.audit("s1", _cands(12)))
    assert prov2.batches == [] and again.calls == 0 and again.replayed == n_raw
    assert _strip(tmp_path / C.AUDIT_DECISIONS_FILE) == decisions and _strip(tmp_path / C.AUDIT_SENSITIVE_FILE) == sens
    assert len(raw_path.read_text().splitlines()) == n_raw  # nothing appended by the replay


def test_torn_last_line_and_keyless_lines_are_skipped_and_the_next_answer_replays(tmp_path):
    raw_path = tmp_path / RAW_ANSWERS_FILE
    asyncio.run(_auditor(tmp_path, ScriptedProvider(), batch_size=4).audit("s1", _cands(4)))
    logged = _line_starts(raw_path)
    with raw_path.open("ab") as f:  # an old version's line without a key, then a crash mid-append
        f.write(b'{"task": "crawl_referenceability", "raw": "[]", "qids": ["Q1"]}\n')
        f.write(b'{"task": "crawl_referenceability", "model": "aud-1", "key": "torn", "raw": "[{\\"idx\\": 0')
    log = RawAnswerLog(raw_path)
    assert log.offsets == logged and "torn" not in log and log.get("torn") is None
    more = [RefCandidate(f"Q{400 + i}", f"Corner {i}", 1.0 + i, 0, 0) for i in range(3)]
    prov = ScriptedProvider()
    aud = _auditor(tmp_path, prov, batch_size=4)
    asyncio.run(aud.audit("s2", more))
    assert aud.calls == 2 and aud.replayed == 0  # rating and screening of the new candidates
    lines = raw_path.read_bytes().split(b"\n")
    assert lines[-1] == b"" and lines[-4].endswith(b'"key": "torn", "raw": "[{\\"idx\\": 0')  # torn bytes stay, alone
    assert aud.raw.offsets == _line_starts(raw_path) and len(aud.raw) == len(logged) + 2
    for key, off in aud.raw.offsets.items():  # each offset is where its line starts
        assert json.loads(raw_path.read_bytes()[off:].split(b"\n", 1)[0])["key"] == key
    # a third run replays all of it, including the answers appended after the torn line
    for f in (C.AUDIT_DECISIONS_FILE, C.AUDIT_SENSITIVE_FILE):
        (tmp_path / f).unlink()
    prov3 = ScriptedProvider()
    third = _auditor(tmp_path, prov3, batch_size=4)
    asyncio.run(third.audit("s1", _cands(4)))
    asyncio.run(third.audit("s2", more))
    assert prov3.batches == [] and third.calls == 0 and third.replayed == len(logged) + 2


def test_a_replaced_log_is_reindexed_not_misread(tmp_path):
    """An offset that no longer holds its key (the file was rewritten under a running auditor) is not
    read as another call's answer: the index is rebuilt and the key found at its new place."""
    path = tmp_path / RAW_ANSWERS_FILE
    recs = [{"task": "t", "model": "m", "key": f"k{i}", "qids": [], "raw": f"answer {i}"} for i in range(3)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
    log = RawAnswerLog(path)
    assert log.get("k2") == "answer 2"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs[::-1]))  # same answers, other order
    assert log.get("k0") == "answer 0" and log.get("k2") == "answer 2"
    assert log.offsets == _line_starts(path)


def test_the_index_of_a_large_log_keeps_offsets_not_answers(tmp_path):
    """300 answers of 20 kB each (6 MB): the index, once built, keeps well under 5 % of that in memory."""
    path = tmp_path / RAW_ANSWERS_FILE
    with path.open("wb") as f:
        for i in range(300):
            f.write(orjson.dumps({"task": "crawl_referenceability", "model": "m", "key": f"{i:064x}", "qids": ["Q1"],
                                  "raw": f"{i:05d}" + "x" * 20_000}) + b"\n")
    size = path.stat().st_size
    tracemalloc.start()
    try:
        log = RawAnswerLog(path)
        assert len(log) == 300
        kept, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert kept < 0.05 * size, (kept, size)
    assert log.get(f"{123:064x}") == "00123" + "x" * 20_000
