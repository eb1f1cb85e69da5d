"""Command line (``python run.py ...`` or ``geoagent ...``).

Commands
--------
run CONFIG        run (or resume) a campaign; ``--simulate`` estimates calls, tokens, USD and time first
status CONFIG     per-queue ready/leased/done/dead, spend vs cap, calls/s, ETA, last errors
demo              offline demo: three small campaigns (crawl, GeoVerify, GeoHint) through local fake APIs
crawl CONFIG      the crawl daemon (``--watch`` keeps watching the config for new cities)
dead CONFIG       list dead-lettered tasks, one a line: edge, key, ``deliveries=N`` (times the queue handed
                  the task out), reason (``--requeue`` puts them back)
export CONFIG     write results as Parquet and CSV under state/<campaign>/ (a crawl: its tables, under export/)
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import logging
import os
import re
import sys
from pathlib import Path
from collections.abc import Iterator
from typing import Any

import anyio

from geoagent import constants as C
from geoagent.textfmt import one_line_text


def _load(path: str, *, look: bool = False) -> Any:
    """The campaign config at ``path`` (:func:`geoagent.config.load_config`). ``look``: the command only reads the
    campaign's stored state (``status``, ``dead``, ``export``): a model whose every call would fail is a warning
    there, not a refusal, so what the runs stored can be shown and exported (review46b #2)."""
    from geoagent.campaigns import register_all_sections
    from geoagent.config import load_config

    register_all_sections()
    return load_config(path, look=look)


def _check_state_matches_queues(cfg: Any) -> None:
    """See :func:`geoagent.engine.check_state_matches_queues` (also guards ``export`` and ``crawl``)."""
    from geoagent.engine import check_state_matches_queues

    check_state_matches_queues(cfg)


def _warn_config_drift(cfg: Any, *, simulate: bool = False, file: Any = None) -> None:
    """Say (on ``file``, default stderr) what changed since the campaign's last run that the run decides before
    planning. ``run`` and ``crawl`` say it once the plan was made (:class:`_DriftNotes`): a run refused
    before (a missing template, key or release file) prints its refusal alone.

    A change of the call settings (:attr:`geoagent.runtime.manifest.ConfigChanges.calls`) is decided by the run
    itself after planning (:func:`geoagent.engine.config_drift_after_plan`: whether it adds work next to
    answers made under the old settings, so results would mix, or reaches none of them); a dry run
    (``simulate``) plans but queues nothing, so here it only names the keys. Limits and pacing keys
    (``rate``, ``concurrency``, timeouts, attempts, ``[hosts]``, ``[queue]``) change no answer: the run says so
    in one info line.

    A change to scoring-only keys (:data:`geoagent.runtime.manifest.SCORING_ONLY_KEYS`, e.g. ``[geohint]
    echo_rule``) is no drift: one info line says the report is re-scored with the new values. A change to
    ``[geohint.geocoder]`` (URLs, language, anchor radius, cache; not ``contact``) shapes no model call but
    locates the answers not yet geocoded differently: its own warning says so and how many answers were
    already geocoded (the ``located`` queue's tasks; those keep the old settings), or an info line when none was.
    """
    from geoagent.runtime.manifest import config_changes

    file = sys.stderr if file is None else file
    changes = config_changes(cfg)
    if changes.geocoder:
        _warn_geocoder_change(cfg, sorted(changes.geocoder), file=file, rules=changes.geocoder.get("rules_version"))
    if simulate:  # the run prints these once it has planned (geoagent.engine.config_drift_after_plan)
        from geoagent.runtime.drift import setting_lines

        for line in setting_lines(cfg.name, changes, _changed_keys_text, cfg):
            print(line, file=file)
    if changes.calls and simulate:
        from geoagent.runtime.drift import only_plan_scope

        what = f"{', '.join(changes.calls)} changed since its last run"
        if changes.call_keys:
            what += f" ({_changed_keys_text(changes.call_keys)})"
        if changes.call_keys and only_plan_scope(changes.calls, changes.call_keys):  # as the run decides (decide)
            from geoagent.runtime.drift import crawl_city_edit_lines, regime_scope_lines

            print(f"info: campaign {cfg.name}: {what}; this changes which tasks are planned, not how any is asked: "
                  "new tasks are asked like the stored ones, so nothing mixes.", file=file)
            for line in (*crawl_city_edit_lines(cfg.name, changes.call_keys),
                         *regime_scope_lines(cfg.name, changes.call_keys, cfg.campaign.kind)):
                print(line, file=file)
        else:
            print(f"note: campaign {cfg.name}: {what}; the run says, once it has planned, whether it adds work next "
                  "to answers made under the old settings (results would mix both versions) or reaches none of "
                  "them (a new [campaign] name is then needed).", file=file)
    if changes.scoring:
        what = ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.scoring.items())
        print(f"info: campaign {cfg.name}: scoring setting changed since its last run ({what}); the report is "
              "re-scored from the stored answers with the new value, no model call is repeated (recorded in the "
              "manifest; not a change to the calls).", file=file)


class _DriftNotes:
    """:func:`_warn_config_drift`'s lines for ``run`` / ``crawl``, held until the plan was made: call the object
    (``run_campaign(on_planned=...)``) to print them on stderr, then :meth:`flush` after the run returned (prints
    them if the run never called it); a run refused before planning never prints them, so its refusal comes
    alone (walkthrough: a dry run printed "note: ... changed since its last run; the run says, once it has
    planned, ..." and then refused a missing prompt template)."""

    def __init__(self, cfg: Any, *, simulate: bool) -> None:
        import io

        buf = io.StringIO()
        _warn_config_drift(cfg, simulate=simulate, file=buf)
        self.text: str | None = buf.getvalue()

    def __call__(self) -> None:
        if self.text:
            print(self.text, end="", file=sys.stderr, flush=True)
        self.text = None

    flush = __call__


def _changed_keys_text(keys: dict[str, tuple[Any, Any]]) -> str:
    """See :func:`geoagent.runtime.drift.changed_keys_text`."""
    from geoagent.runtime.drift import changed_keys_text

    return changed_keys_text(keys)


def _note_default_endpoints(cfg: Any) -> None:
    """Say on stderr which API a model without ``base_url`` calls and which variable its key comes from
    (:func:`geoagent.engine.default_endpoint_lines`), before the run starts."""
    from geoagent.engine import default_endpoint_lines

    for line in default_endpoint_lines(cfg):
        print(line.strip(), file=sys.stderr)


def _warn_geocoder_change(cfg: Any, keys: list[str], *, file: Any = None,
                          rules: tuple[Any, Any] | None = None) -> None:
    """The ``[geohint.geocoder]`` part of :func:`_warn_config_drift` (``keys``: the changed keys, sorted, with
    ``rules_version`` when geoagent's geocoding rules changed, ``rules`` then their (old, new) versions; printed on
    ``file``, default stderr)."""
    from geoagent.status import queue_counts

    file = sys.stderr if file is None else file
    located = queue_counts(cfg).get(C.EDGE_LOCATED)
    done = located.total if located is not None else 0
    if keys == ["rules_version"]:  # the code's rules, not a setting: nothing to keep in the config
        what = "geoagent's geocoding rules changed since its last run (version "
        if rules is not None:
            what += f"{rules[0]} -> {rules[1]}"
        what += ": geoagent/geohint/geocode.py, GEOCODER_RULES_VERSION)"
        if done == 0:
            print(f"info: campaign {cfg.name}: {what}; no answer was geocoded yet, so every answer uses the new "
                  "rules (no model call is affected).", file=file)
            return
        # the count is of before this run: its refresh may geocode some of them again (answers an earlier parser
        # read that now name another place), and the run's summary counts, from the stored rows, those that keep
        # other rules, at every run while any remain (fixgeohint42 #2)
        print(f"warning: campaign {cfg.name}: {what}: answers geocoded from now on use the new rules; the {done} "
              "geocoded before this run keep the old ones (except any this run's refresh geocodes again: answers "
              "an earlier answer parser read that now name another place), so located answers (hits, error km, "
              "unresolved) would mix both (each scored row's extra.geocoder_rules names the version that located "
              "it; rows located before that field existed have none; the echo, decided when an answer is scored, "
              "follows the new rules for those not scored yet). The run's summary says how many of the answers its "
              "report counts keep other rules, at every run while any do. No model call is affected; to geocode "
              "every answer under one version, run the campaign under a new [campaign] name (which repeats its "
              "model calls).", file=file)
        return
    keys = [k for k in keys if k != "rules_version"]
    what = f"geocoder settings changed since its last run ([geohint.geocoder] {', '.join(keys)})"
    if rules is not None:
        what += f" and geoagent's geocoding rules (version {rules[0]} -> {rules[1]})"
    if done == 0:
        print(f"info: campaign {cfg.name}: {what}; no answer was geocoded yet, so every answer uses the new "
              "settings (no model call is affected).", file=file)
        return
    print(f"warning: campaign {cfg.name}: {what}: answers geocoded from now on use the new settings; the {done} "
          f"already geocoded keep the old ones, so located answers (hits, error km, unresolved) would mix both. "
          "No model call is affected; to geocode every answer with one setting, keep the old one here or run "
          "the campaign under a new [campaign] name (which repeats its model calls).", file=file)


def _check_stages(cfg: Any, stages: list[str]) -> None:
    """Refuse ``--stages`` names the campaign kind does not have, naming its stages in plain words.

    Raises
    ------
    ValueError
        One line: ``unknown stage model_calr (did you mean 'model_caller'?); this campaign has: model_caller,
        parser, ...`` (:func:`geoagent.config.did_you_mean`, as an unknown config key); or, for an empty list
        (``--stages ""``, ``--stages ,``), that it names no stage.
    """
    from geoagent.engine import load_kind

    known = [s.name for s in load_kind(cfg.campaign.kind).stages(cfg)]
    if not stages:  # `--stages ""` or `--stages ,`: no name at all, not "every stage"
        raise ValueError(f"--stages names no stage; name one or more, comma-separated (this campaign has: "
                         f"{', '.join(known)}), or leave --stages out to run them all")
    unknown = [s for s in stages if s not in known]
    if unknown:
        from geoagent.config import did_you_mean

        named = ", ".join(f"{u}{did_you_mean(u, known)}" for u in unknown)
        raise ValueError(f"unknown stage{'s' if len(unknown) > 1 else ''} {named}; "
                         f"this campaign has: {', '.join(known)}")


def _summary(outcome: Any, before: tuple[int, int], notes: Any = None) -> str:
    """The run's summary (:meth:`geoagent.engine.Outcome.summary`) with this run's own model calls under the
    cumulative spend line, and, for an interrupted run, a last line on how to resume. Each note is said once
    (``notes``: the process's :class:`geoagent.notes.NotesOnce`; None: a fresh one), by the summary writer.

    The figures are this process's own (:attr:`Outcome.process_calls`: calls it settled;
    :attr:`Outcome.process_answered`: request tasks its model caller finished, so the answers it took from the
    response store are those minus its new calls): several ``--stages`` processes share one ledger and one
    set of queues, and a process that runs no model caller says so instead of a count. ``before``
    (:func:`geoagent.status.run_baseline` taken before the run: ``(calls, requests done)``) is the fallback
    for an outcome without them.
    """
    if getattr(outcome, "process_calls", None) is not None:
        # this process's own figures (other --stages processes share the ledger and the queues)
        lines = outcome.summary_with_this_run(notes=notes).split("\n")
    else:
        lines = outcome.summary(notes=notes).split("\n")
    spend = outcome.spend or {}
    if getattr(outcome, "process_calls", None) is None and outcome.status != "dry run" and spend:
        from geoagent.engine import done_before_phrase, reused_phrase

        calls_before, done_before = before
        new_calls = max(0, int(spend.get("calls", 0)) - calls_before)
        c = outcome.counts.get(C.EDGE_REQUESTS)
        answered = max(0, c.done - done_before) if c else 0
        reused = max(0, answered - new_calls)
        line = (f"  this run: {new_calls} new model call{'s' if new_calls != 1 else ''}; {reused_phrase(reused)}"
                f"{done_before_phrase(done_before)}")
        at = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("  spend ")), len(lines))
        lines.insert(at, line)
    if outcome.status == "interrupted":
        lines.append("  interrupted: acknowledged work is kept; re-run the same command to resume")
    return "\n".join(lines)


def _check_stop_grace() -> None:
    """Read ``GEOAGENT_STOP_GRACE_S`` (:func:`geoagent.runtime.daemon.stop_grace_s`) before a command that runs a
    pipeline loads or writes anything: a bad value is an error (exit 2) before any state exists, not after planning.

    Raises
    ------
    ValueError
        The variable is set but not a number of seconds in the allowed range."""
    from geoagent.runtime.daemon import stop_grace_s

    stop_grace_s()


def _check_upstream_wait(args: argparse.Namespace) -> None:
    """Read ``GEOAGENT_UPSTREAM_WAIT_S`` (:func:`geoagent.runtime.daemon.upstream_wait_s`) for ``run --stages``
    before the config is loaded or anything written (fixstages44 #4: a bad value was refused only once the run had
    planned, its tasks queued and manifest.json recording a failed run).

    Raises
    ------
    ValueError
        The variable is set but not a finite number of seconds >= 0 (the CLI: exit 2)."""
    if getattr(args, "stages", None) is None:
        return  # only a --stages process waits for an upstream one
    from geoagent.runtime.daemon import upstream_wait_s

    upstream_wait_s()


def _cmd_run(args: argparse.Namespace) -> int:
    from geoagent.engine import load_kind, run_campaign
    from geoagent.status import run_baseline

    _check_stop_grace()
    _check_upstream_wait(args)
    cfg = _load(args.config)
    _check_state_matches_queues(cfg)
    # a config change the stored work cannot follow (GeoVerify's tau_m, fixtaurefuse43), refused before run_baseline
    # opens the campaign's database, so the refused run leaves its files byte for byte as they were (run_campaign
    # checks again, for callers other than this command)
    load_kind(cfg.campaign.kind).check_config_change(cfg)
    notes = _DriftNotes(cfg, simulate=bool(getattr(args, "simulate", False)))
    stages = [s.strip() for s in args.stages.split(",") if s.strip()] if args.stages is not None else None
    if stages is not None:
        _check_stages(cfg, stages)
    before = run_baseline(cfg, look=bool(args.simulate))
    if not args.simulate:  # the dry run shows them in its report
        _note_default_endpoints(cfg)
    outcome = anyio.run(
        lambda: _then_ended(run_campaign(cfg, simulate=args.simulate, live=False if args.no_live else None,
                                         only_stages=stages, watch=args.watch,
                                         accept_config_change=args.accept_config_change, on_planned=notes))
    )
    _work_ended()
    notes.flush()
    with _signals_ignored():  # the run has ended: a Ctrl-C now would only cut its summary
        print(_summary(outcome, before))
    return outcome.exit_code


@contextlib.contextmanager
def _signals_ignored() -> Iterator[None]:
    """SIGINT and SIGTERM ignored for the duration (main thread only; the handlers are put back after): for
    printing the summary of a run that has ended, whose status a late Ctrl-C must not turn into exit 130."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {s: signal.signal(s, signal.SIG_IGN) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _cmd_status(args: argparse.Namespace) -> int:
    from geoagent.runtime.backend import check_backend_unchanged
    from geoagent.status import campaign_status, format_status

    from geoagent.runtime.sqlite_wal import reading_only

    cfg = _load(args.config, look=True)
    check_backend_unchanged(cfg)  # the other backend would show an empty campaign
    from geoagent.engine import load_kind

    with reading_only():  # read-only, as its --help says: a read-only (archived, shared) campaign is shown too
        st = campaign_status(cfg)
        # review44b #6d: a run of this file the kind would refuse (GeoVerify: a tau_m other than its work's)
        refused = load_kind(cfg.campaign.kind).config_change_note(cfg)
    print(format_status(st))
    if refused:
        print(refused)
    # no queues where they were looked for, though the state folder shows runs: a wrong queues root (exit 2); queues
    # with work but no state under the state root: a wrong state root (exit 2)
    return 2 if st.get("state_ran") or st.get("state_missing") or st.get("ran_elsewhere") else 0


def _cmd_dead(args: argparse.Namespace) -> int:
    from geoagent.runtime.backend import check_backend_unchanged

    # --requeue too: it makes no call (the `run` that takes the tasks up refuses what would fail)
    cfg = _load(args.config, look=True)
    check_backend_unchanged(cfg)
    if args.requeue:
        return _dead(cfg, args)
    from geoagent.runtime.sqlite_wal import reading_only

    with reading_only():  # a listing only reads, as `status` (cli36 #4: it opened the queue files read-write)
        return _dead(cfg, args)


def _dead(cfg: Any, args: argparse.Namespace) -> int:
    """``dead``'s work for ``cfg`` (:func:`_cmd_dead`). The listing goes to stdout, one task a line; a line saying
    there is nothing to list goes to stderr, so ``dead CONFIG | wc -l`` counts tasks (cli36 #11)."""
    from geoagent.status import check_edge, dead_counts, dead_letters, describe_reason, queue_counts, requeue_dead

    if not queue_counts(cfg):  # no queue file yet: say it as `status` does
        check_edge(cfg, args.edge)  # an --edge typo is still refused, naming the pipeline's edges
        from geoagent.status import (ran_in_another_folder, ran_in_another_folder_text, roots_relative_hint,
                                     wrong_queues_root)

        wrong = wrong_queues_root(cfg)
        if wrong:  # the state folder shows runs: not "not started" but queues looked for in the wrong place
            print(f"error: campaign {cfg.name}: {wrong}", file=sys.stderr)
            return 2
        if (folder := ran_in_another_folder(cfg)) is not None:  # relative roots, run from another folder
            print(f"error: campaign {cfg.name}: {ran_in_another_folder_text('dead', folder)}", file=sys.stderr)
            return 2
        # relative data roots: say where it looked and that the working directory decides, as status and export do
        # (the Redis backend keeps its queues on the server, in no folder)
        from geoagent.runtime.backend import uses_redis

        relative = "" if uses_redis(cfg) or Path(cfg.queues_root()).is_absolute() else (
            f" in {(Path(cfg.queues_root()) / cfg.name).absolute()}")
        print(f"campaign {cfg.name} not started (no queues yet{relative}): nothing dead-lettered"
              + ("; nothing to requeue" if args.requeue else "")
              + (roots_relative_hint("dead", Path.cwd()) if relative else ""), file=sys.stderr)
        return 0
    if args.requeue:
        from geoagent.status import superseded_counts

        aside = sum(superseded_counts(cfg, args.edge).values())
        n = requeue_dead(cfg, args.edge)
        note = ""
        if aside:
            # tasks set aside as no longer planned come back only if the config plans them again: otherwise the
            # next run sets them aside again (with the reason they had), unsent
            note = (f" ({min(aside, n)} of them were set aside as superseded, not in the current plan: the next run "
                    "sets those aside again, unsent, unless its config plans them again)")
        if not n:  # cli36 #16: "requeued 0 dead tasks; re-run the campaign to process them"
            where = f" on edge {args.edge}" if args.edge else ""
            print(f"no dead-lettered work{where} in campaign {cfg.name}: nothing to requeue", file=sys.stderr)
            return 0
        print(f"requeued {n} dead task{'s' if n != 1 else ''}{note}; re-run the campaign to process "
              f"{'them' if n != 1 else 'it'}")
        return 0
    n = 0
    # --limit 0: every task (the largest edge's count bounds each edge's list)
    limit = args.limit or max([1, *dead_counts(cfg, args.edge).values()])
    for edge, items in dead_letters(cfg, limit=limit, edge=args.edge).items():
        for d in items:
            n += 1
            print(f"{edge}\t{one_line_text(d.key)}\tdeliveries={d.attempts}\t{describe_reason(d.reason)}")
    where = f" on edge {args.edge}" if args.edge else ""
    if not n:
        print(f"no dead-lettered work{where} in campaign {cfg.name}", file=sys.stderr)
        return 0
    counts = dead_counts(cfg, args.edge)
    total = sum(counts.values())
    if total > n and args.edge:  # on stderr: the listing on stdout stays one task a line
        print(f"showing {n} of {total} dead tasks{where} (use --limit N, or --limit 0 for all)", file=sys.stderr)
    elif total > n:  # --limit caps each edge's list: name the edges it cut
        cut = ", ".join(f"{e}: {limit} of {c}" for e, c in counts.items() if c > limit)
        print(f"showing {n} of {total} dead tasks, at most {limit} per edge ({cut}; use --limit N per edge, or "
              "--limit 0 for all)", file=sys.stderr)
    return 0


def _other_campaigns_export(cfg: Any, folder: Path) -> str | None:
    """Why ``folder`` must not take ``cfg``'s export, or None: it holds a Parquet file of a table this campaign's
    export writes (:meth:`geoagent.engine.CampaignKind.exported_tables`: ``model_responses``, ``spend`` and its
    kind's, e.g. ``geoverify_scored`` or a crawl's tables) that another campaign's export wrote (its
    metadata :data:`geoagent.runtime.export.PARQUET_CAMPAIGN_KEY` names another campaign), or one that names no
    campaign (written elsewhere, or by an export before the key existed): this export's file of that name would
    replace it. The same campaign's earlier export is replaced, as a re-export in the state folder is."""
    import polars as pl

    from geoagent.engine import load_kind
    from geoagent.runtime.export import PARQUET_CAMPAIGN_KEY

    # only the tables this campaign's export writes are named (walk26 D2: a GeoHint export was refused for a
    # geoverify_scored.parquet it would never write, while its real clash, model_responses, went unnamed)
    names = load_kind(cfg.campaign.kind).exported_tables()
    for path in sorted(folder.glob("*.parquet")):
        if path.stem not in names:
            continue
        try:
            owner = pl.read_parquet_metadata(path).get(PARQUET_CAMPAIGN_KEY)
        except Exception:  # noqa: BLE001 - not a Parquet file we can read: not ours to replace either
            owner = None
        if owner != cfg.name:
            whose = f"campaign {owner!r}'s export" if owner else "a file no export of this campaign wrote"
            return (f"it holds {path.name}, {whose}, which this export's file of the same name would replace; "
                    f"export each campaign to a folder of its own (e.g. {folder / str(cfg.name)})")
    # a CSV of such a table, or an export note, with no Parquet file of this campaign's export beside it: a file of
    # someone's own (export38 #2: `my,own,data` in model_responses.csv was replaced without a word)
    # (a crawl's tables have a check of their own, naming the crawl or release folder: _export_out_refused)
    ours = {p.stem for p in folder.glob("*.parquet") if p.stem in names}
    lone = [folder / f"{t}.csv" for t in sorted(names) if t not in ours and (folder / f"{t}.csv").exists()
            and cfg.campaign.kind != "crawl"]
    if not ours and (folder / "export_note.txt").exists() and not _own_unfinished_export(cfg, folder):
        lone.append(folder / "export_note.txt")
    if lone:
        return (f"it holds {lone[0].name}, a file no export of this campaign wrote (no Parquet file of this campaign "
                f"beside it), which this export's file of the same name would replace; export to a folder of its own "
                f"(e.g. {folder / str(cfg.name)})")
    return None


def _own_unfinished_export(cfg: Any, folder: Path) -> bool:
    """Whether ``folder``'s ``export_note.txt`` is the in-progress note of an export of ``cfg``'s campaign that was
    stopped before its end (:func:`geoagent.runtime.export.in_progress_note`): its tables were never renamed into
    place, so no Parquet file says the folder is this campaign's; exporting there again finishes it (resume40 #2)."""
    from geoagent.runtime.export import in_progress_note

    try:
        return (folder / "export_note.txt").read_text(encoding="utf-8") == in_progress_note(str(cfg.name))
    except (OSError, UnicodeDecodeError):
        return False


def _export_out_refused(cfg: Any, out_dir: Path) -> str | None:
    """Why ``run.py export --out out_dir`` must not write there, or None: a path that is not a folder (or lies
    below a file); the state folder of another campaign (its ``campaign.sqlite`` or ``manifest.json`` there),
    whose own exports and note the export's files of the same names would replace; a crawl's own output folder,
    whose tables (``sites.csv``, ``images.csv``, ...) the export's CSVs of the same names would replace
    (:meth:`geoagent.crawl.campaign.CrawlCampaign.export`); and, for a crawl, any folder holding such a table as
    a CSV with no Parquet file of its name beside it (another crawl's output folder, a release folder that
    ``release_dir`` reads: no earlier export, which writes both)."""
    if out_dir.exists() and not out_dir.is_dir():
        return "it is not a folder"
    above = next((p for p in out_dir.absolute().parents if p.exists()), None)
    if above is not None and not above.is_dir():
        return f"it lies below {above}, which is not a folder"
    own = Path(cfg.state_dir()).resolve()
    target = out_dir.resolve()
    if cfg.campaign.kind == "crawl" and target == own:
        return ("it is the crawl's own output folder, whose tables the export's CSVs of the same names would "
                f"replace ({cfg.state_dir()}); choose another folder (the default is {Path(cfg.state_dir()) / C.EXPORT_DIR})")
    if target != own and target.is_dir():
        marker = next((m for m in (C.CAMPAIGN_DB, C.MANIFEST_FILE) if (target / m).is_file()), None)
        if marker is not None:
            return (f"it is the state folder of another campaign ({marker} there), whose exports and export note "
                    "the files of the same names would replace; choose another folder")
    if target != own and target.is_dir() and (other := _other_campaigns_export(cfg, target)):
        return other
    if cfg.campaign.kind == "crawl" and target.is_dir():
        from geoagent.crawl.export import CRAWL_CSV_TABLES

        own_tables = [f"{t}.csv" for t in CRAWL_CSV_TABLES
                      if (target / f"{t}.csv").is_file() and not (target / f"{t}.parquet").exists()]
        if own_tables:
            return (f"it holds {', '.join(own_tables)} with no Parquet file of the same name beside them: a crawl's "
                    "or a release's own tables (not an earlier export), which the export's CSVs would replace; "
                    "choose another folder")
    return None


def _rows_not_scored(parquet: Path) -> int:
    """Rows of an exported table whose ``scored`` column is false (answers the report does not count); 0 for a
    table without the column or a file that cannot be read."""
    import polars as pl

    try:
        lf = pl.scan_parquet(parquet)
        if "scored" not in lf.collect_schema().names():
            return 0
        return int(lf.filter(~pl.col("scored")).select(pl.len()).collect().item())
    except Exception:  # noqa: BLE001 - a count for a message, never a reason to fail the export
        return 0


def _cmd_export(args: argparse.Namespace) -> int:
    from geoagent.engine import load_kind
    from geoagent.runtime.backend import open_state, state_exists, uses_redis

    cfg = _load(args.config, look=True)
    _check_state_matches_queues(cfg)
    out_dir = Path(args.out).expanduser() if args.out else None
    if out_dir is not None and (refused := _export_out_refused(cfg, out_dir)):
        print(f"error: export --out {out_dir}: {refused}; nothing was written", file=sys.stderr)
        return 2
    if not Path(cfg.state_dir()).is_dir() and not (uses_redis(cfg) and state_exists(cfg)):
        # never run (here, nor on the shared Redis): opening the state would create an empty campaign
        from geoagent.status import ran_in_another_folder, ran_in_another_folder_text, roots_relative_hint

        if (folder := ran_in_another_folder(cfg)) is not None:  # relative roots, run from another folder
            print(f"error: campaign {cfg.name}: {ran_in_another_folder_text('export', folder)}; nothing exported",
                  file=sys.stderr)
            return 2

        relative = "" if Path(cfg.state_root()).is_absolute() else roots_relative_hint("export", Path.cwd())
        print(f"campaign {cfg.name} has not run yet (no {cfg.state_dir()}){relative}: nothing to export",
              file=sys.stderr)
        return 1
    from geoagent.status import stopped_while_planning

    if (planning := stopped_while_planning(cfg)) is not None:
        # its state folder and queue files exist, yet no task was queued and no run recorded: it never ran (an
        # export would write 0-row tables and exit 0)
        print(f"campaign {cfg.name} has not run yet ({planning}): nothing to export", file=sys.stderr)
        return 1
    from geoagent.runtime.export import simulated_answer_models

    kind = load_kind(cfg.campaign.kind)
    # --out on Redis: the tables come from the server; a missing state folder stays missing (else left empty)
    with open_state(cfg, recover=False, make_state_dir=out_dir is None) as state:
        made = out_dir is not None and not out_dir.exists()
        if out_dir is not None:
            try:
                out_dir.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                print(f"error: export --out {out_dir}: the folder cannot be made ({exc}); nothing was written",
                      file=sys.stderr)
                return 2
        from geoagent.files import remove_stale_temp_files

        # temporary files of an earlier export killed mid-write (break25 #5: only the next run swept them)
        # (--out: that folder only, not the tree under it, which may be anyone's: rev25 #11)
        remove_stale_temp_files(out_dir if out_dir is not None else cfg.state_dir(), recursive=out_dir is None)
        try:
            from geoagent.runtime.export import export_together, with_spend

            # what the campaign kind calls results, and the ledger per model beside them: renamed into place
            # together, the note last (resume40 #2)
            tables = export_together(cfg, lambda: with_spend(kind.export(cfg, state.store, out_dir), state.ledger,
                                                             cfg, out_dir))
        except BaseException:
            if made and out_dir is not None and not any(out_dir.iterdir()):
                out_dir.rmdir()  # the folder this export made, left empty by its failure (a damaged stored row)
            raise
        # the models whose stored answers are simulated (as recorded with each; the config for older answers);
        # a kind keeping answers in files of its own (a crawl's auditors) says so itself
        own = getattr(kind, "simulated_answer_models", None)
        sim = ((own(cfg, state.store) if own is not None else simulated_answer_models(state.store, cfg))
               if tables else [])
    for t in tables:
        left = _rows_not_scored(t.parquet)
        # walk39 #3: a plan change leaves stored answers the report does not count; a plain mean over the table
        # would mix them in
        print(f"{t.table}: {t.rows} rows" + (f" ({left} not scored: filter on the column scored)" if left else "")
              + f" -> {t.parquet}, {t.csv}")
    if not tables:
        print(f"campaign {cfg.name}: no results to export yet")
    elif any(m.provider == "replay" for m in cfg.models):  # replayed answers: say where the exports say so
        from geoagent.runtime.export import EXPORT_NOTE_FILE

        notes = sorted({str(p) for t in tables if (p := t.csv.parent / EXPORT_NOTE_FILE).is_file()})
        if notes:
            print(f"note: rows of replay models hold recorded answers, no model was called (column replayed; "
                  f"{', '.join(notes)})")
    if tables:
        from geoagent.runtime.export import EXPORT_NOTE_FILE, simulated_from_config_line

        notes = sorted({str(p) for t in tables if (p := t.csv.parent / EXPORT_NOTE_FILE).is_file()})
        if sim:  # simulated answers: say where the exports say so
            print(f"note: rows of {', '.join(sim)} hold simulated answers, from geoagent's simulator, not a model "
                  f"(column simulated; {', '.join(notes) or EXPORT_NOTE_FILE})")
        if guessed := simulated_from_config_line(tables):  # answers stored before the provider kind was recorded
            print(f"note: {guessed} ({', '.join(notes) or EXPORT_NOTE_FILE})")
    from geoagent.runtime.export import export_queue_counts

    counts, unknown = export_queue_counts(cfg)  # as the files' interim line read them
    if counts is None:  # the files are written; say what is not known and keep exit 0
        print(f"warning: the queues of campaign {cfg.name} {unknown}: the export holds the work stored so far, its "
              "completeness is unknown (export_note.txt says so); `run.py status CONFIG` tells once the queues can "
              "be read", file=sys.stderr)
        return 0
    pending = {e: c for e, c in counts.items() if c.ready or c.leased}
    if pending:  # still exit 0: what is answered so far is exported (re-export once the campaign is done)
        what = ", ".join(f"{e} ready {c.ready} leased {c.leased}" for e, c in pending.items())
        print(f"warning: campaign {cfg.name} is not finished ({what}): the export covers only the work done so "
              "far; re-run the campaign, then export again", file=sys.stderr)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    from geoagent.demo import run_demo

    _check_stop_grace()
    return run_demo(workdir=Path(args.workdir) if args.workdir else None, live=False if args.no_live else None)


def _cmd_crawl(args: argparse.Namespace) -> int:
    from geoagent.engine import run_campaign
    from geoagent.status import run_baseline

    _check_stop_grace()
    cfg = _load(args.config)
    if cfg.campaign.kind != "crawl":
        print(f"config error: {args.config}: [campaign] kind must be 'crawl' for the crawl command, got "
              f"{cfg.campaign.kind!r} (run it with `run.py run {args.config}`)", file=sys.stderr)
        return 2
    _check_state_matches_queues(cfg)
    # printed once planned (the run itself says, after planning, what a change reaches)
    notes = _DriftNotes(cfg, simulate=args.simulate)
    before = run_baseline(cfg, look=bool(args.simulate))
    if not args.simulate:  # the dry run shows them in its report
        _note_default_endpoints(cfg)
    outcome = anyio.run(lambda: _then_ended(run_campaign(cfg, simulate=args.simulate,
                                                         live=False if args.no_live else None,
                                                         watch=args.watch, on_planned=notes)))
    _work_ended()
    notes.flush()
    with _signals_ignored():  # the run has ended: a Ctrl-C now would only cut its summary
        print(_summary(outcome, before))
    return outcome.exit_code


#: the exit codes of every command (the campaign outcomes are :mod:`geoagent.engine`'s table)
EXIT_CODES_EPILOG = """exit codes:
  0    complete (every planned task reached the end of the pipeline), or the command succeeded; with
       --stages also when this process's stages finished while other stages still have work (it says so)
  1    nothing to export (the campaign has not run yet); output pipe closed early
  2    config error, bad argument or unusable path (a queue file a stage could not read or write: the line
       names it); also a --simulate dry run that predicts `run` would
       refuse to start (missing API key variables or MAPILLARY_TOKEN, images without a file for a real
       model, a first run that plans nothing): it prints its whole report first, then a last line
       `exit 2: ...` saying why
  3    incomplete: some work dead-lettered (list it with `dead CONFIG`, retry with `dead CONFIG --requeue`),
       or left queued untouched because a stage stopped early, e.g. a host could not be reached (the
       summary names it; re-run the same command to resume), or the [backend] Redis server went away or
       is out of memory, or another process held a queue file's lock too long (re-run); any command: a
       write refused by a full disk (free space, re-run the same command)
  4    budget exhausted: the cost cap stopped dispatching (raise [budget] cap_usd and re-run), or the GeoHint
       geocoder's Nominatim request cap stopped geocoding (the summary says so: re-run to go on)
  5    authentication failed: a model's host answered 401/403 repeatedly or refused its account for billing
       (402, a quota 429) (that model's work stays queued while the other models finish), or the Mapillary
       API refused a crawl's token (the crawl stops at once), or Nominatim or Wikidata refused the GeoHint
       geocoder (HTTP 403: blocked; its answers stay queued); fix the variable named (MAPILLARY_TOKEN for a
       crawl, or add credit; the geocoder: [campaign] contact or [geohint.geocoder] contact) and re-run; no
       task is lost
  6    no usable answers: every planned task reached the end, but a model answered and none of its
       answers parsed (e.g. every answer cut off at max_output_tokens); the summary names the model and
       the cause
  130  interrupted (Ctrl-C / SIGTERM): re-run the same command to resume
"""

#: each subcommand's own exit codes for its --help (the codes it can return; the full table above is the
#: top-level --help's): code -> text, continuation lines indented as in the table
_PIPE = "output pipe closed early (the reader of stdout went away, e.g. `| head`)"
_CTRL_C = "interrupted (Ctrl-C)"
_CONFIG_ERR = "config error, bad argument or unusable path"
_INCOMPLETE = ("incomplete: some work dead-lettered (list it with `dead CONFIG`, retry with `dead CONFIG --requeue`),\n"
               "       or left queued untouched because a stage stopped early, e.g. a host could not be reached (the\n"
               "       summary names it; re-run the same command to resume), or the [backend] Redis server went away\n"
               "       or is out of memory, or a full disk refused a write (free space, re-run the same command)")
#: exit 3 of the commands that run no campaign: what any command meets
_STORAGE_3 = ("a full disk refused a write, or the [backend] Redis server went away or is out of memory: free\n"
              "       space (or memory) and run the same command again")
_BUDGET = ("budget exhausted: the cost cap stopped dispatching (raise [budget] cap_usd and re-run), or the GeoHint\n"
           "       geocoder's Nominatim request cap stopped geocoding (the summary says so: re-run to go on)")
_RESUME = "interrupted (Ctrl-C / SIGTERM): re-run the same command to resume"
_NO_USABLE = ("no usable answers: every planned task reached the end, but a model answered and none of its\n"
              "       answers parsed (e.g. every answer cut off at max_output_tokens); the summary names the model and\n"
              "       the cause")
COMMAND_EXIT_CODES: dict[str, dict[int, str]] = {
    "run": {
        0: "complete (every planned task reached the end of the pipeline); with --stages also when this\n"
           "       process's stages finished while other stages still have work (it says so)",
        1: _PIPE,
        2: _CONFIG_ERR + "; also a --simulate dry run that predicts `run` would refuse to\n"
           "       start (missing API key variables, images without a file for a real model, a first run that\n"
           "       plans nothing): it prints its whole report first, then a last line `exit 2: ...` saying why",
        3: _INCOMPLETE,
        4: _BUDGET,
        5: "authentication failed: a model's host answered 401/403 repeatedly, or refused its account for billing\n"
           "       (402, a quota 429) (that model's work stays queued while the other models finish), or Nominatim or\n"
           "       Wikidata refused the GeoHint geocoder (HTTP 403; its answers stay queued); fix the variable named\n"
           "       (or add credit; the geocoder: [campaign] contact or [geohint.geocoder] contact) and re-run; no task\n"
           "       is lost",
        6: _NO_USABLE,
        130: _RESUME,
    },
    "crawl": {
        0: "complete (every planned task reached the end of the pipeline; with --watch, stopped once drained)",
        1: _PIPE,
        2: _CONFIG_ERR + "; also a --simulate dry run that predicts `crawl` would refuse to\n"
           "       start (MAPILLARY_TOKEN or an auditor's API key variable not set): it prints its whole report\n"
           "       first, then a last line `exit 2: ...` saying why",
        3: _INCOMPLETE,
        4: "budget exhausted: the cost cap stopped the auditors' model calls (raise [budget] cap_usd and re-run)",
        5: "authentication failed: the Mapillary API refused the token (the crawl stops at once), or an\n"
           "       auditor's host answered 401/403 repeatedly or refused its account for billing (402, a quota\n"
           "       429); fix the variable named (MAPILLARY_TOKEN for Mapillary, or add credit) and re-run; no\n"
           "       task is lost",
        130: _RESUME,
    },
    "status": {0: "status shown (also for a campaign not started yet)", 1: _PIPE,
               2: _CONFIG_ERR + "; also no queues found although the state folder shows the campaign\n"
               "       ran: the queues root is probably wrong (the status shown names the root its runs used);\n"
               "       or queues holding work but no state of the campaign under the state root: $GEOAGENT_STATE\n"
               "       or [paths] state is probably wrong (the status shown names the root and the folder to use)",
               3: _STORAGE_3, 130: _CTRL_C},
    "dead": {0: "listed or requeued (also when nothing is dead-lettered)", 1: _PIPE,
             2: _CONFIG_ERR + " (an unknown --edge is refused, naming the edges); also no queues\n"
             "       found although the state folder shows the campaign ran: the queues root is probably wrong\n"
             "       (the message names the root its runs used)", 3: _STORAGE_3, 130: _CTRL_C},
    "export": {0: "exported (a warning says so when the campaign is not finished: the export covers the work done)",
               1: "nothing to export (the campaign has not run yet); output pipe closed early",
               2: _CONFIG_ERR, 3: _STORAGE_3, 130: _CTRL_C},
    "demo": {0: "complete: all three demo campaigns (crawl, GeoVerify, GeoHint) finished", 1: _PIPE,
             2: _CONFIG_ERR + " (e.g. --workdir)", 3: _INCOMPLETE.replace("the same command", "`demo`").replace(
                 "`dead CONFIG`", "`dead CONFIG`, CONFIG being the filled-in file the demo\n"
                 "       wrote to state/demo-configs/ and names at the end"),
             130: "interrupted (Ctrl-C / SIGTERM): re-run `demo` to resume"},
}


#: the top-level help's list of the environment variables geoagent reads (every ``GEOAGENT_*`` name in the
#: package: tests/test_friction_s19_crawl_help.py scans the source) and of the paper-replication tools, which are
#: modules rather than subcommands (walk19 section 7: no --help named either); docs/configuration.md,
#: "Environment variables", says more
ENVIRONMENT_EPILOG = """environment variables (from the environment only; API keys and the Redis URL also from .env):
  GEOAGENT_RELEASE       GeoContext release folder; wins over [paths] release_dir, while [geoverify] /
                         [geohint] release_dir win over both (default ../shared/reference/geocontext)
  GEOAGENT_QUEUES        queues root (wins over [paths] queues; default ./queues)
  GEOAGENT_STATE         state root: results, reports, exports (wins over [paths] state; default ./state)
  GEOAGENT_STOP_GRACE_S  seconds in-flight calls may finish after Ctrl-C / SIGTERM (default 30, or the
                         longest timeout_s of the campaign's paid models)
  GEOAGENT_UPSTREAM_WAIT_S  how long a --stages process waits for an upstream stage no process has taken up
                         yet (its process not started) before it ends (default 600; 0: no wait)
  GEOAGENT_DOTENV        the .env file API keys are read from (default ./.env)
  GEOAGENT_REDIS_URL     [backend] kind = "redis": the server's URL (the default name of url_env)
  GEOAGENT_REDIS_RETRY_S how long a Redis call retries a server that went away (default 45 s)
  GEOAGENT_RUNS_INDEX    the per-user index of the folders each config ran from ("" turns it off;
                         default $XDG_STATE_HOME/geoagent/runs_index.jsonl, ~/.local/state/...)
  GEOAGENT_DEMO_MAPILLARY_TOKEN  `demo` only: the sandbox Mapillary token (default MLY|sandbox|demo)
  API keys: the variables [[models]] api_key_env name (else OPENAI_API_KEY, ANTHROPIC_API_KEY, ...) and
  MAPILLARY_TOKEN, from the environment or .env

paper-replication tools (modules, not subcommands; they read their RELEASE_DIR argument, not GEOAGENT_RELEASE):
  python -m geoagent.geohint.judged RELEASE_DIR OUT_DIR       re-score the release's judged GeoHint answers
  python -m geoagent.geohint.raw_import RELEASE_DIR OUT_DIR   re-parse its raw forced_chain answers (Table 11)
  see docs/geocontext-release.md; the variables: docs/configuration.md
"""


#: the line under each subcommand's exit codes: the variables that move its folders, and where all are described
SUBCOMMAND_ENV_EPILOG = """
environment variables: GEOAGENT_STATE, GEOAGENT_QUEUES and GEOAGENT_RELEASE move the state, queues and GeoContext
release folders (they win over the config's [paths]); every variable geoagent reads: `--help` of the program
itself, or docs/configuration.md
"""


def command_exit_codes_epilog(command: str) -> str:
    """The ``exit codes:`` table of subcommand ``command`` (:data:`COMMAND_EXIT_CODES`), in the layout of
    :data:`EXIT_CODES_EPILOG`; the full table for a command not listed."""
    rows = COMMAND_EXIT_CODES.get(command)
    if rows is None:
        return EXIT_CODES_EPILOG
    return "exit codes:\n" + "".join(f"  {code:<4} {text}\n" for code, text in sorted(rows.items()))


CONFIG_HELP = "campaign TOML file (e.g. geoagent/configs/generic_demo.toml)"


def _prog() -> str:
    """The program name for usage lines: ``run.py`` or ``geoagent`` (the installed entry point), as invoked."""
    name = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    return name if name and name not in ("__main__.py", "-c", "-m") else "geoagent"


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 (all) or more, got {value}")
    return value


# argparse names the type by its __name__ in "invalid <type> value: 'abc'" (break34 config #10)
_non_negative_int.__name__ = "whole number"


def version_text() -> str:
    """One line: the package version and each versioned rule set a stored result depends on (newuser41).

    The rule versions are the ones ``CHANGELOG.md`` lists and manifests / crawl records store, so a user can tell
    which rules a fresh run of this install applies, e.g. ``geoagent 0.1.0 (GeoHint geocoder rules N, ...)``.
    """
    from geoagent import __version__
    from geoagent.crawl.image_audit import AUDIT_PARSER_VERSION
    from geoagent.crawl.referenceability import REF_PARSER_VERSION
    from geoagent.crawl.sampler import SAMPLER_VERSION
    from geoagent.geohint.geocode import GEOCODER_RULES_VERSION
    from geoagent.geohint.parse import ANSWER_PARSER_VERSION
    from geoagent.geoverify.parse import VERDICT_PARSER_VERSION
    from geoagent.geoverify.trials import TRIAL_BUILDER_VERSION, trial_builder_version
    from geoagent.runtime.sqlite_queue import SCHEMA_VERSION

    rules = [("GeoHint geocoder rules", GEOCODER_RULES_VERSION), ("answer parser", ANSWER_PARSER_VERSION),
             ("GeoVerify verdict parser", VERDICT_PARSER_VERSION), ("trial builder", _trial_builder_text(
                 TRIAL_BUILDER_VERSION, trial_builder_version(C.GEOVERIFY_TAU_KM))),
             ("crawl sampler", SAMPLER_VERSION), ("referenceability parser", REF_PARSER_VERSION),
             ("image audit parser", AUDIT_PARSER_VERSION), ("queue schema", SCHEMA_VERSION)]
    return f"geoagent {__version__} (" + ", ".join(f"{name} {v}" for name, v in rules) + ")"


def _trial_builder_text(newest: int, at_paper_tau: int) -> str:
    """The trial builder's version as ``--version`` prints it: the newest, and the one a campaign at the paper's tau
    (150 m) and above records when that is older (a version that changed only designs below 150 m; review42a #6)."""
    return str(newest) if newest == at_paper_tau else f"{newest} ({at_paper_tau} at tau_m >= 150 m)"


class _VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` and exit 0; the rule modules are imported only when asked."""

    def __init__(self, option_strings: list[str], dest: str = argparse.SUPPRESS, default: str = argparse.SUPPRESS,
                 help: str | None = None) -> None:
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        sys.stdout.write(version_text() + "\n")  # stdout, as argparse's own version action
        parser.exit()


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The command-line parser; ``prog`` defaults to the invoked program's name (:func:`_prog`)."""
    p = argparse.ArgumentParser(
        prog=prog or _prog(),
        description="geoagent: crawl open map/photo APIs and run resumable, cost-capped VLM geolocation campaigns.",
        epilog=EXIT_CODES_EPILOG + "\n" + ENVIRONMENT_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,  # cli36 #8: "dead CONFIG --re" requeued (a write) as an abbreviation of --requeue
    )
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action=_VersionAction,
                   help="print geoagent's version and the versions of its scoring and data rules (CHANGELOG.md), and exit")
    sub = p.add_subparsers(dest="command", required=True)
    def kw(command: str) -> dict[str, Any]:
        return {"epilog": command_exit_codes_epilog(command) + SUBCOMMAND_ENV_EPILOG,
                "formatter_class": argparse.RawDescriptionHelpFormatter, "allow_abbrev": False}

    r = sub.add_parser("run", help="run or resume a campaign (re-run the same command to resume)", **kw("run"))
    r.add_argument("config", help=CONFIG_HELP)
    r.add_argument("--simulate", "--dry-run", action="store_true", help="dry run (--dry-run is the same): estimate calls, tokens, cost and duration; no spend, nothing enqueued, no new state/ folder; "
                   "exits 2 (after the report) when it predicts that `run` would refuse to start, e.g. an API key variable not set")
    r.add_argument("--stages", help="comma-separated stages to run in this process (scale-out; an unknown name is refused, naming the campaign's stages)")
    r.add_argument("--watch", action="store_true", help="daemon mode: keep polling queues instead of finishing")
    r.add_argument("--no-live", action="store_true", help="no live terminal display (it is off anyway when stdout is not a terminal)")
    r.add_argument("--accept-config-change", action="store_true",
                   help="[backend] kind = \"redis\": make this file's config the campaign's for every machine when it differs "
                        "from the one recorded on the server in what changes requests or results (otherwise refused, exit 2); "
                        "machines still on the old config are then refused at their next start")
    r.set_defaults(fn=_cmd_run)

    s = sub.add_parser("status", help="queues, spend vs cap, rates, ETA, last errors (read-only)", **kw("status"))
    s.add_argument("config", help=CONFIG_HELP)
    s.set_defaults(fn=_cmd_status)

    d = sub.add_parser("demo", help="offline demo: three small campaigns (crawl, GeoVerify, GeoHint) through local "
                       "fake APIs and simulated models", **kw("demo"))
    d.add_argument("--workdir", metavar="DIR", help="put queues/ and state/ of the demo under DIR (default: queues/ and state/ here, or $GEOAGENT_QUEUES/$GEOAGENT_STATE)")
    d.add_argument("--no-live", action="store_true", help="no live terminal display (it is off anyway when stdout is not a terminal)")
    d.set_defaults(fn=_cmd_demo)

    c = sub.add_parser("crawl", help="crawl daemon: screen cities, sample sites, fetch and audit images, build ladders", **kw("crawl"))
    c.add_argument("config", help="crawl campaign TOML file ([campaign] kind = \"crawl\", e.g. geoagent/configs/crawl_sandbox.toml)")
    c.add_argument("--simulate", "--dry-run", action="store_true", help="dry run (--dry-run is the same): what would be planned and its model-call estimate; nothing enqueued, no new state/ folder; "
                   "exits 2 (after the report) when it predicts that `crawl` would refuse to start, e.g. MAPILLARY_TOKEN not set")
    c.add_argument("--watch", action="store_true", help="keep running and pick up new cities added to the config")
    c.add_argument("--no-live", action="store_true", help="no live terminal display (it is off anyway when stdout is not a terminal)")
    c.set_defaults(fn=_cmd_crawl)

    dl = sub.add_parser("dead", help="list (or requeue) dead-lettered tasks: edge, key, deliveries=N (times the queue "
                        "handed the task out, up to [queue] max_attempts), reason (HTTP attempts are within one delivery)",
                        **kw("dead"))
    dl.add_argument("config", help=CONFIG_HELP)
    dl.add_argument("--requeue", action="store_true",
                    help="put the dead tasks (of --edge, or all) back to ready; re-run the campaign to process them")
    dl.add_argument("--edge", help="only this edge (queue), e.g. requests or responses; an unknown name is refused")
    dl.add_argument("--limit", type=_non_negative_int, default=50, metavar="N",
                    help="list at most N tasks per edge, most recent first (default 50; 0: all of them; a shorter "
                         "list says so)")
    dl.set_defaults(fn=_cmd_dead)

    e = sub.add_parser("export", help="export results as Parquet and CSV (a crawl: its tables, to state/<campaign>/export/)", **kw("export"))
    e.add_argument("config", help=CONFIG_HELP)
    e.add_argument("--out", metavar="DIR",
                   help="write the Parquet and CSV files (and the export note) to DIR, made if missing, instead of "
                        "the state folder (state/<campaign>/; a crawl: state/<campaign>/export/); files of the same "
                        "names this campaign's export wrote there are replaced; refused: a folder holding another campaign's export "
                        "(each campaign needs a folder of its own), another campaign's state folder and, for a crawl, its own output "
                        "folder or any folder of a crawl's or a release's own tables (sites.csv, ... with no Parquet beside)")
    e.set_defaults(fn=_cmd_export)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the process exit code (see :mod:`geoagent.engine` for campaign codes)."""
    global _COMMAND, _WORK_ENDED
    _WORK_ENDED = False
    _COMMAND = None
    args = build_parser().parse_args(argv)
    _COMMAND = args  # first: an interrupt from here on says what it stopped (chaos45 #2: a status read as a run)
    from geoagent.runtime.daemon import mark_end_recorded

    mark_end_recorded(False)
    handler = logging.StreamHandler()
    handler.setFormatter(ConsoleLogFormatter(verbose=bool(args.verbose)))
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, handlers=[handler])
    from geoagent.secrets import install_log_redaction

    install_log_redaction()
    for line in near_miss_env_lines(os.environ):
        print(line, file=sys.stderr)
    with _config_warnings_as_lines():
        return _run_command(args)


#: the folder variables a misspelt name of (one with ``_DIR`` added, or the S of QUEUES left off) is said to be no variable of
#: geoagent's: a data root left where it was is the campaign run elsewhere than meant (cli36 #13)
_FOLDER_VARS = {"GEOAGENT_STATE": "the state root", "GEOAGENT_QUEUES": "the queues root",
                "GEOAGENT_RELEASE": "the GeoContext release folder"}


def near_miss_env_lines(environ: Any) -> list[str]:
    """One ``warning:`` line per set environment variable whose name is a folder variable's with something added or
    left off (the state variable with ``_DIR`` added, the queues one without its last S): geoagent reads none of them, so
    the folder stays where it was. Other ``GEOAGENT_*`` names are left alone (a model's ``api_key_env`` may be
    any name)."""
    known = set(re.findall(r"^\s+(GEOAGENT_[A-Z_]+)", ENVIRONMENT_EPILOG, re.M))
    out = []
    for name in sorted(environ):
        if name in known or not name.startswith("GEOAGENT_"):
            continue
        for var, what in _FOLDER_VARS.items():
            if name.startswith(var.rstrip("S")):
                out.append(f"warning: ${name} is set but geoagent reads no such variable: did you mean ${var} "
                           f"({what})? Its folder stays as the config and the defaults set it")
                break
    return out


#: the format of a logging record on the console with ``-v`` (every record, debug ones too)
VERBOSE_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class ConsoleLogFormatter(logging.Formatter):
    """How the CLI prints logging records on stderr (:func:`main`).

    Without ``-v`` only warnings and errors are printed, and they are said to the user like the CLI's other
    warnings: ``warning: MESSAGE`` (``error: MESSAGE`` for an error; a traceback, if the record has one, follows),
    e.g. the engine's ``warning: campaign c: 2 task(s) leased by a stopped process are redelivered now``, not
    ``2026-12-02 04:55:01,123 WARNING geoagent.engine: campaign c: ...``; a record of a logger outside
    ``geoagent`` (a library's) names it: ``warning: asyncio: ...``. With ``-v`` (``verbose``) every record keeps
    the logging format with time, level and logger (:data:`VERBOSE_LOG_FORMAT`)."""

    def __init__(self, *, verbose: bool = False) -> None:
        super().__init__(VERBOSE_LOG_FORMAT if verbose else "%(message)s")
        self.verbose = verbose

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if self.verbose:
            return text
        prefix = ("error: " if record.levelno >= logging.ERROR else "warning: " if record.levelno >= logging.WARNING
                  else "note: ")  # below WARNING only from a logger given a level of its own
        name = record.name or ""
        return prefix + ("" if name == "geoagent" or name.startswith("geoagent.") or name == "root" else f"{name}: ") + text


@contextlib.contextmanager
def _config_warnings_as_lines() -> Iterator[None]:
    """Print each :class:`geoagent.config.ConfigWarning` as one ``warning: FILE: ...`` line on stderr, like the
    CLI's other warnings, instead of Python's ``/path/config.py:1129: ConfigWarning: ...`` and a source line
    (the message already starts with the file); other warnings print as Python prints them."""
    import warnings

    from geoagent.config import ConfigWarning

    before = warnings.showwarning

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if issubclass(category, ConfigWarning):
            print(f"warning: {message}", file=file or sys.stderr)
        else:
            before(message, category, filename, lineno, file, line)

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = before


def _run_command(args: argparse.Namespace) -> int:
    """Run the subcommand; map its failures to one readable line and an exit code (see :func:`main`)."""
    import asyncio

    from geoagent.config import ConfigError

    try:
        return int(args.fn(args))
    except BaseException as exc:  # noqa: BLE001 - unwrap task-group errors to one readable line
        leaf = _leaf(exc)
        if isinstance(leaf, (KeyboardInterrupt, asyncio.CancelledError)):
            # a Ctrl-C before the pipeline's own signal handling (loading, opening, planning): once the workers run,
            # a first signal stops them gracefully and a second one exits through os._exit, never through here
            print(_interrupted_early_line(), file=sys.stderr)
            return 130
        if isinstance(leaf, ConfigError):
            print(f"config error: {leaf}", file=sys.stderr)
            return 2
        if isinstance(leaf, BrokenPipeError):
            raise leaf from None  # the reader of stdout went away: entry() exits quietly
        if isinstance(leaf, (FileNotFoundError, KeyError, ValueError)):
            # str(KeyError) is the repr of its message (quoted): print the message itself
            text = leaf.args[0] if isinstance(leaf, KeyError) and len(leaf.args) == 1 else leaf
            print(f"error: {text}", file=sys.stderr)
            return 2
        if isinstance(leaf, OSError) and leaf.errno in _PATH_ERRNOS:  # a data root that is a file, read-only, ...
            out = getattr(args, "out", None)
            failing = getattr(leaf, "filename", None)
            # cli36 #14: a write under --out points at --out; the campaign's own files (a read-only archive
            # exported elsewhere) at the data roots (review36b #3)
            at_out = bool(out and failing and os.path.abspath(str(failing)).startswith(
                os.path.join(os.path.abspath(str(out)), "")))
            hint = ("check the folder given to --out" if at_out else
                    f"check [paths] in the config and ${C.ENV_STATE_ROOT} / ${C.ENV_QUEUES_ROOT}")
            print(f"error: {leaf} ({hint})", file=sys.stderr)
            return 2
        full = _storage_failure(exc)
        if full is not None and getattr(args, "command", None) == "export":  # review36b #6: worded for an export
            print(f"error: could not write the export ({full}): the disk is probably full (or failing); the "
                  "campaign's own files are as they were, and a table whose file was not replaced keeps its last "
                  "export: free some space and run the same command again", file=sys.stderr)
            return 3
        if full is not None:
            print(f"error: could not write the campaign's files ({full}): the disk is probably full (or failing); "
                  "what was acknowledged is kept (finished tasks, stored answers, booked spend; calls still on the "
                  "wire when the write failed count as unknown-outcome spend): free some space and re-run the same "
                  "command to resume", file=sys.stderr)
            return 3
        from geoagent.runtime.backend import ServerLostWrites

        lost_writes = next((e for e in _leaves(exc) if isinstance(e, ServerLostWrites)), None)
        if lost_writes is not None:  # redis39 #1c: incomplete, a re-run resumes (its message says how)
            print(f"error: {lost_writes}", file=sys.stderr)
            return 3
        oom = _redis_out_of_memory(exc)
        if oom is not None:  # before the refusal: the server said no for want of memory, not for a permission
            from geoagent.runtime.backend import scrub

            print(f"error: the Redis server named by [backend] url_env is out of memory ({scrub(str(oom), None)[:200]}):"
                  " raise its maxmemory or free memory on it, then re-run the same command to resume; what it "
                  "acknowledged is kept there (stored answers, spend, finished work; answers it could not store count "
                  "as unknown-outcome spend and are asked again)", file=sys.stderr)
            return 3
        refusal = _redis_refusal(exc)
        if refusal is not None:  # the server answered and said no, in any leaf: a config error, whatever else failed
            from geoagent.runtime.backend import scrub

            what, refused = refusal
            if what == "credentials":  # the URL's password or user name
                print(f"error: [backend] url_env: {scrub(str(refused), None)}", file=sys.stderr)
            else:  # a queue script (an ACL user's missing permission)
                print(f"error: [backend] url_env: the Redis server refused a command this campaign needs "
                      f"({scrub(str(refused), None)}): check what the URL's user may run (ACL: scripting and the "
                      "commands it calls), then re-run the same command", file=sys.stderr)
            return 2
        lost = _redis_failure(exc)
        if lost is not None:
            from geoagent.runtime.backend import scrub

            print(f"error: the Redis server named by [backend] url_env failed during the command "
                  f"({scrub(f'{type(lost).__name__}: {lost}', None)}); what it acknowledged is kept there (stored "
                  "answers, spend, finished work; calls cut off count as unknown-outcome spend): re-run the same "
                  "command once it answers again", file=sys.stderr)
            return 3
        queue_error = _queue_failure(exc)
        if queue_error is not None:  # review44a #7: a stage's queue failed (its message names the file): one line
            import sqlite3

            from geoagent.runtime.backend import scrub
            from geoagent.runtime.sqlite_wal import is_busy

            cause = queue_error.__cause__
            if isinstance(cause, sqlite3.OperationalError) and is_busy(cause):
                # review44f #4: another process held the file's write lock past the busy timeout: nothing to fix
                # there, so the exit says re-run (3), as a Redis server lost for a while does
                print(f"error: {scrub(str(queue_error), None)}; another process held the queue file's lock too long; "
                      "what the queues acknowledged is kept (finished tasks, stored answers, booked spend): re-run "
                      "the same command to resume", file=sys.stderr)
                return 3
            print(f"error: {scrub(str(queue_error), None)}; what the queues acknowledged is kept (finished tasks, "
                  "stored answers, booked spend): fix what the message names (the queue file, its folder's "
                  "permissions, the disk), then re-run the same command to resume", file=sys.stderr)
            return 2
        raise


def entry() -> None:
    """Process entry (``run.py``, ``geoagent``): run :func:`main`, then exit with its code.

    Once the command has returned, its work is durable; a late Ctrl-C (a second press landing while the
    interpreter shuts down) is ignored instead of printing a KeyboardInterrupt traceback from ``atexit``.
    When the reader of stdout goes away (``run.py status CONFIG | head -4``) the command stops quietly with
    exit code 1 instead of a ``BrokenPipeError`` traceback (Python docs, signal module, "Note on SIGPIPE").
    """
    import signal

    try:
        try:
            if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
                # until a run's pipeline installs its own handling (and from then on outside it): a SIGTERM stops
                # the command as a Ctrl-C does (KeyboardInterrupt: "interrupted (SIGTERM) before ...", exit 130)
                signal.signal(signal.SIGTERM, _interrupt_on_term)
            code = main()
        except SystemExit as exc:  # argparse (--help, a usage error) still flushes below
            code = exc.code
        except KeyboardInterrupt:  # a Ctrl-C while the command still imported its modules: one line, no traceback
            print(_interrupted_early_line(), file=sys.stderr)
            code = 130
        sys.stdout.flush()  # inside the try: a closed pipe shows up here when the output was buffered
    except BrokenPipeError:
        # Python flushes stdout again at exit: point it at devnull so that flush cannot fail too
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if signal.getsignal(signal.SIGTERM) is _interrupt_on_term:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the work is durable: no traceback from a late one
    sys.exit(code)


#: the line for a Ctrl-C that lands before a command's workers run (while it loads, opens the campaign or plans)
INTERRUPTED_EARLY = ("interrupted (Ctrl-C) before the run started its workers (while loading or planning, or between "
                     "the demo's campaigns): acknowledged work is durable; re-run the same command to start or resume")
#: the same for a SIGTERM (:func:`_interrupt_on_term`)
INTERRUPTED_EARLY_TERM = INTERRUPTED_EARLY.replace("(Ctrl-C)", "(SIGTERM)")
#: the same for a dry run (``run`` / ``crawl`` ``--simulate``), which has no workers and nothing to resume
INTERRUPTED_DRY_RUN = ("interrupted (Ctrl-C) during the dry run (--simulate): no call was made and nothing was queued "
                       "or written; run it again for the whole estimate")
#: the same for a command that only reads the campaign (``status``, ``dead`` without ``--requeue``)
INTERRUPTED_READ_ONLY = "interrupted (Ctrl-C): `{command}` only reads the campaign's files; nothing was changed"
#: the same for ``--help`` and ``--version``, which read no campaign
INTERRUPTED_NOTHING = "interrupted (Ctrl-C): nothing was read or changed"
#: set by :func:`_interrupt_on_term`: the KeyboardInterrupt being handled came from a SIGTERM
_TERM_RECEIVED = False
#: the parsed command line (:func:`main`), so that an early interrupt's line can say what was stopped
_COMMAND: argparse.Namespace | None = None


def _interrupted_early_line() -> str:
    """The line for an interrupt before a command's workers run: :data:`INTERRUPTED_DRY_RUN` for a dry run,
    :data:`INTERRUPTED_READ_ONLY` for ``status`` or ``dead`` without ``--requeue``, else :data:`INTERRUPTED_EARLY`;
    ``(SIGTERM)`` in place of ``(Ctrl-C)`` when a SIGTERM raised the interrupt."""
    args = _COMMAND
    if args is None:  # interrupted before the command line was parsed: read it as typed (review45a #3)
        words = sys.argv[1:]
        if {"-h", "--help", "--version"} & set(words):  # help and version read nothing (review45b #2)
            return INTERRUPTED_NOTHING.replace("(Ctrl-C)", "(SIGTERM)") if _TERM_RECEIVED else INTERRUPTED_NOTHING
        args = argparse.Namespace(command=next((w for w in words if not w.startswith("-")), None),
                                  simulate="--simulate" in words, requeue="--requeue" in words)
    command = getattr(args, "command", None)
    if command in ("run", "crawl") and getattr(args, "simulate", False):
        line = INTERRUPTED_DRY_RUN
    elif command == "status" or (command == "dead" and not getattr(args, "requeue", False)):
        line = INTERRUPTED_READ_ONLY.format(command=command)
    else:
        line = INTERRUPTED_EARLY
    return line.replace("(Ctrl-C)", "(SIGTERM)") if _TERM_RECEIVED else line


def _interrupt_on_term(signum: int, frame: Any) -> None:
    """SIGTERM handler outside a run's pipeline (start-up, planning, the other commands): raise
    ``KeyboardInterrupt``, as Python's own SIGINT handler does, so the command ends as at a Ctrl-C
    (:data:`INTERRUPTED_EARLY_TERM`, exit 130). The signal used to kill the process silently (exit -15) while a
    large plan was being queued. Once a run's work has ended (:func:`_work_ended`: its outcome, report and
    exports written, the manifest's entry stopped) it is ignored: the command exits as its run ended (resume40 #4:
    one landing just after the summary was printed read "interrupted before the run started its workers", 130)."""
    global _TERM_RECEIVED
    from geoagent.runtime.daemon import end_recorded

    if _WORK_ENDED or end_recorded():  # also in the loop's teardown after the run's end (review40a #6)
        return
    _TERM_RECEIVED = True
    raise KeyboardInterrupt


#: set by :func:`_work_ended` once ``run`` / ``crawl`` has its outcome (reset by each :func:`main`)
_WORK_ENDED = False


async def _then_ended(run: Any) -> Any:
    """Await ``run`` (a :func:`geoagent.engine.run_campaign` call) and note at once, still inside the event loop,
    that the run has ended (:func:`geoagent.runtime.daemon.mark_end_recorded`): a SIGTERM in the loop's teardown
    changes nothing then (review40a #6). The command that runs one campaign says so here; the demo, which goes on
    to its next campaign, does not."""
    from geoagent.runtime.daemon import mark_end_recorded

    outcome = await run
    mark_end_recorded()
    return outcome


def _work_ended() -> None:
    """Record that the command's run has ended and its end is durable: a SIGTERM from now on is ignored
    (:func:`_interrupt_on_term`)."""
    global _WORK_ENDED
    _WORK_ENDED = True


#: file-system errors that mean a data root or input path is unusable (answered with one line, exit 2)
_PATH_ERRNOS = {errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS}


#: errno values of a write refused for want of space (no space, file too large for the limit, quota)
_FULL_ERRNOS = {errno.ENOSPC, errno.EFBIG, errno.EDQUOT}
#: SQLite's messages for a write the file system refused (SQLITE_FULL; SQLITE_IOERR, e.g. EFBIG on a write)
_SQLITE_FULL_TEXTS = ("database or disk is full", "disk i/o error")


def _is_storage_full(exc: BaseException) -> bool:
    """Whether ``exc`` or an exception it was raised from (``__cause__`` / ``__context__``) is a write the file
    system refused: an ``OSError`` of :data:`_FULL_ERRNOS`, or an SQLite error reading so (a queue's
    ``QueueError`` wraps the latter)."""
    import sqlite3

    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL_ERRNOS:
            return True
        if isinstance(e, sqlite3.Error) and any(t in str(e).lower() for t in _SQLITE_FULL_TEXTS):
            return True
        e = e.__cause__ or e.__context__
    return False


def _leaves(exc: BaseException) -> list[BaseException]:
    """The errors of ``exc`` in order, exception groups walked down (depth first), cancellations left out."""
    import asyncio

    leaves: list[BaseException] = []
    stack = [exc]
    while stack:
        e = stack.pop()
        if isinstance(e, BaseExceptionGroup):
            stack.extend(reversed(e.exceptions))
        elif not isinstance(e, asyncio.CancelledError):
            leaves.append(e)
    return leaves


def _storage_failure(exc: BaseException) -> BaseException | None:
    """The first failed write (a full disk, :func:`_is_storage_full`) when every error in ``exc`` (an exception
    group walked down, cancellations left out) is one, else None. Several workers hit a full disk at once: the
    run ends with one line naming the first file, not a traceback of each (``run`` exit 3, re-run to resume)."""
    leaves = _leaves(exc)
    if leaves and all(_is_storage_full(e) for e in leaves):
        return leaves[0]
    return None


def _queue_failure(exc: BaseException) -> BaseException | None:
    """The first queue error (:class:`~geoagent.runtime.queue.QueueError`, e.g. a SQLite queue file a lease could not
    read: its message names the queue and the file) when every error in ``exc`` (an exception group walked down,
    cancellations left out) is one, else None. Before (review44a #7) such an error out of a stage's task group ended
    the run with an ``ExceptionGroup`` traceback; a damaged file found at open (``QueueFileError``, a ``ValueError``)
    already was one line."""
    from geoagent.runtime.queue import QueueError

    leaves = _leaves(exc)
    if leaves and all(isinstance(e, QueueError) for e in leaves):
        return leaves[0]
    return None


def _redis_failure(exc: BaseException) -> BaseException | None:
    """The first Redis client error (redis-py's ``RedisError``: connection lost, timeout, ...) when every error in
    ``exc`` (an exception group walked down, cancellations left out) is one, else None."""
    try:
        from redis.exceptions import RedisError
    except ImportError:  # redis-py absent: no campaign can use Redis
        return None
    leaves = _leaves(exc)
    if leaves and all(isinstance(e, RedisError) for e in leaves):
        return leaves[0]
    return None


#: what a Redis server answers a write with once ``maxmemory`` is reached under the ``noeviction`` policy the docs
#: require (redis-py raises ``OutOfMemoryError`` for it, or a ``ResponseError`` from inside a script)
REDIS_OOM_TEXT = "OOM command not allowed"


def _redis_out_of_memory(exc: BaseException) -> BaseException | None:
    """The first error of ``exc`` (or of its cause chain) saying the Redis server is out of memory, when every error in
    ``exc`` (an exception group walked down) is a Redis, queue, backend or ledger one; else None. It was reported as
    a refused command with an ACL fix and exit 2 (redis36 #2); the server answered, but for want of memory: raising
    ``maxmemory`` and re-running resumes (exit 3)."""
    try:
        from redis.exceptions import OutOfMemoryError, RedisError
    except ImportError:  # redis-py absent: no campaign can use Redis
        return None
    from geoagent.runtime.backend import BackendError
    from geoagent.runtime.ledger import LedgerError
    from geoagent.runtime.queue import QueueError

    leaves = _leaves(exc)
    if not leaves or not all(isinstance(e, (RedisError, QueueError, BackendError, LedgerError)) for e in leaves):
        return None
    for e in leaves:
        cause: BaseException | None = e
        for _ in range(5):
            if cause is None:
                break
            if isinstance(cause, OutOfMemoryError) or REDIS_OOM_TEXT in str(cause):
                return cause
            cause = cause.__cause__ or cause.__context__
    return None


def _redis_refusal(exc: BaseException) -> tuple[str, BaseException] | None:
    """The Redis server's refusal among the errors of ``exc`` (an exception group walked down, cancellations left
    out), in any position, when every error is a Redis one (redis-py's ``RedisError``, a queue's ``QueueError``, a
    :class:`geoagent.runtime.backend.BackendError`); else None.

    ``("credentials", error)``: an error refusing the URL's password or user name, reworded by
    :func:`geoagent.runtime.redis_retry.auth_refused` (a ``QueueError`` or ``BackendError`` raised from one
    counts), preferred over a refused script since nothing else can be checked before it is fixed;
    ``("command", error)``: a ``QueueError`` caused by redis-py's ``ResponseError`` (``NOPERM`` for an ACL user
    that may not run ``EVALSHA`` or a command a queue script calls), or a ``NoPermissionError`` itself (the
    host-share board's, :meth:`geoagent.runtime.hostshare_redis.RedisBoard.refusal`). Either is a configuration error (exit
    2), neither an outage nor retried: the server answered. Workers of one run can fail differently at once (a
    server restarted with another password: one cut connection, one refused reconnect), so the refusal is the cause
    to report whatever came first; before session 19 the first leaf decided (exit 3 "re-run once it answers", or a
    traceback). A leaf that is no Redis error (a programming error) leaves the group to be raised as it is."""
    try:
        from redis.exceptions import NoPermissionError, RedisError, ResponseError
    except ImportError:  # redis-py absent: no campaign can use Redis
        return None
    from geoagent.runtime.backend import BackendError
    from geoagent.runtime.queue import QueueError
    from geoagent.runtime.redis_retry import AUTH_REFUSED, auth_refused

    leaves = _leaves(exc)
    if not leaves or not all(isinstance(e, (RedisError, QueueError, BackendError)) for e in leaves):
        return None
    command: BaseException | None = None
    for e in leaves:
        if isinstance(e, BackendError):
            if AUTH_REFUSED in str(e):
                return "credentials", _refusal_from_text(str(e))
            continue
        for cause in (e, e.__cause__, e.__context__):
            refused = auth_refused(cause) if cause is not None else None
            if refused is not None:
                return "credentials", refused
        if command is None and (isinstance(e, NoPermissionError)
                                or isinstance(e, QueueError) and isinstance(e.__cause__, ResponseError)):
            command = e
    return ("command", command) if command is not None else None


def _refusal_from_text(text: str) -> BaseException:
    """A :class:`ValueError` whose message is ``text`` (a ``BackendError``'s ``[backend] url_env: <refusal>``)
    from the refusal on: the CLI puts its own ``[backend] url_env:`` in front."""
    from geoagent.runtime.redis_retry import AUTH_REFUSED

    return ValueError(text[text.index(AUTH_REFUSED):])


def _leaf(exc: BaseException) -> BaseException:
    """The one innermost exception of nested exception groups, ignoring the cancellations it caused in
    sibling tasks (``exc`` itself when there is no single cause)."""
    import asyncio

    while isinstance(exc, BaseExceptionGroup):
        causes = [e for e in exc.exceptions if not isinstance(e, asyncio.CancelledError)] or list(exc.exceptions)
        if len({(type(e), str(e)) for e in causes}) != 1:  # several workers can fail alike (a missing token)
            return exc
        exc = causes[0]
    return exc
