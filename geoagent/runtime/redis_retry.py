"""How the Redis clients of a campaign ride out an outage: one retry window, default timeouts, a fail-fast first ping.

Both Redis modules use these settings: the queues (:mod:`geoagent.runtime.redis_queue`, ``redis.asyncio``) and
the ledger and response store (:mod:`geoagent.runtime.redis_state`, the synchronous client), so every process of a
campaign on every machine waits for the server for the same time.

* **Retry window** (:data:`RETRY_WINDOW_S` = 45 s; the environment variable :data:`RETRY_WINDOW_ENV` sets another,
  0 < s <= :data:`MAX_RETRY_WINDOW_S`): a command that meets a dropped connection, a refused connect or a timeout
  is retried on a fresh connection (equal-jitter backoff from 50 ms, at most :data:`BACKOFF_CAP_S` = 1 s apart) until
  the window, counted from the start of its first unanswered try (never before the server's last answer), has
  passed; then the error is raised (a run ends with exit 3,
  "incomplete: re-run to resume"). A restart of the server (seconds) or a Sentinel failover (typically 10-30 s)
  therefore holds the run up instead of ending it, and answers paid for meanwhile are stored once it is back.
  redis-py retries at two levels (the command, and the connect inside it); one window covers both, so a command
  gives up after about the window, not twice it. The window is the SERVER's, not each call's: the clients of one
  process that name the same server (the ``server`` key of :func:`window_retry`: the queues, the ledger and store,
  the host-share board) share one outage clock (:class:`_Outage`), started by the first failure after the last
  success of any of them and stopped by the next success; it starts when the failed try was sent, not when its
  failure was noticed (a try that times out failed from its start: a server that hangs without closing the
  connection does not get one reply timeout on top of the window), but never before the server's last answer to
  any of these clients (one connection hanging while the server answers others is not an outage from the start of
  that try). A call gives up once that clock has run for the window,
  and from then on (the server is *lost*) every call fails at its first error instead of waiting a window of its
  own, until one succeeds again. A server that hangs without closing the connection (a partition) sends no error,
  so that first error would come only after a reply timeout (``socket_timeout``: 30 s by default); hence, while the
  server is lost, each call (once, before its first try; never per retry) sends one probe first: a ``PING`` without
  retries on a fresh client of the same URL and options (TLS, AUTH, database as the call's), waiting
  :data:`PROBE_TIMEOUT_S` = 1 s (at most the window) for its connect and for its reply. No answer: the call raises
  the probe's error (``TimeoutError`` / ``ConnectionError``, as its own try would) at once; any answer (an
  authentication error or ``-LOADING`` too): the server is no longer lost (as after a success) and the call retries
  as usual. A probe that timed out answers for the server for :data:`PROBE_MEMORY_S` = 1 s: a call of the process
  within that time fails at once with a fresh error of the probe's type, without probing (session 17: the steps of
  a shutdown, one after another, each paid a probe's 1 s; a refused connection, which fails in milliseconds, is not
  remembered). So a run whose server goes away ends about one
  window after the server's first failure plus about 1 s for its whole shutdown (handing leases back, closing the
  campaign, leaving the host-share board, ...), not one window or one reply timeout per step, while an outage
  shorter than the window is still ridden out by every call and a server back after a longer one answers the first
  call after the memory of the last failed probe. Measured through a TCP proxy that accepts and never answers,
  window 2 s (``tests/test_redis_hung_server.py``): the first call after the loss 1.0 s (before the probe 2.0 s,
  the reply timeout; 30 s with the default window), calls within 1 s of it at once, a whole run 3.7 s from the hang
  to exit 3 (a probe per step: 9.7-11.5 s; before the probe 16-18 s). Retrying is
  safe: every call whose repetition would change its outcome carries a call token and answers a retry from its
  reply record (:mod:`geoagent.runtime.redis_queue`, "Retries after a lost reply"), and the others are idempotent.
* **Timeouts** (:data:`SOCKET_TIMEOUT_S` = 30 s per reply, :data:`SOCKET_CONNECT_TIMEOUT_S` = 10 s per connect,
  each at most the retry window; unless the URL's query or the caller's options name their own): a server that
  stops answering without closing the connection (a partition, a hung host) is noticed after 30 s and retried,
  instead of after TCP's own timeout (about 15 min on Linux). With a window shorter than those (e.g.
  ``GEOAGENT_REDIS_RETRY_S=2``) both are the window, so such a server ends a call about one window after it
  started (measured through a TCP proxy that accepts and never answers, window 2 s: first call 2 s, each later
  call 1 s, the probe above; before, 60 s and 30 s). No command of ours may legitimately take that long: every Lua script works on at most
  ``put_chunk`` (1,000) items or one ZSCAN/XRANGE step of that size (milliseconds), results are written in chunks of
  1,000 rows, and nothing blocks on the server (no ``BLOCK`` reads, no ``BLPOP``/``WAIT``: a queue's ``lease``
  returns at once when nothing is ready). A command that blocks on the server on purpose (``XREADGROUP ... BLOCK
  ms``, ``BLPOP``) would need a client whose ``socket_timeout`` exceeds its block time (a larger option or URL
  query; the options win over these defaults).
* **Reply records** live :data:`REPLY_TTL_S` = 300 s, which must exceed the longest time one call may keep being
  retried: about ``window + 2 * (socket_connect_timeout + socket_timeout)`` (its first try may end a socket timeout
  after the server ran it, and its last try may start just before the window ends):
  45 + 2 * (10 + 30) = 125 s by default, 200 s at the largest window. :func:`retry_span_s` computes it;
  :func:`geoagent.runtime.redis_queue.open_redis_queue` refuses a ``reply_ttl_s`` that is not longer.
* **Fail fast at start**: :func:`ping_once` sends one ``PING`` with no retry, so an unreachable server (a typo in
  the URL, a server that is down) is reported at once with its clear error, not after the window.
* **Refused credentials are not an outage**: a server that answers the connection's ``AUTH``/``HELLO`` with an
  authentication error (a wrong password or user name in the URL, ``WRONGPASS`` / ``invalid username-password
  pair``, or none given where it requires one, ``NOAUTH``) is there and says no; redis-py raises that as
  ``redis.AuthenticationError``, a ``ConnectionError`` subclass, which was retried for the whole window (session
  18). Every call, at start or later (a password changed on the server after this process reached it), now raises
  it at its first try with one line that names the problem and never the URL or password (:func:`auth_refused`),
  and it starts no outage clock; the CLI ends such a command with exit 2 (a configuration error).

A heartbeat of the ledger (``heartbeat_ttl_s``, by default twice the window: 90 s,
:func:`geoagent.runtime.redis_state.default_heartbeat_ttl_s`) outlives every outage the clients ride out, so other
machines do not judge a live process gone (:mod:`geoagent.runtime.redis_state`, owner rule) while it waits; an
outage longer than the window ends the run first.
"""

from __future__ import annotations

import contextvars
import os
import threading
import time
from typing import Any

__all__ = [
    "RETRY_WINDOW_S", "RETRY_WINDOW_ENV", "MAX_RETRY_WINDOW_S", "BACKOFF_CAP_S", "SOCKET_TIMEOUT_S",
    "SOCKET_CONNECT_TIMEOUT_S", "REPLY_TTL_S", "retry_window_s", "retry_span_s", "url_timeouts_problem",
    "client_defaults", "ping_once",
    "window_retry", "server_key", "server_lost", "PROBE_TIMEOUT_S", "auth_refused", "AUTH_REFUSED",
]

#: how long (s) a command keeps being retried after its first connection error or timeout
RETRY_WINDOW_S = 45.0
#: environment variable that sets another retry window (s), for servers whose failover takes longer or tests
RETRY_WINDOW_ENV = "GEOAGENT_REDIS_RETRY_S"
#: the largest window the variable may set (s): keeps every retry inside the reply records' lifetime
MAX_RETRY_WINDOW_S = 120.0
#: longest pause between two retries (s); the first is 50 ms, doubling, equal jitter
BACKOFF_CAP_S = 1.0
#: default time (s) to wait for a reply on an open connection before it counts as failed (and is retried)
SOCKET_TIMEOUT_S = 30.0
#: default time (s) to wait for a TCP connect to the server
SOCKET_CONNECT_TIMEOUT_S = 10.0
#: longest wait (s) of the probe of a lost server for its connect and for its reply, each at most the retry window
PROBE_TIMEOUT_S = 1.0
#: how long (s) a probe's timeout answers for the server: a call of this process within that time of the last probe
#: that timed out fails at once with its error instead of probing again (a shutdown's steps, one after another, cost
#: one probe, not one each); a server back within it is seen by the first probe after it. A refused connection is
#: not remembered (it fails in milliseconds: the next call probes again)
PROBE_MEMORY_S = 1.0
#: what an authentication error raised by these clients says first (:func:`auth_refused`)
AUTH_REFUSED = ("the Redis server refused the credentials of the URL: wrong password or user name, or none given "
                "where the server requires one")
#: lifetime (s) of a reply record of a retried call (queue and ledger/store): longer than :func:`retry_span_s`
REPLY_TTL_S = 300.0

# the start of the current call's first try (monotonic s; its window counts from there, _Outage), shared by the
# nested call_with_retry of redis-py (the command's, and the connect's inside it) running in one task or thread
_WINDOW: contextvars.ContextVar[list[float | None] | None] = contextvars.ContextVar("geoagent_redis_window",
                                                                                    default=None)
# set by ping_once: the first failure ends the call
_NO_RETRY: contextvars.ContextVar[bool] = contextvars.ContextVar("geoagent_redis_no_retry", default=False)


def retry_window_s() -> float:
    """The retry window in s: :data:`RETRY_WINDOW_ENV` when set, else :data:`RETRY_WINDOW_S`.

    Raises
    ------
    ValueError
        The variable is not a number in (0, :data:`MAX_RETRY_WINDOW_S`].
    """
    raw = os.environ.get(RETRY_WINDOW_ENV, "").strip()
    if not raw:
        return RETRY_WINDOW_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not 0 < value <= MAX_RETRY_WINDOW_S:
        raise ValueError(f"{RETRY_WINDOW_ENV} must be a number of seconds in (0, {MAX_RETRY_WINDOW_S:g}], "
                         f"got {raw!r}")
    return value


def retry_span_s(options: dict[str, Any], window_s: float | None = None) -> float:
    """Longest time (s) from the server running a call to the last retry of it reaching the server:
    ``window + 2 * (socket_connect_timeout + socket_timeout)``, with the timeouts of ``options`` (a URL's parsed
    query merged with client options; the defaults of :func:`client_defaults` where absent)."""
    window = retry_window_s() if window_s is None else float(window_s)
    sock = options.get("socket_timeout")
    sock = min(SOCKET_TIMEOUT_S, window) if sock is None else float(sock)
    conn = options.get("socket_connect_timeout")
    conn = sock if conn is None else float(conn)
    return window + 2 * (conn + sock)


def url_timeouts_problem(url_options: dict[str, Any], options: dict[str, Any] | None = None, *,
                         reply_ttl_s: float = REPLY_TTL_S, window_s: float | None = None) -> str | None:
    """Why the timeouts a URL's query names (``?socket_timeout=``, ``?socket_connect_timeout=``; ``url_options``,
    redis-py's ``parse_url``), with ``options`` and the defaults of :func:`client_defaults`, cannot be used, or None:
    one call may then be retried for :func:`retry_span_s` s, not less than the ``reply_ttl_s`` (s) its reply record
    lives, so a retry could apply a reservation, a store or a queue call twice. Said as the fix in the URL, with
    the largest value each may have (redis39 #4: it was refused as a ``reply_ttl_s``, not a user setting, after the
    campaign's keys were written).

    Raises
    ------
    ValueError
        A bad :data:`RETRY_WINDOW_ENV` (``window_s`` None).
    """
    import math

    window = retry_window_s() if window_s is None else float(window_s)
    given = {**url_options, **(options or {})}
    full = {**given, **client_defaults(url_options, options or {}, window)}
    span = retry_span_s(full, window)
    if span < reply_ttl_s:
        return None
    sock, conn = float(full["socket_timeout"]), float(full["socket_connect_timeout"])
    room = (reply_ttl_s - window) / 2  # socket_timeout + socket_connect_timeout must stay below it
    each = max(0, math.ceil(room / 2) - 1)
    return (f"its timeouts (socket_timeout {sock:g} s, socket_connect_timeout {conn:g} s) let one call be retried "
            f"for {span:g} s (the {window:g} s retry window plus twice their sum), not less than the "
            f"{reply_ttl_s:g} s a call's reply record lives, so a retried call could apply twice: lower "
            f"?socket_timeout= / ?socket_connect_timeout= in the URL to at most {each} s each (their sum below "
            f"{room:g} s), or leave them out (defaults {SOCKET_TIMEOUT_S:g} s / {SOCKET_CONNECT_TIMEOUT_S:g} s)")


def client_defaults(url_options: dict[str, Any], options: dict[str, Any], window_s: float | None = None
                    ) -> dict[str, Any]:
    """The timeouts (s) to add to a client's ``options``: ``socket_timeout`` = min(:data:`SOCKET_TIMEOUT_S`, window)
    and ``socket_connect_timeout`` = min(:data:`SOCKET_CONNECT_TIMEOUT_S`, window), ``window_s`` defaulting to
    :func:`retry_window_s`, each unless the URL's query (``url_options``, redis-py's ``parse_url``) or ``options``
    name it. Bounded by the window so that a server that hangs without closing the connection ends a call about
    one window after it started, not one reply timeout later (module docstring). A caller that sends a blocking
    read (``BLOCK``, ``BLPOP``) must name a ``socket_timeout`` longer than its block time.

    Raises
    ------
    ValueError
        A bad :data:`RETRY_WINDOW_ENV` (``window_s`` None).
    """
    window = retry_window_s() if window_s is None else float(window_s)
    given = {**url_options, **options}
    out: dict[str, Any] = {}
    if given.get("socket_timeout") is None:
        out["socket_timeout"] = min(SOCKET_TIMEOUT_S, window)
    if given.get("socket_connect_timeout") is None:
        out["socket_connect_timeout"] = min(SOCKET_CONNECT_TIMEOUT_S, window)
    return out


class _Outage:
    """The outage clock one process keeps for one server (module docstring), shared by its clients' retries.

    ``since``: monotonic s the outage started (None while the server answers): the earliest start of a try that
    failed since the last success, but never before ``last_ok``, the monotonic s of the server's last answer;
    ``lost``: some call gave up after the window, so later calls fail at their first error. Updated from the event
    loop and from worker threads (the synchronous clients run in threads), hence the lock.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.since: float | None = None
        self.last_ok = -float("inf")
        self.lost = False
        #: (monotonic s, error) of the last probe that got no answer while the server is lost (None: none)
        self.probe_failed: tuple[float, BaseException] | None = None

    def recent_probe_error(self, now: float | None = None) -> BaseException | None:
        """The error of a probe that got no answer less than :data:`PROBE_MEMORY_S` s before ``now`` (monotonic s,
        default the current time), while the server is still lost; else None (probe again)."""
        now = time.monotonic() if now is None else now
        with self.lock:
            if self.lost and self.probe_failed is not None and now - self.probe_failed[0] < PROBE_MEMORY_S:
                return self.probe_failed[1]
            return None

    def probe_got_no_answer(self, error: BaseException) -> None:
        """Remember a probe's ``error`` (no answer) for :data:`PROBE_MEMORY_S` s."""
        with self.lock:
            self.probe_failed = (time.monotonic(), error)

    def failed(self, now: float, window_s: float, call_since: float) -> bool:
        """Record a failure at ``now`` (monotonic s) of a call whose first unanswered try started at
        ``call_since``; True: give up (the outage, from ``max(call_since, last_ok)`` or an earlier failed try of
        another call, is ``window_s`` old)."""
        with self.lock:
            start = min(max(call_since, self.last_ok), now)
            self.since = start if self.since is None else min(self.since, start)
            if self.lost or now - self.since >= window_s:
                self.lost = True
                return True
            return False

    def succeeded(self, now: float | None = None) -> None:
        """A call got its reply at ``now`` (monotonic s, default the current time): the server is there; the next
        failure starts a new outage, not earlier than this."""
        with self.lock:
            self.since = None
            self.last_ok = time.monotonic() if now is None else now
            self.lost = False
            self.probe_failed = None


_OUTAGES: dict[str, _Outage] = {}
_OUTAGES_LOCK = threading.Lock()


def _outage(server: str) -> _Outage:
    """The process's outage clock for ``server`` (created at first use)."""
    with _OUTAGES_LOCK:
        out = _OUTAGES.get(server)
        if out is None:
            out = _OUTAGES[server] = _Outage()
        return out


def server_lost(server: str) -> bool:
    """Whether a call of this process to ``server`` (a :func:`window_retry` key) gave up after the retry window
    and none has succeeded since: later calls to it fail at their first error."""
    out = _OUTAGES.get(server)
    return bool(out is not None and out.lost)


def _is_reply(do: Any) -> bool:
    """Whether a successful ``call_with_retry`` of ``do`` proves that the server answered: every outermost call but
    a connection's ``connect()`` (redis-py's ``AbstractConnection.connect``, sync and asyncio), which a pool runs
    before each command and which returns at once, without a word to the server, on a socket still open from
    before the outage. The command that follows it tells."""
    return ".connect.<locals>" not in getattr(do, "__qualname__", "")


def auth_refused(error: BaseException, url: str | None = None) -> BaseException | None:
    """When ``error`` is an authentication error (``redis.AuthenticationError``: the server refused the URL's
    password or user name, or asked for one the URL lacks), an error of the same type whose one-line message
    starts with :data:`AUTH_REFUSED`, says it is not retried and quotes the server's reply, with the URL and its
    password masked (:func:`geoagent.runtime.backend.scrub`; ``url`` optional: secrets already registered are
    masked anyway); ``error`` itself when it says so already; else None (not an authentication error)."""
    try:
        import redis
    except ImportError:  # pragma: no cover - no client, no such error
        return None
    if not isinstance(error, redis.AuthenticationError):
        return None
    if str(error).startswith(AUTH_REFUSED):
        return error
    from geoagent.runtime.backend import scrub

    said = " ".join(str(error).split()) or type(error).__name__
    text = scrub(f"{AUTH_REFUSED} (not retried: a configuration error, not an outage; the server said: {said})",
                 url)
    try:
        return type(error)(text)
    except Exception:  # noqa: BLE001 - a subclass with another constructor
        return redis.AuthenticationError(text)


def _check_window(error: BaseException, window_s: float, outage: _Outage, url: str | None = None) -> None:
    """Called after each failure, before redis-py's backoff: raise ``error`` once the server's outage clock (from
    the start of this call's first try, or an earlier failed try of another call, never before the server's last
    answer) is a window old, or at once when the server is already lost (or under :func:`ping_once`); an
    authentication error at once, as :func:`auth_refused` words it (the server answered: no outage is counted)."""
    refused = auth_refused(error, url)
    if refused is not None:
        raise refused from None
    if _NO_RETRY.get():
        raise error
    box = _WINDOW.get()
    if box is None:  # pragma: no cover - set by call_with_retry
        return
    now = time.monotonic()
    if outage.failed(now, window_s, now if box[0] is None else box[0]):
        raise error


def _probe_options(options: dict[str, Any] | None, window_s: float) -> tuple[dict[str, Any], float]:
    """(client options of a probe, its timeout in s): the client's ``options`` without its retry policy, and
    min(:data:`PROBE_TIMEOUT_S`, window) for the connect and for the reply."""
    opts = {k: v for k, v in (options or {}).items() if k not in ("retry", "retry_on_timeout", "retry_on_error")}
    return opts, min(PROBE_TIMEOUT_S, window_s)


def _set_probe_pool(client: Any, timeout_s: float, retry: Any) -> None:
    """Give the connections of a probe ``client`` the probe's timeouts and no retries, over what its URL's query
    names (redis-py lets the query win over keyword options)."""
    kwargs = client.connection_pool.connection_kwargs
    kwargs["socket_timeout"] = kwargs["socket_connect_timeout"] = timeout_s
    kwargs["retry"] = retry
    kwargs["retry_on_timeout"] = False
    kwargs["retry_on_error"] = []


def _probe_client(redis_cls: Any, retry_cls: Any, url: str, options: dict[str, Any] | None, window_s: float) -> Any:
    """A probe's client: ``redis_cls.from_url`` (``redis.Redis`` or ``redis.asyncio.Redis``) of ``url`` and the
    client's ``options`` without their retry policy, no retries (``retry_cls``, the matching ``Retry``), and
    min(:data:`PROBE_TIMEOUT_S`, window) s for the connect and each reply (:func:`_set_probe_pool`)."""
    from redis.backoff import NoBackoff

    opts, timeout_s = _probe_options(options, window_s)
    retry = retry_cls(NoBackoff(), 0)
    client = redis_cls.from_url(url, retry=retry, **opts)
    _set_probe_pool(client, timeout_s, retry)
    return client


def _probe_failed(error: BaseException) -> bool:
    """Whether the probe's ``error`` means no answer came (a refused or dropped connection, a timeout), rather than
    an answer the client could not use: an authentication error or ``-LOADING`` are the server's replies (redis-py
    raises them as connection errors), and any other error is taken as an answer too, so that the call keeps its
    usual retrying (the behaviour before the probe)."""
    import redis

    if isinstance(error, (redis.AuthenticationError, redis.BusyLoadingError)):
        return False
    return isinstance(error, (redis.ConnectionError, redis.TimeoutError, OSError))


def _probe_sync(url: str, options: dict[str, Any] | None, window_s: float) -> BaseException | None:
    """One ``PING`` without retries, on a fresh synchronous client of ``url`` and ``options`` (TLS, AUTH, database
    as the client's), waiting min(:data:`PROBE_TIMEOUT_S`, window) s for the connect and for each reply: the error
    that shows the server did not answer, else None (it answered, whatever it said)."""
    import redis
    from redis.retry import Retry

    client = None
    try:
        client = _probe_client(redis.Redis, Retry, url, options, window_s)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - sorted by _probe_failed
        return exc if _probe_failed(exc) else None
    finally:
        if client is not None:
            try:
                client.close()
            except Exception:  # noqa: BLE001 - a probe's socket; nothing to keep
                pass
    return None


async def _probe_async(url: str, options: dict[str, Any] | None, window_s: float) -> BaseException | None:
    """As :func:`_probe_sync` with ``redis.asyncio``."""
    import redis.asyncio as aioredis
    from redis.asyncio.retry import Retry

    client = None
    try:
        client = _probe_client(aioredis.Redis, Retry, url, options, window_s)
        await client.ping()
    except Exception as exc:  # noqa: BLE001 - sorted by _probe_failed
        return exc if _probe_failed(exc) else None
    finally:
        if client is not None:
            try:
                close = getattr(client, "aclose", None) or client.close  # aclose from redis-py 5.0.1
                await close()
            except Exception:  # noqa: BLE001 - a probe's socket; nothing to keep
                pass
    return None


def _after_probe(error: BaseException | None, outage: _Outage) -> None:
    """Raise the probe's ``error`` (the server still does not answer; remembered for :data:`PROBE_MEMORY_S` s), else
    record the answer: the server is no longer lost and the call retries as usual."""
    if error is not None:
        if _timed_out(error):  # a refused connection fails in milliseconds: probing again costs nothing
            outage.probe_got_no_answer(error)
        raise error
    outage.succeeded()


def _timed_out(error: BaseException) -> bool:
    """Whether a probe's ``error`` is a timeout (it waited for a connect or a reply that never came: a hung server),
    the only failure worth remembering (:data:`PROBE_MEMORY_S`)."""
    import redis

    return isinstance(error, (redis.TimeoutError, TimeoutError))


def _recalled(error: BaseException) -> BaseException:
    """A fresh exception of the type and arguments of a remembered probe's ``error`` (raising one object from many
    calls would chain their tracebacks onto it); the object itself if it cannot be rebuilt that way."""
    try:
        return type(error)(*error.args)
    except Exception:  # noqa: BLE001 - an exception class with another constructor
        return error


def window_retry(*, asynchronous: bool, window_s: float | None = None, server: str = "", url: str | None = None,
                 options: dict[str, Any] | None = None) -> Any:
    """A redis-py ``Retry`` (``redis.asyncio.retry.Retry`` when ``asynchronous``, else ``redis.retry.Retry``) that
    retries a connection error or timeout until ``window_s`` (default :func:`retry_window_s`) s have passed since
    the outage of ``server`` began (a key naming the server, e.g. :func:`server_key` of its URL; every client of this
    process built with the same key shares the clock, module docstring): the start of the first try that failed,
    of this call or another, never before the server's last answer; with equal-jitter backoff (50 ms doubling, at
    most :data:`BACKOFF_CAP_S`). Once a call gave up, later calls with that key fail at their first error until one
    succeeds, or until a probe answers: while the server is lost, each call (its outermost try, not each retry)
    first sends one ``PING`` without retries on a fresh client of ``url`` and ``options`` (the client's own: TLS,
    AUTH and database as its), waiting min(:data:`PROBE_TIMEOUT_S`, window) s for the connect and for the reply. No
    answer: the call raises the probe's error at once (a hung server costs the probe's timeout, not a reply timeout),
    and, when the probe timed out, so does every call within :data:`PROBE_MEMORY_S` s after, without a probe of its
    own;
    any answer (an authentication error too): the server is no longer lost, and the call retries as usual. Without
    ``url`` there is no probe (the call fails at its first error). An authentication error (a wrong password or
    user name) is never retried: it is raised at the first try (:func:`auth_refused`).

    Raises
    ------
    ValueError
        A bad :data:`RETRY_WINDOW_ENV`.
    """
    from redis.backoff import EqualJitterBackoff

    window = retry_window_s() if window_s is None else float(window_s)
    outage = _outage(server)
    backoff = EqualJitterBackoff(cap=BACKOFF_CAP_S, base=0.05)
    if asynchronous:
        from redis.asyncio.retry import Retry as AsyncRetry

        class _AsyncWindowRetry(AsyncRetry):
            window_s = window

            async def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
                token = _WINDOW.set([time.monotonic()]) if _WINDOW.get() is None else None

                async def failed(error: BaseException, *rest: Any) -> Any:
                    out = await fail(error, *rest)
                    _check_window(error, window, outage, url)
                    return out

                try:
                    if token is not None and url and outage.lost and not _NO_RETRY.get():
                        recent = outage.recent_probe_error()  # a probe just got no answer: fail as it did
                        if recent is not None:
                            raise _recalled(recent)
                        _after_probe(await _probe_async(url, options, window), outage)  # lost: one probe first
                    result = await super().call_with_retry(do, failed, *args, **kwargs)
                    if token is not None and _is_reply(do):
                        outage.succeeded()
                    return result
                finally:
                    if token is not None:
                        _WINDOW.reset(token)

        return _AsyncWindowRetry(backoff, -1)

    from redis.retry import Retry as SyncRetry

    class _WindowRetry(SyncRetry):
        window_s = window

        def call_with_retry(self, do: Any, fail: Any, *args: Any, **kwargs: Any) -> Any:
            token = _WINDOW.set([time.monotonic()]) if _WINDOW.get() is None else None

            def failed(error: BaseException, *rest: Any) -> Any:
                out = fail(error, *rest)
                _check_window(error, window, outage, url)
                return out

            try:
                if token is not None and url and outage.lost and not _NO_RETRY.get():
                    recent = outage.recent_probe_error()  # a probe just got no answer: fail as it did
                    if recent is not None:
                        raise _recalled(recent)
                    _after_probe(_probe_sync(url, options, window), outage)  # lost: one probe first
                result = super().call_with_retry(do, failed, *args, **kwargs)
                if token is not None and _is_reply(do):
                    outage.succeeded()
                return result
            finally:
                if token is not None:
                    _WINDOW.reset(token)

    return _WindowRetry(backoff, -1)


def server_key(url: str) -> str:
    """The outage-clock key of the server at ``url`` (:func:`window_retry`): a SHA-256 digest of its address
    (scheme, host, port, database or socket path), never the URL itself (it may hold a password); ``""`` when the
    URL cannot be parsed (the client's own error follows)."""
    import hashlib
    from urllib.parse import urlsplit

    try:
        u = urlsplit(url)
        where = f"{u.scheme}|{u.hostname}|{u.port}|{u.path}"
    except ValueError:
        return ""
    return hashlib.sha256(where.encode("utf-8", "surrogatepass")).hexdigest()


def ping_once(client: Any) -> Any:
    """``client.ping()`` (a synchronous redis-py client) with no retry: the first connection error or timeout is
    raised at once. For the start of a run: an unreachable server is reported now, not after the retry window.

    Raises
    ------
    redis.ConnectionError, redis.TimeoutError
        The server cannot be reached (within the connect timeout).
    redis.AuthenticationError
        The server refused the URL's password or user name (:func:`auth_refused`).
    """
    token = _NO_RETRY.set(True)
    try:
        return client.ping()
    finally:
        _NO_RETRY.reset(token)
