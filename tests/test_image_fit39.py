"""Images fitted to a provider's limits before sending (providers39 #2, #8).

Before: an image over Anthropic's 5 MB base64 limit or 8000 px a side, and a GIF to Gemini, were sent as they came:
the API refuses each with HTTP 400, so that model's request was dead-lettered while the other models answered (the
models of one campaign answered different items, unsaid). The Anthropic fake took both. Now the provider re-encodes
the image to fit (Claude reads at most 1568 px a side anyway; a GIF's first frame as PNG for Gemini), and the
Anthropic fake refuses what the API refuses. Real providers against the local fakes.
"""

from __future__ import annotations

import io
import os

import anyio
import pytest
from PIL import Image

from geoagent.image_fit import ANTHROPIC_MAX_IMAGE_B64, GEMINI_IMAGE_MIMES, b64_len, fit_image
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError
from geoagent.sandbox import llm_anthropic, llm_gemini
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02,
                  timeout_s=60)


def _noise(w: int, h: int, fmt: str) -> bytes:
    img = Image.frombytes("RGB", (w, h), os.urandom(w * h * 3))
    buf = io.BytesIO()
    img.save(buf, format=fmt)
    return buf.getvalue()


@pytest.fixture(scope="module")
def big_png() -> bytes:
    data = _noise(1800, 1400, "PNG")  # random pixels do not compress: about 7.5 MB
    assert b64_len(len(data)) > ANTHROPIC_MAX_IMAGE_B64
    return data


def _side(data: bytes) -> int:
    with Image.open(io.BytesIO(data)) as img:
        return max(img.size)


def test_an_image_within_the_limits_is_sent_byte_for_byte():
    data = _noise(64, 48, "JPEG")
    got = fit_image(data, "image/jpeg", max_b64=ANTHROPIC_MAX_IMAGE_B64, max_side_px=8000, fit_edge_px=1568)
    assert got.data is data and got.mime == "image/jpeg" and got.note is None


def test_too_large_and_too_wide_images_are_re_encoded_to_fit(big_png):
    got = fit_image(big_png, "image/png", max_b64=ANTHROPIC_MAX_IMAGE_B64, max_side_px=8000, fit_edge_px=1568)
    assert b64_len(len(got.data)) <= ANTHROPIC_MAX_IMAGE_B64 and _side(got.data) <= 1568
    assert "base64 data" in got.note
    wide = _noise(8200, 20, "PNG")
    got = fit_image(wide, "image/png", max_side_px=8000, fit_edge_px=1568)
    assert _side(got.data) == 1568 and got.mime == "image/png" and "8200 x 20 px" in got.note


def test_a_gif_becomes_a_png_of_its_first_frame_at_its_own_size():
    frames = [Image.new("RGB", (40, 30), c) for c in ("red", "blue")]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF", save_all=True, append_images=frames[1:])
    got = fit_image(buf.getvalue(), "image/gif", mimes=GEMINI_IMAGE_MIMES, fit_edge_px=3072)
    assert got.mime == "image/png" and "image/gif is not taken" in got.note
    with Image.open(io.BytesIO(got.data)) as img:
        assert img.size == (40, 30) and img.convert("RGB").getpixel((5, 5)) == (255, 0, 0)


def _ask(app, kind: str, image: bytes, mime: str):
    async def main():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind=kind, model="m", base_url=base, api_key="k-test-39"), http)
            return await prov.generate(ModelRequest(provider=kind, model="m", prompt="Where?", image_id="img1",
                                                    image=image, image_mime=mime, params={"max_output_tokens": 64}))

    return anyio.run(main)


def test_the_anthropic_fake_refuses_what_the_api_refuses_and_the_provider_fits_it(big_png):
    async def raw_call(image: bytes):
        import base64

        async with serve(llm_anthropic.make_app(require_auth=False)) as base, HttpClient(default_policy=FAST) as http:
            body = {"model": "m", "max_tokens": 16, "messages": [{"role": "user", "content": [
                {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                             "data": base64.b64encode(image).decode()}},
                {"type": "text", "text": "Where?"}]}]}
            return await http.request("POST", base + "/v1/messages", json=body,
                                      headers={"anthropic-version": "2023-06-01"})

    with pytest.raises(PermanentHTTPError) as e:
        anyio.run(raw_call, big_png)
    assert e.value.status == 400 and "image exceeds 5 MB maximum" in str(e.value)
    with pytest.raises(PermanentHTTPError) as e:
        anyio.run(raw_call, _noise(8100, 10, "PNG"))
    assert "8000 pixels" in str(e.value)
    resp = _ask(llm_anthropic.make_app(require_auth=False), "anthropic", big_png, "image/png")
    assert resp.text and resp.usage.input_tokens > 0


def test_the_gemini_provider_sends_a_gif_as_png():
    frames = [Image.new("RGB", (40, 30), "red")]
    buf = io.BytesIO()
    frames[0].save(buf, format="GIF")
    resp = _ask(llm_gemini.make_app(require_auth=False), "gemini", buf.getvalue(), "image/gif")
    assert resp.text


def test_a_refit_keeps_the_photo_upright_and_reads_at_the_models_edge(big_png):
    """review39b #5, #6: the copy lost its EXIF orientation tag (a portrait photo sent lying down), and newer
    Claude models read at 2576 px, not 1568."""
    img = Image.frombytes("RGB", (3000, 2000), os.urandom(3000 * 2000 * 3))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to view
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=100, exif=exif)
    data = buf.getvalue()
    assert b64_len(len(data)) > ANTHROPIC_MAX_IMAGE_B64
    got = fit_image(data, "image/jpeg", max_b64=ANTHROPIC_MAX_IMAGE_B64, max_side_px=8000, fit_edge_px=2576)
    with Image.open(io.BytesIO(got.data)) as out:
        assert out.size[1] > out.size[0] and max(out.size) <= 2576  # upright: portrait
        assert b64_len(len(got.data)) <= ANTHROPIC_MAX_IMAGE_B64


def test_a_photos_location_metadata_is_not_sent():
    """A JPEG's EXIF (its GPS position), XMP and IPTC segments are cut before the photo is sent: a geolocation
    benchmark must not hand the model or its provider the answer with the pixels. Pixels untouched; a photo whose
    EXIF turns it (orientation 6) keeps that tag alone; one without metadata is sent as it is."""
    from geoagent.workers.images import load_image

    img = Image.new("RGB", (50, 40), "red")
    exif = Image.Exif()
    exif[0x8825] = {2: (48.0, 51.0, 30.0), 4: (2.0, 21.0, 0.0)}  # GPS latitude / longitude
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif)
    with_gps = buf.getvalue()
    from tempfile import TemporaryDirectory

    with TemporaryDirectory() as d:
        f = os.path.join(d, "123.jpg")
        with open(f, "wb") as fh:
            fh.write(with_gps)
        sent = load_image(f, "123").data
    assert b"Exif" in with_gps and b"Exif" not in sent and len(sent) < len(with_gps)
    with Image.open(io.BytesIO(sent)) as a, Image.open(io.BytesIO(with_gps)) as b:
        assert a.convert("RGB").tobytes() == b.convert("RGB").tobytes()
    from geoagent.workers.images import without_jpeg_metadata

    turned = Image.Exif()
    turned[0x0112] = 6
    turned[0x8825] = {2: (48.0, 51.0, 30.0)}
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=turned)
    kept = without_jpeg_metadata(buf.getvalue())
    with Image.open(io.BytesIO(kept)) as k:
        ex = k.getexif()
        assert ex.get(0x0112) == 6 and 0x8825 not in ex and k.size == (50, 40)  # upright, no GPS
    plain = io.BytesIO()
    img.save(plain, format="JPEG")
    bare = plain.getvalue()
    assert without_jpeg_metadata(bare) is bare
    assert without_jpeg_metadata(b"not a jpeg") == b"not a jpeg"


def test_metadata_is_cut_from_awkward_jpegs_pngs_and_webps():
    """review39c #3: a stray byte between segments sent the file whole (GPS and all); a phone's secondary image
    after the end of image, APP11 and comments were kept; PNG and WebP metadata went out untouched."""
    from geoagent.workers.images import without_jpeg_metadata, without_metadata

    img = Image.new("RGB", (50, 40), "red")
    exif = Image.Exif()
    exif[0x8825] = {2: (48.0, 51.0, 30.0)}
    buf = io.BytesIO()
    img.save(buf, format="JPEG", exif=exif)
    jpeg = buf.getvalue()
    dqt = jpeg.find(b"\xff\xdb")
    for text in (jpeg[:dqt] + b"\x00" + jpeg[dqt:], jpeg + jpeg,
                 jpeg[:2] + b"\xff\xfe\x00\x0eGPS 48.8, 2.3" + jpeg[2:]):
        out = without_jpeg_metadata(text)
        assert b"Exif" not in out and b"GPS" not in out
        with Image.open(io.BytesIO(out)) as a, Image.open(io.BytesIO(jpeg)) as b:
            assert a.convert("RGB").tobytes() == b.convert("RGB").tobytes()
    for fmt, mime, tag in (("PNG", "image/png", b"eXIf"), ("WEBP", "image/webp", b"EXIF")):
        buf = io.BytesIO()
        img.save(buf, format=fmt, exif=exif)
        out = without_metadata(buf.getvalue(), mime)
        assert tag in buf.getvalue() and tag not in out
        with Image.open(io.BytesIO(out)) as a:
            a.load()
            assert a.size == (50, 40) and 0x8825 not in a.getexif()
