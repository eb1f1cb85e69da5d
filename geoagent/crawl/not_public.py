"""The fetch stage's count of thumbnail hosts that resolve to no public address (crawl43 #1).

A thumbnail host whose name this network resolves to no public address (split-horizon DNS, a resolver that rewrites
answers) fails the walk of every site whose thumbnails it serves
(:class:`geoagent.crawl.fetcher.ThumbnailHostNotPublic`, fixrev42 #5). Each delivery of such a site asked the Graph
API for the site's images and a fresh thumbnail URL again (rate-limited calls) before failing the same way, and every
site was dead-lettered after ``[queue] max_attempts``.
Mapillary's thumbnails come from a few CDN names, so one refused name says the network's DNS will refuse the next
site's thumbnails too.

:class:`NotPublicHosts` counts such failures per host name, in a row: a new run starts once the host answered a
request of this process after the run's last failure (its :attr:`~geoagent.runtime.http.HttpStats.last_ok_at`: the
name resolved publicly meanwhile). It marks each failure with its place in the run and the run's id
(:func:`geoagent.runtime.http.new_streak_id`), which is what the stage runner's unreachable-host breaker reads on an
unreachable request (:mod:`geoagent.runtime.worker`, "Unreachable hosts"): after ``unreachable_after`` (5) in a row the
stage stops leasing, the tasks in flight are released untouched, the sites stay queued, the attempts the run counted
are given back, and the run ends ``incomplete`` with the line ``imagery_fetcher: host H unreachable (no public address
in this network's DNS answer on 5 consecutive requests); check <hint> / the network; ...`` (:meth:`hint`); ``status``
says it too. Under ``--watch`` the stage tries one site again after the runner's cool-down, as for any unreachable
host. The breaker is per process and per run, as the runner's: a re-run with the network unchanged pays at most that
many walks again before it stops.

The count is per host NAME, not per domain (rev43b #5, documented in docs/crawls.md): the resolver refuses a name,
and grouping names by registrable domain needs the Public Suffix List (the last two labels would lump every
``*.co.uk`` name together). So where successive sites' thumbnail URLs name different CDN edge hosts
(``scontent-<pop>.xx.fbcdn.net``), each name's run grows apart and the stage stops later, or, with a name per site,
never: those sites are dead-lettered after ``[queue] max_attempts`` deliveries, as before crawl43 #1.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from geoagent.runtime.http import new_streak_id


def host_name(key: str) -> str:
    """The host name of a host key (``"cdn.example.net:8443"`` -> ``"cdn.example.net"``; an IPv6 literal keeps its
    brackets: ``"[::1]:80"`` -> ``"[::1]"``), lower-case: the resolver refuses a name, the HTTP client keys by name
    and port."""
    key = key.strip().lower()
    if key.startswith("["):
        return key.split("]", 1)[0] + "]"
    return key.rsplit(":", 1)[0] if ":" in key else key


@dataclasses.dataclass(slots=True)
class _Run:
    """One host's run of failures in a row: how many, the run's id, when the last one came (Unix time, s)."""

    n: int
    streak_id: int
    last_at: float


class NotPublicHosts:
    """Per host name, the fetch stage's failures in a row to a thumbnail host that resolved to no public address
    (module docstring). One per crawl process (:attr:`geoagent.crawl.stages.CrawlServices.not_public`)."""

    def __init__(self) -> None:
        self._runs: dict[str, _Run] = {}

    def count(self, err: Any, http: Any = None) -> Any:
        """Count ``err`` (a :class:`~geoagent.crawl.fetcher.ThumbnailHostNotPublic`) in its host's run and mark it
        with its place there (``streak``, from 1) and the run's id (``streak_id``); returns ``err``. ``http``: the
        process's :class:`~geoagent.runtime.http.HttpClient` (None: runs never restart), whose per-host
        ``last_ok_at`` says whether the host answered since the run's last failure (a new run starts then). A
        failure without a host name is not counted (``streak`` stays 0: an ordinary failure)."""
        if not getattr(err, "host", None):
            return err
        name = host_name(str(err.host))
        run = self._runs.get(name)
        answered = _answered_at(http, name)
        if run is None or (answered is not None and answered >= run.last_at):
            run = self._runs[name] = _Run(0, new_streak_id(), 0.0)
        run.n += 1
        run.last_at = time.time()
        err.streak, err.streak_id = run.n, run.streak_id
        return err

    def knows(self, host: str) -> bool:
        """Whether a thumbnail host named ``host`` (a host key or a name) resolved to no public address in this
        process."""
        return host_name(host) in self._runs

    def hint(self, host: str) -> str | None:
        """What to check when the stage stopped for ``host`` (the runner's stop line, ``check <this> / the network``,
        through :meth:`geoagent.crawl.stages._CrawlStage.unreachable_hint`), or None for a host never refused here."""
        if not self.knows(host):
            return None
        return (f"what this network's DNS answers for {host_name(host)}, a Mapillary thumbnail host (thumbnails "
                "connect to public addresses only: split-horizon DNS or a resolver rewriting answers sends it to a "
                "private one; use a resolver that answers publicly, or crawl from another network)")


def _answered_at(http: Any, name: str) -> float | None:
    """When a host named ``name`` last answered a request of ``http`` (the latest ``last_ok_at`` of its host keys,
    any port; Unix time, s), or None."""
    stats = http.stats() if http is not None and callable(getattr(http, "stats", None)) else {}
    times = [s.last_ok_at for k, s in stats.items() if host_name(k) == name and s.last_ok_at is not None]
    return max(times) if times else None
