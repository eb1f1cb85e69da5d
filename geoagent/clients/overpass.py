"""OSM Overpass API client (``/api/interpreter`` with ``[out:json]``, ``/api/status``).

Source: Overpass user manual ("Commons"), overpy. Usage policy (encoded as the
``overpass`` default in :data:`geoagent.crawl.settings.DEFAULT_POLICIES`): each IP has 2 query slots,
and the guideline is under ~10,000 requests and ~1 GB a day; no scraping by stitching boxes. So: at
most 2 queries in flight, one new query every 10 s, a small ``[timeout:]`` in every query, and a look
at ``/api/status`` before querying when no slot is free.

Failure shapes handled: a 200 whose JSON carries a top-level ``remark`` starting ``runtime error``
(query timed out or ran out of memory) is a failure, never an empty result (:class:`OverpassRuntimeError`);
400 with an HTML page of parse errors (:class:`OverpassQueryError`, permanent); 429/502/503/504 are
retried by the HTTP layer; any non-JSON body where JSON was expected is an :class:`OverpassError`.
"""

from __future__ import annotations

import asyncio
import html
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import orjson

from geoagent.runtime.errors import PicklableError
from geoagent.runtime.http import HostPolicy, PermanentHTTPError, RetriesExhausted, host_key, limit_key


class OverpassError(PicklableError, RuntimeError):
    """An Overpass request failed (retryable unless a subclass says otherwise). Picklable (the attributes travel,
    :class:`~geoagent.runtime.errors.PicklableError`)."""


class OverpassRuntimeError(OverpassError):
    """HTTP 200 with ``remark: "runtime error: ..."``: the (possibly empty) elements are not an answer."""

    def __init__(self, remark: str, n_elements: int) -> None:
        self.remark = remark
        self.n_elements = n_elements
        super().__init__(f"Overpass runtime error ({n_elements} partial elements discarded): {remark}")


class OverpassQueryError(OverpassError):
    """HTTP 400: the query does not parse (permanent; the messages come from the HTML error page)."""

    def __init__(self, messages: list[str], body_excerpt: str) -> None:
        self.messages = messages
        super().__init__("Overpass rejected the query: " + ("; ".join(messages) or body_excerpt))


#: Limits of the ``/api/status`` reads (rate/period/concurrency only), a limit key of their own on each instance
#: (:func:`geoagent.runtime.http.limit_key` ``(host, "status")``), apart from the host's query pace (1 per 10 s).
#: The instance's slot quota counts queries: after each query the server holds the IP's next admission for a
#: time in proportion to the query's run time (the maintainer, drolbr/Overpass-API#333), and its 429 page asks
#: a rate-limited client to "check /api/status for the quota of your IP address", so reading the page cannot
#: need a free slot (no vendor page states outright that it is uncounted: secondary). Spending a query slot
#: on it doubled every screening (status at t=0, query at t=10 s). The page is a few hundred bytes of text;
#: at most 2 reads per second, one at a time, keeps it polite (the slot wait polls it at most once a second).
STATUS_POLICY = HostPolicy(rate=2.0, period_s=1.0, concurrency=1)


def _json_body(resp: Any) -> None:
    """``validate`` hook for the HTTP layer: a 2xx body that is not JSON (cut off, or an HTML error page)
    is retried like a transient failure."""
    orjson.loads(resp.body)


def host_of(url: str) -> str:
    """``hostname:port`` when the URL names a port, else ``hostname`` (the HttpClient policy key)."""
    from geoagent.runtime.http import host_key

    if not urlsplit(url).hostname:
        raise ValueError(f"not an absolute URL: {url!r}")
    return host_key(url)  # an IPv6 address in brackets, as [hosts] keys name it


@dataclass(frozen=True, slots=True)
class OverpassStatus:
    """Parsed ``/api/status``: slot quota, free slots now, and seconds until the next slot frees up."""

    rate_limit: int | None
    slots_available: int
    wait_s: list[float]
    #: whether the page reported slots at all (an ``N slots available now`` or ``in N seconds`` line)
    reports_slots: bool = True

    @property
    def unlimited(self) -> bool:
        """No per-IP quota: ``Rate limit: 0``, or a page that reports no slot lines at all."""
        return self.rate_limit == 0 or not self.reports_slots

    @property
    def next_free_s(self) -> float:
        """Seconds until a slot is free (0 when one is free now)."""
        if self.slots_available > 0 or not self.wait_s:
            return 0.0
        return min(self.wait_s)


_ERR_P = re.compile(r'<strong[^>]*>\s*Error\s*</strong>\s*:\s*(.*?)</p>', re.S | re.I)


def parse_status(text: str) -> OverpassStatus:
    """Parse the plain-text ``/api/status`` report (keys on ``Rate limit:``, ``slots available now`` and
    ``in N seconds``, like the parsers in the wild)."""
    rate = None
    m = re.search(r"^Rate limit:\s*(\d+)", text, re.M)
    if m:
        rate = int(m.group(1))
    m = re.search(r"^(\d+)\s+slots? available now", text, re.M)
    free = int(m.group(1)) if m else 0
    waits = [float(x) for x in re.findall(r"in\s+(-?\d+)\s+seconds", text)]
    return OverpassStatus(rate, free, [max(0.0, w) for w in waits], reports_slots=bool(m or waits))


def parse_error_page(page: str) -> list[str]:
    """Messages of an Overpass HTML error page (``<p><strong ...>Error</strong>: line N: ...</p>``)."""
    return [html.unescape(re.sub(r"<[^>]+>", "", m)).strip() for m in _ERR_P.findall(page)]


def check_remark(data: dict[str, Any]) -> None:
    """Raise :class:`OverpassRuntimeError` if ``data['remark']`` reports a runtime error or timeout.

    Informational ``runtime remark:`` texts pass."""
    remark = data.get("remark")
    if not remark:
        return
    text = str(remark)
    low = text.lower()
    if "runtime error" in low or "timed out" in low or "out of memory" in low:
        raise OverpassRuntimeError(text, len(data.get("elements") or []))


class OverpassClient:
    """Async client of one Overpass instance.

    Parameters
    ----------
    http : geoagent.runtime.http.HttpClient
        The process-wide HTTP client (rate limits, retries, Retry-After).
    base_url : str
        The API root, e.g. ``https://overpass-api.de/api`` (``/interpreter`` and ``/status`` are appended).
    user_agent : str
        Descriptive User-Agent with a contact (from ``[crawl] contact``).
    policy : HostPolicy or None
        Installed for the host if given (the usage-policy default comes from the crawl settings).
    check_slots : bool
        Read ``/api/status`` before each query and wait (up to ``max_slot_wait_s``) when no slot is free. The
        reads are paced by :data:`STATUS_POLICY` on their own limit key, so they do not take the host's query
        rate slots.
    mirrors : sequence of str
        Other public instances with the same API, tried in order when an instance keeps failing with
        5xx (overpass-api.de answers 504 when overloaded; clients move to another instance then).
    """

    def __init__(self, http: Any, base_url: str, user_agent: str, *, policy: HostPolicy | None = None,
                 check_slots: bool = True, max_slot_wait_s: float = 120.0, mirrors: Sequence[str] = ()) -> None:
        self.http = http
        self.base_url = base_url.rstrip("/")
        self.base_urls = [self.base_url] + [m.rstrip("/") for m in mirrors if m.rstrip("/") != self.base_url]
        self.user_agent = user_agent
        self.check_slots = check_slots
        self.max_slot_wait_s = max_slot_wait_s
        self.host = host_of(self.base_url)
        self.hosts = [host_of(u) for u in self.base_urls]
        self.failovers = 0
        if policy is not None:
            for h in dict.fromkeys(self.hosts):
                http.set_policy(h, policy)
        if hasattr(http, "set_limit_policy"):
            for h in dict.fromkeys(self.hosts):
                http.set_limit_policy(limit_key(h, "status"), STATUS_POLICY)

    def _headers(self, accept: str) -> dict[str, str]:
        return {"User-Agent": self.user_agent, "Accept": accept}

    async def status(self, base_url: str | None = None) -> OverpassStatus:
        """GET ``/status`` of an instance (default: the first) and parse it.

        Paced by :data:`STATUS_POLICY` under its own limit key, not by the instance's query slots (the page does
        not count against the IP's quota). Raises what :meth:`geoagent.runtime.http.HttpClient.request` raises."""
        base = base_url or self.base_url
        resp = await self.http.request("GET", f"{base}/status", headers=self._headers("text/plain"),
                                       limit=limit_key(host_of(base), "status"))
        return parse_status(resp.text)

    async def wait_for_slot(self, base_url: str | None = None) -> OverpassStatus | None:
        """Wait until ``/status`` reports a free slot (at most ``max_slot_wait_s`` s in total).

        Returns None, without waiting, on an instance that has no status page (4xx), and the status at
        once on an instance without a per-IP quota (``Rate limit: 0``, no slot lines)."""
        waited = 0.0
        while True:
            try:
                st = await self.status(base_url)
            except PermanentHTTPError:
                return None
            if st.slots_available > 0 or st.unlimited:  # an instance without a quota never frees a slot
                return st
            if st.next_free_s > self.max_slot_wait_s - waited:  # announced beyond our patience: give the worker back now
                raise OverpassError(f"no free Overpass slot: the next one frees in {st.next_free_s:.0f} s, "
                                    f"more than the {self.max_slot_wait_s - waited:.0f} s left to wait")
            delay = min(max(st.next_free_s, 1.0), self.max_slot_wait_s - waited)
            if delay <= 0:
                raise OverpassError(f"no free Overpass slot after {waited:.0f} s")
            await asyncio.sleep(delay)
            waited += delay

    async def interpreter(self, query: str) -> dict[str, Any]:
        """POST an ``[out:json]`` Overpass QL query (form field ``data``) and return the parsed JSON.

        Instances are tried in order (``base_url``, then ``mirrors``); the next one is used only when the
        current one keeps answering 5xx after the HTTP layer's retries.

        Raises
        ------
        OverpassRuntimeError
            200 with a runtime-error/timeout ``remark``.
        OverpassQueryError
            400 (syntax error); permanent.
        OverpassError
            Non-JSON body, or JSON that is not an object with ``elements``.
        geoagent.runtime.http.RetriesExhausted
            429/5xx/timeouts that outlived the host policy's retries on every instance.
        """
        if "[out:json]" not in query:
            raise ValueError("Overpass queries must request [out:json]")
        for i, base in enumerate(self.base_urls):
            try:
                return await self._interpreter_at(base, query)
            except RetriesExhausted as e:
                if i + 1 < len(self.base_urls) and re.match(r"http 5\d\d", e.last or ""):
                    self.failovers += 1
                    continue
                raise
        raise AssertionError("unreachable")

    async def _interpreter_at(self, base: str, query: str) -> dict[str, Any]:
        if self.check_slots:
            await self.wait_for_slot(base)
        try:
            resp = await self.http.request(
                "POST", f"{base}/interpreter", data={"data": query},
                headers=self._headers("application/json"), validate=_json_body,
            )
        except RetriesExhausted as e:
            if e.last.startswith("invalid body"):
                raise OverpassError(f"Overpass kept answering bodies that are not JSON: {e.last}") from None
            raise
        except PermanentHTTPError as e:
            if e.status == 400:
                # the messages follow ~300 characters of fixed page head: read them from the kept body, not the excerpt
                raise OverpassQueryError(parse_error_page(e.body), e.body_excerpt[:300]) from None
            raise
        ctype = resp.headers.get("Content-Type", resp.headers.get("content-type", ""))
        try:
            data = orjson.loads(resp.body)
        except orjson.JSONDecodeError:
            raise OverpassError(f"Overpass answered {ctype or 'no content type'} that is not JSON: {resp.text[:200]!r}") from None
        if not isinstance(data, dict) or not isinstance(data.get("elements", None), list):
            raise OverpassError(f"Overpass JSON without an 'elements' list: {resp.text[:200]!r}")
        try:
            check_remark(data)
        except OverpassRuntimeError:
            # a 200 the HTTP layer counted as a success: count it among the host's errors too, so the API's error
            # rate says it (break34 crawl #4: two such answers, asked again, left 'error rate 0.0%')
            self.http.count_error(host_key(base), "runtime error remark")
            raise
        return data
