"""Image bytes for model requests: a file, a blank uniform gray image, or a deterministic placeholder.

The model caller attaches pixels according to the payload's ``image_ref``:

* a file path (``/abs/x.jpg``, ``images/site/123.jpg``; Windows separators as in the release's
  ``streetview\\site\\id.jpg`` are accepted) -> the file's bytes; a missing file is an error, never a
  silent substitute;
* ``"blank:gray"`` -> a uniform mid-gray image (RGB 128,128,128): the no-image control condition;
* ``"synthetic:<seed>"``, or no ``image_ref`` but an ``image_id`` -> a deterministic synthetic placeholder
  (colour blocks seeded by SHA-256 of the seed text). The public GeoContext release ships no pixels, so
  re-running a released campaign against the simulated provider or a local fake uses these; the same
  id always gives the same bytes.

The request key hashes the image *id*, never the bytes (:class:`geoagent.providers.base.ModelRequest`); a
request sent with placeholder pixels in place of a photo without a file also hashes ``pixel_source =
"placeholder"`` (:func:`geoagent.workers.model_caller.build_request`), so it never shares a key with the photo's.
"""

from __future__ import annotations

import functools
import hashlib
import io
import os
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

BLANK_GRAY_REF = "blank:gray"
SYNTHETIC_PREFIX = "synthetic:"
GRAY_LEVEL = 128
BLANK_SIZE_PX = (512, 512)
PLACEHOLDER_SIZE_PX = (640, 480)
#: (width, height) in px the dry run assumes for a planned photo that has no file yet (a campaign before its
#: crawl has fetched the pictures) when no crawl's ``thumb_field`` is known (else :data:`THUMB_PHOTO_SIZE_PX`):
#: a Mapillary ``thumb_1024_url`` thumbnail, what the crawl fetches by default
#: (``[crawl.fetcher] thumb_field``, :mod:`geoagent.crawl.settings`): 1024 px on the long side, 4:3 assumed
#: (gpt-4o high detail bills it 765 input tokens, Claude about 1,049). Not the 640 x 480 placeholder, which
#: would make the expected cost of the real photos too low.
EXPECTED_PHOTO_SIZE_PX = (1024, 768)
#: (width, height) in px the dry run assumes for a photo without a file from a crawl whose ``[crawl.fetcher]
#: thumb_field`` is known (:func:`geoagent.image_files.expected_photo`), per Mapillary thumbnail field: the field's
#: number is the width (Mapillary Graph API v4, api-notes section 6), 4:3 assumed as for
#: :data:`EXPECTED_PHOTO_SIZE_PX`. ``thumb_original_url`` has no fixed size (the camera's own): 4000 x 3000 is
#: assumed, 12 MP at 4:3, the still size of common phones (4032 x 3024) and action cameras (4000 x 3000) that
#: Mapillary sequences are taken with. An assumption, not a bound: OpenAI's gpt-4o rule and Claude downscale such
#: a photo (its bill is that of any large photo), Gemini bills it 258 per 768-px tile (24 tiles, 6,192 tokens),
#: so a larger original costs more there.
THUMB_PHOTO_SIZE_PX: dict[str, tuple[int, int]] = {
    "thumb_256_url": (256, 192),
    "thumb_1024_url": EXPECTED_PHOTO_SIZE_PX,
    "thumb_2048_url": (2048, 1536),
    "thumb_original_url": (4000, 3000),
}


class ImageNotFound(FileNotFoundError):
    """The payload names an image file that does not exist."""


@dataclass(frozen=True, slots=True)
class LoadedImage:
    """Image bytes ready to send: ``data`` (encoded bytes), ``mime``, the ``image_id`` used in the request key,
    and ``source`` (``file``, ``blank`` or ``synthetic``)."""

    data: bytes
    mime: str
    image_id: str
    source: str


def sniff_mime(data: bytes) -> str | None:
    """MIME type from magic bytes (JPEG, PNG, WebP, GIF), or None."""
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    return None


def _encode_jpeg(img: object) -> bytes:
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=85)  # type: ignore[attr-defined]
    return buf.getvalue()


@functools.lru_cache(maxsize=4)
def blank_gray_jpeg(size_px: tuple[int, int] = BLANK_SIZE_PX, level: int = GRAY_LEVEL) -> bytes:
    """JPEG bytes of a uniform gray image (``level`` 0-255 in each RGB channel) of ``size_px`` (w, h)."""
    from PIL import Image

    return _encode_jpeg(Image.new("RGB", size_px, (level, level, level)))


@functools.lru_cache(maxsize=256)
def synthetic_jpeg(seed_text: str, size_px: tuple[int, int] = PLACEHOLDER_SIZE_PX) -> bytes:
    """Deterministic placeholder JPEG for ``seed_text``: a sky/ground split and a few colour blocks.

    The same ``seed_text`` gives the same pixels (and, with the same Pillow build, the same bytes).
    """
    import numpy as np
    from PIL import Image

    seed = int.from_bytes(hashlib.sha256(seed_text.encode("utf-8")).digest()[:8], "big")
    rng = np.random.default_rng(seed)
    w, h = size_px
    arr = np.empty((h, w, 3), dtype=np.uint8)
    horizon = int(h * rng.uniform(0.35, 0.6))
    arr[:horizon] = rng.integers(120, 230, size=3, dtype=np.uint8)  # sky
    arr[horizon:] = rng.integers(40, 140, size=3, dtype=np.uint8)  # ground
    for _ in range(int(rng.integers(4, 10))):  # facades
        x0, x1 = sorted(rng.integers(0, w, size=2))
        y0 = int(rng.integers(h // 8, horizon + 1))
        arr[y0:horizon, x0 : max(x1, x0 + 8)] = rng.integers(30, 220, size=3, dtype=np.uint8)
    return _encode_jpeg(Image.fromarray(arr, "RGB"))


def resolve_image_path(image_ref: str, base_dir: str | os.PathLike[str] | None = None) -> Path:
    """Path of a file ``image_ref`` (backslashes read as separators), relative to ``base_dir`` if not absolute."""
    ref = image_ref
    if "\\" in ref:
        ref = "/".join(PureWindowsPath(ref).parts)
    p = Path(ref)
    if not p.is_absolute() and base_dir is not None:
        p = Path(base_dir) / p
    return p


def load_image(
    image_ref: str | None,
    image_id: str | None = None,
    *,
    base_dir: str | os.PathLike[str] | None = None,
) -> LoadedImage | None:
    """Bytes to attach for a request, or None for a text-only request (no ``image_ref`` and no ``image_id``).

    Parameters
    ----------
    image_ref : str or None
        File path, ``"blank:gray"`` or ``"synthetic:<seed>"`` (see module docstring).
    image_id : str or None
        Stable id for the request key; defaults to ``image_ref`` for blank/synthetic refs and to the
        file name stem for files.
    base_dir : path, optional
        Folder that relative file paths are resolved against.

    Raises
    ------
    ImageNotFound
        ``image_ref`` is a path and no such file exists.
    ValueError
        The file is not a JPEG, PNG, WebP or GIF image.
    """
    if not image_ref:
        if image_id is None:
            return None
        return LoadedImage(synthetic_jpeg(str(image_id)), "image/jpeg", str(image_id), "synthetic")
    if image_ref == BLANK_GRAY_REF:
        return LoadedImage(blank_gray_jpeg(), "image/jpeg", str(image_id or BLANK_GRAY_REF), "blank")
    if image_ref.startswith(SYNTHETIC_PREFIX):
        seed_text = image_ref[len(SYNTHETIC_PREFIX) :] or str(image_id or "")
        return LoadedImage(synthetic_jpeg(seed_text), "image/jpeg", str(image_id or image_ref), "synthetic")
    path = resolve_image_path(image_ref, base_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ImageNotFound(f"image file not found: {path}") from None
    mime = sniff_mime(data)
    if mime is None:
        raise ValueError(f"not a JPEG/PNG/WebP/GIF image: {path}")
    data = without_metadata(data, mime)
    return LoadedImage(data, mime, str(image_id or path.stem), "file")


#: JPEG markers of the segments that carry metadata a photo's location can be in: APP1 (EXIF with its GPS IFD, XMP),
#: APP11 (JUMBF / C2PA manifests, whose EXIF assertion can hold GPS), APP13 (Photoshop IPTC), COM (comments)
_JPEG_METADATA_MARKERS = frozenset({0xE1, 0xEB, 0xED, 0xFE})
#: PNG ancillary chunks that carry metadata (EXIF; text chunks hold XMP and free text)
_PNG_METADATA_CHUNKS = frozenset({b"eXIf", b"tEXt", b"iTXt", b"zTXt"})


def without_metadata(data: bytes, mime: str) -> bytes:
    """``data`` (an image of type ``mime``) without the metadata a photo's location can be in, the pixels untouched:
    JPEG (:func:`without_jpeg_metadata`), PNG (its ``eXIf`` and text chunks) and WebP (its ``EXIF`` and ``XMP``
    chunks); other types unchanged. A photo's GPS position must not reach the model or its provider with the pixels:
    a geolocation benchmark would hand over its own answer."""
    if mime == "image/jpeg":
        return without_jpeg_metadata(data)
    if mime == "image/png":
        return _without_png_metadata(data)
    if mime == "image/webp":
        return _without_webp_metadata(data)
    return data


def without_jpeg_metadata(data: bytes) -> bytes:
    """``data`` (a JPEG) without its EXIF, XMP, JUMBF, IPTC and comment segments and without what follows its end of
    image (a phone's secondary images: MPF depth or gain maps, each with its own EXIF), the compressed pixels copied
    as they are (the segments are cut out of the byte stream, nothing is decoded). An EXIF orientation other than 1 is
    kept, alone, in a minimal EXIF segment (cutting it would turn the photo on its side). Stray bytes between
    segments are skipped as decoders skip them. A file whose segments cannot be read is re-encoded without metadata
    by Pillow (review39c #3: such a file went out whole, GPS and all); one Pillow cannot read either is returned
    unchanged (no provider will read it)."""
    if not data.startswith(b"\xff\xd8"):
        return data
    out = [data[:2]]
    i, cut = 2, False
    while i + 4 <= len(data):
        if data[i] != 0xFF:  # stray bytes before a marker ("extraneous bytes", as libjpeg says): skipped
            nxt = data.find(b"\xff", i)
            if nxt < 0:
                break
            i, cut = nxt, True
            continue
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0xD9:  # end of image: anything after it is not this picture
            out.append(data[i:i + 2])
            return b"".join(out) if cut or i + 2 < len(data) else data
        if marker == 0xDA:  # start of scan: the compressed picture, up to its end of image (0xFFD9 cannot occur in
            end = data.find(b"\xff\xd9", i)  # the entropy-coded data: a 0xFF there is stuffed or a restart marker)
            if end < 0:
                out.append(data[i:])
                return b"".join(out) if cut else data
            out.append(data[i:end + 2])
            return b"".join(out) if cut or end + 2 < len(data) else data
        if 0xD0 <= marker <= 0xD7 or marker == 0x01:  # markers without a length
            out.append(data[i:i + 2])
            i += 2
            continue
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if length < 2 or i + 2 + length > len(data):
            break
        segment = data[i:i + 2 + length]
        if marker in _JPEG_METADATA_MARKERS:
            turn = _exif_orientation(segment[10:]) if marker == 0xE1 and segment[4:10] == b"Exif\x00\x00" else None
            if turn not in (None, 1):
                out.append(_orientation_only_app1(turn))  # keep the photo upright, nothing else of the EXIF
            cut = True
        else:
            out.append(segment)
        i += 2 + length
    return _reencoded_without_metadata(data)


def _reencoded_without_metadata(data: bytes) -> bytes:
    """``data`` decoded and written again as a JPEG (quality 95) without metadata, upright by its EXIF orientation;
    ``data`` itself when Pillow cannot read it."""
    import io as _io

    from PIL import Image, ImageOps

    try:
        with Image.open(_io.BytesIO(data)) as img:
            frame = ImageOps.exif_transpose(img) or img
            buf = _io.BytesIO()
            frame.convert("RGB").save(buf, format="JPEG", quality=95)
            return buf.getvalue()
    except Exception:  # noqa: BLE001 - Pillow raises many types for unreadable input
        return data


def _without_png_metadata(data: bytes) -> bytes:
    """``data`` (a PNG) without its ``eXIf``, ``tEXt``, ``iTXt`` and ``zTXt`` chunks; unchanged when it has none or
    its chunks cannot be read."""
    sig = b"\x89PNG\r\n\x1a\n"
    if not data.startswith(sig):
        return data
    out, i, cut = [sig], len(sig), False
    while i + 12 <= len(data):
        length = int.from_bytes(data[i:i + 4], "big")
        kind = data[i + 4:i + 8]
        end = i + 12 + length
        if end > len(data):
            return data
        if kind in _PNG_METADATA_CHUNKS:
            cut = True
        else:
            out.append(data[i:end])
        i = end
        if kind == b"IEND":
            break
    return b"".join(out) if cut else data


def _without_webp_metadata(data: bytes) -> bytes:
    """``data`` (a WebP) without its ``EXIF`` and ``XMP `` chunks (the ``VP8X`` flags that announce them cleared, the
    RIFF size set again); unchanged when it has none or its chunks cannot be read."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WEBP":
        return data
    out, i, cut = [], 12, False
    while i + 8 <= len(data):
        kind = data[i:i + 4]
        size = int.from_bytes(data[i + 4:i + 8], "little")
        end = i + 8 + size + (size & 1)
        if i + 8 + size > len(data):
            return data
        chunk = data[i:min(end, len(data))]
        if kind in (b"EXIF", b"XMP "):
            cut = True
        elif kind == b"VP8X" and size >= 1:
            flags = chunk[8] & ~0x0C  # EXIF (0x08) and XMP (0x04) flags
            chunk = chunk[:8] + bytes([flags]) + chunk[9:]
            out.append(chunk)
        else:
            out.append(chunk)
        i = end
    if not cut:
        return data
    body = b"WEBP" + b"".join(out)
    return b"RIFF" + len(body).to_bytes(4, "little") + body


def _orientation_only_app1(orientation: int) -> bytes:
    """A JPEG APP1 segment whose EXIF holds the Orientation tag alone (little-endian TIFF, one IFD entry)."""
    tiff = (b"II*\x00" + (8).to_bytes(4, "little") + (1).to_bytes(2, "little")
            + (0x0112).to_bytes(2, "little") + (3).to_bytes(2, "little") + (1).to_bytes(4, "little")
            + int(orientation).to_bytes(2, "little") + b"\x00\x00" + (0).to_bytes(4, "little"))
    body = b"Exif\x00\x00" + tiff
    return b"\xff\xe1" + (len(body) + 2).to_bytes(2, "big") + body


def _exif_orientation(tiff: bytes) -> int | None:
    """The Orientation tag (0x0112) of the first IFD of an EXIF TIFF block, or None."""
    if len(tiff) < 8 or tiff[:2] not in (b"II", b"MM"):
        return None
    order = "little" if tiff[:2] == b"II" else "big"
    ifd = int.from_bytes(tiff[4:8], order)
    if ifd + 2 > len(tiff):
        return None
    n = int.from_bytes(tiff[ifd:ifd + 2], order)
    for k in range(n):
        e = ifd + 2 + 12 * k
        if e + 12 > len(tiff):
            return None
        if int.from_bytes(tiff[e:e + 2], order) == 0x0112:
            return int.from_bytes(tiff[e + 8:e + 10], order)
    return None
