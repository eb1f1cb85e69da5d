"""Incremental aggregation of scored GeoHint answers into per-site sufficient statistics.

Every statistic of the GeoHint report (seed 000 Sec. 6, Tables 1-11) is a function of these per-site
sums, so the report can be refreshed after every batch of geocoded answers without revisiting rows
(issue 4 point 6), and regimes (which sites are legible) can be re-assigned at any time because the
sums are kept per site:

* ``cells[(site, model, condition, band, tier)]`` -> :class:`Cell` (counts of responses, hits, echoes,
  building-level and finer-than-city resolutions, parse failures, checklist compliance, and for
  finer-than-city answers the sums of log d_ref and log err and the list of err/d_ref ratios, whose
  median is not a sum statistic);
* ``ols[(model, condition, fine_only)]`` -> :class:`~geoagent.scoring.regression.ClusterOLS` with one
  cluster per site (``log10 err ~ d_ref``);
* ``pairs[site][(model, image, lang, reference point)][condition][(repeat, unreadable)]`` -> the outcome of that
  item's repeat under that condition (``unreadable``: the written value of a repeat a release route read as 0,
  ``extra["repeat_unreadable"]``, a request of its own; ``""`` otherwise), for strictly paired comparisons
  (Tables 8-10). The paired item is "same site, same image, same model, same language, same reference point" (seed 000 Sec. 6.3.1-6.3.2; the release's
  ``analysis/mitigation_results.py``, ``chain_results.py`` and ``cluster_inference.py`` key
  ``[site, path, model, lang, context]``), and its repeats are averaged before the paired difference (those
  scripts' ``pivot_table`` averages every row of a key; their "n pairs", e.g. 8215, count keys): see
  :meth:`GeoHintAggregator.paired` and :func:`pair_lang`. Two results with different keys for the same item,
  repeat and condition (e.g. a release import next to a campaign) are one slot: the result with the smallest
  key is held, so the paired tables do not depend on the order results arrive in (an incremental run equals a
  batch recompute); :attr:`GeoHintAggregator.n_pair_conflicts` counts such meetings (both results still enter
  the unpaired cells);
* ``image_counts[condition][(site, image, model, band)]`` -> :class:`ImageCount` (responses, hits, building-level
  answers, geocoded answers) of one image, pooled over languages, repeats and reference points, for the
  comparisons "paired by image" of the no-context baseline with a band (Sec. 6.1.3, the per-model no context
  vs near band estimate; Sec. 6.3.1, building-level share with context vs without):
  :meth:`GeoHintAggregator.image_paired`;
* ``truncation[(model, condition)]`` -> :class:`~geoagent.scoring.truncation.TruncationCount` of every
  added answer (also those left out of the tables for want of a hint distance, or as no answer) from its
  ``extra["finish_reason"]`` (absent, e.g. in the release's judged answers: counted as not cut off);
* ``no_answer[(model, condition)]`` -> answers cut off at the output-token limit with nothing parsed, left
  out of every other statistic but Table 11 (row rules below);
* ``without_ladder_cells[(model, condition)]`` -> :class:`Cell` of the context answers left out for want of a
  hint distance (row rules below), kept for Table 11 only;
* ``no_answer_cells[(model, condition)]`` -> :class:`Cell` of those no answers (row rules below), kept for
  Table 11 only (which reads the checklist conditions');
* ``geocoder_rules[version]`` -> answers the tables count per geocoding rules version that located them (a row's
  ``extra["geocoder_rules"]``; None: none recorded), which the report and the run's summary name when they mix.

Adding the same result key twice is a no-op (redelivered queue messages are harmless).

Row rules (checked against the paper and the release's analysis scripts):

* an answer cut off at the output-token limit with nothing parsed
  (:func:`geoagent.scoring.truncation.is_no_answer`: a cut-off finish reason and ``parse_ok`` False) is no
  answer: the campaign's cap ended it, not the model, and failures are never answers. It is counted in
  :attr:`GeoHintAggregator.no_answer` (and in :attr:`GeoHintAggregator.truncation`) and left out of every
  other statistic: no response, no miss, no echo verdict, no unresolved answer, no regime, no pair (the
  module doc of :mod:`geoagent.scoring.truncation` gives the decision and its sources). Table 11 alone counts
  a checklist one (:attr:`GeoHintAggregator.no_answer_cells`) as a response, unparsed and without an evidence
  object unless the parser recovered one: the paper's Table 11 runs over "every forced_chain response", 2799,
  "2 responses out of 2799 are unparseable" (seed 000 Sec. 6.3.2), and the release's
  ``analysis/chain_compliance.py`` divides by every line of the raw file, whatever its fate;
* a context response whose reference point has no hint distance (its QID is not in the site's ladder,
  e.g. one of the self-naming reference points removed from the released ladders) is left out of every
  statistic and counted in :attr:`GeoHintAggregator.n_without_ladder_point`, as the release's
  ``analysis/two_regimes.py`` ``load()`` drops such rows; Table 11 alone counts them
  (:attr:`GeoHintAggregator.without_ladder_cells`): its compliance runs over "every forced_chain response",
  2799, of which only 2538 "pair against a forced counterpart in a distance band" (seed 000 Sec. 6.3.2);
* checklist compliance (Table 11) is counted for the conditions of :data:`CHECKLIST_CONDITIONS`: the
  forced_chain answers with a hint and without one (``forced_chain_baseline``, the name the release importers
  give a forced_chain answer whose context is ``none``). A response carries an evidence object when the parser
  found one (``evidence`` not None), whether or not a place parsed, and its slots count: the release's
  ``chain_compliance.py`` counts every response whose JSON object holds an ``evidence`` object, and the
  categories of its slots, whatever else the object holds;
* the Table 5 quantities (geometric means of d_ref and err, median err/d_ref) use answers that resolved
  finer than city level with ``err_km > 0``; the slope regressions (Tables 6-7) use context answers with
  ``err_km > 0`` at every resolution level (``fine_only`` adds the finer-than-city filter) - zero errors
  have no logarithm and are dropped, not floored (release: ``error_km > 0``; the paper states no floor and
  the release's judged sample holds no zero error); how many were dropped is kept per cell
  (:attr:`Cell.n_zero_err`, finer than city, Table 5) and per slope fit (:attr:`GeoHintAggregator.zero_err`,
  Tables 6-7) so the report can say so;
* a context answer whose hint distance is 0 km (a reference point at the site: the protocol's ladder bands start
  at 0.5 km, seed 000 Sec. 3, so only a ladder of another design holds one) is left out of Table 5 (the geometric
  mean of d_ref and err/d_ref need d_ref > 0) and of the slope fits of Tables 6-7 (the "beta if reciting" endpoint,
  log10 d_ref, is undefined there, and the fits share its rows); counted per cell (:attr:`Cell.n_zero_dref`) and
  per slope fit (:attr:`GeoHintAggregator.zero_dref`) for the report's notes (break27 #1: dropped unsaid). Such an
  answer still counts in hit, echo and the other shares;
* an answer that did not geocode (``resolved_level`` ``"none"``) counts as a response (neither hit nor echo
  where it has no verdict) and in :attr:`Cell.n_none`, which the report shows as the unresolved share;
* hit (Sec. 4.2), echo (Sec. 6.2.1) and the building-level share count every response, parse failures of
  answers the model finished included (an unparsed answer is neither a hit nor an echo; the release's judged
  answers keep such rows with ``hit`` False);
* echo follows the aggregator's ``echo_rule`` (:data:`geoagent.geohint.echo.ECHO_RULES`): a result that
  carries every rule's verdict (``extra["echo_by_rule"]``, written by the scorer and the release importer)
  is counted under that rule, whatever rule it was scored with; an older result without it keeps its
  ``echo`` and the rule it was scored with (``extra["echo_rule"]``, else ``"name"``, the only rule there
  was). :attr:`GeoHintAggregator.echo_rule_counts` says how many counted echoes came from each rule, so
  a report can say when they are mixed. Each cell also counts the verdicts of the release scripts' rule
  (``release_first_word``, behind the paper's echo figures) whatever ``echo_rule`` is
  (:attr:`Cell.release_echo_rate`; from ``extra["echo_by_rule"]``, or ``echo`` of a result scored with that rule),
  so Table 1 shows both rules side by side (stats43 #2).

Regimes (:meth:`GeoHintAggregator.regimes`) split sites at the aggregator's ``regime_threshold``
(``[geohint] regime_threshold``, default 0.5 as in the paper, Sec. 6.1.2): a site is legible when its
pooled no-context hit rate is at least the threshold. The report reads the threshold from here for every
regime split (Tables 2, 3, 5, 7, 8, 9, Fig. 2) and names it. A site none of whose no-context answers
geocoded, every one of them parsed, has no regime (:meth:`GeoHintAggregator.undetermined_sites`,
:mod:`geoagent.scoring.regime`; an unparsed answer is a miss of the model's own making: :func:`hit_decided`).
The pooled rate leaves out the no-context answers of a model whose no-context hit rate is undetermined by Table 1's
rule (none of them geocoded, every one parsed: :meth:`GeoHintAggregator.regime_left_out_models`), in the full
assignment and in the split-half correction's halves alike (stats42 #1: counted as misses, such a model's answers
moved every other model's split, 27 legible / 12 illegible sites becoming 14 / 25 on a synthetic campaign).

Pooled rates without a regime split by model (stats43 #1): the comparisons that pool every model's answers of a
condition (the strictly paired Tables 8 and 10, the image-paired ``building_vs_nocontext``, Fig. 2's points) leave out
the models whose hit rate in a condition they compare is undetermined by the same rule
(:meth:`GeoHintAggregator.undetermined_models`): such a model had no chance to hit or to resolve at building level,
so its answers counted as misses pulled the pooled rates toward 0. :meth:`GeoHintAggregator.paired`,
:meth:`GeoHintAggregator.image_paired`, :meth:`GeoHintAggregator.select` and :meth:`GeoHintAggregator.site_cells`
take the models to leave out (``without``); the report names them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from geoagent import constants as C
from geoagent.data.model import LADDER_BAND_LABELS
from geoagent.geohint.echo import DEFAULT_ECHO_RULE, ECHO_RULE_NAME, ECHO_RULE_RELEASE_FIRST_WORD, check_echo_rule
from geoagent.geohint.parse import EVIDENCE_CATEGORIES, NOT_VISIBLE, PATTERN_READ_ERROR, parse_answer
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.release_rows import release_lang
from geoagent.scoring.exact import ExactSum
from geoagent.scoring.geohint import FINE_LEVELS, geometric_mean
from geoagent.scoring.regime import DEFAULT_THRESHOLD, UNDETERMINED, assign_regimes, check_threshold
from geoagent.scoring.regression import ClusterOLS, usable_for_slope
from geoagent.scoring.truncation import TruncationCount, is_no_answer

CellKey = tuple[str, str, str, str | None, str | None]  # site, model, condition, band, tier
PairKey = tuple[str, str, str, str]  # model, image, lang, reference point (repeats are held under it, averaged)
ImageKey = tuple[str, str, str, str | None]  # site, image, model, band
#: repeat, and the written value of a repeat the release routes could not read ("" for a readable one)
RepeatKey = tuple[int, str]
#: prompt language of an answer that does not name one: every campaign prompt is English (seed 000 Sec. 6: "English
#: only"; the release's judged answers all carry ``lang`` ``en``)
DEFAULT_LANG = "en"
BANDS = LADDER_BAND_LABELS
ERROR_FLOOR_KM = 1e-3  # kept for importers; no longer used: zero errors are dropped, not floored
#: why the report leaves a context answer out of every table although it is an answer: its reference point has no
#: hint distance (:func:`without_hint_distance`); the ``geohint_scored`` export's ``extra.left_out`` (null on
#: every other row), whose ``scored`` is then False (:func:`geoagent.geohint.stages.export_rows`)
NO_HINT_DISTANCE = "reference point not in the site's ladder: no hint distance"
#: conditions whose answers carry the evidence checklist (Table 11, module doc): forced_chain and its no-context
#: variant (:func:`geoagent.geohint.judged.release_condition`)
CHECKLIST_CONDITIONS = ("forced_chain", "forced_chain_baseline")


def without_hint_distance(ref_qid: object, ref_name: object, dist_km: object) -> bool:
    """Whether a scored GeoHint answer is a context answer (a reference point named: ``ref_qid`` or ``ref_name``
    not None) with no hint distance (``dist_km`` None: its QID is not in the site's ladder). Such an answer is
    left out of every statistic (module doc, row rules; the release's ``analysis/two_regimes.py`` ``load()``
    drops these rows) unless it is a no-answer, which the table ``cutoff`` counts first."""
    return (ref_qid is not None or ref_name is not None) and dist_km is None


def hit_decided(r: GeoHintResult) -> bool:
    """Whether ``r``'s hit is decided by more than the geocoder: the answer geocoded (resolved level other than
    ``none``), or it did not parse (``parse_ok`` False: the model's own answer named nothing, a miss whatever the
    geocoder does; seed 000 Sec. 4.1, "we do not post-hoc filter"). A rate of answers none of which is decided
    measures the geocoder, not the model: it is undetermined (NaN), and a site whose no-context answers are all
    undecided has no regime (:mod:`geoagent.scoring.regime`)."""
    return r.resolved_level != "none" or not r.parse_ok


@dataclass(slots=True)
class Cell:
    """Sufficient statistics of one (site, model, condition, band, tier) cell (counts are responses)."""

    n: int = 0
    hits: int = 0
    echo_n: int = 0
    echoes: int = 0
    #: echo verdicts (and echoes) under the release scripts' rule ``release_first_word``, whatever the aggregator's
    #: ``echo_rule`` (:meth:`GeoHintAggregator.add`): Table 1's column beside the paper's echo figures (stats43 #2);
    #: fewer than :attr:`echo_n` where results scored before both verdicts were kept carry the other rule's only
    release_echo_n: int = 0
    release_echoes: int = 0
    n_building: int = 0
    n_fine: int = 0
    n_city: int = 0
    n_none: int = 0
    #: of :attr:`n_none`, the unparsed answers (``parse_ok`` False): no place read, so nothing was geocoded
    n_none_unparsed: int = 0
    n_parse_fail: int = 0
    #: finer-than-city answers with a hint distance and err_km == 0: left out of Table 5 (no logarithm)
    n_zero_err: int = 0
    #: finer-than-city answers with a hint distance of 0 km: left out of Table 5 (no logarithm of d_ref)
    n_zero_dref: int = 0
    fine_dref_n: int = 0
    #: sums of ln d_ref and ln err over those :attr:`fine_dref_n` answers, held exactly and rounded once when read
    #: (:class:`~geoagent.scoring.exact.ExactSum`), so Table 5 does not depend on the order answers arrive in
    #: (aggr42 #5: a float sum made the live report's geometric means differ from a recompute's in the last digits)
    fine_log_dref: ExactSum = field(default_factory=ExactSum)
    fine_log_err: ExactSum = field(default_factory=ExactSum)
    ratios: list[float] = field(default_factory=list)
    #: checklist answers carrying an evidence object, parsed or not (Table 11's evidence share is of :attr:`n`,
    #: every response, as the paper's; seed 000 Table 11; module doc); the slots below are theirs
    evidence_present: int = 0
    #: checklist answers that parsed (a place named)
    evidence_parsed: int = 0
    slots_filled: dict[str, int] = field(default_factory=dict)
    slots_not_visible: dict[str, int] = field(default_factory=dict)
    #: checklist answers from which no JSON object was read (:func:`no_json_object`): Table 11's Unparseable,
    #: the paper's "2 responses out of 2799 are unparseable" (module doc)
    n_unparseable: int = 0
    #: checklist answers whose text geoagent's parser never read (:func:`answer_text_read` False: rows of a judged
    #: file, parsed fields only): Table 11 cannot be computed from them (seed 000: from the raw responses), so it
    #: is computed from the others (:attr:`n_text_read`) and the checklist counts above are theirs alone
    n_text_unread: int = 0

    def add(self, r: GeoHintResult, release_echo: bool | None = None) -> None:
        """Count ``r``; ``release_echo``: its verdict under the ``release_first_word`` rule (None: none)."""
        self.n += 1
        self.hits += bool(r.hit)
        if r.echo is not None:
            self.echo_n += 1
            self.echoes += bool(r.echo)
        if release_echo is not None:
            self.release_echo_n += 1
            self.release_echoes += bool(release_echo)
        level = r.resolved_level
        self.n_building += level == "building"
        self.n_city += level == "city"
        self.n_none += level == "none"
        self.n_none_unparsed += level == "none" and not r.parse_ok
        if not r.parse_ok:
            self.n_parse_fail += 1
        if level in FINE_LEVELS and r.error_km is not None:
            self.n_fine += 1
            if r.dist_km is not None and r.dist_km > 0 and r.error_km > 0:
                self.fine_dref_n += 1
                self.fine_log_dref.add(math.log(r.dist_km))
                self.fine_log_err.add(math.log(r.error_km))
                self.ratios.append(r.error_km / r.dist_km)
            elif r.dist_km is not None and r.dist_km > 0 and r.error_km == 0:
                self.n_zero_err += 1
            elif r.dist_km == 0 and math.isfinite(float(r.error_km)):  # as GeoHintAggregator.zero_dref
                self.n_zero_dref += 1
        if r.condition in CHECKLIST_CONDITIONS:
            if not answer_text_read(r):
                # a judged file's row: no text, so no evidence object to count and no parse to judge; Table 11
                # leaves it out and says how many (geoagent.report.geohint.table11)
                self.n_text_unread += 1
                return
            self.evidence_parsed += bool(r.parse_ok)
            self.n_unparseable += no_json_object(r)
            if r.evidence is not None:  # an evidence object, whatever else parsed (module doc)
                self.evidence_present += 1
                for cat, (n_slots, n_nv) in evidence_slots(r).items():
                    self.slots_filled[cat] = self.slots_filled.get(cat, 0) + n_slots
                    self.slots_not_visible[cat] = self.slots_not_visible.get(cat, 0) + n_nv

    def merge(self, o: "Cell") -> "Cell":
        for name in ("n", "hits", "echo_n", "echoes", "release_echo_n", "release_echoes", "n_building", "n_fine", "n_city", "n_none", "n_none_unparsed", "n_parse_fail",
                     "n_zero_err", "n_zero_dref", "fine_dref_n", "fine_log_dref", "fine_log_err", "evidence_present", "evidence_parsed",
                     "n_unparseable", "n_text_unread"):
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.ratios.extend(o.ratios)
        for cat, v in o.slots_filled.items():
            self.slots_filled[cat] = self.slots_filled.get(cat, 0) + v
        for cat, v in o.slots_not_visible.items():
            self.slots_not_visible[cat] = self.slots_not_visible.get(cat, 0) + v
        return self

    # --- derived (NaN when undefined) ---
    @property
    def n_text_read(self) -> int:
        """Answers whose text was read, in a cell of checklist answers (:meth:`GeoHintAggregator.compliance`): Table
        11's n, :attr:`n` less :attr:`n_text_unread`."""
        return self.n - self.n_text_unread

    @property
    def hit_rate(self) -> float:
        return self.hits / self.n if self.n else float("nan")

    @property
    def n_decided(self) -> int:
        """Answers whose hit the geocoder did not decide alone (:func:`hit_decided`): those that geocoded, and
        those that did not parse (the model's own answer named nothing: a miss whatever the geocoder does)."""
        return self.n - self.n_none + self.n_none_unparsed

    @property
    def geocoded_hit_rate(self) -> float:
        """:attr:`hit_rate`, but NaN (undetermined) when every answer parsed and none geocoded (:attr:`n_decided`
        0): an answer that did not geocode counts as a miss, so 0 % would measure the geocoder, not the model (the
        rule of an undetermined regime, :meth:`GeoHintAggregator.undetermined_sites`). Answers that did not parse
        are misses of the model's own making (seed 000 Sec. 4.1, no post-hoc filtering; the release's judged answers
        keep them with ``hit`` False), so a cell of them has a rate: 0 %, not an em dash. Used by the report."""
        return self.hit_rate if self.n_decided else float("nan")

    @property
    def echo_rate(self) -> float:
        return self.echoes / self.echo_n if self.echo_n else float("nan")

    @property
    def release_echo_rate(self) -> float:
        """Echo rate (fraction) under the release scripts' rule ``release_first_word``, the rule of the paper's echo
        figures, whatever the aggregator's ``echo_rule`` (:attr:`release_echo_n` verdicts); NaN without any."""
        return self.release_echoes / self.release_echo_n if self.release_echo_n else float("nan")

    @property
    def unresolved_share(self) -> float:
        """Share (fraction) of responses whose answer did not geocode (``resolved_level`` ``"none"``)."""
        return self.n_none / self.n if self.n else float("nan")

    @property
    def building_share(self) -> float:
        return self.n_building / self.n if self.n else float("nan")

    @property
    def geo_mean_dref_km(self) -> float:
        return math.exp(float(self.fine_log_dref) / self.fine_dref_n) if self.fine_dref_n else float("nan")

    @property
    def geo_mean_err_km(self) -> float:
        return math.exp(float(self.fine_log_err) / self.fine_dref_n) if self.fine_dref_n else float("nan")

    @property
    def median_ratio(self) -> float:
        return float(np.median(self.ratios)) if self.ratios else float("nan")

    @property
    def median_ratio_with_zeros(self) -> float:
        """The median of err/d_ref with the :attr:`n_zero_err` answers at err = 0 km counted (ratio 0), which
        :attr:`median_ratio` leaves out as the release's analysis does (no logarithm for the geometric means);
        NaN without any. Table 5's note gives it beside the table's when they differ (audit 24: a geocoder that
        puts a correctly named site on the site's own coordinate makes the best answers err = 0)."""
        return median_with_zeros(self.ratios, self.n_zero_err)


def median_with_zeros(ratios: Sequence[float], zeros: int) -> float:
    """The median of ``ratios`` (err/d_ref) with ``zeros`` more answers at err = 0 km counted as ratio 0; NaN without
    any (Table 5's and Tables 8 and 10's notes: :attr:`Cell.median_ratio_with_zeros`,
    :func:`geoagent.report.geohint._with_zeros`)."""
    if not ratios and not zeros:
        return float("nan")
    return float(np.median(np.concatenate([np.zeros(zeros), np.asarray(ratios, dtype=float)])))


#: parser methods (:attr:`geoagent.geohint.parse.ParsedAnswer.method`) that read no JSON object from the answer
NO_OBJECT_METHODS = frozenset({"regex", "failed"})


def answer_text_read(r: GeoHintResult) -> bool:
    """Whether geoagent's parser read ``r``'s answer text, so that its evidence object (or its absence) is known:
    every campaign answer (``source`` ``"campaign"``: the scorer parses the model's text) and every answer of the
    raw route (:mod:`geoagent.geohint.raw_import`, which records ``extra["parse_method"]``); not a row of a judged
    file (:mod:`geoagent.geohint.judged`: ``answers_judged.csv`` holds parsed fields only, no text and no evidence
    object). Table 11 is computed from the answers' text: seed 000 computes it from "the raw forced_chain
    responses" (Reproducibility), as the release's ``analysis/chain_compliance.py`` reads ``forced_chain_raw.jsonl``
    (:func:`geoagent.report.geohint.table11_withheld`)."""
    extra = r.extra if isinstance(r.extra, dict) else {}
    return r.source != "release" or bool(extra.get("parse_method"))


def no_json_object(r: GeoHintResult) -> bool:
    """Whether no JSON object was read from ``r``'s answer: Table 11's Unparseable. The paper's "2 responses out of
    2799 are unparseable" and "the 2797 that parsed" (seed 000 Sec. 6.3.2) are the release's
    ``analysis/chain_compliance.py`` count of responses with no JSON object at all (an object with no place in it
    parsed there); before session 12 the column counted answers naming no place (``parse_ok`` False). Read from
    the parser method (``extra["parse_method"]``, written by both import routes' raw importer and the campaign
    scorer; :data:`NO_OBJECT_METHODS`). A result stored without it (scored before session 12): its kept ``raw``
    text parsed again when nothing was parsed, else its ``parse_error`` says whether the place was read with a
    pattern (the parser's wording since before session 12), so an old state counts as a fresh run of it; no
    place parsed and no evidence object where neither was kept."""
    extra = r.extra if isinstance(r.extra, dict) else {}
    method = extra.get("parse_method")
    if isinstance(method, str) and method:
        return method in NO_OBJECT_METHODS
    if not r.parse_ok and isinstance(extra.get("raw"), str):
        return parse_answer(extra["raw"], extra.get("finish_reason")).method in NO_OBJECT_METHODS
    if r.parse_ok:
        return str(extra.get("parse_error") or "").startswith(PATTERN_READ_ERROR)
    return r.evidence is None


def evidence_slots(r: GeoHintResult) -> dict[str, tuple[int, int]]:
    """Table 11's slots of ``r``'s evidence object: category -> (slots, slots answered "not visible"), every key
    naming the category counted (``extra["evidence_slots"]``, :func:`geoagent.geohint.parse.evidence_slot_counts`,
    as the release's ``chain_compliance.py``); a stored result without it: one slot per category of ``evidence``
    (its first key). {} without an evidence object."""
    counts = r.extra.get("evidence_slots") if isinstance(r.extra, dict) else None
    if isinstance(counts, dict):
        return {c: (int(v[0]), int(v[1])) for c, v in counts.items() if c in EVIDENCE_CATEGORIES}
    return {c: (1, int(str(r.evidence[c]).strip().lower().startswith(NOT_VISIBLE)))
            for c in EVIDENCE_CATEGORIES if r.evidence and c in r.evidence}


def pair_lang(r: GeoHintResult) -> str:
    """The prompt language of ``r`` for the strictly paired key: ``extra["lang"]`` (release imports carry the
    release's ``lang`` column) as the release writes it (:func:`geoagent.geohint.release_rows.release_lang`: case
    and spaces kept, "EN" and "en" are two languages, as in the release's scripts and the request identity; an
    empty one is ``""``, not English: the identity keeps it apart from "en"), else :data:`DEFAULT_LANG` (a
    campaign answer carries no ``lang``: campaign prompts are English).

    Source: seed 000 Sec. 6.3.1 and 6.3.2 pair "same site, same image, same model, same language, same reference
    point", and the release's ``analysis/mitigation_results.py`` / ``chain_results.py`` / ``cluster_inference.py``
    key ``["site", "path", "model", "lang", "context"]``: an answer in one language never pairs with one in
    another (before session 12 the key left ``lang`` out, so an English forced answer paired with a Chinese
    forced_warn answer of the same item, and two languages of one item and condition took one slot)."""
    lang = r.extra.get("lang") if isinstance(r.extra, dict) else None
    return DEFAULT_LANG if lang is None else release_lang(lang)


@dataclass(slots=True)
class ImageCount:
    """Counts of one image's responses under one condition (and band), for comparisons paired by image."""

    n: int = 0
    hits: int = 0
    n_building: int = 0
    #: responses whose hit is decided (:func:`hit_decided`: the answer geocoded, or did not parse)
    n_geocoded: int = 0

    def add(self, hit: bool, building: bool, geocoded: bool) -> None:
        self.n += 1
        self.hits += bool(hit)
        self.n_building += bool(building)
        self.n_geocoded += bool(geocoded)

    def merge(self, o: "ImageCount") -> "ImageCount":
        self.n += o.n
        self.hits += o.hits
        self.n_building += o.n_building
        self.n_geocoded += o.n_geocoded
        return self

    @property
    def hit_rate(self) -> float:
        """Share (fraction) of responses that hit; NaN without responses."""
        return self.hits / self.n if self.n else float("nan")

    @property
    def building_share(self) -> float:
        """Share (fraction) of responses resolved at building level; NaN without responses."""
        return self.n_building / self.n if self.n else float("nan")


@dataclass(frozen=True, slots=True)
class PairObs:
    """One item's outcome under one condition (for strictly paired comparisons)."""

    hit: bool
    building: bool
    echo: bool | None
    fine: bool
    band: str | None
    ratio: float | None
    #: the answer's hit is decided (:func:`hit_decided`: it geocoded, or did not parse); a hit rate of answers none
    #: of which is decided is undetermined, not 0 (the report prints an em dash)
    geocoded: bool = True
    #: a finer-than-city answer at err = 0 km from a hint at d_ref > 0 (``ratio`` None: the release's ratio keeps
    #: ``error_km > 0``); Tables 8 and 10 count them and give the median ratios with them as 0 (review44c #1)
    zero_err: bool = False


@dataclass(frozen=True, slots=True)
class PairMean:
    """One strictly paired item's outcome under one condition, its repeats averaged (:meth:`GeoHintAggregator.paired`).

    ``hit``, ``building`` and ``echo`` are means over the item's repeats (fractions in [0, 1]; ``echo`` None when no
    repeat has an echo verdict), the per-item values whose treatment-minus-control difference the paired tests
    average; the counts let a table pool rates over responses (the release's raw-count rows of Tables 8 and 10)."""

    n: int
    hits: int
    n_building: int
    n_geocoded: int
    echo_n: int
    echoes: int
    band: str | None
    #: err/d_ref of the finer-than-city repeats with err > 0
    ratios: tuple[float, ...]
    #: finer-than-city repeats at err = 0 km (a hint at d_ref > 0): ratio 0, left out of ``ratios`` (review44c #1)
    n_zero_err: int = 0

    @classmethod
    def of(cls, obs: Iterable[PairObs]) -> "PairMean":
        obs = list(obs)
        if not obs:
            raise ValueError("a paired item needs at least one observation")
        echo = [o.echo for o in obs if o.echo is not None]
        return cls(len(obs), sum(o.hit for o in obs), sum(o.building for o in obs), sum(o.geocoded for o in obs),
                   len(echo), sum(bool(e) for e in echo), obs[0].band,
                   tuple(o.ratio for o in obs if o.ratio is not None), sum(o.zero_err for o in obs))

    @property
    def hit(self) -> float:
        return self.hits / self.n

    @property
    def building(self) -> float:
        return self.n_building / self.n

    @property
    def echo(self) -> float | None:
        return self.echoes / self.echo_n if self.echo_n else None

    @property
    def geocoded(self) -> bool:
        """Any repeat's answer geocoded."""
        return self.n_geocoded > 0


class GeoHintAggregator:
    """Per-site sufficient statistics of a GeoHint campaign; feed with :meth:`add` / :meth:`add_many`."""

    def __init__(
        self,
        *,
        baseline_condition: str = "baseline",
        echo_rule: str = DEFAULT_ECHO_RULE,
        regime_threshold: float = DEFAULT_THRESHOLD,
    ) -> None:
        """``echo_rule``: the rule whose verdict counts as echo (module docstring); raises ValueError for an
        unknown rule. ``regime_threshold``: the no-context hit rate (a fraction in (0, 1)) from which a site
        is legible (``[geohint] regime_threshold``); raises ValueError outside (0, 1)."""
        self.baseline_condition = baseline_condition
        self.echo_rule = check_echo_rule(echo_rule)
        self.regime_threshold = check_threshold(regime_threshold)
        #: rule -> number of counted responses whose echo verdict came from that rule
        self.echo_rule_counts: dict[str, int] = {}
        self.cells: dict[CellKey, Cell] = {}
        self.ols: dict[tuple[str, str, bool], ClusterOLS] = {}
        #: same rows with y = log10(d_ref): the slope a model reciting the hint would get (Sec. 6.2.3)
        self.ols_recite: dict[tuple[str, str, bool], ClusterOLS] = {}
        self._by_condition: dict[str, dict[CellKey, Cell]] = {}
        self.pairs: dict[str, dict[PairKey, dict[str, dict[RepeatKey, PairObs]]]] = {}
        #: (site, pair key, condition, repeat) -> result key of the observation held in :attr:`pairs`
        self._pair_keys: dict[tuple[str, PairKey, str, RepeatKey], str] = {}
        #: condition -> (site, image, model, band) -> counts of that image's responses (module doc)
        self.image_counts: dict[str, dict[ImageKey, ImageCount]] = {}
        #: results that met an already-held observation of the same strictly paired item and condition under
        #: another result key (module doc); the paired tables keep one observation per item and condition
        self.n_pair_conflicts = 0
        self.keys: set[str] = set()
        self._models: set[str] = set()
        self._conditions: set[str] = set()
        #: context responses left out because their reference point has no hint distance (not in the ladder)
        self.n_without_ladder_point = 0
        #: (model, condition) -> answers cut off at the output-token limit (module doc)
        self.truncation: dict[tuple[str, str], TruncationCount] = {}
        #: (model, condition) -> answers cut off at the output-token limit with nothing parsed: no answer, left
        #: out of every other statistic but Table 11 (module doc)
        self.no_answer: dict[tuple[str, str], int] = {}
        #: (model, condition) -> Cell of those no answers; only Table 11 (every forced_chain response, so the
        #: checklist conditions') reads it (module doc)
        self.no_answer_cells: dict[tuple[str, str], Cell] = {}
        #: (model, condition) -> Cell of the context answers left out for want of a hint distance; only Table 11
        #: (checklist compliance over every forced_chain response) reads it (module doc)
        self.without_ladder_cells: dict[tuple[str, str], Cell] = {}
        #: (site, model, condition, fine_only) -> context answers with a hint distance left out of the slope
        #: fits (Tables 6-7) because err_km == 0 (log undefined; module doc)
        self.zero_err: dict[tuple[str, str, str, bool], int] = {}
        #: (site, model, condition, fine_only) -> context answers left out of the slope fits (Tables 6-7) because
        #: their hint distance is 0 km (module doc)
        self.zero_dref: dict[tuple[str, str, str, bool], int] = {}
        #: geocoding rules version (a row's ``extra.geocoder_rules``; None: none recorded, located before version 14
        #: or read from a release) -> answers the tables count that it located: a campaign resumed across a rules
        #: change mixes versions (fixgeohint42 #1, #2: the report and the run's summary say how many each)
        self.geocoder_rules: dict[int | None, int] = {}

    # --- updating ---------------------------------------------------------------------------
    def _echo_of(self, r: GeoHintResult) -> tuple[bool | None, str | None]:
        """(echo verdict under :attr:`echo_rule` where the result carries it, the rule it came from)."""
        by_rule = r.extra.get("echo_by_rule") if isinstance(r.extra, dict) else None
        if isinstance(by_rule, dict) and self.echo_rule in by_rule:
            v = by_rule[self.echo_rule]
            return (None if v is None else bool(v)), self.echo_rule
        if r.echo is None:
            return None, None
        rule = r.extra.get("echo_rule") if isinstance(r.extra, dict) else None
        return r.echo, str(rule or ECHO_RULE_NAME)

    @staticmethod
    def _release_echo_of(r: GeoHintResult) -> bool | None:
        """``r``'s echo verdict under ``release_first_word`` (stats43 #2: Table 1 gives it beside the chosen rule's):
        from ``extra["echo_by_rule"]``, else ``echo`` where ``r`` was scored with that rule; None otherwise (no
        verdict, or a result scored with the other rule alone, before both were kept)."""
        extra = r.extra if isinstance(r.extra, dict) else {}
        by_rule = extra.get("echo_by_rule")
        if isinstance(by_rule, dict) and ECHO_RULE_RELEASE_FIRST_WORD in by_rule:
            v = by_rule[ECHO_RULE_RELEASE_FIRST_WORD]
            return None if v is None else bool(v)
        if r.echo is not None and extra.get("echo_rule") == ECHO_RULE_RELEASE_FIRST_WORD:
            return bool(r.echo)
        return None

    def add(self, r: GeoHintResult) -> bool:
        """Add one scored result; returns False (and changes nothing) for an already-seen key.

        Raises
        ------
        ValueError
            ``r.dist_km`` is no distance on Earth (not a finite number in ``[0, constants.MAX_SURFACE_DISTANCE_KM]``
            km: a corrupt ladder row scored before the importer refused it); the message names the result key and
            the value, and nothing is added (before, 1e200 km overflowed the slope regression, whose fit then said
            "X'X is singular" and the table showed a dash).
        """
        if r.dist_km is not None:
            d = r.dist_km
            if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= C.MAX_SURFACE_DISTANCE_KM:
                raise ValueError(f"GeoHint result {r.key!r} (site {r.site!r}, reference {r.ref_qid or r.ref_name!r}): "
                                 f"hint distance dist_km={d!r} is no distance on Earth (0 to "
                                 f"{C.MAX_SURFACE_DISTANCE_KM:.1f} km); its ladder row is corrupt")
        if r.key in self.keys:
            return False
        self.keys.add(r.key)
        tk = (r.model, r.condition)
        tc = self.truncation.get(tk)
        if tc is None:
            tc = self.truncation[tk] = TruncationCount()
        finish_reason = r.extra.get("finish_reason") if isinstance(r.extra, dict) else None
        tc.add(finish_reason, bool(r.parse_ok))
        if is_no_answer(finish_reason, bool(r.parse_ok)):
            self.no_answer[tk] = self.no_answer.get(tk, 0) + 1  # no answer: in no other statistic (module doc)
            self.no_answer_cells.setdefault(tk, Cell()).add(r)  # Table 11 counts a checklist one (module doc)
            return True
        if without_hint_distance(r.ref_qid, r.ref_name, r.dist_km):
            self.n_without_ladder_point += 1  # not in the site's ladder: out of every table but 11 (module doc)
            self.without_ladder_cells.setdefault(tk, Cell()).add(r)
            return True
        rules = r.extra.get("geocoder_rules") if isinstance(r.extra, dict) else None
        rules = rules if isinstance(rules, int) and not isinstance(rules, bool) else None
        self.geocoder_rules[rules] = self.geocoder_rules.get(rules, 0) + 1
        echo, rule = self._echo_of(r)
        release_echo = self._release_echo_of(r)  # before echo is replaced: r.echo is still the scored rule's
        if echo != r.echo:
            r = dataclasses.replace(r, echo=echo)  # the caller's object stays as it was
        if rule is not None:
            self.echo_rule_counts[rule] = self.echo_rule_counts.get(rule, 0) + 1
        self._models.add(r.model)
        self._conditions.add(r.condition)
        ck = (r.site, r.model, r.condition, r.band, r.tier)
        cell = self.cells.get(ck)
        if cell is None:
            cell = self.cells[ck] = Cell()
            self._by_condition.setdefault(r.condition, {})[ck] = cell
        cell.add(r, release_echo)
        if r.has_context and usable_for_slope(r.error_km, r.dist_km) and float(r.dist_km) > 0:
            x = (1.0, float(r.dist_km))
            y = math.log10(float(r.error_km))
            self._ols(r.model, r.condition, False).add_row(r.site, x, y)
            if r.resolved_level in FINE_LEVELS:
                self._ols(r.model, r.condition, True).add_row(r.site, x, y)
            # the "always recite the hint" endpoint (err = d_ref) on the same rows (Sec. 6.2.3)
            self._ols(r.model, r.condition, False, recite=True).add_row(r.site, x, math.log10(float(r.dist_km)))
        elif r.has_context and r.error_km is not None and r.error_km == 0 and float(r.dist_km) > 0:
            for fine in (False, True) if r.resolved_level in FINE_LEVELS else (False,):
                zk = (r.site, r.model, r.condition, fine)
                self.zero_err[zk] = self.zero_err.get(zk, 0) + 1
        elif r.has_context and r.dist_km == 0 and r.error_km is not None and math.isfinite(float(r.error_km)):
            for fine in (False, True) if r.resolved_level in FINE_LEVELS else (False,):
                zk = (r.site, r.model, r.condition, fine)
                self.zero_dref[zk] = self.zero_dref.get(zk, 0) + 1
        if not r.has_context or r.band is not None:  # every no-context condition (v1_baseline too), every band
            ik = (r.site, r.image_id, r.model, r.band if r.has_context else None)
            ic = self.image_counts.setdefault(r.condition, {}).get(ik)
            if ic is None:
                ic = self.image_counts[r.condition][ik] = ImageCount()
            ic.add(bool(r.hit), r.resolved_level == "building", hit_decided(r))
        if r.has_context:
            pk = (r.model, r.image_id, pair_lang(r), r.ref_qid or f"name:{r.ref_name}")
            # a repeat the release routes could not read (read as 0) is a request of its own, not repeat 0's
            # (geoagent.geohint.release_rows.unreadable_repeat): its own slot, averaged with the others
            bad = r.extra.get("repeat_unreadable") if isinstance(r.extra, dict) else None
            rep = (int(r.repeat), "" if bad is None else str(bad))
            fine = r.resolved_level in FINE_LEVELS and r.error_km is not None
            ratio = r.error_km / r.dist_km if fine and r.dist_km and r.error_km > 0 else None
            obs = PairObs(bool(r.hit), r.resolved_level == "building", r.echo, fine, r.band, ratio,
                          geocoded=hit_decided(r),
                          zero_err=bool(fine and r.dist_km is not None and r.dist_km > 0 and r.error_km == 0))
            slot = self.pairs.setdefault(r.site, {}).setdefault(pk, {}).setdefault(r.condition, {})
            src = (r.site, pk, r.condition, rep)
            prev = self._pair_keys.get(src)
            if prev is not None:
                self.n_pair_conflicts += 1
            if prev is None or r.key < prev:  # the smallest result key wins, whatever the arrival order
                slot[rep] = obs
                self._pair_keys[src] = r.key
        return True

    def add_many(self, results: Iterable[GeoHintResult]) -> int:
        """Add results; returns how many were new."""
        return sum(self.add(r) for r in results)

    def _ols(self, model: str, condition: str, fine: bool, *, recite: bool = False) -> ClusterOLS:
        store = self.ols_recite if recite else self.ols
        key = (model, condition, fine)
        if key not in store:
            store[key] = ClusterOLS(k=2)
        return store[key]

    # --- queries ----------------------------------------------------------------------------
    @property
    def models(self) -> list[str]:
        """Models seen, sorted."""
        return sorted(self._models)

    @property
    def conditions(self) -> list[str]:
        """Conditions seen, sorted."""
        return sorted(self._conditions)

    @property
    def answered_models(self) -> list[str]:
        """Models with any added answer, sorted: :attr:`models` plus models whose every answer was no answer
        (cut off with nothing parsed) or lacked a hint distance."""
        return sorted({m for m, _c in self.truncation} | self._models)

    def compliance(self, model: str, condition: str = "forced_chain") -> Cell:
        """Table 11's counts for ``model``: every answer of ``condition`` and of its no-context variant
        (``<condition>_baseline``), also those left out of every other table for want of a hint distance
        (:attr:`without_ladder_cells`) or as no answers, cut off with nothing parsed (:attr:`no_answer_cells`): the
        paper's n is every forced_chain response (module doc)."""
        out = Cell()
        for cond in (condition, f"{condition}_baseline"):
            out.merge(self.select(model=model, condition=cond))
            for kept in (self.without_ladder_cells, self.no_answer_cells):
                left = kept.get((model, cond))
                if left is not None:
                    out.merge(left)
        return out

    def n_no_answer(self, *, model: str | None = None, condition: str | None = None) -> int:
        """Answers cut off at the output-token limit, or stopped by the provider's content filter, with nothing parsed
        (:attr:`no_answer`) of ``model`` and ``condition`` (None = any): left out of every rate (module doc)."""
        return sum(n for (m, c), n in self.no_answer.items()
                   if (model is None or m == model) and (condition is None or c == condition))

    def n_no_answer_withheld(self, *, model: str | None = None, condition: str | None = None) -> int:
        """Of :meth:`n_no_answer`, the answers the provider's content filter stopped with nothing parsed (the others
        were cut off at the output-token limit; :attr:`TruncationCount.n_withheld_unparsed`)."""
        return sum(c.n_withheld_unparsed for (m, cond), c in self.truncation.items()
                   if (model is None or m == model) and (condition is None or cond == condition))

    @property
    def sites(self) -> list[str]:
        return sorted({k[0] for k in self.cells})

    def cell(self, pred: Callable[[CellKey], bool], *, condition: str | None = None) -> Cell:
        """Sum of every cell whose key satisfies ``pred((site, model, condition, band, tier))``
        (only cells of ``condition`` are visited when it is given)."""
        out = Cell()
        source = self.cells if condition is None else self._by_condition.get(condition, {})
        for k, c in source.items():
            if pred(k):
                out.merge(c)
        return out

    def site_cells(self, *, condition: str, model: str | None = None, band: str | None = None,
                   tier: str | None = None, sites: set[str] | None = None,
                   without: Collection[str] = ()) -> dict[str, Cell]:
        """site -> sum of that site's cells of ``condition`` matching the other fields (None = any), less the
        models of ``without``; sites without a matching cell are absent. One pass over the condition's cells (the
        per-site counts a site bootstrap resamples, :func:`geoagent.report.geohint.site_bootstrap_interval`)."""
        out: dict[str, Cell] = {}
        for (s, m, _c, b, t), cell in self._by_condition.get(condition, {}).items():
            if ((model is None or m == model) and (band is None or b == band) and (tier is None or t == tier)
                    and (sites is None or s in sites) and m not in without):
                out.setdefault(s, Cell()).merge(cell)
        return out

    def select(
        self,
        *,
        sites: set[str] | None = None,
        model: str | None = None,
        condition: str | None = None,
        band: str | None = None,
        tier: str | None = None,
        without: Collection[str] = (),
    ) -> Cell:
        """Sum of cells matching the given fields (None = any), less the cells of the models in ``without`` (the
        pooled rates' :meth:`undetermined_models`)."""
        return self.cell(
            lambda k: (sites is None or k[0] in sites)
            and (model is None or k[1] == model)
            and k[1] not in without
            and (condition is None or k[2] == condition)
            and (band is None or k[3] == band)
            and (tier is None or k[4] == tier),
            condition=condition,
        )

    def baseline_counts(self, condition: str | None = None) -> dict[str, dict[str, tuple[int, int]]]:
        """site -> model -> (hits, n) of the no-context condition."""
        cond = condition or self.baseline_condition
        out: dict[str, dict[str, tuple[int, int]]] = {}
        for (site, model, c, _b, _t), cell in self.cells.items():
            if c == cond and cell.n:
                k, n = out.setdefault(site, {}).get(model, (0, 0))
                out[site][model] = (k + cell.hits, n + cell.n)
        return out

    def baseline_geocoded(self, condition: str | None = None) -> dict[str, int]:
        """site -> no-context answers that geocoded (resolved level other than ``none``), all models pooled;
        sites with no-context answers only."""
        cond = condition or self.baseline_condition
        out: dict[str, int] = {}
        for (site, _model, c, _b, _t), cell in self.cells.items():
            if c == cond and cell.n:
                out[site] = out.get(site, 0) + cell.n_decided
        return out

    def regime_left_out_models(self, condition: str | None = None) -> list[str]:
        """Models (sorted) whose no-context answers (``condition``, default :attr:`baseline_condition`) are left out
        of the regime assignment and of the split-half correction's halves: their no-context hit rate, pooled over
        every site, is undetermined by Table 1's rule (:attr:`Cell.geocoded_hit_rate` NaN: every answer parsed and
        none geocoded). Counting them as misses would pull every site toward illegible and move the split for every
        other model (stats42 #1); the other models' answers assign the sites as if this model had not answered. A
        model with one decided no-context answer anywhere is kept, its unresolved answers counted as misses."""
        return self.undetermined_models(condition or self.baseline_condition)

    def undetermined_models(self, *conditions: str) -> list[str]:
        """Models (sorted) whose hit rate in one of ``conditions``, pooled over every site, band and tier, is
        undetermined by Table 1's rule (:attr:`Cell.geocoded_hit_rate` NaN: the model answered in that condition,
        every answer parsed and none geocoded, so 0 % would measure the geocoder, not the model).

        The comparisons that pool models leave them out (stats42 #1 for the regime assignment,
        :meth:`regime_left_out_models`; stats43 #1 for Tables 8 and 10, ``building_vs_nocontext`` and Fig. 2):
        counted as misses, answers that never had a chance to hit (or to resolve at building level) pull a pooled
        rate toward 0 by the geocoder's doing. A model with one decided answer in a condition (geocoded, or
        unparsed: a miss of its own making, :func:`hit_decided`) is kept there, its unresolved answers counting as
        misses. No conditions: no model."""
        out = []
        for m in self.models:
            cells = (self.select(model=m, condition=cond) for cond in conditions)
            if any(c.n and math.isnan(c.geocoded_hit_rate) for c in cells):
                out.append(m)
        return out

    def _assigned(self, threshold: float | None, condition: str | None) -> dict[str, str]:
        threshold = self.regime_threshold if threshold is None else check_threshold(threshold)
        left_out = set(self.regime_left_out_models(condition))  # stats42 #1: Table 1's undetermined rates
        counts = self.baseline_counts(condition)
        pooled = {
            s: (sum(k for m, (k, _) in per.items() if m not in left_out),
                sum(n for m, (_, n) in per.items() if m not in left_out))
            for s, per in counts.items()
        }
        out = assign_regimes(pooled, threshold=threshold, geocoded=self.baseline_geocoded(condition))
        # a site answered by left-out models only: every no-context answer parsed and none geocoded, so undetermined
        # as before (assign_regimes skips it for want of counted answers)
        return {s: out.get(s, UNDETERMINED) for s in counts}

    def regimes(self, *, threshold: float | None = None, condition: str | None = None) -> dict[str, str]:
        """site -> ``legible``/``illegible`` from the pooled no-context hit rate (over every model but those of
        :meth:`regime_left_out_models`); ``threshold`` defaults to :attr:`regime_threshold`. Sites without a
        baseline are absent, and so are sites none of whose no-context answers geocoded (:meth:`undetermined_sites`)."""
        return {s: r for s, r in self._assigned(threshold, condition).items() if r != UNDETERMINED}

    def undetermined_sites(self, condition: str | None = None) -> list[str]:
        """Sites (sorted) with no-context answers of which none geocoded, all of them parsed (none decided,
        :func:`hit_decided`): their regime is undetermined (:data:`geoagent.scoring.regime.UNDETERMINED`), so they
        are in no regime. A site whose no-context answers include unparsed ones (misses of the model's own
        making) has a regime."""
        return sorted(s for s, r in self._assigned(None, condition).items() if r == UNDETERMINED)

    def regression(
        self, *, models: Iterable[str] | None = None, condition: str, fine_only: bool = False, recite: bool = False
    ) -> ClusterOLS:
        """A ClusterOLS pooling the per-site statistics of ``models`` (all by default) for one condition;
        ``recite=True`` gives the same rows with ``y = log10(d_ref)`` (the reciting endpoint)."""
        out = ClusterOLS(k=2)
        store = self.ols_recite if recite else self.ols
        for m in models if models is not None else self.models:
            o = store.get((m, condition, fine_only))
            if o is not None:
                out.merge(o)
        return out

    def n_zero_err(self, *, condition: str, models: Iterable[str] | None = None, sites: set[str] | None = None,
                   fine_only: bool = False) -> int:
        """Context answers of ``condition`` (``models``/``sites``: None = all) left out of the slope fits because
        err_km == 0 (log10 undefined; no floor in the paper or the release)."""
        ms = None if models is None else set(models)
        return sum(v for (s, m, c, f), v in self.zero_err.items()
                   if c == condition and f == fine_only and (ms is None or m in ms) and (sites is None or s in sites))

    def n_zero_dref(self, *, condition: str, models: Iterable[str] | None = None, sites: set[str] | None = None,
                    fine_only: bool = False) -> int:
        """Context answers of ``condition`` (``models``/``sites``: None = all) with an error (km, finite) left out
        of the slope fits because their hint distance is 0 km (module doc)."""
        ms = None if models is None else set(models)
        return sum(v for (s, m, c, f), v in self.zero_dref.items()
                   if c == condition and f == fine_only and (ms is None or m in ms) and (sites is None or s in sites))

    def paired(
        self, treatment: str, control: str, *, sites: set[str] | None = None, model: str | None = None,
        without: Collection[str] = (),
    ) -> list[tuple[str, PairMean, PairMean]]:
        """Strictly paired items (same site, image, model, language, reference point) observed under both
        conditions: list of ``(site, treatment, control)``, each a :class:`PairMean` of the item's repeats under
        that condition, in a deterministic order. One entry per item, whatever its repeat counts. ``without``:
        models whose items are left out (the report's :meth:`undetermined_models`, stats43 #1).

        Pairing unit and repeats, decided from the paper and the release (seed 000 Sec. 6.3.1: "strictly paired
        observations - same site, same image, same model, same language, same reference point - giving 8215
        pairs"; the release's ``analysis/mitigation_results.py``, ``chain_results.py`` and
        ``cluster_inference.py``: ``pivot_table(index=key, columns="schema", values="hit")`` over
        ``key = [site, path, model, lang, context]``, whose default ``aggfunc`` is the mean, then ``dropna()``):

        * ``lang`` is part of the item (:func:`pair_lang`);
        * an item's repeats are averaged per condition before the difference, and an item counts once (n pairs
          = items). Pairing repeat r with repeat r instead (the key before session 12) gives another number
          whenever the repeat counts differ between the two conditions: repeats without a counterpart were
          dropped (an item with repeats 0, 1 under forced and 0 under forced_warn used only repeat 0) and an
          item whose repeat indices did not overlap had no pair at all; it also counted each repeat as a pair."""
        return [(site, PairMean.of(conds[treatment][k] for k in sorted(conds[treatment])),
                 PairMean.of(conds[control][k] for k in sorted(conds[control])))
                for site, _, conds in self._paired_items(treatment, control, sites, model, without)]

    def _paired_items(self, treatment: str, control: str, sites: set[str] | None, model: str | None,
                      without: Collection[str] = ()) -> Iterator[tuple[str, tuple, dict]]:
        """``(site, item key, its answers by condition)`` of each item :meth:`paired` pairs, in its order."""
        for site in sorted(self.pairs):
            if sites is not None and site not in sites:
                continue
            for pk in sorted(self.pairs[site]):
                if (model is not None and pk[0] != model) or pk[0] in without:
                    continue
                conds = self.pairs[site][pk]
                if conds.get(treatment) and conds.get(control):
                    yield site, pk, conds

    def paired_models(
        self, treatment: str, control: str, *, sites: set[str] | None = None, model: str | None = None,
        without: Collection[str] = (),
    ) -> list[str]:
        """The models (sorted) of the items :meth:`paired` returns for the same arguments: whose answers a test on
        those pairs holds (the report labels its site-flip tests by them)."""
        return sorted({pk[0] for _, pk, _ in self._paired_items(treatment, control, sites, model, without)})

    def image_paired_models(
        self, treatment: str, control: str, *, band: str, model: str | None = None, sites: set[str] | None = None,
        without: Collection[str] = (),
    ) -> list[str]:
        """The models (sorted) whose responses :meth:`image_paired` pools into its pairs for the same arguments:
        a model with an answer to a paired image under ``treatment`` in ``band`` or under ``control``."""
        t, c = self._image_pools(treatment, control, band, model, sites, without)
        return sorted({m for key in t.keys() & c.keys() for m in t[key][1] | c[key][1]})

    def image_paired(
        self, treatment: str, control: str, *, band: str, model: str | None = None, sites: set[str] | None = None,
        without: Collection[str] = (),
    ) -> list[tuple[str, str, ImageCount, ImageCount]]:
        """Images answered under both ``treatment`` in ``band`` and the no-context ``control``: list of
        ``(site, image, treatment counts, control counts)`` sorted by (site, image), each :class:`ImageCount`
        pooling that image's responses over languages, repeats and reference points, and over models unless
        ``model`` is given (None = all models pooled). ``sites``: restrict to these (None = all). ``without``: models
        whose responses are left out of both conditions' pools (the report's :meth:`undetermined_models`, stats43 #1).

        This is the unit of the comparisons "paired by image" of seed 000 Sec. 6.1.3 (no context vs near band,
        per model) and Sec. 6.3.1 (building-level share, context vs no context, per band), as the release
        computes the latter (``analysis/cluster_inference.py``, "CONTEXT VS BASELINE": ``groupby("path")`` mean
        of each condition, inner join on the image, all models, languages and repeats of the image pooled)."""
        t, c = self._image_pools(treatment, control, band, model, sites, without)
        return [(s, img, t[(s, img)][0], c[(s, img)][0]) for s, img in sorted(t.keys() & c.keys())]

    def _image_pools(self, treatment: str, control: str, band: str, model: str | None, sites: set[str] | None,
                     without: Collection[str] = ()) -> tuple[dict[tuple[str, str], tuple[ImageCount, set[str]]], ...]:
        """Per ``(site, image)``: the pooled counts and the models pooled into them, under ``treatment`` in
        ``band`` and under the no-context ``control`` (:meth:`image_paired`)."""
        def pooled(cond: str, b: str | None) -> dict[tuple[str, str], tuple[ImageCount, set[str]]]:
            acc: dict[tuple[str, str], tuple[ImageCount, set[str]]] = {}
            for (s, img, m, bb), c in self.image_counts.get(cond, {}).items():
                if bb == b and (model is None or m == model) and (sites is None or s in sites) and m not in without:
                    count, models = acc.setdefault((s, img), (ImageCount(), set()))
                    count.merge(c)
                    models.add(m)
            return acc

        return pooled(treatment, band), pooled(control, None)

    def baseline_arrays(self, condition: str | None = None) -> tuple[list[str], list[str], list[int]]:
        """No-context responses as per-response arrays (site, model, hit), rebuilt from counts (the order
        within a (site, model) group carries no information, so a random split of these equals a random
        split of the responses). Sites whose regime is undetermined (:meth:`undetermined_sites`) are left
        out: a split must not assign them a regime either. So are the answers of the models left out of the regime
        assignment (:meth:`regime_left_out_models`, stats42 #1): in neither half, so no split's half A assigns by
        them and the other models' splits are those of a campaign without them (their own no-context rate is
        undetermined in every half B alike)."""
        s_out, m_out, h_out = [], [], []
        undetermined = set(self.undetermined_sites(condition))
        left_out = set(self.regime_left_out_models(condition))
        for site, per in sorted(self.baseline_counts(condition).items()):
            if site in undetermined:
                continue
            for model, (k, n) in sorted(per.items()):
                if model in left_out:
                    continue
                s_out += [site] * n
                m_out += [model] * n
                h_out += [1] * k + [0] * (n - k)
        return s_out, m_out, h_out

    def baseline_geocoded_flags(self, condition: str | None = None) -> list[bool]:
        """Whether each response of :meth:`baseline_arrays` (same order) geocoded: per (site, model) its hits, then
        its geocoded misses, then its unresolved answers (a hit always geocoded; within a group the order carries
        no information, as there)."""
        cond = condition or self.baseline_condition
        geocoded: dict[tuple[str, str], int] = {}
        for (site, model, c, _b, _t), cell in self.cells.items():
            if c == cond:
                geocoded[(site, model)] = geocoded.get((site, model), 0) + cell.n_decided
        out: list[bool] = []
        undetermined = set(self.undetermined_sites(condition))
        left_out = set(self.regime_left_out_models(condition))
        for site, per in sorted(self.baseline_counts(condition).items()):
            if site in undetermined:
                continue
            for model, (k, n) in sorted(per.items()):
                if model in left_out:
                    continue
                g = min(n, max(k, geocoded.get((site, model), 0)))
                out += [True] * g + [False] * (n - g)
        return out

    def context_geocoded_flags(self, condition: str, band: str) -> list[bool]:
        """Whether each response of :meth:`context_arrays` (same order) geocoded: per (site, model) its hits, then
        its geocoded misses, then its unresolved answers (a hit always geocoded; within a group the order carries
        no information, as in :meth:`baseline_geocoded_flags`)."""
        acc: dict[tuple[str, str], list[int]] = {}
        for (site, model, c, b, _t), cell in self.cells.items():
            if c == condition and b == band:
                kgn = acc.setdefault((site, model), [0, 0, 0])
                kgn[0] += cell.hits
                kgn[1] += cell.n_decided
                kgn[2] += cell.n
        out: list[bool] = []
        for (_site, _model), (k, g, n) in sorted(acc.items()):
            g = min(n, max(k, g))
            out += [True] * g + [False] * (n - g)
        return out

    def context_arrays(self, condition: str, band: str) -> tuple[list[str], list[str], list[int]]:
        """Context responses of one condition and band as per-response arrays (site, model, hit)."""
        s_out, m_out, h_out = [], [], []
        acc: dict[tuple[str, str], list[int]] = {}
        for (site, model, c, b, _t), cell in self.cells.items():
            if c == condition and b == band:
                kn = acc.setdefault((site, model), [0, 0])
                kn[0] += cell.hits
                kn[1] += cell.n
        for (site, model), (k, n) in sorted(acc.items()):
            s_out += [site] * n
            m_out += [model] * n
            h_out += [1] * k + [0] * (n - k)
        return s_out, m_out, h_out

    def summary(self) -> dict[str, Any]:
        total = self.select()
        return {
            "results": len(self.keys),
            "sites": len(self.sites),
            "models": list(self.models),
            "conditions": list(self.conditions),
            "hit_rate": total.hit_rate,
            "parse_failures": total.n_parse_fail,
            "without_ladder_point": self.n_without_ladder_point,
            "no_answer": self.n_no_answer(),
            "echo_rule": self.echo_rule,
            "echo_rule_counts": dict(self.echo_rule_counts),
            "regime_threshold": self.regime_threshold,
        }


def geo_means(dref_km: Iterable[float], err_km: Iterable[float]) -> tuple[float, float]:
    """Geometric means of hint distance and error (Table 5), from raw rows (for cross-checks)."""
    return geometric_mean(np.asarray(list(dref_km))), geometric_mean(np.asarray(list(err_km)))
