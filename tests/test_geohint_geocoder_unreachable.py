"""GeoHint with a geocoder that cannot be reached, or that answers but knows none of the campaign's places.

1. Wikidata/Nominatim URLs on closed loopback ports: the geocoder stage stops after 5 requests in a row could
   not reach the host (runtime breaker), no answer burns an attempt beyond the first few nacks, the run ends
   ``incomplete`` (exit 3) with a line naming the host, the config keys and the answers left queued, and the
   summary says the answers did not get through the geocoder; a re-run with the endpoints up finishes without
   a model call repeated.
2. Endpoints that answer but know nothing (an empty gazetteer): every answer is unresolved, and the warning says
   the endpoints answered but found nothing (not that they failed), with no geocoder-failure warning.
"""

from __future__ import annotations

import logging
import socket
from urllib.parse import urlsplit

import anyio

from geoagent import engine
from geoagent.config import config_from_dict
from geoagent.report import geohint as GH
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import free_port, serve

FAST = {"rate": 2000.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 3, "backoff_base_s": 0.01,
        "backoff_max_s": 0.1, "timeout_s": 10.0}


def _cfg(wd: str, nm: str) -> dict:
    return {
        "campaign": {"name": "gh-unreach", "kind": "geohint", "seed": 1, "contact": "ops@example.org"},
        "budget": {"cap_usd": 0.0},
        "models": [{"name": "sim-a", "provider": "simulated", "model": "sim-a"}],
        "hosts": {urlsplit(wd).netloc: FAST, urlsplit(nm).netloc: FAST},
        "geohint": {
            "sites": ["paris_marais"], "conditions": ["baseline", "forced"], "images": "synthetic",
            "baseline_repeats": 2, "n_flips": 50, "n_splits": 5,
            "geocoder": {"wikidata_url": wd + "/w/api.php", "nominatim_url": nm, "nominatim_max_requests": 100_000},
        },
    }


def _env(monkeypatch, tmp_path, release_dir):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))


def _held_port() -> socket.socket:
    """A loopback port bound and never listening: connections are refused, and no parallel test's server can take
    it while it is held (a port from ``free_port()`` is free only until someone binds it: a CI run's first phase
    got answers from another test's server on it, and every answer was dead-lettered)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind(("127.0.0.1", 0))
    return s


def test_unreachable_geocoder_stops_with_a_line_and_a_rerun_resumes(release_dir, tmp_path, monkeypatch, caplog):
    _env(monkeypatch, tmp_path, release_dir)
    held = [_held_port(), _held_port()]
    wd_port, nm_port = (s.getsockname()[1] for s in held)
    wd, nm = f"http://127.0.0.1:{wd_port}", f"http://127.0.0.1:{nm_port}"

    async def closed():
        return await engine.run_campaign(config_from_dict(_cfg(wd, nm)), live=False, handle_signals=False,
                                         export=False)

    with caplog.at_level(logging.WARNING, logger="geoagent"):
        out = anyio.run(closed)
    answers = out.counts["answers"]
    n_answers = out.counts["responses"].done
    assert n_answers == out.planned > 0
    assert out.status == "incomplete" and out.exit_code == engine.EXIT_INCOMPLETE
    # every answer is still queued for the geocoder (the few nacked before the breaker opened, too), none dead
    assert (answers.ready, answers.leased, answers.done, answers.dead) == (n_answers, 0, 0, 0)
    assert out.missing == 0
    line, = out.stop_reasons
    assert line == (f"geocoder: host 127.0.0.1:{wd_port} unreachable (connection refused on 5 consecutive requests); "
                    f"check [geohint.geocoder] wikidata_url / the network; {n_answers} answers left queued; "
                    "re-run the same command to resume")
    text = out.summary()
    assert line in text and "GeoHint: no scored responses" in text
    assert f"{n_answers} answers did not get through the geocoder" in text and "could not be reached" in text
    # printed without a live display: the warnings go to the log (stderr in the CLI) while it runs
    warned = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(f"host 127.0.0.1:{wd_port} unreachable (connection refused)" in m for m in warned)
    assert any(line in m for m in warned)
    calls = out.spend["calls"]
    assert calls == out.planned

    gaz = Gazetteer.from_release(release_dir)
    for s in held:  # released just before the fakes bind the same ports (the re-run's endpoints are up)
        s.close()

    async def up():
        async with serve(wd_fake.make_app(gaz), "127.0.0.1", wd_port), \
                serve(nm_fake.make_app(gaz, min_interval_s=0.0), "127.0.0.1", nm_port):
            return await engine.run_campaign(config_from_dict(_cfg(wd, nm)), live=False, handle_signals=False,
                                             export=False)

    again = anyio.run(up)
    assert again.status == "complete", again.summary()
    assert again.counts["answers"].done == n_answers and again.counts["answers"].dead == 0
    assert again.counts["scored"].done == n_answers and again.stop_reasons == []
    assert again.spend["calls"] == calls  # no model call repeated
    assert "did not get through the geocoder" not in again.summary()


def test_endpoints_that_know_nothing_are_not_blamed_as_failing(release_dir, tmp_path, monkeypatch):
    _env(monkeypatch, tmp_path, release_dir)

    async def main():
        empty = Gazetteer()
        async with serve(wd_fake.make_app(empty)) as wd, serve(nm_fake.make_app(empty, min_interval_s=0.0)) as nm:
            return await engine.run_campaign(config_from_dict(_cfg(wd, nm)), live=False, handle_signals=False,
                                             export=False)

    out = anyio.run(main)
    assert out.status == "complete", out.summary()
    n = out.counts["scored"].done
    assert n == out.planned
    md = (tmp_path / "state" / "gh-unreach" / "report" / "report.md").read_text(encoding="utf-8")
    header = md.split("Terms:")[0]
    assert f"Answers that did not geocode (resolved level none): {n} of {n} (100.0 %)" in header
    warnings = [ln for ln in header.splitlines() if ln.startswith("**Warning")]
    assert warnings and all("did not geocode" in w for w in warnings)
    assert all("endpoints answered" in w and "found no place" in w and "the sandbox's fakes know only" in w for w in warnings)
    assert not any("did not get through the geocoder" in w or "could not be reached" in w for w in warnings)
    text = out.summary()
    assert "endpoints answered" in text and "did not get through the geocoder" not in text


def test_geocoder_failure_warning_counts():
    assert GH.geocoder_failure_warning(0, 0) is None
    w = GH.geocoder_failure_warning(3, 2)
    assert w.startswith("Warning: 5 answers did not get through the geocoder and are in no table: 3 dead-lettered")
    assert "2 left queued" in w and "[geohint.geocoder] wikidata_url, nominatim_url" in w
    assert GH.geocoder_failure_warning(0, 4).startswith("Warning: 4 answers did not get through the geocoder and are "
                                                        "in no table: 4 left queued")


def test_failing_endpoints_dead_letter_after_max_attempts_and_the_summary_says_so(release_dir, tmp_path, monkeypatch):
    # a Wikidata host that answers 500 to everything is reachable: no breaker, the answers are nacked and
    # dead-letter after [queue] max_attempts with their reasons, and the summary names the geocoder's failures
    from aiohttp import web

    _env(monkeypatch, tmp_path, release_dir)
    seen: list[str] = []

    async def fail(request: web.Request) -> web.Response:
        seen.append(request.query.get("action", ""))
        return web.Response(status=500, text="upstream broken")

    app = web.Application()
    app.router.add_get("/w/api.php", fail)

    async def main():
        async with serve(app) as wd:
            doc = _cfg(wd, f"http://127.0.0.1:{free_port()}")
            doc["queue"] = {"max_attempts": 2, "backoff_base_s": 0.0, "backoff_max_s": 0.0}
            return await engine.run_campaign(config_from_dict(doc), live=False, handle_signals=False, export=False)

    out = anyio.run(main)
    n = out.counts["responses"].done
    answers = out.counts["answers"]
    assert out.status == "incomplete" and out.stop_reasons == []
    assert (answers.dead, answers.ready, answers.done) == (n, 0, 0) and out.missing == n
    # each answer delivered twice, each delivery one lookup of FAST's 3 attempts
    assert len(seen) == n * 2 * FAST["max_attempts"]
    assert all(d.attempts == 2 and "http 500" in d.reason for d in out.dead["answers"])
    text = out.summary()
    assert f"missing: {n} tasks dead-lettered" in text
    assert f"Warning: {n} answers did not get through the geocoder and are in no table: {n} dead-lettered" in text


def test_answers_left_queued_by_an_interrupt_are_not_blamed_on_the_geocoder(release_dir, tmp_path, monkeypatch):
    # walkthrough: SIGTERM while the geocoder (healthy, only slower than the model) still had answers queued;
    # summary and report said "Their lookups failed ... check [geohint.geocoder] wikidata_url" for all of them
    import asyncio
    import os
    import signal

    from aiohttp import web

    _env(monkeypatch, tmp_path, release_dir)
    gaz = Gazetteer.from_release(release_dir)
    seen = [0]

    @web.middleware
    async def slow(request, handler):
        seen[0] += 1
        if seen[0] == 12:  # the geocoder is at work, the model's answers are queued for it: interrupt
            os.kill(os.getpid(), signal.SIGTERM)
        await asyncio.sleep(0.2)
        return await handler(request)

    wd_app = wd_fake.make_app(gaz)
    wd_app.middlewares.append(slow)

    async def main():
        async with serve(wd_app) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            doc = _cfg(wd, nm)
            doc["hosts"][urlsplit(wd).netloc] = {**FAST, "concurrency": 1}
            return await engine.run_campaign(config_from_dict(doc), live=False, handle_signals=True, export=False)

    out = anyio.run(main)
    assert out.status == "interrupted", out.summary()
    queued = out.counts["answers"].ready + out.counts["answers"].leased
    assert queued > 0 and out.counts["answers"].dead == 0 and out.stop_reasons == []
    text = out.summary()
    md = (tmp_path / "state" / "gh-unreach" / "report" / "report.md").read_text(encoding="utf-8")
    header = md.split("Terms:")[0]
    assert "Interim report" in header
    for shown in (text, header):
        assert "lookups failed" not in shown and "could not be reached" not in shown
        assert "did not get through the geocoder" not in shown
        assert (f"{queued} answers not geocoded yet: left queued by the interrupt; re-run the same command to "
                "finish") in shown


def test_geocoder_failure_warning_tells_stopped_from_failed():
    # queued answers are failed lookups only when no stop left them there (the geocoder's host was unreachable)
    w = GH.geocoder_failure_warning(0, 7, left_by="the interrupt")
    assert w == ("7 answers not geocoded yet: left queued by the interrupt; re-run the same command to finish "
                 "(their lookups did not fail).")
    w = GH.geocoder_failure_warning(2, 5, left_by="the budget stop")
    assert w.startswith("Warning: 2 answers did not get through the geocoder and are in no table: 2 dead-lettered")
    assert "Their lookups failed" in w and "5 left queued" not in w
    assert w.endswith("5 answers not geocoded yet: left queued by the budget stop; re-run the same command to "
                      "finish (their lookups did not fail).")
