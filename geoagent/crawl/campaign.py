"""The crawl as a campaign kind for the engine (``[campaign] kind = "crawl"``, ``run.py crawl CONFIG``).

The planner puts the ``[[crawl.cities]]`` on the ``cities`` edge (keys stable, so re-running resumes);
the stages are :func:`geoagent.crawl.stages.crawl_stages`; their services are built from the engine's
(``config``, ``http``, ``providers``, ``state_dir``) on first use. ``[crawl] watch = true`` (or the
engine's watch mode plus that flag) keeps re-reading the config for new cities. The report is
``report/crawl_summary.json`` with the output files and the per-API request and error counts; the export
(end of a run, ``run.py export``) writes the crawl's tables to ``export/`` as Parquet and CSV.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from geoagent import constants as C
from geoagent.textfmt import mapping_text
from geoagent.crawl.settings import CrawlConfigError, CrawlSettings
from geoagent.crawl.stages import city_messages, crawl_stages, services_from_context
from geoagent.engine import CampaignKind
from geoagent.runtime.stage import Message, Stage, StageContext


def _settings(cfg: Any) -> CrawlSettings:
    s = cfg.section("crawl")
    if not isinstance(s, CrawlSettings):
        raise CrawlConfigError(f"{getattr(cfg, 'source', 'config')}: a crawl campaign needs a [crawl] section")
    return s


class CrawlCampaign(CampaignKind):
    """Screen cities, sample sites, fetch and audit images, rate reference points, build ladders."""

    kind = "crawl"
    plan_edge = C.EDGE_CITIES
    plan_unit = "cities"

    def stages(self, cfg: Any) -> list[Stage]:
        _settings(cfg)
        return crawl_stages()

    def required_keys(self, cfg: Any) -> list[tuple[str, str]]:
        """The Mapillary token (``[crawl.endpoints] mapillary_token_env``): every crawl stage process builds the
        Mapillary client, so the engine looks it up before the run creates any queue or state file."""
        var = _settings(cfg).endpoints.mapillary_token_env
        return [(var, "the Mapillary token, [crawl.endpoints] mapillary_token_env")]

    async def plan(self, cfg: Any, ctx: StageContext) -> Iterable[Message]:
        """The cities to screen. A human-verdict CSV (``[crawl.image_audit] human_verdicts``) that exists is
        read first: the image auditor reads it after each site's audit calls, so a file it cannot read would
        dead-letter every site after they were paid for; here it stops the run before any call (exit 2,
        ``ValueError`` naming the file and line)."""
        settings = _settings(cfg)
        hv = settings.image_audit.human_verdicts
        if hv and Path(hv).is_file():
            from geoagent.crawl.image_audit import read_human_verdicts

            read_human_verdicts(hv)
        return city_messages(settings.cities)

    def empty_plan_reason(self, cfg: Any) -> str:
        return (f"0 cities planned from {getattr(cfg, 'source', cfg.name)}: [[crawl.cities]] is empty (add cities, "
                "or run with --watch to wait for them)")

    async def report(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[Path]:
        svc = services_from_context(ctx)
        self._trials_note = None
        if outcome.status == "complete":
            self._trials_note = _write_trials(cfg, svc)
        out = Path(cfg.state_dir()) / C.REPORT_DIR / "crawl_summary.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        files = sorted(str(p.relative_to(svc.state_dir)) for p in svc.state_dir.glob("**/*.csv"))
        out.write_bytes(orjson.dumps({"status": outcome.status, "api": svc.api_stats(), "files": files,
                                      "images_root": str(svc.images_root)}, option=orjson.OPT_INDENT_2))
        return [out]

    def export(self, cfg: Any, store: Any) -> list[Any]:
        """The crawl's tables (city pool, sites, images, image audit, candidate referenceability, ladders,
        audit logs, the crawl's decision log) as Parquet and CSV under ``state/<campaign>/export/``
        (:func:`geoagent.crawl.export.export_crawl_tables`), plus the response store's tables when it holds
        any (the crawl's audits are kept in its own files, so it usually holds none)."""
        from geoagent.crawl.export import export_crawl_tables
        from geoagent.runtime.export import export_all

        out = Path(cfg.state_dir()) / C.EXPORT_DIR
        tables = export_crawl_tables(cfg.state_dir(), out)
        if store.count_responses() or store.result_tables():
            tables += export_all(store, out, include_responses=store.count_responses() > 0)
        return tables

    def idle_handoff(self, cfg: Any, ctx: StageContext, *, export: bool, complete: bool) -> list[str]:
        """``run.py crawl CONFIG --watch`` went idle (every queue drained after new work): write the hand-off
        tables now, as the end of a run does, so an evaluation campaign can use the folder while the crawl
        keeps watching: ``verify_trials.csv`` (only when nothing is dead-lettered, as at the end of a run;
        :func:`_write_trials`) and, unless ``--no-export``, ``export/`` (:meth:`export`). ``sites.csv``,
        ``images.csv`` and ``ladders/`` are written by the stages as they go. Each file is written
        atomically (a temporary file renamed over it), and writing again gives the same tables."""
        svc = services_from_context(ctx)
        parts = []
        if complete:
            self._trials_note = _write_trials(cfg, svc)
            parts.append(self._trials_note)
        else:
            parts.append("verify_trials.csv not written (dead-lettered tasks: see `run.py status`)")
        if export:
            tables = self.export(cfg, ctx.get("store"))
            parts.append(f"export: {len(tables)} tables in {Path(cfg.state_dir()) / C.EXPORT_DIR}")
        return ["crawl --watch: idle (every queue drained); hand-off tables written: " + "; ".join(parts)]

    def summary_lines(self, cfg: Any, ctx: StageContext, outcome: Any) -> list[str]:
        svc = services_from_context(ctx)
        lines = [f"  crawl outputs: {svc.state_dir} (sites.csv, ladders/, image_audit.csv), images: {svc.images_root}"]
        from geoagent.status import describe_answers

        for api, st in svc.api_stats().items():
            answers = describe_answers(st["answers"], st["answer_notes"])
            lines.append(f"  {api:>10}: {st['requests']} requests, {st['retries']} retries, error rate {st['error_rate']:.1%}"
                         + (f"; {answers}" if answers else ""))
        lines.append("  queue counts are per-site tasks (one task fetches or audits all of a site's images); "
                     + image_counts_line(image_counts(svc.state_dir, svc.images_root)))
        note = getattr(self, "_trials_note", None)
        if note:
            lines.append(f"  {note}")
        return lines


def images_kept(state_dir: str | Path) -> int:
    """Rows of the crawl's ``images.csv`` (audited images kept; 0 when it is not written yet)."""
    import csv

    path = Path(state_dir) / "images.csv"
    if not path.is_file():
        return 0
    with open(path, newline="", encoding="utf-8") as f:
        return sum(1 for _ in csv.DictReader(f))


#: why the fetcher left an image out (its ``images.json`` ``rejected[].reason``, :mod:`geoagent.crawl.fetcher`),
#: by the reason's start: (category, before download?)
_REJECTION_KINDS = (("panorama", "panoramas", True), ("within ", "within min_separation_m of a kept image", True),
                    ("no thumbnail", "no thumbnail to be had", True),
                    ("too dark", "too dark (brightness filter)", False), ("near-duplicate", "near-duplicates", False))


def image_counts(state_dir: str | Path, images_root: str | Path) -> dict[str, Any]:
    """How many images the crawl looked at, kept, and why it left the others out.

    Reads each site's ``images.json`` (:data:`geoagent.crawl.fetcher.METADATA_FILE`: ``kept`` and ``rejected``
    with a ``reason``) and ``images.csv`` (the audited kept images, ``usable`` True/False). Returns ``kept``
    (thumbnails on disk), ``skipped`` (category -> count, left out before download: panoramas, within
    ``min_separation_m`` of a kept image, no thumbnail), ``rejected`` (category -> count, left out after
    download: too dark, the brightness filter; near-duplicates; ``other``: an unreadable JPEG), ``usable`` and
    ``excluded`` (images.csv rows the audit kept / excluded; a human verdict overrides the model's) and
    ``audited`` (rows of images.csv)."""
    import csv

    from geoagent.crawl.fetcher import METADATA_FILE

    out: dict[str, Any] = {"kept": 0, "skipped": {}, "rejected": {}, "usable": 0, "excluded": 0, "audited": 0}
    root = Path(images_root)
    for meta_path in sorted(root.glob(f"*/{METADATA_FILE}")) if root.is_dir() else []:
        try:
            meta = orjson.loads(meta_path.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue
        if not isinstance(meta, dict):
            continue
        out["kept"] += len(meta.get("kept") or [])
        for r in meta.get("rejected") or []:
            reason = str(r.get("reason", "")) if isinstance(r, dict) else ""
            kind = next(((name, before) for start, name, before in _REJECTION_KINDS if reason.startswith(start)),
                        ("other (unreadable image)", False))
            bucket = out["skipped"] if kind[1] else out["rejected"]
            bucket[kind[0]] = bucket.get(kind[0], 0) + 1
    path = Path(state_dir) / "images.csv"
    if path.is_file():
        with open(path, newline="", encoding="utf-8") as f:
            for row in csv.DictReader(f):
                out["audited"] += 1
                out["usable" if row.get("usable") == "True" else "excluded"] += 1
    return out


def image_counts_line(c: dict[str, Any]) -> str:
    """The summary's image line from :func:`image_counts`: ``images kept: 32 of 46 downloaded (14 rejected
    after download: 11 too dark (brightness filter), 3 near-duplicates; 33 skipped before download: ...);
    audit: 26 usable, 6 excluded``."""
    order = [name for _, name, _ in _REJECTION_KINDS]

    def parts(d: dict[str, int]) -> str:
        return ", ".join(f"{d[k]} {k}" for k in sorted(d, key=lambda k: order.index(k) if k in order else len(order)))

    rejected, skipped = sum(c["rejected"].values()), sum(c["skipped"].values())
    line = f"images kept: {c['kept']} of {c['kept'] + rejected} downloaded"
    why = []
    if rejected:
        why.append(f"{rejected} rejected after download: {parts(c['rejected'])}")
    if skipped:
        why.append(f"{skipped} skipped before download: {parts(c['skipped'])}")
    if why:
        line += " (" + "; ".join(why) + ")"
    line += f"; audit: {c['usable']} usable, {c['excluded']} excluded (images.csv column usable)"
    if c["audited"] != c["kept"]:
        line += f", {c['kept'] - c['audited']} not audited yet"
    return line


def _write_trials(cfg: Any, svc: Any) -> str:
    """Write ``verify_trials.csv`` into the crawl's state folder (:func:`geoagent.integrate.write_verify_trials`
    with the demo's arguments: seed of ``[campaign]``, 2 trials per band, 2 per control arm), so a GeoVerify or
    GeoHint campaign with ``release_dir`` = this folder and ``image_root`` = the images folder runs on it.
    Returns the summary line (also when the crawl gave nothing to build trials from)."""
    from geoagent.integrate import write_verify_trials

    try:
        path, build = write_verify_trials(svc.state_dir, svc.images_root, seed=int(cfg.campaign.seed or 0),
                                          n_per_band=2, n_control=2)
    except (FileNotFoundError, ValueError) as exc:
        return f"no GeoVerify trials written: {exc}"
    redrawn = (f"; swapped-image controls (ctrl_mismatch) redrawn {build.mismatch_redrawn}, dropped {build.mismatch_dropped} "
               "(each trial is its own model request)" if build.mismatch_redrawn or build.mismatch_dropped else "")
    return (f"GeoVerify trials: {path} (main arm per band {mapping_text(build.per_band())}{redrawn}); use it with release_dir = "
            f"\"{svc.state_dir}\", image_root = \"{svc.images_root}\"")
