"""Make an image fit a provider's documented limits before it is sent (providers39 #2, #8).

A photo the API refuses is a permanent failure of that model's request only, so the models of one campaign would
answer different sets of items without a word. Two providers refuse images the others take:

* Anthropic Messages: an image whose base64 data is longer than 5 MiB (HTTP 400 "image exceeds 5 MB maximum"),
  or with a side over 8000 px (vision guide, "Image size limits"). Claude downsizes any image whose long edge passes
  the edge it reads at (1568 px; 2576 px from Claude Opus 4.7: :func:`geoagent.config.anthropic_resolution`) before
  reading it, so a fitted image is re-encoded at that long edge: the model sees what it would have seen.
* Gemini ``generateContent``: inline image MIME types PNG, JPEG, WEBP, HEIC and HEIF only (GIF: HTTP 400
  "Unsupported MIME type"), and a whole request of at most 20 MB (ai.google.dev, "Image understanding").

:func:`fit_image` leaves an image that fits alone (byte for byte) and otherwise re-encodes it with Pillow: the first
frame, scaled down only when a size limit requires it, as JPEG when the source was JPEG (quality 92) and as PNG
otherwise (JPEG when a PNG would still be too large).
"""

from __future__ import annotations

import io
from dataclasses import dataclass

#: Anthropic's limit on one image's base64 data, in characters (5 MiB; HTTP 400 beyond it)
ANTHROPIC_MAX_IMAGE_B64 = 5 * 1024 * 1024
#: Anthropic's largest image side, px (vision guide)
ANTHROPIC_MAX_SIDE_PX = 8000
#: the image MIME types Gemini takes inline
GEMINI_IMAGE_MIMES = frozenset({"image/png", "image/jpeg", "image/webp", "image/heic", "image/heif"})
#: room left for one inline image in a Gemini request of at most 20 MB (the prompt and JSON take the rest), chars
GEMINI_MAX_IMAGE_B64 = 19 * 1000 * 1000
#: long edge a Gemini image too large for a request is re-encoded at, px (Gemini tiles images at 768 px anyway)
GEMINI_FIT_EDGE_PX = 3072


@dataclass(frozen=True, slots=True)
class FittedImage:
    """An image ready to send: ``data`` (bytes), its ``mime`` type, and ``note``: what was changed and why (None
    when the image was sent as it came)."""

    data: bytes
    mime: str
    note: str | None = None


class ImageUnfit(ValueError):
    """The image exceeds a limit and cannot be re-encoded (Pillow cannot read it)."""


def b64_len(n_bytes: int) -> int:
    """Length in characters of the base64 text of ``n_bytes`` bytes (padded)."""
    return 4 * ((n_bytes + 2) // 3)


def fit_image(data: bytes, mime: str, *, max_b64: int | None = None, max_side_px: int | None = None,
              fit_edge_px: int, mimes: frozenset[str] | None = None) -> FittedImage:
    """``data`` (of type ``mime``) within the limits: base64 at most ``max_b64`` characters, no side over
    ``max_side_px`` px, a type among ``mimes``; unchanged when it already is. Otherwise re-encoded (module doc),
    scaled to a long edge of at most ``fit_edge_px`` px when a size limit was passed.

    Raises
    ------
    ImageUnfit
        The image passes a limit and Pillow cannot read it (a damaged file, a decompression bomb).
    """
    from PIL import Image

    why: list[str] = []
    too_big = max_b64 is not None and b64_len(len(data)) > max_b64
    if too_big:
        why.append(f"its base64 data ({b64_len(len(data)):,} characters) passes the limit of {max_b64:,}")
    if mimes is not None and mime not in mimes:
        why.append(f"type {mime} is not taken ({', '.join(sorted(mimes))})")
    size = None
    if max_side_px is not None:
        try:
            with Image.open(io.BytesIO(data)) as probe:
                size = probe.size
        except Exception:  # noqa: BLE001 - a file Pillow cannot read is sent as it is unless a limit is passed
            size = None
        if size is not None and max(size) > max_side_px:
            too_big = True
            why.append(f"its size {size[0]} x {size[1]} px passes the limit of {max_side_px} px a side")
    if not why:
        return FittedImage(data, mime)
    try:
        with Image.open(io.BytesIO(data)) as img:
            img.seek(0)  # an animation's first frame
            frame = img.copy()
    except Exception as exc:  # noqa: BLE001 - Pillow raises many types for unreadable input
        raise ImageUnfit(f"the image cannot be sent as it is ({'; '.join(why)}) and cannot be re-encoded: "
                         f"{type(exc).__name__}") from None
    from PIL import ImageOps

    # the pixels upright: the copy keeps no EXIF, so an orientation tag would be lost (review39b #6)
    frame = ImageOps.exif_transpose(frame) or frame
    if too_big and max(frame.size) > fit_edge_px:  # only a size limit scales the image down
        frame.thumbnail((fit_edge_px, fit_edge_px), Image.Resampling.LANCZOS)
    out, out_mime = _encode(frame, jpeg=mime == "image/jpeg")
    if max_b64 is not None and b64_len(len(out)) > max_b64 and out_mime != "image/jpeg":
        out, out_mime = _encode(frame, jpeg=True)
    while max_b64 is not None and b64_len(len(out)) > max_b64 and max(frame.size) > 64:
        # still too large (a photo of pure noise): a smaller edge until it fits
        edge = int(max(frame.size) * 0.75)
        frame.thumbnail((edge, edge), Image.Resampling.LANCZOS)
        out, out_mime = _encode(frame, jpeg=True)
    return FittedImage(out, out_mime, f"image re-encoded as {out_mime}, {frame.size[0]} x {frame.size[1]} px: "
                                      + "; ".join(why))


def _encode(frame: "object", *, jpeg: bool) -> tuple[bytes, str]:
    buf = io.BytesIO()
    if jpeg:
        rgb = frame.convert("RGB")  # type: ignore[attr-defined]
        rgb.save(buf, format="JPEG", quality=92)
        return buf.getvalue(), "image/jpeg"
    img = frame
    if getattr(img, "mode", "RGB") not in ("RGB", "RGBA", "L", "LA"):
        img = img.convert("RGBA")  # type: ignore[attr-defined]
    img.save(buf, format="PNG")  # type: ignore[attr-defined]
    return buf.getvalue(), "image/png"


def fitted(provider: str, request: "object", **limits: object) -> FittedImage:
    """The image of a provider's ``request`` (:class:`geoagent.providers.base.ModelRequest`) made to fit ``limits``
    (:func:`fit_image`); a re-encoding is logged (logger ``geoagent.image_fit``, with the image id and why).

    Raises
    ------
    geoagent.providers.errors.UnsupportedRequest
        It cannot be made to fit (:class:`ImageUnfit`): refused before anything is sent or reserved.
    """
    import logging

    from geoagent.providers.errors import UnsupportedRequest

    data, mime = request.image, request.image_mime  # type: ignore[attr-defined]
    try:
        img = fit_image(data, mime, **limits)  # type: ignore[arg-type]
    except ImageUnfit as exc:
        raise UnsupportedRequest(provider, str(getattr(request, "model", "")), str(exc)) from None
    if img.note:
        logging.getLogger(__name__).info("%s: image %s: %s", provider, getattr(request, "image_id", None), img.note)
    return img
