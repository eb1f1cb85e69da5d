"""A crawl whose Mapillary token is refused (HTTP 401, Graph error 190: the sandbox fake refuses a token beginning
``MLY|refused``, one of the right form, which the crawl does not refuse itself: a token of another form is refused
before any request, tests/test_crawl_mapillary_token_format.py) stops at the first refusal like a model's refused
API key: exit 5 (the code ``run.py --help`` documents for "authentication failed"), a line naming the variable MAPILLARY_TOKEN (never its value), nothing
dead-lettered, the cities left queued untouched, and no city screened on Overpass again and again
(geoagent.crawl.stages.MapillaryTokenRefused). A re-run with a good token then completes the screening."""

from __future__ import annotations

import re
from pathlib import Path

from geoagent.cli import EXIT_CODES_EPILOG, main
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.sandbox.launch import request_counts

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"


def _documented_auth_code() -> int:
    m = re.search(r"^\s*(\d+)\s+authentication failed", EXIT_CODES_EPILOG, re.M)
    assert m, EXIT_CODES_EPILOG
    return int(m.group(1))


def test_a_refused_mapillary_token_stops_the_crawl_with_exit_5_and_keeps_the_cities(isolated_roots, monkeypatch,
                                                                                   capsys):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|refused|garbage-token-value")
    before = dict(request_counts())
    code = main(["crawl", str(CONFIG), "--no-live"])
    out, err = capsys.readouterr()
    text = out + err
    assert code == _documented_auth_code() == 5, text
    assert "authentication failed" in text
    assert "the Mapillary API refused the access token (HTTP 401, Mapillary error 190): check MAPILLARY_TOKEN" in text
    assert "garbage-token-value" not in text
    # each city was screened on Overpass at most once: the first refusal stopped the screener (2 in flight)
    calls = {k: v - before.get(k, 0) for k, v in request_counts().items()}
    q = SQLiteQueue.open(isolated_roots / "queues", CAMPAIGN, "cities")
    try:
        cities = q.counts_sync()
        dead = q.dead_letters_sync(10)
    finally:
        q.close_sync()
    n_cities = cities.ready + cities.done
    assert 0 < calls.get("overpass", 0) <= 2 * 2  # /status + /interpreter per screening, at most 2 screenings
    assert calls.get("mapillary", 0) <= 2
    assert (cities.leased, cities.dead, cities.done) == (0, 0, 0) and dead == [] and cities.ready == n_cities
    assert f"{n_cities} cities left queued" in text
    assert "not done: the work above stays queued untouched" in text and "not dispatched" not in text
    # the right token: the same command resumes and screens every city
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    main(["crawl", str(CONFIG), "--no-live"])
    capsys.readouterr()
    q = SQLiteQueue.open(isolated_roots / "queues", CAMPAIGN, "cities")
    try:
        assert q.counts_sync().done == n_cities
    finally:
        q.close_sync()


def test_only_the_api_refusing_the_token_counts():
    """A thumbnail CDN's 403 is one image's (skipped), a 401 from another host is not Mapillary's: neither stops."""
    import anyio

    from geoagent.clients.mapillary import MapillaryClient, MapillaryError, ThumbnailUnavailable
    from geoagent.runtime.http import HttpClient, PermanentHTTPError

    async def main_():
        async with HttpClient() as http:
            m = MapillaryClient(http, "https://graph.mapillary.com", "MLY|x", "ua")
            return [m.token_refused(e) for e in (
                MapillaryError("HTTP 401: Mapillary error 190: bad", code=190, status=401),
                MapillaryError("Mapillary error 190: in a 200", code=190),
                PermanentHTTPError(403, "https://graph.mapillary.com/123?fields=id", "{}"),
                ThumbnailUnavailable("thumbnail of 1 refused: HTTP 403", status=403),
                PermanentHTTPError(401, "https://example.org/x", "{}"),
                MapillaryError("HTTP 400: Mapillary error 100: bad field", code=100, status=400),
            )]

    assert anyio.run(main_) == ["HTTP 401, Mapillary error 190", "Mapillary error 190", "HTTP 403", None, None, None]
