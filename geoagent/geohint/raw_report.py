"""The report of the raw re-scoring route (:mod:`geoagent.geohint.raw_import`): Table 11, the parse accounting
and the cut-off answers, with the hit tables withheld and said so.

Table 11 and the table ``cutoff`` are the GeoHint report's own (:func:`geoagent.report.geohint.table11`,
:func:`geoagent.report.geohint.table_cutoff`, counts from :class:`geoagent.geohint.aggregate.GeoHintAggregator`);
the table ``parse`` counts per model and condition how the defensive parser read each answer
(:attr:`geoagent.geohint.parse.ParsedAnswer.method`): the paper gives "2 responses out of 2799 are unparseable"
and runs the slot count "over the 2797 that parsed" (seed 000 Sec. 6.3.2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from geoagent.data.importer import ImportReport
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.raw_import import NOT_GEOCODED, WITHHELD
from geoagent.geohint.result import GeoHintResult
from geoagent.scoring.truncation import LEGEND_LINE as TRUNCATION_LEGEND
from geoagent.textfmt import count_text
from geoagent.report import import_notes_section
from geoagent.report.geohint import Table, _atomic_write, table11, table_cutoff

#: parse methods in column order (:attr:`geoagent.geohint.parse.ParsedAnswer.method`)
METHODS = ("json", "repaired", "regex")


def table_parse(rows: Sequence[GeoHintResult]) -> Table:
    """Per model and condition: lines imported (every answer, no answers included), answers parsed as standard
    JSON, repaired (quotes, commas, comments, a cut-off object closed), read with a pattern, unparsed, and those
    whose JSON object was cut off (parsed after closing it); a total row. Counts of answers."""
    acc: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        c = acc.setdefault((r.model, r.condition), [0] * 6)
        method = r.extra.get("parse_method")
        c[0] += 1
        if r.parse_ok and method in METHODS:
            c[1 + METHODS.index(method)] += 1
        else:
            c[4] += 1
        c[5] += bool(r.extra.get("truncated")) and r.parse_ok
    out = [[m, cond, *c] for (m, cond), c in sorted(acc.items())]
    out.append(["All", "all", *[sum(c[i] for c in acc.values()) for i in range(6)]])
    return Table(
        "parse",
        "Answers as the parser read them, per model and condition",
        ["Model", "Condition", "n", "JSON", "Repaired", "Pattern", "Unparsed", "Object cut off"],
        ["text", "text", "int", "int", "int", "int", "int", "int"],
        out,
        "Unparsed: no city, area or building could be read (geoagent.geohint.parse); every unparsed forced_chain "
        "answer counts in Table 11's n (its evidence object too, where one was read), also one cut off at the "
        "output-token limit, which is no answer in every other table (table 'cutoff'); Table 11's Unparseable "
        "counts only the answers from which no JSON object was read (the paper's and the release's unparseable).",
    )


def terms_lines(bullet: str = "  ") -> list[str]:
    """The ``Terms:`` section of this route's report: the cut-off table's note says "cut off: defined under
    Terms", and the route prints no other term (the GeoHint legend's hit, echo and regime lines are about the
    withheld tables). ``bullet`` starts each term's line ("- " in Markdown, indented in the terminal)."""
    return ["Terms:", *([""] if bullet.startswith("-") else []), f"{bullet}{TRUNCATION_LEGEND}"]


def write(agg: GeoHintAggregator, rows: Sequence[GeoHintResult], report: ImportReport, out_dir: str | Path) -> list[Table]:
    """Write ``report.md``, ``table11.csv``, ``parse.csv`` and ``cutoff.csv`` under ``out_dir`` (atomically, as
    :func:`geoagent.report.geohint.write_report`); return the tables (Table 11, parse, cutoff). ``report``: the
    import's, whose last file is the raw file (:func:`geoagent.geohint.raw_import.iter_raw`)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tables = [table11(agg), table_parse(rows), table_cutoff(agg)]
    raw = report.files[-1] if report.files else ""  # the raw file, read last (iter_raw)
    files = f"{Path(raw).name} ({count_text(report.imported.get(raw, 0), 'answer')})"
    md = ["# GeoHint Table 11 from raw forced_chain responses", "",
          f"Source: {files}; {count_text(len(report.issues), 'import note')} (below). No model call and no network: each raw "
          "answer was parsed again with geoagent.geohint.parse.", "",
          f"No answer is geocoded ({NOT_GEOCODED}).", "", f"**{WITHHELD}**", ""]
    for t in tables:
        md.append(t.to_markdown())
        _atomic_write(out / f"{t.name}.csv", t.to_csv())
    md += terms_lines("- ") + [""]
    md += import_notes_section(report.issues)
    _atomic_write(out / "report.md", "\n".join(md))
    return tables
