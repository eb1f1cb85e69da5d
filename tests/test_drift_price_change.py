"""A model's price (USD per 1M tokens) changed between runs changes no request or answer: it is one info line,
never "results would mix both versions", and it leaves the request keys and the spend already booked alone.

Walkthrough: raising ``price_input_usd_per_mtok`` on a campaign that also planned 3 more requests warned
"models changed since its last run (models[0].price_input_usd_per_mtok: 1.0 -> 4.0); this run planned 3 new
tasks that use the new settings next to 6 done under the old ones, so results would mix both versions": the
answers are the same either way; only the booking of new spend differs. Real runs of the engine (simulated
provider, the ledger in the campaign's sqlite file)."""

from __future__ import annotations

import sqlite3

from _model_harness import generic_campaign, run_cli
from geoagent.runtime.manifest import read_manifest


def _models(price_in: float, price_out: float) -> str:
    return (f'\n[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim-1"\nmax_output_tokens = 64\n'
            f'price_input_usd_per_mtok = {price_in}\nprice_output_usd_per_mtok = {price_out}\n'
            f'concurrency = 4\nrate = {{ requests = 500, period_s = 1.0 }}\n')


def _run(path, capsys) -> tuple[int, str, str]:
    """``run.py run PATH --no-live``: exit code, stdout (the summary), stderr (the warnings)."""
    return run_cli(path, capsys)


def _settled(db) -> list[tuple[str, int, int, int]]:
    """``(request key, input tokens, output tokens, booked nano-USD)`` of every settled call, in booking order."""
    with sqlite3.connect(db) as con:
        return con.execute("SELECT request_key, input_tokens, output_tokens, actual_nusd FROM reservations "
                           "WHERE state = 'settled' ORDER BY rowid").fetchall()


def test_a_price_change_is_an_info_line_and_keeps_keys_and_booked_spend(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="price", n=6, models=_models(1.0, 2.0), cap_usd=5.0)
    assert _run(p, capsys)[0] == 0
    db = tmp_path / "state" / "price" / "campaign.sqlite"
    before = _settled(db)
    assert len(before) == 6
    assert all(nusd == round((i * 1.0 + o * 2.0) * 1000) for _, i, o, nusd in before)
    p.write_text(p.read_text().replace("n_requests = 6", "n_requests = 9")
                 .replace("price_input_usd_per_mtok = 1.0", "price_input_usd_per_mtok = 4.0"))
    rc, summary, err = _run(p, capsys)
    assert rc == 0 and "calls 9" in summary  # the 6 stored answers keep their keys: 3 new calls only
    assert "would mix" not in err and "warning" not in err, err
    assert "results mix" not in summary
    assert ("info: campaign price: model prices changed since its last run (models[0].price_input_usd_per_mtok: "
            "1.0 -> 4.0); a price changes no request or answer, so nothing mixes: calls settled from now on are "
            "booked at the new prices, and the spend already booked keeps the amounts of the old ones") in err
    assert "generic changed since its last run (generic.n_requests: 6 -> 9)" in err  # the plan-scope info line
    after = _settled(db)
    assert after[:6] == before  # booked rows untouched
    assert all(nusd == round((i * 4.0 + o * 2.0) * 1000) for _, i, o, nusd in after[6:]) and len(after) == 9
    man = read_manifest(tmp_path / "state" / "price")
    assert man["config"]["models"][0]["price_input_usd_per_mtok"] == 4.0  # the prices new spend is booked at
    assert "config_mix" not in man and "config_not_applied" not in man
    # a price change alone on a finished campaign: the info line, no "use a new [campaign] name"
    p.write_text(p.read_text().replace("price_output_usd_per_mtok = 2.0", "price_output_usd_per_mtok = 0.5"))
    rc, summary, err = _run(p, capsys)
    assert rc == 0 and "model prices changed since its last run (models[0].price_output_usd_per_mtok: 2.0 -> 0.5)" in err
    assert "affects none of the stored results" not in err and "new [campaign] name" not in err
    assert _settled(db) == after
