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

from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, EXIT_INCOMPLETE, run_campaign
from geoagent.runtime.queue import FAILED_BEFORE, SUPERSEDED, QueueCounts, open_queue
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status
from _made_up_keys import made_up_key

GOOD_KEY = made_up_key("sk-", 33, seed="sandbox-good-failed-aside")
FAILURE = "HTTP 400 from the provider: invalid image (made up for this test)"


def _toml(tmp: Path, n: int, base: str) -> Path:
    p = tmp / "shrinkfail.toml"
    p.write_text(f"""
[campaign]
name = "shrinkfail"
kind = "generic"
seed = 5
[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"
[budget]
cap_usd = 5.0
[generic]
n_requests = {n}
[[models]]
name = "m"
provider = "openai"
model = "sim-gpt"
base_url = "{base}/v1"
api_key_env = "SHRINKFAIL_KEY"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 100
concurrency = 4
rate = {{ requests = 2000, period_s = 1.0 }}
timeout_s = 5.0
""", encoding="utf-8")
    return p


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
