"""A plain threaded TCP proxy in front of a server that can turn into a black hole (a network partition).

``BlackholeProxy(host, port)`` listens on 127.0.0.1 (a free port: ``.port``, ``.url_for(url)``) and relays bytes
both ways. ``hang_existing()`` stops relaying on the connections open now (the bytes sent either way are read and
dropped; the sockets stay open: no FIN, no RST); ``hang_all()`` does that and also accepts every new connection
and never answers it. So a client sees what a partition or a hung host looks like: connects succeed, replies never
come, nothing is closed. ``restore()`` relays new connections again (the partition healed; the hung ones stay
hung). ``close()`` closes every socket (clients still waiting then see the connection close).
"""

from __future__ import annotations

import socket
import threading
from urllib.parse import urlsplit, urlunsplit


class _Link:
    def __init__(self, client: socket.socket, upstream: socket.socket | None, hung: bool) -> None:
        self.client, self.upstream, self.hung = client, upstream, hung


class BlackholeProxy:
    """Threaded TCP relay to ``(host, port)`` that can stop answering without closing (module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._links: list[_Link] = []
        self._lock = threading.Lock()
        self._hang_new = False
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def url_for(self, url: str) -> str:
        """``url`` (a ``redis://host:port/db?...`` URL of the target) with this proxy's address instead."""
        u = urlsplit(url)
        return urlunsplit((u.scheme, f"127.0.0.1:{self.port}", u.path, u.query, u.fragment))

    def hang_existing(self) -> None:
        """The connections open now stop relaying (bytes dropped both ways, sockets left open)."""
        with self._lock:
            for link in self._links:
                link.hung = True

    def hang_all(self) -> None:
        """As :meth:`hang_existing`, and every new connection is accepted and never answered."""
        with self._lock:
            self._hang_new = True
        self.hang_existing()

    def restore(self) -> None:
        """New connections are relayed again (those hung before stay hung)."""
        with self._lock:
            self._hang_new = False

    def close(self) -> None:
        """Close the listener and every relayed socket."""
        with self._lock:
            self._closed = True
            links, self._links = self._links, []
        for s in [self._listener, *(x for link in links for x in (link.client, link.upstream) if x is not None)]:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    client.close()
                    return
                hang = self._hang_new
            upstream = None if hang else socket.create_connection(self.target)
            link = _Link(client, upstream, hang)
            with self._lock:
                self._links.append(link)
            threading.Thread(target=self._pump, args=(link, client, lambda lk: lk.upstream), daemon=True).start()
            if upstream is not None:
                threading.Thread(target=self._pump, args=(link, upstream, lambda lk: lk.client), daemon=True).start()

    @staticmethod
    def _pump(link: _Link, src: socket.socket, dst_of) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                return
            if not data:
                dst = dst_of(link)
                if dst is not None and not link.hung:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:
                        pass
                return
            if link.hung:
                continue  # a black hole: read and dropped, never answered, never closed
            try:
                dst_of(link).sendall(data)
            except OSError:
                return
