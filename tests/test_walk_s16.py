"""Walkthrough s16 (a newcomer's first hour on a fresh clone): findings pinned by tests."""


def test_interrupted_summary_does_not_call_requests_sent_with_an_unknown_outcome_unsent():
    """A GeoVerify run against the OpenAI fake with ``--fault-rate 0.2`` (port of its own, 0.8 s latency), stopped
    by SIGINT after 15 s, said ``244 requests not sent yet: left queued by the interrupt`` while 14 of those 244
    had been sent (the fake's ``--log``: 12 of them with an unknown outcome, a timeout, a reset or a malformed 2xx
    body, booked as unknown-outcome spend: possibly billed), and the resume sent them again. With unknown-outcome
    calls on the ledger the line says the requests are not answered yet and that some may have been sent; a clean
    interrupt keeps ``not sent yet``."""
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    counts = {"requests": QueueCounts(ready=244, done=101), "responses": QueueCounts(ready=3, done=98)}
    spend = {"spent_usd": 0.0166, "unknown_usd": 0.0063, "unknown_calls": 12, "reserved_usd": 0.0,
             "cap_usd": 1.0, "calls": 101}
    text = Outcome("mvf", "interrupted", 130, 345, counts, spend).summary()
    line = next(ln for ln in text.splitlines() if "244 requests" in ln)
    assert "not sent yet" not in line, line
    assert "244 requests not answered yet" in line and "12 such calls above" in line, line
    assert "re-run the same command" in line, line
    clean = dict(spend, unknown_usd=0.0, unknown_calls=0)
    text = Outcome("mvf", "interrupted", 130, 345, counts, clean).summary()
    assert "244 requests not sent yet: left queued by the interrupt" in text, text
