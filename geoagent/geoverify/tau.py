"""The claim tolerance each stored GeoVerify answer was asked at, and stored answers from before it was recorded (fixtau43).

A GeoVerify claim names ``[geoverify] tau_m`` ("no more than 150 metres from X", seed 000 Sec. 5.2), and a trial's
truth and band depend on it (Eq. 1: a candidate 180 m away is a decoy at 150 m, signal at 200 m). Task keys did not
name tau, so a re-run at another ``tau_m`` found each task done and scored the answer to the 150 m claim, with its
150 m truth and band, as a trial at 200 m: 5 of the 21 signal trials of the re-planned design counted as decoys.

Now

* a task key names tau when it is not the paper's 150 m (:func:`geoagent.data.model.task_id_at_tau`), so another tau
  plans other tasks and the answers at the old tau are kept, not scored, as any task no longer planned;
* each request carries ``meta.trial.tau_m`` and each scored row records it (``tau_m``, metres);
* the report's scope leaves out a planned row whose tau is not the campaign's (:func:`row_tau_m`,
  :class:`geoagent.geoverify.stages.ScoredScope`), whatever its key.

A row stored before this version has no ``tau_m``. It was asked at the tau the campaign's ``manifest.json`` records
(:func:`legacy_tau_m`: the ``tau_m`` of the config its last run recorded), unless the manifest records a change of
``tau_m`` that mixed results (``config_mix``): then which tau each such row was asked at is unknown. The run's
start-up refresh (:func:`record_row_taus`) writes the manifest's tau into those rows, once, before the manifest can
change, and moves a row whose tau is not 150 m to the key that names it (no model call); rows of unknown tau are left
as they are, and never scored.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from geoagent import constants as C
from geoagent.data.model import TASK_SHOWS_TAG, TASK_TAU_TAG, key_tau_km, tau_m_text, untagged_task_key

#: field of a request's ``meta.trial`` and of a scored row: the claim tolerance in metres the model was asked about
TAU_M_FIELD = "tau_m"
#: config path of the tolerance, as the manifest's ``config_mix`` records a change of it
TAU_CONFIG_KEY = "geoverify.tau_m"
#: rows written per batch by :func:`record_row_taus`
BATCH = 1000


def same_tau_m(a_m: float | None, b_m: float | None) -> bool:
    """Whether two tolerances in metres are the same as task keys tell them (to 0.1 mm); False when either is None."""
    if a_m is None or b_m is None:
        return False
    return tau_m_text(float(a_m) / 1000.0) == tau_m_text(float(b_m) / 1000.0)


def legacy_tau_m(manifest: Mapping[str, Any] | None) -> float | None:
    """The tolerance (metres) at which a campaign's scored rows without ``tau_m`` were asked: the ``[geoverify]
    tau_m`` of the config ``manifest`` (a campaign's ``manifest.json``, read before this run updates it) records
    (150, the settings' default, when its ``[geoverify]`` table has none), or None when that is unknown: no
    manifest or no recorded config, or a change of ``tau_m`` recorded in ``config_mix`` (a run before fixtau43
    asked new tasks at the new tau next to answers stored at the old one)."""
    if not isinstance(manifest, Mapping) or not isinstance(manifest.get("config"), Mapping):
        return None
    for rec in manifest.get("config_mix") or ():
        if isinstance(rec, Mapping) and TAU_CONFIG_KEY in (rec.get("changed") or {}):
            return None
    gv = manifest["config"].get("geoverify")
    tau = gv.get("tau_m") if isinstance(gv, Mapping) else None
    if tau is None:
        return C.GEOVERIFY_TAU_KM * 1000.0
    return float(tau) if isinstance(tau, int | float) and not isinstance(tau, bool) else None


def row_tau_m(key: str, row: Mapping[str, Any], legacy_m: float | None) -> float | None:
    """The tolerance (metres) the answer of ``row`` (a scored row stored under ``key``) was asked at: its ``tau_m``;
    for a row stored before it was recorded, the tau its key names, else ``legacy_m`` (:func:`legacy_tau_m`);
    None when unknown."""
    tau = row.get(TAU_M_FIELD)
    if isinstance(tau, int | float) and not isinstance(tau, bool):
        return float(tau)
    in_key = key_tau_km(key)
    return in_key * 1000.0 if in_key is not None else legacy_m


def tagged_key(key: str, row: Mapping[str, Any], tau_m: float) -> str | None:
    """The task key ``key`` (``<task_id>|<model>...``, the task id ``<trial_id>`` or ``<trial_id>|shows=<image>``)
    names when its trial is asked at ``tau_m`` metres (:func:`geoagent.data.model.task_id_at_tau`): the same key at
    the paper's 150 m; None for a key that already names a tau or does not start with the row's trial id."""
    tid = row.get("trial_id")
    if not isinstance(tid, str) or not key.startswith(f"{tid}|") or untagged_task_key(key) is not None:
        return None
    if same_tau_m(tau_m, C.GEOVERIFY_TAU_KM * 1000.0):
        return key
    head, rest = tid, key[len(tid):]
    if rest.startswith(f"|{TASK_SHOWS_TAG}"):
        shows, sep, tail = rest[1:].partition("|")
        head, rest = f"{tid}|{shows}", f"{sep}{tail}"
    return f"{head}|{TASK_TAU_TAG}{tau_m_text(tau_m / 1000.0)}m{rest}"


@dataclass(slots=True)
class Recorded:
    """What :func:`record_row_taus` did with the rows stored without ``tau_m``: ``recorded`` given the manifest's
    tau in place, ``moved`` to their task's key that names it (``dropped``: that key held the same answer already),
    ``unknown`` left as they were (no tau known), ``tau_m`` the tau recorded."""

    recorded: int = 0
    moved: int = 0
    dropped: int = 0
    unknown: int = 0
    tau_m: float | None = None

    def lines(self, campaign: str) -> list[str]:
        """The lines a run prints (an ``info:`` for rows given a tau, a ``warning:`` for rows of unknown tau)."""
        out = []
        n = self.recorded + self.moved + self.dropped
        if n:
            one = n == 1
            moved = (f"; {self.moved + self.dropped} of them now under the task key that names it "
                     f"(<trial>|{TASK_TAU_TAG}{tau_m_text((self.tau_m or 0) / 1000.0)}m|<model>; {self.dropped} "
                     "already stored there again and kept once)" if self.moved + self.dropped else "")
            out.append(f"info: campaign {campaign}: {n} stored answer{'' if one else 's'} from before geoagent recorded "
                       f"the claim tolerance of each answer now record{'s' if one else ''} tau_m = "
                       f"{tau_m_text((self.tau_m or 0) / 1000.0)} m, the one the campaign's manifest.json records"
                       f"{moved}; no model call.")
        if self.unknown:
            one = self.unknown == 1
            out.append(f"warning: campaign {campaign}: {self.unknown} stored answer{'' if one else 's'} from before "
                       "geoagent recorded the claim tolerance of each answer cannot be given one: the campaign's "
                       "tau_m changed between earlier runs (manifest.json config_mix), so which tau each was asked at "
                       "is unknown; they stay stored and are never scored (the report counts them as left out). Use a "
                       "new [campaign] name to ask those trials at this tau_m.")
        return out


def record_row_taus(store: Any, table: str, legacy_m: float | None, *,
                    before_write: Callable[[], None] | None = None) -> Recorded:
    """Give every row of results table ``table`` without ``tau_m`` the tau ``legacy_m`` (metres,
    :func:`legacy_tau_m`; None: each such row is counted ``unknown`` and left as it is). A row whose tau is not the
    paper's 150 m, stored under a key that names none, is moved to the key that names it (:func:`tagged_key`;
    ``store.move_results``: written there only when that key has no row, the earlier key dropped only when it then
    holds this answer), so a plan at that tau scores it; any other is rewritten in place (``store.put_results``). ``before_write`` is called once before the first write. A store with nothing to
    record is only read."""
    out = Recorded(tau_m=legacy_m)
    puts: list[tuple[str, dict[str, Any]]] = []
    moves: list[tuple[str, str, dict[str, Any]]] = []

    def flush(force: bool = False) -> None:
        nonlocal before_write, puts, moves
        if not (puts or moves) or not (force or len(puts) + len(moves) >= BATCH):
            return
        if before_write is not None:
            before_write()
            before_write = None
        if puts:
            out.recorded += store.put_results(table, puts)
        if moves:
            moved, dropped = store.move_results(table, moves)
            out.moved += moved
            out.dropped += dropped
        puts, moves = [], []

    for key, row in store.iter_results(table):
        if not isinstance(row, dict) or row.get(TAU_M_FIELD) is not None:
            continue
        tau = row_tau_m(key, row, legacy_m)
        if tau is None:
            out.unknown += 1
            continue
        new = {**row, TAU_M_FIELD: tau}
        to = tagged_key(key, row, tau)
        if to is not None and to != key:
            moves.append((key, to, new))
        else:
            puts.append((key, new))
        flush()
    flush(force=True)
    return out


__all__ = ["BATCH", "Recorded", "TAU_CONFIG_KEY", "TAU_M_FIELD", "legacy_tau_m", "record_row_taus", "row_tau_m",
           "same_tau_m", "tagged_key"]
