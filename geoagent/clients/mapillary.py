"""Mapillary Graph API v4 client: bbox image search with quadrant splitting, single images, thumbnails.

Sources: Mapillary API documentation and FAQ (https://www.mapillary.com/developer/api-documentation),
the official mapillary-python-sdk field list.

* ``GET {base}/images?fields=...&bbox=west,south,east,north&limit=N`` (longitude first). ``fields`` is
  always explicit: only the listed fields come back. ``limit`` is at most 2,000 and bbox search does not
  paginate, so a response holding ``limit`` images may be truncated: the box is split into four
  quadrants and each is searched again; the same happens when a dense box fails with a 5xx (after the
  HTTP layer's retries). Boxes stop splitting at ``min_box_deg``: a minimal box that still FAILS raises
  :class:`MapillaryError`; one still FULL (``limit`` images within ~11 m: a parked dashcam's thousands of frames)
  keeps the page it got, so the search's count is a lower bound ("at least N", which is all a coverage check
  needs), and the box is reported (:class:`FullBox`, ``full_boxes=``) for the caller's decision log instead
  of failing the city or site on every resume.
* The token goes in ``Authorization: OAuth <token>`` (never in the URL, so it is never logged).
* Errors are Graph-style ``{"error": {"message", "type", "code", "error_subcode", "fbtrace_id"}}``,
  possibly inside an HTTP 200: checked before ``data`` (:func:`graph_error_of`), for searches and single images
  alike (:meth:`MapillaryClient._graph_get`). An expired or revoked token (code 190, HTTP 400 or 401) is the
  token's refusal (:meth:`MapillaryClient.token_refused`); throttling (:data:`RATE_LIMIT_CODES`, at any HTTP
  status) is retried with backoff and, when it persists, raised as a retryable
  :class:`~geoagent.runtime.http.RetriesExhausted`, never as a deleted image or a refused token.
* ``captured_at`` is milliseconds since the epoch (a value that is plausible only as seconds is read as seconds,
  with a note: :func:`read_captured_at`); geometries are GeoJSON ``[lon, lat]``.
* ``thumb_*_url`` are signed CDN URLs that expire: fetch them per image right before downloading
  (:meth:`MapillaryClient.fresh_thumb_url`) and download at once.

Policy (``mapillary``/``thumbnails`` defaults in the crawl settings): the search API allows 10,000
requests per minute per app; we stay far below (20/s, 8 in flight).
"""

from __future__ import annotations

import math
import random
import re
import time
from dataclasses import dataclass
from typing import Any

import orjson

from geoagent.clients.overpass import _json_body, host_of
from geoagent import constants as C
from geoagent.geo import haversine_km
from geoagent.paths import safe_image_id
from geoagent.runtime.http import AddressNotPublic, HostPolicy, PermanentHTTPError, RetriesExhausted, RetriesStopped

MAX_LIMIT = 2000
#: default cap on one thumbnail download's body, bytes, per ``thumb_*_url`` field (``[crawl.fetcher]
#: max_thumb_bytes`` overrides it). Sizes: Mapillary API v4 image fields (https://www.mapillary.com/developer/
#: api-documentation: ``thumb_256_url``, ``thumb_1024_url``, ``thumb_2048_url``: "URL to the 256px / 1024px / 2048px
#: wide thumbnail"; api-notes section 6). A JPEG is smaller than its raw pixels, so the raw RGB size of a portrait
#: twice as tall as wide (w x 2w px, 3 bytes each: 384 KiB, 6 MiB, 24 MiB) rounded up to a power of two bounds any
#: such thumbnail with room to spare (a 1024-px street photo is typically 100-400 KB). ``thumb_original_url`` has
#: no fixed size: the HTTP layer's default (64 MiB, :class:`geoagent.runtime.http.HostPolicy` ``max_body_bytes``).
THUMB_MAX_BYTES: dict[str, int] = {"thumb_256_url": 1 << 20, "thumb_1024_url": 8 << 20, "thumb_2048_url": 32 << 20,
                                   "thumb_original_url": 64 << 20}
SEARCH_FIELDS = ("id", "computed_geometry", "geometry", "captured_at", "is_pano", "camera_type", "compass_angle")
PANO_CAMERA_TYPES = frozenset({"equirectangular", "spherical"})


class MapillaryError(RuntimeError):
    """A Mapillary request failed, or answered an error object / unexpected shape. ``code`` is the Graph error
    code when there was one (190: invalid OAuth access token), ``subcode`` its ``error_subcode``, ``status`` the
    HTTP status of an error answer."""

    def __init__(self, message: str, *, code: int | None = None, status: int | None = None,
                 subcode: int | None = None) -> None:
        self.code = code
        self.status = status
        self.subcode = subcode
        super().__init__(message)


#: Graph API error code of an invalid, expired or revoked OAuth access token
#: (https://developers.facebook.com/docs/graph-api/guides/error-handling, "OAuthException" code 190)
TOKEN_ERROR_CODE = 190

#: Graph API error codes of throttling: wait and retry. Confirmed for the Facebook Graph API (its "Handling Errors"
#: page: 4 "API Too Many Calls", 17 "API User Too Many Calls", 341 "Application limit reached", each "temporary
#: ... wait and retry"; 32: the Pages API's page-level limit, Facebook developer blog 2016-06-16); 613 ("Calls to
#: this api have exceeded the rate limit") only from third-party reports. NOT confirmed for graph.mapillary.com:
#: which of them it sends, and with which HTTP status (400, 403 and 429 are all seen from Graph APIs; api-notes
#: section 6 lists "429 / Graph error codes (unconfirmed)"); a mapillary-js issue (#456, 2021) reports code 4's
#: text, "Application request limit reached", from API v4. Any of these codes at any status is retried.
RATE_LIMIT_CODES = frozenset({4, 17, 32, 341, 613})


@dataclass(frozen=True, slots=True)
class GraphError:
    """The ``error`` object of a Graph-style answer: ``code``, ``subcode`` (``error_subcode``), ``message``."""

    code: int | None
    subcode: int | None
    message: str

    @property
    def throttled(self) -> bool:
        """A rate limit (:data:`RATE_LIMIT_CODES`): temporary, retried with backoff."""
        return self.code in RATE_LIMIT_CODES


def _int_or_none(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def graph_error_of(body: str | bytes | None) -> GraphError | None:
    """The Graph error object of an answer's body (``{"error": {...}}``), or None when the body is not one
    (not JSON, cut short, no ``error`` object)."""
    if not body:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    err = data.get("error") if isinstance(data, dict) else None
    if not isinstance(err, dict):
        return None
    return GraphError(_int_or_none(err.get("code")), _int_or_none(err.get("error_subcode")), str(err.get("message") or ""))


class ThumbnailUnavailable(MapillaryError):
    """One image's thumbnail cannot be had: no ``thumb_*_url`` (null), the image is gone or may not be loaded,
    the CDN refuses the URL even when freshly issued (403/404/410), or the bytes are not a JPEG. A per-image
    condition, not an API outage: callers skip the image (``status`` is the HTTP status when there was one).

    ``kind`` says which: ``"no_url"``, ``"gone"``, ``"not_permitted"``, ``"refused"`` (the CDN),
    ``"not_jpeg"`` (the downloaded bytes are not a JPEG), ``"too_large"`` (the body passed the download's cap,
    :data:`THUMB_MAX_BYTES`) or ``"not_public"`` (the thumbnail's host, or a redirect's, resolved to no public
    address on THIS network: not connected, security42 #1; a word on the network's DNS, not on the image, fixrev42
    #5). ``host`` names the refused host for ``"not_public"`` (else None)."""

    def __init__(self, message: str, *, status: int | None = None, kind: str | None = None,
                 host: str | None = None) -> None:
        self.kind = kind
        self.host = host
        super().__init__(message, status=status)

    @property
    def transient(self) -> bool:
        """Whether this says nothing of the image, only of this transfer: ``"not_jpeg"`` (an HTML page served with
        200, a body cut short), ``"refused"`` with an HTTP error status (the CDN's 403/404/410 on a freshly issued
        URL too, or another 4xx): asked again later, the CDN may well serve the thumbnail (crawl40 #3), and
        ``"not_public"`` (what the CDN's name resolves to depends on the network's DNS, split-horizon DNS among
        others: fixrev42 #5; the fetcher stops the site's walk for it, :mod:`geoagent.crawl.fetcher`). The others are
        verdicts on the image: ``"no_url"``, ``"gone"`` and ``"not_permitted"`` are the Graph API's word on it,
        ``"too_large"`` the same bytes again, and a ``"refused"`` redirect (to a local or private address, another
        scheme, or without end) the CDN's answer that our rule refuses."""
        return (self.kind in ("not_jpeg", "not_public")
                or (self.kind == "refused" and self.status is not None and self.status >= 400))


@dataclass(frozen=True, slots=True)
class MapillaryImage:
    """Metadata of one image. ``lat``/``lon`` are the camera position (computed geometry when present,
    else the raw GPS geometry), degrees; ``captured_at_ms`` epoch milliseconds; ``compass_angle`` degrees;
    ``captured_at_note`` the decision taken on the sent ``captured_at`` when it was not read as sent (seconds
    converted, or a time before 1990 taken as unknown: :func:`read_captured_at`), else None."""

    image_id: str
    lat: float
    lon: float
    captured_at_ms: int | None
    is_pano: bool
    camera_type: str | None
    compass_angle: float | None
    thumb_url: str | None = None
    captured_at_note: str | None = None

    @property
    def perspective(self) -> bool:
        """Not a panorama (``is_pano`` false and not an equirectangular/spherical camera): what the coverage checks
        count as a perspective image (seed 000 Sec. 3.2.1; the release's site selection counts ``not is_pano``)."""
        return not self.is_pano and (self.camera_type or "perspective") not in PANO_CAMERA_TYPES

    @property
    def perspective_frame(self) -> bool:
        """A frame the imagery fetcher may keep (Sec. 3.2, perspective images): ``camera_type`` ``"perspective"``,
        as the release's fetcher selects (``geocontext/streetview.py`` ``pick``, which leaves out fisheye frames:
        heavy distortion); an image whose ``camera_type`` is absent is judged by :attr:`perspective` alone."""
        if self.camera_type is None:
            return self.perspective
        return self.camera_type == "perspective" and not self.is_pano

    def to_json(self) -> dict[str, Any]:
        """The image's metadata as kept in selection records (``captured_at_note`` only when there is one)."""
        out = {"image_id": self.image_id, "lat": self.lat, "lon": self.lon, "captured_at_ms": self.captured_at_ms,
               "is_pano": self.is_pano, "camera_type": self.camera_type, "compass_angle": self.compass_angle}
        if self.captured_at_note:
            out["captured_at_note"] = self.captured_at_note
        return out


def _point(geom: Any) -> tuple[float, float] | None:
    if not isinstance(geom, dict) or geom.get("type") != "Point":
        return None
    c = geom.get("coordinates")
    if not isinstance(c, list) or len(c) < 2:
        return None
    try:
        lon, lat = float(c[0]), float(c[1])
    except (TypeError, ValueError):
        return None
    if not (-90 <= lat <= 90 and -180 <= lon <= 180):
        return None
    return lat, lon


#: slack past the present for a ``captured_at`` (ms): a camera clock a little ahead, time zones written as UTC
_FUTURE_SLACK_MS = 86_400_000
#: the earliest capture time taken as real, epoch ms (1990-01-01T00:00:00Z): no street-level photo with a position
#: is older (consumer GPS and digital cameras came later; Mapillary started in 2013). A ``captured_at`` that reads
#: as an earlier time in milliseconds is no capture time: seconds (:func:`read_captured_at`) or unknown
EARLIEST_CAPTURE_MS = 631_152_000_000


def read_captured_at(value: Any) -> tuple[int | None, str | None]:
    """A ``captured_at`` value as ``(epoch milliseconds or None, note)``; ``note`` is None when the value was read
    as sent, else the decision taken (a sentence for the crawl's decision log).

    Source: Mapillary API v4 image fields (https://www.mapillary.com/developer/api-documentation, "captured_at:
    timestamp, ms since epoch"; api-notes section 6: "a number of milliseconds since the Unix epoch (clients
    divide by 1000)"). Read as an integer (an int, a whole float or a digit string); None without a note when it
    is absent, not a number (a date string, a JSON ``true``), negative or more than a day after now (a value of
    1e20 ms would crash the export's ISO conversion).

    Seconds instead of milliseconds (the rule): a value ``v`` below :data:`EARLIEST_CAPTURE_MS` reads, as ms, as a
    time before 1990 (seconds since 1990 read as ms fall in January 1970, 1626443291 on 1970-01-19). When ``v``
    read as SECONDS lies between 1990-01-01 and a day after now, it is taken as seconds: ``v * 1000`` with the
    note ``"captured_at ... read as seconds"`` (a sender that wrote seconds; both readings cannot be plausible at
    once, since plausible ms values are 1000 times larger than plausible second values). Any other value before
    1990 as ms (0, a placeholder, a clock never set) is unknown (None) with a note saying so."""
    if value is None or isinstance(value, bool):
        return None, None
    try:
        if isinstance(value, float):
            if not value.is_integer():
                return None, None
            v = int(value)
        else:
            v = int(str(value).strip()) if isinstance(value, str) else int(value)
    except (TypeError, ValueError, OverflowError):
        return None, None
    now_ms = time.time() * 1000 + _FUTURE_SLACK_MS
    if not 0 <= v <= now_ms:
        return None, None
    if v >= EARLIEST_CAPTURE_MS:
        return v, None
    if EARLIEST_CAPTURE_MS <= v * 1000 <= now_ms:
        return v * 1000, (f"captured_at {v} read as seconds (as milliseconds it would be a time in 1970, before "
                          "1990-01-01; as seconds it is a plausible capture time)")
    return None, (f"captured_at {v} is unknown: as milliseconds it is a time before 1990-01-01, and as seconds "
                  "too, so it is no capture time")


def captured_at_ms(value: Any) -> int | None:
    """A ``captured_at`` value as epoch milliseconds, or None when it is no capture time: the value of
    :func:`read_captured_at` (whose docstring gives the rule, including seconds sent instead of milliseconds),
    without its note."""
    return read_captured_at(value)[0]


def compass_deg(value: Any) -> float | None:
    """A ``compass_angle`` value (degrees clockwise from north: a number or a numeric string) as a bearing in
    [0, 360), or None when it is absent, a JSON ``true``/``false``, not a number or not finite."""
    if value is None or isinstance(value, bool):
        return None
    try:
        deg = float(value)
    except (TypeError, ValueError):
        return None
    return deg % 360.0 if math.isfinite(deg) else None


def pano_flag(value: Any) -> bool:
    """An ``is_pano`` value as a flag: a boolean as it is, the texts ``"true"``/``"false"`` (any case) as they spell;
    anything else counts as a panorama, so it never counts as perspective coverage (``bool("false")`` is True)."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    return True


def _canonical_id(value: Any) -> str | None:
    """``value`` as a canonical image id (:func:`geoagent.paths.safe_image_id`), None when it is none."""
    try:
        return safe_image_id(value) if isinstance(value, (str, int)) and not isinstance(value, bool) else None
    except ValueError:
        return None


def parse_image(obj: dict[str, Any], thumb_field: str | None = None) -> MapillaryImage | None:
    """Parse one image object; None when the id is not digits or there is no usable position. The id is kept in
    its canonical form (:func:`geoagent.paths.safe_image_id`: ``"0123"`` is image ``"123"``)."""
    try:
        image_id = safe_image_id(obj.get("id", ""))
    except ValueError:
        return None
    pt = _point(obj.get("computed_geometry")) or _point(obj.get("geometry"))
    if pt is None:
        return None
    cap_ms, cap_note = read_captured_at(obj.get("captured_at"))
    angle = compass_deg(obj.get("compass_angle"))
    thumb = obj.get(thumb_field) if thumb_field else None
    camera = obj.get("camera_type")  # a value that is not text (a list, an object) counts as absent
    return MapillaryImage(image_id, pt[0], pt[1], cap_ms, pano_flag(obj.get("is_pano", False)),
                          camera if isinstance(camera, str) else None, angle, thumb if isinstance(thumb, str) else None,
                          cap_note)


def bbox_around(lat: float, lon: float, radius_m: float) -> tuple[float, float, float, float]:
    """Box ``(west, south, east, north)`` in degrees enclosing the circle of ``radius_m`` around a point.

    The longitude half-width is taken at the pole-ward edge, so every point within ``radius_m`` lies
    inside the box; a circle that reaches a pole gets every longitude (-180..180). The box may reach past
    +-180 near the antimeridian and past +-90 near a pole: :func:`normalise_bbox` makes API boxes of it."""
    dlat = math.degrees(radius_m / 1000.0 / C.EARTH_RADIUS_KM)
    if abs(lat) + dlat >= 90.0:  # the pole lies within the circle: all longitudes
        return (-180.0, lat - dlat, 180.0, lat + dlat)
    dlon = dlat / math.cos(math.radians(abs(lat) + dlat))
    if dlon >= 180.0:
        return (-180.0, lat - dlat, 180.0, lat + dlat)
    return (lon - dlon, lat - dlat, lon + dlon, lat + dlat)


def normalise_bbox(bbox: tuple[float, float, float, float]) -> list[tuple[float, float, float, float]]:
    """Boxes the API accepts (longitudes in [-180, 180], latitudes in [-90, 90], west < east) covering
    ``bbox``: latitudes are clamped at the poles, and a box reaching past the antimeridian (west < -180 or
    east > 180, as :func:`bbox_around` gives near it) becomes two boxes, one on each side.

    Raises
    ------
    ValueError
        If the box is empty, wider than 360 degrees or not finite."""
    if not all(math.isfinite(v) for v in bbox):  # an infinite radius's box would be the whole globe (break34)
        raise ValueError(f"not a usable bounding box (west, south, east, north): {bbox}")
    w, s, e, n = bbox
    s, n = max(-90.0, s), min(90.0, n)
    if not (w < e and s < n) or e - w > 360.0:
        raise ValueError(f"not a usable bounding box (west, south, east, north): {bbox}")
    if w < -180.0:
        parts = [(w + 360.0, s, 180.0, n), (-180.0, s, e, n)]
    elif e > 180.0:
        parts = [(w, s, 180.0, n), (-180.0, s, e - 360.0, n)]
    else:
        parts = [(w, s, e, n)]
    # a sliver under 1e-7 deg (1 cm) would print with west == east at 7 decimals, which the API refuses
    return [b for b in parts if b[2] - b[0] >= 1e-7]


def quadrants(bbox: tuple[float, float, float, float]) -> list[tuple[float, float, float, float]]:
    """Split ``(west, south, east, north)`` into its four quadrants (SW, SE, NW, NE)."""
    w, s, e, n = bbox
    mx, my = (w + e) / 2, (s + n) / 2
    return [(w, s, mx, my), (mx, s, e, my), (w, my, mx, n), (mx, my, e, n)]


def _jpeg_body(resp: Any) -> None:
    if not resp.body.startswith(b"\xff\xd8") or not resp.body.rstrip(b"\x00").endswith(b"\xff\xd9"):
        raise ValueError("body is not a complete JPEG")


#: Graph API error of an object that does not exist (or no longer does): code 100, error_subcode 33, HTTP 400
#: ("Unsupported get request. Object with ID '...' does not exist, cannot be loaded due to missing permissions, or
#: does not support this operation"; https://developers.facebook.com/docs/graph-api/guides/error-handling)
NO_SUCH_OBJECT = (100, 33)
_NO_SUCH_OBJECT_TEXT = re.compile(r"Unsupported get request\. Object with ID '[0-9]+' does not exist")
#: a message naming missing permissions (:func:`permission_only`)
_PERMISSION_TEXT = re.compile(r"missing permission|permission(s)? (is|are) missing|not (been )?granted", re.I)


def permission_only(err: GraphError) -> bool:
    """Whether a "does not exist" error (:data:`NO_SUCH_OBJECT`) says only that permissions are missing, not
    that the object does not exist. The Graph API's own message for code 100 / subcode 33 names the three causes
    at once ("does not exist, cannot be loaded due to missing permissions, or does not support this operation"),
    so its body cannot tell a deleted image from one the token may not load: such an error counts as deleted
    (False). Only a message that names missing permissions and not non-existence is told apart (True); no
    source seen shows Mapillary sending one (the sandbox fake's ``NO_PERMISSION_ONLY`` is hypothetical)."""
    return bool(_PERMISSION_TEXT.search(err.message)) and "does not exist" not in err.message


def object_does_not_exist(exc: PermanentHTTPError | MapillaryError) -> bool:
    """Whether a 4xx answer is the Graph API's "object does not exist" error (:data:`NO_SUCH_OBJECT`): an HTTP
    400 whose body is that Graph error (read from the error's kept ``body``; the message alone is some 250
    characters, so the 300-character excerpt ends before ``code``). Should the body be cut anyway, the
    message's opening words are enough; a whole JSON error with another code is not it. A
    :class:`MapillaryError` (the client's reading of such an answer) is it when its status, code and subcode are."""
    if isinstance(exc, MapillaryError):
        return exc.status == 400 and (exc.code, exc.subcode) == NO_SUCH_OBJECT
    if exc.status != 400:
        return False
    body = getattr(exc, "body", None) or exc.body_excerpt
    try:
        err = orjson.loads(body).get("error")
    except (orjson.JSONDecodeError, AttributeError):
        return bool(_NO_SUCH_OBJECT_TEXT.search(body))
    if not isinstance(err, dict):
        return False
    return (err.get("code"), err.get("error_subcode")) == NO_SUCH_OBJECT


def _server_error(exc: RetriesExhausted) -> bool:
    return bool(re.match(r"http 5\d\d", exc.last or ""))


@dataclass(frozen=True, slots=True)
class FullBox:
    """A search box still full at the minimum box size: its ``n_images`` (= the page limit) were kept, more
    may exist. ``box`` is ``(west, south, east, north)`` degrees."""

    box: tuple[float, float, float, float]
    n_images: int

    def to_json(self) -> dict[str, Any]:
        return {"box": [round(x, 7) for x in self.box], "n_images": self.n_images}


@dataclass(frozen=True, slots=True)
class CoverageCount:
    """Images within a radius: all of them and the perspective (non-panorama) ones.

    ``lower_bound`` is True when a search box was still full at the minimum size (``full_boxes``): the counts
    are then "at least" counts (the API pages at 2,000 images and cannot be asked for more in that box)."""

    total: int
    perspective: int
    lower_bound: bool = False
    full_boxes: tuple[FullBox, ...] = ()

    def note(self) -> dict[str, Any] | None:
        """The decision-log record of a lower-bound count (None for an exact one): ``event``
        ``"mapillary_box_full"``, ``reason``, the counts as lower bounds and the full boxes."""
        if not self.lower_bound:
            return None
        return {"event": "mapillary_box_full",
                "reason": (f"{len(self.full_boxes)} search box(es) still held the page limit at the minimum box "
                           "size; the images there were kept and the counts are lower bounds"),
                "sv_total_at_least": self.total, "sv_perspective_at_least": self.perspective,
                "full_boxes": [b.to_json() for b in self.full_boxes]}


def _is_local_url(url: str) -> bool:
    """Whether ``url`` names a local, private, link-local or other non-public host
    (:func:`geoagent.config.is_non_public_host`: CGNAT 100.64.0.0/10 included, security42 #1; not the model rule
    :func:`~geoagent.config.is_local_host`, fixrev42 #2); an unreadable URL counts as local (refused where a public
    host is required)."""
    from urllib.parse import urlsplit

    from geoagent.config import is_non_public_host

    try:
        return is_non_public_host(urlsplit(url).hostname)
    except ValueError:
        return True


def _refused_host(detail: str) -> str | None:
    """The host name a :class:`~geoagent.runtime.public_net.NotPublicAddress` message names (``"<host> resolves to
    no public address (...)"``: a redirect's host may differ from the thumbnail URL's), or None."""
    head, sep, _ = detail.partition(" resolves to no public address")
    return (head.strip() or None) if sep else None


def _local_thumb_host(url: str, graph_is_local: bool) -> bool:
    """Whether the thumbnail ``url`` names a local, private or link-local host while the Graph API is on no such host
    (``graph_is_local`` False): a public API's CDN URL never does."""
    return not graph_is_local and _is_local_url(url)


#: how every Mapillary client access token begins: ``MLY|<app id>|<secret>`` (api-notes section 6, "Auth"; the
#: developer dashboard, https://www.mapillary.com/dashboard/developers, issues them so)
TOKEN_PREFIX = "MLY|"


def token_problem(var: str, value: str) -> str | None:
    """Why the value of variable ``var`` is no Mapillary client token (it does not start with :data:`TOKEN_PREFIX`),
    or None when it is one. Checked before any request (crawl40 #8: an ordinary word such as ``sandbox`` was sent,
    refused by the API, and masked as a secret wherever it occurred in the stored config, ``mapillary.***.invalid``).
    The message names the variable, never the value."""
    if value.startswith(TOKEN_PREFIX):
        return None
    return (f"the Mapillary token in {var} is not a Mapillary client token: one starts with {TOKEN_PREFIX} "
            f"({TOKEN_PREFIX}<app id>|<secret>, from https://www.mapillary.com/dashboard/developers); the value is not "
            "shown")


class MapillaryClient:
    """Async Mapillary Graph API v4 client.

    Parameters
    ----------
    http : geoagent.runtime.http.HttpClient
    base_url : str
        ``https://graph.mapillary.com`` or a sandbox URL.
    token : str
        Client token ``MLY|...`` (from the environment; never logged).
    user_agent : str
        Descriptive UA with contact.
    limit : int
        Page size of bbox searches, at most 2,000.
    min_box_deg : float
        Smallest box side (degrees) that is still split when full or failing (1e-4 deg: ~11 m of latitude);
        below it a full box's page is kept as a lower bound, a failing one raises.
    max_box_deg2 : float
        Largest box area (square degrees) sent in one search; bigger boxes are split first (client
        READMEs report failures above 0.01 square degrees).
    """

    def __init__(self, http: Any, base_url: str, token: str, user_agent: str, *, policy: HostPolicy | None = None,
                 thumb_policy: HostPolicy | None = None, limit: int = MAX_LIMIT, min_box_deg: float = 1e-4,
                 max_box_deg2: float = 0.01) -> None:
        if not 1 <= limit <= MAX_LIMIT:
            raise ValueError(f"limit must be in 1..{MAX_LIMIT}, got {limit}")
        if not token:
            raise ValueError("a Mapillary access token is required")
        self.http = http
        self.base_url = base_url.rstrip("/")
        self._token = token
        self.user_agent = user_agent
        self.limit = limit
        self.min_box_deg = min_box_deg
        self.max_box_deg2 = max_box_deg2
        self.thumb_policy = thumb_policy
        self.host = host_of(self.base_url)
        #: whether the Graph API is on a local, private or link-local host (the sandbox's fakes): then its thumbnail
        #: URLs may name such hosts too (:func:`_local_thumb_host`); a public API's never do
        self.graph_is_local = _is_local_url(self.base_url)
        #: whether thumbnail downloads (and their redirects) connect to public addresses only, judged on the
        #: addresses their names resolve to when connecting (``HttpClient.request(public_only=True)``; security42
        #: #1: a public name such as ``169.254.169.254.nip.io`` may resolve to a metadata service). The same
        #: allowance as the URL checks: off exactly when the Graph API is itself local (the sandbox's fakes serve
        #: thumbnails from 127.0.0.1). Tests whose resolver sends every name to 127.0.0.1 turn it off to exercise
        #: the URL checks alone
        self.thumbs_public_only = not self.graph_is_local
        self.requests_made = 0
        self.splits = 0
        #: boxes found still full at the minimum size (their page kept as a lower bound)
        self.full_min_boxes = 0
        #: Graph answers that were throttling (:data:`RATE_LIMIT_CODES`), each retried after a backoff
        self.throttled = 0
        self.thumb_hosts: set[str] = set()
        if policy is not None:
            http.set_policy(self.host, policy)

    def token_refused(self, exc: BaseException) -> str | None:
        """How the Mapillary API refused the access token, e.g. ``"HTTP 401, Mapillary error 190"``, when
        ``exc`` says so: a :class:`MapillaryError` with Graph code :data:`TOKEN_ERROR_CODE` or HTTP 401/403, or a
        :class:`~geoagent.runtime.http.PermanentHTTPError` 401/403 from this client's API host; None for any
        other failure (a thumbnail CDN's 403, :class:`ThumbnailUnavailable`, is one image's, not the token's).
        The text never holds the token."""
        if isinstance(exc, ThumbnailUnavailable):
            return None
        if isinstance(exc, MapillaryError):
            status = exc.status
            if exc.code in RATE_LIMIT_CODES:  # throttling, also at HTTP 403: the app's rate, not the token
                return None
            if exc.code == TOKEN_ERROR_CODE or status in (401, 403):
                parts = ([f"HTTP {status}"] if status else []) + ([f"Mapillary error {exc.code}"] if exc.code else [])
                return ", ".join(parts)
            return None
        if isinstance(exc, PermanentHTTPError) and exc.status in (401, 403) and host_of(exc.url) == self.host:
            return f"HTTP {exc.status}"
        return None

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"OAuth {self._token}", "User-Agent": self.user_agent, "Accept": "application/json"}

    def _decode(self, body: bytes) -> Any:
        try:
            data = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise MapillaryError(f"Mapillary answered non-JSON: {body[:200]!r}") from None
        if isinstance(data, dict) and isinstance(data.get("error"), dict):
            err = data["error"]
            raise MapillaryError(f"Mapillary error {err.get('code')}: {err.get('message')}", code=err.get("code"),
                                 subcode=_int_or_none(err.get("error_subcode")))
        return data

    def _backoff_s(self, attempt: int) -> float:
        """Wait after throttled attempt ``attempt`` (1-based), s: exponential in the host policy's
        ``backoff_base_s`` up to ``backoff_max_s``, with jitter over its upper half (a throttled app gains
        nothing from an at-once retry, which full jitter can draw)."""
        pol = self.http.policy_for(self.host)
        cap = min(float(pol.backoff_max_s), float(pol.backoff_base_s) * 2.0 ** (attempt - 1))
        return cap / 2.0 + random.uniform(0.0, cap / 2.0)

    async def _graph_get(self, url: str, params: dict[str, str]) -> Any:
        """``GET url`` on the Graph API; the decoded JSON of a good answer.

        A Graph error answer (in a 4xx, or inside a 200) that is throttling (:data:`RATE_LIMIT_CODES`) pauses the
        API host for a backoff (:meth:`_backoff_s`: every request to it waits, the limit is the app's) and asks
        again, up to the host policy's ``max_attempts`` in all (429 and 5xx are the HTTP layer's own retries).

        Raises
        ------
        MapillaryError
            Any other Graph error (``code``, ``subcode``, ``status``: the HTTP status, None inside a 200).
        geoagent.runtime.http.RetriesExhausted
            Still throttled after ``max_attempts`` (``last`` names the Graph code): retryable, as a 429 that
            outlived its retries; :class:`~geoagent.runtime.http.RetriesStopped` when a stop came meanwhile.
        geoagent.runtime.http.PermanentHTTPError
            A 4xx whose body is not a Graph error.
        """
        attempts = max(1, int(self.http.policy_for(self.host).max_attempts))
        for attempt in range(1, attempts + 1):
            try:
                resp = await self.http.request("GET", url, params=params, headers=self._headers(), validate=_json_body)
            except PermanentHTTPError as e:
                err, status = graph_error_of(getattr(e, "body", None) or e.body_excerpt), e.status
                if err is None:
                    raise
            else:
                err, status = graph_error_of(resp.body), None
                if err is None:
                    return self._decode(resp.body)
            where = f"HTTP {status}: " if status is not None else ""
            if not err.throttled:
                raise MapillaryError(f"{where}Mapillary error {err.code}: {err.message}", code=err.code,
                                     status=status, subcode=err.subcode)
            self.throttled += 1
            last = f"Mapillary rate limit: {where}Graph error {err.code}: {err.message[:160]}"
            if attempt == attempts:
                raise RetriesExhausted(url, attempt, last)
            if self.http.stopping:
                raise RetriesStopped(url, attempt, last)
            self.http.pause_host(self.host, self._backoff_s(attempt))
        raise AssertionError("unreachable")

    async def _search_once(self, bbox: tuple[float, float, float, float], fields: tuple[str, ...],
                           extra: dict[str, str]) -> list[dict[str, Any]]:
        w, s, e, n = bbox
        params = {"fields": ",".join(fields), "bbox": f"{w:.7f},{s:.7f},{e:.7f},{n:.7f}", "limit": str(self.limit), **extra}
        self.requests_made += 1
        data = await self._graph_get(f"{self.base_url}/images", params)
        rows = data.get("data") if isinstance(data, dict) else None
        if not isinstance(rows, list):
            raise MapillaryError(f"Mapillary JSON without a data list: {orjson.dumps(data)[:200]!r}")
        return rows

    async def search_images(self, bbox: tuple[float, float, float, float], *, fields: tuple[str, ...] = SEARCH_FIELDS,
                            is_pano: bool | None = None, thumb_field: str | None = None,
                            full_boxes: list[FullBox] | None = None,
                            captured_after: str | None = None) -> list[MapillaryImage]:
        """All images in ``bbox`` = ``(west, south, east, north)`` degrees, splitting full or failing boxes.

        ``captured_after`` (ISO date ``YYYY-MM-DD``): only images captured on or after that day (UTC), asked as the
        search's ``start_captured_at`` filter (``YYYY-MM-DDT00:00:00Z``; api-notes section 6 lists it, unconfirmed
        in code: a caller that needs the cut checks ``captured_at_ms`` too).

        A box reaching past +-180 degrees of longitude is searched as two boxes (see :func:`normalise_bbox`).
        A box still full at ``min_box_deg`` keeps the page it got (the result is then a lower bound of the images
        there) and is appended to ``full_boxes`` when given (and counted in :attr:`full_min_boxes`).

        Raises
        ------
        MapillaryError
            Error objects, bad shapes, or a box still failing (5xx) at ``min_box_deg``.
        geoagent.runtime.http.RetriesExhausted
            429 or connection failures that outlived the retries (5xx leads to a split instead).
        """
        fields = tuple(dict.fromkeys(fields + ((thumb_field,) if thumb_field else ())))
        extra = {} if is_pano is None else {"is_pano": "true" if is_pano else "false"}
        if captured_after is not None:
            extra["start_captured_at"] = f"{captured_after}T00:00:00Z"
        seen: dict[str, MapillaryImage] = {}
        stack = normalise_bbox(bbox)  # near the antimeridian: one box on each side
        while stack:
            box = stack.pop()
            small = (box[2] - box[0]) <= self.min_box_deg or (box[3] - box[1]) <= self.min_box_deg
            if (box[2] - box[0]) * (box[3] - box[1]) > self.max_box_deg2:
                stack.extend(quadrants(box))  # too large to ask for at all: split before any request
                continue
            try:
                rows = await self._search_once(box, fields, extra)
            except RetriesExhausted as e:
                if not _server_error(e):
                    raise
                if small:
                    raise MapillaryError(f"Mapillary keeps failing on a minimal box {box}: {e.last}") from None
                self.splits += 1
                stack.extend(quadrants(box))
                continue
            if len(rows) >= self.limit and not small:
                self.splits += 1
                stack.extend(quadrants(box))
                continue
            if len(rows) >= self.limit:  # full at the minimum size: keep the page, a lower bound of the box
                self.full_min_boxes += 1
                if full_boxes is not None:
                    full_boxes.append(FullBox(box, len(rows)))
            for r in rows:
                img = parse_image(r, thumb_field) if isinstance(r, dict) else None
                if img is not None:
                    seen.setdefault(img.image_id, img)  # quadrant edges may repeat an image
        return sorted(seen.values(), key=lambda i: int(i.image_id))

    async def images_within(self, lat: float, lon: float, radius_m: float, *, thumb_field: str | None = None,
                            is_pano: bool | None = None, full_boxes: list[FullBox] | None = None,
                            captured_after: str | None = None) -> list[tuple[MapillaryImage, float]]:
        """Images whose camera lies within ``radius_m`` of a point, with their haversine distance (m),
        nearest first. ``full_boxes`` and ``captured_after`` as for :meth:`search_images` (the list may then be
        incomplete)."""
        found = await self.search_images(bbox_around(lat, lon, radius_m), is_pano=is_pano, thumb_field=thumb_field,
                                         full_boxes=full_boxes, captured_after=captured_after)
        out = []
        for img in found:
            d_m = haversine_km(lat, lon, img.lat, img.lon) * 1000.0
            if d_m <= radius_m:
                out.append((img, d_m))
        out.sort(key=lambda t: (t[1], int(t[0].image_id)))
        return out

    async def count_images_within(self, lat: float, lon: float, radius_m: float) -> CoverageCount:
        """Coverage: images within ``radius_m`` (all, and perspective only); lower bounds (``lower_bound``,
        ``full_boxes``) when a search box was still full at the minimum size."""
        full: list[FullBox] = []
        imgs = await self.images_within(lat, lon, radius_m, full_boxes=full)
        return CoverageCount(len(imgs), sum(1 for i, _ in imgs if i.perspective), bool(full), tuple(full))

    async def image(self, image_id: str, fields: tuple[str, ...]) -> dict[str, Any]:
        """``GET {base}/{image_id}?fields=...``: one bare image object (only the listed fields).

        Raises
        ------
        MapillaryError
            A Graph error (e.g. code 190, an expired or revoked token: :meth:`token_refused`; code 100 subcode 33,
            no such object: :func:`object_does_not_exist`) or an unexpected body. Throttling is retried
            (:meth:`_graph_get`), then raised as :class:`~geoagent.runtime.http.RetriesExhausted`."""
        iid = safe_image_id(image_id)
        data = await self._graph_get(f"{self.base_url}/{iid}", {"fields": ",".join(fields)})
        if not isinstance(data, dict) or _canonical_id(data.get("id")) != iid:  # "0123" is image 123 (safe_image_id)
            raise MapillaryError(f"Mapillary image {iid}: unexpected body {orjson.dumps(data)[:200]!r}")
        return data

    async def fresh_thumb_url(self, image_id: str, thumb_field: str = "thumb_1024_url") -> str:
        """A just-issued signed thumbnail URL for ``image_id`` (they expire, so ask right before use).

        Raises
        ------
        ThumbnailUnavailable
            The image has no such thumbnail (null field; ``kind`` ``"no_url"``), is gone (404/410, with a Graph
            error body or none, or the Graph API's "does not exist" 400: :func:`object_does_not_exist`; ``"gone"``),
            or may not be loaded (a "does not exist" error whose message names only missing permissions:
            :func:`permission_only`; ``"not_permitted"``).
        MapillaryError
            Another Graph error, e.g. an expired or revoked token (code 190: :meth:`token_refused`).
        geoagent.runtime.http.RetriesExhausted
            Throttled still after the retries (:data:`RATE_LIMIT_CODES`), or 429/5xx/connection failures."""
        try:
            data = await self.image(image_id, ("id", thumb_field))
        except MapillaryError as e:
            if e.status in (404, 410) or object_does_not_exist(e):  # a 404/410 is gone whatever its body says
                err = GraphError(e.code, e.subcode, str(e))
                if permission_only(err):  # the body says the token may not load it, not that it is gone
                    raise ThumbnailUnavailable(f"Mapillary image {image_id} cannot be loaded: missing permissions "
                                               f"(HTTP {e.status}, Graph error {e.code}/{e.subcode})",
                                               status=e.status, kind="not_permitted") from None
                # deleted since the search that listed it (or not loadable: the standard message does not say which)
                raise ThumbnailUnavailable(f"Mapillary image {image_id} is gone (HTTP {e.status})", status=e.status,
                                           kind="gone") from None
            raise
        except PermanentHTTPError as e:  # a 4xx without a Graph error body
            if e.status in (404, 410) or object_does_not_exist(e):  # deleted since the search that listed it
                raise ThumbnailUnavailable(f"Mapillary image {image_id} is gone (HTTP {e.status})", status=e.status,
                                           kind="gone") from None
            raise
        url = data.get(thumb_field)
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ThumbnailUnavailable(f"Mapillary image {image_id} has no {thumb_field} (got {url!r})", kind="no_url")
        if _local_thumb_host(url, self.graph_is_local):
            # a public Graph API naming a loopback, private or link-local address (a cloud's metadata service at
            # 169.254.169.254, an admin console on the LAN) is no CDN: never fetched (security37 #3). The sandbox's
            # fakes, all local, hand out local URLs of their own
            raise ThumbnailUnavailable(f"Mapillary image {image_id}: its {thumb_field} names a local or private "
                                       f"address ({host_of(url)!r}), not a CDN: not fetched", kind="no_url")
        return url

    def _thumb_redirect_guard(self, target: str) -> str | None:
        """Why a thumbnail redirect to ``target`` is not followed (None: followed): a CDN redirecting to a local,
        private or link-local address, as a thumbnail URL naming one is refused (:func:`_local_thumb_host`)."""
        from urllib.parse import urlsplit

        if urlsplit(target).scheme.lower() not in ("http", "https"):  # ftp:, file:, data: (review38b #3)
            return f"redirect to a {urlsplit(target).scheme or 'scheme-less'} address not followed: a thumbnail is http(s)"
        if _local_thumb_host(target, self.graph_is_local):
            return f"redirect to a local or private address ({host_of(target)!r}) not followed: no CDN sends there"
        return None

    def _thumb_host_policy(self, host: str) -> None:
        """Note a thumbnail host (:attr:`thumb_hosts`) and give it the thumbnails policy when it has no policy of
        its own yet: never the Graph API host's, nor another API's host whose usage policy is set (a thumbnail URL
        naming, say, the WDQS host must not lift WDQS's limits to the thumbnails')."""
        first = host not in self.thumb_hosts
        self.thumb_hosts.add(host)
        if self.thumb_policy is None or not first or host == self.host:
            return
        # a host without a policy of its own gets the HTTP client's default, as a name no request uses does
        if self.http.policy_for(host) is self.http.policy_for("no-policy-set.invalid"):
            self.http.set_policy(host, self.thumb_policy)

    #: CDN statuses that mean "this URL is no good" (expired or bad signature, gone): ask for a new URL once
    REFRESH_STATUSES = frozenset({403, 404, 410})

    async def download_thumbnail(self, image_id: str, thumb_field: str = "thumb_1024_url", *,
                                 max_bytes: int | None = None) -> bytes:
        """Fetch a fresh thumbnail URL and download it at once; returns the JPEG bytes.

        A URL the CDN refuses with 403/404/410 (signed URLs expire, sometimes between the Graph API call
        and the download) is replaced by a newly issued one once before giving up. The body is capped at
        ``max_bytes`` (default :data:`THUMB_MAX_BYTES` of ``thumb_field``, 64 MiB for a field not listed there),
        counted after decompression: a longer body is refused by its Content-Length before reading, or abandoned
        while streaming, at the first attempt and for good: that refusal is not retried (the same URL serves the
        same bytes; one request of the image). The CDN host's policy otherwise applies: rate, concurrency,
        retries, timeouts.

        Raises
        ------
        ThumbnailUnavailable
            No thumbnail URL, the CDN refuses a fresh URL too, redirects without end or to a local or private
            address (not followed), its host (or a redirect's) resolves to no public address while the Graph API is
            public (:attr:`thumbs_public_only`; not connected, ``kind`` ``"not_public"``, ``host`` the name
            refused), the body is not a JPEG, or
            it is larger than the cap (``kind`` ``"too_large"``) (per image: skip it). Transport failures (429, 5xx,
            timeouts) propagate as the HTTP layer's errors.
        """
        import dataclasses

        cap = int(max_bytes if max_bytes is not None else THUMB_MAX_BYTES.get(thumb_field, 64 << 20))
        for attempt in (1, 2):
            url = await self.fresh_thumb_url(image_id, thumb_field)
            host = host_of(url)
            self._thumb_host_policy(host)
            policy = dataclasses.replace(self.http.policy_for(host), max_body_bytes=cap)
            try:
                # over the cap is final: the same URL serves the same bytes again, so no attempt more
                # (by its Content-Length) and no second stream up to the cap (without one)
                resp = await self.http.request("GET", url, headers={"User-Agent": self.user_agent}, validate=_jpeg_body,
                                               policy=policy, too_large_final=True,
                                               redirect_guard=self._thumb_redirect_guard,
                                               public_only=self.thumbs_public_only)
            except AddressNotPublic as e:  # not connected: no public address (security42 #1)
                if e.by_dns:  # what a name resolved to HERE: the network's DNS, not the image (fixrev42 #5)
                    raise ThumbnailUnavailable(f"thumbnail of {image_id} not fetched: {e.detail}", kind="not_public",
                                               host=_refused_host(e.detail) or host) from None
                # the URL (or its redirect) spelled a non-public address itself: the answer's verdict on this image
                raise ThumbnailUnavailable(f"thumbnail of {image_id} refused: {e.detail}", kind="refused") from None
            except RetriesExhausted as e:
                if "body too large" in e.last:
                    raise ThumbnailUnavailable(
                        f"thumbnail of {image_id} ({thumb_field}) is larger than the cap of {cap} bytes "
                        f"([crawl.fetcher] max_thumb_bytes; {e.last[:160]})", kind="too_large") from None
                if e.last.startswith("invalid body"):
                    raise ThumbnailUnavailable(f"thumbnail of {image_id} is not a JPEG: {e.last}",
                                               kind="not_jpeg") from None
                if "TooManyRedirects" in e.last:
                    # the CDN answered, with redirects without end: this URL's condition, not the host's reach
                    raise ThumbnailUnavailable(f"thumbnail of {image_id} refused: the CDN redirects without end "
                                               f"(TooManyRedirects, {e.attempts} attempts)", kind="refused") from None
                raise
            except ValueError as e:  # an address aiohttp cannot use (a CDN's redirect to "http://127.1/"): this image's
                # condition, not the site's (review38 #1: the site task failed)
                raise ThumbnailUnavailable(f"thumbnail of {image_id} refused: {e}", kind="refused") from None
            except PermanentHTTPError as e:
                if e.status in self.REFRESH_STATUSES and attempt == 1:
                    continue
                # the status only: a CDN's error page is no reason worth keeping, and a page of a host the URL should
                # not have named must not reach the fetch stage's rejection records (security37 #3)
                if 300 <= e.status < 400:  # a redirect not followed: our own words say why
                    raise ThumbnailUnavailable(f"thumbnail of {image_id} refused: HTTP {e.status}, {e.body_excerpt}",
                                               status=e.status, kind="refused") from None
                raise ThumbnailUnavailable(f"thumbnail of {image_id} refused: HTTP {e.status}",
                                           status=e.status, kind="refused") from None
            if not resp.body.startswith(b"\xff\xd8"):
                raise ThumbnailUnavailable(f"thumbnail of {image_id} is not a JPEG (its first bytes: "
                                           f"{resp.body[:4].hex(' ') or 'none'})", kind="not_jpeg")
            return resp.body
        raise AssertionError("unreachable")
