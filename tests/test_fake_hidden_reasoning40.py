"""The fakes bill a reasoning model's hidden reasoning tokens on every answer (providers39 #4).

OpenAI reasoning models count their reasoning in ``completion_tokens`` (``completion_tokens_details.
reasoning_tokens``); Gemini thinking models bill ``thoughtsTokenCount`` as output beside ``candidatesTokenCount``.
Before, the fakes billed them only when they used up the whole cap, so the sandbox's thinking models cost like
plain ones and those usage fields never ran end to end. Here a campaign of each runs against its fake and the ledger
must count every hidden token the server billed.
"""

from __future__ import annotations

import anyio

from _made_up_keys import made_up_key
from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_gemini, llm_openai
from geoagent.sandbox.server import serve

N = 12
OA_KEY = made_up_key("sk-", 48, seed="hidden-reasoning-oa")
GM_KEY = made_up_key("AIza", 35, seed="hidden-reasoning-gm")


def _model(name: str, provider: str, model: str, base: str, var: str, extra: str = "") -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "{provider}"\nmodel = "{model}"\nbase_url = "{base}"\n'
            f'api_key_env = "{var}"\nprice_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 4.0\n'
            f'max_output_tokens = 30000\nconcurrency = 4{extra}\nrate = {{ requests = 5000, period_s = 1.0 }}\n')


def test_reasoning_and_thinking_tokens_are_billed_and_booked(tmp_path, monkeypatch):
    monkeypatch.setenv("HR_OA_KEY", OA_KEY)
    monkeypatch.setenv("HR_GM_KEY", GM_KEY)
    oa, gm = llm_openai.make_app(api_keys=[OA_KEY]), llm_gemini.make_app(api_keys=[GM_KEY])

    async def main():
        async with serve(oa) as oa_base, serve(gm) as gm_base:
            cfg = load_config(generic_campaign(
                tmp_path, name="hidden", n=N, cap_usd=20.0,
                models=_model("o4", "openai", "o4-mini", oa_base + "/v1", "HR_OA_KEY", "\nreasoning_model = true")
                + _model("flash", "gemini", "gemini-2.5-flash", gm_base, "HR_GM_KEY")))
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, outcome = anyio.run(main)
    assert outcome.status == "complete", outcome.stop_reasons
    calls = [c for app in (oa, gm) for c in app["calls"] if c.get("status") == 200]
    assert len(calls) == 2 * N
    # every answer: the hidden tokens plus a visible answer of its own
    assert all(c["output_tokens"] > llm_openai.REASONING_TOKENS for c in oa["calls"] if c.get("status") == 200)
    assert all(c["output_tokens"] > llm_gemini.THINKING_TOKENS for c in gm["calls"] if c.get("status") == 200)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        stored = list(st.store.iter_responses())
        summary = st.ledger.summary()
    assert summary.output_tokens == sum(c["output_tokens"] for c in calls)
    assert summary.input_tokens == sum(c["input_tokens"] for c in calls)
    assert sum(r["output_tokens"] for r in stored) == summary.output_tokens
    # the answers' text is a normal answer, not empty: the hidden tokens did not eat the visible answer
    assert all(r["output_tokens"] > 512 for r in stored)
