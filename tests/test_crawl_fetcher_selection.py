"""Each crawl's own ``[crawl.fetcher]`` settings decide its images, also when its thumbnails share one images root
with another crawl's (``state/images`` is shared by every campaign under a state root).

Before: the fetcher took any ``<images root>/<site>/images.json`` it found, whatever settings had made it, so a
second crawl with ``max_images_per_site = 3`` got the first crawl's 6 images per site, made no fetch request
and reported the first crawl's rejection counts as its own. Everything runs against the sandbox fakes (real
HTTP on loopback, real queues, real stages).
"""

from __future__ import annotations

import asyncio
import collections
import csv
import hashlib
from pathlib import Path

from geoagent.crawl.campaign import image_counts
from geoagent.crawl.export import usable_images
from geoagent.crawl.settings import load_crawl_settings
from geoagent.crawl.stages import run_crawl
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as mly
from geoagent.sandbox.city import build_world, serve_world

FAST = {"rate": 500.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 4, "backoff_base_s": 0.01,
        "backoff_max_s": 0.05, "timeout_s": 10.0}


async def _crawl(root: Path, images: Path, world, campaign: str, **fetcher) -> dict[str, list[str]]:
    """Crawl ``world`` into ``root`` (queues, state) with thumbnails under ``images``; the Mapillary fake's
    search and thumbnail requests of this run."""
    async with serve_world(world) as sb, HttpClient(default_policy=HostPolicy(**FAST)) as http:
        settings = load_crawl_settings({
            "contact": "mailto:crawl-test@example.org", "seed": 7, "cities": world.cities,
            "endpoints": sb["endpoints"], "fetcher": fetcher,
            "policies": {k: FAST for k in ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")}})
        await run_crawl(settings, campaign=campaign, queues_root=root / "queues", state_dir=root / "state",
                        images_root=images, http=http, mapillary_token="MLY|sandbox|token")
        st = sb["apps"]["mapillary"][mly.MAPILLARY_STATE]
        return {"search": list(st.search_requests), "thumbs": list(st.thumb_requests)}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _per_site(state: Path) -> collections.Counter:
    return collections.Counter(r["site"] for r in _rows(state / "images.csv"))


def _jpegs(images: Path) -> dict[str, str]:
    return {str(p.relative_to(images)): hashlib.sha256(p.read_bytes()).hexdigest() for p in images.glob("*/*.jpg")}


def _selected(state: Path) -> dict[str, list[str]]:
    """site -> image ids the campaign's image auditor was given (its audit records)."""
    out: dict[str, list[str]] = {}
    for p in sorted((state / "image_audit").glob("*/*.json")):
        out.setdefault(p.parent.name, []).append(p.stem)
    return out


def test_a_second_crawl_uses_its_own_fetcher_settings_and_leaves_the_first_intact(tmp_path):
    world = build_world(0)
    images = tmp_path / "images"  # one images root, as state/images under one state root
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"

    req_a = asyncio.run(_crawl(a, images, world, "crawl-a", max_images_per_site=6))
    per_site_a = _per_site(a / "state")
    assert max(per_site_a.values()) > 3  # else the second crawl's limit would change nothing
    rows_a = _rows(a / "state" / "images.csv")
    counts_a = image_counts(a / "state", images)
    files_a = _jpegs(images)

    # a second crawl with max_images_per_site = 3: its own selection, by its own settings
    req_b = asyncio.run(_crawl(b, images, world, "crawl-b", max_images_per_site=3))
    per_site_b = _per_site(b / "state")
    assert set(per_site_b) == set(per_site_a)
    assert per_site_b == {s: min(n, 3) for s, n in per_site_a.items()}, (per_site_b, per_site_a)
    audited_b = _selected(b / "state")
    assert all(len(ids) <= 3 for ids in audited_b.values()) and sum(map(len, audited_b.values())) == sum(per_site_b.values())
    # its summary's figures are its own selection's, not the first crawl's
    counts_b = image_counts(b / "state", images)
    assert counts_b["kept"] == sum(per_site_b.values()) == counts_b["audited"] < counts_a["kept"]
    # the images it kept are on disk; no file the first crawl's tables point at changed
    assert all((images / r["path"]).is_file() for r in _rows(b / "state" / "images.csv"))
    after_b = _jpegs(images)
    assert {k: after_b[k] for k in files_a} == files_a
    # the nearest images it wants are on disk already: none of them downloaded again
    kept_a = {r["image_id"] for r in rows_a}
    assert not kept_a & set(req_b["thumbs"]), sorted(kept_a & set(req_b["thumbs"]))

    # the first crawl's tables still read its own 6-per-site selection, and resuming it asks nothing
    assert [r["image_id"] for r in usable_images(a / "state", images)] == [r["image_id"] for r in rows_a]
    req_a2 = asyncio.run(_crawl(a, images, world, "crawl-a", max_images_per_site=6))
    assert req_a2 == {"search": [], "thumbs": []}
    assert _rows(a / "state" / "images.csv") == rows_a
    assert image_counts(a / "state", images) == counts_a

    # resuming the second crawl with its settings asks nothing either
    req_b2 = asyncio.run(_crawl(b, images, world, "crawl-b", max_images_per_site=3))
    assert req_b2 == {"search": [], "thumbs": []}
    assert _per_site(b / "state") == per_site_b

    # a third crawl with the first crawl's settings reuses that selection: no thumbnail requested
    req_c = asyncio.run(_crawl(c, images, world, "crawl-c", max_images_per_site=6))
    assert req_c["thumbs"] == []
    # (the screener and sampler still search, as the first crawl did; the fetcher's searches are saved)
    assert 0 < len(req_c["search"]) <= len(req_a["search"]) - len(per_site_a)
    # the second crawl searched as much as the first: it made its selection, it did not take one
    assert len(req_b["search"]) == len(req_a["search"])
    assert _per_site(c / "state") == per_site_a
    assert image_counts(c / "state", images)["rejected"] == counts_a["rejected"]


def test_selection_key_changes_with_every_setting_and_the_site():
    from geoagent.crawl.fetcher import selection_key, selection_path, selection_settings
    from geoagent.crawl.settings import FetcherSettings

    site = {"site": "s", "lat": 48.85, "lon": 2.35}
    base = selection_key(selection_settings(site, FetcherSettings()))
    assert base == selection_key(selection_settings({**site, "lat": "48.85"}, FetcherSettings()))  # a CSV string
    changed = {"radius_m": 200.0, "min_separation_m": 30.0, "max_images_per_site": 3, "min_brightness": 80.0,
               "grey_size_px": 16, "thumb_field": "thumb_2048_url", "dedupe_hamming_max": 6,
               "max_thumb_bytes": 1 << 20, "captured_after": "2024-01-01"}
    assert set(changed) == set(FetcherSettings.model_fields)  # a new setting must be listed here
    keys = {selection_key(selection_settings(site, FetcherSettings(**{k: v}))) for k, v in changed.items()}
    keys.add(selection_key(selection_settings({**site, "lon": 2.36}, FetcherSettings())))
    assert base not in keys and len(keys) == len(changed) + 1
    # max_thumb_bytes at its default (None) is left out: a selection made before the key existed keeps its key
    assert "max_thumb_bytes" not in selection_settings(site, FetcherSettings())["fetcher"]
    assert selection_path("/r", "s", base).name == f"images-{base}.json"
    for bad in ("../x", "ABCDEF0123456789", "12"):
        try:
            selection_path("/r", "s", bad)
        except ValueError:
            continue
        raise AssertionError(bad)


def test_a_crawl_from_before_per_settings_selections_still_reads_and_resumes(tmp_path):
    """A crawl of an earlier version kept ``<images root>/<site>/images.json`` (no settings) and no record of
    its own: its tables and summary still read it, resuming it asks nothing, and no new crawl takes it as its
    selection (it cannot tell which settings made it) nor rewrites it."""
    import json

    world = build_world(0)
    images = tmp_path / "images"
    a, b = tmp_path / "a", tmp_path / "b"
    req_a = asyncio.run(_crawl(a, images, world, "crawl-a", max_images_per_site=6))
    rows_a, counts_a = _rows(a / "state" / "images.csv"), image_counts(a / "state", images)
    # the earlier layout: images.json without the settings, no image_selection/ in the state folder
    for p in images.glob("*/images-*.json"):
        rec = json.loads(p.read_text())
        (p.parent / "images.json").write_text(json.dumps({k: rec[k] for k in ("site", "kept", "rejected", "downloads")}))
        p.unlink()
    for p in (a / "state" / "image_selection").glob("*.json"):
        p.unlink()
    legacy = {str(p): p.read_bytes() for p in images.glob("*/images.json")}
    assert legacy

    assert image_counts(a / "state", images) == counts_a
    assert [r["image_id"] for r in usable_images(a / "state", images)] == [r["image_id"] for r in rows_a]
    assert asyncio.run(_crawl(a, images, world, "crawl-a", max_images_per_site=6)) == {"search": [], "thumbs": []}
    assert _rows(a / "state" / "images.csv") == rows_a

    req_b = asyncio.run(_crawl(b, images, world, "crawl-b", max_images_per_site=6))
    assert _per_site(b / "state") == _per_site(a / "state")
    assert len(req_b["search"]) == len(req_a["search"])  # its own selection was made: as many searches
    assert not {r["image_id"] for r in rows_a} & set(req_b["thumbs"])  # from the thumbnails on disk
    assert {str(p): p.read_bytes() for p in images.glob("*/images.json")} == legacy
