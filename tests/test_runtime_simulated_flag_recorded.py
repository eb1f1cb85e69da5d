"""The export's ``simulated`` column is a fact recorded with each stored answer, not read off today's config.

Before (session 13 check): the column was derived at export time from the CURRENT config's ``[[models]]`` (a
``provider = "simulated"`` entry or a ``base_url`` on a ``*.sandbox.invalid`` model fake), since a sandbox fake
records the provider it imitates (``request_meta.provider = "openai"``). A campaign whose config later moved a model
off the fake (or a real model onto the simulator) then exported wrong flags for the answers already stored. Now the
model caller records what answered each call (``request_meta.provider_kind``: ``simulated`` / ``replay`` / ``model``,
from the config as written at call time) and the export reads that; a response stored before the field existed
keeps the old rule, and the export says so (``export_note.txt``, the ``export`` command's line). Real runs over the
local OpenAI-compatible fakes (one on its ``*.sandbox.invalid`` name, one served here), the CLI's ``export``.
"""

from __future__ import annotations

import io
import sqlite3
from contextlib import redirect_stdout
from pathlib import Path

import anyio
import orjson
import polars as pl
import pytest

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.llm_common import unmarked
from geoagent.sandbox.server import serve


def _model(name: str, provider: str, base_url: str | None) -> str:
    url = f'base_url = "{base_url}"\n' if base_url else ""
    return (f'\n[[models]]\nname = "{name}"\nprovider = "{provider}"\nmodel = "sim-{name}"\n{url}'
            "max_output_tokens = 50\nconcurrency = 4\nrate = { requests = 1000, period_s = 1.0 }\n")


def _write(p: Path, tmp: Path, models: str) -> Path:
    p.write_text(f'[campaign]\nname = "flags"\nkind = "generic"\nseed = 3\n'
                 f'[paths]\nqueues = "{tmp / "queues"}"\nstate = "{tmp / "state"}"\n'
                 '[budget]\ncap_usd = 5.0\n[generic]\nn_requests = 3\n' + models, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def campaign(tmp_path_factory):
    """A run with ``fake`` on the sandbox's OpenAI fake (simulated) and ``real`` on a fake served here (a model
    server as far as geoagent can tell); then the config is changed: ``fake`` moved to a plain server URL,
    ``real`` to the simulated provider. Returns (config path, state folder)."""
    tmp = tmp_path_factory.mktemp("simflag")
    p = tmp / "flags.toml"

    async def go():
        # the mark taken off: a model server as far as geoagent can tell (a sandbox fake marks its answers)
        async with serve(unmarked(llm_openai.make_app(require_auth=False))) as base:
            _write(p, tmp, _model("fake", "openai", "http://openai.sandbox.invalid/v1")
                   + _model("real", "openai", f"{base}/v1"))
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    outcome = anyio.run(go)
    assert outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    _write(p, tmp, _model("fake", "openai", "http://127.0.0.1:9/v1") + _model("real", "simulated", None))
    return p, Path(load_config(p).state_dir())


def _export(p: Path) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["export", str(p)]) == 0
    return buf.getvalue()


def _flags(state: Path, table: str) -> dict[str, set]:
    df = pl.read_parquet(state / f"{table}.parquet")
    return {m: set(df.filter(pl.col("model") == m)["simulated"].to_list()) for m in ("fake", "real")}


def test_each_stored_answer_records_what_answered_it(campaign):
    _, state = campaign
    with sqlite3.connect(state / "campaign.sqlite") as db:
        kinds = {(model, orjson.loads(meta).get("provider_kind")) for model, meta in
                 db.execute("SELECT model, request_meta FROM responses")}
    assert kinds == {("fake", "simulated"), ("real", "model")}, kinds


@pytest.mark.parametrize("table", ["results", "model_responses"])
def test_export_after_the_config_changed_keeps_the_recorded_flags(campaign, table):
    p, state = campaign
    out = _export(p)
    # before: {"fake": {False}, "real": {True}} (the changed config's view)
    assert _flags(state, table) == {"fake": {True}, "real": {False}}
    note = (state / "export_note.txt").read_text(encoding="utf-8")
    assert "Simulated answers: fake answered from geoagent's simulator" in note, note
    assert "Simulated flag from the current config" not in note
    assert "fake hold simulated answers" in out and "real hold" not in out, out
    meta = pl.read_parquet_metadata(state / f"{table}.parquet")
    assert "Simulated answers: fake answered" in meta["geoagent.simulated_note"]


def test_older_answers_without_the_record_keep_the_config_rule_and_the_export_says_so(campaign, tmp_path):
    import shutil

    p, state = campaign
    old = tmp_path / "state"
    shutil.copytree(state.parent, old)  # a copy of the campaign's state, its answers made "older"
    text = p.read_text(encoding="utf-8").replace(str(state.parent), str(old))
    q = tmp_path / "flags.toml"
    q.write_text(text, encoding="utf-8")
    with sqlite3.connect(old / "flags" / "campaign.sqlite") as db:
        db.execute("UPDATE responses SET request_meta = json_remove(request_meta, '$.provider_kind')")
    out = _export(q)
    # the rule of before: the current config decides (fake is no sandbox fake any more, real is simulated now)
    assert _flags(old / "flags", "results") == {"fake": {False}, "real": {True}}
    note = (old / "flags" / "export_note.txt").read_text(encoding="utf-8")
    line = next(ln for ln in note.splitlines() if ln.startswith("Simulated flag from the current config"))
    assert "6 rows of results.csv, 6 rows of model_responses.csv" in line, line
    assert "stored before geoagent recorded the provider kind" in line and "may be wrong" in line, line
    assert "note: Simulated flag from the current config: 6 rows of results.csv" in out, out
    assert "real hold simulated answers" in out, out
