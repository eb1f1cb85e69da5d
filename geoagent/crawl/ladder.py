"""Context-ladder builder (seed 000, Sec. 3.3): reference points stratified by distance band x tier.

Bands (km, lower edge inclusive, upper exclusive): 0.5-1.5, 1.5-3, 3-6, applied to the distance as written
in the row (rounded to :data:`DIST_DECIMALS` decimals, as the release bands its rounded ``dist_km``), so every
row's band follows from its ``dist_km``. Referenceability tiers: high
(4-5), mid (2-3), low (0-1). Candidates are de-duplicated by QID (the nearest statement wins), the
site's own entity and name are excluded, each cell keeps one item per place (:func:`one_per_place`: items
sharing an English name or raw label are one place), and each (band, tier) cell gets up to ``draws_per_cell``
random draws (default 2, as in the paper; the release holds up to 4): random, never sorted by distance,
because sorting once cost the most diagnostic condition (Sec. 3.3). One CSV per site with the release's
ladder columns. Each cell draws from a random stream of its own (ladder draw version 2,
:data:`LADDER_DRAW_VERSION`), so a changed rating redraws only the cells it moves a candidate out of or into.
"""

from __future__ import annotations

import csv
import random
import re
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.textfmt import label_text

#: Columns of a released ladder file (``data/ladders/<site>_ladder_<auditor>-<lang>.csv``), in order.
LADDER_COLUMNS: tuple[str, ...] = (
    "band", "tier", "name_zh", "name_en", "label_raw", "qid", "dist_km", "familiarity", "pageviews",
    "n_in_cell", "n_taken",
)

#: Decimals of a ladder row's ``dist_km`` (km); the band is read from this rounded value (the release's rule).
DIST_DECIMALS = 3

#: Version of the ladder draw a crawl uses, recorded once per crawl in its state folder
#: (:data:`LADDER_DRAW_FILE`, :func:`ladder_draw_version`). 1: one random stream per site, shared by its cells in
#: band and tier order, so a rating that moved one candidate between cells (a human review decision, a re-rating)
#: redrew every later cell of the site too, reference points the decision had nothing to do with (a walkthrough:
#: one decision on a 0.5-1.5 km candidate changed all twelve draws of the site's 1.5-3 and 3-6 km cells, and a
#: GeoHint campaign over the crawl re-asked 64 requests per model and left their earlier answers out of scoring).
#: 2 (2026-12-02): a stream per (band, tier) cell, seeded by the site's seed and the cell, so only the cells whose
#: pool changed are redrawn; and one place per name in the whole ladder, the nearest (``one_name_per_site``: two
#: places named alike in two cells gave one hint text two distances, one model request scored in two bands). A crawl whose ladders were drawn before keeps version 1 (its ladders do not change
#: under it); a crawl that writes its first ladder from then on uses version 2.
LADDER_DRAW_VERSION = 2

#: the file in a crawl's state folder that records its ladder draw version (``{"version": N}``)
LADDER_DRAW_FILE = "ladder_draw.json"

#: Tier names and the referenceability scores (0-5) they cover.
TIERS: tuple[tuple[str, tuple[int, ...]], ...] = (("high", (4, 5)), ("mid", (2, 3)), ("low", (0, 1)))


def band_label(lo_km: float, hi_km: float) -> str:
    """The release's band label, e.g. ``0.5-1.5km``, ``3.0-6.0km``."""
    return f"{lo_km:.1f}-{hi_km:.1f}km"


BAND_LABELS: tuple[str, ...] = tuple(band_label(lo, hi) for lo, hi in C.LADDER_BANDS_KM)


def band_for(dist_km: float, bands_km: Sequence[tuple[float, float]] = C.LADDER_BANDS_KM) -> str | None:
    """The band label containing ``dist_km`` (``lo <= d < hi``), or None outside every band."""
    for lo, hi in bands_km:
        if lo <= dist_km < hi:
            return band_label(lo, hi)
    return None


def tier_for(familiarity: int | float | str | None) -> str | None:
    """``high`` for referenceability 4-5, ``mid`` for 2-3, ``low`` for 0-1; None when missing/invalid."""
    if familiarity is None or familiarity == "":
        return None
    try:
        value = float(familiarity)
    except (TypeError, ValueError):
        return None
    if not value.is_integer():
        return None
    for name, scores in TIERS:
        if int(value) in scores:
            return name
    return None


def normalise_name(name: str | None) -> str:
    """Case-, accent- and punctuation-insensitive form of a place name for the own-name exclusion."""
    if not name:
        return ""
    text = unicodedata.normalize("NFKD", name)
    text = "".join(ch for ch in text if not unicodedata.combining(ch)).casefold()
    text = re.sub(r"[\W_]+", " ", text)
    return " ".join(text.split())


@dataclass(frozen=True, slots=True)
class RatedCandidate:
    """A reference-point candidate after the referenceability audit.

    Attributes
    ----------
    qid : str
        Wikidata id.
    label_raw : str
        The label as retrieved from Wikidata.
    dist_km : float
        Haversine distance from the site, km.
    familiarity : int or None
        Referenceability 0-5 (None if the auditor gave none).
    ok : bool
        The auditor's "usable as a reference point".
    name_en, name_zh : str or None
        Canonical names from the auditor.
    sensitive : bool or None
        Flagged by the contentious-name screening pass (excluded: dataset policy); None when the screen was asked
        for but its answer could not be read (unscreened: excluded too, never drawn as though screened clean).
    pageviews : int or None
        Optional Wikipedia pageviews.
    """

    qid: str
    label_raw: str
    dist_km: float
    familiarity: int | None
    ok: bool = True
    name_en: str | None = None
    name_zh: str | None = None
    sensitive: bool | None = False
    pageviews: int | None = None


def dedupe_by_qid(candidates: Iterable[RatedCandidate]) -> list[RatedCandidate]:
    """Keep one candidate per QID (the nearest one; ties keep the first seen), in first-seen order."""
    best: dict[str, RatedCandidate] = {}
    order: list[str] = []
    for c in candidates:
        prev = best.get(c.qid)
        if prev is None:
            order.append(c.qid)
            best[c.qid] = c
        elif c.dist_km < prev.dist_km:
            best[c.qid] = c
    return [best[q] for q in order]


#: longest auditor English name (characters, whitespace collapsed) used as a hint name: a looping auditor's
#: 50 KB "en" became the text put into every prompt that names the point. Real names are far shorter (the
#: longest in the release's ladders and audit sample is 68); the Wikidata label is used instead of a longer one
#: (:func:`hint_name`), and the auditor's decision record says so
#: (:func:`geoagent.crawl.referenceability.parse_ref_batch`).
NAME_EN_MAX_CHARS = 200
#: longest auditor Chinese name (characters, whitespace collapsed) kept, the same cap as
#: :data:`NAME_EN_MAX_CHARS` for the same reason (a looping auditor's name; session 16): the Chinese name goes into the
#: ladder's ``name_zh``, the plan's ``ref_name_zh`` (the ``release_first_word`` echo key) and, last, the hint name
#: (:func:`hint_name`). The longest in the release's ladders and audit sample is 19.
NAME_ZH_MAX_CHARS = NAME_EN_MAX_CHARS


def hint_name(name_en: str | None, label_raw: str | None, name_zh: str | None = None, *,
              qid: str | None) -> str | None:
    """The name a reference point is given to the model ("I took this photo near <name>"), or None.

    The auditor's canonical English name when it gave one (Sec. 3.3: the auditor returns a canonical English
    name for every candidate); otherwise the Wikidata label (Chinese or local-language when the item has no
    English one, :data:`geoagent.clients.wdqs.LABEL_LANGUAGES`) unless it is the item's own id ``qid`` (WDQS's
    answer for an item with no label in the asked languages), which names nothing (a label merely shaped like an
    id, the Gold Coast tower "Q1", is a name: :func:`geoagent.crawl.referenceability.has_no_label`);
    otherwise the auditor's Chinese name. The release gives such a candidate a name too rather than dropping
    it (its ``audit.to_context`` falls back from the English to the Chinese name to the raw label, and its
    ``fill_missing_names`` explains why: the candidates without an English name are almost all low tier, the
    paper's control); ours tries the raw label before the Chinese name because its labels come in English,
    language-neutral, Chinese and local-language order, so the raw label is the name a visitor would read on
    the spot. Whitespace is collapsed and control and bidirectional formatting characters dropped
    (:func:`geoagent.textfmt.label_text`); an empty or whitespace-only name counts as none, and so does an English
    name over :data:`NAME_EN_MAX_CHARS` characters or a Chinese one over :data:`NAME_ZH_MAX_CHARS` (a looping
    auditor's; decision logs written before the cap may hold one)."""
    en = label_text(name_en)  # whitespace collapsed, control and bidi characters gone (crawl38 #2)
    if en and len(en) <= NAME_EN_MAX_CHARS:
        return en
    raw = label_text(label_raw)
    if raw and raw != qid:
        return raw
    zh = label_text(name_zh)
    return zh if zh and len(zh) <= NAME_ZH_MAX_CHARS else None


def eligible_candidates(candidates: Iterable[RatedCandidate], *, site_qid: str | None = None,
                        site_names: Sequence[str] = ()) -> list[RatedCandidate]:
    """Usable, screened and not sensitive (``sensitive`` False; None, unscreened, is left out), rated, with a name
    (:func:`hint_name`, returned as ``name_en``), not the site itself (by QID or by name)."""
    own = {normalise_name(n) for n in site_names if normalise_name(n)}
    out = []
    for c in dedupe_by_qid(candidates):
        if not c.ok or c.sensitive is not False or tier_for(c.familiarity) is None:
            continue
        name = hint_name(c.name_en, c.label_raw, c.name_zh, qid=c.qid)
        if not name:
            continue
        if name != c.name_en:
            c = replace(c, name_en=name)
        if site_qid and c.qid == site_qid:
            continue
        if own and (normalise_name(c.name_en) in own or normalise_name(c.label_raw) in own):
            continue
        out.append(c)
    return out


def one_per_place(cell: Iterable[RatedCandidate]) -> list[RatedCandidate]:
    """One candidate per place in a ladder cell: candidates whose English names (:func:`normalise_name`) or
    raw labels coincide are one place with several Wikidata items (a station entered twice), and only the
    nearest is kept (ties: the smaller QID text), so one reference point never fills two slots of a cell.
    The release de-duplicates each cell by name before drawing too (its ``build_ladder2``: by Chinese name,
    then by raw label; this project's conditions are English, so by English name, then by raw label).
    Returned nearest first."""
    kept: list[RatedCandidate] = []
    seen: set[tuple[str, str]] = set()
    for c in sorted(cell, key=lambda c: (c.dist_km, c.qid)):
        en, raw = normalise_name(c.name_en), normalise_name(c.label_raw)
        keys = ({("en", en)} if en else set()) | ({("raw", raw)} if raw else set())
        if keys & seen:
            continue
        seen |= keys
        kept.append(c)
    return kept


def build_ladder(candidates: Iterable[RatedCandidate], *, rng: random.Random | None = None,
                 cell_seed: str | None = None, one_name_per_site: bool = False, draws_per_cell: int = 2,
                 site_qid: str | None = None, site_names: Sequence[str] = (),
                 bands_km: Sequence[tuple[float, float]] = C.LADDER_BANDS_KM) -> list[dict[str, Any]]:
    """Build one site's context ladder.

    Parameters
    ----------
    candidates : iterable of RatedCandidate
        Audited candidates around the site (any order; duplicates by QID allowed).
    rng : random.Random, optional
        One source of the within-cell draws for every cell in turn (ladder draw version 1: a change in one
        cell's pool shifts the draws of every later cell). Give ``rng`` or ``cell_seed``, not both.
    cell_seed : str, optional
        Seed text of the site (e.g. ``"<crawl seed>:<site id>"``); each (band, tier) cell draws from
        ``random.Random(f"{cell_seed}:{band}:{tier}")`` (version 2: a cell's draws depend on its own pool only).
    one_name_per_site : bool
        Apply :func:`one_per_place` to the whole site's banded candidates, not only within each cell (version 2):
        of places sharing a name in different cells only the nearest stays, because two ladder rows with one
        name give one hint text two distances (and the model one request for both, scored in two bands).
    draws_per_cell : int
        Maximum reference points per (band, tier) cell; 2 in the paper.
    site_qid, site_names
        The site's own QID and names, excluded from its ladder.

    Returns
    -------
    list of dict
        Rows with :data:`LADDER_COLUMNS`, ordered by band (near to far) then tier (high, mid, low);
        within a cell in draw order. ``n_in_cell`` is the cell's candidate count after
        :func:`one_per_place` (places, not Wikidata items), ``n_taken`` the draws.
        ``dist_km`` is rounded to :data:`DIST_DECIMALS` and the band is that of the rounded value (a
        candidate 1.4996 km away is a 1.5 km row in 1.5-3.0 km; one at 5.9996 km, a 6.0 km row, is in no
        band), so ``band_for(dist_km) == band`` holds for every row, as in the release.

    Raises
    ------
    ValueError
        ``draws_per_cell`` below 1, or not exactly one of ``rng`` and ``cell_seed``.
    """
    if draws_per_cell < 1:
        raise ValueError(f"draws_per_cell must be >= 1, got {draws_per_cell}")
    if (rng is None) == (cell_seed is None):
        raise ValueError("build_ladder needs exactly one of rng (one stream for every cell) and cell_seed (a stream "
                         "per cell)")
    cells: dict[tuple[str, str], list[RatedCandidate]] = {}
    for c in eligible_candidates(candidates, site_qid=site_qid, site_names=site_names):
        band = band_for(round(c.dist_km, DIST_DECIMALS), bands_km)  # the distance the row will show
        tier = tier_for(c.familiarity)
        if band is None or tier is None:
            continue
        cells.setdefault((band, tier), []).append(c)
    if one_name_per_site:  # the nearest of same-named places in any cell (ties: the smaller QID text)
        kept = {c.qid for c in one_per_place(c for cell in cells.values() for c in cell)}
        cells = {k: [c for c in cell if c.qid in kept] for k, cell in cells.items()}
    rows: list[dict[str, Any]] = []
    for lo, hi in bands_km:
        band = band_label(lo, hi)
        for tier, _ in TIERS:
            pool = sorted(one_per_place(cells.get((band, tier), [])), key=lambda c: c.qid)  # canonical order
            if not pool:
                continue
            draw = rng if rng is not None else random.Random(f"{cell_seed}:{band}:{tier}")
            taken = draw.sample(pool, min(draws_per_cell, len(pool)))
            for c in taken:
                rows.append({
                    "band": band,
                    "tier": tier,
                    "name_zh": c.name_zh or "",
                    "name_en": c.name_en or "",
                    "label_raw": c.label_raw,
                    "qid": c.qid,
                    "dist_km": round(c.dist_km, DIST_DECIMALS),
                    "familiarity": int(c.familiarity) if c.familiarity is not None else "",
                    "pageviews": "" if c.pageviews is None else int(c.pageviews),
                    "n_in_cell": len(pool),
                    "n_taken": len(taken),
                })
    return rows


def write_ladder_csv(rows: Sequence[dict[str, Any]], path: str | Path) -> Path:
    """Write ladder rows as CSV (UTF-8, the release's columns) atomically; return the path."""
    from geoagent.files import atomic_open

    path = Path(path)
    with atomic_open(path, "w", newline="") as f:  # a temporary file of its own: concurrent writers never share one
        w = csv.DictWriter(f, fieldnames=list(LADDER_COLUMNS))
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in LADDER_COLUMNS})
    return path


def read_ladder_csv(path: str | Path) -> list[dict[str, str]]:
    """Read a ladder CSV (ours or the release's); raises ``ValueError`` naming the file on bad columns."""
    path = Path(path)
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        missing = [c for c in LADDER_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ValueError(f"{path}: ladder file lacks columns {missing}")
        return list(reader)


def auditor_file_part(model: str) -> str:
    """The auditor part of a ladder file name for the auditor model ``model``: each run of characters other than
    ``A-Za-z0-9_.-`` written ``-``, leading and trailing ``-`` dropped (``"deepseek/deepseek-chat"`` ->
    ``"deepseek-deepseek-chat"``); ``"auditor"`` when nothing is left. Not checked: :func:`auditor_name_problem`."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", model).strip("-") or "auditor"


def auditor_name_problem(model: str) -> str | None:
    """Why the auditor model ``model`` cannot name ladder files (:func:`ladder_file_name` would raise: its file
    part, :func:`auditor_file_part`, starts with ``_`` or ``.``, holds ``..`` or is over 128 characters), or None."""
    from geoagent.paths import safe_name

    part = auditor_file_part(model)
    try:
        safe_name(part, what="auditor")
    except ValueError:
        pass
    else:
        return None
    if len(part) > 128:
        why = f"its file-name part is {len(part)} characters, over 128"
    elif ".." in part:
        why = "it holds '..'"
    else:
        why = f"its file-name part {part[:40]!r} starts with {part[0]!r}"
    return (f"model {model[:60]!r}{'...' if len(model) > 60 else ''} cannot name the ladder files "
            f"(<site>_ladder_<model>-en.csv): {why}; use letters, digits, '_', '.', '-' (non-alphanumeric runs "
            "become '-'), starting with a letter or digit, at most 128 characters")


def ladder_file_name(site: str, auditor: str = "auditor", lang: str = "en") -> str:
    """``<site>_ladder_<auditor>-<lang>.csv`` as in the release (site id checked by ``safe_name``)."""
    from geoagent.paths import safe_name

    return f"{safe_name(site, what='site id')}_ladder_{safe_name(auditor, what='auditor')}-{safe_name(lang, what='lang')}.csv"


def ladder_draw_version(state_dir: str | Path) -> int:
    """The ladder draw version (:data:`LADDER_DRAW_VERSION`) of the crawl whose state folder is ``state_dir``, as
    recorded in its :data:`LADDER_DRAW_FILE`. Without that file it is decided once and recorded: 1 when the crawl
    already holds ladders (``ladders/*.csv``, or ``ladders_superseded/*.csv``: set aside at the start of the run,
    :func:`geoagent.crawl.stages.set_aside_other_auditor_ladders`; drawn before versions were recorded, so they
    keep their draws), else
    the current version. The file is created whole or not at all (a hard link of a finished temporary file), so
    processes of one crawl deciding at once all read the first one's decision.

    Raises
    ------
    ValueError
        The file exists but holds no version 1 or 2 (names the file)."""
    import json
    import os

    state_dir = Path(state_dir)
    path = state_dir / LADDER_DRAW_FILE

    def read() -> int:
        try:
            version = json.loads(path.read_text(encoding="utf-8")).get("version")
        except (ValueError, AttributeError) as e:
            raise ValueError(f"{path}: not a ladder draw record ({e}); delete it only if the crawl has no ladders "
                             "yet") from None
        if version not in (1, LADDER_DRAW_VERSION):
            raise ValueError(f"{path}: unknown ladder draw version {version!r} (this geoagent draws 1 or "
                             f"{LADDER_DRAW_VERSION})")
        return int(version)

    if path.exists():
        return read()
    from geoagent.files import _create_temp

    # ladders set aside (another auditor's file names) count too: the run moves them before it writes its first
    # ladder, so an older crawl all of whose ladders were moved would otherwise be taken for a new one
    legacy = any(any((state_dir / d).glob("*.csv")) for d in (C.LADDERS_DIR, C.SUPERSEDED_LADDERS_DIR))
    version = 1 if legacy else LADDER_DRAW_VERSION
    state_dir.mkdir(parents=True, exist_ok=True)
    # a locked temporary file of the project's naming (a kill leaves one the next run's cleanup removes)
    fd, tmp = _create_temp(path)
    try:
        os.write(fd, (json.dumps({"version": version, "decided": "ladders already drawn" if legacy else "new crawl"})
                      + "\n").encode("utf-8"))
        os.fsync(fd)
        try:
            os.link(tmp, path)  # created whole, and only if no other process decided first
        except FileExistsError:
            pass
    finally:
        os.close(fd)
        tmp.unlink(missing_ok=True)
    return read()
