"""Report writers (GeoVerify, GeoHint, the live display) and what they share: the note beside a report's CSV
tables (:func:`write_csv_note`)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

#: the note beside a report's CSV tables (:func:`write_csv_note`): when its answers were replayed or simulated;
#: a GeoHint report's always (its conditions and echo rule)
CSV_NOTE_FILE = "report_note.txt"


def figure_note(replay_note: str | None, simulated_note: str | None) -> str | None:
    """The caption line(s) a report's figures carry under the axes: the replay line and the simulator's warning
    (:func:`geoagent.providers.replay.replay_note`, :func:`geoagent.sandbox.launch.simulated_note`), one per line;
    None when neither is given."""
    return "\n".join(n for n in (replay_note, simulated_note) if n) or None


def write_csv_note(out_dir: str | Path, notes: Iterable[str | None], csv_names: Iterable[str]) -> Path | None:
    """Write ``out_dir/report_note.txt`` (:data:`CSV_NOTE_FILE`) with ``notes`` (the replay line, the simulator's
    warning; empty ones skipped) and the CSV files of the report they cover, or remove a note an earlier report
    left when there is none (the CSVs were just rewritten). Returns the path written, or None.

    The CSV tables themselves carry no banner line (as the exports, :mod:`geoagent.runtime.export`): a first line
    that is not the header breaks ``pl.read_csv``, ``pandas.read_csv`` and DuckDB's reader with default arguments,
    so the note sits beside them, as ``export_note.txt`` sits beside the exports. UTF-8 text, written atomically."""
    from geoagent.files import atomic_write_text

    path = Path(out_dir) / CSV_NOTE_FILE
    lines = [n for n in notes if n]
    if not lines:
        path.unlink(missing_ok=True)
        return None
    names = ", ".join(sorted(set(csv_names))) or "none"
    atomic_write_text(path, "\n\n".join(lines) + f"\n\nFiles this note covers (written beside it): {names}. They hold "
                      "no comment or banner line, so polars, pandas and DuckDB read them with their default arguments; "
                      "the Markdown report carries the same line(s), and the figures the replay and simulator lines.\n")
    return path
