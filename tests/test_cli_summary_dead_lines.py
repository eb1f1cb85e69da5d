"""The run summary's dead-letter lines show a task key whole and a reason long enough to read (a crawl's
"requests/gh|local-a|mirror-1" used to be cut at 16 characters, reasons at 160, mid-word: "ssl:defa"); a reason
longer than the excerpt ends by saying where the full text is (`run.py dead CONFIG`). (geoagent.engine.Outcome)"""

from __future__ import annotations

from geoagent.engine import DEAD_FULL_TEXT, DEAD_REASON_CHARS, Outcome
from geoagent.runtime.queue import DeadLetter, QueueCounts

KEY = "gh|local-a|mirror-1|baseline|0042"
REASON = ("RetriesExhausted: 4 attempts to https://www.wikidata.org/w/api.php?action=wbsearchentities&search=Sandbox"
          "+City&language=en&format=json failed; last: connection: ClientConnectorDNSError: Cannot connect to host "
          "www.wikidata.org:443 ssl:default [Name or service not known]")


def _summary(reason: str) -> str:
    dead = {"requests": [DeadLetter(KEY, {}, 5, reason)]}
    return Outcome("c", "incomplete", 3, 1, {"requests": QueueCounts(dead=1)}, None, dead).summary()


def test_a_dead_letter_line_shows_the_whole_key_and_reason():
    assert len(REASON) < DEAD_REASON_CHARS  # a typical unreachable-host reason fits whole
    line, = [ln for ln in _summary(REASON).splitlines() if ln.startswith("    requests/")]
    assert line == (f"    requests/{KEY} (deliveries 5): RetriesExhausted: 4 HTTP attempt(s) to "
                    + REASON.split("4 attempts to ", 1)[1])
    assert line.endswith("ssl:default [Name or service not known]") and DEAD_FULL_TEXT not in line


def test_a_longer_reason_is_cut_and_says_where_the_full_text_is():
    long_reason = "PermanentFailure: " + "word " * 200
    line, = [ln for ln in _summary(long_reason).splitlines() if ln.startswith("    requests/")]
    shown = line.split("(deliveries 5): ", 1)[1]
    assert shown.endswith(DEAD_FULL_TEXT)
    assert shown[: -len(DEAD_FULL_TEXT)] == long_reason[:DEAD_REASON_CHARS].rstrip()
