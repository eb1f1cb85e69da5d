"""A sandbox model fake started on a port of one's own counts as simulated, as the ``*.sandbox.invalid`` ones do.

Before (session 15 review): geoagent told a sandbox fake only by its ``*.sandbox.invalid`` URL in the config, so
the README's "try your config against a local fake" (``python -m geoagent.sandbox.llm_openai --port 8001
--api-key K``, ``base_url = "http://127.0.0.1:8001/v1"``) stored its answers as a model's: ``provider_kind =
"model"``, no simulated note in the summary, ``simulated`` false in the export. Now every sandbox fake marks its
responses (``X-Geoagent-Sandbox: 1``, a header no real API sends), the HTTP providers note it and the model caller
records those answers as ``simulated``: summary, report and export then say so. A fake with the mark taken off
(:func:`geoagent.sandbox.llm_common.unmarked`) stands in for a real model server and stays ``model``.
Real runs over local fakes (OpenAI, Anthropic, Gemini shapes), no mocks.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import anyio
import orjson
import polars as pl
import pytest

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
from geoagent.sandbox.llm_common import unmarked
from geoagent.sandbox.server import serve

KEY = "local-test-key"


def _model(name: str, provider: str, base_url: str, key_env: str | None) -> str:
    key = f'api_key_env = "{key_env}"\n' if key_env else ""
    return (f'\n[[models]]\nname = "{name}"\nprovider = "{provider}"\nmodel = "sim-{name}"\nbase_url = "{base_url}"\n'
            f"{key}max_output_tokens = 50\nconcurrency = 4\nrate = {{ requests = 1000, period_s = 1.0 }}\n")


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """``mine`` on an OpenAI fake served here with a key (as a user starts one with ``--api-key``), ``claude`` and
    ``gem`` on the Anthropic and Gemini fakes on ports of their own, ``real`` on an OpenAI fake with the mark
    taken off (a model server as far as geoagent can tell). Returns (outcome, state folder)."""
    tmp = tmp_path_factory.mktemp("mark")
    p = tmp / "mark.toml"
    mp = pytest.MonkeyPatch()
    mp.setenv("GEOAGENT_TEST_FAKE_KEY", KEY)

    async def go():
        async with serve(llm_openai.make_app(api_keys=[KEY])) as mine, \
                serve(llm_anthropic.make_app(require_auth=False)) as claude, \
                serve(llm_gemini.make_app(require_auth=False)) as gem, \
                serve(unmarked(llm_openai.make_app(require_auth=False))) as real:
            p.write_text('[campaign]\nname = "mark"\nkind = "generic"\nseed = 3\n'
                         f'[paths]\nqueues = "{tmp / "queues"}"\nstate = "{tmp / "state"}"\n'
                         '[budget]\ncap_usd = 5.0\n[generic]\nn_requests = 2\n'
                         + _model("mine", "openai", f"{mine}/v1", "GEOAGENT_TEST_FAKE_KEY")
                         + _model("claude", "anthropic", claude, None)
                         + _model("gem", "gemini", gem, None)
                         + _model("real", "openai", f"{real}/v1", None), encoding="utf-8")
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=True)

    try:
        outcome = anyio.run(go)
    finally:
        mp.undo()
    assert outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    return outcome, Path(load_config(p).state_dir())


def test_the_fakes_mark_every_response_and_real_apis_do_not():
    async def go():
        import aiohttp

        async with serve(llm_openai.make_app(require_auth=False)) as base, aiohttp.ClientSession() as s:
            async with s.get(f"{base}/v1/models") as r:
                assert r.headers.get(C.SANDBOX_ANSWER_HEADER) == "1"
        async with serve(unmarked(llm_openai.make_app(require_auth=False))) as base, aiohttp.ClientSession() as s:
            async with s.get(f"{base}/v1/models") as r:
                assert C.SANDBOX_ANSWER_HEADER not in r.headers

    anyio.run(go)


def test_answers_of_a_fake_on_its_own_port_are_recorded_simulated(campaign):
    _, state = campaign
    with sqlite3.connect(state / "campaign.sqlite") as db:
        kinds = {(model, orjson.loads(meta).get("provider_kind")) for model, meta in
                 db.execute("SELECT model, request_meta FROM responses")}
    # before: ("mine", "model"), ("claude", "model"), ("gem", "model")
    assert kinds == {("mine", "simulated"), ("claude", "simulated"), ("gem", "simulated"), ("real", "model")}, kinds


def test_the_summary_and_the_export_say_so(campaign):
    outcome, state = campaign
    text = outcome.summary()
    note = [ln for ln in text.splitlines() if "!!! NOTE: Simulated answers" in ln]
    # before: no such line
    assert note and "Simulated answers: claude, gem, mine answered" in note[0], text
    df = pl.read_parquet(state / "model_responses.parquet")
    flags = {m: set(df.filter(pl.col("model") == m)["simulated"].to_list()) for m in ("mine", "claude", "gem", "real")}
    assert flags == {"mine": {True}, "claude": {True}, "gem": {True}, "real": {False}}, flags


def test_a_crawl_auditor_on_a_fake_of_ones_own_is_recorded_simulated(tmp_path):
    """The crawl's own records too: the referenceability auditor on an OpenAI fake served here (plain URL)."""
    from test_crawl_simulated_flags_recorded import TEXT, _config, _entry

    p = tmp_path / "crawl.toml"
    mp = pytest.MonkeyPatch()
    mp.setenv("MAPILLARY_TOKEN", "MLY|sandbox")

    async def go():
        async with serve(llm_openai.make_app(require_auth=False)) as base:
            _config(p, tmp_path, vision=None, text=_entry(TEXT, "sandbox-text-auditor-1", "openai", f"{base}/v1", 4000))
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    try:
        outcome = anyio.run(go)
    finally:
        mp.undo()
    assert outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    state = Path(load_config(p).state_dir())
    raw = [orjson.loads(ln) for ln in (state / "audit_raw_answers.jsonl").read_bytes().splitlines() if ln.strip()]
    # before: {(TEXT, "model")}
    assert raw and {(r["model"], r.get("provider_kind")) for r in raw} == {(TEXT, "simulated")}
    with sqlite3.connect(state / "campaign.sqlite") as db:
        kinds = {(model, orjson.loads(meta).get("provider_kind"))
                 for model, meta in db.execute("SELECT model, request_meta FROM responses")}
    assert kinds == {(TEXT, "simulated")}, kinds


def test_a_geoverify_report_over_a_fake_of_ones_own_carries_the_simulated_note(tmp_path, release_dir):
    """The report too (``geoagent/geoverify/campaign.py``): GeoVerify over the public release (no pixels:
    ``[images] missing = "placeholder"``, as README says for a fake on a port of one's own)."""
    from geoagent.report.geoverify import TABLE_MD

    p = tmp_path / "gv.toml"

    async def go():
        async with serve(llm_openai.make_app(require_auth=False)) as base:
            p.write_text('[campaign]\nname = "gv-own"\nkind = "geoverify"\nseed = 1\n'
                         f'[paths]\nqueues = "{tmp_path / "q"}"\nstate = "{tmp_path / "s"}"\n'
                         f'release_dir = "{release_dir}"\n[budget]\ncap_usd = 5.0\n'
                         '[images]\nmissing = "placeholder"\n'
                         + _model("mine", "openai", f"{base}/v1", None).replace("concurrency = 4", "concurrency = 16")
                         + '\n[geoverify]\ntrials = "release"\nn_boot = 0\n', encoding="utf-8")
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    outcome = anyio.run(go)
    assert outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    report = (Path(load_config(p).state_dir()) / "report" / TABLE_MD).read_text(encoding="utf-8")
    # before: no note (the report read the config, where the fake is a plain local address)
    assert "Simulated answers: mine answered from geoagent's simulator" in report, report[:2000]
    # and why its read-out means nothing, in the report and the run's summary (walk35 #1: a campaign of one's own on
    # the fake printed d' 1.01 and a delta_1 with only the generic note; the demo alone said why)
    why = "Simulated GeoVerify verdicts do not depend on where the photo was taken"
    assert why in report and why in " ".join(outcome.summary().split()), report[:2000]


def test_the_manifest_names_the_models_whose_answers_were_simulated(campaign):
    """``manifest.json``: ``simulated_models`` is the config's rule (none of these URLs is a ``*.sandbox.invalid``
    fake), ``simulated_answer_models`` what the stored answers say at the run's end (s16; before: absent, so the
    manifest called every model here real)."""
    _, state = campaign
    manifest = orjson.loads((state / "manifest.json").read_bytes())
    assert manifest["simulated_models"] == []
    assert manifest.get("simulated_answer_models") == ["claude", "gem", "mine"], manifest.get("simulated_answer_models")
