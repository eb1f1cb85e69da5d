"""Adversarial review (session 13): pageviews answers whose ``items`` no real answer holds. A day listed twice was
counted twice and a day outside the range asked for was counted too (the total, which ranks an article on the
referenceability ladder, grew silently); negative views were subtracted and a JSON ``true`` counted as one view.
Now each day counts once, days outside ``start``..``end`` are left out, and a ``views`` value that is not a
non-negative integer is the unexpected body it is (:class:`PageviewsError`). Real client, the pageviews fake
appending the hostile items."""

from __future__ import annotations

import asyncio

import pytest

from geoagent.clients.pageviews import PageviewsClient, PageviewsError
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import pageviews as fake
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=3, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)


def _item(day: str, views: object) -> dict[str, object]:
    return {"project": "en.wikipedia", "article": "Casa_Batllo", "granularity": "daily", "timestamp": day + "00",
            "access": "all-access", "agent": "user", "views": views}


def _total(extra):
    app = fake.make_app({"Casa_Batllo": 10}, zero_every=0)
    app[fake.PAGEVIEWS_STATE].extra_items = {"Casa_Batllo": extra}

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            return await PageviewsClient(http, base, UA).total("Casa Batllo", "20240101", "20240110")

    return asyncio.run(go())


def test_a_day_listed_twice_or_outside_the_range_is_not_counted():
    t = _total([_item("20240103", 10), _item("20240103", 10), _item("20240301", 500)])
    assert (t.views, t.days_with_data) == (100, 10)


@pytest.mark.parametrize("views", [-500, True, 2.5, "12"])
def test_views_that_are_no_count_are_an_unexpected_body(views):
    with pytest.raises(PageviewsError):
        _total([_item("20240105", views)])
