"""A server asking for a huge ``Retry-After`` no longer pauses its host (and the run) for up to a day.

Before (session 13 check): a ``Retry-After: 86400`` (or an HTTP-date a day ahead) on a 429 paused the model's key for
86,400 s (:data:`geoagent.runtime.http.RETRY_AFTER_MAX_S`, the only bound) and the model caller put the task back
for 86,400 s: the run sat waiting a day, saying only one log line. Now each host has a cap, ``max_retry_after_s``
(:attr:`geoagent.runtime.http.HostPolicy.max_retry_after_s`, ``[hosts."name"] max_retry_after_s``; the default,
:data:`geoagent.runtime.http.DEFAULT_MAX_RETRY_AFTER_S`, is the day-long bound, so a long pause is waited out as asked
unless a lower cap is configured): a longer ask than the cap pauses the key for the cap only, prints
a warning that says what was asked and what happens, and the task is retried after the cap (an attempt counted) and
dead-lettered with that reason once its attempts are used up. Local aiohttp fakes (the echo fake's status route,
the OpenAI fake's fault injection, which sends the header as delta-seconds or as an HTTP-date).
"""

from __future__ import annotations

import asyncio
import email.utils
import logging
import time

import pytest

from geoagent.runtime.http import (DEFAULT_MAX_RETRY_AFTER_S, HostPolicy, HttpClient, RetriesExhausted, host_key,
                                   limit_key)
from geoagent.sandbox import echo
from geoagent.sandbox.server import serve

DAY_S = 86_400.0


def _policy(**kw) -> HostPolicy:
    return HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.005,
                      backoff_max_s=0.02, timeout_s=5.0, **kw)


async def _ask(retry_after: str, pol: HostPolicy, status: int = 429) -> tuple[RetriesExhausted, float, str, float]:
    """One request to the echo fake answered ``status`` with ``Retry-After: retry_after`` on a model key."""
    async with serve(echo.make_app()) as base:
        key = limit_key(host_key(base), "gpt-x")
        async with HttpClient(default_policy=pol, model_policies={key: pol}) as http:
            t0 = time.monotonic()
            with pytest.raises(RetriesExhausted) as ei:
                await http.request("GET", base + f"/status/{status}", params={"retry_after": retry_after},
                                   limit=key if status == 429 else None)
            paused = key if status == 429 else host_key(base)
            return ei.value, http.paused_until(paused) - time.monotonic(), key, time.monotonic() - t0


def test_the_default_cap_is_documented_and_configurable():
    from geoagent.config import HostSection

    # the default waits a long pause out as asked (a quota reset keeps every queued task alive); a cap is opt-in
    assert DEFAULT_MAX_RETRY_AFTER_S == DAY_S == HostPolicy().max_retry_after_s == HostSection(rate=1).max_retry_after_s
    assert HostSection(rate=1, max_retry_after_s=900).max_retry_after_s == 900.0
    with pytest.raises(ValueError):
        HostSection(rate=1, max_retry_after_s=DAY_S + 1)
    with pytest.raises(ValueError):
        HostPolicy(max_retry_after_s=0)


def test_a_day_long_retry_after_pauses_the_key_for_the_cap_with_a_warning(caplog):
    caplog.set_level(logging.WARNING, logger="geoagent.runtime.http")
    err, left, key, took = asyncio.run(_ask("86400", _policy(max_retry_after_s=900.0)))
    # before: retry_after_s 86400 and the key paused a day, whatever the host's configured cap
    assert err.retry_after_s == 900.0 and err.retry_after_asked_s == DAY_S and err.paused
    assert 900.0 - 5 < left <= 900.0, left
    assert err.attempts == 1 and took < 5  # given up at once, not retried nor waited out in the call
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert key in line and "asked to wait 86400 s" in line and "max_retry_after_s (900 s)" in line, line
    assert "pausing" in line and "900 s instead" in line and "retried after the pause" in line, line
    assert "dead-lettered with this reason" in line, line


def test_an_http_date_a_day_ahead_on_a_503_pauses_the_host_for_its_own_cap():
    ahead = email.utils.formatdate(time.time() + DAY_S, usegmt=True)
    err, left, _, _ = asyncio.run(_ask(ahead, _policy(max_retry_after_s=30.0), status=503))
    assert err.retry_after_s == 30.0 and DAY_S - 5 < err.retry_after_asked_s <= DAY_S + 1, err.retry_after_asked_s
    assert 25 < left <= 30.0


def test_a_retry_after_within_the_cap_is_honoured_as_asked(caplog):
    caplog.set_level(logging.WARNING, logger="geoagent.runtime.http")
    err, left, _, _ = asyncio.run(_ask("600", _policy(max_retry_after_s=900.0)))
    assert err.retry_after_s == 600.0 and err.retry_after_asked_s is None and 595 < left <= 600
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# ----------------------------------------------------------------------------------- a campaign against the fake
def _run(tmp_path, monkeypatch, faults, *, max_attempts: int, heal: bool = False):
    """The 1-request generic campaign of tests/test_cost_dead_letter_deliveries.py against the OpenAI fake with
    ``faults`` (tests/test_s12_pauses.py ``_run_dead``); its host's ``[hosts]`` entry caps Retry-After at 1 s.
    ``heal``: faults off once one call was answered. Returns (outcome, seconds the run took)."""
    from test_s12_pauses import _run_dead

    def heal_faults(f) -> None:
        f.rate = 0.0

    t0 = time.monotonic()
    out = _run_dead(tmp_path, monkeypatch, faults, max_attempts=max_attempts, switch=heal_faults if heal else None,
                    host="rate = 1000\nmax_attempts = 3\nmax_retry_after_s = 1\n",
                    limit_s=60)  # before: the task waited 86,400 s in the queue
    return out, time.monotonic() - t0


@pytest.mark.parametrize("as_date", [False, True], ids=["delta-seconds", "http-date"])
def test_a_task_asked_to_wait_a_day_is_dead_lettered_with_the_reason(tmp_path, monkeypatch, caplog, as_date):
    from geoagent.sandbox.faults import FaultConfig

    caplog.set_level(logging.WARNING)
    faults = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=DAY_S, retry_after_date=as_date)
    out, took = _run(tmp_path, monkeypatch, faults, max_attempts=2)
    (dead,) = out.dead["requests"]
    assert dead.attempts == 2 and took < 30, (dead.attempts, took)
    r = dead.reason
    assert r.startswith("CallFailed: retries exhausted after 2 deliveries ([queue] max_attempts) (the server asked "
                        "Retry-After 864"), r
    assert "more than the host's max_retry_after_s 1 s: retried after the cap, no delivery left)" in r, r
    assert "last failure (1 HTTP attempt in the last delivery): http 429" in r, r
    lines = [rec.getMessage() for rec in caplog.records if rec.name == "geoagent.runtime.http"]
    assert lines and all("more than the host's max_retry_after_s (1 s): pausing" in ln for ln in lines), lines


def test_a_task_asked_to_wait_a_day_is_retried_after_the_cap_and_completes(tmp_path, monkeypatch):
    from geoagent.sandbox.faults import FaultConfig

    faults = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=DAY_S)
    out, took = _run(tmp_path, monkeypatch, faults, max_attempts=3, heal=True)
    assert out.counts["requests"].dead == 0 and out.counts["requests"].done == 1, out.summary()
    assert 0.9 < took < 30, took  # waited the 1-s cap, not the day asked


def test_the_wikidata_clients_own_refusal_wait_is_capped_by_the_hosts_max_retry_after_s():
    """The Wikidata client reads a maxlag / ratelimited refusal's Retry-After itself and sleeps it: it used the
    1-day bound only, so ``Retry-After: 86400`` slept a day; now the host's policy cap applies there too."""
    from geoagent.clients.wikidata import WikidataClient

    async def go() -> tuple[float, float]:
        async with HttpClient(default_policy=_policy(max_retry_after_s=30.0)) as http:
            c = WikidataClient(http, user_agent="geoagent-test (mailto:x@example.org)", policy=None)
            return (c._wait_after("maxlag", {"lag": 2.0}, {"Retry-After": "86400"}, 1),
                    c._wait_after("ratelimited", {}, {"Retry-After": "20"}, 1))

    assert asyncio.run(go()) == (30.0, 20.0)
