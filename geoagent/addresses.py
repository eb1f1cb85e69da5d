"""Which IP addresses are a local server's and which are public: geoagent's own tables (crawl43 #4, fixnet43).

Python's ``ipaddress`` ``is_private`` and ``is_global`` follow IANA's special-purpose registries as of the
interpreter's patch release, and their lists changed between releases: 3.11.7 counts ``192.0.0.8``, ``192.0.0.9``,
``2002::/16`` and the local-use NAT64 prefix ``64:ff9b:1::/48`` global, 3.13 does not (and counts ``192.0.0.9`` and
``.10`` global again). A rule read from them gives one config, or one thumbnail URL, another answer under another
interpreter. So both of geoagent's address rules are tables of networks named here, each with the RFC that reserves
it, and judged with ``in`` only (no ``is_private``, ``is_global``, ``is_multicast`` or ``is_reserved``):

* :data:`LOCAL_NETWORKS` (:func:`local_address`): this machine or its LAN, the rule for a model's ``base_url``
  (:func:`geoagent.config.is_local_host`: no prices required, plain http allowed).
* :data:`NON_PUBLIC_NETWORKS` (:func:`is_public_address`): every block a connection to a URL an API's answer names
  (Mapillary thumbnails and their redirects, :mod:`geoagent.runtime.public_net`) must not reach.

IPv6 forms that carry an IPv4 address are judged by a rule of their own (:data:`IPV4_CARRIERS`): an IPv4-mapped
address and a NAT64 address under the well-known prefix reach the IPv4 address they carry, so they are as public as
it is; the other forms (IPv4-compatible, local-use NAT64, 6to4, Teredo) are refused whatever they carry (the
reasons are at :data:`NON_PUBLIC_NETWORKS`).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
#: a table of networks: each block and why it is in the table (the RFC that reserves it)
NetworkTable = tuple[tuple[IPNetwork, str], ...]


def _table(rows: Iterable[tuple[str, str]]) -> NetworkTable:
    """The rows ``(network text, why)`` as a table; a network text with host bits set raises ``ValueError`` (a typo
    in a table here is caught at import)."""
    return tuple((ipaddress.ip_network(net), why) for net, why in rows)


def _first_block(ip: IPAddress, table: NetworkTable) -> str | None:
    """The ``why`` of the first block of ``table`` that holds ``ip`` (same IP version only), else None."""
    return next((why for net, why in table if net.version == ip.version and ip in net), None)


#: the address blocks of a local server for :func:`geoagent.config.is_local_host`: this machine or its LAN, each
#: with the RFC that reserves it. Named here rather than read from Python's ``ipaddress`` ``is_private``, whose list
#: changed between patch releases (3.11.7 counts ``192.0.0.0/29`` and ``2001:10::/28``; 3.13 ``192.0.0.0/24`` but
#: 192.0.0.9 and 192.0.0.10, ``2002::/16`` and ``64:ff9b:1::/48``), so the same config was a paid or a free model by
#: the interpreter (crawl43 #4). Documentation, benchmarking, reserved and protocol-assignment blocks (RFC 5737,
#: 2544, 1112, 6890, 3849, 2928), shared CGNAT addresses (RFC 6598), multicast, 6to4 and NAT64 prefixes are no LAN
#: server's: a model there writes its prices
LOCAL_NETWORKS: NetworkTable = _table((
    ("0.0.0.0/8", "this host on this network (RFC 1122 section 3.2.1.3; 0.0.0.0 the unspecified address)"),
    ("10.0.0.0/8", "private use (RFC 1918)"),
    ("127.0.0.0/8", "loopback (RFC 1122 section 3.2.1.3)"),
    ("169.254.0.0/16", "link-local (RFC 3927)"),
    ("172.16.0.0/12", "private use (RFC 1918)"),
    ("192.168.0.0/16", "private use (RFC 1918)"),
    ("::/128", "the unspecified address (RFC 4291 section 2.5.2)"),
    ("::1/128", "loopback (RFC 4291 section 2.5.3)"),
    ("fc00::/7", "unique local (RFC 4193)"),
    ("fe80::/10", "link-local unicast (RFC 4291 section 2.5.6)"),
))


#: the IPv6 forms judged by the IPv4 address they carry in their last 32 bits (:func:`carried_ipv4`): the two a
#: resolver hands out for a public IPv4-only host, so refusing them would refuse real thumbnail servers (fixnet43)
IPV4_CARRIERS: NetworkTable = _table((
    ("::ffff:0:0/96", "IPv4-mapped (RFC 4291 section 2.5.5.2): a dual-stack socket connects to the IPv4 address; "
                      "a resolver returns one with AI_V4MAPPED"),
    ("64:ff9b::/96", "NAT64 well-known prefix (RFC 6052 section 2.1): DNS64 names an IPv4-only host so on an "
                     "IPv6-only network, and the gateway connects to the IPv4 address; RFC 6052 section 3.1 forbids "
                     "the prefix for a non-global IPv4 address"),
))


#: every block a connection to an untrusted URL (a thumbnail the Graph API's answer names) must not reach, each with
#: the RFC that reserves it: the blocks IANA's IPv4 and IPv6 special-purpose address registries mark not globally
#: reachable (False or N/A), multicast, and IPv6 outside global unicast. Whole blocks are refused even where IANA
#: marks a few anycast services inside them reachable (PCP, TURN, AMT, ORCHIDv2 in 192.0.0.0/24 and 2001::/23):
#: those serve no web content. The first block holding an address names why it is refused (fixnet43)
NON_PUBLIC_NETWORKS: NetworkTable = _table((
    ("0.0.0.0/8", "this network (RFC 791 section 3.2; 0.0.0.0 this host, RFC 1122 section 3.2.1.3)"),
    ("10.0.0.0/8", "private use (RFC 1918)"),
    ("100.64.0.0/10", "shared address space, CGNAT (RFC 6598): a Tailscale peer, Alibaba Cloud's metadata "
                      "service 100.100.100.200 (security42 #1)"),
    ("127.0.0.0/8", "loopback (RFC 1122 section 3.2.1.3)"),
    ("169.254.0.0/16", "link-local (RFC 3927): cloud metadata services at 169.254.169.254"),
    ("172.16.0.0/12", "private use (RFC 1918)"),
    ("192.0.0.0/24", "IETF protocol assignments (RFC 6890): service continuity 192.0.0.0/29 (RFC 7335), the dummy "
                     "address 192.0.0.8 (RFC 7600), PCP and TURN anycast 192.0.0.9 and .10 (RFC 7723, 8155), NAT64 "
                     "discovery 192.0.0.170 and .171 (RFC 7050)"),
    ("192.0.2.0/24", "documentation, TEST-NET-1 (RFC 5737)"),
    ("192.88.99.0/24", "6to4 relay anycast, deprecated (RFC 7526)"),
    ("192.168.0.0/16", "private use (RFC 1918)"),
    ("198.18.0.0/15", "benchmarking (RFC 2544): a proxy's fake-IP block"),
    ("198.51.100.0/24", "documentation, TEST-NET-2 (RFC 5737)"),
    ("203.0.113.0/24", "documentation, TEST-NET-3 (RFC 5737)"),
    ("224.0.0.0/4", "multicast (RFC 5771)"),
    ("240.0.0.0/4", "reserved (RFC 1112 section 4), with the limited broadcast 255.255.255.255 (RFC 919 "
                    "section 7)"),
    ("::/128", "the unspecified address (RFC 4291 section 2.5.2)"),
    ("::1/128", "loopback (RFC 4291 section 2.5.3)"),
    # some stacks tunnel ::a.b.c.d to a.b.c.d (an automatic tunnel, sit0), and no resolver returns one: refused
    # whatever it carries (fixnet43)
    ("::/96", "IPv4-compatible, deprecated (RFC 4291 section 2.5.5.1)"),
    # the operator picks the prefix length (/48 to /96) and the mapping, so the IPv4 address it reaches cannot be
    # read from it, and its own gateway may reach a private one: refused whatever it carries (fixnet43)
    ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215)"),
    ("100::/64", "discard only (RFC 6666)"),
    # holds Teredo 2001::/32 (RFC 4380: a NAT'd client's tunnel, never a web server's address), benchmarking
    # 2001:2::/48 (RFC 5180) and ORCHID 2001:10::/28, 2001:20::/28 (RFC 4843, 7343)
    ("2001::/23", "IETF protocol assignments (RFC 2928), Teredo 2001::/32 (RFC 4380) among them"),
    ("2001:db8::/32", "documentation (RFC 3849)"),
    # the packets go to the IPv4 address it carries through whichever relay or 6to4 router is nearest; deprecated
    # for new use (RFC 7526) and not globally reachable in IANA's registry: refused whatever it carries (fixnet43)
    ("2002::/16", "6to4 (RFC 3056)"),
    ("3fff::/20", "documentation (RFC 9637)"),
    ("fc00::/7", "unique local (RFC 4193)"),
    ("fe80::/10", "link-local unicast (RFC 4291 section 2.5.6)"),
    ("fec0::/10", "site-local, deprecated (RFC 3879)"),
    ("ff00::/8", "multicast (RFC 4291 section 2.7)"),
    # the rest of IPv6 outside 2000::/3 (IANA's IPv6 address space: reserved by the IETF or unassigned; segment
    # routing's 5f00::/16, RFC 9602, lies there): no public server is numbered there
    ("::/3", "outside global unicast 2000::/3 (RFC 4291 section 2.4; IANA IPv6 address space)"),
    ("4000::/2", "outside global unicast 2000::/3 (RFC 4291 section 2.4; IANA IPv6 address space)"),
    ("8000::/1", "outside global unicast 2000::/3 (RFC 4291 section 2.4; IANA IPv6 address space)"),
))


def local_address(ip: IPAddress) -> bool:
    """Whether ``ip`` lies in one of :data:`LOCAL_NETWORKS`; an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``, RFC 4291
    section 2.5.5.2: a dual-stack socket connects to ``a.b.c.d``) is judged by the IPv4 address it carries. The same
    answer under every Python version (crawl43 #4)."""
    if ip.version == 6 and (mapped := ipaddress.IPv6Address(ip).ipv4_mapped) is not None:
        ip = mapped
    return _first_block(ip, LOCAL_NETWORKS) is not None


def carried_ipv4(ip: IPAddress) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 address of :data:`IPV4_CARRIERS` carries in its last 32 bits (``::ffff:10.0.0.1``
    and ``64:ff9b::a00:1`` carry ``10.0.0.1``), else None (an IPv4 address, any other IPv6 address)."""
    if ip.version == 6 and _first_block(ip, IPV4_CARRIERS) is not None:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def why_not_public(ip: IPAddress) -> str | None:
    """Why ``ip`` is no public address: the ``why`` of the first block of :data:`NON_PUBLIC_NETWORKS` holding it (for
    an address of :data:`IPV4_CARRIERS`, holding the IPv4 address it carries, prefixed with what carries it), or
    None for a public address. The same answer under every Python version (fixnet43)."""
    if (inner := carried_ipv4(ip)) is not None:
        why = _first_block(inner, NON_PUBLIC_NETWORKS)
        return None if why is None else f"carries {inner}: {why}"
    return _first_block(ip, NON_PUBLIC_NETWORKS)


def is_public_address(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address: in none of :data:`NON_PUBLIC_NETWORKS` (:func:`why_not_public`).
    False for loopback, private, link-local, shared (CGNAT, 100.64.0.0/10: Alibaba Cloud's metadata service is
    100.100.100.200; security42 #1), protocol-assignment, reserved, documentation, benchmarking, multicast and
    unspecified addresses, for IPv6 outside 2000::/3, and for the IPv4-compatible, local-use NAT64, 6to4 and Teredo
    forms whatever they carry; an IPv4-mapped address (``::ffff:a.b.c.d``) or a NAT64 one under the well-known
    prefix (``64:ff9b::a.b.c.d``) is public exactly when the IPv4 address it carries is. Geoagent's own table, not
    Python's ``is_global``, whose list differs between patch releases (fixnet43)."""
    return why_not_public(ip) is None
