"""Local fake of the Mapillary Graph API v4 (``/images`` bbox search, ``/{id}``, expiring thumbnails).

Wire format per the Mapillary API v4 docs: ``GET /images?fields=...&bbox=west,south,east,north&limit=N`` (and the
filters ``is_pano`` and ``start_captured_at``, an ISO 8601 time: images captured then or later) answers ``{"data": [...]}`` holding ONLY the requested fields (``id`` as a digit string,
``computed_geometry``/``geometry`` GeoJSON points ``[lon, lat]``, ``captured_at`` epoch ms,
``compass_angle``, ``is_pano``, ``camera_type``, ``thumb_*_url``); no pagination; at most ``limit``
(<= 2,000) results, so a full page means "there may be more". ``GET /{id}?fields=...`` answers the bare
object. Errors are Graph-style ``{"error": {"message", "type", "code", "error_subcode", "fbtrace_id"}}``.

Failure shapes: no token, one not of the form ``MLY|...``, or one beginning :data:`REFUSED_TOKEN_PREFIX` -> 401
``OAuthException`` code 190; unknown field, ``limit`` > 2,000 or a bbox
over ``max_bbox_deg2`` -> 400; ``GET /{id}`` of an unknown or deleted image -> 400 ``GraphMethodException``
code 100, subcode 33 ("Unsupported get request. Object with ID ... does not exist", as the Graph API answers); a "dense" box (more than ``dense_threshold`` images) -> 500 (the client
must split it); thumbnail URLs carry an expiry (``ttl_s``) and a signature: an expired or forged one
gets 403 with a text body (``FakeImage.cdn_expired_first`` makes a URL expire before its first uses);
an image may have no thumbnail (``thumb_*_url`` null), a CDN answer that is not a JPEG (for every request, or the
first ``FakeImage.cdn_body_times`` only: a one-off glitch), or a CDN URL that
redirects to itself without end (``FakeImage.cdn_redirect_loop``). Thumbnails are JPEGs rendered on demand whose mean grey level is the image's
``brightness`` (so the brightness filter has something real to measure).

Graph API error shapes on demand (:class:`GraphErrorShape`; ``FakeImage.graph_error`` for ``GET /{id}``,
``MapillaryFakeState.search_error`` for ``/images``, each for every request or only the first N): an expired or
revoked token (:data:`TOKEN_EXPIRED`, code 190), throttling (:func:`rate_limited`: codes 4, 17, 32, 613 at HTTP
400, 403, 429 or inside a 200), and a "does not exist" error whose message names only missing permissions
(:data:`NO_PERMISSION_ONLY`). What is confirmed about these shapes and what is not: see :class:`GraphErrorShape`.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import io
import random
import time
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from geoagent.sandbox.faults import FaultConfig, fault_middleware

KNOWN_FIELDS = frozenset({
    "id", "geometry", "computed_geometry", "captured_at", "compass_angle", "computed_compass_angle", "is_pano",
    "camera_type", "thumb_256_url", "thumb_1024_url", "thumb_2048_url", "thumb_original_url", "sequence",
    "height", "width", "quality_score", "creator",
})
THUMB_SIZES = {"thumb_256_url": 256, "thumb_1024_url": 1024, "thumb_2048_url": 2048, "thumb_original_url": 2048}


@dataclass(frozen=True)
class GraphErrorShape:
    """A Graph-style error answer: HTTP ``status`` (200: the error object inside a 200) and the ``error`` object's
    ``code``, ``error_subcode``, ``message`` (``{id}`` is replaced by the image id) and ``type``.

    Confirmed (Facebook Graph API "Handling Errors" page, developers.facebook.com/docs/graph-api/guides/error-handling):
    the error object's fields; code 190 "access token has expired" (subcodes such as 463 "expired", 460 "password
    changed"); codes 4 (application request limit), 17 (user request limit) and 341 as temporary throttling
    (wait and retry); code 32 is the Pages API's page-level limit (Facebook developer blog, 2016-06-16); 613
    ("Calls to this api have exceeded the rate limit") is seen in third-party reports only. NOT confirmed for
    Mapillary: which of these codes graph.mapillary.com sends and with which HTTP status (api-notes section 6:
    "429 / Graph error codes (unconfirmed)"; a mapillary-js issue, #456, reports "Application request limit
    reached", code 4's text, from API v4). So the fake offers each code at 400, 403, 429 or inside a 200."""

    status: int
    code: int
    subcode: int = 0
    message: str = ""
    etype: str = "OAuthException"

    def response(self, image_id: str = "") -> web.Response:
        return graph_error(self.status, self.message.replace("{id}", image_id), self.code, self.etype, self.subcode)


#: an expired (or revoked) access token: HTTP 400, OAuthException code 190, subcode 463 (Graph API error-handling
#: page; Mapillary's use of 190 is unconfirmed, api-notes section 6)
TOKEN_EXPIRED = GraphErrorShape(400, 190, 463, "Error validating access token: Session has expired on Tuesday, "
                                "01-Dec-26 10:00:00 PST. The current time is Tuesday, 01-Dec-26 11:00:00 PST.")
#: the Graph API's message of each throttling code (4, 17: Graph API error-handling page; 32: Pages API; 613:
#: third-party reports)
RATE_LIMIT_MESSAGES = {4: "(#4) Application request limit reached", 17: "(#17) User request limit reached",
                       32: "(#32) Page request limit reached",
                       613: "(#613) Calls to this api have exceeded the rate limit."}


def rate_limited(code: int = 4, status: int = 400) -> GraphErrorShape:
    """A throttling error of Graph ``code`` (4, 17, 32 or 613) answered with HTTP ``status``."""
    return GraphErrorShape(status, code, 0, RATE_LIMIT_MESSAGES.get(code, f"(#{code}) request limit reached"))


#: a HYPOTHETICAL variant of the "does not exist" error (code 100, subcode 33) whose message names only missing
#: permissions: the Graph API's own message names three causes at once ("does not exist, cannot be loaded due to
#: missing permissions, or does not support this operation"), and no source seen shows a permission-only text;
#: the fake offers it so a client that tells the two apart can be tested
NO_PERMISSION_ONLY = GraphErrorShape(400, 100, 33, "Unsupported get request. Object with ID '{id}' cannot be loaded "
                                     "due to missing permissions.", "GraphMethodException")


@dataclass
class FakeImage:
    """One image of the fake: camera position (degrees), capture time (epoch ms), and the mean grey
    level (0-255) its rendered thumbnail will have."""

    image_id: str
    lat: float
    lon: float
    captured_at_ms: int = 1_700_000_000_000
    compass_angle: float = 0.0
    is_pano: bool = False
    camera_type: str = "perspective"
    brightness: float = 140.0
    sequence: str = "seq0"
    pattern_seed: str | None = None  # images sharing one render as near-duplicates
    #: False: the Graph API answers ``null`` for every ``thumb_*_url`` (no thumbnail available)
    has_thumb: bool = True
    #: served by the CDN instead of the rendered JPEG (e.g. an HTML error page with status 200) ...
    cdn_body: bytes | None = None
    #: ... for the first N CDN requests of the image only (a one-off glitch), then the JPEG (None: every request)
    cdn_body_times: int | None = None
    #: True: the CDN sends ``cdn_body`` chunked, without a Content-Length (the client learns its size only by
    #: reading it)
    cdn_chunked: bool = False
    #: every CDN request of this image answers 302 back to the same URL (a CDN edge redirecting in a loop)
    cdn_redirect_loop: bool = False
    #: the first N CDN requests of this image answer 403 "URL signature expired" (a URL that aged
    #: between the Graph API call and the download)
    cdn_expired_first: int = 0
    #: still in search results (an index lagging behind), but ``GET /{id}`` answers the Graph API's "does not
    #: exist" error (HTTP 400, code 100, subcode 33): deleted meanwhile
    deleted: bool = False
    #: ``GET /{id}`` answers this Graph error (:class:`GraphErrorShape`) instead of the image ...
    graph_error: GraphErrorShape | None = None
    #: ... for the first N requests of the image (None: for every request)
    graph_error_times: int | None = None


def _take_error(shape: GraphErrorShape | None, times: int | None) -> tuple[bool, int | None]:
    """Whether a request gets the error now, and the count left after it."""
    if shape is None or times == 0:
        return False, times
    return True, None if times is None else times - 1


@dataclass
class MapillaryFakeState:
    images: list[FakeImage] = field(default_factory=list)
    dense_threshold: int = 10_000
    max_bbox_deg2: float = 0.01
    ttl_s: float = 600.0
    thumb_px: int = 64  # rendered edge length (kept small: tests and the demo stay fast)
    secret: bytes = b"sandbox-cdn-secret"
    #: base URL of a separate thumbnail CDN host (:func:`make_cdn_app`, as the real API's ``scontent-*.fbcdn.net``
    #: URLs); None: thumbnail URLs name the Graph API host itself
    cdn_base: str | None = None
    #: every ``/images`` search answers this Graph error (:class:`GraphErrorShape`) ...
    search_error: GraphErrorShape | None = None
    #: ... the first N times (None: always)
    search_error_times: int | None = None
    #: True: ``/images`` ignores ``start_captured_at`` (the filter is unconfirmed for the real image search, api-notes
    #: section 6), as an API that does not know it would
    ignore_start_captured_at: bool = False
    search_requests: list[str] = field(default_factory=list)
    thumb_requests: list[str] = field(default_factory=list)
    image_requests: list[str] = field(default_factory=list)
    _jpeg_cache: dict[str, bytes] = field(default_factory=dict)

    def by_id(self) -> dict[str, FakeImage]:
        return {i.image_id: i for i in self.images}


MAPILLARY_STATE: web.AppKey[MapillaryFakeState] = web.AppKey("mapillary_state", MapillaryFakeState)


def graph_error(status: int, message: str, code: int, etype: str = "OAuthException", subcode: int = 0) -> web.Response:
    return web.json_response({"error": {"message": message, "type": etype, "code": code, "error_subcode": subcode,
                                        "error_user_msg": "", "fbtrace_id": "AsandboxTRACE0"}}, status=status)


@functools.lru_cache(maxsize=4096)
def render_thumbnail(image_id: str, brightness: float, px: int = 64, pattern_seed: str | None = None) -> bytes:
    """A deterministic JPEG (``px`` x ``px``, RGB) whose grey mean is close to ``brightness`` (0-255).

    The texture (block size, phase, gradient direction, noise) is seeded by ``pattern_seed`` (default:
    the image id), so different images look different to a perceptual hash while two images given the
    same ``pattern_seed`` are near-duplicates.

    Pixel arithmetic is done on numpy arrays in the same float64 operations, in the same order, and with the
    same random draws (one ``Random.random()`` per pixel, rows then columns, as ``Random.uniform`` draws) as a
    per-pixel loop, so the bytes are those of that loop (tests/test_sandbox_fakes_cached.py keeps it as the
    reference). The answer is a pure function of the arguments and is cached per process (the sandbox crawl
    asks for the same thumbnails in every test that runs it)."""
    import numpy as np
    from PIL import Image

    rng = random.Random(int(hashlib.sha256((pattern_seed or image_id).encode()).hexdigest()[:12], 16))
    amp = min(40.0, brightness, 255.0 - brightness)
    block = rng.choice([5, 7, 9, 11, 13])
    ox, oy = rng.randrange(block), rng.randrange(block)
    gx, gy = rng.uniform(-1, 1), rng.uniform(-1, 1)
    draw = rng.random
    # rng.uniform(-amp, amp) is -amp + (amp - -amp) * random(): the same draw, the same float operations
    noise = np.array([draw() for _ in range(px * px)], dtype=np.float64).reshape(px, px)
    noise = -amp + (amp - -amp) * noise
    y, x = np.mgrid[0:px, 0:px]
    check = (((x + ox) // block + (y + oy) // block) % 2) * 2 - 1
    grad = (gx * (x - px / 2) + gy * (y - px / 2)) / px
    v = brightness + amp * (0.45 * check + 0.5 * grad) + noise * 0.2
    g = np.clip(np.rint(v), 0, 255).astype(np.int64)  # rint rounds half to even, as round() does
    pix = np.stack([g, np.clip(g + 6, 0, 255), np.clip(g - 6, 0, 255)], axis=-1).astype(np.uint8)
    img = Image.fromarray(pix, "RGB")
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


#: a token of the right form (``MLY|...``) that the fake refuses all the same (401, code 190), as the real API refuses
#: a revoked or mistyped one: the crawl checks the form before any request (crawl40 #8), so a refusal by the API is
#: tested with a token such as ``MLY|refused|x``
REFUSED_TOKEN_PREFIX = "MLY|refused"


def _authorised(request: web.Request) -> bool:
    auth = request.headers.get("Authorization", "")
    token = auth.removeprefix("OAuth ") if auth.startswith("OAuth ") else request.query.get("access_token", "")
    return token.startswith("MLY|") and not token.startswith(REFUSED_TOKEN_PREFIX)


def _sign(st: MapillaryFakeState, image_id: str, size: int, exp: int) -> str:
    return hmac.new(st.secret, f"{image_id}:{size}:{exp}".encode(), "sha256").hexdigest()[:32]


def _render(request: web.Request, st: MapillaryFakeState, img: FakeImage, fields: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if f == "id":
            out["id"] = img.image_id
        elif f in ("geometry", "computed_geometry"):
            out[f] = {"type": "Point", "coordinates": [img.lon, img.lat]}
        elif f == "captured_at":
            out[f] = img.captured_at_ms
        elif f in ("compass_angle", "computed_compass_angle"):
            out[f] = img.compass_angle
        elif f == "is_pano":
            out[f] = img.is_pano
        elif f == "camera_type":
            out[f] = img.camera_type
        elif f == "sequence":
            out[f] = img.sequence
        elif f in THUMB_SIZES and not img.has_thumb:
            out[f] = None
        elif f in THUMB_SIZES:
            exp = int(time.time() + st.ttl_s)
            size = THUMB_SIZES[f]
            base = st.cdn_base.rstrip("/") if st.cdn_base else f"{request.scheme}://{request.host}"
            out[f] = f"{base}/cdn/{img.image_id}/{size}.jpg?exp={exp}&sig={_sign(st, img.image_id, size, exp)}"
    return out


def _fields(request: web.Request) -> list[str] | web.Response:
    raw = request.query.get("fields", "id")
    fields = [f.strip() for f in raw.split(",") if f.strip()]
    bad = [f for f in fields if f not in KNOWN_FIELDS]
    if bad:
        return graph_error(400, f"Tried accessing nonexisting field ({bad[0]}) on node type (Image)", 100, "GraphMethodException")
    return fields


def _iso_ms(value: str | None) -> int | None | web.Response:
    """The ``start_captured_at`` filter (ISO 8601, e.g. ``2024-01-01T00:00:00Z`` or ``2024-01-01``) as epoch ms, None
    when absent, or the Graph API's 400 for a value that is no such time."""
    import datetime

    if value is None:
        return None
    try:
        t = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return graph_error(400, "Invalid parameter: start_captured_at must be an ISO 8601 time", 100,
                           "GraphMethodException")
    if t.tzinfo is None:
        t = t.replace(tzinfo=datetime.timezone.utc)
    return int(t.timestamp() * 1000)


async def _images(request: web.Request) -> web.Response:
    st = request.app[MAPILLARY_STATE]
    if not _authorised(request):
        return graph_error(401, "An access token is required to request this resource.", 190)
    st.search_requests.append(request.query_string)
    hit, st.search_error_times = _take_error(st.search_error, st.search_error_times)
    if hit:
        assert st.search_error is not None
        return st.search_error.response()
    fields = _fields(request)
    if isinstance(fields, web.Response):
        return fields
    try:
        limit = int(request.query.get("limit", "2000"))
        w, s, e, n = (float(x) for x in request.query["bbox"].split(","))
    except (KeyError, ValueError):
        return graph_error(400, "Invalid parameter: bbox must be west,south,east,north and limit an integer", 100, "GraphMethodException")
    if not 1 <= limit <= 2000:
        return graph_error(400, "Invalid parameter: limit must be between 1 and 2000", 100, "GraphMethodException")
    if not (w < e and s < n and -180 <= w and e <= 180 and -90 <= s and n <= 90):
        return graph_error(400, "Invalid parameter: bbox", 100, "GraphMethodException")
    if (e - w) * (n - s) > st.max_bbox_deg2:
        return graph_error(400, "Bounding box too large; split it into smaller tiles", 100, "GraphMethodException")
    pano = request.query.get("is_pano")
    since = None if st.ignore_start_captured_at else _iso_ms(request.query.get("start_captured_at"))
    if isinstance(since, web.Response):
        return since
    hits = [i for i in st.images if w <= i.lon <= e and s <= i.lat <= n
            and (pano is None or i.is_pano == (pano == "true"))
            and (since is None or i.captured_at_ms >= since)]
    if len(hits) > st.dense_threshold:
        return graph_error(500, "Please reduce the amount of data you're asking for, then retry your request", 1,
                           "OAuthException")
    hits.sort(key=lambda i: int(i.image_id))
    return web.json_response({"data": [_render(request, st, i, fields) for i in hits[:limit]]})


async def _one(request: web.Request) -> web.Response:
    st = request.app[MAPILLARY_STATE]
    if not _authorised(request):
        return graph_error(401, "An access token is required to request this resource.", 190)
    iid = request.match_info["image_id"]
    st.image_requests.append(iid)
    fields = _fields(request)
    if isinstance(fields, web.Response):
        return fields
    img = st.by_id().get(iid)
    if img is not None:
        hit, img.graph_error_times = _take_error(img.graph_error, img.graph_error_times)
        if hit:
            assert img.graph_error is not None
            return img.graph_error.response(iid)
    if img is None or img.deleted:
        # the Graph API's answer to an object that does not exist (or no longer does): HTTP 400, code 100,
        # subcode 33, a message longer than the HTTP layer's 300-character excerpt
        return graph_error(400, f"Unsupported get request. Object with ID '{iid}' does not exist, cannot be loaded due to "
                           "missing permissions, or does not support this operation. Please read the Graph API "
                           "documentation at https://developers.facebook.com/docs/graph-api", 100, "GraphMethodException", 33)
    return web.json_response(_render(request, st, img, fields))


async def _cdn(request: web.Request) -> web.Response:
    st = request.app[MAPILLARY_STATE]
    iid, size = request.match_info["image_id"], int(request.match_info["size"])
    st.thumb_requests.append(iid)
    try:
        exp = int(request.query["exp"])
        sig = request.query["sig"]
    except (KeyError, ValueError):
        return web.Response(status=403, text="Bad URL hash", content_type="text/plain")
    if not hmac.compare_digest(sig, _sign(st, iid, size, exp)):
        return web.Response(status=403, text="Bad URL hash", content_type="text/plain")
    if time.time() > exp:
        return web.Response(status=403, text="URL signature expired", content_type="text/plain")
    img = st.by_id().get(iid)
    if img is None:
        return web.Response(status=404, text="Not Found", content_type="text/plain")
    if img.cdn_redirect_loop:
        raise web.HTTPFound(str(request.rel_url))
    if img.cdn_expired_first > 0:
        img.cdn_expired_first -= 1
        return web.Response(status=403, text="URL signature expired", content_type="text/plain")
    body = img.cdn_body
    if body is not None and img.cdn_body_times is not None:
        if img.cdn_body_times <= 0:
            body = None  # the glitch is over
        else:
            img.cdn_body_times -= 1
    if body is not None and img.cdn_chunked:
        resp = web.StreamResponse(headers={"Content-Type": "image/jpeg"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        try:
            for i in range(0, len(body), 64 * 1024):
                await resp.write(body[i:i + 64 * 1024])
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            pass  # the client abandoned the body (its cap): nothing more to send
        return resp
    if body is not None:
        return web.Response(body=body, content_type="text/html")
    key = f"{iid}:{st.thumb_px}"
    if key not in st._jpeg_cache:
        st._jpeg_cache[key] = render_thumbnail(iid, img.brightness, st.thumb_px, img.pattern_seed)
    return web.Response(body=st._jpeg_cache[key], content_type="image/jpeg")


def make_app(images: list[FakeImage] | None = None, *, faults: FaultConfig | None = None,
             state: MapillaryFakeState | None = None, dense_threshold: int = 10_000, ttl_s: float = 600.0) -> web.Application:
    """Build the fake Graph API app (``/images``, ``/{image_id}``) and its thumbnail CDN (``/cdn/...``)."""
    app = web.Application(middlewares=[fault_middleware(faults)] if faults is not None else [])
    app[MAPILLARY_STATE] = state or MapillaryFakeState(images=list(images or []), dense_threshold=dense_threshold, ttl_s=ttl_s)
    app.router.add_get("/images", _images)
    app.router.add_get("/cdn/{image_id:[0-9]+}/{size:[0-9]+}.jpg", _cdn)
    app.router.add_get("/{image_id:[0-9]+}", _one)
    return app


def make_cdn_app(state: MapillaryFakeState, *, faults: FaultConfig | None = None) -> web.Application:
    """The thumbnail CDN alone (``/cdn/...``) over the Graph API fake's ``state``, to serve on a host of its own:
    set ``state.cdn_base`` to its URL and the Graph API fake hands out thumbnail URLs on that host."""
    app = web.Application(middlewares=[fault_middleware(faults)] if faults is not None else [])
    app[MAPILLARY_STATE] = state
    app.router.add_get("/cdn/{image_id:[0-9]+}/{size:[0-9]+}.jpg", _cdn)
    return app
