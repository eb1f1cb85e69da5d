"""``--dry-run`` is ``--simulate`` (walkthrough 23, item 6: the docs say "the dry run" throughout, and
``run CONFIG --dry-run`` was refused as an unrecognized argument with no pointer to ``--simulate``)."""

from __future__ import annotations

import pytest
from test_status_where_it_looked import CONFIG  # a generic campaign of 3 simulated calls

from geoagent.cli import main


@pytest.mark.parametrize("flag", ["--simulate", "--dry-run"])
def test_dry_run_is_the_same_flag_as_simulate(isolated_roots, capsys, flag):
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(cfg), flag, "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "dry run (no call made, nothing enqueued)" in out and "3 calls" in out, out
    assert not (isolated_roots / "queues").exists() and not (isolated_roots / "state").exists()
