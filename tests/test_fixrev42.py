"""Review of session 42's security commits (fixrev42).

#1 A ``public_only`` request without a ``redirect_guard`` followed a redirect to an IP literal (``127.0.0.1``,
   ``[::1]``): the literal check sat behind the guard's ``None`` test, and aiohttp connects a literal without the
   resolver that judges names. Now the literal is judged whenever the request is ``public_only``.
#2 ``is_local_host`` had become "not a public address", so a model ``base_url`` on CGNAT (100.64.0.0/10) counted as a
   free local server: no prices required, no missing-key warning, plain http allowed. The model rule is back to
   loopback, private, link-local and unspecified; ``is_non_public_host`` is the connection-target rule (thumbnails).
#5 A thumbnail host that resolved to no public address was recorded as the image's verdict ("refused") and the
   selection stored without it for good; what a name resolves to is the local network's DNS answer (split-horizon
   DNS), so the walk now stops, storing nothing, at every delivery.

Real code against local aiohttp servers; the resolvers stand in for DNS servers (tests/test_security42.py).
"""

from __future__ import annotations

import pickle

import anyio
import pytest
from aiohttp import web

from geoagent.clients.mapillary import MapillaryClient, ThumbnailUnavailable
from geoagent.config import ConfigError, config_from_dict, is_local_host, is_non_public_host
from geoagent.runtime.http import AddressNotPublic, HostPolicy, HttpClient
from geoagent.runtime.public_net import PublicAddressResolver
from geoagent.sandbox.server import serve
from tests.test_security42 import UA, _Dns

#: the name the tests' "DNS" resolves to the local test server, standing for a public CDN host
CDN = "cdn.example.net"


@pytest.fixture
def cdn_is_public(monkeypatch):
    """The network stand-in: :data:`CDN` resolves (through the client's resolver, a :class:`_Dns`) to the local test
    server's address and is handed to the connector as the public CDN address it stands for. Every other name, and
    every IP literal, is judged by the real rule."""
    real = PublicAddressResolver.resolve

    async def resolve(self, host, port=0, family=0):
        if host == CDN:
            return await self._inner.resolve(host, port, family)
        return await real(self, host, port, family)

    monkeypatch.setattr(PublicAddressResolver, "resolve", resolve)


def _redirector(hits: list[str]) -> web.Application:
    async def target(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.Response(body=b"secret")

    async def redirect(request: web.Request) -> web.Response:
        raise web.HTTPFound(request.query["to"])

    app = web.Application()
    app.router.add_get("/x", target)
    app.router.add_get("/r", redirect)
    return app


# ---- #1: a redirect to a literal non-public address, no guard -------------------------------------------------------
@pytest.mark.parametrize("literal", ["127.0.0.1", "[::1]"])
def test_a_public_only_redirect_to_a_loopback_literal_is_refused_without_a_guard(cdn_is_public, literal):
    hits: list[str] = []

    async def go():
        policy = HostPolicy(timeout_s=5.0, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.02)
        async with serve(_redirector(hits)) as base, HttpClient(default_policy=policy, resolver=_Dns()) as http:
            port = base.rsplit(":", 1)[1]
            first = await http.request("GET", f"http://{CDN}:{port}/x", public_only=True)  # the stand-in works
            with pytest.raises(AddressNotPublic) as refused:
                await http.request("GET", f"http://{CDN}:{port}/r", params={"to": f"http://{literal}:{port}/x"},
                                   public_only=True)
            return first, refused.value, http.stats()[f"{CDN}:{port}"]

    first, err, stats = anyio.run(go)
    assert first.status == 200 and hits == ["/x"]  # the redirect's target was never asked
    shown = literal.strip("[]")
    assert f"redirect (302) to {shown}, not a public address: not followed" in str(err)
    assert err.by_dns is False  # the answer spelled the address: a verdict on the URL, not on this network's DNS
    assert stats.errors == {"address not public": 1} and stats.retries == 0  # final: not retried


def test_a_redirect_is_still_followed_where_public_only_is_off():
    """The literal check belongs to ``public_only`` requests alone: a plain request (a model's local server, the
    sandbox) follows a redirect to a loopback address as before."""
    hits: list[str] = []

    async def go():
        async with serve(_redirector(hits)) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0)) as http:
            port = base.rsplit(":", 1)[1]
            return await http.request("GET", f"{base}/r", params={"to": f"http://127.0.0.1:{port}/x"})

    got = anyio.run(go)
    assert got.status == 200 and got.body == b"secret" and hits == ["/x"]


# ---- #2: a model host is free only on loopback, private, link-local addresses ---------------------------------------
def _doc(base_url: str, **extra) -> dict:
    return {"campaign": {"name": "cgnat", "kind": "generic", "seed": 1}, "budget": {"cap_usd": 1.0},
            "generic": {"n_requests": 2},
            "models": [{"name": "gw", "provider": "openai", "model": "gpt-4o", "base_url": base_url,
                        "api_key_env": "GW_KEY", **extra}]}


@pytest.mark.parametrize("host", ["100.64.1.2", "100.100.100.200", "100.127.255.254"])
def test_a_model_on_a_cgnat_address_must_write_its_prices(host):
    with pytest.raises(ConfigError) as info:
        config_from_dict(_doc(f"https://{host}/v1"), source="cgnat.toml")
    assert [p.split(":")[0] for p in info.value.problems] == ["models[0].price_input_usd_per_mtok",
                                                             "models[0].price_output_usd_per_mtok"]
    assert f"required for a model on a paid host ({host})" in info.value.problems[0]


def test_a_priced_model_on_cgnat_is_a_paid_host_and_may_not_use_plain_http():
    priced = {"price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0}
    assert config_from_dict(_doc("https://100.64.1.2/v1", **priced)).models[0].on_paid_host
    with pytest.raises(ConfigError, match=r"plain http:// to 100.64.1.2, a host that is not local"):
        config_from_dict(_doc("http://100.64.1.2/v1", **priced))


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000/v1", "http://10.1.2.3:8000/v1", "http://192.168.1.20/v1",
                                 "http://[fd00::5]:8000/v1", "http://my-gpu-box:8000/v1"])
def test_loopback_and_lan_model_servers_still_count_as_local(url):
    m = config_from_dict(_doc(url)).models[0]
    assert not m.on_paid_host and (m.price_input_usd_per_mtok, m.price_output_usd_per_mtok) == (0.0, 0.0)


@pytest.mark.parametrize("host, local_server, non_public", [
    ("127.0.0.1", True, True), ("10.0.0.5", True, True), ("169.254.169.254", True, True), ("[::1]", True, True),
    ("0x7f.1", True, True), ("my-gpu-box", True, True), ("x.sandbox.invalid", True, True),
    ("100.64.1.2", False, True), ("100.100.100.200", False, True),
    ("224.0.0.1", False, True), ("[::ffff:127.0.0.1]", True, True), ("[64:ff9b::a9fe:a9fe]", False, True),
    ("8.8.8.8", False, False), ("api.openai.com", False, False), ("", False, False),
])
def test_the_model_rule_and_the_connection_rule(host, local_server, non_public):
    assert is_local_host(host) is local_server
    assert is_non_public_host(host) is non_public


def test_mapillary_still_refuses_a_cgnat_thumbnail_url_and_a_cgnat_graph_api_is_local():
    public = MapillaryClient(None, "https://graph.mapillary.com", "MLY|x|y", UA)
    assert "local or private address" in (public._thumb_redirect_guard("http://100.100.100.200/latest/") or "")
    assert MapillaryClient(None, "https://100.64.0.9", "MLY|x|y", UA).graph_is_local


# ---- #5: a name resolving to no public address is the network's word, not the image's -----------------------------
def _fetch(tmp_path, *, retry_transient: bool, dns: _Dns):
    from geoagent.crawl.fetcher import fetch_site_images
    from geoagent.crawl.settings import FetcherSettings
    from geoagent.sandbox import mapillary as fake_mly

    lat, lon = 41.39, 2.17
    imgs = [fake_mly.FakeImage("800000000011", lat, lon), fake_mly.FakeImage("800000000012", lat + 0.0005, lon)]
    state = fake_mly.MapillaryFakeState(images=imgs)

    async def go():
        fast = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01,
                          backoff_max_s=0.05, timeout_s=5)
        async with serve(fake_mly.make_app(state=state)) as base, HttpClient(default_policy=fast, resolver=dns) as http:
            state.cdn_base = f"http://{CDN}:{base.rsplit(':', 1)[1]}"  # the CDN on a name of its own
            m = MapillaryClient(http, "https://graph.mapillary.com", "MLY|1|tok", UA)  # a public Graph API...
            m.base_url = base  # ...answering from the local stand-in
            assert m.thumbs_public_only
            return await fetch_site_images({"site": "bcn_site", "lat": lat, "lon": lon}, m, FetcherSettings(),
                                           tmp_path, retry_transient=retry_transient)

    return anyio.run(go)


@pytest.mark.parametrize("retry_transient", [True, False], ids=["retried", "last_delivery"])
def test_a_cdn_name_resolving_privately_stops_the_walk_and_stores_no_selection(tmp_path, retry_transient):
    from geoagent.crawl.fetcher import ThumbnailHostNotPublic, ThumbnailTransferFailed

    dns = _Dns({CDN: [["10.20.30.40"]]})  # split-horizon DNS: this network's answer for the CDN is private
    with pytest.raises(ThumbnailHostNotPublic) as stopped:
        _fetch(tmp_path, retry_transient=retry_transient, dns=dns)
    err = stopped.value
    assert isinstance(err, ThumbnailTransferFailed)  # the crawl stage fails the delivery: nothing stored
    assert err.host == CDN and err.image_id == "800000000011" and err.downloads == 0
    assert f"thumbnail host {CDN} not connected" in str(err) and "(10.20.30.40)" in str(err)
    assert "split-horizon" in str(err)
    assert not list(tmp_path.rglob("images-*.json"))  # no selection record: the next walk asks again
    assert not list(tmp_path.rglob("*.rejected.json"))  # and no record on the image
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ThumbnailHostNotPublic and str(back) == str(err) and back.host == CDN


def test_a_not_public_thumbnail_is_its_own_kind_and_says_nothing_of_the_image():
    async def go():
        async with serve(_redirector([])) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0, max_attempts=1),
                                                               resolver=_Dns({CDN: [["192.168.7.7"]]})) as http:
            port = base.rsplit(":", 1)[1]

            async def graph(request: web.Request) -> web.Response:
                return web.json_response({"id": "1", "thumb_1024_url": f"http://{CDN}:{port}/x"})

            app = web.Application()
            app.router.add_get("/{iid}", graph)
            async with serve(app) as g:
                m = MapillaryClient(http, "https://graph.mapillary.com", "MLY|1|tok", UA)
                m.base_url = g
                with pytest.raises(ThumbnailUnavailable) as e:
                    await m.download_thumbnail("1")
                return e.value

    err = anyio.run(go)
    assert err.kind == "not_public" and err.transient and err.host == CDN
    assert f"{CDN} resolves to no public address (192.168.7.7)" in str(err)


# ---- #6: wording ----------------------------------------------------------------------------------------------------
def test_safe_names_refusal_names_both_endings_windows_drops():
    from geoagent.paths import safe_name, windows_reserved

    assert windows_reserved("a ") and windows_reserved("a.")
    with pytest.raises(ValueError, match="a name it reserves for a device, or one ending with a dot or a space"):
        safe_name("COM0")


def test_a_short_ipv4_form_is_refused_by_aiohttp_before_any_lookup():
    """public_net's note: aiohttp refuses ``127.1`` as an invalid URL (only a hex form such as ``0x7f.1`` reaches the
    resolver, which judges what it resolves to)."""
    dns = _Dns()

    async def go():
        async with HttpClient(default_policy=HostPolicy(timeout_s=5.0, max_attempts=1), resolver=dns) as http:
            with pytest.raises(ValueError, match="invalid URL"):
                await http.request("GET", "http://127.1:9/x", public_only=True)
            with pytest.raises(AddressNotPublic, match=r"0x7f.1 resolves to no public address \(127.0.0.1\)"):
                await http.request("GET", "http://0x7f.1:9/x", public_only=True)

    anyio.run(go)
    assert dns.asked == ["0x7f.1"]
