"""GeoVerify's ``release import`` line counts the release's recorded responses only when a replay model answers
from them (from the release folder), not for a replay model answering from a file of its own.

Before: any replay model made the line say ``336 recorded responses (verify_raw_sample.jsonl)``, also one whose
``replay.path`` is its own recording outside the release, so the line named a file no model read.
"""
from __future__ import annotations

import shutil

from test_geoverify_summary_s12 import _cfg, _import_line, _summary

REPLAY = {"key_field": "replay_key", "record_key_fields": ["trial_id", "model"], "text_field": "raw"}


def test_own_replay_file_does_not_count_the_release_s_responses(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    own = tmp_path / "my_recording.jsonl"
    shutil.copyfile(release_dir / "verify_raw_sample.jsonl", own)
    replay = [{"name": "rec", "provider": "replay", "model": "recorded", "replay": {"path": str(own), **REPLAY}}]
    line = _import_line(_summary(_cfg(release_dir, "gv-own", replay)))
    assert "recorded responses" not in line and "verify_raw" not in line, line
