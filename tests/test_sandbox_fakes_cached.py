"""The sandbox fakes' cached answers are the bytes the per-request code sent.

The pageviews fake built each answer day by day (``strftime`` per day, then JSON) and the Mapillary fake drew
each thumbnail pixel by pixel: together about a quarter of a sandbox crawl's time. Both are now built once per
process (and the thumbnail on numpy arrays). The per-request code is kept here as the reference: every answer
of the fakes, served over HTTP, is compared byte for byte with it, for the first request and for a repeat.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import io
import json
import random

import aiohttp
import anyio
import pytest

from geoagent.sandbox import mapillary as mly
from geoagent.sandbox import pageviews as pv
from geoagent.sandbox.server import serve

UA = "geoagent-tests/1 (contact: ops@example.org)"


def _reference_thumbnail(image_id: str, brightness: float, px: int = 64, pattern_seed: str | None = None) -> bytes:
    """The per-pixel renderer the Mapillary fake used before (verbatim)."""
    from PIL import Image

    rng = random.Random(int(hashlib.sha256((pattern_seed or image_id).encode()).hexdigest()[:12], 16))
    amp = min(40.0, brightness, 255.0 - brightness)
    block = rng.choice([5, 7, 9, 11, 13])
    ox, oy = rng.randrange(block), rng.randrange(block)
    gx, gy = rng.uniform(-1, 1), rng.uniform(-1, 1)
    pix = []
    for y in range(px):
        for x in range(px):
            check = (((x + ox) // block + (y + oy) // block) % 2) * 2 - 1
            grad = (gx * (x - px / 2) + gy * (y - px / 2)) / px
            v = brightness + amp * (0.45 * check + 0.5 * grad) + rng.uniform(-amp, amp) * 0.2
            g = max(0, min(255, int(round(v))))
            pix.append((g, max(0, min(255, g + 6)), max(0, min(255, g - 6))))
    img = Image.new("RGB", (px, px))
    img.putdata(pix)
    buf = io.BytesIO()
    img.save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def test_thumbnails_are_the_per_pixel_renderers_bytes():
    r = random.Random(20261202)
    cases = [("1", 130.0, 64, None), ("3", 131.0, 64, "1"), ("42", 0.0, 64, None), ("43", 255.0, 64, None),
             ("44", 40.0, 16, None), ("45", 215.0, 33, "seed"), ("46", 140, 64, None)]
    cases += [(str(r.randrange(10 ** 12)), r.choice([0.5, 39.5, 127.5, 254.5, r.uniform(0, 255)]),
               r.choice([8, 31, 64]), r.choice([None, "7", "twin"])) for _ in range(60)]
    for case in cases:
        want = _reference_thumbnail(*case)
        assert mly.render_thumbnail(*case) == want, case
        assert mly.render_thumbnail(*case) == want, case  # the cached answer


def test_cdn_serves_the_reference_thumbnail_over_http():
    imgs = [mly.FakeImage(image_id=str(700 + i), lat=48.0 + i * 1e-4, lon=2.0, brightness=90.0 + 20 * i,
                          pattern_seed="700" if i == 2 else None) for i in range(4)]

    async def go() -> list[tuple[int, str, bytes]]:
        got = []
        async with serve(mly.make_app(imgs)) as base, aiohttp.ClientSession() as s:
            for _round in range(2):
                for img in imgs:
                    async with s.get(f"{base}/{img.image_id}", params={"fields": "thumb_256_url"},
                                     headers={"Authorization": "OAuth MLY|sandbox"}) as r:
                        url = (await r.json())["thumb_256_url"]
                    async with s.get(url) as r:
                        got.append((r.status, r.content_type, await r.read()))
        return got

    got = anyio.run(go)
    want = [(200, "image/jpeg", _reference_thumbnail(i.image_id, i.brightness, 64, i.pattern_seed)) for i in imgs]
    assert got == want + want


def _reference_items(st: pv.PageviewsFakeState, project: str, access: str, agent: str, article: str,
                     start: dt.date, end: dt.date) -> list[dict[str, object]]:
    """The pageviews fake's day-by-day loop before (verbatim but for its inputs)."""
    per_day = st.daily_views.get(article, 0)
    items = []
    day = start
    i = 0
    while day <= end and day >= dt.date(2015, 7, 1):
        if per_day > 0 and not (st.zero_every and i % st.zero_every == st.zero_every - 1):
            items.append({"project": project, "article": article, "granularity": "daily",
                          "timestamp": day.strftime("%Y%m%d") + "00", "access": access, "agent": agent,
                          "views": per_day})
        day += dt.timedelta(days=1)
        i += 1
    items.extend(st.extra_items.get(article, []))
    return items


@pytest.mark.parametrize("zero_every", [7, 3, 1, 0])
def test_pageviews_answers_are_the_day_by_day_loops_bytes(zero_every):
    st = pv.PageviewsFakeState({"Paris": 120, "Eiffel_Tower": 7, "Nothing": 0, "Caf\u00e9_de_Flore": 3,
                                "Odd": 5}, zero_every)
    st.extra_items["Odd"] = [{"project": "en.wikipedia", "article": "Odd", "granularity": "daily",
                              "timestamp": "2024010100", "access": "all-access", "agent": "user", "views": -4}]
    st.extra_items["Nothing"] = []
    ranges = [("20240101", "20241231"), ("20240101", "20240101"), ("20150625", "20150710"),
              ("20150701", "20150709"), ("2023010100", "2023063000"), ("20240301", "20240229")]
    asks = [(a, acc, ag, s, e) for a in ("Paris", "Eiffel_Tower", "Nothing", "Caf\u00e9_de_Flore", "Odd", "Unknown")
            for acc, ag in (("all-access", "user"), ("desktop", "all-agents")) for s, e in ranges]

    def path(a: str, acc: str, ag: str, s: str, e: str) -> str:
        from urllib.parse import quote
        return f"/metrics/pageviews/per-article/en.wikipedia/{acc}/{ag}/{quote(a, safe='')}/daily/{s}/{e}"

    async def go() -> list[tuple[int, str, bytes]]:
        got = []
        async with serve(pv.make_app(state=st)) as base, aiohttp.ClientSession(headers={"User-Agent": UA}) as s:
            for _round in range(2):  # the second round gets the cached answers
                for ask in asks:
                    async with s.get(base + path(*ask)) as r:
                        got.append((r.status, r.content_type, await r.read()))
            st.daily_views["Paris"] = 121  # a changed state is answered as changed
            async with s.get(base + path("Paris", "all-access", "user", "20240101", "20240131")) as r:
                got.append((r.status, r.content_type, await r.read()))
        return got

    want = []  # what the day-by-day loop answers for each ask (status, then body when 200)
    for a, acc, ag, s, e in asks:
        start, end = dt.datetime.strptime(s[:8], "%Y%m%d").date(), dt.datetime.strptime(e[:8], "%Y%m%d").date()
        items = _reference_items(st, "en.wikipedia", acc, ag, a, start, end) if end >= start else None
        want.append((400, None) if items is None else (200, json.dumps({"items": items}).encode()) if items
                    else (404, None))
    got = anyio.run(go)
    n = len(asks)
    assert got[:n] == got[n:2 * n]
    for (status, ctype, body), (want_status, want_body), ask in zip(got[:n], want, asks):
        assert status == want_status, ask
        if want_status == 200:
            assert (ctype, body) == ("application/json", want_body), ask
        elif want_status == 404:
            assert ctype == "application/problem+json", ask
    assert {w[0] for w in want} == {200, 400, 404}
    status, ctype, body = got[-1]
    items = _reference_items(st, "en.wikipedia", "all-access", "user", "Paris", dt.date(2024, 1, 1), dt.date(2024, 1, 31))
    if zero_every == 1:  # every day is a zero day: no data
        assert (items, status, ctype) == ([], 404, "application/problem+json")
    else:
        assert (status, ctype, body) == (200, "application/json", json.dumps({"items": items}).encode())
        assert {it["views"] for it in json.loads(body)["items"]} == {121}
