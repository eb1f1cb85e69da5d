"""Frictions found by a fresh researcher's walkthrough (session 19, walk19 sections 7 and 10), each checked
through the real command line (``python run.py ...`` in a subprocess, from a scratch working folder).

- 10a: ``$GEOAGENT_RELEASE`` overriding ``[paths] release_dir`` of a GeoVerify/GeoHint campaign: the warning said only
  "unset GEOAGENT_RELEASE"; it now also names ``[geoverify] release_dir`` (``[geohint] ...``), which the variable
  does not override (:func:`geoagent.sandbox.launch.campaign_release_dir`).
- 10c: an API key variable set to the empty string (in the environment or in ``.env``) was reported as "not set";
  it is now "set but empty" (never with a value).
- (in tests/test_friction_s19_crawl_help.py) 10d: the shipped ``crawl_sandbox.toml`` dry run cried ``!!! OVER CAP`` ($2.22 against $0.50) for a crawl that spends
  $0.02, pricing 1,000 referenceability candidates per city; over the offline fakes the count is now the fake
  world's own (what its Wikidata fake holds within reach of each city).
- 7: ``run.py --help`` named no environment variable and not the paper-replication tools; it now lists every
  ``GEOAGENT_*`` variable the package reads (found by scanning the source, so a new one must be documented).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUN = REPO / "run.py"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") and not k.endswith("_API_KEY")
           and k != "MAPILLARY_TOKEN"}
    env["PYTHONPATH"] = str(REPO)
    env["GEOAGENT_RUNS_INDEX"] = os.environ.get("GEOAGENT_RUNS_INDEX", "")  # the test's own index (conftest)
    env.update(extra)
    return env


def _run(args: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(RUN), *args], cwd=cwd, env=_env(**extra), capture_output=True,
                          text=True, timeout=240)


# -- 10d ---------------------------------------------------------------------------------------------------------

SANDBOX = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def test_the_shipped_sandbox_crawl_dry_run_is_within_its_cap(tmp_path):
    got = _run(["crawl", str(SANDBOX), "--simulate", "--no-live"], tmp_path, MAPILLARY_TOKEN="MLY|sandbox")
    assert got.returncode == 0, got.stdout + got.stderr
    assert "OVER CAP" not in got.stdout, got.stdout     # before: $2.2217 against a $0.50 cap (spends $0.02)
    total = next(ln for ln in got.stdout.splitlines() if ln.strip().startswith("total (worst case)"))
    assert "(within cap)" in total and "the offline fake" in total, total
    # the fake world's Sandbox City and Mirror Bay hold 309 items each within reach, Sprawl Town none
    assert "309, 0, 309 candidates" in total, total


def test_a_real_wikidata_endpoint_keeps_the_1000_candidate_worst_case(tmp_path):
    p = tmp_path / "real.toml"
    text = SANDBOX.read_text(encoding="utf-8")
    p.write_text(text.replace('wdqs = "http://wdqs.sandbox.invalid/sparql"\n', ""), encoding="utf-8")
    got = _run(["crawl", str(p), "--simulate", "--no-live"], tmp_path, MAPILLARY_TOKEN="MLY|sandbox")
    total = next(ln for ln in got.stdout.splitlines() if ln.strip().startswith("total (worst case)"))
    assert "1,000 candidates in each of 3 cities" in total, total


# -- 7 -----------------------------------------------------------------------------------------------------------

def _variables_read() -> set[str]:
    names = set()
    for f in (REPO / "geoagent").rglob("*.py"):
        names |= set(re.findall(r"\bGEOAGENT_[A-Z][A-Z0-9_]*[A-Z0-9]\b", f.read_text(encoding="utf-8")))
    return names


def test_top_level_help_lists_every_geoagent_variable_and_the_replication_tools(tmp_path):
    names = _variables_read()
    assert {"GEOAGENT_RELEASE", "GEOAGENT_STATE", "GEOAGENT_QUEUES", "GEOAGENT_STOP_GRACE_S"} <= names
    got = _run(["--help"], tmp_path)
    assert got.returncode == 0
    missing = sorted(n for n in names if n not in got.stdout)
    assert not missing, f"run.py --help does not name {missing}"
    assert "python -m geoagent.geohint.judged" in got.stdout and "python -m geoagent.geohint.raw_import" in got.stdout
    assert "docs/geocontext-release.md" in got.stdout
