"""Provider-level errors (subclasses of :class:`geoagent.providers.base.ProviderError`).

Transport failures (429, 5xx, timeouts, resets, other 4xx) are the HTTP layer's errors
(:mod:`geoagent.runtime.http`). These classes cover what only a provider can tell: a 2xx body that is not
the documented shape, a prompt the API blocked, a replay record that does not exist.

Each carries ``retryable`` (whether trying the same request again can help) and, where the API reported
it, ``usage`` (tokens the failed call still consumed, so the ledger can settle them).
"""

from __future__ import annotations

from geoagent.providers.base import ProviderError, Usage


class MalformedResponse(ProviderError):
    """A 2xx response whose body is not the API's documented JSON (or an error object inside a 200).

    Retryable: a truncated or garbled body is a transient fault; the same request may succeed.
    """

    retryable = True

    def __init__(self, provider: str, detail: str, body_excerpt: str = "", usage: Usage | None = None) -> None:
        self.provider = provider
        self.detail = detail
        self.body_excerpt = body_excerpt
        self.usage = usage
        msg = f"{provider}: malformed response: {detail}"
        if body_excerpt:
            msg += f" (body: {body_excerpt})"
        super().__init__(msg)


class ContentBlocked(ProviderError):
    """The API answered but withheld the content (Gemini ``promptFeedback.blockReason``, a ``SAFETY``
    candidate without parts). Not retryable: the same prompt is blocked again."""

    retryable = False

    def __init__(self, provider: str, reason: str, usage: Usage | None = None) -> None:
        self.provider = provider
        self.reason = reason
        self.usage = usage
        super().__init__(f"{provider}: content blocked: {reason}")


class UnsupportedRequest(ProviderError):
    """The provider refused to send a request the API is documented to refuse for this model (e.g. an image to an
    OpenAI model that takes no image input). Raised by the provider before any HTTP request is made and before the
    request's ``before_send`` hook runs, so no cost is reserved and nothing is billed. Not retryable: the same
    request is refused again (the model caller dead-letters it as a permanent failure).

    ``model`` is the model id (or declared family) whose rule refused it; ``reason`` the rule, in words."""

    retryable = False

    def __init__(self, provider: str, model: str, reason: str) -> None:
        self.provider = provider
        self.model = model
        self.reason = reason
        super().__init__(f"{provider}: request not sent: {reason}")


class ReplayMiss(ProviderError):
    """The replay file holds no record for this request key. Not retryable."""

    retryable = False

    def __init__(self, key: str, path: str, detail: str = "") -> None:
        self.key = key
        self.path = path
        super().__init__(f"replay: no record for key {key!r} in {path}" + (f" ({detail})" if detail else ""))


class ReplayRecordedError(ProviderError):
    """The replay record exists but recorded a failed call (its ``error`` field is set). Not retryable."""

    retryable = False

    def __init__(self, key: str, path: str, error: str, *, unusable: bool = False) -> None:
        self.key = key
        self.path = path
        self.error = error
        what = "cannot be used" if unusable else "is a recorded failure"  # unusable: a field of it is damaged
        super().__init__(f"replay: record {key!r} in {path} {what}: {error}")


def body_excerpt(body: bytes | str, limit: int = 300) -> str:
    """First ``limit`` characters of a response body, decoded leniently, for error messages."""
    text = body.decode("utf-8", errors="replace") if isinstance(body, bytes) else body
    return text[:limit] + ("..." if len(text) > limit else "")
