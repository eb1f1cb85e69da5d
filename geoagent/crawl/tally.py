"""The crawl's API request counts over every run: one tally file per process, kept as requests are sent.

The HTTP client counts requests per host in memory (:meth:`geoagent.runtime.http.HttpClient.stats`), so a crawl's
summary gave the last run's requests only, and a run stopped by SIGINT or killed left no count. Each crawl process
that sends a request to a crawl API (Overpass, WDQS, Mapillary, its thumbnail hosts, pageviews) now keeps its
counts in a file of its own, ``<state_dir>/api_requests/<started>-<pid>-<token>.json`` (:data:`TALLY_DIR`),
rewritten in place at each request (:meth:`RequestTally.count`, an ``os.pwrite`` of the whole record: the
operating system has it as soon as the call returns, so a SIGKILL of the process loses nothing; a power cut may
lose what the disk cache held). :func:`request_totals` sums the files: the requests of every run of the crawl.
Model calls (the auditors) are not counted here: the ledger counts them.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

#: the tally files' folder, in the crawl's state folder
TALLY_DIR = "api_requests"
#: the APIs a tally counts, in the summary's order (a thumbnail CDN host is ``thumbnails``)
TALLY_APIS = ("overpass", "wdqs", "mapillary", "pageviews", "thumbnails")


class RequestTally:
    """This process's requests to the crawl's APIs, kept in its tally file as they are counted.

    Parameters
    ----------
    state_dir : path
        The crawl's state folder; the file goes to ``<state_dir>/api_requests/``, created with the first request
        (a process that sends none leaves no file).
    api_of : callable ``host key -> API name or None``
        Which API a host's request counts under (:data:`TALLY_APIS`); None: not a crawl API (a model host), not
        counted.
    """

    def __init__(self, state_dir: str | Path, api_of: Callable[[str], str | None]) -> None:
        self.started_at = round(time.time(), 3)
        self.path = (Path(state_dir) / TALLY_DIR
                     / f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(self.started_at))}-{os.getpid()}-"
                       f"{secrets.token_hex(3)}.json")
        self.requests: dict[str, int] = {}
        self._api_of = api_of
        self._written = 0  # bytes of the longest record written (0: no file yet)
        self.error: str | None = None  # why the file could not be written (the counts in memory go on)

    def count(self, host: str) -> None:
        """Count one request to ``host`` (an HTTP client's request listener) and rewrite the tally file with the
        new counts. Never raises: a file that cannot be written is noted in :attr:`error` (said by the summary) and
        the request goes on."""
        api = self._api_of(host)
        if api is None:
            return
        self.requests[api] = self.requests.get(api, 0) + 1
        if self.error is not None:
            return
        try:
            if not self._written:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            # opened for each write, so no descriptor is held between requests (a process runs many crawls in tests)
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o644)
            try:
                data = orjson.dumps({"started_at": self.started_at, "pid": os.getpid(), "requests": self.requests})
                # counts only grow, so the record never shrinks; pad anyway, so no older tail is ever left
                os.pwrite(fd, data.ljust(self._written), 0)
            finally:
                os.close(fd)
            self._written = max(self._written, len(data))
        except OSError as exc:
            self.error = f"{self.path}: {exc}"


def request_totals(state_dir: str | Path) -> dict[str, Any]:
    """The crawl's requests over every run whose process kept a tally (:class:`RequestTally`), summed from
    ``<state_dir>/api_requests/*.json``.

    Returns ``requests`` (API -> requests sent, every attempt, retries included, in :data:`TALLY_APIS` order; every
    API present, 0 when none), ``processes`` (tally files read: one per crawl process that sent a request),
    ``unreadable`` (tally files that did not read as a record: left out) and ``earlier_runs_unrecorded`` (True when
    the crawl screened a city before its first tally began, i.e. runs before 2026-12-03 kept no tally: their
    requests are not in the totals; judged from the mtimes of ``screening/*.json`` against the tallies'
    ``started_at``)."""
    folder = Path(state_dir) / TALLY_DIR
    totals = {api: 0 for api in TALLY_APIS}
    n = bad = 0
    first: float | None = None
    for p in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            rec = orjson.loads(p.read_bytes())
            counts = rec["requests"]
            started = float(rec["started_at"])
            extra = {str(k): int(v) for k, v in counts.items()}
        except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError):
            bad += 1
            continue
        n += 1
        first = started if first is None else min(first, started)
        for api, v in extra.items():
            totals[api] = totals.get(api, 0) + v
    screened = [p.stat().st_mtime for p in (Path(state_dir) / "screening").glob("*.json")]
    unrecorded = bool(screened) and (first is None or min(screened) < first)
    return {"requests": totals, "processes": n, "unreadable": bad, "earlier_runs_unrecorded": unrecorded}
