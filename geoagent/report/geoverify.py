"""GeoVerify report: the Table 12 layout (one column per model plus pooled) as terminal text (rich),
Markdown and CSV, and the psychometric plot (d' against decoy distance, one line per model, d' = 1 line).

Rendered from :class:`geoagent.scoring.sdt.ModelScores` (i.e. from the aggregator's counts, never from
ad-hoc recomputation). :func:`write_report` writes every file atomically, so it can be called again
and again while a campaign runs (live refresh).

When the scores carry site-bootstrap intervals (``ModelScores.ci``, from ``n_boot > 0``), H, F, the
control-arm F, F per decoy band, d' per band and c are shown as ``value [lo, hi]`` in Markdown and the
terminal (rates in %), and as separate ``<model>_lo`` / ``<model>_hi`` columns in the CSV (always
present, empty without a bootstrap). Those and ``<model>`` hold numbers only, so a CSV reader infers them
as numeric; text values (delta_1, the read-out verdict) are in ``<model>_text``. The rows "F by decoy distance" are an addition to Table 12.

Trials behind each rate: in Markdown and the terminal every rate (H, F, control F, F per band) is followed by
``(k/n)``, the answers "yes" and the parsed trials it is computed from (omitted when n is 0, where the rate
shows "-"); the CSV has them as rows of their own in the section "Trials behind the rates" (``n signal``,
``n signal accepted``, ``n decoy``, ``n decoy accepted``, ``n control: ...``, ``n decoy <band>``,
``n decoy accepted <band>``; integers, one per cell).

delta_1 is ordinal (a band or "none"), so its bootstrap interval is a range of bands
(``ModelScores.delta_1_ci``, :mod:`geoagent.scoring.sdt`): ``0.3–0.7 km [0.15–0.3 km, none]`` in Markdown
and the terminal, and the band labels (or ``none``) in the ``_text`` cells of the CSV rows ``delta_1 range lo``
and ``delta_1 range hi`` right after the delta_1 row.

The CSV is for machines: rates are fractions and band labels are the data's ASCII spelling (``0.7-1.5km``,
as in the scored results and the delta_1 value); Markdown and the terminal text (``.txt``) show bands as
``0.7–1.5 km``.

Both the Markdown and the terminal table end with a legend of the terms (:func:`legend_for`), naming the claim
tolerance tau the scores were computed at (``ModelScores.tau_km``) where H and F are defined.

The section "Cut off at the output-token limit" counts answers the provider stopped at ``max_output_tokens``
(``ModelScores.truncation``, per arm; :mod:`geoagent.scoring.truncation`): over all arms and, when control
arms were answered, per arm, the answers cut off and those cut off with nothing parsed ("cut off and unparsed":
no answer, outside H and F), each as ``k of N`` (N = the arm's answers; the per-arm share with it), and how many
answers carry no finish reason (e.g. a replayed record without one; counted as not cut off). The CSV gives k and
N as numbers in rows of their own (``answers (all arms)``, ``answers, <arm>``, ``answers cut off, <arm>``,
``cut off and unparsed, <arm>``). When a
model's share exceeds 1 % (:data:`~geoagent.scoring.truncation.WARN_SHARE`) the Markdown and terminal
tables carry a warning line naming the setting to raise (:func:`truncation_warnings`).

Small n: a band's d' whose decoy trials in the band, or the signal trials behind H, number fewer than
:data:`~geoagent.scoring.sdt.SMALL_N_TRIALS` (20; the reason is in :mod:`geoagent.scoring.sdt`) is marked
:data:`SMALL_N_MARK` in Markdown and the terminal, and so is a delta_1 at such a band; a line per model below
the table names the bands and counts (:func:`small_n_warnings`). The CSV has ``small n`` in the d' row's
``<model>_text`` cell and a text row ``delta_1 small n`` after delta_1 when any column has a flagged band: ``yes``
exactly where the table's delta_1 cell carries the mark (:func:`delta_1_marked`, a rule of trial counts: a ``none``
shown without a range carries it too), ``no`` elsewhere; the Markdown table says so
(:data:`DELTA_SMALL_N_DEFINITION`). The statistics themselves are unchanged. † is about trials only: a value shown without brackets in
a run with a site bootstrap (e.g. a nearest-band d' whose decoys come from fewer than 5 sites) is named, with the
reason that applies, under a line giving every reason an interval is withheld (:func:`withheld_lines`).

One model: with exactly one model column (:func:`one_model`), the pooled column would repeat it value for value
(the pool of one model is that model: the same trials, the same site resamples), so Markdown, the terminal text,
the console summary and the figure leave it out (:func:`shown_scores`) and the table says so once
(:func:`one_model_note`; the figure's caption, :data:`ONE_MODEL_FIGURE_NOTE`). The CSV keeps its ``pooled``
columns unchanged, so a reader of several campaigns' CSV files finds them in every one.

Source: seed 000 Sec. 5.3-5.4, 6.4, Table 12 and Figure 4.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from geoagent import constants as C
from geoagent.data.model import band_edges, decoy_band_labels
from geoagent.files import atomic_savefig, atomic_write_text
from geoagent.report import import_notes_section
from geoagent.report.figure_layout import layout_with_caption, legend_outside
from geoagent.scoring.sdt import (ARM_BLANK, ARM_MAIN, ARM_MISMATCH, BOOT_FEW_SITES, BOOT_MIN_SITES, BOOT_SITES_RULE,
                                  CI_MIN_SITES, DELTA_UNDEFINED,
                                  POOLED, SMALL_N_TRIALS, UNCHECKED_MARK, ModelScores, delta_1_small_n,
                                  mean_model_dprime, small_n_bands)
from geoagent.scoring.truncation import LEGEND_LINE as TRUNCATION_LEGEND
from geoagent.scoring.truncation import TruncationCount, total, warning_lines
from geoagent.textfmt import count_text, fixed_text

TABLE_MD = "geoverify_table.md"
#: the title of geoverify_table.md (seed 000 Table 12)
TABLE_TITLE = "Table 12: GeoVerify, signal detection by model (H, F, d', c, delta_1 by decoy band)"
TABLE_CSV = "geoverify_table.csv"
TABLE_TXT = "geoverify_table.txt"
PLOT_PNG = "geoverify_dprime.png"
FAILURES_CSV = "geoverify_parse_failures.csv"
MISSING_CSV = "geoverify_missing.csv"
#: console width for the terminal text: rich tables keep their natural width, so nothing is cut or wrapped
UNBOUNDED_WIDTH = 10_000

def _band_title(label: str) -> str:
    return label.replace("km", " km").replace("-", "–")


def _tau_m_text(tau_km: float) -> str:
    """The tolerance ``tau_km`` (km) in metres, as the report writes it: ``150 m``, ``99.9 m``."""
    return f"{round(float(tau_km) * 1000.0, 3):g} m"


def band_gap_text(band: str, lo_km: float, tau_km: float, *, source: str | None = None) -> str:
    """The warning on a decoy ``band`` whose trials start at ``lo_km`` (km), above the band's lower edge
    (:func:`geoagent.scoring.sdt.band_gaps`, fixverify43 #2), at the claim tolerance ``tau_km`` (km); ``source``
    (a file) names where the trials come from, if given."""
    edges = band_edges(band)
    edge, start = _tau_m_text(edges[0] if edges else tau_km), _tau_m_text(lo_km)
    return (f"{source + ': ' if source else ''}Band gap ({_band_title(band)}): these trials hold no decoy between "
            f"{edge} and {start}: the band's decoys are labelled from {start} on (a trial table built at tau = "
            f"{start}, e.g. the release's, scored at tau = {_tau_m_text(tau_km)}), so its F, d' and delta_1 describe "
            f"decoys from {start} on, not from tau. Build the trials at this tau ([geoverify] trials = \"build\") to "
            f"probe {edge} to {start}.")


def report_band_gaps(scores: Mapping[str, ModelScores]) -> dict[str, float]:
    """The bands the scored trials cover only from above their lower edge (``ModelScores.band_gaps``, the same for
    every column of one scoring), ``{band: lo_km}``; {} without scores."""
    return next((dict(s.band_gaps) for s in scores.values()), {})


def band_gap_lines(scores: Mapping[str, ModelScores]) -> list[str]:
    """One warning per band with a gap (:func:`band_gap_text`), and one per pooled band whose H and F come from
    different models (:func:`pooled_mix_lines`), shown above the report's tables and in the console summary; []
    when none."""
    tau = report_tau_km(scores)
    return [*(band_gap_text(b, lo, tau) for b, lo in report_band_gaps(scores).items()), *pooled_mix_lines(scores)]


def pooled_mix_lines(scores: Mapping[str, ModelScores]) -> list[str]:
    """One warning per decoy band of the pooled column whose F counts the decoy trials of other models than the
    signal trials its H counts (a model with no decoy trials in that band, or no signal trials at all), naming both
    sets; [] when every pooled band sets the same models' H and F against each other, or without a pooled column
    beside two or more models.

    The pooled column sums counts (as the release's script does): d'(band) = z(H) - z(F[band]) then compares rates of
    different model mixes, and delta_1 (Eq. 4, seed 000 Sec. 5.3) can fall at a band for that reason alone
    (review44c #3: one model's 0.3-0.7 km decoys missing moved the pooled d' of that band and the next apart, and
    the pooled delta_1 with them, without a word)."""
    if POOLED not in scores:
        return []
    models = [m for m in scores if m != POOLED]
    if len(models) < 2:
        return []
    signal = [m for m in models if scores[m].n_signal > 0]
    lines = []
    for b in scores[POOLED].bands:
        if b.n <= 0:
            continue
        decoy = [m for m in models if any(x.band == b.band and x.n > 0 for x in scores[m].bands)]
        if set(decoy) == set(signal):
            continue
        lines.append(f"Pooled, {_band_title(b.band)}: its F counts decoy trials of {', '.join(decoy) or 'none'} and "
                     f"H counts signal trials of {', '.join(signal) or 'none'}, so this band's pooled d' (and a "
                     "pooled delta_1 decided there) sets different models' rates against each other; read the "
                     "models' own columns.")
    return lines


def legend_for(tau_km: float = C.GEOVERIFY_TAU_KM, gaps: Mapping[str, float] | None = None) -> tuple[str, ...]:
    """One line per term of the table (seed 000 Sec. 5.3, Eq. 2-4, in our words), naming the claim tolerance
    ``tau_km`` (km; ``[geoverify] tau_m`` / 1000) in metres where H and F are defined (fixverify42 #2), and where a
    band's trials start above its edge (``gaps``, :func:`report_band_gaps`: fixverify43 #2)."""
    tau = f"tau = {_tau_m_text(tau_km)}"
    paper = ("" if math.isclose(tau_km, C.GEOVERIFY_TAU_KM) else
             f"; the paper's tau is {_tau_m_text(C.GEOVERIFY_TAU_KM)}")
    first = _band_title(decoy_band_labels(tau_km)[0])
    # with another tau than the paper's the nearest band starts at tau (geoagent.data.model.decoy_bands_km, its label
    # says so: 0.1-0.3 km, 0.2-0.3 km; fixverify42 #1, fixverify43 #1)
    nearest = "" if math.isclose(tau_km, C.GEOVERIFY_TAU_KM) else f"; the nearest band, {first}, starts at tau"
    nearest += "".join(f"; these trials hold decoys of the band {_band_title(b)} from {_tau_m_text(lo)} on only (a "
                       "table built at that tau: see the band gap warning)" for b, lo in (gaps or {}).items())
    return (
        f"H (hit rate): share of signal trials (the named place lies less than {tau} from the photo, Eq. 1"
        f"{paper}) answered yes.",
        f"F (false-alarm rate): share of decoy trials (the named place lies {tau} or farther from the photo, in the "
        f"given distance band{nearest}) answered yes; the control rows give F with the photo swapped for one from "
        "another continent "
        "('control: swapped image' is arm ctrl_mismatch in the CSV files and scored rows), or replaced by a plain "
        "gray field ('control: gray field' is arm ctrl_noimage).",
        "d' (sensitivity): z(H) - z(F), after the log-linear correction; 0 = signal and decoys cannot be told apart, "
        "1 = conventional discriminability.",
        "c (criterion): -(z(H) + z(F)) / 2; negative = the model leans towards accepting claims, positive = towards "
        "rejecting them.",
        "delta_1 (discrimination radius): the nearest decoy band whose d' reaches 1; 'none' = no band does. "
        "Its brackets give the range of delta_1 over the site-bootstrap resamples (the same resamples as the other "
        "brackets): bands ordered nearest to farthest with 'none' beyond the farthest, the 2.5th to 97.5th "
        "percentile of that order (resamples where delta_1 is undefined are left out).",
        "(k/n) after a rate: k trials answered yes out of the n parsed trials the rate is computed from (H: signal "
        "trials; F: decoy trials of all bands (decoys recorded without a band included), of one band, or of a control arm).",
        "parse failures: answers without a verdict, outside H and F (neither a yes nor a no; the paper had none: "
        "'Every returned response parsed', Sec. 6.4), listed with their reason in geoverify_parse_failures.csv. An "
        "answer cut off at the output-token limit with nothing parsed is among them and also counted in 'cut off and "
        "unparsed' (no answer: the cap, not the model, ended it; GeoHint leaves such answers out of its rates too, "
        "while an unparsed answer the model finished is a miss there).",
        TRUNCATION_LEGEND,
        # newuser40 #2: the rule was in no document (seed 000 Sec. 5.4; geoagent.scoring.sdt.readout)
        "read-out (pre-registered, Sec. 5.4): invalid if the swapped-image control's F exceeds 20 % or the gray-field "
        "control's F lies within 5 points of the main arm's F; else uninformative if the nearest band's d' exceeds 2; "
        "else informative if the nearest band's d' is below 0.5 and the farthest band's above 1.5; else inconclusive. "
        "'validity unchecked' = no control arm has a parsed answer: the controls come first in the rule, so the verdict "
        "rests on the main arm alone (a trial table built by the crawl's builder, [geoverify] trials = \"build\", holds "
        "both control arms for [geoverify] n_control candidates per image; the release's trial sample holds none).",
    )


#: the terms at the paper's tau (150 m); a report names its own tau (:func:`legend_for`)
LEGEND = legend_for()
#: the settings a cut-off warning asks to raise (the model's first: a re-run of the same command applies it to the
#: requests still queued; the task section's is planned into each request, walk44 B1)
TRUNCATION_SETTING = "the model's [[models]] max_output_tokens (or [geoverify] max_output_tokens where the config sets it)"
#: the task section's key among :data:`TRUNCATION_SETTING`
TRUNCATION_TASK_KEY = "[geoverify] max_output_tokens"
#: arm -> row label of its cut-off share
_ARM_LABELS = ((ARM_MAIN, "main arm"), (ARM_MISMATCH, "control: swapped image"), (ARM_BLANK, "control: gray field"))


def legend_lines(tau_km: float = C.GEOVERIFY_TAU_KM, gaps: Mapping[str, float] | None = None) -> list[str]:
    """The legend (:func:`legend_for` of ``tau_km`` and ``gaps``) as ``- term: meaning`` lines (Markdown list items;
    plain text in the terminal)."""
    return [f"- {line}" for line in legend_for(tau_km, gaps)]


def report_tau_km(scores: Mapping[str, ModelScores]) -> float:
    """The claim tolerance (km) the scores were computed at (``ModelScores.tau_km``, one for every column); the
    paper's 0.15 without scores."""
    return next((s.tau_km for s in scores.values()), C.GEOVERIFY_TAU_KM)


def _pct(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{fixed_text(100 * x, 1)} %"


def _num(x: float, signed: bool = False) -> str:
    """Two decimals (``signed``: ``+`` before a positive value); a value that rounds to zero is ``0.00``, never
    ``-0.00`` (:func:`geoagent.textfmt.fixed_text`); ``-`` for NaN or None."""
    if x is None or math.isnan(x):
        return "-"
    return fixed_text(x, 2, signed=signed)


#: bootstrap key of the delta_1 row: its range is ``ModelScores.delta_1_ci`` (band labels), not ``ci``
DELTA_KEY = "delta_1"


def _ci_pair(s: ModelScores, key: str | None) -> tuple[float, float] | tuple[str, str] | None:
    if key is None:
        return None
    if key == DELTA_KEY:
        return s.delta_1_ci
    return s.ci.get(key)


def _delta_label(label: str | None) -> str:
    """Pretty delta_1 value: ``0.3–0.7 km``, or ``none`` / ``undefined`` as they are."""
    if not label:
        return "none"
    return _band_title(label) if label[0].isdigit() else label


#: mark after the interval of a rate at 0 % or 100 %: Clopper-Pearson exact, not the site bootstrap
#: (``ModelScores.ci_exact``, :func:`geoagent.scoring.sdt.clopper_pearson`)
BOUNDARY_MARK = "‡"
#: CSV text (``<model>_text``) of a rate row whose interval is Clopper-Pearson
BOUNDARY_TEXT = "Clopper-Pearson exact interval (rate at 0 or 1)"

#: mark after a d' (and a delta_1) resting on fewer than SMALL_N_TRIALS trials (module doc, "Small n")
SMALL_N_MARK = "†"
#: CSV text of a flagged d' cell, and the row flagging delta_1 (``yes`` exactly where the table's delta_1 cell
#: carries :data:`SMALL_N_MARK`, :func:`delta_1_marked`; ``no`` elsewhere)
SMALL_N_TEXT = "small n"
DELTA_SMALL_N_ROW = "delta_1 small n"
#: what the CSV row :data:`DELTA_SMALL_N_ROW` means, said under the Markdown table whenever the CSV has that row
DELTA_SMALL_N_DEFINITION = (f"In geoverify_table.csv the row '{DELTA_SMALL_N_ROW}' is yes exactly where the "
                            f"delta_1 cell above carries {SMALL_N_MARK}, no elsewhere; a none shown without a range "
                            "is none in the data and at both ends of its 95 % site-bootstrap range (a few resamples "
                            f"may still reach d' = 1), and carries {SMALL_N_MARK} when the bands it rests on have "
                            "few trials.")

#: mark after an interval from BOOT_MIN_SITES to BOOT_FEW_SITES - 1 sites (few clusters: likely too narrow;
#: ``ModelScores.ci_sites``), defined in the note under the table (:func:`few_cluster_text`)
FEW_CLUSTER_MARK = "§"
#: CSV text (``<model>_text``, joined to any other note by "; ") of a value whose interval is flagged few-cluster
FEW_CLUSTER_TEXT = "few-cluster interval"


def few_cluster(s: ModelScores, key: str | None) -> bool:
    """Whether the interval shown for ``key`` rests on BOOT_MIN_SITES to BOOT_FEW_SITES - 1 sites (5-9): given but
    flagged few-cluster (Cameron and Miller 2015); False without an interval or a site count, and for an exact
    Clopper-Pearson interval (``s.ci_exact``: a rate at 0 or 1, not a site bootstrap)."""
    if key == DELTA_KEY:  # its range rests on H and every band's d' (geoagent.scoring.sdt): few if any of them is
        return s.delta_1_ci is not None and any(
            BOOT_MIN_SITES <= g < BOOT_FEW_SITES for k, g in s.ci_sites.items() if k == "H" or k.startswith("d'["))
    if key is None or key not in s.ci or key in s.ci_exact:  # an exact (Clopper-Pearson) interval is no bootstrap
        return False
    g = s.ci_sites.get(key)
    return g is not None and BOOT_MIN_SITES <= g < BOOT_FEW_SITES


def delta_none_throughout(s: ModelScores) -> bool:
    """Whether delta_1 is none and so is each end of its 95 % site-bootstrap percentile range (no band reaches
    d' = 1 in the data, nor in 97.5 % or more of the kept resamples: a few may): the table then shows ``none``
    with no range (and :data:`SMALL_N_MARK` when :func:`delta_1_marked`)."""
    return s.delta_1 is None and s.delta_1_ci is not None and not any(
        lab and lab != "none" for lab in s.delta_1_ci)


def delta_1_marked(s: ModelScores) -> bool:
    """Whether the table's delta_1 cell carries :data:`SMALL_N_MARK` (the CSV's ``delta_1 small n`` is ``yes``
    exactly then): delta_1 rests on a band whose d' has few trials (:func:`~geoagent.scoring.sdt.delta_1_small_n`,
    a rule of trial counts; a "none" rests on every band). A bootstrap range of none to none does not lift it
    (walk26 D1: the mark was dropped there, with the false reason that no site resample reached d' = 1)."""
    return delta_1_small_n(s)


def _delta_text(s: ModelScores) -> str:
    """delta_1 with its bootstrap range of bands when there is one: ``0.3–0.7 km [0.15–0.3 km, none]``; followed
    by :data:`SMALL_N_MARK` when the band it names rests on few trials (:func:`~geoagent.scoring.sdt.delta_1_small_n`).
    ``none`` without brackets where the value and both ends are none (:func:`delta_none_throughout`), marked too."""
    if delta_none_throughout(s):
        return f"none {SMALL_N_MARK}" if delta_1_marked(s) else "none"
    text = _delta_label(s.delta_1)
    if s.delta_1_ci is not None:
        lo, hi = s.delta_1_ci
        text = f"{text} [{_delta_label(lo)}, {_delta_label(hi)}]" + (FEW_CLUSTER_MARK if few_cluster(s, DELTA_KEY) else "")
    return f"{text} {SMALL_N_MARK}" if delta_1_marked(s) else text


def dprime_text(s: ModelScores, band: str, text: str) -> str:
    """``text`` (a d' cell of ``band``) followed by :data:`SMALL_N_MARK` when that d' rests on few trials."""
    return f"{text} {SMALL_N_MARK}" if text != "-" and band in small_n_bands(s) else text


def small_n_note(scores: Mapping[str, ModelScores] | None = None, intervals_at: str = "below") -> str:
    """The footnote explaining :data:`SMALL_N_MARK`; its sentence on a marked read-out only when some column of
    ``scores`` has one (``Readout.small_n``; always with ``scores`` None). Its pointer to the 'Intervals' line
    (:func:`withheld_lines`) says where that line is: ``intervals_at`` ("below" in the report's table; the run's
    console summary, which prints no such line, passes "in the report (geoverify_table.md)")."""
    return (f"{SMALL_N_MARK} d' rests on fewer than {SMALL_N_TRIALS} trials (decoy trials in its band, or signal "
            "trials behind H): one answer more or less moves it a lot, so treat it, and a delta_1 at or beyond that "
            "band (every band up to delta_1 decides it), as a rough value (the statistic itself is not changed)."
            + (f" {SMALL_N_MARK} after the read-out: a control-arm check that made it invalid rests on fewer than "
               f"{SMALL_N_TRIALS} control trials (the verdict itself is not changed)."
               if scores is None or any(x.readout.small_n for x in scores.values()) else "")
            + (f" {SMALL_N_MARK} does not say why a value has no interval: the line 'Intervals' {intervals_at} "
               "names every reason one is withheld and which applies to each."
               if scores is not None and withheld_lines(scores) else ""))


#: the reasons a value of the table is shown without brackets in a run with a site bootstrap (:func:`withheld_lines`)
WITHHELD_REASONS = (f"an interval is withheld, whatever the {SMALL_N_MARK}, where (a) the statistic's trials come "
                    f"from fewer than {CI_MIN_SITES} sites (d' needs {CI_MIN_SITES} for H and for its band's F; the "
                    f"delta_1 range needs them for H and every band with trials), or (b) the statistic is undefined "
                    "in every site resample; with no site bootstrap (n_boot = 0) no value has one. "
                    f"{SMALL_N_MARK} itself is only about trials, not sites")


def _withheld_why(s: ModelScores, key: str) -> str | None:
    """Why ``s`` has no interval for the bootstrap key ``key`` (``"H"``, ``"F[<band>]"``, ``"d'[<band>]"``,
    ``"c[<band>]"``, ``"delta_1"`` ...) in a bootstrap run: the scarce side's site count (``ModelScores.ci_sites``;
    d' and c rest on H and their band's F, the delta_1 range on H and every band with trials) or "undefined in
    every resample"; None when it has one (or no bootstrap ran)."""
    if not s.n_boot:
        return None
    if key == DELTA_KEY:
        if s.delta_1_ci is not None:
            return None
        parts = [("signal", s.ci_sites.get("H", 0))] + [
            (_band_title(b.band), s.ci_sites.get(f"F[{b.band}]", 0)) for b in s.bands if b.n > 0]
    elif key in s.ci:
        return None
    elif key.startswith(("d'[", "c[")):
        band = key[key.index("[") + 1:-1]
        parts = [("signal", s.ci_sites.get("H", 0)), (_band_title(band), s.ci_sites.get(f"F[{band}]", 0))]
    else:
        parts = [("its", s.ci_sites.get(key, 0))]
    few = [(what, g) for what, g in parts if g < CI_MIN_SITES]
    if few:
        return "; ".join(f"{what if what in ('signal', 'its') else what + ' decoy'} trials from {count_text(g, 'site')}"
                         for what, g in few) + f" (fewer than {CI_MIN_SITES}: reason a)"
    return "undefined in every site resample (reason b)"


def withheld_lines(scores: Mapping[str, ModelScores]) -> list[str]:
    """Where a bootstrap ran, the reasons any interval is withheld (:data:`WITHHELD_REASONS`), then one line per
    column naming each value of the table shown without brackets although its row has them elsewhere (rates, d',
    c, the delta_1 range) and the reason that applies: ``No interval (m): 0.15–0.3 km (d'): 0.15–0.3 km decoy
    trials from 3 sites (fewer than 5: reason a); ...`` (columns whose reasons are the same word for word share
    one line: ``No interval (m1, m2, pooled): ...``); [] when every such value has its interval (or no bootstrap
    ran)."""
    by_text: dict[str, list[str]] = {}  # the reasons of a column -> the columns with exactly these reasons
    rows = [(sec, label, get, key) for sec, label, get, _, key in _rows(scores)] if scores else []
    for c in _columns(scores) if scores else []:
        sc = scores[c]
        parts = []
        for sec, label, get, key in rows:
            if key is None:
                continue
            try:
                value = get(sc)
            except (IndexError, StopIteration):
                continue
            if value is None or value == DELTA_UNDEFINED or (isinstance(value, float) and math.isnan(value)):
                if key != DELTA_KEY or value is not None:  # delta_1 None = "none", a value
                    continue
            if why := _withheld_why(sc, key):
                what = "delta_1 range" if key == DELTA_KEY else f"{label} ({sec.split(' by ')[0]})"
                parts.append(f"{what}: {why}")
        if parts:
            by_text.setdefault("; ".join(parts), []).append(c)
    # columns with the same reasons word for word share one line (the walkthrough's demo-large, demo-fast, pooled)
    lines = [f"No interval ({', '.join(cols)}): {text}." for text, cols in by_text.items()]
    return [f"Intervals: {WITHHELD_REASONS}.", *lines] if lines else []


def readout_text(s: ModelScores) -> str:
    """The read-out verdict as the table and the console summary show it, followed by :data:`SMALL_N_MARK` when a
    control-arm check behind it rests on fewer than SMALL_N_TRIALS trials (``Readout.small_n``): ``invalid †``, and
    by :data:`~geoagent.scoring.sdt.UNCHECKED_MARK` when no control arm checked its validity (``Readout.unchecked``,
    stats40 #3: ``informative (validity unchecked: no control arm)``)."""
    text = f"{s.readout.verdict} {SMALL_N_MARK}" if s.readout.small_n else s.readout.verdict
    return f"{text} {UNCHECKED_MARK}" if getattr(s.readout, "unchecked", False) else text


def _readout_small_n_line(c: str, s: ModelScores) -> str | None:
    """``Small n (m): the read-out 'invalid' rests on 3 swapped-image control trials ...``; None unless flagged."""
    if not s.readout.small_n:
        return None
    parts = []
    for arm, what, reason in ((ARM_MISMATCH, "swapped-image", "swapped-image control F"),
                              (ARM_BLANK, "gray-field", "gray-field control F")):
        n = s.controls[arm][0]
        if n < SMALL_N_TRIALS and any(r.startswith(reason) for r in s.readout.reasons):
            parts.append(f"{n} {what} control trial{'s' if n != 1 else ''}")
    return (f"Small n ({c}): the read-out '{s.readout.verdict}' {SMALL_N_MARK} rests on {' and '.join(parts)}, "
            f"fewer than {SMALL_N_TRIALS}: the read-out rests on few trials (one answer moves that control F by "
            f"1/n).")


def small_n_warnings(scores: Mapping[str, ModelScores]) -> list[str]:
    """One line per column (models, then pooled) with a small-n band: bands with their decoy counts, the
    signal count, and whether delta_1 rests on one (:func:`~geoagent.scoring.sdt.small_n_bands`); then one
    line per column whose read-out rests on few control trials (``Readout.small_n``); [] when none."""
    lines = []
    cols = _columns(scores) if scores else []
    for c in cols:
        sc = scores[c]
        flagged = small_n_bands(sc)
        if not flagged:
            continue
        small_decoy = [b for b in flagged if sc.band(b).n < SMALL_N_TRIALS]
        decoys = ", ".join(f"{_band_title(b)} ({count_text(sc.band(b).n, 'decoy trial')})" for b in small_decoy)
        # said where the delta_1 cell is marked (delta_1_marked: a rule of trial counts, a none without a range too)
        tail = ("" if not delta_1_marked(sc) else "; delta_1 = none (no band reaches d' = 1) rests on these too"
                if sc.delta_1 is None else f"; delta_1 = {_delta_label(sc.delta_1)} rests on it")
        if sc.n_signal < SMALL_N_TRIALS:  # every band with trials is flagged through H
            side = (f"d' {SMALL_N_MARK} at every band with trials: signal side: "
                    f"{count_text(sc.n_signal, 'signal trial')} behind H,"
                    f" fewer than {SMALL_N_TRIALS}" + (f"; decoy side too at {decoys}" if decoys else ""))
        else:
            side = (f"d' {SMALL_N_MARK} on the decoy side: {decoys}, fewer than {SMALL_N_TRIALS} (the signal side has "
                    f"{count_text(sc.n_signal, 'trial')} behind H)")
        lines.append(f"Small n ({c}): {side}{tail}.")
    lines += [ln for c in cols if (ln := _readout_small_n_line(c, scores[c]))]
    return lines


def summary_counts(s: ModelScores) -> dict[str, str]:
    """The report's wording of the trials behind H and F and of the delta_1 range, for the one-line-per-model
    console summary (:meth:`geoagent.geoverify.campaign.GeoVerifyCampaign.summary_lines`).

    Read from ``s`` as the table reads them (no recomputation): ``"H"`` and ``"F"`` are `` (k/n)`` (answers yes
    / parsed main-arm trials, as after the table's H and F; "" when n is 0), ``"delta_1"`` is the table's
    delta_1 cell (``0.3–0.7 km [0.15–0.3 km, none]``: value and site-bootstrap range of bands; the value
    alone without a bootstrap)."""
    return {"H": _with_counts("", (s.n_hits, s.n_signal)), "F": _with_counts("", (s.n_false_acceptances, s.n_noise)),
            "delta_1": _delta_text(s)}


def _with_ci(text: str, s: ModelScores, key: str | None, *, pct: bool = False, signed: bool = False) -> str:
    """``text`` followed by `` [lo, hi]`` when ``s`` has a bootstrap interval for ``key``."""
    iv = _ci_pair(s, key)
    if iv is None or text == "-":
        return text
    lo, hi = iv
    few = FEW_CLUSTER_MARK if few_cluster(s, key) else ""
    if pct:
        mark = BOUNDARY_MARK if key in s.ci_exact else ""
        return f"{text} [{fixed_text(100 * lo, 1)}, {fixed_text(100 * hi, 1)}]{mark}{few}"
    return f"{text} [{fixed_text(lo, 2, signed=signed)}, {fixed_text(hi, 2, signed=signed)}]{few}"


#: how the model columns are ordered (said under the table): the paper's Table 12 order follows this rule
COLUMN_ORDER_NOTE = ("Columns: models by d' in the farthest decoy band, highest first (the order of the paper's "
                     "Table 12), then by name; a model without that d' last; pooled last.")


def _farthest_dprime(s: ModelScores) -> float | None:
    """d' of the farthest decoy band with a defined d' in any column's band list (the last band), or None."""
    if not s.bands:
        return None
    d = s.bands[-1].d_prime
    return None if d is None or (isinstance(d, float) and math.isnan(d)) else float(d)


def one_model(scores: Mapping[str, ModelScores]) -> str | None:
    """The model of ``scores`` when they hold exactly one model column beside the pooled one, whose every value is
    then that model's (the pool of one model: the same trials, the same site resamples); None otherwise (no pooled
    column, none or several models)."""
    models = [m for m in scores if m != POOLED]
    return models[0] if len(models) == 1 and POOLED in scores else None


def shown_scores(scores: Mapping[str, ModelScores]) -> Mapping[str, ModelScores]:
    """``scores`` as Markdown, the terminal text, the console summary and the figure show them: without the pooled
    column where it would repeat the one model's (:func:`one_model`), else ``scores`` itself. The CSV
    (:func:`render_csv`) keeps every column."""
    return {m: s for m, s in scores.items() if m != POOLED} if one_model(scores) else scores


def pooled_mean_text(scores: Mapping[str, ModelScores]) -> str:
    """``"; the models' own d', weighted by trials: nearest 0.41, farthest 1.39 (summed counts lower d' where the
    models' criteria differ)"`` for the pooled read-out line when a pooled column stands beside two or more models
    with a d' (:func:`geoagent.scoring.sdt.mean_model_dprime`, stats40 #1), else ""."""
    if POOLED not in scores:
        return ""
    (near, n_near), (far, n_far) = mean_model_dprime(scores, 0), mean_model_dprime(scores, -1)
    if max(n_near, n_far) < 2:
        return ""
    return (f"; the models' own d', weighted by trials: nearest {_num(near)}, farthest {_num(far)} (summed counts "
            "lower d' where the models' criteria differ)")


def pooled_mean_note(scores: Mapping[str, ModelScores]) -> str:
    """The sentence under Table 12 on what the pooled column is (stats40 #1): the models' counts summed, whose d'
    falls below the models' own when their criteria c differ, with the trial-weighted mean of the models' own d'
    in the nearest and farthest bands; "" without a pooled column beside two or more models with a d'."""
    text = pooled_mean_text(scores)
    if not text:
        return ""
    return ("Pooled sums the models' counts (as the release's script does); where the models' criteria c differ, "
            "the summed H and F lie on no model's ROC curve and their d' is below the models' own (Macmillan & "
            "Creelman 2005): " + text[2:].replace(" (summed counts lower d' where the models' criteria differ)", "")
            + ".")


def one_model_note(scores: Mapping[str, ModelScores]) -> str:
    """The sentence under the Markdown and terminal tables of a campaign with one model (:func:`one_model`): the
    pooled column is left out and the CSV keeps it; of one with several models of which one has answers so far: the
    pooled column repeats that model's; "" otherwise."""
    m = one_model(scores)
    if m is None:
        # several model columns, but answers of one model only so far (walk39 #5: a host down, the pooled column
        # repeated the other model's figures without a word)
        answered = [k for k, s in scores.items() if k != POOLED and (s.n_signal or s.n_noise)]
        silent = [k for k in scores if k != POOLED and k not in answered]
        if len(answered) == 1 and silent and POOLED in scores:
            return (f"Only {answered[0]} has answers ({', '.join(silent)}: none yet), so the pooled column repeats "
                    f"{answered[0]}'s figures.")
        return ""
    return (f"One model: the pooled column would repeat {m}'s value for value, so it is left out here ({TABLE_CSV} "
            f"keeps its columns {POOLED}, " + ", ".join(POOLED + x for x in CSV_MODEL_SUFFIXES) + ").")


#: the d' figure's caption line with one model (:func:`one_model`): no pooled line drawn over the model's
ONE_MODEL_FIGURE_NOTE = "One model: no pooled line (it would be the model's line again)."


def _columns(scores: Mapping[str, ModelScores]) -> list[str]:
    """Model columns in :data:`COLUMN_ORDER_NOTE`'s order (the paper's Table 12: gemini-flash 2.36, claude-opus-5
    1.95, qwen3-vl-8b 1.13, qwen3-vl-235b 1.07, claude-haiku-4-5 0.82 in the farthest band), then ``pooled``."""
    def key(m: str) -> tuple[int, float, str]:
        d = _farthest_dprime(scores[m])
        return (1, 0.0, m) if d is None else (0, -d, m)

    models = sorted((m for m in scores if m != POOLED), key=key)
    return models + ([POOLED] if POOLED in scores else [])


#: (section, label, raw value getter, formatted getter with interval, bootstrap key or None)
Row = tuple[str, str, Callable[[ModelScores], float | str | None], Callable[[ModelScores], str], str | None]


def _with_counts(text: str, counts: tuple[int, int] | None) -> str:
    """``text`` followed by `` (k/n)`` (answers yes / parsed trials) when there are trials behind it."""
    if counts is None or counts[1] <= 0 or text == "-":
        return text
    return f"{text} ({counts[0]}/{counts[1]})"


def _rate_row(sec: str, label: str, get: Callable[[ModelScores], float], key: str,
              counts: Callable[[ModelScores], tuple[int, int]] | None = None) -> Row:
    """A rate row (%, interval); ``counts`` gives (yes, n) behind the rate, shown as `` (k/n)``."""
    return (sec, label, get,
            lambda s: _with_counts(_with_ci(_pct(get(s)), s, key, pct=True), counts(s) if counts else None), key)


def _count_rows(bands: list[str], title: Callable[[str], str]) -> list[Row]:
    """CSV rows with the trials behind every rate (see the module doc): n parsed and n answered yes."""
    sec = "Trials behind the rates"

    def pair(kind: str, get: Callable[[ModelScores], tuple[int, int]], band: str = "") -> list[Row]:
        suffix = f" {band}" if band else ""
        return [(sec, f"n {kind}{suffix}", lambda s: get(s)[1], lambda s: str(get(s)[1]), None),
                (sec, f"n {kind} accepted{suffix}", lambda s: get(s)[0], lambda s: str(get(s)[0]), None)]

    rows = pair("signal", lambda s: (s.n_hits, s.n_signal)) + pair("decoy", lambda s: (s.n_false_acceptances, s.n_noise))
    for arm, label in _ARM_LABELS[1:]:
        rows += [(sec, f"n {label}", lambda s, a=arm: s.controls[a][0], lambda s, a=arm: str(s.controls[a][0]), None),
                 (sec, f"n {label} accepted", lambda s, a=arm: s.controls[a][1],
                  lambda s, a=arm: str(s.controls[a][1]), None)]
    for b in bands:
        rows += pair("decoy", lambda s, b=b: (s.band(b).n_yes, s.band(b).n), title(b))
    return rows


def _num_row(sec: str, label: str, get: Callable[[ModelScores], float], key: str, signed: bool = False) -> Row:
    return (sec, label, get, lambda s: _with_ci(_num(get(s), signed), s, key, signed=signed), key)


def _trunc(s: ModelScores, arm: str | None = None) -> TruncationCount | None:
    """The column's cut-off counts over all arms (``arm`` None) or one arm; None when none were counted."""
    counts = s.truncation or {}
    c = total(counts) if arm is None else counts.get(arm)
    return c if c is not None and c.n else None


def _of(c: TruncationCount | None, k: int | None) -> str:
    """``k of N`` (N = the group's answers, :attr:`TruncationCount.n`); ``-`` without answers."""
    return f"{k} of {c.n}" if c is not None and k is not None else "-"


def _truncation_rows(scores: Mapping[str, ModelScores], *, pretty: bool = True) -> list[Row]:
    """The section "Cut off at the output-token limit": over all arms, and per arm when control arms were
    answered, the answers cut off and those cut off with nothing parsed (no answer), each as ``k of N`` (N = the
    arm's answers) in Markdown and the terminal; the CSV (``pretty`` False) gives k and N as numbers (rows
    ``answers ...``, ``answers cut off ...``, ``cut off and unparsed ...``) and the shares as fractions. When no
    column has an answer cut off, Markdown and the terminal give one row (``answers cut off (all arms)``, ``0 of
    N``) and ``no finish reason recorded`` only where it is not 0; the CSV keeps every row."""
    sec = "Cut off at the output-token limit"
    if pretty and any(_trunc(s) for s in scores.values()) and not any(
            _trunc(s) and _trunc(s).n_truncated for s in scores.values()):
        # nothing cut off: one row (k of N), not ten all-zero ones; the CSV keeps every row
        rows = [(sec, "answers cut off (all arms)", lambda s: _trunc(s).n_truncated if _trunc(s) else None,
                 lambda s: _of(_trunc(s), _trunc(s).n_truncated if _trunc(s) else None), None)]
        if any(_trunc(s) and _trunc(s).n_no_reason for s in scores.values()):
            rows.append((sec, "no finish reason recorded", lambda s: _trunc(s).n_no_reason if _trunc(s) else None,
                         lambda s: str(_trunc(s).n_no_reason) if _trunc(s) else "-", None))
        return rows
    per_arm = any(_trunc(s, arm) for s in scores.values() for arm, _ in _ARM_LABELS[1:])  # control arms answered
    rows: list[Row] = []
    if not pretty:
        rows.append((sec, "answers (all arms)", lambda s: _trunc(s).n if _trunc(s) else None,
                     lambda s: str(_trunc(s).n) if _trunc(s) else "-", None))
    rows += [
        (sec, "answers cut off (all arms)", lambda s: _trunc(s).n_truncated if _trunc(s) else None,
         lambda s: _of(_trunc(s), _trunc(s).n_truncated if _trunc(s) else None), None),
        (sec, "share cut off (all arms)", lambda s: _trunc(s).share if _trunc(s) else None,
         lambda s: _pct(_trunc(s).share) if _trunc(s) else "-", None),
    ]
    if per_arm:
        for arm, label in _ARM_LABELS:
            if not pretty:
                rows += [(sec, f"answers, {label}", lambda s, a=arm: _trunc(s, a).n if _trunc(s, a) else None,
                          lambda s, a=arm: str(_trunc(s, a).n) if _trunc(s, a) else "-", None),
                         (sec, f"answers cut off, {label}",
                          lambda s, a=arm: _trunc(s, a).n_truncated if _trunc(s, a) else None,
                          lambda s, a=arm: str(_trunc(s, a).n_truncated) if _trunc(s, a) else "-", None)]
            rows.append((sec, f"share cut off, {label}", lambda s, a=arm: _trunc(s, a).share if _trunc(s, a) else None,
                         lambda s, a=arm: (f"{_pct(_trunc(s, a).share)} ({_of(_trunc(s, a), _trunc(s, a).n_truncated)})"
                                           if _trunc(s, a) else "-"), None))
    rows.append((sec, "cut off and unparsed", lambda s: _trunc(s).n_truncated_unparsed if _trunc(s) else None,
                 lambda s: _of(_trunc(s), _trunc(s).n_truncated_unparsed if _trunc(s) else None), None))
    if per_arm:
        for arm, label in _ARM_LABELS:
            rows.append((sec, f"cut off and unparsed, {label}",
                         lambda s, a=arm: _trunc(s, a).n_truncated_unparsed if _trunc(s, a) else None,
                         lambda s, a=arm: _of(_trunc(s, a), _trunc(s, a).n_truncated_unparsed if _trunc(s, a) else None),
                         None))
    rows.append((sec, "no finish reason recorded", lambda s: _trunc(s).n_no_reason if _trunc(s) else None,
                 lambda s: str(_trunc(s).n_no_reason) if _trunc(s) else "-", None))
    return rows


def truncation_warnings(scores: Mapping[str, ModelScores]) -> list[str]:
    """Warning lines for every model (not ``pooled``) whose answers were cut off at the output-token limit
    more often than :data:`~geoagent.scoring.truncation.WARN_SHARE` (all arms together); [] otherwise."""
    counts = {m: c for m, s in scores.items() if m != POOLED and (c := _trunc(s)) is not None}
    return warning_lines(counts, setting=TRUNCATION_SETTING, planned_key=TRUNCATION_TASK_KEY)


def _parse_failures_text(s: ModelScores) -> str:
    """``5 (main 3, swapped image 1, gray field 1)``: the parse failures of every arm, split by arm where the
    scores carry per-arm answer counts (:func:`geoagent.geoverify.campaign.parse_failures_by_arm`)."""
    from geoagent.geoverify.campaign import CONTROL_LABELS, parse_failures_by_arm

    split = parse_failures_by_arm(s) if s.n_parse_failures else None
    return str(s.n_parse_failures) + (" (" + ", ".join(f"{CONTROL_LABELS.get(a, a)} {n}" for a, n in split.items())
                                      + ")" if split else "")


def _count_text(n: int | None) -> str:
    return "" if n is None else str(n)


def _main_parse_failures(s: ModelScores) -> int | None:
    """The main arm's parse failures (a count), or None when the scores carry no per-arm answer counts."""
    from geoagent.geoverify.campaign import parse_failures_by_arm

    if not s.n_parse_failures:
        return 0
    split = parse_failures_by_arm(s)
    return None if split is None else split.get(ARM_MAIN, 0)


def _rows(scores: Mapping[str, ModelScores], *, pretty: bool = True) -> list[Row]:
    """Rows in Table 12 order (plus counts, cut-off answers, F per band and the read-out); see :data:`Row`.

    ``pretty``: band row labels as ``0.7–1.5 km`` (Markdown, terminal); False gives the data's ASCII band
    label ``0.7-1.5km`` (the CSV, like the scored results and delta_1)."""
    any_s = next(iter(scores.values()))
    bands = [b.band for b in any_s.bands]
    title = _band_title if pretty else str
    rates = "Response rates"
    rows: list[Row] = [
        ("Responses", "n parsed (main arm)", lambda s: s.n_signal + s.n_noise, lambda s: str(s.n_signal + s.n_noise), None),
        # the sites behind H and F (a site counts where it has a parsed answer of that kind)
        ("Responses", "sites, signal trials", lambda s: s.sites.get("H"), lambda s: _count_text(s.sites.get("H")), None),
        ("Responses", "sites, decoy trials", lambda s: s.sites.get("F"), lambda s: _count_text(s.sites.get("F")), None),
        # every arm's, as the console's "all arms: parse failures 5 (main 3, ...)"; the main arm's own next
        ("Responses", "parse failures (all arms)", lambda s: s.n_parse_failures, _parse_failures_text, None),
        ("Responses", "parse failures, main arm", _main_parse_failures,
         lambda s: "" if _main_parse_failures(s) is None else str(_main_parse_failures(s)), None),
        *_truncation_rows(scores, pretty=pretty),
        _rate_row(rates, "H (signal accepted)", lambda s: s.h, "H", lambda s: (s.n_hits, s.n_signal)),
        _rate_row(rates, "F (decoy accepted)", lambda s: s.f, "F", lambda s: (s.n_false_acceptances, s.n_noise)),
        _rate_row(rates, "control: swapped image", lambda s: s.controls[ARM_MISMATCH][2], f"F[{ARM_MISMATCH}]",
                  lambda s: (s.controls[ARM_MISMATCH][1], s.controls[ARM_MISMATCH][0])),
        _rate_row(rates, "control: gray field", lambda s: s.controls[ARM_BLANK][2], f"F[{ARM_BLANK}]",
                  lambda s: (s.controls[ARM_BLANK][1], s.controls[ARM_BLANK][0])),
    ]
    for b in bands:
        rows.append(_rate_row("False-acceptance rate F by decoy distance", f"F {title(b)}",
                              lambda s, b=b: s.band(b).f, f"F[{b}]", lambda s, b=b: (s.band(b).n_yes, s.band(b).n)))
    for b in bands:
        sec, label, get, fmt, key = _num_row("Sensitivity d' by decoy distance", title(b), lambda s, b=b: s.band(b).d_prime,
                                             f"d'[{b}]")
        rows.append((sec, label, get, lambda s, b=b, fmt=fmt: dprime_text(s, b, fmt(s)), key))
    rows.append(("Sensitivity d' by decoy distance", "delta_1", lambda s: s.delta_1 or "none",
                 lambda s: _delta_text(s), DELTA_KEY))
    if bands:
        rows += [
            _num_row("Criterion c", "nearest band", lambda s: s.bands[0].c, f"c[{bands[0]}]", signed=True),
            _num_row("Criterion c", "farthest band", lambda s: s.bands[-1].c, f"c[{bands[-1]}]", signed=True),
        ]
    if not pretty:  # Markdown and the terminal show the counts as (k/n) next to each rate
        rows += _count_rows(bands, title)
    rows += [
        ("Confidence on false acceptances", "median", lambda s: s.fa_conf_median, lambda s: _num(s.fa_conf_median), None),
        ("Confidence on false acceptances", "share >= 0.8", lambda s: s.fa_conf_share_high,
         lambda s: _pct(s.fa_conf_share_high), None),
    ]
    if any(s.fa_conf_missing for s in scores.values()):
        # a yes without a (finite) confidence enters neither the median nor the share: say how many, so a share
        # over fewer answers than F counts is not read as over all of them
        rows.append(("Confidence on false acceptances", "without a confidence (left out)",
                     lambda s: s.fa_conf_missing, lambda s: f"{s.fa_conf_missing} of {s.n_false_acceptances}", None))
    rows += [
        ("Read-out", "pre-registered", lambda s: s.readout.verdict, readout_text, None),
    ]
    return rows


def bootstrap_note(scores: Mapping[str, ModelScores]) -> str:
    """One sentence naming the interval method, replicates and seed, and the few-site rule
    (:data:`geoagent.scoring.sdt.BOOT_SITES_RULE`: none from fewer than 5 sites; :func:`few_cluster_text` names
    intervals from 5-9 sites); "" without a bootstrap."""
    s = next((x for x in scores.values() if x.n_boot), None)
    if s is None:
        return ""
    return (f"Brackets: {100 * s.ci_level:.0f} % percentile intervals from {s.n_boot} bootstrap resamples of sites "
            f"(seed {s.boot_seed}; the same site draws for every column). Few sites: {BOOT_SITES_RULE}."
            + few_cluster_text(scores))


def few_cluster_text(scores: Mapping[str, ModelScores], *, figure: bool = False) -> str:
    """``" Here intervals from 7 sites (H, d', c), fewer than 10 sites, are given but flagged few-cluster: ..."``: the site
    counts from :data:`~geoagent.scoring.sdt.BOOT_MIN_SITES` to :data:`~geoagent.scoring.sdt.BOOT_FEW_SITES` - 1
    behind the intervals the table marks (:func:`few_cluster`; ``ModelScores.ci_sites``), each with the statistics
    whose intervals come from that many sites, with a leading space; "" when none. ``figure``: the wording of the
    d' figure's caption, which draws no brackets and no mark (it says the table marks them)."""
    flagged = [(g, col, k) for col, x in scores.items() for k, g in x.ci_sites.items()
               if few_cluster(x, k)]  # as the table marks them: a site bootstrap from 5-9 sites, not an exact interval
    if not flagged:
        return ""
    # a statistic by its base name (H, F, d', c); with its band (F[3-10 km]) where that name comes from more than one
    # site count (walk33 #6: "from 5 sites (F) and 6 sites (F)" did not say which F had which); and with its column
    # (the model, or pooled) where the band's statistic still does (review33: two models' F[3-10 km])
    counts_of: dict[str, set[int]] = {}
    for g, _, k in flagged:
        counts_of.setdefault(k.split("[", 1)[0], set()).add(g)
        counts_of.setdefault(k, set()).add(g)
    by_sites: dict[int, list[str]] = {}  # site count -> the statistics from that many
    for g, col, k in flagged:
        base = k.split("[", 1)[0]
        name = base if len(counts_of[base]) == 1 else k if len(counts_of[k]) == 1 else f"{k} of {col}"
        if name not in by_sites.setdefault(g, []):
            by_sites[g].append(name)
    # walk23 #8: "intervals from 9 sites" read as every interval's, while F's came from 17 sites and were not marked
    gs = " and ".join(f"{g} sites ({', '.join(by_sites[g])})" for g in sorted(by_sites))
    return (f" Here intervals from {gs}, fewer than {BOOT_FEW_SITES} sites, are given but flagged few-cluster: "
            + ("likely too narrow (the figure does not mark them; the table does)." if figure
               else f"likely too narrow; each is marked {FEW_CLUSTER_MARK} after its brackets."))


def boundary_note(scores: Mapping[str, ModelScores]) -> str:
    """The sentence explaining :data:`BOUNDARY_MARK` ("" when no interval carries it)."""
    marked = [(c, k) for c, x in scores.items() for k in sorted(x.ci_exact)]
    if not marked:
        return ""
    s = next(iter(scores.values()))
    return (f"{BOUNDARY_MARK} A rate of 0 % or 100 % (0 or all of its n trials answered yes): every site resample "
            f"gives that value again, so its percentile interval would have zero width; its brackets are instead the "
            f"Clopper-Pearson exact {100 * s.ci_level:.0f} % interval of the pooled count k/n shown after it (binomial: "
            f"it ignores clustering by site, so with answers correlated within a site it may be too narrow).")


def render_markdown(scores: Mapping[str, ModelScores]) -> str:
    """Table 12 as a Markdown table (section rows in bold); with one model, no pooled column and a sentence saying
    so (:func:`one_model_note`)."""
    if not scores:
        return "_no scored GeoVerify responses yet_\n"
    one = one_model_note(scores)
    scores = shown_scores(scores)  # one model: no pooled copy of it (module doc)
    cols = _columns(scores)
    out = ["| | " + " | ".join(md_cell(c) for c in cols) + " |", "|---|" + "---:|" * len(cols)]
    section = None
    for sec, label, _, fmt, _key in _rows(scores):
        if sec != section:
            out.append(f"| **{sec}** |" + " |" * len(cols))
            section = sec
        out.append(f"| {label} | " + " | ".join(fmt(scores[c]) for c in cols) + " |")
    notes = [f"- {c}: {readout_text(scores[c])} ({'; '.join(scores[c].readout.reasons)})" for c in cols]
    boot = bootstrap_note(scores)
    if boundary_note(scores):
        boot += " " + boundary_note(scores)
    warn = "".join(f"\n\n**{w}**" for w in [*band_gap_lines(scores), *truncation_warnings(scores)])
    small = small_n_warnings(scores)
    if small:
        warn += "\n\n" + small_n_note(scores) + "".join(f"\n\n**{w}**" for w in small)
    if any(small_n_bands(s) for s in scores.values()):  # the CSV has the row DELTA_SMALL_N_ROW (render_csv)
        warn += "\n\n" + DELTA_SMALL_N_DEFINITION
    withheld = withheld_lines(scores)
    if withheld:
        warn += "\n\n" + withheld[0] + "".join(f"\n\n**{w}**" for w in withheld[1:])
    order = f" {COLUMN_ORDER_NOTE}" if len(cols) > 2 else ""
    return ("\n".join(out) + "\n\nLog-linear correction applied to d' and c (Hautus 1995): H and F in z() are "
            "(k + 0.5) / (n + 1), so a rate of 0 or 1 has a finite z; the rates shown are the plain k / n."
            + (f" {one}" if one else "") + order
            + (f" {pooled_mean_note(scores)}" if pooled_mean_note(scores) else "")
            + (f" {boot}" if boot else "") + warn
            + "\n\n" + "\n".join(notes) + "\n\nTerms:\n\n"
            + "\n".join(legend_lines(report_tau_km(scores), report_band_gaps(scores))) + "\n")


#: geoverify_table.csv's own columns (:func:`render_csv`); a model named like one is refused at plan time
#: (:func:`geoagent.geoverify.plan.check_report_names`)
CSV_FIXED_COLUMNS = ("section", "row", "label")
#: the suffixes of the columns geoverify_table.csv derives from each model column ``<model>``
CSV_MODEL_SUFFIXES = ("_lo", "_hi", "_text")


def md_cell(text: object) -> str:
    """``text`` as one Markdown table cell: line breaks joined with spaces, ``|`` escaped (``\\|``), so a model
    name holding ``|`` (refused by :func:`geoagent.geoverify.plan.check_report_names`, but possible in scores
    built outside a plan) stays in its own column."""
    return " ".join(str(text).splitlines()).replace("|", "\\|")


#: CSV row labels of delta_1's site-bootstrap range (text: band labels), after the ``delta_1`` row
DELTA_RANGE_ROWS = ("delta_1 range lo", "delta_1 range hi")


def render_csv(scores: Mapping[str, ModelScores]) -> str:
    """Table 12 as CSV with raw (unformatted) values: columns ``section, row``, then per model ``<model>,
    <model>_lo, <model>_hi, <model>_text``. The first three are numbers only (the value and its bootstrap
    interval; empty where the row has none, no bootstrap ran, or the value is text), so a CSV reader infers
    them as numeric; ``<model>_text`` holds the rows whose value is text (delta_1's band, ``none`` or
    ``undefined``; the read-out verdict) and is empty elsewhere. delta_1's bootstrap range follows its row as
    rows ``delta_1 range lo`` / ``delta_1 range hi`` (text; only when a bootstrap ran; empty for a column whose
    delta_1 and both ends are none, shown as plain ``none``, :func:`delta_none_throughout`). Rates are fractions in
    [0, 1]; band labels in ``row`` are the data's ASCII ``0.7-1.5km`` (rows ``F 0.7-1.5km`` and ``0.7-1.5km``, and
    the delta_1 values), a stable machine key; the last column, ``label``, holds the row's label exactly as
    Markdown and the terminal show it (``F 0.7–1.5 km``; the same as ``row`` for a row without a band, and for the
    CSV's own rows: counts, the delta_1 range), so ``(section, label)`` matches a row of ``geoverify_table.md``.
    (Last, so the per-model groups of four keep their places from the third column on.)"""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    cols = _columns(scores)
    w.writerow([*CSV_FIXED_COLUMNS[:2], *[x for c in cols for x in (c, *(c + s for s in CSV_MODEL_SUFFIXES))],
                CSV_FIXED_COLUMNS[2]])
    band_labels = [b.band for b in next(iter(scores.values())).bands] if scores else []

    def shown(label: str) -> str:  # the row label of Markdown and the terminal (:func:`_rows` with pretty=True)
        for b in band_labels:
            label = label.replace(b, _band_title(b))
        return label

    def cell(v: object) -> object:
        return "" if v is None or (isinstance(v, float) and math.isnan(v)) else v

    def text_row(sec: str, label: str, texts: list[object]) -> None:
        w.writerow([sec, label, *[x for v in texts for x in ("", "", "", cell(v))], shown(label)])

    flagged = {c: small_n_bands(scores[c]) for c in cols}

    def note(c: str, key: str | None) -> str:
        if key and key in scores[c].ci_exact:
            text = BOUNDARY_TEXT
        else:
            text = SMALL_N_TEXT if key and key.startswith("d'[") and key[3:-1] in flagged[c] else ""
        return "; ".join(t for t in (text, FEW_CLUSTER_TEXT if few_cluster(scores[c], key) else "") if t)

    if scores:
        for sec, label, raw, _, key in _rows(scores, pretty=False):
            ivs = {c: _ci_pair(scores[c], key) for c in cols}
            values = {c: raw(scores[c]) for c in cols}
            if any(isinstance(v, str) for v in values.values()):
                text_row(sec, label, [values[c] for c in cols])
            else:
                vals: list[object] = []
                for c in cols:
                    iv = ivs[c]
                    vals += [cell(values[c]), *((cell(iv[0]), cell(iv[1])) if iv else ("", "")), note(c, key)]
                w.writerow([sec, label, *vals, shown(label)])
            if any(iv is not None and isinstance(iv[0], str) for iv in ivs.values()):  # delta_1: band labels
                for i, range_label in enumerate(DELTA_RANGE_ROWS):
                    text_row(sec, range_label, [ivs[c][i] if ivs[c] and not delta_none_throughout(scores[c])
                                                else None for c in cols])
            if key == DELTA_KEY and any(flagged.values()):
                text_row(sec, DELTA_SMALL_N_ROW, ["yes" if delta_1_marked(scores[c]) else "no" for c in cols])
    return buf.getvalue()


def render_terminal(scores: Mapping[str, ModelScores], *, width: int | None = None) -> str:
    """Table 12 as terminal text (a ``rich`` table rendered to a string, no colour codes); with one model, no pooled
    column and a sentence saying so in the caption (:func:`one_model_note`)."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    if not scores:
        return "no scored GeoVerify responses yet\n"
    one = one_model_note(scores)
    scores = shown_scores(scores)  # one model: no pooled copy of it (module doc)
    cols = _columns(scores)
    # notes left-aligned: rich centres a caption by default, each wrapped line on its own (ragged text; review s17)
    table = Table(title="GeoVerify (layout of GeoContext, Zhang and Wang 2026, Table 12)", show_lines=False,
                  caption_justify="left")
    table.add_column("")
    for c in cols:
        table.add_column(c, justify="right")
    section = None
    for sec, label, _, fmt, _key in _rows(scores):
        if sec != section:
            table.add_row(f"[bold]{sec}[/bold]", *[""] * len(cols))
            section = sec
        # cells are text, not rich markup: "none [none, none]" would otherwise lose its bracket as a tag
        table.add_row("  " + escape(label), *[escape(fmt(scores[c])) for c in cols])
    boot = bootstrap_note(scores)
    if boundary_note(scores):
        boot += " " + boundary_note(scores)
    if len(cols) > 2:
        boot = f"{COLUMN_ORDER_NOTE} {boot}".strip()
    boot = f"{one} {boot}".strip()
    if boot:
        table.caption = boot
    if width is None:  # the table's natural width: no cell (long model names included) is ever cut or wrapped
        width = UNBOUNDED_WIDTH
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(table)
    for w in [*band_gap_lines(scores), *truncation_warnings(scores)]:
        console.print(w, markup=False, soft_wrap=True)
    small = small_n_warnings(scores)
    if small:
        for w in [small_n_note(scores), *small]:
            console.print(w, markup=False, soft_wrap=True)
    for w in withheld_lines(scores):
        console.print(w, markup=False, soft_wrap=True)
    terms = legend_lines(report_tau_km(scores), report_band_gaps(scores))
    legend = "Terms:\n" + "".join(f"  {line[2:]}\n" for line in terms)
    return console.file.getvalue() + legend  # type: ignore[attr-defined]


def psychometric_figure(scores: Mapping[str, ModelScores], note: str | None = None):
    """The figure of :func:`plot_psychometric` (a matplotlib ``Figure``, not saved): d' against decoy distance
    (band midpoint, km, log axis), one line per model and pooled (no pooled line with one model, :func:`one_model`:
    the caption says so, :data:`ONE_MODEL_FIGURE_NOTE`), with the d' = 1 line dashed and the nearest
    band shaded (Figure 4). What the table shows is on it too: error bars are the d' site-bootstrap intervals
    (``ModelScores.ci``; none where the table has none), a d' resting on fewer than SMALL_N_TRIALS trials is
    drawn hollow and marked :data:`SMALL_N_MARK`, each legend entry gives the signal and decoy trials behind
    its line, and a caption under the axes names the interval (level, resamples, seed, sites) and the mark.
    ``note``: a line put first in that caption (a replay campaign's :func:`geoagent.providers.replay.replay_note`);
    None = none."""
    # a standalone Figure, not pyplot: no global figure state (the live report draws in a worker thread);
    # the Agg canvas is used when saving
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8.4, 4.8), dpi=110)  # wider than matplotlib's 6.4 in: the legend sits right of the axes
    ax = fig.subplots()
    edges = []
    tick_text: dict[tuple[float, float], str] = {}  # (lo, hi) km -> the band as the table's rows name it, unit aside
    any_small = False
    one = one_model(scores)
    scores = shown_scores(scores)  # one model: no pooled line on top of its own (module doc)
    cols = _columns(scores)
    for i, c in enumerate(cols):
        s = scores[c]
        flagged = set(small_n_bands(s))
        dodge = 1.0 + 0.035 * (i - (len(cols) - 1) / 2)  # side by side on the log axis: bars do not overlap
        xs, ys, lo_err, hi_err, small = [], [], [], [], []
        for b in s.bands:
            lo, hi = (float(x) for x in b.band.removesuffix("km").split("-"))
            edges.append((lo, hi))
            tick_text[(lo, hi)] = _band_title(b.band).removesuffix(" km")
            if not math.isnan(b.d_prime):
                xs.append(math.sqrt(lo * hi) * dodge)
                ys.append(b.d_prime)
                iv = s.ci.get(f"d'[{b.band}]")
                lo_err.append(max(0.0, b.d_prime - iv[0]) if iv else math.nan)
                hi_err.append(max(0.0, iv[1] - b.d_prime) if iv else math.nan)
                small.append(b.band in flagged)
        style = dict(color="black", linewidth=2.2) if c == POOLED else dict(linewidth=1.3)
        label = f"{c} ({s.n_signal} signal, {s.n_noise} decoy trials)"
        cont = ax.errorbar(xs, ys, yerr=[lo_err, hi_err], marker="o", capsize=2.5, elinewidth=0.8, label=label,
                           **style)
        color = cont.lines[0].get_color()
        for x, y, sm in zip(xs, ys, small):
            if sm:
                any_small = True
                ax.plot([x], [y], marker="o", markerfacecolor="white", markeredgecolor=color, linestyle="none",
                        zorder=5)
                ax.annotate(SMALL_N_MARK, (x, y), textcoords="offset points", xytext=(4, 4), fontsize=9, color=color)
    if edges:
        lo, hi = min(edges)
        ax.axvspan(lo, hi, color="0.85", zorder=0, label="nearest band")
    ax.axhline(1.0, linestyle="--", color="0.3", linewidth=1, label="d' = 1")
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter

    uniq = sorted(set(edges))
    ax.set_xticks([math.sqrt(lo * hi) for lo, hi in uniq], [tick_text[e] for e in uniq], fontsize=8)
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("decoy band (km)")
    ax.set_ylabel("sensitivity d'")
    ax.set_title("GeoVerify: discrimination vs decoy distance")
    # outside the axes, right of them: inside ("best") it hid points and error bars of the replay (session 17 review)
    legend_outside(ax, fontsize=7)
    boot = next((x for x in scores.values() if x.n_boot), None)
    caption = [note] if note else []
    if one:
        caption.append(ONE_MODEL_FIGURE_NOTE)
    if boot is not None:
        caption.append(f"Error bars: {100 * boot.ci_level:.0f} % percentile intervals of d' from {boot.n_boot} "
                       f"bootstrap resamples of sites (seed {boot.boot_seed}); none where trials come from fewer than "
                       f"{BOOT_MIN_SITES} sites." + few_cluster_text(scores, figure=True))
    else:
        caption.append("No error bars: no site bootstrap was run (n_boot = 0).")
    if any_small:
        caption.append(f"Hollow {SMALL_N_MARK}: d' rests on fewer than {SMALL_N_TRIALS} trials (signal or the band's "
                       "decoys); see the table's Small n lines.")
    # the axes (with their x label) start above the caption as drawn, wrapped lines included: a fixed share of
    # the height let a long caption (a replay's) run across "decoy band (km)" (session 17 review)
    layout_with_caption(fig, "\n".join(caption), fontsize=6.5)
    return fig


def plot_psychometric(scores: Mapping[str, ModelScores], path: str | Path, note: str | None = None) -> Path:
    """PNG of :func:`psychometric_figure` (d' against decoy distance with site-bootstrap error bars, small-n
    marks, trial counts and a caption; Figure 4) at ``path``, ``note`` first in the caption (None = none).
    Written atomically; returns ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return atomic_savefig(psychometric_figure(scores, note=note), path)


def _atomic_write(path: Path, text: str) -> None:
    # a temporary file of its own per write: several processes of a campaign may rewrite the report at once
    atomic_write_text(path, text)


def render_failures_md(failures: list[dict]) -> str:
    """Markdown list of parse failures (model, trial, reason)."""
    if not failures:
        return "\nParse failures: none.\n"
    lines = [f"\nParse failures ({len(failures)}):\n"]
    lines += [f"- {f.get('model')} / {f.get('trial_id')}: {f.get('reason')}" for f in failures]
    return "\n".join(lines) + "\n"


def render_missing_md(missing: list[dict]) -> str:
    """Markdown note on missing work (dead-lettered trials, excluded from every statistic), per model."""
    if not missing:
        return "\nMissing trials (dead-lettered): none.\n"
    per_model: dict[str, int] = {}
    for m in missing:
        per_model[str(m.get("model"))] = per_model.get(str(m.get("model")), 0) + 1
    counts = ", ".join(f"{k}: {v}" for k, v in sorted(per_model.items()))
    return (f"\n**Incomplete: {len(missing)} trial(s) missing** (dead-lettered after retries or a permanent error; "
            f"excluded from every statistic above, never scored as answers): {counts}. "
            f"See {MISSING_CSV} and `run.py dead`.\n")


def render_unreplayed(unreplayed: list[dict], n_trials: int | None = None) -> str:
    """One sentence on the table's trials a replay model could not replay (``model, key, edge, trial_id, reason``
    dicts of :func:`geoagent.geoverify.plan.unreplayed_trials`), per model and per reason; "" when none."""
    if not unreplayed:
        return ""
    per_model: dict[str, int] = {}
    reasons: dict[str, int] = {}
    for u in unreplayed:
        per_model[str(u.get("model"))] = per_model.get(str(u.get("model")), 0) + 1
        r = str(u.get("reason"))
        r = "recorded API error" if r.startswith("recorded API error") else r
        reasons[r] = reasons.get(r, 0) + 1
    of = f" of the {n_trials} table trials" if n_trials else ""
    return (f"Trials not replayed{of} (never planned, excluded from every statistic), per model: "
            + ", ".join(f"{k} {v}" for k, v in per_model.items()) + " ("
            + "; ".join(f"{r}: {n}" for r, n in reasons.items()) + f"); listed in {MISSING_CSV} (edge 'not replayed').")


def write_report(
    scores: Mapping[str, ModelScores],
    out_dir: str | Path,
    *,
    plot: bool = True,
    parse_failures: list[dict] | None = None,
    missing: list[dict] | None = None,
    interim: str | None = None,
    image_note: str | None = None,
    simulated: list[str] | tuple[str, ...] = (),
    config_mix: list[str] | tuple[str, ...] = (),
    scope_note: str | None = None,
    replay_note: str | None = None,
    unreplayed: list[dict] | None = None,
    n_trials: int | None = None,
    import_notes: Sequence[str] = (),
) -> dict[str, Path]:
    """Write table (Markdown, CSV, terminal text) and plot under ``out_dir``; safe to call repeatedly.

    ``simulated``: names of models whose answers came from the simulator
    (:func:`geoagent.sandbox.launch.simulated_models`); a banner above the Markdown and terminal tables says
    their figures describe the simulator, not a model.

    ``missing``: dead-lettered work as dicts ``model, key, edge, reason`` (issue 2 point 10: reports count
    it); noted under the Markdown and terminal tables and listed in ``geoverify_missing.csv``.
    ``interim``: a sentence saying the run stopped with work still pending (interrupted, budget), shown as
    a banner above the Markdown and terminal tables; None for a finished run.
    ``image_note``: the plan's line about images sent as placeholder pixels (no file under the image folder,
    :mod:`geoagent.image_files`), shown as a warning above the Markdown and terminal tables; None when every
    image had its file.
    ``config_mix``: one line per model whose scored answers were made under more than one set of request
    settings (:func:`geoagent.runtime.drift.params_mix_lines`), a warning above the tables (they pool them).
    ``scope_note``: a sentence on stored answers left out because their trials are no longer in the plan, above
    the tables; None when every stored answer is scored.
    ``unreplayed``: the table's trials a replay model could not replay (no recording, or a recorded API error;
    :func:`geoagent.geoverify.plan.unreplayed_trials`), counted per model under the Markdown and terminal tables
    (:func:`render_unreplayed`, ``n_trials`` the table's trials) and listed in ``geoverify_missing.csv`` with edge
    ``not replayed`` (written even without ``missing``).
    ``import_notes``: notes on the release files the plan read (rows left out as malformed, recorded answers not
    replayed), counted and listed (the first 200) in an "Import notes" section at the end of the Markdown file.
    ``replay_note``: the line of a campaign with replay models (:func:`geoagent.providers.replay.replay_note`:
    the replayed files, their responses, not the paper's Table 12), the first line of the Markdown and terminal
    files; None or "" without.

    Returns
    -------
    dict
        ``{"md", "csv", "txt", "png", "failures", "missing", "csv_note"}`` -> written paths (``png`` absent when
        ``plot`` is False or no scores exist yet; ``failures`` / ``missing`` only when given; ``csv_note``, the
        replay line and the simulator's warning beside the CSV files, :func:`geoagent.report.write_csv_note`, only
        when there is either). The figure's caption carries the same line(s).
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"md": out / TABLE_MD, "csv": out / TABLE_CSV, "txt": out / TABLE_TXT}
    sim_note = ""
    if simulated:
        from geoagent.sandbox.launch import simulated_note

        sim_note = simulated_note(list(simulated), task="geoverify")
    from geoagent.report import figure_note, write_csv_note

    csv_names = [TABLE_CSV, *([FAILURES_CSV] if parse_failures is not None else []),
                 *([MISSING_CSV] if missing is not None or unreplayed else [])]
    if interim:
        # live42 #2: the interim line before any CSV, so a kill among the files below leaves no CSV of partial sums
        # without a word that it is one (the note was written last: a kill in the first live rewrite left the CSVs
        # alone, with no report.md and no report_note.txt)
        write_csv_note(out, [replay_note, sim_note], csv_names, interim=interim)
    # said above the tables: answers made under different request settings pooled (config_mix, one line per
    # model, geoagent.runtime.drift.params_mix_lines), stored answers of trials the plan no longer holds
    # (scope_note)
    md = render_markdown(scores)
    note = ""
    unrep = render_unreplayed(unreplayed or [], n_trials)
    if missing is not None or unreplayed:
        note = (render_missing_md(missing) if missing is not None else "") + (f"\n**{unrep}**\n" if unrep else "")
        md += note
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model", "edge", "key", "reason"])
        for m in [*(missing or []), *(unreplayed or [])]:
            w.writerow([m.get("model"), m.get("edge"), m.get("key"), m.get("reason")])
        paths["missing"] = out / MISSING_CSV
        _atomic_write(paths["missing"], buf.getvalue())
    if parse_failures is not None:
        md += render_failures_md(parse_failures)
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(["model", "trial_id", "reason"])
        for f in parse_failures:
            w.writerow([f.get("model"), f.get("trial_id"), f.get("reason")])
        paths["failures"] = out / FAILURES_CSV
        _atomic_write(paths["failures"], buf.getvalue())
    if import_notes:
        md += "\n" + "\n".join(import_notes_section(import_notes, f"{count_text(len(import_notes), 'note')} on the "
                                                   "release files read: rows named here are left out."))
    banner = f"**{replay_note}**\n\n" if replay_note else ""
    if interim:
        banner += f"**Interim report: {interim}**\n\n"
    if image_note:
        banner += f"**Placeholder images: {image_note}**\n\n"
    if sim_note:
        banner += f"**{sim_note}**\n\n"
    if config_mix:
        from geoagent.runtime.drift import MIX_WARNING

        banner += f"**Warning: {MIX_WARNING}:**\n\n" + "".join(f"- {ln}\n" for ln in config_mix) + "\n"
    if scope_note:
        banner += f"**{scope_note}**\n\n"
    # newuser40 #9: the file never said it is the paper's Table 12 (the banner stays first: a replay or simulated
    # answers line opens every report file)
    _atomic_write(paths["md"], banner + f"## {TABLE_TITLE}\n\n" + md)
    _atomic_write(paths["csv"], render_csv(scores))
    _atomic_write(paths["txt"], banner.replace("**", "") + render_terminal(scores) + (note.replace("**", "") if missing or unrep else ""))
    if note_path := write_csv_note(out, [replay_note, sim_note], csv_names, interim=interim):
        paths["csv_note"] = note_path
    if plot and scores:
        paths["png"] = plot_psychometric(scores, out / PLOT_PNG,
                                         note=figure_note(replay_note, sim_note, interim=bool(interim)))
    return paths
