"""Connections to public addresses only (security42 #1).

A URL's text says little about where its request goes: a public name (``169.254.169.254.nip.io``, an attacker's own
domain) may resolve to a loopback, private, link-local or CGNAT address, and may resolve to a public one when a
guard looks and to a private one when the client connects (DNS rebinding). The only address worth judging is the
one the connection is opened to. :class:`PublicAddressResolver` wraps the connector's resolver and hands the
connector only public addresses (:func:`geoagent.addresses.is_public_address`: geoagent's own table of non-public
networks, not the interpreter's ``is_global``, fixnet43); a name with none is refused with
:class:`NotPublicAddress` before any connection is opened. The HTTP client uses it for the requests that ask for it
(``public_only``: Mapillary thumbnails, whose URLs the Graph API's answer names): every redirect of such a request
is resolved by it too. aiohttp skips the resolver for IP literals, so the client judges a literal host by its text
(:func:`literal_not_public`), which is then the address itself.
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from aiohttp.abc import AbstractResolver
from aiohttp.resolver import DefaultResolver

from geoagent.addresses import is_public_address


class NotPublicAddress(OSError):
    """A name resolved to no public address (:class:`PublicAddressResolver`): not connected. The message names the
    host and the addresses it resolved to (no credential: host names and addresses only)."""


def _public(address: str) -> bool:
    """Whether the resolver's ``address`` text (``"93.184.216.34"``, ``"fe80::1%eth0"``) is a public address; one
    that does not parse is not."""
    try:
        return is_public_address(ipaddress.ip_address(address))
    except ValueError:
        return False


def literal_not_public(host: str | None) -> str | None:
    """The address ``host`` (a URL's host name, IPv6 in brackets or not) spells when it is an IP literal that is not
    public, else None (a name, or a public address). aiohttp opens such a literal without asking the resolver, so
    it is judged here; a name (and a hex form such as ``0x7f.1``, which aiohttp hands to the resolver) is judged by
    :class:`PublicAddressResolver` on what it resolves to. (aiohttp refuses a short form such as ``127.1`` as an
    invalid URL: the request raises ``ValueError`` before anything is resolved or connected.)"""
    text = (host or "").strip("[]")
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return None
    return None if is_public_address(ip) else str(ip)


class PublicAddressResolver(AbstractResolver):
    """An aiohttp resolver that keeps only the public addresses ``inner`` resolves a name to.

    Parameters
    ----------
    inner : aiohttp.abc.AbstractResolver, optional
        The resolver asked (aiohttp's :class:`~aiohttp.resolver.DefaultResolver` when None, closed with this one; a
        given one is the caller's to close).

    ``resolve`` returns ``inner``'s answers whose ``host`` is a public address, in its order; when none is, it raises
    :class:`NotPublicAddress` (an ``OSError``, which aiohttp reports as a ``ClientConnectorDNSError`` with it as
    ``os_error``), so nothing is connected."""

    def __init__(self, inner: AbstractResolver | None = None) -> None:
        self._owns_inner = inner is None
        self._inner = inner if inner is not None else DefaultResolver()

    async def resolve(self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET) -> list[Any]:
        """The public addresses ``inner`` resolves ``host`` to, for ``port`` and ``family`` (aiohttp's resolver
        protocol).

        Returns
        -------
        list of dict
            ``inner``'s answers (aiohttp's ``ResolveResult``: ``hostname``, ``host``, ``port``, ``family``,
            ``proto``, ``flags``) whose ``host`` is a public address (:func:`geoagent.addresses.is_public_address`),
            in ``inner``'s order.

        Raises
        ------
        NotPublicAddress
            None of the answers is public (the message names ``host`` and every address it resolved to).
        OSError
            Whatever ``inner`` raised (a failed lookup: aiohttp reports it as a DNS error).
        """
        found = await self._inner.resolve(host, port, family)
        kept = [r for r in found if _public(str(r["host"]))]
        if not kept:
            shown = ", ".join(sorted({str(r["host"]) for r in found})) or "none"
            raise NotPublicAddress(f"{host} resolves to no public address ({shown}): not connected")
        return kept

    async def close(self) -> None:
        if self._owns_inner:
            await self._inner.close()
