"""Console notes said once: definitions and banners that several summaries or tables of one output repeat.

A run's end-of-run summary (:meth:`geoagent.engine.Outcome.summary`) and the report text printed with it carry
notes that are the same wherever they appear: the definition of "cut off" (:data:`geoagent.scoring.truncation.LEGEND_LINE`,
in every campaign's summary and every table's terms), the simulated-answers banner
(:func:`geoagent.sandbox.launch.simulated_note`, in a summary and atop its table text), and the GeoVerify small-n
lines (the summary and the table text under it). One output should say each once (session 12 walkthrough of the
demo: the cut-off definition came 4 times). :class:`NotesOnce` is the one place that decides it; the summary writer
runs every summary through one (a fresh one per summary, or the caller's, shared by everything one process prints:
``run`` prints one summary, the demo three campaign summaries and two tables).

Rules, per line, in the order the text is said:

* a line holding the cut-off definition: kept the first time; later its definition becomes
  :data:`CUT_OFF_SEE_ABOVE` (the line's own counts stay);
* a line holding a simulated-answers banner (``Simulated answers: ...``): left out when that banner was said
  already (another campaign's banner, e.g. GeoHint's, which says more, is a different one);
* a note line (its text opens with one of :data:`NOTE_OPENINGS`: GeoVerify's ``Small n (...)`` lines and its
  ``† d' rests on ...`` footnote, said by the summary and by the table text under it) already said word for word:
  left out. No other line is: a summary or table that gives a line twice on purpose keeps both (before session
  14 every prose line of 100 characters or more said before was left out, e.g. a second campaign's identical
  ``this run: ...`` line). A table row (a box-drawing or Markdown table character) is never a note.
"""

from __future__ import annotations

from geoagent.scoring.truncation import LEGEND_LINE

#: what the cut-off definition becomes after its first time in one output
CUT_OFF_SEE_ABOVE = "cut off: see above"
#: the words that open the simulated-answers banner (:func:`geoagent.sandbox.launch.simulated_note`)
SIMULATED_BANNER = "Simulated answers: "
#: how a note line opens (stripped): GeoVerify's small-n lines (:func:`geoagent.report.geoverify.small_n_warnings`)
#: and its footnote on the small-n mark (:func:`geoagent.report.geoverify.small_n_note`); such a line is left out
#: when said word for word before, no other line is
NOTE_OPENINGS = ("Small n (", "\u2020 d' rests on fewer than ")
#: characters of table rows (rich's box drawing, Markdown's cell separator): such a line is never left out
TABLE_CHARS = frozenset("│┃|━─┏┓┗┛┡┩└┘╇╈┳┻╋┼")


def is_note(line: str) -> bool:
    """Whether ``line`` is a note :class:`NotesOnce` says once: its stripped text opens with one of
    :data:`NOTE_OPENINGS` and holds no table character (:data:`TABLE_CHARS`)."""
    key = line.strip()
    return key.startswith(NOTE_OPENINGS) and not TABLE_CHARS.intersection(key)


class NotesOnce:
    """Says each note once across every text passed through :meth:`say` (module doc for the rules).

    One instance per output: :meth:`geoagent.engine.Outcome.summary` makes its own when given none (so one
    summary never repeats a note), and a caller printing several texts (the demo) shares one among them.
    """

    __slots__ = ("_banners", "_lines", "_cut_off_said")

    def __init__(self) -> None:
        self._banners: set[str] = set()
        self._lines: set[str] = set()
        self._cut_off_said = False

    def say(self, text: str) -> str:
        """``text`` (lines separated by ``\\n``) with the notes already said left out or referred to (module doc).

        Parameters
        ----------
        text : str
            What is about to be printed.

        Returns
        -------
        str
            The same text, lines in the same order, less the repeats; the instance remembers what it said.
        """
        out = []
        for line in text.split("\n"):
            if SIMULATED_BANNER in line:
                banner = line.split(SIMULATED_BANNER, 1)[1].strip()
                if banner in self._banners:
                    continue
                self._banners.add(banner)
            if LEGEND_LINE in line:
                if self._cut_off_said:
                    line = line.replace(LEGEND_LINE, CUT_OFF_SEE_ABOVE)
                self._cut_off_said = True
            key = line.strip()
            if is_note(key):
                if key in self._lines:
                    continue
                self._lines.add(key)
            out.append(line)
        return "\n".join(out)
