"""The GeoHint refresh of stale answers shares the run's geocoder and marks the run's work begun (review41a #1, #2,
#5).

Before: the refresh (:class:`geoagent.geohint.reparse.Regeocoder`) built a geocoder of its own, so one process had
two ``[geohint.geocoder] nominatim_max_requests`` caps (documented per process), a 403 met by the refresh was not
carried to the workers' geocoder (the run went on to say "complete"), and the geocode cache was opened twice and
never closed (#1); it rewrote stored rows without the run's work-began hook, so a run killed midway left ``status``
saying "campaign complete" (#2); stale rows of tasks the plan no longer holds made the plan be made again at every
run (#5).

Unit cases use the local Wikidata and Nominatim fakes over loopback; the end-to-end cases run a GeoHint campaign
through the engine against them (skipped without the release data).
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from pathlib import Path

import anyio
import pytest
from _geocode_env import CONTACT, FAST
from _geocode_gaz import gazetteer_with

from geoagent import constants as C
from geoagent.geohint.geocode_stage import GeocoderCapStop, GeocodeStage
from geoagent.geohint.parse import ANSWER_PARSER_VERSION
from geoagent.geohint.reparse import Regeocoder
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.server import serve

TOKYO = {"site_lat": 35.6628, "site_lon": 139.699}


def _answer(area: str) -> dict:
    """An ``answers`` payload naming Tokyo and ``area`` (not in Wikidata: Nominatim is asked)."""
    meta = {"task": "geohint", "site": "tokyo_test", "condition": "forced", "schema": "forced", "ref_name": "Shibuya",
            "dist_km": 1.0, **TOKYO}
    return {"model": "m", "request_key": "rk", "image_id": "1", "meta": meta,
            "parsed": {"ok": True, "city": "Tokyo", "area": area}, "parser_version": ANSWER_PARSER_VERSION}


def _ctx(tmp_path: Path, http: HttpClient, wd_url: str, nm_url: str, **geocoder) -> StageContext:
    table = {"contact": CONTACT, "wikidata_url": wd_url + "/w/api.php", "nominatim_url": nm_url, **geocoder}
    return StageContext("gc41", services={"http": http, "state_dir": str(tmp_path),
                                          "config": {"geohint": {"geocoder": table}}})


async def _with_fakes(tmp_path, go, *, blocked: bool = False, **geocoder):
    gaz = gazetteer_with()
    nm_app = nm_fake.make_app(gaz, min_interval_s=0.0)
    nm_app[nm_fake.NOMINATIM_STATE].blocked = blocked
    async with serve(wd_fake.make_app(gaz)) as wd_url, serve(nm_app) as nm_url, \
            HttpClient(default_policy=FAST) as http:
        ctx = _ctx(tmp_path, http, wd_url, nm_url, **geocoder)
        got = await go(ctx)
        for close in ctx.services.get(C.SERVICE_CLOSE_AT_END) or []:
            close()
        return got, [r["status"] for r in nm_app[nm_fake.NOMINATIM_STATE].requests]


def test_the_refresh_and_the_workers_count_against_one_nominatim_cap(tmp_path):
    """review41a #1: the refresh spends the process's cap; the workers' geocoder asks Nominatim no more."""
    async def go(ctx):
        regeocoder = Regeocoder(ctx, lambda keys: {}, echo_rule="name")
        with pytest.raises(GeocoderCapStop):  # the one request allowed is spent on the first level it asks
            for i in range(3):
                await regeocoder.rescore(f"a{i}", _answer(f"Nowhere{i}"))
        worker = GeocodeStage()
        await worker.start(ctx)
        assert worker.geocoder is regeocoder.stage.geocoder is ctx.services[C.SERVICE_GEOCODER]
        with pytest.raises(GeocoderCapStop):
            await worker.handle(Task("w", _answer("Elsewhere"), 0, "lease"), ctx)

    _, statuses = asyncio.run(_with_fakes(tmp_path, go, nominatim_max_requests=1))
    assert statuses == [200]  # one request in the process, as [geohint.geocoder] nominatim_max_requests = 1 says


def test_a_refusal_met_by_the_refresh_stops_the_workers_geocoder(tmp_path):
    """review41a #1: a 403 to the refresh holds the workers' answers without asking again, and the run's end says
    the geocoder was refused (GeocodeStage.auth_lines)."""
    from geoagent.geohint.geocode_stage import GeocoderRefused

    async def go(ctx):
        regeocoder = Regeocoder(ctx, lambda keys: {}, echo_rule="name")
        with pytest.raises(GeocoderRefused):
            await regeocoder.rescore("a", _answer("Nowhere"))
        worker = GeocodeStage()
        await worker.start(ctx)
        assert not worker.runnable()
        with pytest.raises(GeocoderRefused, match="HTTP 403"):
            await worker.handle(Task("w", _answer("Elsewhere"), 0, "lease"), ctx)
        return worker.auth_lines()

    (line,), statuses = asyncio.run(_with_fakes(tmp_path, go, blocked=True))
    assert statuses == [403] and "the geocoder was refused: HTTP 403" in line


def test_the_geocode_cache_is_opened_once_and_closed_with_the_services(tmp_path):
    async def go(ctx):
        regeocoder = Regeocoder(ctx, lambda keys: {}, echo_rule="name")
        worker = GeocodeStage()
        await regeocoder.stage.start(ctx)
        await worker.start(ctx)
        assert len(ctx.services[C.SERVICE_CLOSE_AT_END]) == 1
        assert _open_caches() == 1  # one connection to geocode_cache.sqlite, not two

    asyncio.run(_with_fakes(tmp_path, go))
    assert _open_caches() == 0


def _open_caches() -> int:
    """File descriptors of this process open on a geocode cache file (Linux ``/proc``)."""
    fd_dir = Path("/proc/self/fd")
    if not fd_dir.is_dir():
        pytest.skip("no /proc/self/fd")
    n = 0
    for fd in fd_dir.iterdir():
        try:
            n += os.readlink(fd).endswith("geocode_cache.sqlite")
        except OSError:
            continue
    return n


# -- end to end ---------------------------------------------------------------------------------------------------

def _stale_nowhere(db: Path) -> str:
    """Make one stored Tokyo row stale (version 4), its only text (``extra.raw``) naming an area no Wikidata item has
    (the geocoder asks Nominatim for it); return its key."""
    with sqlite3.connect(db) as c:
        rows = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = 'geohint_scored'")}
        key = next(k for k, r in sorted(rows.items()) if r["site"] == "tokyo_shibuya" and r["city"])
        row = rows[key]
        row["extra"].update(parser_version=4, request_key="gone",
                            raw=json.dumps({"city": row["city"], "area": "Nowhere Lane", "building": None,
                                            "confidence_area": 0.5, "confidence_building": 0.0}))
        c.execute("UPDATE results SET row = ? WHERE tbl = 'geohint_scored' AND key = ?", (json.dumps(row), key))
    return key


def test_a_run_whose_refresh_is_refused_ends_authentication_failed(release_dir, tmp_path, monkeypatch):
    """review41a #1: before, the run's own geocoder never heard of the refresh's 403 and the run ended "complete"
    (nothing queued for its workers), the stale row kept and the block unsaid; its two caches were left open."""
    from test_geohint_campaign import _cfg

    from geoagent import engine
    from geoagent.config import config_from_dict
    from geoagent.sandbox.gazetteer import Gazetteer

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        nm_app = nm_fake.make_app(gaz, min_interval_s=0.0)
        nm = nm_app[nm_fake.NOMINATIM_STATE]
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_app) as nm_url:
            cfg = config_from_dict(_cfg(wd, nm_url))
            first = await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)
            assert first.status == "complete", first.summary()
            assert _open_caches() == 0
            key = _stale_nowhere(tmp_path / "state" / cfg.name / "campaign.sqlite")
            nm.blocked, sent = True, len(nm.requests)
            out = await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)
            return out, [r["status"] for r in nm.requests[sent:]], key, cfg

    out, statuses, key, cfg = anyio.run(main)
    assert (out.status, out.exit_code) == ("authentication failed", 5), out.summary()
    assert statuses == [403]  # the refresh's one request; the workers' geocoder asked nothing after it
    assert "the geocoder was refused: HTTP 403" in out.summary()
    assert _open_caches() == 0
    with sqlite3.connect(tmp_path / "state" / cfg.name / "campaign.sqlite") as c:
        (row,) = c.execute("SELECT row FROM results WHERE tbl = 'geohint_scored' AND key = ?", (key,)).fetchone()
    assert json.loads(row)["extra"]["parser_version"] == 4  # kept for the run after the block is lifted


# -- review41a #2: the run's work-began mark --------------------------------------------------------------------

def test_the_refresh_marks_the_work_begun_once_before_its_first_write(tmp_path):
    """Before the first batch (a place unchanged) and, with no batch, before the first row geocoded again; never
    when nothing is written."""
    from _geocode_env import geocode_env
    from test_geohint_reparse import MARAIS, META, _row, _store_answer

    from geoagent.geohint.reparse import refresh_stored_rows, row_parser_version
    from geoagent.geohint.stages import SCORED_TABLE
    from geoagent.runtime.store import open_campaign_state

    def refresh(st, rows):
        st.store.put_results(SCORED_TABLE, rows)
        seen: list[dict[str, int]] = []  # the stored versions each time the hook was called

        def began():
            seen.append({k: row_parser_version(r) for k, r in st.store.iter_results(SCORED_TABLE)})

        async def go():
            async with geocode_env() as env:
                ctx = StageContext("wb41", services={"store": st.store, C.SERVICE_GEOCODER: env.geocoder})
                regeocoder = Regeocoder(ctx, lambda keys: {k: {"model": "m", "image_id": "1", "meta": META}
                                                           for k in keys}, echo_rule="name")
                return await refresh_stored_rows(st.store, SCORED_TABLE, regeocoder, before_write=began)

        return asyncio.run(go()), seen

    with open_campaign_state("wb41", root=tmp_path) as st:
        _store_answer(st, "k1", MARAIS)
        same = {**_row("a", "k1", version=4), "confidence_area": 0.1}
        moved = _row("b", "k1", area="Bastille", version=4)
        got, seen = refresh(st, [("a", same), ("b", moved)])
        assert (got.reparsed, got.regeocoded) == (2, 1)
        assert seen == [{"a": 4, "b": 4}]  # once, before anything was written

        got, seen = refresh(st, [("b", moved)])  # only a row geocoded again
        assert got.regeocoded == 1 and seen == [{"a": ANSWER_PARSER_VERSION, "b": 4}]

        got, seen = refresh(st, [("c", _row("c", "k-gone", version=4))])  # no text: nothing written
        assert got.no_text == 1 and seen == []


def test_a_run_killed_in_its_refresh_is_not_read_as_complete(release_dir, tmp_path):
    """A complete GeoHint campaign whose stored answers an earlier parser read, re-run and killed (SIGKILL) after the
    refresh wrote its batch: the store holds rows the report and export on disk do not reflect, so `status` says
    the run was cut short before writing them (before: "campaign complete")."""
    import subprocess
    import sys

    from _model_harness import geohint_three_sites_toml
    from test_end_cut_short41 import _KILL_AT, CUT_SHORT, REPO, _runs
    from test_geohint_reparse import _set_back, _stored

    from geoagent.runtime.manifest import WORK_BEGAN_KEY

    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_RELEASE": str(release_dir)}
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        env.pop(var, None)

    def cli(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, str(REPO / "run.py"), *args], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=300)

    cfg = tmp_path / "gh.toml"
    cfg.write_text(geohint_three_sites_toml("gh-kill41", geohint="n_boot = 0"), encoding="utf-8")
    assert cli("run", str(cfg), "--no-live").returncode == 0
    state = tmp_path / "state" / "gh-kill41"
    rows = _stored(state / "campaign.sqlite")[0]
    keys = sorted(k for k, r in rows.items() if r["area"])
    _set_back(state / "campaign.sqlite", rows, keys[:2], keys[2:5])
    # killed where the refresh turns to the answers naming another place: its batch of the others is written
    proc = subprocess.run([sys.executable, "-c", _KILL_AT, "geoagent.geohint.reparse:_geocode_again",
                           str(REPO / "run.py"), "run", str(cfg), "--no-live"], env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert _stored(state / "campaign.sqlite")[0][keys[2]]["extra"]["parser_version"] == ANSWER_PARSER_VERSION
    last = _runs(state)[-1]
    assert last["status"] == "running" and isinstance(last[WORK_BEGAN_KEY], str)
    st = cli("status", str(cfg))
    assert CUT_SHORT in st.stdout and "campaign complete" not in st.stdout, st.stdout
    assert cli("run", str(cfg), "--no-live").returncode == 0  # the re-run finishes the refresh and writes the end
    assert "campaign complete" in cli("status", str(cfg)).stdout


# -- review41a #5: a stale answer of a task no longer planned makes no plan again ------------------------------

def test_a_stale_answer_of_a_task_no_longer_planned_makes_no_plan_again(release_dir, tmp_path, monkeypatch):
    """Its row stays stale (its request is not known), so it is met at every run: before, each run made its whole
    plan again to look for it. The plan is made again only for the planned keys."""
    from test_geohint_campaign import _cfg
    from test_geohint_reparse import MARAIS, _row, _store_answer

    from geoagent.config import config_from_dict
    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.geohint.reparse import NOT_PLANNED
    from geoagent.geohint.stages import SCORED_TABLE
    from geoagent.runtime.store import open_campaign_state

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    cfg = config_from_dict(_cfg("http://127.0.0.1:9", "http://127.0.0.1:9"))  # no lookup is made
    kind = GeoHintCampaign()
    with open_campaign_state(cfg.name, root=tmp_path / "state") as st:
        ctx = StageContext(cfg.name, services={"config": cfg, "store": st.store})
        messages = asyncio.run(kind.plan(cfg, ctx))
        replans = []
        replan = kind._replan
        kind._replan = lambda: replans.append(1) or replan()  # counts the plans made again, each made for real
        _store_answer(st, "k1", MARAIS)
        st.store.put_results(SCORED_TABLE, [("gone|task", _row("gone|task", "k1", area="Bastille", version=4))])
        (line,) = asyncio.run(kind.refresh_scored_rows(cfg, ctx))
        assert f"1 naming another place keeps the earlier reading for now ({NOT_PLANNED})" in line
        assert replans == []
        # a planned key still finds its request in the plan made again
        key = messages[0][0]
        assert list(kind.planned_requests({key, "gone|task"})) == [key] and replans == [1]
