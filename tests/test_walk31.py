"""Walkthrough 31 (a new user building a benchmark with the crawl, then evaluating on it).

#1 A run started with a lower cap than the campaign's, while another run spent past it, said the running one "stops
   at $0.30 at the latest"; both then ended at $0.3481 of a $0.30 cap with no word why. The cap warning now says when
   spend is already above the new cap, and the summary and ``status`` say why spend is above the cap.
#4 A dry run whose model key variable sits on a ``.env`` line that does not parse stopped with one ``error:`` line
   and no report; ``run --help`` promises the whole report first, then ``exit 2: ...``, as for an unset variable.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import pytest

from geoagent.config import SetupWarning, load_config
from geoagent.engine import over_cap_lines, run_campaign
from geoagent.runtime.ledger import Ledger
from geoagent.runtime.store import CampaignDB
from geoagent.providers.base import Usage


# -- #1 ------------------------------------------------------------------------------------------------------


def test_the_summary_says_why_spend_is_above_a_lowered_cap(tmp_path):
    path = tmp_path / "campaign.sqlite"
    a = Ledger(CampaignDB(path), 0.60)
    try:
        for i in range(3):
            r = a.reserve(f"k{i}", 0.12, model="m")
            a.settle(r, Usage(1000, 100), 0.116)  # $0.348 settled in all
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            b = Ledger(CampaignDB(path), 0.30)  # a second run of the campaign, its config's cap lowered
        said = " ".join(str(w.message) for w in got if issubclass(w.category, SetupWarning))
        assert "already spent or reserved $0.348" in said and "spend ends above $0.30" in said, said
        assert "at the latest" not in said
        lines = over_cap_lines(b.summary().to_json())
        assert len(lines) == 1, lines
        assert "spend $0.3480 is above the cap: the cap was lowered to $0.3000" in lines[0], lines
        b.db.close()
    finally:
        a.db.close()


@pytest.mark.parametrize("spend, says", [
    (dict(cap_usd=0.30, spent_usd=0.3481, unknown_usd=0.0, overrun_usd=0.0), True),
    (dict(cap_usd=0.30, spent_usd=0.20, unknown_usd=0.1481, overrun_usd=0.0), True),  # unknown outcome counts
    (dict(cap_usd=0.30, spent_usd=0.31, unknown_usd=0.0, overrun_usd=0.02), False),  # overruns explain it
    (dict(cap_usd=0.30, spent_usd=0.30, unknown_usd=0.0, overrun_usd=0.0), False),  # at the cap, not above
    (dict(cap_usd=0.30, spent_usd=0.10, unknown_usd=0.0), False),
])
def test_over_cap_lines_only_for_spend_the_overruns_do_not_explain(spend, says):
    assert bool(over_cap_lines(spend)) is says


# -- #4 ------------------------------------------------------------------------------------------------------


def _config(tmp: Path, var: str) -> Path:
    p = tmp / "c.toml"
    p.write_text(f"""
[campaign]
name = "keyline"
kind = "generic"
seed = 2

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = 5.0

[generic]
n_requests = 20

[[models]]
name = "paid"
provider = "openai"
model = "gpt-x"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "{var}"
price_input_usd_per_mtok = 2.0
price_output_usd_per_mtok = 8.0
max_output_tokens = 256
""")
    return p


def test_a_dry_run_reports_in_full_when_a_key_line_of_dotenv_does_not_parse(tmp_path, monkeypatch):
    var = "WALK31_BROKEN_LINE_KEY"
    monkeypatch.delenv(var, raising=False)
    dotenv = tmp_path / ".env"
    dotenv.write_text(f'{var} = "abc\n')  # the quote never closes: python-dotenv drops the line
    cfg = load_config(_config(tmp_path, var))
    with pytest.raises(ValueError, match=rf"{var}: .*\.env:1 sets it but cannot be parsed"):
        anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, dotenv_path=dotenv))
    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False, dotenv_path=dotenv))
    assert dry.exit_code == 2
    text = dry.summary()
    assert "total: 20 calls" in text  # the estimate is there
    warning = [ln for ln in text.splitlines() if "warning:" in ln and var in ln]
    assert len(warning) == 1 and "cannot be parsed" in warning[0] and "will refuse to start (exit 2)" in warning[0]
    assert text.splitlines()[-1] == ("  exit 2: `run` would refuse to start (an API key variable that cannot be "
                                     "read; see the warning above)")
    assert "abc" not in text  # never the value
