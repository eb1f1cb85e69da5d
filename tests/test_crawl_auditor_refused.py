"""A crawl whose auditor model's host refuses its API key (HTTP 401) or its account for billing (HTTP 402) stops that
auditor at the first refusal, as the model caller's authentication breaker stops an evaluated model and as the crawl's
refused Mapillary token stops the crawl: exit 5, a line naming the key's variable (never its value), the auditor's
tasks held and left queued untouched (never dead-lettered, so no ``--requeue``), and a re-run once the key is fixed
completes with each audit request paid once (geoagent.crawl.llmcall.AuditorBreaker).

Before: every site's image-audit task was dead-lettered with the 401 (deliveries 1), the run ended ``incomplete``,
and the fix needed ``run.py dead --requeue`` as well as the right key."""

from __future__ import annotations

from pathlib import Path

import anyio
from aiohttp import web

from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve

from _model_harness import paid_keys
from test_overrun_guard_s34 import _app as billing_app

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
KEY_VAR = "GEOAGENT_TEST_AUDITOR_KEY"
GOOD, BAD = "auditor-key-accepted", "auditor-key-refused-by-host"
SANDBOX_URL = 'base_url = "http://openai.sandbox.invalid/v1"'


def _config(tmp: Path, name: str, vision_url: str, text_url: str) -> Path:
    """crawl_sandbox.toml with both auditor models on local servers, keyed by ``KEY_VAR``."""
    text = CONFIG.read_text(encoding="utf-8").replace('name = "crawl-sandbox"', f'name = "{name}"', 1)
    assert text.count(SANDBOX_URL) == 2, "the sandbox crawl config changed: adapt this test"
    first, rest = text.split(SANDBOX_URL, 1)
    text = (first + f'base_url = "{vision_url}"\napi_key_env = "{KEY_VAR}"'
            + rest.replace(SANDBOX_URL, f'base_url = "{text_url}"\napi_key_env = "{KEY_VAR}"', 1))
    p = tmp / f"{name}.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _counts(roots: Path, campaign: str, edge: str):
    q = SQLiteQueue.open(roots / "queues", campaign, edge)
    try:
        return q.counts_sync(), q.dead_letters_sync(10)
    finally:
        q.close_sync()


def _runs(path: Path, app: web.Application, keys: list[str], other: web.Application | None = None) -> list:
    """Run the crawl of ``path`` once per key in ``keys`` (set as ``KEY_VAR`` before each run), with the auditor
    models on ``app`` (the text auditor on ``other`` when given), all in one event loop (an aiohttp app is bound to
    the loop that first served it)."""
    import os

    async def main() -> list:
        outs = []
        async with serve(app) as base, serve(other or web.Application()) as base2:
            p = _config(path.parent, path.stem, base + "/v1", (base2 if other is not None else base) + "/v1")
            for key in keys:
                os.environ[KEY_VAR] = key  # restored by the test's monkeypatch
                outs.append(await run_campaign(load_config(p), live=False, handle_signals=False))
        return outs

    return anyio.run(main)


def test_a_refused_auditor_key_holds_its_tasks_and_the_rerun_with_the_key_completes(isolated_roots, monkeypatch):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    monkeypatch.setenv(KEY_VAR, BAD)
    app = make_app(api_keys=[GOOD])
    name = "crawl-auditor-401"
    out, again = _runs(isolated_roots / f"{name}.toml", app, [BAD, GOOD])
    text = out.summary()
    assert (out.status, out.exit_code) == ("authentication failed", 5), text
    assert f"authentication failed for model sandbox-vision-auditor (HTTP 401): check {KEY_VAR}" in text
    assert BAD not in text
    images = out.counts["images"]  # as the first run left them
    assert (images.leased, images.dead, images.done) == (0, 0, 0) and not out.dead and images.ready > 0, text
    assert f"{images.ready} images left queued" in text
    # the first refusal stopped the auditor: at most the calls already in flight (its concurrency, 4) were refused
    refused = [c for c in app["calls"] if c.get("status") == 401]
    assert 1 <= len(refused) <= 4, len(refused)
    # the right key: the same command audits every image and rates every site, each request paid once
    assert (again.status, again.exit_code) == ("complete", 0), again.summary()
    paid = paid_keys(app)
    assert len(paid) == again.spend["calls"] > 0 and max(paid.values()) == 1, paid.most_common(3)


def test_a_billing_refusal_of_the_text_auditor_stops_rating_and_keeps_the_image_audits(isolated_roots, monkeypatch):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    monkeypatch.setenv(KEY_VAR, GOOD)
    refused: list[int] = []

    async def no_credit(request: web.Request) -> web.Response:  # OpenRouter's 402 (api-notes: insufficient credits)
        refused.append(1)
        return web.json_response({"error": {"code": 402, "message": "Insufficient credits. Add more using "
                                            "https://openrouter.ai/settings/credits"}}, status=402)

    billing = web.Application()
    billing.router.add_post("/v1/chat/completions", no_credit)
    app = make_app(api_keys=[GOOD])
    name = "crawl-auditor-402"
    (out,) = _runs(isolated_roots / f"{name}.toml", app, [GOOD], billing)
    text = out.summary()
    assert (out.status, out.exit_code) == ("authentication failed", 5), text
    assert "the provider refused model sandbox-text-auditor for billing (HTTP 402" in text
    rated, dead = _counts(isolated_roots, name, "sites_for_audit")
    assert (rated.dead, rated.done, rated.leased) == (0, 0, 0) and dead == [] and rated.ready > 0, text
    images, _ = _counts(isolated_roots, name, "images")
    assert images.done > 0 and images.dead == 0  # the vision auditor's work went on and is kept
    assert len(refused) == 1  # the rating stage runs one site at a time: one refusal stopped it


def test_the_auditors_overrun_guard_raises_the_reservation_after_a_bill_above_it(tmp_path):
    """The crawl's audit calls share the model caller's overrun guard (geoagent.workers.billing.OverrunGuard): after
    a call billed above its reservation, the same auditor's later calls of the kind reserve the worst case times the
    bill-to-worst-case ratio seen. Before, every audit call reserved the bare worst case again."""
    import io

    from PIL import Image

    from geoagent.config import ModelConfig
    from geoagent.crawl.llmcall import metered_generate
    from geoagent.providers import make_provider
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.settings import ProviderSettings
    from geoagent.runtime.http import HttpClient
    from geoagent.runtime.store import open_campaign_state
    from geoagent.workers.billing import OverrunGuard

    # a Chat Completions server billing each call the input tokens listed: far above the 1,600-token image budget
    app = billing_app([20_000, 20_000, 20_000])
    buf = io.BytesIO()
    Image.new("RGB", (320, 240), (80, 120, 160)).save(buf, format="JPEG")
    model = ModelConfig(name="auditor", provider="openai", model="gateway-vision-1", price_input_usd_per_mtok=1.0,
                        price_output_usd_per_mtok=4.0, max_output_tokens=100)
    guard = OverrunGuard()

    def request(i: int) -> ModelRequest:
        return ModelRequest(provider="openai", model="gateway-vision-1", prompt=f"Audit image {i}.", image_id=f"i{i}",
                            image=buf.getvalue(), params={"max_output_tokens": 100})

    async def main() -> list[float]:
        state = open_campaign_state("audit-guard", root=tmp_path, cap_usd=10.0)
        try:
            async with serve(app) as base, HttpClient() as http:
                prov = make_provider(ProviderSettings(kind="openai", model="gateway-vision-1", base_url=base + "/v1",
                                                      api_key="made-up-local"), http)
                for i in range(3):
                    await metered_generate(prov, request(i), ledger=state.ledger, model_cfg=model,
                                           store=state.store, overrun=guard)
            return [a / 1e9 for (a,) in state.ledger.db.read("SELECT amount_nusd FROM reservations ORDER BY id")]
        finally:
            state.close()

    first, second, third = anyio.run(main)
    bill = (20_000 * 1.0 + 8 * 4.0) / 1e6
    assert first < bill  # the first call's worst case did not cover its bill (an overrun)
    assert second == third and abs(second - bill) < 1e-8  # later calls reserve worst x (bill / worst) = the bill
    assert guard.factor("auditor", True) > 1.0 and guard.factor("auditor", False) == 1.0
