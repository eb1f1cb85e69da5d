"""`status` error rates: a pageviews 404 ("no views in the range") is an answer, not an HTTP error.

The pageviews client declares 404 an expected status of its endpoint (``HttpClient.request(expected_status=)``),
so the HTTP layer returns it instead of raising and counts it under ``answers``, not ``errors``; the progress
record carries those counters and ``format_status`` computes the error rate from ``errors`` only.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict

import pytest

from geoagent.clients.pageviews import PageviewsClient
from geoagent.runtime.http import HostPolicy, HttpClient, PermanentHTTPError, host_key
from geoagent.sandbox import pageviews as fake
from geoagent.sandbox.server import serve
from geoagent.status import format_status

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05, timeout_s=5)


def _crawl_pageviews(titles_ok, titles_unknown, bad_range=False):
    async def go():
        app = fake.make_app({t: 5 for t in titles_ok}, zero_every=0)  # every day has views
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            pv = PageviewsClient(http, base, UA)
            totals = [await pv.total(t, "20240101", "20240110") for t in [*titles_ok, *titles_unknown]]
            if bad_range:  # end before start: a real 400, still an error
                with pytest.raises(PermanentHTTPError):
                    await pv.total(titles_ok[0], "20240110", "20240101")
            return host_key(base), totals, {h: asdict(st) for h, st in http.stats().items()}

    return asyncio.run(go())


def _status_text(http_stats):
    progress = {"finished": True, "elapsed_s": 1.0, "stages": [], "http": http_stats}
    return format_status({"campaign": "c", "queues": {}, "spend": None, "progress": progress, "dead": {}})


def test_pageviews_404_is_an_answer_not_an_error():
    host, totals, stats = _crawl_pageviews(["Known_A", "Known_B"], ["Unknown_1", "Unknown_2", "Unknown_3"])
    assert [t.views for t in totals] == [50, 50, 0, 0, 0]  # 10 days x 5 views; unknown articles read as 0
    st = stats[host]
    assert st["requests"] == 5 and st["retries"] == 0
    assert st["errors"] == {}
    assert st["answers"] == {"http 404": 3}
    assert st["answer_notes"] == {"http 404": "articles without views in the date range"}  # the client says why
    text = _status_text(stats)
    assert (f"http {host}: 5 requests, 0 retries, error rate 0.0%; 3 expected 404 answers "
            "(articles without views in the date range; not errors)") in text


def test_other_4xx_still_count_as_errors():
    host, _, stats = _crawl_pageviews(["Known_A"], ["Unknown_1"], bad_range=True)
    st = stats[host]
    assert st["errors"] == {"http 400": 1} and st["answers"] == {"http 404": 1}
    assert "error rate 33.3%" in _status_text(stats)  # 1 error in 3 requests


def test_expected_status_without_a_meaning_still_says_it_is_no_error():
    """A client that declares a normal answer as a plain set of statuses: counted, and ``status`` says the client
    declared it normal (an old progress record without ``answer_notes`` reads the same)."""

    async def go():
        async with serve(fake.make_app({}, zero_every=0)) as base, HttpClient(default_policy=FAST) as http:
            url = f"{base}/metrics/pageviews/per-article/en.wikipedia/all-access/user/Nope/daily/20240101/20240102"
            r = await http.request("GET", url, headers={"User-Agent": UA}, expected_status={404})
            return r.status, host_key(base), {h: asdict(st) for h, st in http.stats().items()}

    status, host, stats = asyncio.run(go())
    assert status == 404 and stats[host]["answers"] == {"http 404": 1} and stats[host]["answer_notes"] == {}
    line = next(ln for ln in _status_text(stats).splitlines() if f"http {host}:" in ln)
    assert line.endswith("; 1 expected 404 answer (declared a normal answer of this endpoint by its client; not errors)")


def test_expected_status_cannot_hide_retryable_statuses():
    async def go():
        async with HttpClient(default_policy=FAST) as http:
            for bad in (429, 503, 200):
                with pytest.raises(ValueError, match="expected_status"):
                    await http.request("GET", "http://127.0.0.1:9/x", expected_status=(bad,))

    asyncio.run(go())
