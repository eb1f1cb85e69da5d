"""The manifest records the release folder a campaign read, also where ``$GEOAGENT_RELEASE`` is set.

Before: ``manifest.json``'s ``config.paths.release_dir`` (:func:`geoagent.config.resolved_dict`) was always
``CampaignConfig.release_dir()``, the variable's folder when it is set, although a GeoVerify/GeoHint campaign whose
task section names its own ``release_dir`` (the demo's filled-in configs) plans from that one and reads nothing
under the variable's (the matching warning fix: commit 58a56a1, tests/test_root_override_task_release_dir.py). A
reader of the manifest was told the trials came from another folder. Now the field is the folder read; a replay file
under ``[paths] release_dir`` (which the variable moves) keeps the variable's folder. A real manifest written by
:class:`geoagent.runtime.manifest.Manifest`; real config files."""

from __future__ import annotations

import orjson

from geoagent.config import load_config
from geoagent.runtime.manifest import Manifest
from geoagent.sandbox.launch import campaign_release_dir
from test_root_override_task_release_dir import _config


def _recorded(cfg, tmp_path) -> str:
    m = Manifest(cfg, state_dir=tmp_path / "state")
    m.start_run(command="run")
    return orjson.loads(m.path.read_bytes())["config"]["paths"]["release_dir"]


def test_the_manifest_records_the_task_sections_release_dir_it_read(tmp_path, monkeypatch):
    other = tmp_path / "release"
    other.mkdir()
    monkeypatch.setenv("GEOAGENT_RELEASE", str(other))
    for kind in ("geoverify", "geohint"):
        cfg = load_config(_config(tmp_path, kind=kind, task_release=True))
        assert campaign_release_dir(cfg) == tmp_path / "crawl"
        # before: str(other), a folder the campaign never read
        assert _recorded(cfg, tmp_path / kind) == str(tmp_path / "crawl"), kind


def test_the_variables_folder_stays_recorded_where_it_is_read(tmp_path, monkeypatch):
    other = tmp_path / "release"
    other.mkdir()
    monkeypatch.setenv("GEOAGENT_RELEASE", str(other))
    cfg = load_config(_config(tmp_path, kind="geoverify", task_release=False))
    assert _recorded(cfg, tmp_path / "a") == str(other)
    cfg = load_config(_config(tmp_path, kind="geoverify", task_release=True, replay_under_release=True))
    assert _recorded(cfg, tmp_path / "b") == str(other)
