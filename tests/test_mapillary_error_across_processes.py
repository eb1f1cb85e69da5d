"""A Mapillary error raised by the real client from a real answer keeps its Graph ``code``, ``subcode`` and HTTP
``status`` when it crosses a process boundary (a spawned process pool unpickles it and sends it back pickled).

Checked in session 11 on a report that MapillaryError lost these attributes when pickled: it did not (Python's
``BaseException.__reduce__`` rebuilds ``cls(*args)``, which MapillaryError's keyword-only attributes allow, then
restores ``__dict__``), before or after; this guards it, through the fake, across a real process."""

from __future__ import annotations

import asyncio
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from geoagent.clients.mapillary import MapillaryClient, MapillaryError, ThumbnailUnavailable
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox import mapillary as fake_mly
from geoagent.sandbox.server import serve

UA = "geoagent-test/0.1 (contact: mailto:test@example.org)"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.05,
                  timeout_s=5)
TOKEN = "MLY|" + "123" + "|" + "pickletesttoken0123456789"


def test_a_token_error_from_the_fake_keeps_code_subcode_and_status_in_another_process():
    state = fake_mly.MapillaryFakeState(search_error=fake_mly.TOKEN_EXPIRED)
    app = fake_mly.make_app(state=state)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            client = MapillaryClient(http, base, TOKEN, UA, limit=10)
            with pytest.raises(MapillaryError) as ei:
                await client.search_images((4.89, 52.37, 4.90, 52.38))
            return ei.value

    err = asyncio.run(go())
    assert (err.code, err.subcode, err.status) == (190, 463, 400)
    blob = pickle.dumps(err)
    assert TOKEN.encode() not in blob
    with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
        back = pool.submit(pickle.loads, blob).result(timeout=60)
        thumb = pool.submit(pickle.loads, pickle.dumps(ThumbnailUnavailable("gone", status=404, kind="gone"))).result(60)
    assert type(back) is MapillaryError and str(back) == str(err)
    assert (back.code, back.subcode, back.status) == (190, 463, 400)
    assert type(thumb) is ThumbnailUnavailable and (thumb.kind, thumb.status, thumb.code) == ("gone", 404, None)
