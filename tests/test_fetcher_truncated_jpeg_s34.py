"""A thumbnail whose scan data was cut short is unreadable, not a usable image (break34 crawl #2).

A JPEG body cut to its first third with the end-of-image marker FF D9 appended passed the "complete JPEG" check,
and Pillow decoded it without an error, filling the missing two thirds with (128, 128, 128): a dark frame (mean
59.5, under the daylight filter's 90) measured 106.6 and was kept; in the helper's crawl 6 of 7 such thumbnails
were marked usable by the audit.
"""

from __future__ import annotations

import io
import random

import pytest
from PIL import Image

from geoagent.crawl.fetcher import mean_brightness, truncation_problem


def _dark_frame(size=(256, 192), mode="RGB", progressive=False) -> bytes:
    rnd = random.Random(1)
    im = Image.new("RGB", size)
    im.putdata([(rnd.randrange(40, 80),) * 3 for _ in range(size[0] * size[1])])
    b = io.BytesIO()
    im.convert(mode).save(b, "JPEG", quality=90, progressive=progressive)
    return b.getvalue()


def test_a_whole_dark_frame_measures_dark():
    assert 55 < mean_brightness(_dark_frame()) < 65


@pytest.mark.parametrize("mode", ["RGB", "L"])
@pytest.mark.parametrize("keep", [1 / 3, 2 / 3, 0.9])
def test_a_frame_cut_short_before_its_end_marker_is_refused(mode, keep):
    full = _dark_frame(mode=mode)
    cut = full[: int(len(full) * keep)] + b"\xff\xd9"
    with Image.open(io.BytesIO(cut)) as im:  # Pillow itself decodes it without complaint
        im.load()
        assert im.getpixel((im.width - 1, im.height - 1)) in (128, (128, 128, 128))
    with pytest.raises(ValueError, match="scan data cut short"):
        mean_brightness(cut)


def test_uniform_grey_that_is_not_filler_is_kept():
    # a frame whose bottom rows are grey but not exactly the filler (a sky, a wall) is measured as before
    im = Image.new("RGB", (64, 48), (129, 128, 127))
    b = io.BytesIO()
    im.save(b, "JPEG", quality=95)
    with Image.open(io.BytesIO(b.getvalue())) as dec:
        dec.load()
        assert truncation_problem(dec) is None
    # other formats are not checked (only libjpeg fills a cut scan so)
    png = io.BytesIO()
    Image.new("RGB", (64, 48), (128, 128, 128)).save(png, "PNG")
    with Image.open(io.BytesIO(png.getvalue())) as dec:
        dec.load()
        assert truncation_problem(dec) is None
