"""Shared HTTP layer: one aiohttp ClientSession per process, per-host rate limits, retries, Retry-After.

INTERFACE FILE (signatures fixed; implementation owned by the HTTP-layer work item).

* :class:`HostPolicy` - per-host limits from config: ``rate`` requests per ``period_s`` (asyncio-throttle),
  a concurrency cap, retry policy. No burst beyond the configured rate after an idle spell.
* :class:`HttpClient` - owns the single ``aiohttp.ClientSession``; ``request()`` applies the host's
  policy; tenacity retries with exponential backoff + jitter on 429, 5xx, timeouts and connection errors;
  a ``Retry-After`` pauses that host for *every* caller sharing this client; other 4xx raise
  :class:`PermanentHTTPError` at once (status + body excerpt); a connection dropped after the body was
  sent raises :class:`OutcomeUnknown` (not retried for paid endpoints: the provider may have billed it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


class HttpError(RuntimeError):
    """Base of the HTTP layer's errors. Messages never include request headers (API keys)."""


class PermanentHTTPError(HttpError):
    """A non-retryable response (4xx other than 408/429). Goes to the dead-letter queue."""

    def __init__(self, status: int, url: str, body_excerpt: str) -> None:
        self.status = status
        self.url = url
        self.body_excerpt = body_excerpt
        super().__init__(f"HTTP {status} from {url}: {body_excerpt}")


class RetriesExhausted(HttpError):
    """A retryable failure that persisted through every attempt; ``last`` describes the final one."""

    def __init__(self, url: str, attempts: int, last: str, retry_after_s: float | None = None) -> None:
        self.url = url
        self.attempts = attempts
        self.last = last
        self.retry_after_s = retry_after_s
        super().__init__(f"{attempts} attempts to {url} failed; last: {last}")


class OutcomeUnknown(HttpError):
    """The connection failed after the request was sent; the server may have processed (billed) it."""

    def __init__(self, url: str, detail: str) -> None:
        self.url = url
        self.detail = detail
        super().__init__(f"outcome unknown for {url}: {detail}")


@dataclass(frozen=True, slots=True)
class HostPolicy:
    """Limits and retry policy for one host.

    Attributes
    ----------
    rate : float
        Requests allowed per ``period_s`` (e.g. 50 per 1.0 s; Nominatim 1 per 1.0 s).
    period_s : float
        Length of the rate window in seconds.
    concurrency : int
        Maximum requests in flight to this host.
    max_attempts : int
        Total attempts per request including the first.
    backoff_base_s, backoff_max_s : float
        Exponential backoff with full jitter between retries, in seconds.
    timeout_s : float
        Total timeout of one attempt in seconds.
    retry_unknown_outcome : bool
        Whether a connection dropped after sending may be retried (True for free GET APIs, False for paid
        model endpoints, where it raises OutcomeUnknown instead).
    """

    rate: float = 10.0
    period_s: float = 1.0
    concurrency: int = 16
    max_attempts: int = 5
    backoff_base_s: float = 0.5
    backoff_max_s: float = 30.0
    timeout_s: float = 120.0
    retry_unknown_outcome: bool = True


@dataclass(slots=True)
class HttpResponse:
    """A completed HTTP response (body fully read)."""

    status: int
    headers: dict[str, str]
    body: bytes
    url: str
    elapsed_s: float = 0.0

    def json(self) -> Any:
        import orjson

        return orjson.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


@dataclass(slots=True)
class HttpStats:
    """Per-host counters for ``status`` (requests, retries, errors by reason)."""

    requests: int = 0
    retries: int = 0
    errors: dict[str, int] = field(default_factory=dict)
