"""Tasks a failure dead-lettered that a smaller re-plan no longer holds are set aside, not missing (export38 #1).

Before: a generic campaign whose 4 last requests had been dead-lettered (a permanent 400, say) and whose
``n_requests`` the researcher then lowered so the plan no longer held them ended ``incomplete`` (exit 3) on every
re-run, for work the campaign no longer asked for. Now the re-plan relabels them ``superseded: ... | it had failed
before: <failure>`` (still dead, never sent), the run ends ``complete``, and a plan that holds them again gives them
their failure back (dead again: ``incomplete``, no paid retry unasked). Real engine, queues, ledger and HTTP against
the local OpenAI-compatible fake.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import anyio
import pytest

from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.runtime.queue import FAILED_BEFORE, SUPERSEDED, QueueCounts, open_queue
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from _made_up_keys import made_up_key
from _model_harness import generic_campaign, model_table

GOOD_KEY = made_up_key("sk-", 33, seed="sandbox-good-failed-aside")
FAILURE = "HTTP 400 from the provider: invalid image (made up for this test)"

@pytest.fixture(autouse=True)
def _no_upstream_wait(monkeypatch):
    # a downstream-only run plans here without a model caller (only_stages); it must end at once, as before
    # fixstages43's wait for an upstream process (GEOAGENT_UPSTREAM_WAIT_S: 10 minutes by default)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")



def _toml(tmp: Path, n: int, base: str) -> Path:
    return generic_campaign(tmp, name="shrinkfail", n=n, cap_usd=5.0,
                            models=model_table("m", base_url=base, key_var="SHRINKFAIL_KEY", model="sim-gpt"))


def _paid(app) -> Counter:
    return Counter(r["key"] for r in app["calls"] if r["status"] == 200)


def test_failed_tasks_a_smaller_plan_drops_are_set_aside_and_a_larger_plan_restores_their_failure(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHRINKFAIL_KEY", GOOD_KEY)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])
    failed = {f"m|{i}" for i in range(6, 10)}

    async def main():
        async with serve(app) as base:
            path = _toml(tmp_path, 10, base)
            # plan 10 without sending any; then tasks m|6 .. m|9 fail permanently (dead-lettered as the model
            # caller does for a 400) and the other 6 are answered
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                               only_stages=["collector"])
            q = open_queue(tmp_path / "queues", "shrinkfail", "requests")
            try:
                for t in await q.lease(10, 60):
                    if t.key in failed:
                        await q.dead_letter(t, FAILURE)
                    else:
                        await q.release(t)
            finally:
                await q.close()
            first = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            # the researcher drops the 4 failed requests from the plan
            _toml(tmp_path, 6, base)
            capsys.readouterr()
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err2 = capsys.readouterr().err
            status2 = format_status(campaign_status(load_config(path)))
            q = open_queue(tmp_path / "queues", "shrinkfail", "requests")
            try:
                counts2 = await q.counts()
                dead2 = {d.key: d.reason for d in await q.dead_letters()}
            finally:
                await q.close()
            # and later plans them again: their failure comes back, nothing is sent for them
            _toml(tmp_path, 10, base)
            third = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err3 = capsys.readouterr().err
            q = open_queue(tmp_path / "queues", "shrinkfail", "requests")
            try:
                counts3 = await q.counts()
                dead3 = {d.key: d.reason for d in await q.dead_letters()}
            finally:
                await q.close()
            return first, second, err2, status2, counts2, dead2, third, err3, counts3, dead3

    first, second, err2, status2, counts2, dead2, third, err3, counts3, dead3 = anyio.run(main)
    assert (first.status, first.exit_code) == ("incomplete", EXIT_INCOMPLETE)
    # the smaller plan: complete, the failed tasks set aside with their failure kept after the marker
    assert (second.status, second.exit_code) == ("complete", EXIT_COMPLETE), second.summary()
    assert "set aside 4 dead-lettered tasks of edge requests that the current plan no longer holds" in err2, err2
    assert counts2 == QueueCounts(done=6, dead=4)
    assert set(dead2) == failed
    for key, reason in dead2.items():
        assert reason.startswith(SUPERSEDED) and reason.endswith(FAILED_BEFORE + FAILURE), (key, reason)
    assert "incomplete" not in second.summary()
    assert "campaign complete" in status2, status2
    assert "set aside: 4 tasks superseded" in status2 and "failed before they were set aside" in status2, status2
    # the larger plan again: the failure is back (dead, missing work: incomplete), no paid retry
    assert "that had failed before an earlier run set them aside are in the current plan again" in err3, err3
    assert (third.status, third.exit_code) == ("incomplete", EXIT_INCOMPLETE), third.summary()
    assert counts3 == QueueCounts(done=6, dead=4)
    assert dead3 == {k: FAILURE for k in failed}
    paid = _paid(app)
    assert len(paid) == 6 and sum(paid.values()) == 6, paid


def test_failures_on_later_edges_of_dropped_requests_are_set_aside_and_restored(tmp_path, monkeypatch, capsys):
    """review39a #1: a dropped request whose response failed later (a parse failure, a geocoder outage: dead on the
    responses edge, keyed by the request's key) still ended every run incomplete."""
    monkeypatch.setenv("SHRINKFAIL_KEY", GOOD_KEY)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])
    failed = {f"m|{i}" for i in range(6, 10)}

    async def dead_on_responses():
        q = open_queue(tmp_path / "queues", "shrinkfail", "responses")
        try:
            return {d.key: d.reason for d in await q.dead_letters()}, await q.counts()
        finally:
            await q.close()

    async def main():
        async with serve(app) as base:
            path = _toml(tmp_path, 10, base)
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                               only_stages=["model_caller"])
            q = open_queue(tmp_path / "queues", "shrinkfail", "responses")
            try:
                for t in await q.lease(10, 60):
                    await (q.dead_letter(t, FAILURE) if t.key in failed else q.release(t))
            finally:
                await q.close()
            first = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            _toml(tmp_path, 6, base)
            capsys.readouterr()
            second = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err2 = capsys.readouterr().err
            aside = await dead_on_responses()
            _toml(tmp_path, 10, base)
            third = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err3 = capsys.readouterr().err
            return first, second, err2, aside, third, err3, await dead_on_responses()

    first, second, err2, (dead2, counts2), third, err3, (dead3, counts3) = anyio.run(main)
    assert first.status == "incomplete"
    assert second.status == "complete", second.summary()
    assert "set aside 4 dead-lettered tasks of edge responses" in err2, err2
    assert set(dead2) == failed and all(r.startswith(SUPERSEDED) and r.endswith(FAILED_BEFORE + FAILURE)
                                        for r in dead2.values())
    assert counts2.dead == 4 and counts2.done == 6
    assert "of edge responses that had failed before an earlier run set them aside" in err3, err3
    assert third.status == "incomplete" and dead3 == {k: FAILURE for k in failed}
    paid = _paid(app)
    assert len(paid) == 10 and sum(paid.values()) == 10  # each request paid once, none again


def test_a_hand_requeued_failure_set_aside_again_is_sent_when_planned_again(tmp_path):
    """review39a #5: set aside with its failure, requeued by hand (`dead --requeue`), then not planned: set aside
    again from its earlier reason, the failure came along, so a later plan restored the failure and never sent the
    task the researcher had asked to retry. Now the failure the requeue cleared stays cleared."""
    from types import SimpleNamespace

    from geoagent.engine import PlanCheck, bring_back_planned, set_aside_unplanned

    cfg = SimpleNamespace(name="c", source="c.toml")

    async def main():
        q = open_queue(tmp_path / "queues", "c", "requests")
        try:
            await q.put_many([("a", {}), ("b", {})])
            for t in await q.lease(2, 60):
                await q.dead_letter(t, FAILURE)
            await q.set_aside_dead(["a"], "superseded: not in the current plan (x)")
            assert await q.requeue_dead(["a"]) == 1  # the researcher retries it by hand
            check = await PlanCheck.of(q)  # the next plan holds neither a nor b
            await set_aside_unplanned(cfg, q, check)
            reasons = {d.key: d.reason for d in await q.dead_letters()}
            check = await PlanCheck.of(q)  # a later plan holds both again
            check.see("a")
            check.see("b")
            await bring_back_planned(cfg, q, check)
            return reasons, {d.key: d.reason for d in await q.dead_letters()}, await q.counts()
        finally:
            await q.close()

    reasons, after, counts = anyio.run(main)
    assert reasons["a"] == "superseded: not in the current plan (x)"  # no failure: it was cleared by hand
    assert reasons["b"].endswith(FAILED_BEFORE + FAILURE)
    assert after == {"b": FAILURE} and counts == QueueCounts(ready=1, dead=1)  # a queued again, b failed again
