"""A budget stop with several models: the summary says, per model, how many planned calls were answered.

A user's walkthrough: a cap reached after the cheap model's calls left the expensive model with 0 answers
(GeoHint "ge 0/40"), and the final summary did not say so; a researcher comparing the models must see it.
The generic campaign plans model by model (every call of the first model, then the second's), and the
model caller dispatches in queue order, so a cap that covers a part of the first model's calls leaves the
second with none.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, Outcome, run_campaign
from geoagent.runtime.queue import QueueCounts


def _write(tmp: Path, name: str, cap_usd: float, n: int = 40, only: str | None = None) -> Path:
    p = tmp / f"{name}.toml"
    models = "".join(f"""
[[models]]
name = "{m}"
provider = "simulated"
model = "{m}-1"
price_input_usd_per_mtok = {pin}
price_output_usd_per_mtok = {pout}
max_output_tokens = 100
concurrency = 4
rate = {{ requests = 5000, period_s = 1.0 }}
""" for m, pin, pout in (("cheap", 0.1, 0.4), ("ge", 2.0, 8.0)) if only in (None, m))
    p.write_text(f"""
[campaign]
name = "{name}"
kind = "generic"
seed = 3

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = {cap_usd!r}

[generic]
n_requests = {n}
{models}""", encoding="utf-8")
    return p


def test_budget_stop_names_each_models_answered_share_and_warns_about_a_model_with_none(tmp_path):
    # what the cheap model's 40 calls really cost (a run of it alone, uncapped); a cap of half that stops
    # the run inside the cheap model's calls, before the second model (planned after it) gets any
    alone = anyio.run(lambda: run_campaign(load_config(_write(tmp_path, "alone", 100.0, only="cheap")), live=False,
                                           handle_signals=False, export=False))
    assert alone.status == "complete" and alone.spend["calls"] == 40
    cfg = load_config(_write(tmp_path, "two", alone.spend["spent_usd"] / 2))
    out = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.status == "budget exhausted" and out.exit_code == EXIT_BUDGET
    assert out.planned_by_model == {"cheap": 40, "ge": 40}
    got = out.answered_by_model
    assert got["ge"] == 0 and 0 < got["cheap"] < 40
    # the stored answers are the settled calls (each call its own request key)
    assert got["cheap"] == out.spend["calls"]
    text = out.summary()
    assert f"answered before the cap, per model (stored answers / planned calls): cheap {got['cheap']}/40" in text
    assert "ge 0/40 (0%)" in text
    assert "!!! WARNING: ge has no answer (0 of 40 planned calls)" in text
    assert "cheap has" not in text  # the best-covered model is not flagged


def _outcome(planned: dict[str, int], answered: dict[str, int], status: str = "budget exhausted") -> Outcome:
    return Outcome("c", status, 4, sum(planned.values()), {"requests": QueueCounts(ready=5)}, None,
                   planned_by_model=planned, answered_by_model=answered)


@pytest.mark.parametrize(("answered", "flagged"), [
    ({"a": 30, "b": 30}, []),            # 75% each: alike
    ({"a": 30, "b": 16}, []),            # 40% >= 0.5 x 75%
    ({"a": 30, "b": 14}, ["b"]),         # 35% < 37.5%: far fewer
    ({"a": 0, "b": 1}, ["a"]),           # none at all
    ({"a": 0, "b": 0}, []),              # nobody answered: nothing to compare, no warning
])
def test_far_fewer_rule_is_half_the_best_share(answered, flagged):
    out = _outcome({"a": 40, "b": 40}, answered)
    warned = [w.split(" ", 1)[0] for w in out.coverage_warnings()]
    assert warned == flagged


def test_interim_note_for_reports_names_the_shares_and_the_warning():
    note = _outcome({"a": 80, "ge": 40}, {"a": 54, "ge": 0}).interim_note()
    assert "Answered per model: a 54/80 (68%), ge 0/40 (0%)" in note
    assert "WARNING: ge has no answer" in note
    # a single model: shares but no comparison warning
    solo = _outcome({"a": 80}, {"a": 54}).interim_note()
    assert "a 54/80" in solo and "WARNING" not in solo
