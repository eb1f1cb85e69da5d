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


def _selected(state: Path, images: Path) -> dict[str, list[str]]:
    """site -> image ids the campaign's image auditor was given (its audit records)."""
    out: dict[str, list[str]] = {}
    for p in sorted((state / "image_audit").glob("*/*.json")):
        out.setdefault(p.parent.name, []).append(p.stem)
    return out


def test_a_second_crawl_uses_its_own_fetcher_settings_and_leaves_the_first_intact(tmp_path):
    world = build_world(0)
    images = tmp_path / "images"  # one images root, as state/images under one state root
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"

    asyncio.run(_crawl(a, images, world, "crawl-a", max_images_per_site=6))
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
    audited_b = _selected(b / "state", images)
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
    assert _per_site(c / "state") == per_site_a
    assert image_counts(c / "state", images)["rejected"] == counts_a["rejected"]
