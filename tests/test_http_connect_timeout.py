"""The connect timeout (``HostPolicy.connect_timeout_s``, ``[[models]]`` / ``[hosts."name"]`` /
``[crawl.policies.<api>]`` ``connect_timeout_s``): a host that never answers the connection fails an attempt
after the connect timeout, not after the attempt's whole ``timeout_s``; nothing was sent, so the request is
provably unsent (``never_sent``, ``possibly_billed`` 0) and counts toward the host's unreachable streak.

The unresponsive host is a real listening socket whose accept queue is full (``listen(0)`` plus one
connection that is never accepted): further connections hang in SYN, as with a black-holed address.
"""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from geoagent.config import ConfigError, config_from_dict, host_policies
from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings
from geoagent.runtime.http import DEFAULT_CONNECT_TIMEOUT_S, HostPolicy, HttpClient, RetriesExhausted, never_sent
from geoagent.runtime.worker import unreachable_cause
from test_billing_never_sent import _received_bytes


def _full_socket() -> tuple[socket.socket, socket.socket, str]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(0)  # an accept queue of one: the filler takes it, later connects hang in SYN
    filler = socket.create_connection(srv.getsockname(), timeout=5)
    return srv, filler, f"127.0.0.1:{srv.getsockname()[1]}"


def test_an_unanswered_connect_fails_at_the_connect_timeout_unsent():
    srv, filler, host = _full_socket()
    # a paid endpoint's policy (no retry of a possibly billed attempt); 2 attempts of at most 0.5 s to connect
    pol = HostPolicy(rate=100.0, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=30.0,
                     connect_timeout_s=0.5, retry_unknown_outcome=False)

    async def main():
        async with HttpClient(policies={host: pol}) as http:
            t0 = time.monotonic()
            with pytest.raises(RetriesExhausted) as ei:
                await http.request("POST", f"http://{host}/v1/chat/completions", json={"model": "m"})
            return ei.value, time.monotonic() - t0, http.stats()[host], http.unreachable_streak(host)

    try:
        exc, took, stats, streak = asyncio.run(asyncio.wait_for(main(), 60))
        received = _received_bytes(srv)
    finally:
        filler.close()
        srv.close()
    assert 2 * 0.5 - 0.05 <= took < 10.0, took  # two connect timeouts, far from one 30 s attempt
    assert exc.attempts == 2 and stats.requests == 2 and stats.errors == {"timeout": 2}
    assert exc.last.startswith("timeout") and unreachable_cause(exc.last) == "connect timeout"
    assert exc.unreachable and exc.host == host and streak[0] == 1  # counts toward the unreachable stop
    assert exc.possibly_billed == 0 and never_sent(exc)  # billing: never sent, the reservation is released
    assert received == b""  # not one byte reached the host


def test_the_connect_timeout_never_exceeds_the_attempts_timeout():
    assert HostPolicy().connect_timeout_s == DEFAULT_CONNECT_TIMEOUT_S == 10.0
    assert HostPolicy(timeout_s=2.0).connect_timeout_applied_s == 2.0  # a shorter total bounds it
    assert HostPolicy(timeout_s=30.0, connect_timeout_s=3.0).connect_timeout_applied_s == 3.0
    for bad in (0, -1.0, "5", True):
        with pytest.raises(ValueError, match="connect_timeout_s"):
            HostPolicy(connect_timeout_s=bad)


def _cfg(model_extra: dict, host_extra: dict) -> dict:
    return {
        "campaign": {"name": "ct"}, "budget": {"cap_usd": 1.0},
        "models": [{"name": "m", "provider": "openai", "model": "gpt", "base_url": "http://llm.example:81/v1",
                    "price_input_usd_per_mtok": 1.0, "timeout_s": 30.0, **model_extra}],
        "hosts": {"api.example": {"rate": 2.0, "timeout_s": 20.0, **host_extra}},
    }


def test_config_tables_set_and_validate_the_connect_timeout():
    pols = host_policies(config_from_dict(_cfg({"connect_timeout_s": 4.0}, {"connect_timeout_s": 2.5})))
    assert pols["llm.example:81"].connect_timeout_s == 4.0 and pols["api.example"].connect_timeout_s == 2.5
    unset = host_policies(config_from_dict(_cfg({}, {})))
    assert unset["llm.example:81"].connect_timeout_s == unset["api.example"].connect_timeout_s == 10.0
    with pytest.raises(ConfigError, match=r"models\[0\]: expected connect_timeout_s <= timeout_s \(30 s"):
        config_from_dict(_cfg({"connect_timeout_s": 31.0}, {}))
    with pytest.raises(ConfigError, match=r'hosts\."api\.example"(\.connect_timeout_s)?: expected'):
        config_from_dict(_cfg({}, {"connect_timeout_s": 21.0}))
    with pytest.raises(ConfigError, match=r"models\[0\]\.connect_timeout_s: expected a number > 0"):
        config_from_dict(_cfg({"connect_timeout_s": 0.0}, {}))


def test_crawl_policies_set_and_validate_the_connect_timeout():
    s = load_crawl_settings({"contact": "me@example.org", "policies": {"wdqs": {"connect_timeout_s": 5}}})
    assert s.host_policy("wdqs").connect_timeout_s == 5 and s.host_policy("overpass").connect_timeout_s == 10.0
    # above the API's default timeout_s (Overpass: 60 s), or above the override's
    with pytest.raises(CrawlConfigError, match=r"\[crawl\.policies\.overpass\] connect_timeout_s = 61 must not exceed"):
        load_crawl_settings({"contact": "me@example.org", "policies": {"overpass": {"connect_timeout_s": 61}}})
    with pytest.raises(CrawlConfigError, match=r"timeout_s = 4 "):
        load_crawl_settings({"contact": "me@example.org",
                             "policies": {"wdqs": {"connect_timeout_s": 5, "timeout_s": 4}}})
    with pytest.raises(CrawlConfigError, match=r"connect_timeout_s: expected a number of seconds > 0"):
        load_crawl_settings({"contact": "me@example.org", "policies": {"mapillary": {"connect_timeout_s": 0}}})
