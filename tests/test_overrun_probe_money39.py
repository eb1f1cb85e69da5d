"""First-bill probe of the overrun guard (money39 #3): near the cap, until a paid model's first call of a kind (with an
image, or without) has been billed in this process, one call of that model and kind at a time; far from the cap (100 x
concurrency x worst case left, billing.PROBE_HEADROOM) no probe.

The overrun guard (geoagent.workers.billing.OverrunGuard) raises a model's reservations once a call billed above
its worst case, but every call already in flight started on the low reservation: a vision model at concurrency 20
billing ~10x its worst case passed the cap by up to 20 x 9 worst cases before the guard reacted. Here the local
OpenAI fake (geoagent.sandbox.llm_openai) bills each photo 765 input tokens where the config's
``image_input_tokens`` says 20, each answer held 0.2 s by a middleware that also counts the calls in flight.
"""

from __future__ import annotations

import asyncio
import dataclasses
import io
import time
from pathlib import Path

import anyio
from _made_up_keys import made_up_key
from _model_harness import CallerRig, billed, write_model_config
from aiohttp import web
from PIL import Image

from geoagent.config import image_size_px
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import BudgetStop, PermanentFailure
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import _worst_usd, build_request

KEY_VAR = "OVERRUN_PROBE_KEY"
PRICE_IN, PRICE_OUT = 2.0, 0.5  # USD per 1M tokens: the image's input dominates each bill
#: the image's worst case in the config; the fake bills 765 (its simulated image), so each call ~10x its worst case
IMAGE_TOKENS = 20
CONCURRENCY = 20


class InFlight:
    """A middleware for the fake: holds each answer ``delay_s`` s and records the calls in flight at each arrival;
    with ``fail_first`` the first request is answered 400 (a refusal: not billed) at once."""

    def __init__(self, delay_s: float = 0.2, fail_first: bool = False) -> None:
        self.delay_s, self.fail_first = delay_s, fail_first
        self.now = 0
        self.at_arrival: list[int] = []  # calls in flight when each request arrived (itself included)
        self.hold: asyncio.Event | None = None  # when set: the answers wait for it

    def middleware(self):
        """The aiohttp middleware (insert it first in the app's list)."""

        @web.middleware
        async def in_flight(request: web.Request, handler):
            if request.path != "/v1/chat/completions":
                return await handler(request)
            self.now += 1
            self.at_arrival.append(self.now)
            try:
                if self.fail_first and len(self.at_arrival) == 1:
                    return web.json_response({"error": {"message": "invalid image", "type": "invalid_request_error"}},
                                             status=400)
                if self.hold is not None:
                    await self.hold.wait()
                await asyncio.sleep(self.delay_s)
                return await handler(request)
            finally:
                self.now -= 1

        return in_flight


def _photo(tmp_path):
    p = tmp_path / "p.jpg"
    Image.new("RGB", (640, 480), (90, 120, 150)).save(p, "JPEG")
    return str(p)


def _task(i: int, photo: str) -> Task:
    return Task(key=f"t{i}", payload={"model": "m", "prompt": f"Where was photo {i} taken? Name the city.",
                                      "image_ref": photo}, attempts=0, lease_id="x")


def _config(tmp_path, base: str, cap_usd: float):
    return write_model_config(tmp_path / "c.toml", base, name="probe", key_var=KEY_VAR, cap_usd=cap_usd,
                              price_in=PRICE_IN, price_out=PRICE_OUT, max_output_tokens=50, concurrency=CONCURRENCY,
                              rate_requests=1000, extra=f"image_input_tokens = {IMAGE_TOKENS}\n")


def _worst(tmp_path, base: str, photo: str) -> float:
    """One photo call's worst case (USD), as the model caller prices it once the photo is loaded."""
    priced = _config(tmp_path, base, 1.0)
    m, req = build_request(priced, _task(0, photo).payload)
    data = Path(photo).read_bytes()
    req = dataclasses.replace(req, image=data, image_mime="image/jpeg")
    return _worst_usd(m, req, True, image_size_px(None, None, data), priced.budget.input_estimate_factor)


def _reserved_and_cost(rig) -> list[tuple[float, float]]:
    rows = rig.state.db.read("SELECT amount_nusd, actual_nusd FROM reservations WHERE state = 'settled' ORDER BY id")
    return [(a / 1e9, (c or 0) / 1e9) for a, c in rows]


def _gateway(tmp_path, monkeypatch, seed: str, **in_flight):
    """A test's set-up: a made-up key in ``KEY_VAR`` (``seed``), the photo, and the OpenAI fake (seed 5) behind an
    :class:`InFlight` middleware (``in_flight``: its arguments): ``(photo, middleware, app)``."""
    monkeypatch.setenv(KEY_VAR, made_up_key("sk-", 40, seed=seed))
    mw = InFlight(**in_flight)
    app = make_app(seed=5)
    app.middlewares.insert(0, mw.middleware())
    return _photo(tmp_path), mw, app


def test_spend_stays_within_the_cap_plus_one_calls_overrun_at_concurrency_20(tmp_path, monkeypatch):
    """40 photo tasks at once, concurrency 20, a cap of 25 worst cases: before the fix 20 calls went out on
    the low reservation and the provider billed ~10x the cap; now the first call goes alone, its bill sets the
    guard's factor, and the later calls reserve that, so the bill passes the cap by at most one call's overrun."""
    photo, mw, app = _gateway(tmp_path, monkeypatch, "probe39")

    async def main():
        async with serve(app) as base, HttpClient() as http:
            worst = _worst(tmp_path, base, photo)
            cap = 25 * worst  # 20 worst cases and more: before the fix all 20 went out on them
            cfg = _config(tmp_path, base, cap)
            rig = await CallerRig(tmp_path, cfg, http).start()
            started = time.monotonic()
            outs = await asyncio.gather(*(rig.handle(_task(i, photo)) for i in range(40)), return_exceptions=True)
            return worst, cap, outs, rig, time.monotonic() - started

    worst, cap, outs, rig, took_s = anyio.run(main)
    unexpected = [o for o in outs if isinstance(o, BaseException) and not isinstance(o, BudgetStop)]
    assert not unexpected, unexpected
    calls = billed(app["calls"])
    bill = sum(c["input_tokens"] * PRICE_IN + c["output_tokens"] * PRICE_OUT for c in calls) / 1e6
    settled = _reserved_and_cost(rig)
    over = max(cost - reserved for reserved, cost in settled)
    assert settled[0][1] > 9 * worst  # the fake did bill ~10x the worst case (the overrun this test is about)
    assert len(calls) >= 2  # the cap let calls through after the probe's bill
    assert bill <= cap + over + 1e-9, (bill, cap, over, len(calls))  # was ~10x the cap: 20 calls on the low reservation
    summary = rig.state.ledger.summary()
    assert abs(summary.spent_usd - bill) < 1e-6 and summary.reserved_usd == 0  # the ledger counts what was billed
    assert mw.at_arrival[0] == 1 and mw.at_arrival[1] == 1  # the probe went alone (then the cap let one at a time)
    assert settled[0][0] < worst * 1.001 and all(r >= settled[0][1] * 0.99 for r, _ in settled[1:])
    assert took_s < 30


def test_full_concurrency_after_the_first_bill_and_a_failed_probe_passes_its_turn(tmp_path, monkeypatch):
    """The first call is refused (HTTP 400: released, not billed): the next waiting call becomes the probe (no
    deadlock), and once it is billed the others go at the model's full concurrency."""
    photo, mw, app = _gateway(tmp_path, monkeypatch, "probe39b", delay_s=0.5, fail_first=True)

    async def main():
        async with serve(app) as base, HttpClient() as http:
            # 200 worst cases: room for the 11 bills (~10 worst cases each), near enough the cap to probe
            rig = await CallerRig(tmp_path, _config(tmp_path, base, 200 * _worst(tmp_path, base, photo)), http).start()
            return await asyncio.wait_for(asyncio.gather(*(rig.handle(_task(i, photo)) for i in range(12)),
                                                         return_exceptions=True), 30)

    outs = anyio.run(main)
    failed = [o for o in outs if isinstance(o, BaseException)]
    assert len(failed) == 1 and isinstance(failed[0], PermanentFailure), failed
    assert mw.at_arrival[:2] == [1, 1]  # the refused probe, then the next one alone
    assert max(mw.at_arrival) == 10  # then the other ten at once
    assert len(billed(app["calls"])) == 11


def test_a_stored_answer_does_not_wait_for_the_probe_and_a_new_process_probes_again(tmp_path, monkeypatch):
    """A task whose answer is stored is answered while the kind's probe is still on the wire (no paid call, no wait);
    a new process over the same state (a resumed run) knows no bill, so its first call probes again."""
    photo, mw, app = _gateway(tmp_path, monkeypatch, "probe39c", delay_s=0.0)

    async def main():
        async with serve(app) as base, HttpClient() as http:
            cfg = _config(tmp_path, base, 200 * _worst(tmp_path, base, photo))  # near enough the cap to probe
            first = await CallerRig(tmp_path, cfg, http).start()
            await first.handle(_task(0, photo))  # run 1 answered task 0
            rig = await CallerRig(tmp_path, cfg, http).start()  # run 2: a new process
            mw.hold = asyncio.Event()
            probe = asyncio.ensure_future(rig.handle(_task(1, photo)))
            while mw.now < 1:
                await asyncio.sleep(0.01)
            waiting = asyncio.ensure_future(rig.handle(_task(2, photo)))
            [(_, stored)] = await asyncio.wait_for(rig.handle(_task(0, photo)), 5)  # while the probe is held
            await asyncio.sleep(0.1)
            in_flight_while_probing = mw.now
            assert not waiting.done()
            mw.hold.set()
            await asyncio.wait_for(asyncio.gather(probe, waiting), 10)
            return stored, in_flight_while_probing

    stored, in_flight = anyio.run(main)
    assert stored["cached"] is True
    assert in_flight == 1  # task 2 waited for run 2's probe, the stored task 0 did not
    assert len(billed(app["calls"])) == 3  # tasks 0 (run 1), 1 and 2; the stored answer was not paid again


def test_the_auditors_probe_first_and_reserve_the_bill_after_it(tmp_path):
    """The crawl's audit calls share the guard: five audits at once send one first, and the other four reserve what
    it billed; without the probe all five went on the low reservation."""
    from geoagent.config import ModelConfig
    from geoagent.crawl.llmcall import metered_generate
    from geoagent.providers import make_provider
    from geoagent.providers.base import ModelRequest
    from geoagent.providers.settings import ProviderSettings
    from geoagent.runtime.store import open_campaign_state
    from geoagent.workers.billing import OverrunGuard

    mw = InFlight(delay_s=0.1)
    app = make_app(seed=5, require_auth=False)
    app.middlewares.insert(0, mw.middleware())
    buf = io.BytesIO()
    Image.new("RGB", (320, 240), (80, 120, 160)).save(buf, format="JPEG")
    model = ModelConfig(name="auditor", provider="openai", model="gateway-vision-1", price_input_usd_per_mtok=PRICE_IN,
                        price_output_usd_per_mtok=PRICE_OUT, max_output_tokens=50, image_input_tokens=IMAGE_TOKENS)
    guard = OverrunGuard()

    def request(i: int) -> ModelRequest:
        return ModelRequest(provider="openai", model="gateway-vision-1", prompt=f"Audit image {i}.", image_id=f"i{i}",
                            image=buf.getvalue(), params={"max_output_tokens": 50})

    async def main():
        # ~80 worst cases: room for the five bills, near enough the cap to probe
        state = open_campaign_state("audit-probe", root=tmp_path, cap_usd=0.01)
        try:
            async with serve(app) as base, HttpClient() as http:
                prov = make_provider(ProviderSettings(kind="openai", model="gateway-vision-1", base_url=base + "/v1",
                                                      api_key="made-up-local"), http)
                await asyncio.gather(*(metered_generate(prov, request(i), ledger=state.ledger, model_cfg=model,
                                                        store=state.store, overrun=guard) for i in range(5)))
            return state.ledger.db.read("SELECT amount_nusd, actual_nusd FROM reservations ORDER BY id")
        finally:
            state.close()

    rows = [(a / 1e9, c / 1e9) for a, c in anyio.run(main)]
    (first_reserved, first_cost), later = rows[0], rows[1:]
    assert first_cost > 9 * first_reserved  # the overrun
    assert all(r >= first_cost * 0.99 for r, _ in later) and all(c <= r * 1.01 for r, c in later)
    assert mw.at_arrival[:2] == [1, 1] and max(mw.at_arrival) == 4


def test_far_from_the_cap_the_first_call_does_not_probe(tmp_path, monkeypatch):
    """With far more left under the cap than 100 x concurrency x worst case (billing.PROBE_HEADROOM) even a first wave
    billing 100x its worst case fits, so the run starts at full concurrency: no start-up time lost."""
    photo, mw, app = _gateway(tmp_path, monkeypatch, "probe39d", delay_s=0.3)

    async def main():
        async with serve(app) as base, HttpClient() as http:
            cap = 101 * CONCURRENCY * _worst(tmp_path, base, photo)
            rig = await CallerRig(tmp_path, _config(tmp_path, base, cap), http).start()
            return await asyncio.wait_for(asyncio.gather(*(rig.handle(_task(i, photo)) for i in range(10))), 30)

    anyio.run(main)
    assert max(mw.at_arrival) == 10  # all ten at once from the start


def test_a_stop_abandons_the_calls_waiting_for_the_probe(tmp_path, monkeypatch):
    """A stop request while calls wait for the probe's bill: they are abandoned unsent (released untouched, nothing
    reserved), within the guard's poll (billing.PROBE_POLL_S), not after the probe's answer."""
    from geoagent.runtime.stage import Abandoned

    photo, mw, app = _gateway(tmp_path, monkeypatch, "probe39e", delay_s=0.0)

    async def main():
        async with serve(app) as base, HttpClient() as http:
            rig = await CallerRig(tmp_path, _config(tmp_path, base, 200 * _worst(tmp_path, base, photo)), http).start()
            mw.hold = asyncio.Event()
            probe = asyncio.ensure_future(rig.handle(_task(0, photo)))
            while mw.now < 1:
                await asyncio.sleep(0.01)
            waiting = [asyncio.ensure_future(rig.handle(_task(i, photo))) for i in range(1, 4)]
            await asyncio.sleep(0.1)
            rig.stage.stop_requested()
            stopped = await asyncio.wait_for(asyncio.gather(*waiting, return_exceptions=True), 2)
            mw.hold.set()  # the probe, already sent, finishes
            await asyncio.wait_for(probe, 10)
            return stopped, rig.reservations()

    stopped, reservations = anyio.run(main)
    assert all(isinstance(e, Abandoned) for e in stopped), stopped
    assert [state for _, state in reservations] == ["settled"]  # the probe's; the waiting calls reserved nothing
