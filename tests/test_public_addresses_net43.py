"""A thumbnail connection's public-address rule names its own networks (fixnet43).

``is_public_address`` (the addresses a Mapillary thumbnail request and its redirects may connect to) read Python's
``ipaddress`` ``is_global``, whose list differs between patch releases: under 3.11.7 the local-use NAT64 prefix
``64:ff9b:1::/48`` (RFC 8215: the network's own gateway may translate it to a private IPv4 address such as
169.254.169.254), ``192.0.0.8`` and ``192.0.0.9`` and 6to4 ``2002::/16`` were public, and under every release an
IPv4-compatible ``::a.b.c.d`` (``::7f00:1``) was. Now the rule is :data:`geoagent.addresses.NON_PUBLIC_NETWORKS`,
each block with its RFC: an IPv4-mapped or well-known NAT64 address is as public as the IPv4 address it carries;
IPv4-compatible, local-use NAT64, 6to4 and Teredo addresses are refused whatever they carry.

Real code: the rule itself, the resolver that keeps public answers (a stand-in for a DNS server's answers, as in
tests/test_security42.py), the HTTP client's literal check and the Mapillary redirect guard.
"""

from __future__ import annotations

import ipaddress
import socket

import anyio
import pytest
from aiohttp.abc import AbstractResolver

from geoagent.addresses import (
    IPV4_CARRIERS,
    LOCAL_NETWORKS,
    NON_PUBLIC_NETWORKS,
    carried_ipv4,
    is_public_address,
    why_not_public,
)
from geoagent.clients.mapillary import MapillaryClient
from geoagent.config import is_local_host, is_non_public_host
from geoagent.runtime.http import AddressNotPublic, HostPolicy, HttpClient, never_sent
from geoagent.runtime.public_net import NotPublicAddress, PublicAddressResolver, literal_not_public

UA = "geoagent-test/0.1 (mailto:t@example.org)"

#: each non-public IPv4 block's first and last address, and the public addresses just outside it
IPV4_EDGES = [
    ("0.0.0.0", False), ("0.255.255.255", False), ("1.0.0.0", True),
    ("9.255.255.255", True), ("10.0.0.0", False), ("10.255.255.255", False), ("11.0.0.0", True),
    ("100.63.255.255", True), ("100.64.0.0", False), ("100.100.100.200", False), ("100.127.255.255", False),
    ("100.128.0.0", True),
    ("126.255.255.255", True), ("127.0.0.0", False), ("127.255.255.255", False), ("128.0.0.0", True),
    ("169.253.255.255", True), ("169.254.0.0", False), ("169.254.169.254", False), ("169.254.255.255", False),
    ("169.255.0.0", True),
    ("172.15.255.255", True), ("172.16.0.0", False), ("172.31.255.255", False), ("172.32.0.0", True),
    ("191.255.255.255", True), ("192.0.0.0", False), ("192.0.0.8", False), ("192.0.0.9", False),
    ("192.0.0.10", False), ("192.0.0.170", False), ("192.0.0.255", False), ("192.0.1.0", True),
    ("192.0.2.0", False), ("192.0.2.255", False), ("192.0.3.0", True),
    ("192.88.98.255", True), ("192.88.99.0", False), ("192.88.99.255", False), ("192.88.100.0", True),
    ("192.167.255.255", True), ("192.168.0.0", False), ("192.168.255.255", False), ("192.169.0.0", True),
    ("198.17.255.255", True), ("198.18.0.0", False), ("198.19.255.255", False), ("198.20.0.0", True),
    ("198.51.99.255", True), ("198.51.100.0", False), ("198.51.100.255", False), ("198.51.101.0", True),
    ("203.0.112.255", True), ("203.0.113.0", False), ("203.0.113.255", False), ("203.0.114.0", True),
    ("223.255.255.255", True), ("224.0.0.0", False), ("239.255.255.255", False), ("240.0.0.0", False),
    ("255.255.255.255", False),
    # special-purpose blocks IANA marks globally reachable stay public (AS112, AMT)
    ("192.31.196.1", True), ("192.52.193.1", True), ("192.175.48.1", True), ("8.8.8.8", True),
]

#: the same for IPv6 (the embedded forms are below)
IPV6_EDGES = [
    ("::", False), ("::1", False), ("::2", False), ("::ffff", False),  # ::/96: IPv4-compatible
    ("100::", False), ("100::ffff:ffff:ffff:ffff", False), ("100:0:0:1::", False),  # discard only; outside 2000::/3
    ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False), ("2000::", True),
    ("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True), ("2001::", False),
    ("2001:1::1", False), ("2001:1::2", False), ("2001:3::1", False), ("2001:20::1", False),  # IETF /23's anycast
    ("2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff", False), ("2001:200::", True),
    ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", True), ("2001:db8::", False),
    ("2001:db8:ffff:ffff:ffff:ffff:ffff:ffff", False), ("2001:db9::", True),
    ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True), ("2002::", False),
    ("2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False), ("2003::", True),
    ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True), ("3fff::", False),
    ("3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff", False), ("3fff:1000::", True),
    ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", True), ("4000::", False), ("5f00::1", False),
    ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False), ("fc00::", False),
    ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("fe80::", False), ("fe80::1%eth0", False), ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("fec0::1", False), ("ff02::1", False), ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", False),
    ("2a03:2880:f12f:83:face:b00c:0:25de", True), ("2620:4f:8000::1", True),  # Facebook's CDN; AS112
]

#: each IPv6 form that embeds an IPv4 address, carrying a private one (169.254.169.254 or 10.0.0.1) and a public one
#: (8.8.8.8): (address, public)
EMBEDDED = [
    # IPv4-mapped (RFC 4291 section 2.5.5.2): as public as the IPv4 address
    ("::ffff:169.254.169.254", False), ("::ffff:10.0.0.1", False), ("::ffff:100.64.0.1", False),
    ("::ffff:8.8.8.8", True),
    # NAT64 well-known prefix (RFC 6052): as public as the IPv4 address
    ("64:ff9b::a9fe:a9fe", False), ("64:ff9b::a00:1", False), ("64:ff9b::c000:9", False), ("64:ff9b::808:808", True),
    # IPv4-compatible, deprecated (RFC 4291 section 2.5.5.1): refused whatever it carries
    ("::7f00:1", False), ("::a9fe:a9fe", False), ("::808:808", False),
    # local-use NAT64 (RFC 8215): the operator's gateway maps it; refused whatever it carries
    ("64:ff9b:1::a9fe:a9fe", False), ("64:ff9b:1:a9fe:a9:fe00::", False), ("64:ff9b:1::808:808", False),
    ("64:ff9b:1:808:8:800::", False),
    # 6to4 (RFC 3056): refused whatever it carries
    ("2002:a9fe:a9fe::1", False), ("2002:a00:1::1", False), ("2002:808:808::1", False),
    # Teredo (RFC 4380; client 10.0.0.1 and 8.8.8.8, obfuscated): refused whatever it carries
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", False), ("2001:0:4136:e378:8000:63bf:f7f7:f7f7", False),
]


@pytest.mark.parametrize("address, public", IPV4_EDGES + IPV6_EDGES + EMBEDDED)
def test_the_edges_of_every_block_and_every_embedded_form(address, public):
    assert is_public_address(ipaddress.ip_address(address)) is public
    assert (why_not_public(ipaddress.ip_address(address)) is None) is public
    # the URL-text rule (the thumbnail guard, whether a Graph API is local) agrees
    assert is_non_public_host(f"[{address}]" if ":" in address else address) is not public


def test_the_teredo_addresses_above_carry_the_ipv4_addresses_they_claim():
    assert ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:f5ff:fffe").teredo[1] == ipaddress.IPv4Address("10.0.0.1")
    assert ipaddress.IPv6Address("2001:0:4136:e378:8000:63bf:f7f7:f7f7").teredo[1] == ipaddress.IPv4Address("8.8.8.8")


@pytest.mark.parametrize("address, carried", [
    ("::ffff:10.0.0.1", "10.0.0.1"), ("64:ff9b::a00:1", "10.0.0.1"), ("64:ff9b::808:808", "8.8.8.8"),
    ("::a00:1", None), ("64:ff9b:1::a00:1", None), ("2002:a00:1::1", None), ("10.0.0.1", None), ("2a03::1", None),
])
def test_only_mapped_and_well_known_nat64_addresses_are_read_for_their_ipv4_address(address, carried):
    got = carried_ipv4(ipaddress.ip_address(address))
    assert (None if got is None else str(got)) == carried


def test_a_refusal_names_the_block_and_its_rfc():
    assert why_not_public(ipaddress.ip_address("64:ff9b:1::a9fe:a9fe")) == "local-use NAT64 (RFC 8215)"
    assert why_not_public(ipaddress.ip_address("::ffff:169.254.169.254")) == (
        "carries 169.254.169.254: link-local (RFC 3927): cloud metadata services at 169.254.169.254")
    assert why_not_public(ipaddress.ip_address("64:ff9b::6464:64c8")).startswith(
        "carries 100.100.100.200: shared address space, CGNAT (RFC 6598)")


def test_the_tables_are_geoagents_own_and_name_an_rfc_for_each_block():
    assert [str(net) for net, _ in NON_PUBLIC_NETWORKS] == [
        "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.0.0.0/24",
        "192.0.2.0/24", "192.88.99.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24", "203.0.113.0/24",
        "224.0.0.0/4", "240.0.0.0/4",
        "::/128", "::1/128", "::/96", "64:ff9b:1::/48", "100::/64", "2001::/23", "2001:db8::/32", "2002::/16",
        "3fff::/20", "fc00::/7", "fe80::/10", "fec0::/10", "ff00::/8", "::/3", "4000::/2", "8000::/1"]
    assert [str(net) for net, _ in IPV4_CARRIERS] == ["::ffff:0:0/96", "64:ff9b::/96"]
    assert all("RFC " in why for table in (NON_PUBLIC_NETWORKS, IPV4_CARRIERS, LOCAL_NETWORKS) for _, why in table)
    # every local server's block is a non-public one: a model host counted local is never a public thumbnail host
    assert all(any(net.subnet_of(other) for other, _ in NON_PUBLIC_NETWORKS if other.version == net.version)
               for net, _ in LOCAL_NETWORKS)


_INTERPRETER_LISTS = ("is_global", "is_private", "is_multicast", "is_reserved", "is_loopback", "is_link_local",
                      "is_unspecified", "is_site_local")


def test_the_rule_reads_none_of_the_interpreters_lists(monkeypatch):
    # the interpreter's lists differ between patch releases (3.11.7 vs 3.13): with every one of them unreadable, the
    # rule gives the same answers, so no release can change them
    def unreadable(self):
        raise AssertionError("the interpreter's address lists were read")

    for cls in (ipaddress.IPv4Address, ipaddress.IPv6Address):
        for name in _INTERPRETER_LISTS:
            if hasattr(cls, name):
                monkeypatch.setattr(cls, name, property(unreadable))
    for address, public in IPV4_EDGES + IPV6_EDGES + EMBEDDED:
        assert is_public_address(ipaddress.ip_address(address)) is public, address


@pytest.mark.parametrize("host", ["[64:ff9b:1::a9fe:a9fe]", "[::7f00:1]", "[2002:808:808::1]", "192.0.0.9",
                                  "[64:ff9b::a00:1]"])
def test_the_model_host_rule_is_unchanged_by_the_shared_module(host):
    # a model on any of these is a paid host, as crawl43 #4 decided; only the thumbnail rule changed
    assert is_local_host(host) is False and is_non_public_host(host) is True


class _Dns(AbstractResolver):
    """A DNS server's answer: every name resolves to ``addresses``."""

    def __init__(self, addresses: list[str]) -> None:
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0, family: int = socket.AF_INET):
        return [{"hostname": host, "host": a, "port": port, "family": socket.AF_INET6 if ":" in a else socket.AF_INET,
                 "proto": 0, "flags": socket.AI_NUMERICHOST} for a in self.addresses]

    async def close(self) -> None:
        return None


SMUGGLED = ["64:ff9b:1::a9fe:a9fe", "::a9fe:a9fe", "2002:a9fe:a9fe::1", "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe", "192.0.0.8"]


def test_the_resolver_keeps_only_public_answers_and_refuses_a_name_with_none():
    async def go(addresses):
        resolver = PublicAddressResolver(_Dns(addresses))
        try:
            return await resolver.resolve("scontent.xx.fbcdn.net", 443, socket.AF_UNSPEC)
        finally:
            await resolver.close()

    kept = anyio.run(go, SMUGGLED + ["64:ff9b::808:808", "157.240.1.1"])
    assert [r["host"] for r in kept] == ["64:ff9b::808:808", "157.240.1.1"]
    with pytest.raises(NotPublicAddress) as refused:
        anyio.run(go, SMUGGLED)
    assert "scontent.xx.fbcdn.net resolves to no public address (" in str(refused.value)
    assert all(a in str(refused.value) for a in SMUGGLED)


@pytest.mark.parametrize("address", SMUGGLED)
def test_a_literal_embedding_a_metadata_address_is_refused_before_any_connection(address):
    host = f"[{address}]" if ":" in address else address
    assert literal_not_public(host) == str(ipaddress.ip_address(address))

    async def go():
        async with HttpClient(default_policy=HostPolicy(timeout_s=5.0, max_attempts=1)) as http:
            with pytest.raises(AddressNotPublic) as e:
                await http.request("GET", f"http://{host}:9/latest/meta-data/", public_only=True)
            return e.value, http.stats()

    err, stats = anyio.run(go)
    assert f"{ipaddress.ip_address(address)} is not a public address" in str(err)
    assert never_sent(err) and stats == {}  # nothing connected, no host state made
    client = MapillaryClient(None, "https://graph.mapillary.com", "MLY|x|y", UA)
    assert "local or private address" in (client._thumb_redirect_guard(f"http://{host}/latest/") or "")
