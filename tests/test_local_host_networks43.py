"""A model host's local/paid rule names its own networks (crawl43 #4).

``is_local_host`` (a model's ``base_url``: no prices required, plain http allowed, a short key accepted) read
Python's ``ipaddress`` ``is_private``, whose list changed between patch releases: 3.11.7 counts 192.0.0.0/29 and
2001:10::/28, 3.13 counts 192.0.0.0/24 (less 192.0.0.9 and .10), 2002::/16 and 64:ff9b:1::/48. So one config was a
free or a paid model by the interpreter that read it. Now the rule is :data:`geoagent.config.LOCAL_NETWORKS`:
loopback, RFC 1918 private use, link-local, 0.0.0.0/8 and the IPv6 counterparts, each with its RFC; an IPv4-mapped
address is judged by the IPv4 address it carries; documentation, benchmarking, reserved, protocol-assignment, CGNAT,
multicast, 6to4 and NAT64 blocks are paid hosts (they were local under 3.11.7's ``is_private``, or under some
release).
"""

from __future__ import annotations

import ipaddress

import pytest

from geoagent.config import LOCAL_NETWORKS, ConfigError, config_from_dict, is_local_host

#: each local block's first and last address, and the addresses just outside it
EDGES = [
    ("0.0.0.0", True), ("0.255.255.255", True), ("1.0.0.0", False),
    ("9.255.255.255", False), ("10.0.0.0", True), ("10.255.255.255", True), ("11.0.0.0", False),
    ("126.255.255.255", False), ("127.0.0.0", True), ("127.255.255.255", True), ("128.0.0.0", False),
    ("169.253.255.255", False), ("169.254.0.0", True), ("169.254.255.255", True), ("169.255.0.0", False),
    ("172.15.255.255", False), ("172.16.0.0", True), ("172.31.255.255", True), ("172.32.0.0", False),
    ("192.167.255.255", False), ("192.168.0.0", True), ("192.168.255.255", True), ("192.169.0.0", False),
    ("[::]", True), ("[::1]", True), ("[::2]", False),
    ("[fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]", False), ("[fc00::]", True),
    ("[fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff]", True), ("[fe00::]", False),
    ("[fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff]", False), ("[fe80::]", True),
    ("[febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff]", True), ("[fec0::1]", False),
]

#: blocks that are no LAN server's, whatever the interpreter's is_private says of them (a model there is paid)
PAID = [
    "100.64.0.0", "100.127.255.255",  # shared address space, CGNAT (RFC 6598)
    "192.0.0.1", "192.0.0.8", "192.0.0.9", "192.0.0.170",  # IETF protocol assignments (RFC 6890; 3.11.7 vs 3.13)
    "192.0.2.1", "198.51.100.1", "203.0.113.1",  # documentation (RFC 5737)
    "198.18.0.1", "198.19.255.255",  # benchmarking (RFC 2544), a proxy's fake-IP block
    "240.0.0.1", "255.255.255.255", "224.0.0.1",  # reserved (RFC 1112), limited broadcast, multicast
    "[2001:db8::1]", "[100::1]", "[2001::1]", "[2001:10::1]",  # documentation, discard, IETF, ORCHID (3.11.7 private)
    "[2002::1]", "[64:ff9b:1::1]",  # 6to4 and local-use NAT64 (3.13 private)
    "[64:ff9b::a00:1]", "[ff02::1]", "[::7f00:1]",  # NAT64 of 10.0.0.1, multicast, IPv4-compatible (deprecated)
    "[::ffff:8.8.8.8]", "[::ffff:192.0.2.1]", "[::ffff:100.64.0.1]",  # IPv4-mapped: the IPv4 address decides
]


@pytest.mark.parametrize("host, local", EDGES)
def test_the_edges_of_every_local_block(host, local):
    assert is_local_host(host) is local


@pytest.mark.parametrize("host", PAID)
def test_documentation_reserved_cgnat_and_transition_blocks_are_paid_hosts(host):
    assert is_local_host(host) is False


@pytest.mark.parametrize("host", ["[::ffff:127.0.0.1]", "[::ffff:10.1.2.3]", "[::ffff:192.168.1.20]",
                                  "[::ffff:169.254.169.254]"])
def test_an_ipv4_mapped_address_is_judged_by_its_ipv4_address(host):
    assert is_local_host(host) is True


def test_the_list_is_the_modules_own_and_names_an_rfc_for_each_block():
    assert [str(net) for net, _ in LOCAL_NETWORKS] == [
        "0.0.0.0/8", "10.0.0.0/8", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12", "192.168.0.0/16",
        "::/128", "::1/128", "fc00::/7", "fe80::/10"]
    assert all("RFC " in why for _, why in LOCAL_NETWORKS)
    # every block is one that no public address lies in: local never reaches past the machine or its LAN
    assert not any(net.overlaps(ipaddress.ip_network(g)) for net, _ in LOCAL_NETWORKS
                   for g in ("100.64.0.0/10", "192.0.0.0/24", "198.18.0.0/15", "2001::/23", "2002::/16"))


def _doc(base_url: str, **extra) -> dict:
    return {"campaign": {"name": "lan", "kind": "generic", "seed": 1}, "budget": {"cap_usd": 1.0},
            "generic": {"n_requests": 2},
            "models": [{"name": "gw", "provider": "openai", "model": "gpt-4o", "base_url": base_url,
                        "api_key_env": "GW_KEY", **extra}]}


def test_a_model_on_a_benchmarking_address_writes_its_prices_and_a_lan_box_need_not():
    # 198.18.0.0/15 was local under every interpreter's is_private: a proxy's fake-IP for a paid API looked free
    with pytest.raises(ConfigError) as info:
        config_from_dict(_doc("https://198.18.0.7/v1"), source="lan.toml")
    assert "required for a model on a paid host (198.18.0.7)" in info.value.problems[0]
    m = config_from_dict(_doc("http://192.168.1.20:8000/v1")).models[0]
    assert not m.on_paid_host and (m.price_input_usd_per_mtok, m.price_output_usd_per_mtok) == (0.0, 0.0)
