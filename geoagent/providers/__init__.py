"""Model providers behind one interface (:class:`geoagent.providers.base.Provider`).

Importing this package registers the built-in kinds: ``openai`` (any OpenAI-compatible Chat Completions
server: OpenAI, OpenRouter, vLLM, Ollama), ``anthropic`` (Messages), ``gemini`` (generateContent),
``replay`` (recorded JSONL) and ``simulated`` (seeded, offline). Build one with::

    from geoagent.providers import ProviderSettings, make_provider
    provider = make_provider(ProviderSettings(kind="openai", model="gpt-4o-mini", api_key=key), http)
"""

from __future__ import annotations

from typing import Any

from geoagent.providers import anthropic, gemini, openai_compat, replay, simulated  # noqa: F401  (register)
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, ProviderError, Usage, provider_class
from geoagent.providers.errors import (ContentBlocked, MalformedResponse, ReplayMiss, ReplayRecordedError,
                                       UnsupportedRequest)
from geoagent.providers.settings import ProviderSettings


def make_provider(settings: ProviderSettings, http: Any = None) -> Provider:
    """Instantiate the registered provider class for ``settings.kind``.

    Raises
    ------
    KeyError
        Unknown kind (the message lists the known ones).
    """
    return provider_class(settings.kind)(settings, http)  # type: ignore[call-arg]


__all__ = [
    "ContentBlocked",
    "MalformedResponse",
    "ModelRequest",
    "ModelResponse",
    "Provider",
    "ProviderError",
    "ProviderSettings",
    "ReplayMiss",
    "ReplayRecordedError",
    "UnsupportedRequest",
    "Usage",
    "make_provider",
    "provider_class",
]
