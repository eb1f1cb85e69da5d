"""Two entries naming one Gemini model, one as ``gem-a`` and one as ``models/gem-a`` (the API's resource name,
which the Gemini provider sends as the same model), share the model's limit key (adversarial review, session 9).

The limit key was ``host/<model as written>``, so the two spellings got a key each and the provider's one
per-model limit was exceeded: two entries at 5/s sent 20 calls in about a second. Checked against the Gemini
fake (the arrivals' span, server side) and on the config's keys.
"""

from __future__ import annotations

import asyncio
import warnings

import anyio

from _model_harness import generic_campaign, model_providers
from geoagent.config import http_limits, load_config, model_limit_key
from geoagent.runtime.http import HttpClient
from geoagent.sandbox.faults import find_fault_state
from geoagent.sandbox.llm_gemini import make_app as gemini_app
from geoagent.sandbox.server import serve
from test_http_per_model_limits import KEY, _gemini_table, _request


def test_models_prefix_spelling_shares_the_gemini_models_limit_key(tmp_path, monkeypatch):
    monkeypatch.setenv("GEM_KEY", KEY)
    app = gemini_app(api_keys=[KEY])

    async def go():
        async with serve(app) as base:
            models = _gemini_table("a", base, "gem-a", rate=5) + _gemini_table("a2", base, "models/gem-a", rate=5)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                cfg = load_config(generic_campaign(tmp_path, name="pfx", n=1, models=models))
            keys = {m.name: model_limit_key(m) for m in cfg.models}
            async with HttpClient(**http_limits(cfg)) as http:
                prov = model_providers(cfg, http)
                assert prov["a"].limit_key == prov["a2"].limit_key == keys["a"]
                await asyncio.gather(*(prov["a"].generate(_request("gem-a", i)) for i in range(10)),
                                     *(prov["a2"].generate(_request("models/gem-a", 100 + i)) for i in range(10)))
            return keys, set(http_limits(cfg)["model_policies"])

    keys, policy_keys = anyio.run(go)
    assert keys["a"] == keys["a2"] and keys["a"].endswith("/gem-a"), keys
    assert policy_keys == {keys["a"]}
    ts = sorted(r.t_mono for r in find_fault_state(app).log if r.path == "/v1beta/models/gem-a:generateContent")
    assert len(ts) == 20
    # one 5/s limit for the model: 20 calls need 4 windows after the first burst (~3 s), not ~1 s
    assert ts[-1] - ts[0] >= 2.5, ts[-1] - ts[0]
