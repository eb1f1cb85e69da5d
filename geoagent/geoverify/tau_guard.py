"""Refuse a GeoVerify run whose ``[geoverify] tau_m`` differs from the one the campaign's work was made at
(fixtaurefuse43).

A trial's claim names tau (``geoagent/prompts/geoverify_claim.txt``: "within {tau_m} metres") and its truth and
decoy band are fixed when it is planned, by the tau of that run; the task keys do not name tau. So a re-run of the
same campaign at another tau would score the stored answers, asked at the old tau, as trials at the new one (a
candidate 180 m away answered "no" to a 150 m claim would count as noise at 200 m, where it is signal: wrong H, F and
d'), and the tasks still queued would be asked and scored with their old claims and labels. The config-drift
warning ("results would mix", :mod:`geoagent.runtime.drift`) said so after the run had started; this refuses the run
before anything is created, changed or called. Keying the tasks by tau was tried and reverted (its upgrade path
scored wrongly), so the way out is another ``[campaign] name``: every claim names tau, so no stored answer could have
been reused anyway.

The tau compared with is the one recorded for the campaign's earlier runs: the config of the last run in
``state/<campaign>/manifest.json`` and, on Redis, the config recorded on the server
(:func:`geoagent.runtime.backend.server_config_recorded`; another machine's runs). A campaign that holds no work
(no stored answer or scored row, no request task in any state) may change tau freely.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

from geoagent import constants as C
from geoagent.textfmt import count_text


class HeldWork(NamedTuple):
    """What a campaign holds that was made at its recorded tau: ``answers`` (model answers stored), ``scored``
    (rows of the results table ``geoverify_scored``), ``tasks`` (request tasks in any state, each carrying the
    claim and the truth label of its planning) and ``done`` (those of them done)."""

    answers: int
    scored: int
    tasks: int
    done: int

    def __bool__(self) -> bool:
        return bool(self.answers or self.scored or self.tasks)

    def text(self) -> str:
        """``"12 answers stored, 12 request tasks queued (12 done)"``: the nonzero counts."""
        parts = []
        if self.answers:
            parts.append(f"{count_text(self.answers, 'answer')} stored")
        if self.scored and self.scored != self.answers:
            parts.append(f"{count_text(self.scored, 'scored row')}")
        if self.tasks:
            parts.append(f"{count_text(self.tasks, 'request task')} queued ({self.done} done)")
        return ", ".join(parts)


def recorded_tau_m(cfg: Any) -> list[tuple[float, str]]:
    """``(tau_m in metres, where it is recorded)`` for campaign ``cfg``'s earlier runs: the last run's config in its
    manifest (``state/<campaign>/manifest.json``) and, for ``[backend] kind = "redis"``, the config recorded on the
    server. A recorded config without a ``[geoverify]`` table or ``tau_m`` key stands for the default (150 m, as
    :func:`geoagent.runtime.manifest.config_changes` reads it). Empty when nothing is recorded; a damaged manifest
    or a value that is no number is skipped (the run's start says what is wrong with the manifest). Reads only."""
    from geoagent.runtime.backend import server_config_recorded
    from geoagent.runtime.manifest import read_manifest

    out: list[tuple[float, str]] = []
    try:
        manifest = read_manifest(cfg.state_dir())
    except ValueError:
        manifest = None
    for record, where in ((manifest, str(Path(cfg.state_dir()) / C.MANIFEST_FILE)),
                          (server_config_recorded(cfg), "the config recorded on the Redis server")):
        tau = _tau_of(record)
        if tau is not None:
            out.append((tau, where))
    return out


def _tau_of(record: Any) -> float | None:
    """``tau_m`` of a recorded config (a manifest or a server record: its ``config`` table), None without one."""
    from geoagent.geoverify.settings import GeoVerifySettings

    config = record.get("config") if isinstance(record, dict) else None
    if not isinstance(config, dict):
        return None
    section = config.get("geoverify")
    value = section.get("tau_m", None) if isinstance(section, dict) else None
    if value is None:  # the section or key left out: its default
        value = GeoVerifySettings.model_fields["tau_m"].default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def same_tau(a: float, b: float) -> bool:
    """Whether two tolerances (metres) are the same: 150 and 150.0, or values apart by float noise only."""
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-9)


def held_work(cfg: Any) -> HeldWork:
    """What campaign ``cfg`` holds (:class:`HeldWork`), read without creating or changing anything (SQLite files
    opened read-only; on Redis only existing queues are read); all zero for a campaign without state or queues."""
    from geoagent.runtime.backend import open_state, plan_edge_reader, redis_edges, state_exists, uses_redis
    from geoagent.runtime.sqlite_queue import read_counts
    from geoagent.runtime.sqlite_wal import reading_only

    from geoagent.geoverify.stages import SCORED_TABLE

    answers = scored = tasks = done = 0
    with reading_only():
        if state_exists(cfg):
            with open_state(cfg, recover=False, make_state_dir=False) as state:
                answers = state.store.count_responses()
                scored = state.store.count_results(SCORED_TABLE)
        if uses_redis(cfg):
            reader = plan_edge_reader(cfg, C.EDGE_REQUESTS) if redis_edges(cfg, [C.EDGE_REQUESTS]) else None
            counts = reader.counts_sync() if reader is not None else None
        else:
            counts = read_counts(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
    if counts is not None:
        tasks, done = int(counts.total), int(counts.done)
    return HeldWork(answers, scored, tasks, done)


def check_tau_unchanged(cfg: Any) -> None:
    """Refuse a run (or dry run, or ``--stages`` process) of GeoVerify campaign ``cfg`` whose ``[geoverify] tau_m``
    differs from the one recorded for its earlier runs (:func:`recorded_tau_m`) while the campaign holds work made at
    that one (:func:`held_work`). Called before anything is created, written or called
    (:meth:`geoagent.engine.CampaignKind.check_config_change`), so nothing stored is lost or rewritten and the
    manifest does not record the refused config.

    Raises
    ------
    geoagent.config.ConfigError
        Naming the key, both values (metres), where the old one is recorded, what the campaign holds, why (its
        answers asked at the old tau would be scored as trials at the new one) and the two ways out: a new
        ``[campaign] name`` for the new tolerance, or ``tau_m`` set back. The CLI exits 2.
    """
    from geoagent.config import ConfigError
    from geoagent.geoverify.plan import settings_of

    new = float(settings_of(cfg).tau_m)
    changed = [(old, where) for old, where in recorded_tau_m(cfg) if not same_tau(old, new)]
    if not changed:
        return
    work = held_work(cfg)
    if not work:  # nothing made at the old tau: the change reaches every task
        return
    old, where = changed[0]
    lo, hi = sorted((old, new))
    raise ConfigError(str(getattr(cfg, "source", None) or cfg.name), [
        f"[geoverify] tau_m = {new:g} m, but campaign {cfg.name} was run at tau_m = {old:g} m (recorded in {where}) "
        f"and holds work made at it ({work.text()}): the answers asked at {old:g} m would be scored as trials at "
        f"{new:g} m (a candidate between {lo:g} and {hi:g} m away is signal at {hi:g} m and a decoy at {lo:g} m), and "
        f"the tasks still queued keep their {old:g} m claims and labels, so H, F and d' would be wrong. Nothing was "
        f"run or changed. To use {new:g} m, give it a new [campaign] name (every claim names tau, so no stored answer "
        f"could be reused: it costs no extra call); to go on with this campaign, set tau_m back to {old:g}"])
