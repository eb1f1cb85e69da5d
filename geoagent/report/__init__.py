"""Report writers (GeoVerify, GeoHint, the live display) and what they share: the note beside a report's CSV
tables (:func:`write_csv_note`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

#: the note beside a report's CSV tables (:func:`write_csv_note`): when its answers were replayed or simulated;
#: a GeoHint report's always (its conditions and echo rule)
CSV_NOTE_FILE = "report_note.txt"


#: the first caption line of a figure drawn before every planned answer is in: a run stopped with work pending, or
#: a live rewrite while it runs (the report's first line says which, and how much was answered; walk33 #1: a d-prime
#: curve from 3 signal trials carried no word of it)
INTERIM_FIGURE_LINE = ("INTERIM: not every planned answer is in; this figure covers only the answers received so far "
                       "(the report's first line says more)")


def figure_note(replay_note: str | None, simulated_note: str | None, *, interim: bool = False) -> str | None:
    """The caption line(s) a report's figures carry under the axes: :data:`INTERIM_FIGURE_LINE` when ``interim``,
    the replay line and the simulator's warning (:func:`geoagent.providers.replay.replay_note`,
    :func:`geoagent.sandbox.launch.simulated_note`), one per line; None when there is none."""
    lines = (INTERIM_FIGURE_LINE if interim else None, replay_note, simulated_note)
    return "\n".join(n for n in lines if n) or None


def write_csv_note(out_dir: str | Path, notes: Iterable[str | None], csv_names: Iterable[str], *,
                   interim: str | None = None) -> Path | None:
    """Write ``out_dir/report_note.txt`` (:data:`CSV_NOTE_FILE`) with ``notes`` (the replay line, the simulator's
    warning; empty ones skipped), first the report's interim sentence (``interim``: the run stopped with work
    pending, the report's ``Interim report:`` line), and the CSV files of the report they cover, or remove a note an
    earlier report left when there is none (the CSVs were just rewritten). Returns the path written, or None.

    The CSV tables themselves carry no banner line (as the exports, :mod:`geoagent.runtime.export`): a first line
    that is not the header breaks ``pl.read_csv``, ``pandas.read_csv`` and DuckDB's reader with default arguments,
    so the note sits beside them, as ``export_note.txt`` sits beside the exports. UTF-8 text, written atomically."""
    from geoagent.files import atomic_write_text

    path = Path(out_dir) / CSV_NOTE_FILE
    lines = ([f"Interim report: {interim}"] if interim else []) + [n for n in notes if n]
    if not lines:
        path.unlink(missing_ok=True)
        return None
    names = ", ".join(sorted(set(csv_names))) or "none"
    atomic_write_text(path, "\n\n".join(lines) + f"\n\nFiles this note covers (written beside it): {names}. They hold "
                      "no comment or banner line, so polars, pandas and DuckDB read them with their default arguments; "
                      "the Markdown report carries the same line(s), and the figures the interim, replay and simulator "
                      "lines.\n")
    return path


#: most import notes a report lists (the rest are counted)
IMPORT_NOTES_LISTED = 200


def import_notes_section(notes: Sequence[object], intro: str | None = None) -> list[str]:
    """Markdown lines of a report's "Import notes" section: the heading, ``intro`` (a sentence, when given), one
    bullet per note (the first :data:`IMPORT_NOTES_LISTED`; the rest counted) and a blank line; [] without notes.
    Shared by the re-score reports and the campaign reports that read release files."""
    if not notes:
        return []
    lines = ["## Import notes", "", *([intro, ""] if intro else []),
             *[f"- {n}" for n in notes[:IMPORT_NOTES_LISTED]]]
    if len(notes) > IMPORT_NOTES_LISTED:
        lines.append(f"- ... {len(notes) - IMPORT_NOTES_LISTED} more")
    return [*lines, ""]
