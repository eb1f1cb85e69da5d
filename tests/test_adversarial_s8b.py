"""Adversarial checks of session 8's merges (helper adv2): each test failed on main before its fix."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import orjson
import pytest

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


def _portrait_jpeg(width: int, height: int) -> bytes:
    import io

    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (width, height), (150, 160, 170)).save(buf, format="JPEG")
    return buf.getvalue()


def _image_audit_under_outline_cap(tmp_path, monkeypatch, provider: str, model_id: str, jpeg: bytes,
                                   fetcher: dict | None = None):
    """Run one image audit of ``jpeg`` through the crawl's metered call (real HTTP to the provider's sandbox fake)
    under a [budget] cap equal to the dry-run outline's per-call worst case for the sandbox crawl config with its
    image auditor switched to ``provider`` / ``model_id`` (and ``fetcher`` settings); the ledger's summary."""
    import asyncio

    from geoagent.crawl.campaign import crawl_budget_figures
    from geoagent.crawl.image_audit import build_request
    from geoagent.crawl.llmcall import metered_generate
    from geoagent.providers.anthropic import AnthropicProvider
    from geoagent.providers.gemini import GeminiProvider
    from geoagent.providers.openai_compat import OpenAICompatProvider
    from geoagent.providers.settings import ProviderSettings
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = load_config(Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml")
    settings = cfg.section("crawl")
    if fetcher:
        settings = settings.model_copy(update={"fetcher": settings.fetcher.model_copy(update=fetcher)})
    name = settings.image_audit.model
    models = [m.model_copy(update={"provider": provider, "model": model_id}) if m.name == name else m for m in cfg.models]
    cfg = cfg.model_copy(update={"models": models})
    m_img = next(m for m in cfg.models if m.name == name)
    worst = crawl_budget_figures(cfg, settings)["image_audit_usd"]
    app, cls, suffix = {"anthropic": (llm_anthropic, AnthropicProvider, ""), "gemini": (llm_gemini, GeminiProvider, ""),
                        "openai": (llm_openai, OpenAICompatProvider, "/v1")}[provider]

    async def main():
        state = open_campaign_state("outline", root=tmp_path, cap_usd=worst * (1 + 1e-9))
        try:
            async with serve(app.make_app(require_auth=False)) as base, HttpClient(default_policy=HostPolicy(timeout_s=10.0)) as http:
                prov = cls(ProviderSettings(kind=provider, model=model_id, base_url=base + suffix, api_key="local"), http)
                req = build_request("100000000001", jpeg, settings.image_audit, provider=provider, model=model_id)
                await metered_generate(prov, req, ledger=state.ledger, model_cfg=m_img,
                                       input_estimate_factor=cfg.budget.input_estimate_factor)
            return state.ledger.summary()
        finally:
            state.close()

    return asyncio.run(main())


@pytest.mark.parametrize("provider, model_id", [("anthropic", "claude-sonnet-4-5"), ("gemini", "gemini-2.5-flash"),
                                                ("openai", "gpt-4.1-mini")])
def test_the_crawl_outline_bounds_an_image_audit_of_a_portrait_thumbnail(tmp_path, monkeypatch, provider, model_id):
    """Mapillary's ``thumb_1024_url`` is 1024 px *wide*: a portrait phone photo's thumbnail is 1024 x 1820 (9:16).
    The dry run's outline priced each image audit at a 1024 x 1024 square, "the largest bill a thumbnail of that size
    can have", but Claude, Gemini and OpenAI's patch-billed models bill a 1024 x 1820 image more: with the [budget]
    cap set to the outline's per-call worst case, the crawl's own metered call (real HTTP to the provider's fake)
    was refused (BudgetExhausted) on main. The outline must be an upper bound of what each call reserves."""
    ledger = _image_audit_under_outline_cap(tmp_path, monkeypatch, provider, model_id, _portrait_jpeg(1024, 1820))
    assert ledger.calls == 1 and ledger.open_reservations == 0


def test_the_crawl_outline_says_it_bounds_no_gemini_audit_of_an_original_photo(tmp_path, monkeypatch):
    """``thumb_field = "thumb_original_url"``: originals have no fixed size, and a 12-MP phone original (4032 x 3024)
    billed by Gemini's 768-px tiles (6 x 4 = 24 tiles) reserves more than the figure for a 2048-px-wide photo, so
    the outline must not call that figure an upper bound (decided: it says "no per-call bound" instead)."""
    from geoagent.config import load_config
    from geoagent.crawl.campaign import crawl_budget_figures, crawl_budget_outline

    src = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml").read_text(encoding="utf-8")
    src = src.replace("[crawl.fetcher]\n", '[crawl.fetcher]\nthumb_field = "thumb_original_url"\n', 1)
    p = tmp_path / "orig.toml"
    p.write_text(src, encoding="utf-8")
    cfg = load_config(p)
    fig = crawl_budget_figures(cfg, cfg.section("crawl"))
    assert fig["image_bounded"] is False and fig["image_audit_usd"] > 0
    line = next(x for x in crawl_budget_outline(cfg, cfg.section("crawl")) if "image audit" in x)
    assert "no per-call bound" in line and "up to" not in line, line


@pytest.mark.parametrize("label", ["北京市海淀区中关村大街" * 20, "Święty Mikołaj, Łódź " * 10])
def test_the_crawl_outline_bounds_a_rating_call_of_non_ascii_labels(tmp_path, monkeypatch, label):
    """The outline priced a rating call's full batch with every label 200 ASCII characters; the reservation rule
    counts a non-ASCII character's UTF-8 bytes (a CJK one: 3 tokens, not 1/3), and a prompt line keeps 200
    *characters*. A batch of Chinese (or Polish) labels, as the crawl of a Chinese city sends, reserved more than
    the outline's "up to" figure: with the cap at that figure, the crawl's metered call was refused on main."""
    import asyncio

    from geoagent.crawl.campaign import crawl_budget_figures
    from geoagent.crawl.llmcall import metered_generate
    from geoagent.crawl.referenceability import RefCandidate, render_candidates
    from geoagent.crawl.image_audit import load_prompt
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.openai_compat import OpenAICompatProvider
    from geoagent.providers.settings import ProviderSettings
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox.llm_openai import make_app
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = load_config(Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml")
    settings = cfg.section("crawl")
    rs = settings.referenceability
    m_ref = next(m for m in cfg.models if m.name == rs.model)
    worst = crawl_budget_figures(cfg, settings)["rating_usd"]
    batch = [RefCandidate(qid=f"Q{i}", label=label, dist_km=rs.radius_km * 0.9, lat=0.0, lon=0.0)
             for i in range(rs.batch_size)]
    # the auditor's own rating request (ReferenceabilityAuditor._request with its _ref_prompt)
    req = ModelRequest(provider="openai", model=m_ref.model,
                       prompt=load_prompt("crawl_referenceability.txt").replace("{candidates}", render_candidates(batch)),
                       params={"max_output_tokens": rs.max_output_tokens, "temperature": rs.temperature},
                       meta={"task": "crawl_referenceability"})

    async def main():
        state = open_campaign_state("outline", root=tmp_path, cap_usd=worst * (1 + 1e-9))
        try:
            async with serve(make_app(require_auth=False)) as base, HttpClient(default_policy=HostPolicy(timeout_s=10.0)) as http:
                prov = OpenAICompatProvider(ProviderSettings(kind="openai", model=m_ref.model, base_url=base + "/v1"), http)
                await metered_generate(prov, req, ledger=state.ledger, model_cfg=m_ref,
                                       input_estimate_factor=cfg.budget.input_estimate_factor)
            return state.ledger.summary()
        finally:
            state.close()

    ledger = asyncio.run(main())
    assert ledger.calls == 1 and ledger.open_reservations == 0


@pytest.mark.parametrize("kind, section", [("geoverify", 'trials = "release"\nn_boot = 0'),
                                           ("geohint", 'images = "release"\nconditions = ["baseline"]')])
def test_a_campaign_on_a_crawl_whose_trials_were_moved_aside_says_so(isolated_roots, capsys, monkeypatch, kind,
                                                                     section):
    """A crawl that ends incomplete moves its earlier ``verify_trials.csv`` to ``verify_trials.stale.csv`` (session 8).
    A campaign pointed at that folder then plans nothing; on main GeoVerify blamed the table's rows ("its
    verify_trials.csv gives no image with a signal candidate within tau ... (no usable row)": the stale file matched
    its ``verify_trials*.csv`` look-up) and neither kind named the stale file or why it is there."""
    from geoagent.cli import main
    from tests.test_crawl_handoff import _toml

    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # the campaign plans from its own crawl folder
    root = isolated_roots
    crawl = root / "crawl-out"
    crawl.mkdir()
    (crawl / "sites.csv").write_text("site,city,country,continent,lat,lon,qid,name_en\n"
                                     "s1,Turin,Italy,EU,45.07,7.68,Q495,Turin\n", encoding="utf-8")
    (crawl / "verify_trials.stale.csv").write_text(
        "image_id,site,path,img_lat,img_lon,cand,cand_lat,cand_lon,fam,dist_km,band,truth,arm\n"
        "1,s1,s1/1.jpg,45.07,7.68,Q1,45.07,7.68,3,0.01,b0,1,main\n", encoding="utf-8")
    cfg = _toml(root, f"{kind[:2]}-stale", kind, crawl, section)
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "verify_trials.stale.csv" in err and "incomplete" in err, err
    assert "no usable row" not in err


def test_a_dead_runs_pid_reused_by_the_new_run_itself_reads_killed(tmp_path):
    """In a container a run's process often has the same small pid at every start (pid 1, 7, ...), and a restarted
    container keeps its host name: the killed run's entry then names the new run's own pid. That process began
    after the old run did, so the old run is not its own: it reads ``killed`` (skipped as "this process" before)."""
    cfg = load_config(generic_campaign(tmp_path, name="reuse-self", n=3, models=model_table()))
    manifest = Manifest(cfg)
    first = manifest.start_run(command="run")
    data = orjson.loads(manifest.path.read_bytes())
    (entry,) = data["runs"]
    entry["started_unix"] = time.time() - 10 * 86400.0  # before this process (the container's previous life)
    _write(manifest.path, data)
    live = manifest.start_run(command="run")  # a run of this process that is still going: stays running
    second = manifest.start_run(command="run")
    runs = {r["run_id"]: r for r in _runs(manifest.state_dir)}
    assert runs[first]["status"] == "killed" and runs[first]["killed_found_by"] == live
    assert runs[live]["status"] == "running" and runs[second]["status"] == "running"


def test_a_geohint_campaign_whose_only_site_row_is_malformed_names_the_row(isolated_roots, capsys, monkeypatch):
    """A sites.csv whose rows are all malformed (here a continent name instead of a code) left the GeoHint plan
    empty with "no site (sites.csv empty or missing)": the file was there and the row was the problem."""
    from geoagent.cli import main
    from tests.test_crawl_handoff import _toml

    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # the campaign plans from its own crawl folder
    root = isolated_roots
    crawl = root / "crawl-out"
    crawl.mkdir()
    (crawl / "sites.csv").write_text("site,city,country,continent,lat,lon,qid,name_en\n"
                                     "s1,Turin,Italy,Europe,45.07,7.68,Q495,Turin\n", encoding="utf-8")
    cfg = _toml(root, "gh-badrow", "geohint", crawl, 'images = "release"\nconditions = ["baseline"]')
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = capsys.readouterr().err
    # the file and the row: "sites.csv: none of its 1 row(s) could be read (line 2: continent: ...)"
    assert "sites.csv: none of its 1 row(s) could be read (line 2: continent" in err and "nothing was run" in err, err
