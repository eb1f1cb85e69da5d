"""The budget stop's lines for a crawl and the cap hint of ``status`` (walk28 #4, #5).

#4: a crawl stopped by the cap said "budget exhausted: 0 requests not dispatched" with six sites and two images still
queued: the count was of the model requests edge, which a crawl has not. It now counts the tasks left on its edges.

#5: ``status`` after a crawl's cap stop said "raise [budget] cap_usd in the config to at least $0.0083" under a cap
of $0.0100: the hint took the smallest refused call (an image audit, $0.0007, refused while other calls held
reservations). It now takes the largest refused call, and when billed + that call is still within the cap the run
stopped at, it asks for a cap above that one, never for a lower one.
"""

from __future__ import annotations

from geoagent.engine import Outcome
from geoagent.runtime.queue import QueueCounts
from geoagent.status import budget_resume_hint, refused_call_usd


def _refusal(call: float, reserved: float) -> str:
    return (f"budget exhausted: spent $0.007203 + unknown $0.000000 + reserved ${reserved:.6f} + this call "
            f"${call:.6f} > cap $0.010000")


def test_refused_call_is_the_largest_refused():
    progress = {"stages": [{"last_errors": [_refusal(0.000684, 0.002300)]},
                           {"budget_refusals": [_refusal(0.002654, 0.000684)]}, {"last_errors": ["HTTP 500"]}]}
    assert refused_call_usd(progress) == 0.002654
    assert refused_call_usd({"stages": [{"last_errors": ["other"]}]}) is None


def test_hint_never_asks_for_less_than_the_cap_it_stopped_at():
    spend = {"run_cap_usd": 0.01, "cap_usd": 0.01, "spent_usd": 0.0077, "unknown_usd": 0.0}
    hint = budget_resume_hint(spend, 0.0007)
    assert "to at least" not in hint, hint
    assert "above the $0.0100 it stopped at" in hint and "while other calls held reservations" in hint, hint
    big = budget_resume_hint(spend, 0.0030)  # billed + call = $0.0107 > cap: the figure is a way on
    assert "to at least $0.0107 (billed $0.0077 + the $0.0030 worst case of the call it refused)" in big, big
    raised = budget_resume_hint({**spend, "config_cap_usd": 0.05}, 0.0030)
    assert "re-run the same command to go on" in raised and "raise" not in raised, raised


def test_a_crawls_budget_line_counts_the_tasks_left_on_its_edges():
    counts = {"cities": QueueCounts(done=2), "sites_for_audit": QueueCounts(ready=6),
              "images": QueueCounts(ready=2, leased=1)}
    lines = Outcome("crawl-x", "budget exhausted", 4, 2, counts, None, plan_unit="cities").summary()
    assert "budget exhausted: 9 tasks left queued; raise [budget] cap_usd and re-run" in lines, lines
    campaign = Outcome("gv", "budget exhausted", 4, 10, {"requests": QueueCounts(ready=7, done=3)}, None).summary()
    assert "budget exhausted: 7 requests not dispatched; raise [budget] cap_usd and re-run" in campaign, campaign
