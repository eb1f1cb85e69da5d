"""An answer whose usage the provider did not report (s13-usage): kept, booked at its worst case, said once.

s13-usage2: the same for the Anthropic Messages fake (:mod:`geoagent.sandbox.llm_anthropic`, ``usage="omit"`` /
``"null"``) and the Gemini generateContent fake (:mod:`geoagent.sandbox.llm_gemini`, ``usage="omit"`` / ``"null"``
/ ``"prompt_only"``: text with no ``candidatesTokenCount`` nor ``totalTokenCount``). Before, each such answer was
an unusable body: 3 tasks cost 15 billed calls, ``dead 3``, rc 3.

Real processes: ``run.py`` in a subprocess against the OpenAI-compatible fake of :mod:`geoagent.sandbox.llm_openai`
started with ``usage="omit"`` (no ``usage`` key) or ``usage="null"`` (``"usage": null``), each call it answers
written to its token log (billed). Before the fix every such answer was unusable: each task was asked
``[queue] max_attempts`` times (5) and dead-lettered, 3 tasks cost 15 billed calls and gave no answer.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _model_harness import generic_campaign, model_table

from geoagent.sandbox.server import spawn, wait_ready
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

REPO = Path(__file__).resolve().parents[1]
KEY_VAR = "S13_UNREPORTED_KEY"


def _run_py(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=full, capture_output=True, text=True,
                          timeout=timeout)


def _billed(log: Path) -> int:
    if not log.is_file():
        return 0
    return sum(1 for line in log.read_text().splitlines() if line.strip() and json.loads(line).get("status") == 200)


def _models(api: str, base: str) -> str:
    """The one ``[[models]]`` table "m" (TOML text) for the fake of ``api`` at ``base`` (its root)."""
    text = model_table(base_url=base, key_var=KEY_VAR, concurrency=2)
    if api == "openai":
        return text
    model = {"anthropic": "claude-sim", "gemini": "gemini-sim"}[api]
    return (text.replace('provider = "openai"', f'provider = "{api}"').replace(f'"{base}/v1"', f'"{base}"')
            .replace('model = "gpt-x"', f'model = "{model}"'))


@pytest.mark.parametrize("api,mode", [("openai", "omit"), ("openai", "null"), ("anthropic", "omit"),
                                      ("anthropic", "null"), ("gemini", "omit"), ("gemini", "null"),
                                      ("gemini", "prompt_only")])
def test_an_answer_without_usage_is_stored_once_and_booked_at_its_worst_case(tmp_path, api, mode):
    from geoagent.config import load_config
    from geoagent.runtime.store import open_campaign_state

    log = tmp_path / "calls.jsonl"
    proc, base = spawn(f"geoagent.sandbox.llm_{api}:make_app", usage=mode, token_log=str(log))
    env = {KEY_VAR: "unreported-" + "key-0123456789"}
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="nousage", n=3, models=_models(api, base))
        run = _run_py("run", str(cfgp), env=env)
        out = run.stdout + run.stderr
        n_first = _billed(log)
        again = _run_py("run", str(cfgp), env=env)  # nothing left to ask: no second paid call
        n_again = _billed(log)
        status = _run_py("status", str(cfgp), env=env)
    finally:
        proc.terminate()
        proc.join(10)
    # before: "dead 3", 15 billed calls (3 tasks x max_attempts 5), no answer
    assert run.returncode == 0 and "complete" in run.stdout, out
    assert "done 3  dead 0" in run.stdout, out
    assert n_first == 3 and n_again == 3, (n_first, n_again, again.stdout)

    from geoagent.runtime.ledger import USAGE_NOT_REPORTED

    cfg = load_config(cfgp)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        assert st.ledger.check_consistency() == []
        s = st.ledger.summary()
        rows = st.ledger.db.read("SELECT amount_nusd, actual_nusd, note FROM reservations WHERE state = 'settled'")
        by_model = st.ledger.spend_by_model()
        stored = [st.store.get_record(r["key"]) for r in st.store.iter_response_meta()]
    assert (s.calls, s.unknown_calls, s.open_reservations) == (3, 0, 0), s
    assert len(rows) == 3 and all(actual == amount > 0 and note == USAGE_NOT_REPORTED for amount, actual, note in rows)
    worst_usd = sum(a for a, _, _ in rows) / 1e9
    assert s.spent_usd == pytest.approx(worst_usd)
    assert by_model["m"]["unreported_calls"] == 3 and by_model["m"]["unreported_usd"] == pytest.approx(worst_usd)
    assert len(stored) == 3
    for rec in stored:
        assert rec["response"]["usage_reported"] is False and rec["response"]["output_tokens"] == 100  # max output
        assert rec["cost_usd"] == pytest.approx(rec["request_meta"]["reserved_usd"])

    line = "warning: model 'm' answered 3 calls without a usage count: booked at the worst case ($"
    assert out.count(line) == 1, out  # said once per model
    assert line in status.stdout, status.stdout
    from geoagent.status import campaign_status

    assert campaign_status(cfg)["spend"]["by_model"]["m"]["unreported_calls"] == 3
    manifest = json.loads((Path(cfg.state_dir()) / "manifest.json").read_text())
    ends = [r for r in manifest["runs"] if (r.get("summary") or {}).get("spend")]
    assert ends and ends[-1]["summary"]["spend"]["by_model"]["m"]["unreported_calls"] == 3, manifest["runs"]


def test_on_redis_the_answers_without_usage_are_counted_warned_and_shown(tmp_path, redis_url):
    """s14-usage: the same campaign with ``[backend] kind = "redis"``. Before, the Redis ledger booked each such answer
    at its worst case but kept no per-model count: no warning in the run's summary, none in ``status``, no
    ``unreported_calls`` in the manifest or in ``campaign_status``."""
    from geoagent.config import load_config
    from geoagent.runtime.backend import open_state
    from geoagent.status import campaign_status

    log = tmp_path / "calls.jsonl"
    proc, base = spawn("geoagent.sandbox.llm_openai:make_app", usage="omit", token_log=str(log))
    env = {KEY_VAR: "unreported-" + "key-0123456789", "GA_TEST_REDIS_S14": redis_url}
    try:
        wait_ready(base)
        cfgp = generic_campaign(tmp_path, name="nousager", n=3, models=_models("openai", base))
        cfgp.write_text(cfgp.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS_S14"\n',
                        encoding="utf-8")
        run = _run_py("run", str(cfgp), env=env)
        out = run.stdout + run.stderr
        status = _run_py("status", str(cfgp), env=env)
    finally:
        proc.terminate()
        proc.join(10)
    assert run.returncode == 0 and "done 3  dead 0" in run.stdout, out
    assert _billed(log) == 3
    line = "warning: model 'm' answered 3 calls without a usage count: booked at the worst case ($"
    assert out.count(line) == 1, out
    assert line in status.stdout, status.stdout
    os.environ["GA_TEST_REDIS_S14"] = redis_url
    try:
        cfg = load_config(cfgp)
        by_model = campaign_status(cfg)["spend"]["by_model"]["m"]
        with open_state(cfg, recover=False) as st:
            assert st.ledger.check_consistency() == []
            reserved = sum(r["request_meta"]["reserved_usd"] for r in st.store.iter_responses())
    finally:
        del os.environ["GA_TEST_REDIS_S14"]
    assert by_model["unreported_calls"] == 3 and by_model["unreported_usd"] == pytest.approx(reserved)
    manifest = json.loads((Path(cfg.state_dir()) / "manifest.json").read_text())
    ends = [r for r in manifest["runs"] if (r.get("summary") or {}).get("spend")]
    assert ends and ends[-1]["summary"]["spend"]["by_model"]["m"]["unreported_calls"] == 3, manifest["runs"]
