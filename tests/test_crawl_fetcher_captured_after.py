"""``[crawl.fetcher] captured_after``: the benchmark regenerated on imagery captured after a given date (seed 000
Sec. 3, Fig. 1; crawl40 #9).

The date (ISO ``YYYY-MM-DD``, or TOML's own unquoted date) is sent to Mapillary's image search as
``start_captured_at`` (api-notes section 6; the fake implements it), checked again on each image's ``captured_at``
(an image the API sends all the same is left out before download, with its reason), and recorded in the selection
settings: another date is another selection, and a crawl that changes it is told so. Unset, the selection key of
every earlier crawl is unchanged. Real client and fetcher against the Mapillary fake (real HTTP on loopback).
"""

from __future__ import annotations

import asyncio
import datetime
import tomllib
from urllib.parse import parse_qs

import pytest

from geoagent.clients.mapillary import MapillaryClient
from geoagent.crawl.campaign import image_counts_line
from geoagent.crawl.fetcher import CAPTURED_BEFORE, fetch_site_images, selection_key, selection_settings
from geoagent.crawl.settings import CrawlConfigError, FetcherSettings, load_crawl_settings
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
LAT, LON = 41.39, 2.17
SITE = {"site": "bcn_site", "lat": LAT, "lon": LON}


def _ms(day: str) -> int:
    d = datetime.date.fromisoformat(day)
    return int(datetime.datetime(d.year, d.month, d.day, tzinfo=datetime.timezone.utc).timestamp() * 1000)


def _images() -> list[fake.FakeImage]:
    """Four images 50 m apart: two captured in 2021, one just before 2024-01-01 and one on that day."""
    when = {"800000000001": _ms("2021-06-01"), "800000000002": _ms("2023-12-31") + 86_399_000,
            "800000000003": _ms("2024-01-01"), "800000000005": _ms("2021-07-01")}
    return [fake.FakeImage(iid, LAT + k * 0.00045, LON, brightness=150.0, captured_at_ms=ms)
            for k, (iid, ms) in zip((0, 1, 2, -1), when.items())]


async def _walk(tmp_path, settings: FetcherSettings, state: fake.MapillaryFakeState | None = None):
    st = state or fake.MapillaryFakeState(images=_images())
    async with serve(fake.make_app(state=st)) as base, HttpClient(default_policy=FAST) as http:
        m = MapillaryClient(http, base, "MLY|1|tok", UA)
        res = await fetch_site_images(SITE, m, settings, tmp_path)
    return res, st


def test_only_images_captured_on_or_after_the_day_are_kept_and_the_search_asks_for_them(tmp_path):
    res, st = asyncio.run(_walk(tmp_path, FetcherSettings(captured_after="2024-01-01")))
    assert [k["image_id"] for k in res.kept] == ["800000000003"]
    assert res.rejected == []  # the fake applied the filter: nothing earlier was sent
    (query,) = st.search_requests
    assert parse_qs(query)["start_captured_at"] == ["2024-01-01T00:00:00Z"]
    assert st.thumb_requests == ["800000000003"]
    assert res.selection["fetcher"]["captured_after"] == "2024-01-01"


def test_an_image_the_api_sends_all_the_same_is_left_out_before_download(tmp_path):
    # an image search that ignores start_captured_at (the filter is unconfirmed for /images): the fetcher's own check
    st = fake.MapillaryFakeState(images=_images(), ignore_start_captured_at=True)
    res, st = asyncio.run(_walk(tmp_path, FetcherSettings(captured_after="2024-01-01"), st))
    assert [k["image_id"] for k in res.kept] == ["800000000003"]
    reasons = {r["image_id"]: r["reason"] for r in res.rejected}
    assert sorted(reasons) == ["800000000001", "800000000002", "800000000005"]
    assert all(r.startswith(f"{CAPTURED_BEFORE} 2024-01-01 (captured earlier)") for r in reasons.values()), reasons
    assert st.thumb_requests == ["800000000003"]  # none of the earlier ones downloaded


def test_unset_keeps_every_earlier_selection_key_and_a_date_makes_another():
    plain = selection_settings(SITE, FetcherSettings())
    assert "captured_after" not in plain["fetcher"]
    dated = selection_settings(SITE, FetcherSettings(captured_after="2024-01-01"))
    other = selection_settings(SITE, FetcherSettings(captured_after="2023-01-01"))
    assert len({selection_key(plain), selection_key(dated), selection_key(other)}) == 3


def test_the_date_is_checked_at_load_and_toml_dates_are_taken():
    base = {"contact": "mailto:a@b.org"}
    for bad in ("2024-13-01", "2024/01/01", "20240101"):
        with pytest.raises(CrawlConfigError, match="crawl.fetcher.captured_after.*YYYY-MM-DD"):
            load_crawl_settings({**base, "fetcher": {"captured_after": bad}})
    toml = tomllib.loads('[crawl]\ncontact = "mailto:a@b.org"\n[crawl.fetcher]\ncaptured_after = 2024-01-01\n')
    assert load_crawl_settings(toml["crawl"]).fetcher.captured_after == "2024-01-01"


def test_the_images_line_names_the_rejections():
    counts = {"kept": 1, "rejected": {}, "skipped": {"captured before [crawl.fetcher] captured_after": 3},
              "usable": 1, "excluded": 0, "audited": 1}
    assert "3 skipped before download: 3 captured before [crawl.fetcher] captured_after" in image_counts_line(counts)


def test_a_changed_date_on_a_finished_crawl_is_named_as_a_change(sandbox_crawled, capsys):
    from geoagent.cli import main
    from tests._crawl_once import SANDBOX_CRAWL_CONFIG

    root, _ = sandbox_crawled
    text = SANDBOX_CRAWL_CONFIG.read_text(encoding="utf-8").replace(
        "[crawl.fetcher]\n", "[crawl.fetcher]\ncaptured_after = 2023-01-01\n", 1)
    cfg = root / "crawl_dated.toml"
    cfg.write_text(text, encoding="utf-8")
    capsys.readouterr()
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "crawl.fetcher.captured_after: unset -> '2023-01-01'" in err, err


def test_a_site_left_without_images_by_the_date_says_why(tmp_path):
    # crawl40 #4 with #9: the summary's "usable images: 0" names the date, not only the radius
    import json

    from geoagent.crawl.campaign import sites_without_usable_images
    from geoagent.crawl.fetcher import SELECTION_DIR

    state = tmp_path / "state"
    (state / SELECTION_DIR).mkdir(parents=True)
    (state / "sites.csv").write_text("site,city,lat,lon\nbcn_site,Barcelona,41.39,2.17\n", encoding="utf-8")
    sel = selection_settings(SITE, FetcherSettings(captured_after="2024-01-01"))
    (state / SELECTION_DIR / "bcn_site.json").write_text(json.dumps(
        {"site": "bcn_site", "kept": [], "rejected": [], "selection": sel, "selection_key": selection_key(sel)}))
    (entry,) = sites_without_usable_images(state, tmp_path / "images")
    assert entry["site"] == "bcn_site" and entry["kept"] == 0
    assert entry["why"] == ("no image kept by the fetcher: none found within [crawl.fetcher] radius_m captured on or "
                            "after captured_after 2024-01-01")
