"""``--dry-run`` is ``--simulate`` (walkthrough 23, item 6: the docs say "the dry run" throughout, and
``run CONFIG --dry-run`` was refused as an unrecognized argument with no pointer to ``--simulate``)."""

from __future__ import annotations

import pytest

from geoagent.cli import main

CONFIG = """[campaign]
name = "alias"
kind = "generic"
seed = 2
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[generic]
n_requests = 3
"""


@pytest.mark.parametrize("flag", ["--simulate", "--dry-run"])
def test_dry_run_is_the_same_flag_as_simulate(isolated_roots, capsys, flag):
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(cfg), flag, "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "dry run (no call made, nothing enqueued)" in out and "3 calls" in out, out
    assert not (isolated_roots / "queues").exists() and not (isolated_roots / "state").exists()
