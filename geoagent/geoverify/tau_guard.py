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

When neither records a tau but the campaign holds work (its manifest moved aside, or a first run killed between
queuing its plan and recording its start), the tau is read from the work itself (fixguard43 #1: such a run was not
refused, scored the 150 m answers at 200 m and recorded 200 m as the campaign's): the number the claims of its
queued request tasks name (:func:`work_tau_m`; each payload's ``prompt`` is the claim template filled in with tau in
whole metres, :func:`geoagent.geoverify.prompt.render_claim`), else the one whose claim hashes to the
``prompt_sha256`` a stored answer recorded. When the claims cannot tell (a template that names no tau, or one changed
since), the truth labels of the work are judged at the new tau (:func:`label_disagreement`); work whose tau is
still unknown while the template names tau is refused, saying so (restore ``manifest.json`` or use a new
``[campaign] name``). Where a record agrees with the config, the work is read all the same and a tau it names
otherwise is refused (review44b #5: a hand-edited manifest).

Two runs started together both found no record and no work (review44b #1: their plans were queued side by side), so
a run checks again under the campaign's plan lock (:class:`geoagent.engine.PlanLock`), held until its manifest
records its config; and a tau drift the config-drift check finds after planning is refused there too
(:func:`check_tau_drift`), before anything of the plan is queued.
"""

from __future__ import annotations

import hashlib
import math
import re
from pathlib import Path
from typing import Any, NamedTuple

from geoagent import constants as C
from geoagent.textfmt import count_text


class HeldWork(NamedTuple):
    """What a campaign holds that was made at its recorded tau: ``answers`` (model answers stored), ``scored``
    (rows of the results table ``geoverify_scored``), ``tasks`` (request tasks in any state, each carrying the
    claim and the truth label of its planning), ``done`` (those of them done) and ``dead`` (those of them
    dead-lettered: failed, or set aside as superseded; review44b #6a)."""

    answers: int
    scored: int
    tasks: int
    done: int
    dead: int = 0

    def __bool__(self) -> bool:
        return bool(self.answers or self.scored or self.tasks)

    def text(self) -> str:
        """``"12 answers stored, 12 request tasks queued (12 done), 3 request tasks dead-lettered"``: the nonzero
        counts; dead-lettered tasks are counted apart from those queued (review44b #6a: a campaign holding only
        dead letters was said to hold "238 request tasks queued (0 done)")."""
        parts = []
        if self.answers:
            parts.append(f"{count_text(self.answers, 'answer')} stored")
        if self.scored and self.scored != self.answers:
            parts.append(f"{count_text(self.scored, 'scored row')}")
        live = self.tasks - self.dead
        if live > 0:
            parts.append(f"{count_text(live, 'request task')} queued ({self.done} done)")
        if self.dead:
            parts.append(f"{count_text(self.dead, 'request task')} dead-lettered")
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
                          (server_config_recorded(cfg), "the config kept on the Redis server")):
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

    answers = scored = tasks = done = dead = 0
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
        tasks, done, dead = int(counts.total), int(counts.done), int(counts.dead)
    return HeldWork(answers, scored, tasks, done, dead)


#: queued payloads and scored rows read to tell the tau the claims of a campaign's work name (one suffices: a plan is
#: made at one tau; more for payloads a reader cannot use, e.g. of an older template)
WORK_SAMPLE = 200
#: stored answers whose recorded prompt hash is tried against each whole-metre tau (1 .. 299 m: 299 claims each)
HASH_TRIES = 20
#: payloads and scored rows whose truth labels are judged when no claim names tau (a label tells only about a trial
#: lying between the two tolerances, so more are read)
LABEL_SAMPLE = 20_000


class WorkTau(NamedTuple):
    """The tolerance (metres) the claims of a campaign's work name, and where that was read (for the message)."""

    tau_m: float
    where: str


def claim_tau_m(prompt: Any, candidate: Any, template: str) -> int | None:
    """The tau (whole metres) the claim ``prompt`` names, when it is ``template`` filled in for ``candidate``
    (:func:`geoagent.geoverify.prompt.render_claim`: every ``{tau_m}`` the same whole number, ``{candidate}`` the
    cleaned name; any name when ``candidate`` is not a string); None when ``template`` names no tau or the prompt is
    not that template's (another template, or not a string)."""
    from geoagent.textfmt import label_text

    if not isinstance(prompt, str) or "{tau_m}" not in template:
        return None
    name = re.escape(label_text(candidate, collapse=False)) if isinstance(candidate, str) else ".*?"
    parts, seen = [], False
    for piece in re.split(r"(\{tau_m\}|\{candidate\})", template):
        if piece == "{tau_m}":
            parts.append("(?P=tau)" if seen else "(?P<tau>[0-9]+)")
            seen = True
        elif piece == "{candidate}":
            parts.append(name)
        else:
            parts.append(re.escape(piece))
    m = re.fullmatch("".join(parts), prompt, flags=re.DOTALL)
    return int(m.group("tau")) if m else None


def _hashed_tau_m(prompt_sha256: Any, candidate: Any, template: str) -> int | None:
    """The whole-metre tau below the settings' bound (1 .. 299 m) whose claim for ``candidate`` hashes to
    ``prompt_sha256`` (what the model caller records of each answer's prompt, ``request_meta.prompt_sha256``); None
    when none does (another template, a name that cannot be rendered, no hash)."""
    from geoagent.geoverify.prompt import render_claim

    if not isinstance(prompt_sha256, str) or not isinstance(candidate, str) or "{tau_m}" not in template:
        return None
    upper_m = round(C.GEOVERIFY_DECOY_BANDS_KM[0][1] * 1000)
    try:
        for tau in range(1, upper_m):
            if hashlib.sha256(render_claim(candidate, template, tau / 1000.0).encode("utf-8")).hexdigest() == \
                    prompt_sha256:
                return tau
    except ValueError:  # an empty name
        return None
    return None


def _queue_where(cfg: Any) -> str:
    """Where the campaign's request tasks are kept, for a message."""
    from geoagent.runtime.backend import uses_redis
    from geoagent.runtime.sqlite_queue import queue_path

    if uses_redis(cfg):
        return "on the Redis server"
    return f"in {queue_path(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)}"


def work_tau_m(cfg: Any, template: str) -> WorkTau | None:
    """The tau (metres) campaign ``cfg``'s work was made at, read from the work itself, for a campaign whose
    manifest and server record name none (fixguard43 #1): the number the claim of a queued request task names
    (:func:`claim_tau_m`, up to :data:`WORK_SAMPLE` payloads in any state), else the tau whose claim hashes to the
    ``prompt_sha256`` a stored answer of a scored row recorded (:func:`_hashed_tau_m`). ``template`` is the claim
    template of the config (the stored claims are compared with it). None when neither tells. Reads only."""
    from geoagent.runtime.backend import open_state, some_payloads, state_exists
    from geoagent.runtime.sqlite_wal import reading_only

    from geoagent.geoverify.stages import SCORED_TABLE

    with reading_only():
        for p in some_payloads(cfg, C.EDGE_REQUESTS, WORK_SAMPLE):
            trial = (p.get("meta") or {}).get("trial") if isinstance(p.get("meta"), dict) else None
            tau = claim_tau_m(p.get("prompt"), trial.get("cand") if isinstance(trial, dict) else None, template)
            if tau is not None:
                return WorkTau(float(tau), f"the claims of its request tasks {_queue_where(cfg)}")
        if not state_exists(cfg):
            return None
        with open_state(cfg, recover=False, make_state_dir=False) as state:
            tries = 0
            for n, (_, row) in enumerate(state.store.iter_results(SCORED_TABLE, batch=WORK_SAMPLE)):
                if n >= WORK_SAMPLE or tries >= HASH_TRIES:
                    break
                key = row.get("request_key") if isinstance(row, dict) else None
                rec = state.store.get_record(key) if isinstance(key, str) and key else None
                meta = rec.get("request_meta") if rec else None
                sha = meta.get("prompt_sha256") if isinstance(meta, dict) else None
                if sha is None:
                    continue
                tries += 1
                tau = _hashed_tau_m(sha, row.get("cand"), template)
                if tau is not None:
                    return WorkTau(float(tau), "the recorded SHA-256 of its stored answers' prompts")
    return None


def label_disagreement(cfg: Any, tau_m: float) -> str | None:
    """What says the truth labels of campaign ``cfg``'s work were made at another tolerance than ``tau_m`` (metres):
    a main-arm trial of a queued request task (up to :data:`LABEL_SAMPLE`) or a scored row (as many) whose ``truth``
    disagrees with Eq. 1 at ``tau_m`` (yes iff ``d_km`` < tau; one within the tables' rounding of tau, or without a
    distance, is not judged: :func:`geoagent.geoverify.plan.check_tolerance`'s rule). None when every judged label
    agrees (fixguard43 #1). Reads only."""
    from geoagent.data.model import ARM_MAIN
    from geoagent.runtime.backend import open_state, some_payloads, state_exists
    from geoagent.runtime.sqlite_wal import reading_only

    from geoagent.geoverify.plan import TAU_ROUNDING_KM
    from geoagent.geoverify.stages import SCORED_TABLE

    tau_km = tau_m / 1000.0

    def wrong(t: Any) -> bool:
        d = t.get("d_km") if isinstance(t, dict) else None
        if not isinstance(t, dict) or t.get("arm") != ARM_MAIN or isinstance(d, bool) \
                or not isinstance(d, (int, float)) or abs(d - tau_km) <= TAU_ROUNDING_KM:
            return False
        return t.get("truth") != ("yes" if d < tau_km else "no")

    def say(t: dict[str, Any], n: int, where: str) -> str:
        return (f"{n} main-arm trial(s) {where}, e.g. {t.get('trial_id')!r} at d_km = {t.get('d_km')} km labelled "
                f"{t.get('truth')!r} (Eq. 1 at {tau_m:g} m gives the other answer)")

    with reading_only():
        trials = [(p.get("meta") or {}).get("trial") for p in some_payloads(cfg, C.EDGE_REQUESTS, LABEL_SAMPLE)
                  if isinstance(p.get("meta"), dict)]
        bad = [t for t in trials if wrong(t)]
        if bad:
            return say(bad[0], len(bad), f"of its request tasks {_queue_where(cfg)}")
        if not state_exists(cfg):
            return None
        with open_state(cfg, recover=False, make_state_dir=False) as state:
            bad = []
            for n, (_, row) in enumerate(state.store.iter_results(SCORED_TABLE)):
                if n >= LABEL_SAMPLE:
                    break
                if wrong(row):
                    bad.append(row)
    return say(bad[0], len(bad), "of its scored rows") if bad else None


def check_tau_unchanged(cfg: Any) -> None:
    """Refuse a run (or dry run, or ``--stages`` process) of GeoVerify campaign ``cfg`` whose ``[geoverify] tau_m``
    differs from the one its work was made at while the campaign holds work (:func:`held_work`): the tau recorded
    for its earlier runs (:func:`recorded_tau_m`), or, where none is recorded, the one its work names
    (:func:`work_tau_m`, fixguard43 #1). Where the record agrees with the config, the work is read all the same
    (:func:`work_tau_m`: one queued claim, or a stored prompt's hash) and a tau it names otherwise is refused too
    (review44b #5: a hand-edited manifest let a run at 200 m score work made at 150 m). Called before anything is
    created, written or called (:meth:`geoagent.engine.CampaignKind.check_config_change`), and again under the
    campaign's plan lock (:class:`geoagent.engine.PlanLock`, review44b #1), so nothing stored is lost or rewritten
    and the manifest does not record the refused config. A crash-resumed first run at the same tau runs.

    Raises
    ------
    geoagent.config.ConfigError
        Naming the key, both values (metres), where the old one is recorded or read, what the campaign holds, why
        (its answers asked at the old tau would be scored as trials at the new one) and the ways out: a new
        ``[campaign] name`` for the new tolerance, or ``tau_m`` set back (only to a whole number of metres, which a
        run takes). Without a record: also when the work's truth labels disagree with the new tau
        (:func:`label_disagreement`), or when its tau cannot be told while the claim template names tau. The CLI
        exits 2. Its ``short`` attribute says the same in one clause (:func:`status_note`).
    """
    refusal = tau_refusal(cfg)
    if refusal is not None:
        raise refusal


def tau_refusal(cfg: Any) -> Any:
    """The :class:`geoagent.config.ConfigError` :func:`check_tau_unchanged` raises for ``cfg``, or None when a run
    of it would pass. Reads only."""
    from geoagent.geoverify.plan import settings_of

    new = float(settings_of(cfg).tau_m)
    recorded = recorded_tau_m(cfg)
    template = _template(cfg)
    if recorded:
        changed = [(old, where) for old, where in recorded if not same_tau(old, new)]
        if not changed:
            # review44b #5: the record agrees; the work must too (one claim read, or a stored prompt's hash)
            found = work_tau_m(cfg, template) if template is not None else None
            if found is None or same_tau(found.tau_m, round(new)):  # the claims name whole metres (render_claim)
                return None
            work = held_work(cfg)
            where = " and ".join(w for _, w in recorded)
            return _refusal(cfg, new, found.tau_m, f"named by {found.where}, though {where} records {new:g} m", work)
        work = held_work(cfg)
        if not work:  # nothing made at the old tau: the change reaches every task
            return None
        old, where = changed[0]
        return _refusal(cfg, new, old, f"recorded in {where}", work)
    work = held_work(cfg)
    if not work:
        return None
    if template is None:  # the plan refuses the template (naming its problem) before anything is queued or called
        return None
    found = work_tau_m(cfg, template)
    if found is not None:
        if same_tau(found.tau_m, round(new)):  # the claims name whole metres (render_claim)
            return None
        return _refusal(cfg, new, found.tau_m, f"named by {found.where}; {_manifest(cfg)} records no tau", work)
    bad = label_disagreement(cfg, new)
    if bad is not None:
        return _unknown(cfg, new, work, f"its truth labels were made at another tolerance: {bad}")
    if "{tau_m}" not in template:  # the claims name no tau: the labels are all tau decided, and they agree
        return None
    return _unknown(cfg, new, work, f"no claim of its work could be read as the template {_template_name(cfg)} "
                                    "filled in (a template changed since, or no queued task or stored prompt hash to "
                                    "read)")


def whole_metres_advice(cfg: Any) -> str | None:
    """What to do about campaign ``cfg`` besides its ``tau_m`` of no whole metres (which a run refuses,
    :func:`geoagent.geoverify.settings.check_whole_metres`), when the campaign holds work made at a recorded tau
    (review44b #6b: the refusal said only "expected a whole number of metres", and the run at 150 then met the
    guard's refusal): set tau_m to the recorded whole-metre tau, or, when the work was made at a tau of no whole
    metres (allowed before session 43), a new ``[campaign] name`` (the campaign cannot be run on). None without
    such work. Reads only."""
    recorded = recorded_tau_m(cfg)
    if not recorded:
        return None
    work = held_work(cfg)
    if not work:
        return None
    old, where = recorded[0]
    head = f"campaign {cfg.name} was run at tau_m = {old:g} m (recorded in {where}) and holds work made at it " \
           f"({work.text()})"
    if old == round(old):
        return f"{head}: to go on with it, set tau_m to {old:g}; for another tolerance, give the run a new " \
               "[campaign] name"
    return (f"{head}, and {old:g} m is no whole number of metres either, so this campaign cannot be run on at any "
            f"tau (status, export and dead still read it): give the run a new [campaign] name, with tau_m = "
            f"{round(old):d} to ask the claims it asked (they named {round(old):d} metres)")


def status_note(cfg: Any) -> str | None:
    """One line for ``status`` of ``cfg`` when a run of this file would be refused for its ``tau_m``
    (review44b #6d): its tau differs from the one the campaign's work was made at (:func:`tau_refusal`), or it is
    no whole number of metres (:func:`geoagent.geoverify.settings.check_whole_metres`). None when a run would pass
    this check. Reads only."""
    from geoagent.config import ConfigError
    from geoagent.geoverify.settings import check_whole_metres

    try:
        check_whole_metres(cfg)
        refusal = tau_refusal(cfg)
    except ConfigError as exc:
        refusal = exc
    except Exception:  # noqa: BLE001 - status still shows the campaign; a run says what it cannot read
        return None
    if refusal is None:
        return None
    short = getattr(refusal, "short", None) or "its [geoverify] tau_m is no whole number of metres"
    return f"note: `run` of {_source(cfg)} would be refused (exit 2): {short}; `run` says why and the ways out"


#: the key of a changed tau in :attr:`geoagent.runtime.manifest.ConfigChanges.call_keys`
TAU_KEY = "geoverify.tau_m"


def check_tau_drift(cfg: Any, changes: Any, work: HeldWork) -> None:
    """The backstop of :func:`check_tau_unchanged` after planning (review44b #1): refuse campaign ``cfg``'s run when
    ``changes`` (:class:`geoagent.runtime.manifest.ConfigChanges` since the last run recorded in its manifest) hold
    another ``tau_m`` while it holds ``work`` (made at the recorded one). Before, such a change found after planning
    was only the config-drift warning ("results would mix"), and the run went on to score the work at the new tau.
    Nothing when the tau did not change or the campaign holds no work (the change then reaches every task).

    Raises
    ------
    geoagent.config.ConfigError
        The refusal of :func:`check_tau_unchanged` (the CLI exits 2), naming the manifest as where the old tau
        is recorded."""
    from geoagent.geoverify.settings import GeoVerifySettings

    pair = (getattr(changes, "call_keys", None) or {}).get(TAU_KEY)
    if pair is None or not work:
        return
    default = float(GeoVerifySettings.model_fields["tau_m"].default)
    old, new = (default if v is None else v for v in pair)  # a key left out of a recorded config: its default
    if isinstance(old, bool) or not isinstance(old, (int, float)) or isinstance(new, bool) \
            or not isinstance(new, (int, float)) or same_tau(float(old), float(new)):
        return
    raise _refusal(cfg, float(new), float(old), f"recorded in {_manifest(cfg)}", work)


def _manifest(cfg: Any) -> str:
    return str(Path(cfg.state_dir()) / C.MANIFEST_FILE)


def _template(cfg: Any) -> str | None:
    """The config's claim template text, None when it cannot be read (the plan says why)."""
    from geoagent.geoverify.plan import settings_of
    from geoagent.geoverify.prompt import TemplateError, load_template

    try:
        return load_template(settings_of(cfg).prompt_template, source=getattr(cfg, "source", None))
    except TemplateError:
        return None


def _template_name(cfg: Any) -> str:
    from geoagent.geoverify.plan import settings_of
    from geoagent.geoverify.prompt import DEFAULT_TEMPLATE_PATH

    return str(settings_of(cfg).prompt_template or DEFAULT_TEMPLATE_PATH)


def _source(cfg: Any) -> str:
    return str(getattr(cfg, "source", None) or cfg.name)


def _refusal(cfg: Any, new: float, old: float, where: str, work: HeldWork) -> Any:
    """The ConfigError of a run at ``new`` m over ``work`` made at ``old`` m (``where``: how that is known)."""
    from geoagent.config import ConfigError

    lo, hi = sorted((old, new))
    if old == round(old):
        back = f"; to go on with this campaign, set tau_m back to {old:g}"
    else:  # fixguard43 #2: a run takes whole metres only, so the old tau cannot be set back
        back = (f"; {old:g} m is no whole number of metres, which a run no longer takes (the claim names tau in whole "
                "metres), so this campaign cannot be run on (status, export and dead still read it)")
    if round(old) != round(new):
        cost = "every claim names tau, so no stored answer could be reused: it costs no extra call"
    else:  # review44b #6b: 150.5 and 150 m both render "150 metres", so the new campaign asks the same claims again
        cost = (f"its claims name {round(new):d} metres, as this campaign's did, so it asks them again: a model call "
                "each, its answers stored apart from this campaign's")
    exc = ConfigError(_source(cfg), [
        f"[geoverify] tau_m = {new:g} m, but campaign {cfg.name} was run at tau_m = {old:g} m ({where}) "
        f"and holds work made at it ({work.text()}): the answers asked at {old:g} m would be scored as trials at "
        f"{new:g} m (a candidate between {lo:g} and {hi:g} m away is signal at {hi:g} m and a decoy at {lo:g} m), and "
        f"the tasks still queued keep their {old:g} m claims and labels, so H, F and d' would be wrong. Nothing was "
        f"run or changed. To use {new:g} m, give it a new [campaign] name ({cost}){back}"])
    exc.short = f"its [geoverify] tau_m = {new:g} m, but the campaign's work was made at {old:g} m"  # status_note
    return exc


def _unknown(cfg: Any, new: float, work: HeldWork, why: str) -> Any:
    """The ConfigError of a run over ``work`` whose tolerance no record names and the work does not tell (fixguard43
    #1): a run at another tau would score it wrongly and record the new tau as the campaign's."""
    from geoagent.config import ConfigError

    exc = ConfigError(_source(cfg), [
        f"[geoverify] tau_m = {new:g} m, but the tolerance of the work campaign {cfg.name} holds ({work.text()}) "
        f"cannot be told: {_manifest(cfg)} records none (moved aside, or a first run stopped before recording its "
        f"start), and {why}. Scored at another tau than it was made at, H, F and d' would be wrong. Nothing was run "
        f"or changed. Restore manifest.json (it records the campaign's settings, its tau_m among them) to go on "
        f"with this campaign, or give the run a new [campaign] name"])
    exc.short = "the tolerance the campaign's work was made at cannot be told (its manifest records none)"
    return exc
