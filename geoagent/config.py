"""Campaign configuration: one TOML file, validated at load with errors that name the key and expected type.

Issue 2 point 8. A campaign file has these sections (see ``geoagent/configs/*.toml`` for complete examples)::

    [campaign]   name (a safe file name), kind = geoverify | geohint | crawl | generic, seed, description,
                 contact (for the HTTP User-Agent)
    [paths]      queues, state, release_dir         (env GEOAGENT_QUEUES / GEOAGENT_STATE / GEOAGENT_RELEASE win;
                 a models[].replay.path under the release folder moves with it: CampaignConfig.replay_path)
    [budget]     cap_usd, reserve = "worst_case", input_estimate_factor (1 to 1000)
    [[models]]   name, provider, model, base_url, api_key_env (the variable NAME, never the key), prices in
                 USD per 1M input/output tokens (0 to 1,000,000; both required for openai/anthropic/gemini on a host that is not
                 a local server, :func:`is_local_host`; 0 written out for a free one), max_output_tokens,
                 temperature, concurrency,
                 rate = {requests, period_s}, sampling_rate, seed, timeout_s, connect_timeout_s (s),
                 max_attempts, replay = {...}, params = {...}
    [hosts."api.example.org"]  rate, period_s, concurrency, timeout_s, connect_timeout_s, ... (non-model APIs:
                 Mapillary, Wikidata, ...; a host the campaign never calls warns at load, :func:`campaign_hosts`)
    [queue]      max_attempts, visibility_timeout_s, backoff_base_s, backoff_max_s, watch_probe_after_s,
                 watch_probe_max_s (s; ``run --watch``: how long a stage waits for an unreachable host before
                 probing it again, doubling up to the max), task_timeout_s (s; the most one task may be
                 handled before it is cancelled and retried; unset: derived from the HTTP policies), model_pacing
                 = "plan" | "throughput" (several models: keep each model's share of its work even, or let each
                 run at its own limits)
    [images]     missing = "error" | "placeholder": what a GeoVerify or GeoHint plan may do with an image that has
                 no file under its image_root when a model on a real provider would see it (ImagesSection,
                 :mod:`geoagent.image_files`)
    [geoverify], [geohint], [crawl], [generic]   task sections: free tables until a task module registers a pydantic
                 model for them with :func:`register_section`; then they are validated like the rest.

Values are validated strictly (a quoted ``"0.15"`` is not a number; integers are accepted where a float is
expected). Every error is reported as ``<file>: <key path>: expected <type>, got <value>``, e.g.
``campaign.toml: models[1].price_input_usd_per_mtok: expected a number, got 'cheap'``; an unknown key names the
closest key of its table (``models[0].max_ouput_tokens: unknown key (did you mean 'max_output_tokens'?)``,
:func:`did_you_mean`). A check that states a whole problem raises :class:`ConfigProblem` and reads
``<file>: <key path>: <problem>`` (``models: model name 'a' appears twice; ...``), not wrapped in that template.

Relative paths in ``[paths]`` are taken relative to the working directory (like the default roots).
Prices, rates and token limits come from each provider's public pricing/limits pages; the 1/3 sampling
rate for an expensive model follows the paper (Sec. 6, claude-opus-5 sampled at one third the rate).
"""

from __future__ import annotations

import difflib
import functools
import hashlib
import math
import ipaddress
import types
import os
import re
import tomllib
import unicodedata
import warnings
from collections.abc import Iterable, Mapping, Sequence, Sized
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from geoagent import constants as C
# the address rules live in geoagent.addresses; named here too, where callers and tests have long imported them
from geoagent.addresses import LOCAL_NETWORKS, is_public_address, local_address  # noqa: F401
from geoagent.paths import home_expanded, safe_name
from geoagent.runtime.errors import PicklableError
from geoagent.textfmt import one_line_text

PROVIDER_KINDS = ("openai", "anthropic", "gemini", "replay", "simulated")
CAMPAIGN_KINDS = ("geoverify", "geohint", "crawl", "generic")
TASK_SECTIONS = ("geoverify", "geohint", "crawl", "generic")
#: tokens reserved for one image when estimating input size (the provider base uses the same budget)
IMAGE_INPUT_TOKENS = 1600
#: ``[budget] input_estimate_factor`` when the file does not set it (the reservation's input-token multiplier)
DEFAULT_INPUT_ESTIMATE_FACTOR = 1.25
#: header names that carry credentials; they may not appear in ``models[].headers`` (the manifest shows those)
#: parameter names that carry credentials; they may not appear in ``models[].params`` (stored and hashed)
_CREDENTIAL_PARAMS = {"api_key", "apikey", "key", "access_token", "token", "secret", "password", "authorization",
                      "auth", "bearer", "client_secret"}
_AUTH_HEADERS = {"authorization", "proxy-authorization", "x-api-key", "api-key", "x-goog-api-key", "cookie"}


def url_problem(url: str, *, example: str, where_key: str) -> str | None:
    """What is wrong with an endpoint URL of the config, as the tail of ``expected ...``; None when it is fine.

    A URL must be ``http`` or ``https`` with a host, and carry no credentials: no ``user:password@``, no path
    segment that is a pasted key (:func:`geoagent.secrets.looks_like_pasted_key`), and no
    query parameter named like a key (``key``, ``api_key``, ``token``, ``*_key``, ...) or whose value looks
    like one (:func:`geoagent.secrets.looks_like_secret`). The config is written to ``manifest.json`` and
    URLs appear in status lines and error messages, so a key there would be stored and shown verbatim.

    Parameters
    ----------
    url : str
        The configured URL.
    example : str
        A valid URL for this key, shown in the message.
    where_key : str
        Where the key belongs instead (e.g. ``"put the key in the variable api_key_env names"``).

    Returns
    -------
    str or None
        E.g. ``"a URL without credentials in its query (...)"``; the message never repeats the URL.
    """
    if not isinstance(url, str):
        return f"an http(s) URL such as {example!r}"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"an http(s) URL such as {example!r}"
    if parts.username or parts.password:
        return f"a URL without credentials ({where_key})"
    from urllib.parse import unquote

    from geoagent.secrets import looks_like_pasted_key

    # a key pasted into the path (https://api.openai.com/sk-proj-.../v1; break34 config #1): the segments that begin
    # as a provider's keys do and are random, not words, so account ids (Cloudflare's 32 hex) and deployment names pass
    if any(looks_like_pasted_key(unquote(seg)) for seg in parts.path.split("/")):
        return f"a URL without credentials in its path ({where_key})"
    if parts.query:
        from urllib.parse import parse_qsl

        from geoagent.secrets import looks_like_secret

        for k, val in parse_qsl(parts.query, keep_blank_values=True):
            name = k.lower().replace("-", "_")
            if name in _CREDENTIAL_PARAMS or name.endswith(("_key", "_token", "_secret")) or looks_like_secret(val):
                return f"a URL without credentials in its query ({where_key})"
    return None


#: provider kinds whose calls are billed by their API (replay and simulated never cost money)
BILLING_PROVIDERS = ("openai", "anthropic", "gemini")
#: API variable each billing provider's own API host reads the key from when ``api_key_env`` is not set
#: (the providers' documented names: OpenAI and Anthropic SDKs, Google AI Studio's Gemini API)
DEFAULT_KEY_ENVS = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "gemini": "GEMINI_API_KEY"}
#: host names that never reach a paid API: the loopback name, and the reserved top-level domains of RFC 2606
#: / RFC 6761 (``.test``, ``.invalid``, ``.example``, ``.localhost``), mDNS (``.local``), home networks
#: (``.home.arpa``, RFC 8375), ICANN's private-use ``.internal`` and the common router suffix ``.lan``; the
#: sandbox fakes (``*.sandbox.invalid``, :mod:`geoagent.sandbox.launch`) are under ``.invalid``
LOCAL_HOST_SUFFIXES = (".localhost", ".invalid", ".test", ".example", ".local", ".home.arpa", ".internal", ".lan")


#: one part of an IPv4 address as ``inet_aton`` reads it: decimal, octal (leading 0) or hex (0x)
_INET_ATON_PART = re.compile(r"0[xX][0-9a-fA-F]*|[0-9]+")


#: an HTTP field name (RFC 9110 section 5.1: a token)
_HTTP_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _host_address(hostname: str | None) -> bool | ipaddress.IPv4Address | ipaddress.IPv6Address:
    """How :func:`is_local_host` and :func:`is_non_public_host` read a URL's host name (no port): True for a name
    that is local by its text (``localhost``, :data:`LOCAL_HOST_SUFFIXES`, a single-label LAN name), False for an
    empty one, a public-looking name or dotted numbers no resolver reads, else the IP address it spells (a literal,
    or a dot-less number / dotted numbers in short, octal or hex form read as ``inet_aton`` reads them: review38
    #1, ``0x7f.1`` passed for a public name)."""
    import socket

    host = (hostname or "").strip().lower().rstrip(".").strip("[]")
    if not host:
        return False
    if host == "localhost" or host.endswith(LOCAL_HOST_SUFFIXES):
        return True
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        if ":" in host:
            return False
        numeric = all(_INET_ATON_PART.fullmatch(part) for part in host.split("."))
        if "." in host and not numeric:
            return False
        try:  # a number or dotted numbers (2130706433, 0x7f000001, 127.1, 0x7f.1, 0177.0.0.1) are an IPv4 address to
            # the resolver
            return ipaddress.IPv4Address(socket.inet_aton(host))
        except OSError:
            return not numeric  # a name with no dot is a LAN name; dotted numbers no resolver reads are no host


@functools.lru_cache(maxsize=256)  # a pure function of the name, asked per call (paid models, key masking)
def is_local_host(hostname: str | None) -> bool:
    """Whether ``hostname`` (from a URL, no port) names a local server rather than a paid API: the rule for a MODEL's
    ``base_url`` (no prices required, its key may be short, plain http allowed) and for the hosts a token may reach
    over plain http.

    Local: ``localhost``, single-label names without a dot (``my-gpu-box``: such a name resolves only on
    the LAN, through the hosts file, a search domain or mDNS, never to a public API), the reserved names of
    :data:`LOCAL_HOST_SUFFIXES` (``*.invalid`` covers the sandbox fakes, ``*.sandbox.invalid``), and the addresses of
    :data:`geoagent.addresses.LOCAL_NETWORKS` (:func:`~geoagent.addresses.local_address`): loopback (127.0.0.0/8,
    ::1), private use and link-local (10/8, 172.16/12, 192.168/16, 169.254/16, fc00::/7, fe80::/10: a vLLM or Ollama
    box on the LAN), 0.0.0.0/8 and the unspecified address, an IPv4-mapped address by the IPv4 address it carries.
    Every other name (``api.openai.com``, ``openrouter.ai``, a public IP) is not, and neither are shared CGNAT addresses
    (100.64.0.0/10), the documentation, benchmarking and reserved blocks, multicast, 6to4 or NAT64 addresses: a paid
    gateway may sit on a carrier's or a VPN's shared address (fixrev42 #2), or on a proxy's fake-IP block
    (198.18.0.0/15), so a model there must write its prices. The list is geoagent's own, not Python's
    ``is_private``, so the answer does not depend on the interpreter's patch release (crawl43 #4). A dot-less number
    (``1753672896``,
    ``0x68120007``) or dotted numbers in short, octal or hex form (``127.1``, ``0x7f.1``, ``0177.0.0.1``) are
    judged as the IPv4 address the resolver reads in them.

    Where a CONNECTION must not reach a non-public address (thumbnail URLs an API's answer names), the rule is
    :func:`is_non_public_host`, which counts every non-public address.
    """
    found = _host_address(hostname)
    if isinstance(found, bool):
        return found
    return local_address(found)


@functools.lru_cache(maxsize=256)
def is_non_public_host(hostname: str | None) -> bool:
    """Whether ``hostname`` (from a URL, no port) names a host a connection to untrusted URLs must not reach: every
    name :func:`is_local_host` counts local, and every address that is not public
    (:func:`geoagent.addresses.is_public_address`, by geoagent's own table
    :data:`~geoagent.addresses.NON_PUBLIC_NETWORKS`, the same under every Python version; fixnet43): besides
    loopback, private-network, link-local and unspecified, shared CGNAT addresses (100.64.0.0/10: a Tailscale peer,
    Alibaba Cloud's metadata service 100.100.100.200; security42 #1), protocol-assignment, reserved, documentation,
    benchmarking and multicast ranges, IPv6 outside 2000::/3, an IPv4-mapped or well-known-prefix NAT64 address
    carrying such an IPv4 address, and every IPv4-compatible, local-use NAT64, 6to4 or Teredo address. The rule for
    thumbnail URLs and their redirects (:mod:`geoagent.clients.mapillary`) and for whether the Graph API itself is
    local.

    A name is judged by its text only: a public name may still resolve to a private address (where that matters,
    judge the address connected to: :mod:`geoagent.runtime.public_net`).
    """
    found = _host_address(hostname)
    if isinstance(found, bool):
        return found
    return not is_public_address(found)


class ConfigError(PicklableError, ValueError):
    """The campaign file cannot be used. ``problems`` lists one ``key path: message`` line per error.

    Picklable (:class:`~geoagent.runtime.errors.PicklableError`): ``source`` and ``problems`` travel; a problem
    line names a key path and what was expected, never a value the file gave for a credential."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = [f"{source}: {p}" for p in problems]
        super().__init__(lines[0] if len(lines) == 1 else "\n".join([f"{source}: {len(lines)} problems"] + lines))


def header_safe(v: str) -> str:
    """``v`` when it holds no control character (a line break, tab, NUL): a text that goes into an HTTP header (the
    User-Agent's contact and tool name) cannot carry one (config38 #3: every call then failed inside aiohttp).

    Raises
    ------
    ConfigProblem
        Naming the problem; the value is not repeated.
    """
    if not v.isprintable():
        raise ConfigProblem("holds a control character (line break, tab, NUL); it goes into the HTTP User-Agent, "
                            "which cannot carry one")
    return v


def env_var_name(v: str) -> str:
    """``v`` when it is the NAME of an environment variable (letters, digits, ``_``, not starting with a digit, at
    most 128 characters) that does not look like a key or token itself (:func:`geoagent.secrets.looks_like_secret`);
    for ``api_key_env`` and ``[crawl.endpoints] mapillary_token_env``.

    Raises
    ------
    ValueError
        Anything else; the message never repeats the value (a key pasted there by mistake must not reach a log).
    """
    from geoagent.secrets import looks_like_secret

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,127}", v) or looks_like_secret(v):
        raise ValueError("the NAME of an environment variable (letters, digits, _), not the key itself")
    return v


def check_model_id(v: str) -> str:
    """``v`` if it can be a provider's model id, else ``ValueError`` naming what is expected (a field check of
    ``[[models]] model`` and the crawl's auditor ``model``). The id is sent as written and is part of every request
    key: an empty one fails every call at run time, one with spaces or a line break around it is "model not found" at
    the API. (Characters inside it are the provider's business; an Azure deployment name, which becomes a URL path
    segment, has its own check.)"""
    from geoagent.secrets import contains_pasted_key

    if not v.strip() or v != v.strip() or any(unicodedata.category(c) == "Cc" for c in v):
        raise ValueError("a model id as the provider names it, or with api_version the Azure deployment name "
                         "(non-empty, no spaces around it, no control characters)")
    if contains_pasted_key(v):  # it would go into every request key, the manifest and the reports
        raise ConfigProblem(f"{NOT_SHOWN}: API keys go in the environment or .env, named by api_key_env")
    return v


class ConfigProblem(ValueError):
    """Raised by a section's check whose message is a whole sentence about the problem (not the thing it
    expected): the error then reads ``<key path>: <message>``, without ``expected ..., got ...`` around it.
    A plain ``ValueError`` from a check names what was expected (``an http(s) URL such as ...``)."""


# ------------------------------------------------------------------------------------------------
# sections
# ------------------------------------------------------------------------------------------------


class _Section(BaseModel):
    # inf/nan (legal TOML) are refused in every number: an infinite period or timeout hangs, an infinite
    # input factor refuses every reservation
    model_config = ConfigDict(strict=True, extra="forbid", frozen=True, allow_inf_nan=False)


class ConfigWarning(UserWarning):
    """A campaign file loads but holds something that probably does not do what was meant."""


class SetupWarning(ConfigWarning):
    """A service the campaign uses is set up in a way that may lose its data (e.g. a Redis server without an
    append-only file); the CLI prints it like a :class:`ConfigWarning`, one ``warning: campaign NAME: ...``
    line on stderr."""


class InputWarning(ConfigWarning):
    """Rows of an input file the config names that decide nothing, or stored outputs set aside (e.g. a crawl's
    ``[crawl.image_audit] human_verdicts`` row naming no audited image, a ``[crawl.referenceability]
    review_verdicts`` row naming no rated candidate, each named as ``file:line``); the CLI prints it like a
    :class:`ConfigWarning`, one ``warning: ...`` line on stderr (the same text said twice in one process is
    printed once: Python's default warning filter)."""


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_num(v: Any) -> bool:
    return (isinstance(v, (int, float)) and not isinstance(v, bool)) and math.isfinite(v)


#: ``models[].params`` the providers read, each with its check and what it expects. Any other name is sent
#: to no API (it only changes the request key), so :func:`config_from_dict` warns about it.
KNOWN_PARAMS: dict[str, tuple[Any, str]] = {
    "max_output_tokens": (lambda v: _is_int(v) and v >= 1, "an integer >= 1 (output-token cap, reserved in full)"),
    "temperature": (lambda v: _is_num(v) and 0 <= v <= 2, "a number in [0, 2]"),
    "top_p": (lambda v: _is_num(v) and 0 <= v <= 1, "a number in [0, 1]"),
    "seed": (_is_int, "an integer"),
    "system": (lambda v: isinstance(v, str), "a string"),
    "json_mode": (lambda v: isinstance(v, bool), "true or false"),
    "detail": (lambda v: v in ("low", "high", "auto", "original"),
               "one of 'low', 'high', 'auto', 'original' (gpt-5.4 and later)"),
    # Gemini only: generationConfig.thinkingConfig.thinkingBudget (tokens; -1 dynamic, 0 thinking off on Flash)
    "thinking_budget": (lambda v: _is_int(v) and v >= -1, "an integer >= -1 (Gemini thinking tokens; -1 dynamic, 0 off)"),
}


#: what a name that becomes a file name must be (:func:`geoagent.paths.safe_name`)
SAFE_NAME_EXPECTED = ("a safe file name (letters, digits, _ . -; at most 128 characters; starting with a letter or "
                      "digit, not ending with a dot, not a name Windows reserves such as CON or NUL)")


def _no_pasted_key(v: Any) -> None:
    """Refuse a name or free text holding a word that is an API key pasted by mistake
    (:func:`geoagent.secrets.looks_like_pasted_key`): it would be written to the manifest, the reports and the
    folder names. The message does not show it.

    Raises
    ------
    ConfigProblem
    """
    from geoagent.secrets import contains_pasted_key

    if isinstance(v, str) and contains_pasted_key(v):  # anywhere: "key=sk-...", "sk-....", a URL's ?key=
        raise ConfigProblem(f"holds {NOT_SHOWN}: API keys go in the environment or .env, named by api_key_env")


class CampaignSection(_Section):
    """``[campaign]``: identity of the campaign (its name names the queue and state folders)."""

    name: str
    kind: Literal["geoverify", "geohint", "crawl", "generic"] = "generic"
    #: an integer >= 0: it seeds numpy generators (the GeoHint bootstrap), which take no negative seed (config38 #1:
    #: -1 passed the dry run and failed the report after every call was paid)
    seed: int = Field(0, ge=0)
    description: str = ""
    #: contact (URL or e-mail) put in the HTTP User-Agent; public APIs such as Nominatim ask for one
    contact: str = ""

    @field_validator("description", "contact")
    @classmethod
    def _no_key(cls, v: str) -> str:
        _no_pasted_key(v)  # recorded in the manifest (and the contact in every User-Agent)
        return v

    @field_validator("contact")
    @classmethod
    def _header_safe(cls, v: str) -> str:
        return header_safe(v)  # it goes into every User-Agent header (config38 #3)

    @field_validator("name")
    @classmethod
    def _safe(cls, v: str) -> str:
        _no_pasted_key(v)
        try:
            name = safe_name(v, what="campaign name")
        except ValueError:
            raise ValueError(SAFE_NAME_EXPECTED) from None
        if name.lower() == C.IMAGES_DIR:  # lower: a case-insensitive file system (macOS) folds the two together
            raise ConfigProblem(f"{name!r} is the folder under the state root that holds every crawl's photos "
                                f"(state/{C.IMAGES_DIR}/<site>/<id>.jpg); give the campaign another name")
        if name.lower() == C.DEMO_CONFIGS_DIR:  # the folder `run.py demo` writes its filled-in configs to
            raise ConfigProblem(f"{name!r} is the folder under the state root where `run.py demo` writes its configs "
                                f"(state/{C.DEMO_CONFIGS_DIR}/); give the campaign another name")
        return name


def expand_home(v: str | None) -> str | None:
    """A config path value with a leading ``~`` (or ``~user``) expanded to the home folder, as a shell does; None or
    empty unchanged. The one rule for every path key of a campaign file (``[paths]``, ``models[].replay.path``,
    ``[geohint] release_dir / prompts_dir / image_root``, ``[geoverify] release_dir / prompt_template /
    image_root``, ``[geohint.geocoder] cache_path``, ``[crawl.image_audit] human_verdicts``,
    ``[crawl.referenceability] review_verdicts``), applied when the
    config is read, so every reader sees the same folder (before, only ``[paths]`` and the sandbox launch expanded
    it: a campaign's own import looked for ``./~/...``). Relative paths stay relative (to the working directory).

    Environment variables are not expanded: a value naming one (``$HOME/x``, ``${USER}``) is refused, since taken
    as written it made a folder literally named ``$HOME``; a ``$`` that names no variable (``cost$5``) is kept.

    Raises
    ------
    ValueError
        The value names an environment variable (the config error then names the key).
    """
    if v:
        m = _ENV_VAR_IN_PATH.search(v)
        if m:
            raise ValueError(f"a path without environment variables ({m.group(0)} is not expanded in config paths: "
                             "it would be a folder of that literal name; write the path itself, a leading ~ for "
                             "the home folder, or set GEOAGENT_QUEUES / GEOAGENT_STATE / GEOAGENT_RELEASE for the "
                             "data roots)")
    out = os.path.expanduser(v) if v else v
    if out and out.startswith("~"):  # ~user of no user here: kept as written, and Path.expanduser raises later
        raise ValueError(f"{out.split('/', 1)[0]} names no home folder on this machine (no such user); write the path "
                         "in full")
    return out


def _unexpanded_hint(path: str) -> str:
    """For a config file not found: why, when its name holds what a shell expands but did not (a quoted ``~/x.toml``
    or ``'$HOME/x.toml'``: the shell leaves ``~`` and ``$NAME`` as written inside quotes, and geoagent takes the
    name as written); ``""`` otherwise."""
    if path.startswith("~"):
        return (f" (a leading ~ is the home folder only where the shell expands it, not inside quotes: "
                f"write {os.path.expanduser(path)!r} or leave the ~ unquoted)")
    m = _ENV_VAR_IN_PATH.search(path)
    if m:
        return (f" ({m.group(0)} is an environment variable the shell did not expand (single quotes?); "
                "geoagent takes the name as written)")
    return ""


#: ``$NAME`` or ``${NAME}`` in a config path (:func:`expand_home` refuses it)
_ENV_VAR_IN_PATH = re.compile(r"\$(?:\{[A-Za-z_][A-Za-z0-9_]*\}|[A-Za-z_][A-Za-z0-9_]*)")


class PathsSection(_Section):
    """``[paths]``: data roots. The environment (``GEOAGENT_QUEUES``/``_STATE``/``_RELEASE``) overrides these."""

    queues: str | None = None
    state: str | None = None
    release_dir: str | None = None

    @field_validator("queues", "state", "release_dir")
    @classmethod
    def _home(cls, v: str | None) -> str | None:
        # an empty or blank path was read as "not set" by some readers (the default folder) and as the working
        # directory by others: refused, naming the fix (carried from session 34)
        if v is not None and not v.strip():
            raise ValueError("a folder's path (to use the default folder, queues/, state/ or "
                             "../shared/reference/geocontext, leave the key out)")
        # "~/geo-state" is the home folder, as in a shell: taken literally it made a folder named "~" in the
        # working directory (which `rm -rf ~` would then "clean up"), while Polars, expanding it, wrote the
        # exports elsewhere and failed
        return expand_home(v)


#: the largest ``[budget] cap_usd`` (USD): the ledger counts integer nano-USD in 64-bit integers (SQLite and Redis),
#: which hold up to about $9.22e9; a round $9e9 leaves room for binary-float rounding of the conversion
MAX_CAP_USD = 9_000_000_000.0


#: the largest ``[budget] input_estimate_factor``: a factor near 1e308 made the reservation infinite, and every call
#: of the campaign was dead-lettered (OverflowError) instead of the file being refused; 1000 is far above any
#: estimate's real error (the default is 1.25)
MAX_INPUT_ESTIMATE_FACTOR = 1000.0
#: the largest ``models[].price_*_usd_per_mtok`` (USD per 1M tokens, i.e. $1 a token): no provider charges near it
#: (the dearest list prices are a few hundred USD per 1M tokens), and with it any reservation of up to 2^63 tokens
#: stays a finite number of USD (an input price of 1.7e308 made it infinite: every call dead-lettered)
MAX_PRICE_USD_PER_MTOK = 1_000_000.0


class BudgetSection(_Section):
    """``[budget]``: the hard cost cap in USD and how much each call reserves before it starts.

    ``reserve = "worst_case"``: estimated input tokens x ``input_estimate_factor`` x input price +
    ``max_output_tokens`` x output price (issue 2 point 7).
    """

    cap_usd: float = Field(ge=0, le=MAX_CAP_USD, allow_inf_nan=False)  # USD; at most MAX_CAP_USD (ledger integers)
    reserve: Literal["worst_case"] = "worst_case"
    input_estimate_factor: float = Field(default=DEFAULT_INPUT_ESTIMATE_FACTOR, ge=1.0, le=MAX_INPUT_ESTIMATE_FACTOR)


class RateSpec(_Section):
    """A rate limit: ``requests`` per ``period_s`` seconds."""

    requests: float = Field(gt=0)
    period_s: float = Field(default=1.0, gt=0)


class ReplaySection(_Section):
    """``models[].replay``: for the ``replay`` provider, the recorded JSONL file and how records are keyed.

    Release ``verify_raw.jsonl``: ``record_key_fields = ["trial_id", "model"]``, ``text_field = "raw"``,
    ``key_field = "replay_key"`` (the planner puts ``trial_id|model`` in the request meta). Our own
    recordings: defaults (records keyed by ``key`` = request key, text in ``text``, usage in ``usage``).
    """

    path: str | None = None
    #: name of the request ``meta`` entry holding the lookup key; absent: the request key
    key_field: str | None = None
    #: record fields joined with ``|`` to form each record's key
    record_key_fields: list[str] = Field(default_factory=lambda: ["key"], min_length=1)
    text_field: str = "text"
    #: record field holding the token usage; ``""`` reads input/output tokens from the record's top level
    usage_field: str = "usage"

    @field_validator("path")
    @classmethod
    def _home(cls, v: str | None) -> str | None:
        return expand_home(v)


#: seconds one attempt of a reasoning or thinking model may take when ``timeout_s`` is not set
#: (:func:`spends_hidden_reasoning`): the 600 s OpenAI's and Anthropic's Python SDKs wait by default
REASONING_TIMEOUT_S = 600.0


def _check_connect_timeout(connect_timeout_s: float | None, timeout_s: float) -> None:
    """``connect_timeout_s`` (when set) must not exceed ``timeout_s`` (the whole attempt's limit), seconds."""
    if connect_timeout_s is not None and connect_timeout_s > timeout_s:
        raise ValueError(f"connect_timeout_s <= timeout_s ({timeout_s:g} s: the connect timeout bounds the "
                         f"connection phase of one attempt), got connect_timeout_s = {connect_timeout_s:g}")


#: an Azure OpenAI ``api-version``: ``YYYY-MM-DD``, optionally ``-preview`` (``2024-10-21``, ``2025-04-01-preview``)
_AZURE_API_VERSION = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}(?:-preview)?")  # fullmatch: no trailing line break


class ModelConfig(_Section):
    """One ``[[models]]`` entry: a model reached through one provider."""

    name: str
    provider: Literal["openai", "anthropic", "gemini", "replay", "simulated"]
    model: str
    base_url: str | None = None
    api_key_env: str | None = None
    #: USD per 1M tokens; required (0 allowed) for a billing provider on a paid host (:func:`_impossible_campaign`),
    #: default 0 for local servers, replay and simulated models
    price_input_usd_per_mtok: float = Field(default=0.0, ge=0, le=MAX_PRICE_USD_PER_MTOK, allow_inf_nan=False)
    price_output_usd_per_mtok: float = Field(default=0.0, ge=0, le=MAX_PRICE_USD_PER_MTOK, allow_inf_nan=False)
    max_output_tokens: int = Field(default=1024, gt=0)
    temperature: float = Field(default=0.0, ge=0, le=2)
    concurrency: int = Field(default=8, ge=1)
    rate: RateSpec = RateSpec(requests=10.0, period_s=1.0)
    sampling_rate: float = Field(default=1.0, gt=0, le=1)
    seed: int | None = None
    timeout_s: float = Field(default=120.0, gt=0)
    #: seconds one attempt may take to open its connection (DNS, TCP, TLS); unset: 10 s, or timeout_s when
    #: shorter (:attr:`geoagent.runtime.http.HostPolicy.connect_timeout_s`)
    connect_timeout_s: float | None = Field(default=None, gt=0)
    max_attempts: int = Field(default=5, ge=1)
    replay: ReplaySection = ReplaySection()
    #: extra provider parameters sent with every request (``system``, ``json_mode``, ...); part of the key
    params: dict[str, Any] = Field(default_factory=dict)
    #: extra HTTP headers (e.g. OpenRouter's ``HTTP-Referer``); never put a key here
    headers: dict[str, str] = Field(default_factory=dict)
    #: OpenAI-compatible only: ``max_tokens`` or ``max_completion_tokens`` (default chosen by host)
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] | None = None
    #: OpenAI-compatible only: the model follows OpenAI's reasoning-model rules (no top_p, temperature only 1);
    #: unset: the documented id families (o1, o3, o4-mini, gpt-5*, ...) on api.openai.com
    #: (:mod:`geoagent.providers.sampling`)
    reasoning_model: bool | None = None
    #: OpenAI-compatible only: the OpenAI model ``model`` names under a name of its own (an Azure OpenAI
    #: deployment: ``model = "geo-reasoner"``, ``model_family = "o1-mini"``); the id rules (reasoning, system
    #: message, images, ``response_format``) read it instead of ``model``, on any host
    #: (:attr:`openai_rules_id`; :mod:`geoagent.providers.sampling`)
    model_family: str | None = None
    #: OpenAI-compatible only: Azure OpenAI's ``api-version`` (``"2024-10-21"``, ``"2025-04-01-preview"``) of its
    #: classic per-deployment route: calls then go to ``{base_url}/openai/deployments/{model}/chat/completions?
    #: api-version=...`` with the key in an ``api-key`` header; ``base_url`` is the resource endpoint
    #: (``https://<resource>.openai.azure.com``), ``model`` the deployment name, ``api_key_env`` required
    #: (:mod:`geoagent.providers.openai_compat`). Unset: ``{base_url}/chat/completions`` with a Bearer key (also
    #: Azure's v1 API, ``base_url = "https://<resource>.openai.azure.com/openai/v1"``)
    api_version: str | None = None
    #: for ``--simulate`` estimates only: typical answer length (tokens) and latency (s)
    expected_output_tokens: int | None = Field(default=None, ge=0)
    expected_latency_s: float = Field(default=2.0, gt=0)
    #: input tokens reserved at least per image (worst case; the cap relies on it). The default 1,600 covers
    #: a 1024 px photo on gpt-4o (765 at high detail), Claude (~1,050) and Gemini (~520); the reservation
    #: counts the documented bill for the image's size when higher (:func:`reserved_input_tokens`, e.g.
    #: gpt-4o-mini bills a 1024x768 high-detail image as 2,833 + 4 x 5,667 = 25,501 tokens); models without
    #: a documented rule that bill images at more tokens need their own figure
    image_input_tokens: int = Field(default=IMAGE_INPUT_TOKENS, ge=0)

    @field_validator("name")
    @classmethod
    def _safe(cls, v: str) -> str:
        _no_pasted_key(v)
        try:
            return safe_name(v, what="model name")
        except ValueError:
            raise ValueError(SAFE_NAME_EXPECTED) from None

    @field_validator("model")
    @classmethod
    def _model_id(cls, v: str) -> str:
        return check_model_id(v)

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, v: str | None) -> str | None:
        # the message never echoes the value: a key pasted here by mistake must not reach a log
        return v if v is None else env_var_name(v)

    @field_validator("headers")
    @classmethod
    def _no_auth_headers(cls, v: dict[str, str]) -> dict[str, str]:
        from geoagent.secrets import looks_like_secret

        for name, value in v.items():
            # an HTTP field name is a token, a value has no control character (config38 #3: "\r\n" in one failed
            # every call inside aiohttp, after the dry run had passed, and each was booked as unknown-outcome)
            if not _HTTP_TOKEN.fullmatch(name):
                raise ConfigProblem(f"header name {one_line_text(name)!r} is no HTTP field name (letters, digits and "
                                    "!#$%&'*+-.^_`|~, no space)")
            if isinstance(value, str) and not value.isprintable():
                raise ConfigProblem(f"the value of header {name!r} holds a control character (line break, tab, NUL), "
                                    "which an HTTP header cannot carry")
            if name.lower() in _AUTH_HEADERS or "key" in name.lower() or "token" in name.lower():
                raise ValueError(f"no credential header ({name!r}): name the key's variable in api_key_env")
            # header values go to the manifest verbatim: a key under an innocuous name must not (never echoed)
            is_url = value.startswith(("http://", "https://")) and "@" not in value and "?" not in value
            if isinstance(value, str) and (value.lstrip().lower().startswith(("bearer ", "basic ")) or (
                    not is_url and not any(c.isspace() for c in value)
                    and (looks_like_secret(value) or value.startswith("sk-")))):
                raise ValueError(f"no credential in headers (the value of {name!r} looks like an API key; "
                                 "name the key's variable in api_key_env)")
        return v

    @field_validator("params")
    @classmethod
    def _no_credential_params(cls, v: dict[str, Any]) -> dict[str, Any]:
        # params are part of the request key and are written to the manifest and the response store
        from geoagent.secrets import looks_like_secret

        def walk(obj: Any, path: str) -> None:
            if isinstance(obj, dict):
                for k, val in obj.items():
                    name = str(k).lower().replace("-", "_")
                    if name in _CREDENTIAL_PARAMS or name.endswith(("_api_key", "_apikey", "_secret", "_password")):
                        raise ValueError(f"no credential in params ({path}{k!r}): name the key's variable in api_key_env")
                    walk(val, f"{path}{k!r}.")
            elif isinstance(obj, list):
                for item in obj:
                    walk(item, path)
            elif isinstance(obj, str) and (obj.startswith("Bearer ") or (
                    not any(c.isspace() for c in obj) and (looks_like_secret(obj) or obj.startswith("sk-")))):
                raise ValueError(f"no credential in params (a value under {path or 'params'} looks like an API key; "
                                 "name the key's variable in api_key_env)")

        walk(v, "")
        for name, value in v.items():
            check = KNOWN_PARAMS.get(name)
            if check is not None and not check[0](value):
                shown = "a string" if isinstance(value, str) else _fmt_value(value)  # a string may be a pasted key
                raise ValueError(f"params.{name} to be {check[1]}, got {shown}")
        return v

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None:
            problem = url_problem(v, example="https://api.openai.com/v1",
                                  where_key="put the key in the variable api_key_env names")
            if problem:
                raise ValueError(problem)
            parts = urlsplit(v)
            if parts.query or parts.fragment or v.rstrip("/").endswith(("?", "#")):
                # the provider appends its route (/chat/completions, /v1/messages, Azure's /openai/deployments/...)
                # to base_url: after a query it lands in the query, after a fragment it is never sent
                raise ValueError("a base URL without a ?query or #fragment (such as 'https://api.openai.com/v1'): the "
                                 "API's path is appended to it")
        return v

    @field_validator("model_family")
    @classmethod
    def _openai_family(cls, v: str | None) -> str | None:
        from geoagent.providers.sampling import is_openai_model_id

        if v is not None and not is_openai_model_id(v):
            raise ValueError("the OpenAI model id the deployment serves (e.g. 'o1-mini', 'o3-mini', "
                             "'o4-mini', 'gpt-4o', 'gpt-5-mini'), whose rules then apply to it")
        return v.strip() if v is not None else v

    @field_validator("api_version")
    @classmethod
    def _azure_api_version(cls, v: str | None) -> str | None:
        if v is not None and not _AZURE_API_VERSION.fullmatch(v):
            raise ValueError("an Azure OpenAI api-version such as '2024-10-21' or '2025-04-01-preview' (YYYY-MM-DD, "
                             "optionally followed by -preview)")
        return v

    @model_validator(mode="after")
    def _azure_classic_route(self) -> "ModelConfig":
        """``api_version``: an OpenAI-compatible entry whose ``base_url`` is a resource endpoint and whose key is
        named (the route and header of :mod:`geoagent.providers.openai_compat`). The messages never repeat the
        URL (it may hold a pasted key: :data:`_NO_ECHO_FIELDS`)."""
        if self.api_version is None:
            return self
        if self.provider != "openai":
            raise ConfigProblem(f'api_version: only for provider = "openai" (Azure OpenAI\'s classic per-deployment '
                                f"route), not {self.provider!r}")
        if not self.base_url:
            raise ConfigProblem('api_version: the classic Azure OpenAI route needs base_url = "https://<resource>.'
                                'openai.azure.com" (the resource endpoint; /openai/deployments/<model>/chat/completions '
                                "is added), and model = the deployment name")
        path = (urlsplit(self.base_url).path or "").rstrip("/").lower()
        if path.endswith("/openai/v1"):
            raise ConfigProblem("api_version: base_url ends in /openai/v1, Azure's v1 API, which takes no api-version: "
                                'remove api_version (the v1 API takes the key as Bearer), or set base_url = "https://'
                                '<resource>.openai.azure.com" for the classic per-deployment route')
        if "/deployments" in path or path.endswith(("/openai", "/chat/completions")):
            raise ConfigProblem('api_version: base_url is the resource endpoint, "https://<resource>.openai.azure.com"'
                                ", without /openai/...: the route /openai/deployments/<model>/chat/completions is "
                                "added to it, with the deployment name from model")
        from geoagent.providers.sampling import azure_deployment_problem

        problem = azure_deployment_problem(self.model)
        if problem:
            raise ConfigProblem(f"api_version: model is the deployment name, put in the URL path: {problem}")
        if not self.api_key_env:
            raise ConfigProblem("api_version: needs api_key_env, the NAME of the variable holding the Azure OpenAI key "
                                '(e.g. api_key_env = "AZURE_OPENAI_API_KEY"; sent as the api-key header)')
        return self

    @model_validator(mode="after")
    def _family_is_openai(self) -> "ModelConfig":
        if self.model_family is not None and self.provider != "openai":
            raise ConfigProblem(f'model_family: only for provider = "openai" (an OpenAI model behind a name of its '
                                f"own, e.g. an Azure OpenAI deployment), not {self.provider!r}")
        return self

    @model_validator(mode="after")
    def _openai_only_fields(self) -> "ModelConfig":
        """``max_tokens_field`` and ``reasoning_model`` shape OpenAI-compatible requests only, a ``[models.replay]``
        table the replay provider only: written on another provider they were accepted and did nothing (config38
        #9), e.g. ``reasoning_model = true`` on an Anthropic entry read as if it set something."""
        if self.provider != "openai":
            for name in ("max_tokens_field", "reasoning_model"):
                if name in self.model_fields_set and getattr(self, name) is not None:
                    raise ConfigProblem(f'{name}: only for provider = "openai" (OpenAI-compatible servers), not '
                                        f"{self.provider!r}, whose requests it does not change; remove it")
        # a dumped config (model_dump) writes the default table out: only a table that sets something counts
        if self.provider != "replay" and "replay" in self.model_fields_set and self.replay != ReplaySection():
            raise ConfigProblem(f'replay: only for provider = "replay" (answers read from a recorded file), not '
                                f"{self.provider!r}; remove the table, or set provider = \"replay\"")
        return self

    @model_validator(mode="after")
    def _original_detail_model(self) -> "ModelConfig":
        """``params.detail = "original"`` only where OpenAI's vision guide offers it, gpt-5.4 and later
        (:func:`openai_large_patch_model`): an older model answers 400 and every task would be dead-lettered
        (review34 #6). Other providers do not read ``detail``, nor do other OpenAI-compatible servers' models."""
        if (self.params.get("detail") == "original" and self.provider == "openai"
                and _looks_openai(self.openai_rules_id) and not openai_large_patch_model(self.openai_rules_id)):
            raise ConfigProblem(f"params.detail: 'original' is for gpt-5.4 and later models (OpenAI vision guide); "
                                f"{self.openai_rules_id!r} takes 'low', 'high' or 'auto'")
        return self

    @model_validator(mode="after")
    def _reasoning_timeout(self) -> "ModelConfig":
        # providers39 #1: a reasoning or thinking model may write thousands of hidden tokens before its answer (at
        # a few tens of tokens/s, minutes); cut at 120 s, the call was billed, counted unknown-outcome and sent
        # again, up to max_attempts times. Unset, its timeout is REASONING_TIMEOUT_S (the 10 minutes OpenAI's and
        # Anthropic's own SDKs wait by default); a timeout_s written in the config is kept as written.
        if "timeout_s" not in self.model_fields_set and may_reason_long(self):
            object.__setattr__(self, "timeout_s", REASONING_TIMEOUT_S)
        return self

    @model_validator(mode="after")
    def _connect_within_timeout(self) -> "ModelConfig":
        _check_connect_timeout(self.connect_timeout_s, self.timeout_s)
        return self

    @model_validator(mode="after")
    def _replay_needs_path(self) -> "ModelConfig":
        if self.provider == "replay" and not self.replay.path:
            raise ConfigProblem("replay.path: expected the recorded JSONL file for a replay model")
        return self

    # -- derived values --------------------------------------------------------------------------

    @property
    def openai_rules_id(self) -> str:
        """The model id OpenAI's id rules read (:mod:`geoagent.providers.sampling`): ``model_family`` when set
        (the model an Azure OpenAI deployment serves), else ``model``."""
        return self.model_family or self.model

    @property
    def openai_reasoning(self) -> bool:
        """Whether this is an OpenAI-compatible entry following OpenAI's reasoning-model rules
        (:func:`geoagent.providers.sampling.openai_reasoning`: ``reasoning_model``, else a reasoning
        ``model_family``, else a documented reasoning id on api.openai.com)."""
        from geoagent.providers.sampling import openai_reasoning

        return self.provider == "openai" and openai_reasoning(self.model, self.effective_base_url,
                                                              self.reasoning_model, self.model_family)

    def named(self) -> str:
        """``model`` for messages, with the family it serves when declared: ``geo-reasoner (o1-mini)``."""
        return f"{self.model} ({self.model_family})" if self.model_family else self.model

    @property
    def paid(self) -> bool:
        """Whether calls can cost money (replay and simulated never do)."""
        return self.provider not in ("replay", "simulated")

    @property
    def host(self) -> str | None:
        """``hostname:port`` (port only when explicit) of the API the calls go to (:attr:`effective_base_url`:
        ``base_url``, else the provider's own API, e.g. ``api.openai.com``), the key of its rate limits; None for
        a model that calls no API over HTTP (replay, offline simulated)."""
        url = self.effective_base_url
        if not url:
            return None
        from geoagent.runtime.http import host_key

        return host_key(url) or None

    @property
    def default_base_url(self) -> str | None:
        """The provider's own API root a billing model without ``base_url`` calls
        (:data:`geoagent.providers.settings.DEFAULT_BASE_URLS`: ``https://api.openai.com/v1``, ...), else None
        (``base_url`` is set, or a replay or simulated model)."""
        if self.base_url or self.provider not in BILLING_PROVIDERS:
            return None
        from geoagent.providers.settings import DEFAULT_BASE_URLS

        return DEFAULT_BASE_URLS.get(self.provider)

    @property
    def effective_base_url(self) -> str | None:
        """The API root the calls go to: ``base_url``, else :attr:`default_base_url` (None: no HTTP)."""
        return self.base_url or self.default_base_url

    @property
    def on_paid_host(self) -> bool:
        """Whether calls of this model can be billed: a billing provider kind (openai, anthropic, gemini)
        whose :attr:`effective_base_url` is not a local server (:func:`is_local_host`)."""
        url = self.effective_base_url
        return self.provider in BILLING_PROVIDERS and bool(url) and not is_local_host(urlsplit(url).hostname)

    @property
    def key_env(self) -> str | None:
        """The variable the API key is read from: ``api_key_env``, else, for a billing model calling its
        provider's own API host (no ``base_url``, or ``base_url`` on that host), the provider's usual variable
        (:data:`DEFAULT_KEY_ENVS`: ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``); else None."""
        if self.api_key_env or self.provider not in BILLING_PROVIDERS:
            return self.api_key_env
        from geoagent.providers.settings import DEFAULT_BASE_URLS

        own = urlsplit(DEFAULT_BASE_URLS.get(self.provider, "")).hostname
        url = self.effective_base_url
        if own and url and (urlsplit(url).hostname or "").lower() == own:
            return DEFAULT_KEY_ENVS.get(self.provider)
        return None

    def cost_usd(self, input_tokens: int, output_tokens: int) -> float:
        """Cost in USD of a call with these token counts at this model's prices (USD per 1M tokens)."""
        return (input_tokens * self.price_input_usd_per_mtok + output_tokens * self.price_output_usd_per_mtok) / 1e6

    def estimate_input_tokens(self, prompt: str, has_image: bool) -> int:
        """Input-token estimate of one call of this model (see :func:`estimate_input_tokens`), counting
        ``image_input_tokens`` for the image."""
        return estimate_input_tokens(prompt, has_image, image_tokens=self.image_input_tokens)

    def worst_case_usd(self, estimated_input_tokens: int, max_output_tokens: int | None = None) -> float:
        """Reservation for one call: input estimate x input price + max output tokens x output price (USD)."""
        out = self.max_output_tokens if max_output_tokens is None else max_output_tokens
        return self.cost_usd(estimated_input_tokens, out)

    def default_params(self) -> dict[str, Any]:
        """Request parameters every call of this model carries (part of the request key)."""
        params: dict[str, Any] = {"max_output_tokens": self.max_output_tokens, "temperature": self.temperature}
        if self.seed is not None:
            params["seed"] = self.seed
        params.update(self.params)
        return params


_HOST_KEY_RE = re.compile(r"^(?:[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?(?:\.[a-z0-9_](?:[a-z0-9_-]*[a-z0-9_])?)*"
                          r"|\[(?P<v6>[0-9a-f:.]+)\])(?::(?P<port>\d{1,5}))?$")


class HostSection(_Section):
    """``[hosts."name"]``: limits for a non-model API host (``hostname`` or ``hostname:port``); for a model host,
    a host-wide ceiling over its models' own limits (:func:`host_ceilings`), plus its retry fields."""

    rate: float = Field(gt=0)
    period_s: float = Field(default=1.0, gt=0)
    concurrency: int = Field(default=4, ge=1)
    max_attempts: int = Field(default=5, ge=1)
    backoff_base_s: float = Field(default=0.5, ge=0)
    backoff_max_s: float = Field(default=30.0, ge=0)
    timeout_s: float = Field(default=60.0, gt=0)
    #: seconds one attempt may take to open its connection; unset: 10 s, or timeout_s when shorter
    connect_timeout_s: float | None = Field(default=None, gt=0)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1)  # larger response bodies fail the attempt
    #: longest pause one Retry-After of this host may set, s (default and at most 86400, a day: honoured as asked): a server asking for more
    #: pauses it this long, with a warning, and the task is retried after it (dead-lettered with the reason once
    #: its attempts are used up) (geoagent.runtime.http.DEFAULT_MAX_RETRY_AFTER_S)
    max_retry_after_s: float = Field(default=86_400.0, gt=0, le=86_400.0)

    @model_validator(mode="after")
    def _connect_within_timeout(self) -> "HostSection":
        _check_connect_timeout(self.connect_timeout_s, self.timeout_s)
        return self


class QueueSection(_Section):
    """``[queue]``: redelivery policy shared by every edge of the campaign."""

    max_attempts: int = Field(default=C.DEFAULT_MAX_ATTEMPTS, ge=1)
    visibility_timeout_s: float = Field(default=C.DEFAULT_VISIBILITY_TIMEOUT_S, gt=0)
    backoff_base_s: float = Field(default=C.DEFAULT_BACKOFF_BASE_S, ge=0)
    backoff_max_s: float = Field(default=C.DEFAULT_BACKOFF_MAX_S, ge=0)
    #: ``run --watch``: cool-down (s) before a stage whose unreachable-host breaker opened probes the host
    #: again, doubling after each failed probe up to ``watch_probe_max_s`` (geoagent.runtime.worker)
    watch_probe_after_s: float = Field(default=C.DEFAULT_WATCH_PROBE_AFTER_S, ge=0)
    watch_probe_max_s: float = Field(default=C.DEFAULT_WATCH_PROBE_MAX_S, ge=0)
    #: the most seconds one task may be handled (a request that never returns) before it is cancelled and
    #: retried (nacked with its reason); unset: each stage's own, else 4 x the longest one request may take
    #: under the slowest HTTP policy, at least 1800 s (geoagent.runtime.worker, "Task ceiling"); below a model's
    #: ``timeout_s`` it draws a ConfigWarning (a slow answer would be cut after it was sent, and paid again)
    task_timeout_s: float | None = Field(default=None, gt=0)
    #: with several models: "plan" (default) paces each model's lane in the model caller by its share of its work
    #: this run, so none runs ahead of the others and a run stopped anywhere (a budget stop, Ctrl-C) holds about the
    #: same share of each model's planned items; "throughput" lets each model run at its own limits
    #: (geoagent.runtime.worker, "Lanes")
    model_pacing: Literal["plan", "throughput"] = "plan"

    @model_validator(mode="after")
    def _probe_max_not_below_after(self) -> "QueueSection":
        if self.watch_probe_max_s < self.watch_probe_after_s:
            raise ValueError(f"watch_probe_max_s >= watch_probe_after_s ({self.watch_probe_after_s:g} s: the "
                             f"first cool-down), got watch_probe_max_s = {self.watch_probe_max_s:g}")
        return self


class ImagesSection(_Section):
    """``[images]``: what a GeoVerify or GeoHint plan does with an image that has no file.

    ``missing = "error"`` (default): a plan whose images lack files under the task's ``image_root`` is refused
    (exit 2) when a model on a real provider (``openai``, ``anthropic``, ``gemini`` outside the local
    ``*.sandbox.invalid`` fakes) would be sent placeholder pixels instead of the photo. ``"placeholder"``:
    send the deterministic placeholder anyway (counted in a warning line, the manifest and the report).
    The ``simulated`` and ``replay`` providers and the local fakes always get placeholders with only the
    warning (:mod:`geoagent.image_files`).
    """

    missing: Literal["error", "placeholder"] = "error"


class BackendSection(_Section):
    """``[backend]``: where the queues and the ledger/store live (:mod:`geoagent.runtime.backend`).

    ``kind = "sqlite"`` (default): files under ``[paths]``, shared by the processes of one machine.
    ``kind = "redis"``: Redis Streams queues and the ledger/store on one Redis server shared by machines; its
    URL is read from the environment variable named by ``url_env`` (default ``GEOAGENT_REDIS_URL``), never
    from this file (a URL may hold a password).
    """

    kind: Literal["sqlite", "redis"] = "sqlite"
    url_env: str = "GEOAGENT_REDIS_URL"

    @field_validator("url_env")
    @classmethod
    def _env_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", v):
            raise ValueError("the NAME of an environment variable (letters, digits, _), not a URL: the URL may "
                             "hold a password and stays out of campaign files")
        return v


# ------------------------------------------------------------------------------------------------
# task-section registry
# ------------------------------------------------------------------------------------------------

_SECTIONS: dict[str, type[BaseModel]] = {}


def register_section(name: str, model_cls: type[BaseModel]) -> type[BaseModel]:
    """Register the pydantic model that validates top-level table ``[name]`` (e.g. ``geoverify``).

    Task modules call this at import time. Configs loaded afterwards validate the section at load; a
    config loaded before still validates it lazily in :meth:`CampaignConfig.section`. Registering a new
    name also allows that table in campaign files. Returns ``model_cls`` (usable as a decorator helper).
    """
    if not re.match(r"^[a-z][a-z0-9_]*$", name) or name in CampaignConfig.model_fields:
        raise ValueError(f"cannot register config section {name!r}")
    _SECTIONS[name] = model_cls
    return model_cls


def registered_sections() -> dict[str, type[BaseModel]]:
    """Copy of the section registry (name -> pydantic model)."""
    return dict(_SECTIONS)


# ------------------------------------------------------------------------------------------------
# the whole file
# ------------------------------------------------------------------------------------------------


class CampaignConfig(_Section):
    """A validated campaign file. Build with :func:`load_config` or :func:`config_from_dict`."""

    campaign: CampaignSection
    paths: PathsSection = PathsSection()
    budget: BudgetSection
    models: list[ModelConfig] = Field(default_factory=list)
    hosts: dict[str, HostSection] = Field(default_factory=dict)
    queue: QueueSection = QueueSection()
    backend: BackendSection = BackendSection()
    #: task tables (``geoverify``, ``geohint``, ``crawl`` and registered names), raw as read
    tasks: dict[str, dict[str, Any]] = Field(default_factory=dict)
    #: where the config came from (file path or ``<dict>``), for error messages and the manifest
    source: str = "<dict>"

    @field_validator("models")
    @classmethod
    def _unique_names(cls, v: list[ModelConfig]) -> list[ModelConfig]:
        seen: set[str] = set()
        for m in v:
            if m.name in seen:
                raise ConfigProblem(f"model name {m.name!r} appears twice; each [[models]] entry needs its own name")
            seen.add(m.name)
        # The request key hashes provider, model id, prompt, image id and params (issue 2 point 6), not the
        # server: two entries that differ only in base_url would silently share one stored answer per
        # request (the second server never called). Refuse that instead of guessing which was meant.
        by_key: dict[tuple[str, str, bytes], ModelConfig] = {}
        for m in v:
            ident = (m.provider, m.model, orjson.dumps(m.default_params(), option=orjson.OPT_SORT_KEYS))
            other = by_key.setdefault(ident, m)
            if other is not m and (other.base_url or "") != (m.base_url or ""):
                raise ConfigProblem(
                    f"models {other.name!r} and {m.name!r} have the same provider, model id and parameters but "
                    f"different base_url, so their requests would have the same request key and share stored "
                    f"answers; make them differ in `model`, or in `params` (e.g. a `seed`), or drop one")
        return v

    @field_validator("hosts")
    @classmethod
    def _host_keys(cls, v: dict[str, HostSection]) -> dict[str, HostSection]:
        # the HTTP layer keys limits by "hostname" or "hostname:port", lower case (runtime.http.host_key): a
        # URL, a path or a bad port here would load and then limit nothing
        out: dict[str, HostSection] = {}
        for key, section in v.items():
            m = _HOST_KEY_RE.match(key.strip().lower())
            bad_v6 = False
            if m is not None and m.group("v6"):  # an IPv6 address in brackets, compressed as runtime.http.host_key
                try:
                    v6 = ipaddress.IPv6Address(m.group("v6")).compressed
                except ValueError:
                    bad_v6 = True
            if m is None or bad_v6 or (m.group("port") is not None and not 0 < int(m.group("port")) < 65536):
                raise ValueError(f"hostname or hostname:port as a [hosts] key (no scheme, path or spaces; an IPv6 "
                                 f"address in brackets: [::1]:8001), got {key!r}")
            norm = m.group(0) if not m.group("v6") else f"[{v6}]" + (f":{m.group('port')}" if m.group("port") else "")
            if norm in out:
                raise ValueError(f"[hosts] keys that differ in more than case; {key!r} repeats {norm!r}")
            out[norm] = section
        return out

    # -- look-ups ---------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.campaign.name

    def model(self, name: str) -> ModelConfig:
        """The ``[[models]]`` entry called ``name``; ``KeyError`` naming the known ones otherwise."""
        for m in self.models:
            if m.name == name:
                return m
        raise KeyError(f"{self.source}: no model named {name!r}; models: {[m.name for m in self.models]}")

    def section(self, name: str) -> Any:
        """Task table ``[name]``: an instance of its registered model, else the raw dict ({} if absent).

        Raises
        ------
        ConfigError
            The table does not validate against its registered model (key path and expected type named).
        """
        raw = self.tasks.get(name, {})
        model_cls = _SECTIONS.get(name)
        if model_cls is None:
            return dict(raw)
        try:
            return model_cls.model_validate(raw)
        except ValidationError as exc:
            raise ConfigError(self.source, _problems(exc, prefix=(name,), model=model_cls)) from None

    # -- roots (environment wins, then config, then the default) ---------------------------------

    def queues_root(self) -> Path:
        """``$GEOAGENT_QUEUES``, else ``[paths] queues``, else ``queues``; a leading ``~`` is the home folder."""
        env = os.environ.get(C.ENV_QUEUES_ROOT)
        return home_expanded(env or self.paths.queues or C.DEFAULT_QUEUES_ROOT,
                             f"${C.ENV_QUEUES_ROOT}" if env else "[paths] queues")

    def state_root(self) -> Path:
        """``$GEOAGENT_STATE``, else ``[paths] state``, else ``state``; a leading ``~`` is the home folder."""
        env = os.environ.get(C.ENV_STATE_ROOT)
        return home_expanded(env or self.paths.state or C.DEFAULT_STATE_ROOT,
                             f"${C.ENV_STATE_ROOT}" if env else "[paths] state")

    def state_root_source(self) -> str:
        """What set :meth:`state_root`, for messages: ``"$GEOAGENT_STATE"``, ``"[paths] state in <file>"``, or
        ``"the default state/, relative to the working directory <cwd>"``."""
        if os.environ.get(C.ENV_STATE_ROOT):
            return f"${C.ENV_STATE_ROOT}"
        if self.paths.state:
            return f"[paths] state in {self.source}"
        return f"the default {C.DEFAULT_STATE_ROOT}/, relative to the working directory {Path.cwd()}"

    def release_dir(self) -> Path:
        """``$GEOAGENT_RELEASE``, else ``[paths] release_dir``, else the default; a leading ``~`` is the home folder."""
        env = os.environ.get(C.ENV_RELEASE_DIR)
        return home_expanded(env or self.paths.release_dir or C.DEFAULT_RELEASE_DIR,
                             f"${C.ENV_RELEASE_DIR}" if env else "[paths] release_dir")

    def replay_path(self, model: "ModelConfig | str") -> Path | None:
        """The file the ``replay`` model ``model`` answers from (None for other providers).

        ``replay.path`` as written, except that a path under the release folder follows the release folder in
        use: a path that lies under the default ``../shared/reference/geocontext`` (or under ``[paths]
        release_dir`` as written) is taken relative to :meth:`release_dir`, so ``$GEOAGENT_RELEASE`` (or
        ``[paths] release_dir``) moves it along with the other release files. Compared after normalising
        (``./``, ``..``). A path under none of those but under the GeoVerify or GeoHint task section's own
        ``release_dir`` (the folder the campaign plans from) is in the release too, read there (review41a #6). Any
        other path, relative to the working directory or absolute, is used as is. A release
        folder that is a checkout of the release repository (its files under ``data/``) is read there, as the
        importer reads it.
        """
        m = self.model(model) if isinstance(model, str) else model
        if m.provider != "replay" or not m.replay.path:
            return None
        found = self._release_relative(m.replay.path)
        if found is None:
            return Path(m.replay.path)
        own, rel = found
        base = own if own is not None else self.release_dir()
        # a checkout of the release repository keeps its files under data/, as the importer finds them
        # (geoagent.data.importer._data_root; newuser39 #1: the trial tables were found there, the replay file not)
        if not (base / rel).exists() and (base / "data" / rel).is_file():
            return base / "data" / rel
        return base / rel

    def replay_in_release(self, model: "ModelConfig | str") -> bool:
        """Whether ``model``'s replay file is taken from the release folder (see :meth:`replay_path`)."""
        return self.replay_release_dir(model) is not None

    def replay_release_dir(self, model: "ModelConfig | str") -> Path | None:
        """The release folder ``model``'s replay file is taken from (:meth:`replay_path`): :meth:`release_dir`, or the
        task section's ``release_dir`` (``[geoverify]``, ``[geohint]``) when the file lies under that folder and under
        none of the others; None when the file lies in no release folder (or ``model`` replays nothing)."""
        m = self.model(model) if isinstance(model, str) else model
        if m.provider != "replay" or not m.replay.path:
            return None
        found = self._release_relative(m.replay.path)
        if found is None:
            return None
        return found[0] if found[0] is not None else self.release_dir()

    def _section_release_dir(self) -> Path | None:
        """The GeoVerify or GeoHint task section's own ``release_dir`` as written (``~`` expanded), else None: the
        folder such a campaign plans from (``geoagent.sandbox.launch.campaign_release_dir``)."""
        kind = self.campaign.kind
        sec = self.tasks.get(kind) if kind in ("geohint", "geoverify") else None
        own = sec.get("release_dir") if isinstance(sec, Mapping) else None
        return Path(os.path.expanduser(str(own))) if own else None

    def _release_relative(self, path: str) -> tuple[Path | None, Path] | None:
        """``(folder, path relative to it)`` for the release folder ``path`` lies under, else None. ``folder`` None
        stands for :meth:`release_dir` (the file follows it): ``$GEOAGENT_RELEASE`` (compared as absolute paths: the
        docs' set-up for the full release exports the variable and writes ``replay.path`` as ``<that
        folder>/verify_raw.jsonl``; read as outside the release, its trials never replayed and its recorded API
        failures went unlisted, break34 export #1), ``[paths] release_dir`` or the default, as written. Else the task
        section's own ``release_dir`` (compared as absolute paths), returned as ``folder``: the campaign plans from it
        whatever the variable says, so a replay file under it is in the release with the variable set or not
        (review41a #6: with ``$GEOAGENT_RELEASE`` naming the same folder the same config listed the release's trials
        not replayed, and without it did not)."""
        norm = Path(os.path.normpath(path))
        absolute = Path(os.path.abspath(os.path.expanduser(path)))
        env = os.environ.get(C.ENV_RELEASE_DIR)
        if env:
            b = Path(os.path.abspath(os.path.expanduser(env)))
            if absolute != b and absolute.is_relative_to(b):
                return None, absolute.relative_to(b)
        for base in (self.paths.release_dir, C.DEFAULT_RELEASE_DIR):
            if not base:
                continue
            b = Path(os.path.normpath(base))
            if b.is_absolute() != norm.is_absolute() or norm == b:
                continue
            try:
                return None, norm.relative_to(b)
            except ValueError:
                continue
        own = self._section_release_dir()
        if own is not None:
            b = Path(os.path.abspath(own))
            if absolute != b and absolute.is_relative_to(b):
                return own, absolute.relative_to(b)
        return None

    def state_dir(self) -> Path:
        """``<state root>/<campaign>``: ledger, store, manifest, progress."""
        return self.state_root() / self.campaign.name

    def queue_options(self) -> dict[str, Any]:
        """Keyword options for :func:`geoagent.runtime.queue.open_queue`."""
        return {
            "max_attempts": self.queue.max_attempts,
            "backoff_base_s": self.queue.backoff_base_s,
            "backoff_max_s": self.queue.backoff_max_s,
        }


# ------------------------------------------------------------------------------------------------
# loading and error formatting
# ------------------------------------------------------------------------------------------------

_EXPECTED = {
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "int_from_float": "an integer",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
    "dict_type": "a table",
    "model_type": "a table",
    "model_attributes_type": "a table",
    "list_type": "an array",
    "missing": "a value (required key is missing)",
    "extra_forbidden": "no such key (unknown key)",
}
_NO_ECHO_FIELDS = {"api_key_env", "base_url", "params", "headers", "api_version", "url_env", "mapillary_token_env"}  # may hold a pasted key (params: its messages say what they show)


#: ``[images]`` is a registered section: validated at load, absent = its defaults (also in drift checks)
register_section("images", ImagesSection)


def _fmt_loc(loc: Iterable[Any]) -> str:
    from geoagent.secrets import looks_like_key_text

    out = ""
    for part in loc:
        if isinstance(part, str) and looks_like_key_text(part):
            out += ("." if out else "") + "<a key that looks like an API key, not shown>"  # a key pasted as a key
        elif isinstance(part, int):
            out += f"[{part}]"
        elif re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", str(part)):
            out += ("." if out else "") + str(part)
        else:
            out += ("." if out else "") + '"' + str(part).replace('"', '\\"') + '"'
    return out or "<top level>"


#: how an error message shows a value or a key that may be an API key pasted by mistake (break28 #5)
NOT_SHOWN = "a value that looks like an API key (not shown)"


def _fmt_value(value: Any) -> str:
    from geoagent.secrets import looks_like_key_text

    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    # a pasted key or a random-looking word (geoagent.secrets.looks_like_key_text); model ids, names and host
    # names are shown (walk28 review: looks_like_secret, a test of variable names, hid them)
    if isinstance(value, str) and looks_like_key_text(value):
        return NOT_SHOWN
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def did_you_mean(key: Any, valid: Iterable[str]) -> str:
    """``" (did you mean 'max_output_tokens'?)"`` for the valid key closest to an unknown ``key``, else ``""``.

    Uses :func:`difflib.get_close_matches` (ratio >= 0.6, the closest one) over ``valid``, the keys the table
    accepts; used by every "unknown key" message of a campaign file, and for an unknown value of a list that
    names known things (``geohint.sites`` ids, ``geohint.conditions``, ``--stages``).
    """
    close = difflib.get_close_matches(str(key), sorted({str(v) for v in valid}), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


#: how many unknown names of one list get a did-you-mean suggestion (:func:`name_unknown`); the rest are counted
SUGGEST_LIMIT = 10


def name_unknown(unknown: Iterable[Any], valid: Iterable[str], *, limit: int = SUGGEST_LIMIT) -> str:
    """The unknown names of a list, for its error message: the first ``limit`` as ``'x' (did you mean 'y'?)``
    (:func:`did_you_mean`, the helper of the unknown-key messages), joined by ``", "``, then ``", and N more"`` for
    the rest, which are counted, not matched (``"'a' (did you mean 'b'?), 'c', and 290 more"``).

    Each suggestion compares one name with every valid one (:func:`difflib.get_close_matches`), so a list of 300
    unknown site ids against a release of 3,000 sites took seconds; at most ``limit`` names are matched, each
    against ``valid`` sorted once. ``ValueError`` for ``limit`` < 1."""
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    names = [str(u) for u in unknown]
    pool = sorted({str(v) for v in valid}) if names else []
    parts = [f"{u!r}{did_you_mean(u, pool)}" for u in names[:limit]]
    rest = len(names) - len(parts)
    return ", ".join(parts) + (f", and {rest} more" if rest > 0 else "")


def _unknown_key_hint(key: Any, valid: list[str] | None) -> str:
    """What follows ``unknown key`` for ``key`` in a table that accepts ``valid`` (None: unknown table).

    In a ``[[models]]`` entry (its keys hold ``params``) a key the providers read from ``params``
    (:data:`KNOWN_PARAMS`: ``top_p``, ``thinking_budget``, ...) says where it belongs, and a misspelt one is
    matched against the model's keys and the ``params.`` keys together; elsewhere :func:`did_you_mean`.
    """
    if not valid:
        return ""
    if "params" not in valid or "max_tokens_field" not in valid:
        return did_you_mean(key, valid)
    if str(key) in KNOWN_PARAMS:
        return f" (a params key: write params.{key} = ... in this [[models]] entry)"
    own = did_you_mean(key, valid)
    if own:
        return own
    close = difflib.get_close_matches(str(key), sorted(k for k in KNOWN_PARAMS if k not in valid), n=1, cutoff=0.6)
    return f" (did you mean 'params.{close[0]}'?)" if close else ""


def _other_table_hint(key: Any, table: tuple[Any, ...]) -> str:
    """``" (a key of [geohint] or [geoverify], not of [paths])"``: the tables of a campaign file that do accept
    ``key``, for an unknown key of the table at ``table`` (its location: ``("paths",)``, ``("models", 0)``; ``()``
    the top level) that no key of its own table is close to (``image_root`` under ``[paths]``); ``""`` when no
    other table has it. The task sections are those registered (:func:`register_section`), every one imported."""
    try:
        from geoagent.campaigns import register_all_sections

        register_all_sections()
    except Exception:  # noqa: BLE001 - a hint only: the sections registered so far
        pass
    tables: dict[str, type[BaseModel]] = {"[campaign]": CampaignSection, "[paths]": PathsSection,
                                          "[budget]": BudgetSection, "[queue]": QueueSection,
                                          "[backend]": BackendSection}
    tables.update({f"[{name}]": cls for name, cls in sorted(_SECTIONS.items())})
    here = ("[[models]]" if table[:1] == ("models",) and len(table) == 2 else
            f"[{table[0]}]" if len(table) == 1 and isinstance(table[0], str) else None)
    if here is None and table:
        return ""  # deeper tables ([hosts."x"], [crawl.fetcher]): their own keys only
    names = (["each [[models]] entry"] if here != "[[models]]" and str(key) in ModelConfig.model_fields else [])
    names += sorted(t for t, cls in tables.items() if t != here and str(key) in cls.model_fields)
    if not names:
        return ""
    where = " or ".join(names) if len(names) <= 3 else ", ".join(names[:3]) + ", ..."
    return f" (a key of {where}, not of {here or 'the top level'})"


def _unwrap(ann: Any) -> Any:
    """The one non-None type of ``X | None`` / ``Optional[X]`` / ``Annotated[X, ...]`` (else ``ann``)."""
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
        elif origin in (Union, types.UnionType):
            args = [a for a in get_args(ann) if a is not type(None)]
            if len(args) != 1:
                return ann
            ann = args[0]
        else:
            return ann


def table_keys(model_cls: type[BaseModel], loc: Iterable[Any]) -> list[str] | None:
    """The keys the table at ``loc`` (a pydantic error location under ``model_cls``) accepts, or None when
    ``loc`` leads to no pydantic model (a free table, or an unexpected location).

    Walks fields, list/tuple items (``models[0]``) and dict values (``hosts."api.example.org"``). At the top of
    :class:`CampaignConfig` the task sections count as keys and the internal fields do not.
    """
    ann: Any = model_cls
    for part in loc:
        ann = _unwrap(ann)
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            if not isinstance(part, str) or part not in ann.model_fields:
                return None
            ann = ann.model_fields[part].annotation
            continue
        origin, args = get_origin(ann), get_args(ann)
        if origin in (list, tuple, set, frozenset) and isinstance(part, int) and args:
            ann = args[0]
        elif origin is dict and len(args) == 2:
            ann = args[1]
        else:
            return None
    ann = _unwrap(ann)
    if not (isinstance(ann, type) and issubclass(ann, BaseModel)):
        return None
    keys = list(ann.model_fields)
    if ann is CampaignConfig:
        keys = [k for k in keys if k not in ("tasks", "source")] + list(TASK_SECTIONS) + list(_SECTIONS)
    return keys


#: error kinds of a value that should be a number or a boolean (a quoted one is said to be a string)
_NUMBER_OR_BOOL = frozenset({"float_type", "float_parsing", "finite_number", "int_type", "int_parsing",
                             "int_from_float", "bool_type", "bool_parsing"})
#: an unknown key with no close match lists the keys of its table when it has at most this many
_LIST_KEYS_UP_TO = 20


def _quoted_literal(value: Any, kind: str) -> bool:
    """Whether ``value`` is a string that, unquoted, would be what the error ``kind`` expected: ``"4"`` for an
    integer, ``"0.5"`` for a number (finite), ``"true"`` for a boolean; not a word such as ``"cheap"``, nor
    ``"4.5"`` or ``"inf"`` for an integer (unquoted, they would still be refused)."""
    import math

    if not isinstance(value, str):
        return False
    text = value.strip().replace("_", "")
    if kind.startswith("bool"):
        return text in ("true", "false")
    try:
        if kind.startswith("int"):
            int(text)
            return True
        return math.isfinite(float(text))
    except ValueError:
        return False


def _problems(exc: ValidationError, prefix: tuple[Any, ...] = (), model: type[BaseModel] | None = None) -> list[str]:
    problems = []
    for err in exc.errors(include_url=False):
        own = tuple(p for p in err["loc"] if p not in ("function-after", "function-before"))
        loc = prefix + own
        kind = err["type"]
        path = _fmt_loc(loc)
        no_echo = any(str(p) in _NO_ECHO_FIELDS for p in loc)
        if kind == "missing":
            problems.append(f"{path}: required key is missing")
            continue
        if kind == "extra_forbidden":
            valid = table_keys(model, own[:-1]) if model is not None and own else None
            hint = _unknown_key_hint(own[-1], valid) or _other_table_hint(own[-1], loc[:-1])
            if not hint and valid and len(valid) <= _LIST_KEYS_UP_TO:
                # nothing close (walk30 #8: `budget.max_spend: unknown key` and no way on): the keys it takes
                where = f"[{_fmt_loc(loc[:-1])}]" if loc[:-1] else "the top level"
                hint = f" ({where} takes: {', '.join(sorted({str(v) for v in valid}))})"
            problems.append(f"{path}: unknown key{hint}")
            continue
        ctx = err.get("ctx") or {}
        if kind == "value_error" and isinstance(ctx.get("error"), ConfigProblem):
            problems.append(f"{path}: {ctx['error']}")  # a whole sentence: no "expected ..., got ..." around it
            continue
        if kind in _EXPECTED:
            expected = _EXPECTED[kind]
        elif kind == "literal_error":
            expected = f"one of {ctx.get('expected', '')}"
        elif kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
            sign = {"greater_than": ">", "greater_than_equal": ">=", "less_than": "<", "less_than_equal": "<="}[kind]
            bound = next(iter(ctx.values()), "")
            expected = f"a number {sign} {bound}"
        elif kind == "value_error":
            expected = str(ctx.get("error", err["msg"]))
        else:
            expected = err["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
        # a check on a whole table says itself what it found ("got a table" would add nothing)
        table_check = kind == "value_error" and isinstance(err.get("input"), dict)
        got = "" if no_echo or table_check else f", got {_fmt_value(err.get('input'))}"
        if got and kind in _NUMBER_OR_BOOL and _quoted_literal(err.get("input"), kind):
            # walk30 #8: `expected an integer, got '4'`: the quotes were the only sign that 4 was a string
            got += (" (a quoted string: write true or false without quotes)" if kind.startswith("bool")
                    else " (a quoted string: write the number without quotes)")
        if kind == "list_type" and isinstance(err.get("input"), dict) and re.fullmatch(r"[A-Za-z_][\w.]*", path):
            # `[models]` for `[[models]]`: TOML's array of tables is written with double brackets
            got += f" (write each entry as its own [[{path}]] table, in double brackets)"
        if (kind in ("model_type", "dict_type", "model_attributes_type") and len(loc) == 3 and loc[0] == "models"
                and loc[2] == "rate" and isinstance(err.get("input"), (int, float))
                and not isinstance(err.get("input"), bool)):
            # `rate = 8` as [hosts."name"] takes it: a [[models]] entry's rate is a table with its own period
            got += (f" (in a [[models]] entry: rate = {{ requests = {err['input']:g}, period_s = 1.0 }}, requests "
                    "per period_s seconds)")
        problems.append(f"{path}: expected {expected}{got}")
    return problems


_PLACEHOLDER = re.compile(r"^\{([a-z_]+)\}")


def _placeholders(value: Any, path: str = "") -> list[tuple[str, str]]:
    """``(key path, "{name}")`` of every string value that starts with an unfilled ``{name}`` placeholder."""
    if isinstance(value, str):
        m = _PLACEHOLDER.match(value)
        return [(path, m.group(0))] if m else []
    if isinstance(value, Mapping):
        return [x for k, v in value.items() for x in _placeholders(v, f"{path}.{k}" if path else str(k))]
    if isinstance(value, list):
        return [x for i, v in enumerate(value) for x in _placeholders(v, f"{path}[{i}]")]
    return []


#: the integers TOML 1.0 allows (64-bit signed); tomllib reads any size, but the spec says a value it cannot hold
#: losslessly is an error, and such a value failed later (orjson refuses it when the request key is built)
TOML_INT_MIN, TOML_INT_MAX = -(2**63), 2**63 - 1


def _huge_integers(value: Any, loc: tuple[Any, ...] = ()) -> list[str]:
    """One ``<key path>: expected ...`` problem per integer outside TOML's 64-bit range (:data:`TOML_INT_MIN` ..
    :data:`TOML_INT_MAX`), anywhere in the parsed document (free task tables and ``params`` too)."""
    if _is_int(value) and not TOML_INT_MIN <= value <= TOML_INT_MAX:
        return [f"{_fmt_loc(loc)}: expected an integer in TOML's 64-bit range (-2^63 to 2^63-1), got "
                f"{_fmt_value(value)}"]
    if isinstance(value, Mapping):
        return [x for k, v in value.items() for x in _huge_integers(v, loc + (k,))]
    if isinstance(value, list):
        return [x for i, v in enumerate(value) for x in _huge_integers(v, loc + (i,))]
    return []


def config_from_dict(data: Mapping[str, Any], *, source: str = "<dict>", look: bool = False) -> CampaignConfig:
    """Validate a parsed TOML document (dict) into a :class:`CampaignConfig`.

    ``look``: the caller only reads what runs of the campaign stored (``run.py status``, ``dead``, ``export``): the
    problems that would make a model's every call fail (:func:`call_problems`) are then warnings
    (:class:`ConfigWarning`), not errors, so a campaign that ran before such a check existed, or whose other
    models answered, can still be shown and exported without editing the file (review46b #2). ``run`` and
    ``crawl`` (their dry runs too) load with ``look=False``, and are refused.

    Raises
    ------
    ConfigError
        One line per problem, each naming the key path and the expected type.
    """
    if not isinstance(data, Mapping):
        raise ConfigError(source, ["<top level>: expected a table"])
    holes = _placeholders(data)
    if holes:
        where = ", ".join(f"{hole} in {path}" for path, hole in holes)
        raise ConfigError(source, [
            f"unfilled template placeholder(s): {where}. This file is a template that `python run.py demo` fills "
            "in; run `python run.py demo` (it writes each campaign's config, filled in, to state/demo-configs/: "
            "`status`, `dead` and `export` work on those), or copy the file and write real values (see "
            "geoagent/configs/example.toml)"
        ])
    huge = _huge_integers(data)
    if huge:
        raise ConfigError(source, huge)
    doc = dict(data)
    tasks: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    for name in list(doc):
        if name in TASK_SECTIONS or name in _SECTIONS:
            value = doc.pop(name)
            if not isinstance(value, dict):
                problems.append(f"{name}: expected a table, got {_fmt_value(value)}")
                continue
            tasks[name] = value
    for reserved in ("tasks", "source"):
        if reserved in doc:
            problems.append(f"{reserved}: unknown key")
            doc.pop(reserved)
    try:
        cfg = CampaignConfig.model_validate({**doc, "tasks": tasks, "source": source})
    except ValidationError as exc:
        problems.extend(_problems(exc, model=CampaignConfig))
        cfg = None
    sections: dict[str, Any] = {}
    for name, raw in tasks.items():  # validate registered task sections now
        model_cls = _SECTIONS.get(name)
        if model_cls is not None:
            try:
                sections[name] = model_cls.model_validate(raw)
            except ValidationError as exc:
                problems.extend(_problems(exc, prefix=(name,), model=model_cls))
    failing: list[str] = call_problems(cfg) if cfg is not None else []
    if cfg is not None:
        problems.extend(([] if look else failing) + _impossible_campaign(cfg))
    if problems or cfg is None:
        raise ConfigError(source, problems)
    for text in failing if look else ():
        # review46b #2: a command that only reads must still show and export what the campaign's runs stored
        warnings.warn(f"{source}: {text} (`run` and `crawl` refuse this file; this command only reads the "
                      "campaign's stored state, so it goes on)", ConfigWarning, stacklevel=2)
    for text in (_unused_host_warnings(cfg) + shared_host_warnings(cfg) + output_room_warnings(cfg)
                 + reasoning_host_warnings(cfg) + gemini_temperature_warnings(cfg) + prefixed_reasoning_warnings(cfg)
                 + gemini_thinking_off_warnings(cfg)
                 + root_override_warnings(cfg)
                 + dotenv_unused_warnings()):
        warnings.warn(f"{source}: {text}", ConfigWarning, stacklevel=2)
    for text in system_message_warnings(cfg):
        warnings.warn(f"{source}: {text}", ConfigWarning, stacklevel=2)
    # the campaign kind's own section's warnings (load_warnings(), when it has that method): a table of another
    # kind's is not used by this campaign (example.toml shows every kind's), so it has nothing to warn of
    section = sections.get(str(getattr(cfg.campaign, "kind", "") or ""))
    if section is not None:
        for text in (section.load_warnings() if callable(getattr(section, "load_warnings", None)) else ()):
            warnings.warn(f"{source}: {text}", ConfigWarning, stacklevel=2)
    for i, m in enumerate(cfg.models):
        for name in m.params:
            if name not in KNOWN_PARAMS:
                warnings.warn(
                    f"{source}: models[{i}].params.{name}: not read by any provider (known: "
                    f"{', '.join(sorted(KNOWN_PARAMS))}); it is sent to no API and only changes the request key",
                    ConfigWarning, stacklevel=2)
    for i, m in enumerate(cfg.models):
        if m.paid and m.key_env is None and not is_local_host(urlsplit(m.effective_base_url or "").hostname):
            # a key-less paid gateway is legitimate, so not refused; but usually the variable was forgotten
            warnings.warn(
                f"{source}: models[{i}].api_key_env: not set for model {m.name!r} on paid host {m.host}: its calls "
                "go out without a key (a server that needs one answers 401 and the model stops); name the key's "
                "variable in api_key_env", ConfigWarning, stacklevel=2)
    ceiling = cfg.queue.task_timeout_s
    for i, m in enumerate(cfg.models):
        if ceiling is not None and m.provider not in ("replay", "simulated") and float(m.timeout_s) > ceiling:
            # the task ceiling (geoagent.runtime.worker, "Task ceiling") would cut a call the model may still answer
            warnings.warn(
                f"{source}: [queue] task_timeout_s = {ceiling:g} s is below models[{i}].timeout_s = "
                f"{float(m.timeout_s):g} s: a call of model {m.name!r} answered after {ceiling:g} s is cut once "
                "sent (billed, booked as unknown-outcome spend), sent again on each retry and finally "
                "dead-lettered; raise task_timeout_s above the models' timeout_s or leave it unset",
                ConfigWarning, stacklevel=2)
    return cfg


def system_message_warnings(cfg: Any) -> list[str]:
    """One line per OpenAI-compatible model with ``params.system`` whose id refuses a system message
    (``o1-mini``, ``o1-preview``: :func:`geoagent.providers.sampling.openai_rejects_system`): its system text is
    sent at the top of the user message instead, which the model reads as the user's words, not as instructions
    of higher rank. The request key is unchanged (it hashes the params)."""
    from geoagent.providers.sampling import openai_rejects_system

    return [f"models[{i}].params.system: {m.named()} takes no system or developer message (HTTP 400 "
            "'unsupported_value' on messages[0].role), so the system text is sent at the top of the user message, "
            "followed by a blank line; the model reads it as part of the user's message"
            for i, m in enumerate(cfg.models)
            if m.provider == "openai" and m.params.get("system") and openai_rejects_system(m.openai_rules_id)]


#: campaign kinds whose every request carries a photo (a GeoVerify trial or a GeoHint request shows one; a gray
#: field for the no-image controls)
KINDS_SENDING_PHOTOS = ("geoverify", "geohint")


def image_problems(cfg: Any) -> list[str]:
    """One line per model that would be sent a photo it cannot take: an OpenAI-compatible entry whose model (or
    declared ``model_family``) takes no image input (``o1-mini``, ``o1-preview``, ``o3-mini``:
    :func:`geoagent.providers.sampling.openai_rejects_images`; HTTP 400 "Invalid content type. image_url is only
    supported by certain models.") in a campaign that sends one with its requests: every model of a GeoVerify or
    GeoHint campaign, every model of a ``generic`` campaign with ``[generic] image = true``, a crawl's image
    auditor (``[crawl.image_audit] model``; the referenceability auditor sends text only). Refused at load, so
    neither a dry run nor a run starts: each of its requests would be refused after the run had begun. A replay or
    simulated model is never asked."""
    from geoagent.providers.sampling import openai_rejects_images

    def blind(m: Any) -> bool:
        return m.provider == "openai" and openai_rejects_images(m.openai_rules_id)

    kind = cfg.campaign.kind
    generic = cfg.tasks.get("generic") if isinstance(cfg.tasks.get("generic"), Mapping) else {}
    why = ("HTTP 400 'Invalid content type. image_url is only supported by certain models.' on every request, each "
           "dead-lettered after the run has started")
    out: list[str] = []
    if kind in KINDS_SENDING_PHOTOS or (kind == "generic" and generic.get("image") is True):
        what = (f"a {kind} campaign sends a photo with every request" if kind != "generic" else
                "a generic campaign with [generic] image = true sends a photo with every request")
        for i, m in enumerate(cfg.models):
            if blind(m):
                out.append(f"models[{i}]: {m.named()} takes no image input, and {what} ({why}); use a vision model "
                           f"(e.g. o1, o4-mini, gpt-4o) or remove model {m.name!r}")
    if kind == "crawl":
        crawl = cfg.tasks.get("crawl")
        audit = crawl.get("image_audit") if isinstance(crawl, Mapping) else None
        name = audit.get("model") if isinstance(audit, Mapping) else None
        m = next((x for x in cfg.models if x.name == name), None)
        if m is not None and blind(m):
            out.append(f"crawl.image_audit.model: {name!r} ({m.openai_rules_id}) takes no image input, and the image "
                       f"auditor sends it every fetched photo ({why}); name a vision model (e.g. o4-mini, gpt-4o)")
    return out


def responses_only_problems(cfg: Any) -> list[str]:
    """One line per OpenAI-compatible ``[[models]]`` entry naming a model OpenAI serves only on its Responses API
    (:func:`geoagent.providers.sampling.openai_responses_only`: ``o3-pro``, ``gpt-5-pro``, ``codex-mini-latest``,
    ``gpt-5-codex``, ``o3-deep-research``, ``computer-use-preview``, ...) on a host that serves it so: geoagent
    posts to ``{base_url}/chat/completions``, which api.openai.com answers HTTP 404 "This model is only supported in
    v1/responses and not in v1/chat/completions." for them (Azure OpenAI: 400 ``OperationNotSupported``), so every
    request would fail after the run had started (prov46 #1).

    Decided by the host: on OpenAI's own API (:func:`geoagent.providers.sampling.is_openai_host`: no
    ``base_url``, ``api.openai.com`` or a regional ``*.api.openai.com``) by ``model`` and by ``model_family``
    (``model = "gpt-5-codex"`` with ``model_family = "gpt-5"`` is still a Responses-only call); on Azure OpenAI
    (:func:`~geoagent.providers.sampling.is_azure_openai_host`) by ``model_family`` (``model`` is a deployment
    name there). Any other host is not refused, whatever ``model_family`` says: a gateway that bridges Chat
    Completions to the Responses API (a LiteLLM alias declaring ``model_family = "gpt-5-codex"``, OpenRouter's
    ``openai/o3-pro``) serves it (review46b #3). The campaign loads with these lines as warnings for the
    commands that only read (:func:`call_problems`)."""
    from geoagent.providers.sampling import (is_azure_openai_host, is_openai_host, openai_base_host,
                                             openai_responses_only)

    out: list[str] = []
    for i, m in enumerate(cfg.models):
        if m.provider != "openai":
            continue
        host = openai_base_host(m.effective_base_url)
        if is_openai_host(host):
            named = [(key, value) for key, value in (("model", m.model), ("model_family", m.model_family))
                     if value and openai_responses_only(value)]
            answer = "HTTP 404 'This model is only supported in v1/responses and not in v1/chat/completions.'"
            way_out = ("use a chat model (e.g. o3, o4-mini, gpt-5, gpt-5-mini, gpt-4.1), send it through a gateway "
                       "that bridges Chat Completions to the Responses API (a LiteLLM proxy: its base_url, with "
                       f"reasoning_model = true), or remove model {m.name!r}")
        elif is_azure_openai_host(host):
            named = [("model_family", m.model_family)] if m.model_family and openai_responses_only(m.model_family) \
                else []
            answer = "HTTP 400 'OperationNotSupported'"
            way_out = (f"use a deployment of a chat model (e.g. o3, o4-mini, gpt-5) with its own model_family, or "
                       f"remove model {m.name!r}")
        else:
            continue
        if not named:
            continue
        key, value = named[0]
        out.append(f"models[{i}].{key}: {value.strip()!r} is served only on OpenAI's Responses API "
                   f"at {host}; geoagent speaks Chat Completions (POST /chat/completions), which answers it {answer} "
                   f"(every request of model {m.name!r} would fail); {way_out}")
    return out


#: the public API hosts each campaign kind calls when its task table names no other URL (the defaults of
#: :class:`geoagent.crawl.settings.EndpointSettings`, :data:`geoagent.clients.nominatim.NOMINATIM_URL` and
#: :data:`geoagent.clients.wikidata.WIKIDATA_API_URL`; tests check they agree); ``[hosts]`` sections for them count
#: as used (:func:`campaign_hosts`)
KIND_DEFAULT_HOSTS: dict[str, tuple[str, ...]] = {
    "crawl": ("overpass-api.de", "query.wikidata.org", "wikimedia.org", "graph.mapillary.com"),
    "geohint": ("www.wikidata.org", "nominatim.openstreetmap.org"),
}
#: the config key (path in the task tables) whose URL replaces each default API host of :data:`KIND_DEFAULT_HOSTS`:
#: a campaign that sets it (a sandbox fake, a mirror; ``nominatim_url = ""``: none) never calls the default host
KIND_DEFAULT_HOST_KEYS: dict[str, dict[str, tuple[str, ...]]] = {
    "crawl": {"overpass-api.de": ("crawl", "endpoints", "overpass"), "query.wikidata.org": ("crawl", "endpoints", "wdqs"),
              "wikimedia.org": ("crawl", "endpoints", "pageviews"),
              "graph.mapillary.com": ("crawl", "endpoints", "mapillary")},
    "geohint": {"www.wikidata.org": ("geohint", "geocoder", "wikidata_url"),
                "nominatim.openstreetmap.org": ("geohint", "geocoder", "nominatim_url")},
}
#: host suffixes a crawl fetches from without naming them anywhere: the Mapillary thumbnail CDN's signed URLs
#: (``https://scontent-...fbcdn.net/...``, /work/shared/api-notes.md, Mapillary ``thumb_1024_url``)
CRAWL_CDN_SUFFIXES = (".fbcdn.net",)


def _url_hosts(value: Any) -> list[str]:
    """Host keys (:func:`geoagent.runtime.http.host_key`: ``hostname[:port]``, lower case) of every http(s) URL
    string anywhere in ``value`` (task tables)."""
    if isinstance(value, str):
        if not value.startswith(("http://", "https://")):
            return []
        from geoagent.runtime.http import host_key

        host = host_key(value)
        return [host] if host else []
    if isinstance(value, Mapping):
        return [h for v in value.values() for h in _url_hosts(v)]
    if isinstance(value, (list, tuple)):
        return [h for v in value for h in _url_hosts(v)]
    return []


def campaign_hosts(cfg: "CampaignConfig") -> list[str]:
    """The hosts campaign ``cfg`` calls, as ``[hosts]`` keys (``hostname`` or ``hostname:port``), in order:
    each model's (``base_url``, else its provider's own API, :attr:`ModelConfig.effective_base_url`), every URL
    in its task tables, then its kind's default API hosts (:data:`KIND_DEFAULT_HOSTS`) whose config key
    (:data:`KIND_DEFAULT_HOST_KEYS`) the file leaves unset: a geocoder pointed at the sandbox fakes calls no
    public Wikidata or Nominatim."""
    out: list[str] = []
    for m in cfg.models:
        out += _url_hosts(m.effective_base_url or "")
    out += _url_hosts(cfg.tasks)
    keys = KIND_DEFAULT_HOST_KEYS.get(cfg.campaign.kind, {})
    out += [h for h in KIND_DEFAULT_HOSTS.get(cfg.campaign.kind, ()) if h not in keys or not _has_key(cfg.tasks, keys[h])]
    return list(dict.fromkeys(out))


def _has_key(tables: Any, path: tuple[str, ...]) -> bool:
    """Whether nested mapping ``tables`` sets ``path`` (``("geohint", "geocoder", "wikidata_url")``), to any value."""
    for part in path:
        if not isinstance(tables, Mapping) or part not in tables:
            return False
        tables = tables[part]
    return True


def _same_path(a: str, b: str) -> bool:
    """Whether paths ``a`` and ``b`` (``~`` expanded, relative ones from the working folder, as the roots are
    read) name one folder: the same file where both exist (:func:`os.path.samefile`: a symlink, ``..``, another
    spelling), else the same absolute normalised path."""
    a, b = os.path.abspath(os.path.expanduser(a)), os.path.abspath(os.path.expanduser(b))
    try:
        if os.path.exists(a) and os.path.exists(b):
            return os.path.samefile(a, b)
    except OSError:
        pass
    return os.path.normpath(a) == os.path.normpath(b)


def _paths_release_dir_read(cfg: "CampaignConfig") -> bool:
    """Whether the campaign reads :meth:`CampaignConfig.release_dir` (``$GEOAGENT_RELEASE``, else ``[paths]
    release_dir``): False only for a GeoVerify or GeoHint campaign whose task section names its own
    ``release_dir`` (what it plans from: ``geoagent.sandbox.launch.campaign_release_dir``) and none of whose
    ``replay`` models takes its file from the release folder (:meth:`CampaignConfig.replay_in_release`)."""
    kind = cfg.campaign.kind
    if kind not in ("geohint", "geoverify"):
        return True
    sec = cfg.tasks.get(kind)
    if not (isinstance(sec, Mapping) and sec.get("release_dir")):
        return True
    # a replay file under the section's own folder reads that folder, not this one (review41a #6)
    return any((found := cfg._release_relative(m.replay.path)) is not None and found[0] is None
               for m in cfg.models if m.provider == "replay" and m.replay.path)


def root_override_warnings(cfg: "CampaignConfig") -> list[str]:
    """One line per ``[paths]`` key the file sets that an environment variable overrides with another folder.

    The variables win (``$GEOAGENT_QUEUES``, ``$GEOAGENT_STATE``, ``$GEOAGENT_RELEASE``; docs/campaigns.md, "Paths
    in a config"), which is what moving every campaign's data at once needs; but a campaign file that names its own
    folder (a GeoVerify over a crawl's folder, say) would otherwise read another one without a word. Task sections'
    own ``release_dir`` keys are not affected by the variable and are not checked here; where one names the folder a
    GeoVerify or GeoHint campaign plans from and no ``replay`` model reads its file from the release folder,
    ``[paths] release_dir`` is read for nothing, so its override is not named either (the demo's filled-in configs
    set both: a ``$GEOAGENT_RELEASE`` exported for another campaign drew a warning that told the user to unset it
    although the demo read its crawl's folder). For a GeoVerify or GeoHint campaign the ``release_dir`` line also
    names ``[geoverify] release_dir`` (``[geohint] ...``), which wins over both the variable and ``[paths]
    release_dir`` for the tables it plans from (replay files under the release folder still follow the variable).
    Returns [] when nothing is overridden or both name the same folder.
    """
    out = []
    for key, env in (("queues", C.ENV_QUEUES_ROOT), ("state", C.ENV_STATE_ROOT), ("release_dir", C.ENV_RELEASE_DIR)):
        written = getattr(cfg.paths, key)
        value = os.environ.get(env)
        if not written or not value:
            continue
        if key == "release_dir" and not _paths_release_dir_read(cfg):
            continue
        if _same_path(written, value):  # also another spelling of it: relative, a symlink, `..`, a trailing /
            continue
        fix = f"unset {env} to use the file's folder"
        kind = cfg.campaign.kind
        if key == "release_dir" and kind in ("geohint", "geoverify"):
            # the task section's own key wins over both for the folder the campaign plans from
            # (geoagent.sandbox.launch.campaign_release_dir); a replay file under the release folder still follows
            # the variable (CampaignConfig.replay_path), which is why this line can appear with that key set too
            sec = cfg.tasks.get(kind)
            if isinstance(sec, Mapping) and sec.get("release_dir"):
                fix += (f"; [{kind}] release_dir wins over both for the tables the campaign plans from, but a replay "
                        f"file under [paths] release_dir follows {env}")
            else:
                fix += (f", or name the folder as [{kind}] release_dir, which wins over both (the variable and "
                        f"[paths] release_dir) for the tables the campaign plans from")
        out.append(f"[paths] {key} = {written!r} is overridden by ${env} = {value!r} (the environment wins); {fix}")
    return out


#: variables read from the process environment only, never from ``.env`` (which is read for secrets alone: API keys,
#: ``MAPILLARY_TOKEN``, the Redis URL; :mod:`geoagent.secrets`)
ENV_ONLY_VARIABLES = (C.ENV_QUEUES_ROOT, C.ENV_STATE_ROOT, C.ENV_RELEASE_DIR, "GEOAGENT_REDIS_RETRY_S",
                      "GEOAGENT_STOP_GRACE_S")


def dotenv_unused_warnings(environ: Mapping[str, str] | None = None) -> list[str]:
    """One line when the ``.env`` file (:func:`geoagent.secrets.dotenv_path_default`) sets a variable of
    :data:`ENV_ONLY_VARIABLES` that the environment does not: geoagent reads those from the environment only, so
    the line would be ignored without a word (a campaign then read another release or state folder than the user
    wrote, and the missing-release error asked for the variable the user had set). Names the variables, never
    their values; [] when there is none, or the file cannot be read (the key lookup reports that).

    ``environ``: the environment to compare with (default ``os.environ``)."""
    from geoagent.secrets import dotenv_path_default, read_dotenv

    env = os.environ if environ is None else environ
    try:
        values = read_dotenv()
    except (OSError, ValueError):
        return []
    names = [n for n in ENV_ONLY_VARIABLES if values.get(n) and not env.get(n)]
    if not names:
        return []
    return [f"{dotenv_path_default()} sets {', '.join(names)}, which geoagent reads from the environment only (.env "
            f"is read for API keys, MAPILLARY_TOKEN and the Redis URL): not used by this command; export "
            f"{'them' if len(names) > 1 else 'it'} in the shell (export {names[0]}=...)"
            + (" or use [paths] in the config" if set(names) & {C.ENV_QUEUES_ROOT, C.ENV_STATE_ROOT, C.ENV_RELEASE_DIR}
               else "")]


def _unused_host_warnings(cfg: "CampaignConfig") -> list[str]:
    """One sentence per ``[hosts."name"]`` section no part of the campaign calls: its limits apply to nothing
    (a typo, or a host of another campaign kind). Names the hosts the campaign does use and the closest one.
    A key without a port also matches that host on any port; a crawl's thumbnail CDN hosts are never named
    in advance (:data:`CRAWL_CDN_SUFFIXES`)."""
    from geoagent.runtime.http import host_name

    used = campaign_hosts(cfg)
    names = set(used) | {host_name(h) for h in used}
    out = []
    for key in cfg.hosts:
        if key in names or (cfg.campaign.kind == "crawl" and key.split(":")[0].endswith(CRAWL_CDN_SUFFIXES)):
            continue
        listed = ", ".join(used) if used else "none"
        out.append(f'hosts."{key}": no model or endpoint of this campaign calls this host, so its limits apply to '
                   f"nothing{did_you_mean(key, used)} (hosts this campaign calls: {listed})")
    return out


#: campaign kinds whose plan is one request per (trial, model): without [[models]] they plan nothing
KINDS_NEEDING_MODELS = ("geoverify", "geohint")


def _explicit_sampling(m: "ModelConfig") -> dict[str, tuple[str, Any]]:
    """``{"temperature" | "top_p": (config key, value)}`` of the sampling values a ``[[models]]`` entry writes out
    (``temperature`` or ``params.temperature``, ``params.top_p``); the default temperature 0.0 is not one."""
    out: dict[str, tuple[str, Any]] = {}
    if "temperature" in m.model_fields_set:
        out["temperature"] = ("temperature", m.temperature)
    for name in ("temperature", "top_p"):
        if m.params.get(name) is not None:
            out[name] = (f"params.{name}", m.params[name])
    return out


def sampling_problems(cfg: "CampaignConfig") -> list[str]:
    """Explicit sampling values a model's API refuses with HTTP 400 (each request of the model would be
    dead-lettered at its first delivery), one line per ``[[models]]`` entry naming the key
    (:mod:`geoagent.providers.sampling` has the documented rules and sources):

    * an OpenAI reasoning model (``o1``, ``o3``, ``o4-mini``, ``gpt-5*`` on api.openai.com, or
      ``reasoning_model = true``) with a temperature other than 1 or a ``top_p`` other than 1;
    * a Claude 4.7+ model with a temperature or top_p at all;
    * a Claude Opus 4.1 / 4.5+ model with both temperature and top_p (these two also for ``provider = "openai"``, the
      id read after any ``vendor/`` prefix: ``anthropic/claude-opus-4.7`` on OpenRouter; prov46 #2);
    * Gemini 2.5 Pro or Gemini 3 Pro with ``params.thinking_budget`` 0 to 127 (neither can turn thinking off; 128 to
      32,768; :func:`geoagent.providers.sampling.gemini_refuses_thinking_off`);
    * any other Anthropic model with a temperature above 1 (the Messages API takes 0 to 1, OpenAI and Gemini up to
      2; prov39 #6), and so a crawl auditor (``[crawl.image_audit]`` / ``[crawl.referenceability]``
      ``temperature``) whose ``[[models]]`` entry is an Anthropic one.
    Unset values are simply not sent to these models.
    """
    from geoagent.providers.sampling import (ANTHROPIC_TEMPERATURE_MAX, GEMINI_ALWAYS_THINKING_MIN_BUDGET,
                                             bare_model_id, claude_one_sampler, claude_rejects_sampling,
                                             gemini_refuses_thinking_off)

    out: list[str] = []
    for i, m in enumerate(cfg.models):
        given = _explicit_sampling(m)
        if m.openai_reasoning:
            for name, (key, value) in given.items():
                if value != 1:
                    out.append(
                        f"models[{i}].{key}: {m.named()} is an OpenAI reasoning model, which accepts only the default "
                        f"{name} 1 (HTTP 400 'unsupported_value' otherwise: every request of model {m.name!r} would "
                        f"be dead-lettered), got {_fmt_value(value)}; remove the key (then no {name} is sent), or, if "
                        "this model does take it (e.g. gpt-5.1 with reasoning effort none), set reasoning_model = false")
        elif m.provider in ("anthropic", "openai") and claude_rejects_sampling(bare_model_id(m.model)) and given:
            # on an OpenAI-compatible route too (anthropic/claude-opus-4.7 on OpenRouter; prov46 #2)
            keys = " and ".join(f"models[{i}].{key}" for key, _ in given.values())
            out.append(f"{keys}: {m.model} refuses temperature and top_p at any value (HTTP 400 '`temperature` is "
                       f"deprecated for this model': every request of model {m.name!r} would be dead-lettered); remove "
                       "the key (then none is sent)")
        elif m.provider == "gemini" and m.params.get("thinking_budget") is not None and \
                0 <= m.params["thinking_budget"] < GEMINI_ALWAYS_THINKING_MIN_BUDGET and \
                gemini_refuses_thinking_off(m.model):  # 2.5 Pro, and Gemini 3 Pro (prov46 #4)
            out.append(f"models[{i}].params.thinking_budget: {m.model} cannot turn thinking off and takes a budget of "
                       f"128 to 32,768 tokens (or -1, dynamic), got {m.params['thinking_budget']}: every request of model "
                       f"{m.name!r} would be refused with HTTP 400")
        elif m.provider in ("anthropic", "openai") and claude_one_sampler(bare_model_id(m.model)) and len(given) == 2:
            keys = " and ".join(f"models[{i}].{key}" for key, _ in given.values())
            out.append(f"{keys}: {m.model} refuses temperature and top_p in one request (HTTP 400 'cannot both be "
                       f"specified for this model': every request of model {m.name!r} would be dead-lettered); keep "
                       "one of them (with only top_p set, the default temperature is not sent)")
        # the Messages API's range is 0 to 1 (the field's own check allows OpenAI's and Gemini's 0 to 2; prov39 #6);
        # a Claude 4.7+ model was named above (it takes no temperature at all)
        temperature = given.get("temperature")
        if m.provider == "anthropic" and not claude_rejects_sampling(m.model) and temperature is not None and \
                temperature[1] > ANTHROPIC_TEMPERATURE_MAX:
            out.append(f"models[{i}].{temperature[0]}: the Anthropic Messages API takes a temperature from 0 to 1, got "
                       f"{_fmt_value(temperature[1])} (HTTP 400 invalid_request_error: every request of model "
                       f"{m.name!r} would be dead-lettered); write a value from 0 to 1 (OpenAI's and Gemini's 0 to 2 "
                       "range is not Anthropic's)")
    out += _auditor_temperature_problems(cfg, ANTHROPIC_TEMPERATURE_MAX)
    return out


def _auditor_temperature_problems(cfg: "CampaignConfig", anthropic_max: float) -> list[str]:
    """One line per crawl auditor table (``[crawl.image_audit]``, ``[crawl.referenceability]``) whose ``temperature``
    is above ``anthropic_max`` (1) while its ``model`` names an Anthropic ``[[models]]`` entry: every audit call
    would be refused with HTTP 400 (prov39 #6). A table that does not validate is left to its own error."""
    crawl = cfg.tasks.get("crawl") or {}
    if not isinstance(crawl, Mapping):
        return []
    by_name = {m.name: m for m in cfg.models}
    out = []
    for table in ("image_audit", "referenceability"):
        sub = crawl.get(table)
        if not isinstance(sub, Mapping) or not _is_num(sub.get("temperature")):
            continue
        m = by_name.get(sub.get("model")) if isinstance(sub.get("model"), str) else None
        if m is not None and m.provider == "anthropic" and sub["temperature"] > anthropic_max:
            out.append(f"crawl.{table}.temperature: the auditor's model {m.name!r} is an Anthropic model, whose "
                       f"Messages API takes a temperature from 0 to 1, got {_fmt_value(sub['temperature'])} (HTTP 400 "
                       "on every audit call); write a value from 0 to 1")
    return out


def gemini_temperature_warnings(cfg: "CampaignConfig") -> list[str]:
    """One line per Gemini 3 ``[[models]]`` entry (:func:`geoagent.providers.sampling.gemini_keeps_default_temperature`)
    that writes a temperature other than 1 (``temperature`` or ``params.temperature``): such a model is sent no
    temperature, as Google's Gemini 3 developer guide strongly recommends its default 1.0 (lower values can cause
    looping or degraded reasoning, which runs to the output cap, billed), so it samples at 1.0, not at the value
    written (prov39 #3). The default 0.0, not written, is left out without a word, as for Claude 4.7+."""
    from geoagent.providers.sampling import gemini_keeps_default_temperature

    out = []
    for i, m in enumerate(cfg.models):
        temperature = _explicit_sampling(m).get("temperature")
        if m.provider not in ("gemini", "openai") or temperature is None or temperature[1] == 1 or \
                not gemini_keeps_default_temperature(m.model):
            continue
        why = ("a temperature below 1.0 can cause looping or degraded reasoning, a loop running to "
               "max_output_tokens, billed" if temperature[1] < 1 else "its reasoning is tuned for 1.0")
        out.append(f"models[{i}].{temperature[0]}: {m.model} is a Gemini 3 model, which is sent no temperature: "
                   f"Google's Gemini 3 developer guide strongly recommends keeping its default 1.0 ({why}), so model "
                   f"{m.name!r} samples at 1.0, not at the {_fmt_value(temperature[1])} written; remove the key")
    return out


def prefixed_reasoning_warnings(cfg: "CampaignConfig") -> list[str]:
    """One line per ``provider = "openai"`` entry whose id is an OpenAI reasoning id behind a vendor prefix
    (``openai/o3`` on OpenRouter: :func:`geoagent.providers.sampling.openai_prefixed_reasoning`) that writes a
    temperature other than 1 or a ``top_p`` other than 1: neither is sent (the model samples at its default
    temperature 1 whatever is asked; OpenRouter ignores a parameter a model does not support), and the manifest's
    ``sampling_sent`` says so; the line says it at load (prov46 #2)."""
    from geoagent.providers.sampling import openai_prefixed_reasoning

    out = []
    for i, m in enumerate(cfg.models):
        if m.provider != "openai" or not openai_prefixed_reasoning(m.model, m.effective_base_url, m.reasoning_model,
                                                                   m.model_family):
            continue
        for name, (key, value) in _explicit_sampling(m).items():
            if value != 1:
                out.append(f"models[{i}].{key}: {m.model} is an OpenAI reasoning model behind a vendor prefix, which "
                           f"samples at its default temperature 1 whatever is asked, so no {name} is sent and model "
                           f"{m.name!r} does not use the {_fmt_value(value)} written; remove the key (or set "
                           "reasoning_model = false if this model does take it)")
    return out


def gemini_thinking_off_warnings(cfg: "CampaignConfig") -> list[str]:
    """One line per Gemini 3 ``[[models]]`` entry not refused for it (Flash: :func:`sampling_problems` refuses Pro)
    whose ``params.thinking_budget`` is 0 to 127: Gemini 3 Flash does not turn thinking off fully (Google's thinking
    guide; its lowest level, minimal, may still think), so the model may spend thinking tokens out of its output cap
    and time; it is counted as a thinking model (its default ``timeout_s``, the cap warnings) (prov46 #4)."""
    from geoagent.providers.sampling import (GEMINI_ALWAYS_THINKING_MIN_BUDGET, gemini_budget_zero_thinks,
                                             gemini_refuses_thinking_off)

    out = []
    for i, m in enumerate(cfg.models):
        budget = m.params.get("thinking_budget")
        if m.provider != "gemini" or not isinstance(budget, int) or not 0 <= budget < GEMINI_ALWAYS_THINKING_MIN_BUDGET \
                or not gemini_budget_zero_thinks(m.model) or gemini_refuses_thinking_off(m.model):
            continue
        out.append(f"models[{i}].params.thinking_budget: {m.model} is a Gemini 3 model, whose thinking a budget of "
                   f"{budget} does not turn off (Google's thinking guide: Gemini 3 Flash does not support turning "
                   "thinking off fully; it uses thinkingLevel), so its answers may still spend thinking tokens out of "
                   f"max_output_tokens; model {m.name!r} is counted as a thinking model")
    return out


def spends_hidden_reasoning(m: "ModelConfig") -> bool:
    """Whether a ``[[models]]`` entry's answers spend hidden reasoning / thinking tokens, billed as output tokens
    on top of the visible answer (:mod:`geoagent.providers.sampling`): an OpenAI reasoning model (by id on
    api.openai.com, or ``reasoning_model = true``), a Gemini model that thinks by default unless
    ``params.thinking_budget = 0`` turns it off (never a Gemini 3 model: 0 does not stop its thinking), or Gemini
    2.5 Flash-Lite asked to think (budget > 0)."""
    from geoagent.providers.sampling import gemini_budget_zero_thinks, gemini_thinking_budget_max, gemini_thinks_when_asked

    if m.provider == "openai":
        return m.openai_reasoning
    if m.provider == "gemini":
        budget = m.params.get("thinking_budget")
        if gemini_thinking_budget_max(m.model) is not None:
            return budget != 0 or gemini_budget_zero_thinks(m.model)  # 0 does not stop Gemini 3 (prov46 #4)
        return gemini_thinks_when_asked(m.model) and isinstance(budget, int) and budget > 0
    return False


def may_reason_long(m: "ModelConfig") -> bool:
    """Whether a ``[[models]]`` entry's calls may spend minutes on hidden reasoning, for its default ``timeout_s``
    (:data:`REASONING_TIMEOUT_S`): :func:`spends_hidden_reasoning`, and also the ids it reads narrowly (money39 #2)
    behind any provider and host: an OpenAI reasoning id with a ``vendor/`` prefix (OpenRouter's ``openai/o4-mini``),
    a thinking Gemini id behind an OpenAI-compatible endpoint (``gemini-2.5-pro`` on Google's or a router's),
    Gemini's ``-latest`` aliases of Pro and Flash (``gemini-pro-latest``: current thinking models), and open-weight
    reasoning models (:data:`_OPEN_REASONING_ID`: ``deepseek-r1``, ``qwq-32b``, ``qwen3-235b-a22b-thinking-2507``)."""
    from geoagent.providers.sampling import gemini_budget_zero_thinks, gemini_thinking_budget_max, is_openai_reasoning_id

    if spends_hidden_reasoning(m):
        return True
    if m.provider not in ("openai", "gemini"):
        return False
    bare = m.model.strip().lower().rsplit("/", 1)[-1]
    if m.provider == "gemini" and m.params.get("thinking_budget") == 0 and not gemini_budget_zero_thinks(bare):
        return False  # thinking off (2.5 Flash); a Gemini 3 model thinks at budget 0 (prov46 #4)
    return (is_openai_reasoning_id(bare) or gemini_thinking_budget_max(bare) is not None
            or bool(re.fullmatch(r"gemini-(pro|flash)-latest", bare)) or bool(_OPEN_REASONING_ID.search(bare)))


#: open-weight reasoning models that write their reasoning before the answer, on any server (review39c #5):
#: DeepSeek-R1 and its distills, deepseek-reasoner, QwQ, Qwen3 "-thinking" variants, and ids naming a reasoner
_OPEN_REASONING_ID = re.compile(r"deepseek-r1|deepseek-reasoner|qwq|thinking|reasoner|(?:^|[-_:])r1(?:$|[-_:.])")


def task_output_caps(cfg: "CampaignConfig") -> dict[str, list[tuple[int, str]]]:
    """``{[[models]] name: [(cap, config key), ...]}`` for the models whose requests carry a task table's output
    cap instead of their ``[[models]]`` one: a crawl's auditors (``[crawl.image_audit]`` /
    ``[crawl.referenceability]`` ``max_output_tokens``, defaults 400 and 4,000) and, under ``[geoverify]`` /
    ``[geohint]`` ``max_output_tokens``, every model (the planner's request params override the model's). Empty
    otherwise, and for a task table that does not validate (its own error says why)."""
    if cfg.campaign.kind in ("geoverify", "geohint"):  # [<kind>] max_output_tokens overrides every model's cap
        try:
            cap = getattr(cfg.section(cfg.campaign.kind), "max_output_tokens", None)
        except Exception:  # noqa: BLE001 - reported by the section's own validation
            cap = None
        key = f"{cfg.campaign.kind}.max_output_tokens"
        return {m.name: [(int(cap), key)] for m in cfg.models} if isinstance(cap, int) else {}
    if cfg.campaign.kind != "crawl":
        return {}
    try:
        s = cfg.section("crawl")
    except Exception:  # noqa: BLE001 - reported by the crawl's own validation
        return {}
    out: dict[str, list[tuple[int, str]]] = {}
    for name in ("image_audit", "referenceability"):
        sec = getattr(s, name, None)
        if sec is not None and getattr(sec, "model", None):
            out.setdefault(sec.model, []).append((int(sec.max_output_tokens), f"crawl.{name}.max_output_tokens"))
    return out


def output_limit_keys(cfg: "CampaignConfig") -> dict[str, str]:
    """``{[[models]] name: config key}`` of the setting that gives each model's requests their output-token limit:
    a task table's (``geoverify.max_output_tokens``, ``crawl.image_audit.max_output_tokens``, ...:
    :func:`task_output_caps`) when it overrides the model's, else ``models[i].max_output_tokens``
    (``models[i].params.max_output_tokens`` when the params set it)."""
    try:
        task = task_output_caps(cfg)
    except Exception:  # noqa: BLE001 - a message aid only
        task = {}
    out = {}
    for i, m in enumerate(getattr(cfg, "models", None) or []):
        if task.get(m.name):
            out[m.name] = task[m.name][0][1]
        else:
            where = "params.max_output_tokens" if "max_output_tokens" in (getattr(m, "params", None) or {}) \
                else "max_output_tokens"
            out[m.name] = f"models[{i}].{where}"
    return out


def reasoning_host_warnings(cfg: "CampaignConfig") -> list[str]:
    """One line per ``provider = "openai"`` model whose id looks like an OpenAI reasoning model
    (:func:`~geoagent.providers.sampling.is_openai_reasoning_id`: ``o3``, ``gpt-5-mini``, ...) sent to a host
    other than ``api.openai.com`` (or a regional ``*.api.openai.com``) with neither ``reasoning_model`` nor
    ``max_tokens_field`` set: OpenAI's rules then do not apply, so its requests carry ``max_tokens`` and a
    temperature, and a server that follows OpenAI's rules (an OpenAI proxy, the local fake) refuses each with
    HTTP 400 (every request dead-lettered; walkthrough 9b). ``reasoning_model = true`` applies the rules
    (``max_completion_tokens``, no temperature other than 1, no ``top_p``); ``false`` or a ``max_tokens_field``
    says the server takes what is sent."""
    from geoagent.providers.sampling import OPENAI_HOST, is_openai_host, is_openai_reasoning_id, openai_base_host

    out = []
    for i, m in enumerate(cfg.models):
        if m.provider != "openai" or m.reasoning_model is not None or m.max_tokens_field is not None or \
                m.model_family is not None:  # a declared family decides the rules on any host
            continue
        host = openai_base_host(m.effective_base_url)
        if is_openai_host(host) or not is_openai_reasoning_id(m.model):  # eu.api.openai.com too (review46b #7)
            continue
        out.append(f"models[{i}]: {m.model} looks like an OpenAI reasoning model but goes to {host}, not "
                   f"{OPENAI_HOST}, with neither reasoning_model nor max_tokens_field set: its requests carry "
                   "max_tokens and a temperature, which a server following OpenAI's reasoning rules refuses (HTTP "
                   "400 'Unsupported parameter', every request dead-lettered); set reasoning_model = true (sends "
                   "max_completion_tokens, no temperature or top_p) if the server follows those rules, or "
                   "reasoning_model = false if it takes max_tokens")
    return out


def output_room_warnings(cfg: "CampaignConfig") -> list[str]:
    """One line per model whose ``max_output_tokens`` hidden reasoning may use up, so that answers come back
    empty and cut off (finish reason ``length`` / ``MAX_TOKENS``; billed all the same). Thresholds, from the
    providers' documentation (:mod:`geoagent.providers.sampling`):

    * an OpenAI reasoning model below :data:`~geoagent.providers.sampling.OPENAI_REASONING_MIN_OUTPUT` (25,000):
      ``max_completion_tokens`` counts reasoning tokens, and OpenAI's reasoning guide recommends reserving at
      least 25,000 for reasoning and answer when starting out;
    * a Gemini thinking model (2.5 Flash / Pro, Gemini 3) whose cap is at or below what it may spend thinking:
      ``params.thinking_budget`` when set above 0, else the largest dynamic budget (Flash 24,576, Pro 32,768):
      thinking tokens count against ``maxOutputTokens``. ``thinking_budget = 0`` (2.5 Flash: thinking off; not on a
      Gemini 3 model, which keeps thinking) or a cap above the budget gives no line. Gemini 2.5 Flash-Lite, which thinks only when asked, gets the line
      when ``params.thinking_budget`` > 0 asks it to think at or above its cap.

    Models whose requests carry a task table's cap are checked at that cap, the line naming its key
    (:func:`task_output_caps`): a crawl's auditors (``[crawl.image_audit]`` / ``[crawl.referenceability]``
    ``max_output_tokens``), every model under ``[geoverify]`` / ``[geohint]`` ``max_output_tokens``.
    """
    from geoagent.providers.sampling import (OPENAI_REASONING_MIN_OUTPUT, gemini_budget_zero_thinks,
                                             gemini_thinking_budget_max, gemini_thinks_when_asked)

    out: list[str] = []
    task_caps = task_output_caps(cfg)
    targets: list[tuple[ModelConfig, int, str, str]] = []  # (model, cap sent, key named, key to raise)
    for i, m in enumerate(cfg.models):
        if m.name in task_caps:  # its requests carry a task table's cap ([crawl.*] auditor, [geoverify]/[geohint])
            targets += [(m, cap, key, key) for cap, key in task_caps[m.name]]
            continue
        short = "params.max_output_tokens" if "max_output_tokens" in m.params else "max_output_tokens"
        targets.append((m, m.default_params().get("max_output_tokens", m.max_output_tokens), f"models[{i}].{short}", short))
    for m, cap, full, key in targets:
        if m.openai_reasoning:
            if cap < OPENAI_REASONING_MIN_OUTPUT:
                out.append(
                    f"{full} = {cap}: {m.named()} is an OpenAI reasoning model, whose max_completion_tokens "
                    f"also counts its hidden reasoning tokens; when reasoning uses them all the answer is empty with "
                    f"finish_reason 'length' (billed, counted as cut off). OpenAI recommends reserving at least "
                    f"{OPENAI_REASONING_MIN_OUTPUT:,} tokens for reasoning and answer; raise {key} (each call reserves "
                    "it in full at the output price) or check the cut-off share after a small run")
        budget_max = gemini_thinking_budget_max(m.model) if m.provider == "gemini" else None
        budget = m.params.get("thinking_budget")
        if budget_max is None and m.provider == "gemini" and gemini_thinks_when_asked(m.model) and \
                isinstance(budget, int) and budget > 0:
            budget_max = budget  # Flash-Lite asked to think: its budget counts against the cap too
        if budget_max is not None:
            room = budget if isinstance(budget, int) and budget > 0 else budget_max
            # budget 0 turns 2.5 Flash's thinking off, not a Gemini 3 model's (prov46 #4): its room is the dynamic one
            zero_thinks = budget == 0 and gemini_budget_zero_thinks(m.model)
            if (budget != 0 or zero_thinks) and cap <= room:
                bounded = isinstance(budget, int) and budget > 0
                what = (f"params.thinking_budget = {budget}" if bounded else
                        f"its thinking (up to {budget_max:,} tokens; params.thinking_budget = 0 does not turn a Gemini "
                        "3 model's thinking off)" if zero_thinks else
                        f"its dynamic thinking budget (up to {budget_max:,} tokens; params.thinking_budget unset or -1)")
                off = "flash" in m.model.lower() and not gemini_budget_zero_thinks(m.model)  # 2.5 Flash only
                # with a budget already set, "bound thinking" is done: the cap must rise above it (walkthrough 9b)
                advice = (f"raise {key} above params.thinking_budget ({budget}) plus room for the answer, or lower "
                          "params.thinking_budget" + (" (0 turns thinking off)" if off else "")
                          if bounded else
                          f"raise {key} above the thinking budget, or bound thinking with params.thinking_budget"
                          + (" (0 turns it off on Gemini 2.5 Flash models)" if not zero_thinks else ""))
                out.append(
                    f"{full} = {cap}: {m.model} is a Gemini thinking model; its thinking tokens count "
                    f"against maxOutputTokens and {what} can use the whole cap, leaving an empty answer with "
                    f"finishReason MAX_TOKENS (billed, counted as cut off); {advice}")
    return out


def _other_kind_tables(cfg: CampaignConfig) -> list[str]:
    """One problem per task table of a campaign kind (``[geoverify]``, ``[geohint]``, ``[crawl]``) in a file that
    writes no ``[campaign] kind``: the default kind, ``generic``, would ignore that table and run generic requests
    (walk30 #1: a GeoVerify config whose ``kind`` line was lost made 200 paid generic calls and exited 0). A file
    that writes its kind may hold other kinds' tables (``geoagent/configs/example.toml`` shows them all): each
    kind reads its own."""
    if "kind" in cfg.campaign.model_fields_set:
        return []
    return [f"[{t}]: the table of a {t} campaign, but the file sets no [campaign] kind, so the campaign would run "
            f"as the default kind, generic, which ignores [{t}]: set [campaign] kind = \"{t}\" (or kind = "
            f"\"generic\" for a campaign that ran as generic: its [{t}] table is then ignored)"
            for t in TASK_SECTIONS if t != "generic" and t in cfg.tasks]


def call_problems(cfg: CampaignConfig) -> list[str]:
    """Problems that would make every call of a model fail at its API, one line per ``[[models]]`` entry and key:
    explicit sampling values it refuses (:func:`sampling_problems`), a photo sent to a model that takes none
    (:func:`image_problems`), a model served only on OpenAI's Responses API (:func:`responses_only_problems`,
    prov46 #1). Errors for ``run`` and ``crawl`` (and their dry runs), warnings for the commands that only read
    (:func:`config_from_dict` ``look``; review46b #2): none of them makes a call."""
    return sampling_problems(cfg) + image_problems(cfg) + responses_only_problems(cfg)


def _impossible_campaign(cfg: CampaignConfig) -> list[str]:
    """Problems of a campaign that validates field by field but can never make a call (beside those of a model's
    every call failing at its API, :func:`call_problems`, which a command that only reads takes as warnings).

    * ``budget.cap_usd = 0`` with any model that has a price above 0 (every provider: the ledger books a
      simulated or replay model's calls at its prices too): the ledger refuses every call of it (the run would
      exit 4 having done nothing); the message names every such model. An error, not a warning: a campaign
      whose answers are all stored needs no run to be reported (``run.py export``); models with no price set
      or all-zero prices (replay, simulated, local servers) still run at cap 0.
    * a GeoVerify or GeoHint campaign with no ``[[models]]``: it would plan 0 requests and end "complete".
    * a task table of another kind (``[geoverify]`` with ``kind`` unset, i.e. ``generic``): :func:`_other_kind_tables`.
    * a billing model (openai, anthropic, gemini) on a paid host (:attr:`ModelConfig.on_paid_host`: not a
      local server, :func:`is_local_host`; no ``base_url`` means the provider's own API) without both
      ``price_*`` keys written: an unset price is $0, so the cap would never count its spend. ``0`` written
      out is accepted (a free tier); local servers keep the default 0.
    * a ``base_url`` on a provider's own API host with another path than its API root
      (:func:`geoagent.providers.settings.own_api_path_problem`: ``https://api.openai.com`` without ``/v1``,
      ``https://api.anthropic.com/v1``): every call would be a 404.
    * a ``[geohint] sample_rates`` key that names no ``[[models]]`` entry: a typo would leave the model it
      meant at its full rate (an expensive model sampled at 1/3 would be asked every request).
    * a GeoHint campaign with neither ``[campaign] contact`` nor ``[geohint.geocoder] contact``, or whose contact
      (the geocoder's own, else the campaign's) is neither an e-mail address nor a URL: its geocoder (Wikidata,
      Nominatim: both ask for a contact in the User-Agent) refused it only after the run had planned and written
      its state (``run --simulate`` passed).
    * a crawl auditor (``[crawl.image_audit]`` / ``[crawl.referenceability]`` ``model``) on a provider other
      than ``simulated`` that names no ``[[models]]`` entry: the dry run passed and ``crawl`` then stopped
      with "no provider configured for auditor model ...", naming neither file nor key.
    """
    from geoagent.providers.settings import own_api_path_problem

    out: list[str] = _other_kind_tables(cfg)
    for i, m in enumerate(cfg.models):
        # a path mistake on a provider's own host loaded silently, then every call was a 404 (prov39 #7)
        problem = own_api_path_problem(m.provider, m.base_url) if m.base_url else None
        if problem:
            out.append(f"models[{i}].base_url: {problem}")
        # the key goes in a header of every request: over plain http to a host that is not local it would cross
        # the network unencrypted (and a server's redirect to https comes after it was sent)
        parts = urlsplit(m.effective_base_url or "")
        if m.paid and m.key_env and parts.scheme == "http" and not is_local_host(parts.hostname):
            out.append(f"models[{i}].base_url: plain http:// to {parts.hostname}, a host that is not local, would send "
                       f"the API key ({m.key_env}) unencrypted; use https:// (a server on your own machine or LAN, by "
                       "address or a dot-less, *.local, *.lan or *.internal name, may use http)")
    names = [m.name for m in cfg.models]
    crawl = cfg.tasks.get("crawl") or {}
    for table in ("image_audit", "referenceability"):
        sub = crawl.get(table) if isinstance(crawl, Mapping) else None
        if not isinstance(sub, Mapping):
            continue
        model, provider = sub.get("model"), sub.get("provider", "simulated")
        if isinstance(model, str) and provider != "simulated" and model not in names:
            out.append(f"crawl.{table}.model: {model!r} is not the name of a [[models]] entry (models: "
                       f"{', '.join(names) or 'none'}){did_you_mean(model, names)}; a {provider!r} auditor is "
                       "called through its [[models]] entry")
    if cfg.campaign.kind == "geohint":
        geocoder = (cfg.tasks.get("geohint") or {}).get("geocoder")
        own = geocoder.get("contact") if isinstance(geocoder, Mapping) else None
        if isinstance(own, str) and own.strip():  # the geocoder's own contact wins (GeocoderSettings.from_config)
            contact, key = own, "geohint.geocoder.contact"
        else:
            contact, key = cfg.campaign.contact, "campaign.contact"
        if not contact.strip():
            # the geocoder stage refused it only once the run had planned and written its state
            out.append("campaign.contact: not set, and no [geohint.geocoder] contact either: a GeoHint campaign "
                       "geocodes its answers through Wikidata and Nominatim, whose usage policies ask for a "
                       "contact (e-mail address or URL) in the User-Agent; set [campaign] contact = "
                       "\"you@example.org\" (or [geohint.geocoder] contact)")
        elif "@" not in contact and "://" not in contact:
            # the Nominatim client refuses it (clients.nominatim.user_agent_for), also only once the run had started
            out.append(f"{key}: {contact!r} is not an e-mail address or URL: a GeoHint campaign geocodes its answers "
                       "through Wikidata and Nominatim, whose usage policies ask for contact details in the "
                       "User-Agent; write e.g. \"mailto:you@example.org\" or \"https://example.org/you\"")
    rates = (cfg.tasks.get("geohint") or {}).get("sample_rates")
    if isinstance(rates, Mapping):
        for key in rates:
            if key not in names:
                out.append(f"geohint.sample_rates: {key!r} is not the name of a [[models]] entry (models: "
                           f"{', '.join(names) or 'none'}){did_you_mean(key, names)}")
    for i, m in enumerate(cfg.models):
        # an unset price is $0: on a paid host the cap would not count the model's spend at all
        if m.on_paid_host:
            host = urlsplit(m.effective_base_url or "").hostname
            for key in ("price_input_usd_per_mtok", "price_output_usd_per_mtok"):
                if key not in m.model_fields_set:
                    out.append(f"models[{i}].{key}: required for a model on a paid host ({host}); write 0 for a "
                               "free one (the cost cap counts each call at these prices, USD per 1M tokens)")
    # the ledger books every call at its model's prices whatever the provider (simulated and replay models too)
    paid = [m.name for m in cfg.models if m.price_input_usd_per_mtok > 0 or m.price_output_usd_per_mtok > 0]
    # the ledger counts whole nano-USD: a cap under one rounds to $0 (runtime36 #7: 1e-12 was accepted, then ran as $0)
    if cfg.budget.cap_usd < 1e-9 and paid:
        shown = "0" if cfg.budget.cap_usd == 0 else f"{cfg.budget.cap_usd!r} (under one nano-USD, the ledger's unit)"
        out.append(f"budget.cap_usd: {shown} allows no call of the priced model(s) {', '.join(paid)}; set a cap above 0 "
                   "(USD; a dry run, `run --simulate`, estimates the cost)")
    if cfg.campaign.kind in KINDS_NEEDING_MODELS and not cfg.models:
        out.append(f"models: a {cfg.campaign.kind} campaign needs at least one [[models]] table (it would plan "
                   "0 requests)")
    return out


def load_config(path: str | os.PathLike[str], *, look: bool = False) -> CampaignConfig:
    """Read and validate a campaign TOML file.

    Parameters
    ----------
    path : path
        The ``.toml`` file; a bare name such as ``"generic_demo"`` also finds ``geoagent/configs/generic_demo.toml``.
    look : bool
        The caller only reads the campaign's stored state (``status``, ``dead``, ``export``): what would make a
        model's calls fail is a warning, not an error (:func:`config_from_dict`; review46b #2).

    Raises
    ------
    ConfigError
        File missing, TOML syntax error (with line and column), or invalid values (key path + expected type).
    """
    p = Path(path)
    if not p.exists():
        shipped = packaged_config_path(str(path))
        if shipped is None:
            raise ConfigError(str(path), ["file not found" + _unexpanded_hint(str(path))])
        if str(path).endswith(".toml"):
            # a file name with nothing of that name here: the packaged one is used (a bare "example" asks for it);
            # said, so an edited copy run from another folder is not silently the original (cli36 #12)
            warnings.warn(f"{path}: no such file in {Path.cwd()}; using the packaged geoagent/configs/{shipped.name}",
                          ConfigWarning, stacklevel=2)
        p = shipped
    label = p.name if p.is_relative_to(Path(__file__).parent) else str(p)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(label, [f"cannot read: {exc.strerror}"]) from None
    try:
        # utf-8-sig: a byte-order mark (Windows Notepad's "UTF-8 with BOM") is dropped; TOML itself refuses it
        # with "Invalid statement (at line 1, column 1)", where nothing visible is wrong
        data = tomllib.loads(raw.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(label, [f"not UTF-8 text at line {line} (byte {exc.start}); save the file as UTF-8"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(label, [f"invalid TOML: {exc}{_duplicate_key_hint(str(exc), raw)}"]) from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise ConfigError(label, ["invalid TOML: arrays or inline tables nested too deeply"]) from None
    except ValueError as exc:  # not a TOMLDecodeError: int() of a number of 4,300+ digits (break28 #3)
        text = raw.decode("utf-8-sig", errors="replace")
        long_number = re.search(r"[0-9_]{4300,}", text)
        where = f" at line {text[: long_number.start()].count(chr(10)) + 1}" if long_number else ""
        what = "has more than 4,300 digits (too many to read)" if "digits" in str(exc) else f"cannot be read ({exc})"
        raise ConfigError(label, [f"invalid TOML: a number{where} {what}"]) from None
    return config_from_dict(data, source=label, look=look)


def _duplicate_key_hint(message: str, raw: bytes) -> str:
    """``": key 'max_output_tokens' is set twice in its table"`` for tomllib's "Cannot overwrite a value (at line N,
    column M)", which names no key (break34 config #7); the key's name only, never the line (a value may be a
    pasted secret). "" for any other message, or a line without a plain ``key =``."""
    m = re.match(r"Cannot overwrite a value \(at line (\d+), column \d+\)", message)
    if not m:
        return ""
    lines = raw.decode("utf-8-sig", errors="replace").splitlines()
    n = int(m.group(1))
    key = re.match(r"\s*([A-Za-z0-9_.\-]{1,80})\s*=", lines[n - 1]) if 0 < n <= len(lines) else None
    if not key:
        return ""
    name = key.group(1)
    if "." in name:  # 'b.c = 2' after 'b = 1': it is 'b' that is set twice (review34 #10)
        return f": key {name!r}, or a dotted part of it, is set twice in its table"
    return f": key {name!r} is set twice in its table"


def packaged_config_path(name: str) -> Path | None:
    """Path of a config shipped in ``geoagent/configs/`` (``"generic_demo"`` or ``"generic_demo.toml"``), or None."""
    stem = name.removesuffix(".toml")
    if not re.match(r"^[A-Za-z0-9_-]+$", stem):
        return None
    p = Path(__file__).parent / "configs" / f"{stem}.toml"
    return p if p.is_file() else None


def resolved_dict(cfg: CampaignConfig) -> dict[str, Any]:
    """The config as plain JSON-able data with roots resolved, for the manifest. Holds no secrets.

    API keys never enter a :class:`CampaignConfig` (only variable names do), so nothing needs masking;
    the resolved data roots (after environment overrides) are added under ``paths``. ``paths.release_dir`` is
    the release folder the campaign reads: :meth:`CampaignConfig.release_dir`, except for a GeoVerify or GeoHint
    campaign whose task section names its own ``release_dir`` and reads nothing under the other one
    (:func:`_paths_release_dir_read`): that section's folder, whatever ``$GEOAGENT_RELEASE`` says.
    """
    if any(name not in _SECTIONS for name in cfg.tasks):
        # a task section whose module is not imported yet would be dumped as written, without its defaults, and a
        # manifest compared with it would list spurious "unset -> default" changes (session 41's note)
        from geoagent.campaigns import register_all_sections

        register_all_sections()
    data = cfg.model_dump(mode="json", exclude={"tasks", "source"})
    release = cfg.release_dir()
    if not _paths_release_dir_read(cfg):  # the task section's own folder is what it plans from
        sec = cfg.section(cfg.campaign.kind)  # as geoagent.sandbox.launch.campaign_release_dir reads it
        own = sec.get("release_dir") if isinstance(sec, Mapping) else getattr(sec, "release_dir", None)
        release = Path(str(own)).expanduser() if own else release
    data["paths"] = {
        "queues": str(cfg.queues_root()),
        "state": str(cfg.state_root()),
        "release_dir": str(release),
    }
    replays = {m.name: str(cfg.replay_path(m)) for m in cfg.models if m.provider == "replay"}
    if replays:  # the files the replay models answer from, after the release folder's override
        data["paths"]["replay"] = replays
    for name, raw in sorted(cfg.tasks.items()):
        section = cfg.section(name)
        data[name] = section.model_dump(mode="json") if isinstance(section, BaseModel) else raw
    data["source"] = cfg.source
    return data


def config_sha256(cfg: CampaignConfig) -> str:
    """SHA-256 hex of the canonical JSON of :func:`resolved_dict` minus the data roots (stable across hosts)."""
    data = resolved_dict(cfg)
    data.pop("paths", None)
    data.pop("source", None)
    data.pop("backend", None)  # where the work is kept changes no call or result (and older hashes stay valid)
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


# ------------------------------------------------------------------------------------------------
# derived settings for other layers
# ------------------------------------------------------------------------------------------------


def is_sampled(key: str, rate: float, seed: int = 0) -> bool:
    """Deterministic Bernoulli(``rate``) draw for item ``key``: the same key, rate and seed always agree.

    Used by planners to apply ``models[].sampling_rate`` (the paper samples an expensive model at 1/3 of
    the others' rate). Uses the first 8 bytes of SHA-256(seed:key) as a uniform number in [0, 1).
    """
    if rate >= 1.0:
        return True
    if rate <= 0.0:
        return False
    digest = hashlib.sha256(f"{seed}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64 < rate


def plan_rank(item: str, seed: int = 0) -> bytes:
    """Sort key that puts a planner's items (a GeoVerify trial, a GeoHint unit: an image's baseline or one of its
    reference points) in a seeded random order.

    The planners enqueue items in this order, every model's requests of one item next to each other, and
    the model caller dispatches in queue order; so any prefix of a run (one stopped by the cost cap or by
    Ctrl-C) is a random sample of the items with every model answered about equally often, instead of the
    first items alphabetically for the first model only. The same item and seed always rank alike (a resumed
    run plans the same order); a rank is SHA-256 of ``seed``, a salt and ``item``, so it is independent of the
    sampling draws of :func:`is_sampled` (which a shared hash would make kept items come first). Only the
    order depends on it: request keys, task keys and the statistics do not.
    """
    return hashlib.sha256(f"{seed}:plan-order:{item}".encode()).digest()


def models_by_host(cfg: CampaignConfig) -> dict[str, list["ModelConfig"]]:
    """``{host: [models whose calls go to it]}`` (:attr:`ModelConfig.host`; models without one left out)."""
    out: dict[str, list[ModelConfig]] = {}
    for m in cfg.models:
        if m.host:
            out.setdefault(m.host, []).append(m)
    return out


def shared_host_limit(models: Sequence["ModelConfig"]) -> tuple[int, float, int]:
    """``(requests, period_s, concurrency)`` that ``models``, entries sharing one limit key (the same API model on
    one host: :func:`model_limit_key`), all get: the lowest any of them sets (the rate with the fewest requests per
    second, the smallest concurrency), so no entry's calls go faster than its own entry allows. Also the limit of a
    model host's own policy (:func:`host_policies`), which applies only to requests that carry no model key."""
    slow = min(models, key=lambda m: m.rate.requests / m.rate.period_s)
    return slow.rate.requests, slow.rate.period_s, min(m.concurrency for m in models)


def hosts_entry(cfg: CampaignConfig, host: str | None) -> "HostSection | None":
    """The ``[hosts]`` entry that sets ``host``'s limits (``"hostname:port"``): its own, else one for the hostname
    alone (which matches the host on any port, as :meth:`geoagent.runtime.http.HttpClient.policy_for` reads it);
    None when there is neither."""
    if not host:
        return None
    from geoagent.runtime.http import host_name

    entry = cfg.hosts.get(host)
    if entry is None and host_name(host) != host:
        entry = cfg.hosts.get(host_name(host))
    return entry


def model_limit_key(m: "ModelConfig") -> str | None:
    """The key of model ``m``'s own limits: :func:`geoagent.runtime.http.limit_key` ``(host, model)``
    (``"api.openai.com/gpt-4o"``); None for a model that calls no host. OpenAI, Anthropic and Gemini limit
    requests per model (per organization/project and model), so two models on one host are paced apart; two
    entries naming the same API model on one host share the key (the provider's one limit)."""
    from geoagent.providers.settings import limit_model
    from geoagent.runtime.http import limit_key

    return limit_key(m.host, limit_model(m.provider, m.model)) if m.host else None


def models_by_limit_key(cfg: CampaignConfig) -> dict[str, list["ModelConfig"]]:
    """``{limit key: [entries whose calls it paces]}`` (:func:`model_limit_key`), for the keys that have a limit of
    their own (:func:`model_limits`: some entry of the key sets one; the HTTP layer then paces every entry of the
    key by it)."""
    own = {model_limit_key(m) for m in cfg.models if m.host and _own_limit(cfg, m) is not None}
    out: dict[str, list[ModelConfig]] = {}
    for m in cfg.models:
        key = model_limit_key(m)
        if key in own:
            out.setdefault(key or "", []).append(m)
    return out


def _own_limit(cfg: CampaignConfig, m: "ModelConfig") -> tuple[float, float, int] | None:
    """``(requests, period_s, concurrency)`` of entry ``m``'s own limit key, or None when it has none: on a host
    with a ``[hosts]`` entry (a host-wide ceiling) an entry that sets neither ``rate`` nor ``concurrency`` is paced
    by the ceiling alone (as before per-model keys), and a field it does not set is the ceiling's."""
    entry = hosts_entry(cfg, m.host)
    if entry is None:
        return m.rate.requests, m.rate.period_s, m.concurrency
    own = m.model_fields_set
    if "rate" not in own and "concurrency" not in own:
        return None
    req, per = (m.rate.requests, m.rate.period_s) if "rate" in own else (entry.rate, entry.period_s)
    return req, per, m.concurrency if "concurrency" in own else entry.concurrency


def model_limits(cfg: CampaignConfig) -> dict[str, tuple[float, float, int]]:
    """``{limit key: (requests, period_s, concurrency)}``: each model's own rate and concurrency at its host
    (:func:`model_limit_key`), the lowest of the entries sharing a key (:func:`shared_host_limit`). A model
    without a key here (:func:`_own_limit`) is paced by its host's ``[hosts]`` entry."""
    out = {}
    for key, models in models_by_limit_key(cfg).items():
        limits = [lim for m in models if (lim := _own_limit(cfg, m)) is not None]
        req, per, _ = min(limits, key=lambda x: x[0] / x[1])
        out[key] = (req, per, min(x[2] for x in limits))
    return out


def model_time_limit(cfg: CampaignConfig, m: "ModelConfig") -> tuple[float, float, int, Any]:
    """``(requests, period_s, concurrency, ceiling)`` pacing model ``m``'s calls: its own limit key's
    (:func:`model_limits`; the ``[hosts]`` entry's when it has none), and the host-wide ceiling (the ``[hosts]``
    entry) or None; for the dry run's timing."""
    entry = hosts_entry(cfg, m.host)
    key = model_limit_key(m)
    limits = model_limits(cfg)
    if key in limits:
        req, per, conc = limits[key]
        return req, per, conc, entry
    if entry is not None:
        return entry.rate, entry.period_s, entry.concurrency, None
    return m.rate.requests, m.rate.period_s, m.concurrency, None


def model_limit_policies(cfg: CampaignConfig) -> dict[str, Any]:
    """``{limit key: HostPolicy}`` of every model's own limits (:func:`model_limits`), for
    :class:`~geoagent.runtime.http.HttpClient` ``model_policies`` (only rate, period_s and concurrency are read
    from it; retries and timeouts come with each call's policy, :func:`model_call_policy`)."""
    from geoagent.runtime.http import HostPolicy

    return {key: HostPolicy(rate=req, period_s=per, concurrency=conc, retry_unknown_outcome=False)
            for key, (req, per, conc) in model_limits(cfg).items()}


def host_ceilings(cfg: CampaignConfig) -> frozenset[str]:
    """Model hosts whose ``[hosts]`` entry is a host-wide ceiling over their models' own limit keys: every model
    call to such a host passes its model's limit and the host's (:class:`~geoagent.runtime.http.HttpClient`
    ``ceilings``)."""
    return frozenset(m.host for m in cfg.models if m.host and hosts_entry(cfg, m.host) is not None)


def http_limits(cfg: CampaignConfig) -> dict[str, Any]:
    """Keyword arguments of the campaign's :class:`~geoagent.runtime.http.HttpClient`: ``policies``
    (:func:`host_policies`), ``model_policies`` (:func:`model_limit_policies`) and ``ceilings``
    (:func:`host_ceilings`)."""
    return {"policies": host_policies(cfg), "model_policies": model_limit_policies(cfg),
            "ceilings": host_ceilings(cfg)}


def shared_host_warnings(cfg: CampaignConfig) -> list[str]:
    """Lines about limits that bind below what a model's entry asks for:

    * entries that name one API model on one host (one limit key: the provider's limit is per model) with
      different ``rate`` or ``concurrency``: their calls share the lowest (:func:`shared_host_limit`);
    * a ``[hosts]`` entry of a model host (a host-wide ceiling) whose rate or concurrency is below the sum of
      its models' own limits (of the models that set any): the models together get the ceiling, not each their
      own limit.
    """
    out = []
    for key, models in models_by_limit_key(cfg).items():
        limits = {(own[0] / own[1], own[2]) for m in models if (own := _own_limit(cfg, m)) is not None}
        if len(models) < 2 or len(limits) < 2:
            continue
        req, per, conc = model_limits(cfg)[key]
        each = "; ".join(f"{m.name!r}: {m.rate.requests:g} per {m.rate.period_s:g} s, concurrency {m.concurrency}"
                         for m in models)
        out.append(f"models {', '.join(repr(m.name) for m in models)} call one model, {models[0].model!r} on "
                   f"{models[0].host}, with different limits ({each}): the provider limits each model, so their "
                   f"calls share one limit, the lowest, {req:g} requests per {per:g} s and concurrency {conc}; give "
                   "them the same rate and concurrency")
    limits = model_limits(cfg)
    for host, models in models_by_host(cfg).items():
        entry = hosts_entry(cfg, host)
        if entry is None:
            continue
        keys = {model_limit_key(m) for m in models}
        own = [limits[k] for k in keys if k in limits]
        if not own:
            continue  # every model is paced by the entry alone
        # the models with limits of their own (the others are paced by the ceiling alone, by the file's choice)
        per_s = sum(r / p for r, p, _ in own)
        conc = sum(c for _, _, c in own)
        binds = []
        if entry.rate / entry.period_s < per_s - 1e-9:
            binds.append(f"rate {entry.rate:g} per {entry.period_s:g} s < their {per_s:g} per s")
        if entry.concurrency < conc:
            binds.append(f"concurrency {entry.concurrency} < their {conc}")
        if binds:
            out.append(f"[hosts.\"{host}\"] is a host-wide ceiling over the models "
                       f"{', '.join(repr(m.name) for m in models)}, below the sum of their own limits "
                       f"({'; '.join(binds)}): together their calls get at most the ceiling; raise or remove it "
                       "if the provider limits only per model")
    return out


def model_call_policy(cfg: CampaignConfig, m: "ModelConfig") -> Any:
    """The per-call policy of model ``m``'s requests (``ProviderSettings.policy``), or None without a host: its
    host's policy (:func:`host_policies`) with ``m``'s own ``max_attempts``, ``timeout_s`` and
    ``connect_timeout_s``, each unless a ``[hosts]`` entry for the host writes it; a paid provider also never retries an
    unknown outcome (``providers.http_base``). Its rate and concurrency are not what paces the calls: the HTTP
    layer applies the model's own limit key (:func:`model_limit_policies`) and any host-wide ceiling."""
    import dataclasses

    pol = host_policies(cfg).get(m.host) if m.host else None
    if pol is None:
        return pol
    own = {"max_attempts": m.max_attempts, "timeout_s": m.timeout_s,
           **({"connect_timeout_s": m.connect_timeout_s} if m.connect_timeout_s is not None else {})}
    entry = cfg.hosts.get(m.host)
    if entry is not None:
        # a [hosts] entry's retry fields win only where it writes them (review39a #3: its default timeout_s of 60 s
        # cut a reasoning model's 600 s calls, which were billed, booked unknown-outcome and sent again)
        own = {k: v for k, v in own.items() if k not in entry.model_fields_set}
    return dataclasses.replace(pol, **own) if own else pol


def host_policies(cfg: CampaignConfig) -> dict[str, Any]:
    """``{host: HostPolicy}`` for every ``[hosts]`` entry and every model ``base_url`` host.

    A model host's policy takes its models' lowest ``rate``/``concurrency`` (:func:`shared_host_limit`; it paces
    only requests to the host that carry no model limit key: the model calls are paced by their own keys,
    :func:`model_limit_policies`, and by a ``[hosts]`` entry as a ceiling), the longest ``timeout_s`` and the
    most ``max_attempts`` of them, and a body limit of :data:`geoagent.runtime.http.MODEL_MAX_BODY_BYTES` (16 MiB;
    other hosts 64 MiB); a host
    any paid model calls never retries a request whose outcome is unknown (it may have been billed). Where a
    host appears in both, ``[hosts]`` wins (its ``max_body_bytes`` where it writes it).
    """
    from geoagent.runtime.http import MODEL_MAX_BODY_BYTES, HostPolicy

    out: dict[str, Any] = {}
    for host, models in models_by_host(cfg).items():
        req, per, conc = shared_host_limit(models)
        connect = [m.connect_timeout_s for m in models if m.connect_timeout_s is not None]
        out[host] = HostPolicy(
            rate=req,
            period_s=per,
            concurrency=conc,
            max_attempts=max(m.max_attempts for m in models),
            timeout_s=max(m.timeout_s for m in models),
            retry_unknown_outcome=not any(m.paid for m in models),
            max_body_bytes=MODEL_MAX_BODY_BYTES,  # sec42 #2: an answer is far smaller than the generic 64 MiB
            **({"connect_timeout_s": max(connect)} if connect else {}),
        )
    sharing = models_by_host(cfg)

    def entry_policy(h: HostSection, models: Sequence[ModelConfig]) -> Any:
        return HostPolicy(
            rate=h.rate,
            period_s=h.period_s,
            concurrency=h.concurrency,
            max_attempts=h.max_attempts,
            backoff_base_s=h.backoff_base_s,
            backoff_max_s=h.backoff_max_s,
            timeout_s=h.timeout_s,
            # a model host's entry sets its limits; a paid model's sent request is still never retried
            retry_unknown_outcome=not any(m.paid for m in models),
            # a model host's entry that does not write max_body_bytes keeps the model hosts' 16 MiB (sec42 #2)
            max_body_bytes=(MODEL_MAX_BODY_BYTES if models and "max_body_bytes" not in h.model_fields_set
                            else h.max_body_bytes),
            max_retry_after_s=h.max_retry_after_s,
            **({"connect_timeout_s": h.connect_timeout_s} if h.connect_timeout_s is not None else {}),
        )

    for host, h in cfg.hosts.items():
        out[host] = entry_policy(h, sharing.get(host, []))
    for host, models in sharing.items():
        entry = hosts_entry(cfg, host)
        if entry is not None and host not in cfg.hosts:
            # an entry for the hostname alone (any port) is this model host's too: its limits, not the models'
            # lowest (it is the host-wide ceiling of host_ceilings under this very key)
            out[host] = entry_policy(entry, models)
    return out


def provider_settings(
    cfg: CampaignConfig,
    model_name: str,
    *,
    dotenv_path: str | os.PathLike[str] | None = None,
    require_key: bool = True,
) -> Any:
    """Build the :class:`geoagent.providers.settings.ProviderSettings` for model ``model_name``.

    The API key is looked up here, by the variable name in ``api_key_env`` (environment, then ``.env``; without
    it, a model on its provider's own API host uses the usual variable: :attr:`ModelConfig.key_env`),
    and passed on as a :class:`geoagent.secrets.Secret` (a local server's, ``local``: scrubbed from log lines and
    stored text only from 8 characters, a paid host's from 4: :mod:`geoagent.secrets`).

    Raises
    ------
    KeyError
        No such model.
    geoagent.secrets.SecretNotFound
        ``require_key`` and the variable is set nowhere (the message names the variable, not a value).
    ValueError
        ``require_key`` and the variable cannot be read: set on a ``.env`` line that does not parse, or holding
        control characters (without ``require_key``: no key).
    """
    from geoagent.secrets import get_secret, read_or_note

    m = cfg.model(model_name)
    api_key = None
    if m.key_env and require_key and m.paid:  # api_key_env, else OPENAI_API_KEY & co. (ModelConfig.key_env)
        api_key = get_secret(m.key_env, dotenv_path=dotenv_path, local=not m.on_paid_host)
    elif m.key_env:
        # without require_key (a dry run sends nothing) a variable that cannot be read is no key: the dry run says
        # so at the end of its report (walk31 #4)
        api_key = read_or_note(m.key_env, None if require_key else [], dotenv_path=dotenv_path,
                               local=not m.on_paid_host)[1]
    return _build_provider_settings(cfg, m, api_key)


def _build_provider_settings(cfg: CampaignConfig, m: ModelConfig, api_key: Any) -> Any:
    from geoagent.providers.settings import ProviderSettings

    values: dict[str, Any] = {
        "kind": m.provider,
        "model": m.model,
        "name": m.name,
        "base_url": m.base_url,
        "api_key": api_key,
        "seed": m.seed if m.seed is not None else cfg.campaign.seed,
        "replay_path": str(p) if (p := cfg.replay_path(m)) is not None else m.replay.path,
        "replay_release_dir": str(d) if (d := cfg.replay_release_dir(m)) is not None else None,
        "replay_key_field": m.replay.key_field,
        "replay_key_fields": tuple(m.replay.record_key_fields),
        "replay_text_field": m.replay.text_field,
        "replay_usage_field": m.replay.usage_field or None,
        "max_tokens_field": m.max_tokens_field,
        "reasoning_model": m.reasoning_model,
        "model_family": m.model_family,
        "api_version": m.api_version,
        "headers": dict(m.headers),
        "policy": model_call_policy(cfg, m),
    }
    accepted = _accepted_fields(ProviderSettings)
    return ProviderSettings(**{k: v for k, v in values.items() if accepted is None or k in accepted})


def _accepted_fields(cls: type) -> set[str] | None:
    fields = getattr(cls, "__dataclass_fields__", None) or getattr(cls, "model_fields", None)
    return set(fields) if fields else None


# ------------------------------------------------------------------------------------------------
# dry-run estimate (--simulate)
# ------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ModelEstimate:
    """Estimate for one model: calls, tokens, USD (expected and worst case), duration (s)."""

    model: str
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    worst_output_tokens: int = 0
    cost_usd: float = 0.0
    worst_case_usd: float = 0.0
    duration_s: float = 0.0
    throughput_per_s: float = 0.0
    #: what ``duration_s`` rests on: ``"latency"`` (the lower of the rate limit and concurrency /
    #: ``expected_latency_s``), ``"rate"`` (a simulated model, or one of another provider without its own
    #: ``expected_latency_s``, behind a local fake, which answers at once: the rate limit alone) or
    #: ``"none"`` (replay and offline simulated answers take no model time; duration and throughput 0)
    time_basis: str = "latency"
    #: replay models (with the run's providers): calls whose tokens and cost are the recorded usage, and calls
    #: without a usable recorded answer (they would end missing; no tokens, no cost)
    recorded: int = 0
    unanswered: int = 0
    #: over the cap only: the calls of this model the run would make before the cap stops it
    #: (:func:`simulate_dispatch`); None when the worst case is within the cap
    calls_before_cap: int | None = None
    #: input tokens the reservations count (:func:`reserved_input_tokens`: (prompt + system) chars/3 + 16 +
    #: max(``image_input_tokens``, the documented bill for the image's size) per image; before the
    #: ``input_estimate_factor``); ``input_tokens`` is the expected count (:func:`expected_input_tokens`)
    worst_input_tokens: int = 0
    #: calls with an image; of those, calls whose image size is known and billed by a documented formula
    #: (:func:`expected_image_tokens`), and those formulas' tokens (sum, largest) and rule
    images: int = 0
    images_sized: int = 0
    image_tokens_sized: int = 0
    image_tokens_max: int = 0
    image_size_max: tuple[int, int] | None = None
    image_rule: str = ""
    #: the sized images by kind (:func:`image_kind`: ``"photos"``, ``"gray-field control image"``,
    #: ``"placeholder images"``) -> [count, billed tokens (sum)], so the dry run reports the photos' tokens apart
    #: from a generated control image's (one mean over both hid 6-token photos behind a 512 px gray field)
    image_tokens_by_kind: dict[str, list[int]] = field(default_factory=dict)
    #: calls whose photo has no file yet, estimated at ``photo_size_assumed`` (width, height in px; ``estimate``'s
    #: ``missing_photos``): the photo's size, not the placeholder's, unless ``photos_as_placeholder``
    photos_no_file: int = 0
    photo_size_assumed: tuple[int, int] | None = None
    #: ``[images] missing = "placeholder"``: the run sends those calls the placeholder pixels
    #: (:data:`geoagent.workers.images.PLACEHOLDER_SIZE_PX`), so ``photo_size_assumed`` is the placeholder's size
    photos_as_placeholder: bool = False
    #: non-ASCII characters of the prompts (system prompts included) counted in ``input_tokens``, at one
    #: expected token each (:func:`expected_text_tokens`; 0 for the simulated provider, which bills chars / 4)
    non_ascii_chars: int = 0


def model_time_basis(m: "ModelConfig") -> str:
    """How a call of ``m`` spends time: ``"none"``, ``"rate"`` or ``"latency"`` (see :class:`ModelEstimate`).

    A ``replay`` model reads its answers from the recorded file and a ``simulated`` model without
    ``base_url`` makes them in-process: neither calls a model. A ``simulated`` model with ``base_url`` goes
    over HTTP to a local fake that answers at once, so only its host's rate limit paces it. Every other
    provider calls a model that takes ``expected_latency_s`` per call.
    """
    if m.provider == "replay" or (m.provider == "simulated" and not m.base_url):
        return "none"
    if m.provider == "simulated":
        return "rate"
    return "latency"


@dataclass(slots=True)
class Estimate:
    """Totals of :func:`estimate`; ``by_model`` holds the per-model parts."""

    calls: int = 0
    cached: int = 0
    #: planned requests whose request key repeats an earlier planned one's: the run answers them with
    #: that call's stored answer, so they are no call of their own (not in ``calls``)
    repeated: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float = 0.0
    worst_case_usd: float = 0.0
    duration_s: float = 0.0
    cap_usd: float = 0.0
    #: USD the campaign's ledger has already booked against the cap by earlier runs (settled + unknown outcome,
    #: :attr:`geoagent.runtime.ledger.LedgerSummary.total_usd`, and the dry run adds the open reservations of
    #: processes that are gone, ``gone_usd``); the calls to make share ``cap_usd`` minus it
    spent_usd: float = 0.0
    by_model: dict[str, ModelEstimate] = field(default_factory=dict)
    #: over the cap only: the calls the run would make before the cap stops it (:func:`simulate_dispatch`)
    calls_before_cap: int | None = None
    #: set by the dry run (:func:`geoagent.engine.run_would_handle`): planned tasks an earlier run finished or
    #: dead-lettered (not handled again), and tasks an earlier run queued that are still pending (estimated
    #: with their queued payloads)
    done_earlier: int = 0
    dead_earlier: int = 0
    queued_earlier: int = 0
    #: queued tasks the plan no longer holds, which the run sets aside unsent (:func:`geoagent.engine.set_aside_unplanned`)
    superseded_earlier: int = 0
    #: queued tasks whose stored payload cannot be read (a damaged queue file), which the run's lease dead-letters
    #: unsent (review43d #1)
    unreadable_earlier: int = 0
    #: set by the dry run: whether the call settings changed since the campaign's last recorded run
    #: (:func:`geoagent.runtime.manifest.config_changes`; True when that cannot be told): only then does the
    #: "planned earlier" line say which tasks the change reaches (queued and new ones) and which keep the old settings;
    #: ``"plan"``: only which tasks are planned changed (:func:`geoagent.engine._calls_changed`), nothing mixes
    config_changed: bool | str = True
    #: set by the dry run when the change is confined to some models' own settings and none of them mixes: why
    #: (:func:`geoagent.engine._per_model_drift_note`); None otherwise
    drift_note: str | None = None
    #: set by the dry run (:func:`geoagent.engine.gone_reservations`): open reservations of processes that are gone
    #: (a crashed run's calls in flight; USD and count), included in ``spent_usd`` as the run's recovery books them
    gone_usd: float = 0.0
    gone_calls: int = 0
    #: set by the dry run (:meth:`geoagent.engine.CampaignKind.expected_photo`): what a photo without a file is
    #: counted as (``ModelEstimate.photo_size_assumed``), e.g. the crawl's ``thumb_field``; "" = the default
    photo_basis: str = ""
    #: the planned calls to make, in queue order: model index (into ``by_model``), expected and worst USD
    _order: Any = field(default=None, repr=False)

    @property
    def left_usd(self) -> float:
        """USD of the cap left for the calls to make: ``cap_usd - spent_usd`` (>= 0)."""
        return max(0.0, self.cap_usd - self.spent_usd)

    @property
    def within_cap(self) -> bool:
        """True when every call to make fits at its worst case next to the spend already booked:
        ``spent_usd + worst_case_usd <= cap_usd`` (USD), as the ledger checks each reservation; True when there
        is no call to make."""
        return not self.calls or self.spent_usd + self.worst_case_usd <= self.cap_usd + 1e-12

    def to_json(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cached": self.cached,
            "repeated": self.repeated,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cost_usd": self.cost_usd,
            "worst_case_usd": self.worst_case_usd,
            "duration_s": self.duration_s,
            "cap_usd": self.cap_usd,
            "spent_usd": self.spent_usd,
            "calls_before_cap": self.calls_before_cap,
            "done_earlier": self.done_earlier,
            "dead_earlier": self.dead_earlier,
            "queued_earlier": self.queued_earlier,
            "superseded_earlier": self.superseded_earlier,
            "unreadable_earlier": self.unreadable_earlier,
            "gone_usd": self.gone_usd,
            "gone_calls": self.gone_calls,
            "by_model": {k: vars_of(v) for k, v in self.by_model.items()},
        }


def vars_of(obj: Any) -> dict[str, Any]:
    return {k: getattr(obj, k) for k in obj.__slots__}


def estimate_input_tokens(prompt: str, has_image: bool, *, image_tokens: int = IMAGE_INPUT_TOKENS) -> int:
    """Input-token estimate used for reservations and dry runs: ASCII chars/3 + the UTF-8 bytes of every other
    character + 16 + ``image_tokens`` for an image.

    A deliberate over-estimate for English text (~4 chars per token), so reservations err high. Other
    scripts cost far more tokens per character (about one per CJK character, often two or three for rarer
    ones), so chars/3 would under-reserve them; a byte-level BPE token (OpenAI, Anthropic; Gemini's byte
    fallback) holds at least one UTF-8 byte, so a non-ASCII character counts its UTF-8 length (CJK: 3).
    ASCII-only text counts exactly chars/3 + 16 as before. The image budget is the model's
    ``image_input_tokens`` (:meth:`ModelConfig.estimate_input_tokens`).
    :meth:`geoagent.providers.base.Provider.estimate_input_tokens` is this with the default image budget.
    """
    if prompt.isascii():
        text = len(prompt) // 3
    else:
        n_ascii = len(prompt.encode("ascii", "ignore"))
        text = n_ascii // 3 + (len(prompt.encode("utf-8", "surrogatepass")) - n_ascii)
    return text + 16 + (image_tokens if has_image else 0)


#: characters per text token expected for English prompts (OpenAI, Anthropic and Gemini all document about 4;
#: the simulated provider bills exactly this for any text: :func:`geoagent.sandbox.responders.simulated_usage`)
CHARS_PER_TOKEN_EXPECTED = 4


def expected_text_tokens(text: str, *, provider: str | None = None) -> int:
    """Expected tokens of ``text`` for the dry run: ceil(ASCII chars / 4) + 1 per non-ASCII character.

    Source: OpenAI's tokenizer guidance (help center, "What are tokens and how to count them",
    https://help.openai.com/en/articles/4936856-what-are-tokens-and-how-to-count-them): about 4 characters
    per token is a rule of thumb *for English*; non-English text has a higher token-to-character ratio (its
    example: Spanish "Cómo estás", 10 characters, is 5 tokens, i.e. 2 characters per token). English
    (ASCII) text keeps 4 characters per token; a non-ASCII character (accented letters, Cyrillic, Greek,
    Arabic, CJK, kana, hangul, emoji) counts one token: the example's ratio for its accented characters,
    about what byte-level BPE vocabularies give a CJK character, an underestimate for rare CJK characters
    and emoji (2-3 tokens). An expected figure, not a bound: the reservation counts a non-ASCII character
    at its UTF-8 bytes (at least 2; :func:`estimate_input_tokens`), so expected <= reserved always.

    ``provider = "simulated"``: ceil(chars / 4) for any text, what the simulated provider (and the local fakes'
    simulation) bills (:func:`geoagent.sandbox.responders.simulated_usage`).

    Parameters
    ----------
    text : str
        Prompt (and system prompt) text.
    provider : str, optional
        The ``[[models]]`` provider kind.

    Returns
    -------
    int
        Tokens (>= 0).
    """
    if provider == "simulated" or text.isascii():
        return -(-len(text) // CHARS_PER_TOKEN_EXPECTED)
    n_ascii = len(text.encode("ascii", "ignore"))
    return -(-n_ascii // CHARS_PER_TOKEN_EXPECTED) + (len(text) - n_ascii)


def expected_input_tokens(prompt: str, image_tokens: int = 0, *, provider: str | None = None) -> int:
    """Expected input tokens of one call: :func:`expected_text_tokens` of the prompt (ceil(ASCII chars / 4)
    + 1 per non-ASCII character) + ``image_tokens`` (the dry run's expected figure; reservations use the
    higher :func:`reserved_input_tokens`)."""
    return expected_text_tokens(prompt, provider=provider) + image_tokens


#: OpenAI models billing images by 32-px patches and their token multipliers, most specific first. Source: OpenAI
#: vision guide, "Calculating costs", section "GPT-4.1-mini, GPT-4.1-nano, o4-mini"
#: (https://platform.openai.com/docs/guides/images-vision#calculating-costs; checked against a mirror of the page's
#: text, github.com/voxmenthe/prompts, OPENAI_DOCS_MIRROR/.../guides/images-vision/index.md): multipliers
#: gpt-5-mini 1.62, gpt-5-nano 2.46, gpt-4.1-mini 1.62, gpt-4.1-nano 2.46, o4-mini 1.72; at most
#: :data:`OPENAI_PATCH_CAP` patches
OPENAI_PATCH_MULTIPLIERS = (("gpt-5-mini", 1.62), ("gpt-5-nano", 2.46), ("gpt-4.1-mini", 1.62), ("gpt-4.1-nano", 2.46),
                            ("o4-mini", 1.72))
OPENAI_PATCH_PX = 32
OPENAI_PATCH_CAP = 1536
#: the largest side (px) OpenAI's patch-billed models take at ``detail = "high"`` before counting patches (the
#: vision guide's "Model sizing behavior" table: "a 2048-pixel maximum dimension")
OPENAI_PATCH_MAX_EDGE_PX = 2048
#: gpt-5.4 and later OpenAI models (the vision guide's "Model sizing behavior" table, "gpt-5.4 and future models":
#: detail low, high, original, auto; "high allows up to 2,500 patches or a 2048-pixel maximum dimension. original
#: allows up to 10,000 patches or a 6000-pixel maximum dimension"; its detail table: on gpt-5.5 ``auto`` and an
#: omitted detail behave as ``original``; https://developers.openai.com/api/docs/guides/images-vision). The guide
#: lists no token multiplier for them, so a patch bills one token. ``low`` ("a low-resolution 512px x 512px
#: version") is expected at 16 x 16 = 256 patches and reserved at the ``high`` budget (the guide gives no bill).
#: Detail -> (patch budget, largest side in px).
OPENAI_LARGE_PATCH_BUDGETS = {"high": (2500, 2048), "original": (10000, 6000)}
OPENAI_LOW_DETAIL_PATCHES = 256
#: OpenAI model ids known to predate gpt-5.4's image rule (tile-billed: gpt-4o, gpt-4.1, gpt-4.5, o1, o3, gpt-5,
#: computer-use-preview, billing at most 1,445 tokens an image; or the 1,536-patch models): every other OpenAI id
#: (gpt-5.4, gpt-5.5, gpt-6, ...: :func:`geoagent.providers.sampling.is_openai_model_id`) is billed by
#: :data:`OPENAI_LARGE_PATCH_BUDGETS`, so a newer model is reserved its larger worst case rather than a sixth of it
_OPENAI_BEFORE_LARGE_PATCHES = re.compile(
    r"^(?:gpt-(?:3\.5|4(?:o|\.\d+|-|$)|5(?:\.[0-3])?(?:-|$))|chatgpt-4o|o[1-4](?:[-.:_]|$)|codex-mini"
    r"|computer-use)")
#: Anthropic (vision guide, "Evaluate image size", https://docs.anthropic.com/en/docs/vision): an image whose long
#: edge is over 1,568 px or that is over ~1,600 tokens is scaled down (aspect ratio kept) until within the limits;
#: tokens = width x height / 750. The guide's table of the largest sizes NOT resized (1:1 1092x1092, 3:4 951x1268,
#: 2:3 896x1344, 9:16 819x1456, 1:2 784x1568) is reproduced by "at most 1,568 patches of 28 x 28 px" (39 x 39 =
#: 1,521; 34 x 46 = 1,564; 32 x 48 = 1,536; 30 x 52 = 1,560; 28 x 56 = 1,568; one more px on both sides of
#: 1092x1092 needs 40 x 40 = 1,600): the 28-px patch grid of the guide's current version
#: (https://platform.claude.com/docs/en/build-with-claude/vision, which bills ceil(w/28) x ceil(h/28) "visual
#: tokens"), so that is the limit used here. The table's 784x1568 bills 1,639.08 -> 1,640 tokens: "~1,600" is
#: approximate, and the largest bill of any size within the limits is ceil(1568 x 784 / 750) = 1,640
#: (:data:`ANTHROPIC_MAX_IMAGE_TOKENS`, the reservation's bound for an image that gets resized).
ANTHROPIC_MAX_EDGE_PX = 1568
ANTHROPIC_PATCH_PX = 28
ANTHROPIC_MAX_PATCHES = 1568
ANTHROPIC_PX_PER_TOKEN = 750
ANTHROPIC_MAX_IMAGE_TOKENS = math.ceil(ANTHROPIC_MAX_PATCHES * ANTHROPIC_PATCH_PX ** 2 / ANTHROPIC_PX_PER_TOKEN)
#: Claude Opus 4.7 raised the native resolution (the vision guide's per-model table, not readable in full here;
#: its release notes and measurements quoted by third parties: "high-resolution vision (3.75 MP)", long edge up
#: to 2,576 px, e.g. claudecodecamp.com "Images cost 3x more tokens in Claude Opus 4.7"): long edge <= 2,576 px
#: and at most 4,784 patches of 28 px (4,784 x 784 px = 3.75 MP). Every Claude model id not known to predate it
#: (:func:`anthropic_resolution`) gets these limits, so a newer model is reserved its larger worst case
#: (ceil(4,784 x 784 / 750) = 5,001 tokens) rather than a third of it.
ANTHROPIC_HIRES_MAX_EDGE_PX = 2576
ANTHROPIC_HIRES_MAX_PATCHES = 4784
ANTHROPIC_HIRES_MAX_IMAGE_TOKENS = math.ceil(ANTHROPIC_HIRES_MAX_PATCHES * ANTHROPIC_PATCH_PX ** 2
                                             / ANTHROPIC_PX_PER_TOKEN)
#: Claude model ids with the 1,568-px native resolution: Claude 2/3/3.5/3.7 and the 4.x models before 4.7
#: (claude-3-5-sonnet-20241022, claude-sonnet-4-20250514, claude-opus-4-1, claude-haiku-4-5, claude-sonnet-4.6, ...)
_ANTHROPIC_STANDARD_RES = re.compile(
    r"^claude-(?:instant|2|3)(?:[-.]|$)"
    r"|^claude-(?:opus|sonnet|haiku)-4(?:[-.][0-6])?(?:-\d{8}|-latest|-v\d.*|@.*)?$"
    r"|^claude-(?:opus|sonnet|haiku)-4(?:[-.][0-6])?-\d{8}")


def _image_family(provider: str, model_id: str) -> tuple[str, str]:
    """(provider whose image rule applies, bare lower-case model id): the model's family bills the image whatever
    protocol carries the call (Gemini or Claude behind an OpenAI-compatible endpoint keep their own rules)."""
    mid = model_id.lower().rsplit("/", 1)[-1]
    if mid.startswith("ft:"):  # a fine-tuned model (ft:gpt-4o-mini-2024-07-18:org::id) bills as its base model
        mid = mid[3:]
    if provider == "openai" and mid.startswith("gemini"):
        provider = "gemini"
    elif provider == "openai" and mid.startswith("claude"):
        provider = "anthropic"
    return provider, mid


def openai_patches(width_px: int, height_px: int, *, budget: int = OPENAI_PATCH_CAP,
                   max_edge_px: int = OPENAI_PATCH_MAX_EDGE_PX) -> tuple[int, int]:
    """32-px patches OpenAI bills for an image on the patch-billed models: (documented count, upper bound).

    OpenAI vision guide, "Calculating costs" (see :data:`OPENAI_PATCH_MULTIPLIERS`) and "Model sizing behavior":
    an image whose long side is over ``max_edge_px`` (2,048 px; 6,000 for gpt-5.4's ``original``) is first scaled
    to fit it; A. raw = ceil(w/32) x ceil(h/32); B. over ``budget`` patches (1,536; 2,500 or 10,000 for gpt-5.4 and
    later, :data:`OPENAI_LARGE_PATCH_BUDGETS`), the image is scaled by r = sqrt(32^2 x budget / (w x h)), then by
    min(floor(w r/32)/(w r/32), floor(h r/32)/(h r/32)) so one side fits a whole number of patches; C. patches =
    ceil(w'/32) x ceil(h'/32), at most ``budget``. The guide's example: 1800 x 2400 -> 1,452. The bound is
    min(budget, raw) of the image as sent (scaling only lowers the count): a user's trials (community.openai.com,
    "Vision Pricing calculator: inaccurate resizing/rounding vs API costs", 2025) found gpt-4.1-mini billing a
    4000 x 1474 image 1,536 patches where step B gives 1,449, so reservations keep the budget.
    """
    w, h = int(width_px), int(height_px)
    raw = math.ceil(w / OPENAI_PATCH_PX) * math.ceil(h / OPENAI_PATCH_PX)
    bound = min(budget, raw)
    if max(w, h) > max_edge_px:
        s = max_edge_px / max(w, h)
        w, h = max(1, math.floor(w * s)), max(1, math.floor(h * s))
    fitted = math.ceil(w / OPENAI_PATCH_PX) * math.ceil(h / OPENAI_PATCH_PX)
    if fitted <= budget:
        return fitted, bound
    r = math.sqrt(OPENAI_PATCH_PX ** 2 * budget / (w * h))
    pw, ph = w * r / OPENAI_PATCH_PX, h * r / OPENAI_PATCH_PX
    r *= min(math.floor(pw) / pw, math.floor(ph) / ph)
    # 1e-9: the rescaled side is a whole number of patches up to float noise (33.000000000004 is 33)
    n = math.ceil(w * r / OPENAI_PATCH_PX - 1e-9) * math.ceil(h * r / OPENAI_PATCH_PX - 1e-9)
    return min(budget, n), bound


def _looks_openai(model_id: str) -> bool:
    """Whether ``model_id`` (after any ``vendor/`` or ``ft:`` prefix) is an OpenAI model id
    (:func:`geoagent.providers.sampling.is_openai_model_id`)."""
    from geoagent.providers.sampling import is_openai_model_id

    return is_openai_model_id(_image_family("openai", model_id)[1])


def openai_large_patch_model(model_id: str) -> bool:
    """Whether an OpenAI model id bills images by gpt-5.4's patch budgets (:data:`OPENAI_LARGE_PATCH_BUDGETS`):
    gpt-5.4, gpt-5.5, gpt-6 and every OpenAI id (:func:`_looks_openai`) not known to predate them
    (:data:`_OPENAI_BEFORE_LARGE_PATCHES`). ``model_id`` may carry a ``vendor/`` or ``ft:`` prefix."""
    return _looks_openai(model_id) and not _OPENAI_BEFORE_LARGE_PATCHES.match(_image_family("openai", model_id)[1])


def _anthropic_patch_count(w: int, h: int) -> int:
    return math.ceil(w / ANTHROPIC_PATCH_PX) * math.ceil(h / ANTHROPIC_PATCH_PX)


def anthropic_resolution(model_id: str) -> tuple[int, int, int]:
    """Native-resolution limits of a Claude model: (long edge px, 28-px patches, largest image bill in tokens).

    (1568, 1568, 1640) for ids known to predate Claude Opus 4.7 (:data:`ANTHROPIC_MAX_EDGE_PX`); (2576, 4784,
    5001) for claude-opus-4-7 and every id not recognised as older (:data:`ANTHROPIC_HIRES_MAX_EDGE_PX`): an
    unknown or newer model is reserved the larger worst case. ``model_id`` may carry a ``vendor/`` prefix and
    dots for dashes (``anthropic/claude-opus-4.7``).
    """
    mid = model_id.lower().rsplit("/", 1)[-1]
    if _ANTHROPIC_STANDARD_RES.search(mid):
        return ANTHROPIC_MAX_EDGE_PX, ANTHROPIC_MAX_PATCHES, ANTHROPIC_MAX_IMAGE_TOKENS
    return ANTHROPIC_HIRES_MAX_EDGE_PX, ANTHROPIC_HIRES_MAX_PATCHES, ANTHROPIC_HIRES_MAX_IMAGE_TOKENS


def anthropic_image_size_px(width_px: int, height_px: int, *, max_edge_px: int = ANTHROPIC_MAX_EDGE_PX,
                            max_patches: int = ANTHROPIC_MAX_PATCHES) -> tuple[int, int]:
    """(width, height) in px Claude sees an image at: unchanged when its long edge is <= ``max_edge_px`` and it
    covers at most ``max_patches`` patches of 28 px, else the largest size of the same aspect ratio within both
    (long edge in whole px, short edge floor(long x short / long)); see :data:`ANTHROPIC_MAX_EDGE_PX` for the
    sources. The defaults are the 1,568-px models' limits (:func:`anthropic_resolution` gives a model's).
    E.g. 2000 x 2000 -> 1092 x 1092 (the guide's 1:1 size), 3136 x 1568 -> 1568 x 784."""
    w, h = int(width_px), int(height_px)
    if max(w, h) <= max_edge_px and _anthropic_patch_count(w, h) <= max_patches:
        return w, h
    long_px, short_px = max(w, h), min(w, h)
    long_new = min(max_edge_px, long_px)
    area = long_new * (long_new * short_px / long_px)
    limit = max_patches * ANTHROPIC_PATCH_PX ** 2
    if area > limit:  # start near the area limit; the patch grid's rounding is settled below
        long_new = min(long_new, math.floor(long_new * math.sqrt(limit / area)) + 1)
    while True:
        short_new = max(1, long_new * short_px // long_px)
        if long_new <= 1 or _anthropic_patch_count(long_new, short_new) <= max_patches:
            break
        long_new -= 1
    return (long_new, short_new) if w >= h else (short_new, long_new)


def expected_image_tokens(provider: str, model_id: str, size_px: tuple[int, int],
                          params: Mapping[str, Any] | None = None) -> tuple[int, str] | None:
    """Input tokens a provider bills for one image of ``size_px`` (width, height in px) by its documented rule,
    and the rule used; None when no documented rule is known for this provider and model (the caller falls back
    on the model's ``image_input_tokens``). The dry run's expected figure; reservations count
    :func:`reserved_image_tokens` (>= this).

    * OpenAI, gpt-4o / gpt-4o-mini (OpenAI vision guide, "Calculating costs"): ``detail = "low"``: the base
      tokens; else the image is scaled to fit 2048 x 2048, then its shortest side to 768 px (never up), and
      billed base + per-tile tokens for each 512-px tile: 85 + 170 per tile (gpt-4o), 2,833 + 5,667 per tile
      (gpt-4o-mini). gpt-5-mini / gpt-5-nano / gpt-4.1-mini / gpt-4.1-nano / o4-mini (same guide): 32 x 32-px
      patches (:func:`openai_patches`: the guide's scale-down over 1,536 patches, e.g. 1800 x 2400 -> 1,452)
      times 1.62 / 2.46 / 1.62 / 2.46 / 1.72 (:data:`OPENAI_PATCH_MULTIPLIERS`), rounded up. gpt-5.4, gpt-5.5 and
      every OpenAI id not known to be older (:func:`openai_large_patch_model`): the same patches, at most 2,500 at
      ``detail = "high"`` (long side 2,048 px) and 10,000 at ``"original"`` (6,000 px; what ``"auto"`` and no
      detail mean on gpt-5.5), one token each (:data:`OPENAI_LARGE_PATCH_BUDGETS`; 4032 x 3024 -> 9,890); ``"low"``
      256. A fine-tuned id (``ft:gpt-4o-mini-...``) bills as its base model.
      Other OpenAI-compatible models: None (their rules differ, other servers; OpenAI's other tile-billed
      models stay below the default ``image_input_tokens``).
    * Anthropic (vision guide, "Evaluate image size"): the image as Claude sees it
      (:func:`anthropic_image_size_px`: long edge <= 1,568 px, at most 1,568 28-px patches; claude-opus-4-7 and
      ids not known to be older: 2,576 px, 4,784 patches, :func:`anthropic_resolution`), tokens =
      ceil(width x height / 750): 1000 x 1000 -> 1,334; 2000 x 2000 -> 1092 x 1092 -> 1,590; 784 x 1568
      (the guide's largest 1:2 size, not resized) -> 1,640.
    * Gemini (token guide, Gemini 2.0 and later): both sides <= 384 px: 258 tokens; else 258 per 768 x 768
      tile: ceil(w / 768) x ceil(h / 768) x 258.
    * simulated: 765 per image (:data:`geoagent.sandbox.responders.SIM_IMAGE_TOKENS`, what it bills).

    A ``gemini*`` or ``claude*`` model id (after any ``vendor/`` prefix) behind ``provider = "openai"`` (an
    OpenAI-compatible endpoint: Gemini's, a router's) is billed by its own family's rule.
    """
    return _image_tokens(provider, model_id, size_px, params, worst=False)


def fake_image_tokens() -> tuple[int, str]:
    """Input tokens the local fakes (:mod:`geoagent.sandbox`, ``*.sandbox.invalid``) bill for one image, whatever
    its size or model, and the rule as the dry run names it: (:data:`geoagent.sandbox.responders.SIM_IMAGE_TOKENS`
    (765), text). The one constant the fakes bill by (:func:`geoagent.sandbox.llm_common.billed_image_tokens`,
    default ``image_billing = "simulated"``), so the dry run's expected figure is the fakes' bill."""
    from geoagent.sandbox.responders import SIM_IMAGE_TOKENS

    return SIM_IMAGE_TOKENS, f"local fake (geoagent/sandbox): {SIM_IMAGE_TOKENS} per image, as the fakes bill"


def _on_fake(m: Any) -> bool:
    """Whether ``[[models]]`` entry ``m`` names a local fake (``base_url`` host on ``*.sandbox.invalid``)."""
    from urllib.parse import urlsplit

    host = urlsplit(getattr(m, "base_url", None) or "").hostname or ""
    return getattr(m, "provider", None) in ("openai", "anthropic", "gemini") and host.endswith(".sandbox.invalid")


def reserved_image_tokens(provider: str, model_id: str, size_px: tuple[int, int],
                          params: Mapping[str, Any] | None = None) -> tuple[int, str] | None:
    """The most input tokens a provider can bill for one image of ``size_px`` (width, height in px) under its
    documented rule, and the rule; None without a documented rule. What reservations count for the image
    (with at least the model's ``image_input_tokens``: :func:`reserved_input_tokens`); always >=
    :func:`expected_image_tokens`. It differs from the expected bill where the documented resize leaves room:

    * OpenAI patch-billed models: min(1536, ceil(w/32) x ceil(h/32)) patches x multiplier (the cap, not the
      guide's scale-down: :func:`openai_patches`), e.g. gpt-4.1-mini 1800 x 2400: 1,536 x 1.62 -> 2,489
      (expected 1,452 x 1.62 -> 2,353); gpt-5.4 and later: min(2,500 at ``high`` or ``low``, 10,000 otherwise,
      patches), e.g. gpt-5.5 4032 x 3024: 10,000 (expected 9,890).
    * Anthropic: an image within the limits: max(ceil(w x h / 750), ceil(w/28) x ceil(h/28)) (the guide's
      formula and its current patch count); an image Claude resizes: :data:`ANTHROPIC_MAX_IMAGE_TOKENS`
      (1,640, the largest bill of any size within the limits, whatever rounding the resize uses; 5,001 for the
      2,576-px models, :data:`ANTHROPIC_HIRES_MAX_IMAGE_TOKENS`).
    * Gemini: the larger of the 768-px tile count and its crop-unit form (tile side min(w, h) / 1.5, clamped to
      256-768 px, as implementations of the token guide's tiling read it; not confirmed against Google's text
      here): the two agree for ordinary photos (1920 x 1080: 6 tiles either way) and differ for narrow strips
      (3000 x 400: 4 vs 24 tiles), where the reservation takes the larger.
    * Others: :func:`expected_image_tokens`.
    """
    return _image_tokens(provider, model_id, size_px, params, worst=True)


def _image_tokens(provider: str, model_id: str, size_px: tuple[int, int], params: Mapping[str, Any] | None, *,
                  worst: bool) -> tuple[int, str] | None:
    w, h = int(size_px[0]), int(size_px[1])
    if w <= 0 or h <= 0:
        return None
    provider, mid = _image_family(provider, model_id)
    if provider == "simulated":
        from geoagent.sandbox.responders import SIM_IMAGE_TOKENS

        return SIM_IMAGE_TOKENS, f"simulated provider: {SIM_IMAGE_TOKENS} per image"
    if provider == "openai":
        mult = next((f for prefix, f in OPENAI_PATCH_MULTIPLIERS if mid.startswith(prefix)), None)
        if mult is not None:
            documented, bound = openai_patches(w, h)
            patches = bound if worst else documented
            return (math.ceil(patches * mult - 1e-9),
                    f"OpenAI {mid}: 32-px patches (at most {OPENAI_PATCH_CAP}) x {mult}")
        if openai_large_patch_model(mid):
            detail = str((params or {}).get("detail") or "auto").lower()
            budget, edge = OPENAI_LARGE_PATCH_BUDGETS["high" if detail in ("high", "low") else "original"]
            documented, bound = openai_patches(w, h, budget=budget, max_edge_px=edge)
            if detail == "low" and not worst:
                documented = min(documented, OPENAI_LOW_DETAIL_PATCHES)
            shown = "auto, as original" if detail not in ("high", "low", "original") else detail
            # the guide lists no multiplier for these models; their -mini and -nano variants are reserved at
            # gpt-5-mini's and gpt-5-nano's (1.62, 2.46) in case they bill so (review34 #7; unconfirmed either way)
            mult = 2.46 if worst and "-nano" in mid else 1.62 if worst and "-mini" in mid else 1.0
            return (math.ceil(bound * mult - 1e-9) if worst else documented,
                    f"OpenAI {mid} detail {shown}: 32-px patches (at most {budget}), "
                    + (f"reserved x {mult} (as gpt-5-mini/-nano)" if mult != 1.0 else "1 token each"))
        if mid.startswith("gpt-4o-mini"):
            base, per_tile, family = 2833, 5667, "gpt-4o-mini"
        elif mid.startswith(("gpt-4o", "chatgpt-4o")):
            base, per_tile, family = 85, 170, "gpt-4o"
        else:
            return None
        if str((params or {}).get("detail", "")).lower() == "low":
            return base, f"OpenAI {family} low detail: {base} per image"
        scale = min(1.0, 2048 / max(w, h))
        sw, sh = w * scale, h * scale
        scale = min(1.0, 768 / min(sw, sh))
        sw, sh = sw * scale, sh * scale
        tiles = math.ceil(sw / 512) * math.ceil(sh / 512)
        return base + per_tile * tiles, f"OpenAI {family} high detail: {base} + {per_tile} per 512-px tile"
    if provider == "anthropic":
        max_edge, max_patches, max_tokens = anthropic_resolution(mid)
        rule = (f"Anthropic: width x height / {ANTHROPIC_PX_PER_TOKEN} (long edge <= {max_edge} px, "
                f"at most {max_patches} {ANTHROPIC_PATCH_PX}-px patches)")
        sw, sh = anthropic_image_size_px(w, h, max_edge_px=max_edge, max_patches=max_patches)
        if worst and (sw, sh) != (w, h):
            return max_tokens, rule
        n = math.ceil(sw * sh / ANTHROPIC_PX_PER_TOKEN)
        if worst:
            n = max(n, _anthropic_patch_count(sw, sh))
        return n, rule
    if provider == "gemini":
        if w <= 384 and h <= 384:
            return 258, "Gemini: 258 per image up to 384 px, else 258 per 768-px tile"
        n = math.ceil(w / 768) * math.ceil(h / 768) * 258
        if worst:  # the crop-unit form of the tiling (see reserved_image_tokens): more tiles for a narrow strip
            crop = max(256.0, min(768.0, min(w, h) / 1.5))
            n = max(n, math.ceil(w / crop) * math.ceil(h / crop) * 258)
        return n, "Gemini: 258 per image up to 384 px, else 258 per 768-px tile"
    return None


def reserved_input_tokens(m: "ModelConfig", prompt: str, params: Mapping[str, Any] | None = None, *,
                          has_image: bool = False, size_px: tuple[int, int] | None = None) -> int:
    """Input tokens one call's ledger reservation counts, before ``[budget] input_estimate_factor``: the
    worst case of issue 2 point 7, used by the model caller, the crawl's metered calls and the dry run alike.

    (prompt + ``params["system"]``) chars / 3 + 16 (:func:`estimate_input_tokens`: a non-ASCII character
    counts its UTF-8 bytes; the system prompt is sent and billed too), plus for an image
    max(``image_input_tokens``, the most the provider's documented rule bills for an image of ``size_px``
    (width, height in px): :func:`reserved_image_tokens`, >= :func:`expected_image_tokens`). An image whose
    size is unknown (None: no bytes yet, a header that could not be read) or a model without a documented
    rule counts ``image_input_tokens``.

    Parameters
    ----------
    m : ModelConfig
        The ``[[models]]`` entry (provider, model id, ``image_input_tokens``).
    prompt : str
        The user prompt text.
    params : mapping, optional
        The request's merged params (``system`` is counted; ``detail`` feeds the OpenAI rule).
    has_image : bool
        Whether the call attaches an image.
    size_px : (int, int), optional
        The image's (width, height) in px.

    Returns
    -------
    int
        Input tokens (before the factor).
    """
    system = (params or {}).get("system")
    text = prompt + (str(system) if system else "")
    img = 0
    if has_image:
        img = m.image_input_tokens
        # an Azure deployment bills its images as the model it serves (model_family)
        billed = reserved_image_tokens(m.provider, getattr(m, "openai_rules_id", m.model), size_px, params) \
            if size_px else None
        if billed is not None:
            img = max(img, billed[0])
    return estimate_input_tokens(text, has_image, image_tokens=img)


def reservation_usd(m: "ModelConfig", prompt: str, params: Mapping[str, Any] | None, max_output_tokens: int, *,
                    input_estimate_factor: float, has_image: bool = False,
                    size_px: tuple[int, int] | None = None) -> float:
    """The ledger reservation of one model call (USD): the one worst-case rule of issue 2 point 7, used by the
    model caller, the crawl's metered audit calls (:func:`geoagent.crawl.llmcall.metered_generate`) and the dry
    run alike, so the same request reserves the same amount wherever it is sent.

    ceil(:func:`reserved_input_tokens` x ``input_estimate_factor``) tokens at the input price plus
    ``max_output_tokens`` at the output price (:meth:`ModelConfig.worst_case_usd`).

    Parameters
    ----------
    m : ModelConfig
        The ``[[models]]`` entry (prices, provider, model id, ``image_input_tokens``).
    prompt : str
        The user prompt text.
    params : mapping or None
        The request's params as sent (``system`` is counted; ``detail`` feeds OpenAI's image rule).
    max_output_tokens : int
        The request's output-token limit (tokens).
    input_estimate_factor : float
        ``[budget] input_estimate_factor`` of the campaign (>= 1).
    has_image, size_px
        Whether the call attaches an image, and its (width, height) in px when known.

    Returns
    -------
    float
        USD to reserve.

    Raises
    ------
    ValueError
        ``input_estimate_factor`` below 1 (a reservation under the estimate could let calls pass the cap).
    """
    if not input_estimate_factor >= 1.0:
        raise ValueError(f"input_estimate_factor must be >= 1, got {input_estimate_factor!r}")
    n_in = reserved_input_tokens(m, prompt, params, has_image=has_image, size_px=size_px)
    return m.worst_case_usd(math.ceil(n_in * input_estimate_factor), int(max_output_tokens))


def _header_size_px(fp: Any) -> tuple[int, int] | None:
    """(width, height) in px from an image file's header (Pillow), or None when it cannot be read.

    Pillow refuses to open images above its decompression-bomb limit (``Image.MAX_IMAGE_PIXELS`` x 2, about
    179 megapixels: ``DecompressionBombError``; a warning above the limit itself), but a provider still bills
    such an image by its size (e.g. gpt-4o-mini: a 20000 x 10000 PNG is scaled to 1536 x 768, 6 tiles); only
    the header is read here, never the pixels, so the size is read without that check (the format plugins
    Pillow's ``Image.open`` itself tries, in its order).
    """
    from PIL import Image

    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(fp) as img:
                return img.size
    except Image.DecompressionBombError:
        pass
    except Exception:
        return None
    Image.init()
    for fmt in Image.ID:
        factory, accept = Image.OPEN[fmt]
        fp.seek(0)
        prefix = fp.read(16)
        if accept is not None and not accept(prefix):
            continue
        fp.seek(0)
        try:
            img = factory(fp, "")
        except Exception:  # noqa: BLE001 - not this format
            continue
        size = img.size
        w, h = int(size[0]), int(size[1])
        return (w, h) if w > 0 and h > 0 else None
    return None


#: :func:`image_kind` of a request's image
IMAGE_KIND_PHOTO, IMAGE_KIND_BLANK, IMAGE_KIND_PLACEHOLDER = "photos", "gray-field control image", "placeholder images"


def image_kind(image_ref: str | None, image_id: str | None, image: bytes | None = None) -> str:
    """What a request's image is, for the dry run's per-kind token figures: the generated gray field of the
    no-image control (:data:`IMAGE_KIND_BLANK`), a generated placeholder (:data:`IMAGE_KIND_PLACEHOLDER`: a
    ``synthetic:`` ref, or an image id without a ref), else a photo (a file, or bytes given with the request)."""
    from geoagent.workers import images as im

    if image is not None:
        return IMAGE_KIND_PHOTO
    if image_ref == im.BLANK_GRAY_REF:
        return IMAGE_KIND_BLANK
    if not image_ref or image_ref.startswith(im.SYNTHETIC_PREFIX):
        return IMAGE_KIND_PLACEHOLDER
    return IMAGE_KIND_PHOTO


def image_size_px(image_ref: str | None, image_id: str | None, image: bytes | None = None, *,
                  base_dir: str | os.PathLike[str] | None = None,
                  cache: dict[str, tuple[int, int] | None] | None = None) -> tuple[int, int] | None:
    """(width, height) in px of the image a request attaches, without loading its pixels: generated
    placeholders have fixed sizes (:mod:`geoagent.workers.images`), a file's header is read (Pillow); None
    when there is no image or it cannot be read (the run would fail that task; the estimate then falls back
    on ``image_input_tokens``)."""
    from geoagent.workers import images as im

    if image is not None:
        import io

        return _header_size_px(io.BytesIO(image))
    if not image_ref:
        return im.PLACEHOLDER_SIZE_PX if image_id is not None else None
    if image_ref == im.BLANK_GRAY_REF:
        return im.BLANK_SIZE_PX
    if image_ref.startswith(im.SYNTHETIC_PREFIX):
        return im.PLACEHOLDER_SIZE_PX
    path = str(im.resolve_image_path(image_ref, base_dir))
    if cache is not None and path in cache:
        return cache[path]
    try:
        with open(path, "rb") as fp:
            size = _header_size_px(fp)
    except OSError:
        size = None
    if cache is not None:
        cache[path] = size
    return size


def estimate(cfg: CampaignConfig, planned_requests: Iterable[Any], *, store: Any = None,
             providers: Mapping[str, Any] | None = None,
             image_base_dir: str | os.PathLike[str] | None = None, spent_usd: float = 0.0,
             fake_models: Iterable[str] = (), missing_photos: Iterable[str] = (),
             photo_models: Iterable[str] = (), photo_size_px: tuple[int, int] | None = None) -> Estimate:
    """Estimate calls, tokens, USD and duration of a campaign before any spend (``--simulate``).

    Parameters
    ----------
    cfg : CampaignConfig
    planned_requests : iterable
        Model-caller payloads (dicts with ``model``, ``prompt``, optional ``image_ref``/``image_id`` and
        ``params``) or ``(model_name, ModelRequest)`` pairs.
    store : ResponseStore, optional
        If given, requests whose response is already stored are counted as ``cached`` and cost nothing.
    image_base_dir : path, optional
        Folder relative image paths are resolved against (as the model caller does), to read image sizes.
    providers : mapping of model name to Provider, optional
        The run's providers. A ``replay`` model's requests then use the token usage recorded in its file
        (``recorded_usage``) for tokens and expected USD instead of the prompt-length estimate; requests
        without a usable recorded answer are counted in ``unanswered`` (they would end missing).
    spent_usd : float
        USD the campaign's ledger already counts against the cap (settled + unknown outcome of earlier runs;
        the dry run reads it from ``state/<campaign>/campaign.sqlite``). The cap check
        (:attr:`Estimate.within_cap`) and the dispatch replay (:func:`simulate_dispatch`) start from it, as the
        ledger's reservations do. Default 0 (a first run).
    fake_models : iterable of str
        Names of the models served by the local fakes (:mod:`geoagent.sandbox`: a ``base_url`` on
        ``*.sandbox.invalid``, which the sandbox rewrites to a loopback port before the estimate; pass the names
        read from the config as written, :func:`geoagent.sandbox.launch.simulated_models`). A model whose
        ``base_url`` still names a fake counts as one too. Their expected figures follow the fakes' billing
        (:func:`fake_image_tokens`: :data:`geoagent.sandbox.responders.SIM_IMAGE_TOKENS` per image, text
        chars / 4), not the real provider's rule; their reservations are unchanged.
    missing_photos, photo_models : iterable of str
        Image ids whose photo has no file yet (:attr:`geoagent.image_files.MissingImages.photo_ids`), and the
        models that must be sent photos (:func:`geoagent.image_files.needs_photos` on the config as written). A
        request of one of those models for one of those images (no ``image_ref``: the run would attach placeholder
        pixels today) is estimated, expected and worst case, at ``photo_size_px`` (width, height in px; default
        :data:`geoagent.workers.images.EXPECTED_PHOTO_SIZE_PX`, 1024 x 768): the photo the campaign will send
        once the crawl has fetched it, not the 640 x 480 placeholder (which made the expected cost too low).
        Counted in :attr:`ModelEstimate.photos_no_file`. Except with ``[images] missing = "placeholder"``: that
        run sends those requests the placeholder pixels (:data:`geoagent.workers.images.PLACEHOLDER_SIZE_PX`,
        640 x 480; a task keeps the payload it was queued with, so a photo found later does not change it), so
        they are estimated at the placeholder's size (:attr:`ModelEstimate.photos_as_placeholder`).

    Returns
    -------
    Estimate
        ``input_tokens`` and ``cost_usd`` are expected values: the prompt's (and system prompt's)
        :func:`expected_text_tokens` (ASCII chars / 4 + 1 per non-ASCII character) plus, per image, the tokens
        the provider's documented rule bills for its size (:func:`expected_image_tokens`; the model's
        ``image_input_tokens`` where the size or the rule is unknown); ``worst_input_tokens`` is what the
        reservations count (:func:`reserved_input_tokens`: (prompt + system) chars / 3 + 16 +
        max(``image_input_tokens``, the documented bill for the image's size)).
        ``calls`` counts distinct request keys, as the run calls: a planned request whose key repeats an
        earlier one's is answered from that call's stored answer and counted in ``repeated`` instead.
        ``cost_usd`` uses ``expected_output_tokens`` (default: ``max_output_tokens``); ``worst_case_usd``
        always uses ``max_output_tokens`` and the reservation's input factor, i.e. what the ledger would
        reserve. ``duration_s`` per host = calls / min(rate requests per s, concurrency /
        ``expected_latency_s``); hosts run in parallel, so the total is the slowest host's. Replay and offline
        simulated models take no model time (0 s); a simulated model behind a local fake is paced by its
        rate alone (:func:`model_time_basis`).
    """
    from geoagent.providers.base import request_key
    from geoagent.workers.model_caller import build_request

    from array import array

    est = Estimate(cap_usd=cfg.budget.cap_usd, spent_usd=max(0.0, float(spent_usd)))
    factor = cfg.budget.input_estimate_factor
    order_model, order_exp, order_worst = array("i"), array("d"), array("d")
    index: dict[str, int] = {}
    sizes: dict[str, tuple[int, int] | None] = {}  # image file -> size (each file's header read once)
    seen: set[str] = set()
    fakes = set(fake_models) | {m.name for m in cfg.models if _on_fake(m)}
    no_file, photo_models = frozenset(missing_photos), frozenset(photo_models)
    if photo_size_px is None:
        from geoagent.workers.images import EXPECTED_PHOTO_SIZE_PX as photo_size_px
    from geoagent.workers.images import PLACEHOLDER_SIZE_PX
    # [images] missing = "placeholder": the run sends a photo without a file as the placeholder's pixels
    as_placeholder = getattr(cfg.section("images"), "missing", "error") == "placeholder"
    for item in planned_requests:
        if isinstance(item, tuple):
            model_name, req = item
            m = cfg.model(model_name)
            image_ref = None
        else:
            m, req = build_request(cfg, item)
            image_ref = item.get("image_ref")
        prompt, params = req.prompt, req.params
        has_image = req.image is not None or req.image_id is not None
        merged = {**m.default_params(), **params}
        key = req.key()
        if key in seen:
            est.repeated += 1
            continue
        seen.add(key)
        if store is not None and (store.has(key) or (req.pixel_source is not None and store.has(request_key(
                req.provider, req.model, req.prompt, req.image_id, req.params)))):
            # (a placeholder request's answer stored by code before pixel_source entered the key is found
            # under the key without it, as the model caller finds it)
            est.cached += 1
            continue
        me = est.by_model.setdefault(m.name, ModelEstimate(model=m.name))
        img_tokens = 0
        size = (image_size_px(image_ref, req.image_id, req.image, base_dir=image_base_dir, cache=sizes)
                if has_image and m.provider != "replay" else None)
        photo_no_file = (has_image and not image_ref and req.image is None and m.name in photo_models
                         and m.name not in fakes and str(req.image_id) in no_file)
        if photo_no_file and as_placeholder:  # that run sends the placeholder, whatever exists later
            size = PLACEHOLDER_SIZE_PX
            me.photos_no_file += 1
            me.photo_size_assumed = tuple(PLACEHOLDER_SIZE_PX)
            me.photos_as_placeholder = True
            photo_no_file = False  # tallied as the placeholder image it is (image_kind)
        elif photo_no_file:  # the photo the run will send once it exists, not today's placeholder
            size = photo_size_px
            me.photos_no_file += 1
            me.photo_size_assumed = tuple(photo_size_px)
        n_in = reserved_input_tokens(m, prompt, merged, has_image=has_image, size_px=size)  # as the model caller
        me.worst_input_tokens += n_in
        if has_image:
            me.images += 1
            img_tokens = m.image_input_tokens
            if m.name in fakes:
                billed = fake_image_tokens()
            else:
                billed = expected_image_tokens(m.provider, m.openai_rules_id, size, merged) if size else None
            if billed is not None:
                img_tokens, me.image_rule = billed
                me.images_sized += 1
                me.image_tokens_sized += img_tokens
                kind = me.image_tokens_by_kind.setdefault(
                    IMAGE_KIND_PHOTO if photo_no_file else image_kind(image_ref, req.image_id, req.image), [0, 0])
                kind[0] += 1
                kind[1] += img_tokens
                if img_tokens > me.image_tokens_max:
                    me.image_tokens_max, me.image_size_max = img_tokens, size
        max_out = int(merged.get("max_output_tokens", m.max_output_tokens))
        exp_out = min(max_out, m.expected_output_tokens) if m.expected_output_tokens is not None else max_out
        me.calls += 1
        me.worst_output_tokens += max_out
        # the model caller's (and the crawl's) reservation
        worst_usd = reservation_usd(m, prompt, merged, max_out, input_estimate_factor=factor, has_image=has_image,
                                    size_px=size)
        system = merged.get("system")
        text = prompt + (system if isinstance(system, str) else "")
        text_rule = "simulated" if m.name in fakes else m.provider  # the fakes bill text as the simulator does
        n_in = expected_input_tokens(text, img_tokens, provider=text_rule)
        if text_rule != "simulated" and not text.isascii():
            me.non_ascii_chars += len(text) - len(text.encode("ascii", "ignore"))
        recorded = getattr((providers or {}).get(m.name), "recorded_usage", None)
        usage = recorded(req) if recorded is not None else None
        if usage is not None:  # the model caller reserves at least a replay's known (recorded) bill
            worst_usd = max(worst_usd, m.cost_usd(int(usage[0]), int(usage[1])))
        me.worst_case_usd += worst_usd
        order_model.append(index.setdefault(m.name, len(index)))
        order_worst.append(worst_usd)
        if recorded is not None:  # replay: the file's usage, exactly what the run will book
            if usage is None:
                me.unanswered += 1
                order_exp.append(0.0)
                continue
            n_in, exp_out = usage
            me.recorded += 1
        me.input_tokens += n_in
        me.output_tokens += exp_out
        me.cost_usd += m.cost_usd(n_in, exp_out)
        order_exp.append(m.cost_usd(n_in, exp_out))
    # the HTTP layer's keys (geoagent.runtime.http): each model's own limit key on its host (entries naming one
    # API model on one host share it), and a [hosts] entry of a model host as a ceiling over all its models
    by_key: dict[str, float] = {}
    by_ceiling: dict[str, float] = {}
    own_keys = model_limits(cfg)
    for name, me in est.by_model.items():
        m = cfg.model(name)
        req, per, concurrency, ceiling = model_time_limit(cfg, m)
        rate_per_s = req / per
        if ceiling is not None:
            rate_per_s = min(rate_per_s, ceiling.rate / ceiling.period_s)
            concurrency = min(concurrency, ceiling.concurrency)
        me.time_basis = model_time_basis(m)
        if me.time_basis == "latency" and m.name in fakes and "expected_latency_s" not in m.model_fields_set:
            me.time_basis = "rate"  # a local fake answers at once (walkthrough s18: 2.0 s assumed, 95 s for 12 s)
        if me.time_basis == "none":
            me.throughput_per_s = 0.0
            me.duration_s = 0.0
        else:
            me.throughput_per_s = (rate_per_s if me.time_basis == "rate"
                                   else min(rate_per_s, concurrency / m.expected_latency_s))
            me.duration_s = me.calls / me.throughput_per_s if me.calls else 0.0
        key = model_limit_key(m) or f"<{m.provider}:{m.name}>"
        if m.host and key not in own_keys and hosts_entry(cfg, m.host) is not None:
            # no limit of its own: the HTTP layer paces it by its host's state (the [hosts] entry), which every
            # such model on the host shares and which is also the ceiling over the host's keyed models
            by_ceiling[m.host] = by_ceiling.get(m.host, 0.0) + me.duration_s
        else:
            by_key[key] = by_key.get(key, 0.0) + me.duration_s  # entries of one limit key share it
        if ceiling is not None and me.calls and me.time_basis != "none":
            # the models under one ceiling share it: this model's calls take calls / (the ceiling's own pace)
            pace = ceiling.rate / ceiling.period_s
            if me.time_basis == "latency":
                pace = min(pace, ceiling.concurrency / m.expected_latency_s)
            by_ceiling[m.host or ""] = by_ceiling.get(m.host or "", 0.0) + me.calls / pace
        est.calls += me.calls
        est.input_tokens += me.input_tokens
        est.output_tokens += me.output_tokens
        est.cost_usd += me.cost_usd
        est.worst_case_usd += me.worst_case_usd
    est.duration_s = max([*by_key.values(), *by_ceiling.values()], default=0.0)
    est._order = (list(index), order_model, order_exp, order_worst)
    if not est.within_cap and est.calls:
        fit = simulate_dispatch(cfg, est)
        for name, me in est.by_model.items():
            me.calls_before_cap = fit.get(name, 0)
        est.calls_before_cap = sum(fit.values())
    return est


def _caller_window(cfg: CampaignConfig) -> int:
    """Request tasks the model caller handles at once (:meth:`geoagent.workers.model_caller.ModelCaller.start`):
    one model: its ``concurrency`` (an offline model counts at least 64); several: the sum of their lane caps
    (:func:`_caller_lanes`); at most 256. Unitless count >= 1."""
    lanes = _caller_lanes(cfg)
    if lanes is not None:
        return max(1, min(256, sum(lanes.values())))
    return max(1, min(256, sum(_caller_concurrency(m) for m in cfg.models)))


def _caller_concurrency(m: "ModelConfig") -> int:
    """The concurrency the model caller sizes ``m`` with: its ``concurrency``, at least
    :data:`geoagent.workers.model_caller.OFFLINE_CONCURRENCY` for a model that sends nothing over HTTP."""
    from geoagent.workers.model_caller import OFFLINE_CONCURRENCY

    return max(m.concurrency, OFFLINE_CONCURRENCY) if model_time_basis(m) == "none" else m.concurrency


def _caller_lanes(cfg: CampaignConfig) -> dict[str, int] | None:
    """Model name -> its lane's cap (tasks of it the model caller holds at once,
    :func:`geoagent.workers.model_caller.lane_cap` of :func:`_caller_concurrency`) when the campaign has several
    models (:meth:`geoagent.workers.model_caller.ModelCaller.lanes`), else None (one model: no lanes)."""
    from geoagent.workers.model_caller import lane_cap

    if len(cfg.models) < 2:
        return None
    return {m.name: lane_cap(_caller_concurrency(m)) for m in cfg.models}


def _lane_ahead(k: int, pending: Sequence[Sized], work: Sequence[int], caps: Sequence[int]) -> bool:
    """Whether lane ``k`` of :func:`simulate_dispatch` is ahead of the other lanes with tasks left, by the runner's
    pacing rule (:func:`geoagent.runtime.worker.pace_ahead`); a lane has taken its ``work`` minus its tasks
    ``pending``."""
    from geoagent.runtime.worker import pace_ahead

    others = [(work[j] - len(pending[j])) / work[j] for j in range(len(work)) if j != k and pending[j] and work[j]]
    return bool(others) and bool(work[k]) and pace_ahead(work[k] - len(pending[k]), work[k], caps[k], min(others))


def simulate_dispatch(cfg: CampaignConfig, est: Estimate) -> dict[str, int]:
    """Calls per model that a run of the planned requests of ``est`` makes before the cost cap stops it.

    Replays what the run does, in simulated time (no call, no sleep):

    * the model caller handles up to :func:`_caller_window` request tasks at once, taken in queue (plan)
      order; with several models each model has its own lane (:func:`_caller_lanes`, the runner's "Lanes" in
      :mod:`geoagent.runtime.worker`): at most its lane's cap of its tasks are handled at once, a task of a full
      lane goes back to the queue unsent and the next tasks of the other lanes are taken meanwhile, so a model
      slowed by its own rate limit never holds back a faster one (the replay takes, at each free slot, the
      earliest queued task of a lane with room; a deferred task's delay is not modelled); under ``[queue]
      model_pacing = "plan"`` (the default) a lane whose share of its tasks taken runs ahead of the other lanes'
      is passed over as the runner defers it (:func:`_lane_ahead`), so each model reaches the cap at about the
      same share of its calls; a handled task waits
      for its model's host: ``concurrency`` calls in flight and ``rate`` calls per
      ``period_s`` (sliding window), each call taking ``expected_latency_s`` (no time for replay, offline
      simulated and local-fake models: the estimate's :attr:`ModelEstimate.time_basis`, which also counts an API
      model behind a local fake without an ``expected_latency_s`` of its own);
    * the settled spend starts at ``est.spent_usd`` (what earlier runs of the campaign booked: the ledger
      counts it against the cap);
    * at its send gate a call reserves its worst case (the ledger's reservation) if settled spend + open
      reservations + it fits the cap; if it does not fit only because of open reservations, it waits for a
      call to settle, and its model's later calls wait behind it (first come first served, as the model
      caller's budget-wait line; other models' calls that fit go on meanwhile); once settled spend + its worst case
      exceeds the cap by itself, the run stops dispatching (exit 4) and only calls in flight finish;
    * a finished call settles at its expected cost (:func:`estimate`'s expected USD).

    The planners interleave the models item by item (:func:`plan_rank`), so equally priced models get about
    equal shares; a model whose worst case is large can still get fewer or no calls before the cap while a
    cheap model runs many, and so can a model planned after the others in a plan that is not interleaved.
    Each model is paced by its own limit key and its host's ``[hosts]`` ceiling (:func:`model_time_limit`); entries
    sharing one limit key, or one ceiling, are paced separately (an approximation). Each call settles at its
    expected cost,
    which takes every answer at ``max_output_tokens`` unless the model sets ``expected_output_tokens``: then
    the run, whose answers are usually shorter, makes more calls than simulated.

    Returns
    -------
    dict of model name to calls made before the stop (sent calls, every one answered).
    """
    import heapq
    from collections import deque

    names, order_model, order_exp, order_worst = est._order
    n = len(order_model)
    cap = est.cap_usd + 1e-12
    models = [cfg.model(name) for name in names]
    # each model's time basis as the estimate decided it (an API model on a local fake: "rate", :func:`estimate`)
    basis = [getattr(est.by_model.get(m.name), "time_basis", None) or model_time_basis(m) for m in models]
    latency = [m.expected_latency_s if b == "latency" else 0.0 for m, b in zip(models, basis)]
    limits = []
    for m, b in zip(models, basis):
        rate_n, period, conc, host = model_time_limit(cfg, m)
        if host is not None:
            if host.rate / host.period_s < rate_n / period:
                rate_n, period = host.rate, host.period_s
            conc = min(conc, host.concurrency)
        timed = b != "none"
        limits.append((conc if timed else n + 1, max(1, int(rate_n)) if timed else 0, period))
    window = _caller_window(cfg)
    lane_caps = _caller_lanes(cfg)
    # lanes: each model's tasks in queue order, its cap and its tasks handled and not finished
    pending: list[deque[int]] = [deque() for _ in names]
    if lane_caps is not None:
        for i in range(n):
            pending[order_model[i]].append(i)
    caps = [lane_caps.get(name, 1) for name in names] if lane_caps is not None else []
    # [queue] model_pacing = "plan": a lane ahead of the others' share of their work waits (the runner's pacing)
    paced = lane_caps is not None and cfg.queue.model_pacing == "plan"
    work = [len(p) for p in pending]
    busy = [0] * len(names)
    waiting: list[deque[int]] = [deque() for _ in names]  # handled tasks not yet sent, in queue order
    sent_at: list[deque[float]] = [deque() for _ in names]  # send times within the rate window
    in_flight = [0] * len(names)
    made = [0] * len(names)
    done: list[tuple[float, int]] = []  # (finish time, task index)
    spent, reserved = est.spent_usd, 0.0
    t, nxt, handled, stopped = 0.0, 0, 0, False
    while True:
        if lane_caps is None:
            while not stopped and handled < window and nxt < n:
                waiting[order_model[nxt]].append(nxt)
                handled += 1
                nxt += 1
        else:  # the earliest queued task of a lane with room (a full lane's tasks are deferred meanwhile)
            while not stopped and handled < window:
                best = -1
                for k in range(len(names)):
                    if pending[k] and busy[k] < caps[k] and (best < 0 or pending[k][0] < pending[best][0]) \
                            and not (paced and _lane_ahead(k, pending, work, caps)):
                        best = k
                if best < 0:
                    break
                waiting[best].append(pending[best].popleft())
                busy[best] += 1
                handled += 1
        wake = math.inf  # the next time a rate window frees a slot
        progress = True
        while progress and not stopped:
            progress = False
            for k in sorted((k for k in range(len(names)) if waiting[k]), key=lambda k: waiting[k][0]):
                conc, rate_n, period = limits[k]
                if in_flight[k] >= conc:
                    continue
                if rate_n:
                    win = sent_at[k]
                    while win and win[0] + period <= t:
                        win.popleft()
                    if len(win) >= rate_n:
                        wake = min(wake, win[0] + period)
                        continue
                i = waiting[k][0]
                w = order_worst[i]
                if spent + reserved + w <= cap:
                    waiting[k].popleft()
                    reserved += w
                    in_flight[k] += 1
                    made[k] += 1
                    if rate_n:
                        sent_at[k].append(t)
                    heapq.heappush(done, (t + latency[k], i))
                    progress = True
                    break  # re-rank: the next task in queue order may be another model's
                if spent + w > cap:  # no settlement can make room: BudgetStop
                    stopped = True
                    break
                # else: held by open reservations; waits for a settlement
        if not done:
            if stopped or wake == math.inf:
                break
            t = wake
            continue
        t_next = done[0][0] if stopped else min(done[0][0], wake)
        t = max(t, t_next)
        while done and done[0][0] <= t:
            _, i = heapq.heappop(done)
            k = order_model[i]
            spent += order_exp[i]
            reserved -= order_worst[i]
            in_flight[k] -= 1
            busy[k] -= 1
            handled -= 1
        if stopped and not done:
            break
    return {name: made[k] for k, name in enumerate(names)}
