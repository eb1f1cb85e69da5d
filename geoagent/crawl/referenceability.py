"""Referenceability auditor (seed 000, Sec. 3.3 and App. A.3): rate every nearby Wikidata entity as a
location hint, screen contentious names, and optionally compare with Wikipedia pageviews.

For each site, ALL Wikidata items with coordinates within 6 km are fetched (WDQS, paginated in an order
unrelated to fame, see :func:`geoagent.clients.wdqs.around_query`), de-duplicated by QID (nearest
coordinate), and sent in batches to a text-only LLM with ``prompts/crawl_referenceability.txt``: for each
candidate ``ok`` (usable as a reference point), ``familiarity`` (referenceability 0-5: how often people
use it to say where they are, not fame), ``zh``/``en`` canonical names and a short ``why``. Output that
cannot be read is never guessed at: the batch is split in halves and each half retried, down to single
candidates, which are then recorded as failed; but when both halves of a split come back with a fault of the answers'
format (an array with no element read, a numbering set aside) the step stops there (crawl40 #1: an auditor whose every
answer lacked ``idx`` was asked every candidate alone, ~79 calls a batch). A refusal or prose (no JSON array) is
driven by the names asked about, so it is split on down to them (review40a #1: two refused names in one batch failed
their city for good), until more of the city failed alone than :data:`REF_MAX_FAILED_SHARE` allows.
An answer numbering a candidate outside 0..n-1, or whose English names are mostly other candidates' labels, is set
aside whole (crawl40 #2: an answer numbered from 1 put every rating on the next candidate). A failure (``error``
and the ``raw`` answer in its record) is no decision. A candidate that failed alone (``failure`` ``isolated``) is asked
again alone with a reminder (a new request key) at once, up to :data:`REF_MAX_REASKS` times (fixref41 #1: before, one
re-ask per later run, so a city with a few more flaky answers than its share failed its first run); one that still
fails is left out of every ladder and the step goes on (crawl40b #1, #2: one unreadable answer had failed its whole
city). Re-asks that read nothing are bounded (:data:`REF_MAX_FUTILE_REASKED` candidates a city and run: the run being
every process of the crawl running at once, whose failures and re-asks are read from the logs, fixreask46); a failure
whose re-asks were not all made gets them from a later run, before the city's batches. A split given up
(``systematic``: only a changed auditor or request gets new answers, :data:`FIX_THE_FORMAT`),
or isolated failures (after their re-asks) of more than :data:`REF_MAX_FAILED_SHARE` of the candidates, fail the step:
:class:`AuditorOutputUnreadable` (the task fails, the crawl ends ``incomplete``;
:meth:`ReferenceabilityAuditor.rate_all`; :data:`REF_PARSER_VERSION`, recorded as ``parser_version``). Every
decision is appended to ``audit_decisions.jsonl``
(the release's record shape) and every verbatim answer, with the QIDs it was about, to
``audit_raw_answers.jsonl``; decisions already logged for the same auditor model (and city, below) are
reused, so a restart re-asks nothing. A separate, deliberately narrow screening pass
(``prompts/crawl_sensitive.txt``) writes ``audit_sensitive.jsonl``. A candidate whose screen could not be read
even when asked alone, and again with the screen's reminder as a rating is (:data:`SENS_REASK_TEMPLATE`, fixref41
#3) (``sensitive`` null, ``error`` set) is unscreened: its :class:`RatedCandidate` carries
``sensitive=None`` and no ladder draws it (Sec. 3.3, "Exclusion of contentious names": a name never screened must
not enter as though it had passed), as a failed rating is dropped; the crawl summary and ``run.py status`` count
such candidates (:func:`unscreened_count`). Before session 19 it came back ``sensitive=False``, screened clean.
With pageviews enabled, a candidate
whose pageview tier (tertiles within the site) and LLM tier disagree by ``review_tier_gap`` tiers goes to
a human review queue (``audit_review_queue.jsonl``), never to an automatic override (Sec. 3.3, constraint 3).
Its records: ``qid``, ``label``, ``site``, ``model`` (the rating model), ``familiarity`` (its rating, 0-5),
``tier_llm`` (the tier of that rating), ``pageviews`` (the article's views over the window) and
``tier_pageviews`` (their tertile within the site), ``status`` (``pending`` until a human acts), ``ts``; one
per (site, QID) (:class:`ReviewQueueLog`).

Reproducible calls. The prompts, the number of calls and their request keys must not depend on the order
in which sites reach the auditor (async workers), or a re-run of the same config and seed would ask other
questions and miss the stored answers. So the crawl rates per city, not per site
(:class:`geoagent.crawl.stages.ReferenceabilityAuditorStage`): the candidates of all of a city's sites
are merged into one list (:func:`merge_site_candidates`: one per QID, the distance shown is the one from
the nearest of the city's sites, sorted by QID number) and cut into fixed batches of ``batch_size``
(:func:`fixed_batches`) BEFORE anything already rated is left out; :meth:`ReferenceabilityAuditor.rate_all`
then asks each batch that still has an unrated candidate. A candidate shared by sites of one city is thus
rated (and paid) once, in a batch that is the same whichever site came first. Crash safety keeps the
same calls: every verbatim answer is logged with its request key before it is parsed, and a request whose
key is already in ``audit_raw_answers.jsonl`` is answered from there (no call, no spend), so a re-run after
a kill replays the stored answers through the same split-and-retry path and sends exactly the calls the
uninterrupted run would have sent. The log is not held in memory (:class:`RawAnswerLog`: an index of
request key -> byte offset, the answer read when replayed), so a crawl of hundreds of cities can replay it.

Candidates without a label. WDQS asks for labels in ``en``, ``mul``, ``zh`` and then the common local languages
(:data:`geoagent.clients.wdqs.LABEL_LANGUAGES`), so an item labelled only in Chinese or only in its local language
is rated under that label and the auditor gives its canonical English name (Sec. 3.3; the ladder names a usable one
the auditor gave no English name by its label, :func:`geoagent.crawl.ladder.hint_name`, as the release names such
candidates rather than dropping them: they are almost all low tier, the paper's control). Each candidate line also
shows the title of the item's English Wikipedia article when it has one, as the release's auditor was shown it
(:func:`render_candidates`, :data:`REF_CANDIDATE_LINES`). An item with a label in none of them comes back labelled
with its bare QID (``Q18418728``); with an English Wikipedia title it is rated by that, without one it has no
name. The auditor rates names and never sees anything else (App. A.3), so such a "name" buys a rating of nothing: the release's auditor rejected one as a nameless entry
(``audit_decisions.jsonl``) and its ladders hold 4 rows (2 QIDs of 3,105 rows) whose raw label is a bare QID, with
ratings the label could not have supported. Here they are kept out of every rating and screening batch
(:func:`has_no_label`; the other members of their fixed batch stay together, so the other batches and their stored
answers are unchanged) and each gets a decision record saying so (``ok`` false, ``familiarity`` null, ``not_rated``
``"no_label"``, ``why``), counted per rating step (``n_not_rated_no_label``) and in the crawl summary
(:func:`not_rated_count`).

Candidates shared by cities. A Wikidata place within 6 km of sites of two cities (cities closer than
about 2 x 6 km + 3 km), or found by both cities' queries, is rated once FOR EACH city: decisions are kept
per (auditor model, QID, city), with the city key in the record's ``city`` field, and a city's fixed
batches always hold all of its candidates, whatever other cities rated before. So a city's prompts,
request keys and ratings depend only on its own candidates (each shown with its distance to that city's
nearest site, as the prompt asks for the distance from the reference point), never on the order in which
cities finish; the price is one extra rating of each shared candidate per further city (the paper's
cities are far apart, so it is rare). A shared candidate may thus carry a different rating in each city;
each city's sites and ladders use their own city's. Decisions logged without a city (a log of an older
version) are not reused for a city; a city re-derives its own from the logged answers of its unchanged
prompts (replayed, no call). :meth:`ReferenceabilityAuditor.audit` of a single site (used alone, outside
the crawl) rates that site's candidates with the same fixed batches, with no city (records without
``city``, the release's shape).

Tables. The crawl turns its rated sites into two tables (:func:`referenceability_tables`, written by
:func:`geoagent.crawl.stages.write_candidate_referenceability` after every rated site):
``candidate_referenceability_by_city.csv`` keeps every rating, one row per (QID, city key) with the city's
rating and the distance from its nearest site (:data:`CANDIDATE_REF_BY_CITY_COLUMNS`);
``candidate_referenceability.csv`` is the release's table, exactly in its layout (``qid``, ``sitelinks``,
``familiarity``; one row per QID, sorted by QID text; read by :func:`sitelink_band_share`, which counts each
place once). For a QID rated for several cities it holds one of them, chosen by a fixed rule: the rating
made for the city whose site is nearest to the candidate (smallest ``dist_km``, so the prompt that showed
it closest; ties to the smaller city key). Both tables depend only on the rated sites, never on the order
in which sites or cities completed; the per-city ratings are also in ``audit_decisions.jsonl``.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from geoagent.crawl.image_audit import load_prompt
from geoagent.crawl.ladder import NAME_EN_MAX_CHARS, NAME_ZH_MAX_CHARS, RatedCandidate, tier_for
from geoagent.crawl.llmjson import as_bool, as_int_in, as_text, prompt_example
from geoagent.llmjson import fenced_blocks, iter_candidates
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.files import jsonl_append_turn
from geoagent.geo import haversine_km
from geoagent.providers.base import ModelRequest
from geoagent.runtime.errors import PicklableError
from geoagent.textfmt import first_few_text

REF_MARKER = "REFERENCE-POINT CANDIDATES"
SENS_MARKER = "CONTENTIOUS-NAME SCREEN"
REVIEW_QUEUE_FILE = "audit_review_queue.jsonl"
#: one line per auditor call: the verbatim answer text and the QIDs of the batch it was asked about
RAW_ANSWERS_FILE = "audit_raw_answers.jsonl"
#: the crawl's per-city rating step records (``<state_dir>/ref_cities/<city key>.json``, written when a city's step
#: completed: :class:`geoagent.crawl.stages.ReferenceabilityAuditorStage`)
REF_CITIES_DIR = "ref_cities"
#: keys of one released audit_decisions.jsonl record, in order
DECISION_KEYS = ("qid", "label", "model", "ok", "familiarity", "name_zh", "name_en", "why", "ts")
#: key of a decision record whose auditor's English name was too long to use (over
#: :data:`~geoagent.crawl.ladder.NAME_EN_MAX_CHARS` characters): why ``name_en`` is null; after ``ts``
NAME_EN_DROPPED = "name_en_dropped"
#: the same for ``name_zh`` (over :data:`~geoagent.crawl.ladder.NAME_ZH_MAX_CHARS` characters); after ``ts`` too
NAME_ZH_DROPPED = "name_zh_dropped"
SENSITIVE_KEYS = ("qid", "label", "model", "auditor", "sensitive", "why", "ts")


@dataclass(frozen=True, slots=True)
class RefCandidate:
    """A Wikidata entity near a site: distance from the site in km, sitelinks, English Wikipedia title."""

    qid: str
    label: str
    dist_km: float
    lat: float
    lon: float
    sitelinks: int | None = None
    enwiki_title: str | None = None


def qid_order(qid: str) -> tuple[int, str]:
    """Sort key of a Wikidata id: by its number (``Q9`` before ``Q10``), then the text; ids without a
    number come last."""
    tail = qid[1:]
    return (int(tail), qid) if tail.isascii() and tail.isdigit() else (2**63, qid)  # int("²") raises


def candidates_for_site(entities: Iterable[Any], site_lat: float, site_lon: float, radius_km: float) -> list[RefCandidate]:
    """One candidate per QID within ``radius_km`` of the site (haversine from the site; the nearest
    coordinate of a multi-coordinate item wins), sorted by QID number."""
    best: dict[str, RefCandidate] = {}
    titles: dict[str, str] = {}
    for e in entities:
        title = getattr(e, "enwiki_title", None)
        if title:
            titles.setdefault(e.qid, title)
        d = haversine_km(site_lat, site_lon, e.lat, e.lon)
        if d > radius_km:
            continue
        prev = best.get(e.qid)
        if prev is None or d < prev.dist_km:
            best[e.qid] = RefCandidate(e.qid, e.label, d, e.lat, e.lon, e.sitelinks, None)
    best = {q: RefCandidate(c.qid, c.label, c.dist_km, c.lat, c.lon, c.sitelinks, titles.get(q)) for q, c in best.items()}
    return sorted(best.values(), key=lambda c: qid_order(c.qid))


def merge_site_candidates(per_site: Mapping[str, Sequence[RefCandidate]]) -> list[RefCandidate]:
    """The candidates of several sites of one city, one per QID, in the order they are rated.

    Parameters
    ----------
    per_site : mapping
        Site id -> that site's candidates (:func:`candidates_for_site`; ``dist_km`` from that site).

    Returns
    -------
    list of RefCandidate
        One per QID: the record of the nearest site (smallest ``dist_km``, ties to the smaller site id),
        so the distance shown to the auditor is the one to the nearest of the city's sites; the English
        Wikipedia title of any site's record when the nearest has none. Sorted by :func:`qid_order`. The
        result depends only on the sites' candidate lists, never on the order of the mapping.
    """
    best: dict[str, tuple[float, str, RefCandidate]] = {}
    titles: dict[str, str] = {}
    for sid in sorted(per_site):
        for c in per_site[sid]:
            if c.enwiki_title and c.qid not in titles:
                titles[c.qid] = c.enwiki_title
            prev = best.get(c.qid)
            if prev is None or (c.dist_km, sid) < prev[:2]:
                best[c.qid] = (c.dist_km, sid, c)
    out = []
    for q, (_, _, c) in best.items():
        if c.enwiki_title is None and q in titles:
            c = RefCandidate(c.qid, c.label, c.dist_km, c.lat, c.lon, c.sitelinks, titles[q])
        out.append(c)
    return sorted(out, key=lambda c: qid_order(c.qid))


#: the ``not_rated`` value of the decision record of a candidate kept out of rating (:func:`has_no_label`)
NOT_RATED_NO_LABEL = "no_label"


def has_no_label(c: RefCandidate) -> bool:
    """Whether the candidate has no name to rate: its label (whitespace collapsed) is empty or the item's own
    Wikidata id (``c.qid``; WDQS's label service answers the item's id when it has no label in the asked languages,
    :data:`geoagent.clients.wdqs.LABEL_LANGUAGES`, and the WDQS client does the same for a missing label) and it
    has no English Wikipedia title either (:func:`render_candidates` shows the title next to the label, so such a
    label with a title is rated by that name). Such a "name" tells the text-only auditor nothing (it rates names,
    App. A.3) and cannot stand in a hint ("I took this near Q123"), so the candidate is not sent for rating
    (:meth:`ReferenceabilityAuditor.rate_all`).

    Compared with the item's own id, as the release's site sampler does (``scripts/00_select_sites.py``:
    ``df[~df.name.eq(df.qid)]``; :func:`geoagent.crawl.sampler.unnamed`), not by the shape ``Q<digits>``: a
    place really named like an id (the Gold Coast tower "Q1") is a label."""
    if " ".join(str(c.enwiki_title or "").split()):
        return False
    return " ".join(str(c.label).split()) in ("", c.qid)


def fixed_batches(candidates: Sequence[RefCandidate], batch_size: int) -> list[list[RefCandidate]]:
    """``candidates`` cut in order into consecutive batches of ``batch_size`` (the last may be shorter).
    The cut is made over every candidate, rated or not, so a batch's members do not depend on what was
    rated before (module docstring)."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    return [list(candidates[i:i + batch_size]) for i in range(0, len(candidates), batch_size)]


def candidate_to_json(c: RefCandidate) -> dict[str, Any]:
    """A candidate as a JSON object (the crawl's per-site candidate file)."""
    return {"qid": c.qid, "label": c.label, "dist_km": c.dist_km, "lat": c.lat, "lon": c.lon,
            "sitelinks": c.sitelinks, "enwiki_title": c.enwiki_title}


def candidate_from_json(d: dict[str, Any]) -> RefCandidate:
    """Inverse of :func:`candidate_to_json` (raises KeyError/ValueError on a malformed record)."""
    links = d.get("sitelinks")
    return RefCandidate(str(d["qid"]), str(d["label"]), float(d["dist_km"]), float(d["lat"]), float(d["lon"]),
                        None if links is None else int(links), d.get("enwiki_title") or None)


#: Version of the candidate lines of the rating and screening prompts (:func:`render_candidates`), recorded as
#: ``candidate_lines`` in every decision the crawl makes for a city (``audit_decisions.jsonl``,
#: ``audit_sensitive.jsonl``; :func:`ref_candidate_lines_warning`). 2 (2026-12-01): a candidate with an English
#: Wikipedia article is shown with its title, as the release's auditor was (``audit._fmt``: "(English name:
#: <enwiki title>)"), and a bare-QID label with a title is rated (:func:`has_no_label`). 1 (no field): the label
#: (and distance) alone.
REF_CANDIDATE_LINES = 2

#: Version of the rules the rating and screening answers are read by (:func:`parse_ref_batch`,
#: :func:`parse_sensitive_batch`, :func:`moved_names_problem`), recorded as ``parser_version`` in every decision
#: and failure the crawl logs for a city (``audit_decisions.jsonl``, ``audit_sensitive.jsonl``;
#: :func:`ref_parser_warning`). 2 (session 40): for a batch of one, one element without ``idx`` is its answer
#: (crawl40 #1); an answer numbering a candidate outside 0..n-1 is set aside whole, and so is a rating answer
#: whose English names are mostly other candidates' labels (crawl40 #2: a 1-based answer moved every rating and
#: English name onto the next candidate); a failure is no decision and is asked again. 1 (no field): before.
REF_PARSER_VERSION = 2

#: How a rating failure (a record with ``error``) came about, its ``failure`` field (crawl40b #1). ``isolated``: the
#: candidate was asked alone (the split narrowed it to one, or its batch-mates were read) and its answer could not be
#: read: the candidate is left out of every ladder and the step goes on. ``systematic``: both halves of a split came
#: back with a fault of the answers' format (:data:`FORMAT_FAULTS`; before review40a #1 any unreadable answer, a
#: refusal too): the step fails (:class:`AuditorOutputUnreadable`). A failure without the field was logged before
#: this rule (session 40's first version, or version 1).
FAILURE_ISOLATED = "isolated"
FAILURE_SYSTEMATIC = "systematic"

#: Re-asks of a candidate whose rating (or contentious-name screen) failed in isolation, in all (crawl40b #2): it is
#: asked again alone with the reminder :data:`REF_REASK_TEMPLATE` (:data:`SENS_REASK_TEMPLATE`) after the prompt (a
#: request key of its own: the stored answer to the plain prompt would come back) at once, in the run whose answer
#: failed and before the step's share of failures is judged (fixref41 #1: they came one per LATER run, so a city with
#: a few more flaky answers than :data:`REF_MAX_FAILED_SHARE` failed its first run), until it is read or this many
#: re-asks failed too. Each failure and each decision records how many re-asks it took (``reasks``). A failure whose
#: re-asks were not all made (:data:`REF_MAX_FUTILE_REASKED`, a stop, a log of an earlier version) gets the rest from
#: a later run, before the city's batches.
REF_MAX_REASKS = 2
#: the reminder appended to the prompt of a rating's re-ask (``geoagent/prompts/``), ``{earlier}`` the unreadable
#: answers so far in words ("your earlier reply", "your 2 earlier replies":
#: :meth:`ReferenceabilityAuditor._reask_prompt`)
REF_REASK_TEMPLATE = "crawl_referenceability_reask.txt"
#: the same for a contentious-name screen's re-ask (fixref41 #3: a screen that failed alone was never asked again)
SENS_REASK_TEMPLATE = "crawl_sensitive_reask.txt"
#: The bound on re-asks that read nothing (fixref41 #1): once this many candidates of one city (rating step or screen,
#: each counted apart) had all their :data:`REF_MAX_REASKS` re-asks fail in a run, that run re-asks no further one
#: of them; they stay failures with their re-asks left (a later run makes them, within the same bound). A run is every
#: process of the crawl running at once on its state folder (since :func:`geoagent.engine.run_began`): a process
#: counts the re-asks the others logged in it (fixreask46: each counted its own, so the other process of two re-asked
#: the candidates the step's process had just cut off). So an auditor
#: whose single answers never read (a refusal of everything, a numbering always off in batches of one) costs at most
#: ``REF_MAX_REASKS * REF_MAX_FUTILE_REASKED`` calls more a city and kind per run than it did without re-asks, while a
#: few flaky answers are re-asked (and rated) in the run.
REF_MAX_FUTILE_REASKED = 3

#: What fixes failures that a re-run cannot (review40a #1): a request asked before is answered from
#: ``audit_raw_answers.jsonl`` (no call), so only a changed request gets a new answer; the stored ones are read again by
#: each version's rules (:data:`REF_PARSER_VERSION`)
FIX_THE_FORMAT = ("What gets new answers: another auditor model ([crawl.referenceability] model: its ratings are "
                  "records of its own), or changed request settings ([crawl.referenceability] temperature, "
                  "max_output_tokens): a changed request is asked anew, an unchanged one replays its stored answer; "
                  "then `run.py dead CONFIG --requeue`")

#: A rating step fails as systematic when more than this share of its candidates' ratings failed in isolation (and
#: more than one did), counted after their re-asks (:data:`REF_MAX_REASKS`, fixref41 #1): so many single failures
#: say the auditor's answers, not a few names, are at fault (crawl40b #1). At or below it the step completes and the
#: failed candidates are in no ladder (counted by :func:`rating_failed_lines`).
REF_MAX_FAILED_SHARE = 0.10


def render_candidates(batch: Sequence[RefCandidate], with_distance: bool = True) -> str:
    """Numbered candidate lines for a prompt: ``0. Label (English Wikipedia: Title) (1.23 km)``; the title part
    only for a candidate with an English Wikipedia article (``enwiki_title``, the ``en.wikipedia.org`` sitelink's
    ``schema:name`` from the candidates' WDQS query), as the release's auditor was shown it (its ``audit._fmt``);
    the distance (km from the reference point, 2 decimals) only ``with_distance``. Labels and titles are data,
    never instructions: newlines are flattened (:data:`REF_CANDIDATE_LINES`)."""
    lines = []
    for i, c in enumerate(batch):
        label = " ".join(str(c.label).split())[:200]
        title = " ".join(str(c.enwiki_title or "").split())[:200]
        line = f"{i}. {label}" + (f" (English Wikipedia: {title})" if title else "")
        lines.append(f"{line} ({c.dist_km:.2f} km)" if with_distance else line)
    return "\n".join(lines)


def parse_ref_batch(text: str | None, n: int, prompt: str | None = None, *,
                    problems: list[str] | None = None) -> dict[int, dict[str, Any]] | None:
    """Read the auditor's JSON array for a batch of ``n`` candidates; ``prompt`` is the prompt it answered, whose
    example array (:func:`~geoagent.crawl.llmjson.prompt_example`; None: the packaged ``crawl_referenceability.txt``)
    is no rating (:func:`_by_idx`). A name written as a placeholder in angle brackets ("<Chinese name>", the
    example's) is no name.

    Returns
    -------
    dict or None
        idx -> {"ok", "familiarity", "name_zh", "name_en", "why"} for each element that is complete and
        valid (``ok`` boolean, ``familiarity`` integer 0-5, idx in range; an idx read two ways is left out, see
        :func:`_by_idx`; names and ``why``
        text only, else None and ``""``, :func:`~geoagent.crawl.llmjson.as_text`); None when
        no JSON array can be found at all. Candidates missing from the dict must be asked again.
        An English name over :data:`~geoagent.crawl.ladder.NAME_EN_MAX_CHARS` (200) characters, whitespace
        collapsed (a looping auditor's), is not used: ``name_en`` is None (the hint name falls back to the
        Wikidata label, :func:`~geoagent.crawl.ladder.hint_name`), the rating is kept, and the element gets
        :data:`NAME_EN_DROPPED` saying so (written to the decision record after ``ts``). A Chinese name over
        :data:`~geoagent.crawl.ladder.NAME_ZH_MAX_CHARS` (also 200) is dropped the same way: ``name_zh`` None (the
        point has no Chinese name), :data:`NAME_ZH_DROPPED` saying so. The numbering rules of :func:`_by_idx`
        (:data:`REF_PARSER_VERSION` 2) apply: for ``n == 1`` one element without ``idx`` is candidate 0, and an answer
        numbering any element outside 0..n-1 is set aside whole (``{}``; why appended to ``problems`` when given).
    """
    def read(el: dict[str, Any]) -> dict[str, Any] | None:
        ok = as_bool(el.get("ok"))
        fam = as_int_in(el.get("familiarity"), 0, 5)
        if ok is None or fam is None:
            return None
        zh, en = el.get("zh"), el.get("en")
        row = {"ok": ok, "familiarity": fam, "name_zh": zh if _is_name(zh) else None,
               "name_en": en if _is_name(en) else None, "why": as_text(el.get("why"), 200)}
        if row["name_en"] is not None and (n := len(" ".join(row["name_en"].split()))) > NAME_EN_MAX_CHARS:
            row["name_en"] = None
            row[NAME_EN_DROPPED] = (f"the auditor's English name ({n} characters) is over {NAME_EN_MAX_CHARS}: "
                                    "not used, the hint name falls back to the Wikidata label")
        if row["name_zh"] is not None and (n := len(" ".join(row["name_zh"].split()))) > NAME_ZH_MAX_CHARS:
            row["name_zh"] = None
            row[NAME_ZH_DROPPED] = (f"the auditor's Chinese name ({n} characters) is over {NAME_ZH_MAX_CHARS}: "
                                    "not used, the point has no Chinese name")
        return row

    return _by_idx(text, n, read, _example_elements(prompt, "crawl_referenceability.txt"), problems=problems)


def _is_name(v: Any) -> bool:
    """A name an auditor gave: text, not blank, not a placeholder in angle brackets ("<Chinese name>")."""
    return isinstance(v, str) and bool(v.strip()) and not _PLACEHOLDER.fullmatch(v.strip())


_PLACEHOLDER = re.compile(r"<[^<>]*>")


def _example_elements(prompt: str | None, template: str) -> list[dict[str, Any]]:
    """The elements of the example array that ``prompt`` (None: the packaged ``template``) shows."""
    ex = prompt_example(load_prompt(template) if prompt is None else prompt, list,
                        lambda a: any(isinstance(el, dict) and "idx" in el for el in a))
    return [el for el in ex or () if isinstance(el, dict)]


def parse_sensitive_batch(text: str | None, n: int, *,
                          problems: list[str] | None = None) -> dict[int, dict[str, Any]] | None:
    """Read the screening pass's JSON array: idx -> {"sensitive": bool, "why": str} (``why`` text only,
    :func:`~geoagent.crawl.llmjson.as_text`); None if no array. Its prompt's example element (idx 0: not
    sensitive, "ordinary railway station") is not set aside as the rating's is (:func:`parse_ref_batch`): a real
    station at idx 0 may be screened in those very words, and a screen set aside leaves it unscreened, never drawn;
    an echo of it says only "not sensitive" and invents no name. The numbering rules of :func:`_by_idx` apply (an
    answer numbering a name outside 0..n-1 is set aside whole: crawl40 #2, the screen reads by the same idx)."""
    def read(el: dict[str, Any]) -> dict[str, Any] | None:
        sens = as_bool(el.get("sensitive"))
        return None if sens is None else {"sensitive": sens, "why": as_text(el.get("why"), 200)}

    return _by_idx(text, n, read, problems=problems)


def _by_idx(text: str | None, n: int, read: Any, example: Sequence[dict[str, Any]] = (), *,
            problems: list[str] | None = None) -> dict[int, dict[str, Any]] | None:
    """The JSON arrays in ``text`` as idx -> ``read(element)``: elements that are objects with an ``idx`` in
    [0, n) and that ``read`` accepts (not None); None if no complete array at all.

    Every complete array holding an object with an ``idx`` is read (fenced blocks first, then the whole text, as
    :func:`~geoagent.llmjson.extract_json` searches). An idx whose accepted elements read differently (their
    ``why`` aside) is left out, so it is asked again, never its first reading: an answer that repeated the prompt's
    example array (idx 0: familiarity 4, "San Jose Municipal Rose Garden") before its own ratings gave candidate 0
    the example's rating and English name, its hint name in the ladders. The same element given twice (in a fence
    and again in the prose) is one reading.

    Session 36 (crawl36 #2): an element equal to one of ``example`` (the prompt's example array) is no reading at
    all, so the example alone rates nothing (it gave candidate 0 the example's rating and names); and an idx that
    an array cut off by the end of the answer (``max_output_tokens``) mentions is left out when its complete
    readings disagree with what that array's element says (as far as it goes: a field it holds reads otherwise, or is
    unreadable): what the model said of it is then unknown.

    Session 40 (:data:`REF_PARSER_VERSION` 2). crawl40 #1: for ``n == 1`` a complete array of one object without an
    ``idx`` (and no array with one) is candidate 0's answer: there is only one it can be about (it was unreadable,
    and a batch split down to single candidates was all asked again and logged as failed). crawl40 #2: an answer
    that numbers any object outside 0..n-1 (``idx`` n or -1: numbered from 1, or otherwise shifted; complete or
    cut-off arrays alike) is set aside whole, ``{}``: a shifted numbering puts every rating on a neighbour, and the
    elements in range cannot be told from the shifted ones. Why it was set aside is appended to ``problems``
    (when given)."""
    if not isinstance(text, str) or not text.strip():
        return None
    arrays: list[list[Any]] = []
    cut: list[list[Any]] = []
    lone: list[dict[str, Any]] = []  # the one object of a complete array without an idx (n == 1 only)
    found = False
    for src in [*fenced_blocks(text), text]:
        for cand in iter_candidates(src, "["):
            if cand.ok and isinstance(cand.value, list):
                if cand.truncated:
                    cut.append(cand.value)
                    continue
                found = True
                if any(isinstance(el, dict) and "idx" in el for el in cand.value):
                    arrays.append(cand.value)
                elif n == 1 and len(cand.value) == 1 and isinstance(cand.value[0], dict) \
                        and cand.value[0] not in example:
                    lone.append(cand.value[0])
    if not found:
        return None
    if not arrays and lone:
        arrays = [[{**el, "idx": 0}] for el in lone]
    shifted = _idx_out_of_range([*arrays, *cut], n, example)
    if shifted is not None:
        if problems is not None:
            problems.append(f"answer numbered a candidate {shifted} outside 0..{n - 1} (numbering shifted, e.g. from 1): "
                            "the whole answer set aside")
        return {}
    out: dict[int, dict[str, Any]] = {}
    conflicting: set[int] = set()
    for arr in arrays:
        for el in arr:
            if not isinstance(el, dict) or el in example:
                continue
            idx = as_int_in(el.get("idx"), 0, n - 1)
            if idx is None or idx in conflicting:
                continue
            row = read(el)
            if row is None:
                continue
            if idx in out:
                if _without_why(out[idx]) != _without_why(row):  # two readings of one candidate: ask again
                    conflicting.add(idx)
                    del out[idx]
                continue
            out[idx] = row
    for arr in cut:
        for el in arr:
            if not isinstance(el, dict) or el in example:
                continue
            idx = as_int_in(el.get("idx"), 0, n - 1)
            if idx is None or idx not in out:
                continue
            if _partial_differs(el, out[idx], read):  # compared as far as it goes (its last element may be cut)
                del out[idx]
    return out


def _idx_out_of_range(arrays: Iterable[Sequence[Any]], n: int, example: Sequence[dict[str, Any]]) -> str | None:
    """The first ``idx`` of an object of ``arrays`` (not one of the prompt's ``example``) that is a whole number
    outside 0..n-1, as text (a very long one shortened); None when there is none (crawl40 #2, :func:`_by_idx`).
    An ``idx`` that is no whole number at all ("a", 1.5) is no numbering and stays the element's own problem."""
    for arr in arrays:
        for el in arr:
            if not isinstance(el, dict) or "idx" not in el or el in example:
                continue
            v = el["idx"]
            if isinstance(v, int) and not isinstance(v, bool):
                if not 0 <= v < n:
                    t = str(v) if abs(v) < 10**12 else f"{str(v)[:6]}... ({len(str(v))} digits)"
                    return t
                continue
            i = as_int_in(v, -(10**12), 10**12)
            if i is not None and not 0 <= i < n:
                return str(i)
    return None


def moved_names_problem(parsed: Mapping[int, Mapping[str, Any]], batch: Sequence[RefCandidate]) -> str | None:
    """Why a rating answer's English names show its ratings sit on the wrong candidates, or None (crawl40 #2).

    The prompt asks for each candidate's usual English name (``en``) and shows its label and, when it has one, its
    English Wikipedia title (:func:`render_candidates`), so an ``en`` is often one of them verbatim. A name that
    equals (whitespace collapsed, case folded) the label or title of another candidate of the batch and not its
    own says the element speaks of that other candidate. When at least 2 do, and they are most of the names that
    equal any candidate's label or title, the answer's numbering is off (shifted within range, reordered) and
    every rating of it is suspect: the caller sets the whole answer aside. ``parsed``: idx -> the rows of
    :func:`parse_ref_batch` (``name_en``); ``batch``: the candidates in prompt order."""
    def norm(v: Any) -> str:
        return " ".join(str(v or "").split()).casefold()

    holders: dict[str, set[int]] = {}
    for i, c in enumerate(batch):
        for name in {norm(c.label), norm(c.enwiki_title)} - {""}:
            holders.setdefault(name, set()).add(i)
    matched = moved = 0
    example = ""
    for i, row in parsed.items():
        who = holders.get(norm(row.get("name_en")))
        if not who:
            continue
        matched += 1
        if i not in who:
            moved += 1
            if not example:
                other = min(who)
                example = (f"candidate {i} ({batch[i].label!r}) named {row.get('name_en')!r}, "
                           f"the label of candidate {other}")
    if moved >= 2 and 2 * moved > matched:
        return (f"{moved} of the {matched} English names that are a candidate's label or title name another candidate "
                f"(e.g. {example}): numbering shifted, the whole answer set aside")
    return None


def _partial_differs(el: dict[str, Any], row: dict[str, Any], read: Any) -> bool:
    """Whether an element of an array cut off by the end of the answer reads otherwise than ``row`` in a field it
    holds (review36 #8: a cut-off restatement that agreed so far was asked again; its last element may lack the
    fields after the cut): it is read with each field it lacks taken from ``row``, and compared on the fields it
    holds; a field it holds that ``read`` cannot read counts as reading otherwise."""
    filled = dict(el)
    names = {"ok": "ok", "familiarity": "familiarity", "zh": "name_zh", "en": "name_en", "sensitive": "sensitive"}
    for key, field in names.items():
        if key not in filled and field in row:
            filled[key] = row[field]
    again = read(filled)
    if again is None:
        return True  # a field it holds is unreadable
    return any(k in el and again.get(f) != row.get(f) for k, f in names.items())


def _without_why(row: dict[str, Any]) -> dict[str, Any]:
    """A parsed element's decision fields (its free-text ``why`` left out)."""
    return {k: v for k, v in row.items() if k != "why"}


def answer_cut_off(text: str | None) -> bool:
    """Whether ``text`` holds a JSON array cut off by the end of the answer (the output-token limit): a batch too
    long for one answer, which a smaller batch can fix, not an answer that cannot be read (:meth:`_settle`)."""
    if not isinstance(text, str):
        return False
    return any(c.ok and c.truncated and isinstance(c.value, list)
               for src in [*fenced_blocks(text), text] for c in iter_candidates(src, "["))


#: Kinds of unreadable answer (:attr:`_Reading.fault`, review40a #1). ``no JSON array``: a refusal or prose, driven by
#: what was asked (a name the model will not rate), so the split goes on to find the names; the other two are faults
#: of the answer's format, which recur whatever the candidates: an array with no element read (no usable ``idx``,
#: fields missing or unreadable), and a numbering set aside (outside 0..n-1, or English names on other candidates).
FAULT_NO_ARRAY = "no JSON array"
FAULT_NO_ELEMENT = "no element read"
FAULT_NUMBERING = "numbering off"
#: the format faults: seen on both halves of a split (:meth:`ReferenceabilityAuditor._settle`) they stop it
FORMAT_FAULTS = (FAULT_NO_ELEMENT, FAULT_NUMBERING)


@dataclass(slots=True)
class _Reading:
    """What one auditor answer about a batch settled: the candidates it left ``missing`` (prompt order), ``why``
    nothing of it could be read (None: read in part, or cut off by the end of the output), its ``raw`` text and the
    ``fault`` that made it unreadable (one of :data:`FAULT_NO_ARRAY`, :data:`FORMAT_FAULTS`; None when ``why`` is)."""

    missing: list[RefCandidate]
    why: str | None
    raw: str
    fault: str | None = None


class GaveUp(Exception):
    """Both halves of a split came back with a format fault (:meth:`ReferenceabilityAuditor._settle`): ``candidates``
    failed, ``why`` says of the last answer why it could not be read."""

    def __init__(self, candidates: list[RefCandidate], why: str) -> None:
        super().__init__(why)
        self.candidates = candidates
        self.why = why


class _TooManyFailed(Exception):
    """More candidates of a rating step failed alone than its share allows (:meth:`ReferenceabilityAuditor.rate_all`):
    the step fails whatever the rest of it reads, so the split stops asking (review40a #1: a refusing or prose-only
    auditor would otherwise be asked every candidate alone, about 2n calls a batch)."""


class AuditorOutputUnreadable(PicklableError):
    """A rating step whose auditor's answers could not be read systematically (crawl40 #1, crawl40b #1): a split
    whose both halves had a fault of the answers' format, or single failures of more than
    :data:`REF_MAX_FAILED_SHARE` of the candidates (a few single failures do not raise: those candidates are in no
    ladder). Retryable (the runner nacks the task; a retry replays the stored answers, no call is paid twice), so the
    task ends dead-lettered and the crawl ``incomplete`` rather than ``complete`` with a city's ratings missing.
    ``failed``: how many candidates' ratings failed; ``gave_up``: True when a split was stopped because both halves
    had a format fault (the candidates after it in the city were not asked). Picklable (message and counts travel)."""

    def __init__(self, message: str, failed: int = 0, gave_up: bool = False) -> None:
        super().__init__(message)
        self.failed = failed
        self.gave_up = gave_up


class JsonlLog:
    """Append-only JSONL file of decisions keyed by (model, qid, city); the last record of a key wins on load.

    ``city`` is the record's ``city`` field (the crawl's city key a rating was made for, module docstring),
    None for a record without one (a site audited alone, or a log written before ratings were kept per
    city).

    Appends are serialised by an asyncio lock and fsynced per batch, so a crash loses at most the batch
    being written and never corrupts earlier lines (a torn last line is skipped on load, and the next
    append starts on a fresh line so the torn bytes cannot swallow its first record). An append reads what
    other processes appended and decides which records to write under the file's append lock
    (:meth:`append`, chaos45 #1), so a key is written once however many processes of the crawl logged it.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = asyncio.Lock()
        self.records: dict[tuple[str, str, str | None], dict[str, Any]] = {}
        self._read_to = 0  # bytes of the file read (whole lines only: a line being written is read by a later look)
        self.refresh()

    def refresh(self) -> None:
        """Read the records appended to the file since it was last read, by this process or another (review40a
        #7: two processes on one stage each loaded the log before the other appended). Only lines ending in a
        newline are read; a line another process is still writing is read by a later call."""
        if not self.path.is_file():
            return
        with self.path.open("rb") as f:
            f.seek(self._read_to)
            for line in f:
                whole = line.endswith(b"\n")
                if whole:  # a last line without one is read again next time (it may be being written)
                    self._read_to += len(line)
                try:
                    rec = orjson.loads(line)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(rec, dict) and "qid" in rec and "model" in rec:
                    self.records[self._key(rec)] = rec

    @staticmethod
    def _key(rec: Mapping[str, Any]) -> tuple[str, str, str | None]:
        city = rec.get("city")
        return (str(rec["model"]), str(rec["qid"]), None if city is None else str(city))

    def get(self, model: str, qid: str, city: str | None = None) -> dict[str, Any] | None:
        """The record of (``model``, ``qid``) made for ``city`` (None: the record without a city)."""
        return self.records.get((model, qid, city))

    async def append(self, recs: Sequence[dict[str, Any]],
                     keep: Callable[[dict[str, Any] | None, dict[str, Any]], bool] | None = None
                     ) -> list[dict[str, Any]]:
        """Append those of ``recs`` that ``keep(logged, rec)`` admits, ``logged`` being the record of ``rec``'s key
        in the log as it is at the append (None: none; an earlier record of ``recs`` with that key counts); the
        default keeps only records whose key is not logged yet. Returns the records written.

        The log is read again, and ``keep`` asked, under the file's append lock (the one every appender of the file
        takes, :func:`geoagent.files.jsonl_append_turn`): chaos45 #1, two crawl processes that had both waited on
        one screening call each appended its batch (31 duplicate rows of ``audit_sensitive.jsonl``), because each
        decided from what it had read before the other wrote. A caller whose record may supersede the logged one
        (the last record of a key wins: a decision after a failure, a failure after more re-asks) says when in
        ``keep``.

        Raises
        ------
        OSError
            The log cannot be read, locked or written (names the file).
        """
        if not recs:
            return []
        keep = keep or _unlogged
        async with self._lock:
            with jsonl_append_turn(self.path) as write:
                self.refresh()  # no other appender is mid-write: every line up to the end is whole
                now: dict[tuple[str, str, str | None], dict[str, Any]] = {}
                out = []
                for r in recs:
                    k = self._key(r)
                    if keep(now.get(k, self.records.get(k)), r):
                        now[k] = r
                        out.append(r)
                first, end = write(out)
            if out and first == self._read_to:  # nothing unread before them (no torn line): not read back
                self._read_to = end
            self.records.update(now)
        return out


def _unlogged(logged: dict[str, Any] | None, rec: dict[str, Any]) -> bool:
    """:meth:`JsonlLog.append`'s default: a record is written when its key has no record yet."""
    return logged is None


class ReviewQueueLog(JsonlLog):
    """``audit_review_queue.jsonl``: candidates for a human to review, one per (site, QID), keyed by ``site`` and
    ``qid``. A record's ``model`` is the rating model whose tier disagrees with the pageviews' (logs of
    older versions hold ``review|<site>`` there: their key is the same, from their ``site`` field)."""

    @staticmethod
    def _key(rec: Mapping[str, Any]) -> tuple[str, str, str | None]:
        site = rec.get("site")
        if site is None and str(rec.get("model", "")).startswith("review|"):
            site = str(rec["model"])[len("review|"):]
        return ("review", str(rec["qid"]), None if site is None else str(site))

    def has(self, site: str, qid: str) -> bool:
        """Whether the queue already holds the item of ``qid`` at ``site``."""
        return self.get("review", qid, site) is not None


class RawAnswerLog:
    """``audit_raw_answers.jsonl``: every verbatim auditor answer, found again by its request key.

    The file grows with every call of a crawl (hundreds of cities: tens of thousands of answers), so it
    is never held in memory: one streaming pass builds an index request key -> byte offset of the line
    that holds its answer (the first line of a key wins; lines without a key, written before keys were
    logged, and a torn last line from a crash are skipped), and :meth:`get` reads that one line when an
    answer is replayed. Appends go through :func:`geoagent.files.jsonl_append_turn` (fsynced; a torn last line
    is never continued) and add their own offset, so the index stays exact without a second pass.

    Parameters
    ----------
    path : path
        The log file (need not exist yet).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._offsets: dict[str, int] | None = None  # built on first use
        self._scanned = 0  # bytes of the file indexed by the last scan

    @staticmethod
    def _read(line: bytes) -> tuple[str, str] | None:
        """(request key, answer) of one log line; None for a line that is torn, not a record, or keyless."""
        try:
            rec = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if isinstance(rec, dict) and isinstance(rec.get("key"), str) and isinstance(rec.get("raw"), str):
            return rec["key"], rec["raw"]
        return None

    def _scan(self, offsets: dict[str, int] | None = None, start: int = 0) -> dict[str, int]:
        """``offsets`` (None: a new index) with the keys of the whole lines from byte ``start`` on; the bytes
        scanned are kept (:meth:`refresh` goes on from there)."""
        offsets = {} if offsets is None else offsets
        pos = start
        if self.path.is_file():
            with self.path.open("rb") as f:
                f.seek(start)
                for line in f:  # one line in memory at a time
                    got = self._read(line)
                    if got is not None:
                        offsets.setdefault(got[0], pos)
                    if not line.endswith(b"\n"):
                        break  # torn, or still being written by another process: scanned again next time
                    pos += len(line)
        self._scanned = pos
        return offsets

    def refresh(self) -> None:
        """Index the answers appended since the last scan, by this process or another (review40a #7: a re-ask
        another process of the campaign already paid for is replayed, not paid again)."""
        if self._offsets is None:
            self._offsets = self._scan()
        else:
            self._scan(self._offsets, self._scanned)

    @property
    def offsets(self) -> dict[str, int]:
        """Request key -> byte offset (from the start of the file) of the line holding its answer."""
        if self._offsets is None:
            self._offsets = self._scan()
        return self._offsets

    def __contains__(self, key: object) -> bool:
        return key in self.offsets

    def __len__(self) -> int:
        return len(self.offsets)

    def get(self, key: str) -> str | None:
        """The logged answer of request ``key`` (read from its line), or None when none is logged.

        If the line at the indexed offset no longer holds that key (the file was replaced behind the
        auditor's back), the index is rebuilt once and the key looked up again."""
        for attempt in range(2):
            off = self.offsets.get(key)
            if off is None:
                return None
            try:
                with self.path.open("rb") as f:
                    f.seek(off)
                    got = self._read(f.readline())
            except OSError:
                got = None
            if got is not None and got[0] == key:
                return got[1]
            self._offsets = None if attempt == 0 else {k: v for k, v in self.offsets.items() if k != key}
        return None

    def append(self, rec: dict[str, Any]) -> bool:
        """Append one record (with a string ``key``) and index its line, unless its key is logged already (by
        another process too: the index is brought up to date under the file's append lock,
        :func:`geoagent.files.jsonl_append_turn`; chaos45 #1: a process that waited on another's call to the same
        request logged its answer a second time). Returns whether it was written. Callers in one process serialise
        appends (:attr:`ReferenceabilityAuditor._raw_lock`).

        Raises
        ------
        OSError
            The log cannot be read, locked or written.
        """
        key = str(rec["key"])
        with jsonl_append_turn(self.path) as write:
            self.refresh()  # no other appender is mid-write: every line up to the end is whole
            offsets = self.offsets
            if key in offsets:
                return False
            first, end = write([rec])
            offsets[key] = first
            if first == self._scanned:  # nothing unscanned before it (no torn line): not scanned again
                self._scanned = end
        return True


def pageview_tiers(views: dict[str, int]) -> dict[str, str]:
    """Tier by pageview tertile within one site (``views``: QID -> English Wikipedia views over the configured
    window): the candidates ranked by views, ascending (positions 0 .. n-1), a position below n/3 is ``low``, below
    2n/3 ``mid``, else ``high``. Equal counts share one tier: a group of candidates with the same views takes the tier
    of its mean position (e.g. four of six with 0 views occupy positions 0-3, mean 1.5: all ``low``; all equal: the
    middle position, ``mid`` from three candidates up), so a tier never depends on the QIDs. Seed 000 Sec. 3.3 says
    only that disagreement between the auditor and pageviews becomes a review queue; tertiles are this
    implementation's reading of it (docs/crawls.md, "review queue"). Before 2026-12-02 ties were ordered by QID
    and could be split between tiers; items queued then stay in ``audit_review_queue.jsonl`` (the queue is
    append-only)."""
    order = sorted(views, key=lambda q: (views[q], q))
    n = len(order)
    out: dict[str, str] = {}
    start = 0
    while start < n:
        end = start
        while end + 1 < n and views[order[end + 1]] == views[order[start]]:
            end += 1
        pos = (start + end) / 2  # the mean position of the tied group (its own position when untied)
        tier = "low" if pos < n / 3 else ("mid" if pos < 2 * n / 3 else "high")
        for q in order[start:end + 1]:
            out[q] = tier
        start = end + 1
    return out


_TIER_INDEX = {"low": 0, "mid": 1, "high": 2}


def _decided(rec: Mapping[str, Any] | None) -> bool:
    """Whether a decision record settles its candidate's rating: not missing, not ``not_rated`` (an earlier
    version's for a label that names nothing, :func:`has_no_label`) and not a failure (``error``: crawl40 #1, a
    failed rating is asked again)."""
    return rec is not None and not rec.get("not_rated") and "error" not in rec


def _asked_in_batch(rec: Mapping[str, Any] | None) -> bool:
    """Whether :meth:`ReferenceabilityAuditor.rate_all` asks a candidate through its batch's prompt: undecided
    (:func:`_decided`) and not a failure in isolation (crawl40b #2: the batch prompts' stored answers would only
    give the same failure back; it is asked alone with a reminder instead, :func:`reask_due`). A systematic failure,
    or one logged before failures were classified (no ``failure``), is asked through the same prompts: their
    stored answers are replayed and read by this version's rules."""
    return not _decided(rec) and (rec is None or rec.get("failure") != FAILURE_ISOLATED)


def reasks_of(rec: Mapping[str, Any] | None) -> int:
    """How many re-asks with the reminder a logged rating record took (``reasks``; 0 without the field)."""
    n = (rec or {}).get("reasks", 0)
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else 0


def logged_since(rec: Mapping[str, Any] | None, since: float | None) -> bool:
    """Whether logged record ``rec`` was written at or after ``since`` (Unix s; None: never): its ``ts``. A record
    without a numeric ``ts`` is an earlier run's. "Logged in this run" of the re-ask limits (fixreask46), read by the
    auditor and by :func:`geoagent.crawl.stages.sites_with_reasks_due`."""
    ts = (rec or {}).get("ts")
    return since is not None and isinstance(ts, (int, float)) and not isinstance(ts, bool) and ts >= since


def reask_due(rec: Mapping[str, Any] | None) -> bool:
    """Whether a logged rating record is a failure in isolation (``failure`` = :data:`FAILURE_ISOLATED`) with a
    re-ask left (fewer than :data:`REF_MAX_REASKS`): it is asked again alone, with the reminder (crawl40b #2; where it
    failed, or, when that run left it, by a later run: fixref41 #1). A screen's record (``audit_sensitive.jsonl``)
    is read alike (fixref41 #3)."""
    return (rec is not None and "error" in rec and rec.get("failure") == FAILURE_ISOLATED
            and reasks_of(rec) < REF_MAX_REASKS)


def _with_reminder(prompt: str, template: str, reask: int) -> str:
    """``prompt`` (of one candidate) with the reminder ``template`` after it, for the ``reask``-th re-ask (1-based):
    ``{earlier}`` the unreadable answers so far in words (the one to the candidate alone, and the re-asks before:
    "your earlier reply", "your 2 earlier replies"; review40a #8c)."""
    earlier = "your earlier reply" if reask == 1 else f"your {reask} earlier replies"
    return prompt.rstrip("\n") + "\n\n" + template.replace("{earlier}", earlier).strip("\n") + "\n"


class ReferenceabilityAuditor:
    """Runs the audit for one site's candidates against a text-only provider.

    Parameters
    ----------
    provider : geoagent.providers.base.Provider
        Text-only model (the request carries no image).
    settings : ReferenceabilitySettings
    state_dir : path
        Where ``audit_decisions.jsonl``, ``audit_sensitive.jsonl`` and the review queue live.
    pageviews : geoagent.clients.pageviews.PageviewsClient, optional
        Used when ``settings.pageviews`` is true.
    generate : async callable, optional
        ``ModelRequest -> ModelResponse`` (default ``provider.generate``; the crawl passes a ledger-metered one).
    request_model : (str, str), optional
        Provider kind and API model id put in requests (default: the section's ``provider``/``model``).
        Decisions are logged under ``settings.model``.
    stopping : callable, optional
        ``() -> bool``: True once the run was asked to stop (the crawl: its services' ``stopping``). From
        then on :meth:`audit` starts no pageviews request (free work the next run redoes; the paid calls
        are stopped by the metered ``generate``).
    provider_kind : str, optional
        What answers the auditor (:func:`geoagent.crawl.llmcall.auditor_provider_kind`: ``"simulated"``,
        ``"replay"`` or ``"model"``), recorded with each answer in ``audit_raw_answers.jsonl``
        (``provider_kind``; the crawl export's ``simulated`` column reads it). None: nothing is recorded.
    run_started : float, optional
        When this run began, Unix s: what any process of the crawl logged since was logged in this run, for the
        re-ask limits (:meth:`_note_this_run`, fixreask46; the crawl: :func:`geoagent.engine.run_began`). None: now
        (the auditor's run is its life).
    """

    def __init__(self, provider: Any, settings: ReferenceabilitySettings, state_dir: str | Path, *,
                 pageviews: Any = None, decisions: JsonlLog | None = None, sensitive: JsonlLog | None = None,
                 generate: Any = None, request_model: tuple[str, str] | None = None,
                 stopping: Callable[[], bool] | None = None, provider_kind: str | None = None,
                 run_started: float | None = None) -> None:
        from geoagent import constants as C

        self.provider = provider
        self.settings = settings
        self.state_dir = Path(state_dir)
        self.decisions = decisions or JsonlLog(self.state_dir / C.AUDIT_DECISIONS_FILE)
        self.sensitive = sensitive or JsonlLog(self.state_dir / C.AUDIT_SENSITIVE_FILE)
        self.review = ReviewQueueLog(self.state_dir / REVIEW_QUEUE_FILE)
        self.raw_path = self.state_dir / RAW_ANSWERS_FILE
        #: the logged answers, indexed by request key (offsets only: answers are read when replayed)
        self.raw = RawAnswerLog(self.raw_path)
        self._raw_lock = asyncio.Lock()
        self.pageviews = pageviews
        self._stopping = stopping or (lambda: False)
        self.ref_template = load_prompt("crawl_referenceability.txt")
        self.sens_template = load_prompt("crawl_sensitive.txt")
        #: model calls sent, answers replayed from ``audit_raw_answers.jsonl`` instead of a call, splits
        self.calls = 0
        self.replayed = 0
        self.splits = 0
        #: answers that could not be read at all (no array, no usable idx, numbering set aside; crawl40 #1)
        self.unreadable = 0
        #: candidates asked again alone with the reminder (sent or replayed; crawl40b #2): ratings, and screens
        self.reasked = 0
        self.screens_reasked = 0
        #: when this run began, Unix s (the crawl: when its processes running now began, ``run_started`` from
        #: :func:`geoagent.engine.run_began`; default: when this auditor was made, its run being its life): a record
        #: logged since, by this auditor or another process of the crawl beside it, was logged in this run
        #: (:meth:`_note_this_run`, fixreask46)
        self.run_started = time.time() if run_started is None else float(run_started)
        #: (qid, city) whose rating failed or was re-asked in this run: the step's re-asks are made where it
        #: failed (:meth:`_settle`), so the pass before the batches leaves them to a later run (a task's retries in
        #: the run replay the same calls); the same for screens. This auditor's own, and (:meth:`_note_this_run`) those
        #: the logs show another process of the crawl failed or re-asked in this run (fixreask46)
        self._tried: set[tuple[str, str | None]] = set()
        self._tried_screen: set[tuple[str, str | None]] = set()
        #: (kind, qid, city) whose every re-ask failed in this run (``"rating"`` or ``"screen"``): at
        #: :data:`REF_MAX_FUTILE_REASKED` of a city and kind, no further re-ask of them in this run (fixref41 #1); kept
        #: across the auditor's steps, so a task's retries in the run count them too, and (:meth:`_note_this_run`)
        #: joined by those whose last re-ask another process of the crawl logged in this run (fixreask46)
        self._futile: set[tuple[str, str, str | None]] = set()
        #: (qid, city) -> the site's own line of a candidate whose re-ask shows its city's line instead (redis41 #4):
        #: the request key its re-asks had before that fix, replayed when stored (:meth:`_rate_answer`)
        self._site_lines: dict[tuple[str, str | None], RefCandidate] = {}
        self.reask_template = load_prompt(REF_REASK_TEMPLATE)
        self.sens_reask_template = load_prompt(SENS_REASK_TEMPLATE)
        self._generate = generate or provider.generate
        self._kind, self._model_id = request_model or (settings.provider, settings.model)
        #: what answers this auditor (geoagent.crawl.llmcall.auditor_provider_kind), recorded with each raw answer
        self.provider_kind = provider_kind

    @property
    def sens_model(self) -> str:
        return f"sens|{self.settings.model}"

    def _request(self, prompt: str, task: str) -> ModelRequest:
        return ModelRequest(provider=self._kind, model=self._model_id, prompt=prompt,
                            params={"max_output_tokens": self.settings.max_output_tokens, "temperature": self.settings.temperature},
                            meta={"task": task})

    def _ref_prompt(self, batch: Sequence[RefCandidate]) -> str:
        return self.ref_template.replace("{candidates}", render_candidates(batch))

    def _reask_prompt(self, c: RefCandidate, reask: int) -> str:
        """The prompt of the ``reask``-th re-ask (1-based) of candidate ``c`` alone: its prompt as a batch of one and
        the reminder :data:`REF_REASK_TEMPLATE` after it, ``{earlier}`` the unreadable answers so far in words (the
        one to the candidate alone, and the re-asks before: "your earlier reply", "your 2 earlier replies";
        review40a #8c), so each re-ask has a request key of its own (crawl40b #2). ``c`` is the candidate as its
        city's step showed it (``city_lines`` of :meth:`rate_all`, redis41 #4), so the re-ask is the question asked
        before and its key is the same for every site of the city."""
        return _with_reminder(self._ref_prompt([c]), self.reask_template, reask)

    def _sens_prompt(self, batch: Sequence[RefCandidate]) -> str:
        return self.sens_template.replace("{candidates}", render_candidates(batch, with_distance=False))

    def _sens_reask_prompt(self, c: RefCandidate, reask: int) -> str:
        """The screen's :meth:`_reask_prompt`: ``c``'s screening prompt alone and :data:`SENS_REASK_TEMPLATE` after it
        (fixref41 #3)."""
        return _with_reminder(self._sens_prompt([c]), self.sens_reask_template, reask)

    async def _ask(self, prompt: str, task: str, batch: Sequence[RefCandidate], earlier: str | None = None) -> str:
        """One model call; its verbatim answer is appended to ``audit_raw_answers.jsonl`` with the request
        key and the batch's QIDs (in prompt order: element ``idx`` of the answer speaks about ``qids[idx]``)
        before any parsing. A request whose key is already logged is answered from the log (no call, no
        spend; counted in ``replayed``): a re-run after a crash takes the same path as the first run.
        ``earlier``: the prompt an earlier version sent for the same question (redis41 #4: a re-ask showed the
        site's distance); its stored answer is replayed when ``prompt`` has none."""
        req = self._request(prompt, task)
        key = req.key()
        stored = self.raw.get(key)
        if stored is None and earlier is not None and earlier != prompt:
            stored = self.raw.get(self._request(earlier, task).key())
        if stored is not None:
            self.replayed += 1
            return stored
        self.calls += 1
        resp = await self._generate(req)
        text = resp.text if isinstance(resp.text, str) else ""
        rec = {"task": task, "model": self.settings.model, "key": key, "qids": [c.qid for c in batch], "raw": text,
               "ts": time.time()}
        # what answered, as a fact of this call (the export's simulated column reads it); a sandbox fake marks
        # its answers on whatever address it runs (ModelResponse.sandbox); a stored answer keeps the kind it was paid under
        from geoagent.crawl.llmcall import answer_kind

        kind = answer_kind(resp, self.provider_kind)
        if kind:
            rec["provider_kind"] = kind
        async with self._raw_lock:
            if not self.raw.append(rec):
                # chaos45 #1: another process logged this request's answer meanwhile (this call waited on its
                # in-flight one, the response store answered it): the logged answer is the one replays read
                text = self.raw.get(key) or text
        return text

    @staticmethod
    async def _log_new(log: JsonlLog, recs: Sequence[dict[str, Any]]) -> None:
        """Append the records whose (model, qid, city) has no record yet (a replayed answer re-derives
        decisions that the crashed run may already have logged), or only a ``not_rated`` one that this record,
        a decision, supersedes (a bare-QID label an earlier version kept out, rated now by its English Wikipedia
        title: :func:`has_no_label`), or only a failure (``error``) that this record, a decision, supersedes
        (crawl40 #1: a failure is no decision; a later run asks again). A failure already logged is not logged
        again when a retry replays the same answers."""
        def new(old: dict[str, Any] | None, r: dict[str, Any]) -> bool:
            if old is None:
                return True
            if "error" in r:
                return bool(old.get("not_rated"))
            return bool(old.get("not_rated")) or "error" in old

        await log.append(recs, new)  # decided against the log as it is at the append (chaos45 #1)

    @staticmethod
    def _scoped(rec: dict[str, Any], city: str | None) -> dict[str, Any]:
        """``rec`` with the city it was made for, the candidate-line version it was made with
        (:data:`REF_CANDIDATE_LINES`) and the version of the rules its answer was read by
        (:data:`REF_PARSER_VERSION`) as its last keys (records without a city keep the release's shape)."""
        return rec if city is None else {**rec, "city": city, "candidate_lines": REF_CANDIDATE_LINES,
                                         "parser_version": REF_PARSER_VERSION}

    async def _rate_answer(self, batch: list[RefCandidate], city: str | None, reask: int = 0) -> _Reading:
        """Ask for ``batch``'s ratings once and log the decisions the answer settles (at once: a stop or failure of
        a later re-ask loses no paid answer). An answer whose numbering is off (:func:`_by_idx`) or whose English
        names sit on the wrong candidates (:func:`moved_names_problem`) settles nothing (crawl40 #2). ``reask``
        (a batch of one): the re-ask with the reminder it is (:meth:`_reask_prompt`), recorded as ``reasks`` in
        the decision (crawl40b #2)."""
        prompt = self._reask_prompt(batch[0], reask) if reask else self._ref_prompt(batch)
        site_line = self._site_lines.get((batch[0].qid, city)) if reask else None
        text = await self._ask(prompt, "crawl_referenceability", batch,
                               None if site_line is None else self._reask_prompt(site_line, reask))
        problems: list[str] = []
        parsed = parse_ref_batch(text, len(batch), self.ref_template, problems=problems)
        if parsed:
            moved = moved_names_problem(parsed, batch)
            if moved is not None:
                problems.append(moved)
                parsed = {}
        ts = time.time()
        out, missing = [], []
        for i, c in enumerate(batch):
            d = (parsed or {}).get(i)
            if d is None:
                missing.append(c)
                continue
            note = {k: d[k] for k in (NAME_EN_DROPPED, NAME_ZH_DROPPED) if k in d}
            fields = {k: v for k, v in d.items() if k not in note}  # the release's keys first, the notes after ts
            out.append(self._scoped({"qid": c.qid, "label": c.label, "model": self.settings.model, **fields, "ts": ts,
                                     **note, **({"reasks": reask} if reask else {})}, city))
        await self._log_new(self.decisions, out)
        return self._reading(text, parsed, problems, missing)

    def _reading(self, text: str, parsed: dict[int, Any] | None, problems: list[str],
                 missing: list[RefCandidate]) -> _Reading:
        """The :class:`_Reading` of one answer; an unreadable one is counted (``self.unreadable``) and its fault
        named (:data:`FAULT_NO_ARRAY`, :data:`FORMAT_FAULTS`)."""
        why = fault = None
        if not parsed:
            if problems:
                why, fault = "; ".join(problems), FAULT_NUMBERING
            elif not answer_cut_off(text):
                why, fault = (("no JSON array in the answer", FAULT_NO_ARRAY) if parsed is None
                              else ("no element with an idx in range and a readable answer", FAULT_NO_ELEMENT))
        if why is not None:
            self.unreadable += 1
        return _Reading(missing, why, text, fault)

    async def _settle(self, batch: list[RefCandidate], got: _Reading, city: str | None, ask: Any, failed: Any,
                      log: JsonlLog, too_many: Callable[[], bool] | None = None,
                      reask: Callable[[RefCandidate, str | None], Awaitable[bool]] | None = None) -> list[RefCandidate]:
        """Ask again for the candidates ``got`` (the answer about ``batch``) left unsettled: split in halves, both
        halves asked before either goes deeper; a candidate asked alone whose answer still settles nothing fails
        (``failed(candidates, reading, city, kind)``: their failure records, logged in ``log`` with the raw answer;
        ``kind`` :data:`FAILURE_ISOLATED` here, :data:`FAILURE_SYSTEMATIC` for a split given up) and is then asked
        again alone with the reminder at once (``reask(candidate, city)``, True when that read it: its re-asks,
        :meth:`_reask_alone`; fixref41 #1), before ``too_many`` is asked. Returns the candidates that failed (and
        were not read by a re-ask).

        A split is given up only for a fault of the answer's format (crawl40 #1, review40a #1): when both halves come
        back with one of :data:`FORMAT_FAULTS` (an array with no element read, a numbering set aside), the same one
        on both or the one the split answer had too (two levels in a row), and not both halves are single
        candidates, splitting further would ask every candidate alone (about 2n calls for a batch of n, each failing
        alike): all of the split's candidates fail as systematic and :class:`GaveUp` is raised. An answer with no
        JSON array (a refusal, prose) is driven by what was asked, a name the model will not rate: both halves
        refusing means a refused name in each (review40a #1: two refused names in one batch failed its city for
        good), so the split goes on down to them; what bounds its calls is ``too_many`` (None: nothing), asked after
        each failure logged alone and its re-asks: once it is true, :class:`_TooManyFailed` is raised (the step fails
        anyway, the rest of the batch is not asked). Two single candidates are two failures in isolation, never
        systematic. An answer cut off by the end of the output is split on."""
        if not got.missing:
            return []
        if len(batch) == 1:
            await log.append(failed(got.missing, got, city, FAILURE_ISOLATED), self._fresh_failure)
            lost = [c for c in got.missing if reask is None or not await reask(c, city)]
            if too_many is not None and too_many():
                raise _TooManyFailed()
            return lost
        self.splits += 1
        half = (len(got.missing) + 1) // 2
        parts = [p for p in (got.missing[:half], got.missing[half:]) if p]
        answers = [await ask(p, city) for p in parts]
        if len(parts) == 2 and max(map(len, parts)) > 1 and self._format_fault(got, answers):
            lost = [c for a in answers for c in a.missing]
            await log.append([r for a in answers for r in failed(a.missing, a, city, FAILURE_SYSTEMATIC)],
                             self._fresh_failure)
            raise GaveUp(lost, answers[-1].why or "")
        out: list[RefCandidate] = []
        for p, a in zip(parts, answers):
            out += await self._settle(p, a, city, ask, failed, log, too_many, reask)
        return out

    @staticmethod
    def _format_fault(got: _Reading, halves: Sequence[_Reading]) -> bool:
        """Whether the answers to the two ``halves`` of a split of ``got``'s batch show a fault of the auditor's
        format (:meth:`_settle`): both halves have one of :data:`FORMAT_FAULTS`, the same one, or ``got`` (the answer
        split) had one too."""
        faults = [a.fault for a in halves]
        if not all(f in FORMAT_FAULTS for f in faults):
            return False
        return faults[0] == faults[1] or got.fault in FORMAT_FAULTS

    @staticmethod
    def _fresh_failure(old: dict[str, Any] | None, rec: dict[str, Any]) -> bool:
        """Whether a failure record is to be logged over ``old``, the record logged for its key (None: none; asked by
        :meth:`JsonlLog.append` under the file's lock, chaos45 #1): its key has no record yet, or only a
        ``not_rated`` one, or (a rating failure, with ``failure``) a failure logged before failures were classified,
        of another kind, or after fewer re-asks (crawl40b #2). A retry replaying the same answers logs no second
        copy; a decision is never overwritten by a failure."""
        if old is None or old.get("not_rated"):
            return True
        if "error" not in old or "failure" not in rec:
            return False
        return old.get("failure") != rec["failure"] or reasks_of(old) < reasks_of(rec)

    def _rating_failures(self, cands: Sequence[RefCandidate], got: _Reading, city: str | None,
                         kind: str = FAILURE_ISOLATED, reasks: int = 0) -> list[dict[str, Any]]:
        """Failure records of ``cands`` (their answer ``got`` settled nothing): the release's shape with ``ok`` and
        ``familiarity`` null, ``error`` (why, beginning "unparseable answer"), ``raw`` (the answer's first 500
        characters), ``failure`` (``kind``: :data:`FAILURE_ISOLATED` or :data:`FAILURE_SYSTEMATIC`) and
        ``reasks`` (the re-asks with the reminder made so far). No decision: an isolated one is asked again alone
        (:func:`reask_due`, :meth:`_reask_alone`), a systematic one through its batch's prompts by a later run
        (crawl40 #1, crawl40b #2). The candidates are noted as tried by this auditor (no re-ask before the batches in
        this run)."""
        ts = time.time()
        why = f"unparseable answer: {got.why or 'cut off by the end of the output, also when asked alone'}"
        self._tried.update((c.qid, city) for c in cands)
        return [self._scoped({"qid": c.qid, "label": c.label, "model": self.settings.model, "ok": None,
                              "familiarity": None, "name_zh": None, "name_en": None, "why": "", "ts": ts,
                              "error": why, "raw": (got.raw or "")[:500], "failure": kind, "reasks": reasks}, city)
                for c in cands]

    async def _reask(self, c: RefCandidate, city: str | None, reask: int) -> bool:
        """Ask candidate ``c``'s rating alone again with the reminder, as its ``reask``-th re-ask (crawl40b #2); its
        answer read is a decision (``reasks`` recorded), one that cannot be read a new failure in isolation
        (``reasks`` = ``reask``; the earlier failure stays in the log before it). True when it was rated."""
        got = await self._rate_answer([c], city, reask=reask)
        if not got.missing:
            return True
        await self.decisions.append(self._rating_failures([c], got, city, FAILURE_ISOLATED, reask),
                                    self._fresh_failure)
        return False

    async def _screen_reask(self, c: RefCandidate, city: str | None, reask: int) -> bool:
        """:meth:`_reask` of ``c``'s contentious-name screen (fixref41 #3): True when the answer was read."""
        got = await self._screen_answer([c], city, reask=reask)
        if not got.missing:
            return True
        await self.sensitive.append(self._screen_failures([c], got, city, FAILURE_ISOLATED, reask),
                                    self._fresh_failure)
        return False

    def _reask_parts(self, kind: str) -> tuple[JsonlLog, str, Any, set[tuple[str, str | None]]]:
        """(log, logged model, one re-ask, the tried set) of ``kind``: ``"rating"`` or ``"screen"``."""
        if kind == "rating":
            return self.decisions, self.settings.model, self._reask, self._tried
        return self.sensitive, self.sens_model, self._screen_reask, self._tried_screen

    async def _reask_alone(self, c: RefCandidate, city: str | None, kind: str = "rating") -> bool:
        """Ask ``c`` (its rating, or its screen: ``kind``) again alone with the reminder until it is read or its
        :data:`REF_MAX_REASKS` re-asks (counted by its log's ``reasks``) failed, unless :data:`REF_MAX_FUTILE_REASKED`
        candidates of ``city`` of this ``kind`` had every re-ask fail in this run (fixref41 #1: then it keeps its
        failure, and its re-asks, for a later run). Stored answers are replayed (a task's retry in the run sends no
        call), so a retry comes to the same decisions. True when it is read now (a decision logged)."""
        log, model, once, tried = self._reask_parts(kind)
        tried.add((c.qid, city))
        rec = log.get(model, c.qid, city)
        asked = False
        while reask_due(rec):
            if sum(1 for k, _, town in self._futile if k == kind and town == city) >= REF_MAX_FUTILE_REASKED:
                return False
            if not asked:
                asked = True
                if kind == "rating":
                    self.reasked += 1
                else:
                    self.screens_reasked += 1
            if await once(c, city, reasks_of(rec) + 1):
                return True
            rec = log.get(model, c.qid, city)
        if rec is not None and "error" in rec:
            self._futile.add((kind, c.qid, city))  # its re-asks spent without a reading (made now or before)
            return False
        return rec is not None

    async def _reask_once(self, c: RefCandidate, city: str | None, kind: str = "rating") -> None:
        """Make ``c``'s re-asks left from an earlier run (:meth:`_reask_alone`), after reading what other processes
        appended to the logs since this auditor read them (review40a #7: two processes running the
        referenceability stage each re-asked, and paid for, the same candidate). When its record changed meanwhile
        (another process rated or re-asked it), that stands: no re-ask by this one in this run. Two processes that
        re-ask it at the same moment, for two sites of its city too, send one request (the same prompt, ``c`` as its
        city's step showed it: redis41 #4, so the same request key): the campaign's
        response store answers the second from the first (:func:`geoagent.crawl.llmcall.metered_generate`, a metered
        ``[[models]]`` auditor; an unmetered one, the simulator, has no store and costs nothing)."""
        log, model, _, tried = self._reask_parts(kind)
        seen = log.get(model, c.qid, city)
        log.refresh()
        self.raw.refresh()
        if log.get(model, c.qid, city) != seen:
            tried.add((c.qid, city))
            return
        await self._reask_alone(c, city, kind)

    def reask_due(self, qid: str, city: str | None, kind: str = "rating") -> bool:
        """Whether this auditor would ask ``qid`` (its rating, or its screen: ``kind``) again alone for ``city`` before
        the batches (:func:`reask_due` of its logged record, and not failed or re-asked by this auditor already:
        those had their re-asks where they failed, :meth:`_settle`)."""
        log, model, _, tried = self._reask_parts(kind)
        return (qid, city) not in tried and reask_due(log.get(model, qid, city))

    def _screen_failures(self, cands: Sequence[RefCandidate], got: _Reading, city: str | None,
                         kind: str = FAILURE_ISOLATED, reasks: int = 0) -> list[dict[str, Any]]:
        """Failure records of the contentious-name screen (``sensitive`` null: unscreened, drawn into no ladder), with
        ``failure`` (``kind``) and ``reasks`` as a rating's (:meth:`_rating_failures`; fixref41 #3: one that failed in
        isolation is asked again alone with the screen's reminder, :data:`SENS_REASK_TEMPLATE`; a failure logged
        before, without ``failure``, is not). The candidates are noted as tried (no re-ask before the batches in
        this run)."""
        ts = time.time()
        why = f"unparseable answer: {got.why or 'cut off by the end of the output, also when asked alone'}"
        self._tried_screen.update((c.qid, city) for c in cands)
        return [self._scoped({"qid": c.qid, "label": c.label, "model": self.sens_model, "auditor": self.settings.model,
                              "sensitive": None, "why": "", "ts": ts, "error": why, "raw": (got.raw or "")[:500],
                              "failure": kind, "reasks": reasks}, city)
                for c in cands]

    async def _rate(self, batch: list[RefCandidate], city: str | None = None,
                    too_many: Callable[[], bool] | None = None) -> list[RefCandidate]:
        """Rate ``batch`` (for ``city``, see :meth:`rate_all`): one answer, then the bounded split-and-retry of
        :meth:`_settle` for what it left unsettled (``too_many``: its bound). Returns the candidates whose rating
        failed.

        Raises
        ------
        GaveUp
            Both halves of a split had a format fault (their candidates' failures are logged).
        _TooManyFailed
            ``too_many()`` became true after a failure alone (logged)."""
        got = await self._rate_answer(batch, city)
        return await self._settle(batch, got, city, self._rate_answer, self._rating_failures, self.decisions, too_many,
                                  self._reask_alone)

    async def _screen_answer(self, batch: list[RefCandidate], city: str | None, reask: int = 0) -> _Reading:
        """Ask the contentious-name screen of ``batch`` once and log what its answer settles; ``reask`` (a batch of
        one): the re-ask with the screen's reminder it is (:meth:`_sens_reask_prompt`), recorded as ``reasks``."""
        prompt = self._sens_reask_prompt(batch[0], reask) if reask else self._sens_prompt(batch)
        text = await self._ask(prompt, "crawl_sensitive", batch)
        problems: list[str] = []
        parsed = parse_sensitive_batch(text, len(batch), problems=problems)
        ts = time.time()
        out, missing = [], []
        for i, c in enumerate(batch):
            d = (parsed or {}).get(i)
            if d is None:
                missing.append(c)
                continue
            out.append(self._scoped({"qid": c.qid, "label": c.label, "model": self.sens_model,
                                     "auditor": self.settings.model, **d, "ts": ts,
                                     **({"reasks": reask} if reask else {})}, city))
        await self._log_new(self.sensitive, out)
        return self._reading(text, parsed, problems, missing)

    async def _screen(self, batch: list[RefCandidate], city: str | None = None) -> list[RefCandidate]:
        """Screen ``batch`` as :meth:`_rate` rates it; a split whose halves both come back with a format fault stops
        there too (crawl40 #1), its candidates unscreened (``sensitive`` null, as one that failed alone), and the
        screen goes on with the next batch (an unscreened candidate is drawn into no ladder, and counted:
        :func:`unscreened_lines`). Refusals are split on down to the names (a contentious name may well be refused,
        review40a #1); a name whose screen failed alone is asked again alone with the screen's reminder at once, as a
        rating is (:meth:`_reask_alone`, fixref41 #3), until more of the batch failed alone, after the re-asks, than
        :data:`REF_MAX_FAILED_SHARE` of it (and more than one): the rest of the batch is then left unscreened in this
        run, unasked and unrecorded, so a later run asks it (review40b #2; a screen that never answers in JSON costs
        a few calls a batch, not about 2n). Returns the candidates left unscreened."""
        got = await self._screen_answer(batch, city)

        def too_many() -> bool:
            n = sum(1 for c in batch if "error" in (self.sensitive.get(self.sens_model, c.qid, city) or {}))
            return n > max(1.0, REF_MAX_FAILED_SHARE * len(batch))

        try:
            return await self._settle(batch, got, city, self._screen_answer, self._screen_failures, self.sensitive,
                                      too_many, lambda c, town: self._reask_alone(c, town, "screen"))
        except GaveUp as e:
            return e.candidates
        except _TooManyFailed:
            # the rest of the batch was never asked: no record for it, so a later run asks it (without the names
            # whose screen failed, which are recorded); logged as failures they were out of every ladder for good
            # (review40b #2)
            rest = [c for c in batch if self.sensitive.get(self.sens_model, c.qid, city) is None]
            return [c for c in batch if "error" in (self.sensitive.get(self.sens_model, c.qid, city) or {})] + rest

    def _ask_whole(self, batch: Sequence[RefCandidate], todo: Sequence[RefCandidate], prompt: Any, task: str) -> bool:
        """Whether ``batch`` is asked whole: nothing in it is decided yet, or the answer to the whole batch
        is logged (a crash inside its split-and-retry: replaying it re-creates the same re-asks)."""
        return len(todo) == len(batch) or self._request(prompt(batch), task).key() in self.raw

    async def rate_all(self, candidates: Sequence[RefCandidate], *, city: str | None = None,
                       max_failed_share: float | None = REF_MAX_FAILED_SHARE,
                       city_lines: Mapping[str, RefCandidate] | None = None) -> dict[str, int]:
        """Rate (and, with ``sensitive_screen``, screen) every candidate that has no logged decision for
        ``city``, in the fixed batches of :func:`fixed_batches` over ``candidates`` in the given order
        (module docstring).

        Decisions are made and looked up per ``city`` (the crawl's city key; None for candidates rated
        outside a city): a candidate another city already rated counts as undecided here, so a city's
        batches never depend on what other cities did before it.

        A batch whose candidates are all decided is skipped. A batch with some decided: when the answer to
        the whole batch is stored (a re-run after a crash in its split-and-retry), the whole batch is asked
        again and replayed, so the re-asks are the same as in the uninterrupted run; otherwise (a site
        rated alone after its city, or a log of an older version) only its undecided candidates are asked,
        together. A failed rating (a record with ``error``) is no decision (crawl40 #1). A systematic one, or one
        logged before failures were classified, is asked again through the same prompts, so an answer stored for
        them is replayed (no call) and read by this version's rules (:data:`REF_PARSER_VERSION`). One that failed
        in isolation is not (its stored answers would fail it again): it is asked alone with the reminder
        (:meth:`_reask_prompt`, a new request key) where it failed, up to :data:`REF_MAX_REASKS` times in all
        (crawl40b #2, fixref41 #1: :meth:`_reask_alone`); one with re-asks left from an earlier run (cut off by a stop
        or by :data:`REF_MAX_FUTILE_REASKED`, or an earlier version's) that this auditor has not failed or re-asked
        yet gets them before the batches (review40a #1: so a step that failed for too many of them gets further when
        requeued; :meth:`_reask_once` first reads what other processes logged). The screen's failures alike, with
        the screen's reminder (fixref41 #3). A re-ask shows the candidate as its city's step did (``city_lines``), so
        two sites of a city re-ask it with one request key (redis41 #4).

        The logs are read again first (redis41 #4): this auditor lives as long as its process, and a city another
        process of the crawl rated since would otherwise look unrated here, its candidates asked again in the
        site's own batches (the site's distances: other request keys, so paid twice); and again before each batch,
        rating and screening (chaos45 #1: another process may have logged it since, :meth:`_catch_up`).

        Unreadable answers (crawl40 #1, crawl40b #1, review40a #1): a batch's answer that settles nothing is split in
        halves and each half asked, but a split whose two halves both have a fault of the answers' format stops the
        step (:meth:`_settle`): its candidates fail as ``systematic`` and :class:`AuditorOutputUnreadable` is raised at
        once (the later batches are not asked: the auditor's output is the fault). Refusals are split on. A
        candidate whose answer cannot be read even alone fails in isolation (``isolated``): logged (``error``,
        ``raw``) and re-asked (above); one that its re-asks did not rate is left out of every ladder, and the step goes
        on; once more than ``max_failed_share`` of the candidates (and more than one) failed in isolation after their
        re-asks (fixref41 #1: a city with a few flaky answers completes in one run), the split stops (no further
        call: the step fails whatever the rest reads) and :class:`AuditorOutputUnreadable` is raised; the share is
        checked again after the screen.

        Parameters
        ----------
        candidates : sequence of RefCandidate
            In rating order (the crawl: :func:`merge_site_candidates` of one city).
        city : str, optional
            The city the ratings are made for; stored as the decisions' ``city`` field (none when None).
        max_failed_share : float, optional
            Share of the candidates (those asked: not the unlabelled) whose ratings may fail in isolation before
            the step fails (:data:`REF_MAX_FAILED_SHARE`; None: never, e.g. for a site's candidates after its
            city's step, :meth:`audit`).
        city_lines : mapping, optional
            QID -> the candidate as its city's rating step showed it (:func:`merge_site_candidates` of the city's
            sites: the distance from the nearest of them); a candidate of ``candidates`` listed here is re-asked
            with this line rather than its own (a site's, whose distance is that site's: redis41 #4), its
            re-asks' earlier keys (the site's line) replayed when stored. None: each candidate as given (the
            city's step itself, or a site rated alone).

        Returns
        -------
        dict
            ``batches`` (rating batches over the candidates), ``asked`` (rating batches sent or replayed),
            ``screened`` (sensitive-screening batches sent or replayed), ``calls`` and ``replayed`` (model
            calls sent and answers replayed by this call: rating and screening, each batch's split-and-retry
            re-asks included, so ``calls + replayed`` is at least ``asked + screened``), and
            ``not_rated_no_label``: candidates whose label is a bare QID (:func:`has_no_label`), kept out of every
            batch (rating and screening) and logged as decisions with ``not_rated`` = ``"no_label"``; the
            batches are the fixed ones without them (``batches`` counts those with a candidate left),
            ``unreadable``: answers of this call (rating and screening) that could not be read at all, ``reasked``
            and ``screens_reasked``: candidates whose rating or screen was asked again alone with the reminder (sent
            or replayed), and ``failed``: candidates whose logged rating is a failure after this call (in no
            ladder).

        Raises
        ------
        AuditorOutputUnreadable
            A split was given up, or more than ``max_failed_share`` of the ratings failed (above); retryable, the
            message names how many and where they are logged.
        geoagent.runtime.stage.Abandoned, geoagent.runtime.ledger.BudgetExhausted
            From the metered ``generate`` (a stop request, the cap); what was answered before is logged.
        """
        for log in (self.decisions, self.sensitive, self.raw):  # redis41 #4: what other processes logged since
            log.refresh()
        self._note_this_run([c.qid for c in candidates] + list(city_lines or ()), city)
        calls0, replayed0, unreadable0 = self.calls, self.replayed, self.unreadable
        reasked0, screens_reasked0 = self.reasked, self.screens_reasked
        batches = fixed_batches(candidates, self.settings.batch_size)
        unlabeled = [c for c in candidates if has_no_label(c)]
        # logged once; it also supersedes (last record wins) a rating an earlier version paid for such a label
        await self.decisions.append([self._not_rated(c, city) for c in unlabeled],
                                    lambda old, r: (old or {}).get("not_rated") != NOT_RATED_NO_LABEL)
        if unlabeled:  # out of their fixed batch: the other batches keep their members (and stored answers)
            skip = {c.qid for c in unlabeled}
            batches = [b for b in ([c for c in batch if c.qid not in skip] for batch in batches) if b]
        # crawl40b #2: a failure in isolation with re-asks left from an earlier run (fixref41 #1: a run makes them
        # where the answer failed, so these were cut off by a stop or REF_MAX_FUTILE_REASKED, or logged by an earlier
        # version) is asked alone with the reminder (its stored answers would only fail it again); one failed in this
        # run had its re-asks where it failed. Before the batches (review40a #1): a batch whose split stopped at too
        # many failures is replayed up to the same point unless those failures were rated since, so the re-asks are
        # what lets a requeued step get further
        for batch in batches:
            for c in batch:
                if self.reask_due(c.qid, city):
                    await self._reask_once(self._city_line(c, city, city_lines), city)
        n_asked = len(candidates) - len(unlabeled)
        too_many = None
        if max_failed_share is not None:
            def too_many() -> bool:
                # failures in isolation only: one of another kind (an earlier rule's) is being read again now
                alone = [c for c in self._failed(candidates, city)
                         if self.decisions.get(self.settings.model, c.qid, city).get("failure") == FAILURE_ISOLATED]
                return len(alone) > max(1.0, max_failed_share * n_asked)
        asked = 0
        for batch in batches:
            self._catch_up(self.decisions)
            # a not_rated record here is an earlier version's for a label that names nothing (the candidate has an
            # English Wikipedia title now, so it is in a batch: has_no_label): rated like an undecided one
            todo = [c for c in batch if _asked_in_batch(self.decisions.get(self.settings.model, c.qid, city))]
            if todo:
                asked += 1
                try:
                    await self._rate(batch if self._ask_whole(batch, todo, self._ref_prompt, "crawl_referenceability")
                                     else todo, city, too_many)
                except GaveUp as e:  # the auditor's output is the fault: no further batch is asked
                    raise self._unreadable(candidates, city, e) from None
                except _TooManyFailed:  # the step fails whatever the rest reads: no further call (review40a #1)
                    raise self._unreadable(candidates, city, None, share=max_failed_share) from None
        screened = 0
        if self.settings.sensitive_screen:
            for batch in batches:  # fixref41 #3: a screen's re-asks left, as a rating's above
                for c in batch:
                    if self.reask_due(c.qid, city, "screen"):
                        await self._reask_once(c, city, "screen")
            for batch in batches:
                self._catch_up(self.sensitive)
                todo = [c for c in batch if self.sensitive.get(self.sens_model, c.qid, city) is None]
                if todo:
                    screened += 1
                    await self._screen(batch if self._ask_whole(batch, todo, self._sens_prompt, "crawl_sensitive") else todo,
                                       city)
        failed = self._failed(candidates, city)
        if too_many is not None and too_many():
            raise self._unreadable(candidates, city, None, share=max_failed_share)
        return {"batches": len(batches), "asked": asked, "screened": screened, "calls": self.calls - calls0,
                "replayed": self.replayed - replayed0, "not_rated_no_label": len(unlabeled),
                "unreadable": self.unreadable - unreadable0, "reasked": self.reasked - reasked0,
                "screens_reasked": self.screens_reasked - screens_reasked0, "failed": len(failed)}

    def _logged_this_run(self, rec: Mapping[str, Any] | None) -> bool:
        """Whether logged record ``rec`` was written in this run (:func:`logged_since` :attr:`run_started`: by this
        process, or by another process of the crawl running beside it)."""
        return logged_since(rec, self.run_started)

    def _note_this_run(self, qids: Iterable[str], city: str | None) -> None:
        """Take what the logs (as last read) say was done in this run to the candidates ``qids`` of ``city``, by any
        process of the crawl, as this auditor's own (fixreask46): a candidate with a record logged in this run
        (:meth:`_logged_this_run`) was failed or re-asked in it (:attr:`_tried`: not re-asked before the batches), and
        one whose re-asks were all spent by a failure logged in this run counts towards
        :data:`REF_MAX_FUTILE_REASKED` (:attr:`_futile`). These limits lived in each process's memory only: with two
        ``run.py crawl`` processes on one state folder, the one that ran a city's step cut its re-asks off at the
        bound, and a later site task of the city in the other process re-asked the candidates just cut off (paid,
        and their re-asks spent: review46 #1). Called under the city's claim (the crawl's stage,
        :func:`geoagent.crawl.stages.ref_city_claim`), so no other process logs the city's records meanwhile; in a
        single process it adds nothing (each record it logged in this run is noted already)."""
        for kind in ("rating", "screen"):
            log, model, _, tried = self._reask_parts(kind)
            for qid in dict.fromkeys(qids):
                rec = log.get(model, qid, city)
                if not self._logged_this_run(rec):
                    continue
                tried.add((qid, city))
                if "error" in rec and rec.get("failure") == FAILURE_ISOLATED and reasks_of(rec) >= REF_MAX_REASKS:
                    self._futile.add((kind, qid, city))

    def _catch_up(self, log: JsonlLog) -> None:
        """Read what other processes of the crawl appended to ``log`` and to the raw answers since, before a batch's
        undecided candidates are taken (chaos45 #1: a process whose screen loop went on from what it read at the
        start of :meth:`rate_all` asked a batch another process had just screened; its call waited on the other's
        and took the stored answer, so nothing was billed twice, but the batch was logged again). A batch another
        process is asking at this moment is still asked here: the campaign's response store answers it once
        (:func:`geoagent.crawl.llmcall.metered_generate`), and the appends write each key once
        (:meth:`JsonlLog.append`, :meth:`RawAnswerLog.append`)."""
        log.refresh()
        self.raw.refresh()

    def _city_line(self, c: RefCandidate, city: str | None, city_lines: Mapping[str, RefCandidate] | None) -> RefCandidate:
        """``c`` as its city's step showed it (``city_lines``, :meth:`rate_all`), else ``c``; where the two differ,
        ``c`` (its re-asks' request keys before redis41 #4) is remembered for :meth:`_rate_answer`."""
        shown = (city_lines or {}).get(c.qid)
        if shown is None or shown == c:
            return c
        self._site_lines[(c.qid, city)] = c
        return shown

    def _failed(self, candidates: Sequence[RefCandidate], city: str | None) -> list[RefCandidate]:
        """The candidates whose logged rating for ``city`` is a failure (``error``)."""
        return [c for c in candidates if "error" in (self.decisions.get(self.settings.model, c.qid, city) or {})]

    def _unreadable(self, candidates: Sequence[RefCandidate], city: str | None, gave_up: GaveUp | None, *,
                    share: float | None = None) -> AuditorOutputUnreadable:
        """The error of a rating step that failed (:meth:`rate_all`): a split given up (``gave_up``), or more than
        ``share`` of the candidates failed in isolation; it names how many failed, why, where the failures are
        logged and what makes a later run get further (crawl40 #1, crawl40b #1, review40a #1, #8b): for a format
        fault, a changed auditor or request (an unchanged one replays its stored answers); for single failures, the
        re-asks with the reminder left to them, or, when those are spent, another auditor model."""
        from geoagent import constants as C

        failed = self._failed(candidates, city)
        where = f"city {city!r}" if city is not None else "these candidates"
        if gave_up is not None:
            how = (f"both halves of a split came back with the same fault of the answer's format ({gave_up.why}), so "
                   f"it was not split further and the later batches were not asked; retrying replays the stored "
                   f"answers (no new spend). {FIX_THE_FORMAT}")
        else:
            recs = [self.decisions.get(self.settings.model, c.qid, city) for c in failed]
            due = sum(1 for r in recs if reask_due(r))
            unasked = sum(1 for c in candidates if not has_no_label(c)
                          and self.decisions.get(self.settings.model, c.qid, city) is None)
            how = (f"each asked alone and again alone with a reminder (up to {REF_MAX_REASKS} re-asks each, in this "
                   f"run, until {REF_MAX_FUTILE_REASKED} had every re-ask fail), more than {share or 0:.0%} of the "
                   "candidates: taken as the auditor's fault, not single names"
                   + (f", and the split stopped there ({unasked} of the city's candidates not asked yet)"
                      if unasked else "")
                   + "; retrying replays the stored answers (no new spend); ")
            if due:
                how += (f"after `run.py dead CONFIG --requeue` the next run asks the {due} with a re-ask left again "
                        f"alone, with a reminder, before the city's batches (at most {REF_MAX_REASKS} re-asks each, "
                        "in all)")
            if len(failed) > due:
                how += ("; " if due else "") + (
                    f"{len(failed) - due} had their {REF_MAX_REASKS} re-asks: a re-run gets no new answer for "
                    f"them. {FIX_THE_FORMAT}")
        return AuditorOutputUnreadable(
            f"referenceability auditor output unreadable: ratings of {len(failed)} of {len(candidates)} candidates "
            f"failed for {where}: {how}; each failure is in {C.AUDIT_DECISIONS_FILE} (error, raw) and every answer "
            f"in {RAW_ANSWERS_FILE}", len(failed), gave_up is not None)

    def _not_rated(self, c: RefCandidate, city: str | None) -> dict[str, Any]:
        """The decision record of a candidate kept out of rating because it has no label (:func:`has_no_label`):
        the release's record shape with ``ok`` False and no rating (``familiarity`` None: no ladder or table
        takes it), ``why`` and ``not_rated`` (:data:`NOT_RATED_NO_LABEL`) saying why; no model was asked."""
        return self._scoped({"qid": c.qid, "label": c.label, "model": self.settings.model, "ok": False,
                             "familiarity": None, "name_zh": None, "name_en": None,
                             "why": "not rated: no label in the asked languages (WDQS gave the bare QID), no English Wikipedia title",
                             "ts": time.time(),
                             "not_rated": NOT_RATED_NO_LABEL}, city)

    async def audit(self, site: str, candidates: Sequence[RefCandidate], *, city: str | None = None,
                    city_lines: Mapping[str, RefCandidate] | None = None, ask: bool = True) -> list[RatedCandidate]:
        """Rate (and screen) ``candidates`` of ``site`` for ``city`` (:meth:`rate_all`: nothing is asked for
        candidates already decided for that city, e.g. by the crawl's per-city rating); returns one
        :class:`RatedCandidate` per candidate, carrying the decision made for ``city`` (failed ratings come
        back with ``familiarity=None``, failed screens with ``sensitive=None``: the ladder builder drops both).
        A rating that failed in isolation in an earlier run is asked again alone with the reminder
        (:meth:`rate_all`, crawl40b #2), showing it as its city's step did (``city_lines``: redis41 #4); no share of
        failures fails this call (``max_failed_share`` None). ``ask`` False: the caller made that :meth:`rate_all` call
        itself (the crawl's stage, under its city's claim, fixcrawl46), so none is made here: the logs are read
        again and the decisions taken as logged.

        Raises
        ------
        geoagent.runtime.stage.Abandoned
            A stop was requested (``stopping``) before a pageviews request was sent: the ratings made so far
            are logged, the site is left for the next run (which pays for none of them again).
        geoagent.runtime.ledger.BudgetExhausted
            From :meth:`rate_all`.
        """
        from geoagent.runtime.stage import Abandoned

        if not ask:  # what other processes logged since the caller's rate_all (redis41 #4)
            for log in (self.decisions, self.sensitive):
                log.refresh()
        else:  # no share limit: the crawl's city step applied it to the city's candidates (a site's few may exceed it)
            await self.rate_all(candidates, city=city, max_failed_share=None, city_lines=city_lines)
        views: dict[str, int] = {}
        if self.settings.pageviews and self.pageviews is not None:
            for c in candidates:
                if c.enwiki_title:
                    if self._stopping():  # free requests do not start in the stop's grace period
                        raise Abandoned(f"stop requested: no pageviews request for site {site} "
                                        f"({len(views)} of its candidates' pageviews read, not kept)")
                    tot = await self.pageviews.total(c.enwiki_title, self.settings.pageviews_start, self.settings.pageviews_end)
                    views[c.qid] = tot.views
        rated = []
        for c in candidates:
            d = self.decisions.get(self.settings.model, c.qid, city) or {}
            sensitive: bool | None = False  # no screen asked for (``sensitive_screen = false``)
            if self.settings.sensitive_screen:  # None: the screen failed (or never ran): unscreened, never drawn
                s = (self.sensitive.get(self.sens_model, c.qid, city) or {}).get("sensitive")
                sensitive = None if s is None else bool(s)
            rated.append(RatedCandidate(
                qid=c.qid, label_raw=c.label, dist_km=c.dist_km, familiarity=d.get("familiarity"),
                ok=bool(d.get("ok")), name_en=d.get("name_en"), name_zh=d.get("name_zh"),
                sensitive=sensitive, pageviews=views.get(c.qid)))
        if views:  # a re-run of the site (crash before its result was stored) adds no second copy of an item
            await self.review.append(self.review_items(site, rated, views))  # an item not queued yet (chaos45 #1)
        return rated

    def review_items(self, site: str, rated: Sequence[RatedCandidate], views: dict[str, int]) -> list[dict[str, Any]]:
        """Candidates whose pageview tier and LLM tier differ by at least ``review_tier_gap`` tiers."""
        pv_tier = pageview_tiers(views)
        out = []
        for r in rated:
            llm = tier_for(r.familiarity)
            pv = pv_tier.get(r.qid)
            if llm is None or pv is None or not r.ok:
                continue
            if abs(_TIER_INDEX[llm] - _TIER_INDEX[pv]) >= self.settings.review_tier_gap:
                out.append({"qid": r.qid, "label": r.label_raw, "model": self.settings.model, "site": site,
                            "familiarity": r.familiarity, "tier_llm": llm, "pageviews": views[r.qid], "tier_pageviews": pv,
                            "status": "pending", "ts": time.time()})
        return out


def ref_candidate_lines_warning(state_dir: str | Path, model: str | None = None) -> str | None:
    """One line when some cities of a crawl hold rating or screening decisions (``audit_decisions.jsonl``,
    ``audit_sensitive.jsonl``) made with other candidate lines than this version sends (``candidate_lines`` other
    than :data:`REF_CANDIDATE_LINES`; a record without it: version 1, label and distance only), else None. Decisions
    are reused by a resumed crawl (a candidate decided for a city is not asked again), so a crawl begun before
    2026-12-01 keeps its earlier ratings, made without the candidates' English Wikipedia titles, next to later ones
    made with them. Only the records that stand now count (fixref41 #2, as :func:`ref_parser_warning`): with
    ``model`` (the auditor model, ``[crawl.referenceability] model``) that model's ratings and its screens
    (``sens|<model>``); without, the last record of each (QID, city) in each file whatever its model. Records of an
    auditor model switched away from are reused by nothing, so they do not count. Records without a city (a site
    audited alone, in the release's shape) are not counted."""
    from geoagent import constants as C

    old: set[str] = set()
    cities: set[str] = set()
    for name, logged in ((C.AUDIT_DECISIONS_FILE, model), (C.AUDIT_SENSITIVE_FILE, model and f"sens|{model}")):
        path = Path(state_dir) / name
        if not path.is_file():
            continue
        for rec in _standing(path, logged):
            city = rec.get("city")
            if city is None:
                continue
            cities.add(str(city))
            if rec.get("candidate_lines", 1) != REF_CANDIDATE_LINES:
                old.add(str(city))
    if not old:
        return None
    names = sorted(old)
    shown = first_few_text(names)
    return (f"warning: referenceability: {len(old)} of {len(cities)} cities hold ratings made with the older "
            f"candidate lines (label and distance only, before 2026-12-01; this version adds each candidate's English "
            f"Wikipedia title, as the release's auditor was shown it): {shown}; a resumed crawl reuses them "
            "(audit_decisions.jsonl candidate_lines). Crawl again under a new campaign name for one rule throughout")


def not_rated_count(state_dir: str | Path) -> int:
    """Candidates of the crawl at ``state_dir`` kept out of rating because their label is a bare QID
    (:func:`has_no_label`): records of ``audit_decisions.jsonl`` whose ``not_rated`` is :data:`NOT_RATED_NO_LABEL`,
    one per (auditor model, QID, city), the last record of each key counting (:class:`JsonlLog`). 0 without a
    log."""
    from geoagent import constants as C

    log = JsonlLog(Path(state_dir) / C.AUDIT_DECISIONS_FILE)
    return sum(1 for r in log.records.values() if r.get("not_rated") == NOT_RATED_NO_LABEL)


def unscreened_count(state_dir: str | Path) -> int:
    """Candidates of the crawl at ``state_dir`` whose contentious-name screen could not be read (records of
    ``audit_sensitive.jsonl`` whose ``sensitive`` is null: the answer was unparseable even for the candidate asked
    alone), one per (screening model, QID, city), the last record of each key counting (:class:`JsonlLog`). No
    ladder draws them (module docstring). 0 without a log."""
    from geoagent import constants as C

    log = JsonlLog(Path(state_dir) / C.AUDIT_SENSITIVE_FILE)
    return sum(1 for r in log.records.values() if "sensitive" in r and r.get("sensitive") is None)


def unscreened_lines(state_dir: str | Path) -> list[str]:
    """The crawl summary's and ``run.py status``'s line counting :func:`unscreened_count`; ``[]`` when there are
    none."""
    n = unscreened_count(state_dir)
    if not n:
        return []
    from geoagent.textfmt import count_text

    return [f"  referenceability: {count_text(n, 'candidate')} not screened for contentious names (the screen's "
            "answer could not be read, also when asked alone, and again with a reminder) and drawn into "
            "no ladder (seed 000 Sec. 3.3); each is a record in audit_sensitive.jsonl with sensitive = null and an "
            "error"]


def current_ratings(state_dir: str | Path, model: str | None = None) -> list[dict[str, Any]]:
    """The rating records of ``audit_decisions.jsonl`` at ``state_dir`` that stand now, one per (QID, city): with
    ``model`` (the auditor model, ``[crawl.referenceability] model``) that model's last record of each; without, the
    last record of each (QID, city) in the file whatever its model (a crawl's auditor writes a record for each
    candidate it asks, so after a switch of the model the new one's are the later). Records of an auditor model
    switched away from no longer count (review40a #4: its failures stayed in the summary for good though the new
    model rated those QIDs). ``[]`` without a log."""
    from geoagent import constants as C

    return _standing(Path(state_dir) / C.AUDIT_DECISIONS_FILE, model)


def _standing(path: Path, model: str | None) -> list[dict[str, Any]]:
    """The records of the decision log at ``path`` (``audit_decisions.jsonl`` or ``audit_sensitive.jsonl``) that
    stand now (:func:`current_ratings`): with ``model`` (as logged: ``sens|<auditor>`` for screens) that model's
    last record of each (QID, city); without, the last record of each (QID, city) whatever its model. ``[]``
    without a log."""
    if not path.is_file():
        return []
    if model is not None:
        return [r for (m, _, _), r in JsonlLog(path).records.items() if m == model]
    last: dict[tuple[str, str | None], dict[str, Any]] = {}
    with path.open("rb") as f:
        for line in f:
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "qid" in rec and "model" in rec:
                city = rec.get("city")
                last[(str(rec["qid"]), None if city is None else str(city))] = rec
    return list(last.values())


def rating_failures(state_dir: str | Path, model: str | None = None) -> list[dict[str, Any]]:
    """The failure records of the crawl at ``state_dir`` (records of ``audit_decisions.jsonl`` with an ``error``:
    the auditor's answers could not be read, crawl40 #1) among those that stand now (:func:`current_ratings` of
    ``model``: a later decision, of the model or, without ``model``, of any model, supersedes a failure). ``[]``
    without a log."""
    return [r for r in current_ratings(state_dir, model) if "error" in r]


def rating_failed_count(state_dir: str | Path, model: str | None = None) -> int:
    """Candidates of the crawl at ``state_dir`` whose rating failed (:func:`rating_failures`); 0 without a log."""
    return len(rating_failures(state_dir, model))


def _rated_site_keys(state_dir: Path) -> set[tuple[str, str | None]]:
    """(QID, city key) of every candidate that a stored ``rated/<site>.json`` lists: its site's rating step
    completed with it (a site rated alone writes no ``ref_cities`` record, review40a #8a)."""
    from geoagent.crawl.stages import _rating_city

    out: set[tuple[str, str | None]] = set()
    for p in sorted((state_dir / "rated").glob("*.json")):
        try:
            rec = orjson.loads(p.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("site"), dict) or not isinstance(rec.get("rated"), list):
            continue
        city = _rating_city(rec["site"])
        out.update((str(r["qid"]), city) for r in rec["rated"] if isinstance(r, dict) and r.get("qid"))
    return out


def rating_failed_lines(state_dir: str | Path, model: str | None = None) -> list[str]:
    """The crawl summary's and ``run.py status``'s line counting :func:`rating_failures` (of ``model``, see
    :func:`current_ratings`): they are in no ladder; how many a re-run of the same command asks again alone with the
    reminder (:func:`reask_due`; their site's step completed: the city's ``ref_cities`` record, or a stored
    ``rated/<site>.json`` listing them for a site rated alone, review40a #8a), how many after ``run.py dead
    --requeue`` (failed alone, but their city's step failed: too many single failures), how many had their
    :data:`REF_MAX_REASKS` re-asks, and how many failed with their city's whole step for the answers' format
    (``systematic``, or logged before failures were classified: they need a changed auditor or request; crawl40b
    #1). ``[]`` when there are none."""
    recs = rating_failures(state_dir, model)
    if not recs:
        return []
    from geoagent.textfmt import count_text

    state_dir = Path(state_dir)
    listed: set[tuple[str, str | None]] | None = None

    def step_done(r: Mapping[str, Any]) -> bool:
        nonlocal listed
        city = r.get("city")
        if city is None or (state_dir / REF_CITIES_DIR / f"{city}.json").is_file():
            return True
        if listed is None:
            listed = _rated_site_keys(state_dir)
        return (str(r["qid"]), str(city)) in listed

    alone = [r for r in recs if r.get("failure") == FAILURE_ISOLATED]
    due = [r for r in alone if reask_due(r)]
    rerun = sum(1 for r in due if step_done(r))
    requeue = len(due) - rerun
    spent = len(alone) - len(due)
    step = len(recs) - len(alone)
    parts = []
    if rerun:
        parts.append(f"{rerun} will be asked again alone, with a reminder, by re-running the same "
                     f"`run.py crawl CONFIG` (the re-asks a run left: at most {REF_MAX_REASKS} each, in all)")
    if requeue:
        parts.append(f"{requeue} failed alone, but so many that their city's rating step failed: `run.py dead CONFIG "
                     "--requeue` and a run ask them again alone, with a reminder, before the city's batches")
    if spent:
        parts.append(f"{spent} had their {REF_MAX_REASKS} re-asks (a rating now needs another auditor model)")
    if step:
        parts.append(f"{step} failed with their city's whole rating step (both halves of a split with a fault of "
                     f"the answers' format, or logged before failures were told apart): {FIX_THE_FORMAT}")
    return [f"  referenceability: ratings of {count_text(len(recs), 'candidate')} failed (the auditor's answers could "
            "not be read: no JSON array, no usable idx, or a shifted numbering); they are not in any ladder; each is "
            f"a record in audit_decisions.jsonl with an error and the raw answer; {'; '.join(parts)} (seed 000 "
            "Sec. 3.3)"]


def ref_parser_warning(state_dir: str | Path, model: str | None = None) -> str | None:
    """One line when some cities of a crawl hold rating decisions read by an earlier version of the answer rules
    than this one (``parser_version`` other than :data:`REF_PARSER_VERSION`; a record without it: version 1), else
    None. Version 1 read an answer numbered from 1 as ratings of the next candidates (crawl40 #2) and logged a
    candidate whose answer it could not read as decided (crawl40 #1); a resumed crawl reuses such decisions. Only
    the records that stand now count (:func:`current_ratings` of ``model``: not those of an auditor model switched
    away from, review40a #4). Records without a city (a site audited alone, in the release's shape) are not
    counted."""
    old: set[str] = set()
    cities: set[str] = set()
    for rec in current_ratings(state_dir, model):
        city = rec.get("city")
        if city is None or rec.get("not_rated"):
            continue
        cities.add(str(city))
        if rec.get("parser_version", 1) != REF_PARSER_VERSION:
            old.add(str(city))
    if not old:
        return None
    names = sorted(old)
    shown = first_few_text(names)
    return (f"warning: referenceability: {len(old)} of {len(cities)} cities hold ratings read by an earlier version "
            f"of the answer rules (parser version 1: an answer numbered from 1 was read as the next candidates' "
            f"ratings, and an unreadable one was final): {shown}; a resumed crawl reuses them (audit_decisions.jsonl "
            "parser_version). Crawl again under a new campaign name for one rule throughout")


#: Columns of the release's ``data/candidate_referenceability.csv``.
CANDIDATE_REF_COLUMNS = ("qid", "sitelinks", "familiarity")
#: Columns of the crawl's ``candidate_referenceability_by_city.csv``: one row per (QID, city) rating; ``city``
#: is the city key the rating was made for (the decisions' ``city``), ``dist_km`` the distance from that
#: city's nearest site (the one its prompt showed), km
CANDIDATE_REF_BY_CITY_COLUMNS = ("qid", "city", "sitelinks", "familiarity", "dist_km")


def referenceability_tables(rated_sites: Iterable[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The crawl's two referenceability tables from its rated sites (module docstring, "Tables").

    Parameters
    ----------
    rated_sites : iterable of mapping
        The records of ``rated/<site>.json``: ``site`` (with ``site`` id and ``city`` name), ``rated`` (per
        candidate ``qid``, ``dist_km`` from that site, ``familiarity``; None for a failed rating) and
        ``sitelinks`` (QID -> count or None).

    Returns
    -------
    (by_city, by_qid) : two lists of dict
        ``by_city``: one row per (QID, city key) with a rating, columns :data:`CANDIDATE_REF_BY_CITY_COLUMNS`,
        sorted by QID text then city; the rating is the one stored for the city's site nearest the candidate
        (all of a city's sites carry the city's decision; ties to the smaller site id), ``dist_km`` that
        site's distance (rounded to 1e-6 km). ``by_qid``: the release's table (:data:`CANDIDATE_REF_COLUMNS`),
        one row per QID, sorted by QID text as released: a QID rated for several cities takes the rating of
        the city whose site is nearest to it (smallest ``dist_km``; ties to the smaller city key). Both
        depend only on the rated sites, never on the order in which they (or their cities) were rated.
        Sites whose city name has no letters or digits go under city key ``""``.
    """
    from geoagent.crawl.sampler import slug

    best: dict[tuple[str, str], tuple[float, str, dict[str, Any]]] = {}
    for rec in rated_sites:
        site = rec.get("site") or {}
        sid, city = str(site.get("site", "")), slug(str(site.get("city", "")))
        links = rec.get("sitelinks") or {}
        for r in rec.get("rated") or []:
            if r.get("familiarity") is None:
                continue
            d = round(float(r["dist_km"]), 6)
            key = (str(r["qid"]), city)
            prev = best.get(key)
            if prev is None or (d, sid) < prev[:2]:
                n = links.get(r["qid"])
                best[key] = (d, sid, {"qid": key[0], "city": city, "sitelinks": "" if n is None else n,
                                      "familiarity": r["familiarity"], "dist_km": d})
    by_city = [best[k][2] for k in sorted(best)]
    chosen: dict[str, dict[str, Any]] = {}
    for row in by_city:  # cities in key order: a strict < keeps the smaller city key on a tie
        prev = chosen.get(row["qid"])
        if prev is None or row["dist_km"] < prev["dist_km"]:
            chosen[row["qid"]] = row
    by_qid = [{k: chosen[q][k] for k in CANDIDATE_REF_COLUMNS} for q in sorted(chosen)]
    return by_city, by_qid


def sitelink_band_share(rows: Iterable[dict[str, Any]], lo: int = 5, hi: int = 40) -> tuple[float, int, set[int]]:
    """How well a sitelinks band selects highly referenceable places (Sec. 3.2.1).

    Parameters
    ----------
    rows : iterable of dict
        ``qid``, ``sitelinks``, ``familiarity`` (the ``candidate_referenceability.csv`` form); rows with an
        empty sitelink count or familiarity are skipped.
    lo, hi : int
        Inclusive sitelink band (the paper: 5-40).

    Returns
    -------
    (share, n_high, levels)
        Share of the high-tier candidates (referenceability 4-5) whose sitelinks fall in the band, the
        number of high-tier candidates, and the referenceability levels found inside the band (the paper:
        the band holds 76.7 % of the high tier and spans every level 0-5).
    """
    n_high = n_high_in = 0
    levels: set[int] = set()
    for r in rows:
        if r.get("sitelinks") in (None, "") or r.get("familiarity") in (None, ""):
            continue
        links, fam = int(float(r["sitelinks"])), int(float(r["familiarity"]))
        inside = lo <= links <= hi
        if inside:
            levels.add(fam)
        if fam >= 4:
            n_high += 1
            n_high_in += inside
    return (n_high_in / n_high if n_high else float("nan")), n_high, levels
