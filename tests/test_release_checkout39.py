"""A release folder that is a checkout of the release repository (files under ``data/``) serves the replay file too
(newuser39 #1: the docs say such a folder is found; the trial tables were, the replay file was not, exit 2)."""

from __future__ import annotations

from pathlib import Path

from geoagent.config import config_from_dict

REPLAY = {"path": "../shared/reference/geocontext/verify_raw_sample.jsonl", "key_field": "replay_key",
          "record_key_fields": ["trial_id", "model"], "text_field": "raw"}


def _cfg():
    return config_from_dict({"campaign": {"name": "rc39"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
                             "models": [{"name": "r", "provider": "replay", "model": "r", "replay": REPLAY}]})


def test_the_replay_file_is_found_under_a_checkouts_data_folder(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "verify_raw_sample.jsonl").write_text("{}\n", encoding="utf-8")
    monkeypatch.setenv("GEOAGENT_RELEASE", str(tmp_path))
    assert _cfg().replay_path("r") == tmp_path / "data" / "verify_raw_sample.jsonl"


def test_a_file_at_the_release_folders_top_wins_and_a_missing_one_is_named_there(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(tmp_path))
    assert _cfg().replay_path("r") == tmp_path / "verify_raw_sample.jsonl"  # neither: the error names the top
    (tmp_path / "data").mkdir()
    for where in (tmp_path, tmp_path / "data"):
        (where / "verify_raw_sample.jsonl").write_text("{}\n", encoding="utf-8")
    assert _cfg().replay_path("r") == tmp_path / "verify_raw_sample.jsonl"


def test_a_path_outside_the_release_is_used_as_written(tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(tmp_path))
    cfg = config_from_dict({"campaign": {"name": "rc39"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
                            "models": [{"name": "r", "provider": "replay", "model": "r",
                                        "replay": {**REPLAY, "path": "elsewhere/answers.jsonl"}}]})
    assert cfg.replay_path("r") == Path("elsewhere/answers.jsonl")
