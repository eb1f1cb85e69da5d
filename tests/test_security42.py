"""Security review, session 42 (sec42).

#1 The Mapillary thumbnail guard judged URL text only: a public NAME resolving to a private address
   (``169.254.169.254.nip.io``, an attacker's DNS, a rebinding name) was fetched, and the CGNAT range (100.64.0.0/10,
   Alibaba Cloud's metadata service at 100.100.100.200) was not "local" at all. Now thumbnail requests connect to
   public addresses only, judged on what the names resolve to when connecting, unless the Graph API is itself local
   (the sandbox); every non-public address counts as local.
#2 ``python -m geoagent.crawl.release_images`` printed Mapillary error bodies raw (ESC, CR, NUL, RLO).
#3 A thumbnail of up to ~89 megapixels was decoded in full to measure it; now one far over its field's size is
   refused from its header.
#4 release_images' own Windows device list lacked COM0/LPT0 and let names ending in a dot or space through;
   ``city_key("東京")`` said the name "has no letters or digits".

Real code against local aiohttp servers; the resolvers below stand in for DNS servers (what a name resolves to).
"""

from __future__ import annotations

import asyncio
import io
import socket

import anyio
import orjson
import pytest
from aiohttp import web
from aiohttp.abc import AbstractResolver
from PIL import Image

from geoagent.clients.mapillary import MapillaryClient, ThumbnailUnavailable
from geoagent.runtime.http import AddressNotPublic, HostPolicy, HttpClient, never_sent
from geoagent.sandbox.server import serve

JPEG = b"\xff\xd8\xff\xe0" + b"\x00" * 64 + b"\xff\xd9"
UA = "geoagent-test/0.1 (mailto:t@example.org)"
ONE_TRY = HostPolicy(timeout_s=5.0, max_attempts=1)


def _answer(host: str, address: str, port: int) -> dict:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    return {"hostname": host, "host": address, "port": port, "family": family, "proto": 0,
            "flags": socket.AI_NUMERICHOST}


class _Dns(AbstractResolver):
    """A DNS server's answers: ``answers[name]`` is a list of address lists, one per lookup (the last one repeats);
    any other name resolves to 127.0.0.1. ``asked`` records the names looked up."""

    def __init__(self, answers: dict[str, list[list[str]]] | None = None) -> None:
        self.answers = answers or {}
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        self.asked.append(host)
        seq = self.answers.get(host) or [["127.0.0.1"]]
        addresses = seq.pop(0) if len(seq) > 1 else seq[0]
        return [_answer(host, a, port) for a in addresses]

    async def close(self) -> None:
        return None


def _private_app(hits: list[str]) -> web.Application:
    """A private service (a cloud's metadata endpoint) that also serves a JPEG; ``hits`` records its paths."""

    async def secret(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=JPEG, content_type="image/jpeg")

    app = web.Application()
    app.router.add_get("/{tail:.*}", secret)
    return app


def _graph_app(box: dict[str, str]) -> web.Application:
    async def graph(request: web.Request) -> web.Response:
        return web.json_response({"id": request.match_info["iid"], "thumb_1024_url": box["thumb"]})

    app = web.Application()
    app.router.add_get("/{iid}", graph)
    return app


def _download(thumb: str, *, graph_public: bool = True, dns: AbstractResolver | None = None):
    """(the thumbnail's bytes or the ThumbnailUnavailable, the private service's hits, the client) for a Graph API
    answer naming ``thumb`` (``{port}``: the private service's port). ``graph_public``: the client is made for the
    public Graph API (its requests go to the local stand-in)."""
    hits: list[str] = []
    box: dict[str, object] = {}

    async def go():
        async with serve(_private_app(hits)) as private, serve(_graph_app(box)) as graph, HttpClient(
                default_policy=ONE_TRY, resolver=dns or _Dns()) as http:
            box["thumb"] = thumb.format(port=private.rsplit(":", 1)[1])
            client = MapillaryClient(http, "https://graph.mapillary.com" if graph_public else graph, "MLY|x|y", UA)
            client.base_url = graph
            box["client"] = client
            try:
                return await client.download_thumbnail("123")
            except ThumbnailUnavailable as e:
                return e

    got = anyio.run(go)
    return got, hits, box["client"]


# ---- #1: addresses, not names ------------------------------------------------------------------------------------
def test_a_public_name_resolving_to_a_private_address_is_not_connected():
    got, hits, client = _download("http://169.254.169.254.nip.io:{port}/latest/meta-data/iam")
    assert client.thumbs_public_only
    # the network's DNS answer, not a verdict on the image (fixrev42 #5: tests/test_fixrev42.py)
    assert isinstance(got, ThumbnailUnavailable) and got.kind == "not_public", got
    assert "169.254.169.254.nip.io resolves to no public address (127.0.0.1): not connected" in str(got)
    assert hits == []  # the private service was never asked


def test_the_resolver_keeps_the_public_addresses_of_a_mixed_answer_and_refuses_a_rebound_one():
    """DNS rebinding: a name that resolved to a public address may resolve to a private one at the next lookup; each
    lookup a connection makes is judged, not an earlier one."""
    from geoagent.runtime.public_net import NotPublicAddress, PublicAddressResolver

    dns = _Dns({"mixed.example.net": [["10.0.0.5", "93.184.216.34", "fe80::1", "2606:2800:220:1::1"]],
                "rebind.example.net": [["93.184.216.34"], ["100.100.100.200"]]})

    async def go():
        r = PublicAddressResolver(dns)
        mixed = await r.resolve("mixed.example.net", 443, socket.AF_UNSPEC)
        first = await r.resolve("rebind.example.net", 80)
        with pytest.raises(NotPublicAddress, match=r"rebind.example.net resolves to no public address "
                                                   r"\(100.100.100.200\)"):
            await r.resolve("rebind.example.net", 80)
        await r.close()
        return mixed, first

    mixed, first = anyio.run(go)
    assert [a["host"] for a in mixed] == ["93.184.216.34", "2606:2800:220:1::1"]
    assert [a["host"] for a in first] == ["93.184.216.34"]


def test_a_public_only_request_reuses_no_address_or_connection_of_the_shared_session_and_is_not_retried():
    hits: list[str] = []

    async def go():
        policy = HostPolicy(timeout_s=5.0, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.02)
        async with serve(_private_app(hits)) as private, HttpClient(default_policy=policy, resolver=_Dns()) as http:
            url = f"http://intranet.example.com:{private.rsplit(':', 1)[1]}/admin"
            plain = await http.request("GET", url)  # the shared session: names are not judged there
            with pytest.raises(AddressNotPublic) as refused:
                await http.request("GET", url, public_only=True)
            key = url.split("/")[2]
            return plain, refused.value, http.stats()[key], http.unreachable_streak(key)

    plain, err, stats, streak = anyio.run(go)
    assert plain.status == 200 and hits == ["/admin"]  # the public_only request reached nothing
    assert "intranet.example.com resolves to no public address (127.0.0.1)" in str(err)
    assert never_sent(err) and streak == (0, "")  # refused, not an unreachable host
    assert stats.requests == 2 and stats.retries == 0  # one attempt each: the refusal is not retried
    assert stats.errors == {"address not public": 1}


@pytest.mark.parametrize("address", ["100.100.100.200", "100.64.0.1", "169.254.169.254", "[::ffff:127.0.0.1]",
                                     "[64:ff9b::a9fe:a9fe]", "0.0.0.0", "224.0.0.1"])
def test_cgnat_mapped_and_other_non_public_literals_are_local(address):
    from geoagent.config import is_non_public_host

    assert is_non_public_host(address)
    client = MapillaryClient(None, "https://graph.mapillary.com", "MLY|x|y", UA)
    assert "local or private address" in (client._thumb_redirect_guard(f"http://{address}/latest/meta-data/") or "")


def test_a_literal_non_public_address_is_refused_before_any_connection():
    async def go():
        async with HttpClient(default_policy=ONE_TRY) as http:
            with pytest.raises(AddressNotPublic, match=r"100.100.100.200 is not a public address") as e:
                await http.request("GET", "http://100.100.100.200:9/latest/meta-data/", public_only=True)
            return e.value, http.stats()

    err, stats = anyio.run(go)
    assert never_sent(err) and stats == {}  # no host state made, no attempt counted


def test_the_sandbox_allowance_stays_a_local_graph_api_gets_thumbnails_from_local_addresses():
    got, hits, client = _download("http://scontent.xx.fbcdn.net:{port}/thumb.jpg", graph_public=False)
    assert client.graph_is_local and not client.thumbs_public_only
    assert got == JPEG and hits == ["/thumb.jpg"]


# ---- #2: error bodies printed inert ---------------------------------------------------------------------------------
NASTY = "\x1b]0;PWNED\x07\x1b[2J\x1b[31mRED\x1b[0m\rOVERWRITE\u202eREVERSED\x00"


def _nasty_graph() -> web.Application:
    async def refuse(request: web.Request) -> web.Response:
        return web.Response(text=NASTY, status=400)

    app = web.Application()
    app.router.add_get("/{iid}", refuse)
    return app


def _inert(text: str) -> bool:
    return not any(c in text for c in "\x1b\x07\r\x00\u202e")


def test_release_images_prints_error_bodies_inert(tmp_path):
    from types import SimpleNamespace

    from geoagent.crawl.release_images import fetch_release_images, summary_lines

    images = [SimpleNamespace(image_id="1001", site_id="paris_x", path=None)]

    async def go():
        async with serve(_nasty_graph()) as base, HttpClient(default_policy=ONE_TRY) as http:
            client = MapillaryClient(http, base, "MLY|1|x", UA, policy=ONE_TRY, thumb_policy=ONE_TRY)
            return await fetch_release_images(images, tmp_path, client)

    report = anyio.run(go)
    assert "\x1b" in report.failed["1001"]  # kept as the API said it...
    text = summary_lines(images, tmp_path, report)
    assert _inert(text), repr(text)  # ...printed inert
    line = text.splitlines()[1]
    assert line.startswith("  1001: PermanentHTTPError: HTTP 400") and "\\x1b]0;PWNED\\x07" in line
    assert "\\u202eREVERSED" in line and len(text.splitlines()) == 3


def test_the_release_images_command_prints_no_control_character(release_dir, tmp_path, monkeypatch, capsys):
    from geoagent.crawl.release_images import main

    monkeypatch.setenv("MLY_T42", "MLY|1|x")

    async def run():
        async with serve(_nasty_graph()) as base:
            return await asyncio.to_thread(main, ["--release", str(release_dir), "--out", str(tmp_path / "o"),
                                                  "--token-env", "MLY_T42", "--mapillary", base, "--concurrency", "2"])

    assert asyncio.run(run()) == 3
    out = capsys.readouterr().out
    assert _inert(out) and "\\x1b[2J" in out


# ---- #3: oversized thumbnails are not decoded -----------------------------------------------------------------------
def _jpeg(w: int, h: int, level: int = 150) -> bytes:
    buf = io.BytesIO()
    Image.new("L", (w, h), level).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def test_a_thumbnail_far_over_its_fields_size_is_refused_from_its_header(tmp_path):
    from geoagent.crawl.fetcher import fetch_site_images, image_path, rejection_path
    from geoagent.crawl.settings import FetcherSettings
    from geoagent.sandbox import mapillary as fake_mly

    lat, lon = 41.39, 2.17
    portrait = _jpeg(1024, 1820, 160)
    imgs = [fake_mly.FakeImage("800000000001", lat, lon, cdn_body=portrait),
            fake_mly.FakeImage("800000000002", lat + 0.00042, lon, cdn_body=_jpeg(6000, 4000))]  # 24 MP, < 89 MP

    async def go():
        fast = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01,
                          backoff_max_s=0.05, timeout_s=5)
        async with serve(fake_mly.make_app(state=fake_mly.MapillaryFakeState(images=imgs))) as base, HttpClient(
                default_policy=fast) as http:
            m = MapillaryClient(http, base, "MLY|1|tok", UA)
            return await fetch_site_images({"site": "bcn_site", "lat": lat, "lon": lon}, m, FetcherSettings(), tmp_path)

    res = anyio.run(go)
    assert [k["image_id"] for k in res.kept] == ["800000000001"]  # a 1:2 portrait thumbnail is a thumbnail
    (rej,) = res.rejected
    assert rej["reason"] == ("not a usable image: too large for a thumb_1024_url thumbnail (6000x4000 px, over "
                             "16777216 pixels: 16 times a 1024 x 1024 square; not decoded)")
    rec = orjson.loads(rejection_path(image_path(tmp_path, "bcn_site", "800000000002")).read_bytes())
    assert rec["unreadable"] is True and rec["reason"] == rej["reason"]


def test_the_size_bound_leaves_normal_thumbnails_and_their_measurements_alone():
    from geoagent.crawl.fetcher import mean_brightness, size_problem

    assert size_problem((4096, 4096), "thumb_1024_url") is None
    assert "too large for a thumb_1024_url" in size_problem((4097, 4097), "thumb_1024_url")
    assert "too large for a thumb_256_url" in size_problem((1025, 1025), "thumb_256_url")
    assert size_problem((6000, 4000), "thumb_original_url") is None  # the camera's own size: only the bomb limit
    assert size_problem((6000, 4000)) is None
    for w, h in ((1024, 768), (1024, 1820), (768, 1024)):
        jpeg = _jpeg(w, h, 97)
        # the bound only refuses: a thumbnail under it is measured exactly as before (same decode, same resize)
        assert mean_brightness(jpeg, 32, "thumb_1024_url") == mean_brightness(jpeg, 32)
        assert abs(mean_brightness(jpeg, 32, "thumb_1024_url") - 97) < 1.0


# ---- #4: one rule for names Windows cannot hold; city keys ---------------------------------------------------------
@pytest.mark.parametrize("path", ["streetview/COM0.jpg", "streetview/lpt0/1001.jpg", "streetview/x./1001.jpg",
                                  "streetview/x /1001.jpg", "streetview/1001.jpg.", "streetview/CON .jpg"])
def test_release_paths_windows_cannot_hold_are_refused(tmp_path, path):
    from geoagent.crawl.release_images import target_path

    with pytest.raises(ValueError, match="not a relative path inside"):
        target_path(tmp_path, path, "paris_x", "1001")


def test_release_paths_and_safe_name_share_the_rule():
    from geoagent.paths import safe_name, windows_reserved

    for name in ("COM0", "lpt0.txt", "nul", "a.", "COM¹"):
        assert windows_reserved(name)
    with pytest.raises(ValueError, match="Windows cannot hold"):
        safe_name("COM0")
    assert not windows_reserved("console.jpg") and safe_name("com10") == "com10"


def test_a_city_name_in_another_script_is_told_apart_from_one_without_letters():
    from geoagent.crawl.stages import city_key

    with pytest.raises(ValueError, match=r"'東京' has no ASCII letters or digits .*Latin script"):
        city_key("東京")
    assert city_key("Łódź") == "odz"  # accents dropped, non-ASCII letters left out (the release's keys)
