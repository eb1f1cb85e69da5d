"""Which IP addresses are a local server's and which are public: the address rules in one module (crawl43 #4).

* :data:`LOCAL_NETWORKS` (:func:`local_address`): this machine or its LAN, the rule for a model's ``base_url``
  (:func:`geoagent.config.is_local_host`: no prices required, plain http allowed).
* :func:`is_public_address`: the addresses a connection to a URL an API's answer names (Mapillary thumbnails and
  their redirects, :mod:`geoagent.runtime.public_net`) may reach.
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


def local_address(ip: IPAddress) -> bool:
    """Whether ``ip`` lies in one of :data:`LOCAL_NETWORKS`; an IPv4-mapped IPv6 address (``::ffff:a.b.c.d``, RFC 4291
    section 2.5.5.2: a dual-stack socket connects to ``a.b.c.d``) is judged by the IPv4 address it carries. The same
    answer under every Python version (crawl43 #4)."""
    if ip.version == 6 and (mapped := ipaddress.IPv6Address(ip).ipv4_mapped) is not None:
        ip = mapped
    return _first_block(ip, LOCAL_NETWORKS) is not None


#: NAT64's well-known prefix (RFC 6052): ``64:ff9b::a.b.c.d`` reaches the IPv4 address ``a.b.c.d`` through the gateway
_NAT64 = ipaddress.ip_network("64:ff9b::/96")


def is_public_address(ip: IPAddress) -> bool:
    """Whether ``ip`` is a public unicast address (Python's ``ipaddress`` ``is_global``, from IANA's special-purpose
    registries, and not multicast): False for loopback, private, link-local, shared (CGNAT, 100.64.0.0/10: Alibaba
    Cloud's metadata service is 100.100.100.200; security42 #1), reserved, documentation and unspecified addresses.
    An IPv6 address carrying an IPv4 one (IPv4-mapped ``::ffff:a.b.c.d``, 6to4, Teredo, NAT64 ``64:ff9b::/96``) is
    public only when that IPv4 address is too."""
    if ip.version == 6:
        v6 = ipaddress.IPv6Address(ip)
        inner = v6.ipv4_mapped or v6.sixtofour or (v6.teredo[1] if v6.teredo else None)
        if inner is None and v6 in _NAT64:
            inner = ipaddress.IPv4Address(int(v6) & 0xFFFFFFFF)
        if inner is not None and not is_public_address(inner):
            return False
    return ip.is_global and not ip.is_multicast
