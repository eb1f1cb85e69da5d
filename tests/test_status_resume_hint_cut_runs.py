"""``status`` says how to go on after a run cut short by a second Ctrl-C, or after a scale-out run whose processes
were all interrupted (walkthrough 25, item 4).

Both left work queued, yet ``status`` said only ``last progress (run ended)`` (a second Ctrl-C exits before the
manifest records the run's end) or ``last progress (run ended: all 2 processes)`` (a merged record has no one
outcome), with no resume hint; a single interrupted process got ``re-run the same command to resume``."""

from __future__ import annotations

import signal
import time

from _model_harness import run_with_calls_on_the_wire
from geoagent.cli import main
from geoagent.status import RESUME_HINT


def test_a_run_cut_by_a_second_ctrl_c_gets_the_resume_hint(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with run_with_calls_on_the_wire(tmp_path, name="cut", latency_ms=4000, key="sk-" "cut-0123456789abcdef",
                                    key_var="CUT_KEY", in_flight=2, timeout_s=30.0, n=12) as (proc, cfgp, *_):
        proc.send_signal(signal.SIGINT)
        time.sleep(0.4)
        proc.send_signal(signal.SIGINT)  # the second press: exit at once
        out, err = proc.communicate(timeout=60)
    assert proc.returncode != 0, (out, err)
    capsys.readouterr()
    assert main(["status", str(cfgp)]) == 0
    text = capsys.readouterr().out
    assert "ready" in text and RESUME_HINT.strip() in text, text


CONFIG = """[campaign]
name = "cutshort"
kind = "generic"
seed = 2
[budget]
cap_usd = 0.02
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
concurrency = 1
price_input_usd_per_mtok = 100.0
price_output_usd_per_mtok = 100.0
[generic]
n_requests = 8
"""


def _runs_as(state_dir, status: str) -> None:
    """Rewrite the manifest's runs to ``status`` (a run whose end was never recorded reads ``running``)."""
    import orjson

    path = state_dir / "manifest.json"
    man = orjson.loads(path.read_bytes())
    for run in man["runs"]:
        run["status"] = status
    path.write_bytes(orjson.dumps(man))


def test_a_run_whose_end_the_manifest_never_recorded_gets_the_resume_hint(isolated_roots, capsys):
    """The state a second Ctrl-C during the end of a run leaves: the progress stream's final record written, the
    run lock released, the manifest still saying ``running``, requests left queued."""
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4  # requests left queued
    _runs_as(isolated_roots / "state" / "cutshort", "running")
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "last progress (run ended)" in text and RESUME_HINT.strip() in text, text
