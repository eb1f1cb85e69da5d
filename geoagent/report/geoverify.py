"""GeoVerify report: the Table 12 layout (one column per model plus pooled) as terminal text (rich),
Markdown and CSV, and the psychometric plot (d' against decoy distance, one line per model, d' = 1 line).

Rendered from :class:`geoagent.scoring.sdt.ModelScores` (i.e. from the aggregator's counts, never from
ad-hoc recomputation). :func:`write_report` writes every file atomically, so it can be called again
and again while a campaign runs (live refresh).

Source: seed 000 Sec. 6.4, Table 12 and Figure 4.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from geoagent.scoring.sdt import ARM_BLANK, ARM_MISMATCH, POOLED, ModelScores

TABLE_MD = "geoverify_table.md"
TABLE_CSV = "geoverify_table.csv"
TABLE_TXT = "geoverify_table.txt"
PLOT_PNG = "geoverify_dprime.png"
FAILURES_CSV = "geoverify_parse_failures.csv"


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{100 * x:.1f} %"


def _num(x: float, signed: bool = False) -> str:
    if x is None or math.isnan(x):
        return "-"
    return f"{x:+.2f}" if signed else f"{x:.2f}"


def _band_title(label: str) -> str:
    return label.replace("km", " km").replace("-", "–")


def _columns(scores: Mapping[str, ModelScores]) -> list[str]:
    models = sorted(m for m in scores if m != POOLED)
    return models + ([POOLED] if POOLED in scores else [])


Row = tuple[str, str, Callable[[ModelScores], float | str | None], Callable[[ModelScores], str]]


def _rows(scores: Mapping[str, ModelScores]) -> list[Row]:
    """(section, label, raw value getter, formatted getter) in Table 12 order, plus counts and read-out."""
    any_s = next(iter(scores.values()))
    bands = [b.band for b in any_s.bands]
    rows: list[Row] = [
        ("Responses", "n parsed (main arm)", lambda s: s.n_signal + s.n_noise, lambda s: str(s.n_signal + s.n_noise)),
        ("Responses", "parse failures", lambda s: s.n_parse_failures, lambda s: str(s.n_parse_failures)),
        ("Response rates", "H (signal accepted)", lambda s: s.h, lambda s: _pct(s.h)),
        ("Response rates", "F (decoy accepted)", lambda s: s.f, lambda s: _pct(s.f)),
        ("Response rates", "control: swapped image", lambda s: s.controls[ARM_MISMATCH][2],
         lambda s: _pct(s.controls[ARM_MISMATCH][2])),
        ("Response rates", "control: gray field", lambda s: s.controls[ARM_BLANK][2],
         lambda s: _pct(s.controls[ARM_BLANK][2])),
    ]
    for b in bands:
        rows.append(("Sensitivity d' by decoy distance", _band_title(b),
                     lambda s, b=b: s.band(b).d_prime, lambda s, b=b: _num(s.band(b).d_prime)))
    rows.append(("Sensitivity d' by decoy distance", "delta_1", lambda s: s.delta_1 or "none",
                 lambda s: _band_title(s.delta_1) if s.delta_1 else "none"))
    if bands:
        rows += [
            ("Criterion c", "nearest band", lambda s: s.bands[0].c, lambda s: _num(s.bands[0].c, True)),
            ("Criterion c", "farthest band", lambda s: s.bands[-1].c, lambda s: _num(s.bands[-1].c, True)),
        ]
    rows += [
        ("Confidence on false acceptances", "median", lambda s: s.fa_conf_median, lambda s: _num(s.fa_conf_median)),
        ("Confidence on false acceptances", "share >= 0.8", lambda s: s.fa_conf_share_high,
         lambda s: _pct(s.fa_conf_share_high)),
        ("Read-out", "pre-registered", lambda s: s.readout.verdict, lambda s: s.readout.verdict),
    ]
    return rows


def render_markdown(scores: Mapping[str, ModelScores]) -> str:
    """Table 12 as a Markdown table (section rows in bold)."""
    if not scores:
        return "_no scored GeoVerify responses yet_\n"
    cols = _columns(scores)
    out = ["| | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols)]
    section = None
    for sec, label, _, fmt in _rows(scores):
        if sec != section:
            out.append(f"| **{sec}** |" + " |" * len(cols))
            section = sec
        out.append(f"| {label} | " + " | ".join(fmt(scores[c]) for c in cols) + " |")
    notes = [f"- {c}: {scores[c].readout.verdict} ({'; '.join(scores[c].readout.reasons)})" for c in cols]
    return "\n".join(out) + "\n\nLog-linear correction applied (Hautus 1995).\n\n" + "\n".join(notes) + "\n"


def render_csv(scores: Mapping[str, ModelScores]) -> str:
    """Table 12 as CSV with raw (unformatted) values: columns section, row, then one per model."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = _columns(scores)
    w.writerow(["section", "row", *cols])
    if scores:
        for sec, label, raw, _ in _rows(scores):
            vals = []
            for c in cols:
                v = raw(scores[c])
                vals.append("" if isinstance(v, float) and math.isnan(v) else v)
            w.writerow([sec, label, *vals])
    return buf.getvalue()


def render_terminal(scores: Mapping[str, ModelScores], *, width: int = 140) -> str:
    """Table 12 as terminal text (a ``rich`` table rendered to a string, no colour codes)."""
    from rich.console import Console
    from rich.table import Table

    if not scores:
        return "no scored GeoVerify responses yet\n"
    cols = _columns(scores)
    table = Table(title="GeoVerify (seed 000 Table 12 layout)", show_lines=False)
    table.add_column("")
    for c in cols:
        table.add_column(c, justify="right")
    section = None
    for sec, label, _, fmt in _rows(scores):
        if sec != section:
            table.add_row(f"[bold]{sec}[/bold]", *[""] * len(cols))
            section = sec
        table.add_row("  " + label, *[fmt(scores[c]) for c in cols])
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(table)
    return console.file.getvalue()  # type: ignore[attr-defined]


def plot_psychometric(scores: Mapping[str, ModelScores], path: str | Path) -> Path:
    """PNG of d' against decoy distance (band midpoint, km, log axis), one line per model and pooled,
    with the d' = 1 line dashed and the nearest band shaded (Figure 4). Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.4, 4.2), dpi=110)
    try:
        edges = []
        for c in _columns(scores):
            s = scores[c]
            xs, ys = [], []
            for b in s.bands:
                lo, hi = (float(x) for x in b.band.removesuffix("km").split("-"))
                edges.append((lo, hi))
                if not math.isnan(b.d_prime):
                    xs.append(math.sqrt(lo * hi))
                    ys.append(b.d_prime)
            style = dict(color="black", linewidth=2.2) if c == POOLED else dict(linewidth=1.3)
            ax.plot(xs, ys, marker="o", label=c, **style)
        if edges:
            lo, hi = min(edges)
            ax.axvspan(lo, hi, color="0.85", zorder=0, label="nearest band")
        ax.axhline(1.0, linestyle="--", color="0.3", linewidth=1, label="d' = 1")
        ax.set_xscale("log")
        from matplotlib.ticker import NullFormatter

        uniq = sorted(set(edges))
        ax.set_xticks([math.sqrt(lo * hi) for lo, hi in uniq], [f"{lo:g}–{hi:g}" for lo, hi in uniq], fontsize=8)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("decoy band (km)")
        ax.set_ylabel("sensitivity d'")
        ax.set_title("GeoVerify: discrimination vs decoy distance")
        ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        tmp = path.with_name(f".{path.name}.tmp")
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
    return path


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def render_failures_md(failures: list[dict]) -> str:
    """Markdown list of parse failures (model, trial, reason)."""
    if not failures:
        return "\nParse failures: none.\n"
    lines = [f"\nParse failures ({len(failures)}):\n"]
    lines += [f"- {f.get('model')} / {f.get('trial_id')}: {f.get('reason')}" for f in failures]
    return "\n".join(lines) + "\n"


def write_report(
    scores: Mapping[str, ModelScores],
    out_dir: str | Path,
    *,
    plot: bool = True,
    parse_failures: list[dict] | None = None,
) -> dict[str, Path]:
    """Write table (Markdown, CSV, terminal text) and plot under ``out_dir``; safe to call repeatedly.

    Returns
    -------
    dict
        ``{"md", "csv", "txt", "png", "failures"}`` -> written paths (``png`` absent when ``plot`` is False
        or no scores exist yet; ``failures`` only when ``parse_failures`` is given).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / TABLE_MD, "csv": out / TABLE_CSV, "txt": out / TABLE_TXT}
    md = render_markdown(scores)
    if parse_failures is not None:
        md += render_failures_md(parse_failures)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model", "trial_id", "reason"])
        for f in parse_failures:
            w.writerow([f.get("model"), f.get("trial_id"), f.get("reason")])
        paths["failures"] = out / FAILURES_CSV
        _atomic_write(paths["failures"], buf.getvalue())
    _atomic_write(paths["md"], md)
    _atomic_write(paths["csv"], render_csv(scores))
    _atomic_write(paths["txt"], render_terminal(scores))
    if plot and scores:
        paths["png"] = plot_psychometric(scores, out / PLOT_PNG)
    return paths
