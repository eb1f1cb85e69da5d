"""Walk27 #3: a model fake started by hand (``python -m geoagent.sandbox.llm_anthropic``) from a checkout without
``../shared/reference/geocontext`` beside it found no release folder, so every simulated GeoHint answer said
"Unknown city" (hit rates '—', 100 % unresolved) with no word why, while the in-process fakes answered over the
same data. The fakes now take ``--release-dir DIR`` and say at start when they found no release folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.geohint import simulate
from geoagent.sandbox.llm_common import cli_main


class _Stop(Exception):
    pass


def _factory(**_kw):
    raise _Stop  # cli_main got past its options and notes: stop before it serves


def test_a_fake_without_a_release_folder_says_so_after_its_banner(monkeypatch):
    """The note comes after the ``listening on`` banner, which scripts (and tests) read as the first line: printed
    before it, it broke every banner check in a fresh clone without the release data (caught by the fresh-clone
    CI run of 2d3d42d)."""
    from aiohttp import web

    from geoagent.sandbox import llm_common

    seen = {}
    monkeypatch.setattr(simulate, "_release_dir", lambda: None)
    monkeypatch.setattr(llm_common, "run_forever", lambda app, host, port, **kw: seen.update(kw))
    cli_main(lambda **_kw: web.Application(), "fake", [])
    notes = list(seen["notes"])
    # the settings line first (walk28), then the note
    assert len(notes) == 2 and notes[0].startswith("settings: ") and notes[1].startswith(
        "note: no GeoContext release folder found"), notes
    assert "--release-dir DIR" in notes[1]
    monkeypatch.setattr(simulate, "_release_dir", lambda: Path("/somewhere"))
    cli_main(lambda **_kw: web.Application(), "fake", [])
    assert [n for n in seen["notes"] if not n.startswith("settings: ")] == []


def test_release_dir_points_the_simulated_answers_at_a_folder(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv(C.ENV_RELEASE_DIR, raising=False)
    (tmp_path / "sites.csv").write_text("site,city,lat,lon\nx,Lyon,45.76,4.83\n", encoding="utf-8")
    try:
        with pytest.raises(_Stop):
            cli_main(_factory, "fake", ["--release-dir", str(tmp_path)])
        assert simulate.release_dir_found() == tmp_path
        assert "no GeoContext release folder" not in capsys.readouterr().err
    finally:
        os.environ.pop(C.ENV_RELEASE_DIR, None)
    with pytest.raises(SystemExit):
        cli_main(_factory, "fake", ["--release-dir", str(tmp_path / "nothing")])
    assert "no sites.csv there" in capsys.readouterr().err


def test_a_release_argument_error_names_the_variable_it_does_not_read(tmp_path, monkeypatch):
    """walk27b #8: the judged command, copied from the docs in another folder, failed on its RELEASE_DIR while
    $GEOAGENT_RELEASE was set (the replay config beside it reads that variable); the error now says so."""
    from geoagent.paths import release_argument_error

    monkeypatch.setenv(C.ENV_RELEASE_DIR, str(tmp_path))
    err = str(release_argument_error(tmp_path / "nope"))
    assert f"not ${C.ENV_RELEASE_DIR} = {str(tmp_path)!r}" in err, err
    monkeypatch.delenv(C.ENV_RELEASE_DIR)
    assert "not $" not in str(release_argument_error(tmp_path / "nope"))
