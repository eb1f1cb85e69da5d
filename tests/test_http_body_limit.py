"""HostPolicy.max_body_bytes: a response body over the limit is never held in memory, and fails the attempt.

Against the local echo server's ``/bytes/{n}`` route (with and without Content-Length). Free APIs retry it
like an invalid body and end in RetriesExhausted ("body too large"); a paid endpoint, which may have
billed the call, raises OutcomeUnknown at once (one request, counted as possibly billed).
"""

from __future__ import annotations

import asyncio

import pytest

from geoagent.runtime.http import HostPolicy, HttpClient, OutcomeUnknown, RetriesExhausted, host_key
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.faults import FAULTS_KEY
from geoagent.sandbox.server import serve

LIMIT = 100_000
FREE = HostPolicy(rate=1000, max_attempts=2, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0, max_body_bytes=LIMIT)
PAID = HostPolicy(rate=1000, max_attempts=3, backoff_base_s=0.001, backoff_max_s=0.01, timeout_s=5.0,
                  max_body_bytes=LIMIT, retry_unknown_outcome=False)


def _get(path: str, policy: HostPolicy):
    async def go():
        app = make_app()
        async with serve(app) as base, HttpClient(default_policy=policy) as http:
            try:
                result = await http.request("GET", base + path)
            except Exception as exc:  # noqa: BLE001 - the test inspects it
                result = exc
            return result, len(app[FAULTS_KEY].log), http.stats()[host_key(base)]

    return asyncio.run(go())


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_body_at_the_limit_is_read_whole(chunked):
    resp, seen, _ = _get(f"/bytes/{LIMIT}?chunked={chunked}", FREE)
    assert resp.status == 200 and resp.body == b"x" * LIMIT and seen == 1


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_body_over_the_limit_fails_free_api_after_its_retries(chunked):
    err, seen, stats = _get(f"/bytes/{5 * LIMIT}?chunked={chunked}", FREE)
    assert isinstance(err, RetriesExhausted) and "body too large" in str(err)
    assert seen == FREE.max_attempts and stats.errors == {"body too large": FREE.max_attempts}


@pytest.mark.parametrize("chunked", ["0", "1"])
def test_body_over_the_limit_on_a_paid_endpoint_is_outcome_unknown_sent_once(chunked):
    err, seen, stats = _get(f"/bytes/{LIMIT + 1}?chunked={chunked}", PAID)
    assert isinstance(err, OutcomeUnknown) and "too large" in str(err)
    assert err.possibly_billed == 1 and seen == 1 and stats.errors == {"body too large": 1}


def test_hosts_section_sets_the_body_limit(tmp_path):
    from geoagent.config import config_from_dict, host_policies

    cfg = config_from_dict({
        "campaign": {"name": "c", "kind": "generic"},
        "budget": {"cap_usd": 1.0},
        "hosts": {"api.example.org": {"rate": 2, "max_body_bytes": 4096}, "other.example.org": {"rate": 2}},
    })
    pol = host_policies(cfg)
    assert pol["api.example.org"].max_body_bytes == 4096
    assert pol["other.example.org"].max_body_bytes == HostPolicy().max_body_bytes == 64 * 1024 * 1024
