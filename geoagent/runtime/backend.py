"""Where a campaign keeps its queues and its ledger/store: the ``[backend]`` table of the campaign file.

``kind = "sqlite"`` (default): queue files under ``queues/<campaign>/`` and ``state/<campaign>/campaign.sqlite``,
shared by the processes of one machine. ``kind = "redis"``: the queues on Redis Streams
(:mod:`geoagent.runtime.redis_queue`) and the ledger and response store on the same Redis
(:mod:`geoagent.runtime.redis_state`), shared by every machine that reaches the server; each machine keeps its
own state folder for its files (manifest, plan keys, progress, run lock). Provider rate limits, concurrency, turns
and ``Retry-After`` pauses are shared by every process of every machine through the host-share board on the same
server (:mod:`geoagent.runtime.hostshare_redis`; on SQLite the board is ``state/<campaign>/hosts.sqlite``, one
machine's processes).

The server's URL is read from the environment variable named by ``url_env`` (default ``GEOAGENT_REDIS_URL``;
``.env`` too, like API keys). A URL may carry a password: it is handled as a secret (:class:`geoagent.secrets.Secret`:
scrubbed from logs and from the errors raised here), never written to the manifest or any state file.

What Redis does not share yet (:func:`redis_limits`, a warning of the dry run's report): the record tying a
queue folder to its state folder (``state_root.json``) does not exist; the dry run and ``status``'s per-plan
figures read local queue files, so on Redis they count from the response store instead.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import urlsplit

from geoagent import constants as C

#: the default variable holding the Redis URL
DEFAULT_URL_ENV = "GEOAGENT_REDIS_URL"


class BackendError(ValueError):
    """The ``[backend]`` table cannot be used as written (variable unset, URL malformed, server unreachable); the
    message names the key and never the URL or its password. A ValueError, so the CLI prints it as one
    ``error:`` line (exit 2)."""


def uses_redis(cfg: Any) -> bool:
    """Whether campaign ``cfg`` keeps its queues and state on Redis (``[backend] kind = "redis"``)."""
    backend = getattr(cfg, "backend", None)
    return getattr(backend, "kind", "sqlite") == "redis"


def redis_url(cfg: Any, *, dotenv_path: str | Path | None = None) -> str | None:
    """The Redis URL of a ``kind = "redis"`` campaign (from the variable ``[backend] url_env``), else None.

    The URL and its password are registered as secrets (:func:`geoagent.secrets.redact` scrubs them from any
    text from now on).

    Raises
    ------
    BackendError
        The variable is not set (or blank), or its value is not a ``redis://``/``rediss://``/``unix://`` URL.
    """
    if not uses_redis(cfg):
        return None
    from geoagent.secrets import Secret, lookup_secret

    name = cfg.backend.url_env
    try:
        secret = lookup_secret(name, dotenv_path=dotenv_path, local=True, whole_only=True)  # its password: below
    except ValueError:
        raise BackendError(f"{cfg.source}: [backend] url_env: variable {name} holds control characters (line "
                           "break, tab, NUL); the value is not shown (it may hold a password)") from None
    if secret is None:
        raise BackendError(f"{cfg.source}: [backend] kind = \"redis\" but the variable {name} named by "
                           f"[backend] url_env is not set (in the environment or .env): set it to the server's "
                           f"URL, e.g. redis://host:6379/0")
    url = secret.reveal()
    parts = urlsplit(url)
    if parts.password and len(parts.password) >= 4:
        Secret(parts.password, name)  # remembered: redact() scrubs the password alone too
    if parts.scheme not in ("redis", "rediss", "unix"):
        raise BackendError(f"{cfg.source}: [backend] url_env: variable {name} does not hold a redis://, rediss:// "
                           "or unix:// URL (the value is not shown: it may hold a password)")
    problem = _url_timeouts_problem(url)
    if problem is not None:  # before anything is recorded on the server (redis39 #4)
        raise BackendError(f"{cfg.source}: [backend] url_env: the URL in variable {name} cannot be used: {problem} "
                           "(the value is not shown: it may hold a password)")
    _URL_VARIABLES[url] = name  # for the messages about a failed connection (:func:`server_hint`)
    return url


#: Redis URL -> the variable (``[backend] url_env``) it was read from in this process (:func:`redis_url`)
_URL_VARIABLES: dict[str, str] = {}


def server_address(url: str) -> str:
    """Where Redis URL ``url`` points, without its user name or password: ``host:port`` (port 6379 when the URL
    names none; ``[::1]:6379`` for an IPv6 host), the socket path of a ``unix://`` URL; "" when unreadable."""
    try:
        parts = urlsplit(url)
        if parts.scheme == "unix":
            return parts.path
        host = parts.hostname or ""
        port = parts.port or 6379
    except ValueError:
        return ""
    if not host:
        return ""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def server_hint(url: str) -> str:
    """The words a failed connection to the server at ``url`` ends with (walk44 B3): where the URL points and the
    variable it came from, never its password or user name: ``server 127.0.0.1:6390, from variable
    GEOAGENT_REDIS_URL ([backend] url_env): is redis-server running there, and is that the address you meant?``."""
    where = server_address(url)
    name = _URL_VARIABLES.get(url)
    source = f"from variable {name} ([backend] url_env)" if name else "from [backend] url_env"
    return (f"server {where or '(address unreadable)'}, {source}: is redis-server running there, and is that the "
            "address you meant?")


def _url_timeouts_problem(url: str) -> str | None:
    """:func:`geoagent.runtime.redis_retry.url_timeouts_problem` of ``url``'s query; None where redis-py is missing
    or cannot parse the URL (the client's own open says so) or the retry window variable is bad (likewise)."""
    try:
        from redis.connection import parse_url

        from geoagent.runtime.redis_retry import url_timeouts_problem

        return url_timeouts_problem(parse_url(url))
    except (ImportError, ValueError, TypeError):
        return None


def scrub(text: str, url: str | None) -> str:
    """``text`` with the URL, its password and its user name replaced by ``***`` (for messages about a failed
    connection). The URL is masked whole only, as :func:`redis_url` registers it: masked by its fragments too, its
    ``host:port`` run hid the address redis-py names ("Error 111 connecting to ***", walk44 B3); the password and
    user name are masked with their fragments."""
    from geoagent.secrets import mask_values, redact

    if not url:
        return redact(text)
    text = mask_values(text, [url], fragments=False)
    parts = urlsplit(url)
    extra = [v for v in (parts.password, parts.username) if v]
    return redact(text, extra)


def redis_limits(cfg: Any) -> list[str]:
    """Warning lines of a dry run (``run --simulate``) of a ``kind = "redis"`` campaign ([] for SQLite): what it
    cannot count there. Said once, in the dry run's report (:func:`geoagent.engine._estimate_outcome`), not on
    loading the config (it was printed by every ``status``, ``dead`` and ``export``, and twice by a dry run)."""
    if not uses_redis(cfg):
        return []
    return [
        "[backend] kind = \"redis\": the dry run's count of work already queued reads local queue files, which a "
        "Redis campaign does not have: the estimate below covers the whole plan, requests other processes hold "
        "queued or leased now included, except those already answered, counted as stored at no cost; "
        "`status` counts the queues on the server",
    ]


def recorded_backend(cfg: Any) -> str | None:
    """The backend kind this machine's last run of the campaign used: the manifest's ``config.backend.kind``
    (``"sqlite"`` for a manifest of a run before ``[backend]`` existed); ``"sqlite"`` when there is no manifest but
    a ``campaign.sqlite`` or queue files; None for a campaign that has not run here."""
    from geoagent.runtime.manifest import read_manifest

    try:
        manifest = read_manifest(cfg.state_dir())
    except ValueError:  # a damaged manifest: `run` says so when it records the run
        manifest = None
    if isinstance(manifest, dict) and isinstance(manifest.get("config"), dict):
        backend = manifest["config"].get("backend")
        kind = backend.get("kind") if isinstance(backend, dict) else None
        return kind if isinstance(kind, str) else "sqlite"
    qdir = Path(cfg.queues_root()) / cfg.name
    from geoagent.runtime.sqlite_queue import queue_files

    if (Path(cfg.state_dir()) / C.CAMPAIGN_DB).is_file() or queue_files(qdir):
        return "sqlite"
    return None


def check_backend_unchanged(cfg: Any) -> None:
    """Refuse a campaign whose ``[backend] kind`` is not the one its earlier runs on this machine used.

    The other backend holds none of its stored answers, results, queued work or spend: a run would pay for every
    call again and count the cap from $0 (and ``status``/``export`` would show an empty campaign). Nothing is
    moved between backends.

    Raises
    ------
    BackendError
        Naming both kinds and the ways out (the old ``kind`` back, or a new ``[campaign] name``).
    """
    before = recorded_backend(cfg)
    now = cfg.backend.kind if getattr(cfg, "backend", None) is not None else "sqlite"
    if before is None or before == now:
        return
    raise BackendError(
        f"campaign {cfg.name} ran on the {before} backend (state folder {cfg.state_dir()}), and "
        f"{getattr(cfg, 'source', 'this file')} says [backend] kind = \"{now}\": the {now} backend holds none of its "
        f"answers, results or spend (every call would be paid again, the cap counted from $0), and nothing is moved "
        f"between backends. Set kind = \"{before}\" again, or give the campaign a new [campaign] name to start it "
        f"on {now}"
    )


#: key suffix (after :func:`geoagent.runtime.redis_state.state_prefix`) of the campaign kind recorded on the server
KIND_KEY = "campaign_kind"


class ServerStateLost(BackendError):
    """The Redis server no longer holds a campaign it held: the record its first run wrote (the campaign's kind)
    or its ledger's totals are gone (a server restarted without persistence, flushed, its keys evicted, or another
    server at the URL). Its queues, spend and stored answers there are lost; a run would start over and spend the
    cap again (redis36 #1: a run went on with a cap of $0 and ``status`` said "campaign complete")."""


class ServerLostWrites(RuntimeError):
    """The Redis server lost writes it had acknowledged while this process ran (redis39 #1c): a reservation this
    process holds is gone from it or its id names another call's, or the server's count of this process's
    reservations went back. Causes: a failover to a replica that lagged behind the primary, a restart from an older
    snapshot, ``appendfsync everysec`` losing its last second in a power cut. Not a ValueError: the run stops
    incomplete (exit 3) and a re-run resumes; its recovery books the open reservations this process leaves as
    unknown-outcome spend. :func:`lost_writes_text` words it."""


def lost_writes_text(name: str, what: str) -> str:
    """The message of :class:`ServerLostWrites` for campaign ``name``; ``what`` says how it was seen."""
    return (f"campaign {name}: the Redis server lost recent writes ({what}): a failover to a replica that lagged "
            "behind, a restart from an older snapshot, or appendfsync everysec in a power cut? Spend of calls whose "
            "reservations it lost is booked again by the processes that made them, but a call made meanwhile may "
            "have gone out twice. The run stops before its next call: re-run the same command to resume (its "
            "recovery books the reservations this run left open as unknown-outcome spend). To avoid it, run the "
            "server with appendonly yes and appendfsync always, and fail over only to a replica that has every "
            "write")


def _holds(client: Any, name: str) -> bool:
    """Whether the server of ``client`` holds campaign ``name``: the kind its first run recorded (:data:`KIND_KEY`) or
    its ledger's totals (a campaign of a version before the kind record)."""
    from geoagent.runtime.redis_state import state_prefix

    prefix = state_prefix(name)
    return client.get(prefix + KIND_KEY) is not None or bool(client.exists(prefix + "totals"))


def check_server_holds(cfg: Any, *, ran_here: bool = False) -> None:
    """Refuse a ``kind = "redis"`` campaign the server no longer holds (:class:`ServerStateLost`) when this process
    recorded it there (``ran_here``: a run, at its end, before it calls itself complete: a server flushed or restarted
    empty mid-run leaves empty queues, which read as "every task done") or this machine's manifest records runs of it
    on Redis (``status``). No-op for SQLite, and for a campaign not known to have run on the server.

    Raises
    ------
    ServerStateLost
        Naming the campaign, the likely causes and the ways out.
    BackendError
        The server cannot be reached (the URL scrubbed).
    """
    url = redis_url(cfg)
    if url is None or not (ran_here or recorded_backend(cfg) == "redis"):
        return
    client = _client(url)
    try:
        held = _holds(client, cfg.name)
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        raise _scrubbed(exc, url) from None
    finally:
        client.close()
    if not held:
        raise ServerStateLost(server_lost_text(cfg.name, None if ran_here else Path(cfg.state_dir())))


def server_lost_text(name: str, state_dir: Path | None) -> str:
    """The message of :class:`ServerStateLost` for campaign ``name`` (its state folder ``state_dir``; None: found
    lost during a run, when its ledger's totals vanished)."""
    where = (f"which earlier runs of this machine kept there ({state_dir / C.MANIFEST_FILE})" if state_dir is not None
             else "whose ledger totals (its cap, spend and reservations) vanished during this run")
    folder = f"delete {state_dir} or " if state_dir is not None else ""
    return (f"campaign {name}: the Redis server named by [backend] url_env no longer holds this campaign, {where}: "
            "restarted without persistence "
            "(appendonly no), flushed, its keys evicted, or another server at that URL? Its queued work, spend and "
            "stored answers there are gone, and a run would start over and spend the cap again. Restore the "
            "server's data (its AOF or RDB file) or point [backend] url_env at the right server; to start the "
            f"campaign over, {folder}give it a new [campaign] name")


def check_server_kind(cfg: Any, *, record: bool = False) -> bool:
    """Refuse a ``kind = "redis"`` campaign whose ``[campaign] kind`` is not the one recorded on the server under its
    name; with ``record``, record it when none is (atomically: of two machines starting different kinds at once,
    the second is refused). Return whether this call recorded it. No-op (False) for SQLite.

    On one machine the manifest ties a campaign name to its kind (:func:`geoagent.engine.check_state_matches_queues`);
    another machine has no manifest of it, so a file of another kind that happens to use the same name would
    enqueue its plan into the campaign's queues, write its ``[budget] cap_usd`` over the campaign's cap and spend
    from its ledger. The server's record is what every machine sees.

    Raises
    ------
    BackendError
        Naming both kinds and the fix (a new ``[campaign] name``); like :func:`redis_url`; a connection error with
        the URL scrubbed.
    """
    url = redis_url(cfg)
    if url is None:
        return False
    from geoagent.runtime.redis_state import state_prefix

    kind = cfg.campaign.kind
    key = state_prefix(cfg.name) + KIND_KEY
    client = _client(url)
    try:
        # a server that lost a campaign this machine ran there is refused before (check_server_holds, called by
        # geoagent.engine.check_state_matches_queues), so recording the kind anew here starts no lost campaign over
        if record and client.set(key, kind, nx=True):
            return True
        got = client.get(key)
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        raise _scrubbed(exc, url) from None
    finally:
        client.close()
    recorded = got.decode("utf-8", "replace") if isinstance(got, bytes) else got
    if recorded is not None and recorded != kind:
        raise BackendError(
            f"campaign {cfg.name}: the Redis server named by [backend] url_env holds a {recorded} campaign under this "
            f"name (run from another machine or config), and {getattr(cfg, 'source', 'this file')} is a {kind} "
            "campaign; give it its own [campaign] name (its queues, cap, spend and results would otherwise mix with "
            "the other's)"
        )
    return False


def _forget_if_still(cfg: Any, suffix: str, value: Any) -> None:
    """Delete the campaign's server key ``suffix`` (after :func:`geoagent.runtime.redis_state.state_prefix`) if it
    still holds ``value``: one compare-and-delete step, since another machine's run may have recorded its own
    meanwhile. Best effort on a failed run's way out: an unreachable server or a failed script leaves it."""
    from geoagent.runtime.redis_state import state_prefix

    url = redis_url(cfg)
    if url is None:
        return
    try:
        client = _client(url)
    except BackendError:
        return
    try:
        client.eval("if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
                    1, state_prefix(cfg.name) + suffix, value)
    except Exception:  # noqa: BLE001 - best effort on a failed run's way out
        pass
    finally:
        client.close()


def forget_server_kind(cfg: Any) -> None:
    """Drop the kind :func:`check_server_kind` recorded for a run that failed before it queued anything (its state
    folder is removed too, :func:`geoagent.engine.discard_unstarted_state`), if it is still this file's kind: a
    corrected file of another kind may then use the name. Best effort: an unreachable server leaves it."""
    _forget_if_still(cfg, KIND_KEY, cfg.campaign.kind)


#: key suffix (after :func:`geoagent.runtime.redis_state.state_prefix`) of the campaign config recorded on the server
#: (:func:`geoagent.runtime.manifest.server_config_record`, JSON)
CONFIG_KEY = "campaign_config"

#: the ``run`` option that makes a deliberate config change for every machine of a Redis campaign
ACCEPT_CONFIG_CHANGE = "--accept-config-change"


def _record_bytes(record: dict[str, Any]) -> bytes:
    import orjson

    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


class ServerConfigCheck(NamedTuple):
    """What :func:`check_server_config` found: ``recorded`` (this call wrote the first record), ``line`` (the
    ``info:`` line of an accepted change, else None) and ``accepted`` (with ``accept_change`` on a Redis campaign:
    what the manifest's run entry records as ``accepted_config_change``, see :func:`check_server_config`; else
    None)."""

    recorded: bool
    line: str | None
    accepted: dict[str, Any] | None


def _accepted(replaced: bool, keys: list[str] | None, note: str | None = None) -> dict[str, Any]:
    """An ``accepted`` record of :class:`ServerConfigCheck`: key NAMES only (redacted anyway), never values."""
    from geoagent.secrets import redact

    out: dict[str, Any] = {"server_record_replaced": replaced,
                           "changed_keys": None if keys is None else [redact(k) for k in keys]}
    if note:
        out["note"] = note
    return out


def check_server_config(cfg: Any, *, record: bool = False, accept_change: bool = False) -> ServerConfigCheck:
    """Refuse a ``kind = "redis"`` campaign whose config differs, in what changes requests or results, from the
    one recorded on the server under its name; with ``record``, record it when none is (atomically, ``SET NX``:
    of two machines starting different configs at once, the second is refused). No-op for SQLite.

    On one machine the manifest compares a re-run's config with the last run's and warns when results would mix
    (:func:`geoagent.runtime.drift.decide`). Machines that share a campaign on one server each have their own
    manifest, so a stale file on one of them (another ``n_per_band``, other models, another prompt) planned other
    requests into the shared queues, and its re-run set the other machine's planned tasks aside as superseded.
    Compared: :func:`geoagent.runtime.manifest.results_sha256` first (pacing, limits, prices, ``[budget]``,
    ``[hosts]``, ``[queue]`` and scoring-only keys do not count: machines may differ there), then, where the
    hashes differ, key by key (:func:`geoagent.runtime.manifest.config_changes_against`): only call drift or a
    geocoder change refuses.

    ``accept_change`` (``run --accept-config-change``): a deliberate change for the whole campaign; the record
    is replaced by this config (unless ``record`` is False: a dry run writes nothing) and the returned line says
    so; machines still on the old config are refused at their next start.

    Returns
    -------
    ServerConfigCheck
        ``(recorded, line, accepted)``: whether this call wrote the first record (so :func:`forget_server_config`
        may drop it if the run queues nothing), an ``info:`` line when a change was accepted (else None), and,
        with ``accept_change`` on a Redis campaign, what was accepted for the run manifest (else None):
        ``server_record_replaced`` (bool: False when the record already matched in what changes requests or
        results, or was missing and is now written as the first, or ``record`` is False) and ``changed_keys``, the
        NAMES of what differed from the record (``models[0].max_output_tokens``, ``prompt template X``,
        ``geocoder nominatim_url``; never a value, as values could be secrets), ``[]`` when nothing did, None
        when the record held no config to compare key by key; ``note`` says which case it was.

    Raises
    ------
    BackendError
        Naming the keys that differ with both values (or, where the record holds no config, both hashes), and
        the fixes: the same config on every machine, a new ``[campaign] name``, or ``--accept-config-change``.
    """
    url = redis_url(cfg)
    if url is None:
        return ServerConfigCheck(False, None, None)
    import orjson

    from geoagent.runtime.drift import changed_keys_text
    from geoagent.runtime.manifest import config_changes_against, server_config_record
    from geoagent.runtime.redis_state import state_prefix

    mine = server_config_record(cfg)
    data = _record_bytes(mine)
    key = state_prefix(cfg.name) + CONFIG_KEY
    client = _client(url)
    same = _accepted(False, [], "the config recorded on the server already matched in what changes requests or "
                     "results") if accept_change else None
    try:
        if record and client.set(key, data, nx=True):
            return ServerConfigCheck(True, None, _accepted(False, [], "no config was recorded on the server: this "
                                                           "one is recorded as the first") if accept_change else None)
        got = client.get(key)
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        client.close()
        raise _scrubbed(exc, url) from None
    if got is None or got == data:
        client.close()
        return ServerConfigCheck(False, None, same)
    try:
        old = orjson.loads(got)
    except orjson.JSONDecodeError:
        old = None
    old = old if isinstance(old, dict) else None
    source = getattr(cfg, "source", None) or "this file"
    if old is not None and isinstance(old.get("config"), dict):
        if old.get("results_sha256") == mine["results_sha256"]:
            client.close()
            return ServerConfigCheck(False, None, same)  # only pacing, the cap or scoring differ
        changes = config_changes_against(old, cfg)
        code_only = _geocoder_rules_only(changes)
        if code_only is not None:  # the same file, another geoagent (upgrade41 #1): no setting to copy or accept
            older, newer = code_only
            if newer >= older:
                try:
                    if record:
                        client.set(key, data)  # this machine's newer rules: the campaign's from now on
                except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
                    raise _scrubbed(exc, url) from None
                finally:
                    client.close()
                # the run's own drift check says what the rules change does to its located answers (a warning)
                return ServerConfigCheck(False, None, same)
            client.close()
            raise BackendError(
                f"campaign {cfg.name}: the Redis server records this campaign's geocoding rules as version {older} "
                f"(a machine running a newer geoagent ran it), and this machine's geoagent has version {newer}: "
                "upgrade geoagent on this machine (its answers would be located by older rules)")
        names = ([*changes.call_keys] + [f"prompt template {c.split(':', 1)[1]}" for c in changes.calls
                                          if c.startswith("prompt:")] + [f"geocoder {k}" for k in changes.geocoder])
        parts = ([changed_keys_text(changes.call_keys)] if changes.call_keys else []) + [
            f"prompt template {c.split(':', 1)[1]} edited" for c in changes.calls if c.startswith("prompt:")]
        if changes.geocoder:
            parts.append("geocoder " + changed_keys_text(changes.geocoder))
        if not parts:
            client.close()
            # no key that changes a request or result (e.g. a section written out as its defaults)
            return ServerConfigCheck(False, None, same)
        what = "; ".join(parts)
        differs = f"{source} differs from it in what changes requests or results: {what}"
    else:
        recorded = old.get("results_sha256") if old is not None else None
        recorded = recorded if isinstance(recorded, str) else got.decode("utf-8", "replace")[:80]
        what = f"recorded config hash {recorded}, this file's {mine['results_sha256']}"
        differs = (f"the record holds no config to compare key by key, and its hash differs from {source}'s "
                   f"({what})")
        names = None
    if accept_change:
        line = (f"info: campaign {cfg.name}: {ACCEPT_CONFIG_CHANGE}: the config recorded for this campaign on the "
                f"Redis server {'is' if record else 'would be'} replaced by {source}'s ({what}); machines still "
                "running the old config are refused at their next start. Work planned from now on uses the new "
                "config; stored results made with the old one stay, and the run says, as on one machine, whether "
                "any model's results mix the two")
        try:
            if record:
                client.set(key, data)
        except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
            raise _scrubbed(exc, url) from None
        finally:
            client.close()
        note = (None if names is not None else
                "the recorded config held no config to compare key by key (only its hash differed)")
        return ServerConfigCheck(False, line, _accepted(bool(record), names, note))
    client.close()
    raise BackendError(
        f"campaign {cfg.name}: the Redis server named by [backend] url_env records this campaign's config (from its "
        f"first run, or the last `run {ACCEPT_CONFIG_CHANGE}`), and {differs}. Every machine of a campaign must run "
        "the same config (pacing such as [hosts], rates, concurrency, and [budget] cap_usd may differ), or its "
        "requests mix with the other machines' in the shared queues: copy the campaign's file to this machine, or "
        "give this config its own [campaign] name; to change the config of the whole campaign on purpose, run "
        f"`python run.py run CONFIG {ACCEPT_CONFIG_CHANGE}` with the new file once (machines still on the old one are "
        "then refused at their next start)"
    )


def _geocoder_rules_only(changes: Any) -> tuple[int, int] | None:
    """``(recorded, this code's)`` geocoding rules versions when the only difference between the server's config
    record and this machine's is geoagent's GeoHint geocoding rules (:data:`geoagent.geohint.geocode.
    GEOCODER_RULES_VERSION`, recorded in the record's designs): the same file run by another geoagent, which no
    config copy or ``--accept-config-change`` is about; else None."""
    if changes.call_keys or any(c.startswith("prompt:") for c in changes.calls) or set(changes.geocoder) != {
            "rules_version"}:
        return None
    pair = changes.geocoder["rules_version"]
    try:
        return int(pair[0]), int(pair[1])
    except (TypeError, ValueError, IndexError):
        return None


def server_config_recorded(cfg: Any) -> dict[str, Any] | None:
    """The config record of campaign ``cfg`` on its Redis server (:func:`geoagent.runtime.manifest.
    server_config_record`: ``kind``, ``config``, ``prompt_templates_sha256``, ``designs``, ``results_sha256``), read
    only (one ``GET``; nothing is recorded); None for SQLite, when none is recorded, or when it is not a JSON object.
    Raises :class:`BackendError` like :func:`redis_url`, and a connection error with the URL scrubbed."""
    url = redis_url(cfg)
    if url is None:
        return None
    import orjson

    from geoagent.runtime.redis_state import state_prefix

    client = _client(url)
    try:
        got = client.get(state_prefix(cfg.name) + CONFIG_KEY)
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        raise _scrubbed(exc, url) from None
    finally:
        client.close()
    try:
        record = orjson.loads(got) if got is not None else None
    except orjson.JSONDecodeError:
        return None
    return record if isinstance(record, dict) else None


def forget_server_config(cfg: Any) -> None:
    """Drop the config :func:`check_server_config` recorded for a run that failed before it queued anything, if
    it is still this file's (as :func:`forget_server_kind`). Best effort."""
    if redis_url(cfg) is None:
        return
    from geoagent.runtime.manifest import server_config_record

    _forget_if_still(cfg, CONFIG_KEY, _record_bytes(server_config_record(cfg)))


#: key suffix (after :func:`geoagent.runtime.redis_state.state_prefix`) of the id of the one state folder a campaign
#: whose records live in its state folder runs from (:func:`check_one_state_folder`)
STATE_FOLDER_KEY = "state_folder_id"


def _read_folder_id(path: Path) -> str | None:
    """The id in the marker file ``path`` (stripped), or None when there is none (no file, or an empty one)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        return None
    return text or None


def _create_folder_id(path: Path) -> tuple[str, bool]:
    """The id of the marker file ``path``, made with a new random id (32 hex digits) when there is none: written
    to a temporary file and linked into place, so of two processes starting at once in one folder both read the id
    of the one that linked first. Returns ``(id, made)``: ``made`` when this call wrote the file."""
    import os
    import secrets

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    tmp.write_text(secrets.token_hex(16) + "\n", encoding="utf-8")
    try:
        os.link(tmp, path)
        made = True
    except FileExistsError:
        made = False
    finally:
        tmp.unlink(missing_ok=True)
    got = _read_folder_id(path)
    if got is None:  # an empty or unreadable marker (a crash of an older write): say so rather than guess
        raise BackendError(f"campaign state folder marker {path} is empty: delete it and run again")
    return got, made


def one_state_folder_text(cfg: Any, folder: Path, local: str | None, recorded: str) -> str:
    """The refusal of :func:`check_one_state_folder`: campaign ``cfg`` whose state folder ``folder`` holds the id
    ``local`` (None: no marker) while the server records ``recorded``."""
    holds = (f"holds another one ({local[:8]}...: a crawl of the same name started from it on its own)" if local
             else "holds none (this machine or folder never ran it)")
    return (f"campaign {cfg.name}: a crawl keeps its records (sampling/, sites.csv, rated/, ladders/, the image "
            f"audits) in its state folder and its images in <state root>/{C.IMAGES_DIR}, so every process of a "
            "Redis-backed crawl must share ONE state folder; the Redis server named by [backend] url_env records "
            f"the id of the state folder this crawl runs from ({recorded[:8]}...), and {folder} "
            f"{holds} (its id: {folder / C.STATE_FOLDER_ID_FILE}). A process with a state folder of its own "
            "would fetch images and write records the other processes never see (their image tasks dead-lettered "
            "as 'image file ... is missing', each machine's export a fragment). Run it where the crawl's state "
            "folder is: on that machine (`python run.py run CONFIG --stages ...` beside the others), or with "
            f"${C.ENV_STATE_ROOT} ([paths] state) pointing at that state root on a shared file system; to crawl "
            "from this folder anew, give the campaign a new [campaign] name")


def check_one_state_folder(cfg: Any, *, record: bool = False) -> str | None:
    """Refuse a ``kind = "redis"`` campaign run from a state folder other than the one the campaign runs from
    (redis41 #1). For kinds whose records live in the state folder (a crawl:
    :attr:`geoagent.engine.CampaignKind.one_state_folder`), which only processes sharing that folder can run
    together: same machine with ``--stages``, or a state root on a shared file system.

    The folder holds a marker, ``state/<campaign>/state_folder_id`` (:data:`geoagent.constants.STATE_FOLDER_ID_FILE`,
    a random id), and the server the same id under the campaign's keys (:data:`STATE_FOLDER_KEY`). With ``record``
    (a run), a folder without a marker gets one when the server holds no id yet (the crawl's first run, or a crawl
    of a version before this record), and the folder's id is recorded on the server (``SET NX``: of two folders
    starting at once, the second is refused and its marker removed). Without ``record`` (a dry run) nothing is
    written; a folder the run would refuse is refused. No-op (None) for SQLite.

    Returns
    -------
    str or None
        The id this call recorded on the server, else None (so :func:`forget_one_state_folder` may drop it when the
        run queues nothing and its folder is removed).

    Raises
    ------
    BackendError
        :func:`one_state_folder_text`: naming the folder, the marker file and the ways out (exit 2); a connection
        error with the URL scrubbed.
    """
    url = redis_url(cfg)
    if url is None:
        return None
    from geoagent.runtime.redis_state import state_prefix

    folder = Path(cfg.state_dir())
    marker = folder / C.STATE_FOLDER_ID_FILE
    key = state_prefix(cfg.name) + STATE_FOLDER_KEY
    client = _client(url)
    try:
        try:
            got = client.get(key)
        except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
            raise _scrubbed(exc, url) from None
        recorded = got.decode("utf-8", "replace") if isinstance(got, bytes) else got
        local = _read_folder_id(marker)
        if recorded is not None:
            if local != recorded:
                raise BackendError(one_state_folder_text(cfg, folder, local, recorded))
            return None
        if not record:
            return None  # the run records this folder's id (a dry run writes nothing)
        created = [p for p in (folder, folder.parent) if not p.exists()]
        local, made = _create_folder_id(marker)
        try:
            won = bool(client.set(key, local, nx=True))
            got = None if won else client.get(key)
        except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
            raise _scrubbed(exc, url) from None
        recorded = got.decode("utf-8", "replace") if isinstance(got, bytes) else got
        if won or recorded == local:
            return local if won else None
        if made:  # another folder's process recorded its id first: leave this folder as it was
            marker.unlink(missing_ok=True)
            for p in created:
                try:
                    p.rmdir()
                except OSError:
                    break
        raise BackendError(one_state_folder_text(cfg, folder, None if made else local, recorded or "?"))
    finally:
        client.close()


def forget_one_state_folder(cfg: Any, folder_id: str) -> None:
    """Drop the state folder id ``folder_id`` :func:`check_one_state_folder` recorded for a run that failed before
    it queued anything (its folder, marker included, was removed: :func:`geoagent.engine.discard_unstarted_state`),
    if the server still holds it: a later first run, from any folder, records its own. Best effort (as
    :func:`forget_server_kind`)."""
    _forget_if_still(cfg, STATE_FOLDER_KEY, folder_id)


#: key suffix (after :func:`geoagent.runtime.redis_state.state_prefix`) of the campaign's end mark on the server
#: (:func:`mark_end_on_server`, a hash: ``state``, ``run_id``, ``host``, ``pid``, ``at``)
END_MARK_KEY = "end_mark"
#: the states of the end mark, in the order a run sets them: its work began (the report and exports on disk are no
#: longer the final ones), it began writing them, it wrote them
END_WORKING, END_WRITING, END_WRITTEN = "working", "writing", "written"

# "written" replaces only the writing mark of the same run: a run whose work began meanwhile (its mark "working")
# made those files stale again (redis41 #3)
_MARK_WRITTEN_LUA = """
if redis.call('HGET', KEYS[1], 'run_id') == ARGV[1] and redis.call('HGET', KEYS[1], 'state') == ARGV[2] then
  redis.call('HSET', KEYS[1], 'state', ARGV[3], 'at', ARGV[4])
  return 1
end
return 0
"""


def mark_end_on_server(cfg: Any, run_id: str, state: str) -> None:
    """Record on the Redis server how the campaign's end (its final report and exports) stands, as the run
    ``run_id`` of this process changes it (redis41 #3): ``state`` :data:`END_WORKING` (its work began, so the files
    an earlier end wrote are no longer final), :data:`END_WRITING` (it began writing them) or :data:`END_WRITTEN`
    (it wrote them: only over its own writing mark). The manifest of the machine that writes them records the same
    (:meth:`geoagent.runtime.manifest.Manifest.record_writing_end`), but another machine's ``status`` reads only
    its own manifest: a machine that ran only the model caller said "campaign complete" while the machine writing
    the end had been killed among the files. No-op for SQLite. Best effort: a server that fails here fails the
    run's next step anyway, and ``status`` then falls back to the manifest."""
    url = redis_url(cfg)
    if url is None:
        return
    import os
    import socket
    import time

    from geoagent.runtime.redis_state import state_prefix

    key = state_prefix(cfg.name) + END_MARK_KEY
    now = f"{time.time():.3f}"
    try:
        client = _client(url)
    except Exception:  # noqa: BLE001 - best effort (docstring)
        return
    try:
        if state == END_WRITTEN:
            client.eval(_MARK_WRITTEN_LUA, 1, key, run_id, END_WRITING, END_WRITTEN, now)
        else:
            client.hset(key, mapping={"state": state, "run_id": run_id, "host": socket.gethostname(),
                                      "pid": str(os.getpid()), "at": now})
    except Exception:  # noqa: BLE001 - best effort (docstring)
        pass
    finally:
        client.close()


def server_end_mark(cfg: Any) -> dict[str, str] | None:
    """The campaign's end mark on the Redis server (:func:`mark_end_on_server`): ``{"state", "run_id", "host",
    "pid", "at"}`` (text), or None: SQLite, no mark (a campaign of a version before it), or the server cannot be
    read (``status`` then reads the manifest alone)."""
    url = redis_url(cfg)
    if url is None:
        return None
    from geoagent.runtime.redis_state import state_prefix

    try:
        client = _client(url)
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    try:
        got = client.hgetall(state_prefix(cfg.name) + END_MARK_KEY)
    except Exception:  # noqa: BLE001 - see the docstring
        return None
    finally:
        client.close()
    out = {(k.decode("utf-8", "replace") if isinstance(k, bytes) else str(k)):
           (v.decode("utf-8", "replace") if isinstance(v, bytes) else str(v)) for k, v in (got or {}).items()}
    return out if out.get("state") else None


# ------------------------------------------------------------------------------------------------
# campaign state and queues of either backend
# ------------------------------------------------------------------------------------------------


def open_state(cfg: Any, **options: Any) -> Any:
    """:func:`geoagent.runtime.store.open_campaign_state` of campaign ``cfg`` on its backend; ``options`` as there
    (``cap_usd``, ``recover``, ``recover_all``, ``make_state_dir``). Raises :class:`BackendError` like :func:`redis_url`, and a
    connection error with the URL scrubbed."""
    from geoagent.runtime.store import open_campaign_state

    url = redis_url(cfg)
    if url is None:
        return open_campaign_state(cfg.name, root=cfg.state_root(), **options)
    try:
        return open_campaign_state(cfg.name, root=cfg.state_root(), redis_url=url, **options)
    except Exception as exc:  # noqa: BLE001 - a Redis error re-raised with the URL scrubbed
        err = _scrubbed(exc, url)
        if err is exc:
            raise
        raise err from None


def _client(url: str) -> Any:
    """A synchronous client of the server at ``url`` (:func:`geoagent.runtime.redis_state.redis_client`: one ``PING``
    without retries first, so an unreachable server fails at once). Raises :class:`BackendError` with the URL
    scrubbed when the server cannot be reached or the URL is malformed."""
    from geoagent.runtime.redis_state import redis_client

    try:
        return redis_client(url)
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        err = _scrubbed(exc, url)
        if err is exc:
            raise
        raise err from None


def _scrubbed(exc: BaseException, url: str) -> BaseException:
    """A Redis or OS error as a :class:`BackendError` whose message has the URL and password scrubbed; any other
    exception as it is. A connection error or timeout from a server this process has reached before
    (:func:`geoagent.runtime.redis_state.was_reached`: an outage that outlasted the retry window, not a wrong URL)
    stays a redis-py error of its type, its message scrubbed, so the CLI ends the command as the server failing
    (exit 3, "re-run once it answers"), not as a config error (exit 2). An authentication error (the server refused
    the URL's password or user name, :func:`geoagent.runtime.redis_retry.auth_refused`) is a config error whenever
    it comes."""
    try:
        from redis.exceptions import ConnectionError as RedisConnectionError
        from redis.exceptions import RedisError
        from redis.exceptions import TimeoutError as RedisTimeoutError
    except ImportError:  # pragma: no cover - redis-py is needed for kind = "redis" anyway
        RedisError = RedisConnectionError = RedisTimeoutError = OSError  # noqa: N806
    if not isinstance(exc, (RedisError, OSError)):
        return exc
    from geoagent.runtime.redis_retry import auth_refused

    refused = auth_refused(exc, url)
    if refused is not None:  # the server answered and refused the URL's credentials: a config error, even later on
        return BackendError(f"[backend] url_env: {scrub(str(refused), url)}")
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError)):
        from geoagent.runtime.redis_state import was_reached

        if was_reached(url):
            return type(exc)(scrub(str(exc), url))
    text = scrub(f"{type(exc).__name__}: {exc}", url)
    if isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):  # never reached: no server there?
        text += f" ({server_hint(url)})"
    return BackendError(f"the Redis server named by [backend] url_env cannot be used: {text}")


def state_exists(cfg: Any) -> bool:
    """Whether the campaign has a ledger/store yet (SQLite: the file; Redis: its totals on the server). Creates
    nothing."""
    url = redis_url(cfg)
    if url is None:
        return (Path(cfg.state_dir()) / C.CAMPAIGN_DB).is_file()
    from geoagent.runtime.redis_state import state_prefix

    client = _client(url)
    try:
        return bool(client.exists(state_prefix(cfg.name) + "totals", state_prefix(cfg.name) + "rid"))
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        raise _scrubbed(exc, url) from None
    finally:
        client.close()


def redis_edges(cfg: Any, edges: Sequence[str]) -> list[str]:
    """Those of ``edges`` that have a queue on the campaign's Redis server (a task was ever put), in order."""
    url = redis_url(cfg)
    if url is None:
        return []
    from geoagent.runtime.redis_queue import key_prefix

    client = _client(url)
    try:
        return [e for e in edges if client.exists(key_prefix(cfg.name, e) + "payload")]
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        raise _scrubbed(exc, url) from None
    finally:
        client.close()


def some_payloads(cfg: Any, edge: str, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` payloads of campaign ``cfg``'s queue of ``edge``, in any state, read only (nothing is
    created): SQLite, the first put first (:func:`geoagent.runtime.sqlite_queue.read_some_payloads`); Redis, in the
    order ``HSCAN`` walks the queue's payload hash (https://redis.io/commands/hscan/: a few hundred keys a step, so
    the server is not blocked). Empty without a queue. A payload that is not a JSON object is left out
    (fixguard43 #1). Raises :class:`BackendError` like :func:`redis_url`, and a connection error with the URL
    scrubbed."""
    url = redis_url(cfg)
    if url is None:
        from geoagent.runtime.sqlite_queue import read_some_payloads

        return read_some_payloads(cfg.queues_root(), cfg.name, edge, limit) or []
    import orjson

    from geoagent.runtime.redis_queue import key_prefix

    client = _client(url)
    out: list[dict[str, Any]] = []
    try:
        for _, blob in client.hscan_iter(key_prefix(cfg.name, edge) + "payload", count=min(max(int(limit), 1), 500)):
            if len(out) >= limit:
                break
            try:
                payload = orjson.loads(blob)
            except orjson.JSONDecodeError:
                continue
            if isinstance(payload, dict):
                out.append(payload)
    except Exception as exc:  # noqa: BLE001 - re-raised with the URL scrubbed
        raise _scrubbed(exc, url) from None
    finally:
        client.close()
    return out


def plan_edge_reader(cfg: Any, edge: str) -> "SyncRedisQueue | None":
    """The synchronous reader of ``edge``'s queue that :func:`geoagent.runtime.scope.left_in_plan` and
    :func:`~geoagent.runtime.scope.answered_in_plan` count a ``[backend] kind = "redis"`` campaign's plan through
    (:class:`SyncRedisQueue`: its queues live on the server, there is no queue file to read; redispace43); None for
    a SQLite campaign (they read its queue file). Connects to nothing until a count is asked. Raises
    :class:`BackendError` like :func:`redis_url`."""
    url = redis_url(cfg)
    if url is None:
        return None
    return SyncRedisQueue(url, cfg.name, edge, **cfg.queue_options())


class SyncRedisQueue:
    """The synchronous look of :class:`geoagent.runtime.sqlite_queue.SQLiteQueue` that ``status`` and ``dead`` use
    (``counts_sync``, ``dead_letters_sync``, ``dead_keys_sync``, ``requeue_dead_sync``, ``close_sync``), for a
    Redis Streams queue: each call opens the queue on its own event loop in a helper thread (so it also works
    when called from a running loop), runs, and closes it.

    Parameters
    ----------
    url : str
        The server's URL (secret).
    campaign, edge : str
    **options
        As for :func:`geoagent.runtime.redis_queue.open_redis_queue`.
    """

    def __init__(self, url: str, campaign: str, edge: str, **options: Any) -> None:
        self._url, self.campaign, self.name, self._options = url, campaign, edge, options
        #: tasks dead-lettered by :meth:`hand_back_gone_local_sync` calls of this handle
        self.handed_back_dead = 0

    def _call(self, fn: Callable[[Any], Any]) -> Any:
        from geoagent.runtime.redis_queue import open_redis_queue

        async def main() -> Any:
            queue = open_redis_queue(self._url, self.campaign, self.name, **self._options)
            try:
                return await fn(queue)
            finally:
                await queue.close()

        box: dict[str, Any] = {}

        def target() -> None:
            try:
                box["value"] = asyncio.run(main())
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc

        thread = threading.Thread(target=target, name=f"redis-queue-{self.name}")
        thread.start()
        thread.join()
        if "error" in box:
            err = _scrubbed(box["error"], self._url)
            raise err from (None if err is not box["error"] else err.__cause__)
        return box["value"]

    def counts_sync(self) -> Any:
        return self._call(lambda q: q.counts())

    def dead_letters_sync(self, limit: int = 100) -> Any:
        return self._call(lambda q: q.dead_letters(limit))

    def dead_keys_sync(self, reason_prefix: str = "") -> Any:
        return self._call(lambda q: q.dead_keys(reason_prefix))

    def ready_payloads_sync(self, limit: int) -> list[dict[str, Any]] | None:
        """:meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.ready_payloads` (``status``, fixstatus43 #1)."""
        return self._call(lambda q: q.ready_payloads(limit))

    def requeue_dead_sync(self, keys: Sequence[str] | None = None) -> int:
        return self._call(lambda q: q.requeue_dead(keys))

    def older_consumers_sync(self) -> tuple[int, list[dict[str, Any]]]:
        """:meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.older_consumers` (read-only; ``status``, review44d
        #2): the tasks waiting in the lanes' streams and the consumers that look like processes of the version before
        lane streams, which cannot lease them."""
        return self._call(lambda q: q.older_consumers())

    def count_left_sync(self, entries: Iterable[tuple[str, str]]) -> dict[str, int] | None:
        """:meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.count_left` (read-only; None: no task was ever put)."""
        return self._call(lambda q: q.count_left(entries))

    def count_done_sync(self, entries: Iterable[tuple[str, str]]) -> dict[str, int] | None:
        """:meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.count_done` (read-only; None: no task was ever put)."""
        return self._call(lambda q: q.count_done(entries))

    def hand_back_gone_local_sync(self) -> int:
        """:meth:`geoagent.runtime.redis_queue.RedisStreamsQueue.hand_back_gone_local`: the leases of this machine's
        gone processes, handed back now (one failed attempt each); how many. :attr:`handed_back_dead` adds those
        that this dead-lettered (their attempts reached ``max_attempts``)."""
        async def run(q: Any) -> int:
            try:
                return await q.hand_back_gone_local()
            finally:
                self.handed_back_dead += q.handed_back_dead

        return self._call(run)

    def close_sync(self) -> None:
        return None
