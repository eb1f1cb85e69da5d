"""A stored scored row whose JSON is valid but whose fields are not a scored row's is one error naming the file,
the table and the row's key (carried from session 20, which did so for JSON that cannot be read).

Before: a ``geoverify_scored`` row of campaign.sqlite edited to ``{"garbage": 1}`` ended the next run in a Python
traceback, exit 1 (``TypeError: '<' not supported between instances of 'NoneType' and 'str'`` from the SDT
table, the row counted as a model named None); a ``geohint_scored`` row so edited ended it with ``error: GeoHint
result lacks ['key', 'site', ...]``, naming no file or row. Now both say which row of which file, exit 2, the run
recorded ``failed``; ``run.py export`` says the same (its ``scored`` column is the report's rule, which cannot
judge such a row) instead of a traceback or a row of empty fields.

Real ``run.py`` subprocesses: the release replay (GeoVerify) and a three-site GeoHint campaign over the sandbox
fakes (both skipped without the release data).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from _model_harness import SANDBOX_GEOCODER_TOML, SANDBOX_GPT_TOML

REPO = Path(__file__).resolve().parents[1]
REPLAY = REPO / "geoagent" / "configs" / "geocontext_replay.toml"


def _cli(cwd: Path, release: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_RELEASE": str(release)}
    for k in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        env.pop(k, None)
    return subprocess.run([sys.executable, str(REPO / "run.py"), *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=300)


def _edit_first_row(db: Path, table: str, text: str) -> str:
    with sqlite3.connect(db) as c:
        (key,) = c.execute("SELECT key FROM results WHERE tbl = ? ORDER BY key LIMIT 1", (table,)).fetchone()
        c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", (text, table, key))
    return key


def _geohint_config(tmp: Path) -> Path:
    cfg = tmp / "gh.toml"
    cfg.write_text(f"""
[campaign]
name = "gh-rows"
kind = "geohint"
seed = 1
contact = "mailto:you@example.org"

[budget]
cap_usd = 5.0

{SANDBOX_GPT_TOML}
[geohint]
conditions = ["baseline", "forced"]
images = "synthetic"
sites = ["tokyo_shibuya", "nyc_soho", "paris_marais"]
images_per_site = 1
n_boot = 0

{SANDBOX_GEOCODER_TOML}""", encoding="utf-8")
    return cfg


@pytest.mark.parametrize("kind", ["geoverify", "geohint"])
@pytest.mark.parametrize("text", ['{"garbage": 1}', '[1, 2]', '{"trial_id": 5, "model": ["m"], "key": 3}'])
def test_a_scored_row_of_the_wrong_shape_is_named_and_the_run_recorded_failed(kind, text, release_dir, tmp_path):
    if kind == "geoverify":
        cfg, name, table = REPLAY, "geocontext-replay", "geoverify_scored"
    else:
        cfg, name, table = _geohint_config(tmp_path), "gh-rows", "geohint_scored"
    first = _cli(tmp_path, release_dir, "run", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    state = tmp_path / "state" / name
    db = state / "campaign.sqlite"
    key = _edit_first_row(db, table, text)

    out = _cli(tmp_path, release_dir, "run", str(cfg), "--no-live")
    assert out.returncode == 2, out.stdout[-2000:] + out.stderr[-3000:]
    err = out.stderr
    assert "Traceback" not in err, err[-3000:]
    where = str(db.relative_to(tmp_path))  # relative paths of the config are taken from the working directory
    assert where in err and repr(table) in err and repr(key) in err, err
    assert "outside geoagent" in err, err
    runs = json.loads((state / "manifest.json").read_text())["runs"]
    assert [r["status"] for r in runs] == ["complete", "failed"], runs
    with sqlite3.connect(db) as c:  # nothing stored was changed
        assert c.execute("SELECT row FROM results WHERE tbl = ? AND key = ?", (table, key)).fetchone() == (text,)

    exp = _cli(tmp_path, release_dir, "export", str(cfg))
    assert exp.returncode == 2, exp.stdout[-2000:] + exp.stderr[-2000:]
    assert "Traceback" not in exp.stderr and repr(key) in exp.stderr and where in exp.stderr, exp.stderr
