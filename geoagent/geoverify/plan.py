"""Plan a GeoVerify campaign from its config: import the release, choose trials, emit request messages.

:func:`plan_campaign` is what a campaign kind's ``plan()`` calls. It

1. imports the release folder (``[geoverify] release_dir`` or the config's ``release_dir``) and stores it
   in ``<state root>/<campaign>/data/data.sqlite`` (:mod:`geoagent.data.store`), keeping the import report;
2. takes the trials: the release's trial table (``trials = "release"``), or new ones built from the
   release's images and candidate pools (``trials = "build"``, Sec. 5.2, with both control arms);
3. keeps one trial per model request (:func:`unique_trials`): a trial that shows the same image with the
   same claim as an earlier one (e.g. two mismatched-image controls of one site drawing the same image, in a
   ``verify_trials.csv`` written before the builder redrew such draws) would get that trial's answer and be
   scored twice; it is skipped, and a warning names the file and line of both rows (also listed in the
   run's summary, :attr:`CampaignPlan.duplicate_notes`). So the dry run's call count is the run's;
4. emits one ``requests`` message per trial x model (:func:`geoagent.geoverify.stages.plan_requests`),
   honouring each model's ``sampling_rate``, in queue order (:func:`interleave`): trials in a seeded random
   order (``[campaign] seed``), every model's request of a trial next to each other, so a run stopped early
   (cost cap, Ctrl-C) covers the models evenly and a random sample of the trials;
5. tallies the images the planned requests show and those without a file under ``[geoverify] image_root``
   (:attr:`CampaignPlan.images`, :func:`image_tally`); the campaign kind refuses placeholder pixels for a
   model on a real provider unless ``[images] missing = "placeholder"`` (:mod:`geoagent.image_files`).

Replay models: a ``provider = "replay"`` model whose ``model`` value is one of the recorded model names
replays that model; any other replay model (e.g. ``model = "recorded"``) replays *every* recorded model,
and its answers are reported under the recorded names (``meta.report_model``). Replay models are planned
only for the (trial, model) pairs the raw file holds.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from geoagent.data.importer import (
    ImportReport,
    Release,
    check_plannable,
    import_counts_text,
    import_release,
    sites_without_images,
)
from geoagent.data.model import ARM_MAIN, BAND_SIGNAL, BLANK_IMAGE_REF, VerifyTrial, band_edges, decoy_band_labels
from geoagent.data.store import DataStore
from geoagent.geoverify.prompt import load_template
from geoagent.geoverify.settings import GeoVerifySettings
from geoagent.geoverify.stages import MISMATCH_UNKNOWN_REF, plan_requests, release_replay_plan, request_identity
from geoagent.geoverify.trials import BuildReport, build_trials, pools_from_trials
from geoagent.image_files import MissingImages, tally
from geoagent.runtime.stage import Message


log = logging.getLogger(__name__)


@dataclass
class CampaignPlan:
    """What :func:`plan_campaign` produced (``duplicate_notes``: one line per trial skipped by
    :func:`unique_trials`; ``images``: the planned images and those without a file, :func:`image_tally`)."""

    messages: list[Message]
    trials: list[VerifyTrial]
    import_report: ImportReport
    build_report: BuildReport | None = None
    per_model: dict[str, int] = field(default_factory=dict)
    duplicate_notes: list[str] = field(default_factory=list)
    images: MissingImages | None = None
    #: the summary's count of what the import read (:func:`geoagent.data.importer.import_counts_text`)
    import_counts: str = ""
    #: trials of the table a replay model could not replay, per recorded model (:func:`unreplayed_trials`)
    unreplayed: list[dict[str, str]] = field(default_factory=list)
    #: one line per trial whose recorded answers are not replayed or disagree (a refused table row, a record naming
    #: another trial or an unsafe site: :func:`geoagent.geoverify.stages.release_replay_plan`)
    replay_notes: list[str] = field(default_factory=list)
    #: sites of ``sites.csv`` without an image in the trial table, so without a trial
    #: (:func:`geoagent.data.importer.sites_without_images`; crawl40 #4)
    sites_without_images: list[str] = field(default_factory=list)
    #: the ``sites.csv`` they are listed in
    sites_csv: Path | None = None


#: ``edge`` of an unreplayed trial in ``geoverify_missing.csv`` (never planned, so on no queue edge)
NOT_REPLAYED = "not replayed"


def unreplayed_trials(release: Release, trials: Iterable[VerifyTrial], models: Iterable[str]) -> list[dict[str, str]]:
    """The trials of the table that a replay of ``models`` (recorded model names) cannot replay, one dict per
    (trial, model): ``model, key`` (``task_id|model``, as the plan's message keys), ``edge`` (:data:`NOT_REPLAYED`),
    ``trial_id``, ``site_id`` and ``reason``: ``recorded API error: <error>`` where the release recorded a failed call for that trial and
    model (the paper: "one call failed at the API and is excluded"), else ``no recording in <raw file>``. Such
    trials are never planned, so they enter no statistic; the report lists them beside dead-lettered work.
    Ordered by model, then the table's order."""
    errors = {(r.trial_id, r.model): r.error for r in release.raw if r.error is not None}
    recorded = {(r.trial_id, r.model) for r in release.raw if r.error is None}
    raw_files = sorted({Path(f).name for f in release.report.imported if Path(f).name.startswith("verify_raw")})
    where = ", ".join(raw_files) or "the recorded responses"
    out = []
    trials = list(trials)
    for m in models:
        for t in trials:
            if (t.trial_id, m) in recorded:
                continue
            err = errors.get((t.trial_id, m))
            out.append({"model": m, "key": f"{t.task_id}|{m}", "edge": NOT_REPLAYED, "trial_id": t.trial_id,
                        "site_id": t.site_id,
                        "reason": f"recorded API error: {err}" if err is not None else f"no recording in {where}"})
    return out


def unique_trials(
    trials: Iterable[VerifyTrial], *, source: str | Path | None = None, lines: Mapping[str, int] | None = None
) -> tuple[list[VerifyTrial], list[str]]:
    """The trials with each model request once, and a note per trial left out.

    Two trials with the same :func:`~geoagent.geoverify.stages.request_identity` (image shown, claim) are
    one model request: the run would call once and score that answer for both. A main-arm trial is kept over
    any control row that repeats its request (wherever the control stands); otherwise the first (in the
    given order: the file's) is kept.

    Parameters
    ----------
    trials : iterable of VerifyTrial
    source : path, optional
        The trial table they were read from (named in the notes); None for built trials.
    lines : mapping trial_id -> int, optional
        1-based line of each trial in ``source`` (:attr:`geoagent.data.importer.Release.trial_lines`).

    Returns
    -------
    (kept, notes) : list of VerifyTrial, list of str
        Notes read ``<file> line 99: ctrl_mismatch trial '<trial id>' shows image '<id>' with claim '<cand>'
        like line 64 ('<trial id>'); skipped (one answer is scored once)``.
    """
    first: dict[tuple[str, str], VerifyTrial] = {}
    kept: list[VerifyTrial] = []
    notes: list[str] = []
    where = "built trials" if source is None else str(source)

    def at(t: VerifyTrial) -> str:
        n = (lines or {}).get(t.trial_id)
        return f"line {n}" if n is not None else "(not in the table: rebuilt from a raw record)"

    trials = list(trials)
    # main-arm trials claim their requests first (the statistics H, F, d', delta_1 stand on them): a control
    # row that repeats a main trial's request is the one skipped, wherever it stands in the file
    for t in trials:
        if t.arm == ARM_MAIN:
            first.setdefault(request_identity(t), t)
    done: set[tuple[str, str]] = set()  # identities whose trial is kept
    for t in trials:
        ident = request_identity(t)
        prev = first.get(ident)
        if ident not in done and (prev is None or prev is t):
            first[ident] = t
            done.add(ident)
            kept.append(t)
            continue
        notes.append(f"{where} {at(t)}: {t.arm} trial {t.trial_id!r} shows image {ident[0]!r} with claim "
                     f"{t.cand!r} like {at(prev)} ({prev.trial_id!r}), so it would get that trial's answer; "
                     "skipped (one answer is scored once)")
    return kept, notes


def settings_of(cfg: Any) -> GeoVerifySettings:
    sec = cfg.section("geoverify") if hasattr(cfg, "section") else None
    if sec is None:
        return GeoVerifySettings()
    return sec if isinstance(sec, GeoVerifySettings) else GeoVerifySettings.model_validate(sec or {})


#: slack (km) on a stored ``d_km`` near tau: tables store d_km rounded to 1e-4 km (0.1 m) while truth was
#: labelled from the unrounded distance
TAU_ROUNDING_KM = 1e-4


def check_tolerance(trials: Iterable[VerifyTrial], tau_km: float, *, source: str = "the trial table") -> None:
    """Raise ValueError when a main-arm trial's ``truth`` disagrees with Eq. 1 at the configured tolerance.

    The prompt names ``tau_m`` (``[geoverify] tau_m``), while a trial table (the release's, or one a crawl
    wrote) carries truth labels fixed when it was built (the release: tau = 150 m, Sec. 5.2). Asking "within
    100 m?" about a candidate 136.8 m away labelled "yes" would score a correct "no" as a miss. Trials whose
    ``d_km`` lies within :data:`TAU_ROUNDING_KM` of tau, or is missing, are not judged.

    Raises
    ------
    ValueError
        Naming the first disagreeing trial, how many disagree, and the setting.
    """
    bad = [t for t in trials
           if t.arm == ARM_MAIN and t.d_km is not None and abs(t.d_km - tau_km) > TAU_ROUNDING_KM
           and t.truth != ("yes" if t.d_km < tau_km else "no")]
    if bad:
        t = bad[0]
        raise ValueError(
            f"[geoverify] tau_m = {tau_km * 1000:g} m disagrees with the truth labels of {source}: {len(bad)} main-arm "
            f"trial(s), e.g. {t.trial_id!r} at d_km = {t.d_km} km labelled {t.truth!r} (Eq. 1 at tau_m gives the "
            f"other answer). The release's table is labelled at the paper's 150 m (tau_m = 150); for another "
            f"tolerance set [geoverify] trials = \"build\" (tau_m is in metres)."
        )


def check_band_truth(trials: Iterable[VerifyTrial], *, source: str = "the trial table") -> None:
    """Raise ValueError when a trial's truth label disagrees with its arm and band (break26 #5): a main-arm trial of
    band ``signal`` has truth ``yes`` and one of a decoy band ``no`` (seed 000 Sec. 5.2, Eq. 1: the signal band is
    the candidates within tau); a control arm's truth is ``no`` (Sec. 5.4: the photo shown is not of the place).
    Before, a decoy labelled ``signal`` counted toward H as a signal trial.

    Raises
    ------
    ValueError
        Naming the first such trial, how many there are, and ``source``.
    """
    bad = [t for t in trials if t.truth != (("yes" if t.band == BAND_SIGNAL else "no") if t.arm == ARM_MAIN else "no")
           and not (t.arm == ARM_MAIN and not t.band)]  # a main-arm trial without a band: tau_m's check judges it
    if bad:
        t = bad[0]
        where = f"band {t.band!r}" if t.arm == ARM_MAIN else f"control arm {t.arm}"
        raise ValueError(
            f"{source}: {len(bad)} trial(s) whose truth label disagrees with their arm and band, e.g. {t.trial_id!r} "
            f"({where}) labelled {t.truth!r}: a main-arm trial of band {BAND_SIGNAL} has truth yes, one of a decoy "
            "band no, and a control arm no (seed 000 Sec. 5.2 and 5.4); correct the table or rebuild it "
            "([geoverify] trials = \"build\")")


def check_bands(trials: Iterable[VerifyTrial], tau_km: float, *, source: str = "the trial table") -> list[str]:
    """Raise ValueError when a main-arm decoy trial's band lies in none of the decoy bands scored at the configured
    tolerance (:func:`geoagent.data.model.decoy_band_labels` of ``tau_km``; a band that belongs to one of them
    counts in it, :func:`geoagent.scoring.sdt.band_folds`), fixverify42 #1; return the notes of bands the table
    covers only from above their lower edge (fixverify43 #2).

    With a tau other than 150 m the nearest band starts at tau (``0.1-0.3km`` for 100 m, ``0.2-0.3km`` for 200 m). A
    table built at a smaller tau than the configured one (``0.1-0.3km`` under tau_m = 150) holds decoys nearer than
    the nearest band scored: its decoys of that band would count in F but in no band's F, d' or delta_1. A table
    labelled at 150 m (``0.15-0.3km``) scored at a tau above it counts that band in ``<tau>-0.3km`` only when each
    such trial's ``d_km`` is known and not below tau (fixverify43 #1): a decoy nearer than tau lies inside the claim
    radius (the claim is true: a noise trial that is really a signal trial). Scored at a tau below 150 m, its
    ``0.15-0.3km`` decoys count in ``<tau>-0.3km``, which then holds none between tau and 150 m: a note says so.
    Empty bands and ``signal`` are judged by :func:`check_band_truth` and :func:`check_tolerance`.

    Returns
    -------
    list of str
        One note per band the table's decoys cover only from above its lower edge
        (:func:`geoagent.scoring.sdt.band_gaps`), naming ``source``; [] when none.

    Raises
    ------
    ValueError
        Naming ``source``, the first such trial and band, how many there are, the bands scored and the fix.
    """
    import polars as pl

    from geoagent.report.geoverify import band_gap_text
    from geoagent.scoring.sdt import band_folds, band_gaps

    trials = list(trials)
    bands = decoy_band_labels(tau_km)
    labels = sorted({t.band for t in trials if t.arm == ARM_MAIN and t.band and t.band != BAND_SIGNAL})
    if not labels:
        return []
    folds = band_folds(labels, bands)
    bad = [lab for lab in labels if lab not in bands and lab not in folds]
    if bad:
        n = sum(1 for t in trials if t.arm == ARM_MAIN and t.band in bad)
        raise ValueError(
            f"{source}: {n} main-arm decoy trial(s) in a band outside those scored at [geoverify] tau_m = "
            f"{tau_km * 1000:g} m ({', '.join(bands)}), e.g. band {bad[0]!r}: a table built with another tolerance "
            "(with another tau the nearest band starts at tau). Set tau_m to the table's, or rebuild the trials "
            "([geoverify] trials = \"build\")")
    # the paper's 0.15-0.3km counted in a nearest band that starts above it (tau > 150 m): only decoys known to lie
    # from tau on; check_tolerance refuses those labelled no nearer than tau, this those without a distance
    # (fixverify43 #1)
    widened = {lab for lab, into in folds.items()
               if (e := band_edges(lab)) and (b := band_edges(into)) and e[0] < b[0]}
    near = [t for t in trials if t.arm == ARM_MAIN and t.band in widened
            and (t.d_km is None or t.d_km < tau_km - TAU_ROUNDING_KM)]
    if near:
        t = near[0]
        raise ValueError(
            f"{source}: {len(near)} main-arm decoy trial(s) of band {t.band!r} with no distance (d_km) or one below "
            f"[geoverify] tau_m = {tau_km * 1000:g} m, e.g. {t.trial_id!r} (d_km = {t.d_km}): scored at this tau its "
            f"band is {bands[0]!r}, and a decoy nearer than tau lies inside the claim radius (the claim is true). "
            "Give the table's d_km, set tau_m to the table's (150), or rebuild the trials ([geoverify] trials = "
            "\"build\")")
    gaps = band_gaps(pl.DataFrame({"band": labels, "arm": [ARM_MAIN] * len(labels)}), bands)
    return [band_gap_text(band, lo, tau_km, source=source) for band, lo in gaps.items()]


def check_report_names(models: Iterable[Any], recorded: Iterable[str]) -> None:
    """Refuse two ``[[models]]`` entries whose answers the report would count under one model name, an entry
    reporting under ``"pooled"`` (:data:`geoagent.scoring.sdt.POOLED`, the pooled column's name), under a name
    holding ``|`` (the separator of the request keys ``trial|model``, :func:`geoagent.geoverify.stages.
    message_key`, read back to say whose dead-lettered trial ``missing.csv`` lists, and of the Markdown table's
    cells), and under a name that is a column of ``geoverify_table.csv`` already (:func:`geoagent.report.
    geoverify.render_csv`): ``section``, ``row`` or ``label``, or another model's (or ``pooled``'s) ``<name>_lo``,
    ``_hi`` or ``_text`` (e.g. ``gpt_lo`` beside ``gpt``): the CSV would have two columns of one name.

    A replay model whose ``model`` is no recorded model name replays every recorded model and reports each under
    its recorded name (module docstring); every other entry reports under its own ``name``. The GeoVerify
    aggregator counts one answer per (trial, model name) (:class:`geoagent.geoverify.aggregate.
    GeoVerifyAggregator`), so two sources under one name would be merged into one column of the report (replayed
    answers mixed with a called or simulated model's, the one counted for a trial chosen by store order).

    Raises
    ------
    ValueError
        Naming the shared (or refused) report name, the entries that would report under it, why, and the fix.
    """
    recorded = list(recorded)
    by_name: dict[str, list[str]] = {}
    for m in models:
        names = recorded if m.provider == "replay" and m.model not in recorded else [m.name]
        for n in names:
            by_name.setdefault(n, []).append(m.name)
    from geoagent.scoring.sdt import POOLED

    if POOLED in by_name:
        raise ValueError(
            f"GeoVerify: [[models]] entry {by_name[POOLED][0]!r} would report under the model name {POOLED!r}, the "
            "name of the report's pooled column (every model's answers together): the two would share one column. "
            "Rename the entry" + (" (or set the replay model's model to one other recorded name)"
                                  if by_name[POOLED][0] != POOLED else ""))
    for n, owners in by_name.items():
        if "|" in n:
            raise ValueError(
                f"GeoVerify: [[models]] entry {owners[0]!r} would report under the model name {n!r}, which holds '|': "
                "'|' separates the fields of the campaign's request keys (trial|model; missing.csv reads the model "
                "back from them) and the cells of the report's Markdown table. Rename the entry without '|'"
                + (" (or set the replay model's model to one other recorded name)" if owners[0] != n else ""))
    from geoagent.report.geoverify import CSV_FIXED_COLUMNS, CSV_MODEL_SUFFIXES

    columns = [*sorted(by_name), POOLED]
    for n, owners in sorted(by_name.items()):
        why = (f"the name of geoverify_table.csv's own column {n!r}" if n in CSV_FIXED_COLUMNS else next(
            (f"the name of the column {n!r} geoverify_table.csv derives from the model column {c!r} (its "
             f"{suf[1:]} column)" for c in columns for suf in CSV_MODEL_SUFFIXES if c != n and n == c + suf), None))
        if why:
            raise ValueError(
                f"GeoVerify: [[models]] entry {owners[0]!r} would report under the model name {n!r}, {why}: the CSV "
                "would have two columns of that name (columns: section, row, then <model>, <model>_lo, <model>_hi, "
                "<model>_text per model and pooled, then label). Rename the entry"
                + (" (or set the replay model's model to one other recorded name)" if owners[0] != n else ""))
    clashes = {n: owners for n, owners in by_name.items() if len(owners) > 1}
    if clashes:
        what = "; ".join(f"{n!r}: {', '.join(repr(o) for o in owners)}" for n, owners in sorted(clashes.items()))
        raise ValueError(
            f"GeoVerify: the report would count the answers of more than one [[models]] entry under one model name "
            f"({what}); a replay model whose model is no recorded name (e.g. model = \"recorded\") reports every "
            "recorded model under its recorded name. Rename the other entry, or set the replay model's model to one "
            "recorded name (it then replays that model only, under its own name)")


def check_twin_models(models: Iterable[Any]) -> None:
    """Refuse two ``[[models]]`` entries that ask identical requests (:func:`geoagent.runtime.scope.twin_models`):
    they share one stored answer per trial, and the report counts each model request once
    (:class:`geoagent.geoverify.stages.ScoredScope`), so the second entry's column vanished from the campaign's
    report while the live report, which keeps whichever answer arrived first, showed it with some of the trials.

    Raises
    ------
    ValueError
        Naming the twins and the fix (drop one, or make them differ, e.g. in ``seed`` or ``params``).
    """
    from geoagent.runtime.scope import twin_models, twin_models_text

    twins = twin_models(models)
    if twins:
        raise ValueError(f"GeoVerify: {twin_models_text(twins)}: one answer per trial would be stored for both and the "
                         "report counts it once, so one of them would have no answers; drop one, or make them differ "
                         "(e.g. a `seed`, or another `params` value) to ask the model twice")


def plan_campaign(cfg: Any, *, release: Release | None = None, store_data: bool = True) -> CampaignPlan:
    """Plan every request message of a GeoVerify campaign (see module docstring).

    Parameters
    ----------
    cfg : geoagent.config.CampaignConfig
    release : Release, optional
        An already imported release (default: import from the configured folder).
    store_data : bool
        Write the imported records to the campaign's data store.

    Raises
    ------
    FileNotFoundError
        The release folder has no ``sites.csv``.
    ValueError
        A trial table (with ``trials = "build"``, also a ``sites.csv``) none of whose rows can be read
        (:func:`geoagent.data.importer.check_plannable`); with ``trials = "release"``, a ``tau_m`` the table's truth labels disagree with (:func:`check_tolerance`), a
        truth label its arm and band contradict (:func:`check_band_truth`), or a decoy band outside those scored at
        ``tau_m`` (:func:`check_bands`);
        two ``[[models]]`` entries the report would count under one model name, or one reporting under a name the
        report cannot hold (``pooled``, one with ``|``, a CSV column's name: :func:`check_report_names`), or
        two that ask identical requests (:func:`check_twin_models`).
    geoagent.geoverify.prompt.TemplateError
        The configured prompt template is missing or lacks ``{candidate}``.
    geoagent.config.ConfigError
        ``tau_m`` is no whole number of metres (:func:`geoagent.geoverify.settings.check_whole_metres`).
    """
    from geoagent.config import is_sampled
    from geoagent.geoverify.settings import check_whole_metres

    check_whole_metres(cfg)  # fixguard43 #2: here, not at load, so status and export read such a campaign
    s = settings_of(cfg)
    if release is None:
        release = import_release(s.release_dir or cfg.release_dir(),
                                 state_root=cfg.state_root() if hasattr(cfg, "state_root") else None)
    # a trial table (or, when trials are built from its images, a sites.csv) none of whose rows can be read: refused
    check_plannable(release, trials=True, sites=s.trials == "build")
    if store_data:
        with DataStore.for_campaign(cfg.name, cfg.state_root()) as ds:
            ds.put_many(release.records())
            ds.set_meta("import_report", release.report.to_json())
            ds.set_meta("release_root", str(release.root))
    template = load_template(s.prompt_template, source=getattr(cfg, "source", None))
    tau_km = s.tau_m / 1000.0
    build_rep = None
    replay_notes: list[str] = []
    if s.trials == "build":
        continents = {sid: site.continent for sid, site in release.sites.items()}
        trials, build_rep = build_trials(
            list(release.images.values()), pools_from_trials(release.trials),
            seed=s.build_seed if s.build_seed is not None else cfg.campaign.seed,
            n_per_band=s.n_per_band, max_signal=s.max_signal, n_control=s.n_control, tau_km=tau_km,
            continents=continents,
        )
        trials, notes = unique_trials(trials)
        replay_trials, pairs, recorded = list(trials), set(), []
    else:
        lines = release.trial_lines
        check_tolerance(release.trials, tau_km, source=str(release.trials_file or "the release's trial table"))
        check_band_truth(release.trials, source=str(release.trials_file or "the release's trial table"))
        # a table labelled at 150 m scored below it: its nearest band holds no decoy between tau and 150 m (the
        # report and summary say so from the scores too, fixverify43 #2)
        for note in check_bands(release.trials, tau_km, source=str(release.trials_file or "the release's trial table")):
            log.warning("GeoVerify: %s", note)
        trials, notes = unique_trials(release.trials, source=release.trials_file, lines=lines)
        replay_trials, pairs, recorded = release_replay_plan(release, replay_notes)
        for note in replay_notes:
            log.warning("GeoVerify: %s", note)
        # the trials rebuilt from raw records (rev26 #12: unchecked before) by the same rules as the table's
        # (tau_m's since session 36, reports36 #3: a "signal" record 4.2 km away labelled yes was scored)
        check_band_truth(replay_trials, source="the trials of the recorded raw GeoVerify answers")
        check_tolerance(replay_trials, tau_km, source="the trials of the recorded raw GeoVerify answers")
        check_bands(replay_trials, tau_km, source="the trials of the recorded raw GeoVerify answers")
        # the same check on the replayed trials (the table's, in file order, then any rebuilt from raw records)
        by_line = sorted(replay_trials, key=lambda t: (lines.get(t.trial_id, float("inf")), t.trial_id))
        kept_replay, more = unique_trials(by_line, source=release.trials_file, lines=lines)
        kept_ids = {t.trial_id for t in kept_replay}
        replay_trials = [t for t in replay_trials if t.trial_id in kept_ids]
        notes += [n for n in more if n not in notes]
    for note in notes:
        log.warning("GeoVerify: %s", note)
    check_report_names(cfg.models, recorded)
    check_twin_models(cfg.models)
    common = dict(template=template, max_output_tokens=s.max_output_tokens, image_root=s.image_root, tau_km=tau_km)
    messages: list[Message] = []
    per_model: dict[str, int] = {}
    unreplayed: list[dict[str, str]] = []
    run: list[str] = []  # consecutive models that are no replay: planned in one pass over the trials

    def plan_run() -> None:
        # one prompt and one trial record per trial, shared by these models' requests (scale37 #3: built once
        # per model before, 4x the memory and time of a 4-model plan); their order is the models' configured one
        if run:
            messages.extend(plan_requests(trials, list(run), **common))
            run.clear()

    for m in cfg.models:
        if m.provider != "replay":
            run.append(m.name)
            continue
        plan_run()
        names = [m.model] if m.model in recorded else recorded
        if s.trials != "build" and cfg.replay_in_release(m):
            unreplayed += unreplayed_trials(release, trials, names)
        for rec in names:
            msgs = plan_requests(replay_trials, [m.name], replay_model_of={m.name: rec}, pairs=pairs, **common)
            for key, payload in msgs:
                if rec != m.name:
                    key = f"{key[:-len(m.name) - 1]}|{m.name}|{rec}"  # the task id (message_key's) + both names
                    payload["meta"]["report_model"] = rec
                    # the request key hashes params, not meta: keep one stored answer per recorded model
                    payload["params"]["replay_of"] = rec
                messages.append((key, payload))
    plan_run()
    kept = []
    rate_of = {mm.name: mm.sampling_rate for mm in cfg.models}
    for key, payload in messages:
        if is_sampled(key, rate_of[payload["model"]], cfg.campaign.seed):
            kept.append((key, payload))
            per_model[payload["model"]] = per_model.get(payload["model"], 0) + 1
    images = image_tally(kept, [*trials, *replay_trials], s.image_root)
    # the recorded responses count only where a replay model answers from them (the release's trials, a
    # replay.path in the release folder; one answering from a recording of its own reads none of them)
    raw_used = s.trials != "build" and any(cfg.replay_in_release(m) for m in cfg.models)
    return CampaignPlan(interleave(kept, cfg.campaign.seed), trials, release.report, build_rep, per_model, notes, images,
                        import_counts_text(release, raw_used=raw_used), unreplayed, replay_notes,
                        sites_without_images(release), release.root / "sites.csv")


#: config key of GeoVerify's image folder (named in messages)
IMAGE_ROOT_KEY = "geoverify.image_root"


def image_tally(messages: Iterable[Message], trials: Iterable[VerifyTrial], image_root: str | None) -> MissingImages:
    """The images the planned GeoVerify requests show, and those sent without a file (placeholder pixels).

    Gray-field controls (``ctrl_noimage``) are meant to be synthetic and not counted. An image without a file
    is described by the file looked for (``<image_root>/<path>``, ``path`` from the trial table), its table
    path when ``image_root`` is not set, or why it has none (a swapped-image control in a table without
    ``image_ref`` does not say which image it shows; a row without ``path``).
    """
    paths_by_image = {t.image_id: t.path for t in trials if t.path}

    def describe(p: Any) -> str:
        image_id = str(p.get("image_id") or "")
        trial = (p.get("meta") or {}).get("trial") or {}
        if image_id.startswith(MISMATCH_UNKNOWN_REF):
            return (f"{trial.get('arm')} trial {trial.get('trial_id')!r} (the trial table has no image_ref: the image "
                    "shown is unknown)")
        rel = paths_by_image.get(image_id)
        if not rel:
            return f"image {image_id} (no path in the trial table)"
        return str(Path(image_root) / rel) if image_root else rel

    return tally(messages, describe, task="GeoVerify", key=IMAGE_ROOT_KEY, image_root=image_root,
                 intended=lambda p: p.get("image_ref") == BLANK_IMAGE_REF)


def interleave(messages: list[Message], seed: int) -> list[Message]:
    """``messages`` in queue order: trials in the seeded random order of :func:`geoagent.config.plan_rank`,
    each trial's requests of every model next to each other (in the models' configured order).

    So a run stopped early (cost cap, Ctrl-C) has answered a random sample of the trials, each model about
    equally often. Only the order changes (a stable sort on the trial's rank): the keys and payloads are the
    same, so re-planning a resumed run enqueues the same tasks (existing keys are no-ops).
    """
    from geoagent.config import plan_rank

    ranks: dict[str, bytes] = {}

    def rank(msg: Message) -> bytes:
        tid = str(msg[1]["meta"]["trial_id"])
        r = ranks.get(tid)
        if r is None:
            r = ranks[tid] = plan_rank(tid, seed)
        return r

    return sorted(messages, key=rank)

