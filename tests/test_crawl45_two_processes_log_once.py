"""Two processes of one crawl in one state folder log each auditor decision and answer once (chaos45 #1).

docs/crawls.md ("Several processes, one state folder") lets two ``run.py crawl`` processes share a crawl. Before,
each referenceability auditor read its logs once, at the start of a city's step: a process whose screen went on
from there asked a batch the other had just screened (its call waited on the other's and took the stored answer, so
the model was billed once) and appended the batch to ``audit_sensitive.jsonl`` a second time; its answer went to
``audit_raw_answers.jsonl`` twice, and the export copied the JSONL logs line for line (599 rows where an
uninterrupted crawl has 568). Now the logs are read again before each batch, an append reads what other processes
wrote and skips a key already logged under the file's append lock, and the export keeps the last record of each
key (the human decision log, append-only by design, keeps every line).
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

from geoagent import constants as C
from geoagent.crawl.export import export_crawl_tables
from geoagent.crawl.referenceability import (
    RAW_ANSWERS_FILE,
    REVIEW_QUEUE_FILE,
    JsonlLog,
    RawAnswerLog,
    RefCandidate,
    ReferenceabilityAuditor,
)
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.providers.base import ModelRequest, ModelResponse, Provider

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"
TRIES = 3  # the race is not hit every time: before the fix 2 runs of 3 duplicated rows


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_bytes().splitlines() if x.strip()]


def _twice(rows: list[dict], *fields: str) -> dict:
    """Keys (``fields`` of each row) written more than once, with their counts."""
    n = Counter(tuple(r.get(f) for f in fields) for r in rows)
    return {k: v for k, v in n.items() if v > 1}


def test_two_crawl_processes_log_each_key_once(tmp_path):
    import polars as pl

    for i in range(TRIES):
        root = tmp_path / f"try{i}"
        env = {**os.environ, "GEOAGENT_STATE": str(root / "state"), "GEOAGENT_QUEUES": str(root / "queues"),
               "MAPILLARY_TOKEN": "MLY|sandbox"}
        procs = [subprocess.Popen([sys.executable, "run.py", "crawl", str(CONFIG), "--no-live"], cwd=REPO, env=env,
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT) for _ in range(2)]
        outs = [p.communicate(timeout=300)[0].decode(errors="replace") for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outs
        state = root / "state" / CAMPAIGN
        for name in (C.AUDIT_SENSITIVE_FILE, C.AUDIT_DECISIONS_FILE):
            rows = _lines(state / name)
            assert rows and not _twice(rows, "model", "qid", "city"), (i, name, _twice(rows, "model", "qid", "city"))
            # the export: one row per key, as the crawl reads the log (no duplicate left to drop, above)
            exported = pl.read_parquet(state / C.EXPORT_DIR / f"{Path(name).stem}.parquet")
            assert exported.height == len(rows) == len(JsonlLog(state / name).records), (i, name)
        raw = _lines(state / RAW_ANSWERS_FILE)
        assert raw and not _twice(raw, "key"), (i, _twice(raw, "key"))


def _recs(*qids: str, **extra) -> list[dict]:
    return [{"qid": q, "label": q, "model": "sens|aud-1", "sensitive": False, "city": "c", **extra} for q in qids]


def test_two_handles_on_one_log_write_a_key_once(tmp_path):
    path = tmp_path / C.AUDIT_SENSITIVE_FILE
    a, b = JsonlLog(path), JsonlLog(path)  # two processes' handles, each loaded before the other appended

    wrote = [asyncio.run(a.append(_recs("Q1", "Q2", ts=1.0))),
             # b has not read a's lines: its append reads them under the file's lock and writes Q3 only
             asyncio.run(b.append(_recs("Q1", "Q2", "Q3", ts=2.0))),
             # a key twice in one append: once
             asyncio.run(a.append(_recs("Q4", ts=3.0) + _recs("Q4", ts=4.0)))]
    rows = _lines(path)
    assert [(r["qid"], r["ts"]) for r in rows] == [("Q1", 1.0), ("Q2", 1.0), ("Q3", 2.0), ("Q4", 3.0)]
    assert wrote == [_recs("Q1", "Q2", ts=1.0), _recs("Q3", ts=2.0), _recs("Q4", ts=3.0)]
    assert b.get("sens|aud-1", "Q1", "c")["ts"] == 1.0  # b holds what is logged, not what it tried to write

    # a record that supersedes the logged one (the last record of a key wins) is written where ``keep`` says so,
    # judged against the log as it is at the append: b has not read a's failure of Q5 yet
    asyncio.run(a.append(_recs("Q5", ts=5.0, error="unparseable answer", sensitive=None)))
    superseding = lambda old, rec: old is None or "error" in old  # noqa: E731
    assert asyncio.run(b.append(_recs("Q5", ts=6.0), superseding)) == _recs("Q5", ts=6.0)
    assert asyncio.run(a.append(_recs("Q5", ts=7.0), superseding)) == []  # a decision stands
    assert [r["ts"] for r in _lines(path) if r["qid"] == "Q5"] == [5.0, 6.0]
    a.refresh()
    assert a.get("sens|aud-1", "Q5", "c")["ts"] == 6.0

    # after a torn last line (a crash mid-write) the next append starts a fresh line; the other handle reads it
    with path.open("ab") as f:
        f.write(b'{"qid": "Q6", "lab')
    assert asyncio.run(b.append(_recs("Q7", ts=8.0))) == _recs("Q7", ts=8.0)
    a.refresh()
    b.refresh()
    assert a.get("sens|aud-1", "Q7", "c")["ts"] == 8.0 and b.get("sens|aud-1", "Q6", "c") is None
    assert JsonlLog(path).records == a.records == b.records


def test_two_handles_on_the_raw_answers_log_write_a_key_once(tmp_path):
    path = tmp_path / RAW_ANSWERS_FILE
    a, b = RawAnswerLog(path), RawAnswerLog(path)
    assert len(a) == len(b) == 0
    wrote = [a.append({"key": "k1", "raw": "first"}),
             b.append({"key": "k1", "raw": "second"}),  # logged by a meanwhile
             b.append({"key": "k2", "raw": "other"})]
    assert [r["key"] for r in _lines(path)] == ["k1", "k2"]
    assert wrote == [True, False, True]
    a.refresh()
    assert (a.get("k1"), a.get("k2"), b.get("k1")) == ("first", "other", "first")


class _Meanwhile(Provider):
    """The crawl's simulated auditor, but the first call of this process waits while another process's auditor
    (``other``) rates and screens the whole city: as a call that waits on another process's in-flight call to the
    same request."""

    kind = "meanwhile-test"
    paid = False

    def __init__(self, inner: Provider, other: ReferenceabilityAuditor, cands, city: str) -> None:
        self.inner, self.other, self.cands, self.city = inner, other, cands, city
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        if self.calls == 1:
            await self.other.rate_all(self.cands, city=self.city)
        return await self.inner.generate(request)


def test_an_auditor_takes_up_what_another_process_logged_meanwhile(tmp_path):
    import geoagent.crawl.simulate  # noqa: F401  (registers the audit responders)
    from geoagent.providers import make_provider
    from geoagent.providers.settings import ProviderSettings

    settings = ReferenceabilitySettings(model="aud-1", batch_size=4)
    sim = make_provider(ProviderSettings(kind="simulated", model="aud-1", seed=7), None)
    cands = [RefCandidate(f"Q{10 + i}", f"Place {i}", 0.5 + i * 0.05, 0, 0) for i in range(10)]
    other = ReferenceabilityAuditor(sim, settings, tmp_path)
    here = _Meanwhile(sim, other, cands, "c")
    got = asyncio.run(ReferenceabilityAuditor(here, settings, tmp_path).rate_all(cands, city="c"))
    # this process's first call (the first rating batch) came back after the other had rated and screened every
    # batch: the later batches, rating and screening, are read from the logs, not asked again
    assert here.calls == 1 and (got["asked"], got["screened"], got["calls"]) == (1, 0, 1), got
    for name in (C.AUDIT_DECISIONS_FILE, C.AUDIT_SENSITIVE_FILE):
        rows = _lines(tmp_path / name)
        assert len(rows) == len(cands) and not _twice(rows, "model", "qid", "city"), name
    raw = _lines(tmp_path / RAW_ANSWERS_FILE)
    assert len(raw) == 6 and not _twice(raw, "key")  # 3 rating and 3 screening batches, each logged once


def test_export_has_one_row_per_key_and_every_human_decision(tmp_path):
    state = tmp_path / "crawl"
    state.mkdir()
    dec = {"label": "x", "model": "aud-1", "ok": True, "familiarity": 3, "name_zh": None, "name_en": "X", "why": "w"}
    rows = [{**dec, "qid": "Q1", "city": "a", "ok": None, "familiarity": None, "error": "unparseable answer",
             "ts": 1.0},
            {**dec, "qid": "Q2", "city": "a", "ts": 2.0},
            {**dec, "qid": "Q1", "city": "b", "ts": 3.0},  # another city's rating: its own key
            {**dec, "qid": "Q1", "city": "a", "ts": 4.0},  # the failure rated later: the last record wins
            {**dec, "qid": "Q2", "city": "a", "ts": 5.0}]  # written twice (chaos45 #1)
    (state / C.AUDIT_DECISIONS_FILE).write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    sens = [{"qid": "Q1", "label": "x", "model": "sens|aud-1", "auditor": "aud-1", "sensitive": False, "why": "w",
             "ts": t, "city": "a"} for t in (1.0, 2.0)]
    (state / C.AUDIT_SENSITIVE_FILE).write_text("".join(json.dumps(r) + "\n" for r in sens), encoding="utf-8")
    item = {"qid": "Q1", "label": "x", "model": "aud-1", "site": "s1", "familiarity": 5, "tier_llm": "high",
            "pageviews": 3, "tier_pageviews": "low", "status": "pending"}
    queue = [{**item, "ts": 1.0}, {**item, "site": "s2", "ts": 2.0}, {**item, "ts": 3.0}]
    (state / REVIEW_QUEUE_FILE).write_text("".join(json.dumps(r) + "\n" for r in queue), encoding="utf-8")
    # the human decision log is append-only by design: 3 -> 0 -> 3 is three lines, each exported
    verdict = {"site": "s1", "qid": "Q1", "familiarity_model": 5, "reviewer": "r", "note": "", "source": "v.csv:2"}
    log = [{**verdict, "decision": d, "familiarity_final": int(d), "ts": t} for d, t in (("3", 1.0), ("0", 2.0),
                                                                                          ("3", 3.0))]
    (state / "audit_review_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log), encoding="utf-8")

    tables = {t.table: t for t in export_crawl_tables(state)}
    import polars as pl

    def read(name: str) -> pl.DataFrame:
        df = pl.read_parquet(tables[name].parquet)
        assert df.height == tables[name].rows
        return df

    d = read("audit_decisions")
    # each key where it first appeared, holding its last record
    assert d.select("qid", "city", "ts", "error").rows() == [("Q1", "a", 4.0, None), ("Q2", "a", 5.0, None),
                                                             ("Q1", "b", 3.0, None)]
    assert read("audit_sensitive").select("qid", "ts").rows() == [("Q1", 2.0)]
    assert read("audit_review_queue").select("site", "ts").rows() == [("s1", 3.0), ("s2", 2.0)]
    assert read("audit_review_log").select("decision", "ts").rows() == [("3", 1.0), ("0", 2.0), ("3", 3.0)]
    # the CSV as the Parquet file
    assert len(pl.read_csv(tables["audit_sensitive"].csv)) == 1
