"""Adversarial checks of session 8's merges (helper adv2): each test failed on main before its fix."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import orjson

from geoagent.config import load_config
from geoagent.runtime.manifest import Manifest, _write
from tests._model_harness import generic_campaign, model_table


def _runs(state: Path) -> list[dict]:
    return orjson.loads((state / "manifest.json").read_bytes())["runs"]


def test_a_dead_runs_pid_reused_by_a_later_process_still_reads_killed(tmp_path):
    """The pid of a SIGKILLed run is taken by a process that started after the run began (pid reuse, common on a
    busy machine or in a container with few pids): that process is not the run's, so the run reads ``killed``
    (on main it kept ``running`` for as long as the unrelated process lived)."""
    cfg = load_config(generic_campaign(tmp_path, name="reuse", n=3, models=model_table()))
    manifest = Manifest(cfg)
    first = manifest.start_run(command="run")
    other = subprocess.Popen(["sleep", "30"])  # the later process that got the dead run's pid
    try:
        state = manifest.state_dir
        data = orjson.loads((state / "manifest.json").read_bytes())
        (entry,) = data["runs"]
        entry["pid"] = other.pid
        entry["started_unix"] = time.time() - 120.0  # the dead run began two minutes before `other` existed
        _write(manifest.path, data)
        second = manifest.start_run(command="run")
        runs = {r["run_id"]: r for r in _runs(state)}
        assert runs[first]["status"] == "killed" and runs[first]["killed_found_by"] == second
        assert runs[second]["status"] == "running"  # this process: alive, and older than its own run
    finally:
        other.kill()
        other.wait(timeout=10)



def test_two_crawls_with_different_thumbnail_fields_on_one_images_root_each_get_their_own_size(tmp_path):
    """``thumb_field`` is one of the ``[crawl.fetcher]`` settings a selection is keyed by, but every thumbnail was
    saved as ``<site>/<id>.jpg`` whatever its size: a crawl asking for 1024-px thumbnails after one that fetched
    256-px ones read the small files from disk ("already fetched") and audited them as its own (on main: its
    images.csv points at the first crawl's files, and it requested no thumbnail of those images). The sandbox
    CDN renders every size alike, so the test follows the files and the requests, not the pixels."""
    import asyncio

    from geoagent.sandbox.city import build_world
    import hashlib

    from tests.test_crawl_fetcher_selection import _crawl, _rows

    def _jpegs(images: Path) -> dict[str, str]:
        return {str(p.relative_to(images)): hashlib.sha256(p.read_bytes()).hexdigest() for p in images.rglob("*.jpg")}

    world = build_world(0)
    images = tmp_path / "images"
    a, b = tmp_path / "a", tmp_path / "b"
    asyncio.run(_crawl(a, images, world, "crawl-a", thumb_field="thumb_256_url"))
    rows_a = _rows(a / "state" / "images.csv")
    files_a = _jpegs(images)
    assert rows_a and files_a
    req_b = asyncio.run(_crawl(b, images, world, "crawl-b", thumb_field="thumb_1024_url"))
    rows_b = _rows(b / "state" / "images.csv")
    assert rows_b and all((images / r["path"]).is_file() for r in rows_b)
    assert not {r["path"] for r in rows_a} & {r["path"] for r in rows_b}  # none of the 256-px files
    # every image it kept was downloaded at its own size, also those the first crawl had at 256 px
    assert {r["image_id"] for r in rows_b} <= set(req_b["thumbs"])
    after = _jpegs(images)
    assert {k: after[k] for k in files_a} == files_a  # the first crawl's files are untouched
    assert _rows(a / "state" / "images.csv") == rows_a
    # each crawl's image audit table names the files it audited
    for state, rows in ((a / "state", rows_a), (b / "state", rows_b)):
        audit = _rows(state / "image_audit.csv")
        assert audit and {r["image"] for r in audit} == {r["path"] for r in rows}


def test_a_crawl_call_whose_stop_lands_while_its_reservation_settles_is_not_sent(tmp_path):
    """The crawl's metered call has the model caller's race (walkthrough M1): the stop comes while the send-time
    reservation's database job runs. On main the call was sent anyway (after the stop: a request the grace
    period's cancel can cut in flight, booked unknown-outcome and paid again on resume); it must be given up unsent
    and its reservation released. ``stopping`` turns true right as the reservation is requested, which is the
    moment a Ctrl-C lands in that window. Against the local OpenAI-compatible fake."""
    import asyncio

    import pytest
    from aiohttp import web

    from geoagent.config import ModelConfig
    from geoagent.crawl.llmcall import metered_generate
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.openai_compat import OpenAICompatProvider
    from geoagent.providers.settings import ProviderSettings
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.runtime.stage import Abandoned
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox.llm_openai import make_app
    from geoagent.sandbox.server import serve

    model = ModelConfig(name="auditor", provider="openai", model="sim-gpt", price_input_usd_per_mtok=1.0,
                        price_output_usd_per_mtok=4.0, max_output_tokens=100)
    received: list[str] = []

    async def main():
        app = make_app(require_auth=False)

        @web.middleware
        async def count(request, handler):
            received.append(request.path)
            return await handler(request)

        app.middlewares.insert(0, count)
        state = open_campaign_state("audit", root=tmp_path, cap_usd=10.0)
        asked = {"n": 0, "stop": False}

        def stopping() -> bool:
            asked["n"] += 1
            now = asked["stop"]
            if asked["n"] == 2:  # asked at send time, just before the reservation: the stop lands during it
                asked["stop"] = True
            return now

        try:
            async with serve(app) as base, HttpClient(default_policy=HostPolicy(timeout_s=5.0)) as http:
                prov = OpenAICompatProvider(ProviderSettings(kind="openai", model="sim-gpt", base_url=base + "/v1"), http)
                req = ModelRequest(provider="openai", model="sim-gpt", prompt="Rate place 1 0-5.", params={"max_tokens": 100})
                with pytest.raises(Abandoned):
                    await metered_generate(prov, req, ledger=state.ledger, model_cfg=model, stopping=stopping)
                await asyncio.sleep(0.2)  # a fire-and-forget release reaches the database
            return state.ledger.summary()
        finally:
            state.close()

    ledger = asyncio.run(main())
    assert received == []  # nothing sent after the stop
    assert ledger.calls == 0 and ledger.unknown_calls == 0 and ledger.open_reservations == 0
