"""``run.py status``: read a campaign's durable state from another process (never changes it).

Reads every queue file under ``queues/<campaign>/``, the ledger in ``state/<campaign>/campaign.sqlite`` and
the last record of ``state/<campaign>/progress.jsonl`` (rates, ETA, in-flight work of a running campaign).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.runtime.progress import read_last
from geoagent.runtime.queue import DeadLetter, QueueCounts


def _queue_files(cfg: Any) -> list[Path]:
    folder = Path(cfg.queues_root()) / cfg.name
    return sorted(folder.glob("*.sqlite")) if folder.is_dir() else []


def _open(cfg: Any, path: Path) -> Any:
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    return SQLiteQueue.open(cfg.queues_root(), cfg.name, path.stem, **cfg.queue_options())


def campaign_status(cfg: Any) -> dict[str, Any]:
    """Snapshot of a campaign: ``queues`` (edge -> QueueCounts), ``spend`` (ledger summary dict or None),
    ``progress`` (last progress record or None), ``dead`` (edge -> recent DeadLetters)."""
    from geoagent.runtime.store import open_campaign_state

    queues: dict[str, QueueCounts] = {}
    dead: dict[str, list[DeadLetter]] = {}
    for f in _queue_files(cfg):
        q = _open(cfg, f)
        try:
            queues[f.stem] = q.counts_sync()
            if queues[f.stem].dead:
                dead[f.stem] = q.dead_letters_sync(5)
        finally:
            q.close_sync()
    spend = None
    db = Path(cfg.state_dir()) / C.CAMPAIGN_DB
    if db.is_file():
        with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as state:
            spend = state.ledger.summary().to_json()
    progress = read_last(Path(cfg.state_dir()) / C.PROGRESS_FILE)
    return {"campaign": cfg.name, "queues": queues, "spend": spend, "progress": progress, "dead": dead}


def format_usd(x: float | None) -> str:
    """USD amount for display: at least 2 decimals, up to 6 where they matter (a $0.0005 cap is not $0.00)."""
    text = f"{float(x or 0.0):.6f}".rstrip("0")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def format_status(st: dict[str, Any]) -> str:
    """Human-readable status text (plain, so it can be piped or logged)."""
    lines = [f"campaign {st['campaign']}"]
    if not st["queues"]:
        lines.append("  no queues yet (campaign not started)")
    for edge, c in st["queues"].items():
        lines.append(f"  {edge:>16}: ready {c.ready:>7}  leased {c.leased:>5}  done {c.done:>8}  dead {c.dead:>5}")
    s = st.get("spend")
    if s:
        lines.append(
            f"  spend: ${s.get('spent_usd', 0):.6f} settled + ${s.get('unknown_usd', 0):.6f} unknown-outcome"
            f" + ${s.get('reserved_usd', 0):.6f} reserved, cap ${format_usd(s.get('cap_usd'))}; calls {s.get('calls', 0)}"
        )
    p = st.get("progress")
    if p:
        ended = bool(p.get("finished"))
        state = "run ended" if ended else "running, or killed before its last record"
        eta = "" if ended else f", ETA {p.get('eta_s')} s"  # no ETA when no process is running
        lines.append(f"  last progress ({state}), elapsed {p.get('elapsed_s', 0):.0f} s{eta}")
        for sd in p.get("stages", []):
            lines.append(f"    {sd['stage']:>24}: {sd['rate_per_s']:.2f}/s  done {sd['done']}  retried {sd['failed']}"
                         f"  dead {sd['dead']}")
            for err in dict.fromkeys(e[:160] for e in sd.get("last_errors", [])[-2:]):  # each distinct once
                lines.append(f"      last error: {err}")
        if p.get("budget_stopped"):
            lines.append("  budget exhausted")
        http = p.get("http")
        if http:
            for host, hs in http.items():
                errs = sum((hs.get("errors") or {}).values())
                rate = errs / hs["requests"] if hs.get("requests") else 0.0
                answers = hs.get("answers") or {}  # normal answers of the endpoint (a pageviews 404), not errors
                lines.append(f"    http {host}: {hs.get('requests', 0)} requests, {hs.get('retries', 0)} retries,"
                             f" error rate {rate:.1%} {hs.get('errors') or ''}"
                             + (f" expected answers {answers}" if answers else ""))
    for edge, items in st.get("dead", {}).items():
        for d in items:
            lines.append(f"  dead {edge}/{d.key[:24]} (attempts {d.attempts}): {d.reason[:160]}")
    return "\n".join(lines)


def dead_letters(cfg: Any, limit: int = 50) -> dict[str, list[DeadLetter]]:
    """Dead-lettered tasks per edge, most recent first."""
    out = {}
    for f in _queue_files(cfg):
        q = _open(cfg, f)
        try:
            items = q.dead_letters_sync(limit)
        finally:
            q.close_sync()
        if items:
            out[f.stem] = items
    return out


def requeue_dead(cfg: Any, edge: str | None = None) -> int:
    """Put dead tasks (of one edge, or all) back to ready; returns how many.

    Raises
    ------
    ValueError
        ``edge`` is not one of the campaign's queues (a typo must not look like "nothing to requeue").
    """
    n = 0
    files = _queue_files(cfg)
    if edge and edge not in {f.stem for f in files}:
        raise ValueError(f"campaign {cfg.name} has no queue {edge!r}; queues: {sorted(f.stem for f in files)}")
    for f in files:
        if edge and f.stem != edge:
            continue
        q = _open(cfg, f)
        try:
            n += q.requeue_dead_sync()
        finally:
            q.close_sync()
    return n
