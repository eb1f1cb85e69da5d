"""Secrets and untrusted input (session 37, security37).

Before:

* #1 a task key built from untrusted text (a Wikidata label or a release's ``cand`` holding terminal escape codes)
  was printed raw by ``dead``, ``status`` and the run's summary: ``requests/...|Indigo Monument^[]0;PWNED^G^[[2J``
  retitled the terminal and cleared it, and a tab in it added a column to ``dead``'s tab-separated listing (the
  reason beside it was already escaped: break28 #6);
* #2 a base64-style key repeated percent-encoded in an answer (``...%2B...%2F...``) was stored and exported
  unmasked;
* #3 a Mapillary thumbnail URL naming a loopback, private or link-local address was fetched, and up to 80
  characters of its error page went into the fetch stage's rejection records;
* #4 an unreadable ``.env`` ended in ``[Errno 13] Permission denied: '.env' (check [paths] in the config ...)``;
* #5 ``COM0`` and ``LPT0`` were safe file names.
"""

from __future__ import annotations

from urllib.parse import quote, quote_plus

import anyio
import pytest
from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table
from aiohttp import web

from geoagent.cli import main
from geoagent.paths import safe_name
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.secrets import read_dotenv, redact
from geoagent.sandbox.server import serve

HOSTILE_KEY = "100010003227|main|Indigo Monument\x1b]0;PWNED\x07\x1b[2J\tGarden|sim"


def test_task_keys_with_control_characters_are_printed_inert(tmp_path, capsys):
    cfg = generic_campaign(tmp_path, name="sec37", n=2, models=model_table("sim"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    q = SQLiteQueue.open(tmp_path / "queues", "sec37", "requests")
    try:  # a task whose key holds a label's escape codes, dead-lettered as a run would
        q.put_many_sync([(HOSTILE_KEY, {"x": 1})])
        (task,) = q.lease_sync(1)
        q.dead_letter_sync(task, "PermanentFailure: HTTP 400")
    finally:
        q.close_sync()
    capsys.readouterr()
    assert main(["dead", str(cfg)]) == 0
    listed = capsys.readouterr().out
    assert main(["status", str(cfg)]) in (0, 1)
    shown = capsys.readouterr().out
    for text in (listed, shown):
        assert "\x1b" not in text and "\x07" not in text, text
        assert "Indigo Monument\\x1b]0;PWNED\\x07\\x1b[2J\\tGarden" in text
    (line,) = [ln for ln in listed.splitlines() if "Indigo" in ln]
    assert len(line.split("\t")) == 4  # edge, key, deliveries, reason: the key's tab added no column


def test_percent_encoded_keys_are_masked():
    # a base64-style gateway key: characters a URL must percent-encode 2-3 apart (drawn at run time: no key-shaped
    # text in the repository; it never was a real key)
    letters = made_up_key("", 21, seed="security37-pct")
    key = "".join(letters[i:i + 3] + "+/"[i // 3 % 2] for i in range(0, 21, 3)) + "="
    text = f"debug {quote(key, safe='')} / {quote(key, safe='').lower()} / {quote_plus(key)} / {key.lower()}"
    assert redact(text, [key]) == "debug *** / *** / *** / ***"


def _graph_app(thumb_url: str) -> web.Application:
    """A Graph API stand-in whose every image names ``thumb_url`` as its thumbnail."""

    async def image(request: web.Request) -> web.Response:
        return web.json_response({"id": request.match_info["iid"], "thumb_1024_url": thumb_url})

    app = web.Application()
    app.router.add_get("/{iid}", image)
    return app


@pytest.mark.parametrize("thumb", ["http://169.254.169.254/latest/meta-data", "http://10.1.2.3/admin",
                                   "http://127.0.0.1:9/snapshot", "http://[::1]:9/x", "http://intranet/x"])
def test_a_public_graph_api_naming_a_local_thumbnail_host_is_not_fetched(thumb):
    from geoagent.clients.mapillary import MapillaryClient, ThumbnailUnavailable
    from geoagent.runtime.http import HostPolicy, HttpClient

    app = _graph_app(thumb)

    async def go():
        async with serve(app) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0, max_attempts=1)) as http:
            # the Graph API seen at a public name: the local test server stands in for it
            client = MapillaryClient(http, "https://graph.mapillary.com", "MLY|made-up-value-for-the-test",
                                     "geoagent-test/0.1 (mailto:t@example.org)")
            client.base_url = base  # sent to the stand-in; judged as the public API it was made for
            with pytest.raises(ThumbnailUnavailable, match="local or private address") as e:
                await client.download_thumbnail("123")
            return e.value

    err = anyio.run(go)
    assert err.kind == "no_url"


def test_the_sandbox_fakes_local_thumbnails_still_load(tmp_path):
    """A local Graph API (the sandbox's fakes) hands out local thumbnail URLs of its own: those are fetched."""
    from geoagent.clients.mapillary import MapillaryClient, _local_thumb_host

    assert MapillaryClient(None, "http://127.0.0.1:8124", "MLY|x", "ua").graph_is_local
    assert not MapillaryClient(None, "https://graph.mapillary.com", "MLY|x", "ua").graph_is_local
    assert not _local_thumb_host("http://127.0.0.1:8123/thumb/1.jpg", True)
    assert _local_thumb_host("http://127.0.0.1:8123/thumb/1.jpg", False)
    assert not _local_thumb_host("https://scontent-ams2-1.xx.fbcdn.net/m1/v/t6/x.jpg", False)


def test_an_unreadable_env_file_is_named_as_such(tmp_path):
    env = tmp_path / ".env"
    env.mkdir()  # is_file() is false for a folder: a file that cannot be read instead
    env.rmdir()
    env.write_text("K=v\n", encoding="utf-8")
    env.chmod(0)
    try:
        try:
            env.read_bytes()
        except PermissionError:
            pass
        else:
            pytest.skip("running as a user that reads a mode-000 file (root)")
        with pytest.raises(ValueError, match=r"\.env: cannot read the \.env file .*GEOAGENT_DOTENV"):
            read_dotenv(env)
    finally:
        env.chmod(0o600)


@pytest.mark.parametrize("name", ["COM0", "lpt0.txt"])
def test_com0_and_lpt0_are_no_safe_names(name):
    with pytest.raises(ValueError, match="Windows"):
        safe_name(name)
