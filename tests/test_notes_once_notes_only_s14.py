"""NotesOnce (the shared summary writer) leaves out a repeated line only when it is a note (session 14).

Before: any prose line of 100 characters or more said before was left out, so a summary that gave a line twice on
purpose (two campaigns' identical ``this run: ...`` lines through one writer, a long line repeated in one summary)
lost the second. Notes (GeoVerify's small-n lines and its small-n footnote) are still said once.
"""

from __future__ import annotations

import polars as pl

from geoagent.data.model import BAND_SIGNAL
from geoagent.notes import NOTE_OPENINGS, NotesOnce, is_note
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

LONG = ("  this run: 40 new model calls by this process; 0 answers reused from an earlier run of the campaign; "
        "nothing done before this run")


def _outcome(name: str, extra: list[str]):
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import QueueCounts

    return Outcome(name, "complete", 0, 2, {"requests": QueueCounts(done=2)}, None, extra_lines=extra)


def test_a_long_line_repeated_on_purpose_is_kept():
    assert len(LONG.strip()) >= 100 and not is_note(LONG)
    notes = NotesOnce()
    text = "\n".join([LONG, "  campaign b:", LONG])
    assert notes.say(text) == text
    # across two summaries through one writer (the demo's, run's): both campaigns keep their line
    notes = NotesOnce()
    first = _outcome("a", [LONG]).summary(notes=notes)
    second = _outcome("b", [LONG]).summary(notes=notes)
    assert LONG in first and LONG in second


def _scores():
    b0, b1 = "0.15-0.3km", "0.3-0.7km"
    rows = []
    for m in ("a", "b"):
        for i in range(6):
            rows += [(m, f"s{i}", "main", BAND_SIGNAL, "yes", 4, 1, 0), (m, f"s{i}", "main", b1, "no", 1, 4, 0)]
        rows += [(m, f"s{i}", "main", b0, "no", 2, 3, 0) for i in range(3)]
    cells = pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")
    return sdt.score(cells, bands=(b0, b1), pooled=True, n_boot=0, seed=1)


def test_geoverify_notes_are_notes_and_said_once():
    scores = _scores()
    small = R.small_n_warnings(scores)
    footnote = R.small_n_note(scores)
    assert small and all(is_note(ln) for ln in small) and is_note(footnote), (small, footnote, NOTE_OPENINGS)
    notes = NotesOnce()
    first = notes.say("\n".join(["summary a", *small, footnote]))
    second = notes.say("\n".join(["table text", *small, footnote, "  | a | 1 |", "  | a | 1 |"]))
    assert first.splitlines() == ["summary a", *small, footnote]
    assert second.splitlines() == ["table text", "  | a | 1 |", "  | a | 1 |"]
