"""Test helper: SIGKILL a real multi-stage campaign (``python run.py run|crawl CONFIG``) at seeded moments,
restart it each time, and compare what it leaves with an uninterrupted run of the same config.

The paid model host is the OpenAI-compatible fake in a process of its own (``python -m
geoagent.sandbox.llm_openai --log calls.jsonl``), so its call log outlives every kill of the campaign; the
free hosts (Wikidata, Nominatim, Overpass, WDQS, pageviews, Mapillary) are the in-process ``*.sandbox.invalid``
fakes the campaign starts itself (deterministic, rebuilt at every start).
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from geoagent.sandbox.llm_common import CallLog
from geoagent.sandbox.server import free_port, wait_ready

REPO = Path(__file__).resolve().parents[1]

#: columns that measure time, not results (the store's write time and the call's latency)
TIMING_COLUMNS = ("created_at", "latency_s")


class ModelFake:
    """The OpenAI-compatible fake in a process of its own, logging every call to ``log``."""

    def __init__(self, log: Path, *, seed: int, latency_ms: float = 5.0) -> None:
        self.log = log
        port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port), "--log", str(log),
             "--seed", str(seed), "--no-auth", "--latency-ms", str(latency_ms)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        self.base_url = f"http://127.0.0.1:{port}"
        wait_ready(self.base_url)

    def calls(self) -> list[dict[str, Any]]:
        return CallLog.read(self.log)

    def tail(self) -> "CallLogTail":
        """A reader of this fake's call log that parses only what was appended since its last read."""
        return CallLogTail(self.log)

    def close(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            self.proc.kill()
            self.proc.wait(10)


class CallLogTail:
    """Incremental reader of a JSONL call log written by :class:`~geoagent.sandbox.llm_common.CallLog`.

    Polling the kill moment with :meth:`CallLog.read` re-parsed the whole log (thousands of records) every
    poll; this reads only the bytes appended since the last :meth:`count` and keeps running totals. It
    counts the records :meth:`CallLog.read` would return: complete lines that parse as JSON (a line without
    its newline yet is counted once it is complete), in total and per ``model``.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._offset = 0  # bytes consumed (up to the last complete line)
        self.total = 0
        self.by_model: dict[str, int] = defaultdict(int)

    def count(self, model: str | None = None) -> int:
        """Records logged so far (all, or those whose ``model`` is ``model``)."""
        import orjson

        try:
            with open(self.path, "rb") as fh:
                fh.seek(self._offset)
                data = fh.read()
        except FileNotFoundError:
            data = b""
        end = data.rfind(b"\n")
        if end >= 0:
            self._offset += end + 1
            for line in data[:end].split(b"\n"):
                if not line.strip():
                    continue
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                self.total += 1
                if isinstance(rec, dict):
                    self.by_model[rec.get("model")] += 1
        return self.total if model is None else self.by_model[model]


def queue_rows(path: Path) -> int:
    """Tasks ever put on the queue file ``path`` (0 when it does not exist yet or is busy)."""
    if not path.exists():
        return 0
    try:
        con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.2)
        try:
            return int(con.execute("SELECT COUNT(*) FROM tasks").fetchone()[0])
        finally:
            con.close()
    except sqlite3.Error:
        return 0


def temp_files(folder: Path) -> list[Path]:
    """Temporary files (``*.tmp``) under ``folder``, hidden or not."""
    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name.endswith(".tmp"))


#: a kill moment: called with the run's start time, returns True once the daemon should die
Trigger = Callable[[], bool]


def run_with_kills(cmd: list[str], env: dict[str, str], triggers: list[Callable[[], Trigger]], *,
                   rng: random.Random, max_delay_s: float = 0.2, poll_s: float = 0.01,
                   wait_s: float = 60.0) -> list[str]:
    """Run ``cmd`` once per trigger, SIGKILL it when the trigger fires (plus a seeded delay up to
    ``max_delay_s``), then run it to the end. ``triggers`` are factories, called when their run starts (so
    they can take a baseline). Returns one line per kill (what fired); asserts the last run exits 0."""
    kills: list[str] = []
    for make in triggers:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        fire = make()
        deadline = time.monotonic() + wait_s
        fired = False
        while time.monotonic() < deadline and proc.poll() is None:
            if fire():
                fired = True
                break
            time.sleep(poll_s)
        if fired and max_delay_s > 0 and getattr(make, "delay", True):
            time.sleep(rng.uniform(0.0, max_delay_s))
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            seen = getattr(fire, "seen", None)
            kills.append(f"{getattr(make, 'label', make)} (fired={fired}{f', {seen}' if seen else ''})")
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return kills


def labelled(label: str, make: Callable[[], Trigger]) -> Callable[[], Trigger]:
    """``make`` with a ``label`` attribute (named in the kill list)."""
    make.label = label  # type: ignore[attr-defined]
    return make


def after_new_calls(fake: ModelFake, n: int) -> Callable[[], Trigger]:
    """Fires once the model fake has logged ``n`` more calls than when the run started."""
    def make() -> Trigger:
        tail = fake.tail()
        start = tail.count()
        return lambda: tail.count() - start >= n
    return labelled(f"after {n} model calls", make)


def after_queue_rows(path: Path, n: int) -> Callable[[], Trigger]:
    """Fires once the queue ``path`` holds ``n`` more tasks than when the run started."""
    def make() -> Trigger:
        start = queue_rows(path)
        return lambda: queue_rows(path) - start >= n
    return labelled(f"after {n} new tasks on {path.stem}", make)


def when_temp_file(folder: Path, *, exclude: tuple[str, ...] = ("leases",)) -> Callable[[], Trigger]:
    """Fires while an atomic write under ``folder`` has its temporary file open (a file being written)."""
    def make() -> Trigger:
        before = set(temp_files(folder)) if folder.is_dir() else set()  # left by an earlier kill: not a write

        def fire() -> bool:
            try:
                hits = [p for p in temp_files(folder)
                        if p not in before and not set(p.relative_to(folder).parts) & set(exclude)]
            except FileNotFoundError:
                return False
            if hits:
                fire.seen = str(hits[0].relative_to(folder))  # type: ignore[attr-defined]
            return bool(hits)
        return fire
    made = labelled(f"during a file write under {folder.name}", make)
    made.delay = False  # type: ignore[attr-defined]  # kill at once, inside the write
    return made


def when_path(path: Path) -> Callable[[], Trigger]:
    """Fires once ``path`` exists."""
    def make() -> Trigger:
        return path.exists
    return labelled(f"once {path.name} exists", make)


# --- comparisons ----------------------------------------------------------------------------------------

def read_csv_rows(path: Path, *, sort_by: tuple[str, ...] | None = None,
                  drop: tuple[str, ...] = TIMING_COLUMNS) -> list[dict[str, str]]:
    """Rows of a CSV as text, timing columns dropped, sorted by ``sort_by`` (default: every column)."""
    import csv

    with open(path, newline="", encoding="utf-8") as fh:
        rows = [{k: v for k, v in r.items() if k not in drop} for r in csv.DictReader(fh)]
    if sort_by:
        return sorted(rows, key=lambda r: tuple(r.get(c) or "" for c in sort_by))
    return sorted(rows, key=lambda r: tuple(sorted(r.items())))


def parquet_frame(path: Path, *, sort_by: tuple[str, ...], drop: tuple[str, ...] = TIMING_COLUMNS):
    """The Parquet table, timing columns dropped, sorted (a polars DataFrame)."""
    import polars as pl

    df = pl.read_parquet(path)
    df = df.drop([c for c in drop if c in df.columns])
    return df.sort(list(sort_by))


def check_no_half_written(state: Path) -> None:
    """No temporary file left under ``state``; every CSV, Parquet and JSON file reads whole; every JSONL file
    reads with the project's reader (a torn record of a killed append is skipped by design, see
    :func:`geoagent.files.iter_jsonl_objects`) and ends with a complete line."""
    import csv

    import orjson
    import polars as pl

    from geoagent.files import iter_jsonl_objects

    left = temp_files(state)
    assert not left, f"temporary files left behind by the kills: {[str(p.relative_to(state)) for p in left]}"
    for p in sorted(state.rglob("*")):
        if not p.is_file():
            continue
        if p.suffix == ".csv":
            with open(p, newline="", encoding="utf-8") as fh:
                rows = list(csv.reader(fh))
            assert rows, f"{p} is empty"
            width = len(rows[0])
            assert all(len(r) == width for r in rows), f"{p}: a row of another width (truncated?)"
        elif p.suffix == ".parquet":
            pl.read_parquet(p)
        elif p.suffix == ".json":
            orjson.loads(p.read_bytes())
        elif p.suffix == ".jsonl":
            list(iter_jsonl_objects(p, skip_torn=True))
            data = p.read_bytes()
            assert not data or data.endswith(b"\n"), f"{p}: last line cut short"


def check_exactly_once_and_ledger(calls: list[dict[str, Any]], state_root: Path, campaign: str, *,
                                  prices: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """The paid-call checks of issue 2 against the model fake's log: each stored key was answered by the
    server, never again after its response was stored; the ledger's tokens and settled spend equal the
    usage the server returned for the stored answers; calls billed but never stored (cut by a kill) are
    covered by unknown-outcome spend; nothing stays reserved. ``prices``: model id -> (input, output)
    USD per million tokens. Returns a few counts for the caller's own checks."""
    import pytest

    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state(campaign, root=state_root, recover=False) as st:
        stored = {r["key"]: r for r in st.store.iter_responses()}
        summary = st.ledger.summary()
        assert st.ledger.check_consistency() == []
    assert summary.open_reservations == 0
    billed = [r for r in calls if r.get("status") == 200]
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in billed:
        by_key[r["key"]].append(r)
    assert set(by_key) == set(stored), "the server's billed keys differ from the stored keys"
    for key, rs in by_key.items():
        late = [r for r in rs if r["t_wall"] > stored[key]["created_at"] + 1e-3]
        assert not late, f"key {key[:12]} sent again after its response was stored"

    def cost(r: dict[str, Any]) -> float:
        p_in, p_out = prices[r["model"]]
        return (r["input_tokens"] * p_in + r["output_tokens"] * p_out) / 1e6

    assert sum(s["input_tokens"] for s in stored.values()) == sum(rs[-1]["input_tokens"] for rs in by_key.values())
    assert sum(s["output_tokens"] for s in stored.values()) == sum(rs[-1]["output_tokens"] for rs in by_key.values())
    assert summary.input_tokens == sum(rs[-1]["input_tokens"] for rs in by_key.values())
    assert summary.output_tokens == sum(rs[-1]["output_tokens"] for rs in by_key.values())
    assert summary.spent_usd == pytest.approx(sum(cost(rs[-1]) for rs in by_key.values()), rel=1e-6, abs=1e-9)
    extra = [r for rs in by_key.values() for r in rs[:-1]]
    assert summary.unknown_usd + 1e-12 >= sum(cost(r) for r in extra), "billed calls cut by a kill not counted"
    assert abs(summary.reserved_usd) < 1e-12, "reservations left open"
    return {"stored": len(stored), "billed": len(billed), "repeats": len(extra), "unknown_usd": summary.unknown_usd}


#: keys of JSON records that say when something happened, not what
TIMING_KEYS = frozenset({"ts", "t", "created_at", "latency_s", "elapsed_s"})


def strip_timing(obj: Any) -> Any:
    """``obj`` (parsed JSON) with every :data:`TIMING_KEYS` key removed, recursively."""
    if isinstance(obj, dict):
        return {k: strip_timing(v) for k, v in obj.items() if k not in TIMING_KEYS}
    if isinstance(obj, list):
        return [strip_timing(v) for v in obj]
    return obj


def folder_contents(folder: Path, *, skip: Callable[[Path], bool]) -> dict[str, Any]:
    """Every file under ``folder`` not skipped, as comparable values: CSV rows (sorted, timing columns
    dropped), Parquet frames (sorted by every column, timing columns dropped), JSON objects and the multiset of
    JSONL records (timing keys dropped), raw bytes otherwise. Keys: paths relative to ``folder``."""
    import orjson
    import polars as pl

    from geoagent.files import iter_jsonl_objects

    drop = tuple(TIMING_KEYS | set(TIMING_COLUMNS))
    out: dict[str, Any] = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder)
        if not p.is_file() or skip(rel):
            continue
        if p.suffix == ".csv":
            out[str(rel)] = read_csv_rows(p, drop=drop)
        elif p.suffix == ".parquet":
            df = pl.read_parquet(p)
            df = df.drop([c for c in drop if c in df.columns])
            out[str(rel)] = sorted(orjson.dumps(r, option=orjson.OPT_SORT_KEYS) for r in df.to_dicts())
        elif p.suffix == ".json":
            out[str(rel)] = strip_timing(orjson.loads(p.read_bytes()))
        elif p.suffix == ".jsonl":
            out[str(rel)] = sorted(orjson.dumps(strip_timing(o), option=orjson.OPT_SORT_KEYS)
                                   for _, o in iter_jsonl_objects(p, skip_torn=True))
        else:
            out[str(rel)] = p.read_bytes()
    return out


def files_under(folder: Path, suffix: str) -> int:
    """Files under ``folder`` whose name ends with ``suffix`` (0 when it does not exist)."""
    try:
        return sum(1 for p in folder.rglob(f"*{suffix}") if p.is_file())
    except FileNotFoundError:
        return 0


def after_new_files(folder: Path, suffix: str, n: int) -> Callable[[], Trigger]:
    """Fires once ``folder`` holds ``n`` more ``*suffix`` files than when the run started."""
    def make() -> Trigger:
        start = files_under(folder, suffix)
        return lambda: files_under(folder, suffix) - start >= n
    return labelled(f"after {n} new {suffix} files under {folder.name}", make)


def after_model_calls(fake: ModelFake, model: str, n: int) -> Callable[[], Trigger]:
    """Fires once the model fake has logged ``n`` more calls to ``model`` than when the run started."""
    def make() -> Trigger:
        tail = fake.tail()
        start = tail.count(model)
        return lambda: tail.count(model) - start >= n
    return labelled(f"after {n} calls to {model}", make)


def check_settled_once_and_ledger(calls: list[dict[str, Any]], state_root: Path, campaign: str, *,
                                  prices: dict[str, tuple[float, float]]) -> dict[str, Any]:
    """The paid-call checks for stages that keep their answers in files of their own (the crawl's auditors:
    ``image_audit/<site>/<image>.json``, ``audit_raw_answers.jsonl``) rather than the response store: the
    ledger settles each answer when it arrives, so each billed key has exactly one settled reservation, and
    the server saw no request for a key after its answer was settled (``closed_at``), which is before the
    stage stored it; the ledger's tokens and settled spend equal the usage the server returned for the
    settled calls, and the billed calls cut by a kill are unknown-outcome spend."""
    import pytest

    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state(campaign, root=state_root, recover=False) as st:
        summary = st.ledger.summary()
        assert st.ledger.check_consistency() == []
    con = sqlite3.connect(f"file:{state_root / campaign / 'campaign.sqlite'}?mode=ro", uri=True)
    try:
        rows = con.execute("SELECT request_key, state, closed_at, input_tokens, output_tokens FROM reservations").fetchall()
    finally:
        con.close()
    settled: dict[str, list[tuple[float, int, int]]] = defaultdict(list)
    for key, state, closed_at, n_in, n_out in rows:
        if state == "settled":
            settled[key].append((closed_at, n_in, n_out))
    assert summary.open_reservations == 0 and abs(summary.reserved_usd) < 1e-12
    billed = [r for r in calls if r.get("status") == 200]
    by_key: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in billed:
        by_key[r["key"]].append(r)
    assert set(by_key) == set(settled), "billed keys differ from the ledger's settled keys"
    assert all(len(v) == 1 for v in settled.values()), "a key settled twice: its answer was paid for twice"
    for key, rs in by_key.items():
        closed_at, n_in, n_out = settled[key][0]
        late = [r for r in rs if r["t_wall"] > closed_at + 1e-3]
        assert not late, f"key {key[:12]} sent again after its answer was settled"
        assert (n_in, n_out) == (rs[-1]["input_tokens"], rs[-1]["output_tokens"])

    def cost(r: dict[str, Any]) -> float:
        p_in, p_out = prices[r["model"]]
        return (r["input_tokens"] * p_in + r["output_tokens"] * p_out) / 1e6

    assert summary.input_tokens == sum(rs[-1]["input_tokens"] for rs in by_key.values())
    assert summary.output_tokens == sum(rs[-1]["output_tokens"] for rs in by_key.values())
    assert summary.spent_usd == pytest.approx(sum(cost(rs[-1]) for rs in by_key.values()), rel=1e-6, abs=1e-9)
    extra = [r for rs in by_key.values() for r in rs[:-1]]
    assert summary.unknown_usd + 1e-12 >= sum(cost(r) for r in extra), "billed calls cut by a kill not counted"
    return {"settled": len(settled), "billed": len(billed), "repeats": len(extra), "unknown_usd": summary.unknown_usd}


def either(first: Callable[[], Trigger], fallback: Callable[[], Trigger]) -> Callable[[], Trigger]:
    """Fires with ``first`` (e.g. a moment that polling may miss), or at the latest with ``fallback``."""
    def make() -> Trigger:
        a, b = first(), fallback()

        def fire() -> bool:
            if a():
                fire.seen = getattr(a, "seen", None)  # type: ignore[attr-defined]
                return True
            return b()
        return fire
    made = labelled(f"{first.label}, else {fallback.label}", make)  # type: ignore[attr-defined]
    made.delay = getattr(first, "delay", True) and getattr(fallback, "delay", True)  # type: ignore[attr-defined]
    return made
