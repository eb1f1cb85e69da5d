"""A GeoHint run whose current plan has no scored answer yet rewrites the report as one of 0 responses, instead of
leaving the last run's report, which described another plan, in place (carried from session 19; GeoVerify always
wrote its report, empty too).

Before: ``GeoHintCampaign.report`` returned without writing when nothing of the current plan was scored, and the
live report waited for a first row, "so a re-run's earlier report is not replaced by one of 0 responses". But the
report counts only the current plan's answers: when none is scored, every answer of the old report belongs to
tasks the current plan no longer holds. Here the campaign's model is replaced by one whose host is down: the run
ends incomplete (exit 3) with nothing answered, and ``state/<campaign>/report/report.md`` still showed the first
model's 12 answers, as if they were this run's results.

Real ``run.py`` subprocesses: a three-site GeoHint campaign over the sandbox fakes (skipped without the release
data), then the same campaign with the model moved to a loopback port that refuses connections.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from _model_harness import SANDBOX_GPT_TOML, geohint_three_sites_toml

REPO = Path(__file__).resolve().parents[1]


def _config(tmp: Path, models: str) -> Path:
    cfg = tmp / "gh.toml"
    cfg.write_text(geohint_three_sites_toml("gh-empty", models=models, geohint="n_boot = 0", tables="""
[images]
missing = "placeholder"   # the second model is "real" to the config (a loopback URL); it is never reached

[queue]
max_attempts = 2
backoff_base_s = 0.01
backoff_max_s = 0.05
"""), encoding="utf-8")
    return cfg


def _run(tmp: Path, release: Path, cfg: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_RELEASE": str(release),
           "GEOAGENT_QUEUES": str(tmp / "q"), "GEOAGENT_STATE": str(tmp / "s"), "GEOAGENT_STOP_GRACE_S": "1"}
    return subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live"], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=300)


def test_a_plan_with_nothing_scored_rewrites_the_report_as_empty(tmp_path, release_dir, refused_port):
    first = _run(tmp_path, release_dir, _config(tmp_path, SANDBOX_GPT_TOML))
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    report = tmp_path / "s" / "gh-empty" / "report" / "report.md"
    assert "sandbox-gpt" in report.read_text(encoding="utf-8")

    # another model (its requests are new: an answer of the same model id would be reused from the store)
    down = SANDBOX_GPT_TOML.replace('name = "sandbox-gpt"', 'name = "other"').replace(
        'model = "sandbox-gpt"', 'model = "gpt-other"').replace(
        "http://openai.sandbox.invalid/v1", f"http://127.0.0.1:{refused_port}/v1")
    assert down != SANDBOX_GPT_TOML
    second = _run(tmp_path, release_dir, _config(tmp_path, down))
    assert second.returncode == 3, second.stdout[-3000:] + second.stderr[-3000:]
    text = report.read_text(encoding="utf-8")
    assert "0 scored responses" in text, text[:1500]  # before: the first run's report, 12 answers of sandbox-gpt
    assert "sandbox-gpt" not in text.split("\n\n")[1], text[:1500]
