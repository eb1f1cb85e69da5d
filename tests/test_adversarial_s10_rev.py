"""Adversarial review of session 10's changes (branch s10-rev): each test failed on main before its fix."""

from __future__ import annotations

import asyncio

from aiohttp import web

from geoagent.runtime.http import (
    BODY_EXCERPT_CHARS,
    BODY_KEEP_CHARS,
    HostPolicy,
    HttpClient,
    PermanentHTTPError,
)
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

FAST = HostPolicy(rate=1000, concurrency=8, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.05, timeout_s=2.0)


def _echoing_app() -> web.Application:
    """A local API that answers 400 with the text it was posted (an API echoing the request, key included)."""

    async def refuse(request: web.Request) -> web.Response:
        return web.Response(status=400, text=await request.text(), content_type="text/plain")

    app = web.Application()
    app.router.add_post("/refuse", refuse)
    return app


def test_permanent_error_body_and_excerpt_never_keep_a_cut_key():
    """A key the answer echoes across the cut of the excerpt (300 characters) or of the kept body (16 384) left
    its opening characters in the error (the text was cut first, then scrubbed: the cut key no longer matched)."""
    key = made_up_key("sk-", 36, seed="rev-n32")
    headers = {"Authorization": f"Bearer {key}"}
    # the key starts 12 characters before each cut
    texts = ["a" * (BODY_EXCERPT_CHARS - 12) + key + " tail",
             "b" * (BODY_KEEP_CHARS - 12) + key + " tail"]

    async def go() -> list[PermanentHTTPError]:
        errors = []
        async with serve(_echoing_app()) as base, HttpClient(default_policy=FAST) as http:
            for text in texts:
                try:
                    await http.request("POST", base + "/refuse", data=text.encode(), headers=headers)
                except PermanentHTTPError as exc:
                    errors.append(exc)
        return errors

    errors = asyncio.run(go())
    assert len(errors) == 2
    opening = key[:12]  # what a cut key left: "sk-rev-01234"
    for exc in errors:
        assert opening not in exc.body_excerpt, exc.body_excerpt[-40:]
        assert opening not in exc.body, exc.body[-40:]
        assert len(exc.body_excerpt) <= BODY_EXCERPT_CHARS and len(exc.body) <= BODY_KEEP_CHARS


def test_pageviews_answers_kept_in_memory_are_bounded():
    """The per-client memory of pageviews answers grew with every article and window of the crawl (one client
    lives as long as the crawl's process): it keeps the most recent ``cache_size`` answers, an older one is
    asked again."""
    from geoagent.clients.pageviews import PageviewsClient
    from geoagent.sandbox import pageviews as fake

    ua = "geoagent-test/0.1 (contact: mailto:test@example.org)"
    titles = [f"Place {i}" for i in range(5)]
    app = fake.make_app({t.replace(" ", "_"): 1 for t in titles})

    async def go():
        async with serve(app) as base, HttpClient(default_policy=FAST) as http:
            c = PageviewsClient(http, base, ua, cache_size=3)
            for t in titles:
                await c.total(t, "20240101", "20240107")
            sent = len(app[fake.PAGEVIEWS_STATE].requests)
            again_recent = await c.total(titles[-1], "20240101", "20240107")  # kept: no request
            after_recent = len(app[fake.PAGEVIEWS_STATE].requests)
            again_old = await c.total(titles[0], "20240101", "20240107")  # dropped: asked again
            return c, sent, after_recent, len(app[fake.PAGEVIEWS_STATE].requests), again_recent, again_old

    c, sent, after_recent, after_old, recent, old = asyncio.run(go())
    assert sent == 5 and after_recent == 5 and after_old == 6
    assert recent.views == old.views > 0  # the same answer, from memory or asked again
    assert len(c._totals) <= 3


def test_a_manifest_without_geohint_n_boot_reads_as_the_default_not_a_change(tmp_path):
    """A GeoHint campaign run by the code before ``[geohint] n_boot`` (a192796: its manifest has no such key; the
    report used 200 resamples) and resumed with today's code printed "scoring setting changed since its last run
    (geohint.n_boot None -> 200)": the value did not change. A scoring key the earlier manifest lacks reads as the
    value that code used (200, runtime.manifest.SETTING_BEFORE_IT_EXISTED), not as today's default; a value other
    than that is a change."""
    import json

    from geoagent.campaigns import register_all_sections
    from geoagent.config import config_from_dict
    from geoagent.runtime.manifest import Manifest, config_changes

    register_all_sections()

    def doc(**geohint) -> dict:
        return {"campaign": {"name": "gh-old", "kind": "geohint", "contact": "ops@example.org"},
                "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
                "budget": {"cap_usd": 1.0},
                "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
                **({"geohint": geohint} if geohint else {})}

    Manifest(config_from_dict(doc(echo_rule="name"))).start_run()
    path = tmp_path / "state" / "gh-old" / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["config"]["geohint"]["n_boot"]  # as the earlier code wrote it
    path.write_text(json.dumps(manifest))
    # since session 22 the default is 1000: that campaign's report did change (200 -> 1000 resamples), and says so
    assert config_changes(config_from_dict(doc(echo_rule="name"))).scoring == {"geohint.n_boot": (200, 1000)}
    assert config_changes(config_from_dict(doc(echo_rule="name", n_boot=200))).scoring == {}
    assert config_changes(config_from_dict(doc(echo_rule="name", n_boot=50))).scoring == {"geohint.n_boot": (200, 50)}


def test_a_placeholder_answer_stored_by_the_earlier_code_is_not_paid_again(tmp_path, monkeypatch):
    """Upgrade from a192796 after a kill: a task sent with placeholder pixels whose answer the earlier code had
    stored (and paid) but not yet acknowledged is redelivered to today's code, whose request key for it has
    ``pixel_source`` in it: the stored answer (under the key without it) was not found and the call was paid a
    second time. Seen end to end: a geohint_sandbox campaign SIGKILLed after 30 s under a192796 (1561 answers
    stored, 1551 acknowledged), resumed with main: 4768 new model calls for 4758 unanswered requests, 6329
    settled calls for 6319 requests. The answer stored under the earlier key now answers the task."""
    from test_model_caller_flow import KEY_VALUE, KEY_VAR, SEED, Harness, make_config, payload

    from geoagent.config import estimate
    from geoagent.providers.base import request_key
    from geoagent.sandbox import llm_openai
    from geoagent.workers.model_caller import build_request

    monkeypatch.setenv(KEY_VAR, KEY_VALUE)

    async def main():
        app = llm_openai.make_app(seed=SEED, api_keys=[KEY_VALUE])
        async with serve(app) as base, HttpClient() as http:
            cfg = make_config(tmp_path, base, cap_usd=5.0)
            h = Harness(tmp_path, cfg, http)
            task = payload(7, image_id="img7", image_ref=None)  # no file: placeholder pixels
            _, req = build_request(cfg, task)
            assert req.pixel_source == "placeholder"
            old_key = request_key(req.provider, req.model, req.prompt, req.image_id, req.params)
            await h.inq.put("late", task)
            stats = await h.drive(visibility_timeout_s=0.3, ack=False)  # answered and stored, then killed
            assert stats["ok"] >= 1 and len([c for c in app["calls"] if c["status"] == 200]) == 1
            # the earlier code stored it under the key without the pixel source
            with h.state.db.transaction() as conn:
                conn.execute("UPDATE responses SET key = ? WHERE key = ?", (old_key, req.key()))
                conn.execute("UPDATE reservations SET request_key = ? WHERE request_key = ?", (old_key, req.key()))
            assert h.state.store.get(old_key) is not None and h.state.store.get(req.key()) is None
            await asyncio.sleep(0.4)
            stats = await h.drive()
            out = h.outputs[-1][1]
            billed = len([c for c in app["calls"] if c["status"] == 200])
            spent = h.state.ledger.summary().calls
            est = estimate(cfg, [task], store=h.state.store)
            await h.close()
            return stats, out, billed, spent, old_key, est

    stats, out, billed, spent, old_key, est = asyncio.run(asyncio.wait_for(main(), 60))
    assert stats["ok"] == 1
    assert stats["ok"] == 1 and out["cached"] is True, (stats, out)
    assert billed == 1 and spent == 1, (billed, spent)  # no second paid call
    assert out["cached"] is True and out["request_key"] == old_key  # the stored answer, under its own key
    # and the dry run's estimate counts it as stored (it counted a call to pay)
    assert (est.cached, est.calls) == (1, 0), (est.cached, est.calls)


def test_a_short_paid_key_after_its_auth_scheme_is_scrubbed_from_an_error_body():
    """The HTTP layer scrubs request secrets "from 4 characters on" (``_secrets_of``, as ``redact`` does a paid
    host's key since this session), but the key behind an auth scheme ("Bearer <key>") was taken apart only from
    6 characters: a 4-5 character proxy key echoed by the server stayed in the error's excerpt and body. The
    scheme word itself is no secret (a Graph API "OAuthException" must stay readable)."""
    key = "k" "9x2q"  # 5 characters
    headers = {"Authorization": f"Bearer {key}"}

    async def go() -> PermanentHTTPError:
        async with serve(_echoing_app()) as base, HttpClient(default_policy=FAST) as http:
            try:
                await http.request("POST", base + "/refuse", data=f"invalid key {key} (OAuthException)".encode(),
                                   headers=headers)
            except PermanentHTTPError as exc:
                return exc
        raise AssertionError("no error")

    exc = asyncio.run(go())
    assert key not in exc.body_excerpt and key not in exc.body and key not in str(exc), exc.body
    assert "OAuthException" in exc.body
