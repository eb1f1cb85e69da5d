"""Session 10 loose ends (branch s10-tidy): each test failed on main before its fix."""

from __future__ import annotations

import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict

register_all_sections()


# --- 1. [geoverify] boot_seed has a lower bound, as [geohint] boot_seed -----------------------------------
def _gv_doc(tmp_path, **geoverify) -> dict:
    return {"campaign": {"name": "gv-bs", "kind": "geoverify", "seed": 1, "contact": "ops@example.org"},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "budget": {"cap_usd": 1.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
            **({"geoverify": geoverify} if geoverify else {})}


def test_geoverify_boot_seed_is_refused_below_zero_at_load_naming_the_key(tmp_path):
    """Before: -1 passed validation and numpy's generator raised ValueError at report time."""
    from geoagent.config import ConfigError
    from geoagent.geoverify.settings import GeoVerifySettings

    assert GeoVerifySettings().boot_seed == 0
    assert config_from_dict(_gv_doc(tmp_path, boot_seed=0)).section("geoverify").boot_seed == 0
    assert config_from_dict(_gv_doc(tmp_path, boot_seed=12345)).section("geoverify").boot_seed == 12345
    for bad in (-1, -12345, "5", 2.5, True):
        with pytest.raises(ConfigError) as err:
            config_from_dict(_gv_doc(tmp_path, boot_seed=bad))
        assert "geoverify.boot_seed" in str(err.value)


# --- 2. the remaining exceptions with required arguments survive pickle ---------------------------------
#: built from parts so no key-shaped literal sits in the source
PROVIDER_KEY = "sk" + "-" + "PICKLESECRET" + "0123456789abcdef"


def _roundtrip(exc: BaseException) -> BaseException:
    import pickle

    back = pickle.loads(pickle.dumps(exc))
    assert type(back) is type(exc)
    assert str(back) == str(exc) and back.args == exc.args
    nested = {k for k, v in vars(exc).items() if isinstance(v, BaseException)}   # exceptions compare by identity
    assert {k: v for k, v in vars(back).items() if k not in nested} == {k: v for k, v in vars(exc).items() if k not in nested}
    for k in nested:
        assert type(getattr(back, k)) is type(getattr(exc, k)) and vars(getattr(back, k)) == vars(getattr(exc, k))
    return back


def _picklable_cases() -> list[BaseException]:
    from geoagent.config import ConfigError
    from geoagent.providers.base import ModelResponse, Usage
    from geoagent.providers.errors import ContentBlocked, MalformedResponse, ReplayMiss, ReplayRecordedError
    from geoagent.runtime.ledger import BudgetExhausted
    from geoagent.workers import model_caller as mc

    refusal = BudgetExhausted(0.25, 1.5, 0.125, 0.5, 2.0)
    cached = ModelResponse(text="{}", usage=Usage(3, 4), finish_reason="stop", provider_model="m", latency_s=0.5)
    return [
        ConfigError("run.toml", ["geoverify.boot_seed: expected >= 0", "budget.cap_usd: expected > 0"]),
        MalformedResponse("openai", "no choices[0]", '{"choices": []}', Usage(10, 2)),
        ContentBlocked("gemini", "SAFETY", Usage(5, 0)),
        ReplayMiss("abc123", "replay.jsonl", "model m"),
        ReplayRecordedError("abc123", "replay.jsonl", "http 500"),
        refusal,
        mc.AuthStop(mc.AuthFailure(model="m", status=401, api_key_env="OPENAI_API_KEY", failures=5)),
        mc.HostStop(mc.HostDown(host="127.0.0.1:9", streak=5, last="connection refused", models=["m"]), "m"),
        mc._Unreachable("127.0.0.1:9", 3, "connection refused", 2, streak_id=4),
        mc._AuthFailed(401, "invalid key"),
        mc._NotSent(refusal=refusal),
        mc._NotSent(cached=cached),
        mc._NotSent(elsewhere=True),
    ]


@pytest.mark.parametrize("exc", _picklable_cases(), ids=lambda e: type(e).__name__)
def test_remaining_errors_pickle_roundtrip(exc):
    """Before: TypeError on unpickling (``cls(message)`` missed required arguments), or for ``_NotSent`` the
    message landed in ``cached``."""
    back = _roundtrip(exc)
    if type(exc).__name__ == "BudgetExhausted":
        assert (back.requested_usd, back.spent_usd, back.cap_usd) == (0.25, 1.5, 2.0)


def test_provider_errors_from_a_real_answer_pickle_without_the_key():
    """Two real Gemini calls with the key in their header: the fake blocking the prompt, and a server that echoes
    the key in its block reason. ``generate`` raises ContentBlocked, for the echo a copy with the key masked,
    made without ``__init__`` (it pickled by ``cls(message)`` before: TypeError); the live error and its
    pickled bytes hold no key, and it round-trips."""
    import asyncio
    import pickle

    from aiohttp import web

    from geoagent.providers import ContentBlocked, ModelRequest, ProviderSettings, make_provider
    from geoagent.runtime.http import HostPolicy, HttpClient
    from geoagent.sandbox import llm_gemini
    from geoagent.sandbox.server import serve

    policy = HostPolicy(rate=1000, concurrency=4, max_attempts=2, backoff_base_s=0.005, backoff_max_s=0.01, timeout_s=5.0)
    req = ModelRequest(provider="gemini", model="test-model", prompt="please [[sandbox:block]] this",
                       params={"max_output_tokens": 20})

    async def echo(request: web.Request) -> web.Response:
        return web.json_response({"promptFeedback": {"blockReason": "OTHER for key " + request.headers["x-goog-api-key"]},
                                  "usageMetadata": {"promptTokenCount": 5, "totalTokenCount": 5}})

    async def call(app: web.Application) -> BaseException:
        async with serve(app) as url, HttpClient(default_policy=policy) as http:
            prov = make_provider(ProviderSettings(kind="gemini", model="test-model", base_url=url, api_key=PROVIDER_KEY), http)
            with pytest.raises(ContentBlocked) as ei:
                await prov.generate(req)
            return ei.value

    echo_app = web.Application()
    echo_app.router.add_post("/v1beta/models/{name}", echo)
    errs = [asyncio.run(call(llm_gemini.make_app(api_keys=(PROVIDER_KEY,)))), asyncio.run(call(echo_app))]
    assert "OTHER for key" in str(errs[1])          # the echo's text is kept, the key in it masked
    for err in errs:
        assert PROVIDER_KEY not in repr(vars(err)) and PROVIDER_KEY not in str(err)
        assert PROVIDER_KEY.encode() not in pickle.dumps(err)
        back = _roundtrip(err)
        assert back.retryable is False and back.reason == err.reason


# --- 3. GeoHint export: context answers without a hint distance are not scored ------------------------------
def test_geohint_export_marks_answers_without_a_hint_distance_unscored_and_reproduces_the_report(tmp_path):
    """Model m, forced: 4 answers with a hint distance (2 hits, 1 echo), 2 context answers whose reference point
    has no hint distance (both hits and echoes: the report leaves them out of every table), 1 answer cut off with
    nothing parsed and no hint distance (a no-answer: counted in the table 'cutoff', scored), and 2 baseline
    answers (no reference point: scored). Before: the two were ``scored`` True with their hits and echoes, so the
    export's forced hit rate was 4 / 6 against the report's 2 / 4."""
    import polars as pl

    from test_cutoff_loose_ends import _cfg, _payload

    from geoagent.geohint.aggregate import NO_HINT_DISTANCE
    from geoagent.geohint.campaign import GeoHintCampaign, aggregate_from_store
    from geoagent.geohint.stages import SCORED_TABLE, score_located
    from geoagent.runtime.store import open_campaign_state
    from geoagent.scoring.truncation import NO_ANSWER_CUT_OFF

    cfg = _cfg(tmp_path)
    rows = {f"k{i}": score_located(f"k{i}", _payload(i, finish_reason="stop", parsed=True, hit=i < 2, echo=i < 1))
            for i in range(4)}
    for i in (4, 5):
        lost = _payload(i, finish_reason="stop", parsed=True, hit=True, echo=True)
        lost["meta"]["dist_km"] = None            # a reference point not in the site's ladder
        rows[f"k{i}"] = score_located(f"k{i}", lost)
    cut = _payload(6, finish_reason="length", parsed=False)
    cut["meta"]["dist_km"] = None
    rows["k6"] = score_located("k6", cut)
    for i in (7, 8):
        base = _payload(i, finish_reason="stop", parsed=True, hit=i == 7)
        base["meta"].update(condition="baseline", ref_qid=None, ref_name=None, band=None, tier=None, dist_km=None)
        rows[f"k{i}"] = score_located(f"k{i}", base)
    assert rows["k4"].hit is True and rows["k4"].echo is True
    with open_campaign_state("gh-na", root=tmp_path / "state", cap_usd=0.0) as st:
        for k, r in rows.items():
            st.store.put_result(SCORED_TABLE, k, r.to_json())
        agg = aggregate_from_store(st.store)
        GeoHintCampaign().export(cfg, st.store)
    c = agg.select(model="m", condition="forced")
    assert (c.n, c.hits, c.echoes, agg.n_without_ladder_point, agg.n_no_answer()) == (4, 2, 1, 2, 1)
    df = pl.read_parquet(cfg.state_dir() / "geohint_scored.parquet").sort("key")
    by_key = {r["key"]: r for r in df.iter_rows(named=True)}
    for k in ("k4", "k5"):
        assert by_key[k]["scored"] is False and by_key[k]["extra.left_out"] == NO_HINT_DISTANCE
        assert by_key[k]["hit"] is True       # the stored values stay, for who wants them
    assert by_key["k6"]["scored"] is True and by_key["k6"]["extra.no_answer"] == NO_ANSWER_CUT_OFF
    for k in ("k0", "k1", "k2", "k3", "k6", "k7", "k8"):
        assert by_key[k]["scored"] is True and by_key[k]["extra.left_out"] is None
    forced = df.filter(pl.col("scored") & (pl.col("condition") == "forced"))
    assert forced["hit"].count() == c.n and forced["hit"].mean() == pytest.approx(c.hit_rate) == 0.5
    assert forced["echo"].mean() == pytest.approx(c.echo_rate) == pytest.approx(1 / 4)
    assert df.filter(pl.col("scored"))["hit"].count() == agg.select().n == 6
    csv = pl.read_csv(cfg.state_dir() / "geohint_scored.csv", infer_schema_length=None)
    assert csv.filter(~pl.col("scored")).height == 2
