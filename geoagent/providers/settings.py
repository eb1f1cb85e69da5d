"""Plain, frozen settings of one model provider (built by the config loader from a campaign's TOML).

Every provider class is constructed the same way::

    provider = provider_class(settings.kind)(settings, http)

where ``http`` is the process's shared :class:`geoagent.runtime.http.HttpClient` (or ``None``: the provider
then opens a private client on first use and closes it in ``aclose()``).

The API key is held in a field that is left out of ``repr()`` and of :meth:`ProviderSettings.public_dict`,
so neither a traceback, a log line nor a campaign manifest ever shows it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

#: Default base URLs per provider kind. Paths appended by the providers:
#: openai -> ``{base_url}/chat/completions``; anthropic -> ``{base_url}/v1/messages``;
#: gemini -> ``{base_url}/v1beta/models/{model}:generateContent``.
DEFAULT_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "anthropic": "https://api.anthropic.com",
    "gemini": "https://generativelanguage.googleapis.com",
}

#: The route each provider kind appends to its base URL (what :data:`DEFAULT_BASE_URLS` says above).
PROVIDER_ROUTES: dict[str, str] = {
    "openai": "/chat/completions",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/<model>:generateContent",
}


def own_api_path_problem(kind: str, base_url: str) -> str | None:
    """Why ``base_url`` on provider ``kind``'s own API host cannot be its API root, or None (another host, or the
    root as :data:`DEFAULT_BASE_URLS` writes it, with or without a trailing ``/``).

    The provider appends its route (:data:`PROVIDER_ROUTES`) to ``base_url``; on api.openai.com the root is ``/v1``,
    on api.anthropic.com and generativelanguage.googleapis.com the host alone (the route carries the version). Any
    other path there, e.g. ``https://api.openai.com`` without ``/v1`` (``POST /chat/completions``: HTTP 404
    "Invalid URL (POST /chat/completions)"), ``https://api.anthropic.com/v1`` (``/v1/v1/messages``) or
    ``https://generativelanguage.googleapis.com/v1beta`` (``/v1beta/v1beta/models/...``), is answered 404 on every
    call (prov39 #7): the model caller's not-found breaker would stop the model after a few such calls, its tasks
    left queued unanswered (:class:`geoagent.workers.model_caller.AuthBreaker`; the message said each request
    was dead-lettered, newuser41 #E). The message shows no part of the URL (it may hold a pasted key)."""
    from urllib.parse import urlsplit

    root = DEFAULT_BASE_URLS.get(kind)
    if root is None:
        return None
    from geoagent.providers.sampling import is_openai_host

    own, parts = urlsplit(root), urlsplit(base_url)
    host = (parts.hostname or "").lower().rstrip(".")
    # OpenAI's regional data-residency hosts (eu.api.openai.com, ...) serve the same /v1 root (review46b #7)
    regional = kind == "openai" and host != own.hostname and is_openai_host(host)
    if (host != own.hostname and not regional) or parts.path.rstrip("/") == own.path:
        return None
    if regional:
        root = f"https://{host}{own.path}"
    return (f"{host}'s API root is {root} (the {kind} provider appends {PROVIDER_ROUTES[kind]} to base_url), "
            "and this base_url has another path there, so every call would be answered 404 Not Found: the model "
            "would stop after its first few calls with none answered, its tasks left queued; write "
            f"base_url = \"{root}\"" + ("" if regional else " or leave base_url out (that is the default)"))


#: Base URLs of common OpenAI-compatible servers (use with ``kind = "openai"``).
OPENAI_COMPATIBLE_BASE_URLS: dict[str, str] = {
    "openai": "https://api.openai.com/v1",
    "openrouter": "https://openrouter.ai/api/v1",
    "vllm": "http://localhost:8000/v1",  # `vllm serve <model>` default port
    "ollama": "http://localhost:11434/v1",  # Ollama's OpenAI-compatibility endpoint
}


def limit_model(kind: str, model: str) -> str:
    """The model id a provider's per-model rate limit is kept under, for the HTTP layer's limit key
    (:func:`geoagent.runtime.http.limit_key`): ``model`` as written, except that Gemini's resource name
    ``models/<id>`` is the same model as ``<id>`` (the provider sends both as ``/v1beta/models/<id>``), so
    two entries spelling one model both ways share its one limit."""
    return model.removeprefix("models/") if kind == "gemini" else model


@dataclass(frozen=True, slots=True)
class ProviderSettings:
    """Settings of one provider instance.

    Attributes
    ----------
    kind : str
        Provider kind: ``openai`` (any OpenAI-compatible Chat Completions server), ``anthropic``,
        ``gemini``, ``replay`` or ``simulated``.
    model : str
        Model identifier sent to the API (e.g. ``gpt-4o-mini``, ``claude-haiku-4-5``, ``gemini-2.5-flash``).
    base_url : str or None
        API root; ``None`` uses :data:`DEFAULT_BASE_URLS` for the kind. For OpenAI-compatible servers it
        includes the version segment (``https://openrouter.ai/api/v1``, ``http://localhost:11434/v1``).
    api_key : str or None
        Secret key, read by the config loader from the environment or ``.env``; never shown by ``repr``.
    seed : int
        Seed of the ``simulated`` provider (and of nothing else; a model's sampling seed goes in
        ``ModelRequest.params["seed"]``).
    replay_path : str or None
        JSONL file the ``replay`` provider answers from.
    replay_release_dir : str or None
        The GeoContext release folder ``replay_path`` lies in, when it was taken from there (set by the config
        loader, :meth:`geoagent.config.CampaignConfig.replay_path`): a missing file is then reported as a
        missing release file, saying how to point at the release.
    replay_key_field : str or None
        Name of the ``ModelRequest.meta`` entry holding the replay lookup key; ``None`` looks up
        ``request.key()``. A list/tuple value in meta is joined with ``|``.
    replay_key_fields : tuple of str
        Record fields joined with ``|`` to form each record's key (release ``verify_raw.jsonl``:
        ``("trial_id", "model")``; our own recordings: ``("key",)``).
    replay_text_field : str
        Record field holding the raw answer text (release: ``raw``; ours: ``text``).
    replay_usage_field : str or None
        Record field holding ``{"input_tokens", "output_tokens"[, "stop_reason"]}``; ``None`` reads
        ``input_tokens``/``output_tokens`` from the record's top level.
    max_tokens_field : str or None
        OpenAI-compatible only: body field carrying the output-token cap. ``None`` chooses
        ``max_completion_tokens`` for ``api.openai.com`` (its current name; reasoning models reject
        ``max_tokens``) or for ``reasoning_model = True`` on any host, and ``max_tokens`` elsewhere (vLLM,
        Ollama, OpenRouter accept it).
    reasoning_model : bool or None
        OpenAI-compatible only: whether the model follows OpenAI's reasoning-model rules (no ``top_p``, no
        temperature other than 1: :mod:`geoagent.providers.sampling`; ``True`` also sends the cap as
        ``max_completion_tokens`` unless ``max_tokens_field`` says otherwise). ``None`` decides by the
        documented id families (``o1``, ``o3``, ``o4-mini``, ``gpt-5*``...) on ``api.openai.com``.
    model_family : str or None
        OpenAI-compatible only: the OpenAI model (``o1-mini``, ``o3-mini``, ``gpt-4o``, ...) that ``model`` names
        under another name, e.g. an Azure OpenAI deployment (``[[models]] model_family``). The id rules of
        :mod:`geoagent.providers.sampling` (reasoning, no system message, no ``response_format``) then read it
        instead of ``model``, on any host; ``reasoning_model``, when set, still decides the reasoning rules.
        ``None``: the rules read ``model``.
    api_version : str or None
        OpenAI-compatible only: Azure OpenAI's ``api-version`` (``2024-10-21``, ``2025-04-01-preview``) of its
        classic per-deployment route (``[[models]] api_version``). Set, the provider posts to
        ``{base_url}/openai/deployments/{model}/chat/completions?api-version={api_version}`` with the key in an
        ``api-key`` header (no ``Authorization``) and no ``model`` in the body; ``base_url`` is then the resource
        endpoint (``https://<resource>.openai.azure.com``) and ``model`` the deployment name.
        ``None``: ``{base_url}/chat/completions`` with a Bearer key (OpenAI, Azure's v1 API, other servers).
    anthropic_version : str
        Value of the ``anthropic-version`` header.
    headers : tuple of (str, str)
        Extra request headers (e.g. OpenRouter's ``HTTP-Referer``/``X-Title``). A mapping is accepted
        and stored as sorted pairs.
    name : str or None
        The ``[[models]]`` entry's ``name`` (set by the config loader), which the provider's errors name
        (e.g. a missing replay file); ``None`` when the settings were built by hand (they name ``model``).
    policy : HostPolicy or None
        Retry and timeout policy of this provider's calls, passed to the HTTP layer with every request (the
        rate and concurrency that pace them are the HTTP client's, per model limit key and host:
        :mod:`geoagent.runtime.http` "Limit keys").
        ``None`` uses ``HostPolicy(retry_unknown_outcome=False)`` for paid providers. A policy given here
        is used as is, except that paid providers always get ``retry_unknown_outcome=False``.
    """

    kind: str
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)
    seed: int = 0
    replay_path: str | None = None
    replay_release_dir: str | None = None
    replay_key_field: str | None = None
    replay_key_fields: tuple[str, ...] = ("key",)
    replay_text_field: str = "text"
    replay_usage_field: str | None = "usage"
    max_tokens_field: str | None = None
    reasoning_model: bool | None = None
    model_family: str | None = None
    api_version: str | None = None
    anthropic_version: str = "2023-06-01"
    headers: tuple[tuple[str, str], ...] = ()
    policy: Any = None  # geoagent.runtime.http.HostPolicy | None (kept Any: no import cycle at config time)
    name: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"provider settings: 'kind' must be a non-empty string, got {self.kind!r}")
        if not isinstance(self.model, str) or not self.model:
            raise ValueError(f"provider settings: 'model' must be a non-empty string, got {self.model!r}")
        if isinstance(self.headers, Mapping):
            object.__setattr__(self, "headers", tuple(sorted((str(k), str(v)) for k, v in self.headers.items())))
        else:
            object.__setattr__(self, "headers", tuple((str(k), str(v)) for k, v in self.headers))
        if isinstance(self.replay_key_fields, str):
            object.__setattr__(self, "replay_key_fields", (self.replay_key_fields,))
        else:
            object.__setattr__(self, "replay_key_fields", tuple(self.replay_key_fields))
        if not self.replay_key_fields:
            raise ValueError("provider settings: 'replay_key_fields' must name at least one field")
        if self.max_tokens_field not in (None, "max_tokens", "max_completion_tokens"):
            raise ValueError(
                "provider settings: 'max_tokens_field' must be 'max_tokens' or 'max_completion_tokens', "
                f"got {self.max_tokens_field!r}"
            )

    def resolved_base_url(self) -> str:
        """``base_url`` without a trailing slash, or the kind's default.

        Raises
        ------
        ValueError
            No base URL configured and the kind has no default.
        """
        url = self.base_url or DEFAULT_BASE_URLS.get(self.kind)
        if not url:
            raise ValueError(f"provider {self.kind!r} (model {self.model!r}) needs a base_url")
        return url.rstrip("/")

    def public_dict(self) -> dict[str, Any]:
        """All settings except the API key (for manifests and logs); ``api_key_set`` says if one is held."""
        out: dict[str, Any] = {}
        for f in fields(self):
            if f.name == "api_key":
                continue
            value = getattr(self, f.name)
            if f.name == "headers":
                value = [list(p) for p in value]
            elif f.name == "policy" and value is not None:
                value = {g: getattr(value, g) for g in getattr(value, "__slots__", ())} or repr(value)
            elif isinstance(value, tuple):
                value = list(value)
            out[f.name] = value
        out["api_key_set"] = bool(self.api_key)
        return out

