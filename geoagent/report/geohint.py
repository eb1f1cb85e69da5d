"""GeoHint report: the paper's tables (seed 000 Tables 1-11) and figures (Fig. 2, Fig. 3) from a
:class:`~geoagent.geohint.aggregate.GeoHintAggregator`, rendered to the terminal (rich), Markdown and CSV;
figures as PNG through matplotlib's Agg backend.

Every number is computed from the aggregator's per-site sums (never from ad-hoc recomputation over
rows), so the same report can be refreshed live during a campaign or from a released campaign
(:mod:`geoagent.geohint.judged`). Rates are in percent (differences in points), distances in km, slopes in
log10 units per km, in Markdown and the terminal; the CSV files hold every rate and rate difference as a
fraction, in a column whose name ends in ``(fraction)`` (:meth:`Table.csv_columns`), and band labels in the
data's ASCII spelling (``0.5-1.5km``); Markdown and the terminal show bands as ``0.5–1.5 km`` (:func:`band_title`,
as the GeoVerify report).
Undefined cells (no rows) are NaN in the data and print as an em dash. Tables that split sites into the
legible and illegible regimes (2, 3, 5, 7, 8, 9) say so under the table when no site has a regime (the data
hold no no-context answers, as in the release sample), see :func:`regime_note`. ``report.md`` opens with a
legend of the terms (:func:`legend_for`); the terminal output ends with it.

Regimes: every regime split (Tables 2, 3, 5, 7, 8, 9 and Fig. 2) and the split-half correction of Table 3
use the aggregator's ``regime_threshold`` (``[geohint] regime_threshold``, default 0.5 as in the paper);
``report.md`` names it in its header (:func:`regime_threshold_note`), Table 2's title and the legend give it
as a percentage.

When the terminal output goes to a file or a pipe, tables are printed at their natural width (never cut at
80 columns), see :func:`report_console`.

Echo columns (Tables 1, 2, 4, 8, 10 and the Fig. 3 heatmap) follow the aggregator's echo rule
(``[geohint] echo_rule``, :mod:`geoagent.geohint.echo`); ``report.md`` names it in its header and every
table with an echo column names it in its notes (shown under the table in Markdown and the terminal).

Slope p-values (Tables 6 and 7, site-clustered SEs) use the reference ``p_reference`` (``[geohint]
p_reference``): ``"normal"`` (default; statsmodels' default for cluster-robust fits, which the release's
scripts use) or ``"t"`` (Student's t with G - 1 degrees of freedom, G = site clusters of the fit, as
statsmodels' ``use_t=True``). Both tables name the reference in their notes, and with the normal reference a
table whose fits use fewer than :data:`FEW_CLUSTERS` sites says that its p-values are too small and gives
the cluster counts (:func:`p_reference_note`); below :data:`MIN_CLUSTERS_NORMAL_P` (10) clusters a fit's
normal-reference p is not printed (an em dash, with the reason; :func:`_shown_p`), nor is Table 6's SE, from
which that p is computed (:func:`_shown_se`). A fit the regression refuses (too few rows, every hint distance
equal, sums that are not finite) leaves its cells as dashes, and the table's notes give one line per reason, said
once, naming those cells (:func:`no_fit_note`). An exact fit (every residual 0 up to rounding, e.g. every error
equal) has no SE or p (:attr:`geoagent.scoring.regression.ClusterOLSResult.exact_fit`): beta is shown, its SE, SE
ratio and p are dashes (empty CSV cells) and the notes name them (:func:`exact_fit_note`). Under the t reference a
Table 6 SE from fewer than :data:`MIN_CLUSTERS_NORMAL_P` site clusters is shown with a caution in the notes, which
covers its ``SE / unclustered SE`` too (:func:`p_reference_note`). ``report.md`` names the
reference in its header.

Intervals resample sites, as GeoVerify's (:func:`site_bootstrap_interval`): Table 1's hit and echo rates per model
and Fig. 2's points (per regime and band, models pooled) carry 95 % site-bootstrap percentile intervals
(``[geohint] n_boot`` resamples, default :data:`DEFAULT_N_BOOT`, seeded by ``[geohint] boot_seed``, default the
report's ``seed``; 0 = no intervals,
said under Table 1 and Fig. 2; Clopper-Pearson at 0 or 1), in ``pctci`` columns (``[lo, hi]`` in %, two fraction columns ``<name> lo`` / ``<name> hi`` in the CSV).
Few sites: an interval whose answers come from fewer than :data:`~geoagent.scoring.sdt.BOOT_MIN_SITES` (5) sites is
withheld (an em dash; empty CSV cells), and one from 5 to 9 sites is given but flagged few-cluster
(:func:`geoagent.scoring.sdt.boot_site_flag`): Table 1's ``CI flag`` column (Markdown, CSV, terminal) says which
and why, the notes and the legend state the rule (Cameron and Miller 2015, as for Table 6's p-values), and Fig. 2
names the withheld or flagged lines in its legend.
A hit rate none of whose answers geocoded is undetermined and prints as an em dash (Tables 1, 2, 8-10). A model
whose no-context hit rate is so undetermined is left out of the regime assignment, and the header and Tables 2-3 name
it (:func:`regime_left_out_note`, :func:`regime_left_out_ref`; stats42 #1). So are the comparisons that pool models
without a row per model: Tables 8 and 10, ``building_vs_nocontext`` and Fig. 2's points leave out every answer of a
model whose hit rate in a condition they compare is undetermined, and say so (:func:`pooled_left_out_note`; stats43 #1).
A model whose no-context answers mostly did not parse stays in the regime assignment (unparsed is the model's own
miss, the release's rule), and the header says so (:func:`regime_unparsed_note`; stats43 #3).

Comparisons with the no-context baseline paired by image (when the data hold no-context answers, after Table 7):
``nocontext_near`` (Sec. 6.1.3: per model, near-band minus no-context hit rate; :func:`table_nocontext_near`) and
``building_vs_nocontext`` (Sec. 6.3.1: building-level share with context minus without, per band, models pooled;
:func:`table_building_vs_nocontext`), both from :func:`image_paired_difference`. The strictly paired Tables 8-10
pair items by site, image, model, language and reference point, repeats averaged per item
(:meth:`geoagent.geohint.aggregate.GeoHintAggregator.paired`).

Answers cut off at the output-token limit (:mod:`geoagent.scoring.truncation`) are counted per model and
condition in the table ``cutoff`` (after the paper's tables); those with nothing parsed are no answer and enter
no other table but Table 11, whose n is every forced_chain response (:func:`no_answer_note` says how many under
Table 1, :func:`table11` how many its n holds); ``report.md`` gives the total in its header
and repeats the warning lines of :func:`truncation_warnings` (share above 1 % for a model in a condition). When
nothing was cut off, Markdown and the terminal show that table as one row, ``All | all | 0 of N``, as the GeoVerify
report's section (``cutoff.csv`` keeps every row).

One model: with a single model, the pooled row ``All`` of Tables 6 and 7 (every model together) would repeat that
model's row, and so would the ``All`` row of the cut-off table (the model's total) and of the unresolved table (with
one condition); Markdown and the terminal leave such a row out and say so once under the table
(:func:`one_model_note`, through :attr:`Table.shown`), while the CSV files keep it. A pooled row that repeats no row
is kept (the unresolved table's total over several conditions; the cut-off table's one row when nothing was cut
off). The figures already name the one model instead of a pool (:func:`models_pooled_text`).

What the tables leave out is said: answers that did not geocode (resolved level none) per model and
condition in the table ``unresolved`` (:func:`table_unresolved`), in the ``report.md`` header
(:func:`unresolved_line`) and with :func:`unresolved_warnings` above :data:`UNRESOLVED_WARN_SHARE` (the
endpoints answered but found nothing); answers whose lookups failed (the endpoints failed or could not be
reached: dead-lettered or left queued on the ``answers`` edge, in no table) with
:func:`geocoder_failure_warning`; answers with err = 0 km, left out of Tables 5-7 (no logarithm; the paper states no floor), counted per regime in those
tables' notes (:func:`zero_err_note`); sites without a no-context answer, which have no regime
(:func:`no_regime_note`); and with few sites (G <= :data:`FEW_FLIP_SITES`) the smallest p the site-flip test of
Tables 8-10 can give, 2/2^G (:func:`few_sites_note`).
"""

from __future__ import annotations

import csv
import io
import math
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

import numpy as np

from geoagent import constants as C
from geoagent.textfmt import count_text, fixed_text
from geoagent.geohint.aggregate import BANDS, CHECKLIST_CONDITIONS, GeoHintAggregator
from geoagent.geohint.echo import ECHO_RULE_RELEASE_FIRST_WORD, describe_echo_rule
from geoagent.geohint.parse import EVIDENCE_CATEGORIES
from geoagent.files import atomic_savefig, atomic_write_text
from geoagent.report import import_notes_section
from geoagent.report.figure_layout import layout_with_caption, legend_outside
from geoagent.scoring.sdt import BOOT_MIN_SITES, BOOT_SITES_RULE, boot_site_flag
from geoagent.scoring.permutation import DEFAULT_N_FLIPS, exact_max_sites, paired_site_permutation_test
from geoagent.scoring.regime import (
    DEFAULT_THRESHOLD,
    ILLEGIBLE,
    LEGIBLE,
    REGIMES,
    check_threshold,
    split_half_correction,
    threshold_text,
)
from geoagent.scoring.truncation import LEGEND_LINE as TRUNCATION_LEGEND
from geoagent.scoring.truncation import TruncationCount, no_answer_words, total, warning_lines

BAND_NAMES = ("Near", "Mid", "Far")
#: tables with an echo-rate column (their notes name the echo rule, :func:`echo_rule_ref`; the report's top gives
#: it in full, :func:`echo_rule_note`)
ECHO_TABLES = ("table1", "table2", "table4", "table8", "table10")
TIERS_ORDER = ("high", "mid", "low")
#: Table 4's row label of each tier, with its referenceability range as the paper's Table 4 gives it
TIER_LABELS = {"high": "High (4-5)", "mid": "Mid (2-3)", "low": "Low (0-1)"}
#: the pooled row (every model together) of Tables 6 and 7 and of the cut-off and unresolved tables; a model of
#: that name is refused at plan time (:func:`geoagent.geohint.plan.check_report_names`)
POOLED_ROW = "All"
#: Table 4's pooled row (the paper's group "Pooled", row "All")
TABLE4_POOLED = "Pooled: All"
DASH = "\u2014"
#: console width when the output is not a terminal: wide enough that no table is ever cut or wrapped
#: (rich tables keep their natural width; a wider console adds no padding)
UNBOUNDED_WIDTH = 10_000

#: what Fig. 2 (``fig_hit_by_band.png``) draws as error bars (:func:`fig2_bars`): some site-bootstrap interval,
#: none because every one is withheld (fewer than 5 sites behind each point), none because no bootstrap ran, none
#: because the figure has no point at all (no site has a regime)
FIG2_BARS_DRAWN, FIG2_BARS_WITHHELD, FIG2_BARS_OFF, FIG2_EMPTY = "drawn", "withheld", "off", "empty"
FIG2_BARS = (FIG2_BARS_DRAWN, FIG2_BARS_WITHHELD, FIG2_BARS_OFF, FIG2_EMPTY)


def fig2_terms_line(bars: str | None = FIG2_BARS_DRAWN, n_boot_source: str | None = None, *,
                    models: Sequence[str] | None = None) -> str | None:
    """The Terms line on ``fig_hit_by_band.png`` for what it draws (``bars``, one of :data:`FIG2_BARS`, as
    :func:`fig2_bars` returns it); None (no line) when ``bars`` is None: no figure was written, or the output
    shows none (the terminal). ``n_boot_source``: the setting that turned the bootstrap off (:func:`no_boot_setting`;
    default ``[geohint] n_boot``). ``models``: the models the figure pools (:func:`fig2_models`); with one, the line
    names it ("model m-a") where it would say "models pooled" (nothing is pooled; :func:`models_pooled_text`, as the
    figure's own title). None: "models pooled".

    Raises
    ------
    ValueError
        ``bars`` is not one of :data:`FIG2_BARS` or None.
    """
    tail = "; the legend gives the sites and responses behind each line."
    if bars is None:
        return None
    if bars == FIG2_BARS_DRAWN:
        return ("Figure fig_hit_by_band.png: error bars are 95 % site-bootstrap percentile intervals (sites of the "
                f"regime resampled, {_pooled_words(models)}; none at a point whose answers come from fewer than {BOOT_MIN_SITES} "
                "sites: see few sites)" + tail)
    if bars == FIG2_BARS_WITHHELD:
        return (f"Figure fig_hit_by_band.png: no error bars: every interval is withheld (each point's answers come "
                f"from fewer than {BOOT_MIN_SITES} sites of its regime; see few sites)" + tail)
    if bars == FIG2_BARS_OFF:
        return (f"Figure fig_hit_by_band.png: no error bars ({no_boot_setting(n_boot_source or N_BOOT_KEY)}: no "
                "site-bootstrap resamples drawn)" + tail)
    if bars == FIG2_EMPTY:
        return ("Figure fig_hit_by_band.png: no line and no error bar: no site has a regime (its caption says why)"
                + tail)
    raise ValueError(f"fig2 bars {bars!r}: expected one of {FIG2_BARS} or None")


def _pooled_words(models: Sequence[str] | None) -> str:
    """"models pooled", or with exactly one model of ``models`` its name ("model m-a": nothing is pooled)."""
    return "models pooled" if models is None or len(models) != 1 else models_pooled_text(models)


def legend_for(regime_threshold: float = DEFAULT_THRESHOLD, *, fig2: str | None = FIG2_BARS_DRAWN,
               n_boot_source: str | None = None, models: Sequence[str] | None = None) -> tuple[str, ...]:
    """One line per term used in the tables and figures (seed 000 Sec. 6.1-6.2, in our words); the regime
    line gives ``regime_threshold`` (``[geohint] regime_threshold``, a fraction) as a percentage. ``fig2``: what
    ``fig_hit_by_band.png`` draws as error bars (:func:`fig2_bars`; its line, :func:`fig2_terms_line`), None to
    leave the figure out (none was written, or the output shows no figure); ``n_boot_source`` and ``models`` (the
    models Fig. 2 pools, :func:`fig2_models`: with one, no line says "models pooled") as there."""
    t = threshold_text(check_threshold(regime_threshold))
    fig_line = fig2_terms_line(fig2, n_boot_source, models=models)
    return tuple(line for line in (
        "hit: the answer lies under 1 km from where the photo was taken and resolves finer than a city "
        "(an area or a building); hit rate = share of hits.",
        "echo: the answer names the reference point the hint gave (see the echo rule); echo rate = share of echoes.",
        "unparsed: an answer the model finished (not cut off) whose text holds no JSON answer; it counts as a "
        "response and a miss, as the release's judged answers count answers with empty parsed fields (hit False). "
        "An answer cut off at the output-token limit, or stopped by the provider's content filter, with nothing "
        "parsed is no answer instead: left out of every rate (see cut off).",
        f"regime: sites are split by their own no-context (baseline) hit rate: legible at {t} or more, illegible "
        "below.",
        "undetermined regime: every no-context answer of the site parsed and none geocoded, so it is in neither "
        "regime (an unparsed answer is a miss of the model's own and decides a rate).",
        "conditions (the GeoContext paper, Sec. 4.1 and App. A.1; our prompts in geoagent/prompts/): baseline = no hint, the forced "
        "schema; forced = the hint 'I took this photo near <reference point>.' before the forced schema, which asks "
        "for city, area and building and allows no 'unknown'; forced_warn = forced plus a note that the place the "
        "user names may be wrong or a different area close by; forced_chain = forced plus an evidence checklist "
        "(infrastructure, vegetation, architecture, script, terrain) to fill in before answering; v1 = the hint "
        "before the permissive schema that allows 'unknown' (the control); v1_baseline = v1 without a hint.",
        "bands (km): distance from the photo's site to the hinted reference point (d_ref); err = distance (km) "
        "from the site to the geocoded answer; ratio = err / d_ref (1 = the answer is the hint). Near, Mid, Far "
        "(Tables 8 and 10): the bands 0.5–1.5, 1.5–3 and 3–6 km.",
        fig_line,
        f"few sites: {BOOT_SITES_RULE} (Table 1's CI flag column, Fig. 2's legend).",
        TRUNCATION_LEGEND,
    ) if line)


#: the legend at the paper's threshold (0.5); :func:`legend_for` for another one
LEGEND = legend_for()
#: p-value references of the slope tables (``[geohint] p_reference``)
P_REFERENCES = ("normal", "t")
#: with fewer site clusters than this, normal-reference p-values of cluster-robust fits are anti-conservative
FEW_CLUSTERS = 30
#: with fewer site clusters than this, a slope p-value from the normal reference is not printed (an em dash, with
#: the reason in the notes): the cluster-robust variance itself is biased down with so few clusters and the
#: normal reference ignores that, so the p-value can be absurd (2.0e-177 from 2 clusters). 10 follows the usual
#: reading of Cameron and Miller (2015, J. Human Resources 50(2), Sec. VI): below about 10 clusters the
#: normal-reference Wald test of a cluster-robust fit over-rejects badly, and t with G - 1 df is the minimum
#: remedy. The t reference (``p_reference = "t"``) keeps its p-values: G - 1 df already widens them.
MIN_CLUSTERS_NORMAL_P = 10
#: the settings a cut-off warning asks to raise (the model's first: a re-run of the same command applies it to the
#: requests still queued; the task section's is planned into each request, walk44 B1)
TRUNCATION_SETTING = "the model's [[models]] max_output_tokens (or [geohint] max_output_tokens where the config sets it)"
#: the task section's key among :data:`TRUNCATION_SETTING`
TRUNCATION_TASK_KEY = "[geohint] max_output_tokens"


def _md_cell(text: str) -> str:
    """One Markdown table cell: line breaks (any :meth:`str.splitlines` boundary) as spaces, pipes escaped, so a
    name from an untrusted file (the raw route's ``model``) can neither end its row nor split a cell."""
    return " ".join(str(text).splitlines()).replace("|", "\\|")


@dataclass(slots=True)
class Table:
    """A report table: raw values in ``rows`` and a display format per column.

    Formats: ``text``, ``count_of`` (a count as text, ``"0 of 14"``: right-aligned as the numbers are), ``int``, ``pct`` (fraction shown x100, 1 decimal), ``pp`` (percentage points,
    signed, 2 decimals), ``pps`` (percentage points, unsigned, 2 decimals: an SD), ``f2``, ``f4`` (signed 4
    decimals; a number that rounds to zero is shown ``0.00`` / ``0.0000``, without a sign, never ``-0.00``:
    :func:`geoagent.textfmt.fixed_text`), ``p`` (p-value, 2 significant digits; a sampled permutation p at its floor, :class:`FloorP`, as
    ``<1.0e-04``, a p that underflowed to 0 as ``<1e-300``), ``permp`` (a sampled permutation p, :func:`perm_p`:
    shown as ``p``; the CSV adds a Boolean ``"<name>_is_floor"`` column at its end, true where the value is the
    floor ``1 / (1 + n_flips)``: no flip reached the statistic, so the sampled p is the smallest the flips can give; it is a valid p-value, not a proof that the true p lies below it, since a true p somewhat above the floor also leaves no flip at or beyond the statistic now and then), ``pctci`` (an interval ``(lo, hi)`` of fractions or None, shown
    ``[lo, hi]`` in %; two CSV columns).

    The CSV (:meth:`to_csv`) holds every rate as a fraction: ``pct`` values as they are, ``pp``/``pps`` values
    (points) divided by 100, under :meth:`csv_columns` (the column name with ``" (fraction)"`` in place of a
    ``" (%)"`` / ``" (pp)"`` unit).

    ``shown``: a shorter table that Markdown and the terminal show in place of this one (e.g. the cut-off table's
    one row when nothing was cut off, :func:`table_cutoff`); the CSV always holds ``rows``. None: this table.
    """

    name: str
    title: str
    columns: list[str]
    formats: list[str]
    rows: list[list[Any]]
    notes: str = ""
    shown: Table | None = None

    def display_rows(self) -> list[list[str]]:
        """Cells as Markdown and the terminal show them (band labels in the pretty ``0.5–1.5 km`` form)."""
        return [[band_title(c) if f == "text" else c for c, f in zip((_fmt(v, f) for v, f in zip(row, self.formats)), self.formats)]
                for row in self.rows]

    def display_columns(self) -> list[str]:
        """Column names as Markdown and the terminal show them (band labels pretty; the CSV keeps ASCII)."""
        return [band_title(c) for c in self.columns]

    def notes_lines(self) -> list[str]:
        """The notes as separate lines (paragraphs of ``notes`` are separated by blank lines)."""
        return [p for p in self.notes.split("\n\n") if p]

    def to_markdown(self) -> str:
        """The table as Markdown: a ``###`` title, the shown rows (:attr:`shown` when set), the notes below."""
        if self.shown is not None:
            return self.shown.to_markdown()
        out = [f"### {self.title}", ""]
        out.append("| " + " | ".join(_md_cell(c) for c in self.display_columns()) + " |")
        out.append("|" + "|".join("---" if f == "text" else "---:" for f in self.formats) + "|")
        for row in self.display_rows():
            out.append("| " + " | ".join(_md_cell(c) for c in row) + " |")
        for line in self.notes_lines():
            out += ["", line]
        return "\n".join(out) + "\n"

    def _labelled(self) -> list[int]:
        """Indexes of the text columns holding a band label in some row (shown pretty in Markdown and the
        terminal, ASCII in the CSV): each gets a ``"<name> label"`` column at the end of the CSV."""
        return [i for i, f in enumerate(self.formats)
                if f == "text" and any(isinstance(r[i], str) and band_title(r[i]) != r[i] for r in self.rows)]

    def csv_columns(self) -> list[str]:
        """Column names of the CSV: a rate column (shown in % or points elsewhere) is named ``"<name> (fraction)"``;
        an interval column (``pctci``) becomes two, ``"<name> lo (fraction)"`` and ``"<name> hi (fraction)"``. A
        text column holding band labels (the data's ASCII ``0.5-1.5km``, a stable key) gets a ``"<name> label"``
        column at the end with the label as Markdown and the terminal show it (``0.5–1.5 km``), so a CSV row can
        be matched to its Markdown row. Each permutation p column (``permp``) gets a Boolean ``"<name>_is_floor"``
        column after those: ``True`` where its p is the sampled test's floor ``1 / (1 + n_flips)`` (:class:`FloorP`;
        Markdown shows ``<1.0e-04``), a bound rather than a p, ``False`` for another p, empty where the p is."""
        out = []
        for c, f in zip(self.columns, self.formats):
            if f == "pctci":
                out += [f"{c} lo (fraction)", f"{c} hi (fraction)"]
            else:
                out.append(_csv_fraction_name(c) if f in CSV_FRACTION_SCALE else c)
        return (out + [f"{self.columns[i]} label" for i in self._labelled()]
                + [f"{self.columns[i]}_is_floor" for i in self._perm_ps()])

    def _perm_ps(self) -> list[int]:
        """Indexes of the permutation p columns (format ``permp``): each gets an ``"<name>_is_floor"`` CSV column."""
        return [i for i, f in enumerate(self.formats) if f == "permp"]

    def csv_rows(self) -> list[list[Any]]:
        """The raw values as the CSV holds them: rates as fractions (points / 100), intervals as two fractions
        (empty without an interval), others as they are; then the shown band labels and whether each permutation
        p is at its floor (:meth:`csv_columns`)."""
        out = []
        labelled, perm_ps = self._labelled(), self._perm_ps()
        for row in self.rows:
            cells: list[Any] = []
            for v, f in zip(row, self.formats):
                if f == "pctci":
                    cells += list(v) if v is not None else [None, None]
                elif f in CSV_FRACTION_SCALE and isinstance(v, (int, float)) and not isinstance(v, bool):
                    cells.append(v * CSV_FRACTION_SCALE[f])
                else:
                    cells.append(v)
            floors = [None if not isinstance(row[i], float) or math.isnan(row[i]) else isinstance(row[i], FloorP)
                      for i in perm_ps]
            out.append(cells + [band_title(row[i]) if isinstance(row[i], str) else row[i] for i in labelled] + floors)
        return out

    def to_csv(self) -> str:
        """Raw values (full precision; empty for NaN/None; rates as fractions, see :meth:`csv_rows`) under
        :meth:`csv_columns`."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(self.csv_columns())
        for row in self.csv_rows():
            w.writerow(["" if v is None or (isinstance(v, float) and math.isnan(v)) else v for v in row])
        return buf.getvalue()

    def to_rich(self):
        """The table as a rich table (:attr:`shown` when set), the notes as its caption."""
        if self.shown is not None:
            return self.shown.to_rich()
        from rich.markup import escape
        from rich.table import Table as RichTable

        # notes are plain text: "[geohint] p_reference" must not be read as rich markup (and vanish)
        # notes left-aligned: rich centres a caption by default, each wrapped line on its own (ragged; review s17)
        t = RichTable(title=self.title, caption=escape("\n".join(self.notes_lines())) or None, caption_justify="left")
        for c, f in zip(self.display_columns(), self.formats):
            t.add_column(c, justify="left" if f == "text" else "right")
        for row in self.display_rows():
            t.add_row(*row)
        return t


def band_title(label: str) -> str:
    """A ladder band label in the pretty form of Markdown and the terminal (``0.5-1.5km`` -> ``0.5–1.5 km``, as
    the GeoVerify report); any other text unchanged. The CSV keeps the data's ASCII label."""
    return label.replace("km", " km").replace("-", "\u2013") if label in BANDS else label


#: display format -> factor that turns its raw value into a fraction for the CSV (rates: fractions everywhere)
CSV_FRACTION_SCALE = {"pct": 1.0, "pp": 0.01, "pps": 0.01}
_UNIT_SUFFIXES = (" (%)", " (pp)", " (points)")


def _csv_fraction_name(name: str) -> str:
    for suffix in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            name = name[: -len(suffix)]
            break
    return f"{name} (fraction)"


#: what a p-value that underflowed to 0.0 is shown as: "<1e-300" (2 * the normal tail of |z| > 37.5 is below the
#: smallest double); a p of 0 would claim certainty
P_UNDERFLOW = 1e-300


class FloorP(float):
    """A sampled permutation p-value at its floor ``1 / (1 + n_flips)`` (no random flip reached the observed
    statistic, :attr:`geoagent.scoring.permutation.PermutationResult.at_floor`): the value is the float itself
    (the CSV writes it), Markdown and the terminal show it as a bound, ``<1.0e-04`` for 10,000 flips (the
    paper's "p<10^-4")."""

    __slots__ = ()


def perm_p(res: Any) -> float:
    """The p-value of a :class:`~geoagent.scoring.permutation.PermutationResult` as a table cell: a
    :class:`FloorP` when it is the sampled test's floor (shown ``<1.0e-04``), else the plain float."""
    return FloorP(res.p_value) if res.at_floor else res.p_value


def p_text(p: float) -> str:
    """A p-value to 2 significant digits (``0.043``, ``1.5e-04`` below 0.001), a tie rounded up: an exact
    permutation p is often a dyadic fraction such as 2/16 = 0.125, which Python's round-half-even formatting shows as
    ``0.12``, below the smallest p the test can give (2/2^G, stated in the table's note). Raises ValueError for a
    value that is not a finite number."""
    d = Decimal(float(p))  # the float's exact binary value: a tie is a true tie
    if not d.is_finite():
        raise ValueError(f"p must be a finite number, got {p!r}")
    if d == 0:
        return "0"
    up = float(d.quantize(Decimal(1).scaleb(d.adjusted() - 1), rounding=ROUND_HALF_UP))
    return f"{up:.2g}" if up >= 1e-3 else f"{up:.1e}"


def _fmt(v: Any, f: str) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return DASH
    if f in ("text", "count_of"):
        return str(v)
    if f == "int":
        return f"{int(v)}"
    # a value that rounds to zero prints 0.00 without a sign, never -0.00 or +0.00 (textfmt.fixed_text)
    if f == "pct":
        return fixed_text(100 * v, 1)
    if f == "pp":
        return fixed_text(v, 2, signed=True)
    if f in ("pps", "f2"):
        return fixed_text(v, 2)
    if f == "f4":
        return fixed_text(v, 4, signed=True)
    if f == "se":
        return fixed_text(v, 4)
    if f in ("p", "permp"):
        if isinstance(v, FloorP):  # no flip reached the statistic: the floor, shown with "<" as the paper writes p<10^-4
            return "<" + p_text(v)
        if v == 0:  # a regression p below the smallest float (a huge z): a bound, not p = 0
            return f"<{P_UNDERFLOW:.0e}"
        return p_text(v)
    if f == "pctci":
        lo, hi = v
        return f"[{fixed_text(100 * lo, 1)}, {fixed_text(100 * hi, 1)}]"
    return str(v)


# --- helpers ----------------------------------------------------------------------------------
def default_conditions(agg: GeoHintAggregator) -> tuple[str, str]:
    """(context condition, baseline condition) to report: ``forced``/``baseline`` when present, else the
    permissive ``v1``/``v1_baseline`` (a v1-only release sample), else the first context condition."""
    conds = agg.conditions
    if "forced" in conds or not conds:
        return "forced", "baseline"
    if "v1" in conds:
        return "v1", "v1_baseline"
    ctx = [c for c in conds if not c.endswith("baseline")]
    return (ctx[0] if ctx else conds[0]), "baseline"


def _regime_sites(agg: GeoHintAggregator, baseline: str) -> dict[str, set[str]]:
    reg = agg.regimes(condition=baseline)
    return {r: {s for s, v in reg.items() if v == r} for r in REGIMES}


def _model_order(agg: GeoHintAggregator, condition: str) -> list[str]:
    """Models by overall hit rate in ``condition`` (descending), as the paper orders its rows."""
    rates = {m: agg.select(model=m, condition=condition).hit_rate for m in agg.models}
    return sorted(agg.models, key=lambda m: (-(rates[m] if not math.isnan(rates[m]) else -1), m))


def regime_note(agg: GeoHintAggregator, baseline: str) -> str:
    """A sentence for tables split by regime when no site has one (no no-context answers, or none of them
    geocoded), else ""."""
    if agg.regimes(condition=baseline):
        return ""
    undetermined = agg.undetermined_sites(baseline)
    if undetermined:
        n = len(undetermined)
        why = (f"none of their no-context answers geocoded, every one of them parsed (condition {baseline!r}; {n} "
               f"site{'' if n == 1 else 's'}), "
               "so their regime is undetermined (a hit rate of answers that did not geocode measures the "
               "geocoder, not the image)")
    else:
        why = f"these data hold no no-context answers (condition {baseline!r})"
    return (f"No regime split: sites are assigned to legible or illegible by their no-context hit rate, and {why}, "
            f"so every regime row is empty ({DASH}); only rows and columns over all sites are filled.")


def sites_without_regime(agg: GeoHintAggregator, baseline: str) -> list[str]:
    """Sites with answers but no regime: no no-context answer (condition ``baseline``), or none of those
    geocoded (:meth:`GeoHintAggregator.undetermined_sites`); they are in no regime row, only in the rows over
    all sites."""
    reg = agg.regimes(condition=baseline)
    return [s for s in agg.sites if s not in reg]


def no_regime_note(agg: GeoHintAggregator, baseline: str) -> str:
    """``"1 site without a no-context answer has no regime ..."`` (and ``"1 site whose no-context answers
    none geocoded has an undetermined regime ..."``) when some (not all) sites lack a regime, else "" (no site
    with a regime at all is :func:`regime_note`'s case)."""
    if not agg.regimes(condition=baseline):
        return ""
    undetermined = set(agg.undetermined_sites(baseline))
    missing = [s for s in sites_without_regime(agg, baseline) if s not in undetermined]
    parts = []
    if missing:
        n = len(missing)
        parts.append(f"{n} site{'' if n == 1 else 's'} without a no-context answer (condition {baseline!r}) "
                     f"{'has' if n == 1 else 'have'} no regime")
    if undetermined:
        n = len(undetermined)
        parts.append(f"{n} site{'' if n == 1 else 's'} whose no-context answers none geocoded "
                     f"{'has' if n == 1 else 'have'} an undetermined regime")
    if not parts:
        return ""
    return "; ".join(parts) + ": in no regime row, only in the rows over all sites."


#: unresolved share (fraction) of a model in a condition above which the report warns
UNRESOLVED_WARN_SHARE = 0.20
#: the config keys of the geocoder's endpoints (named by both geocoder warnings)
GEOCODER_SETTING = "[geohint.geocoder] wikidata_url, nominatim_url"
#: why answers usually do not geocode although the endpoints answered (:func:`unresolved_warnings`)
UNRESOLVED_CAUSE = (
    "the geocoder's endpoints answered (an answer whose lookup failed is never scored: it is dead-lettered or "
    "left queued) but found no place of that name near the answered city, or the answer named none. The "
    f"endpoints ({GEOCODER_SETTING}) must know the places the answers name: the sandbox's fakes know only the "
    "cities, sites and ladder points of the folder the campaign plans from; a campaign for results needs the "
    "real Wikidata and Nominatim, or a gazetteer fake of your own")


def unresolved_warnings(agg: GeoHintAggregator) -> list[str]:
    """One warning line listing every (model, condition) whose share of answers that did not geocode
    (``resolved_level`` ``"none"``) exceeds :data:`UNRESOLVED_WARN_SHARE`, with its counts
    (``m in condition forced: 10 of 10 (100.0 %)``, models then conditions in the report's order); []
    when none does. One line, not one per pair: the cause and advice are the same for all. Such answers
    count as misses for the hit (Sec. 4.2); their echo (a text match, :mod:`geoagent.geohint.echo`) is scored
    as for any other answer."""
    cells = []
    for m in agg.models:
        for cond in agg.conditions:
            c = agg.select(model=m, condition=cond)
            if c.n and c.unresolved_share > UNRESOLVED_WARN_SHARE:
                cells.append(f"{m} in condition {cond}: {c.n_none} of {c.n} ({100 * c.unresolved_share:.1f} %)")
    if not cells:
        return []
    return [f"Warning: answers that did not geocode (resolved level none), over "
            f"{100 * UNRESOLVED_WARN_SHARE:.0f} % of a model's answers in a condition: {'; '.join(cells)}. They count "
            f"as misses, so hit rates there mostly measure the geocoder (and so does what is built on them: the "
            f"legible/illegible regime of a site's no-context answers; their error km is missing); echo rates do not "
            f"depend on it (echo is a text match of the answer's area and building against the reference point's "
            f"names, scored whether or not the answer geocoded). Here {UNRESOLVED_CAUSE}."]


#: share (fraction) of the finer-than-city context answers at err = 0 km above which the report and the summary warn
#: that the median ratio columns leave out many of the best answers (:func:`zero_err_warnings`)
ZERO_ERR_WARN_SHARE = 0.10


def zero_err_warnings(agg: GeoHintAggregator) -> list[str]:
    """One warning line when more than :data:`ZERO_ERR_WARN_SHARE` of the finer-than-city context answers (a hint
    at d_ref > 0) are at err = 0 km, with the count; [] otherwise (the release: none).

    The median ratio columns of Tables 5, 8 and 10 keep the release's ``error_km > 0`` (its ``two_regimes.py`` and
    ``chain_results.py``) and their notes give the medians with such answers counted as 0; in a crawl of one's own a
    geocoder that places a correctly named site on its own coordinate gives the best answers err = 0, and the columns
    then read as if those answers did not exist (review44c #1: 1.00, "the answer is the hint", where the medians
    with them read 0.00), so the header says so where it matters rather than only in the notes."""
    c = agg.select()
    n = c.fine_dref_n + c.n_zero_err
    if not n or c.n_zero_err <= ZERO_ERR_WARN_SHARE * n:
        return []
    return [f"Warning: {c.n_zero_err} of {n} finer-than-city context answers ({100 * c.n_zero_err / n:.1f} %) are at "
            "err = 0 km (located on the site's own coordinate). The median ratio columns of Tables 5, 8 and 10 leave "
            "them out, as the release's analysis does (error_km > 0), so they describe only the answers that missed; "
            "the notes under those tables give the medians with them counted as ratio 0."]


def geocoder_failure_warning(dead: int, queued: int, *, left_by: str | None = None) -> str | None:
    """What became of the answers that did not get through the geocoder; None when there are none.

    ``dead``: answers dead-lettered on the ``answers`` edge (their lookups failed, e.g. the endpoints failed
    or could not be reached); ``queued``: answers left there (ready or leased) at the end of the run.
    ``left_by``: the stop that left the queued answers there before the geocoder took them (``"the
    interrupt"``, ``"the budget stop"``), named in a sentence that says a re-run finishes them; None when
    no such stop did (the geocoder's host was unreachable and its stage stopped): then the queued answers
    are failed lookups too, counted in the warning. Unlike :func:`unresolved_warnings` (the endpoints
    answered but found nothing), these answers are in no table at all."""
    failed_queued = 0 if left_by else queued
    out = []
    if dead or failed_queued:
        parts = ([f"{dead} dead-lettered (reasons in missing.csv and `run.py dead CONFIG`)"] if dead else []) + (
            [f"{failed_queued} left queued (re-run the same command to geocode them)"] if failed_queued else [])
        n = dead + failed_queued
        out.append(f"Warning: {n} answer{'s' if n != 1 else ''} did not get through the geocoder and are in no table: "
                   f"{'; '.join(parts)}. Their lookups failed (e.g. the endpoints failed or could not be reached, "
                   f"not 'found nothing'): check {GEOCODER_SETTING} and the network.")
    if left_by and queued:
        out.append(f"{queued} answer{'s' if queued != 1 else ''} not geocoded yet: left queued by {left_by}; re-run the "
                   "same command to finish (their lookups did not fail).")
    return " ".join(out) or None


def scoring_left_note(located: int, scored: int, *, left_by: str | None) -> str | None:
    """What a stop left queued past the geocoder, or None when nothing (or no stop, ``left_by`` None) did.

    ``located``: answers geocoded but not scored yet (ready or leased on the ``located`` edge); ``scored``:
    scored answers the aggregator has not counted yet (the ``scored`` edge); ``left_by`` names the stop
    (``"the interrupt"``, ``"the budget stop"``). E.g. ``"1 geocoded answer not scored yet and 3 scored answers
    not aggregated yet: left queued by the interrupt; re-run the same command to finish (no new model call or
    lookup)."`` (the queue table showed ``located: ready 1`` that no summary line mentioned)."""
    if not left_by:
        return None
    parts = ([f"{located} geocoded answer{'s' if located != 1 else ''} not scored yet"] if located else []) + (
        [f"{scored} scored answer{'s' if scored != 1 else ''} not aggregated yet"] if scored else [])
    if not parts:
        return None
    return (f"{' and '.join(parts)}: left queued by {left_by}; re-run the same command to finish (no new model "
            "call or lookup).")


def regime_threshold_note(agg: GeoHintAggregator, baseline: str | None = None) -> str:
    """One sentence naming the regime threshold every regime split of the report uses; the no-context hit rate is
    that of all models pooled, or with one model that model's (:func:`_pooled_words`); with ``baseline`` (the
    no-context condition) it names the models left out of that pool (:func:`regime_left_out_note`, stats42 #1)."""
    t = agg.regime_threshold
    who = "all models pooled" if len(agg.models) != 1 else _pooled_words(agg.models)
    left_out = agg.regime_left_out_models(baseline) if baseline is not None else []
    if left_out:
        who = f"models pooled but {', '.join(left_out)}: see below"
    return (f"Regimes: a site is legible when its no-context hit rate ({who}) is at least "
            f"{threshold_text(t)}, illegible below ([geohint] regime_threshold = {t:g}"
            + ("; the paper's 50 %)." if t == DEFAULT_THRESHOLD else "; the paper uses 50 %)."))


def _join_notes(*notes: str) -> str:
    return "\n\n".join(n for n in notes if n)


def echo_rule_note(agg: GeoHintAggregator) -> str:
    """One sentence naming the echo rule behind the echo rates, and saying so when some responses could not
    be counted under it (results stored before every rule's verdict was kept)."""
    note = f"Echo rule {describe_echo_rule(agg.echo_rule)}."
    if agg.echo_rule != ECHO_RULE_RELEASE_FIRST_WORD:
        # newuser39 #2: the judged release re-scored at 28.0 % echo against the paper's 39.6 % with nothing said
        note += (f" The paper's echo figures (Tables 1, 2 and 4) come from the release's rule "
                 f"{ECHO_RULE_RELEASE_FIRST_WORD!r}: set [geohint] echo_rule = \"{ECHO_RULE_RELEASE_FIRST_WORD}\" "
                 f"(judged release: --echo-rule {ECHO_RULE_RELEASE_FIRST_WORD}) to compare with them.")
    other = {k: v for k, v in sorted(agg.echo_rule_counts.items()) if k != agg.echo_rule}
    if other:
        note += (" Mixed rules: " + ", ".join(f"{v} response(s) keep rule {k!r}" for k, v in other.items())
                 + f" (scored before every rule's verdict was stored); {agg.echo_rule_counts.get(agg.echo_rule, 0)} use "
                 f"{agg.echo_rule!r}.")
    return note


def regime_left_out_note(agg: GeoHintAggregator, baseline: str) -> str:
    """The notes' sentence naming the models whose no-context answers are left out of the regime assignment
    (:meth:`GeoHintAggregator.regime_left_out_models`: none of them geocoded, every one parsed, so their no-context
    hit rate is undetermined, Table 1's em dash), and why; "" when there are none (stats42 #1). report.md's header;
    Tables 2 and 3 refer to it (:func:`regime_left_out_ref`)."""
    left_out = agg.regime_left_out_models(baseline)
    if not left_out:
        return ""
    one = len(left_out) == 1
    return (f"Left out of the regime assignment: the no-context answers (condition {baseline!r}) of "
            f"{', '.join(left_out)}. None of them geocoded, every one parsed, so {'its' if one else 'their'} "
            f"no-context hit rate is undetermined ({DASH}, as in Table 1); counted as misses they would pull every "
            "site toward illegible and move the split for every other model. Sites are legible or illegible by the "
            "other models' no-context answers, and the split-half correction (Table 3) splits those alone.")


def regime_unparsed_note(agg: GeoHintAggregator, baseline: str) -> str:
    """The header's sentence naming the models more than :data:`UNRESOLVED_WARN_SHARE` of whose no-context answers
    (``baseline``) did not parse, with their counts, and saying that they stay in the regime assignment as misses;
    "" when there are none (stats43 #3). The rule is the release's and is kept (an unparsed answer is a miss of the
    model's own making, :func:`geoagent.geohint.aggregate.hit_decided`), but such a model pulls every site toward
    illegible and moves the split for the others, unlike one whose answers parsed and never geocoded
    (:func:`regime_left_out_note`), so the reader is told."""
    cells = [(m, c) for m in agg.models
             if (c := agg.select(model=m, condition=baseline)).n and c.n_parse_fail / c.n > UNRESOLVED_WARN_SHARE]
    if not cells:
        return ""
    one = len(cells) == 1
    named = ", ".join(f"{m} ({c.n_parse_fail} of {c.n} unparsed)" for m, c in cells)
    return (f"Kept in the regime assignment as misses: the no-context answers (condition {baseline!r}) of "
            f"{named}. An unparsed answer names no place, a miss of the model's "
            "own making (seed 000 Sec. 4.1, no post-hoc filtering; the release's judged answers keep such rows with "
            f"hit False), so {'its' if one else 'their'} no-context hit rate is decided, and low, and pulls every "
            "site's pooled rate toward illegible, moving the split for the other models too. That is the release's "
            "rule and is kept; a model whose answers parsed but never geocoded is left out instead (its rate is "
            "undetermined). The warning on answers that did not geocode counts unparsed answers too, but their "
            "misses are the model's, not the geocoder's.")


def regime_left_out_ref(agg: GeoHintAggregator, baseline: str) -> str:
    """Tables 2 and 3's short form of :func:`regime_left_out_note` (said in full once, in report.md's header): the
    models whose no-context answers assign no site, and why in a few words; "" when there are none."""
    left_out = agg.regime_left_out_models(baseline)
    if not left_out:
        return ""
    return (f"Regimes assigned without the no-context answers of {', '.join(left_out)}: none of them geocoded, so "
            f"that hit rate is undetermined ({DASH}), not 0 (see report.md's header).")


def _and_text(items: Sequence[str]) -> str:
    """``a``, ``a and b``, ``a, b and c``."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def pooled_left_out_note(agg: GeoHintAggregator, *conditions: str) -> str:
    """The notes' sentence of a comparison that pools models without splitting them (Tables 8 and 10,
    ``building_vs_nocontext``, Fig. 2's caption) naming the models it leaves out: those whose hit rate in one of
    ``conditions`` is undetermined (:meth:`GeoHintAggregator.undetermined_models`, Table 1's rule), each with the
    condition(s) of ``conditions`` where its own rate is (``z, whose hit rate in forced is undetermined``; several:
    ``y and z, whose hit rates are undetermined (y's in forced_warn and forced, z's in forced; ...)``), and why; ""
    when there are none (stats43 #1, the rule of stats42 #1's regime assignment)."""
    left_out = agg.undetermined_models(*conditions)
    if not left_out:
        return ""
    # each model's own undetermined conditions, not every condition compared: "z, whose hit rate in forced or
    # forced_warn" read as if z's forced_warn rate were undetermined too (rev43b #4)
    own = {m: [c for c in conditions if m in agg.undetermined_models(c)] for m in left_out}
    if len(left_out) == 1:
        (m,) = left_out
        rates = "hit rate" if len(own[m]) == 1 else "hit rates"
        are = "is" if len(own[m]) == 1 else "are"
        who = f"{m}, whose {rates} in {_and_text(own[m])} {are} undetermined ({DASH}: none of its answers there"
    else:
        each = ", ".join(f"{m}'s in {_and_text(own[m])}" for m in left_out)
        who = f"{_and_text(left_out)}, whose hit rates are undetermined ({each}; {DASH}: none of their answers there"
    return (f"Left out: every answer of {who} geocoded, every one parsed). Counted as misses, answers that never had "
            "a chance to hit or to resolve at building level would pull the pooled rates toward 0 (a measure of the "
            "geocoder, not the models); the rates here pool the other models' answers, as the regime assignment "
            "does.")


def echo_rule_ref(agg: GeoHintAggregator) -> str:
    """The tables' short reference to the echo rule: its name, the full sentence (:func:`echo_rule_note`) being
    at the top of the report once (session 12: it came 5 times in the demo's report.md)."""
    return f"Echo rule: {agg.echo_rule} (see top)."


# --- tables -----------------------------------------------------------------------------------
#: the notes' sentence for hit-rate cells left undetermined because no answer behind them geocoded
UNGEOCODED_NOTE = (f"{DASH} in a hit-rate column: no answer geocoded behind that cell (all parsed and unresolved), so its hit rate "
                   "is undetermined, not 0 (an answer that did not geocode counts as a miss; 0 % would measure the "
                   "geocoder), as for a site whose regime is undetermined. Echo is a text match and is still given.")


#: Table 3's note where a model's near-band or no-context answers in a regime none geocoded
TABLE3_UNGEOCODED_NOTE = (f"{DASH} in Uncorrected and Corrected: no answer of one side geocoded (the model's near-band "
                          "or no-context answers in that regime's sites, or in a split's no-context half, all "
                          "parsed and unresolved), so that hit rate, and the difference, are undetermined, not 0 (0 % minus "
                          "0 % would measure the geocoder).")


def _ungeocoded(*cells: Any) -> bool:
    """Whether some cell (with answers) has no decided answer (every one parsed and none geocoded): its
    :attr:`Cell.geocoded_hit_rate` is NaN."""
    return any(c.n and not c.n_decided for c in cells)


#: default site-bootstrap resamples behind the GeoHint intervals (Table 1, Fig. 2; ``[geohint] n_boot``); the
#: report's ``seed`` seeds them; 1000 (was 200: the intervals' ends moved by up to 5 points between seeds)
DEFAULT_N_BOOT = 1000
#: central mass of those intervals
CI_LEVEL = 0.95


def site_bootstrap_interval(counts: dict[str, tuple[int, int]], sites: Sequence[str], idx: np.ndarray,
                            ci_level: float = CI_LEVEL) -> tuple[tuple[float, float] | None, bool]:
    """Percentile interval of a rate k/n whose answers are clustered by site, resampling sites (the GeoVerify
    rule, :mod:`geoagent.scoring.sdt`: Sec. 6 "the site as the unit of resampling").

    Parameters
    ----------
    counts : dict
        site -> (k, n): events and answers of that site (a site absent or with n = 0 adds nothing).
    sites : sequence of str
        The sites ``idx`` indexes (e.g. every site of the campaign, sorted).
    idx : ndarray of int, shape (n_boot, len(sites))
        Site draws with replacement (:func:`geoagent.scoring.sdt.bootstrap_site_indices`).
    ci_level : float
        Central mass (0.95: 2.5th and 97.5th percentiles, ``numpy.quantile`` linear).

    Returns
    -------
    ((lo, hi) or None, exact)
        Fractions in [0, 1]. None (withheld) when the answers come from fewer than
        :data:`~geoagent.scoring.sdt.BOOT_MIN_SITES` (5) sites: too few resamples and clusters for the interval
        to mean anything (:func:`geoagent.scoring.sdt.boot_site_flag` gives the reason). At 0 or 1
        (k = 0 or k = n pooled) every resample repeats it, so the interval is the Clopper-Pearson exact interval of
        the pooled count instead and ``exact`` is True (:func:`geoagent.scoring.sdt.clopper_pearson`).
    """
    from geoagent.scoring.sdt import clopper_pearson, percentile_interval

    k = np.array([counts.get(s, (0, 0))[0] for s in sites], dtype=float)
    n = np.array([counts.get(s, (0, 0))[1] for s in sites], dtype=float)
    if int((n > 0).sum()) < BOOT_MIN_SITES:
        return None, False
    kt, nt = int(k.sum()), int(n.sum())
    if kt in (0, nt):
        return clopper_pearson(kt, nt, ci_level), True
    bk, bn = k[idx].sum(1), n[idx].sum(1)
    vals = np.where(bn > 0, bk / np.maximum(bn, 1), np.nan)
    interval, _kept = percentile_interval(vals, ci_level)
    return interval, False


def check_n_boot(n_boot: int) -> int:
    """``n_boot`` (site-bootstrap resamples, ``[geohint] n_boot``) if it is an integer >= 0 (0 = no intervals);
    raises ValueError otherwise (as :func:`geoagent.scoring.sdt.score` does for GeoVerify's)."""
    if isinstance(n_boot, bool) or not isinstance(n_boot, (int, np.integer)) or n_boot < 0:
        raise ValueError(f"n_boot must be >= 0 (an integer; 0 = no intervals), got {n_boot!r}")
    return int(n_boot)


def _draws(sites: Sequence[str], n_boot: int, seed: int) -> np.ndarray | None:
    from geoagent.scoring.sdt import bootstrap_site_indices

    n_boot = check_n_boot(n_boot)
    return bootstrap_site_indices(len(sites), n_boot, seed) if n_boot > 0 and sites else None


#: where a campaign sets ``n_boot`` (the "no intervals" notes name it; ``judged`` passes ``"--n-boot"``)
N_BOOT_KEY = "[geohint] n_boot"


def no_boot_setting(source: str = N_BOOT_KEY) -> str:
    """``[geohint] n_boot = 0`` (a config key, the default) or ``--n-boot 0`` (``source`` an option, ``--...``):
    the setting that turned the site bootstrap off, as the report names it."""
    return f"{source} 0" if source.startswith("--") else f"{source} = 0"


def no_boot_note(source: str = N_BOOT_KEY) -> str:
    """The notes' sentence of a report run without a site bootstrap, naming the setting (:func:`no_boot_setting`)."""
    return f"95 % CI: no intervals: {no_boot_setting(source)} (no site-bootstrap resamples drawn)."


#: the notes' sentence of a campaign report run without a site bootstrap (``[geohint] n_boot = 0``)
NO_BOOT_NOTE = no_boot_note()


def bootstrap_caption(n_boot: int, seed: int, n_sites: int, exact: bool, what: str) -> str:
    """The notes' sentence naming a table's site-bootstrap intervals, their resamples, seed and site count, and the
    few-site rule (:data:`geoagent.scoring.sdt.BOOT_SITES_RULE`)."""
    text = (f"95 % CI: site-bootstrap percentile intervals ({n_boot} resamples of the {n_sites} "
            f"site{'' if n_sites == 1 else 's'}, seed {seed}; the same site draws for every row; {what}). Few sites: "
            f"{BOOT_SITES_RULE}; the CI flag column says which rows.")
    if exact:
        text += (" A rate of 0 % or 100 % gets the Clopper-Pearson exact interval of its pooled count instead (every "
                 "resample would repeat it; binomial, so it ignores clustering by site).")
    return text


#: Table 1's last column (stats43 #2): each model's echo rate under the release scripts' rule, the rule of the paper's
#: echo figures, whatever the report's ``echo_rule``; at the end, so the columns before keep their names and places
RELEASE_ECHO_COLUMN = f"Echo rate ({ECHO_RULE_RELEASE_FIRST_WORD})"


def release_echo_note(agg: GeoHintAggregator, condition: str) -> str:
    """Table 1's sentence on :data:`RELEASE_ECHO_COLUMN` (stats43 #2): what it is and why it is there (the report's
    rule is ``name`` by default, which reads up to 16 points below the paper's figures), and how many answers with
    an echo verdict have none under that rule (results scored before both rules' verdicts were kept), if any."""
    c = agg.select(condition=condition)
    same = agg.echo_rule == ECHO_RULE_RELEASE_FIRST_WORD
    note = (f"{RELEASE_ECHO_COLUMN}: the same answers' echo rate under the release scripts' rule "
            f"{ECHO_RULE_RELEASE_FIRST_WORD!r}, which produced the paper's echo figures (its Tables 1, 2 and 4), "
            + ("here the report's rule too, so it repeats Echo rate." if same else
               f"beside Echo rate under this report's rule {agg.echo_rule!r}: compare this column with the paper."))
    missing = c.echo_n - c.release_echo_n
    if missing > 0:
        note += (f" {count_text(missing, 'answer')} with an echo verdict {'carry' if missing != 1 else 'carries'} "
                 f"none under {ECHO_RULE_RELEASE_FIRST_WORD!r} (scored before every rule's verdict was stored): that "
                 f"column counts the others ({DASH} where none is left).")
    return note


def table1(agg: GeoHintAggregator, condition: str = "forced", *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0,
           n_boot_source: str = N_BOOT_KEY) -> Table:
    """Table 1: per model, context condition only: n, sites, hit rate with its site-bootstrap 95 % interval, hit
    rate per band, echo rate with its interval (:func:`site_bootstrap_interval`; one draw matrix over every site
    of the campaign, seeded by ``seed``; ``n_boot`` 0 = no intervals, the notes then name ``n_boot_source``, the
    setting, :func:`no_boot_note`), and ``CI flag``: why the intervals are
    withheld (fewer than 5 sites) or flagged few-cluster (5-9 sites), "" otherwise
    (:func:`geoagent.scoring.sdt.boot_site_flag`). A hit rate of answers none of which
    geocoded is undetermined (NaN, an em dash; :attr:`Cell.geocoded_hit_rate`), and so is its interval. Last,
    :data:`RELEASE_ECHO_COLUMN`: the echo rate under the paper's rule (:attr:`Cell.release_echo_rate`), whatever the
    report's echo rule, so a reader compares with the paper without re-running (stats43 #2; no interval)."""
    rows = []
    undetermined = exact_any = False
    sites = agg.sites
    idx = _draws(sites, n_boot, seed)
    for m in _model_order(agg, condition):
        c = agg.select(model=m, condition=condition)
        per_band = [agg.select(model=m, condition=condition, band=b) for b in BANDS]
        undetermined |= _ungeocoded(c, *per_band)
        by_site = agg.site_cells(condition=condition, model=m)
        hit_ci = echo_ci = None
        if idx is not None:
            if not math.isnan(c.geocoded_hit_rate):
                hit_ci, ex1 = site_bootstrap_interval({s: (x.hits, x.n) for s, x in by_site.items()}, sites, idx)
                exact_any |= ex1 and hit_ci is not None
            if c.echo_n:
                echo_ci, ex2 = site_bootstrap_interval({s: (x.echoes, x.echo_n) for s, x in by_site.items()}, sites, idx)
                exact_any |= ex2 and echo_ci is not None
        n_sites = sum(1 for x in by_site.values() if x.n)
        flag = boot_site_flag(n_sites) if idx is not None and c.n else ""
        rows.append([m, c.n, c.geocoded_hit_rate, *[x.geocoded_hit_rate for x in per_band], c.echo_rate,
                     hit_ci, echo_ci, n_sites, flag, c.release_echo_rate])
    boot = (bootstrap_caption(n_boot, seed, len(sites), exact_any, "n = the model's responses, sites = the sites they "
                              "come from; echo rates over the responses with an echo verdict")
            if idx is not None else (no_boot_note(n_boot_source) if n_boot == 0 else ""))
    return Table(
        "table1",
        f"Table 1: per-model results, condition {condition} (baselines excluded); hit rate and echo rate in %",
        ["Model", "n", "Hit rate", *BANDS, "Echo rate", "Hit rate 95 % CI", "Echo rate 95 % CI", "sites", "CI flag",
         RELEASE_ECHO_COLUMN],
        ["text", "int", "pct", "pct", "pct", "pct", "pct", "pctci", "pctci", "int", "text", "pct"],
        rows,
        _join_notes(boot, echo_rule_ref(agg), release_echo_note(agg, condition), UNGEOCODED_NOTE if undetermined else "",
                    no_answer_note(agg, condition)),
    )


def no_answer_note(agg: GeoHintAggregator, condition: str | Sequence[str] | None = None) -> str:
    """The notes' sentence on answers of ``condition`` (None = all; several conditions pooled when a sequence is
    given, as Table 11 pools forced_chain and its no-context variant) cut off at the output-token limit with nothing
    parsed, which no rate counts (:func:`geoagent.scoring.truncation.is_no_answer`); "" when there are none."""
    conds: Sequence[str | None] = [condition] if condition is None or isinstance(condition, str) else list(condition)

    def count(model: str | None) -> int:
        return sum(agg.n_no_answer(model=model, condition=c) for c in conds)

    n = count(None)
    if not n:
        return ""
    per = ", ".join(f"{m} {k}" for m in agg.answered_models if (k := count(m)))
    withheld = sum(agg.n_no_answer_withheld(model=None, condition=c) for c in conds)
    who = "the cap" if not withheld else "the cap or the provider's filter"
    return (f"{n} answer{'s' if n != 1 else ''} {no_answer_words(withheld)} "
            f"{'are' if n != 1 else 'is'} left out ({per}): no answer ({who} ended {'them' if n != 1 else 'it'}, not "
            "the model), so neither a response, a miss nor an echo verdict; counted in the table 'cutoff'.")




def table2(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline") -> Table:
    """Table 2: Table 1 within each regime, plus the no-context hit rate of the same sites and model."""
    groups = _regime_sites(agg, baseline)
    rows = []
    undetermined = False
    for regime in REGIMES:
        sites = groups[regime]
        for m in _model_order(agg, condition):
            c = agg.select(sites=sites, model=m, condition=condition)
            nc = agg.select(sites=sites, model=m, condition=baseline)
            per_band = [agg.select(sites=sites, model=m, condition=condition, band=b) for b in BANDS]
            undetermined |= _ungeocoded(c, nc, *per_band)
            rows.append([
                f"{regime} ({count_text(len(sites), 'site')})", m, c.n, nc.geocoded_hit_rate, c.geocoded_hit_rate,
                *[x.geocoded_hit_rate for x in per_band], c.echo_rate, nc.n,
            ])
    return Table(
        "table2",
        f"Table 2: per-model results within each regime ({threshold_text(agg.regime_threshold)} no-context threshold), "
        f"condition {condition}",
        ["Regime", "Model", "n", "No context", "With context", *BANDS, "Echo rate", "n no context"],
        ["text", "text", "int", "pct", "pct", "pct", "pct", "pct", "pct", "int"],
        rows,
        _join_notes(echo_rule_ref(agg), regime_note(agg, baseline), regime_left_out_ref(agg, baseline),
                    UNGEOCODED_NOTE if undetermined else ""),
    )


def _split_mc_text(rows: Sequence[Any]) -> str:
    """``" Monte-Carlo standard error of a Corrected value (SD / sqrt(splits used)), the largest ...: 2.7 points, ..."``: the
    largest standard error of a corrected mean over Table 3's rows (``CorrectionRow``), so a difference between
    two runs' Corrected values (another seed, another number of splits) can be told from the splits' own noise
    (audit 24: SD about 19 points over 50 splits left the mean uncertain by about +-2.7, said nowhere); "" when
    no row has a corrected value from at least two splits."""
    errors = [r.corrected_sd / math.sqrt(r.n_splits_used) for r in rows
              if r.n_splits_used >= 2 and math.isfinite(r.corrected_sd)]
    if not errors:
        return ""
    return (f" Monte-Carlo standard error of a Corrected value (SD / sqrt(splits used)), the largest over this "
            f"table's rows: {max(errors):.1f} points, one standard error, not a bound (a Corrected value lies within "
            "about twice it of the value many splits converge to 95 % of the time); [geohint] n_splits narrows it "
            "(4 times the splits halve it).")


def table3(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline", *, n_splits: int = 200, seed: int = 0) -> Table:
    """Table 3: near-band minus no-context, uncorrected and split-half corrected (mean +- SD over splits).

    Sites with a single no-context answer cannot be split and are left out of every split
    (:mod:`geoagent.scoring.regime`); when every site has one (``[geohint] baseline_repeats = 1`` with one image
    and one model per site) the corrected columns are empty and the note says why and which setting fills them."""
    bs, bm, bh = agg.baseline_arrays(baseline)
    ns, nm, nh = agg.context_arrays(condition, BANDS[0])
    rows = []
    notes = ""
    undetermined = False
    if bs and ns:
        res = split_half_correction(bs, bm, bh, ns, nm, nh, threshold=agg.regime_threshold, n_splits=n_splits, seed=seed,
                                    baseline_geocoded=agg.baseline_geocoded_flags(baseline),
                                    near_geocoded=agg.context_geocoded_flags(condition, BANDS[0]))
        order = {m: i for i, m in enumerate(_model_order(agg, condition))}
        groups = _regime_sites(agg, baseline)
        for r in sorted(res.rows, key=lambda r: (REGIMES.index(r.regime), order.get(r.model, 99))):
            rows.append([r.regime, r.model, r.uncorrected, r.corrected, r.corrected_sd, r.shift])
            sites = groups.get(r.regime, [])
            undetermined |= _ungeocoded(agg.select(sites=sites, model=r.model, condition=baseline),
                                        agg.select(sites=sites, model=r.model, condition=condition, band=BANDS[0]))
        left_out = set(agg.regime_left_out_models(baseline))  # in no split (baseline_arrays; stats42 #1)
        per_site = {site: n for site, per in agg.baseline_counts(baseline).items()
                    if (n := sum(n for m, (_k, n) in per.items() if m not in left_out))}
        single = sum(n == 1 for n in per_site.values())
        if single == len(per_site):
            notes = (f"Corrected, SD and Shift are empty ({DASH}): every site has a single no-context answer "
                     f"({single} site(s)), and one answer cannot be split into halves (one to assign the regime, "
                     f"one for the no-context column). The split-half correction needs at least 2 no-context answers "
                     f"per site: set [geohint] baseline_repeats >= 2 (no-context requests per image and model).")
        else:
            notes = (f"{n_splits} random splits of each site's no-context responses into halves (seed {seed}): the regime "
                     f"from one half, the no-context column from the other. Corrected: the mean over splits; SD: the "
                     f"standard deviation of the corrected difference over splits (points); Shift: Corrected minus "
                     f"Uncorrected (points). On average {res.mean_sites_switching:.1f} sites change side per split."
                     + _split_mc_text(res.rows))
            if single:
                notes += (f" {single} of {count_text(len(per_site), 'site')} {'has' if single == 1 else 'have'} a single "
                          f"no-context answer and {'is' if single == 1 else 'are'} left out of every split (no half to "
                          f"assign {'its' if single == 1 else 'their'} regime from) but counted in Uncorrected, so "
                          f"Shift compares two site sets; [geohint] baseline_repeats >= 2 "
                          f"includes {'it' if single == 1 else 'them'}.")
    return Table(
        "table3",
        "Table 3: near-band hit rate minus no-context hit rate (points), before and after the split-half correction",
        ["Regime", "Model", "Uncorrected", "Corrected", "SD", "Shift"],
        ["text", "text", "pp", "pp", "pps", "pp"],
        rows,
        _join_notes(notes, regime_note(agg, baseline), regime_left_out_ref(agg, baseline),
                    TABLE3_UNGEOCODED_NOTE if undetermined else ""),
    )


def table4(agg: GeoHintAggregator, condition: str = "forced") -> Table:
    """Table 4: echo rate (%) by referenceability tier x distance band, with margins. Rows: :data:`TIER_LABELS`
    (``High (4-5)``, ``Mid (2-3)``, ``Low (0-1)``: the tier and its referenceability range, as the paper's Table 4),
    then :data:`TABLE4_POOLED` (every tier); the last column, ``All``, pools the bands."""
    rows = []
    for tier in TIERS_ORDER:
        rows.append([TIER_LABELS.get(tier, tier), *[agg.select(condition=condition, tier=tier, band=b).echo_rate for b in BANDS],
                     agg.select(condition=condition, tier=tier).echo_rate])
    rows.append([TABLE4_POOLED, *[agg.select(condition=condition, band=b).echo_rate for b in BANDS], agg.select(condition=condition).echo_rate])
    cells = [agg.select(condition=condition, tier=t, band=b).echo_n for t in TIERS_ORDER for b in BANDS]
    total_c = agg.select(condition=condition)
    n_sites = sum(1 for x in agg.site_cells(condition=condition).values() if x.echo_n)
    who = (f"All models pooled ({count_text(len(agg.models), 'model')}: {', '.join(agg.models)})"
           if len(agg.models) > 1 else "M" + models_pooled_text(agg.models)[1:])
    pooled = (f"{who}: {count_text(total_c.echo_n, 'response')} with an echo verdict from {count_text(n_sites, 'site')}; {min(cells, default=0)} to {max(cells, default=0)} per tier "
              f"and band cell. No interval: see Table 1 for site-bootstrap intervals per model.")
    return Table(
        "table4",
        f"Table 4: echo rate (%) by referenceability tier and band, condition {condition}",
        ["Tier", *BANDS, "All"],
        ["text", "pct", "pct", "pct", "pct"],
        rows,
        _join_notes(pooled, echo_rule_ref(agg)),
    )


def table5(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline") -> Table:
    """Table 5: geometric means of d_ref and err, median err/d_ref, finer-than-city answers, by regime x band."""
    groups = _regime_sites(agg, baseline)
    rows = []
    zeros = []
    with_zeros = []  # per regime: the median ratios with the err = 0 answers counted (ratio 0), by band
    zero_dref: list[tuple[str, int]] = []  # per regime: finer-than-city answers with a hint distance of 0 km
    for regime, sites in ((ILLEGIBLE, groups[ILLEGIBLE]), (LEGIBLE, groups[LEGIBLE]), ("all", None)):
        label = f"{regime} ({count_text(len(sites), 'site')})" if sites is not None else f"all sites ({len(agg.sites)})"
        medians = []
        for b in BANDS:
            c = agg.select(sites=sites, condition=condition, band=b)
            rows.append([label, b, c.fine_dref_n, c.geo_mean_dref_km, c.geo_mean_err_km, c.median_ratio])
            medians.append((c.n_zero_err, c.fine_dref_n + c.n_zero_err, c.median_ratio_with_zeros))
        zeros.append(f"{regime} {agg.select(sites=sites, condition=condition).n_zero_err}")
        zero_dref.append((regime, agg.select(sites=sites, condition=condition).n_zero_dref))
        if any(z for z, _n, _m in medians):
            with_zeros.append(f"{regime} " + " / ".join(_fmt(m, "f2") for _z, _n, m in medians)
                              + f" (n {' / '.join(str(n) for _z, n, _m in medians)})")
    counted = ("" if not with_zeros else
               " Counted with ratio 0 instead, the median ratios by band (nearest to farthest) would read: "
               + "; ".join(with_zeros) + ".")
    return Table(
        "table5",
        f"Table 5: distance to the reference point and to the answer (km, geometric means) and median ratio err/d_ref, finer than city only, condition {condition}",
        ["Regime", "Band", "n", "d_ref (km)", "err (km)", "Median ratio"],
        ["text", "text", "int", "f2", "f2", "f2"],
        rows,
        _join_notes(zero_err_note("finer-than-city answers", zeros) + counted,
                    zero_dref_note("finer-than-city answers", zero_dref, "its logarithm and the ratio err/d_ref are"),
                    regime_note(agg, baseline), no_regime_note(agg, baseline)),
    )


def zero_err_note(what: str, counts: Sequence[str]) -> str:
    """The notes' sentences on answers left out because err = 0 km (log undefined; neither the paper nor the
    release states a floor, and the release's analysis keeps ``error_km > 0``), and what that leaves: the
    distance statistics describe only answers with a nonzero error; the paper's Sec. 6.2 (Tables 5-7) states no
    rule for err = 0 km, fitting log10 err_km "using every response". ``counts``: ``"<group> <n>"``."""
    return (f"Left out because err = 0 km (its logarithm is undefined; no floor is applied, as in the release's "
            f"analysis), {what}: " + ", ".join(counts) + ". The distance statistics here therefore describe only "
            "answers with a nonzero error (err > 0 km). The paper states no rule for err = 0 km (Sec. 6.2 fits log10 err_km "
            "\"using every response\"); this one is the release analysis's (error_km > 0).")


#: what a hint distance of 0 km leaves undefined in the slope tables (:func:`zero_dref_note`)
_RECITE_UNDEFINED = "'beta if reciting' (log10 d_ref), fitted on the same rows, is"


def zero_dref_note(what: str, counts: Sequence[tuple[str, int]], undefined: str) -> str:
    """The notes' sentence on answers left out because their hint distance d_ref is 0 km (a reference point at
    the site), or "" when ``counts`` (``(group, n)``) are all 0. ``undefined``: what d_ref = 0 leaves undefined
    in that table (e.g. "'beta if reciting' (log10 d_ref) is"). The protocol's ladder bands start at 0.5 km (seed
    000 Sec. 3), so only a ladder of another design holds such a point (break27 #1: dropped unsaid)."""
    if not any(n for _group, n in counts):
        return ""
    return (f"Left out because the hint distance is 0 km (a reference point at the site; {undefined} undefined "
            f"there), {what}: " + ", ".join(f"{group} {n}" for group, n in counts) + ". They still count in the "
            "hit, echo and resolution shares. The protocol's ladder bands start at 0.5 km (seed 000 Sec. 3).")


def check_p_reference(p_reference: str) -> str:
    """``p_reference`` if it is one of :data:`P_REFERENCES`; raises ValueError naming the choices otherwise."""
    if p_reference not in P_REFERENCES:
        raise ValueError(f"p_reference must be one of {list(P_REFERENCES)}, got {p_reference!r}")
    return p_reference


def _slope_cells(agg: GeoHintAggregator, models: Sequence[str] | None, condition: str, fine: bool, sites: set[str] | None = None,
                 recite: bool = False, p_reference: str = "normal", *, failed: dict[str, list[str]] | None = None,
                 cell: str = ""):
    """The site-clustered fit of log10(err) on d_ref behind a Table 6/7 cell, or None when the regression refuses
    it (:meth:`geoagent.scoring.regression.ClusterOLS.fit`: too few rows, a singular design, X'X or X'y not
    finite naming the clusters); the table prints its cells as dashes. With ``failed``, the refusal's reason is
    recorded there (reason -> the cells it blanks, ``cell`` appended once), for :func:`no_fit_note`."""
    ols = agg.regression(models=models, condition=condition, fine_only=fine, recite=recite)
    try:
        # fewer than 2 sites: SE is NaN, shown as a dash. No warning to silence: the live report runs in a
        # worker thread (report/live.py), where warnings.catch_warnings would change process-wide filters
        return ols.fit(sorted(sites) if sites is not None else None, use_t=p_reference == "t", warn_few_clusters=False)
    except ValueError as exc:
        if failed is not None:
            cells = failed.setdefault(str(exc).rstrip(".") or type(exc).__name__, [])
            if cell and cell not in cells:
                cells.append(cell)
        return None


def _fit_rows(r: Any, agg: GeoHintAggregator, models: Sequence[str] | None, condition: str,
              sites: set[str] | None = None) -> int:
    """The ``n`` a Table 6/7 slope row prints: the rows of its fit (``r.nobs``), and where the fit failed
    (``r`` None, :func:`_slope_cells`) the rows it had all the same
    (:meth:`geoagent.scoring.regression.ClusterOLS.rows`), the count its ``No fit`` line names ("need more than 2
    rows to fit, have 2"); before, such a row printed 0 whatever rows it had."""
    if r is not None:
        return r.nobs
    ols = agg.regression(models=models, condition=condition, fine_only=False)
    return ols.rows(sorted(sites) if sites is not None else None)


def no_fit_note(failed: Mapping[str, Sequence[str]]) -> str:
    """The notes' lines on slope cells printed as dashes because their fit failed (:func:`_slope_cells`): one line
    per reason the regression gave, said once, naming the cells it blanks in the table's order, as GeoVerify's
    ``No interval (...)`` lines name withheld intervals (:func:`geoagent.report.geoverify.withheld_lines`):
    ``No fit (— in m beta, SE, p; m beta if reciting): X'X is singular (e.g. all hint distances equal).``
    "" when every fit was made."""
    return "\n\n".join(f"No fit ({DASH} in {'; '.join(cells)}): {reason}." if cells else f"No fit ({DASH}): {reason}."
                        for reason, cells in failed.items())


def _exact_fit(r: Any) -> bool:
    """Whether fit ``r`` is exact (every residual 0 up to rounding, e.g. every error equal:
    :attr:`geoagent.scoring.regression.ClusterOLSResult.exact_fit`): its SE and p are undefined (NaN, dashes) and
    the table's notes say so (:func:`exact_fit_note`)."""
    return r is not None and bool(getattr(r, "exact_fit", False))


def exact_fit_note(cells: Sequence[str], *, se: bool = False) -> str:
    """The notes' line on slope cells printed as dashes because their fit is exact (:func:`_exact_fit`), naming
    them in the table's order, as :func:`no_fit_note` names the cells of a refused fit; "" when there are none.
    ``se``: the table prints the SE and its ratio to the unclustered SE (Table 6), undefined there too."""
    if not cells:
        return ""
    what = "the SE, its ratio to the unclustered SE and p are" if se else "p is"
    return (f"Exact fit ({DASH} in {'; '.join(cells)}): every residual is 0 up to rounding (e.g. every error equal), so "
            f"the residual variance is 0 and {what} undefined, not a tiny SE with p near 0 (the regression's sums "
            "leave only rounding noise there, an SE near 1e-17 with an arbitrary p); beta is shown.")


def _withheld(r: Any, p_reference: str) -> bool:
    """Whether fit ``r``'s inference (p, and in Table 6 the SE) is withheld: the normal reference on 2 to
    :data:`MIN_CLUSTERS_NORMAL_P` - 1 site clusters (:data:`MIN_CLUSTERS_NORMAL_P` gives the reason)."""
    return p_reference == "normal" and 2 <= r.n_clusters < MIN_CLUSTERS_NORMAL_P


def _shown_p(r: Any, p_reference: str, hidden: list[int]) -> float:
    """The slope p of fit ``r`` as the table prints it: NaN (an em dash) without a fit, and under the normal
    reference for a fit on fewer than :data:`MIN_CLUSTERS_NORMAL_P` site clusters (its G is appended to
    ``hidden`` for the note, :func:`p_reference_note`)."""
    if r is None:
        return float("nan")
    if _withheld(r, p_reference) and math.isfinite(r.slope_p):
        hidden.append(r.n_clusters)
        return float("nan")
    return r.slope_p


def _shown_se(r: Any, p_reference: str) -> float:
    """The slope's cluster-robust SE of fit ``r`` as Table 6 prints it: withheld (NaN, an em dash) exactly where
    :func:`_shown_p` withholds the p-value, since that p is only this SE read against the normal distribution:
    with fewer than :data:`MIN_CLUSTERS_NORMAL_P` site clusters the SE is biased down (Cameron and Miller 2015,
    Sec. VI), and beta +- 1.96 SE would restate the inference the table refuses. Shown under the t reference,
    whose p (G - 1 df) uses it; NaN without a fit or with fewer than 2 clusters (no SE)."""
    if r is None or _withheld(r, p_reference):
        return float("nan")
    return r.slope_se


def _shown_se_ratio(r: Any, p_reference: str) -> float:
    """The slope's site-clustered SE over its ordinary (unclustered) OLS SE, dimensionless, as Table 6's last
    column prints it: the paper (seed 000, Sec. 6) reports its clustered SEs at 0.9 to 1.8 times the unclustered
    ones. Withheld (NaN) wherever :func:`_shown_se` withholds the SE, and where the ordinary SE is 0 or not
    finite (an exact fit, :func:`_exact_fit`: both SEs are NaN). Where the SE is shown with a few-clusters caution
    (t reference, fewer than :data:`MIN_CLUSTERS_NORMAL_P` site clusters), the ratio is shown under the same
    caution, which the notes extend to it (:func:`p_reference_note` with ``se=True``)."""
    se = _shown_se(r, p_reference)
    if not math.isfinite(se):
        return float("nan")
    plain = float(r.bse_nonrobust[-1])
    return se / plain if math.isfinite(plain) and plain > 0 else float("nan")


def p_reference_note(p_reference: str, n_clusters: Sequence[int], hidden: Sequence[int] = (), *,
                     se: bool = False) -> str:
    """The notes' sentence on the slope p-values: the reference distribution, and with the normal reference
    and fewer than :data:`FEW_CLUSTERS` site clusters in some fit, a warning giving the cluster counts.

    Parameters
    ----------
    p_reference : {"normal", "t"}
    n_clusters : sequence of int
        Site clusters G of every fit whose p-value the table shows (fits with G < 2 have no p-value and are
        not listed).
    hidden : sequence of int
        Site clusters G of the fits whose p-value is not printed (fewer than :data:`MIN_CLUSTERS_NORMAL_P`
        under the normal reference, :func:`_shown_p`); the note says so and gives them.
    se : bool
        The table prints the slope's SE and its ratio to the unclustered SE (Table 6): the note then says the SE
        (and so the ratio) is withheld with the p (:func:`_shown_se`, :func:`_shown_se_ratio`), and under the t
        reference that an SE from fewer than :data:`MIN_CLUSTERS_NORMAL_P` clusters is biased down and to be read
        with t, G - 1 df, and that its ``SE / unclustered SE`` is biased down with it (the same clustered SE over an
        unclustered one), the same caution for both columns.

    Where every fit's p is withheld (``hidden`` as long as ``n_clusters``), the note is the withheld sentence
    alone: the reference and its few-clusters remedy would describe p-values the table does not print.
    """
    check_p_reference(p_reference)
    if p_reference == "t":
        note = ("p: two-sided, from Student's t with G - 1 degrees of freedom, G = the site clusters of each fit "
                "([geohint] p_reference = \"t\"; statsmodels use_t=True).")
    else:
        note = ("p: two-sided, from the normal distribution ([geohint] p_reference = \"normal\"; statsmodels' default "
                "for cluster-robust fits, used by the release's scripts).")
    few = sorted({g for g in n_clusters if g < FEW_CLUSTERS})
    if p_reference == "normal" and few:
        counts = f"{few[0]}" if len(few) == 1 else f"{few[0]} to {few[-1]}"
        note += (f" Few clusters: fits here rest on {counts} site clusters (fewer than {FEW_CLUSTERS}), where the normal "
                 f"reference gives p-values that are too small; set [geohint] p_reference = \"t\" for t with G - 1 df.")
    withheld = ""
    if hidden and se:
        gs = ", ".join(str(g) for g in sorted(set(hidden)))
        withheld = (f"p and SE are {DASH} for a fit on fewer than {MIN_CLUSTERS_NORMAL_P} site clusters (here G = {gs}): "
                 f"with so few clusters the cluster-robust SE is itself biased down, and read against the normal "
                 f"distribution (the p, or beta +- 1.96 SE) it gives p-values far too small and intervals far too "
                 f"narrow (Cameron and Miller 2015); beta is shown, p_reference = \"t\" gives SE and p with G - 1 df.")
    elif hidden:
        gs = ", ".join(str(g) for g in sorted(set(hidden)))
        withheld = (f"p is {DASH} for a fit on fewer than {MIN_CLUSTERS_NORMAL_P} site clusters (here G = {gs}): with so "
                 f"few clusters the cluster-robust SE is itself unreliable and the normal reference turns it into "
                 f"p-values far too small to print (Cameron and Miller 2015); beta is shown, p_reference = \"t\" gives "
                 f"a p-value with G - 1 df.")
    if withheld and len(hidden) >= len(n_clusters):
        # every p the table could show is withheld: the reference and its few-clusters remedy describe p-values
        # that are not printed, so only the withheld sentence stays
        return withheld
    if withheld:
        note += " " + withheld
    few_t = sorted({g for g in n_clusters if g < MIN_CLUSTERS_NORMAL_P})
    if se and p_reference == "t" and few_t:
        # the ratio column divides that same clustered SE by the unclustered one: the caution covers it too
        note += (f" SE and 'SE / unclustered SE' from fewer than {MIN_CLUSTERS_NORMAL_P} site clusters (here G = "
                 f"{', '.join(str(g) for g in few_t)}) are biased down: read the SE with t, G - 1 df, as p is, and the "
                 "ratio as too low (its clustered SE is the biased one).")
    return note


def _clusters(*fits: Any) -> list[int]:
    """Site clusters G of the fits with a p-value (:func:`p_reference_note`'s ``n_clusters``): not a failed fit, one
    on fewer than 2 clusters, nor an exact fit (:func:`_exact_fit`)."""
    return [r.n_clusters for r in fits if r is not None and r.n_clusters >= 2 and not _exact_fit(r)]


def table6(agg: GeoHintAggregator, condition: str = "forced", *, p_reference: str = "normal") -> Table:
    """Table 6: slope of log10(err) on d_ref per model (site-clustered SE), all and finer-than-city; p-values
    from ``p_reference`` (``"normal"`` or ``"t"`` with G - 1 df, see :func:`p_reference_note`). Under the normal
    reference a fit on fewer than :data:`MIN_CLUSTERS_NORMAL_P` site clusters shows beta but neither SE nor p
    (:func:`_shown_se`, :func:`_shown_p`). The last row, :data:`POOLED_ROW`, fits every model together; with one
    model Markdown and the terminal leave it out (it repeats the model's row, :func:`one_model_note`) and
    ``table6.csv`` keeps it."""
    check_p_reference(p_reference)
    rows = []
    clusters: list[int] = []
    hidden: list[int] = []
    models = _model_order(agg, condition)
    zeros = [f"all levels {agg.n_zero_err(condition=condition)}",
             f"fine only {agg.n_zero_err(condition=condition, fine_only=True)}"]
    zero_dref = [("all levels", agg.n_zero_dref(condition=condition)),
                 ("fine only", agg.n_zero_dref(condition=condition, fine_only=True))]
    failed: dict[str, list[str]] = {}  # why a fit failed -> the cells it leaves as dashes (no_fit_note)
    exact: list[str] = []  # cells left as dashes by an exact fit (exact_fit_note)
    for label, ms in [*[(m, [m]) for m in sorted(models, key=lambda m: _slope_sort(agg, m, condition))], (POOLED_ROW, models)]:
        r = _slope_cells(agg, ms, condition, False, p_reference=p_reference, failed=failed, cell=f"{label} beta, SE, p")
        clusters += _clusters(r)
        if _exact_fit(r):
            exact.append(f"{label} SE, p, SE / unclustered SE")
        rf = _slope_cells(agg, ms, condition, True, failed=failed, cell=f"{label} beta (fine only)")
        rr = _slope_cells(agg, ms, condition, False, recite=True, failed=failed, cell=f"{label} beta if reciting")
        nan = float("nan")
        share = r.slope / rr.slope if (r and rr and rr.slope) else nan
        rows.append([
            label, _fit_rows(r, agg, ms, condition), r.slope if r else nan, _shown_se(r, p_reference),
            _shown_p(r, p_reference, hidden), rf.slope if rf else nan, rr.slope if rr else nan, share,
            _shown_se_ratio(r, p_reference),
        ])

    def notes(failed: Mapping[str, Sequence[str]], exact: Sequence[str]) -> str:
        return _join_notes("'beta if reciting' is the slope of the same rows with err = d_ref (a model that always "
                           "answers with the hint, Sec. 6.2.3); the share places beta between ignoring the hint (0 %) and "
                           "reciting it (100 %). 'SE / unclustered SE': the site-clustered SE over the ordinary OLS SE of "
                           "the same slope (the paper's clustered SEs run 0.9 to 1.8 times the unclustered ones, Sec. "
                           "6); above 1, answers of one site move together.",
                           p_reference_note(p_reference, clusters, hidden, se=True), no_fit_note(failed),
                           exact_fit_note(exact, se=True), zero_err_note("context answers", zeros),
                           zero_dref_note("context answers", zero_dref, _RECITE_UNDEFINED))

    table = Table(
        "table6",
        f"Table 6: log10(err_km) ~ d_ref per model, SE clustered by site, condition {condition}",
        ["Model", "n", "beta", "SE", "p", "beta (fine only)", "beta if reciting", "Share of reciting (%)",
         "SE / unclustered SE"],
        ["text", "int", "f4", "se", "p", "f4", "f4", "pct", "f2"],
        rows,
        notes(failed, exact),
    )
    # one model: the pooled row repeats its row (module doc); table6.csv keeps it
    return (_without_pooled_row(table, models[0], notes(_model_cells(failed), _model_only(exact))) if len(models) == 1
            else table)


def one_model_note(table: str, model: str) -> str:
    """The sentence under a table whose pooled row (:data:`POOLED_ROW`) Markdown and the terminal leave out because
    the table has one model, ``model``, whose row it would repeat; ``table`` names the CSV that keeps it."""
    return (f"One model ({model}): the pooled row '{POOLED_ROW}' would repeat its row, so it is left out here; "
            f"{table}.csv keeps it.")


def _without_pooled_row(table: Table, model: str, notes: str | None = None) -> Table:
    """``table`` with :attr:`Table.shown` set to the same table without its last row (the pooled row, which repeats
    ``model``'s), with :func:`one_model_note` first in its notes; ``notes``: the shown table's other notes (None:
    ``table``'s). Returns ``table``."""
    table.shown = Table(table.name, table.title, table.columns, table.formats, table.rows[:-1],
                        _join_notes(one_model_note(table.name, model), table.notes if notes is None else notes))
    return table


def _model_cells(failed: Mapping[str, Sequence[str]]) -> dict[str, list[str]]:
    """``failed`` (:func:`no_fit_note`'s reason -> cells) without the cells of the pooled row, reasons left with no
    cell dropped: the No-fit lines of a table shown without that row (:func:`_without_pooled_row`)."""
    out = {r: [c for c in cells if not c.startswith(f"{POOLED_ROW} ")] for r, cells in failed.items()}
    return {r: cells for r, cells in out.items() if cells}


def _model_only(cells: Sequence[str]) -> list[str]:
    """``cells`` (as :func:`exact_fit_note` names them) without those of the pooled row, for a table shown without
    that row (:func:`_without_pooled_row`)."""
    return [c for c in cells if not c.startswith(f"{POOLED_ROW} ")]


def _slope_sort(agg: GeoHintAggregator, model: str, condition: str) -> float:
    r = _slope_cells(agg, [model], condition, False)
    return -(r.slope if r else -math.inf)


def table7(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline", *, p_reference: str = "normal") -> Table:
    """Table 7: the slope fitted separately within each regime, per model and pooled; p-values from
    ``p_reference`` (``"normal"`` or ``"t"`` with G - 1 df, see :func:`p_reference_note`). After the regimes and
    all sites: each regime's finer-than-city slope (``fine_only``, as Table 6's) and each regime's beta as a share
    (fraction, shown in %) of the same models' reciting slope over all sites (Table 6's ``beta if reciting``). With
    one model Markdown and the terminal leave out the pooled row (:func:`one_model_note`); ``table7.csv`` keeps it."""
    check_p_reference(p_reference)
    groups = _regime_sites(agg, baseline)
    rows = []
    clusters: list[int] = []
    hidden: list[int] = []
    models = _model_order(agg, condition)
    nan = float("nan")
    failed: dict[str, list[str]] = {}  # why a fit failed -> the cells it leaves as dashes (no_fit_note)
    exact: list[str] = []  # cells left as dashes by an exact fit (exact_fit_note)
    for label, ms in [*[(m, [m]) for m in models], (POOLED_ROW, models)]:
        row: list[Any] = [label]
        regime_slopes = []
        for regime, sites in ((ILLEGIBLE, groups[ILLEGIBLE]), (LEGIBLE, groups[LEGIBLE]), ("all", None)):
            r = _slope_cells(agg, ms, condition, False, sites, p_reference=p_reference, failed=failed,
                             cell=f"{label} beta {regime}, p {regime}")
            clusters += _clusters(r)
            if _exact_fit(r):
                exact.append(f"{label} p {regime}")
            row += [_fit_rows(r, agg, ms, condition, sites), r.slope if r else nan, _shown_p(r, p_reference, hidden)]
            regime_slopes.append(r.slope if r else nan)
        # finer-than-city answers only, per regime (Table 6's "beta (fine only)" within a regime)
        for regime, sites in ((ILLEGIBLE, groups[ILLEGIBLE]), (LEGIBLE, groups[LEGIBLE])):
            rf = _slope_cells(agg, ms, condition, True, sites, failed=failed, cell=f"{label} beta {regime} (fine only)")
            row.append(rf.slope if rf else nan)
        # each regime's beta as a share of Table 6's "beta if reciting" of the same models (all sites), as the paper
        rr = _slope_cells(agg, ms, condition, False, recite=True, failed=failed,
                          cell=f"{label} Share of reciting illegible, legible")
        row += [b / rr.slope if (rr and rr.slope and math.isfinite(b)) else nan for b in regime_slopes[:2]]
        rows.append(row)

    def notes(failed: Mapping[str, Sequence[str]], exact: Sequence[str]) -> str:
        return _join_notes(
            p_reference_note(p_reference, clusters, hidden), no_fit_note(failed), exact_fit_note(exact),
            "'fine only': the same fit on answers finer than city level (Table 6's 'beta (fine only)'), within "
            "the regime. 'Share of reciting': the regime's beta as a share of Table 6's 'beta if reciting' of "
            "the same models over all sites (err = d_ref; 0 % = ignoring the hint, 100 % = reciting it), as the "
            "paper's Sec. 6.2.3 places its regime slopes (57 % and 37 % of 0.176).",
            zero_err_note("context answers", [
                f"{name} {agg.n_zero_err(condition=condition, sites=sites)}"
                for name, sites in ((ILLEGIBLE, groups[ILLEGIBLE]), (LEGIBLE, groups[LEGIBLE]), ("all", None))]),
            zero_dref_note("context answers", [
                (name, agg.n_zero_dref(condition=condition, sites=sites))
                for name, sites in ((ILLEGIBLE, groups[ILLEGIBLE]), (LEGIBLE, groups[LEGIBLE]), ("all", None))],
                _RECITE_UNDEFINED),
            regime_note(agg, baseline), no_regime_note(agg, baseline))

    table = Table(
        "table7",
        f"Table 7: log10(err_km) ~ d_ref within each regime, condition {condition}",
        ["Model", "n illegible", "beta illegible", "p illegible", "n legible", "beta legible", "p legible", "n all", "beta all", "p all",
         "beta illegible (fine only)", "beta legible (fine only)", "Share of reciting illegible (%)",
         "Share of reciting legible (%)"],
        ["text", "int", "f4", "p", "int", "f4", "p", "int", "f4", "p", "f4", "f4", "pct", "pct"],
        rows,
        notes(failed, exact),
    )
    # one model: the pooled row repeats its row (module doc); table7.csv keeps it
    return (_without_pooled_row(table, models[0], notes(_model_cells(failed), _model_only(exact))) if len(models) == 1
            else table)


def _flip_label(unit: str, measure: str, treatment: str, control: str, models: Sequence[str],
                pair_sites: Sequence[str]) -> str:
    """The label of one site-flip test of the report: what it tests (the pairing ``unit``, the ``measure``, the two
    conditions, the models whose answers its pairs hold and the sites of its pairs, sorted; not every model of the
    campaign: an all-models test whose pairs are one model's is that model's test), which with the report's seed selects the test's own
    stream of random flips (:func:`geoagent.scoring.permutation.flip_seed_sequence`). Different tests of a report
    thus have independent Monte-Carlo errors, while the same test wherever it appears (Table 8's all-sites row and
    Table 9's row of a one-model campaign; a regime that holds every site and the all-sites row) draws the same flips
    and prints the same p, in every run of the same data."""
    return (f"site-flip|{unit}|{measure}|{treatment} vs {control}|models {','.join(sorted(models))}"
            f"|sites {','.join(sorted(set(pair_sites)))}")


def _paired_block(agg, treatment, control, sites, model, n_flips, seed, without: Collection[str] = ()):
    """Tables 8-10's numbers for one group of strictly paired items (:meth:`GeoHintAggregator.paired`: same site,
    image, model, language and reference point, repeats averaged per item). The paired deltas are the mean over
    items of (treatment mean - control mean) with a site-flip p; the rate columns pool every response of the
    paired items (hits / responses, echoes / verdicts, building-level / responses, the median of every ratio), as
    the release's raw-count rows of these tables (``analysis/mitigation_results.py``, ``chain_results.py``).
    Each of its two tests (hit, building level) draws its flips from ``seed`` and its own label (:func:`_flip_label`).
    ``without``: models whose items are left out (Tables 8 and 10 pass the models whose hit rate in either condition
    is undetermined, :meth:`GeoHintAggregator.undetermined_models`; stats43 #1)."""
    pairs = agg.paired(treatment, control, sites=sites, model=model, without=without)
    out = {"n": len(pairs)}
    def hit_rate(sel: list, i: int) -> float:
        # undetermined (NaN) when none of the answers geocoded: 0 % would measure the geocoder (UNGEOCODED_NOTE)
        if sel and not any(p[i].geocoded for p in sel):
            out["ungeocoded_any"] = True
        return sum(p[i].hits for p in sel) / sum(p[i].n for p in sel) if any(p[i].geocoded for p in sel) else float("nan")

    def pooled(num: int, den: int) -> float:
        return num / den if den else float("nan")

    out["ungeocoded"] = out["ungeocoded_any"] = False
    for cond_i, cond in ((1, treatment), (2, control)):
        out["ungeocoded"] |= bool(pairs) and not any(p[cond_i].geocoded for p in pairs)
        out[cond] = {
            "bands": [hit_rate([p for p in pairs if p[cond_i].band == b], cond_i) for b in BANDS],
            "overall": hit_rate(pairs, cond_i),
            "echo": pooled(sum(p[cond_i].echoes for p in pairs), sum(p[cond_i].echo_n for p in pairs)),
            "building": pooled(sum(p[cond_i].n_building for p in pairs), sum(p[cond_i].n for p in pairs)),
            "ratio": [
                (lambda xs: float(np.median(xs)) if xs else float("nan"))(
                    [x for p in pairs if p[cond_i].band == b for x in p[cond_i].ratios]
                )
                for b in BANDS
            ],
            # per band: (answers at err = 0 km, answers the median would count with them, that median); the
            # column keeps the release's error_km > 0 (chain_results.py), the note gives this (review44c #1)
            "ratio_zeros": [_with_zeros([p[cond_i] for p in pairs if p[cond_i].band == b]) for b in BANDS],
        }
    if pairs and not out["ungeocoded"]:
        pair_sites = [p[0] for p in pairs]
        models = agg.paired_models(treatment, control, sites=sites, model=model, without=without)  # whose answers the pairs hold
        res = paired_site_permutation_test(
            pair_sites, [p[1].hit for p in pairs], [p[2].hit for p in pairs], n_flips=n_flips, seed=seed,
            label=_flip_label("item", "hit", treatment, control, models, pair_sites),
        )
        out["delta_pp"], out["p"] = 100 * res.delta, perm_p(res)
        out["n_sites"] = res.n_sites
        bres = paired_site_permutation_test(
            pair_sites, [p[1].building for p in pairs], [p[2].building for p in pairs], n_flips=n_flips, seed=seed,
            label=_flip_label("item", "building", treatment, control, models, pair_sites),
        )
        out["building_delta_pp"], out["building_p"] = 100 * bres.delta, perm_p(bres)
    else:
        out["delta_pp"] = out["p"] = out["building_delta_pp"] = out["building_p"] = float("nan")
        out["n_sites"] = 0
    return out


def _with_zeros(items: Sequence[Any]) -> tuple[int, int, float]:
    """``(zeros, n, median)`` of the paired items' (:class:`~geoagent.geohint.aggregate.PairMean`) finer-than-city
    answers: how many are at err = 0 km, how many answers the median counts with them, and the median of err/d_ref
    with them counted as ratio 0 (NaN without any answer). Tables 8 and 10's notes (review44c #1)."""
    from geoagent.geohint.aggregate import median_with_zeros

    ratios = [x for it in items for x in it.ratios]
    zeros = sum(it.n_zero_err for it in items)
    return zeros, len(ratios) + zeros, median_with_zeros(ratios, zeros)


def paired_zero_err_note(blocks: Sequence[tuple[str, str, Sequence[tuple[int, int, float]]]]) -> str:
    """Tables 8 and 10's note on finer-than-city answers at err = 0 km, or "" when there are none. ``blocks``:
    ``(regime, condition, per band (zeros, n, median with zeros))``.

    The median ratio columns follow the release's analysis (``chain_results.py``: ``error_km > 0``, as Table 5's
    ``two_regimes.py``), so such answers, the best ones (a geocoder that places a correctly named site on its own
    coordinate), are left out of them; the note counts them per regime and condition and gives the medians with
    them counted as ratio 0, as Table 5's note does (review44c #1: two thirds of a crawl's legible answers were at
    err = 0, and the columns read 1.00, "the answer is the hint", where the medians with them read 0.00)."""
    parts = []
    for regime, cond, bands in blocks:
        if any(z for z, _n, _m in bands):
            parts.append(f"{regime} {cond} " + " / ".join(_fmt(m, "f2") for _z, _n, m in bands)
                         + f" ({' / '.join(str(z) for z, _n, _m in bands)} of n {' / '.join(str(n) for _z, n, _m in bands)}"
                         " at err = 0)")
    if not parts:
        return ""
    return ("The median ratios leave out finer-than-city answers at err = 0 km (the release's analysis keeps "
            "error_km > 0, as Table 5 does). Counted with ratio 0 instead, the median ratios by band (nearest to "
            "farthest) would read: " + "; ".join(parts) + ".")


def table_paired(
    agg: GeoHintAggregator,
    treatment: str,
    control: str = "forced",
    baseline: str = "baseline",
    *,
    name: str = "table8",
    n_flips: int = DEFAULT_N_FLIPS,
    seed: int = 0,
) -> Table:
    """Tables 8 and 10: hit rate (%) by regime and band for two conditions on strictly paired items,
    the paired difference (points) with a site-flip permutation p-value, echo rate, building-level share
    and the median err/d_ref ratio per band (finer than city).

    Every model's items pooled, but those of a model whose hit rate in ``treatment`` or ``control`` is undetermined
    (:meth:`GeoHintAggregator.undetermined_models`: every answer there parsed, none geocoded), whose pairs are left
    out of every column and named in the notes (:func:`pooled_left_out_note`; stats43 #1: counted as misses they
    pulled the pooled hit rates and building-level shares toward 0 and the paired delta toward 0; Table 9 gives
    such a model's own row an em dash)."""
    groups = _regime_sites(agg, baseline)
    rows = []
    n_sites: list[tuple[str, int]] = []
    ungeocoded = False
    left_out = agg.undetermined_models(treatment, control)
    zero_blocks = []  # (regime, condition, per band (zeros, n, median with zeros)): paired_zero_err_note
    for label, sites in ((ILLEGIBLE, groups[ILLEGIBLE]), (LEGIBLE, groups[LEGIBLE]), ("all sites", None)):
        blk = _paired_block(agg, treatment, control, sites, None, n_flips, seed, without=left_out)
        n_sites.append((label, blk["n_sites"]))
        for cond in (control, treatment):
            d = blk[cond]
            zero_blocks.append((label, cond, d["ratio_zeros"]))
            rows.append([
                label, cond, blk["n"], *d["bands"], d["overall"],
                blk["delta_pp"] if cond == treatment else None, blk["p"] if cond == treatment else None,
                d["echo"], d["building"],
                blk["building_delta_pp"] if cond == treatment else None, blk["building_p"] if cond == treatment else None,
                *d["ratio"],
            ])
        ungeocoded = ungeocoded or blk["ungeocoded_any"]
    title = {
        "table8": f"Table 8: hit rate (%) by regime, strictly paired, {treatment} vs {control}",
        "table10": f"Table 10: {treatment} vs {control}, strictly paired",
    }.get(name, f"{treatment} vs {control}, strictly paired")
    return Table(
        name,
        title,
        ["Regime", "Condition", "n pairs", *BAND_NAMES, "Overall", "Paired delta (pp)", "p", "Echo rate", "Building level",
         "Building delta (pp)", "p (building)", *(f"Median ratio {b}" for b in BAND_NAMES)],
        ["text", "text", "int", "pct", "pct", "pct", "pct", "pp", "permp", "pct", "pct", "pp", "permp", "f2", "f2", "f2"],
        rows,
        _join_notes(f"{flip_method_note(n_flips, seed, [g for _, g in n_sites])} {echo_rule_ref(agg)}",
                    PAIRED_RATES_NOTE, paired_zero_err_note(zero_blocks), few_sites_note(n_sites, n_flips),
                    regime_note(agg, baseline),
                    pooled_left_out_note(agg, treatment, control),
                    (UNGEOCODED_NOTE + " A paired delta and its p need both conditions' hit rates.") if ungeocoded else ""),
    )


#: with this many sites or fewer, a paired table says how small its permutation p can get
FEW_FLIP_SITES = 6

#: Tables 8 and 10: why the band and Overall columns and the paired delta can disagree (stats40 #2; the paper's
#: Table 8 "All sites" reads 37.4 -> 39.3 beside a delta of +2.01)
PAIRED_RATES_NOTE = ("The band and Overall columns pool answers (hits / answers); the paired delta averages each "
                     "item's difference of its repeats' means, so the two differ, even in sign, when items have "
                     "unequal numbers of answers.")


def flip_method_note(n_flips: int, seed: int, sites: Sequence[int] | None = None) -> str:
    """The paired tables' sentence on the test: site-flip, two-sided; ``n_flips`` random sign vectors drawn with
    ``seed`` where a group has more than log2(n_flips) sites (each test from its own stream, :func:`_flip_label`),
    every sign vector (exact p) where it has fewer (:func:`geoagent.scoring.permutation.site_flip_test_from_sums`,
    ``exact=None``).

    ``sites``: the site counts G of the table's tests (groups with no pair, G = 0, ignored). When all were
    enumerated the sentence says every p is exact and names no random flips or floor; when none was, it gives no
    enumeration clause; None (or no test): both, as a rule (a walkthrough could not tell which test a table's p
    came from)."""
    g_max = exact_max_sites(n_flips)  # largest G with 2**G <= n_flips, capped as the test caps it
    head = "Two-sided permutation test flipping whole sites: "
    used = sorted({int(g) for g in sites or () if g >= 1})
    if used and used[-1] <= g_max:
        shown = ", ".join(str(g) for g in used)
        return (f"{head}every test of this table enumerated all 2^G sign vectors of its G sites (G = {shown}; "
                f"exact for G <= {g_max}), so each p is exact, with no random flips; the smallest p a test can give "
                "is 2/2^G.")
    flips = (f"{n_flips} random flips (seed {seed}), each test drawing from its own stream derived from the seed and "
             "what it tests, so the tests' sampling errors are independent")
    floor = (f"A p shown <{_fmt(1 / (1 + n_flips), 'p')} is the floor 1/({n_flips} + 1) of the random flips: none "
             "reached the observed difference.")
    if used and used[0] > g_max:
        return f"{head}{flips} (every test here has G > {g_max} sites). {floor}"
    return (f"{head}{flips}; exact enumeration of all 2^G sign vectors for groups of G <= {g_max} sites. {floor}")


def min_flip_p(n_sites: int) -> float:
    """Smallest two-sided p a site-flip test over ``n_sites`` sites can give: 2 / 2**G (exact enumeration: the
    observed signs and their mirror image always reach |T|). With so few sites the report's test enumerates every
    sign vector (:mod:`geoagent.scoring.permutation`: exact whenever 2**G <= n_flips), so its p is the exact one.
    Raises ValueError for G < 1."""
    if n_sites < 1:
        raise ValueError(f"a site-flip test needs at least one site, got {n_sites}")
    return 2.0 / 2 ** n_sites


def few_sites_note(n_sites: Sequence[tuple[str, int]], n_flips: int | None = None) -> str:
    """For row groups (label, G sites in the test) with 1 <= G <= :data:`FEW_FLIP_SITES`: a sentence giving the
    smallest attainable p (:func:`min_flip_p`); "" when every group has more sites (or none).

    ``n_flips``: the tables' flip count. A group with more sites than the test enumerates for it
    (:func:`geoagent.scoring.permutation.exact_max_sites`: only with fewer than 2**G flips, e.g. ``n_flips``
    < 64 for G = 6) gets the sampled p, which may fall below 2/2^G by chance: the note says so for it
    instead of stating the bound. None: every group is taken as enumerated."""
    few = [(label, g) for label, g in n_sites if 1 <= g <= FEW_FLIP_SITES]
    if not few:
        return ""
    g_exact = FEW_FLIP_SITES if n_flips is None else exact_max_sites(n_flips)
    parts = [f"{label}: G = {g}, p >= {min_flip_p(g):g}" if g <= g_exact else
             f"{label}: G = {g}, exact p >= {min_flip_p(g):g} (p here is sampled from {n_flips} flips and may fall "
             "below it by chance)" for label, g in few]
    return ("Few sites: with G sites a two-sided site-flip test cannot give p below 2/2^G (the observed signs and "
            "their mirror image), so p here cannot be small: " + "; ".join(parts) + ".")


def table9(agg: GeoHintAggregator, treatment: str = "forced_warn", control: str = "forced", baseline: str = "baseline", *, n_flips: int = DEFAULT_N_FLIPS, seed: int = 0) -> Table:
    """Table 9: paired difference in hit rate (points) per model: all sites, illegible, legible."""
    groups = _regime_sites(agg, baseline)
    rows = []
    n_sites: list[tuple[str, int]] = []
    ungeocoded = False
    for m in _model_order(agg, control):
        all_ = _paired_block(agg, treatment, control, None, m, n_flips, seed)
        n_sites.append((m, all_["n_sites"]))
        il = _paired_block(agg, treatment, control, groups[ILLEGIBLE], m, n_flips, seed)
        le = _paired_block(agg, treatment, control, groups[LEGIBLE], m, n_flips, seed)
        ungeocoded |= any(b["ungeocoded"] for b in (all_, il, le))
        rows.append([m, all_["n"], all_["delta_pp"], all_["p"], il["delta_pp"], le["delta_pp"]])
    return Table(
        "table9",
        f"Table 9: paired difference in hit rate (points), {treatment} minus {control}, by model",
        ["Model", "n pairs", "All sites", "p", "Illegible", "Legible"],
        ["text", "int", "pp", "permp", "pp", "pp"],
        rows,
        _join_notes(flip_method_note(n_flips, seed, [g for _, g in n_sites]), few_sites_note(n_sites, n_flips),
                    regime_note(agg, baseline),
                    (f"{DASH} in a delta or p column: no answer geocoded in one condition (all unresolved), so its hit "
                     "rate, and the paired difference, are undetermined, not 0 (an answer that did not geocode counts "
                     "as a miss; 0 would measure the geocoder).") if ungeocoded else ""),
    )


@dataclass(frozen=True, slots=True)
class ImagePairedDifference:
    """A comparison paired by image (:func:`image_paired_difference`).

    Attributes
    ----------
    n_images : int
        Images answered under both conditions (the pairs).
    n_sites : int
        Sites those images come from (the units the test flips).
    treatment, control : float
        Mean over the images of each image's rate (fraction) under the context condition's band and under no
        context; ``treatment - control`` equals ``delta``.
    delta : float
        Mean over images of (treatment rate - control rate), a fraction (x100 for points); NaN without pairs, or
        for hit rates when no answer of one condition geocoded (undetermined, as Tables 8-10).
    p_value : float
        Two-sided site-flip permutation p (:func:`geoagent.scoring.permutation.paired_site_permutation_test`);
        NaN where ``delta`` is.
    """

    n_images: int
    n_sites: int
    treatment: float
    control: float
    delta: float
    p_value: float


def image_paired_difference(agg: GeoHintAggregator, treatment: str, control: str, *, band: str, measure: str,
                            model: str | None = None, n_flips: int = DEFAULT_N_FLIPS, seed: int = 0,
                            without: Collection[str] = ()) -> ImagePairedDifference:
    """A rate under ``treatment`` in ``band`` against the no-context ``control``, paired by image.

    Unit: the image (:meth:`GeoHintAggregator.image_paired`): each image answered under both conditions gives one
    difference, its rate over every response under ``treatment`` in ``band`` (all languages, repeats and
    reference points of the band; all models pooled unless ``model``) minus its rate over every no-context
    response; the statistic is the unweighted mean of those differences over images, and the two-sided test flips
    the sign of whole sites (seed 000 Sec. 6: "paired tests flip the sign of a whole site at a time"). This is the
    release's computation of the building-level comparison (``analysis/cluster_inference.py``, "CONTEXT VS
    BASELINE": per-path means, inner join, ``diff = ctx - base``, ``perm_site``) and the paper's "paired by image"
    of Sec. 6.1.3 and 6.3.1.

    ``measure``: ``"hit"`` (Sec. 4.2's hit; an answer that did not geocode is a miss, as in the release) or
    ``"building"`` (resolved at building level; the release's ``resolved_level == "place"``; unparsed and unresolved
    answers count as not building). Raises ValueError for another measure. The test draws its flips from ``seed``
    and its own label (:func:`_flip_label`), independently of the report's other tests. ``without``: models whose
    responses are left out of both conditions (:meth:`GeoHintAggregator.image_paired`; stats43 #1)."""
    if measure not in ("hit", "building"):
        raise ValueError(f"measure must be 'hit' or 'building', got {measure!r}")
    pairs = agg.image_paired(treatment, control, band=band, model=model, without=without)
    nan = float("nan")
    if not pairs:
        return ImagePairedDifference(0, 0, nan, nan, nan, nan)
    rate = (lambda c: c.hit_rate) if measure == "hit" else (lambda c: c.building_share)
    t = np.array([rate(p[2]) for p in pairs])
    c = np.array([rate(p[3]) for p in pairs])
    n_sites = len({p[0] for p in pairs})
    if measure == "hit" and (not any(p[2].n_geocoded for p in pairs) or not any(p[3].n_geocoded for p in pairs)):
        return ImagePairedDifference(len(pairs), n_sites, nan, nan, nan, nan)
    pair_sites = [p[0] for p in pairs]
    label = _flip_label("image", f"{measure} in band {band}", treatment, control,
                        agg.image_paired_models(treatment, control, band=band, model=model, without=without),
                        pair_sites)
    res = paired_site_permutation_test(pair_sites, t, c, n_flips=n_flips, seed=seed, label=label)
    return ImagePairedDifference(len(pairs), n_sites, float(t.mean()), float(c.mean()), res.delta, perm_p(res))


def table_nocontext_near(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline", *,
                         n_flips: int = DEFAULT_N_FLIPS, seed: int = 0) -> Table:
    """Per-model hit rate with no context against the near band, paired by image, over every site (no regime split).

    Seed 000 Sec. 6.1.3, after Table 3: "An independent estimate that uses no regime split at all - each model's
    no-context rate against its near-band rate over all 109 sites, paired by image - gives +4.8, -3.9, +8.9, +11.0
    and +19.3 in the same model order" (claude-opus-5, gemini-flash, qwen3-vl-235b, qwen3-vl-8b, claude-haiku-4-5):
    near band minus no context, in points, positive = more accurate with the hint. Per model, one difference per
    image answered in both conditions (:func:`image_paired_difference`, ``measure="hit"``, band ``0.5-1.5km``),
    averaged over images. The paper prints no interval or p for it; the table adds the site-flip p of its other
    paired comparisons (Sec. 6). No script of the release (commit f4975f2, ``analysis/``) computes this number; the
    unit and statistic follow the release's other image-paired comparison (:func:`table_building_vs_nocontext`).
    Rows: models by overall hit rate in ``condition``, as Tables 1-3."""
    rows = []
    n_sites: list[tuple[str, int]] = []
    ungeocoded = False
    for m in _model_order(agg, condition):
        d = image_paired_difference(agg, condition, baseline, band=BANDS[0], measure="hit", model=m,
                                    n_flips=n_flips, seed=seed)
        if d.n_images and math.isnan(d.delta):
            ungeocoded = True
        n_sites.append((m, d.n_sites))
        rows.append([m, d.n_images, d.n_sites, d.control, d.treatment, 100 * d.delta, d.p_value])
    return Table(
        "nocontext_near",
        f"No context vs near band ({band_title(BANDS[0])}), paired by image, per model: {condition} minus {baseline}",
        ["Model", "n images", "Sites", "No context", "Near band", "Near minus no context (pp)", "p"],
        ["text", "int", "int", "pct", "pct", "pp", "permp"],
        rows,
        _join_notes(
            "Seed 000 Sec. 6.1.3's independent estimate (every site, sites not split into regimes): per model, each image answered "
            f"both with no context ({baseline}) and with a near-band hint ({condition}) gives its near-band hit rate "
            "minus its no-context hit rate (all repeats, languages and reference points of the image pooled); the "
            "columns are means over those images, positive = more accurate with the hint. The paper gives no "
            "interval or p for it; p here is the site-flip test of Sec. 6.",
            flip_method_note(n_flips, seed, [g for _, g in n_sites]), few_sites_note(n_sites, n_flips),
            (f"{DASH} in the delta: no answer of one condition geocoded, so the difference is undetermined, not "
             "a hit rate of 0.") if ungeocoded else ""),
    )


def table_building_vs_nocontext(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline", *,
                                n_flips: int = DEFAULT_N_FLIPS, seed: int = 0) -> Table:
    """Share of answers resolved at building level with context (per band) against no context, paired by image.

    Seed 000 Sec. 6.3.1: "Building-level resolution sits above the no-context baseline in all three bands, paired by
    image (+4.3, +4.0 and +2.9 points, at p = 0.007, 0.010 and 0.046)": context band minus no context, in points.
    The release computes it in ``analysis/cluster_inference.py`` ("CONTEXT VS BASELINE, building-level share, per
    band"): for each band, per image (``path``) the mean of ``resolved_level == "place"`` over every forced answer in
    that band and over every no-context answer (all models, languages and repeats pooled), inner join on the image,
    ``diff = (ctx - base) * 100``, mean over images, two-sided site-level sign-flip p. Here
    :func:`image_paired_difference` with ``measure="building"`` and models pooled, one row per band.

    Pooled over every model but those whose hit rate in ``condition`` or ``baseline`` is undetermined
    (:meth:`GeoHintAggregator.undetermined_models`: every answer there parsed, none geocoded, so none could resolve
    at building level), which are left out and named in the notes (:func:`pooled_left_out_note`; stats43 #1: their
    answers pulled a side's share toward 0, and so moved the difference). The release has no such model."""
    rows = []
    n_sites: list[tuple[str, int]] = []
    left_out = agg.undetermined_models(condition, baseline)
    for b in BANDS:
        d = image_paired_difference(agg, condition, baseline, band=b, measure="building", n_flips=n_flips, seed=seed,
                                    without=left_out)
        n_sites.append((band_title(b), d.n_sites))
        rows.append([b, d.n_images, d.n_sites, d.control, d.treatment, 100 * d.delta, d.p_value])
    return Table(
        "building_vs_nocontext",
        f"Building-level share, {condition} (by band) vs {baseline}, paired by image, models pooled",
        ["Band", "n images", "Sites", "No context", "With context", "Context minus no context (pp)", "p"],
        ["text", "int", "int", "pct", "pct", "pp", "permp"],
        rows,
        _join_notes(
            "Seed 000 Sec. 6.3.1 (the release's analysis/cluster_inference.py): per image answered both with no "
            "context and with a hint in the band, the share of its answers resolved at building level with the hint "
            "minus without (every model, language, repeat and reference point of the image pooled; unparsed and "
            "unresolved answers count as not building); the columns are means over those images.",
            flip_method_note(n_flips, seed, [g for _, g in n_sites]), few_sites_note(n_sites, n_flips),
            pooled_left_out_note(agg, condition, baseline)),
    )


def table11(agg: GeoHintAggregator, condition: str = "forced_chain") -> Table:
    """Table 11: checklist compliance per model: share of responses (parsed or not) carrying an evidence object,
    share of each category's slots answered "not visible" (fractions; NaN without a slot), unparseable responses
    (no JSON object read: :func:`geoagent.geohint.aggregate.no_json_object`, the paper's "2 responses out of
    2799 are unparseable"; an object naming no place is parsed there). Every key of an evidence object that names
    a category is a slot of it (:func:`geoagent.geohint.parse.evidence_slot_counts`, as the release's script).

    Only answers whose text was read count (:func:`geoagent.geohint.aggregate.answer_text_read`): the rows of a
    judged file among them (parsed fields only, no evidence object) are left out and the notes say how many; when
    every answer is such a row there is no row (:func:`table11_withheld` says why).

    n is every response whose text was read, as the paper's ("2799 is every forced_chain response", "2 responses out of 2799 are
    unparseable"; seed 000 Sec. 6.3.2) and as the release's ``analysis/chain_compliance.py`` counts it (every line
    of the raw file): :meth:`GeoHintAggregator.compliance`, every answer of ``condition`` and of its no-context
    variant, also context answers whose reference point is not in the site's ladder and answers cut off at the
    output-token limit with nothing parsed (both left out of every other table); the notes say how many of each.
    The evidence share runs over n (``with_ev / n`` in the release's script): a response carries an evidence object
    when the parser found one, whether or not a place parsed (the release's script counts every JSON object with
    an ``evidence`` object); the "not visible" shares run over the slots of those evidence objects.
    """
    rows = []
    n_left = n_cut = n_unread = 0
    conds = (condition, f"{condition}_baseline")
    for m in _checklist_models(agg, condition):
        c = agg.compliance(m, condition)
        n_unread += c.n_text_unread
        n = c.n_text_read
        if not n:
            continue
        n_left += sum(agg.without_ladder_cells[(m, cond)].n_text_read for cond in conds
                      if (m, cond) in agg.without_ladder_cells)
        n_cut += sum(agg.no_answer_cells[(m, cond)].n_text_read for cond in conds if (m, cond) in agg.no_answer_cells)
        rows.append([
            m, n, c.evidence_present / n,
            *[(c.slots_not_visible.get(k, 0) / c.slots_filled[k]) if c.slots_filled.get(k) else float("nan") for k in EVIDENCE_CATEGORIES],
            c.n_unparseable,
        ])
    left_note = (f"n counts every {condition} answer, including {_answers(n_left, 'context answer')} whose reference "
                 "point is not in the site's ladder (it has no hint distance, so every other table leaves it out): the paper's Table 11 "
                 "runs over every forced_chain response (2799, of which 2538 are paired; seed 000 Sec. 6.3.2)."
                 if n_left else "")
    n_withheld = sum(agg.n_no_answer_withheld(condition=c) for c in conds)
    cut_note = (f"n counts {_answers(n_cut, 'response')} {no_answer_words(n_withheld)} "
                "(no answer in every other table; here unparsed, with no evidence object unless one was recovered): "
                "the paper's n is every forced_chain response, unparseable ones included (2 of 2799; seed 000 Sec. "
                "6.3.2)." if n_cut else "")
    others = [c for c in agg.conditions if c not in conds]
    only_note = (f"Only the {condition} answers (and their no-context variant) are counted here, as the paper's Table 11 "
                 f"counts every forced_chain response and nothing else; the other conditions of these data "
                 f"({', '.join(others)}) are not in it." if others else "")
    unread_note = (f"Left out: {_answers(n_unread, f'{condition} answer')} of a judged file, whose text was never "
                   "read (it keeps the parsed fields only, no evidence object; the paper computes Table 11 from the "
                   "raw forced_chain responses, seed 000 Reproducibility); n counts the answers whose text was read."
                   if n_unread and rows else "")
    return Table(
        "table11",
        f"Table 11: {condition} compliance: evidence object present (% of responses) and 'not visible' share per category (%)",
        ["Model", "n", "Evidence", "Infra.", "Veg.", "Arch.", "Script", "Terrain", "Unparseable"],
        ["text", "int", "pct", "pct", "pct", "pct", "pct", "pct", "int"],
        rows,
        _join_notes(only_note, unread_note, left_note, cut_note),
    )


def _checklist_models(agg: GeoHintAggregator, condition: str = "forced_chain") -> list[str]:
    """Models with answers of ``condition`` or its no-context variant, those left out of every other table
    included (Table 11's rows, :meth:`GeoHintAggregator.compliance`)."""
    conds = (condition, f"{condition}_baseline")
    return sorted(set(agg.models) | {m for cells in (agg.without_ladder_cells, agg.no_answer_cells)
                                     for m, c in cells if c in conds})


def table11_withheld(agg: GeoHintAggregator, condition: str = "forced_chain") -> str:
    """Why Table 11 is left out although the data hold ``condition`` answers, as the report's ``Withheld:`` line
    gives it; "" when it can be computed (or there are no such answers: :func:`withheld_tables` says that).

    Table 11 is computed from the answers' text: seed 000 computes it from "the raw forced_chain responses that Table
    11 is computed from" (Reproducibility; the release's ``analysis/chain_compliance.py`` reads
    ``forced_chain_raw.jsonl``), whose evidence objects it counts. Answers whose text geoagent never read
    (:func:`geoagent.geohint.aggregate.answer_text_read`: the rows of a judged file, parsed fields only) would
    show as carrying no evidence object (0 %), so the table leaves them out (:func:`table11`, whose notes count them)
    and is withheld when every one of its answers is such a row."""
    cells = [agg.compliance(m, condition) for m in _checklist_models(agg, condition)]
    n, unread = sum(c.n for c in cells), sum(c.n_text_unread for c in cells)
    if not unread or unread < n:
        return ""
    which = f"its {n}"
    return (f"Table 11 ({which} {condition} answer{'s' if n != 1 else ''} carry no answer text: a judged file keeps "
            "the parsed fields only, no evidence object, and the paper computes Table 11 from the raw forced_chain "
            "responses (seed 000, Reproducibility), as the release's chain_compliance.py does; from a release: python "
            "-m geoagent.geohint.raw_import RELEASE_DIR OUT_DIR)")


def truncation_warnings(agg: GeoHintAggregator) -> list[str]:
    """Warning lines for every (model, condition) whose answers were cut off at the output-token limit more
    often than :data:`~geoagent.scoring.truncation.WARN_SHARE`; [] otherwise."""
    counts = {f"{m} in condition {c}": tc for (m, c), tc in agg.truncation.items()}
    return warning_lines(counts, setting=TRUNCATION_SETTING, planned_key=TRUNCATION_TASK_KEY)


#: the cut-off table's note when nothing was cut off and Markdown and the terminal show its total row alone
CUTOFF_COLLAPSED_NOTE = ("Nothing was cut off: one row, every model and condition (as GeoVerify's 'answers cut off "
                         "(all arms)'); cutoff.csv keeps a row per model and condition.")


def table_cutoff(agg: GeoHintAggregator) -> Table:
    """Answers cut off at the output-token limit per model and condition (every scored answer, also those
    the other tables leave out), with a row per model over all conditions and a total row.

    When answers were counted and none was cut off, Markdown and the terminal show one row (:attr:`Table.shown`):
    ``All | all | 0 of N`` under ``Answers cut off`` (N = every scored answer; right-aligned, format ``count_of``,
    as the counts of the full table and GeoVerify's ``0 of N`` cells), with a ``No finish reason`` column
    only where that count is not 0, as the GeoVerify report's cut-off section (its ``answers cut off (all arms)``
    row, :func:`geoagent.report.geoverify._truncation_rows`); ``cutoff.csv`` keeps every row and column. With one
    model and something cut off, Markdown and the terminal leave out the total row, which repeats the model's
    (:func:`one_model_note`); ``cutoff.csv`` keeps it."""
    rows = []

    def row(model: str, cond: str, c: TruncationCount) -> list[Any]:
        return [model, cond, c.n, c.n_truncated, c.share, c.n_truncated_unparsed, c.n_no_reason, c.n_withheld,
                c.n_withheld_unparsed]

    for m in agg.answered_models:
        per = {c: tc for (mm, c), tc in sorted(agg.truncation.items()) if mm == m}
        for cond, tc in per.items():
            rows.append(row(m, cond, tc))
        if len(per) > 1:
            rows.append(row(m, "all", total(per)))
    all_ = total(agg.truncation)
    rows.append(row(POOLED_ROW, "all", all_))
    title = ("Answers cut off at the output-token limit (max_output_tokens), per model and condition; share in % (a "
             "fraction in cutoff.csv)")
    notes = _join_notes("cut off: defined under Terms (said once per report).", *truncation_warnings(agg))
    shown = None
    if all_.n and not all_.n_truncated and not all_.n_withheld:
        # nothing cut off: one row (k of N), not a row of zeros per model and condition; the CSV keeps every row
        extra = [all_.n_no_reason] if all_.n_no_reason else []
        shown = Table("cutoff", title,
                      ["Model", "Condition", "Answers cut off", *(["No finish reason"] if extra else [])],
                      ["text", "text", "count_of", *(["int"] if extra else [])],
                      [[POOLED_ROW, "all", f"{all_.n_truncated} of {all_.n}", *extra]],
                      _join_notes(notes, CUTOFF_COLLAPSED_NOTE))
    table = Table(
        "cutoff",
        title,
        ["Model", "Condition", "n", "Cut off", "Share cut off (%)", "Cut off, no answer (left out)", "No finish reason",
         "Withheld by the content filter", "Withheld, no answer (left out)"],
        ["text", "text", "int", "int", "pct", "int", "int", "int", "int"],
        rows,
        notes,
        shown,
    )
    if shown is None and len(agg.answered_models) == 1 and len(rows) >= 2 and rows[-2][2:] == rows[-1][2:]:
        # one model: the pooled row repeats the model's total (or its one condition's) row; cutoff.csv keeps it
        _without_pooled_row(table, agg.answered_models[0])
    return table


def table_unresolved(agg: GeoHintAggregator) -> Table:
    """Answers that did not geocode (``resolved_level`` ``"none"``, no error distance) per model and condition,
    with a total row; share in % (a fraction in ``unresolved.csv``). With one model answering in one condition,
    Markdown and the terminal leave out the total row, which repeats the model's (:func:`one_model_note`);
    ``unresolved.csv`` keeps it."""
    rows = []
    for m in agg.models:
        for cond in agg.conditions:
            c = agg.select(model=m, condition=cond)
            if c.n:
                rows.append([m, cond, c.n, c.n_none, c.n_none_unparsed, c.unresolved_share])
    t = agg.select()
    rows.append([POOLED_ROW, "all", t.n, t.n_none, t.n_none_unparsed, t.unresolved_share])
    table = Table(
        "unresolved",
        "Answers that did not geocode (resolved level none), per model and condition; share in % (a fraction in "
        "unresolved.csv)",
        ["Model", "Condition", "n", "Unresolved", "Of them unparsed", "Unresolved (%)"],
        ["text", "text", "int", "int", "int", "pct"],
        rows,
        _join_notes("An unresolved answer has no error distance: it counts as a response but never as a hit, and "
                    "enters no distance statistic (Tables 5-7). 'Of them unparsed': answers of which no place was "
                    "read (also counted as unparsed), so there was nothing to geocode; the others named a place the "
                    "geocoder did not find.", *unresolved_warnings(agg)),
    )
    if len(agg.models) == 1 and len(rows) == 2 and rows[0][2:] == rows[1][2:]:
        # one model in one condition: the pooled row repeats its row; unresolved.csv keeps it (with several
        # conditions it is the model's total over them, a row of its own, kept)
        _without_pooled_row(table, agg.models[0])
    return table


def build_tables(
    agg: GeoHintAggregator,
    *,
    condition: str | None = None,
    baseline: str | None = None,
    n_flips: int = DEFAULT_N_FLIPS,
    n_splits: int = 200,
    seed: int = 0,
    p_reference: str = "normal",
    n_boot: int = DEFAULT_N_BOOT,
    boot_seed: int | None = None,
    n_boot_source: str = N_BOOT_KEY,
) -> list[Table]:
    """Every table the data supports (paired tables only when both conditions are present; the image-paired
    comparisons with the no-context baseline, ``nocontext_near`` and ``building_vs_nocontext``, after Table 7 when
    ``baseline`` and ``condition`` are both present), then the
    cut-off answers (:func:`table_cutoff`) and the answers that did not geocode (:func:`table_unresolved`).
    ``p_reference``: the slope tables' p-value reference
    (``"normal"`` or ``"t"``, :func:`p_reference_note`). ``seed`` seeds Table 3's splits and the permutation
    flips (Tables 8-10 and the image-paired comparisons; each test its own stream derived from the seed and the
    test's label, :func:`_flip_label`); ``boot_seed`` (``[geohint] boot_seed``, an integer >= 0) Table 1's ``n_boot``
    site-bootstrap resamples, None = ``seed`` (as before the setting); ``n_boot_source``: the setting Table 1's
    "no intervals" note names (:func:`no_boot_note`)."""
    dc, db = default_conditions(agg)
    condition, baseline = condition or dc, baseline or db
    tables = [table1(agg, condition, n_boot=n_boot, seed=seed if boot_seed is None else boot_seed,
                     n_boot_source=n_boot_source), table2(agg, condition, baseline), table3(agg, condition, baseline, n_splits=n_splits, seed=seed),
              table4(agg, condition), table5(agg, condition, baseline), table6(agg, condition, p_reference=p_reference),
              table7(agg, condition, baseline, p_reference=p_reference)]
    if baseline in agg.conditions and condition in agg.conditions:
        tables.append(table_nocontext_near(agg, condition, baseline, n_flips=n_flips, seed=seed))
        tables.append(table_building_vs_nocontext(agg, condition, baseline, n_flips=n_flips, seed=seed))
    # Tables 8-10 pair an intervention with the reported condition: never with itself (data of the intervention
    # alone report it as their condition, default_conditions)
    if "forced_warn" in agg.conditions and condition in agg.conditions and condition != "forced_warn":
        tables.append(table_paired(agg, "forced_warn", condition, baseline, name="table8", n_flips=n_flips, seed=seed))
        tables.append(table9(agg, "forced_warn", condition, baseline, n_flips=n_flips, seed=seed))
    if "forced_chain" in agg.conditions and condition in agg.conditions and condition != "forced_chain":
        tables.append(table_paired(agg, "forced_chain", condition, baseline, name="table10", n_flips=n_flips, seed=seed))
    # Table 11 needs no pair (every forced_chain response, seed 000 Sec. 6.3.2), but the answers' text: a judged
    # file's rows are left out (its notes count them), and it is withheld when they are all it has (table11_withheld)
    t11 = table11(agg)
    if t11.rows and not table11_withheld(agg):
        tables.append(t11)
    tables.append(table_cutoff(agg))
    tables.append(table_unresolved(agg))
    return tables


# --- figures ----------------------------------------------------------------------------------
def _new_figure(size_in: tuple[float, float]):
    """A standalone figure and its axes, without pyplot's global state (the live report draws in a worker
    thread; the Agg canvas is used when saving)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=size_in)
    return fig, fig.subplots()


def _save_png(fig, path: str | Path) -> Path:
    """Save ``fig`` as a PNG to a temporary file of its own in the same folder, then rename it over ``path``
    (several processes of a campaign may rewrite the report at once)."""
    return atomic_savefig(fig, path, dpi=120)


def hit_by_band_points(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline", *,
                       n_boot: int = DEFAULT_N_BOOT, seed: int = 0) -> dict[str, list[dict[str, Any]]]:
    """The points of Fig. 2: per regime (legible, illegible) and band, all models pooled, ``rate`` (hit rate,
    fraction; NaN when nothing geocoded), ``lo``/``hi`` (95 % site-bootstrap interval over the regime's sites,
    :func:`site_bootstrap_interval`; NaN without one), ``exact`` (Clopper-Pearson at 0 or 1), ``n`` (responses)
    ``n_sites`` (sites with responses) and ``ci_flag`` (:func:`geoagent.scoring.sdt.boot_site_flag` of
    ``n_sites`` when a bootstrap was drawn: withheld below 5 sites, few-cluster from 5 to 9; "" otherwise). Draws: ``n_boot`` resamples of the regime's sorted sites, seed ``seed``.
    The models whose hit rate in ``condition`` is undetermined (:meth:`GeoHintAggregator.undetermined_models`) are
    left out of every point, as from Tables 8 and 10 (stats43 #1; the caption names them)."""
    groups = _regime_sites(agg, baseline)
    without = agg.undetermined_models(condition)
    out: dict[str, list[dict[str, Any]]] = {}
    for regime in (LEGIBLE, ILLEGIBLE):
        sites = sorted(groups[regime])
        idx = _draws(sites, n_boot, seed)
        pts = []
        for b in BANDS:
            by_site = agg.site_cells(condition=condition, band=b, sites=set(sites), without=without)
            c = agg.select(sites=set(sites), condition=condition, band=b, without=without)
            iv, exact = (None, False)
            if idx is not None and not math.isnan(c.geocoded_hit_rate):
                iv, exact = site_bootstrap_interval({s: (x.hits, x.n) for s, x in by_site.items()}, sites, idx)
            n_sites = sum(1 for x in by_site.values() if x.n)
            pts.append({"rate": c.geocoded_hit_rate, "lo": iv[0] if iv else math.nan, "hi": iv[1] if iv else math.nan,
                        "exact": exact, "n": c.n, "n_sites": n_sites,
                        "ci_flag": boot_site_flag(n_sites) if idx is not None and c.n else ""})
        out[regime] = pts
    return out


def _figure_note(fig, note: str | None) -> None:
    """Lay out ``fig``, with ``note`` (a replay campaign's line, the simulator's warning; one per line) as a small
    (6 pt) caption under the axes when given, the axes starting above it as drawn
    (:func:`geoagent.report.figure_layout.layout_with_caption`, as GeoVerify's Fig. 4). Before, each line of
    ``note`` took a fixed 12 % of the height (at most 30 %), whatever its wrapped lines' drawn height."""
    layout_with_caption(fig, note, fontsize=6)


def figure_hit_by_band(agg: GeoHintAggregator, path: str | Path, condition: str = "forced", baseline: str = "baseline",
                       *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0, note: str | None = None,
                       n_boot_source: str = N_BOOT_KEY, points: dict[str, list[dict[str, Any]]] | None = None) -> Path:
    """Fig. 2 (:func:`hit_by_band_figure`) written as a PNG at ``path`` (atomically); returns ``path``."""
    return _save_png(hit_by_band_figure(agg, condition, baseline, n_boot=n_boot, seed=seed, note=note,
                                        n_boot_source=n_boot_source, points=points), path)


def bars_drawn(points: dict[str, list[dict[str, Any]]]) -> bool:
    """Whether Fig. 2 draws some error bar from ``points`` (:func:`hit_by_band_points`): a point with a rate and
    both ends of its interval (each interval from fewer than 5 sites is withheld: NaN ends)."""
    return any(all(isinstance(q[k], (int, float)) and math.isfinite(q[k]) for k in ("rate", "lo", "hi"))
               for p in points.values() for q in p)


def fig2_bars(points: dict[str, list[dict[str, Any]]], n_boot: int) -> str:
    """What Fig. 2 draws as error bars (:data:`FIG2_BARS`), from its ``points`` (:func:`hit_by_band_points`) and
    ``n_boot`` (its resamples): :data:`FIG2_EMPTY` when no point has an answer (no site has a regime),
    :data:`FIG2_BARS_OFF` when ``n_boot`` is 0, :data:`FIG2_BARS_DRAWN` when some interval is drawn
    (:func:`bars_drawn`), else :data:`FIG2_BARS_WITHHELD`. The figure's subtitle, its caption in report.md and the
    Terms line (:func:`fig2_terms_line`) all follow it."""
    if not any(q["n"] for p in points.values() for q in p):
        return FIG2_EMPTY
    if not n_boot:
        return FIG2_BARS_OFF
    return FIG2_BARS_DRAWN if bars_drawn(points) else FIG2_BARS_WITHHELD


def fig2_sites_note(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline") -> str:
    """The Fig. 2 caption's few-site clause (report.md): ``"; none from fewer than 5 sites, few-cluster from 5 to 9
    (here legible: withheld: 3 sites (< 5))"`` naming each regime line whose points are withheld or flagged
    (:func:`geoagent.scoring.sdt.boot_site_flag` of the regime's sites with answers in ``condition``); the rule
    alone when none is. Sites with answers of the models Fig. 2 pools (:func:`fig2_models`)."""
    groups = _regime_sites(agg, baseline)
    flagged = []
    without = agg.undetermined_models(condition)
    for regime in (LEGIBLE, ILLEGIBLE):
        n = sum(1 for x in agg.site_cells(condition=condition, sites=set(groups[regime]), without=without).values()
                if x.n)
        if n and (flag := boot_site_flag(n)):
            flagged.append(f"{regime}: {flag}")
    text = f"; none from fewer than {BOOT_MIN_SITES} sites, few-cluster from {BOOT_MIN_SITES} to 9"
    return text + (f" (here {'; '.join(flagged)})" if flagged else "")


def fig2_models(agg: GeoHintAggregator, condition: str = "forced") -> list[str]:
    """The models whose answers Fig. 2's points pool (:func:`hit_by_band_points`): every model but those whose hit
    rate in ``condition`` is undetermined (:meth:`GeoHintAggregator.undetermined_models`, stats43 #1)."""
    left_out = set(agg.undetermined_models(condition))
    return [m for m in agg.models if m not in left_out]


def models_pooled_text(models: Sequence[str]) -> str:
    """The figures' and captions' words for the models behind pooled figures: ``"model m-a"`` for one (nothing is
    pooled), ``"3 models pooled"`` for several, ``"no model"`` for none."""
    models = list(models)
    if not models:
        return "no model"
    return f"model {models[0]}" if len(models) == 1 else f"{len(models)} models pooled"


def _fit_title(ax, lines: Sequence[str], *, width_chars: int) -> None:
    """Set ``ax``'s title (9 pt) from ``lines``, each wrapped at ``width_chars`` characters, so that no line runs
    past the figure's edges (a figure 5.5 in wide holds about 75 characters of 9 pt text)."""
    import textwrap

    ax.set_title("\n".join(textwrap.fill(line, width_chars) for line in lines if line), fontsize=9)


#: Fig. 2 writes a point's ``n=`` label over the point below this hit rate (%), under it otherwise
N_LABEL_ABOVE_BELOW = 10.0


def hit_by_band_figure(agg: GeoHintAggregator, condition: str = "forced", baseline: str = "baseline",
                       *, n_boot: int = DEFAULT_N_BOOT, seed: int = 0, note: str | None = None,
                       n_boot_source: str = N_BOOT_KEY, points: dict[str, list[dict[str, Any]]] | None = None):
    """Fig. 2: hit rate by band, one line per regime, all models pooled, with 95 % site-bootstrap percentile
    intervals as error bars (:func:`hit_by_band_points`; the paper draws "95 % binomial intervals", which treat
    every response as independent; resampling sites follows its Sec. 6 rule and the GeoVerify intervals). The
    legend, right of the axes (:func:`geoagent.report.figure_layout.legend_outside`, as Fig. 4's), gives each
    line's sites and responses; each point's ``n=`` label sits under it (over it below
    :data:`N_LABEL_ABOVE_BELOW` %), right of a legible point and left of an illegible one. ``note``: a caption line under the axes (a replay campaign's
    :func:`geoagent.providers.replay.replay_note`), None = none. The subtitle says "no error bars: intervals
    withheld (< 5 sites per regime)" when a bootstrap ran but every interval was withheld (:func:`fig2_bars`).
    ``points``: :func:`hit_by_band_points` of the same arguments when already computed (None: computed here).
    Returns a matplotlib ``Figure`` (not saved)."""
    groups = _regime_sites(agg, baseline)
    pts = points if points is not None else hit_by_band_points(agg, condition, baseline, n_boot=n_boot, seed=seed)
    fig, ax = _new_figure((8.0, 4.2))  # wider than the axes need: the legend stands right of them
    x = np.arange(len(BANDS))
    for regime, marker in ((LEGIBLE, "o"), (ILLEGIBLE, "s")):
        p = pts[regime]
        rates = np.array([q["rate"] for q in p]) * 100
        lo = np.array([q["lo"] for q in p], dtype=float) * 100
        hi = np.array([q["hi"] for q in p], dtype=float) * 100
        err = np.clip(np.nan_to_num(np.vstack([rates - lo, hi - rates])), 0.0, None)
        n = sum(q["n"] for q in p)
        flags = sorted({q["ci_flag"].split(":")[0] for q in p if q["ci_flag"]})
        mark = f"; CI {' / '.join(flags)}" if flags else ""
        ns = len(groups[regime])
        ax.errorbar(x, rates, yerr=err, marker=marker, capsize=4,
                    label=f"{regime} ({ns} site{'' if ns == 1 else 's'}, {n} response{'' if n == 1 else 's'}{mark})")
        for xi, q in zip(x, p):
            if q["n"]:
                y = rates[xi] if np.isfinite(rates[xi]) else 0
                # under its point, or over it near 0 % (under, it ran below the x axis over the tick labels); the
                # legible line's right of its point, the illegible line's left of it: two regimes at one rate (both
                # at 0 %) had their labels drawn over each other (adversarial review s18)
                side = 1 if regime == LEGIBLE else -1
                ax.annotate(f"n={q['n']}", (xi, y), textcoords="offset points", ha="left" if side > 0 else "right",
                            xytext=(5 * side, 4 if y < N_LABEL_ABOVE_BELOW else -10), fontsize=6)
    ax.set_xticks(x, [band_title(b) for b in BANDS])
    ax.set_xlim(-0.3, len(BANDS) - 0.7)  # room for the last point's "n=" label (it ran past the right edge)
    ax.set_xlabel("distance from the site to the reference point")
    ax.set_ylabel("hit rate (%)")
    ax.set_ylim(0, 100)
    # the subtitle wrapped to the figure's width (it ran past both edges); report.md's caption has the whole rule
    state = fig2_bars(pts, n_boot)  # each interval from fewer than BOOT_MIN_SITES sites is withheld
    # a point at 0 % or 100 % has the Clopper-Pearson interval of its pooled count (every resample repeats it)
    cp = "; Clopper-Pearson at 0 % or 100 %" if any(q.get("exact") for p in pts.values() for q in p) else ""
    bars = (f"error bars: 95 % site-bootstrap intervals ({n_boot} resamples){cp}; none from fewer than {BOOT_MIN_SITES} "
            f"sites, few-cluster from {BOOT_MIN_SITES} to 9" if state == FIG2_BARS_DRAWN
            else f"no error bars: intervals withheld (< {BOOT_MIN_SITES} sites per regime)" if state == FIG2_BARS_WITHHELD
            else f"no error bars: {no_boot_setting(n_boot_source)}" if state == FIG2_BARS_OFF
            else "no line: no site has a regime")
    _fit_title(ax, [f"Hit rate by band, {condition}, {models_pooled_text(fig2_models(agg, condition))}", f"({bars})"],
               width_chars=70)
    # right of the axes, as Fig. 4's: placed by matplotlib ("best") it covered the demo's top-right point once the
    # caption was laid out as drawn (session 18)
    legend_outside(ax, fontsize=7)
    _figure_note(fig, note)
    return fig


def figure_echo_heatmap(agg: GeoHintAggregator, path: str | Path, condition: str = "forced", *,
                        note: str | None = None) -> Path:
    """Fig. 3 (:func:`echo_heatmap_figure`) written as a PNG at ``path`` (atomically); returns ``path``."""
    return _save_png(echo_heatmap_figure(agg, condition, note=note), path)


def echo_heatmap_figure(agg: GeoHintAggregator, condition: str = "forced", *, note: str | None = None):
    """Fig. 3: echo rate (%) heatmap, referenceability tier x distance band; ``note`` as in
    :func:`hit_by_band_figure`. Returns a matplotlib ``Figure`` (not saved)."""
    grid = np.array([[agg.select(condition=condition, tier=t, band=b).echo_rate * 100 for b in BANDS] for t in TIERS_ORDER])
    # sized to the number of band columns (about 1.5 in each, plus the tier labels and the colour bar), cells
    # not forced square: at 5 in the band tick labels ran into each other ("0.5–1.5 km1.5–3.0 km")
    fig, ax = _new_figure((2.2 + 1.5 * len(BANDS), 3.5))
    vmax = max(1.0, float(np.nanmax(grid)) if np.isfinite(grid).any() else 1.0)
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0, vmax=vmax, aspect="auto")
    for i in range(len(TIERS_ORDER)):
        for j in range(len(BANDS)):
            v = grid[i, j]
            # a cell without answers is masked, so drawn in the axes' white: its dash in black (white, it vanished)
            colour = "k" if not np.isfinite(v) or v > 0.6 * vmax else "w"
            n = agg.select(condition=condition, tier=TIERS_ORDER[i], band=BANDS[j]).echo_n
            ax.text(j, i, f"{DASH if np.isnan(v) else f'{v:.1f}'}\nn={n}", ha="center", va="center", color=colour,
                    fontsize=8)
    ax.set_xticks(range(len(BANDS)), [band_title(b) for b in BANDS])
    ax.set_yticks(range(len(TIERS_ORDER)), [TIER_LABELS.get(t, t) for t in TIERS_ORDER])  # as Table 4's rows
    ax.set_xlabel("band")
    ax.set_ylabel("referenceability tier")
    _fit_title(ax, [f"Echo rate (%), {condition}, echo rule: {agg.echo_rule}",
                    f"{models_pooled_text(agg.models)}; n = answers with an echo verdict"], width_chars=70)
    fig.colorbar(im, ax=ax, label="echo rate (%)")
    _figure_note(fig, note)
    return fig


# --- writing ----------------------------------------------------------------------------------
def _answers(n: int, what: str = "answer") -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"


def left_out_text(agg: GeoHintAggregator) -> str:
    """What the tables leave out of the scored answers, with the total: ``"left out of every table: 2 answers cut
    off at the output-token limit with nothing parsed (no answer; table 'cutoff') and 1 context answer whose
    reference point has no hint distance; 12 answers scored in all"``; "" when nothing was left out (then the
    scored responses are every scored answer). Counts from :meth:`GeoHintAggregator.n_no_answer` and
    :attr:`GeoHintAggregator.n_without_ladder_point`; the total is every added answer (``len(agg.keys)``, the
    ``n`` of the cut-off counts). The forced_chain ones among the no answers and those without a hint distance are
    named as counted by Table 11 (:meth:`GeoHintAggregator.compliance`)."""
    withheld = bool(table11_withheld(agg))

    def kept(cells: dict[tuple[str, str], Any]) -> str:
        # Table 11 alone counts the checklist ones (forced_chain: GeoHintAggregator.compliance), when it is given
        k = 0 if withheld else sum(c.n_text_read for (_m, cond), c in cells.items() if cond in CHECKLIST_CONDITIONS)
        return f" (Table 11 counts the {k} forced_chain one{'s' if k != 1 else ''}: every forced_chain response)" if k else ""

    parts = []
    if n := agg.n_no_answer():
        parts.append(f"{_answers(n)} {no_answer_words(agg.n_no_answer_withheld())} (no answer; table "
                     f"'cutoff'){kept(agg.no_answer_cells)}")
    if n := agg.n_without_ladder_point:
        parts.append(f"{_answers(n, 'context answer')} whose reference point has no hint distance"
                     f"{kept(agg.without_ladder_cells)}")
    if not parts:
        return ""
    return f"left out of every table: {' and '.join(parts)}; {_answers(len(agg.keys))} scored in all"


def _names_text(names: Sequence[str]) -> str:
    """``names`` comma-joined, or ``"none"`` when there are none (walk43 #5: an interim report with no answer scored
    yet said "models: ; conditions: ." and "(every condition: ; ...")."""
    return ", ".join(names) if names else "none"


def counts_line(agg: GeoHintAggregator, condition: str) -> str:
    """The header's sentence saying what its count of scored responses is: the answers the tables count
    (:meth:`GeoHintAggregator.select`: every condition, and per condition), which of them Table 1's n counts
    (``condition``'s, per model) and what was left out of every table (:func:`left_out_text`), e.g. ``"Those 9
    scored responses are the answers the tables count (every condition: baseline 3, forced 6; Table 1's n counts a
    model's forced ones); left out of every table: ...; 12 answers scored in all."`` (counts of answers)."""
    per = _names_text([f"{c} {agg.select(condition=c).n}" for c in agg.conditions])
    left = left_out_text(agg)
    return (f"Those {agg.select().n} scored responses are the answers the tables count (every condition: {per}; "
            f"Table 1's n counts a model's {condition} ones)" + (f"; {left}" if left else "") + ".")


def unresolved_line(agg: GeoHintAggregator) -> str:
    """One sentence: how many answers (all models and conditions) did not geocode, pointing to the table."""
    t = agg.select()
    unparsed = (f"; {t.n_none_unparsed} of them unparsed (no place read, so nothing to geocode: the same answers as "
                "among the unparsed ones below)" if t.n_none_unparsed else "")
    return (f"Answers that did not geocode (resolved level none): {t.n_none} of {t.n}"
            + (f" ({100 * t.unresolved_share:.1f} %)" if t.n else "") + unparsed
            + "; per model and condition in the table 'unresolved' (unresolved.csv).")


def geocoder_rules_text(counts: Mapping[int | None, int]) -> str:
    """``counts`` (geocoding rules version -> answers it located, :attr:`GeoHintAggregator.geocoder_rules`) in words,
    newest version first, the answers that record none last: ``"120 by version 14, 30 by version 13, 4 with none
    recorded (located before version 14)"``."""
    from geoagent.geohint.geocode import GEOCODER_RULES_RECORDED_FROM

    parts = [f"{counts[v]} by version {v}" for v in sorted((v for v in counts if v is not None), reverse=True)]
    if counts.get(None):
        parts.append(f"{counts[None]} with none recorded (located before version {GEOCODER_RULES_RECORDED_FROM})")
    return ", ".join(parts)


def geocoder_rules_line(agg: GeoHintAggregator) -> str | None:
    """``report.md``'s sentence on the geocoding rules that located the answers the tables count, when they are more
    than one version (a campaign resumed across a rules change: fixgeohint42 #1); None when every answer shares one
    (or none is counted). Per row: ``extra.geocoder_rules`` in the export."""
    counts = {v: n for v, n in agg.geocoder_rules.items() if n}
    if len(counts) < 2:
        return None
    return (f"Geocoding rules: the {sum(counts.values())} answers the tables count were located by more than one "
            f"version: {geocoder_rules_text(counts)}; hits, error km and unresolved counts pool them (per row: "
            "extra.geocoder_rules; CHANGELOG.md, GeoHint geocoding rules).")


def geocoder_rules_warning(agg: GeoHintAggregator, campaign: str | None, current: int | None = None) -> str | None:
    """The run summary's ``warning:`` while any answer the tables count was located by other geocoding rules than
    ``current`` (default this geoagent's, :data:`geoagent.geohint.geocode.GEOCODER_RULES_VERSION`), read from the
    stored rows at every run (the aggregate the summary already builds: no extra pass), so a re-run, a second
    ``--stages`` process or another machine of the campaign says it too, and it is gone once no such answer is left
    (fixgeohint42 #2, upgrade41 #6: the rules-change warning was printed once, by the first upgraded run, counting
    answers that run's refresh geocoded again). ``campaign``: named in the line (None: not named). None when there
    is none."""
    from geoagent.geohint.geocode import GEOCODER_RULES_VERSION

    current = GEOCODER_RULES_VERSION if current is None else current
    other = {v: n for v, n in agg.geocoder_rules.items() if n and v != current}
    if not other:
        return None
    n, total_n = sum(other.values()), sum(agg.geocoder_rules.values())
    how_many = f"{n} of the {total_n} answers" if n < total_n else f"all {n} answer{'s' if n != 1 else ''}"
    mix = ("located answers (hits, error km, unresolved) mix versions" if n < total_n else
           "answers the campaign adds would mix versions")
    named = f"campaign {campaign}: " if campaign else ""
    return (f"warning: {named}{how_many} the report counts {'was' if n == 1 else 'were'} located by "
            f"other geocoding rules than this geoagent's (version {current}): {geocoder_rules_text(other)}; they keep "
            f"them, and answers geocoded from now on use version {current}, so {mix} (per row: extra.geocoder_rules)."
            " No model call is affected; to locate every answer under one version, run the campaign under a new "
            "[campaign] name (which repeats its model calls).")


def unparsed_line(agg: GeoHintAggregator) -> str:
    """One sentence: how many scored answers (all conditions) were unparsed (no city, area or building read:
    ``parse_ok`` False; each a response and a miss, Terms' 'unparsed'), per model; GeoVerify's table counts its
    parse failures likewise. An answer cut off (or stopped by the provider's content filter) with nothing parsed is no
    answer and not among them (table 'cutoff')."""
    t = agg.select()
    per = ", ".join(f"{m} {agg.select(model=m).n_parse_fail}" for m in agg.models)
    return (f"Unparsed answers (no city, area or building read; each counts as a response and a miss, see unparsed): "
            f"{t.n_parse_fail} of {t.n}" + (f" ({100 * t.n_parse_fail / t.n:.1f} %)" if t.n else "")
            + (f"; per model: {per}" if per else "") + ".")


def _simulated_note(names: Sequence[str]) -> str:
    from geoagent.sandbox.launch import simulated_note

    return simulated_note(list(names), task="geohint")


def write_report(
    agg: GeoHintAggregator,
    out_dir: str | Path,
    *,
    condition: str | None = None,
    baseline: str | None = None,
    n_flips: int = DEFAULT_N_FLIPS,
    n_splits: int = 200,
    seed: int = 0,
    figures: bool = True,
    missing: list[dict] | None = None,
    interim: str | None = None,
    p_reference: str = "normal",
    answers_queued: int = 0,
    answers_left_by: str | None = None,
    image_note: str | None = None,
    simulated: Sequence[str] = (),
    config_mix: Sequence[str] = (),
    scope_note: str | None = None,
    sampling_note: str | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    boot_seed: int | None = None,
    replay_note: str | None = None,
    n_boot_source: str = N_BOOT_KEY,
    source_note: str | None = None,
    import_notes: Sequence[str] = (),
) -> list[Table]:
    """Write ``report.md``, ``<table>.csv`` and the figures under ``out_dir``; return the tables. The CSV of a table
    of :data:`REPORT_TABLE_NAMES` that this report does not build (left by an earlier report of another design) is
    removed; no other file is touched.
    ``n_boot``: site-bootstrap resamples of Table 1's and Fig. 2's intervals (0 = none: the notes name
    ``n_boot_source``, :func:`no_boot_note`), seeded by ``boot_seed``
    (``[geohint] boot_seed``, an integer >= 0; None = ``seed``, the ``[campaign] seed``, as before the setting);
    ``seed`` also seeds Table 3's splits and the permutation flips of Tables 8-10 and of the image-paired
    comparisons (each test its own stream derived from ``seed`` and the test's label, :func:`_flip_label`), whatever
    ``boot_seed`` is.

    ``p_reference``: p-value reference of the slope tables, ``"normal"`` or ``"t"`` (module doc); named in
    the header of ``report.md``. The header's "N scored responses" is the answers the tables count (every
    condition), :func:`counts_line` says so, per condition, and what was left out of every table (no answers,
    answers without a hint distance) out of how many scored answers; the header also counts the answers cut
    off at the output-token limit (of every scored answer) and repeats :func:`truncation_warnings`.

    Files are written to a temporary name and renamed, so a reader never sees a half-written report.
    ``missing``: dead-lettered work as dicts ``model, key, edge, reason`` (issue 2 point 10: reports count
    it); counted per model at the top of ``report.md`` and listed in ``missing.csv``.
    ``interim``: a sentence saying the run stopped with work still pending (interrupted, budget), shown as
    a banner at the top of ``report.md``; None for a finished run.
    ``simulated``: names of models whose answers came from the simulator
    (:func:`geoagent.sandbox.launch.simulated_models`): a bold note under the title says the figures (echo
    rate included: the simulated answers repeat the hint by design) describe the simulator, not a model; the
    figures carry it as a caption under the axes, and ``report_note.txt`` beside the CSV tables says it for them
    (:func:`geoagent.report.write_csv_note`; with the source and replay lines, and always the reported and
    no-context conditions and the echo rule, which the CSVs do not name).
    ``answers_queued``: answers still queued for the geocoder (``answers`` edge, ready or leased); with the
    dead letters of that edge (from ``missing``) they make :func:`geocoder_failure_warning` in the header.
    ``answers_left_by``: the stop that left those answers queued (``"the interrupt"``), so they are not
    counted as failed lookups; None when the geocoder's own failure left them (its ``left_by``).
    ``image_note``: the plan's line about images sent as placeholder pixels (no file under the image folder,
    :mod:`geoagent.image_files`), a warning in the header; None when every image had its file.
    ``config_mix``: one line per model whose answers were made under more than one set of request settings
    (a config changed between runs; :func:`geoagent.runtime.drift.params_mix_lines`), a warning in the header:
    every table pools them.
    ``sampling_note``: a sentence on the models that answer a share of the units (their n is smaller, the rates
    are not reweighted; :func:`geoagent.geohint.campaign.sampling_note`).
    ``scope_note``: a sentence on stored answers left out because their requests are no longer in the plan
    (:meth:`geoagent.runtime.scope.ScoredScope.note`), in bold under the title; None when none were.
    ``replay_note``: the line of a campaign with replay models (:func:`geoagent.providers.replay.replay_note`:
    the replayed files, their responses, not the paper's figures), first under the title; None or "" without.
    ``source_note``: the re-score route's line naming the file it read, whether it is a sample, and whether its
    condition is the paper's reported schema (:func:`geoagent.geohint.judged.source_note`); first under the title.
    ``import_notes``: the re-score route's notes on its input (rows left out as malformed, each ``file:line:
    reason``), counted in the header and listed (the first 200) in an "Import notes" section at the end.
    The header's ``Withheld:`` line (:func:`withheld_tables`) names each table left out or left without rows and
    why; Fig. 2's caption says when it has no regime line (:func:`empty_figure_note`).
    """
    from geoagent.runtime.drift import MIX_WARNING

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    dc, db = default_conditions(agg)
    condition, baseline = condition or dc, baseline or db
    bseed = seed if boot_seed is None else boot_seed
    tables = build_tables(agg, condition=condition, baseline=baseline, n_flips=n_flips, n_splits=n_splits, seed=seed,
                          n_boot=n_boot, boot_seed=bseed, n_boot_source=n_boot_source,
                          p_reference=p_reference)
    summary = agg.summary()
    cut = total(agg.truncation)
    # Fig. 2's points once: the figure, its caption and the Terms line say what it draws (fig2_bars)
    fig2_points = hit_by_band_points(agg, condition, baseline, n_boot=n_boot, seed=bseed) if figures else None
    fig2 = fig2_bars(fig2_points, n_boot) if fig2_points is not None else None
    from geoagent.report import figure_note, write_csv_note
    from geoagent.sandbox.launch import simulated_note

    sim_note = _simulated_note(simulated) if simulated else ""
    csv_names = [f"{t.name}.csv" for t in tables] + (["missing.csv"] if missing is not None else [])
    # what every table is of, for a reader of the CSVs alone (walk27b #2: two echo rules gave CSVs alike but for
    # their numbers, and only report.md named the rule and the condition)
    design = (f"These tables: reported condition {condition}, no-context condition {baseline}. "
              f"{echo_rule_note(agg)}")
    if interim:
        # live42 #2: the interim line before any CSV, so a kill among the files below leaves no CSV of partial sums
        # without a word that it is one (the note was written after the CSVs: a kill in the first live rewrite left
        # them with no report.md and no report_note.txt)
        write_csv_note(out, [source_note, replay_note, sim_note, design], csv_names, interim=interim)
    md = [
        "# GeoHint report",
        "",
        *([f"**{source_note}**", ""] if source_note else []),
        *([f"**{replay_note}**", ""] if replay_note else []),
        *([f"**Interim report: {interim}**", ""] if interim else []),
        *([f"**Placeholder images: {image_note}**", ""] if image_note else []),
        *([f"**{_simulated_note(simulated)}**", ""] if simulated else []),
        *([f"**Warning: {MIX_WARNING}:**", "", *[f"- {ln}" for ln in config_mix], ""] if config_mix else []),
        *([f"**{scope_note}**", ""] if scope_note else []),
        *([f"**{count_text(len(import_notes), 'import note')} on the files read (rows left out as malformed, and "
             "the like): see Import notes at the end.**", ""] if import_notes else []),
        f"{count_text(agg.select().n, 'scored response')}, {count_text(summary['sites'], 'site')}, models: "
        f"{_names_text(summary['models'])}; conditions: {_names_text(summary['conditions'])}. Reported condition: "
        f"{condition}; no-context condition: {baseline}.",
        "",
        *([sampling_note, ""] if sampling_note else []),
        counts_line(agg, condition),
        "",
        echo_rule_note(agg),
        "",
        regime_threshold_note(agg, baseline),
        "",
        f"Slope p-values (Tables 6-7): {p_reference} reference"
        + (" (Student's t with G - 1 df, G = site clusters)." if p_reference == "t" else " (statsmodels' default)."),
        "",
        f"Answers cut off at the output-token limit: {cut.n_truncated} of {cut.n} scored answers"
        + (f" ({100 * cut.share:.1f} %)" if cut.n else "")
        + (f"; {cut.n_truncated_unparsed} of them with nothing parsed: no answer, left out of every rate (never a "
           "miss)" if cut.n_truncated_unparsed else "")
        + "; per model and condition in the table 'cutoff' (cutoff.csv).",
        "",
        *[x for w in truncation_warnings(agg) for x in (f"**{w}**", "")],
        unresolved_line(agg),
        "",
        *([rules_line, ""] if (rules_line := geocoder_rules_line(agg)) else []),
        unparsed_line(agg),
        "",
        *[x for w in unresolved_warnings(agg) for x in (f"**{w}**", "")],
        *[x for w in zero_err_warnings(agg) for x in (f"**{w}**", "")],
        *[x for w in [geocoder_failure_warning(sum(m.get("edge") == C.EDGE_ANSWERS for m in missing or []),
                                               answers_queued, left_by=answers_left_by)] if w
          for x in (f"**{w}**", "")],
        *([no_regime_note(agg, baseline), ""] if no_regime_note(agg, baseline) else []),
        *([left_out_models, ""] if (left_out_models := regime_left_out_note(agg, baseline)) else []),
        *([kept_unparsed, ""] if (kept_unparsed := regime_unparsed_note(agg, baseline)) else []),  # stats43 #3
        *([f"**{withheld}**", ""] if (withheld := withheld_tables(agg, tables, condition, baseline)) else []),
        "Terms:",
        "",
        # the models Fig. 2 pools, as its title and caption name them: one left after the undetermined ones are left
        # out is "model m-a", not "models pooled" (rev43b #3)
        *[f"- {line}" for line in legend_for(agg.regime_threshold, fig2=fig2, n_boot_source=n_boot_source,
                                             models=fig2_models(agg, condition))],
        "",
    ]
    if missing is not None:
        per_model: dict[str, int] = {}
        for m in missing:
            per_model[str(m.get("model"))] = per_model.get(str(m.get("model")), 0) + 1
        if missing:
            md += [f"**Incomplete: {len(missing)} request(s) missing** (dead-lettered after retries or a permanent "
                   "error; excluded from every table, never scored as answers): "
                   + ", ".join(f"{k}: {v}" for k, v in sorted(per_model.items())) + ". See missing.csv and `run.py dead`.", ""]
        else:
            md += ["Missing requests (dead-lettered): none.", ""]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model", "edge", "key", "reason"])
        for m in missing:
            w.writerow([m.get("model"), m.get("edge"), m.get("key"), m.get("reason")])
        _atomic_write(out / "missing.csv", buf.getvalue())
    if summary.get("without_ladder_point"):
        md += [f"{summary['without_ladder_point']} context responses name a reference point that is not in its site's "
               "ladder (no hint distance) and are left out of every table, as in the release's analysis: its "
               "analysis/two_regimes.py (load) keeps only rows whose context is 'none' or found in the site's ladder, "
               "so they count in none of its tables either, the tier and band columns of Tables 1 and 4 included, "
               "although their context labels carry a tier and band (Tables 5-7 need the hint distance anyway).", ""]
    for t in tables:
        md.append(t.to_markdown())
        _atomic_write(out / f"{t.name}.csv", t.to_csv())
    for name in sorted(set(REPORT_TABLE_NAMES) - {t.name for t in tables}):
        # a table an earlier report wrote here and this one does not build (its condition is no longer in the
        # plan, e.g. forced_warn removed from the config): its CSV would state figures of another design
        (out / f"{name}.csv").unlink(missing_ok=True)
    write_csv_note(out, [source_note, replay_note, sim_note, design], csv_names, interim=interim)
    if figures:
        # the figures' caption: the simulator's warning without GeoHint's echo paragraph (report.md has it)
        fig_note = figure_note(replay_note, simulated_note(list(simulated)) if simulated else "",
                               interim=bool(interim))
        empty = empty_figure_note(agg, baseline)
        figure_hit_by_band(agg, out / "fig_hit_by_band.png", condition, baseline, n_boot=n_boot, seed=bseed,
                           note="\n".join(x for x in (fig_note, empty) if x) or None, n_boot_source=n_boot_source,
                           points=fig2_points)
        figure_echo_heatmap(agg, out / "fig_echo_heatmap.png", condition, note=fig_note)
        pooled = models_pooled_text(fig2_models(agg, condition))
        fig2_left_out = pooled_left_out_note(agg, condition)  # stats43 #1
        md += ["![hit rate by band](fig_hit_by_band.png)", "",
               ((f"Hit rate by band per regime, {pooled}; error bars are 95 % percentile intervals from "
                 f"{n_boot} resamples of the regime's sites (seed {bseed}; a point at 0 % or 100 % gets the "
                 f"Clopper-Pearson interval of its pooled count){fig2_sites_note(agg, condition, baseline)}")
                if fig2 == FIG2_BARS_DRAWN
                else (f"Hit rate by band per regime, {pooled}; no error bars: every interval is withheld "
                      f"({n_boot} resamples drawn, seed {bseed}){fig2_sites_note(agg, condition, baseline)}")
                if fig2 == FIG2_BARS_WITHHELD
                else f"Hit rate by band per regime, {pooled}; no error bars ({no_boot_setting(n_boot_source)})"
                if fig2 == FIG2_BARS_OFF
                else f"Hit rate by band per regime, {pooled}; no line and no error bar")
               + "; the legend gives the sites and responses per line." + (f" {empty}" if empty else "")
               + (f" {fig2_left_out}" if fig2_left_out else ""),
               "", f"Echo rate per tier and band, {models_pooled_text(agg.models)}; n under each value = "
               f"context answers with an echo verdict.", "", "![echo rate heatmap](fig_echo_heatmap.png)", ""]
    md += import_notes_section(import_notes, f"{count_text(len(import_notes), 'import note')} on the files read: rows "
                                             "named here are left out of every table.")
    _atomic_write(out / "report.md", "\n".join(md))
    return tables


#: every table :func:`build_tables` can build (``<name>.csv`` in the report folder); :func:`write_report` removes the
#: CSV of each one it did not build this time, so the folder holds the current report's tables only
REPORT_TABLE_NAMES = ("table1", "table2", "table3", "table4", "table5", "table6", "table7", "nocontext_near",
                      "building_vs_nocontext", "table8", "table9", "table10", "table11", "cutoff", "unresolved")


def empty_figure_note(agg: GeoHintAggregator, baseline: str) -> str:
    """Fig. 2's caption when it has no regime line (no site has a regime: no no-context answers, or none that
    geocoded), else ""."""
    if agg.regimes(condition=baseline):
        return ""
    return (f"No regime line: these data hold no no-context answers that geocoded (condition {baseline!r}), so no "
            "site is legible or illegible and the plot is empty (its legend says 0 sites); Table 1's band columns "
            "give each model's hit rate by band without the split.")


def withheld_tables(agg: GeoHintAggregator, tables: Sequence[Table], condition: str, baseline: str) -> str:
    """The report header's ``"Withheld: ..."`` line: each table of the report's set (docs/geocontext-release.md,
    "The GeoHint report's tables") that :func:`build_tables` left out, or wrote with no rows, and why (the data
    hold no answers of the condition it needs); "" when none. Source: :func:`build_tables`' conditions."""
    names = {t.name: t for t in tables}
    conds = set(agg.conditions)
    parts = []
    if condition not in conds:
        parts.append(f"every table of condition {condition!r} (no answers of it in these data)")
    if "nocontext_near" not in names:
        parts.append(f"nocontext_near and building_vs_nocontext (they compare with no-context answers: there are "
                     f"no no-context answers, condition {baseline!r}, in these data)")
    t3 = names.get("table3")
    if t3 is not None and not t3.rows:
        why = (f"no site has a regime: no no-context answers that geocoded ({baseline!r}) in these data"
               if not agg.regimes(condition=baseline) else "no regime has both near-band and no-context answers")
        parts.append(f"Table 3's rows (header only: its rows are per regime, and {why})")
    if "table8" not in names:
        parts.append(f"Tables 8-9 (they pair forced_warn answers with {condition} ones; no forced_warn answers "
                     "in these data)" if "forced_warn" not in conds or condition not in conds else
                     f"Tables 8-9 (they pair forced_warn answers with those of another condition; {condition} is the "
                     "reported one here, as these data hold no forced answers)")
    has_chain = any(c in conds for c in CHECKLIST_CONDITIONS) or any(
        c in CHECKLIST_CONDITIONS for cells in (agg.without_ladder_cells, agg.no_answer_cells) for _m, c in cells)
    if not has_chain:
        parts.append("Tables 10-11 (they need forced_chain answers; none in these data; Table 11 of a release comes "
                     "from its raw forced_chain responses: python -m geoagent.geohint.raw_import)")
    else:
        if "table10" not in names and condition in conds and "forced_chain" in conds:
            parts.append(f"Table 10 (it pairs forced_chain answers with those of another condition; {condition} is the "
                         "reported one here, as these data hold no forced answers)")
        elif "table10" not in names and condition in conds:
            parts.append(f"Table 10 (it pairs forced_chain answers with {condition} ones; these data hold only the "
                         "no-context variant forced_chain_baseline)")
        if reason := table11_withheld(agg):
            parts.append(reason)
    return "Withheld: " + "; ".join(parts) + "." if parts else ""


def report_console(file=None):
    """A rich Console for report output: the terminal's width on a terminal; otherwise (output redirected to a
    file or a pipe) an unbounded width, so tables keep their natural width and no cell is cut to fit 80
    columns. ``file``: where to write (default ``sys.stdout``)."""
    from rich.console import Console

    console = Console(file=file)
    if console.is_terminal:
        return console
    return Console(file=file, width=UNBOUNDED_WIDTH)


def render_text(renderable) -> str:
    """``renderable`` (a rich table) as plain text at its natural width (no colour codes, nothing cut)."""
    from rich.console import Console

    console = Console(file=io.StringIO(), width=UNBOUNDED_WIDTH, force_terminal=False, color_system=None)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]


def _no_figures(t: Table) -> bool:
    """Whether ``t`` has no row, or only rows whose every number is missing (None, NaN) or a zero count."""
    def empty(v: Any) -> bool:
        if v is None or isinstance(v, str):
            return True
        if isinstance(v, float):
            return math.isnan(v)
        if isinstance(v, (tuple, list)):
            return all(empty(x) for x in v)
        return isinstance(v, int) and v == 0
    return all(empty(v) for row in t.rows for v in row)


def print_report(tables: Sequence[Table], console=None, *, legend: bool = True,
                 regime_threshold: float = DEFAULT_THRESHOLD) -> None:
    """Print the tables (and, with ``legend``, the terms of :func:`legend_for` for ``regime_threshold``) with rich.
    The terms leave out the line on ``fig_hit_by_band.png``: the terminal shows no figure (``report.md``, beside
    it, says what it draws).

    ``console``: default :func:`report_console` (terminal width on a terminal, natural table width when
    redirected)."""
    console = console or report_console(sys.stdout)
    for t in tables:
        if t.shown is None and _no_figures(t):
            # a table with no row or only empty ones (Table 2 and 3 without a regime split: newuser39 #8d printed 10
            # rows of dashes): its title and notes say why, as report.md's "Withheld:" line does
            console.print(f"{t.title}: no figures", markup=False)
            for line in t.notes_lines():
                console.print(f"  {line}", markup=False, soft_wrap=not console.is_terminal)
            continue
        console.print(t.to_rich())
    if legend:
        console.print("Terms:", markup=False)
        for line in legend_for(regime_threshold, fig2=None):
            console.print(f"  {line}", markup=False, soft_wrap=not console.is_terminal)


def _atomic_write(path: Path, text: str) -> None:
    # a temporary file of its own per write: several processes of a campaign may rewrite the report at once
    atomic_write_text(path, text)
