"""The HTTP layer's and the API clients' errors survive pickle (process pools and multiprocessing queues hand
exceptions across processes by pickling them), and the pickled form carries no secret of the request."""

from __future__ import annotations

import asyncio
import pickle

import pytest

from geoagent.clients.mapillary import MapillaryError, ThumbnailUnavailable
from geoagent.clients.overpass import OverpassQueryError, OverpassRuntimeError
from geoagent.clients.wdqs import WdqsAreaTooDense, WdqsThrottled
from geoagent.clients.wikidata import WikidataError
from geoagent.runtime.http import (
    AddressNotPublic,
    HostPolicy,
    HttpClient,
    OutcomeUnknown,
    PermanentHTTPError,
    RetriesExhausted,
    RetriesStopped,
)
from geoagent.runtime.stage import Abandoned
from geoagent.sandbox.echo import make_app
from geoagent.sandbox.server import serve

FAST = HostPolicy(rate=1000, concurrency=8, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.01, timeout_s=2.0)
#: built from parts so no key-shaped literal sits in the source
QUERY_SECRET = "tok" + "QUERYSECRET" + "1234567890"
HEADER_SECRET = "sk" + "-" + "HEADERSECRET" + "0987654321"


def _roundtrip(exc: BaseException) -> BaseException:
    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc) and back.args == exc.args
    assert vars(back) == vars(exc)
    return back


@pytest.mark.parametrize("exc", [
    PermanentHTTPError(404, "https://h/x", "excerpt", "the whole body"),
    RetriesExhausted("https://h/x", 3, "http 503", 2.5),
    RetriesStopped("https://h/x", 2, "http 503", possibly_billed=1),
    OutcomeUnknown("https://h/x", "reset after the request was sent"),
    OverpassRuntimeError("runtime error: Query timed out", 7),
    OverpassQueryError(["line 2: parse error"], "<html>"),
    WdqsAreaTooDense("Berlin", (13.0, 52.0, 13.5, 52.5), 4, "(last: timeout)"),
    WdqsThrottled(30.0, "(429)"),
    WikidataError("maxlag", "Waiting for a server", "https://www.wikidata.org/w/api.php"),
    MapillaryError("bad", code=190, status=400),
    ThumbnailUnavailable("gone", status=404),
    ThumbnailUnavailable("not fetched", kind="not_public", host="cdn.example.net"),
    AddressNotPublic("https://h/x", "h resolves to no public address (10.0.0.5): not connected", by_dns=True),
], ids=lambda e: type(e).__name__)
def test_error_pickle_roundtrip(exc):
    back = _roundtrip(exc)
    if isinstance(exc, RetriesStopped):
        assert isinstance(back, Abandoned)  # still released untouched by a stage runner on the far side


def test_retries_exhausted_keeps_streak_attributes():
    exc = RetriesExhausted("https://h/x", 3, "connection refused")
    exc.unreachable, exc.host, exc.streak, exc.streak_id = True, "h:1", 3, 9
    back = _roundtrip(exc)
    assert (back.unreachable, back.host, back.streak, back.streak_id) == (True, "h:1", 3, 9)


def test_permanent_error_from_a_real_answer_pickles_without_its_secrets():
    """A 401 whose URL carries a token, whose request carries an Authorization header and whose body echoes the
    token: the raised error, and its pickled bytes, hold neither secret."""

    async def go():
        app = make_app()
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            with pytest.raises(PermanentHTTPError) as ei:
                await http.request("GET", base + "/status/401",
                                   params={"access_token": QUERY_SECRET, "body": f"bad token {QUERY_SECRET} / {HEADER_SECRET}"},
                                   headers={"Authorization": f"Bearer {HEADER_SECRET}"})
            return ei.value

    err = asyncio.run(go())
    blob = pickle.dumps(err)
    for secret in (QUERY_SECRET, HEADER_SECRET):
        assert secret.encode() not in blob
        assert secret not in repr(vars(err))
    back = _roundtrip(err)
    assert back.status == 401 and "REDACTED" in back.url and "bad token" in back.body
