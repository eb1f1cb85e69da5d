"""A Mapillary image id is a positive integer: ``"0"``, ``"00"`` (and signed ids) are no image id (session 16).

Graph API v4 sends an image's ``id`` as a numeric string (api-notes section 6); ids are positive. Before the
fix :func:`geoagent.paths.safe_image_id` wrote ``"0"`` and ``"00"`` as image ``"0"``: a search answer naming
image 0 was found, counted for coverage, requested from the Graph API and could become ``images/<site>/0.jpg``.
Now the validator refuses them with an error naming the id, where other bad ids (signs, letters, Unicode digits)
are refused, so every reader of ids agrees. Real client and fetcher over the local Mapillary fake."""

from __future__ import annotations

import re

import pytest

from geoagent.crawl.image_audit import image_key
from geoagent.paths import safe_image_id
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.faults import FaultConfig, find_fault_state

from test_crawl_image_id_leading_zero import LAT, LON, search_count_fetch


@pytest.mark.parametrize("bad", ["0", "00", "000", 0, "-1", -1, "-0"])
def test_a_non_positive_id_is_refused_naming_the_id(bad):
    with pytest.raises(ValueError, match=re.escape(repr(str(bad)))):
        safe_image_id(bad)


def test_positive_ids_are_unchanged():
    assert safe_image_id("1") == safe_image_id("01") == safe_image_id(1) == "1"
    assert safe_image_id("800000000001") == "800000000001"
    assert image_key("images/s1/010.jpg") == "10"
    with pytest.raises(ValueError, match="0.jpg"):
        image_key("images/s1/0.jpg")


def test_a_search_answer_naming_image_0_is_left_out_never_requested(tmp_path):
    # two rows with id "0" / "00" at the camera position next to one real image: one image (before: 2 found,
    # "0" requested from the Graph API and fetched as images/s1/0.jpg)
    imgs = [fake.FakeImage("0", LAT, LON, brightness=150),
            fake.FakeImage("00", LAT + 0.0002, LON, brightness=150, pattern_seed="c"),
            fake.FakeImage("800000000002", LAT + 0.00054, LON, brightness=150, pattern_seed="b")]

    app = fake.make_app(imgs, faults=FaultConfig())  # no faults: the request log only

    found, count, res = search_count_fetch(app, tmp_path)
    assert [img.image_id for img, _ in found] == ["800000000002"]
    assert count.total == 1
    assert [k["image_id"] for k in res.kept] == ["800000000002"]
    assert sorted(p.name for p in (tmp_path / "s1").glob("*.jpg")) == ["800000000002.jpg"]
    requested = [r.path for r in find_fault_state(app).log]
    assert "/800000000002" in requested and not any(p in ("/0", "/00") or p.startswith("/cdn/0") for p in requested)


def test_an_id_read_as_a_float_says_to_write_it_as_a_string():
    """break34 export #7: a 23-digit id written as a JSON number is read as a float by orjson; the message said
    'must be decimal digits, got 9.876543210987654e+22', which reads as if the file held that text."""
    import pytest

    from geoagent.paths import safe_image_id

    with pytest.raises(ValueError, match="a JSON number too large to read exactly: write the id as a string"):
        safe_image_id(9.876543210987654e+22)
