"""A stored scored row whose JSON is valid but whose fields are not a scored row's is one error naming the file,
the table and the row's key (carried from session 20, which did so for JSON that cannot be read).

Before: a ``geoverify_scored`` row of campaign.sqlite edited to ``{"garbage": 1}`` ended the next run in a Python
traceback, exit 1 (``TypeError: '<' not supported between instances of 'NoneType' and 'str'`` from the SDT
table, the row counted as a model named None); a ``geohint_scored`` row so edited ended it with ``error: GeoHint
result lacks ['key', 'site', ...]``, naming no file or row. Now both say which row of which file, exit 2, the run
recorded ``failed``; ``run.py export`` says the same (its ``scored`` column is the report's rule, which cannot
judge such a row) instead of a traceback or a row of empty fields.

Real runs through the CLI: the release replay (GeoVerify) and a three-site GeoHint campaign over the sandbox
fakes (both skipped without the release data).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from _model_harness import geohint_three_sites_toml
from geoagent.cli import main

REPLAY = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml"


class _Done:
    def __init__(self, rc: int, out: str, err: str) -> None:
        self.returncode, self.stdout, self.stderr = rc, out, err


def _cli(capsys, *args: str) -> _Done:
    """``run.py ARGS`` in this process (the CLI's ``main``: its exit code, stdout and stderr)."""
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return _Done(rc, got.out, got.err)


def _edit_row(db: Path, table: str, key: str, text: str) -> None:
    with sqlite3.connect(db) as c:
        c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", (text, table, key))


def _geohint_config(tmp: Path) -> Path:
    cfg = tmp / "gh.toml"
    cfg.write_text(geohint_three_sites_toml("gh-rows", geohint="n_boot = 0"), encoding="utf-8")
    return cfg


#: stored rows of the wrong shape: fields missing, not an object, fields of the wrong type
WRONG = ('{"garbage": 1}', '[1, 2]', '{"trial_id": 5, "model": ["m"], "key": 3}')


@pytest.mark.parametrize("kind", ["geoverify", "geohint"])
def test_a_scored_row_of_the_wrong_shape_is_named_and_the_run_recorded_failed(kind, release_dir, tmp_path, monkeypatch,
                                                                             capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    if kind == "geoverify":
        cfg, name, table = REPLAY, "geocontext-replay", "geoverify_scored"
    else:
        cfg, name, table = _geohint_config(tmp_path), "gh-rows", "geohint_scored"
    first = _cli(capsys, "run", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-2000:] + first.stderr[-2000:]
    state = tmp_path / "state" / name
    db = state / "campaign.sqlite"
    where = str(db.relative_to(tmp_path))  # relative paths of the config are taken from the working directory
    with sqlite3.connect(db) as c:
        key, good = c.execute("SELECT key, row FROM results WHERE tbl = ? ORDER BY key LIMIT 1", (table,)).fetchone()

    statuses = ["complete"]
    for text in WRONG:  # one campaign, each wrong row in turn (a run per row: the suite's time)
        _edit_row(db, table, key, text)
        out = _cli(capsys, "run", str(cfg), "--no-live")
        assert out.returncode == 2, (text, out.stdout[-2000:] + out.stderr[-3000:])
        err = out.stderr
        assert "Traceback" not in err, err[-3000:]
        assert where in err and repr(table) in err and repr(key) in err, err
        assert "outside geoagent" in err, err
        statuses.append("failed")
        runs = json.loads((state / "manifest.json").read_text())["runs"]
        assert [r["status"] for r in runs] == statuses, runs
        with sqlite3.connect(db) as c:  # nothing stored was changed
            assert c.execute("SELECT row FROM results WHERE tbl = ? AND key = ?", (table, key)).fetchone() == (text,)
        exp = _cli(capsys, "export", str(cfg), "--out", str(tmp_path / "out" / "x"))
        assert exp.returncode == 2, exp.stdout[-2000:] + exp.stderr[-2000:]
        assert "Traceback" not in exp.stderr and repr(key) in exp.stderr and where in exp.stderr, exp.stderr
        assert not (tmp_path / "out" / "x").exists()  # the folder it made is not left behind, empty

    _edit_row(db, table, key, good)  # the row as the scorer wrote it: the campaign runs again
    again = _cli(capsys, "run", str(cfg), "--no-live")
    assert again.returncode == 0, again.stdout[-2000:] + again.stderr[-2000:]
