"""Leftovers of session 11 (helper ``leftovers``), each through the local fakes (:mod:`geoagent.sandbox`):

1. A finite but absurd ``Retry-After`` (``1000000000000`` s) paused the host/model key that long: the run waited
   without a word and no process of the campaign called that model again. The pause is now bounded by
   :data:`geoagent.runtime.http.RETRY_AFTER_MAX_S` (1 day) with a warning naming the host and the value asked vs
   applied; an hour's quota reset (``Retry-After: 3600``) is still honoured as asked.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from geoagent.runtime import http as http_mod
from geoagent.runtime.http import HostPolicy, HttpClient, RetriesExhausted, host_key, limit_key
from geoagent.sandbox import echo
from geoagent.sandbox.server import serve

# --- 1. a Retry-After beyond any sensible pause --------------------------------------------------------------
RETRY_AFTER_MAX_S = 86_400.0  # documented bound (geoagent.runtime.http.RETRY_AFTER_MAX_S, checked below)
P = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
               timeout_s=5.0)


async def _pause_after(status: int, headers: dict[str, str], *, model: str | None = None
                       ) -> tuple[float | None, float, str]:
    async with serve(echo.make_app()) as base:
        host = host_key(base)
        key = limit_key(host, model) if model else host
        pols = {key: P} if model else {}
        async with HttpClient(default_policy=P, model_policies=pols) as http:
            with pytest.raises(RetriesExhausted) as ei:
                await http.request("GET", base + f"/status/{status}", params={"retry_after": headers["Retry-After"]},
                                   **({"limit": key} if model else {}))
            return ei.value.retry_after_s, http.paused_until(key) - time.monotonic(), key


def test_a_huge_finite_retry_after_is_bounded_with_a_warning_naming_the_key(caplog):
    """Before: ``paused_until`` of the model key was 1e12 s ahead and ``retry_after_s`` 1e12; no warning."""
    caplog.set_level(logging.WARNING, logger="geoagent.runtime.http")
    ra, left, key = asyncio.run(_pause_after(429, {"Retry-After": "1000000000000"}, model="gpt-x"))
    assert ra == RETRY_AFTER_MAX_S, ra
    assert RETRY_AFTER_MAX_S - 5 < left <= RETRY_AFTER_MAX_S, left
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert key in warned[0] and "1000000000000 s" in warned[0] and "86400 s" in warned[0], warned[0]
    assert http_mod.RETRY_AFTER_MAX_S == RETRY_AFTER_MAX_S


def test_a_503_retry_after_beyond_the_bound_pauses_the_host_a_day():
    ra, left, _ = asyncio.run(_pause_after(503, {"Retry-After": "99999999"}))
    assert ra == RETRY_AFTER_MAX_S and RETRY_AFTER_MAX_S - 5 < left <= RETRY_AFTER_MAX_S


def test_an_hours_quota_reset_is_honoured_as_asked(caplog):
    caplog.set_level(logging.WARNING, logger="geoagent.runtime.http")
    ra, left, _ = asyncio.run(_pause_after(429, {"Retry-After": "3600"}, model="gpt-x"))
    assert ra == 3600.0 and 3595 < left <= 3600, (ra, left)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
