"""A budget stop with several models: the summary says, per model, how many planned calls were answered.

A user's walkthrough: a cap reached after the cheap model's calls left the expensive model with 0 answers
(GeoHint "ge 0/40"), and the final summary did not say so; a researcher comparing the models must see it.
The model caller dispatches in queue order; the planners now interleave the models
(``tests/test_plan_interleave.py``), so here the second model gets none because the worst case of a single
call of it (about $0.0009) exceeds the whole cap (about $0.0002).

The dry run said "the cap allows about 14 of 120" from the average over the models while the run made 54
calls: it now replays the run's dispatch (:func:`geoagent.config.simulate_dispatch`) and says per model how
many calls come before the cap.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest

from _model_harness import generic_campaign
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET, Outcome, run_campaign
from geoagent.runtime.queue import QueueCounts


def _write(tmp: Path, name: str, cap_usd: float, n: int = 40, only: str | None = None) -> Path:
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
    return generic_campaign(tmp, name=name, n=n, models=models, cap_usd=cap_usd)


def test_budget_stop_names_each_models_answered_share_and_warns_about_a_model_with_none(tmp_path):
    # what the cheap model's 40 calls really cost (a run of it alone, uncapped); a cap of half that stops
    # the run inside the cheap model's calls: the expensive model's worst case alone exceeds the cap
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


# -- the dry run: calls per model before the cap --------------------------------------------------------

def _priced(name: str, pout: float, **kw) -> dict:
    # no input price: a call's worst case is 100 output tokens, its expected cost 50 (hand-computable)
    return {"name": name, "provider": "openai", "model": name, "base_url": "http://127.0.0.1:9/v1",
            "price_output_usd_per_mtok": pout, "max_output_tokens": 100, "expected_output_tokens": 50, **kw}


def _dry_cfg(models: list[dict], cap: float, pacing: str = "plan"):
    from geoagent.config import config_from_dict

    return config_from_dict({"campaign": {"name": "dr", "kind": "generic"}, "budget": {"cap_usd": cap},
                             "models": models, "queue": {"model_pacing": pacing}})


def test_dry_run_paces_the_lanes_by_each_models_share_of_its_calls():
    """The same plan as below under the default ``model_pacing = "plan"``, by hand: a lane may take a task while its
    share of its 40 tasks, with that task, is at most the other lane's share plus 8 tasks (0.2). t=0: a takes 8
    (9/40 > 0 + 0.2), ge takes its lane's 12 (0.3), a 4 more up to the window of 24 (a 12, ge 12; 8 of a in flight).
    t=2: a's 8 settle ($0.004); a takes up to 20 of its tasks (21/40 > 0.3 + 0.2) while ge's 12 wait at the gate.
    t=4: settled $0.008, ge's gate sees $0.008 + $0.01 > cap: the run stops; a's calls in hand finish. a 20, ge 0."""
    from geoagent.config import estimate
    from geoagent.engine import estimate_lines

    cfg = _dry_cfg([_priced("a", 10.0, concurrency=8), _priced("ge", 100.0, concurrency=8)], cap=0.0155)
    plan = [{"model": m, "prompt": f"p{i}"} for m in ("a", "ge") for i in range(40)]
    est = estimate(cfg, plan)
    assert (est.by_model["a"].calls_before_cap, est.by_model["ge"].calls_before_cap) == (20, 0)
    text = "\n".join(estimate_lines(est, cfg))
    assert ('so a model held back by its own limits does not hold back the others; paced by each model\'s share of '
            'its calls ([queue] model_pacing = "plan"), so none runs ahead of the others)') in text, text


def test_dry_run_counts_calls_per_model_before_the_cap_in_queue_order():
    from geoagent.config import estimate
    from geoagent.engine import estimate_lines

    # a: worst $0.001, expected $0.0005 per call; ge: worst $0.01, expected $0.005; planned a first (40), then ge;
    # each model at its own pace ([queue] model_pacing = "throughput"; the default paces them: the test above)
    cfg = _dry_cfg([_priced("a", 10.0, concurrency=8), _priced("ge", 100.0, concurrency=8)], cap=0.0155,
                   pacing="throughput")
    plan = [{"model": m, "prompt": f"p{i}"} for m in ("a", "ge") for i in range(40)]  # distinct requests
    est = estimate(cfg, plan)
    # by hand: each model has its own lane of 12 tasks (concurrency 8 + lease-ahead 4: the model caller's lanes),
    # so ge's first tasks are handled from the start beside a's (a full lane's tasks are deferred, not queued
    # ahead of the other lane's). a's calls take 2 s (expected_latency_s default), 8 at a time, and each settles
    # at $0.0005. t=0: 8 of a start ($0.008 reserved); ge's gate: $0.008 + $0.01 > cap, but settled $0 + $0.01
    # fits: it waits for a settlement. t=2: settled $0.004, 8 of a start ($0.012 committed); ge waits ($0.014
    # fits alone). t=4: settled $0.008, 7 of a fit ($0.015); ge's gate sees settled $0.008 + its worst $0.01 >
    # cap, which no settlement can cure, and the run stops; the 7 calls in flight finish. a 23, ge 0.
    # (Before the lanes were modelled, ge's tasks were handled only after a's 40: a 29.)
    assert (est.by_model["a"].calls_before_cap, est.by_model["ge"].calls_before_cap) == (23, 0)
    assert est.calls_before_cap == 23
    lines = estimate_lines(est, cfg)
    text = "\n".join(lines)
    assert "the run would stop at the cap (exit 4) after about 23 of the 80 calls, per model: a 23 of 40, ge 0 of 40" in text
    # the text says how the stop was simulated, with the lanes that gave ge its tasks from the start
    assert ("(simulated as the run dispatches them: in queue order, each model in its own lane (at most a 12 (concurrency 8 + "
            "4 leased ahead), ge 12 (concurrency 8 + 4 leased ahead) of its requests handled at once; a full lane's next requests wait while the other lanes' go on, so a "
            "model held back by its own limits does not hold back the others), each model at its own concurrency, "
            "rate and expected_latency_s; each call reserves its worst case and settles at its expected cost; the "
            "first call whose worst case no longer fits next to the settled spend stops the run)") in text
    assert "!!! WARNING: before the cap, ge has no answer (0 of 40 planned calls)" in text
    # the average-based figures are still there, labelled as plan averages, not bounds (walk24 #3: the simulated
    # stop, 23 here, lies outside both): 80 x 0.0155 / 0.44 = 2.8 -> 2
    assert ("plan averages: at the mean worst case per call the cap pays for about 2 of the 80 calls "
            "(cap / mean worst case per call)") in text
    # 80 x 0.0155 / 0.22 = 5.6 -> 5 at the expected cost; every model sets expected_output_tokens: no note
    assert "at the mean expected cost per call, about 5 (cap / mean expected cost per call)" in text
    assert "so it can lie outside both" in text and "bounds" not in text
    assert "shorter answers let the run make more calls" not in text
    # within the cap: nothing simulated
    assert estimate(_dry_cfg([_priced("a", 10.0)], cap=1.0), plan[:40]).calls_before_cap is None


def test_dry_run_interleaved_models_reserve_side_by_side():
    from geoagent.config import estimate

    # one call in flight per model, 1 s each; a: worst $0.001 / expected $0.0005; b: $0.004 / $0.002;
    # the plan alternates a, b; cap $0.0105. By hand, per second: t=0 a0 (reserved .001) and b0 (.005) start;
    # t=1 settled .0025: a1, b1 start (.0075 committed); t=2 settled .005: a2, b2 (.010); t=3 settled .0075:
    # a3 starts (.0085), b3 needs .0075 + .001 + .004 = .0125 > cap and .0075 + .004 = .0115 > cap by itself:
    # the run stops; a3 finishes. a made 4 calls, b 3.
    cfg = _dry_cfg([_priced("a", 10.0, concurrency=1, expected_latency_s=1.0),
                    _priced("b", 40.0, concurrency=1, expected_latency_s=1.0)], cap=0.0105)
    plan = [{"model": m, "prompt": f"p{i}"} for i in range(10) for m in ("a", "b")]  # distinct requests
    est = estimate(cfg, plan)
    assert (est.by_model["a"].calls_before_cap, est.by_model["b"].calls_before_cap) == (4, 3)



def test_dry_run_whose_calls_all_fit_at_the_expected_cost_does_not_predict_a_stop(tmp_path):
    # walkthrough: worst case over the cap, but every simulated call fit: the dry run said "the run would stop at
    # the cap (exit 4) after about 339 of the 339 calls" and the real run ended complete, exit 0.
    # one call at a time: worst $0.001, expected $0.0005; 40 calls: worst $0.04 > cap $0.025 > expected $0.02,
    # and the 40th call reserves its worst case next to $0.0195 settled: $0.0205 fits
    models = """
[[models]]
name = "a"
provider = "simulated"
model = "a-1"
price_output_usd_per_mtok = 10.0
max_output_tokens = 100
expected_output_tokens = 50
concurrency = 1
"""
    cfg = load_config(generic_campaign(tmp_path, name="fits", n=40, models=models, cap_usd=0.025))
    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False))
    text = dry.summary()
    assert dry.exit_code == 0  # the dry run exits 0 or 2 (README), never the run's 4
    assert "would stop at the cap" not in text and "exit 4" not in text
    # one model: no lanes, and the text names none
    assert "lane" not in text
    assert ("all 40 calls fit at their expected cost (simulated as the run dispatches them: in queue order, each "
            "model at its own concurrency, rate and expected_latency_s; each call reserves its worst case and "
            "settles at its expected cost); the run would reach the cap only if calls cost more than expected, "
            "up to their worst case: at the worst case the cap pays for about 25 of the 40") in text
    assert "the simulated stop above" not in text  # there is none
    run = anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert run.status == "complete" and run.exit_code == 0 and run.spend["calls"] == 40
