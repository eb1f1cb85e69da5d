"""The per-run line of a replay campaign says its answers were replayed from the file, not that new model
calls were made (the replay provider calls no model): the release sample's GeoVerify replay, alone and next
to a simulated model. Expected counts come from the replay file itself (its records without an error)."""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "geocontext_replay.toml"


def _answerable(raw: Path) -> int:
    """Records of the replay file with an answer (a recorded error is not planned)."""
    return sum(1 for line in raw.read_bytes().splitlines() if line.strip() and not orjson.loads(line).get("error"))


def test_replay_run_line_names_the_file_not_model_calls(release_dir, isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    raw = release_dir / "verify_raw_sample.jsonl"
    n = _answerable(raw)
    assert main(["run", str(CONFIG), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert f"this run: {n} answers replayed from {raw}; 0 answers reused (stored by an earlier run, used instead of a call)" in out, out
    assert "new model call" not in out
    # the re-run finds everything done: still no "model calls"
    assert main(["run", str(CONFIG), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert f"this run: 0 answers replayed from {raw}; 0 answers reused (stored by an earlier run, used instead of a call)" in out, out


def test_replay_next_to_a_simulated_model_counts_each(release_dir, isolated_roots, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    raw = release_dir / "verify_raw_sample.jsonl"
    text = CONFIG.read_text(encoding="utf-8").replace('name = "geocontext-replay"', 'name = "replay-and-sim"')
    text = text.replace("cap_usd = 0.0", "cap_usd = 1.0").replace("[geoverify]", """[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 200

[geoverify]""", 1)
    cfg = tmp_path / "mixed.toml"
    cfg.write_text(text, encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    n_sim = int(re.search(r"\n    sim: (\d+) calls", capsys.readouterr().out).group(1))
    assert n_sim > 0
    assert main(["run", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    want = f"this run: {n_sim} new model calls; {_answerable(raw)} answers replayed from {raw}; 0 answers reused (stored by an earlier run, used instead of a call)"
    assert want in out, out
