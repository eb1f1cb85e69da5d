"""Shared plumbing of the HTTP model providers (OpenAI-compatible, Anthropic, Gemini).

A subclass builds the wire request (:meth:`HttpProvider.build`) and parses the wire response
(:meth:`HttpProvider.parse`); this base posts it through the shared :class:`~geoagent.runtime.http.HttpClient`
(which owns rate limits, retries and ``Retry-After``), adds the ``X-Request-Key`` / ``X-Image-Id`` headers for a
local server (the sandbox fakes log and answer by them; a remote API is sent neither),
measures latency, turns a 2xx body that is not JSON into :class:`~geoagent.providers.errors.MalformedResponse`
and scrubs the API key out of every error that passes through.
"""

from __future__ import annotations

import abc
import asyncio
import base64
import dataclasses
import functools
import time
from typing import Any
from urllib.parse import urlsplit

import orjson

from geoagent import constants as C
from geoagent.files import without_lone_surrogates
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, ProviderError
from geoagent.providers.errors import ContentBlocked, MalformedResponse, body_excerpt
from geoagent.providers.settings import ProviderSettings
from geoagent.runtime.http import header_value

#: Header carrying ``ModelRequest.key()`` on every call to a local server (our fakes log calls per key), never to a
#: remote API (:meth:`HttpProvider.common_headers`).
REQUEST_KEY_HEADER = "X-Request-Key"
#: Header carrying ``ModelRequest.image_id`` when set, to a local server only (lets the fakes answer per image).
IMAGE_ID_HEADER = "X-Image-Id"

_MASK = "***"


def reveal_key(api_key: Any) -> str | None:
    """The plain key from a ``str`` or a :class:`geoagent.secrets.Secret` (``None`` stays ``None``)."""
    if api_key is None:
        return None
    reveal = getattr(api_key, "reveal", None)
    return str(reveal()) if callable(reveal) else str(api_key)


#: bytes of image above which a request is built in a worker thread (:meth:`HttpProvider.generate`)
BUILD_IN_THREAD_BYTES = 1024 * 1024


def b64(data: bytes) -> str:
    """Standard base64 (with padding) of ``data`` as ASCII text, no ``data:`` prefix."""
    return base64.b64encode(data).decode("ascii")


def paid_policy(policy: Any) -> Any:
    """``policy`` with ``retry_unknown_outcome=False`` (default ``HostPolicy`` when ``None``).

    A paid endpoint must not re-send a request whose connection dropped after the body was sent: the
    provider may have billed it (issue 2, point 4).
    """
    from geoagent.runtime.http import HostPolicy

    if policy is None:
        return HostPolicy(retry_unknown_outcome=False)
    if getattr(policy, "retry_unknown_outcome", False):
        return dataclasses.replace(policy, retry_unknown_outcome=False)
    return policy


def _scrub_exception(exc: BaseException, secret: str) -> BaseException | None:
    """A copy of ``exc`` with ``secret`` masked in its message and string attributes, or None if clean."""
    if not secret or len(secret) < 4:
        return None
    from geoagent.secrets import mask_values

    def clean(text: str) -> str:  # in any case, and truncated runs of 8+ characters (mask_values)
        return mask_values(text, (secret,), _MASK)

    attrs = getattr(exc, "__dict__", {})
    dirty = clean(str(exc)) != str(exc) or any(isinstance(v, str) and clean(v) != v for v in attrs.values())
    if not dirty:
        return None
    clone = exc.__class__.__new__(exc.__class__)
    for k, v in attrs.items():
        setattr(clone, k, clean(v) if isinstance(v, str) else v)
    clone.args = tuple(clean(a) if isinstance(a, str) else a for a in exc.args)
    return clone



def lenient_json(body: bytes) -> Any:
    """Parse a JSON body that orjson refused only for its text encoding; None when it is not JSON at all.

    Two kinds of body are JSON in every other respect and carry a model's answer that was generated and
    billed: a string with a lone UTF-16 surrogate escape (``"\\ud83d"``: an emoji cut in half, e.g. at
    the output-token limit, by a server whose encoder escapes non-ASCII) and bytes that are not UTF-8 (a
    server sending Latin-1). Refusing them made the call an unusable 2xx body of unknown outcome, so each
    redelivery paid a new call and the answer was never stored. Here invalid bytes and lone surrogates
    become U+FFFD (the Unicode replacement character, as a UTF-8 decoder writes), every other character is
    kept, and the answer is stored like any other (the stored text cannot hold a lone surrogate: SQLite and
    the exports write UTF-8).

    Parameters
    ----------
    body : bytes
        The 2xx response body.

    Returns
    -------
    object or None
        The decoded JSON value, its strings cleaned; None when the body is not JSON even so.
    """
    import json

    try:
        return without_lone_surrogates(json.loads(body.decode("utf-8", errors="replace")))
    except (ValueError, RecursionError):
        return None

class HttpProvider(Provider, abc.ABC):
    """Base of the providers that call a remote (or local fake) HTTP API."""

    paid = True
    supports_before_send = True  # handed to HttpClient.request, which awaits it after host admission

    def __init__(self, model_cfg: ProviderSettings, http: Any = None) -> None:
        self.settings = model_cfg
        self.base_url = model_cfg.resolved_base_url()
        self._http = http
        self._own_http: Any = None
        self._policy_cache: tuple[Any, Any] | None = None
        #: this model's limit key at its host (:func:`geoagent.runtime.http.limit_key`), made once: the HTTP
        #: layer paces the calls by it where it has the model's own limits (providers limit per model)
        from geoagent.providers.settings import limit_model
        from geoagent.runtime.http import limit_key

        self.limit_key = limit_key(self.host, limit_model(model_cfg.kind, model_cfg.model))

    def __repr__(self) -> str:  # never the key
        return f"{type(self).__name__}(model={self.settings.model!r}, base_url={self.base_url!r})"

    # -- subclass hooks -------------------------------------------------------------------------
    @abc.abstractmethod
    def build(self, request: ModelRequest) -> tuple[str, dict[str, Any], dict[str, str]]:
        """Return ``(url, json_body, headers)`` for ``request`` (auth headers included)."""

    @abc.abstractmethod
    def parse(self, request: ModelRequest, data: Any, raw: bytes) -> ModelResponse:
        """Turn the decoded 2xx body into a :class:`ModelResponse` (``latency_s`` is filled in later).

        Raises :class:`MalformedResponse` / :class:`ContentBlocked` for bodies that carry no answer.
        """

    # -- transport ------------------------------------------------------------------------------
    @property
    def host(self) -> str:
        """``hostname:port`` (or ``hostname`` when the URL has no explicit port) of the API: its
        :func:`geoagent.runtime.http.host_key` (an IPv6 address in brackets), as the config keys the model's limits
        (review40a #2: ``::1:8001`` here beside ``[::1]:8001`` there lost the model's own pacing)."""
        from geoagent.runtime.http import host_key

        return host_key(self.base_url) or "None"

    async def _client(self) -> Any:
        if self._http is not None:
            return self._http
        if self._own_http is None:
            from geoagent.runtime.http import HttpClient

            client = HttpClient()
            await client.__aenter__()
            self._own_http = client
        return self._own_http

    def _api_key(self) -> str | None:
        return reveal_key(self.settings.api_key)

    def _local_host(self) -> bool:
        """Whether :attr:`base_url` is a local server (:func:`geoagent.config.is_local_host`): its key is
        scrubbed from answers only from 8 characters (:func:`_without_key`)."""
        return _base_url_is_local(self.base_url)

    def common_headers(self, request: ModelRequest) -> dict[str, str]:
        """Content type, extra headers from settings and, for a local server only (:meth:`_local_host`: this
        machine, the LAN, the sandbox fakes on ``*.sandbox.invalid``), ``X-Request-Key`` and (if set) ``X-Image-Id``.

        A remote API (api.openai.com, openrouter.ai, ...) is sent neither (prov39 #11): it reads neither, an image
        id or file stem can name a place (a third party learned it with every call), a non-ASCII id went out as raw
        bytes and a long one could overflow the server's header limit (a refused call)."""
        headers = {"Content-Type": "application/json"}
        headers.update(dict(self.settings.headers))
        if self._local_host():
            headers[REQUEST_KEY_HEADER] = request.key()
            if request.image_id is not None:
                headers[IMAGE_ID_HEADER] = str(request.image_id)
        return headers

    def _call_policy(self, http: Any) -> Any:
        """Retry/timeout policy for one call: settings' policy, else the client's policy for this host;
        for paid providers always with ``retry_unknown_outcome=False`` (rate and concurrency are not taken
        from it: the HTTP layer applies those of the call's limit key, :attr:`limit_key`, or of its host)."""
        base = self.settings.policy
        if base is None:
            policy_for = getattr(http, "policy_for", None)
            base = policy_for(self.host) if callable(policy_for) else None
        cached = self._policy_cache
        if cached is not None and cached[0] is base:
            return cached[1]
        pol = paid_policy(base) if self.paid else base
        self._policy_cache = (base, pol)
        return pol

    def decode(self, request: ModelRequest, body: bytes) -> ModelResponse:
        """Decode and parse one 2xx body (``latency_s`` 0).

        Raises
        ------
        MalformedResponse
            Not JSON, or not the documented shape.
        ContentBlocked
            The API withheld the answer.
        """
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            data = lenient_json(body)
            if data is None:
                raise MalformedResponse(self.kind, f"body is not JSON ({exc})", body_excerpt(body)) from None
        return self.parse(request, data, body)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """POST the request built by :meth:`build`, parse the answer with :meth:`parse`.

        A 2xx body that does not parse fails the HTTP layer's ``validate`` check, so the call is retried
        there like a 5xx (the attempt may have been billed: the HTTP layer counts it in
        ``possibly_billed``); when every attempt fails that way the HTTP layer raises
        :class:`RetriesExhausted` with reason ``invalid body``.

        ``request.before_send`` (if set) goes to the HTTP layer, which awaits it once the host admitted
        the request, right before the first attempt is sent.

        Raises
        ------
        PermanentHTTPError, RetriesExhausted, OutcomeUnknown
            From the HTTP layer (messages never include the API key).
        ContentBlocked
            The API withheld the answer (``retryable = False``; not retried).
        Exception
            Whatever ``request.before_send`` raised (nothing was sent).
        """
        if request.image is not None and len(request.image) > BUILD_IN_THREAD_BYTES:
            # a large image is base64-encoded (and maybe re-encoded to fit the API: geoagent.image_fit) off the
            # event loop, which every worker of the process shares (review39b #6: 0.93 s for an 8200 x 6000 photo)
            url, body, headers = await asyncio.to_thread(self.build, request)
        else:
            url, body, headers = self.build(request)
        http = await self._client()
        secret = self._api_key() or ""
        parsed: list[ModelResponse] = []
        blocked: list[ProviderError] = []

        def _validate(resp: Any) -> None:
            parsed.clear()
            blocked.clear()
            if not 200 <= resp.status < 300:
                raise MalformedResponse(self.kind, f"unexpected HTTP status {resp.status}", body_excerpt(resp.body))
            try:
                parsed.append(self.decode(request, resp.body))
            except ContentBlocked as exc:  # a definite answer: do not retry
                blocked.append(exc)

        t0 = time.perf_counter()
        try:
            hook = {"before_send": request.before_send} if request.before_send is not None else {}
            resp = await http.request(
                "POST", url, json=body, headers=headers, policy=self._call_policy(http), validate=_validate,
                limit=self.limit_key, **hook
            )
            if blocked:
                raise blocked[0]
            if not parsed:
                _validate(resp)
                if blocked:
                    raise blocked[0]
        except Exception as exc:
            clean = _scrub_exception(exc, secret)
            if clean is not None:
                raise clean from None
            raise
        # a sandbox fake marks its answers (a header no real API sends): recorded as simulated by the caller
        sandbox = header_value(getattr(resp, "headers", None) or {}, C.SANDBOX_ANSWER_HEADER) == "1"
        # the model's time: the final attempt's, from its send to its answer read in full (the waits for the
        # host's slots, earlier attempts and their backoff are not the model's)
        latency = float(getattr(resp, "elapsed_s", 0.0) or 0.0) or time.perf_counter() - t0
        return _without_key(dataclasses.replace(parsed[0], latency_s=latency, sandbox=sandbox),
                            secret, local=self._local_host())

    async def aclose(self) -> None:
        """Close the private HTTP client if this provider opened one (a shared client is left alone)."""
        if self._own_http is not None:
            client, self._own_http = self._own_http, None
            await client.__aexit__(None, None, None)


@functools.lru_cache(maxsize=64)
def _base_url_is_local(base_url: str) -> bool:
    """:func:`geoagent.config.is_local_host` of ``base_url``'s host name, once per URL (asked for every answer)."""
    from geoagent.config import is_local_host

    return is_local_host(urlsplit(base_url).hostname)


def _without_key(resp: ModelResponse, secret: str, *, local: bool = False) -> ModelResponse:
    """``resp`` with the API key (and any other key this process has read) masked in its text fields.

    A server that echoes the request (a debugging proxy, a gateway's error text delivered as a 200 answer)
    would otherwise put the key into the response store, the responses queue and the exports; the answer is
    kept verbatim otherwise (:func:`geoagent.secrets.redact`: key values in any case, and runs of 8+ of a key's
    characters that do not read as words). ``local``: the
    key went to a local server, masked only from 8 characters (its "EMPTY" or "local" would mangle ordinary
    words); a paid host's key is masked from 4 (:func:`geoagent.secrets.min_secret_len`).
    """
    from geoagent.secrets import min_secret_len, redact

    extra = [secret] if len(secret) >= min_secret_len(local=local) else []
    fields = {name: redact(value, extra) for name in ("text", "finish_reason", "provider_model")
              if isinstance(value := getattr(resp, name), str)}
    changed = {k: v for k, v in fields.items() if v != getattr(resp, k)}
    return dataclasses.replace(resp, **changed) if changed else resp


#: the largest token count one call's usage field may report (10^9): no model's context or output comes near,
#: and its cost stays far inside the ledger's 64-bit nano-USD amounts at any configured price; a larger count
#: (1e300 from a broken gateway) is no usage but an unusable answer (booked at its worst case, unknown outcome)
MAX_USAGE_TOKENS = 10**9


def as_int(value: Any, what: str, provider: str, raw: bytes) -> int:
    """``value`` as an int in [0, :data:`MAX_USAGE_TOKENS`] (a JSON number with an integral value, or a string of
    ASCII digits), else :class:`MalformedResponse` (a negative, fractional, non-numeric or implausibly large
    count; a string of other digits, e.g. "\u00b2", which ``int`` refuses)."""
    if isinstance(value, bool):
        value = None
    number: int | None = None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str) and value.isascii() and value.isdigit():
        number = int(value) if len(value) <= 12 else MAX_USAGE_TOKENS + 1  # int() refuses 4,300+ digits
    if number is not None and 0 <= number <= MAX_USAGE_TOKENS:
        return number
    if number is not None and number > MAX_USAGE_TOKENS:
        raise MalformedResponse(provider, f"{what} is implausibly large: {value!r} tokens (more than "
                                f"{MAX_USAGE_TOKENS:,} in one call)", body_excerpt(raw))
    raise MalformedResponse(provider, f"{what} is not a non-negative integer: {value!r}", body_excerpt(raw))
