"""A missing release says where the public release is; a crawl folder that is not written yet says to crawl first
(walkthrough findings: the shipped replay and sandbox configs exit 2 without saying where to get the release; a
crawl's output folder got the release's wording)."""

from __future__ import annotations

from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.cli import main
from geoagent.data.importer import import_release
from geoagent.paths import RELEASE_URL, is_state_folder

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "geoagent" / "configs"
#: the paper's reproducibility statement (seed 000): "Code and data: https://github.com/Yifan1209/geocontext"
PAPER_URL = "https://github.com/Yifan1209/geocontext"


def test_release_url_is_the_papers():
    assert RELEASE_URL == PAPER_URL
    seeds = list((REPO.parent / "shared" / "seeds").glob("000_*.txt"))
    if seeds:  # the statement itself, where the seed text is at hand
        assert f"Code and data: {PAPER_URL}" in seeds[0].read_text(encoding="utf-8")


@pytest.mark.parametrize("config", ["geocontext_replay.toml", "geohint_sandbox.toml"])
def test_shipped_configs_without_release_name_where_to_get_it(isolated_roots, monkeypatch, capsys, config):
    gone = isolated_roots / "no-release-here"
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(gone))
    assert main(["run", str(CONFIGS / config), "--simulate", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "GeoContext release file not found" in err and f"the folder {gone} does not exist" in err
    assert PAPER_URL in err and f"{C.ENV_RELEASE_DIR}=" in err and "[paths] release_dir" in err
    assert "crawl output" not in err


def test_crawl_folder_not_written_yet_says_crawl_first(isolated_roots, monkeypatch):
    # isolated_roots sets GEOAGENT_STATE: a folder directly in the state root is a campaign's state folder
    crawl = isolated_roots / "state" / "crawl-sandbox"
    assert is_state_folder(crawl) and not is_state_folder(isolated_roots / "elsewhere")
    with pytest.raises(FileNotFoundError) as e:
        import_release(crawl)
    msg = str(e.value)
    assert msg.startswith(f"crawl output not found: {crawl / 'sites.csv'} (the folder {crawl} does not exist)")
    assert "python run.py crawl" in msg and "'crawl-sandbox'" in msg
    assert "GeoContext release file not found" not in msg and "data/sites.csv" not in msg


def test_crawl_folder_that_exists_without_sites(tmp_path):
    # anywhere: a folder holding a campaign manifest is a state folder (the crawl started, admitted no city yet)
    crawl = tmp_path / "elsewhere" / "my-crawl"
    crawl.mkdir(parents=True)
    (crawl / C.MANIFEST_FILE).write_text("{}", encoding="utf-8")
    with pytest.raises(FileNotFoundError) as e:
        import_release(crawl)
    assert str(e.value).startswith(f"crawl output not found: {crawl / 'sites.csv'} (the folder {crawl} holds no sites.csv)")


def test_configured_state_root_counts_too(tmp_path, monkeypatch, capsys):
    """[paths] state in the campaign file (no GEOAGENT_STATE): an evaluation pointed at a crawl folder under it."""
    monkeypatch.delenv(C.ENV_STATE_ROOT, raising=False)
    monkeypatch.delenv(C.ENV_RELEASE_DIR, raising=False)
    st = tmp_path / "mystate"
    cfg = tmp_path / "gv.toml"
    cfg.write_text(
        f'[campaign]\nname = "gv"\nkind = "geoverify"\n[paths]\nstate = "{st}"\nqueues = "{tmp_path / "q"}"\n'
        f'release_dir = "{st / "crawl-x"}"\n[budget]\ncap_usd = 0.0\n'
        '[[models]]\nname = "s"\nprovider = "simulated"\nmodel = "s1"\n', encoding="utf-8")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "crawl output not found" in err and str(st / "crawl-x" / "sites.csv") in err
    # the plain release message where the folder is not a state folder
    with pytest.raises(FileNotFoundError) as e:
        import_release(tmp_path / "rel", state_root=st)
    assert str(e.value).startswith("GeoContext release file not found") and PAPER_URL in str(e.value)


@pytest.mark.parametrize("config", ["geocontext_replay.toml", "geohint_sandbox.toml"])
def test_release_variable_pointing_at_the_folder_above_names_the_subfolder(isolated_roots, monkeypatch, capsys, config):
    """walk21 #11: GEOAGENT_RELEASE set to the folder the release was cloned into (``.../reference`` holding
    ``geocontext/``) said only that the folder holds no sites.csv; now it names the subfolder that does. A sibling
    without the release's files (and a hidden one that has them) is not offered."""
    above = isolated_roots / "reference"
    (above / "geocontext" / "data").mkdir(parents=True)
    (above / "geocontext" / "data" / "sites.csv").write_text("site_id\n", encoding="utf-8")
    (above / "aaa-notes").mkdir()
    (above / ".cache").mkdir()
    (above / ".cache" / "sites.csv").write_text("site_id\n", encoding="utf-8")
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(above))
    assert main(["run", str(CONFIGS / config), "--simulate", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "GeoContext release file not found" in err, err
    assert f"its subfolder {above / 'geocontext'} holds data/sites.csv: is that the release folder?" in err, err
    assert "aaa-notes" not in err and ".cache" not in err


def test_release_folder_without_a_release_below_adds_no_subfolder(isolated_roots, monkeypatch, capsys):
    plain = isolated_roots / "plain"
    (plain / "sub").mkdir(parents=True)
    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(plain))
    assert main(["run", str(CONFIGS / "geocontext_replay.toml"), "--simulate", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert f"the folder {plain} holds no" in err and "subfolder" not in err, err
