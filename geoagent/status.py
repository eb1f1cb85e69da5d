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


def _walk_urls(obj: Any, key: str = "") -> list[tuple[str, str]]:
    """``(key, url)`` for every http(s) URL string in a task table (``key``: the innermost table key)."""
    if isinstance(obj, str):
        return [(key, obj)] if obj.startswith(("http://", "https://")) else []
    if isinstance(obj, dict):
        return [kv for k, v in obj.items() for kv in _walk_urls(v, str(k))]
    if isinstance(obj, (list, tuple)):
        return [kv for v in obj for kv in _walk_urls(v, key)]
    return []


def host_labels(cfg: Any) -> dict[str, str]:
    """Readable names of the hosts a campaign config names: ``{host: label}``.

    ``host`` is the HTTP layer's key (:func:`geoagent.runtime.http.host_key`: ``"hostname:port"`` or
    ``"hostname"``). A model's ``base_url`` host is labelled ``model <name>`` (names joined when several
    models share a server); a URL in a task table (e.g. ``[crawl.endpoints] pageviews = ...``,
    ``[geohint.geocoder] wikidata_url = ...``) is labelled ``<key> API`` with a trailing ``_url`` dropped.
    Local fakes on ``127.0.0.1:<port>`` are otherwise told apart by their port only.
    """
    from geoagent.runtime.http import host_key

    names: dict[str, list[str]] = {}
    for m in getattr(cfg, "models", []):
        if m.base_url:
            names.setdefault(host_key(m.base_url), []).append(f"model {m.name}")
    for key, url in _walk_urls(getattr(cfg, "tasks", {}) or {}):
        api = key[: -len("_url")] if key.endswith("_url") else key
        names.setdefault(host_key(url), []).append(f"{api} API")
    return {h: ", ".join(dict.fromkeys(v)) for h, v in names.items() if h}


def campaign_status(cfg: Any) -> dict[str, Any]:
    """Snapshot of a campaign: ``queues`` (edge -> QueueCounts), ``spend`` (ledger summary dict or None),
    ``progress`` (last progress record or None), ``dead`` (edge -> recent DeadLetters), ``host_labels``
    (host -> readable name, from the config, overlaid by the labels the run recorded for its local fakes)."""
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
    # the run records its own labels: a *.sandbox.invalid URL in the config became 127.0.0.1:<port> there
    labels = {**host_labels(cfg), **((progress or {}).get("host_labels") or {})}
    return {"campaign": cfg.name, "queues": queues, "spend": spend, "progress": progress, "dead": dead,
            "host_labels": labels}


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
            labels = st.get("host_labels") or {}
            for host, hs in http.items():
                errs = sum((hs.get("errors") or {}).values())
                rate = errs / hs["requests"] if hs.get("requests") else 0.0
                answers = hs.get("answers") or {}  # normal answers of the endpoint (a pageviews 404), not errors
                name = f"{host} ({labels[host]})" if labels.get(host) else host
                lines.append(f"    http {name}: {hs.get('requests', 0)} requests, {hs.get('retries', 0)} retries,"
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
