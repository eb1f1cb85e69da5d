"""Simulated GeoHint answers for the ``simulated`` provider and the local fake model servers.

Registers responder ``geohint`` with :mod:`geoagent.sandbox.responders` on import (the registry is
imported lazily, so this module has no hard dependency on it). The answer is plausible JSON in the
prompt's schema:

* the site is found from the image id (images given to :func:`configure`, or the synthetic placeholder
  images of :func:`geoagent.geohint.plan.synthetic_images`), else from the hint ("I took this photo near
  X"): the alphabetically first site whose context ladder has a reference point named X; else no site
  is known and the answer is generic;
* each site gets a fixed legibility ``L`` in [0, 1) from SHA-256 of (site, "legibility"); a model a
  fixed skill offset from SHA-256 of its name;
* with probability ``L + skill`` the answer names the site's landmark (area = landmark, building =
  landmark): a likely hit; otherwise, for context prompts, it echoes the hint as area with probability
  :data:`ECHO_P` 0.7 (x :data:`WARN_ECHO_FACTOR` 0.6 under the warning), else names another reference point of
  the same ladder; so a context condition's echo rate is about 0.7 x (1 - P(landmark)), well under 100 %;
* a site it cannot tell (an image it was not given and a hint in no ladder it knows: a fake model server in a
  process of its own, answering a campaign over a folder other than the release it indexes) gets the hint
  itself as area: echo 100 %;
* the permissive schema (``"place"`` key) answers "unknown" sometimes; the checklist prompt gets an
  ``evidence`` object with some "not visible" slots;
* the text varies in format like real models: plain JSON, fenced JSON, prose before fenced JSON.

What it knows: the GeoContext release it finds (``$GEOAGENT_RELEASE``, else ``../shared/reference/geocontext``,
with :data:`SYNTHETIC_IMAGES_PER_SITE` placeholder images per site), with the sites, ladders and images of the
folder each GeoHint campaign of this process plans from laid over it (:func:`configure` with ``merge=True``,
called by the plan when a model of the campaign is simulated: a campaign over a crawl's folder is answered from
that folder).

All draws use ``ctx.rng`` (seeded by the request key), so the same request always gets the same text.
The real-site demo geocodes these names against the local Wikidata fake built from the release
gazetteer (sites, cities, ladder points).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from geoagent import constants as C
from geoagent.geohint.conditions import CONTEXT_TEMPLATE, PROMPTS_DIR

RESPONDER_NAME = "geohint"
#: chance that an answer not naming the landmark repeats the hint as its area (a context prompt)
ECHO_P = 0.7
#: factor on :data:`ECHO_P` under the warning ("the hint could be wrong")
WARN_ECHO_FACTOR = 0.6
#: synthetic placeholder images per site recognised without :func:`configure`
SYNTHETIC_IMAGES_PER_SITE = 8


@dataclass
class _Index:
    sites: dict[str, tuple[str, str]] = field(default_factory=dict)  # site -> (city, landmark)
    ladder_names: dict[str, list[str]] = field(default_factory=dict)  # site -> reference names
    by_name: dict[str, list[str]] = field(default_factory=dict)  # reference name -> sites
    image_site: dict[str, str] = field(default_factory=dict)


_INDEX: _Index | None = None
_LOCK = threading.Lock()


def _hint_regex() -> re.Pattern[str]:
    try:
        tmpl = (PROMPTS_DIR / CONTEXT_TEMPLATE).read_text(encoding="utf-8").strip()
    except OSError:
        tmpl = "I took this photo near ${reference_point}."
    parts = tmpl.split("${reference_point}")
    if len(parts) != 2:
        parts = ["I took this photo near ", "."]
    return re.compile(re.escape(parts[0]) + r"(?P<ref>.+?)" + re.escape(parts[1].rstrip()) + r"\s")


_HINT = _hint_regex()


def _build(idx: _Index, sites: Mapping[str, object], ladders: Mapping[str, object], images: Iterable[object]) -> _Index:
    """``idx`` with ``sites`` (``Site``), ``ladders`` (``ContextLadder``) and ``images`` (``Image``) laid over it
    (a site's entry and ladder replaced, an image's site replaced), ``by_name`` rebuilt from the ladders."""
    for sid, s in sites.items():
        idx.sites[sid] = (getattr(s, "city", "") or "", getattr(s, "landmark", None) or getattr(s, "city", "") or sid)
    for sid, lad in ladders.items():
        idx.ladder_names[sid] = [p.name_en for p in getattr(lad, "points", ()) if getattr(p, "name_en", None)]
    for img in images:
        idx.image_site[str(getattr(img, "image_id"))] = getattr(img, "site_id")
    idx.by_name = {}
    for sid, names in idx.ladder_names.items():
        for n in names:
            idx.by_name.setdefault(n, []).append(sid)
    for v in idx.by_name.values():
        v.sort()
    return idx


def configure(
    sites: Mapping[str, object],
    ladders: Mapping[str, object],
    images: Iterable[object] = (),
    *,
    merge: bool = False,
) -> None:
    """Give the responder the campaign's sites (``Site``), ladders (``ContextLadder``) and images
    (``Image``) in-process, instead of reading the release folder.

    ``merge=False`` (the demo's hand-off): the responder knows exactly these. ``merge=True`` (what a GeoHint
    campaign's plan does with the folder it plans from, :meth:`geoagent.geohint.campaign.GeoHintCampaign.plan`):
    they are laid over what it knows already (the release folder of :func:`_release_dir`, or an earlier
    :func:`configure`), each given site's entry and ladder and each given image's site replaced, so the sites of
    another campaign of the same process are still answered as before. Thread-safe; the answers stay
    deterministic given ``ctx.rng``.
    """
    if merge:
        _index()  # what it knows already: the release folder, unless configured before
    global _INDEX
    with _LOCK:
        base = _INDEX if merge else None
        idx = _Index()
        if base is not None:
            idx.sites, idx.image_site = dict(base.sites), dict(base.image_site)
            idx.ladder_names = {k: list(v) for k, v in base.ladder_names.items()}
        _INDEX = _build(idx, sites, ladders, images)


def release_dir_found() -> Path | None:
    """The GeoContext release folder the simulated answers read their sites and ladders from (a folder holding
    ``sites.csv``): ``$GEOAGENT_RELEASE``, else ``../shared/reference/geocontext`` from the working directory,
    else beside the package's checkout; None when none holds ``sites.csv`` (then an answer can place a photo
    only through a campaign configured in the same process, :func:`configure`)."""
    return _release_dir()


def _release_dir() -> Path | None:
    for cand in (os.environ.get(C.ENV_RELEASE_DIR), C.DEFAULT_RELEASE_DIR, str(Path(__file__).resolve().parents[2].parent / "shared" / "reference" / "geocontext")):
        if cand and (Path(cand) / "sites.csv").is_file():
            return Path(cand)
    return None


def _index() -> _Index:
    global _INDEX
    with _LOCK:
        if _INDEX is not None:
            return _INDEX
        idx = _Index()
        root = _release_dir()
        if root is not None:
            with (root / "sites.csv").open(newline="", encoding="utf-8") as fh:
                for row in csv.DictReader(fh):
                    idx.sites[row["site"]] = (row.get("city") or "", row.get("landmark") or row.get("city") or row["site"])
            for path in sorted((root / "ladders").glob("*.csv")):
                sid = path.name.split("_ladder")[0]
                with path.open(newline="", encoding="utf-8") as fh:
                    names = [r["name_en"] for r in csv.DictReader(fh) if r.get("name_en")]
                idx.ladder_names[sid] = names
                for n in names:
                    idx.by_name.setdefault(n, []).append(sid)
            # the folder's own photos (its trial table's image ids: a crawl's output, the release's sample) map back
            # to their site, so a stand-alone fake given the folder (--release-dir) places a baseline photo, which
            # no hint names (walk30 #3: every baseline answer of a crawl's photos said 'Unknown city')
            from geoagent.data.importer import trial_table_paths

            table = next((p for p in trial_table_paths(root) if p.is_file()), None)
            if table is not None:
                try:  # read as the importer reads it (a BOM, a stray byte); the simulator never stops a run
                    with table.open(newline="", encoding="utf-8-sig", errors="surrogateescape") as fh:
                        for row in csv.DictReader(fh):
                            image, sid = (row.get("image_id") or "").strip(), (row.get("site") or "").strip()
                            if image and sid in idx.sites:
                                idx.image_site.setdefault(image, sid)
                except (OSError, csv.Error, UnicodeError):
                    pass  # its photos are answered as unknown; the campaign's own import reports the file
            # placeholder images of offline demos (geoagent.geohint.plan.synthetic_images) map back to their site
            from geoagent.data.model import Site
            from geoagent.geohint.plan import synthetic_images

            stub = {sid: Site(site_id=sid, city=c, country="", continent="", lat=0.0, lon=0.0) for sid, (c, _l) in idx.sites.items()}
            for img in synthetic_images(stub, per_site=SYNTHETIC_IMAGES_PER_SITE):
                idx.image_site[img.image_id] = img.site_id
        _INDEX = idx
        return idx


def matches(prompt: str) -> bool:
    """Whether ``prompt`` is a GeoHint prompt (asks where a photo was taken, JSON with city and area)."""
    low = prompt.lower()
    return '"city"' in low and '"area"' in low and ("where was this photo" in low or "photograph" in low)


def _u(*parts: str) -> float:
    return int.from_bytes(hashlib.sha256("|".join(parts).encode()).digest()[:8], "big") / 2**64


def site_legibility(site: str) -> float:
    """Fixed simulated legibility of a site in [0, 1)."""
    return _u(site, "legibility")


def model_skill(model: str) -> float:
    """Fixed simulated skill offset of a model in [-0.15, 0.15)."""
    return 0.3 * _u(model, "skill") - 0.15


_CLUES = (
    "multi-storey facades with shopfronts at street level",
    "narrow pavement with bollards",
    "parked cars along the kerb",
    "street signs on poles",
    "overhead tram or trolley wires",
    "trees lining the street",
    "pedestrian crossing markings",
)
_EVIDENCE = {
    "infrastructure": ("bollards and painted kerbs", "traffic lights on poles", "not visible"),
    "vegetation": ("temperate street trees", "not visible", "potted plants only"),
    "architecture": ("stone facades, regular window rhythm", "concrete mid-rise blocks", "brick rowhouses"),
    "script": ("Latin", "CJK", "not visible", "Arabic"),
    "terrain": ("flat paved street, compact cars", "gentle slope, asphalt road", "not visible"),
}


def respond(ctx) -> str:  # ctx: geoagent.sandbox.responders.SimContext
    """Answer text for one GeoHint prompt (deterministic given ``ctx.rng``)."""
    rng = ctx.rng
    idx = _index()
    m = _HINT.search(ctx.prompt)
    hint = m.group("ref").strip() if m else None
    site = idx.image_site.get(str(ctx.image_id)) if ctx.image_id else None
    if site is None and hint and idx.by_name.get(hint):
        site = idx.by_name[hint][0]
    city, landmark = idx.sites.get(site, ("", None)) if site else ("", None)
    permissive = '"place"' in ctx.prompt
    warned = "could be wrong" in ctx.prompt or "may be wrong" in ctx.prompt.lower()
    checklist = '"evidence"' in ctx.prompt
    p_landmark = min(max(site_legibility(site) + model_skill(ctx.model), 0.02), 0.98) if site else 0.0
    others = [n for n in idx.ladder_names.get(site, []) if n != hint] if site else []
    roll = rng.random()
    if landmark and roll < p_landmark:
        area, building = landmark, landmark
    elif hint and rng.random() < ECHO_P * (WARN_ECHO_FACTOR if warned else 1.0):
        area, building = hint, rng.choice(("corner shop", "apartment block", "cafe", hint))
    elif others:
        other = rng.choice(others)
        area, building = other, other
    else:
        area, building = (hint or city or "city centre"), "residential building"
    answer: dict[str, object]
    conf_a, conf_b = round(rng.uniform(0.3, 0.95), 2), round(rng.uniform(0.2, 0.9), 2)
    clues = rng.sample(_CLUES, 3)
    if permissive:
        if rng.random() < 0.4:
            building = "unknown"
        answer = {"country": "", "city": city or "unknown", "area": area, "place": building, "confidence": conf_a, "clues": clues}
    else:
        answer = {"city": city or "Unknown city", "area": area, "building": building,
                  "confidence_area": conf_a, "confidence_building": conf_b, "clues": clues}
        if checklist:
            answer["evidence"] = {k: rng.choice(v) for k, v in _EVIDENCE.items()}
    body = json.dumps(answer, ensure_ascii=False, indent=2 if rng.random() < 0.5 else None)
    style = rng.random()
    if style < 0.5:
        return body
    if style < 0.85:
        return f"```json\n{body}\n```"
    return f"Looking at the facades and street furniture, here is my answer.\n\n```json\n{body}\n```"


def _register() -> None:
    from geoagent.sandbox.responders import register_responder

    register_responder(RESPONDER_NAME, matches, respond)


_register()
