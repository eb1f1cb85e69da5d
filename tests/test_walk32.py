"""Walkthrough 32 (a new user: GeoHint and GeoVerify against their own OpenAI-compatible server).

#1 The key was in a ``.env`` beside the campaign file, the run started from another folder: "API key variable not
   set in the environment or in .env", with no word of which ``.env`` was read (the docs said "beside the campaign
   file"). The message now names the file read and the unread one that sets the variable.
#2 report.md's Terms never said what the conditions (baseline, forced, forced_warn, forced_chain, v1) are, nor
   what Table 8's Near / Mid / Far columns are.
(#3-#5, pacing and the stopped-run docs: tests/test_model_caller_fair_share.py.)
"""

from __future__ import annotations

import os

import pytest

from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table, run_cli
from geoagent.report.geohint import legend_for


@pytest.fixture()
def elsewhere(tmp_path, monkeypatch):
    """A campaign file in ``cfg/`` with its key in ``cfg/.env``, run from ``work/``."""
    cfg_dir, work = tmp_path / "cfg", tmp_path / "work"
    cfg_dir.mkdir()
    work.mkdir()
    key = made_up_key("sk-", 32, seed="walk32")
    (cfg_dir / ".env").write_text(f"W32_KEY={key}\n", encoding="utf-8")
    path = generic_campaign(cfg_dir, name="w32", n=2, models=model_table(
        base_url="http://127.0.0.1:9", key_var="W32_KEY"))
    monkeypatch.chdir(work)
    monkeypatch.delenv("W32_KEY", raising=False)
    monkeypatch.delenv("GEOAGENT_DOTENV", raising=False)
    return path, key


def test_a_missing_key_names_the_env_file_read_and_the_unread_one_beside_the_campaign(elsewhere, capsys):
    path, key = elsewhere
    rc, out, err = run_cli(path, capsys)
    assert rc == 2
    read = os.path.join(os.getcwd(), ".env")
    beside = path.parent.resolve() / ".env"
    assert (f"API key variable not set in the environment or in .env of the folder the command runs in ({read}; "
            f"GEOAGENT_DOTENV names another file): W32_KEY (model m); the campaign file's folder has a .env that "
            f"sets W32_KEY ({beside}), which is not read: run from that folder or set GEOAGENT_DOTENV={beside}") in err, err
    assert key not in out + err
    # the dry run's warning says the same
    rc, out, err = run_cli(path, capsys, "--simulate")
    assert "the campaign file's folder has a .env that sets W32_KEY" in out + err and key not in out + err


def test_no_hint_for_a_variable_the_unread_env_names_without_a_value(elsewhere, capsys):
    """break32b #5: ``W32_KEY`` alone or ``W32_KEY=`` sets nothing; following the hint led to "set but empty"."""
    path, _ = elsewhere
    for line in ("W32_KEY\n", "W32_KEY=\n"):
        (path.parent / ".env").write_text(line, encoding="utf-8")
        rc, _, err = run_cli(path, capsys)
        assert rc == 2 and "not set" in err and "campaign file's folder" not in err, (line, err)


def test_no_hint_when_the_env_read_is_the_one_beside_the_campaign(elsewhere, capsys, monkeypatch):
    path, _ = elsewhere
    monkeypatch.chdir(path.parent)
    (path.parent / ".env").write_text("OTHER=1\n", encoding="utf-8")
    rc, _, err = run_cli(path, capsys)
    assert rc == 2 and "not set" in err and "campaign file's folder" not in err, err


def test_the_terms_define_the_conditions_and_the_band_columns():
    text = " ".join(legend_for())
    for said in ("baseline = no hint", "forced = the hint 'I took this photo near <reference point>.'",
                 "forced_warn = forced plus a note", "forced_chain = forced plus an evidence checklist",
                 "v1 = the hint before the permissive schema", "Near, Mid, Far (Tables 8 and 10): the bands 0.5–1.5, "
                 "1.5–3 and 3–6 km"):
        assert said in text, said
