"""``run --watch`` while it keeps running: what ``status`` says about hosts that were down.

Two gaps (session 8): (1) an error from a host that has since answered again stayed the "last error" until the
whole campaign was complete; now, as soon as the host answered a request after the error (its breaker's probe
got through, later calls succeeded), ``status`` lists it as ``earlier error (resolved: host H answered again at
HH:MM:SS UTC)`` while the run goes on, and an error of a host still down stays the ``last error``. (5) The ETA
read "0 s" while every task of a model was held waiting for its unreachable host; it now says the ETA is
unknown while waiting for that host.

End to end: the real engine, queues, model caller, HTTP client and OpenAI-compatible fakes; model ``good``
answers at once, ``flaky``'s server comes up on its port during the run, ``dead``'s never does.
``status`` reads the campaign's files as another process would (:func:`geoagent.status.campaign_status`).
"""

from __future__ import annotations

import re
import signal

import anyio

from _model_harness import generic_campaign, model_table, paid_keys
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.progress import eta_waits, read_last
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import free_port, serve
from geoagent.status import campaign_status, format_eta, format_status

KEY = "sk-" "sandbox-recover-0123456789abcdefghijkl"


def _model(name: str, base: str, rate: int = 5000) -> str:
    return model_table(name, base_url=base, key_var="GA_TEST_RECOVER_KEY", model=f"sim-{name}",
                       max_output_tokens=64, concurrency=4, rate_requests=rate) + "max_attempts = 2\n"


def _waiting_models(rec: dict) -> set[str]:
    return {w.get("model") for sd in rec.get("stages", []) for w in sd.get("host_waits") or []}


def _config(tmp_path, name: str, n: int, models: str):
    return load_config(generic_campaign(
        tmp_path, name=name, n=n, cap_usd=5.0, models=models,
        queue={"max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.05,
               "watch_probe_after_s": 0.3, "watch_probe_max_s": 0.6}))


def _lines(text: str, start: str) -> list[str]:
    return [ln.strip() for ln in text.splitlines() if ln.strip().startswith(start)]


def test_watch_eta_is_unknown_while_a_models_tasks_wait_for_its_host_not_0_s(tmp_path, monkeypatch):
    n = 8
    monkeypatch.setenv("GA_TEST_RECOVER_KEY", KEY)
    good_app = llm_openai.make_app(api_keys=[KEY])
    dead = f"127.0.0.1:{free_port()}"
    seen: dict[str, object] = {}

    async def main():
        async with serve(good_app) as good_base:
            cfg = _config(tmp_path, "etawait", n, _model("good", good_base) + _model("dead", f"http://{dead}"))
            stream = cfg.state_dir() / "progress.jsonl"

            async def drive():
                with anyio.fail_after(60):
                    while not (len(paid_keys(good_app)) == n and _waiting_models(rec := read_last(stream) or {})
                               and rec["queues"]["requests"]["done"] == n):
                        await anyio.sleep(0.05)
                seen["rec"] = rec
                seen["status"] = format_status(campaign_status(cfg))
                signal.raise_signal(signal.SIGINT)

            async with anyio.create_task_group() as tg:
                tg.start_soon(drive)
                await run_campaign(cfg, live=False, handle_signals=True, export=False, watch=True)

    anyio.run(main)
    # every task of model dead is held for its unreachable host: the ETA is unknown, never "0 s"
    rec = seen["rec"]
    assert rec["eta_s"] is None and rec["eta_waiting"] == [{"host": dead, "stage": "model_caller", "model": "dead"}]
    assert format_eta(rec) == f"unknown while waiting for host {dead} (model dead)"
    text = seen["status"]
    assert "ETA 0 s" not in text and f"ETA unknown while waiting for host {dead} (model dead)" in text, text
    # a stage runner's own breaker waiting in watch mode counts too; the final record waits for nothing
    stage_wait = {"stage": "geocoder", "unreachable": {"h:1": {"requests": 5, "last": "x", "next_probe_in_s": 3.0}}}
    assert eta_waits([stage_wait]) == [{"host": "h:1", "stage": "geocoder", "model": None}]
    assert format_eta({"eta_s": None, "eta_waiting": eta_waits([stage_wait])}) == \
        "unknown while waiting for host h:1 (stage geocoder)"
    assert eta_waits([{"stage": "geocoder", "unreachable": {"h:1": {"requests": 5, "last": "x"}}}]) == []
