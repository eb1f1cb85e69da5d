"""Adversarial review (session 16, badinput) of inputs a researcher writes by hand: campaign TOML numbers beyond
what TOML allows or the ledger can reserve, and human-verdict / review-decision CSVs with an unbalanced quote.

Each bad file must stop with one line naming the file and the key (config) or ``file:line`` (CSV), exit 2, no
traceback; nothing is stored before the refusal (the config is refused at load, before any state is opened).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import ConfigError, load_config
from geoagent.crawl.image_audit import read_human_verdicts
from geoagent.crawl.review import read_review_verdicts
from _made_up_keys import made_up_key

BASE = """
[campaign]
name = "bi16"
kind = "generic"

[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"

[budget]
cap_usd = 1.0
input_estimate_factor = {factor}

[generic]
n_requests = 3

[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = {price_in}
price_output_usd_per_mtok = 0.60
max_output_tokens = {max_out}
{extra}
"""


def _write(tmp: Path, *, factor: str = "1.25", price_in: str = "0.15", max_out: str = "400", extra: str = "") -> Path:
    p = tmp / "campaign.toml"
    p.write_text(BASE.format(tmp=tmp, factor=factor, price_in=price_in, max_out=max_out, extra=extra))
    return p


# -- TOML integers beyond 64 bits ------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, key", [
    ({"max_out": "99999999999999999999"}, "models[0].max_output_tokens"),
    ({"extra": "params = { seed = 99999999999999999999 }"}, "models[0].params.seed"),
    ({"extra": "seed = -9223372036854775809"}, "models[0].seed"),
])
def test_integer_beyond_64_bits_is_one_config_error_naming_the_key(tmp_path, capsys, kwargs, key):
    # TOML 1.0: integers are 64-bit, "if an integer cannot be represented losslessly, an error must be thrown";
    # tomllib reads any size, and the value reached orjson (request key), which raised TypeError: a traceback
    p = _write(tmp_path, **kwargs)
    with pytest.raises(ConfigError) as exc:
        load_config(p)
    assert f"{key}: expected an integer in TOML's 64-bit range" in str(exc.value)
    assert main(["status", str(p)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(p) in err and key in err
    assert not (tmp_path / "state").exists()


def test_integers_at_the_64_bit_limits_still_load(tmp_path):
    p = _write(tmp_path, extra="seed = -9223372036854775808\nparams = { seed = 9223372036854775807 }")
    cfg = load_config(p)
    assert cfg.models[0].seed == -9223372036854775808


def test_toml_nested_beyond_the_recursion_limit_is_a_config_error(tmp_path, capsys):
    p = _write(tmp_path)
    p.write_text(p.read_text().replace("n_requests = 3", "n_requests = 3\nx = " + "[" * 3000 + "]" * 3000))
    assert main(["status", str(p)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "RecursionError" not in err
    assert str(p) in err and "nested too deeply" in err


# -- numbers whose worst-case reservation overflows to infinity ------------------------------------------------
@pytest.mark.parametrize("kwargs, key", [
    ({"factor": "1e308"}, "budget.input_estimate_factor"),
    ({"price_in": "1.7e308"}, "models[0].price_input_usd_per_mtok"),
])
def test_number_whose_reservation_is_infinite_is_refused_at_load(tmp_path, capsys, kwargs, key):
    # before: the config loaded, the dry run died with OverflowError (a traceback) and `run` dead-lettered every
    # task after 5 deliveries ("OverflowError: cannot convert float infinity to integer" / "amount must be a
    # finite ... got inf") instead of refusing the file
    p = _write(tmp_path, **kwargs)
    assert main(["run", str(p), "--simulate"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and str(p) in err and key in err
    assert not (tmp_path / "state").exists()


# -- hand-written CSVs with an unbalanced quote ----------------------------------------------------------------
def test_human_verdicts_with_an_unclosed_quote_are_refused_not_swallowed(tmp_path):
    # before: the quote opened in row 2's note swallowed rows 3-4 into that note; 1 verdict read of 3, silently
    p = tmp_path / "human_audit.csv"
    p.write_text('image,human_verdict,human_note\n1.jpg,exclude,"sign half hidden\n2.jpg,exclude,\n3.jpg,keep,\n')
    with pytest.raises(ValueError, match=r"human_audit\.csv:2: .*quote"):
        read_human_verdicts(p)


def test_human_verdicts_with_a_huge_unclosed_field_are_a_value_error(tmp_path):
    # before: csv.Error ("field larger than field limit"), not a ValueError: the CLI printed a traceback
    p = tmp_path / "human_audit.csv"
    p.write_text('image,human_verdict,human_note\n1.jpg,keep,"' + "x" * 140_000 + "\n2.jpg,keep,\n")
    with pytest.raises(ValueError, match=r"human_audit\.csv:2: "):
        read_human_verdicts(p)


def test_human_verdicts_with_quoted_multiline_notes_still_read(tmp_path):
    p = tmp_path / "human_audit.csv"
    p.write_text('image,human_verdict,human_note\r\n1.jpg,exclude,"two\r\nlines, quoted ""x"""\r\n2.jpg,keep,\r\n')
    got = read_human_verdicts(p)
    assert got["1"]["human_note"] == 'two\r\nlines, quoted "x"' and got["2"]["human_verdict"] == "keep"


def test_review_verdicts_with_an_unclosed_quote_are_refused_not_swallowed(tmp_path):
    p = tmp_path / "review.csv"
    p.write_text('site,qid,decision,note\nx,Q1,4,"too famous\nx,Q2,keep,\nx,Q3,0,\n')
    with pytest.raises(ValueError, match=r"review\.csv:2: .*quote"):
        read_review_verdicts(p)


def test_review_verdicts_with_a_huge_unclosed_field_are_a_value_error(tmp_path):
    p = tmp_path / "review.csv"
    p.write_text('site,qid,decision,note\nx,Q1,4,"' + "x" * 140_000 + "\n")
    with pytest.raises(ValueError, match=r"review\.csv:2: "):
        read_review_verdicts(p)


# -- .env lines python-dotenv cannot parse ---------------------------------------------------------------------
def test_key_on_an_unparsable_dotenv_line_is_named_by_file_and_line_not_called_unset(tmp_path, caplog):
    # before: python-dotenv logged "could not parse statement starting at line 2" (no file) and dropped the line,
    # so the run said "API key variable BI16_KEY is not set in the environment or in .env" while it was there
    from geoagent.secrets import get_secret, lookup_secret, read_dotenv

    dotenv = tmp_path / "keys.env"
    value = made_up_key("sk-", 28, seed="bi16-unterminated-n10")
    dotenv.write_text(f'export OTHER=abcdefgh1234\nBI16_KEY="{value}\nthis line is no assignment\n')
    with pytest.raises(ValueError) as exc:
        lookup_secret("BI16_KEY", environ={}, dotenv_path=dotenv)
    msg = str(exc.value)
    assert f"{dotenv}:2" in msg and "BI16_KEY" in msg and value not in msg and "bi16-unterminated" not in msg
    with pytest.raises(ValueError, match=r"keys\.env:2"):
        get_secret("BI16_KEY", environ={}, dotenv_path=dotenv)
    # the variable set in the environment still wins, and the readable lines still read
    assert lookup_secret("BI16_KEY", environ={"BI16_KEY": "from-env-123456"}, dotenv_path=dotenv).reveal() == "from-env-123456"
    assert read_dotenv(dotenv) == {"OTHER": "abcdefgh1234"}
    lines = [r.getMessage() for r in caplog.records]  # each bad line said once per process, with the file
    assert [m.split(" ")[0] for m in lines if str(dotenv) in m] == [f"{dotenv}:2:", f"{dotenv}:3:"]
    assert not any("python-dotenv could not parse" in m for m in lines)  # the fileless line is not said twice
    assert all(value not in m and "bi16-unterminated" not in m for m in lines)


def test_human_verdicts_header_with_spaces_reads_as_the_review_file_does(tmp_path):
    """Review question (s16): the review-decision reader strips spaces around header names, the human-verdict
    reader refused ``image, human_verdict`` ("missing column 'human_verdict'"); both now read it alike."""
    p = tmp_path / "v.csv"
    p.write_text("image , human_verdict, human_reason\n1.jpg, exclude , blurred\n", encoding="utf-8")
    got = read_human_verdicts(p)
    assert got["1"]["human_verdict"] == "exclude" and got["1"]["human_reason"] == "blurred", got
