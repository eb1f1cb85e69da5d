"""``run.py status`` of a budget-exhausted campaign names each model's answered / planned calls, as the run's
summary does (walkthrough: it printed only "budget exhausted")."""

from __future__ import annotations

import anyio

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, run_campaign
from geoagent.runtime.store import open_campaign_state
from tests.test_cost_cap_per_model import _write


def test_status_after_a_budget_stop_gives_each_models_coverage(tmp_path, capsys):
    alone = anyio.run(lambda: run_campaign(load_config(_write(tmp_path, "alone", 100.0, only="cheap")), live=False,
                                           handle_signals=False, export=False))
    path = _write(tmp_path, "two", alone.spend["spent_usd"] / 2)
    cfg = load_config(path)
    out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.exit_code == EXIT_BUDGET
    # independent of the run's own figures: the response store's rows per model
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as state:
        rows = state.store.count_responses_by_model()
    n_cheap = rows["cheap"]
    assert 0 < n_cheap < 40 and "ge" not in rows
    capsys.readouterr()
    assert main(["status", str(path)]) == 0
    text = capsys.readouterr().out
    assert "budget exhausted" in text
    line = f"answered before the cap, per model (stored answers / planned calls): cheap {n_cheap}/40 ({n_cheap / 40:.0%}), ge 0/40 (0%)"
    assert line in text, text
    assert line in out.summary()  # the same words as the run's summary
    assert "!!! WARNING: ge has no answer (0 of 40 planned calls)" in text
    # once the campaign completes (a higher cap, resumed), the coverage line goes
    done = _write(tmp_path, "two", 100.0)
    fin = anyio.run(lambda: run_campaign(load_config(done), live=False, handle_signals=False, export=False))
    assert fin.status == "complete"
    capsys.readouterr()
    main(["status", str(done)])
    assert "answered before the cap" not in capsys.readouterr().out
