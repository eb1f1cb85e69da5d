"""The durable floor: the least durable work per call, around the same aiohttp requests as the raw ceiling.

``benchmarks/pipeline.py --floor`` runs this beside the raw ceiling and the real pipeline, so the three
rates come from one run. It answers a question the pipeline/raw ratio alone cannot: how much of the gap
is the price of durability at all in CPython on this machine, and how much is our pipeline's own.

What it does per call (all in one thread, one event loop, no locks, no retries, no rate limiter, no
send-time reservation, no per-key de-duplication, no progress stream, no export), with the same
``concurrency`` requests in flight as the raw ceiling:

* plan: the N tasks inserted into a SQLite WAL ``requests`` table in chunks of 10,000;
* lease: ``UPDATE ... RETURNING`` of ``batch`` tasks at a time; their worst-case reservations inserted
  into a ledger table in one transaction *before* any of them is sent;
* the request: the OpenAI-compatible body and ``X-Request-Key`` header (as the raw ceiling), the answer
  parsed with ``orjson`` (text and usage);
* group commit every ``batch`` answers: responses stored and reservations settled in one transaction of
  the store database, then the tasks acked and one message per task put into a ``responses`` table in
  one transaction of the queue database (stored before acked, as the real pipeline);
* collector: ``responses`` leased in batches, one results row per message, acked.

It is not a usable runtime (a crash between the two commits would need the recovery logic the real
pipeline has, a 429 would lose the call) and it is deliberately not part of the package: it measures a
lower bound on the cost of the durable steps, with ``executemany`` batches doing the SQLite work in C.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import time
from collections import deque
from pathlib import Path
from typing import Any

import orjson

PLAN_CHUNK = 10_000


def _connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def _schema(q: sqlite3.Connection, s: sqlite3.Connection) -> None:
    for edge in ("requests", "responses"):
        q.execute(f"CREATE TABLE {edge}(key TEXT PRIMARY KEY, payload BLOB, state INT, lease_until REAL, attempts INT)")
        q.execute(f"CREATE INDEX {edge}_state ON {edge}(state)")
    s.execute("CREATE TABLE responses(request_key TEXT PRIMARY KEY, body BLOB, input_tokens INT, output_tokens INT)")
    s.execute("CREATE TABLE ledger(request_key TEXT PRIMARY KEY, reserved_nano INT, spent_nano INT, state INT)")
    s.execute("CREATE TABLE results(task_key TEXT PRIMARY KEY, text TEXT, cost_usd REAL)")


def _lease(q: sqlite3.Connection, edge: str, limit: int) -> list[tuple[str, bytes]]:
    q.execute("BEGIN IMMEDIATE")
    rows = q.execute(
        f"UPDATE {edge} SET state = 1, lease_until = ?, attempts = attempts + 1 "
        f"WHERE key IN (SELECT key FROM {edge} WHERE state = 0 LIMIT ?) RETURNING key, payload",
        (time.time() + 60.0, limit),
    ).fetchall()
    q.execute("COMMIT")
    return rows


async def run_floor(base: str, n: int, concurrency: int, work: Path, *, prompt: str, model_id: str,
                    max_output_tokens: int, batch: int = 64) -> dict[str, Any]:
    """Run ``n`` calls through the durable floor against the fake at ``base``; return calls and seconds.

    Parameters
    ----------
    base : str
        Base URL of the local OpenAI-compatible fake (``http://127.0.0.1:PORT``).
    n, concurrency : int
        Calls, and requests in flight (as the raw ceiling).
    work : pathlib.Path
        An empty folder for the two SQLite databases.
    prompt : str
        Prompt template with ``{i}`` (the benchmark's).
    model_id : str
        The ``model`` field of the request body.
    max_output_tokens : int
        ``max_tokens`` of the body; the reservation's worst case uses it.
    batch : int
        Lease and group-commit size.

    Returns
    -------
    dict
        ``calls`` (results rows written), ``elapsed_s``, ``errors`` (non-200 answers).
    """
    import aiohttp

    q = _connect(work / "queues.sqlite")
    s = _connect(work / "store.sqlite")
    _schema(q, s)
    url = f"{base}/v1/chat/completions"
    t0 = time.perf_counter()
    for lo in range(0, n, PLAN_CHUNK):
        q.execute("BEGIN")
        q.executemany("INSERT OR IGNORE INTO requests VALUES (?, ?, 0, 0, 0)",
                      ((f"task-{i}", orjson.dumps({"prompt": prompt.format(i=i)})) for i in range(lo, min(n, lo + PLAN_CHUNK))))
        q.execute("COMMIT")

    leased: deque[tuple[str, bytes]] = deque()
    answers: list[tuple[str, str, bytes, int, int, str]] = []
    worst_nano = (4 * len(prompt) * 150 + max_output_tokens * 600)  # USD 1e-9 at 0.15 / 0.60 per Mtok, rough
    counts = {"errors": 0, "collected": 0}

    def refill() -> bool:
        rows = _lease(q, "requests", batch)
        if not rows:
            return False
        s.execute("BEGIN")
        s.executemany("INSERT OR IGNORE INTO ledger VALUES (?, ?, 0, 0)",
                      ((hashlib.sha256(p).hexdigest(), worst_nano) for _, p in rows))
        s.execute("COMMIT")
        leased.extend(rows)
        return True

    def collect() -> int:
        rows = _lease(q, "responses", 4 * batch)
        if not rows:
            return 0
        s.execute("BEGIN")
        out = []
        for key, payload in rows:
            msg = orjson.loads(payload)
            out.append((key, msg["text"], msg["input_tokens"] * 0.15e-6 + msg["output_tokens"] * 0.60e-6))
        s.executemany("INSERT OR IGNORE INTO results VALUES (?, ?, ?)", out)
        s.execute("COMMIT")
        q.execute("BEGIN")
        q.executemany("UPDATE responses SET state = 2 WHERE key = ?", ((k,) for k, _ in rows))
        q.execute("COMMIT")
        counts["collected"] += len(rows)
        return len(rows)

    def flush() -> None:
        done = answers[:]
        answers.clear()
        if not done:
            return
        s.execute("BEGIN")
        s.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, ?, ?)", ((a[1], a[2], a[3], a[4]) for a in done))
        s.executemany("UPDATE ledger SET spent_nano = ?, state = 1 WHERE request_key = ?",
                      ((a[3] * 150 + a[4] * 600, a[1]) for a in done))
        s.execute("COMMIT")
        q.execute("BEGIN")
        q.executemany("UPDATE requests SET state = 2 WHERE key = ?", ((a[0],) for a in done))
        q.executemany("INSERT OR IGNORE INTO responses VALUES (?, ?, 0, 0, 0)",
                      ((a[0], orjson.dumps({"request_key": a[1], "text": a[5], "input_tokens": a[3],
                                            "output_tokens": a[4]})) for a in done))
        q.execute("COMMIT")
        collect()

    async def worker(session: Any) -> None:
        while True:
            if not leased and not refill():
                return
            task_key, payload = leased.popleft()
            body = orjson.dumps({"model": model_id, "messages": [{"role": "user", "content": orjson.loads(payload)["prompt"]}],
                                 "max_tokens": max_output_tokens, "temperature": 0.0})
            request_key = hashlib.sha256(body).hexdigest()
            async with session.post(url, data=body, headers={"Content-Type": "application/json",
                                                             "X-Request-Key": request_key}) as resp:
                raw = await resp.read()
                if resp.status != 200:
                    counts["errors"] += 1
                    continue
            answer = orjson.loads(raw)
            usage = answer["usage"]
            answers.append((task_key, request_key, raw, usage["prompt_tokens"], usage["completion_tokens"],
                            answer["choices"][0]["message"]["content"]))
            if len(answers) >= batch:
                flush()

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(worker(session) for _ in range(concurrency)))
    flush()
    while collect():
        pass
    elapsed = time.perf_counter() - t0
    q.close()
    s.close()
    return {"calls": counts["collected"], "elapsed_s": elapsed, "errors": counts["errors"]}
