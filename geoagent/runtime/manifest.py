"""Campaign manifest: what produced a result (``state/<campaign>/manifest.json``).

Issue 2 point 8. The manifest holds the resolved config without secrets (the config only ever holds
variable *names*), its SHA-256, the SHA-256 of each prompt template the campaign uses (:func:`used_prompt_files`), the seeds, package and Python
versions, the git commit when the package runs from a checkout, and one entry per run with its start and
stop times (a list that grows: re-running a campaign appends). Written atomically (temp file + rename)
under an exclusive ``fcntl`` lock, so concurrent starts cannot lose an entry.

If the resolved config changes between runs, the new config is recorded in the run entry
(``config_sha256``) and the top-level ``config`` is replaced; ``config_history`` keeps every hash seen.

:func:`config_changes` compares the config with the last run's: a change to a section that shapes the
model calls or the planned work is *call drift* (callers warn: work already planned keeps its original
requests); a change to a scoring-only key (:data:`SCORING_ONLY_KEYS`, e.g. ``[geohint] echo_rule``) only
changes how the stored answers are scored and reported, so the next report is re-scored with it and callers
print an info line, not the drift warning. A change to a geocoder table (:data:`GEOCODER_TABLES`, ``[geohint.geocoder]``)
shapes no model call either: it changes how answers not yet geocoded are located (endpoints, language, anchor
radius, cache), so callers say that instead; its ``contact`` only names us in the User-Agent and is not
reported. Either way the new config is recorded here.

The run decides what a call drift means after planning (:mod:`geoagent.runtime.drift`): a change that reaches
no stored result keeps ``config`` (what the results were made with) and records the new one under
``config_not_applied``; one that adds work next to results made under the old settings appends to
``config_mix``. ``answers_by_request_params`` counts the stored answers per model and request settings while a
model's answers were made under more than one. Keys that only set limits or pacing are
:attr:`ConfigChanges.pacing`, a model's prices :attr:`ConfigChanges.prices`: never call drift.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import secrets as _pysecrets
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from geoagent import __version__
from geoagent import constants as C
from geoagent.runtime.procs import pid_alive, proc_start
from geoagent.secrets import redact

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def prompt_hashes(prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> dict[str, str]:
    """``{relative path: SHA-256 hex}`` of every ``*.txt`` template under ``prompts_dir`` (sorted)."""
    root = Path(prompts_dir)
    if not root.is_dir():
        return {}
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*.txt"))
        if p.is_file()
    }


def _hash_files(files: dict[str, Path]) -> dict[str, str]:
    """``{name: SHA-256 hex}`` of the files of ``files`` that exist (sorted by name); a missing one is left out
    (the plan that reads it reports it)."""
    return {name: hashlib.sha256(path.read_bytes()).hexdigest()
            for name, path in sorted(files.items()) if path.is_file()}


def used_prompt_files(cfg: Any, prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> dict[str, Path] | None:
    """The prompt template files a campaign's model calls are built from, as ``{recorded name: file}``.

    A packaged template is named by its file name under ``prompts_dir`` (``geohint_forced.txt``); a file the
    config names in its place by the path as configured (``[geoverify] prompt_template``; a GeoHint
    ``prompts_dir`` joined with the file name). Per kind: GeoHint, the templates of its ``conditions`` (schema
    template and suffixes, ``geohint_context.txt`` when a condition gives a context); GeoVerify, the claim
    template; crawl, ``crawl_image_audit.txt``, ``crawl_referenceability.txt`` and, with ``sensitive_screen``,
    ``crawl_sensitive.txt``; generic, none. None for a kind not known here, or a section that does not validate
    (the caller then counts every packaged template, as before 2026-12-01)."""
    root = Path(prompts_dir)
    kind = getattr(getattr(cfg, "campaign", None), "kind", None)
    try:
        if kind == "generic":
            return {}
        if kind == "geoverify":
            from geoagent.geoverify.plan import settings_of

            own = settings_of(cfg).prompt_template
            return {str(own): Path(own)} if own else {"geoverify_claim.txt": root / "geoverify_claim.txt"}
        if kind == "geohint":
            from geoagent.geohint.campaign import settings_of as gh_settings
            from geoagent.geohint.conditions import CONTEXT_TEMPLATE, conditions_from_config

            s = gh_settings(cfg)
            conds = conditions_from_config({"conditions": s.conditions})
            names = {c.template for c in conds} | {x for c in conds for x in c.suffixes}
            if any(c.uses_context for c in conds):
                names.add(CONTEXT_TEMPLATE)
            if s.prompts_dir:
                return {f"{Path(s.prompts_dir).as_posix()}/{n}": Path(s.prompts_dir) / n for n in names}
            return {n: root / n for n in names}
        if kind == "crawl":
            from geoagent.crawl.campaign import _settings as crawl_settings

            names = {"crawl_image_audit.txt", "crawl_image_audit_reask.txt", "crawl_referenceability.txt",
                     "crawl_referenceability_reask.txt"}
            if crawl_settings(cfg).referenceability.sensitive_screen:
                names |= {"crawl_sensitive.txt", "crawl_sensitive_reask.txt"}
            return {n: root / n for n in names}
    except Exception:  # noqa: BLE001 - an invalid section is reported where the plan reads it
        return None
    return None


def used_prompt_hashes(cfg: Any, prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> dict[str, str]:
    """``{recorded name: SHA-256 hex}`` of the prompt templates campaign ``cfg`` uses (:func:`used_prompt_files`;
    every packaged template, :func:`prompt_hashes`, for a kind it does not know). Recorded in the manifest as
    ``prompt_templates_sha256`` and compared by :func:`config_changes`."""
    files = used_prompt_files(cfg, prompts_dir)
    return prompt_hashes(prompts_dir) if files is None else _hash_files(files)


def sampling_sent(cfg: Any) -> dict[str, dict[str, Any]]:
    """Per ``[[models]]`` name, the sampling settings of its configured params (``temperature``, ``top_p``,
    ``seed``; :meth:`geoagent.config.ModelConfig.default_params`) that its provider sends and those it leaves
    out, with why (:func:`geoagent.providers.sampling.sampling_record`): an OpenAI reasoning model or a Claude
    4.7+ model is sent no temperature, though the config (and the request key) holds the default 0.0. Recorded
    in the manifest as ``sampling_sent`` beside the configured ``config.models``. A task's own params (a GeoHint
    repeat's seed) follow the same rules.

    A crawl's auditors send their own settings, not their ``[[models]]`` entry's (``[crawl.image_audit]`` /
    ``[crawl.referenceability]`` ``temperature``: :func:`geoagent.crawl.image_audit.build_request`,
    :meth:`geoagent.crawl.referenceability.ReferenceabilityAuditor._request`): they are recorded under
    ``crawl.image_audit`` and ``crawl.referenceability`` (:func:`auditor_sampling_sent`), each with the ``model``
    (entry name) it calls, by the same rules."""
    from geoagent.providers.sampling import sampling_record

    out: dict[str, dict[str, Any]] = {}
    for m in getattr(cfg, "models", ()) or ():
        out[m.name] = sampling_record(m.provider, m.model, m.default_params(), base_url=m.effective_base_url,
                                      reasoning_model=m.reasoning_model, family=m.model_family)
    out.update(auditor_sampling_sent(cfg))
    return out


def auditor_sampling_sent(cfg: Any) -> dict[str, dict[str, Any]]:
    """For a crawl campaign, ``{"crawl.image_audit": {...}, "crawl.referenceability": {...}}``: the sampling
    settings each auditor's requests carry (its table's ``temperature``) as sent to its model, ``{"model": <name>,
    "sent": {...}, "not_sent": {...}[, "why"]}`` (:func:`geoagent.providers.sampling.sampling_record`). The model is
    the ``[[models]]`` entry the table names when there is one (its provider, id, host, ``reasoning_model``,
    ``model_family``: as the crawl calls it, :func:`geoagent.crawl.stages.services_from_context`), else the table's own
    ``provider`` (the default simulated auditors). ``{}`` for other kinds or a crawl table that does not validate."""
    if getattr(getattr(cfg, "campaign", None), "kind", None) != "crawl":
        return {}
    from geoagent.providers.sampling import sampling_record

    try:
        from geoagent.crawl.campaign import _settings as crawl_settings

        settings = crawl_settings(cfg)
    except Exception:  # noqa: BLE001 - an invalid section is reported where the crawl reads it
        return {}
    models = {m.name: m for m in getattr(cfg, "models", ()) or ()}
    out: dict[str, dict[str, Any]] = {}
    for table in ("image_audit", "referenceability"):
        sec = getattr(settings, table)
        params = {"temperature": sec.temperature}  # the auditors' requests carry no top_p and no seed
        m = models.get(sec.model)
        if m is not None:
            rec = sampling_record(m.provider, m.model, params, base_url=m.effective_base_url,
                                  reasoning_model=m.reasoning_model, family=m.model_family)
        else:
            rec = sampling_record(str(sec.provider), str(sec.model), params)
        out[f"crawl.{table}"] = {"model": sec.model, **rec}
    return out


def _simulated_models(cfg: Any) -> list[str]:
    """:func:`geoagent.sandbox.launch.simulated_models` of ``cfg`` (the manifest's ``simulated_models``)."""
    from geoagent.sandbox.launch import simulated_models

    return simulated_models(cfg)


def git_commit(repo_dir: str | os.PathLike[str] | None = None) -> str | None:
    """``HEAD`` commit of the checkout holding the package (with ``-dirty`` if it has changes), or None."""
    cwd = Path(repo_dir) if repo_dir is not None else Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=10
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head or None


@contextlib.contextmanager
def _locked(path: Path, *, wait: bool = True) -> Iterator[None]:
    """Hold the manifest's lock file for the block; ``wait`` False: raise ``BlockingIOError`` at once when another
    holder (this process or another) has it."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(path.suffix + ".lock"), "a+") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def read_manifest(state_dir: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of the campaign whose state folder is ``state_dir``, or None if there is none yet.

    Raises
    ------
    ValueError
        The file is not a JSON object with a ``runs`` list (damaged, or hand-edited): the message names the
        file, and nothing is written to it (a run would otherwise replace the history it holds).
    """
    path = Path(state_dir) / C.MANIFEST_FILE
    try:
        data = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return None
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"{path}: the campaign's manifest is not valid JSON ({exc}); restore it from a backup "
                         "or move it aside (a new one is started, without the history of earlier runs and the "
                         "settings they recorded, e.g. GeoVerify's tau_m, which the work made then keeps)") from None
    if not isinstance(data, dict) or not isinstance(data.get("runs", []), list):
        raise ValueError(f"{path}: the campaign's manifest is not a JSON object with a 'runs' list; restore it "
                         "from a backup or move it aside (a new one is started, without the earlier runs and the "
                         "settings they recorded, e.g. GeoVerify's tau_m, which the work made then keeps)")
    return data


def _write(path: Path, data: dict[str, Any]) -> None:
    text = redact(orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode())
    from geoagent.files import atomic_write_text

    # a locked temporary file of a unique name (geoagent.files.atomic_open): the run start's clean-up of killed
    # writers' files never takes a live one's, also one of a writer in another pid namespace
    atomic_write_text(path, text + "\n")


_LOOPBACK_URL = re.compile(r"^http://127\.0\.0\.1:\d+(?P<rest>/.*)?$")
_SANDBOX_URL = re.compile(r"^https?://[a-z0-9-]+\.sandbox\.invalid(?P<rest>/.*)?$")
_LOOPBACK_HOST = re.compile(r"^127\.0\.0\.1:\d+$")


def adopt_sandbox_names(cfg: Any, *, state_dir: str | os.PathLike[str] | None = None) -> list[str]:
    """Rewrite, in the campaign's ``manifest.json``, what a demo campaign's recorded config says differently
    from ``cfg`` only because of where the demo ran: return the config paths rewritten
    (``["models[0].base_url", "hosts.127.0.0.1:36979", "geoverify.image_root", ...]``; empty when none).

    * the local sandbox fakes named by their loopback ports (what ``run.py demo`` recorded before it ran each
      campaign from its config as written): a recorded URL ``http://127.0.0.1:PORT/path`` is replaced where
      ``cfg`` (resolved, as the manifest stores it) has ``http://NAME.sandbox.invalid/path`` at the same place,
      same path; ``[hosts]`` entries keyed ``127.0.0.1:PORT`` (pacing of those fakes, ports long gone) are
      dropped;
    * the demo's workdir moved (``mv work work2``): a recorded path under the recorded ``[paths] state`` (the
      crawl's folder as ``release_dir``, the images as ``image_root``) is replaced where ``cfg`` has the same
      path under its own ``[paths] state``.

    Without this, such a manifest made every later demo say its models, endpoints and ``[hosts]`` (or its
    ``image_root`` and ``release_dir``) "changed since its last run ... Use a new [campaign] name", a change
    "not applied" to the stored results, so said again on every run. Only for the demo's campaigns, which it
    writes itself (the demo calls it); nothing else of the record is touched.

    Raises
    ------
    ValueError
        A damaged manifest (:func:`read_manifest`).
    """
    from geoagent.config import resolved_dict

    sdir = Path(state_dir) if state_dir is not None else Path(cfg.state_dir())
    path = sdir / C.MANIFEST_FILE
    if not path.is_file():
        return []
    now = orjson.loads(redact(orjson.dumps(resolved_dict(cfg)).decode()))
    changed: list[str] = []
    roots: list[tuple[str, str]] = []  # (recorded [paths] state, this config's), when they differ

    def walk(old: Any, new: Any, where: str) -> Any:
        if isinstance(old, dict) and isinstance(new, dict):
            return {k: (walk(v, new[k], f"{where}.{k}" if where else k) if k in new else v) for k, v in old.items()}
        if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
            return [walk(o, n, f"{where}[{i}]") for i, (o, n) in enumerate(zip(old, new))]
        if isinstance(old, str) and isinstance(new, str):
            lo, sb = _LOOPBACK_URL.match(old), _SANDBOX_URL.match(new)
            if lo and sb and (lo.group("rest") or "") == (sb.group("rest") or ""):
                changed.append(where)
                return new
            for was, is_ in roots:
                if old.startswith(was + "/") and new == is_ + old[len(was):]:
                    changed.append(where)
                    return new
        return old

    with _locked(path):
        data = read_manifest(sdir)
        if not data or not isinstance(data.get("config"), dict):
            return []
        was_state = (data["config"].get("paths") or {}).get("state")
        is_state = (now.get("paths") or {}).get("state")
        if isinstance(was_state, str) and isinstance(is_state, str) and was_state.rstrip("/") != is_state.rstrip("/"):
            roots.append((was_state.rstrip("/"), is_state.rstrip("/")))
        rec = walk(data["config"], now, "")
        hosts = rec.get("hosts")
        if isinstance(hosts, dict):
            gone = [h for h in hosts if _LOOPBACK_HOST.match(str(h)) and h not in (now.get("hosts") or {})]
            rec["hosts"] = {h: v for h, v in hosts.items() if h not in gone}
            changed += [f"hosts.{h}" for h in gone]
        if changed:
            data["config"] = rec
            _write(path, data)
    return changed


#: scoring settings whose code used a value before the setting existed (manifests of that code lack the key):
#: that value, where it differs from today's default (``[geohint] n_boot``: 200 resamples, the default until
#: session 22 raised it to 1000)
SETTING_BEFORE_IT_EXISTED: dict[str, Any] = {"geohint.n_boot": 200}

#: config sections whose change between runs does not alter planned work (cap raised after "budget
#: exhausted", data roots moved, the file renamed)
_DRIFT_IGNORED = ("budget", "paths", "source", "backend")

#: keys of task sections that never reach a model call or the planned work: they only choose how the stored
#: answers are scored and reported (echo rule, slope p-value reference, regime threshold, permutation flips,
#: split-half splits, bootstrap replicates and seed) or how often the live report is rewritten. A change
#: re-scores the report from the stored answers; it is recorded in the manifest, not warned about as drift.
SCORING_ONLY_KEYS: dict[str, frozenset[str]] = {
    "geohint": frozenset({"echo_rule", "p_reference", "regime_threshold", "n_flips", "n_splits", "n_boot",
                          "boot_seed", "report_interval_s"}),
    "geoverify": frozenset({"n_boot", "boot_seed", "live_n_boot", "report_interval_s"}),
}


#: ``{section: key}`` of the nested geocoder tables: they never reach a model call, only the geocoder stage
#: (answers geocoded after the change use the new values; answers already geocoded keep the old ones)
GEOCODER_TABLES: dict[str, str] = {"geohint": "geocoder"}

#: geocoder keys that change nothing in the results (the contact only goes into the User-Agent)
_GEOCODER_SILENT_KEYS = frozenset({"contact"})


def _geocoder_values(value: Any) -> dict[str, Any]:
    """A geocoder table as compared: every key of :class:`~geoagent.geohint.geocode_stage.GeocoderSettings`
    with its default where the table leaves it out (an absent table equals its defaults)."""
    table = dict(value) if isinstance(value, dict) else {}
    try:
        from geoagent.geohint.geocode_stage import GeocoderSettings
    except ImportError:  # partial checkout: compare the tables as written
        return table
    defaults = {f.name: f.default for f in fields(GeocoderSettings) if f.default is not MISSING}
    return orjson.loads(orjson.dumps({**defaults, **table}))


@dataclass(frozen=True, slots=True)
class ConfigChanges:
    """What changed since a campaign's last recorded run (:func:`config_changes`).

    Attributes
    ----------
    calls : list of str
        Changed top-level sections (``models``, ``geohint``, ...) and prompt templates the campaign uses
        (``prompt:<file>``, :func:`used_prompt_files`)
        that shape model calls or planned work: call drift.
    scoring : dict of str -> (old, new)
        Changed scoring-only keys as ``"<section>.<key>"`` with their old and new values (JSON values; None
        where the key was absent): the report is re-scored with the new values, no call is affected.
    geocoder : dict of str -> (old, new)
        Changed keys of a geocoder table (:data:`GEOCODER_TABLES`, e.g. ``nominatim_url``) with their old and
        new values (defaults filled in; ``contact`` left out): no call is affected; answers geocoded from now
        on use the new values, those already geocoded keep the old ones.
    call_keys : dict of str -> (old, new)
        The changed keys behind ``calls`` (see the field's comment).
    """

    calls: list[str] = field(default_factory=list)
    scoring: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    geocoder: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: the changed keys behind :attr:`calls` (the sections'; not the prompts), as paths into the resolved
    #: config (``models[0].max_output_tokens``) with their old and new values (JSON values as stored, i.e.
    #: redacted; None where the key was absent), :func:`changed_keys`
    call_keys: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: changed keys that only set limits or pacing (:func:`geoagent.runtime.drift.is_pacing_key`: a model's
    #: ``rate``, ``concurrency``, timeouts, ``max_attempts``; ``[hosts]``; ``[queue]``), with their old and new
    #: values: they change no request or answer, so they are not in :attr:`calls` / :attr:`call_keys`
    pacing: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: changed model prices (:func:`geoagent.runtime.drift.is_price_key`: ``models[0].price_input_usd_per_mtok``,
    #: USD per 1M tokens), with their old and new values: they change what a call is booked at, no request (no
    #: part of its key) or answer, so they are not in :attr:`calls` / :attr:`call_keys` either
    prices: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: changed sampling settings that are sent to the model neither before nor after
    #: (:func:`geoagent.runtime.drift.unsent_sampling_changes`: ``models[0].temperature`` 0.0 -> 1 for an OpenAI
    #: reasoning model, which is sent no temperature), with their old and new values: the requests carry the same
    #: sampling, so they are not in :attr:`calls` / :attr:`call_keys` either
    unsent: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    #: changed inputs applied to stored answers after the calls (:func:`geoagent.runtime.drift.is_applied_after_key`:
    #: the crawl's ``crawl.image_audit.human_verdicts``), with their old and new values: no request carries them,
    #: each run re-applies them, so they are not in :attr:`calls` / :attr:`call_keys` either
    applied_after: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def changed_keys(before: Any, now: Any, prefix: str) -> dict[str, tuple[Any, Any]]:
    """The leaves that differ between two JSON values, as ``{path: (old, new)}``: tables by key
    (``prefix.key``), arrays by index (``prefix[0]``), anything else (or a table against a non-table) as one
    leaf at ``prefix``; a key or index on one side only has None on the other. Empty when equal."""
    if before == now:
        return {}
    if isinstance(before, dict) and isinstance(now, dict):
        out: dict[str, tuple[Any, Any]] = {}
        for k in sorted(set(before) | set(now)):
            out.update(changed_keys(before.get(k), now.get(k), f"{prefix}.{k}" if prefix else str(k)))
        return out
    if isinstance(before, list) and isinstance(now, list):
        out = {}
        for i in range(max(len(before), len(now))):
            out.update(changed_keys(before[i] if i < len(before) else None, now[i] if i < len(now) else None,
                                    f"{prefix}[{i}]"))
        return out
    return {prefix: (before, now)}


def _keep_model_entries(config: dict[str, Any], recorded: dict[str, Any], names: Any) -> dict[str, Any]:
    """``config`` (a resolved config dict) with the ``[[models]]`` entries named in ``names`` replaced by those of the
    same name in ``recorded`` (the manifest's config so far), where it has one; every other key as in ``config``."""
    old = {m.get("name"): m for m in recorded.get("models") or [] if isinstance(m, dict)}
    keep = set(names or ())
    models = [old[m.get("name")] if isinstance(m, dict) and m.get("name") in keep and m.get("name") in old else m
              for m in config.get("models") or []]
    return {**config, "models": models}


def align_by_name(before: Any, now: Any) -> tuple[Any, Any]:
    """``(before, now)`` arrays of named tables (``[[models]]``) lined up by ``name`` for :func:`changed_keys`:
    ``now`` keeps its order (so ``models[i]`` is the current file's entry i), ``before`` gets at position i the
    earlier entry of the same name (None where there was none: an added model), and the earlier entries no longer
    named follow both, against None (a removed model: ``models[<n>]: {...} -> unset``). Without this a model
    removed from the front, or a reorder, read as every later entry's ``name`` and ``model`` changing. Anything
    but two lists of tables with unique string names is returned as it is (compared by position)."""
    def names(v: Any) -> list[Any] | None:
        if not isinstance(v, list) or not all(isinstance(x, dict) and isinstance(x.get("name"), str) for x in v):
            return None
        out = [x["name"] for x in v]
        return out if len(set(out)) == len(out) else None

    nb, nn = names(before), names(now)
    if nb is None or nn is None:
        return before, now
    old = dict(zip(nb, before))
    gone = [old[name] for name in nb if name not in set(nn)]
    return [old.get(name) for name in nn] + gone, list(now) + [None] * len(gone)


def _section_values(name: str, value: Any) -> Any:
    """A task section as compared: an absent section stands for its registered settings' defaults."""
    if value is None:
        from geoagent.config import registered_sections

        model_cls = registered_sections().get(name)
        if model_cls is not None:
            try:
                return orjson.loads(orjson.dumps(model_cls().model_dump(mode="json")))
            except Exception:  # noqa: BLE001 - a section with required keys has no defaults to stand for
                return None
    return value


#: the key under which the manifest records the version of the GeoVerify trial builder a ``trials = "build"``
#: campaign planned with (:data:`geoagent.geoverify.trials.TRIAL_BUILDER_VERSION`)
TRIAL_BUILDER_KEY = "geoverify.trial_builder"


#: the ``designs`` key of the GeoHint geocoder's rules (:data:`geoagent.geohint.geocode.GEOCODER_RULES_VERSION`)
GEOCODER_RULES_KEY = "geohint.geocoder_rules"


def design_versions(cfg: Any) -> dict[str, int]:
    """Versions of the code that turns the config and its inputs into planned tasks, where a new version plans
    other tasks from the same config and seed: ``{"geoverify.trial_builder": 3}`` for a GeoVerify campaign
    with ``[geoverify] trials = "build"`` (:func:`geoagent.geoverify.trials.trial_builder_version` of its tau: 4
    below 150 m, 3 from 150 m up, where version 4 changed nothing); and of the
    code that locates a GeoHint campaign's answers, ``{"geohint.geocoder_rules": 2}``
    (:data:`geoagent.geohint.geocode.GEOCODER_RULES_VERSION`: it changes no model call, only how answers not yet
    geocoded are located); else ``{}``. Recorded in the manifest as ``designs`` and compared by
    :func:`config_changes`."""
    kind = getattr(getattr(cfg, "campaign", None), "kind", None)
    if kind == "geohint":
        from geoagent.geohint.geocode import GEOCODER_RULES_VERSION

        return {GEOCODER_RULES_KEY: GEOCODER_RULES_VERSION}
    if kind != "geoverify":
        return {}
    try:
        from geoagent.geoverify.plan import settings_of
        from geoagent.geoverify.trials import trial_builder_version

        s = settings_of(cfg)
    except Exception:  # noqa: BLE001 - an invalid section is reported where the plan reads it
        return {}
    # the version that last changed the trials of this tau (fixverify42 #1: version 4 changed those below 150 m only)
    return {TRIAL_BUILDER_KEY: trial_builder_version(s.tau_m / 1000.0)} if s.trials == "build" else {}


def _recorded_designs(old: dict[str, Any]) -> dict[str, Any]:
    """The ``designs`` of a recorded manifest; one written before designs were recorded (2026-12-01) by a
    ``trials = "build"`` GeoVerify campaign planned with trial builder version 1; a GeoHint one without the
    geocoder rules (before 2026-12-02) geocoded with version 1."""
    if isinstance(old.get("designs"), dict):
        if old.get("kind") == "geohint" and GEOCODER_RULES_KEY not in old["designs"]:
            return {**old["designs"], GEOCODER_RULES_KEY: 1}
        return old["designs"]
    if old.get("kind") == "geohint":
        return {GEOCODER_RULES_KEY: 1}
    gv = (old.get("config") or {}).get("geoverify")
    if old.get("kind") == "geoverify" and isinstance(gv, dict) and gv.get("trials") == "build":
        return {TRIAL_BUILDER_KEY: 1}
    return {}


def config_changes(cfg: Any, *, state_dir: str | os.PathLike[str] | None = None,
                   prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> ConfigChanges:
    """Compare ``cfg`` (resolved) and the prompt templates it uses (:func:`used_prompt_hashes`; only those the
    last recorded run recorded too) with the campaign's last recorded run.

    Sections ``budget``, ``paths`` and ``source`` are ignored (a raised cap, moved data roots, a renamed
    file). In the sections of :data:`SCORING_ONLY_KEYS` the scoring-only keys are compared one by one and
    go to :attr:`ConfigChanges.scoring`; a geocoder table (:data:`GEOCODER_TABLES`) is compared key by key
    into :attr:`ConfigChanges.geocoder`; the rest of such a section counts as call drift only when it
    changed. An absent task section equals its settings' defaults. Nothing changed (or a new campaign):
    empty lists.
    """
    old = read_manifest(Path(state_dir) if state_dir is not None else cfg.state_dir())
    return config_changes_against(old, cfg, prompts_dir=prompts_dir)


def config_changes_against(old: dict[str, Any] | None, cfg: Any, *,
                           prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> ConfigChanges:
    """:func:`config_changes` against a recorded ``old`` (a manifest, or the record a Redis campaign keeps on
    its server, :func:`server_config_record`: ``config``, ``prompt_templates_sha256``, ``designs``, ``kind``)
    instead of the state folder's manifest. No ``old``, or one without a ``config`` table: no change."""
    from geoagent.runtime.drift import section_of

    if not old or not isinstance(old.get("config"), dict):
        return ConfigChanges()
    # compared as it would be stored (the manifest is written through redact)
    before, now = old["config"], stored_config(cfg)
    calls: list[str] = []
    call_keys: dict[str, tuple[Any, Any]] = {}
    scoring: dict[str, tuple[Any, Any]] = {}
    geocoder: dict[str, tuple[Any, Any]] = {}
    for k in sorted(set(before) | set(now)):
        if k in _DRIFT_IGNORED or before.get(k) == now.get(k):
            continue
        keys = SCORING_ONLY_KEYS.get(k)
        b, n = _section_values(k, before.get(k)), _section_values(k, now.get(k))
        if k == "models":
            b, n = align_by_name(b, n)
        nested = GEOCODER_TABLES.get(k)
        if nested is not None and isinstance(b, dict) and isinstance(n, dict):
            gb, gn = _geocoder_values(b.get(nested)), _geocoder_values(n.get(nested))
            for key in sorted(set(gb) | set(gn)):
                if key not in _GEOCODER_SILENT_KEYS and gb.get(key) != gn.get(key):
                    geocoder[key] = (gb.get(key), gn.get(key))
            b = {x: v for x, v in b.items() if x != nested}
            n = {x: v for x, v in n.items() if x != nested}
        if keys is None or not isinstance(b, dict) or not isinstance(n, dict):
            if b != n:
                calls.append(k)
                call_keys.update(changed_keys(b, n, k))
            continue
        # a scoring key the earlier manifest lacks (its code had no such setting) reads as the value that code
        # used (SETTING_BEFORE_IT_EXISTED, e.g. [geohint] n_boot before it could be set: 200 resamples), else as the
        # section's default, so an upgrade reports a change only where the value did change
        defaults = _section_values(k, None)
        defaults = defaults if isinstance(defaults, dict) else {}
        for key in sorted(keys):
            old_value = b[key] if key in b else SETTING_BEFORE_IT_EXISTED.get(f"{k}.{key}", defaults.get(key))
            if old_value != n.get(key):
                scoring[f"{k}.{key}"] = (old_value, n.get(key))
        rest_b = {x: v for x, v in b.items() if x not in keys}
        rest_n = {x: v for x, v in n.items() if x not in keys}
        if rest_b != rest_n:
            calls.append(k)
            call_keys.update(changed_keys(rest_b, rest_n, k))
    # a new version of the code that draws the planned tasks (the trial builder) plans other tasks from the
    # same config: a change of what is planned, named as such (geoagent.runtime.drift.DESIGN_KEYS)
    old_designs, new_designs = _recorded_designs(old), design_versions(cfg)
    for key in sorted(set(old_designs) & set(new_designs)):
        if old_designs[key] != new_designs[key]:
            if key == GEOCODER_RULES_KEY:  # how answers are located, not what is asked: a geocoder change
                geocoder["rules_version"] = (old_designs[key], new_designs[key])
                continue
            call_keys[key] = (old_designs[key], new_designs[key])
            if section_of(key) not in calls:
                calls.append(section_of(key))
    # keys that only set limits or pacing change no answer: kept apart, and a section whose only changes they
    # are is no call drift
    from geoagent.runtime.drift import is_applied_after_key, is_pacing_key, is_price_key

    pacing = {k: v for k, v in call_keys.items() if is_pacing_key(k)}
    prices = {k: v for k, v in call_keys.items() if is_price_key(k)}
    after = {k: v for k, v in call_keys.items() if is_applied_after_key(k)}
    # [crawl] seed also seeds the ladder draws while [crawl.ladder] seed is unset: every run redraws the ladders
    # from the stored ratings with it, so it is applied after the calls as the ladder's own seed is
    # (geoagent.runtime.drift.crawl_seed_line says what else it seeds)
    if "crawl.seed" in call_keys and crawl_seed_draws_ladders(now):
        after["crawl.seed"] = call_keys["crawl.seed"]
    call_keys = {k: v for k, v in call_keys.items() if k not in pacing and k not in prices and k not in after}
    # a sampling setting sent neither before nor after (an OpenAI reasoning model's temperature) changes no request
    from geoagent.runtime.drift import unsent_sampling_changes

    old_models = before.get("models") if isinstance(before.get("models"), list) else []
    unsent = unsent_sampling_changes(call_keys, align_by_name(old_models, now.get("models") or [])[0], cfg)
    call_keys = {k: v for k, v in call_keys.items() if k not in unsent}
    calls = [c for c in calls if any(section_of(k) == c for k in call_keys)]
    # only the templates this campaign uses now, and only those recorded before: a manifest of the earlier
    # code hashed every packaged template (an edit of one the kind never sends is no change of its calls), and
    # a template newly used (a condition added, another template file configured) comes with its config change
    old_prompts = old.get("prompt_templates_sha256")
    old_prompts = old_prompts if isinstance(old_prompts, dict) else {}
    new_prompts = used_prompt_hashes(cfg, prompts_dir)
    calls += [f"prompt:{name}" for name in sorted(set(old_prompts) & set(new_prompts))
              if old_prompts.get(name) != new_prompts.get(name)]
    return ConfigChanges(calls, scoring, geocoder, call_keys, pacing, prices, unsent, after)


def crawl_seed_draws_ladders(config: Any) -> bool:
    """Whether a stored config (:func:`stored_config`) draws its context ladders with ``[crawl] seed``: it has a
    ``[crawl]`` table and its ``[crawl.ladder] seed`` is unset (:func:`geoagent.crawl.stages.write_site_ladder`:
    ``[crawl.ladder] seed``, else ``[crawl] seed``)."""
    crawl = config.get("crawl") if isinstance(config, dict) else None
    if not isinstance(crawl, dict):
        return False
    ladder = crawl.get("ladder")
    return not isinstance(ladder, dict) or ladder.get("seed") is None


def stored_config(cfg: Any) -> dict[str, Any]:
    """The resolved config of ``cfg`` as the manifest stores and compares it (JSON values, secrets redacted)."""
    from geoagent.config import resolved_dict

    return orjson.loads(redact(orjson.dumps(resolved_dict(cfg)).decode()))


def _leaves(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    """``(path, value)`` of every leaf of a JSON value, paths as in :func:`changed_keys`; ``[[models]]`` sorted
    by name (their order changes no request)."""
    if isinstance(value, dict):
        for k in sorted(value):
            yield from _leaves(value[k], f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(value, list):
        if prefix == "models" and all(isinstance(x, dict) for x in value):
            value = sorted(value, key=lambda x: str(x.get("name")))
        for i, x in enumerate(value):
            yield from _leaves(x, f"{prefix}[{i}]")
    else:
        yield prefix, value


def results_sha256(record: dict[str, Any]) -> str:
    """SHA-256 hex of what in a recorded config (:func:`server_config_record`) shapes requests or results: every
    key :func:`config_changes` compares as call drift, i.e. not the sections it ignores (``[budget]``, ``[paths]``,
    ``[backend]``), not pacing or limits (:func:`geoagent.runtime.drift.is_pacing_key`: a model's ``rate``,
    ``concurrency``, timeouts; ``[hosts]``, ``[queue]``), not prices, inputs applied after the calls (the crawl's
    human verdicts), scoring-only keys or a geocoder's
    ``contact``; plus the prompt templates used and the design versions. Equal hashes: the same requests and
    results (machines may differ in pacing and the cap). Different hashes are compared key by key
    (:func:`config_changes_against`) before anything is refused."""
    from geoagent.runtime.drift import is_applied_after_key, is_pacing_key, is_price_key, section_of

    config = record.get("config") if isinstance(record.get("config"), dict) else {}
    kept = []
    for path, value in _leaves({k: v for k, v in config.items() if k not in _DRIFT_IGNORED}, ""):
        section, _, rest = path.partition(".")
        if is_pacing_key(path) or is_price_key(path) or is_applied_after_key(path) or section_of(path) == "hosts":
            continue
        if rest.split(".", 1)[0].split("[", 1)[0] in SCORING_ONLY_KEYS.get(section, ()):
            continue
        nested = GEOCODER_TABLES.get(section)
        if nested is not None and rest.split(".")[-1] in _GEOCODER_SILENT_KEYS and rest.startswith(nested + "."):
            continue
        kept.append([path, value])
    data = {"config": kept, "prompts": record.get("prompt_templates_sha256") or {},
            "designs": record.get("designs") or {}}
    return hashlib.sha256(orjson.dumps(data, option=orjson.OPT_SORT_KEYS)).hexdigest()


def server_config_record(cfg: Any, prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> dict[str, Any]:
    """What a ``[backend] kind = "redis"`` campaign records on its server at its first run
    (:func:`geoagent.runtime.backend.check_server_config`): ``kind``, ``config`` (:func:`stored_config`: redacted),
    ``prompt_templates_sha256``, ``designs`` (as the manifest's fields, so :func:`config_changes_against` compares
    them) and ``results_sha256`` (:func:`results_sha256`)."""
    record: dict[str, Any] = {
        "kind": cfg.campaign.kind,
        "config": stored_config(cfg),
        "prompt_templates_sha256": used_prompt_hashes(cfg, prompts_dir),
        "designs": design_versions(cfg),
    }
    record["results_sha256"] = results_sha256(record)
    return record


def config_drift(cfg: Any, *, state_dir: str | os.PathLike[str] | None = None,
                 prompts_dir: str | os.PathLike[str] = PROMPTS_DIR) -> list[str]:
    """What changed since the campaign's last recorded run that shapes model calls or planned work:
    top-level config sections (``models``, ``geoverify``, ...; not ``budget`` or ``paths``; a section whose
    only changes are scoring-only keys, :data:`SCORING_ONLY_KEYS`, is not listed) and the prompt
    templates the campaign uses (``prompt:<file>``). See :func:`config_changes` for the scoring-only changes.

    Planned work keeps the requests it was planned with (queue keys are per trial/request unit), so a
    change here applies only to work planned afterwards; callers warn about it. [] for a new campaign.
    """
    return config_changes(cfg, state_dir=state_dir, prompts_dir=prompts_dir).calls


#: slack (s) when comparing a process's start time with its run's: /proc/stat's boot time is whole seconds and
#: follows later steps of the wall clock (an NTP correction), so a live run's process must not read as born after
#: its run; a pid taken over within this many seconds of a dead run's start is still taken for the run's own
_START_SLACK_S = 30.0


def _pid_started_unix(pid: int) -> float | None:
    """When process ``pid`` started (Unix time, s, to about 1 s: boot time from ``/proc/stat`` + field 22 of
    ``/proc/<pid>/stat`` in clock ticks), or None where that cannot be read (no ``/proc``: not Linux)."""
    start = proc_start(pid)  # field 22 (starttime), clock ticks since boot
    if start is None:
        return None
    try:
        ticks = int(start)
        btime = next(int(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                     if line.startswith("btime "))
        return btime + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None


def _run_process_gone(run: dict[str, Any]) -> bool:
    """Whether the process of ``run`` (a manifest entry of this machine) no longer exists: its pid is free, or
    (Linux) the process now holding that pid, this one included, started after the run did, so it is another
    process that reused the pid (the run's own process started before it wrote its entry)."""
    pid = run.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if pid != os.getpid() and not pid_alive(pid):
        return True
    # alive, this process included (a container restarted with its host name often gives the new run the
    # killed run's pid): the run is its process's only if that process began before the run did
    started = run.get("started_unix")
    if not isinstance(started, (int, float)) or isinstance(started, bool):
        return False
    born = _pid_started_unix(pid)
    return born is not None and born > float(started) + _START_SLACK_S


def _running_here(run: dict[str, Any], here: str) -> bool:
    """Whether manifest entry ``run`` is recorded ``running`` on the machine named ``here`` (its process may be gone:
    :func:`_run_process_gone`)."""
    return run.get("status") == "running" and run.get("host") == here


def stages_run_elsewhere(state_dir: str | os.PathLike[str], all_stages: Sequence[str]) -> set[str]:
    """The stages other live processes of the campaign run on this machine: the union of ``stages`` of the runs
    ``manifest.json`` in ``state_dir`` records as ``running`` here (same host name), whose process is not this one
    and is alive (:func:`_run_process_gone`), less the stages such a run records as ended
    (``stages_ended``, :meth:`Manifest.record_stage_ended`); a run recording no ``stages`` runs ``all_stages``. Set() when there
    is no readable manifest. A ``--stages`` process's stage waits while such a stage before it has work queued
    (:class:`geoagent.runtime.worker.StageRunner`, ``stages_elsewhere``); processes on other machines (a Redis
    campaign) are not seen here."""
    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return set()
    here, me = socket.gethostname(), os.getpid()
    out: set[str] = set()
    for run in man.get("runs") or [] if isinstance(man, dict) else []:
        if not isinstance(run, dict) or not _running_here(run, here) or run.get("pid") == me or _run_process_gone(run):
            continue
        stages = run.get("stages")
        ended = run.get("stages_ended")
        out.update(set(stages if isinstance(stages, list) and all(isinstance(x, str) for x in stages)
                       else all_stages) - set(ended if isinstance(ended, list) else ()))
    return out


def stages_run_since(state_dir: str | os.PathLike[str], all_stages: Sequence[str], since_unix: float) -> set[str]:
    """The stages another process of the campaign on this machine has run at some moment since ``since_unix`` (Unix
    s, this process's start): the union of ``stages`` (``all_stages`` for a run recording none) of the ``run`` entries
    ``manifest.json`` in ``state_dir`` records here (same host name), not of this process, that are recorded
    ``running`` (alive, or gone since: this process's own start marked the ones gone before it ``killed``), or that
    started at or after ``since_unix``, or stopped at or after it (``started_unix + duration_s``). Unlike
    :func:`stages_run_elsewhere`, a stage recorded as ended, or a process that ended, still counts: the stage was
    taken up. Set() when there is no readable manifest.

    A ``--stages`` process waits for an upstream stage none has taken up yet instead of ending at once (fixstages43:
    the downstream process started first); :class:`geoagent.runtime.worker.StageRunner` ``stages_started``."""
    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return set()
    here, me = socket.gethostname(), os.getpid()
    out: set[str] = set()
    for run in man.get("runs") or [] if isinstance(man, dict) else []:
        if (not isinstance(run, dict) or run.get("host") != here or run.get("pid") == me
                or run.get("command", "run") != "run"):
            continue
        started, took = run.get("started_unix"), run.get("duration_s")
        started = float(started) if isinstance(started, (int, float)) and not isinstance(started, bool) else None
        took = float(took) if isinstance(took, (int, float)) and not isinstance(took, bool) else None
        if not (run.get("status") == "running" or (started is not None and started >= since_unix)
                or (started is not None and took is not None and started + took >= since_unix)):
            continue
        stages = run.get("stages")
        out.update(stages if isinstance(stages, list) and all(isinstance(x, str) for x in stages) else all_stages)
    return out


def last_budget_stop(state_dir: str | os.PathLike[str], stage: str, all_stages: Sequence[str]) -> dict[str, Any] | None:
    """The cost cap's stop of stage ``stage``, when the last ``run`` that ``manifest.json`` in ``state_dir`` records
    running it (its ``stages``; ``all_stages`` for a run recording none) ended ``budget exhausted`` and that stage
    was the one the campaign's USD cap stopped; else None (no such run, the last one still ``running``, ended
    otherwise, or stopped by another cap: the geocoder's Nominatim cap, which a re-run resets).

    The stage is judged from the run's last record in the progress stream (``progress.jsonl`` beside it): its
    ``budget_stopped`` and ``budget_fixes`` (:attr:`geoagent.runtime.stage.BudgetStop.fix`); a run whose record is
    not found (rotated out) counts by its status alone.

    Returns ``{"run_id", "cap_usd"`` (the cap that run reserved against, USD, or None when not recorded),
    ``"refused_usd"`` (the largest worst case of a call the cap refused it, USD, or None)``}``. fixstagesbudget43:
    a downstream ``--stages`` process does not wait for a stage stopped so (:func:`geoagent.engine.upstream_budget_stop`
    adds the ledger's room now)."""
    from geoagent.runtime.progress import latest_records_of
    from geoagent.runtime.stage import BudgetStop

    try:
        man = read_manifest(state_dir) or {}
    except (OSError, ValueError):
        return None
    ran = []
    for run in man.get("runs") or [] if isinstance(man, dict) else []:
        if not isinstance(run, dict) or run.get("command", "run") != "run" or not run.get("run_id"):
            continue
        stages = run.get("stages")
        if stage in (stages if isinstance(stages, list) else all_stages):
            ran.append(run)
    if not ran:
        return None
    last = max(ran, key=lambda r: float(r.get("started_unix") or 0.0) if isinstance(
        r.get("started_unix"), (int, float)) else 0.0)
    if last.get("status") != "budget exhausted":
        return None
    spend = (last.get("summary") or {}).get("spend") if isinstance(last.get("summary"), dict) else None
    cap = spend.get("cap_usd") if isinstance(spend, dict) else None
    refused = None
    rec = latest_records_of(Path(state_dir) / C.PROGRESS_FILE, [str(last["run_id"])]).get(str(last["run_id"]))
    if rec is not None:
        sd = next((x for x in rec.get("stages") or [] if isinstance(x, dict) and x.get("stage") == stage), None)
        fixes = [str(f) for f in (sd or {}).get("budget_fixes") or []]
        if sd is None or not sd.get("budget_stopped") or (fixes and BudgetStop.fix not in fixes):
            return None  # the run's budget stop was another stage's, or another cap's
        from geoagent.status import refused_call_usd

        refused = refused_call_usd({"stages": [sd]})
        rec_cap = (rec.get("spend") or {}).get("cap_usd") if isinstance(rec.get("spend"), dict) else None
        cap = rec_cap if isinstance(rec_cap, (int, float)) else cap
    return {"run_id": str(last["run_id"]),
            "cap_usd": float(cap) if isinstance(cap, (int, float)) and not isinstance(cap, bool) else None,
            "refused_usd": refused}


def local_run_processes(runs: Sequence[Any]) -> list[dict[str, Any]]:
    """The processes of the run entries ``runs`` (a manifest's ``runs``) recorded on this machine (same host name) by
    ``run``, as :func:`geoagent.runtime.progress.read_processes` ``known`` takes them: ``{"run_id", "started"`` (Unix
    s), ``"alive"`` (recorded ``running`` and its process still there, :func:`_run_process_gone`), ``"ended"`` (Unix s:
    start + ``duration_s`` of one that recorded its end; None otherwise)``}``. ``status`` finds with them a process
    whose progress records lie further back than it reads (fixstatus43 #3); an entry without a run id or a start time
    is left out."""
    here, out = socket.gethostname(), []
    for run in runs:
        if not isinstance(run, dict) or run.get("host") != here or run.get("command", "run") != "run":
            continue
        run_id, started, took = run.get("run_id"), run.get("started_unix"), run.get("duration_s")
        if not isinstance(run_id, str) or not isinstance(started, (int, float)) or isinstance(started, bool):
            continue
        ended = (float(started) + float(took) if run.get("status") != "running" and isinstance(took, (int, float))
                 and not isinstance(took, bool) else None)
        out.append({"run_id": run_id, "started": float(started), "ended": ended,
                    "alive": run.get("status") == "running" and not _run_process_gone(run)})
    return out


#: a run entry's key set while the run writes its final exports and report (:meth:`Manifest.record_writing_end`),
#: removed once they are written (:meth:`Manifest.stop_run` ``end_written``)
WRITING_END_KEY = "writing_end_since"
#: a run entry's key (true) once the run wrote its final exports and report
END_WRITTEN_KEY = "end_written"
#: a run entry's key: false from the run's start (geoagent's engine), the time (UTC) its work began once it did
#: (:meth:`Manifest.record_work_began`: its first task leased, a stored row rewritten, a --watch hand-off); an entry
#: without it (an earlier geoagent) counts as having worked
WORK_BEGAN_KEY = "work_began"
#: a run entry's keys of the run-start refresh of stored rows (upgrade41 #4; GeoVerify's re-keying and re-parsing,
#: GeoHint's re-parsing and geocoding again: :meth:`geoagent.engine.CampaignKind.refresh_scored_rows`): the time
#: (UTC) the refresh first wrote a row (:meth:`Manifest.record_refresh`), and the time it returned; a run entry with
#: the first and not the second stopped (killed, failed) inside its refresh
REFRESH_BEGAN_KEY = "refresh_began"
REFRESH_DONE_KEY = "refresh_done"


def refresh_cut_short(runs: Sequence[Any]) -> dict[str, Any] | None:
    """Of the run entries ``runs`` (a manifest's ``runs``, oldest first), the newest that began its run-start refresh
    of stored rows (:data:`REFRESH_BEGAN_KEY`) and did not finish it (no :data:`REFRESH_DONE_KEY`), when no later
    run finished a refresh since (upgrade41 #4); None otherwise. A run still ``running`` whose process on this
    machine is alive is passed over (its refresh may go on); a run with neither key (it wrote nothing in its
    refresh, was stopped before it, or an earlier geoagent's) leaves the question to the runs before it."""
    for run in reversed(runs):
        if not isinstance(run, dict):
            continue
        if run.get(REFRESH_DONE_KEY):
            return None
        if not run.get(REFRESH_BEGAN_KEY):
            continue
        if run.get("status") == "running" and run.get("host") == socket.gethostname() and not _run_process_gone(run):
            continue
        return run
    return None


def end_cut_short(runs: Sequence[Any]) -> dict[str, Any] | None:
    """Of the run entries ``runs`` (a manifest's ``runs``, oldest first), the newest that began writing its final
    exports and report (:data:`WRITING_END_KEY` or :data:`END_WRITTEN_KEY`), when it did not finish them: the mark
    is still there (killed or a forced exit while writing them, or an error); None when that run finished them, or
    no run records either key (a manifest written before they existed, or a run that never reached its end).

    A newer run that died before it began writing its end (``killed``, ``forced exit``, or still ``running`` while
    its process on this machine is gone) is returned too: it may have done the last of the work (its last task
    acknowledged, its exports and report not begun), so the files on disk are an earlier run's (review40a #5: the
    check skipped it and read the earlier run's ``end_written``, "campaign complete"). A run that ended with any
    other recorded status before the marks existed counts as having written its end.

    A run that died before its work began (:data:`WORK_BEGAN_KEY` false: killed while its pipeline started over
    drained queues, before its first lease) changed nothing the files on disk were made from: it is passed over,
    and the runs before it decide (review40b #5: status said an earlier complete run's end was unwritten)."""
    for run in reversed(runs):
        if not isinstance(run, dict):
            continue
        if run.get(END_WRITTEN_KEY):
            return None
        if run.get(WRITING_END_KEY):
            return run
        if run.get(WORK_BEGAN_KEY) is False:
            continue  # no task leased, no row rewritten: whatever it ended as, the earlier runs' files stand
        status = run.get("status")
        if status in ("killed", "forced exit") or (status == "running" and _running_here(run, socket.gethostname())
                                                    and _run_process_gone(run)):
            return run
        if status not in (None, "running"):
            return None  # ended and recorded it, without the marks: an earlier geoagent, its end written
    return None


def _close_dead_runs(runs: list[dict[str, Any]], new_run_id: str) -> None:
    """Mark the entries of ``runs`` still ``running`` whose process is gone (this machine only: same host name,
    its pid no longer exists, or holds a process that started after the run: pid reuse, :func:`_run_process_gone`)
    as ``killed``: the process ended without stopping its run (SIGKILL, a crash, a power cut), so no final status
    was written. Entries of live processes (a ``--stages`` scale-out, a run still going) and of other machines are
    left as they are. ``stopped_at`` stays None (the end is unknown); ``killed_found_by`` names the run that
    found it."""
    here = socket.gethostname()
    for run in runs:
        if _running_here(run, here) and _run_process_gone(run):
            run["status"] = "killed"
            run["killed_found_by"] = new_run_id


class Manifest:
    """Record runs of one campaign in its ``manifest.json``.

    Usage::

        manifest = Manifest(cfg)                       # or Manifest(cfg, state_dir=...)
        run_id = manifest.start_run(command="run")     # writes config, hashes, versions, a new run entry
        ...
        manifest.stop_run(run_id, status="complete", summary={...})
    """

    def __init__(self, cfg: Any, *, state_dir: str | os.PathLike[str] | None = None, prompts_dir: str | os.PathLike[str] = PROMPTS_DIR):
        self.cfg = cfg
        self.state_dir = Path(state_dir) if state_dir is not None else cfg.state_dir()
        self.path = self.state_dir / C.MANIFEST_FILE
        self.prompts_dir = Path(prompts_dir)

    def _static(self) -> dict[str, Any]:
        from geoagent.config import config_sha256, resolved_dict

        cfg = self.cfg
        seeds = {"campaign": cfg.campaign.seed}
        seeds.update({f"model:{m.name}": m.seed for m in cfg.models if m.seed is not None})
        return {
            "campaign": cfg.campaign.name,
            "kind": cfg.campaign.kind,
            "config": resolved_dict(cfg),
            "config_sha256": config_sha256(cfg),
            "prompt_templates_sha256": used_prompt_hashes(cfg, self.prompts_dir),
            "sampling_sent": sampling_sent(cfg),
            # models answered by geoagent's simulator (provider "simulated", a *.sandbox.invalid model fake; the
            # config as written), [] for none: their results describe the simulator, not a model
            "simulated_models": _simulated_models(cfg),
            "designs": design_versions(cfg),
            "seeds": seeds,
            "package": {"name": "geoagent", "version": __version__},
            "python": {"version": platform.python_version(), "implementation": platform.python_implementation()},
            "platform": platform.platform(),
            "git_commit": git_commit(),
        }

    def start_run(self, *, command: str = "run", extra: dict[str, Any] | None = None,
                  drift: Any = None) -> str:
        """Refresh the static fields, append a run entry with its start time; return the run id. Earlier entries
        still ``running`` whose process no longer exists on this machine become ``killed`` (:func:`_close_dead_runs`).

        ``drift`` (:class:`geoagent.runtime.drift.DriftDecision`, after planning): a change of the call settings
        that reaches no stored result (``applied`` False) keeps the recorded ``config`` (and its hash and prompt
        hashes: what the results were made with) and records the new config under ``config_not_applied``; one
        that mixes (``mixed``) appends its record to ``config_mix``; the models a change reached none of the answers
        of (``record["not_applied_to"]``) keep their recorded ``[[models]]`` entries in ``config``. Either is also
        the run entry's ``config_drift``."""
        now = time.time()
        run_id = f"{datetime.fromtimestamp(now, UTC).strftime('%Y%m%dT%H%M%SZ')}-{_pysecrets.token_hex(3)}"
        static = self._static()
        with _locked(self.path):
            data = read_manifest(self.state_dir) or {"created_at": _iso(now), "runs": []}
            history = list(data.get("config_history", []))
            if static["config_sha256"] not in history:
                history.append(static["config_sha256"])
            record = dict(getattr(drift, "record", None) or {})
            if record:
                record["run_id"] = run_id
                extra = {**(extra or {}), "config_drift": {**record, "applied": bool(drift.applied)}}
            if record and not drift.applied and isinstance(data.get("config"), dict):
                # the stored results were made with the recorded config: it stays; the new one is noted apart
                kept = ("config", "config_sha256", "prompt_templates_sha256", "designs", "sampling_sent",
                        "simulated_models")
                data.update({k: v for k, v in static.items() if k not in kept})
                data["config_not_applied"] = {**record, "config_sha256": static["config_sha256"],
                                              "config": static["config"]}
            else:
                not_applied = record.get("not_applied_to") if record else None
                if not_applied and isinstance(data.get("config"), dict):
                    # models whose change reached none of their answers (every task done: drift._per_model) keep
                    # their recorded entries, so a later run that gives them new tasks still sees the change and
                    # says the results mix (walk31 #2)
                    static = {**static, "config": _keep_model_entries(static["config"], data["config"], not_applied)}
                data.update(static)
                data.pop("config_not_applied", None)
                if record and drift.mixed:
                    data["config_mix"] = [*data.get("config_mix", []), record]
            data["config_history"] = history
            runs = list(data.get("runs", []))
            _close_dead_runs(runs, run_id)
            data["runs"] = runs + [
                {
                    "run_id": run_id,
                    "command": command,
                    "started_at": _iso(now),
                    "started_unix": now,
                    "stopped_at": None,
                    "status": "running",
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "config_sha256": static["config_sha256"],
                    "git_commit": static["git_commit"],
                    "python": sys.version.split()[0],
                    **(extra or {}),
                }
            ]
            data["updated_at"] = _iso(now)
            _write(self.path, data)
        return run_id

    def stop_run(self, run_id: str, *, status: str = "complete", summary: dict[str, Any] | None = None,
                 params_mix: dict[str, Any] | None = None, planned: int | None = None,
                 config: Any = None, simulated_answers: list[str] | None = None,
                 end_written: bool = False) -> None:
        """Set the stop time, final status (``complete``, ``incomplete``, ``budget_exhausted``, ``interrupted``,
        ``failed``) and an optional summary of run ``run_id``. (A run whose process died without it keeps
        ``running`` until the next run on this machine marks it ``killed``: :meth:`start_run`; one ended at once
        by a second signal is ``forced exit``: :meth:`mark_forced_exit`.)

        ``params_mix`` (:func:`geoagent.runtime.drift.params_mix_json`, when measured): the stored answers per model
        and distinct request settings, kept as the top-level ``answers_by_request_params`` while a model's answers
        were made under more than one (removed when ``{}``: they all share one).

        ``planned`` (tasks): the run entry's ``planned`` becomes it (the count of the run's start plus what it
        planned while watching, e.g. cities a ``--watch`` crawl found added to its config).

        ``config`` (a :class:`geoagent.config.CampaignConfig`, the config the run ended with when it took in more
        of its file while running: :meth:`geoagent.engine.CampaignKind.config_at_end`): recorded in place of the
        config of the run's start (``config``, ``config_sha256``, the prompt hashes, ``designs``,
        ``sampling_sent``; in ``config_not_applied`` instead when that holds the run's start), added to
        ``config_history``, and the run entry's ``config_sha256`` becomes its hash (``config_sha256_at_start``
        keeps the start's), so the next run's drift check compares against what ran. Left as it is when another
        run recorded its config meanwhile.

        ``simulated_answers`` (model names, when the run counted them: an evaluation that reached its end,
        :func:`geoagent.runtime.export.simulated_answer_models`): the top-level ``simulated_answer_models``, the
        models whose stored answers came from geoagent's simulator, a sandbox fake on a port of one's own
        included (``simulated_models`` keeps the config's rule: what the config as written names simulated).

        ``end_written``: the run wrote its report and exports to the end (:meth:`record_writing_end` was called
        before them): the entry's :data:`WRITING_END_KEY` gives way to ``"end_written": true``. False leaves the
        mark where it was set (an error while writing them: ``failed``).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest.
        """
        now = time.time()
        with _locked(self.path):
            data = read_manifest(self.state_dir)
            run = self._run_entry(data, run_id)
            run["stopped_at"] = _iso(now)
            run["duration_s"] = round(now - float(run.get("started_unix", now)), 3)
            run["status"] = status
            if summary is not None:
                run["summary"] = summary
            if end_written:
                run.pop(WRITING_END_KEY, None)
                run[END_WRITTEN_KEY] = True
            self._record_so_far(data, run, planned, config)
            if simulated_answers is not None:
                data["simulated_answer_models"] = list(simulated_answers)
            if params_mix:
                data["answers_by_request_params"] = params_mix
            elif params_mix is not None:
                data.pop("answers_by_request_params", None)
            data["updated_at"] = _iso(now)
            _write(self.path, data)

    def record_writing_end(self, run_id: str) -> None:
        """Record, durably, that run ``run_id`` begins writing its end: the final exports and report of the
        campaign (:data:`WRITING_END_KEY`: the time, UTC). :meth:`stop_run` with ``end_written`` removes it once they
        are written; a process killed (SIGKILL, a power cut) or ended by a second signal (``forced exit``) while
        writing them leaves it, and ``status`` then says that the files on disk may be interim and that re-running
        the same command (which finds every task done and calls no model) writes them (resume40 #1: it said
        "campaign complete" over an "Interim report" and half-written exports).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest.
        """
        now = time.time()
        with _locked(self.path):
            data = read_manifest(self.state_dir)
            self._run_entry(data, run_id)[WRITING_END_KEY] = _iso(now)
            data["updated_at"] = _iso(now)  # type: ignore[index]
            _write(self.path, data)  # type: ignore[arg-type]

    def record_work_began(self, run_id: str) -> None:
        """Record, durably, that run ``run_id`` began its work (:data:`WORK_BEGAN_KEY`: the time, UTC), before it
        changes anything its final exports and report are made from; a second call leaves the first time. Until
        then a run killed outright (or ended by a second signal) changed nothing, and ``status`` does not say that
        it left the campaign's end unwritten (:func:`end_cut_short`, review40b #5).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest.
        """
        self._mark_once(run_id, WORK_BEGAN_KEY)

    def record_refresh(self, run_id: str, *, done: bool) -> None:
        """Record, durably, that run ``run_id``'s run-start refresh of stored rows first wrote a row (``done`` False:
        :data:`REFRESH_BEGAN_KEY`, once) or returned (``done`` True: :data:`REFRESH_DONE_KEY`), both times UTC, so
        ``status`` can name a refresh a kill or an error cut short (:func:`refresh_cut_short`, upgrade41 #4).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest.
        """
        self._mark_once(run_id, REFRESH_DONE_KEY if done else REFRESH_BEGAN_KEY)

    def _mark_once(self, run_id: str, key: str) -> None:
        """Set ``key`` of run ``run_id``'s entry to now (UTC) under the manifest's lock, unless it is set already (the
        first time stays). Raises KeyError for no run ``run_id``."""
        now = time.time()
        with _locked(self.path):
            data = read_manifest(self.state_dir)
            run = self._run_entry(data, run_id)
            if run.get(key):
                return
            run[key] = _iso(now)
            data["updated_at"] = _iso(now)  # type: ignore[index]
            _write(self.path, data)  # type: ignore[arg-type]

    def mark_forced_exit(self, run_id: str) -> bool:
        """Record that run ``run_id`` is being ended at once by a second signal (Ctrl-C twice, ``kill`` twice):
        its entry, while still ``running``, becomes ``forced exit`` with its stop time, so the manifest does not
        call it running until a later run finds it gone (and then ``killed``, which it was not). Called from the
        signal path just before ``os._exit``: it never waits for the manifest's lock (held by this or another
        process: nothing is written then) and never raises; an entry that recorded its end already keeps it.
        Returns whether the entry was marked. Acknowledged work is the queues' and the store's, not this
        record's: a run cut short without it loses nothing (``status`` tells a run cut before its end from the
        progress stream)."""
        try:
            with _locked(self.path, wait=False):
                data = read_manifest(self.state_dir)
                run = self._run_entry(data, run_id)
                if run.get("status") != "running":
                    return False
                now = time.time()
                run["status"] = "forced exit"
                run["stopped_at"] = _iso(now)
                run["duration_s"] = round(now - float(run.get("started_unix", now)), 3)
                data["updated_at"] = _iso(now)  # type: ignore[index]
                _write(self.path, data)  # type: ignore[arg-type]
                return True
        except Exception:  # noqa: BLE001 - a busy lock (BlockingIOError) or any failure: the exit goes on without it
            return False

    def record_progress(self, run_id: str, *, planned: int | None = None, config: Any = None) -> None:
        """Record, while run ``run_id`` goes on, what :meth:`stop_run` records at its end: ``planned`` (tasks: the
        count of the run's start plus what it planned since) and ``config`` (the config it runs with now, recorded
        as :meth:`stop_run`'s ``config`` is; None: left as it is). The entry stays ``running``. Called at each
        change (a ``--watch`` crawl planning a city added to its config file), so that a process killed outright
        (SIGKILL, a power cut), which never reaches :meth:`stop_run`, leaves a manifest that records what it ran
        with: the file is rewritten atomically under its lock (a kill leaves the last complete record).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest.
        """
        now = time.time()
        with _locked(self.path):
            data = read_manifest(self.state_dir)
            self._record_so_far(data, self._run_entry(data, run_id), planned, config)
            data["updated_at"] = _iso(now)
            _write(self.path, data)

    def record_stage_ended(self, run_id: str, stage: str) -> None:
        """Record that stage ``stage`` of run ``run_id`` (a ``--stages`` process) ended while the run goes on: its
        entry's ``stages_ended`` names it, and :func:`stages_run_elsewhere` no longer counts it as run by that
        process (a stage that stopped leasing, e.g. its host unreachable, leaves its input ready; a process of
        the campaign waiting for that input would otherwise wait for the whole of the other process).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest.
        """
        with _locked(self.path):
            data = read_manifest(self.state_dir)
            run = self._run_entry(data, run_id)
            ended = [x for x in run.get("stages_ended") or [] if isinstance(x, str)]
            if stage not in ended:
                run["stages_ended"] = [*ended, stage]
                _write(self.path, data)  # type: ignore[arg-type]

    def _run_entry(self, data: dict[str, Any] | None, run_id: str) -> dict[str, Any]:
        """Run ``run_id``'s entry in ``data`` (the manifest, read under its lock).

        Raises
        ------
        KeyError
            No run ``run_id`` in the manifest."""
        for run in (data or {}).get("runs", []):
            if run.get("run_id") == run_id:
                return run
        raise KeyError(f"{self.path}: no run {run_id!r}")

    def _record_so_far(self, data: dict[str, Any], run: dict[str, Any], planned: int | None, config: Any) -> None:
        """:meth:`stop_run`'s and :meth:`record_progress`'s ``planned`` and ``config`` (None: left as it is) for ``run``."""
        if planned is not None:
            run["planned"] = int(planned)
        if config is not None:
            self._record_ended_config(data, run, config)

    def _record_ended_config(self, data: dict[str, Any], run: dict[str, Any], config: Any) -> None:
        """:meth:`stop_run`'s ``config``: record it in ``data`` (the manifest, read under its lock) for ``run``."""
        start_sha = run.get("config_sha256")
        static = Manifest(config, state_dir=self.state_dir, prompts_dir=self.prompts_dir)._static()
        if static["config_sha256"] == start_sha:
            return
        kept = ("config", "config_sha256", "prompt_templates_sha256", "designs", "sampling_sent")
        pending = data.get("config_not_applied")
        if isinstance(pending, dict) and pending.get("config_sha256") == start_sha:
            pending.update(config_sha256=static["config_sha256"], config=static["config"])
        elif data.get("config_sha256") == start_sha:
            data.update({k: static[k] for k in kept})
        else:  # another run recorded its config since this one started: its record stays
            return
        history = list(data.get("config_history", []))
        if static["config_sha256"] not in history:
            history.append(static["config_sha256"])
        data["config_history"] = history
        run.setdefault("config_sha256_at_start", start_sha)  # recorded before (record_progress): the start's stays
        run["config_sha256"] = static["config_sha256"]

    @contextlib.contextmanager
    def run(self, *, command: str = "run") -> Iterator[dict[str, Any]]:
        """Context manager: start a run, yield a dict where the caller may set ``status``/``summary``, stop it.

        An exception marks the run ``failed`` (``interrupted`` for KeyboardInterrupt) and propagates.
        """
        run_id = self.start_run(command=command)
        outcome: dict[str, Any] = {"run_id": run_id, "status": "complete", "summary": None}
        try:
            yield outcome
        except KeyboardInterrupt:
            self.stop_run(run_id, status="interrupted", summary=outcome.get("summary"))
            raise
        except BaseException:
            self.stop_run(run_id, status="failed", summary=outcome.get("summary"))
            raise
        self.stop_run(run_id, status=outcome.get("status", "complete"), summary=outcome.get("summary"))
