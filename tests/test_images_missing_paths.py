"""The missing-image refusal says which folder its paths are resolved against (fresh-user finding: with
``image_root`` unset it said ``geoverify.image_root = not set`` and listed the trial table's paths, read as
relative to the working directory, without saying so)."""

from __future__ import annotations

import os

import pytest

from geoagent.config import ConfigError, config_from_dict
from geoagent.image_files import check_missing, tally


def _cfg():
    return config_from_dict({"campaign": {"name": "c", "kind": "geoverify"}, "budget": {"cap_usd": 1.0},
                             "models": [{"name": "claude", "provider": "anthropic", "model": "claude-sonnet-4-5",
                                         "max_output_tokens": 10, "price_input_usd_per_mtok": 3.0,
                                         "price_output_usd_per_mtok": 15.0}]})


def _refusal(image_root):
    msgs = [(f"k{i}", {"model": "claude", "image_id": f"i{i}"}) for i in range(2)]
    paths = {"i0": "site_a/i0.jpg", "i1": "site_b/i1.jpg"}
    found = tally(msgs, lambda p: (os.path.join(image_root, paths[p["image_id"]]) if image_root
                                   else paths[p["image_id"]]),
                  task="GeoVerify", key="geoverify.image_root", image_root=image_root)
    cfg = _cfg()
    with pytest.raises(ConfigError) as exc:
        check_missing(cfg, found, fix="set geoverify.image_root")
    return str(exc.value)


def test_unset_root_says_paths_are_not_resolved():
    msg = _refusal(None)
    assert "geoverify.image_root = not set (no folder: the GeoVerify table's image paths are looked up nowhere" in msg
    # the config key is named (walk19 10c: "since the key is not set" read as the API key)
    assert ("First missing (paths as written in the table: not resolved against any folder, since "
            "geoverify.image_root is not set): site_a/i0.jpg; site_b/i1.jpg") in msg


def test_relative_root_names_the_working_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    msg = _refusal("photos")
    assert f"'photos' (= {tmp_path / 'photos'}), which does not exist" in msg
    assert f"First missing (relative to the working directory {tmp_path}): photos/site_a/i0.jpg" in msg


def test_absolute_root_lists_absolute_paths(tmp_path):
    msg = _refusal(str(tmp_path))
    assert f"First missing: {tmp_path / 'site_a' / 'i0.jpg'}" in msg
