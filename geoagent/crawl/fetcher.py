"""Imagery fetcher (seed 000, Sec. 3.2): perspective street-level images near a site, spread out,
bright enough, not duplicated; thumbnails saved as ``<images root>/<site>/<image_id>.jpg`` (another
``thumb_field`` than the default: ``<site>/<field>/<image_id>.jpg``, :func:`image_path`).

Walk: perspective images within ``radius_m`` of the site (captured on or after ``captured_after`` when it is set:
asked of the search as ``start_captured_at`` and checked on each image's ``captured_at``), nearest first (``camera_type`` ``perspective``, as the
release's fetcher selects: panoramas and fisheye frames are skipped before download, each with its reason;
:attr:`~geoagent.clients.mapillary.MapillaryImage.perspective_frame`); an image within
``min_separation_m`` (40 m) of an already kept one is skipped without downloading; otherwise a fresh
thumbnail URL is requested and the JPEG downloaded at once (the URLs expire); it is rejected if the mean
of a small greyscale copy is below ``min_brightness`` (90 on 0-255, the daylight filter) or if its
64-bit difference hash is within ``dedupe_hamming_max`` bits of a kept image (a near-duplicate). Kept
images and every rejection are recorded with the metadata (id, camera lat/lon, capture time, compass
angle) in the site's *selection record*. Image ids are validated as digits before they touch a path. An
image whose thumbnail cannot be had (no URL, refused even when freshly issued, not a JPEG) is rejected
with the reason; the walk goes on to the next image.

Rejected thumbnails are recorded, not kept. A thumbnail rejected as too dark or as a near-duplicate is not
written, but its record is (:func:`record_rejection`: ``<site>/[<field>/]<image_id>.rejected.json`` beside where
its file would lie, written atomically at once): its mean brightness, at the ``grey_size_px`` it was measured
with, and its difference hash, plus the reason given. A later walk of the site (a resume after a kill or a stop,
or another campaign on the same images root) decides such an image from the record instead of downloading it
again: the measurements are functions of the thumbnail's bytes alone, so the verdict is the one a download
would give under the walk's own settings and kept images. Where that verdict is "keep" (a campaign with a lower
``min_brightness``, or the duplicate's original no longer kept), or the record was measured with another
``grey_size_px``, the thumbnail is downloaded as usual. So a walk downloads each thumbnail of a site at most once
per ``thumb_field``, kept or not.

Undecodable thumbnails are recorded too. A thumbnail downloaded whole (a complete JPEG, ``FFD8`` ... ``FFD9``)
that PIL cannot decode gets the same kind of record (:func:`record_unreadable`: ``"unreadable": true`` and the
reason, no measurements), and a later walk rejects it from the record, with the same reason, under any settings
(:func:`load_unreadable`): the verdict depends on the image's bytes alone. So does a complete JPEG whose size,
read from its header before any decoding, is no thumbnail's (:func:`size_problem`: an edge under 16 px, a tracking
pixel; more than 16 times the pixels of a square of the field's nominal edge, 16.8 megapixels for ``thumb_1024_url``;
or over Pillow's decompression-bomb limit): it is not decoded and gets the same record. Remove the ``.rejected.json`` to have it
downloaded again. An answer that is no complete JPEG (an HTML error page served with status 200, a body cut short;
:class:`~geoagent.clients.mapillary.ThumbnailUnavailable` ``kind`` ``"not_jpeg"``, after the HTTP layer's retries)
is a failed transfer, not a verdict on the image: like an image whose thumbnail could not be had at all (no URL,
gone, not permitted, refused by the CDN), it gets no record, and the next walk asks again. A walk that may be
retried (``retry_transient``: the crawl's fetch stage, but at a site's last delivery) stops at such a failure,
or at a CDN refusing a fresh URL (:attr:`~geoagent.clients.mapillary.ThumbnailUnavailable.transient`), and stores
no selection (:class:`ThumbnailTransferFailed`), so the site is walked again instead of keeping another image in
that one's place for good (crawl40 #3). So does a thumbnail
whose body passes the download's cap (``[crawl.fetcher] max_thumb_bytes``, by default the size of the ``thumb_field``'s
thumbnail: :data:`~geoagent.clients.mapillary.THUMB_MAX_BYTES`): refused unread (by its Content-Length) or abandoned
at the cap (without one), at the first attempt and without a retry, the image rejected with the reason. A thumbnail
host that resolves to no public address on this network (split-horizon DNS: a word on the network, not the image)
stops the walk at every delivery, the last one included, storing no selection (:class:`ThumbnailHostNotPublic`;
fixrev42 #5); after a few such walks in a row the crawl's fetch stage stops, its sites left queued (crawl43 #1).

Selections are per settings. The images root is shared by every campaign under a state root, so a
selection record says what made it: ``selection`` holds the site's coordinates and every
``[crawl.fetcher]`` setting (:func:`selection_settings`), ``selection_key`` a digest of them
(:func:`selection_key`). It is stored twice: under the images root as ``<site>/images-<key>.json``
(:func:`selection_path`; another campaign with the same settings reuses it without a request), and in the
campaign's own state folder as ``<state_dir>/image_selection/<site>.json`` (:func:`campaign_selections`:
what the campaign's tables and summary read). A campaign whose settings differ makes its own selection; a
thumbnail already on disk is read, never downloaded or written again, so no file another campaign's tables
point at changes. Crawls before this version wrote ``<site>/images.json`` (:data:`METADATA_FILE`), with no
settings: it is never reused for a new selection nor rewritten, and is read only as the record of a site
that such a crawl audited (:func:`campaign_selections`).
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from PIL import Image, ImageStat

from geoagent.clients.mapillary import EARLIEST_CAPTURE_MS, MapillaryImage, ThumbnailUnavailable, read_captured_at
from geoagent.crawl.settings import FetcherSettings
from geoagent.geo import haversine_km
from geoagent.paths import safe_image_id, safe_name

#: a site's selection record as crawls before this version wrote it (``<images_root>/<site>/images.json``,
#: without the settings that made it); read only for sites those crawls audited (:func:`campaign_selections`)
METADATA_FILE = "images.json"
#: the campaign's own selection records: ``<state_dir>/image_selection/<site>.json``
SELECTION_DIR = "image_selection"
#: bumped when the walk or its filters change in a way that changes which images a setting keeps (2, 2026-12-01:
#: fisheye frames, and any other ``camera_type`` than ``perspective``, are skipped; version 1 kept them)
SELECTION_VERSION = 2
#: the start of the rejection reason of an image whose ``camera_type`` is not ``perspective`` (e.g. fisheye)
NOT_PERSPECTIVE = "not a perspective camera"
#: the start of the rejection reason of an image captured before ``[crawl.fetcher] captured_after`` (or at an unknown
#: time while it is set)
CAPTURED_BEFORE = "captured before captured_after"


#: the shortest edge (px) of a thumbnail worth keeping: Mapillary's smallest thumbnail is 256 px wide
#: (``thumb_256_url``), the sandbox renders 64; a narrower image is a placeholder or a tracking pixel, no photo
MIN_THUMB_EDGE_PX = 16


#: the nominal edge (px) of each Mapillary thumbnail field: the number in its name is the thumbnail's width (Mapillary
#: Graph API v4, api-notes section 6); ``thumb_original_url`` is the camera's own size, with no nominal edge
THUMB_NOMINAL_EDGE_PX = {"thumb_256_url": 256, "thumb_1024_url": 1024, "thumb_2048_url": 2048}
#: a thumbnail of a field with a nominal edge N is refused undecoded above (OVERSIZE_EDGE_FACTOR * N)^2 pixels (16 N^2:
#: 16.8 megapixels for ``thumb_1024_url``): N wide, a real one holds N x 2N at most (a 1:2 portrait frame), so only a
#: CDN answer that is no such thumbnail is refused, never a real one; its decoding would cost up to Pillow's bomb
#: limit, 89 megapixels (about 270 MB as RGB; security42 #3)
OVERSIZE_EDGE_FACTOR = 4


def size_problem(size: tuple[int, int], thumb_field: str | None = None) -> str | None:
    """Why an image of ``size`` = ``(width, height)`` px is no usable thumbnail, or None: an edge under
    :data:`MIN_THUMB_EDGE_PX`; more pixels than a thumbnail of ``thumb_field`` can have (16 times its nominal edge
    squared: :data:`OVERSIZE_EDGE_FACTOR`, :data:`THUMB_NOMINAL_EDGE_PX`; no such bound for ``thumb_original_url``,
    an unknown field or None); or more pixels than Pillow's decompression-bomb limit (``Image.MAX_IMAGE_PIXELS``,
    about 89 megapixels; Pillow only warns up to twice that, and a JPEG of that size can be a few hundred KB)."""
    w, h = size
    if min(w, h) < MIN_THUMB_EDGE_PX:
        return f"not a usable image: too small ({w}x{h} px, an edge under {MIN_THUMB_EDGE_PX} px)"
    nominal = THUMB_NOMINAL_EDGE_PX.get(thumb_field or "")
    if nominal is not None and w * h > (OVERSIZE_EDGE_FACTOR * nominal) ** 2:
        return (f"not a usable image: too large for a {thumb_field} thumbnail ({w}x{h} px, over "
                f"{(OVERSIZE_EDGE_FACTOR * nominal) ** 2} pixels: {OVERSIZE_EDGE_FACTOR ** 2} times a {nominal} x "
                f"{nominal} square; not decoded)")
    limit = Image.MAX_IMAGE_PIXELS
    if limit is not None and w * h > limit:
        return f"not a usable image: too large ({w}x{h} px, over {limit} pixels: a decompression bomb)"
    return None


#: rows at the bottom of a decoded JPEG checked for the decoder's filler (:func:`truncation_problem`): one MCU row
#: of an image without vertical chroma subsampling
FILLER_ROWS = 8
#: what libjpeg decodes where a baseline scan's data ran out: every coefficient zero, so every sample is the level
#: shift, 128, in Y, Cb and Cr alike: RGB (128, 128, 128)
FILLER_RGB = ((128, 128), (128, 128), (128, 128))


def truncation_problem(im: "Image.Image") -> str | None:
    """Why a decoded JPEG's scan data looks cut short, or None.

    A body cut short that still ends in the end-of-image marker FF D9 passes the "complete JPEG" check
    (:func:`geoagent.clients.mapillary._jpeg_body`), and Pillow decodes it without an error: libjpeg only warns
    ("Premature end of JPEG file") and fills the rest of the frame with mid grey, which lifted a dark frame (mean
    59.5) over the daylight filter (106.6; break34 crawl #2). The filler is exact: the bottom :data:`FILLER_ROWS` rows all RGB (128, 128, 128), which no
    camera frame is. ``im``: a loaded Pillow image; other formats than JPEG are not checked."""
    if im.format != "JPEG" or im.height < FILLER_ROWS:
        return None
    band = im.crop((0, im.height - FILLER_ROWS, im.width, im.height)).convert("RGB")
    if band.getextrema() == FILLER_RGB:
        return (f"scan data cut short: the bottom {FILLER_ROWS} rows are the decoder's uniform (128, 128, 128) "
                "filler (a JPEG body cut short that still ends in FF D9)")
    return None


def mean_brightness(jpeg: bytes, size_px: int = 32, thumb_field: str | None = None) -> float:
    """Mean grey level (0-255) of a ``size_px`` x ``size_px`` greyscale copy of the image.

    Raises
    ------
    ValueError
        When the bytes are not a readable image, its size (read from the header, before any decoding) is no
        thumbnail's, of ``thumb_field`` when given (:func:`size_problem`), or its scan data was cut short
        (:func:`truncation_problem`).
    """
    try:
        with warnings.catch_warnings():  # above the bomb limit: refused below, before decoding
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(jpeg))
        with im:
            problem = size_problem(im.size, thumb_field)
            if problem is None:
                im.load()
                problem = truncation_problem(im)
            if problem is None:
                grey = im.convert("L").resize((size_px, size_px), Image.Resampling.BILINEAR)
    except Exception as e:  # PIL raises several types for bad data
        raise ValueError(f"not a readable image: {type(e).__name__}: {e}") from None
    if problem is not None:
        raise ValueError(problem)
    return float(ImageStat.Stat(grey).mean[0])


def dhash64(jpeg: bytes) -> int:
    """64-bit difference hash (9x8 greyscale, horizontal gradients): near-identical frames differ in few bits."""
    with Image.open(io.BytesIO(jpeg)) as im:
        g = im.convert("L").resize((9, 8), Image.Resampling.BILINEAR)
        px = list(g.tobytes())
    bits = 0
    for y in range(8):
        for x in range(8):
            bits = (bits << 1) | (1 if px[y * 9 + x] > px[y * 9 + x + 1] else 0)
    return bits


def hamming(a: int, b: int) -> int:
    return (a ^ b).bit_count()


def site_dir(images_root: str | Path, site: str) -> Path:
    return Path(images_root) / safe_name(site, what="site id")


#: the thumbnail field whose files lie directly in the site's folder (the ``[crawl.fetcher] thumb_field`` default)
DEFAULT_THUMB_FIELD = FetcherSettings.model_fields["thumb_field"].default


def image_path(images_root: str | Path, site: str, image_id: str, thumb_field: str | None = None) -> Path:
    """Where the thumbnail of ``image_id`` from ``thumb_field`` lies, all parts validated:
    ``<images_root>/<site>/<image_id>.jpg`` for the default field (``thumb_1024_url``, or None), else
    ``<images_root>/<site>/<field without _url>/<image_id>.jpg`` (e.g. ``thumb_256/``), so thumbnails of one image
    at different sizes (crawls with different ``thumb_field`` on one images root) never take each other's place.

    Raises
    ------
    ValueError
        An unsafe site id, image id or field name.
    """
    folder = site_dir(images_root, site)
    if thumb_field is not None and thumb_field != DEFAULT_THUMB_FIELD:
        folder = folder / safe_name(thumb_field.removesuffix("_url"), what="thumb_field")
    return folder / f"{safe_image_id(image_id)}.jpg"


def kept_image_path(images_root: str | Path, site: str, kept: dict[str, Any]) -> Path:
    """The file of one kept image of a selection record: its ``path`` (relative to ``images_root``, as the fetcher
    wrote it: ``<site>/<image_id>.jpg`` or ``<site>/<field>/<image_id>.jpg``, :func:`image_path`), else (no
    ``path``, or one of another form, e.g. an older record's) ``<site>/<image_id>.jpg``.

    Raises
    ------
    ValueError, KeyError
        An unsafe site or image id; no ``image_id``.
    """
    iid = safe_image_id(str(kept["image_id"]))
    parts = str(kept.get("path") or "").split("/")
    if len(parts) == 3 and parts[0] == safe_name(site, what="site id") and parts[2] == f"{iid}.jpg":
        try:
            return Path(images_root).joinpath(parts[0], safe_name(parts[1], what="thumb_field folder"), parts[2])
        except ValueError:
            pass  # not a folder image_path makes: the record's own form is not ours
    return image_path(images_root, site, iid)


def _atomic_write(path: Path, data: bytes) -> None:
    """Write and fsync a temporary file of this call's own, then rename it over ``path``."""
    from geoagent.files import atomic_open

    with atomic_open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def too_close(img: MapillaryImage, kept: list[dict[str, Any]], min_sep_m: float) -> str | None:
    """Id of a kept image within ``min_sep_m`` of ``img`` (None if it is far enough from all)."""
    for k in kept:
        if haversine_km(img.lat, img.lon, k["lat"], k["lon"]) * 1000.0 < min_sep_m:
            return k["image_id"]
    return None


def selection_settings(site: dict[str, Any], settings: FetcherSettings) -> dict[str, Any]:
    """Everything that decides which images a site gets: the walk's version, the site's coordinates
    (degrees, as floats) and every ``[crawl.fetcher]`` setting (``radius_m``, ``min_separation_m``,
    ``max_images_per_site``, ``min_brightness``, ``grey_size_px``, ``thumb_field``, ``dedupe_hamming_max``, and
    ``max_thumb_bytes`` and ``captured_after`` when set: left out at their default, so selections made before the
    keys existed keep their key; a change of either is another selection).

    Raises
    ------
    KeyError, TypeError, ValueError
        When ``site`` has no usable ``lat``/``lon``.
    """
    fetcher = settings.model_dump(mode="json")
    for key in ("max_thumb_bytes", "captured_after"):  # unset: absent, so earlier selections keep their key
        if fetcher.get(key) is None:
            fetcher.pop(key, None)
    return {"version": SELECTION_VERSION, "lat": float(site["lat"]), "lon": float(site["lon"]), "fetcher": fetcher}


def selection_key(selection: dict[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``selection`` (:func:`selection_settings`) as canonical JSON (sorted
    keys): equal settings give equal keys, any differing setting a different key."""
    return hashlib.sha256(orjson.dumps(selection, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def selection_path(images_root: str | Path, site: str, key: str) -> Path:
    """``<images_root>/<site>/images-<key>.json``: the shared selection record of the settings with ``key``."""
    if not (len(key) == 16 and all(ch in "0123456789abcdef" for ch in key)):
        raise ValueError(f"selection key must be 16 lowercase hex digits, got {key!r}")
    return site_dir(images_root, site) / f"images-{key}.json"


#: the end of the ``captured_at_note`` of a capture time corrected in a selection record stored before the rule
#: of :func:`geoagent.clients.mapillary.read_captured_at` (:func:`correct_stored_captured_at`)
STORED_BEFORE_RULE = ("corrected when read: the selection was stored before this rule (2026-12-02), which kept the "
                      "value as milliseconds")


def correct_stored_captured_at(rec: Any) -> dict[str, list[str]]:
    """Apply the ``captured_at`` rule (:func:`geoagent.clients.mapillary.read_captured_at`: a value plausible only as
    seconds is read as seconds, any other time before 1990 is unknown) to the images of a selection record ``rec``
    stored before the rule, in place; returns the image ids changed, ``{"converted_from_seconds": [...],
    "unknown": [...]}`` (in record order, kept then rejected; both empty when nothing was changed).

    Such a value is recognised exactly: before the rule the client stored the value sent, as it came, whenever it
    lay between 0 and now as milliseconds; since the rule no stored ``captured_at_ms`` lies before 1990-01-01
    (:data:`~geoagent.clients.mapillary.EARLIEST_CAPTURE_MS`: the value was read as seconds, times 1000, or is None,
    each with a ``captured_at_note``). So an integer ``captured_at_ms`` below it without a note is the value sent,
    and the rule gives what a fetch now would: ``captured_at_ms`` is replaced and ``captured_at_note`` says the
    decision, ending with :data:`STORED_BEFORE_RULE`. Entries of another shape are left as they are."""
    out: dict[str, list[str]] = {"converted_from_seconds": [], "unknown": []}
    if not isinstance(rec, dict):
        return out
    for part in ("kept", "rejected"):
        entries = rec.get(part)
        for m in entries if isinstance(entries, list) else []:
            if not isinstance(m, dict) or m.get("captured_at_note"):
                continue
            v = m.get("captured_at_ms")
            if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v < EARLIEST_CAPTURE_MS:
                continue
            ms, note = read_captured_at(v)
            if note is None:  # not reachable for such a value; left as it is rather than guessed at
                continue
            m["captured_at_ms"] = ms
            m["captured_at_note"] = f"{note}; {STORED_BEFORE_RULE}"
            out["converted_from_seconds" if ms is not None else "unknown"].append(str(m.get("image_id")))
    return out


def captured_at_correction_note(fixed: dict[str, list[str]]) -> dict[str, Any]:
    """The decision-log record (``event`` ``"mapillary_captured_at"``, ``stored`` true) of the capture times of one
    site's stored selection corrected by :func:`correct_stored_captured_at` (``fixed``: its return value)."""
    return {"event": "mapillary_captured_at", "stored": True,
            "converted_from_seconds": list(fixed["converted_from_seconds"]), "unknown": list(fixed["unknown"]),
            "reason": (f"selection stored before the captured_at rule (epoch milliseconds, Mapillary API v4): "
                       f"{len(fixed['converted_from_seconds'])} image(s) kept a value plausible only as seconds as "
                       f"milliseconds (a time in 1970), now read as seconds; {len(fixed['unknown'])} a time before "
                       "1990 either way, now unknown; each image's captured_at_note in the selection record")}


def correct_campaign_selections(state_dir: str | Path, *,
                                before_writing: Any = None) -> dict[str, dict[str, list[str]]]:
    """Rewrite (atomically) each of the campaign's own selection records (``<state_dir>/image_selection/<site>.json``)
    that holds capture times stored before the ``captured_at`` rule, corrected (:func:`correct_stored_captured_at`);
    returns ``{site: the image ids changed}`` for the records rewritten (``{}`` when there were none). Records of
    other campaigns in the shared images root are not rewritten: every reader corrects them
    (:func:`load_selection`, :func:`campaign_selections`). ``before_writing`` (a callable, optional) gets that
    mapping before any record is rewritten (the crawl logs the decisions first: a kill before the rewrite repeats
    them at the next run, never leaves a rewrite unlogged).

    Raises
    ------
    OSError
        A record could not be rewritten."""
    own = Path(state_dir) / SELECTION_DIR
    todo: list[tuple[Path, dict[str, Any]]] = []
    out: dict[str, dict[str, list[str]]] = {}
    for p in sorted(own.glob("*.json")) if own.is_dir() else []:
        if (got := read_corrected_selection(p)) is not None:
            todo.append((p, got[0]))
            out[p.stem] = got[1]
    if out and before_writing is not None:
        before_writing(out)
    for p, rec in todo:
        _atomic_write(p, orjson.dumps(rec, option=orjson.OPT_INDENT_2))
    return out


def read_corrected_selection(path: Path) -> tuple[dict[str, Any], dict[str, list[str]]] | None:
    """The selection record at ``path`` corrected (:func:`correct_stored_captured_at`; the file is not rewritten) and
    the image ids changed, or None when nothing was (no file, an unreadable one, or nothing to correct)."""
    try:
        rec = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    fixed = correct_stored_captured_at(rec)
    return (rec, fixed) if fixed["converted_from_seconds"] or fixed["unknown"] else None


def load_selection(path: str | Path, key: str, *, images_root: str | Path | None = None,
                   corrected: list[dict[str, list[str]]] | None = None) -> dict[str, Any] | None:
    """The selection record at ``path`` if it was made with the settings of ``key`` (its ``selection_key``),
    else None (missing, unreadable, made with other settings, or by a version that recorded none). With
    ``images_root``, also None when a kept image's thumbnail is not on disk there (the selection is redone,
    downloading what is missing). Capture times stored before the ``captured_at`` rule come back corrected
    (:func:`correct_stored_captured_at`; the file is not rewritten here), and ``corrected`` (a list, when given)
    gets the image ids changed when there were any."""
    try:
        rec = orjson.loads(Path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(rec, dict) or rec.get("selection_key") != key or not isinstance(rec.get("kept"), list):
        return None
    fixed = correct_stored_captured_at(rec)
    if corrected is not None and (fixed["converted_from_seconds"] or fixed["unknown"]):
        corrected.append(fixed)
    if images_root is not None:
        for k in rec["kept"]:
            try:
                if not kept_image_path(images_root, str(rec["site"]), k).is_file():
                    return None
            except (KeyError, TypeError, ValueError):
                return None
    return rec


def campaign_selections(state_dir: str | Path, images_root: str | Path) -> dict[str, dict[str, Any]]:
    """site -> the selection record this campaign's images come from, sorted by site.

    The campaign's own records (``<state_dir>/image_selection/<site>.json``); for a site without one that the
    campaign audited (``<state_dir>/image_audit/<site>/``: a crawl before this version), the site's
    ``images.json`` in the images root, as those crawls read it. Another campaign's selections in the shared
    images root are never counted. Capture times stored before the ``captured_at`` rule come back corrected
    (:func:`correct_stored_captured_at`; the files are not rewritten here: :func:`correct_campaign_selections`)."""
    state_dir, images_root = Path(state_dir), Path(images_root)
    out: dict[str, dict[str, Any]] = {}

    def load(path: Path) -> Any:
        try:
            return orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return None

    own = state_dir / SELECTION_DIR
    for p in sorted(own.glob("*.json")) if own.is_dir() else []:
        rec = load(p)
        if isinstance(rec, dict):
            correct_stored_captured_at(rec)
            out[p.stem] = rec
    audited = state_dir / "image_audit"
    for d in sorted(audited.iterdir()) if audited.is_dir() else []:
        if d.is_dir() and d.name not in out:
            rec = load(images_root / d.name / METADATA_FILE)
            if isinstance(rec, dict):
                correct_stored_captured_at(rec)
                out[d.name] = rec
    return dict(sorted(out.items()))


class ThumbnailTransferFailed(Exception):
    """A thumbnail transfer of the walk failed in a way that says nothing of the image
    (:attr:`~geoagent.clients.mapillary.ThumbnailUnavailable.transient`: an HTML page served with 200, a body cut
    short, the CDN refusing a fresh URL with a 4xx), and the walk was asked to be retried for it
    (:func:`fetch_site_images` with ``retry_transient``): the walk stopped there and stored no selection record, so
    the next walk of the site asks again, reading every thumbnail (and rejection record) this one left on disk
    (crawl40 #3: the image was rejected for good, another image kept in its place, and the selection reused ever
    after). Not a :class:`~geoagent.runtime.stage.PermanentFailure`: the site's task is delivered again.

    ``site``, ``image_id``; ``reason``: the transfer's failure; ``downloads``: thumbnails the stopped walk
    downloaded (on disk now)."""

    def __init__(self, site: str, image_id: str, reason: str, downloads: int) -> None:
        self.site, self.image_id, self.reason, self.downloads = site, image_id, reason, downloads
        super().__init__(f"site {site}: the thumbnail of image {image_id} could not be had this time ({reason}); a "
                         "failed transfer is no verdict on the image: the site is walked again, reading the thumbnails "
                         "already on disk")

    def __reduce__(self) -> Any:  # with its fields: errors cross processes pickled (tests/test_errors_pickle.py)
        return (type(self), (self.site, self.image_id, self.reason, self.downloads))


class ThumbnailHostNotPublic(ThumbnailTransferFailed):
    """A thumbnail's host (or its redirect's) resolved to no public address on this network, so it was not connected
    (:class:`~geoagent.clients.mapillary.ThumbnailUnavailable` ``kind`` ``"not_public"``; security42 #1). What a CDN's
    name resolves to depends on the network's DNS (split-horizon DNS, a resolver that rewrites answers), not on the
    image, so it is no verdict on the image: the walk stops there at EVERY delivery, the site's last included, and
    stores no selection (fixrev42 #5: it was rejected as "refused" and the selection without it stored for good).
    The site's task fails its delivery and is delivered again. The fetch stage counts such failures per host
    (:class:`geoagent.crawl.not_public.NotPublicHosts`, which sets ``streak`` and ``streak_id``): once the stage
    runner's unreachable-host threshold of them came in a row (5), the stage stops asking the Graph API for sites
    whose thumbnails it could not fetch, leaves its sites queued and gives back the attempts those failures counted
    (:mod:`geoagent.runtime.worker`, "Unreachable hosts"; crawl43 #1). ``host``: the refused host name (None when
    not known).

    To that runner the exception reads as an unreachable request (the attributes of
    :class:`~geoagent.runtime.http.RetriesExhausted` it looks at: ``unreachable``, ``host``, ``streak``,
    ``streak_id``, ``last``) once counted; before that (``streak`` 0) as an ordinary failure."""

    def __init__(self, site: str, image_id: str, reason: str, downloads: int, host: str | None = None,
                 streak: int = 0, streak_id: int = 0) -> None:
        super().__init__(site, image_id, reason, downloads)
        self.host = host
        #: this failure's place in the host's run of such failures, and that run's id (set by the fetch stage;
        #: 0: not counted)
        self.streak, self.streak_id = streak, streak_id
        self.args = (f"site {site}: thumbnail host {host or '(unknown)'} not connected ({reason}); what the name "
                     "resolves to is this network's DNS answer (split-horizon DNS?), not the image's fault: no "
                     "selection stored, the site is delivered again, and the fetch stage stops after a few such "
                     "failures in a row, its sites left queued: re-run once the name resolves to a public address",)

    @property
    def unreachable(self) -> bool:
        """Whether the fetch stage counted it in its host's run (the stage runner's breaker then counts it too)."""
        return self.streak > 0 and bool(self.host)

    @property
    def last(self) -> str:
        """The refusal, as :attr:`~geoagent.runtime.http.RetriesExhausted.last` gives the last failure: its words
        (``resolves to no public address``) are what :func:`geoagent.runtime.worker.unreachable_cause` reads."""
        return self.reason

    def __reduce__(self) -> Any:
        return (type(self), (self.site, self.image_id, self.reason, self.downloads, self.host, self.streak,
                             self.streak_id))


@dataclass
class FetchResult:
    """Kept images (metadata dicts with ``path``, ``brightness``, ``dhash``) and rejections with reasons;
    ``selection`` and ``selection_key``: the settings that made it (:func:`selection_settings`)."""

    site: str
    kept: list[dict[str, Any]] = field(default_factory=list)
    rejected: list[dict[str, Any]] = field(default_factory=list)
    downloads: int = 0
    selection: dict[str, Any] = field(default_factory=dict)
    selection_key: str = ""
    #: Mapillary search boxes still full at the minimum box size (:class:`geoagent.clients.mapillary.FullBox`
    #: records): the images found there were used, more may exist
    full_boxes: list[dict[str, Any]] = field(default_factory=list)
    #: rejections decided from an earlier walk's record (:func:`load_rejection`) instead of a download (not in
    #: the selection record: a fresh walk and a resumed one make the same record)
    rejections_reused: int = 0

    def to_json(self) -> dict[str, Any]:
        out = {"site": self.site, "kept": self.kept, "rejected": self.rejected, "downloads": self.downloads,
               "selection": self.selection, "selection_key": self.selection_key}
        if self.full_boxes:
            out["full_boxes"] = self.full_boxes
        return out


#: suffix of a rejected thumbnail's record, beside where its file would lie (:func:`rejection_path`)
REJECTION_SUFFIX = ".rejected.json"


def rejection_path(path: Path) -> Path:
    """``<site>/[<field>/]<image_id>.rejected.json``: the record of a downloaded thumbnail that was not kept (too
    dark, or a near-duplicate), beside the path ``path`` its file would have (:func:`image_path`)."""
    return path.with_name(path.stem + REJECTION_SUFFIX)


def record_rejection(path: Path, image_id: str, settings: FetcherSettings, brightness: float, dhash: int,
                     reason: str) -> None:
    """Write (atomically) the record of a downloaded thumbnail the walk did not keep, so a resume, or another
    campaign, does not download it again (:func:`load_rejection`).

    It holds the image id, the reason given (under the settings of that walk, ``min_brightness`` and
    ``dedupe_hamming_max``), and what decides it under any settings: the mean brightness (0-255, unrounded) of the
    ``grey_size_px`` grey copy and the 64-bit difference hash (16 hex digits), both functions of the thumbnail's
    bytes alone."""
    _atomic_write(rejection_path(path), orjson.dumps({
        "image_id": image_id, "thumb_field": settings.thumb_field, "reason": reason, "brightness": brightness,
        "grey_size_px": settings.grey_size_px, "dhash": f"{dhash:016x}",
        "settings": {"min_brightness": settings.min_brightness, "dedupe_hamming_max": settings.dedupe_hamming_max},
    }, option=orjson.OPT_INDENT_2))


def record_unreadable(path: Path, image_id: str, settings: FetcherSettings, reason: str) -> None:
    """Write (atomically) the record of a downloaded thumbnail whose bytes are not a readable image (a complete
    JPEG that PIL cannot decode; module doc), so a resume, or another campaign, rejects it without downloading it again
    (:func:`load_unreadable`): the image id, ``thumb_field``, ``"unreadable": true`` and the reason given."""
    _atomic_write(rejection_path(path), orjson.dumps({
        "image_id": image_id, "thumb_field": settings.thumb_field, "reason": reason, "unreadable": True,
    }, option=orjson.OPT_INDENT_2))


def load_unreadable(path: Path) -> str | None:
    """The recorded reason when the thumbnail that would lie at ``path`` was found unreadable
    (:func:`record_unreadable`), else None (no record, an unreadable record file, or a measured rejection)."""
    try:
        rec = orjson.loads(rejection_path(path).read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if not isinstance(rec, dict) or rec.get("unreadable") is not True or not isinstance(rec.get("reason"), str):
        return None
    return rec["reason"]


def load_rejection(path: Path, grey_size_px: int) -> tuple[float, int] | None:
    """``(brightness, dhash)`` recorded for the thumbnail that would lie at ``path`` (:func:`record_rejection`),
    or None: no record, an unreadable one, or one measured with another ``grey_size_px`` (its brightness is not
    this setting's: the thumbnail is downloaded and measured again)."""
    try:
        rec = orjson.loads(rejection_path(path).read_bytes())
        if int(rec["grey_size_px"]) != grey_size_px:
            return None
        return float(rec["brightness"]), int(str(rec["dhash"]), 16)
    except (OSError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None


def _rejection_reason(bright: float, h: int, kept: list[dict[str, Any]], hashes: list[int],
                      settings: FetcherSettings) -> dict[str, Any] | None:
    """The rejection entry (``reason``, and ``brightness`` for a dark one) of a measured thumbnail under
    ``settings`` and the images kept so far, or None when it is kept."""
    if bright < settings.min_brightness:
        return {"reason": f"too dark (mean {bright:.1f} < {settings.min_brightness:g})", "brightness": round(bright, 2)}
    dup = next((k for k, hk in zip(kept, hashes) if hamming(h, hk) <= settings.dedupe_hamming_max), None)
    if dup is not None:
        return {"reason": f"near-duplicate of {dup['image_id']}"}
    return None


async def fetch_site_images(site: dict[str, Any], mapillary: Any, settings: FetcherSettings,
                            images_root: str | Path, *, on_note: Any = None,
                            retry_transient: bool = False) -> FetchResult:
    """Fetch, filter and store the images of one site (see module docstring).

    Parameters
    ----------
    site : dict
        A ``sites.csv`` row (needs ``site``, ``lat``, ``lon``).
    mapillary : geoagent.clients.mapillary.MapillaryClient
    images_root : path
        Root folder; images go to ``<root>/<site>/<id>.jpg`` (:func:`image_path`: ``<site>/<field>/<id>.jpg``
        for a ``thumb_field`` other than the default; default root: ``state/images``), the selection
        record to ``<root>/<site>/images-<key>.json`` (:func:`selection_path`). A thumbnail already there is
        read, not downloaded, and never written over; one rejected before (too dark, near-duplicate) is decided
        from its record (:func:`load_rejection`), downloaded only when the current settings keep it.
    on_note : async callable, optional
        Receives a decision-log record (``event`` ``"mapillary_box_full"``) when a search box was still full at
        the minimum box size (the images found there are used; ``full_boxes`` in the record), and one (``event``
        ``"mapillary_captured_at"``, ``converted_from_seconds`` and ``unknown``: image ids) when images sent a
        ``captured_at`` that was not read as sent (:func:`geoagent.clients.mapillary.read_captured_at`), and one
        (``event`` ``"thumbnail_transfer_failed"``) for each image rejected for a failed transfer while
        ``retry_transient`` is False.
    retry_transient : bool
        True: a thumbnail whose transfer failed in a way that says nothing of the image
        (:attr:`~geoagent.clients.mapillary.ThumbnailUnavailable.transient`) stops the walk with
        :class:`ThumbnailTransferFailed`, no selection record written (the caller retries the site). False (the
        default; the crawl's last delivery of the site): the image is rejected with the reason and the walk goes on.

    Raises
    ------
    ThumbnailTransferFailed
        With ``retry_transient``, at the first transient thumbnail failure.
    ThumbnailHostNotPublic
        At the first thumbnail whose host resolved to no public address (``retry_transient`` or not): no
        selection stored.
    """
    sid = safe_name(str(site["site"]), what="site id")
    lat, lon = float(site["lat"]), float(site["lon"])
    sel = selection_settings(site, settings)
    res = FetchResult(sid, selection=sel, selection_key=selection_key(sel))
    full: list[Any] = []
    found = await mapillary.images_within(lat, lon, settings.radius_m, full_boxes=full,
                                          captured_after=settings.captured_after)
    if full:  # a box still full at the minimum size: its page is used, the site is not failed for it
        res.full_boxes = [b.to_json() for b in full]
        if on_note is not None:
            await on_note({"event": "mapillary_box_full", "n_found": len(found), "full_boxes": res.full_boxes,
                           "reason": (f"{len(full)} search box(es) still held the page limit at the minimum box "
                                      "size; the images found there were used, more may exist")})
    converted = [img.image_id for img, _ in found if img.captured_at_note and img.captured_at_ms is not None]
    unknown = [img.image_id for img, _ in found if img.captured_at_note and img.captured_at_ms is None]
    if (converted or unknown) and on_note is not None:
        await on_note({"event": "mapillary_captured_at", "converted_from_seconds": converted, "unknown": unknown,
                       "reason": (f"captured_at is epoch milliseconds (Mapillary API v4); {len(converted)} image(s) "
                                  "sent a value plausible only as seconds (read as seconds, times 1000), "
                                  f"{len(unknown)} a time before 1990 either way (unknown); each image's "
                                  "captured_at_note in the selection record")})
    hashes: list[int] = []
    since_ms = settings.captured_after_ms
    for img, d_m in found:
        if len(res.kept) >= settings.max_images_per_site:
            break
        meta = img.to_json() | {"dist_m": round(d_m, 1)}
        if since_ms is not None and (img.captured_at_ms is None or img.captured_at_ms < since_ms):
            # the search asked for start_captured_at already (unconfirmed for /images: api-notes section 6), so an
            # image the API sent all the same is left out here, never downloaded
            when = "at an unknown time" if img.captured_at_ms is None else "earlier"
            res.rejected.append(meta | {"reason": f"{CAPTURED_BEFORE} {settings.captured_after} (captured {when})"})
            continue
        if not img.perspective:
            res.rejected.append(meta | {"reason": "panorama"})
            continue
        if not img.perspective_frame:  # fisheye (or another camera that is not perspective): never downloaded
            res.rejected.append(meta | {"reason": f"{NOT_PERSPECTIVE} (camera_type {img.camera_type!r})"})
            continue
        near = too_close(img, res.kept, settings.min_separation_m)
        if near:
            res.rejected.append(meta | {"reason": f"within {settings.min_separation_m:g} m of {near}"})
            continue
        try:
            path = image_path(images_root, sid, img.image_id, settings.thumb_field)
        except ValueError as e:
            res.rejected.append(meta | {"reason": str(e)})
            continue
        jpeg: bytes | None = None
        measured = None
        if path.is_file():  # already fetched in an earlier (interrupted) run, or by another campaign
            jpeg = path.read_bytes()
        elif (unreadable := load_unreadable(path)) is not None:  # its bytes were no image: the same under any settings
            res.rejected.append(meta | {"reason": unreadable})
            res.rejections_reused += 1
            continue
        else:  # rejected by an earlier run: its recorded measurements decide again, no download
            measured = load_rejection(path, settings.grey_size_px)
        if measured is not None:
            bright, h = measured
            reason = _rejection_reason(bright, h, res.kept, hashes, settings)
            if reason is not None:
                res.rejected.append(meta | reason)
                res.rejections_reused += 1
                continue
            # kept under the current settings (e.g. a lower min_brightness): its file is needed now
        if jpeg is None:
            try:
                jpeg = await mapillary.download_thumbnail(img.image_id, settings.thumb_field,
                                                          max_bytes=settings.thumb_max_bytes)
            except ThumbnailUnavailable as e:  # this image only (no URL, gone, refused, not a JPEG, too large): skip it
                # no record, not even for "not_jpeg": a body that is no complete JPEG (an HTML page served with 200,
                # a transfer cut short) says nothing about the image, so the next walk asks again (module doc). Nor
                # may this walk's selection stand on it (crawl40 #3: stored, it was reused for good): while the caller
                # can retry the site, the walk stops here unstored
                if e.kind == "not_public":  # the network's DNS answer, not the image: never stored (fixrev42 #5)
                    raise ThumbnailHostNotPublic(sid, img.image_id, str(e), res.downloads,
                                                 getattr(e, "host", None)) from None
                if retry_transient and e.transient:
                    raise ThumbnailTransferFailed(sid, img.image_id, str(e), res.downloads) from None
                res.rejected.append(meta | {"reason": f"no thumbnail: {e}"})
                if e.transient and on_note is not None:
                    await on_note({"event": "thumbnail_transfer_failed", "image_id": img.image_id,
                                   "reason": (f"no thumbnail: {e}; a failed transfer, not a verdict on the image, "
                                              "rejected at the site's last delivery ([queue] max_attempts)")})
                continue
            res.downloads += 1
        try:
            bright = mean_brightness(jpeg, settings.grey_size_px, settings.thumb_field)  # size checked first
            h = dhash64(jpeg)
        except MemoryError:  # the machine, not the image: no verdict, no record (the next walk measures it again)
            raise
        except Exception as e:  # noqa: BLE001 - PIL raises several types for bad data (dhash64 as mean_brightness)
            reason = str(e) if isinstance(e, ValueError) else f"not a readable image: {type(e).__name__}: {e}"
            res.rejected.append(meta | {"reason": reason})
            if not path.is_file():  # downloaded just now: a resume reads the record instead of downloading again
                record_unreadable(path, img.image_id, settings, reason)
            continue
        reason = _rejection_reason(bright, h, res.kept, hashes, settings)
        if reason is not None:
            res.rejected.append(meta | reason)
            if not path.is_file():  # a resume (or another campaign) reads the measurements instead of downloading
                record_rejection(path, img.image_id, settings, bright, h, reason["reason"])
            continue
        if not path.is_file():
            _atomic_write(path, jpeg)
        hashes.append(h)
        res.kept.append(meta | {"path": path.relative_to(Path(images_root)).as_posix(), "brightness": round(bright, 2), "dhash": f"{h:016x}"})
    _atomic_write(selection_path(images_root, sid, res.selection_key), orjson.dumps(res.to_json(), option=orjson.OPT_INDENT_2))
    return res
