"""What a fresh user hit in the run path: missing keys one at a time, campaigns that can never make a call,
a stopped ``--watch`` process reported as interrupted, and dry-run figures without their assumptions.

Runs the real engine and CLI (``run.py`` in a subprocess for the signal tests) with the simulated provider.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from geoagent.config import ConfigError, config_from_dict, load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INTERRUPTED, WATCH_BANNER, run_campaign
from geoagent.runtime.manifest import read_manifest
from geoagent.secrets import SecretNotFound
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]


def _write(tmp: Path, name: str, body: str, *, cap: float = 5.0, n: int = 20) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(f"""
[campaign]
name = "{name}"
kind = "generic"
seed = 2

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = {cap!r}

[generic]
n_requests = {n}
{body}
""")
    return p


def _paid(name: str, var: str, extra: str = "") -> str:
    return f"""
[[models]]
name = "{name}"
provider = "openai"
model = "gpt-x-{name}"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "{var}"
price_input_usd_per_mtok = 2.0
price_output_usd_per_mtok = 8.0
max_output_tokens = 512
{extra}
"""


def _sim(extra: str = "", rate: int = 5000) -> str:
    return f"""
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
rate = {{ requests = {rate}, period_s = 1.0 }}
{extra}
"""


# -- 2. every missing API key at once -------------------------------------------------------------------


def test_every_missing_key_is_named_at_once_and_the_dry_run_warns(tmp_path, monkeypatch):
    for var in ("RUNCHK_OPENAI_KEY", "RUNCHK_ANTHROPIC_KEY"):
        monkeypatch.delenv(var, raising=False)
    dotenv = tmp_path / ".env"
    dotenv.write_text("UNRELATED=1\n")
    cfg = load_config(_write(tmp_path, "keys", _paid("a", "RUNCHK_OPENAI_KEY") + _paid("b", "RUNCHK_ANTHROPIC_KEY")
                             + _paid("c", "RUNCHK_ANTHROPIC_KEY") + _sim()))
    with pytest.raises(SecretNotFound) as ei:
        anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, dotenv_path=dotenv))
    msg = str(ei.value)
    assert "RUNCHK_OPENAI_KEY (model a)" in msg and "RUNCHK_ANTHROPIC_KEY (models b, c)" in msg
    assert not (tmp_path / "state" / "keys").exists()  # nothing left behind by the refused run
    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False, dotenv_path=dotenv))
    assert dry.exit_code == 2  # it predicts the refusal above, so it exits as the run does (--help says so)
    text = dry.summary()
    warning = [line for line in text.splitlines() if "warning:" in line]
    assert len(warning) == 1 and "RUNCHK_OPENAI_KEY" in warning[0] and "RUNCHK_ANTHROPIC_KEY" in warning[0]
    assert "total: 80 calls" in text  # it still estimates (4 models x 20)
    assert text.splitlines()[-1] == ("  exit 2: `run` would refuse to start (variables RUNCHK_OPENAI_KEY, "
                                     "RUNCHK_ANTHROPIC_KEY not set; see the warning above)")
    # with one of them set, only the other is named
    monkeypatch.setenv("RUNCHK_OPENAI_KEY", made_up_key("sk-", 27, seed="runchk-n20"))
    with pytest.raises(SecretNotFound) as ei:
        anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, dotenv_path=dotenv))
    assert "RUNCHK_OPENAI_KEY" not in str(ei.value) and "RUNCHK_ANTHROPIC_KEY (models b, c)" in str(ei.value)


# -- 4. campaigns that can never make a call ------------------------------------------------------------


def test_zero_cap_with_a_paid_model_is_a_config_error_but_free_models_may_run_at_zero():
    base = {"campaign": {"name": "z", "kind": "generic"}, "budget": {"cap_usd": 0.0}}
    paid = {"name": "p", "provider": "openai", "model": "gpt-x", "api_key_env": "K",
            "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 1.0}
    with pytest.raises(ConfigError) as ei:
        config_from_dict({**base, "models": [paid, {"name": "s", "provider": "simulated", "model": "s"}]})
    assert "budget.cap_usd" in str(ei.value) and "p" in str(ei.value)
    cfg = config_from_dict({**base, "models": [{"name": "s", "provider": "simulated", "model": "s"}]})
    assert cfg.budget.cap_usd == 0.0
    config_from_dict({**base, "budget": {"cap_usd": 0.01}, "models": [paid]})  # any positive cap is accepted


@pytest.mark.parametrize("kind", ["geoverify", "geohint"])
def test_geoverify_and_geohint_without_models_are_config_errors(kind):
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"campaign": {"name": "x", "kind": kind}, "budget": {"cap_usd": 1.0}})
    assert f"models: a {kind} campaign needs at least one [[models]] table" in str(ei.value)
    # a crawl may run without models (its audits are optional)
    config_from_dict({"campaign": {"name": "x", "kind": "crawl"}, "budget": {"cap_usd": 1.0}})


# -- 4./5. dry-run lines --------------------------------------------------------------------------------


def _dry_lines(cfg) -> list[str]:
    out = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False))
    assert out.exit_code == EXIT_COMPLETE
    return out.summary().splitlines()


def test_dry_run_over_the_cap_says_how_many_calls_fit(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNCHK_KEY", made_up_key("sk-", 27, seed="runchk-n20"))
    n = 40
    # one call's worst case: prompt tokens (chars/3 + 16) x 1.x factor + 512 output tokens at $8/M: about
    # $0.0045, so a $0.05 cap fits about 11 of the 40 calls
    cfg = load_config(_write(tmp_path, "over", _paid("a", "RUNCHK_KEY"), cap=0.05, n=n))
    lines = _dry_lines(cfg)
    total = next(line for line in lines if "total:" in line)
    worst = float(re.search(r"worst \$([0-9.]+)", total).group(1))
    expected = float(re.search(r"\$([0-9.]+) expected", total).group(1))
    over = [line for line in lines if "OVER CAP" in line]
    assert len(over) == 1 and "(OVER cap)" in total
    bounds = next(line for line in lines if "plan averages:" in line)
    fit = int(re.search(r"the cap pays for about (\d+) of the (\d+) calls", bounds).group(1))
    # independent: the calls are alike up to their prompt length, so the cap fits cap / (worst / n) of them
    assert abs(fit - n * 0.05 / worst) < 1.0
    assert 0 < fit < n
    fit_exp = int(re.search(r"at the mean expected cost per call, about (\d+) ", bounds).group(1))
    assert abs(fit_exp - min(n, n * 0.05 / expected)) < 1.0
    # within the cap: no OVER CAP line
    within = load_config(_write(tmp_path, "within", _paid("a", "RUNCHK_KEY"), cap=50.0, n=n))
    assert not [line for line in _dry_lines(within) if "OVER" in line]


def test_dry_run_labels_what_expected_cost_and_duration_assume(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNCHK_KEY", made_up_key("sk-", 27, seed="runchk-n20"))
    cfg = load_config(_write(tmp_path, "labels", _paid("a", "RUNCHK_KEY") + _paid("b", "RUNCHK_KEY", "expected_output_tokens = 64"),
                             cap=50.0, n=10))
    lines = _dry_lines(cfg)
    a = next(line for line in lines if line.strip().startswith("a:"))
    b = next(line for line in lines if line.strip().startswith("b:"))
    assert "assuming every answer uses all its max_output_tokens (512 per call); set expected_output_tokens" in a
    assert "assuming 64 output tokens per call" in b
    total = next(line for line in lines if "total:" in line)
    assert "model-call time only: excludes geocoding" in total
    # the expected USD follows the stated assumption: b's output part is 64/512 of a's (same prompts, prices)
    usd = {name: float(re.search(r"\$([0-9.]+) expected", line).group(1)) for name, line in (("a", a), ("b", b))}
    toks_in = int(re.search(r"(\d+) in /", a).group(1))
    assert usd["a"] == pytest.approx((toks_in * 2.0 + 10 * 512 * 8.0) / 1e6, abs=1e-4)
    assert usd["b"] == pytest.approx((toks_in * 2.0 + 10 * 64 * 8.0) / 1e6, abs=1e-4)


# -- 3. --watch -----------------------------------------------------------------------------------------


def _start_watch(cfg_path: Path, *args: str) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # the banner must flush by itself
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfg_path), "--watch", "--no-live", *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _read_banner(proc: subprocess.Popen, timeout_s: float = 60.0) -> str:
    # stdout is a pipe (not a terminal): the banner must still come, and before the campaign is done
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if sel.select(timeout=0.5):
            line = proc.stdout.readline()
            if not line:
                break
            if WATCH_BANNER in line:
                return line
    proc.kill()
    raise AssertionError(f"no watch banner; stderr: {proc.stderr.read()[-2000:]}")


def _done(cfg, n: int) -> bool:
    from geoagent.status import campaign_status

    q = campaign_status(cfg)["queues"]
    return all(e in q and q[e].done == n and not (q[e].ready or q[e].leased) for e in ("requests", "responses"))


def _stop(proc: subprocess.Popen) -> tuple[int, str, str]:
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def _watch_then_stop(cfg_path: Path, *args: str, until=None, what: str = "the watched campaign did not finish",
                     settle_s: float = 0.0) -> tuple[int, str, str]:
    """Start ``run --watch`` (plus ``args``), wait for its banner, then until ``until()`` is true (60 s at most)
    or ``settle_s`` seconds, and send SIGINT; return (exit code, stdout, stderr). The process never outlives it."""
    proc = _start_watch(cfg_path, *args)
    try:
        _read_banner(proc)
        deadline = time.monotonic() + 60
        while until is not None and not until():
            assert time.monotonic() < deadline, what
            time.sleep(0.2)
        time.sleep(settle_s)
        return _stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_watch_process_stopped_once_drained_ends_complete(tmp_path):
    n = 20
    cfg_path = _write(tmp_path, "watchdone", _sim(), cap=1.0, n=n)
    cfg = load_config(cfg_path)
    code, out, err = _watch_then_stop(cfg_path, until=lambda: _done(cfg, n))
    assert code == EXIT_COMPLETE, err[-2000:]
    assert "campaign watchdone: complete" in out
    assert read_manifest(cfg.state_dir())["runs"][-1]["status"] == "complete"


def test_watch_process_stopped_with_upstream_work_left_is_interrupted(tmp_path):
    # a scale-out collector process: the plan is enqueued on `requests`, but no process runs the model
    # caller, so the collector's upstream still has every task ready when the signal comes
    cfg_path = _write(tmp_path, "watchbusy", _sim(), cap=1.0, n=30)
    cfg = load_config(cfg_path)
    code, out, err = _watch_then_stop(cfg_path, "--stages", "collector", settle_s=0.3)
    assert code == EXIT_INTERRUPTED, err[-2000:]
    assert read_manifest(cfg.state_dir())["runs"][-1]["status"] == "interrupted"
    # the same collector process stopped once the requests were answered (by a model-caller process) ends 0
    first = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(cfg_path), "--stages", "model_caller",
                            "--no-live"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert first.returncode == EXIT_COMPLETE, first.stderr[-2000:]
    code, out, err = _watch_then_stop(cfg_path, "--stages", "collector", until=lambda: _done(cfg, 30),
                                      what="the collector did not drain its input")
    assert code == EXIT_COMPLETE, err[-2000:]
    assert read_manifest(cfg.state_dir())["runs"][-1]["status"] == "complete"


def test_watch_drained_check_counts_work_leased_by_another_process_and_leaves_dead_letters_to_the_status():
    """``stages_drained`` (what lets a stopped --watch process end 'complete'): a task leased by another
    process on an own or upstream edge is work left; a dead letter is not pending work, and the status
    chain after it answers 'incomplete' for it (checked by reading the chain in engine._run)."""
    from geoagent.campaigns.generic import Collector
    from geoagent.engine import stages_drained
    from geoagent.runtime.queue import QueueCounts
    from geoagent.workers.model_caller import ModelCaller

    pipeline = [ModelCaller(concurrency=1), Collector()]
    idle = QueueCounts(done=5)
    # the collector's process: the model caller's edge (upstream) has one task leased by another process
    assert stages_drained(pipeline, ["collector"], {"requests": QueueCounts(leased=1, done=4), "responses": idle}) is False
    assert stages_drained(pipeline, ["collector"], {"requests": idle, "responses": QueueCounts(leased=1)}) is False
    # the model caller's process answers only for its edge and those upstream of it
    assert stages_drained(pipeline, ["model_caller"], {"requests": idle, "responses": QueueCounts(leased=1)}) is True
    assert stages_drained(pipeline, ["model_caller", "collector"],
                          {"requests": QueueCounts(dead=1, done=4), "responses": idle}) is True
