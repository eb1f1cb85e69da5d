"""Config and CLI messages that named the wrong thing or nothing (break34 config #5, #7, #8, #10)."""

from __future__ import annotations

import pytest
from _made_up_keys import made_up_key

from geoagent.config import ConfigError, config_from_dict, load_config
from geoagent.engine import run_campaign  # noqa: F401 - the engine's kinds are registered with it


def test_a_duplicate_key_is_named(tmp_path):
    p = tmp_path / "dup.toml"
    p.write_text('[campaign]\nname = "x"\nkind = "generic"\n[budget]\ncap_usd = 1.0\ncap_usd = 2.0\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "Cannot overwrite a value (at line 6, column 14): key 'cap_usd' is set twice in its table" in str(e.value)


def test_a_duplicate_key_whose_value_is_a_secret_names_the_key_only(tmp_path):
    secret = made_up_key("sk-", 48, seed="dup34")
    p = tmp_path / "dup2.toml"
    p.write_text(f'[campaign]\nname = "x"\nkind = "generic"\nname = "{secret}"\n')
    with pytest.raises(ConfigError) as e:
        load_config(p)
    assert "key 'name' is set twice" in str(e.value) and secret not in str(e.value)


def test_a_long_name_is_told_the_length_limit():
    with pytest.raises(ConfigError) as e:
        config_from_dict({"campaign": {"name": "x" * 129, "kind": "generic"}, "budget": {"cap_usd": 1.0}})
    assert "at most 128 characters" in str(e.value)


def test_a_campaign_without_models_says_so(tmp_path, monkeypatch, capsys):
    from geoagent.cli import main

    monkeypatch.chdir(tmp_path)
    p = tmp_path / "nomod.toml"
    p.write_text('[campaign]\nname = "nomod"\nkind = "generic"\n[budget]\ncap_usd = 1.0\n[generic]\nn_requests = 5\n')
    rc = main(["run", "--no-live", str(p)])
    err = capsys.readouterr()
    assert rc == 2 and "the config has no [[models]] entry" in err.out + err.err


def test_a_bad_limit_is_called_a_whole_number(capsys):
    from geoagent.cli import main

    with pytest.raises(SystemExit):
        main(["dead", "--limit", "abc", "x.toml"])
    assert "invalid whole number value: 'abc'" in capsys.readouterr().err


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self"), reason="needs Linux's /proc")
def test_a_state_root_that_cannot_hold_folders_names_the_key(tmp_path, monkeypatch, capsys):
    """break34 config #6: ``[paths] state = "/proc/nope"`` ended with a bare ``[Errno 2] No such file or
    directory`` naming no key."""
    from geoagent.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    p = tmp_path / "pth.toml"
    p.write_text('[campaign]\nname = "pth"\nkind = "generic"\n[paths]\nstate = "/proc/nope"\n[budget]\ncap_usd = 1.0\n'
                 '[generic]\nn_requests = 2\n[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "s"\n')
    rc = main(["run", "--no-live", str(p)])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot make the campaign's state folder /proc/nope/pth" in err and "[paths] state" in err


@pytest.mark.parametrize(("text", "said"), [
    ("Was it taken near {candidate.__class__}?", "with a field, index, conversion or format ({candidate.__class__})"),
    ("Near {candidate[0]} or {candidate}?", "({candidate[0]})"),
    ("Near {candidate!r:>10} {candidate}?", "({candidate!r:>10})"),
    ("Near {candidate} within {tau_m:>5} m?", "({tau_m:>5})"),
    ("Near {candidate}, {0}?", "unknown placeholder(s) {0}"),
])
def test_a_claim_template_placeholder_form_is_named(tmp_path, text, said):
    """break34 config #9: these were told 'has no {candidate} placeholder' (or, for {0}, sent as written)."""
    from geoagent.geoverify.prompt import TemplateError, load_template

    p = tmp_path / "claim.txt"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(TemplateError) as e:
        load_template(p)
    assert said in str(e.value)
