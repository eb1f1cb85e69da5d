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
- (ibid.) 7: ``run.py --help`` named no environment variable and not the paper-replication tools; it now lists every
  ``GEOAGENT_*`` variable the package reads (found by scanning the source, so a new one must be documented).
"""

from __future__ import annotations

import os
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


# -- 10a ---------------------------------------------------------------------------------------------------------

def _verify_config(tmp: Path, *, task_release: bool) -> Path:
    crawl = tmp / "crawl"
    crawl.mkdir(exist_ok=True)
    task = f'[geoverify]\nrelease_dir = "{crawl}"\n' if task_release else "[geoverify]\n"
    p = tmp / "gv.toml"
    p.write_text('[campaign]\nname = "gv"\nkind = "geoverify"\ncontact = "you@example.org"\n'
                 f'[paths]\nrelease_dir = "{crawl}"\n[budget]\ncap_usd = 1.0\n'
                 '[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim-1"\n' + task, encoding="utf-8")
    return p


def test_release_override_warning_names_the_task_key_that_wins_over_both(tmp_path):
    other = tmp_path / "release"
    other.mkdir()
    cfg = _verify_config(tmp_path, task_release=False)
    got = _run(["status", str(cfg)], tmp_path, GEOAGENT_RELEASE=str(other))
    line = next((ln for ln in got.stderr.splitlines() if "is overridden by $GEOAGENT_RELEASE" in ln), None)
    assert line is not None, got.stderr + got.stdout
    assert "unset GEOAGENT_RELEASE" in line
    # before: "... (the environment wins); unset GEOAGENT_RELEASE to use the file's folder" and nothing else
    assert "[geoverify] release_dir" in line and "wins over both" in line, line


# -- 10c ---------------------------------------------------------------------------------------------------------

GENERIC = ('[campaign]\nname = "fk"\nkind = "generic"\nseed = 3\n[budget]\ncap_usd = 1.0\n[generic]\nn_requests = 2\n'
           '[[models]]\nname = "gpt"\nprovider = "openai"\nmodel = "gpt-x"\nbase_url = "http://127.0.0.1:9/v1"\n'
           'api_key_env = "FR19_KEY"\nprice_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 2.0\n')


def test_an_api_key_variable_set_to_the_empty_string_is_called_set_but_empty(tmp_path):
    cfg = tmp_path / "fk.toml"
    cfg.write_text(GENERIC, encoding="utf-8")
    # in the environment
    got = _run(["run", str(cfg), "--simulate", "--no-live"], tmp_path, FR19_KEY="")
    assert got.returncode == 2, got.stdout + got.stderr
    warn = next(ln for ln in got.stdout.splitlines() if "FR19_KEY (model gpt" in ln)
    assert "set but empty in the environment" in warn, warn     # before: "API key variable not set ..."
    assert "variable FR19_KEY set but empty" in got.stdout.splitlines()[-1]
    # in .env
    (tmp_path / ".env").write_text("FR19_KEY=\n", encoding="utf-8")
    got = _run(["run", str(cfg), "--simulate", "--no-live"], tmp_path)
    warn = next(ln for ln in got.stdout.splitlines() if "FR19_KEY (model gpt" in ln)
    assert "set but empty in .env" in warn, warn
    # the real run refuses the same way
    got = _run(["run", str(cfg), "--no-live"], tmp_path)
    assert got.returncode == 2 and "set but empty" in got.stderr, got.stderr
    # truly unset: "not set", as before
    (tmp_path / ".env").unlink()
    got = _run(["run", str(cfg), "--simulate", "--no-live"], tmp_path)
    warn = next(ln for ln in got.stdout.splitlines() if "FR19_KEY (model gpt" in ln)
    assert "API key variable not set" in warn and "empty" not in warn, warn
