"""The model-provider interface: prompt text + optional image bytes + params -> text + usage + latency.

Every provider (OpenAI-compatible Chat Completions, Anthropic Messages, Gemini generateContent, replay,
simulated) implements one async method, :meth:`Provider.generate`. Transport (rate limits, retries,
``Retry-After``) lives in :mod:`geoagent.runtime.http`; providers only build the wire request and parse
the wire response. Providers never see the ledger or the store: the model-caller worker does that.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from geoagent.runtime.errors import PicklableError


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One request to a model.

    Attributes
    ----------
    provider : str
        Provider kind: ``openai``, ``anthropic``, ``gemini``, ``replay`` or ``simulated``.
    model : str
        The provider's model identifier (e.g. ``gpt-4o-mini``).
    prompt : str
        Full user prompt text (already rendered from its template).
    image_id : str or None
        Stable identifier of the image (part of the request key; bytes are not hashed).
    image : bytes or None
        JPEG/PNG bytes sent with the prompt, or None for text-only requests.
    image_mime : str
        MIME type of ``image`` (``image/jpeg`` default).
    params : dict
        Sampling parameters: ``max_output_tokens`` (int, required for cost reservation),
        ``temperature`` (float), optional ``system`` (str), ``seed`` (int), ``json_mode`` (bool).
    meta : dict
        Caller metadata not sent to the model and not part of the key (e.g. ``replay_key``, trial id).
    before_send : async callable or None
        Transport hook, not part of the request (not sent, not hashed into the key, not compared):
        awaited once, after the transport admitted the request (host concurrency and rate slots held)
        and right before its first attempt is written; if it raises, nothing is sent and
        :meth:`Provider.generate` raises that exception unchanged. Only providers with
        ``supports_before_send`` true call it; for the others the caller awaits it before ``generate``.
        The model caller reserves the call's worst-case cost here (issue 2, points 4 and 7).
    pixel_source : str or None
        Where the pixels of ``image_id`` come from when they are not the image itself: :data:`PLACEHOLDER_PIXELS`
        for a request sent with deterministic placeholder pixels because the image has no file
        (:func:`geoagent.workers.model_caller.build_request`); None for a photo, a text-only request and an
        intended generated image (``blank:gray``, ``synthetic:<seed>``). Part of the key only when set, so the
        key of every request sent with a real photo is what it always was.
    """

    provider: str
    model: str
    prompt: str
    image_id: str | None = None
    image: bytes | None = None
    image_mime: str = "image/jpeg"
    params: dict[str, Any] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    before_send: Callable[[], Awaitable[object]] | None = field(default=None, compare=False, repr=False)
    pixel_source: str | None = None

    @property
    def max_output_tokens(self) -> int:
        return int(self.params.get("max_output_tokens", 1024))

    def key(self) -> str:
        """Stable request key: SHA-256 hex of (provider, model, prompt, image id, params), plus the pixel
        source when the request carries placeholder pixels (:attr:`pixel_source`).

        The same logical request always gets the same key across processes and restarts, so its stored
        response is found and no second paid call is made (exactly-once spend, issue 2 point 6). A request
        about placeholder pixels and the same request with the photo are two requests (two keys): an answer
        about a placeholder never stands in for the photo's.
        """
        return request_key(self.provider, self.model, self.prompt, self.image_id, self.params, self.pixel_source)


#: :attr:`ModelRequest.pixel_source` of a request sent with deterministic placeholder pixels in place of a photo
#: that has no file (:mod:`geoagent.image_files`)
PLACEHOLDER_PIXELS = "placeholder"


def request_key(provider: str, model: str, prompt: str, image_id: str | None, params: dict[str, Any],
                pixel_source: str | None = None) -> str:
    """SHA-256 hex digest (64 lowercase hex characters) of the canonical JSON of the request's identifying
    fields (sorted keys): ``provider``, ``model``, ``prompt``, ``image_id``, ``params``, and ``pixel_source``
    only when it is not None (so every key made before that field existed, and every request with a photo,
    keeps its value)."""
    fields: dict[str, Any] = {"provider": provider, "model": model, "prompt": prompt, "image_id": image_id,
                              "params": params}
    if pixel_source is not None:
        fields["pixel_source"] = pixel_source
    blob = orjson.dumps(fields, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


@dataclass(frozen=True, slots=True)
class Usage:
    """Token usage reported by the provider (tokens).

    ``reported`` is False for an answer whose body carried no usable count (an OpenAI-compatible server or gateway
    that leaves ``usage`` out, sends ``usage: null``, or a count no call can have:
    :mod:`geoagent.providers.openai_compat`; the same for Anthropic's ``usage`` and Gemini's ``usageMetadata``:
    :mod:`geoagent.providers.anthropic`, :mod:`geoagent.providers.gemini`): the counts are then not the provider's. The model caller books such a
    call at its reservation (the worst case) and stores these figures as that worst case
    (:func:`geoagent.workers.billing.booked_answer`); the ledger never settles it below the reservation
    (:meth:`geoagent.runtime.ledger.Ledger.settle`).
    """

    input_tokens: int = 0
    output_tokens: int = 0
    reported: bool = True

    def cost_usd(self, price_input_per_mtok: float, price_output_per_mtok: float) -> float:
        """Cost in USD given prices in USD per 1M input/output tokens."""
        return (self.input_tokens * price_input_per_mtok + self.output_tokens * price_output_per_mtok) / 1e6


@dataclass(frozen=True, slots=True)
class ModelResponse:
    """A model's answer.

    Attributes
    ----------
    text : str
        The raw answer text (untrusted; never executed; kept verbatim).
    usage : Usage
        Token usage as reported by the provider (``usage.reported`` False: none was; the JSON form then carries
        ``"usage_reported": false``, and only then, so answers stored before the field existed read back as
        reported).
    latency_s : float
        The model's time in seconds: over HTTP, the final attempt's, from its send to its answer read in full (not
        the waits for the host's rate or concurrency slots, nor earlier attempts and their backoff); the simulated
        model's own time; 0 for replay.
    finish_reason : str or None
        Provider's stop reason (``stop``, ``length``, ``end_turn``, ``MAX_TOKENS``, ...).
    provider_model : str or None
        Model name echoed by the provider, if any (:func:`provider_model_text`: cleaned, at most 200 characters).
    sandbox : bool
        True when the answer came from one of geoagent's sandbox model fakes (its response carried
        :data:`geoagent.constants.SANDBOX_ANSWER_HEADER`), wherever it was served: the model caller then records
        the answer as simulated. Not part of the JSON form: the stored ``request_meta.provider_kind`` says it, and a
        stored answer read back is marked from it (:func:`geoagent.runtime.store.stored_response`).
    recorded_kind : str or None
        For an answer read back from the campaign's store: the ``request_meta.provider_kind`` recorded when it was
        paid for (``simulated`` / ``replay`` / ``model``; :func:`geoagent.runtime.store.stored_response`), so a
        caller that reuses it records what answered it then, not what the current config names. None for a fresh
        answer, or a stored one without a recorded kind. Not part of the JSON form.
    """

    text: str
    usage: Usage
    latency_s: float = 0.0
    finish_reason: str | None = None
    provider_model: str | None = None
    sandbox: bool = False
    recorded_kind: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "input_tokens": self.usage.input_tokens,
            "output_tokens": self.usage.output_tokens,
            "latency_s": self.latency_s,
            "finish_reason": self.finish_reason,
            "provider_model": self.provider_model,
            **({} if self.usage.reported else {"usage_reported": False}),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ModelResponse":
        return cls(
            text=d["text"],
            usage=Usage(int(d.get("input_tokens", 0)), int(d.get("output_tokens", 0)),
                        reported=d.get("usage_reported", True) is not False),
            latency_s=float(d.get("latency_s", 0.0)),
            finish_reason=d.get("finish_reason"),
            provider_model=d.get("provider_model"),
        )


#: longest model name echoed by a provider that an answer keeps (``provider_model``), characters: real ids are under
#: 100 (``claude-sonnet-4-5-20250929``, ``models/gemini-2.5-pro-preview-06-05``); sec42 #3: a 5,000-character
#: ``model`` field with control characters was stored and exported as it came
MAX_PROVIDER_MODEL_CHARS = 200


def provider_model_text(value: Any) -> str | None:
    """The model name a provider's answer echoes (OpenAI's and Anthropic's ``model``, Gemini's ``modelVersion``, a
    replay record's ``model``) as an answer keeps it in ``provider_model``: a string cleaned as a label
    (:func:`geoagent.textfmt.label_text`: no control or bidirectional formatting characters, whitespace one space)
    and cut to :data:`MAX_PROVIDER_MODEL_CHARS` characters (the last one ``…`` when cut); None for a value that is
    not a string or is blank once cleaned (untrusted text from the server: sec42 #3)."""
    from geoagent.textfmt import label_text

    if not isinstance(value, str):
        return None
    text = label_text(value)
    if len(text) > MAX_PROVIDER_MODEL_CHARS:
        text = text[:MAX_PROVIDER_MODEL_CHARS - 1] + "\u2026"
    return text or None


class ProviderError(PicklableError, RuntimeError):
    """A provider-level failure that is not a transport error (e.g. a malformed success body).

    Picklable, subclasses too (:class:`~geoagent.runtime.errors.PicklableError`): the message and the attributes
    the constructor set travel; :meth:`~geoagent.providers.http_base.HttpProvider.generate` masks the API key in a raised error's message and
    attributes first (an unpickled copy of that masked copy holds no key either)."""


class Provider(abc.ABC):
    """Base class of model providers; register subclasses with :func:`register`."""

    kind: ClassVar[str]
    #: whether calls cost money (replay and simulated are free; the ledger still records their usage)
    paid: ClassVar[bool] = True
    #: whether ``generate`` awaits ``request.before_send`` itself, once the transport admitted the request
    #: (HTTP providers); when false the caller awaits the hook before calling ``generate``
    supports_before_send: bool = False

    @abc.abstractmethod
    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` and return the parsed response.

        Raises
        ------
        geoagent.runtime.http.PermanentHTTPError
            Non-retryable 4xx (bad request, auth): goes to the dead-letter queue.
        geoagent.runtime.http.RetriesExhausted
            Retryable failures (429, 5xx, timeouts, resets) that outlived the retry policy.
        geoagent.runtime.http.OutcomeUnknown
            The connection dropped after the request body was sent: the provider may have billed it.
        ProviderError
            A 200 response whose body is not the documented shape.
        """

    def estimate_input_tokens(self, request: ModelRequest) -> int:
        """Upper-bound-ish estimate of input tokens (text ~ chars/3 + 16 + 1,600 for an image); callers with a
        model config use :meth:`geoagent.config.ModelConfig.estimate_input_tokens` (its own image budget)."""
        from geoagent.config import estimate_input_tokens

        return estimate_input_tokens(request.prompt, request.image is not None or bool(request.image_id))

    async def aclose(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


_REGISTRY: dict[str, type[Provider]] = {}


def register(cls: type[Provider]) -> type[Provider]:
    """Class decorator registering a provider under ``cls.kind``."""
    _REGISTRY[cls.kind] = cls
    return cls


def provider_class(kind: str) -> type[Provider]:
    """Look up a registered provider class by kind (imports the built-in providers lazily)."""
    if not _REGISTRY:
        import geoagent.providers  # noqa: F401  (registers built-ins)
    try:
        return _REGISTRY[kind]
    except KeyError:
        raise KeyError(f"unknown provider {kind!r}; known: {sorted(_REGISTRY)}") from None
