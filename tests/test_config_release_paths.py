"""The release folder override reaches every release path, and a missing release reads the same everywhere.

A first-time user ran ``GEOAGENT_RELEASE=/path/to/geocontext python run.py run
geoagent/configs/geocontext_replay.toml`` from a clone with no ``../shared`` beside it: the replay file stayed
at ``../shared/reference/geocontext/verify_raw_sample.jsonl`` (exit 2), although the README lists
``replay.path`` among the paths ``GEOAGENT_RELEASE`` overrides. And the three places that look for release
files (release importer, sandbox gazetteer, replay provider) said three different things.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.config import config_from_dict, load_config, provider_settings, resolved_dict
from geoagent.data.importer import import_release
from geoagent.paths import missing_release_error
from geoagent.providers import ProviderSettings, make_provider
from geoagent.sandbox.gazetteer import Gazetteer

REPO = Path(__file__).resolve().parents[1]
REPLAY_CONFIG = REPO / "geoagent" / "configs" / "geocontext_replay.toml"
HINT = f"point at the release folder with {C.ENV_RELEASE_DIR}=/path/to/geocontext or [paths] release_dir"


def _replay_cfg(path: str, release_dir: str | None = None):
    doc = {
        "campaign": {"name": "rp", "kind": "generic"},
        "budget": {"cap_usd": 0.0},
        "models": [{"name": "r", "provider": "replay", "model": "recorded", "replay": {"path": path}}],
    }
    if release_dir is not None:
        doc["paths"] = {"release_dir": release_dir}
    return config_from_dict(doc)


@pytest.fixture
def no_release_env(monkeypatch):
    monkeypatch.delenv(C.ENV_RELEASE_DIR, raising=False)


def test_replay_path_under_the_default_release_follows_the_env(monkeypatch, tmp_path, no_release_env):
    default = C.DEFAULT_RELEASE_DIR + "/verify_raw_sample.jsonl"
    cfg = _replay_cfg(default)
    assert cfg.replay_path("r") == Path(default)  # no override: as written
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path / "rel"))
    assert cfg.replay_path("r") == tmp_path / "rel" / "verify_raw_sample.jsonl"
    # spelled differently but the same folder (./ and a redundant ..) still counts
    odd = _replay_cfg("./" + C.DEFAULT_RELEASE_DIR.replace("reference/", "reference/x/../") + "/sub/f.jsonl")
    assert odd.replay_path("r") == tmp_path / "rel" / "sub" / "f.jsonl"
    # the provider settings carry the resolved file and the folder it came from
    ps = provider_settings(cfg, "r")
    assert ps.replay_path == str(tmp_path / "rel" / "verify_raw_sample.jsonl")
    assert ps.replay_release_dir == str(tmp_path / "rel")
    # the manifest's resolved paths name the file replayed
    assert resolved_dict(cfg)["paths"]["replay"] == {"r": str(tmp_path / "rel" / "verify_raw_sample.jsonl")}


def test_replay_path_follows_paths_release_dir_and_leaves_other_paths_alone(monkeypatch, tmp_path, no_release_env):
    # [paths] release_dir moves a default-folder replay path too (env unset)
    cfg = _replay_cfg(C.DEFAULT_RELEASE_DIR + "/verify_raw.jsonl", release_dir=str(tmp_path / "cfgrel"))
    assert cfg.replay_path("r") == tmp_path / "cfgrel" / "verify_raw.jsonl"
    # a path written under the configured release folder follows the env override
    cfg2 = _replay_cfg("data/gc/verify_raw.jsonl", release_dir="data/gc")
    assert cfg2.replay_path("r") == Path("data/gc/verify_raw.jsonl")
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path / "env"))
    assert cfg2.replay_path("r") == tmp_path / "env" / "verify_raw.jsonl"
    # a recording of our own (outside any release folder), relative or absolute, is used as written
    for own in ("recordings/run1.jsonl", str(tmp_path / "own.jsonl"), "../shared/reference/other/x.jsonl"):
        c = _replay_cfg(own)
        assert c.replay_path("r") == Path(own) and not c.replay_in_release("r")
        assert provider_settings(c, "r").replay_release_dir is None


def test_an_absolute_replay_path_under_the_env_release_is_in_the_release(monkeypatch, tmp_path, no_release_env):
    """break34 export #1: the docs' set-up for the full release (``GEOAGENT_RELEASE=<folder>``, ``replay.path =
    "<folder>/verify_raw.jsonl"``) read the file as outside the release, so its trials that were not replayed, and
    its recorded API failures, were left out of the missing list."""
    rel = tmp_path / "gc" / "data"
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(rel))
    cfg = _replay_cfg(str(rel / "verify_raw.jsonl"))
    assert cfg.replay_in_release("r") and cfg.replay_path("r") == rel / "verify_raw.jsonl"
    # spelled with a redundant segment, or relative to the working directory: the same file
    monkeypatch.chdir(tmp_path)
    for spelled in (str(rel / "x" / ".." / "verify_raw.jsonl"), "gc/data/verify_raw.jsonl"):
        c = _replay_cfg(spelled)
        assert c.replay_in_release("r") and c.replay_path("r") == rel / "verify_raw.jsonl"
    # the folder itself, and a file beside it, are not in it
    assert not _replay_cfg(str(rel)).replay_in_release("r")
    assert not _replay_cfg(str(tmp_path / "gc" / "other.jsonl")).replay_in_release("r")


def test_a_replay_file_under_the_task_sections_release_is_in_the_release(monkeypatch, tmp_path, no_release_env):
    """review41a #6: a GeoVerify campaign plans from its ``[geoverify] release_dir``; a replay file there was read as
    outside the release unless ``$GEOAGENT_RELEASE`` named the same folder, so one config gave two reports."""
    own = tmp_path / "crawl"
    doc = {"campaign": {"name": "rs", "kind": "geoverify"}, "budget": {"cap_usd": 0.0},
           "models": [{"name": "r", "provider": "replay", "model": "recorded",
                       "replay": {"path": str(own / "verify_raw.jsonl")}}],
           "geoverify": {"release_dir": str(own)}}
    for env in (None, str(own), str(tmp_path / "other")):  # unset, the same folder, another one
        if env is None:
            monkeypatch.delenv(C.ENV_RELEASE_DIR, raising=False)
        else:
            monkeypatch.setenv(C.ENV_RELEASE_DIR, env)
        cfg = config_from_dict(doc)
        assert cfg.replay_in_release("r") and cfg.replay_path("r") == own / "verify_raw.jsonl", env
        assert provider_settings(cfg, "r").replay_release_dir == str(own)
        assert resolved_dict(cfg)["paths"]["release_dir"] == str(own)
    # a file beside the folder is not in it
    beside = config_from_dict({**doc, "models": [{**doc["models"][0], "replay": {"path": str(tmp_path / "x.jsonl")}}]})
    assert not beside.replay_in_release("r")


def test_replay_campaign_dry_run_from_a_clone_without_shared_beside_it(release_dir, tmp_path):
    """The user's command, from a working directory with no ../shared: exit 0 with the release's 336 trials."""
    work = tmp_path / "clone" / "work"
    work.mkdir(parents=True)
    env = {**os.environ, C.ENV_RELEASE_DIR: str(release_dir), "PYTHONPATH": str(REPO),
           C.ENV_STATE_ROOT: str(tmp_path / "state"), C.ENV_QUEUES_ROOT: str(tmp_path / "queues")}
    assert not (work / C.DEFAULT_RELEASE_DIR).exists()
    done = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(REPLAY_CONFIG), "--simulate"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    n_records = sum(1 for line in (release_dir / "verify_raw_sample.jsonl").open(encoding="utf-8") if line.strip())
    assert f"planned {n_records} requests" in done.stdout
    # without the override the same command names the file, the missing folder and both ways to point at it
    env.pop(C.ENV_RELEASE_DIR)
    bad = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(REPLAY_CONFIG), "--simulate"],
                         cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2
    err = bad.stderr.strip()
    assert err.startswith("error: GeoContext release file not found: ../shared/reference/geocontext/verify_raw_sample.jsonl")
    assert f"does not exist); {HINT}" in err
    assert os.path.abspath(work / C.DEFAULT_RELEASE_DIR) in err  # the folder as resolved from here


def test_every_missing_release_file_reads_the_same(tmp_path):
    gone = tmp_path / "no-such-release"
    empty = tmp_path / "empty-release"
    empty.mkdir()
    messages = {}
    with pytest.raises(FileNotFoundError) as e:
        import_release(gone)
    messages["importer, no folder"] = str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        import_release(empty)
    messages["importer, empty folder"] = str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        Gazetteer.from_release(gone)
    messages["gazetteer"] = str(e.value)
    with pytest.raises(FileNotFoundError) as e:
        make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(gone / "verify_raw_sample.jsonl"),
                                       replay_release_dir=str(gone)))
    messages["replay"] = str(e.value)
    for where, msg in messages.items():
        assert msg.startswith("GeoContext release file not found: "), where
        assert HINT in msg, where
    assert f"{gone / 'sites.csv'} nor {gone / 'data' / 'sites.csv'}" in messages["importer, no folder"]
    assert f"the folder {gone} does not exist" in messages["importer, no folder"]
    assert f"the folder {empty} holds no sites.csv nor data/sites.csv" in messages["importer, empty folder"]
    assert f"{gone / 'sites.csv'} (the folder {gone} does not exist)" in messages["gazetteer"]
    assert "replay file of model 'm'; the folder" in messages["replay"]
    # a relative folder is shown as given and as resolved from the working directory
    rel = str(missing_release_error("../nowhere-xyz", "../nowhere-xyz/sites.csv"))
    assert f"the folder ../nowhere-xyz (= {os.path.abspath('../nowhere-xyz')}) does not exist" in rel


def test_missing_release_replay_file_names_the_models_entry(monkeypatch, tmp_path):
    # walkthrough: "replay file of model 'recorded'" named the `model` value; the entry is 'release-replay'
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path / "nonexistent"))
    cfg = load_config(REPLAY_CONFIG)
    with pytest.raises(FileNotFoundError) as e:
        make_provider(provider_settings(cfg, "release-replay"))
    assert "(replay file of [[models]] entry 'release-replay' (model 'recorded'); the folder" in str(e.value)
    mine = cfg.model_copy(update={"models": [cfg.models[0].model_copy(
        update={"replay": cfg.models[0].replay.model_copy(update={"path": str(tmp_path / "mine.jsonl")})})]})
    with pytest.raises(FileNotFoundError) as e:
        make_provider(provider_settings(mine, "release-replay"))
    assert str(e.value).startswith("replay file for [[models]] entry 'release-replay' (model 'recorded') not found")


def test_replay_file_outside_the_release_gets_its_own_message(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(tmp_path / "mine.jsonl")))
    msg = str(e.value)
    assert msg.startswith(f"replay file for model 'm' not found: {tmp_path / 'mine.jsonl'}")
    assert f"the folder {tmp_path} holds no mine.jsonl" in msg and "set replay.path" in msg
    assert C.ENV_RELEASE_DIR not in msg  # not a release file: no release hint


def test_the_replay_config_loads_and_records_its_replay_file(monkeypatch, tmp_path):
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path))
    cfg = load_config(REPLAY_CONFIG)
    (m,) = cfg.models
    assert cfg.replay_path(m) == tmp_path / "verify_raw_sample.jsonl"
    assert json.loads(json.dumps(resolved_dict(cfg)))["paths"]["replay"] == {m.name: str(tmp_path / "verify_raw_sample.jsonl")}


def test_an_environment_root_overriding_the_file_s_folder_is_a_warning(monkeypatch, tmp_path):
    """A GeoVerify-over-a-crawl file names its crawl in ``[paths] release_dir``; with ``$GEOAGENT_RELEASE`` set
    in the shell to the real release, the environment wins (documented) and the campaign would read the
    release instead: the load now says so, naming the key, the variable and both folders. The same for
    queues and state; nothing is said when both name the same folder or the file sets no folder."""
    from geoagent.config import ConfigWarning

    doc = {"campaign": {"name": "rp", "kind": "generic"}, "budget": {"cap_usd": 0.0},
           "models": [{"name": "s", "provider": "simulated", "model": "sim-1"}],
           "paths": {"release_dir": str(tmp_path / "crawl"), "queues": str(tmp_path / "q"), "state": "st"}}
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path / "release"))
    monkeypatch.setenv(C.ENV_QUEUES_ROOT, str(tmp_path / "q") + "/")   # the same folder: no warning
    monkeypatch.delenv(C.ENV_STATE_ROOT, raising=False)
    with pytest.warns(ConfigWarning) as got:
        cfg = config_from_dict(doc, source="gv.toml")
    lines = [str(w.message) for w in got if issubclass(w.category, ConfigWarning)]
    assert [x for x in lines if "overridden" in x] == [
        f"gv.toml: [paths] release_dir = {str(tmp_path / 'crawl')!r} is overridden by "
        f"${C.ENV_RELEASE_DIR} = {str(tmp_path / 'release')!r} (the environment wins); "
        f"unset {C.ENV_RELEASE_DIR} to use the file's folder"]
    assert cfg.release_dir() == tmp_path / "release"

    monkeypatch.setenv(C.ENV_STATE_ROOT, str(tmp_path / "other-state"))
    monkeypatch.delenv(C.ENV_RELEASE_DIR)
    with pytest.warns(ConfigWarning) as got:
        config_from_dict(doc, source="gv.toml")
    assert [str(w.message).split(" is overridden")[0] for w in got if "overridden" in str(w.message)] == [
        "gv.toml: [paths] state = 'st'"]

    import warnings
    monkeypatch.delenv(C.ENV_STATE_ROOT)
    doc.pop("paths")
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path / "release"))
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConfigWarning)
        config_from_dict(doc, source="gv.toml")     # the file names no folder: the variable is simply used
