"""``status`` shows the cap the next run uses, and what to do after a budget stop (walkthrough 24, items 2 and 7).

After a run stopped at a $0.30 cap and the user raised ``[budget] cap_usd`` to $5, ``status`` still printed
``cap $0.3000``: the ledger keeps the cap its last run set. It now shows the config's cap and names the last
run's; and after a budget stop it says what the run's summary says (raise the cap and re-run), or, with the cap
already raised, that re-running goes on.
"""

from __future__ import annotations

import re

import pytest

from geoagent.cli import main
from test_export_interim_note import CONFIG as INTERIM

# the interim-export tests' small generic campaign (8 simulated calls at $100 per 1M tokens), under its own name
CONFIG = INTERIM.replace('name = "interim"', 'name = "capshow"')
assert CONFIG != INTERIM


def _status(cfg, capsys) -> str:
    capsys.readouterr()
    main(["status", str(cfg)])
    return capsys.readouterr().out


def test_status_shows_the_config_cap_and_the_way_on_after_a_budget_stop(isolated_roots, capsys):
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(cap=0.02), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4
    out = _status(cfg, capsys)
    assert "reserved, cap $0.0200; calls" in out, out
    assert "budget exhausted" in out
    m = re.search(r"to go on: raise \[budget\] cap_usd in the config to at least \$([0-9.]+) \(billed \$([0-9.]+) \+ "
                  r"the \$([0-9.]+) worst case of the call it refused\) and re-run the same command", out)
    assert m, out
    need, billed, call = (float(x) for x in m.groups())
    assert billed > 0 and call > 0 and need == pytest.approx(billed + call, abs=2e-4) and need > 0.02
    # and where the cost of the rest is priced (walk35 #5: the cap above buys one more call, not the rest): the dry
    # run of the same config says what the work left costs, the answers stored by this run counted as done
    assert "what the rest costs: `run.py run CONFIG --simulate` estimates the work left" in out, out
    capsys.readouterr()
    assert main(["run", str(cfg), "--simulate"]) in (0, 2)
    dry = capsys.readouterr().out
    done = re.search(r"total: (\d+) calls? to make \((\d+) already done by earlier runs\)", dry)
    assert done and int(done.group(1)) + int(done.group(2)) == 8 and int(done.group(2)) > 0, dry

    # review rev24 (3): a cap raised, but by less than the refused call, is no way on
    cfg.write_text(CONFIG.format(cap=round((0.02 + need) / 2, 6)), encoding="utf-8")  # above the old, below need
    out = _status(cfg, capsys)
    assert "too low for the call it refused: raise it to at least" in out, out
    assert main(["run", str(cfg), "--no-live"]) == 4  # as status said: the re-run stops again

    cfg.write_text(CONFIG.format(cap=10.0), encoding="utf-8")
    out = _status(cfg, capsys)
    last = f"${round((0.02 + need) / 2, 4):.4f}"  # the cap of the last run, the one that stopped again
    assert f"cap $10.0000 ([budget] cap_usd in the config; the last run ran under {last})" in out, out
    assert f"is above the {last} the last run stopped at: re-run the same command to go on" in out, out
    assert "raise [budget] cap_usd" not in out

    assert main(["run", str(cfg), "--no-live"]) == 0
    out = _status(cfg, capsys)
    assert "reserved, cap $10.0000; calls" in out and "the last run ran under" not in out, out
    assert "to go on" not in out and "campaign complete" in out, out


def test_status_names_the_cap_the_last_run_stopped_at_not_a_later_process_s(isolated_roots, capsys):
    """Review rev25 (3): since each process reserves against the lower of its own cap and the campaign's, the
    ledger's stored cap is the last started process's, not the one the last run stopped at: a process that opened
    the ledger with $0.90 after a budget stop at $0.02 made ``status`` say the last run "ran under $0.9000", and,
    with the config at $0.90, tell the user to raise the cap to at least the refused call's need, which the config
    already covered. The last run's own progress record says the cap it reserved against."""
    from geoagent.config import load_config
    from geoagent.runtime.ledger import CampaignDB, Ledger

    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(cap=0.02), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4
    c = load_config(cfg)
    db = CampaignDB(isolated_roots / "state" / c.name / "campaign.sqlite")  # another process, which set $0.90 and left
    Ledger(db, 0.90, recover=False).retire()
    db.close()
    out = _status(cfg, capsys)  # the config still says $0.02
    assert "reserved, cap $0.0200; calls" in out and "ran under $0.9000" not in out, out
    cfg.write_text(CONFIG.format(cap=0.90), encoding="utf-8")
    out = _status(cfg, capsys)
    assert "cap $0.9000 ([budget] cap_usd in the config; the last run ran under $0.0200)" in out, out
    assert "is above the $0.0200 the last run stopped at: re-run the same command to go on" in out, out


def test_status_after_a_crawls_budget_stop_names_no_dry_run_of_the_rest(isolated_roots, capsys, monkeypatch):
    """review35 #1: a crawl's dry run cannot price the work left (its calls follow from what it finds; it gives the
    whole crawl's worst case), so status does not point a crawl there."""
    from pathlib import Path

    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    src = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"
    cfg = isolated_roots / "crawl.toml"
    text = src.read_text(encoding="utf-8")
    assert "cap_usd = 1.00" in text
    cfg.write_text(text.replace("cap_usd = 1.00", "cap_usd = 0.0003", 1), encoding="utf-8")
    assert main(["crawl", str(cfg), "--no-live"]) == 4
    out = _status(cfg, capsys)
    assert "budget exhausted" in out and "to go on: raise [budget] cap_usd" in out, out
    assert "what the rest costs" not in out, out
