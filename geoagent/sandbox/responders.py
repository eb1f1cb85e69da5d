"""Simulated model answers: a registry of responders that turn a prompt into a plausible answer text.

Both the ``simulated`` provider (no network) and the local fake OpenAI / Anthropic / Gemini servers answer
through :func:`respond`, so a dry run and a demo over real HTTP give the same answers for the same request.

Task modules register their own responder when imported (GeoVerify: a yes/no verdict JSON; GeoHint: a
city/area/building JSON; crawl audits: audit JSON)::

    from geoagent.sandbox.responders import SimContext, register_responder

    register_responder("geoverify", lambda prompt: "VERDICT" in prompt, lambda ctx: ...)

:func:`load_builtin_responders` imports those modules (``geoagent.geoverify.simulate``,
``geoagent.geohint.simulate``, ``geoagent.crawl.simulate``) if they exist. The first registered responder
whose ``match(prompt)`` is true answers; if none matches, :func:`default_responder` gives a short generic
JSON answer.

Answers are deterministic: the ``rng`` handed to a responder is seeded from the request key (or, without
one, from prompt, image id and model) and the seed.
"""

from __future__ import annotations

import hashlib
import importlib
import logging
import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass

import orjson

log = logging.getLogger(__name__)

#: Modules that register task responders on import (missing ones are skipped).
BUILTIN_RESPONDER_MODULES = ("geoagent.geoverify.simulate", "geoagent.geohint.simulate", "geoagent.crawl.simulate")

#: Tokens charged per image by the simulated usage model (OpenAI's 512 px high-detail tile cost, 765).
SIM_IMAGE_TOKENS = 765
#: Characters per token in the simulated usage model.
SIM_CHARS_PER_TOKEN = 4


@dataclass(frozen=True, slots=True)
class SimContext:
    """Everything a responder may use to build its answer.

    Attributes
    ----------
    prompt : str
        Full prompt text (system text, if any, is not included).
    image_id : str or None
        Stable image identifier (Mapillary id), or ``sha256:<hex>`` of the bytes when a fake server got
        only bytes, or None for text-only requests.
    model : str
        Model name requested.
    seed : int
        Simulation seed.
    rng : random.Random
        Generator seeded from (key or prompt/image/model) and ``seed``; use it for every random choice.
    key : str or None
        The request key (``ModelRequest.key()``), when known.
    """

    prompt: str
    image_id: str | None
    model: str
    seed: int
    rng: random.Random
    key: str | None = None


Matcher = Callable[[str], bool]
ResponderFn = Callable[[SimContext], str]

_RESPONDERS: list[tuple[str, Matcher, ResponderFn]] = []
_LOCK = threading.Lock()
_BUILTINS_LOADED = False


def register_responder(name: str, match: Matcher, fn: ResponderFn) -> None:
    """Register (or replace, by ``name``) a responder; earlier registrations are tried first.

    Parameters
    ----------
    name : str
        Unique responder name (re-registering a name replaces it in place).
    match : callable(str) -> bool
        Predicate over the prompt text.
    fn : callable(SimContext) -> str
        Builds the answer text. Must be deterministic given ``ctx.rng``.
    """
    with _LOCK:
        for i, (n, _, _) in enumerate(_RESPONDERS):
            if n == name:
                _RESPONDERS[i] = (name, match, fn)
                return
        _RESPONDERS.append((name, match, fn))


def unregister_responder(name: str) -> bool:
    """Remove a responder by name; return whether one was removed."""
    with _LOCK:
        for i, (n, _, _) in enumerate(_RESPONDERS):
            if n == name:
                del _RESPONDERS[i]
                return True
    return False


def responder_names() -> list[str]:
    """Names of registered responders, in matching order."""
    return [n for n, _, _ in _RESPONDERS]


def load_builtin_responders(modules: tuple[str, ...] | None = None) -> list[str]:
    """Import the task modules that register responders; return the ones that loaded.

    ``modules`` defaults to :data:`BUILTIN_RESPONDER_MODULES`.

    A module that does not exist is skipped; one that exists but fails to import with ``ImportError``
    is skipped with a warning. Other exceptions propagate (a bug in a task module must surface).
    """
    global _BUILTINS_LOADED
    loaded = []
    for mod in BUILTIN_RESPONDER_MODULES if modules is None else modules:
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as exc:
            if exc.name is not None and mod.startswith(exc.name):
                continue  # the module (or its package) does not exist yet
            log.warning("responder module %s failed to import: %s", mod, exc)
            continue
        except ImportError as exc:
            log.warning("responder module %s failed to import: %s", mod, exc)
            continue
        loaded.append(mod)
    _BUILTINS_LOADED = True
    return loaded


def make_rng(prompt: str, image_id: str | None, model: str, seed: int, key: str | None = None) -> random.Random:
    """Deterministic generator for one request: SHA-256 of (key or prompt/image/model) and seed."""
    ident = key if key else orjson.dumps([prompt, image_id, model]).decode()
    digest = hashlib.sha256(f"{ident}\x00{int(seed)}".encode()).digest()
    return random.Random(int.from_bytes(digest[:16], "big"))


_DEFAULT_WORDS = ("unknown", "uncertain", "possibly", "likely", "no clear answer")


def default_responder(ctx: SimContext) -> str:
    """Generic fallback answer: ``{"answer": <word>, "confidence": <0.05..0.95>}`` (JSON text)."""
    word = ctx.rng.choice(_DEFAULT_WORDS)
    conf = round(ctx.rng.uniform(0.05, 0.95), 2)
    return orjson.dumps({"answer": word, "confidence": conf}).decode()


def respond(prompt: str, image_id: str | None, model: str, seed: int = 0, key: str | None = None) -> str:
    """Answer text of the first registered responder matching ``prompt`` (else :func:`default_responder`).

    Parameters
    ----------
    prompt : str
        Prompt text.
    image_id : str or None
        Image identifier (see :class:`SimContext`).
    model : str
        Model name.
    seed : int
        Simulation seed.
    key : str or None
        Request key; when given, the answer depends only on (key, seed).

    Returns
    -------
    str
        The answer text (deterministic for equal inputs).
    """
    if not _BUILTINS_LOADED:
        load_builtin_responders()
    ctx = SimContext(prompt, image_id, model, int(seed), make_rng(prompt, image_id, model, seed, key), key)
    for _name, match, fn in list(_RESPONDERS):
        try:
            matched = bool(match(prompt))
        except Exception:  # a faulty matcher must not take down the server  # noqa: BLE001
            log.exception("responder %s: match() raised", _name)
            continue
        if matched:
            return str(fn(ctx))
    return default_responder(ctx)


def simulated_usage(prompt: str, has_image: bool, text: str, system: str = "") -> tuple[int, int]:
    """Token usage of a simulated call: ``(input_tokens, output_tokens)``.

    input = ceil((len(system) + len(prompt)) / 4) + 765 if an image is attached;
    output = max(1, ceil(len(text) / 4)). A rough stand-in for real tokenizers (about 4 characters per
    English token; 765 tokens for one high-detail 512-px-tiled image in OpenAI's accounting).
    """
    n_in = math.ceil((len(system) + len(prompt)) / SIM_CHARS_PER_TOKEN) + (SIM_IMAGE_TOKENS if has_image else 0)
    n_out = max(1, math.ceil(len(text) / SIM_CHARS_PER_TOKEN))
    return n_in, n_out


def truncate_to_tokens(text: str, max_output_tokens: int) -> tuple[str, bool]:
    """Cut ``text`` to at most ``max_output_tokens`` simulated tokens; return ``(text, truncated)``."""
    limit = max(0, int(max_output_tokens)) * SIM_CHARS_PER_TOKEN
    if len(text) <= limit:
        return text, False
    return text[:limit], True


def simulate_answer(
    prompt: str,
    image_id: str | None,
    model: str,
    seed: int,
    max_output_tokens: int,
    *,
    has_image: bool,
    system: str = "",
    key: str | None = None,
) -> tuple[str, int, int, bool]:
    """One simulated completion: ``(text, input_tokens, output_tokens, truncated)``.

    The text comes from :func:`respond`, is cut to ``max_output_tokens`` (then ``truncated`` is True,
    i.e. finish reason ``length`` / ``max_tokens`` / ``MAX_TOKENS``), and usage is :func:`simulated_usage`
    of the returned text. Shared by the simulated provider and the fake servers so they agree exactly.
    """
    text = respond(prompt, image_id, model, seed, key=key)
    text, truncated = truncate_to_tokens(text, max_output_tokens)
    n_in, n_out = simulated_usage(prompt, has_image, text, system)
    if truncated:
        n_out = int(max_output_tokens)
    return text, n_in, n_out, truncated
