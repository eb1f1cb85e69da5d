"""``geoagent.sandbox.server.free_port`` draws below the kernel's ephemeral range, where no bind to port 0 (a
server on "any free port", an outgoing connection's source port) can be handed the same port before the caller
binds it (session 21: CI twice saw a test's "closed" port answered by another test's server)."""

from __future__ import annotations

import socket
import sys

import pytest

from geoagent.sandbox import server


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the ephemeral range is read from /proc")
def test_free_ports_lie_below_the_ephemeral_range_and_are_bindable():
    low = server._ephemeral_low()
    assert low is not None
    ports = [server.free_port() for _ in range(20)]
    if low - server._BELOW_SPAN >= 1024:
        assert all(low - server._BELOW_SPAN <= p < low for p in ports), (low, ports)
    for p in ports[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", p))  # free when handed out
    assert len(set(ports)) > 10  # drawn at random, not one port again and again
