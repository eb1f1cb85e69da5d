"""A prompt template that is not UTF-8 text is a template error naming the key and the file, as a missing one.

Before: ``error: 'utf-8' codec can't decode byte 0xff in position 0: invalid start byte``: no key, no file (a
template saved as UTF-16 or Latin-1 by an editor), while a missing or unreadable one names both.
"""
from __future__ import annotations

import pytest

from geoagent.cli import main
from geoagent.geohint.conditions import PromptBook
from geoagent.geoverify.prompt import TemplateError, load_template

from test_walkthrough_s12_msgs import VERIFY

LATIN1 = "Wurde dieses Foto {tau_m} m von {candidate} gemacht? Grüße\n".encode("latin-1")


def test_geoverify_template_not_utf8_names_the_key_and_file(tmp_path):
    p = tmp_path / "claim.txt"
    p.write_bytes(LATIN1)
    with pytest.raises(TemplateError) as exc:
        load_template(str(p), source="cfg.toml")
    msg = str(exc.value)
    assert str(p) in msg and "geoverify.prompt_template in cfg.toml" in msg and "UTF-8" in msg, msg


def test_geoverify_template_not_utf8_from_the_command_line(tmp_path, monkeypatch, release_dir, capsys):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "claim.txt").write_bytes(LATIN1)
    cfgp = tmp_path / "nu.toml"
    cfgp.write_text(VERIFY.format(name="nu", extra='prompt_template = "claim.txt"'))
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = capsys.readouterr().err
    assert f"geoverify.prompt_template in {cfgp}" in err and "claim.txt" in err and "UTF-8" in err, err


def test_geohint_template_not_utf8_names_the_key_and_file(tmp_path):
    (tmp_path / "geohint_forced.txt").write_bytes(LATIN1)
    book = PromptBook(str(tmp_path), source="gh.toml")
    with pytest.raises(ValueError) as exc:  # as the GeoVerify template error (a ValueError), CLI exit 2
        book.text("geohint_forced.txt")
    msg = str(exc.value)
    assert "geohint_forced.txt" in msg and "geohint.prompts_dir in gh.toml" in msg and "UTF-8" in msg, msg
