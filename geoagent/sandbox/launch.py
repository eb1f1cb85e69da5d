"""Start the local fake APIs a campaign file asks for, and point the campaign at them.

A URL whose host ends in ``.sandbox.invalid`` (a reserved top-level domain that never resolves) names a
local fake instead of a real API::

    base_url = "http://openai.sandbox.invalid/v1"                 # OpenAI-compatible Chat Completions fake
    base_url = "http://anthropic.sandbox.invalid"                 # Anthropic Messages fake
    base_url = "http://gemini.sandbox.invalid"                    # Gemini generateContent fake
    wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"    # Wikidata Action API fake
    nominatim_url = "http://nominatim.sandbox.invalid"            # Nominatim fake

:func:`launch` serves each named fake in-process on 127.0.0.1, rewrites those URLs in a copy of the config
and gives the local hosts fast rate limits. So a dry run, the demo or an offline replication runs through
exactly the code path of a real campaign (HTTP client, providers, clients, queues, ledger); only the host
differs. The LLM fakes answer through :mod:`geoagent.sandbox.responders` (deterministic, seeded by the
campaign seed); the Wikidata and Nominatim fakes know the places of a :class:`~geoagent.sandbox.gazetteer.Gazetteer`
(default: built from the campaign's release folder, ladder coordinates synthetic).
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from geoagent.sandbox.server import serve

SANDBOX_SUFFIX = ".sandbox.invalid"
FAKES = ("openai", "anthropic", "gemini", "wikidata", "nominatim")
#: local fakes are limited only by the CPU
LOCAL_HOST_POLICY = {"rate": 5000.0, "period_s": 1.0, "concurrency": 64, "max_attempts": 5,
                     "backoff_base_s": 0.05, "backoff_max_s": 1.0, "timeout_s": 30.0}


def fake_name(url: str) -> str | None:
    """``"openai"`` for ``http://openai.sandbox.invalid/v1``; None for a real URL.

    Raises
    ------
    ValueError
        The host ends in ``.sandbox.invalid`` but names no known fake.
    """
    host = urlsplit(url).hostname or ""
    if not host.endswith(SANDBOX_SUFFIX):
        return None
    name = host[: -len(SANDBOX_SUFFIX)]
    if name not in FAKES:
        raise ValueError(f"unknown sandbox host {host!r}; known: {', '.join(f + SANDBOX_SUFFIX for f in FAKES)}")
    return name


def _walk_urls(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj] if SANDBOX_SUFFIX in obj else []
    if isinstance(obj, dict):
        return [u for v in obj.values() for u in _walk_urls(v)]
    if isinstance(obj, (list, tuple)):
        return [u for v in obj for u in _walk_urls(v)]
    return []


def requested_fakes(cfg: Any) -> list[str]:
    """The fakes ``cfg`` names, in :data:`FAKES` order."""
    urls = [m.base_url for m in cfg.models if m.base_url] + _walk_urls(cfg.tasks)
    names = {n for n in (fake_name(u) for u in urls) if n}
    return [n for n in FAKES if n in names]


def _rewrite(url: str, bases: dict[str, str]) -> str:
    name = fake_name(url)
    if name is None:
        return url
    local = urlsplit(bases[name])
    parts = urlsplit(url)
    return urlunsplit((local.scheme, local.netloc, parts.path, parts.query, parts.fragment))


def _rewrite_obj(obj: Any, bases: dict[str, str]) -> Any:
    if isinstance(obj, str):
        return _rewrite(obj, bases) if SANDBOX_SUFFIX in obj else obj
    if isinstance(obj, dict):
        return {k: _rewrite_obj(v, bases) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_rewrite_obj(v, bases) for v in obj]
    return obj


def rewrite_config(cfg: Any, bases: dict[str, str]) -> Any:
    """A copy of ``cfg`` with every sandbox URL pointing at ``bases[name]`` and fast local host limits."""
    from geoagent.config import HostSection

    models = [m.model_copy(update={"base_url": _rewrite(m.base_url, bases)}) if m.base_url else m for m in cfg.models]
    hosts = dict(cfg.hosts)
    for name, base in bases.items():
        if name in ("wikidata", "nominatim"):  # model hosts keep the model's own rate and concurrency
            hosts.setdefault(urlsplit(base).netloc, HostSection(**LOCAL_HOST_POLICY))
    tasks = _rewrite_obj(copy.deepcopy(cfg.tasks), bases)
    return cfg.model_copy(update={"models": models, "hosts": hosts, "tasks": tasks})


def _app(name: str, cfg: Any, gazetteer: Any) -> Any:
    if name in ("openai", "anthropic", "gemini"):
        import importlib

        module = importlib.import_module(f"geoagent.sandbox.llm_{name}")
        return module.make_app(require_auth=False, seed=cfg.campaign.seed)
    if name == "wikidata":
        from geoagent.sandbox import wikidata

        return wikidata.make_app(gazetteer)
    from geoagent.sandbox import nominatim

    return nominatim.make_app(gazetteer, min_interval_s=0.0)


@contextlib.asynccontextmanager
async def launch(cfg: Any, *, gazetteer: Any = None) -> AsyncIterator[Any]:
    """Serve the fakes ``cfg`` names and yield the rewritten config (``cfg`` itself when it names none).

    Parameters
    ----------
    cfg : CampaignConfig
    gazetteer : Gazetteer or path, optional
        Places known to the Wikidata/Nominatim fakes; default :meth:`Gazetteer.from_release` of
        ``cfg.release_dir()``.

    Raises
    ------
    FileNotFoundError
        A Wikidata/Nominatim fake is needed, no gazetteer was given and the release folder is missing.
    """
    names = requested_fakes(cfg)
    if not names:
        yield cfg
        return
    if gazetteer is None and ("wikidata" in names or "nominatim" in names):
        from geoagent.sandbox.gazetteer import Gazetteer

        gazetteer = Gazetteer.from_release(cfg.release_dir(), seed=cfg.campaign.seed)
    async with contextlib.AsyncExitStack() as stack:
        bases = {name: await stack.enter_async_context(serve(_app(name, cfg, gazetteer))) for name in names}
        yield rewrite_config(cfg, bases)
