"""One scored GeoHint answer: the record the scorer emits, the aggregator consumes and the release
importer produces (seed 000 Sec. 4.2, 6).

Field units: ``dist_km`` is the hint distance ``d_ref`` (site to reference point, km); ``error_km`` the
distance from the site to the geocoded answer (km); coordinates in degrees.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class GeoHintResult:
    """A scored GeoHint response.

    Attributes
    ----------
    key : str
        Unique key (the request's queue key, or ``release|<file>|<line>`` for imported rows).
    site, image_id, model : str
    condition : str
        ``baseline``, ``forced``, ``forced_warn``, ``forced_chain``, ``v1`` or ``v1_baseline``.
    schema : str
        ``forced`` or ``v1`` (for imports, the release's schema name).
    repeat : int
    ref_qid, ref_name : str or None
        The reference point given as hint (None for baselines).
    band, tier : str or None
        Ladder band label (``"0.5-1.5km"``, ...) and referenceability tier (``high``/``mid``/``low``).
    dist_km : float or None
        Hint distance d_ref, km (None when the reference point is not in the site's ladder).
    city, area, building : str or None
        Parsed answer (``place`` in the permissive schema).
    confidence_area, confidence_building : float or None
    parse_ok : bool
    evidence : dict or None
        Checklist answers by category (forced_chain).
    resolved_level : str or None
        ``building``, ``area``, ``city`` or ``none`` (the geocoder resolved nothing for the answer); None for no
        answer (cut off with nothing parsed, ``extra["no_answer"]``): there was nothing to geocode.
    resolved_label : str or None
    lat, lon : float or None
        Geocoded answer position.
    error_km : float or None
        Site-to-answer distance, km (None when nothing resolved).
    hit : bool or None
        ``error_km < 1`` and resolved finer than city (Sec. 4.2); None for no answer (cut off at the output-token
        limit with nothing parsed, ``extra["no_answer"]``; :func:`geoagent.scoring.truncation.is_no_answer`).
    echo : bool or None
        Area or building names the reference point (None for baselines, an unknown reference point or no
        answer).
    source : str
        ``campaign`` or ``release``.
    extra : dict
        Anything else worth keeping (release's own ``hit``, sample rate, ...).
    """

    key: str
    site: str
    image_id: str
    model: str
    condition: str
    schema: str
    repeat: int = 0
    ref_qid: str | None = None
    ref_name: str | None = None
    band: str | None = None
    tier: str | None = None
    dist_km: float | None = None
    city: str | None = None
    area: str | None = None
    building: str | None = None
    confidence_area: float | None = None
    confidence_building: float | None = None
    parse_ok: bool = True
    evidence: dict[str, str] | None = None
    resolved_level: str | None = "none"
    resolved_label: str | None = None
    lat: float | None = None
    lon: float | None = None
    error_km: float | None = None
    hit: bool | None = False
    echo: bool | None = None
    source: str = "campaign"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def has_context(self) -> bool:
        return self.ref_qid is not None or self.ref_name is not None

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "GeoHintResult":
        names = {f.name for f in dataclasses.fields(cls)}
        missing = [n for n in REQUIRED_FIELDS if n not in d]
        if missing:
            raise ValueError(f"GeoHint result lacks {missing}: {sorted(d)[:12]}")
        return cls(**{k: v for k, v in d.items() if k in names})

    @classmethod
    def row_problem(cls, d: Any) -> str | None:
        """What makes ``d`` (a stored ``geohint_scored`` row, parsed JSON) no result of this class, or None when
        it is one: not a JSON object, a field of :data:`REQUIRED_FIELDS` missing, or a field's value of another
        type than its annotation (a number for ``float``, an int or float; ``bool`` only true/false; ``dict`` an
        object; text for ``str``; null where the annotation allows None). :meth:`to_json` writes every row so;
        another was written outside geoagent. Runs for every stored row of each rebuild (the report, the export,
        the live aggregator): a row whose every field is of an exact JSON type its annotation allows is passed in
        one look-up per field (:data:`_EXACT_TYPES`), any other row takes the full check below."""
        if type(d) is dict and _REQUIRED_SET <= d.keys():
            get = d.get
            for name, exact in _EXACT_TYPES:
                if type(get(name)) not in exact:  # also a field left out (None): the full check decides
                    break
            else:
                return None
        if not isinstance(d, dict):
            return f"a JSON {type(d).__name__} where a scored row (a JSON object) belongs"
        missing = [n for n in REQUIRED_FIELDS if n not in d]
        if missing:
            return f"no field {', '.join(missing)} (a scored row has {', '.join(REQUIRED_FIELDS)})"
        for name, allowed in _FIELD_TYPES.items():
            if name in d and not _of_type(d[name], allowed):
                return f"field {name} is {d[name]!r}, not {' or '.join(_TYPE_WORDS[t] for t in allowed)}"
        return None


#: the fields every stored GeoHint result has (:meth:`GeoHintResult.from_json`)
REQUIRED_FIELDS = ("key", "site", "image_id", "model", "condition", "schema")
_TYPE_WORDS = {str: "a text", float: "a number", int: "an integer", bool: "true or false", dict: "a JSON object",
               type(None): "null"}


def _field_types() -> dict[str, tuple[type, ...]]:
    """Field name -> the JSON value types its annotation allows (``float | None`` -> (float, NoneType))."""
    out: dict[str, tuple[type, ...]] = {}
    for name, hint in typing.get_type_hints(GeoHintResult).items():
        if hint is Any:
            continue
        parts = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else (hint,)
        out[name] = tuple(typing.get_origin(p) or p for p in parts)
    return out


def _of_type(value: Any, allowed: tuple[type, ...]) -> bool:
    """Whether a JSON ``value`` fits ``allowed`` (an int is a number; a bool is no number)."""
    if isinstance(value, bool):
        return bool in allowed
    if isinstance(value, int) and float in allowed:
        return True
    return isinstance(value, tuple(t for t in allowed if t is not bool))


_FIELD_TYPES = _field_types()
_REQUIRED_SET = frozenset(REQUIRED_FIELDS)
#: (field, the exact Python types of a parsed JSON value :func:`_of_type` accepts for it): the fast path of
#: :meth:`GeoHintResult.row_problem` (an int is a number; a bool is no int, no number)
_EXACT_TYPES = tuple((name, frozenset(t for a in allowed for t in ((float, int) if a is float else (a,))))
                     for name, allowed in _FIELD_TYPES.items())
