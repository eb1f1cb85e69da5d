"""The dry run's model-call time of models paced by their host's ``[hosts]`` entry alone (adversarial review,
session 9).

A model on a host with a ``[hosts]`` entry that sets neither ``rate`` nor ``concurrency`` has no limit key of its
own (:func:`geoagent.config._own_limit`): the HTTP layer resolves its key to the host's state, so every such model
on the host shares ONE rate (and, with a model that has its own key there, the ceiling over them all). The dry run
summed each model's time under its own "host/model" key and took the maximum, so two such models of 12 calls at
4/s were forecast at 3 s while the run took 6 s (arrivals counted server-side by the Gemini fake).
"""

from __future__ import annotations

import time
import warnings

import anyio
import pytest

from _model_harness import generic_campaign
from geoagent.config import estimate, load_config
from geoagent.engine import run_campaign
from geoagent.sandbox.faults import find_fault_state
from geoagent.sandbox.llm_gemini import make_app as gemini_app
from geoagent.sandbox.server import serve

KEY = "local-host-entry"


def _table(name: str, base: str, model: str, extra: str = "") -> str:
    """A Gemini ``[[models]]`` table with no ``rate`` or ``concurrency`` unless ``extra`` sets them."""
    return (f'\n[[models]]\nname = "{name}"\nprovider = "gemini"\nmodel = "{model}"\nbase_url = "{base}"\n'
            f'api_key_env = "GEM_KEY"\nprice_input_usd_per_mtok = 0.1\nprice_output_usd_per_mtok = 0.4\n'
            f'max_output_tokens = 50\nmax_attempts = 5\ntimeout_s = 5.0\n{extra}')


def _load(path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_config(path)


def _planned(n: int, models: tuple[str, ...]) -> list[dict]:
    return [{"model": m, "prompt": f"where is photo {i}?"} for m in models for i in range(n)]


def test_models_paced_by_the_hosts_entry_alone_share_its_rate_in_the_forecast(tmp_path):
    """Two models on one host, neither with a limit of its own, under ``[hosts."H"] rate = 4``: 12 calls each
    take 24 / 4 = 6 s in total (one shared rate), not 3 s; a third model with its own rate there shares the
    ceiling with them too."""
    base = "http://127.0.0.1:9"
    host = "127.0.0.1:9"
    models = _table("a", base, "gem-a") + _table("b", base, "gem-b") + f'\n[hosts."{host}"]\nrate = 4\nconcurrency = 8\n'
    cfg = _load(generic_campaign(tmp_path, name="hostentry", n=1, models=models))
    est = estimate(cfg, _planned(12, ("a", "b")))
    assert est.calls == 24
    assert est.duration_s == pytest.approx(6.0), est.duration_s
    # mixed: c has its own rate (its own key, under the ceiling); a and b are paced by the host's state, which is
    # the very ceiling c's calls also pass: 36 calls under one 4/s ceiling take 9 s
    mixed = models + _table("c", base, "gem-c", 'rate = { requests = 20, period_s = 1.0 }\n')
    cfg2 = _load(generic_campaign(tmp_path, name="hostentry2", n=1, models=mixed))
    est2 = estimate(cfg2, _planned(12, ("a", "b", "c")))
    assert est2.duration_s == pytest.approx(9.0), est2.duration_s


def test_the_forecast_matches_the_measured_run_behind_the_fake(tmp_path, monkeypatch):
    """The same two models behind the Gemini fake at ``[hosts] rate = 4``: the dry run's total time is within
    1.2 s of the span of the real run's arrivals (12 calls each: bursts of 4 a second apart, about 5 s; the old
    forecast said 3 s)."""
    monkeypatch.setenv("GEM_KEY", KEY)
    app = gemini_app(api_keys=[KEY])

    async def go():
        async with serve(app) as b:
            host = b.split("//", 1)[1]
            models = (_table("a", b, "gem-a") + _table("b", b, "gem-b")
                      + f'\n[hosts."{host}"]\nrate = 4\nconcurrency = 8\n')
            cfg = _load(generic_campaign(tmp_path, name="hostentryrun", n=12, cap_usd=5.0, models=models))
            dry = await run_campaign(cfg, live=False, handle_signals=False, export=False, simulate=True)
            t0 = time.monotonic()
            out = await run_campaign(cfg, live=False, handle_signals=False, export=False)
            return dry, out, time.monotonic() - t0

    dry, out, _ = anyio.run(go)
    assert out.status == "complete"
    ts = sorted(r.t_mono for r in find_fault_state(app).log)
    assert len(ts) == 24
    (total,) = [ln for ln in dry.extra_lines if "total:" in ln]
    forecast_s = float(total.split("about ")[1].split(" s of model calls")[0])
    measured_s = ts[-1] - ts[0]
    assert measured_s >= 4.5, measured_s  # one shared 4/s rate: 24 calls span about 5 s
    assert abs(forecast_s - measured_s) <= 1.2, (forecast_s, measured_s, total)
