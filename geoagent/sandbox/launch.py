"""Start the local fake APIs a campaign file asks for, and point the campaign at them.

A URL whose host ends in ``.sandbox.invalid`` (a reserved top-level domain that never resolves) names a
local fake instead of a real API::

    base_url = "http://openai.sandbox.invalid/v1"                 # OpenAI-compatible Chat Completions fake
    base_url = "http://anthropic.sandbox.invalid"                 # Anthropic Messages fake
    base_url = "http://gemini.sandbox.invalid"                    # Gemini generateContent fake
    wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"    # Wikidata Action API fake
    nominatim_url = "http://nominatim.sandbox.invalid"            # Nominatim fake
    overpass = "http://overpass.sandbox.invalid/api"               # [crawl.endpoints]: Overpass API fake
    wdqs = "http://wdqs.sandbox.invalid/sparql"                    # [crawl.endpoints]: WDQS SPARQL fake
    pageviews = "http://pageviews.sandbox.invalid"                 # [crawl.endpoints]: Wikimedia pageviews fake
    mapillary = "http://mapillary.sandbox.invalid"                 # [crawl.endpoints]: Mapillary Graph API fake
                                                                   # (its thumbnail CDN is on the same local host)

:func:`launch` serves each named fake in-process on 127.0.0.1, rewrites those URLs in a copy of the config
and gives the local hosts fast rate limits (the crawl's APIs keep the concurrency of their usage policy,
which their fakes enforce per client: Overpass 2 slots, WDQS one query at a time). So a dry run, the demo,
a crawl tried by hand or an offline replication runs through exactly the code path of a real campaign (HTTP
client, providers, clients, queues, ledger); only the host differs. The LLM fakes answer through :mod:`geoagent.sandbox.responders` (deterministic, seeded by the
campaign seed); the Wikidata and Nominatim fakes know the places of a :class:`~geoagent.sandbox.gazetteer.Gazetteer`
(default: built from the campaign's release folder, ladder coordinates synthetic). The crawl's fakes
(Overpass, WDQS, pageviews, Mapillary) serve the sandbox world of ``python run.py demo``
(:func:`geoagent.demo.demo_world`: "Sandbox City" and "Mirror Bay" pass the city screener, "Sprawl Town"
does not); the Mapillary fake accepts any token of the form ``MLY|...``. Every request a fake served in
this process is counted per fake name (:func:`request_counts`).
"""

from __future__ import annotations

import collections
import contextlib
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit, urlunsplit

from aiohttp import web

from geoagent.sandbox.server import serve

SANDBOX_SUFFIX = ".sandbox.invalid"
#: the crawl's APIs, served from the sandbox world (:func:`geoagent.demo.demo_world`)
WORLD_FAKES = ("overpass", "wdqs", "pageviews", "mapillary")
FAKES = ("openai", "anthropic", "gemini", "wikidata", "nominatim") + WORLD_FAKES
#: local fakes are limited only by the CPU
LOCAL_HOST_POLICY = {"rate": 5000.0, "period_s": 1.0, "concurrency": 64, "max_attempts": 5,
                     "backoff_base_s": 0.05, "backoff_max_s": 1.0, "timeout_s": 30.0}

#: requests served per fake name by every :func:`launch` of this process
_REQUESTS: collections.Counter[str] = collections.Counter()


def request_counts() -> dict[str, int]:
    """Requests the sandbox fakes started by :func:`launch` have served in this process so far, per fake
    name (``{"overpass": 12, "openai": 40, ...}``; a fake never started is absent). Counted server-side, at
    arrival, whatever the answer; a resumed run that makes no call leaves these numbers unchanged."""
    return dict(_REQUESTS)


def _counting(name: str) -> Any:
    @web.middleware
    async def count(request: web.Request, handler: Any) -> Any:
        _REQUESTS[name] += 1
        return await handler(request)

    return count


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


#: the fakes that answer as a model (their answers come from the simulator, :mod:`geoagent.sandbox.responders`)
MODEL_FAKES = ("openai", "anthropic", "gemini")


#: a crawl's auditors, by their ``[crawl.<role>]`` table: the image audit (vision model) and the referenceability
#: auditor (text model; it also answers the sensitive-place screen, ``[crawl.referenceability] sensitive_screen``)
CRAWL_AUDITOR_ROLES = ("image_audit", "referenceability")


def simulated_auditors(cfg: Any) -> dict[str, str]:
    """A crawl's auditors answered by geoagent's simulator: ``{role: model name}`` (roles of
    :data:`CRAWL_AUDITOR_ROLES`), ``{}`` for another campaign kind or none. An auditor's model that is a
    ``[[models]]`` entry answers through that entry (:func:`geoagent.crawl.stages.build_crawl_services`), so it is
    simulated when :func:`simulated_models` names the entry (provider ``"simulated"`` or a sandbox model fake's
    ``base_url``); any other is answered by ``[crawl.<role>] provider``, simulated when that is ``"simulated"``
    (the default). Pass the config as written, as for :func:`simulated_models`."""
    if getattr(getattr(cfg, "campaign", None), "kind", None) != "crawl":
        return {}
    from geoagent.crawl.settings import CrawlSettings  # importing it registers the [crawl] table's model

    try:
        crawl = cfg.section("crawl")
    except Exception:  # a [crawl] table that does not validate: the run refuses it, nothing was answered
        return {}
    if not isinstance(crawl, CrawlSettings):
        return {}
    entries = {m.name for m in getattr(cfg, "models", None) or []}
    sim_entries = set(_simulated_entries(cfg))
    out = {}
    for role in CRAWL_AUDITOR_ROLES:
        part = getattr(crawl, role, None)
        model = getattr(part, "model", None)
        if not isinstance(model, str):
            continue
        if (model in sim_entries) if model in entries else getattr(part, "provider", None) == "simulated":
            out[role] = model
    return out


def simulated_models(cfg: Any) -> list[str]:
    """Names of the models of ``cfg`` whose answers come from geoagent's simulator: the ``[[models]]`` with
    ``provider = "simulated"`` or a ``base_url`` on a model fake of the sandbox (``openai.sandbox.invalid`` ...),
    which answers through the same responders, then a crawl's simulated auditors not among them
    (:func:`simulated_auditors`: ``[crawl.image_audit]`` / ``[crawl.referenceability]`` with provider
    ``"simulated"``, the default). Pass the config as written (before :func:`rewrite_config` puts the fakes'
    local ports in). A fake the user started on a port of its own is not recognised (its URL is a plain
    ``http://127.0.0.1:PORT``)."""
    out = _simulated_entries(cfg)
    out += [m for m in dict.fromkeys(simulated_auditors(cfg).values()) if m not in out]
    return out


def provider_kinds(cfg: Any) -> dict[str, str]:
    """``[[models]]`` name -> what answers it (:data:`geoagent.constants.PROVIDER_KINDS`): ``"simulated"`` for the
    models :func:`simulated_models` names among the entries (provider ``"simulated"``, or a sandbox model fake's
    ``base_url``), ``"replay"`` for a ``replay`` model, ``"model"`` for any other. Pass the config as written (the
    launched one has the fakes' local ports instead of their ``*.sandbox.invalid`` names). The model caller records
    each answer's kind with it (``request_meta.provider_kind``), so an export made after the config changed still
    says which stored answers were simulated."""
    from geoagent import constants as C

    sim = set(_simulated_entries(cfg))
    out = {}
    for m in getattr(cfg, "models", None) or []:
        if m.name in sim:
            out[m.name] = C.PROVIDER_KIND_SIMULATED
        elif getattr(m, "provider", None) == "replay":
            out[m.name] = C.PROVIDER_KIND_REPLAY
        else:
            out[m.name] = C.PROVIDER_KIND_MODEL
    return out


def _simulated_entries(cfg: Any) -> list[str]:
    out = []
    for m in getattr(cfg, "models", None) or []:
        if getattr(m, "provider", None) == "simulated":
            out.append(m.name)
            continue
        try:
            if m.base_url and fake_name(m.base_url) in MODEL_FAKES:
                out.append(m.name)
        except ValueError:
            continue
    return out


def geoverify_simulated_why() -> str:
    """Why a simulated model's GeoVerify read-out means nothing (one sentence, no final period): its verdicts ignore
    where the photo was taken; only the gray field's share of no differs (:data:`geoagent.geoverify.simulate.BLANK_P_YES`)."""
    from geoagent.geoverify.simulate import BLANK_P_YES

    no_pct = round(100 * (1 - BLANK_P_YES))
    return ("Simulated GeoVerify verdicts do not depend on where the photo was taken (a signal claim and a decoy claim "
            f"get the same chance of yes; only the gray field differs: answered no {no_pct} % of the time), so d' "
            "between signal and decoys is 0 only in expectation: sampling noise moves it, and an interval may exclude 0")


def simulated_note(names: list[str] | tuple[str, ...], *, task: str | None = None) -> str:
    """The warning a report and the run's summary carry when ``names`` (:func:`simulated_models`) answered:
    their figures describe the simulator, not a model. ``task="geohint"`` adds why its echo rate is high,
    ``task="geoverify"`` why its d' is 0 only in expectation (:data:`geoagent.geoverify.simulate.BLANK_P_YES`), and
    ``task="crawl"`` what a simulated auditor decided."""
    if task == "geohint":
        from geoagent.geohint.simulate import ECHO_P, WARN_ECHO_FACTOR

        why = (" A simulated GeoHint answer names the site's landmark with a fixed chance per site and model, else "
               f"repeats the hinted place with probability {ECHO_P:.0%} ({ECHO_P * WARN_ECHO_FACTOR:.0%} under the "
               "warning) or names another ladder point; for a site it cannot tell (an image and hint it was not "
               "given) it always repeats the hint (echo 100 %). Its echo and hit rates say nothing about a model.")
    elif task == "geoverify":
        why = (f" {geoverify_simulated_why()}; {'its' if len(names) == 1 else 'their'} H, F, d', c and delta_1 say "
               "nothing about a model.")
    elif task == "crawl":
        why = (" A crawl's simulated auditors decide which images are usable, how familiar each reference point is "
               "and which places are sensitive, so its sites' images and context ladders are the simulator's too; "
               "set [crawl.image_audit] / [crawl.referenceability] provider (or the [[models]] entry of that name) "
               "to a real one for a benchmark.")
    else:
        why = ""
    from geoagent.notes import SIMULATED_BANNER  # the words a console output says once (geoagent.notes)

    return (f"{SIMULATED_BANNER}{', '.join(names)} answered from geoagent's simulator (provider \"simulated\" or one of "
            "geoagent's sandbox model fakes), not from a model; every figure of "
            f"{'it' if len(names) == 1 else 'them'} describes the simulator.{why} Point [[models]] at a real "
            "provider for results.")


def _walk_urls(obj: Any) -> list[str]:
    if isinstance(obj, str):
        return [obj] if SANDBOX_SUFFIX in obj else []
    if isinstance(obj, dict):
        return [u for v in obj.values() for u in _walk_urls(v)]
    if isinstance(obj, (list, tuple)):
        return [u for v in obj for u in _walk_urls(v)]
    return []


class _Served(NamedTuple):
    """A fake :func:`launch` serves: its ``name`` and the host ``label`` its answers are cached under
    (:func:`as_written_url`): the fake's name for the crawl's world fakes (one fixed world),
    ``<name>-<gazetteer fingerprint>`` for the Wikidata and Nominatim fakes."""

    name: str
    label: str


#: local base URL -> the fake served there, for the fakes :func:`launch` serves right now (this process)
_SERVED: dict[str, _Served] = {}


def served_fake_name(url: str) -> str | None:
    """The fake ``url`` reaches: :func:`fake_name` of a ``*.sandbox.invalid`` URL, or the name of a fake that
    :func:`launch` serves in this process at the URL's local base (a config after :func:`rewrite_config`);
    None for anything else, a ``*.sandbox.invalid`` host naming no fake included. Raises nothing."""
    try:
        name = fake_name(url)
    except ValueError:
        return None
    if name:
        return name
    netloc = urlsplit(url).netloc
    for base, served in list(_SERVED.items()):
        if netloc and urlsplit(base).netloc == netloc:  # rewrite_config keeps the path, swaps the host
            return served.name
    return None


def as_written_url(url: str) -> str:
    """``url`` as the config wrote it: a URL that reaches a fake :func:`launch` serves in this process (at a local
    port that changes with every launch) gets that fake's ``http://<name>.sandbox.invalid`` base back, path and
    query kept; any other URL is returned as it is. For keys that must outlive the process: a response cache keyed
    on the local port missed every answer of an earlier run (walk28 #2: a resumed crawl asked the pageviews fake
    for all 440 windows again). Raises nothing."""
    netloc = urlsplit(url).netloc
    if not netloc or not _SERVED:
        return url
    for base, served in list(_SERVED.items()):
        if urlsplit(base).netloc == netloc:
            parts = urlsplit(url)
            return urlunsplit(("http", f"{served.label}{SANDBOX_SUFFIX}", parts.path, parts.query, parts.fragment))
    return url


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
    """A copy of ``cfg`` with every sandbox URL pointing at ``bases[name]`` and fast local host limits.

    ``bases``: fake name (:data:`FAKES`) -> its local base URL. Each fake's host gets :data:`LOCAL_HOST_POLICY`
    (the crawl APIs' fakes with their usage policy's concurrency) unless the file limits that host itself
    (``[hosts]``) or, for a crawl API, paces it with ``[crawl.policies.<api>]``: a user trying a pace offline
    gets that pace. Raises nothing; ``cfg`` is not modified.
    """
    from geoagent.config import HostSection

    models = [m.model_copy(update={"base_url": _rewrite(m.base_url, bases)}) if m.base_url else m for m in cfg.models]
    hosts = dict(cfg.hosts)
    crawl_section = cfg.tasks.get("crawl")
    own_policies = crawl_section.get("policies") if isinstance(crawl_section, dict) else None
    own_policies = own_policies if isinstance(own_policies, dict) else {}
    for name, base in bases.items():
        if name in ("wikidata", "nominatim"):  # model hosts keep the model's own rate and concurrency
            hosts.setdefault(urlsplit(base).netloc, HostSection(**LOCAL_HOST_POLICY))
        elif name in WORLD_FAKES and name not in own_policies:
            # a crawl API the file paces itself ([crawl.policies.<api>]) keeps that pace against its fake: a
            # [hosts] entry would win over it (geoagent.crawl.stages) and the offline run would not show it
            hosts.setdefault(urlsplit(base).netloc, HostSection(**_world_policy(name)))
    tasks = _rewrite_obj(copy.deepcopy(cfg.tasks), bases)
    crawl = tasks.get("crawl")
    if "mapillary" in bases and isinstance(crawl, dict):
        # thumbnails come from the Mapillary fake's own host: the crawl's "thumbnails" policy (the CDN's
        # usage policy, 20/s) would slow it down, so it gets the local limits unless the file sets one
        policies = crawl.setdefault("policies", {})
        if isinstance(policies, dict):
            policies.setdefault("thumbnails", _world_policy("mapillary"))
    return cfg.model_copy(update={"models": models, "hosts": hosts, "tasks": tasks})


def _world_policy(name: str) -> dict[str, Any]:
    """:data:`LOCAL_HOST_POLICY` with the concurrency of the API's usage policy (its fake enforces it)."""
    from geoagent.crawl.settings import DEFAULT_POLICIES

    limit = DEFAULT_POLICIES.get(name, {}).get("concurrency", LOCAL_HOST_POLICY["concurrency"])
    return {**LOCAL_HOST_POLICY, "concurrency": min(int(limit), int(LOCAL_HOST_POLICY["concurrency"]))}


def _app(name: str, cfg: Any, gazetteer: Any, world_apps: dict[str, Any]) -> Any:
    if name in WORLD_FAKES:
        return world_apps[name]
    if name in ("openai", "anthropic", "gemini"):
        import importlib

        module = importlib.import_module(f"geoagent.sandbox.llm_{name}")
        return module.make_app(require_auth=False, seed=cfg.campaign.seed)
    if name == "wikidata":
        from geoagent.sandbox import wikidata

        return wikidata.make_app(gazetteer)
    from geoagent.sandbox import nominatim

    return nominatim.make_app(gazetteer, min_interval_s=0.0)


def campaign_release_dir(cfg: Any) -> Path:
    """The release-form folder a campaign plans from: its task section's ``release_dir`` (``[geohint]`` or
    ``[geoverify]``, e.g. a crawl's output folder) when it names one, else ``cfg.release_dir()``
    (``$GEOAGENT_RELEASE``, ``[paths] release_dir`` or the default)."""
    kind = cfg.campaign.kind
    if kind in ("geohint", "geoverify"):
        sec = cfg.section(kind)  # the raw table when the kind's settings model is not registered yet
        own = sec.get("release_dir") if isinstance(sec, dict) else getattr(sec, "release_dir", None)
        if own:
            return Path(own).expanduser()
    return cfg.release_dir()


@contextlib.asynccontextmanager
async def launch(cfg: Any, *, gazetteer: Any = None) -> AsyncIterator[Any]:
    """Serve the fakes ``cfg`` names and yield the rewritten config (``cfg`` itself when it names none).

    Parameters
    ----------
    cfg : CampaignConfig
    gazetteer : Gazetteer or path, optional
        Places known to the Wikidata/Nominatim fakes; default :meth:`Gazetteer.from_release` of the folder
        the campaign plans from (:func:`campaign_release_dir`).

    The crawl's fakes (:data:`WORLD_FAKES`) serve :func:`geoagent.demo.demo_world` (fixed seed
    :data:`geoagent.demo.WORLD_SEED`), fresh for each launch.

    Raises
    ------
    FileNotFoundError
        A Wikidata/Nominatim fake is needed, no gazetteer was given and the release folder is missing.
    """
    names = requested_fakes(cfg)
    if not names:
        yield cfg
        return
    if "wikidata" in names or "nominatim" in names:
        from geoagent.sandbox.gazetteer import Gazetteer, load_gazetteer

        # loaded once here (a path as the fakes load it: seed 0), for the fakes and for their cache label
        gazetteer = (Gazetteer.from_release(campaign_release_dir(cfg), seed=cfg.campaign.seed) if gazetteer is None
                     else load_gazetteer(gazetteer))
    else:
        gazetteer = None
    world_apps: dict[str, Any] = {}
    if any(n in WORLD_FAKES for n in names):
        from geoagent.demo import demo_world
        from geoagent.sandbox.city import make_apps

        world_apps = make_apps(demo_world())
    async with contextlib.AsyncExitStack() as stack:
        bases = {}
        for name in names:
            app = _app(name, cfg, gazetteer, world_apps)
            app.middlewares.insert(0, _counting(name))  # outermost: counts injected faults too
            bases[name] = await stack.enter_async_context(serve(app))
        fp = gazetteer.fingerprint() if gazetteer is not None else None
        served = {base: _Served(name, f"{name}-{fp}" if fp and name in ("wikidata", "nominatim") else name)
                  for name, base in bases.items()}
        _SERVED.update(served)
        try:
            yield rewrite_config(cfg, bases)
        finally:
            for base in served:
                _SERVED.pop(base, None)
