"""Simulated provider and the responder registry: determinism, usage model, registry order and fallbacks."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.sandbox import responders


def _gen(request: ModelRequest, seed: int = 0):
    prov = make_provider(ProviderSettings(kind="simulated", model=request.model, seed=seed))
    return asyncio.run(prov.generate(request))


def _req(prompt: str = "Is this photo within 150 m of the Town Hall? Answer JSON.", **kw) -> ModelRequest:
    base = {"provider": "simulated", "model": "sim-1", "prompt": prompt, "image_id": "42", "params": {"max_output_tokens": 300}}
    base.update(kw)
    return ModelRequest(**base)


def test_deterministic_and_seeded():
    a, b = _gen(_req()), _gen(_req())
    assert a.text == b.text and a.usage == b.usage and a.finish_reason == b.finish_reason == "stop"
    texts_by_seed = {_gen(_req(), seed=s).text for s in range(12)}
    assert len(texts_by_seed) > 1  # the seed changes answers
    texts_by_key = {_gen(_req(image_id=str(i))).text for i in range(12)}
    assert len(texts_by_key) > 1  # so does the request key
    json.loads(a.text)  # the default answer is JSON


def test_usage_model_by_hand():
    prompt = "p" * 1001
    r = _req(prompt=prompt, image=b"\xff\xd8jpeg", params={"max_output_tokens": 300, "system": "s" * 10})
    out = _gen(r)
    assert out.usage.input_tokens == math.ceil(1011 / 4) + 765  # image bytes attached -> image counted
    assert out.usage.output_tokens == math.ceil(len(out.text) / 4)
    text_only = _gen(_req(prompt=prompt, image_id=None))
    assert text_only.usage.input_tokens == math.ceil(1001 / 4)
    id_only = _gen(_req(prompt=prompt))  # an image id without bytes seeds the answer but costs nothing
    assert id_only.usage.input_tokens == math.ceil(1001 / 4)


def test_truncation_at_output_cap():
    out = _gen(_req(params={"max_output_tokens": 2}))
    assert out.finish_reason == "length" and out.usage.output_tokens == 2 and len(out.text) == 8


def test_registered_responder_answers_and_order():
    seen = []

    def verdict(ctx: responders.SimContext) -> str:
        seen.append(ctx)
        return json.dumps({"verdict": ctx.rng.choice(["yes", "no"]), "image": ctx.image_id})

    responders.register_responder("test-verdict", lambda p: "VERIFY-TEST" in p, verdict)
    responders.register_responder("test-never", lambda p: "VERIFY-TEST" in p, lambda ctx: "shadowed")
    try:
        out = _gen(_req(prompt="VERIFY-TEST: is it here?"))
        data = json.loads(out.text)
        assert data["verdict"] in ("yes", "no") and data["image"] == "42"
        assert seen[0].key == _req(prompt="VERIFY-TEST: is it here?").key() and seen[0].model == "sim-1"
        # replacing by name keeps the position; a non-matching prompt falls back to the default
        responders.register_responder("test-verdict", lambda p: "VERIFY-TEST" in p, lambda ctx: "replaced")
        assert _gen(_req(prompt="VERIFY-TEST again")).text == "replaced"
        assert "answer" in json.loads(_gen(_req(prompt="unrelated")).text)
    finally:
        responders.unregister_responder("test-verdict")
        responders.unregister_responder("test-never")
    assert "test-verdict" not in responders.responder_names()


def test_faulty_matcher_is_skipped():
    def boom(prompt: str) -> bool:
        raise RuntimeError("bad matcher")

    responders.register_responder("test-boom", boom, lambda ctx: "never")
    try:
        assert "answer" in json.loads(responders.respond("anything", None, "m", 0))
    finally:
        responders.unregister_responder("test-boom")


def test_rng_depends_on_key_or_content():
    r1 = responders.make_rng("p", "1", "m", 0).random()
    assert r1 == responders.make_rng("p", "1", "m", 0).random()
    assert r1 != responders.make_rng("p", "2", "m", 0).random()
    assert r1 != responders.make_rng("p", "1", "m", 1).random()
    # with a key, only (key, seed) matter
    assert responders.make_rng("a", None, "x", 3, key="k").random() == responders.make_rng("b", "9", "y", 3, key="k").random()


def test_load_builtin_responders_tolerates_missing_modules():
    mods = ("geoagent.no_such_pkg.simulate", "geoagent.geoverify.no_such_simulate", "geoagent.sandbox.faults")
    assert responders.load_builtin_responders(mods) == ["geoagent.sandbox.faults"]
    loaded = responders.load_builtin_responders()
    assert set(loaded) <= set(responders.BUILTIN_RESPONDER_MODULES)


@pytest.mark.parametrize("n", [0, 1, 5])
def test_truncate_to_tokens(n):
    text, cut = responders.truncate_to_tokens("abcdefghij", n)
    assert text == "abcdefghij"[: 4 * n] and cut == (4 * n < 10)


def test_simulated_over_http_matches_in_process():
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.server import serve

    reqs = [_req(prompt=f"question {i}", image_id=str(i), image=b"img%d" % i if i % 2 else None) for i in range(4)]
    local = [_gen(r, seed=7) for r in reqs]

    async def run():
        app = llm_openai.make_app(seed=7, require_auth=False)
        async with serve(app) as url, HttpClient(default_policy=HostPolicy(backoff_base_s=0.01, backoff_max_s=0.05)) as http:
            prov = make_provider(ProviderSettings(kind="simulated", model="sim-1", seed=7, base_url=url + "/v1"), http)
            outs = [await prov.generate(r) for r in reqs]
            await prov.aclose()
        return outs, app

    remote, app = asyncio.run(run())
    for a, b in zip(local, remote, strict=True):
        assert a.text == b.text and a.usage == b.usage and a.finish_reason == b.finish_reason
    assert [c["key"] for c in app["calls"]] == [r.key() for r in reqs]
