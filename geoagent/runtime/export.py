"""Export results tables (and stored responses) to Parquet and CSV via Polars.

Issue 2 point 8: results are exported for Polars, pandas or DuckDB users. Each table of the response
store (:meth:`geoagent.runtime.store.ResponseStore.put_result`) becomes ``<table>.parquet`` and
``<table>.csv`` with a leading ``key`` column; rows are flattened one level (``{"a": {"b": 1}}`` ->
column ``a.b``). Parquet keeps lists natively; CSV cannot, so list and dict cells are written as JSON
text there. Files are written to a temporary name and renamed, so a reader never sees half a file; an export of a
campaign (the end of a run, ``run.py export``) renames all its files together at its end, its ``export_note.txt``
saying "Export in progress" until then and ending with an "Export complete" paragraph after
(:func:`export_together`), so a kill never leaves a mix of new and old tables unmarked (resume40 #2).

Column types never depend on the data: every table the campaigns write has a declared schema
(:data:`TABLE_SCHEMAS`: ``geoverify_scored``, ``geohint_scored``, the generic campaign's ``results`` and
``model_responses``), so a column that happens to be empty in one run (``error_km`` when nothing geocoded)
still has its type (``Float64``, all null), and the exports of two campaigns concatenate with
``pl.concat``. Declared columns always appear, in declared order, after ``key`` (``model_responses`` declares
its ``request_meta`` fields too, so a crawl's export and a campaign's concatenate); columns a row adds beyond
the schema (a new ``extra`` key, a ``request_meta`` field added later) follow, with inferred types, and an all-null one
is ``String`` rather than Polars' ``Null``. A declared column whose stored values do not fit its type
(hand-edited data) is written as text rather than dropped, so no stored value is lost.

Replayed responses. Every declared table ends with the Boolean column ``replayed``: True on a row whose answer a
``replay`` model gave (read from a recorded file; no model was called), False on a row of any other model, as the
provider recorded with its request says (else as the campaign's config names the row's model), null where neither
tells (a model the config no longer lists, without a stored response; or an export without a config:
:func:`_with_replayed`). A campaign with replay models also gets the report's replay line
(:func:`geoagent.providers.replay.replay_note`: which file, how many recorded responses, not the paper's
figures) in each Parquet file's key-value metadata (:data:`PARQUET_NOTE_KEY`) and in ``export_note.txt``
(:data:`EXPORT_NOTE_FILE`) beside the files. The CSV files themselves get no comment or banner line: ``pl.read_csv``,
``pandas.read_csv`` and DuckDB's ``read_csv`` read a first line as the header and would take a banner for it
(or fail on the column count) unless told to skip it, so the per-row column carries the fact into any reader
and any concatenation of exports, and the note file gives the details.

Usage reported (s14). ``model_responses`` and the generic campaign's ``results`` have the Boolean column
``usage_reported`` (before ``replayed``): True where the row's ``input_tokens`` / ``output_tokens`` (and
``cost_usd``) are the provider's own counts; False where the answer came without a usable usage count (left out,
``null``, or a count no call can have: :class:`geoagent.providers.base.Usage`), so the row's tokens are the worst
case the call was booked at (the reservation's input estimate and the request's ``max_output_tokens``:
:func:`geoagent.workers.billing.booked_answer`), an upper bound, not a measurement. Before s14 the column appeared
in ``model_responses`` only in an export that held such an answer (the stored answer carries the field only when
False); now every export has it, so exports concatenate and a reader can filter on it. A stored response without
the field reads True (answers without a count were not stored before the field existed). In ``results`` a row
written before s14 lacks it: the export reads it from the row's stored response (``model_responses``, same
``request_key``), as it reads ``replayed`` (:func:`_with_usage_reported`); null only for a row without one.

Simulated answers get the same treatment: every declared table ends, after ``replayed``, with the Boolean column
``simulated``: True on a row whose answer came from geoagent's simulator (a ``[[models]]`` entry with provider
``"simulated"`` or a ``base_url`` on a local ``*.sandbox.invalid`` model fake), False on a row of any other model,
null where the row's model is not known (:func:`_with_replayed`). It is a fact recorded with each stored response
at call time: the model caller records what answered (``request_meta.provider_kind``: ``"simulated"``,
``"replay"`` or ``"model"``, :data:`geoagent.constants.PROVIDER_KINDS`, from the config as written when the call
was made), and the export reads that, so a config that later renames a model, or moves it to another provider or
``base_url``, does not change the flags of answers already stored. A response stored before that field existed
keeps the earlier rule (:func:`geoagent.sandbox.launch.simulated_models` of the config at export time) and the
export says so: ``export_note.txt`` counts those rows per table (:func:`simulated_from_config_line`,
:attr:`ExportedTable.simulated_from_config`) and ``run.py export`` prints the line. The simulator's warning
(:func:`geoagent.sandbox.launch.simulated_note`, naming :func:`simulated_answer_models`) goes into each Parquet
file's metadata (:data:`PARQUET_SIMULATED_KEY`) and into ``export_note.txt``. A sandbox fake's answers are recorded
under the provider it imitates (``request_meta.provider = "openai"``), so ``provider_kind``, not that field, says
they are simulated.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from itertools import islice
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import orjson
import polars as pl

RESPONSES_TABLE = "model_responses"

#: the note beside the exports of a campaign with ``replay`` models (:func:`export_all`): the report's replay line
EXPORT_NOTE_FILE = "export_note.txt"
#: the Parquet key-value metadata key holding that line (``pl.read_parquet_metadata(path)[PARQUET_NOTE_KEY]``)
PARQUET_NOTE_KEY = "geoagent.replay_note"
#: the Parquet key-value metadata key holding the simulator's warning (:func:`geoagent.sandbox.launch.simulated_note`)
PARQUET_SIMULATED_KEY = "geoagent.simulated_note"
#: Parquet metadata key naming the campaign (``[campaign] name``) whose export wrote the file: ``run.py export
#: --out DIR`` refuses a folder holding another campaign's export of a table it writes (geoagent.cli)
PARQUET_CAMPAIGN_KEY = "geoagent.campaign"
#: the Parquet key-value metadata key holding the interim-export line of a campaign not finished (:func:`progress_note`)
PARQUET_PROGRESS_KEY = "geoagent.progress"

#: checklist categories of the GeoHint evidence condition (:data:`geoagent.geohint.parse.EVIDENCE_CATEGORIES`;
#: a test keeps the two equal): ``evidence`` is exported as one text column per category
_EVIDENCE_COLUMNS = {f"evidence.{c}": pl.String for c in ("infrastructure", "vegetation", "architecture", "script",
                                                          "terrain")}

#: declared column types of each results table (besides the leading ``key``, always ``String``); units as in the
#: row writers: ``*_km`` km, ``lat``/``lon`` degrees, ``cost_usd`` USD, ``*_tokens`` tokens, ``latency_s`` s;
#: ``replayed`` and ``simulated`` are added by the export, ``usage_reported`` by the export (``model_responses``) or
#: the generic collector (``results``): module docstring, "Usage reported"
TABLE_SCHEMAS: dict[str, dict[str, pl.DataType]] = {
    # geoagent.geoverify.score.scored_row plus what GeoVerifyScorerStage adds
    "geoverify_scored": {
        "trial_id": pl.String, "model": pl.String, "image_id": pl.String, "image_shown": pl.String, "site": pl.String,
        "arm": pl.String, "band": pl.String, "truth": pl.String, "cand": pl.String, "d_km": pl.Float64,
        "referenceability": pl.Float64, "verdict": pl.String, "conf": pl.Float64, "correct": pl.Boolean,
        "parse_ok": pl.Boolean, "parse_reason": pl.String, "finish_reason": pl.String, "truncated": pl.Boolean,
        "parser_version": pl.Int64, "request_key": pl.String, "input_tokens": pl.Int64, "output_tokens": pl.Int64, "raw": pl.String,
        "scored": pl.Boolean, "left_out": pl.String, "replayed": pl.Boolean, "simulated": pl.Boolean,
    },
    # geoagent.geohint.result.GeoHintResult, ``extra`` as written by geoagent.geohint.stages.score_located
    "geohint_scored": {
        "site": pl.String, "image_id": pl.String, "model": pl.String, "condition": pl.String, "schema": pl.String,
        "repeat": pl.Int64, "ref_qid": pl.String, "ref_name": pl.String, "band": pl.String, "tier": pl.String,
        "dist_km": pl.Float64, "city": pl.String, "area": pl.String, "building": pl.String,
        "confidence_area": pl.Float64, "confidence_building": pl.Float64, "parse_ok": pl.Boolean,
        **_EVIDENCE_COLUMNS,
        "resolved_level": pl.String, "resolved_label": pl.String, "lat": pl.Float64, "lon": pl.Float64,
        "error_km": pl.Float64, "hit": pl.Boolean, "echo": pl.Boolean, "source": pl.String,
        "extra.request_key": pl.String, "extra.sample_rate": pl.Float64, "extra.qid": pl.String,
        "extra.geocode_source": pl.String, "extra.parse_error": pl.String, "extra.parse_method": pl.String,
        "extra.parser_version": pl.Int64, "extra.geocoder_rules": pl.Int64, "extra.evidence_slots": pl.String,
        "extra.raw": pl.String, "extra.finish_reason": pl.String,
        "extra.echo_rule": pl.String, "extra.echo_by_rule": pl.String, "extra.no_answer": pl.String,
        "extra.left_out": pl.String, "scored": pl.Boolean, "replayed": pl.Boolean, "simulated": pl.Boolean,
    },
    # geoagent.campaigns.generic.Collector
    "results": {
        "model": pl.String, "request_key": pl.String, "index": pl.Int64, "text": pl.String,
        "input_tokens": pl.Int64, "output_tokens": pl.Int64, "cost_usd": pl.Float64, "cached": pl.Boolean,
        "finish_reason": pl.String, "usage_reported": pl.Boolean, "replayed": pl.Boolean, "simulated": pl.Boolean,
    },
    # geoagent.runtime.store.ResponseStore.iter_responses (ModelResponse.to_json plus the store's columns)
    RESPONSES_TABLE: {
        "model": pl.String, "cost_usd": pl.Float64, "created_at": pl.Float64, "text": pl.String,
        "input_tokens": pl.Int64, "output_tokens": pl.Int64, "latency_s": pl.Float64, "finish_reason": pl.String,
        "provider_model": pl.String, "usage_reported": pl.Boolean, "replayed": pl.Boolean, "simulated": pl.Boolean,
        # the request's record (geoagent.workers.model_caller; the crawl's metered calls): declared, so a crawl's
        # export (``task``, no ``task_key``) and a campaign's (``task_key``, no ``task``) have the same columns and
        # concatenate (break34 export #4: pl.concat and DuckDB's read_parquet of both failed)
        "request_meta.model_name": pl.String, "request_meta.provider": pl.String, "request_meta.model": pl.String,
        "request_meta.image_id": pl.String, "request_meta.params": pl.String, "request_meta.prompt_sha256": pl.String,
        "request_meta.prompt_chars": pl.Int64, "request_meta.reserved_usd": pl.Float64,
        "request_meta.task_key": pl.String, "request_meta.task": pl.String, "request_meta.provider_kind": pl.String,
    },
}


@dataclass(frozen=True, slots=True)
class ExportedTable:
    """One exported table: row count and the two files written."""

    table: str
    rows: int
    parquet: Path
    csv: Path
    #: rows whose ``simulated`` flag was taken from the current config, not from a provider kind recorded with
    #: their stored response (responses stored before geoagent recorded it; :func:`_with_replayed`)
    simulated_from_config: int = 0


# --- an export's files written together (resume40 #2) ---------------------------------------------------------
#: the first words of ``export_note.txt`` while an export writes the files beside it (:func:`export_together`)
EXPORT_IN_PROGRESS = "Export in progress"
#: the first words of the last paragraph of ``export_note.txt`` once every file of the export is in place
EXPORT_COMPLETE = "Export complete"


class _ExportBatch:
    """The files of one export (:func:`export_together`): the tables staged under temporary names
    (:class:`geoagent.files.StagedFiles`), the ``export_note.txt`` text of each folder kept in memory (None: the
    export removes it), and each folder's note as it was before the export (None: there was none)."""

    def __init__(self, campaign: str) -> None:
        from geoagent.files import StagedFiles

        self.campaign = campaign
        self.files = StagedFiles()
        self.notes: dict[Path, str | None] = {}
        self.before: dict[Path, str | None] = {}

    def mark(self, folder: Path) -> None:
        """Before the first file of the export in ``folder``: its note becomes :func:`in_progress_note` (written
        at once, atomically), the note it replaces kept for :meth:`restore`."""
        if folder in self.before:
            return
        from geoagent.files import atomic_write_text

        path = folder / EXPORT_NOTE_FILE
        try:
            self.before[folder] = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            self.before[folder] = None
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, in_progress_note(self.campaign))

    def restore(self) -> None:
        """After an export that raised: each folder's note as it was before (the tables were left as they were)."""
        from geoagent.files import atomic_write_text

        for folder, text in self.before.items():
            path = folder / EXPORT_NOTE_FILE
            if text is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write_text(path, text)


_BATCH: ContextVar[_ExportBatch | None] = ContextVar("geoagent_export_batch", default=None)


def in_progress_note(campaign: str) -> str:
    """The text of ``export_note.txt`` while an export of ``campaign`` writes the files beside it
    (:func:`export_together`): a kill leaves it, so the folder says that its tables may be a mix."""
    return (f"{EXPORT_IN_PROGRESS}: campaign {campaign}. Its files are written under hidden temporary names and "
            f"renamed into place together at its end; this note is then replaced by one whose last paragraph begins "
            f"'{EXPORT_COMPLETE}'. While this line is here and no export or run of the campaign is going, the export "
            "was stopped before its end (killed): the tables beside this note may be an earlier export's, or partly "
            "this one's. Export again (`run.py export CONFIG`, or re-run the campaign) for a whole set.\n")


def completion_paragraph(campaign: str, tables: Iterable[ExportedTable]) -> str:
    """The last paragraph of ``export_note.txt`` of a finished export (:func:`export_together`): the campaign and
    each file with its row count (``tables``: those written in the note's folder)."""
    lines = [f"{EXPORT_COMPLETE}: campaign {campaign}; every file below was written, then all were renamed into "
             "place together, and this note was written last. Files and rows:"]
    lines += [f"  {t.parquet.name}, {t.csv.name}: {t.rows} row{'s' if t.rows != 1 else ''}" for t in tables]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def _table_temp(path: Path) -> Iterator[Path]:
    """A temporary file for the table file ``path``: inside :func:`export_together`, staged for the export's
    end (after the in-progress note of its folder is written); else renamed over ``path`` at once
    (:func:`geoagent.files.atomic_temp_path`)."""
    batch = _BATCH.get()
    if batch is None:
        from geoagent.files import atomic_temp_path

        with atomic_temp_path(path) as tmp:
            yield tmp
        return
    batch.mark(path.parent)
    with batch.files.temp_path(path) as tmp:
        yield tmp


def read_export_note(path: Path) -> str | None:
    """The text of the export note ``path`` (UTF-8): inside :func:`export_together`, as the export has set it so
    far (None when it removed it); else as on disk (None when there is none)."""
    batch = _BATCH.get()
    if batch is not None and path.parent in batch.notes:
        return batch.notes[path.parent]
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None


def set_export_note(path: Path, text: str) -> None:
    """Write the export note ``path`` (UTF-8): inside :func:`export_together`, kept until the export's end, which
    writes it last; else at once, atomically."""
    batch = _BATCH.get()
    if batch is not None:
        batch.notes[Path(path).parent] = text
        return
    from geoagent.files import atomic_write_text

    atomic_write_text(path, text)


def remove_export_note(path: Path) -> None:
    """Remove the export note ``path`` (an earlier export's, when this one has nothing to say): inside
    :func:`export_together`, its end writes only the completion paragraph there; else at once."""
    batch = _BATCH.get()
    if batch is not None:
        batch.notes[Path(path).parent] = None
        return
    Path(path).unlink(missing_ok=True)


def export_together(cfg: Any, write: Callable[[], list[ExportedTable]]) -> list[ExportedTable]:
    """Run ``write()`` (a campaign kind's export and :func:`with_spend`: every table of one export) with its files
    written together, and return what it returns. Resume40 #2: each table was renamed into place as it was done
    (its Parquet file, then its CSV) and the note before the spend table, so a kill left a mix (a new Parquet
    file beside an old CSV, no spend files, nothing saying so).

    Before the first table of a folder is written, its ``export_note.txt`` becomes :func:`in_progress_note`. Every
    table file is written under a hidden temporary name (:class:`geoagent.files.StagedFiles`); when ``write()``
    returns, they are renamed over their targets together, and then, last, each folder's note is written: what
    the export had to say (:func:`write_export_note`; nothing when it had nothing) followed by
    :func:`completion_paragraph`. A kill before that leaves the in-progress note (the hidden files are swept by the
    next run or export, :func:`geoagent.files.remove_stale_temp_files`). When ``write()`` raises, the temporary
    files are removed, the tables and notes are left as they were, and the error goes on. Not re-entrant: an
    export inside another writes with the outer one.

    Raises
    ------
    Exception
        What ``write()`` raises; ``OSError`` when a rename or the note cannot be written.
    """
    if _BATCH.get() is not None:
        return write()
    from geoagent.files import atomic_write_text

    batch = _ExportBatch(str(getattr(cfg, "name", "") or "?"))
    token = _BATCH.set(batch)
    try:
        tables = write()
    except BaseException:
        batch.files.discard()
        batch.restore()
        raise
    finally:
        _BATCH.reset(token)
    batch.files.commit()
    for folder in dict.fromkeys([*batch.before, *batch.notes]):
        text = batch.notes.get(folder)
        here = [t for t in tables if t.parquet.parent == folder]
        atomic_write_text(folder / EXPORT_NOTE_FILE, (text.rstrip("\n") + "\n\n" if text else "")
                          + completion_paragraph(batch.campaign, here))
    return tables


def _flatten(row: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        name = f"{prefix}{k}"
        if isinstance(v, dict) and v and not prefix:  # one level only: deeper dicts stay JSON
            for k2, v2 in v.items():
                out[f"{name}.{k2}"] = orjson.dumps(v2).decode() if isinstance(v2, dict) else v2
        elif isinstance(v, dict):
            out[name] = orjson.dumps(v).decode()
        else:
            out[name] = v
    return out


def _declared_series(name: str, values: list[Any], dtype: pl.DataType) -> pl.Series:
    """``values`` as a Series of the declared ``dtype``; values that do not fit it make the column text (kept)."""
    if dtype == pl.String:
        return pl.Series(name, [None if v is None else _text(v) for v in values], dtype=pl.String)
    if dtype == pl.Float64 and all(v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)) for v in values):
        return pl.Series(name, [None if v is None else float(v) for v in values], dtype=pl.Float64)
    try:
        return pl.Series(name, values, dtype=dtype, strict=True)
    except (TypeError, ValueError, pl.exceptions.PolarsError, OverflowError):
        return pl.Series(name, [None if v is None else _text(v) for v in values], dtype=pl.String)


def rows_to_frame(rows: Iterable[tuple[str, dict[str, Any]]],
                  schema: dict[str, pl.DataType] | None = None) -> pl.DataFrame:
    """A DataFrame from ``(key, row)`` pairs: ``key`` first, then the flattened row columns.

    Parameters
    ----------
    rows : iterable of (str, dict)
    schema : dict of column -> Polars type, optional
        Declared columns (flattened names, e.g. ``extra.qid``): each is present, in this order, with this type
        whatever the rows hold (all null when no row has it); a declared ``String`` column whose value is a
        dict holds it as JSON text. A row value ``None`` for a name whose declared columns are ``name.*``
        (a dict flattened one level) adds no ``name`` column. Without a schema (or for the columns beyond
        it, first-seen order), types are inferred: a column whose values mix types (e.g. int and str across
        rows) is stored as text, an all-null column as ``String``.

    Returns
    -------
    polars.DataFrame
        Shape ``(n_rows, 1 + n_columns)``; missing values are nulls.
    """
    schema = dict(schema or {})
    prefixes = {c.split(".", 1)[0] for c in schema if "." in c}
    records = []
    for key, row in rows:
        flat = _flatten({k: v for k, v in row.items() if not (v is None and k in prefixes and k not in schema)})
        records.append({"key": key, **flat})
    columns: dict[str, None] = {"key": None}
    columns.update(dict.fromkeys(schema))
    for r in records:
        for c in r:
            columns.setdefault(c, None)
    series = []
    for name in columns:
        values = [r.get(name) for r in records]
        if name == "key":
            series.append(pl.Series(name, values, dtype=pl.String))
        elif name in schema:
            series.append(_declared_series(name, values, schema[name]))
        else:
            try:
                s = pl.Series(name, values, strict=True)
            except (TypeError, pl.exceptions.PolarsError, OverflowError):
                s = pl.Series(name, [None if v is None else _text(v) for v in values], dtype=pl.String)
            if s.dtype == pl.Null:
                s = s.cast(pl.String)
            series.append(s)
    return pl.DataFrame(series)


def _text(v: Any) -> str:
    return v if isinstance(v, str) else orjson.dumps(v).decode()


def _csv_ready(df: pl.DataFrame) -> pl.DataFrame:
    nested = [c for c, t in df.schema.items() if isinstance(t, (pl.List, pl.Array, pl.Struct, pl.Object))]
    if not nested:
        return df
    return df.with_columns(
        pl.Series(c, [None if v is None else orjson.dumps(v).decode() for v in df[c].to_list()], dtype=pl.String)
        for c in nested
    )


def write_frame(df: pl.DataFrame, parquet_path: str | os.PathLike[str], csv_path: str | os.PathLike[str], *,
                metadata: dict[str, str] | None = None) -> None:
    """Write ``df`` to Parquet (zstd) and CSV, each atomically: a temporary file of its own (a unique name
    created with ``O_EXCL``, :mod:`geoagent.files`; one named by the process id alone was shared by two writers
    in one process, e.g. a ``--watch`` idle hand-off's thread and the end of the run, which then renamed or
    lost each other's file), then renamed over the target: at once, or, inside :func:`export_together`, with
    every other file of the export at its end. A failed write removes its temporary file and leaves the target
    as it was. ``metadata``: key-value pairs for the Parquet file's metadata (e.g.
    :data:`PARQUET_NOTE_KEY`); the CSV holds data only."""
    for path, writer in ((Path(parquet_path), "parquet"), (Path(csv_path), "csv")):
        with _table_temp(path) as tmp:  # locked while written, fsync-ed, renamed (now, or with the export's others)
            try:
                if writer == "parquet":
                    df.write_parquet(tmp, compression="zstd", **({"metadata": metadata} if metadata else {}))
                else:
                    _csv_ready(df).write_csv(tmp)
            except (OSError, pl.exceptions.PolarsError) as exc:
                _raise_with_errno(exc, tmp)


def _raise_with_errno(exc: BaseException, path: Path) -> NoReturn:
    """Raise ``exc`` (a failed write of ``path``) as :func:`_with_errno` reads it: itself when that gives nothing
    better, else the ``OSError`` with an errno, chained to it."""
    errno_exc = _with_errno(exc, path)
    if errno_exc is exc:
        raise exc
    raise errno_exc from exc


def _with_errno(exc: BaseException, path: Path) -> BaseException:
    """``exc`` from a polars writer as an ``OSError`` with its errno when its text names one (polars raises an
    ``OSError`` without errno, or a ``ComputeError``, reading "No space left on device (os error 28)"), so a full disk
    is one ``error:`` line and exit 3 like every other refused write (cli36 #1: a traceback, exit 1); else ``exc``."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return exc
    m = re.search(r"os error (\d+)", str(exc))
    if m is not None:
        code = int(m.group(1))
        return OSError(code, f"{os.strerror(code)}: writing {path} ({type(exc).__name__})")
    # polars may say only "Invalid thrift: transport error" when the disk filled mid-write (review36b #2's test): a
    # failed write on a file system with next to no space left is read as a full disk
    try:
        folder = path if path.is_dir() else path.parent
        st = os.statvfs(folder)
    except OSError:
        return exc
    if st.f_bavail * st.f_frsize < FULL_DISK_BYTES:
        return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: writing {path} ({type(exc).__name__}: {exc}; "
                                     f"{st.f_bavail * st.f_frsize} bytes left on its file system)")
    return exc


#: a file system with less free space than this (bytes) after a failed write is taken to be full (:func:`_with_errno`)
FULL_DISK_BYTES = 64 * 1024


#: the per-model spend table (:func:`export_spend`): ``spend.parquet`` / ``spend.csv``
SPEND_TABLE = "spend"
#: its columns, in order (USD, counts); ``billed_usd`` = ``spent_usd`` + ``unknown_usd``, what counts against the cap
SPEND_SCHEMA: dict[str, Any] = {
    "model": pl.String, "calls": pl.Int64, "spent_usd": pl.Float64, "unknown_calls": pl.Int64,
    "unknown_usd": pl.Float64, "billed_usd": pl.Float64, "open_reservations": pl.Int64, "reserved_usd": pl.Float64,
    "unreported_calls": pl.Int64, "unreported_usd": pl.Float64,
}


def export_spend(ledger: Any, out_dir: str | os.PathLike[str], *, cfg: Any = None,
                 progress: str | None = None) -> ExportedTable:
    """Write ``spend.parquet`` and ``spend.csv`` under ``out_dir``: the campaign's ledger per ``[[models]]`` name
    (:meth:`geoagent.runtime.ledger.Ledger.spend_by_model`; the Redis ledger has the same method), one row per
    model with a billed or open call, in name order.

    Columns (:data:`SPEND_SCHEMA`): ``calls`` and ``spent_usd`` (settled calls and their cost: the sum of
    ``model_responses.cost_usd`` for the answers stored), ``unknown_calls`` and ``unknown_usd`` (attempts whose
    outcome is unknown, a connection lost after the request was sent, booked at their reservation: the
    provider may have billed them, and no answer was stored, so ``model_responses`` has no row for them),
    ``billed_usd`` (their sum: what counts against ``[budget] cap_usd``, ``status``'s settled + unknown-outcome),
    ``open_reservations`` and ``reserved_usd`` (calls in flight, or left open by a run that is gone, when
    exported), ``unreported_calls`` and ``unreported_usd`` (settled calls whose answers reported no usage, booked
    at their worst case; part of ``spent_usd``). Walk24 #1: summing ``model_responses.cost_usd`` gave the settled
    spend only, with nothing in the exports for the unknown-outcome part. The Parquet metadata names the campaign
    (:data:`PARQUET_CAMPAIGN_KEY`), its cap (``geoagent.cap_usd``, USD, as the ledger holds it) and, for a
    campaign not finished, the interim-export line (:func:`progress_note`, :data:`PARQUET_PROGRESS_KEY`;
    ``progress``: that line as the caller read it, None: read here)."""
    rows = []
    for model, m in ledger.spend_by_model().items():
        spent, unknown = float(m.get("spent_usd", 0.0)), float(m.get("unknown_usd", 0.0))
        rows.append({"model": model, "calls": int(m.get("calls", 0)), "spent_usd": spent,
                     "unknown_calls": int(m.get("unknown_calls", 0)), "unknown_usd": unknown,
                     "billed_usd": spent + unknown, "open_reservations": int(m.get("open_reservations", 0)),
                     "reserved_usd": float(m.get("reserved_usd", 0.0)),
                     "unreported_calls": int(m.get("unreported_calls", 0)),
                     "unreported_usd": float(m.get("unreported_usd", 0.0))})
    df = pl.DataFrame(rows, schema=SPEND_SCHEMA) if rows else pl.DataFrame(schema=SPEND_SCHEMA)
    if progress is None:
        progress = progress_note(cfg)  # an unfinished campaign: its spend so far
    metadata = {"geoagent.cap_usd": repr(float(ledger.summary().cap_usd)),
                **({PARQUET_PROGRESS_KEY: progress} if progress else {}),
                **({PARQUET_CAMPAIGN_KEY: str(cfg.name)} if cfg is not None else {})}
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parquet, csv = out / f"{SPEND_TABLE}.parquet", out / f"{SPEND_TABLE}.csv"
    write_frame(df, parquet, csv, metadata=metadata)
    return ExportedTable(SPEND_TABLE, df.height, parquet, csv)


def with_spend(tables: list[ExportedTable], ledger: Any, cfg: Any,
               out_dir: str | os.PathLike[str] | None = None) -> list[ExportedTable]:
    """``tables`` (a campaign kind's export) plus :func:`export_spend` written beside them: in ``out_dir`` when
    given, else in the folder of the first table's Parquet file; ``tables`` unchanged when it is empty and no
    ``out_dir`` is given, or without a ledger."""
    if ledger is None:
        return tables
    folder = Path(out_dir) if out_dir is not None else (tables[0].parquet.parent if tables else None)
    if folder is None:
        return tables
    progress = progress_note(cfg)
    spend = export_spend(ledger, folder, cfg=cfg, progress=progress)
    _note_covers_spend(folder / EXPORT_NOTE_FILE, spend, progress)
    return [*tables, spend]


def _note_covers_spend(note_path: Path, spend: ExportedTable, progress: str) -> None:
    """Append to the ``export_note.txt`` the kind's export just wrote (if it wrote one) a paragraph naming the
    spend files written after it: the note lists the files its paragraphs cover, and the spend table, written
    once the kind's tables were done, was missing from that list (session 24's noticed item). Its paragraphs on
    the ``replayed`` / ``simulated`` columns do not concern the ledger, so the spend files get a paragraph of
    their own, saying whether the interim-export line covers them. UTF-8 text, rewritten atomically."""
    text = read_export_note(note_path)
    if text is None:
        return
    names = f"{spend.csv.name} / {spend.parquet.name}"
    columns = [c for c in ("replayed", "simulated") if f"the column `{c}`" in text]  # the note's column paragraphs
    line = (f"Also written beside it: {names} (the ledger per model; docs/exports.md, `spend`), after the files "
            "above." + (f" The interim-export line above covers them too (Parquet metadata key "
                        f"{PARQUET_PROGRESS_KEY})." if progress else "")
            + (f" The note{'s' if len(columns) > 1 else ''} on the column{'s' if len(columns) > 1 else ''} "
               f"{' and '.join(f'`{c}`' for c in columns)} {'do' if len(columns) > 1 else 'does'} not concern them "
               "(the ledger has no such column)." if columns else ""))
    set_export_note(note_path, text.rstrip("\n") + "\n\n" + line + "\n")


def _response_rows(store: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    """The stored responses as ``(key, row)`` pairs, each with ``usage_reported`` (module docstring, "Usage
    reported"): False where the stored answer says ``"usage_reported": false``, else True."""
    for rec in store.iter_responses():
        row = dict(rec)
        key = row.pop("key")
        row["usage_reported"] = row.get("usage_reported", True) is not False
        yield key, row


def _with_usage_reported(store: Any, rows: Iterable[tuple[str, dict[str, Any]]], *, chunk: int = 1000
                         ) -> Iterator[tuple[str, dict[str, Any]]]:
    """``rows`` with ``usage_reported`` filled in where it is missing or null (a generic ``results`` row written
    before the collector recorded it) from the stored response of the row's request key
    (:meth:`geoagent.runtime.store.ResponseStore.response_usage_reported`): False for an answer booked at its worst
    case, True for the provider's own counts; left null without a stored response. A row that has the column keeps
    it. One store query per ``chunk`` rows; nothing stored is changed."""
    it = iter(rows)
    while True:
        batch = list(islice(it, chunk))
        if not batch:
            return
        need = [s[1] for _, row in batch if row.get("usage_reported") is None and (s := _raw_slot(row)) is not None]
        found = store.response_usage_reported(need) if need and hasattr(store, "response_usage_reported") else {}
        for key, row in batch:
            if row.get("usage_reported") is None and (slot := _raw_slot(row)) is not None and slot[1] in found:
                row["usage_reported"] = found[slot[1]]
            yield key, row


def _raw_slot(row: dict[str, Any]) -> tuple[dict[str, Any], str] | None:
    """Where a results row keeps its request key and raw answer text: the row itself (GeoVerify's
    ``request_key`` / ``raw``) or its ``extra`` dict (GeoHint's ``extra.request_key`` / ``extra.raw``);
    ``(holder, request_key)``, or None for a row without a request key."""
    key = row.get("request_key")
    if isinstance(key, str) and key:
        return row, key
    extra = row.get("extra")
    if isinstance(extra, dict) and isinstance(extra.get("request_key"), str) and extra["request_key"]:
        return extra, extra["request_key"]
    return None


def with_raw_text(store: Any, rows: Iterable[tuple[str, dict[str, Any]]], *, chunk: int = 1000
                  ) -> Iterator[tuple[str, dict[str, Any]]]:
    """``rows`` of a results table with ``raw`` (the model's answer text, verbatim) filled in from the response
    store for every row that names its ``request_key`` and has no ``raw`` yet (the scorers keep it only for
    parse failures, to keep the queues small). Rows are read ``chunk`` at a time, one store query per chunk
    (:meth:`geoagent.runtime.store.ResponseStore.response_texts`), so memory stays flat. A row whose request
    has no stored response keeps ``raw`` null. Nothing stored is changed."""
    it = iter(rows)
    while True:
        batch = list(islice(it, chunk))
        if not batch:
            return
        slots = [_raw_slot(row) for _, row in batch]
        need = [s[1] for s in slots if s is not None and s[0].get("raw") is None]
        texts = store.response_texts(need) if need and hasattr(store, "response_texts") else {}
        for (key, row), slot in zip(batch, slots):
            if slot is not None and slot[0].get("raw") is None and slot[1] in texts:
                slot[0]["raw"] = texts[slot[1]]
            yield key, row


def fills_raw_text(schema: Mapping[str, Any] | None) -> bool:
    """Whether the export fills in the answer text (:func:`with_raw_text`) for a results table of declared
    ``schema``: when it declares ``raw`` or ``extra.raw`` (``geoverify_scored``, ``geohint_scored``: the scorers keep
    no answer text on their rows), and for a table without a declared schema (None). The generic campaign's
    ``results`` declares neither: its ``text`` column already holds the model's answer text verbatim (the stored
    response's ``text``), so a filled ``raw`` was a copy of it outside the schema."""
    return schema is None or "raw" in schema or "extra.raw" in schema


#: rows per in-memory frame when exporting a large table (bounds the export's memory)
BATCH_ROWS = 20_000


def export_table(
    store: Any, table: str, out_dir: str | os.PathLike[str], *, stem: str | None = None, batch_rows: int = BATCH_ROWS,
    schema: dict[str, pl.DataType] | None = None,
    rows_hook: Callable[[Iterator[tuple[str, dict[str, Any]]]], Iterator[tuple[str, dict[str, Any]]]] | None = None,
    replayed: Mapping[str, bool] | None = None, metadata: dict[str, str] | None = None,
    simulated: Mapping[str, bool] | None = None,
    row_check: Callable[[str, Any], Any] | None = None,
) -> ExportedTable:
    """Export one results table (or ``"model_responses"``, the stored model responses) to ``out_dir``.

    A table of more than ``batch_rows`` rows is exported in batches with flat memory: each batch becomes
    a Parquet part file, the parts are brought to one schema (a column whose type differs between
    batches becomes text, as in :func:`rows_to_frame`) and streamed into the final Parquet file by
    Polars; the CSV is appended part by part.

    Parameters
    ----------
    store : ResponseStore
    table : str
        A results table name, or ``"responses"`` for the response cache (text, usage, cost_usd, request meta).
    out_dir : path
        Folder for ``<stem>.parquet`` and ``<stem>.csv`` (stem defaults to the table name).
    batch_rows : int
        Rows held in memory at once (large tables).
    schema : dict of column -> Polars type, optional
        Declared column types (:func:`rows_to_frame`); default the table's entry in :data:`TABLE_SCHEMAS`
        (none for a table not listed there: types inferred, all-null columns as text).
    rows_hook : callable, optional
        Applied to the ``(key, row)`` stream of a results table in store order (lazily), e.g. the scored tables'
        ``scored`` column (:meth:`geoagent.runtime.scope.ScoredScope.mark`).
    replayed : mapping of model name -> bool, optional
        Whether each model of the config is a ``replay`` model: a row with a ``model`` gets the column
        ``replayed`` (None for a model not in the mapping). Without it the column stays null.
    metadata : dict of str -> str, optional
        Key-value metadata of the Parquet file (the replay note, :data:`PARQUET_NOTE_KEY`; the simulator's
        warning, :data:`PARQUET_SIMULATED_KEY`).
    simulated : mapping of model name -> bool, optional
        Whether each model of the config answers from the simulator (:func:`geoagent.sandbox.launch.simulated_models`):
        fills the column ``simulated`` as ``replayed`` fills its own (only with ``replayed`` given).
    row_check : callable, optional
        ``(key, row) -> row`` applied first to each stored row of a results table; raises for a row that is no
        row of the table (:meth:`geoagent.runtime.scope.ScoredScope.checked`: the store's
        :class:`~geoagent.runtime.store.StoredRowError` naming the file, table and key).
    """
    if schema is None:
        schema = TABLE_SCHEMAS.get(table)
    stored = store.iter_results(table) if table != RESPONSES_TABLE else iter(())
    if row_check is not None:
        stored = ((key, row_check(key, row)) for key, row in stored)
    if table == RESPONSES_TABLE:
        rows = _response_rows(store)
    elif fills_raw_text(schema):
        rows = with_raw_text(store, stored)
    else:  # e.g. the generic ``results``: its ``text`` is the answer text already (fills_raw_text)
        rows = stored
    if rows_hook is not None and table != RESPONSES_TABLE:
        rows = rows_hook(rows)
    if table != RESPONSES_TABLE and schema is not None and "usage_reported" in schema:
        rows = _with_usage_reported(store, rows)  # rows written before the column: their stored response says
    fallback = {"simulated": 0}  # rows whose simulated flag came from the config (counted as they stream past)
    if replayed is not None:
        rows = _with_replayed(store, rows, replayed, simulated=simulated, fallback=fallback)
    out = Path(out_dir)
    name = stem or table
    parquet, csv = out / f"{name}.parquet", out / f"{name}.csv"
    first = list(islice(rows, batch_rows))
    if len(first) < batch_rows:
        df = rows_to_frame(first, schema)
        write_frame(df, parquet, csv, metadata=metadata)
        return ExportedTable(table, df.height, parquet, csv, simulated_from_config=fallback["simulated"])
    batches = _batches(first, rows, batch_rows)
    del first  # the generator holds the first batch until it hands it on: one batch of rows alive at a time
    n = _write_batched(batches, parquet, csv, batch_rows, schema, metadata=metadata)
    return ExportedTable(table, n, parquet, csv, simulated_from_config=fallback["simulated"])


def _with_replayed(store: Any, rows: Iterable[tuple[str, dict[str, Any]]], replayed: Mapping[str, bool], *,
                   chunk: int = 1000, simulated: Mapping[str, bool] | None = None,
                   fallback: dict[str, int] | None = None) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each row with a ``model`` gets ``replayed`` and (with ``simulated``) ``simulated``, from what was recorded
    with its stored response at call time (the row's own ``request_meta`` for ``model_responses``, else the
    response of its request key, :meth:`geoagent.runtime.store.ResponseStore.response_sources`), in this order:

    1. ``request_meta.provider_kind`` (:data:`geoagent.constants.PROVIDER_KINDS`, recorded by the model caller):
       ``replayed`` is kind == ``"replay"``, ``simulated`` kind == ``"simulated"``; the config is not consulted, so
       a model renamed, or moved to another provider or ``base_url`` since, keeps the flags of what answered;
    2. else ``request_meta.provider``: ``"replay"`` / ``"simulated"`` say it; another provider says ``replayed``
       False, and ``simulated`` is taken from the current config (a sandbox model fake records the provider it
       imitates, ``"openai"``): ``simulated`` of the ``[[models]]`` name that asked, counted in
       ``fallback["simulated"]`` (the export says so: :func:`write_export_note`);
    3. else (no stored response, or one without a recorded provider) both from the current config by name
       (``replayed`` / ``simulated`` of the response's ``model``, else the row's; a GeoVerify replay of every
       recorded model reports its rows under the recorded names, which the config does not list), as before; None
       for a model the config does not name.

    One store query per ``chunk`` rows."""
    from geoagent.runtime.store import request_meta_source

    it = iter(rows)
    while True:
        batch = list(islice(it, chunk))
        if not batch:
            return
        slots = [_raw_slot(row) for _, row in batch]
        need = [s[1] for s, (_, row) in zip(slots, batch) if s is not None and not isinstance(row.get("request_meta"), dict)]
        sources = store.response_sources(need) if need and hasattr(store, "response_sources") else {}
        for (key, row), slot in zip(batch, slots):
            model = row.get("model")
            if model is not None:
                meta = row.get("request_meta")
                if isinstance(meta, dict):
                    asked, (provider, kind) = model, request_meta_source(meta)
                else:
                    src = sources.get(slot[1]) if slot is not None else None
                    asked, provider, kind = (tuple(src) + (None,) * 3)[:3] if src else (None, None, None)
                name = asked if isinstance(asked, str) else model
                if kind is not None:
                    row["replayed"] = kind == "replay"
                elif isinstance(provider, str):
                    row["replayed"] = provider == "replay"
                else:
                    row["replayed"] = replayed.get(name) if isinstance(name, str) else None
                if simulated is not None:
                    if kind is not None:
                        row["simulated"] = kind == "simulated"
                    elif provider in ("simulated", "replay"):
                        row["simulated"] = provider == "simulated"
                    else:
                        row["simulated"] = simulated.get(name) if isinstance(name, str) else None
                        if provider is not None and row["simulated"] is not None and fallback is not None:
                            # a stored response without the recorded kind: the config decided (said in the note)
                            fallback["simulated"] = fallback.get("simulated", 0) + 1
            yield key, row


def _batches(first: list[Any], rest: Iterator[Any], batch_rows: int) -> Iterator[list[Any]]:
    """``first``, then lists of up to ``batch_rows`` items of ``rest`` until it is exhausted. The batch
    handed out last is dropped before the next one is read, so a consumer that drops its own reference
    holds one batch at a time (not the first batch for the whole export, nor two batches while reading)."""
    batch = first
    del first
    while batch:
        yield batch
        batch = []
        batch = list(islice(rest, batch_rows))


def _unified_schema(schemas: list[dict[str, pl.DataType]]) -> dict[str, pl.DataType]:
    """Column -> type over all parts (first-seen order); conflicting types become ``String``."""
    seen: dict[str, set[pl.DataType]] = {}
    for sch in schemas:
        for c, t in sch.items():
            kinds = seen.setdefault(c, set())
            if t != pl.Null:
                kinds.add(t)
    return {c: (next(iter(k)) if len(k) == 1 else (pl.String if k else pl.Null)) for c, k in seen.items()}


def _conform(lf: pl.LazyFrame, have: dict[str, pl.DataType], want: dict[str, pl.DataType]) -> pl.LazyFrame:
    cols = []
    for c, t in want.items():
        if c not in have:
            cols.append(pl.lit(None, dtype=t).alias(c))
        elif have[c] == t:
            cols.append(pl.col(c))
        elif t == pl.String and isinstance(have[c], (pl.List, pl.Array, pl.Struct)):
            cols.append(pl.col(c).map_elements(_text, return_dtype=pl.String, skip_nulls=True))
        else:
            cols.append(pl.col(c).cast(t))
    return lf.select(cols)


def conformed_parts(
    parts: list[Path], schemas: list[dict[str, pl.DataType]], want: dict[str, pl.DataType]
) -> Iterator[pl.DataFrame]:
    """Each Parquet part file in turn as a DataFrame of schema ``want``, read eagerly (one in memory at a time).

    Eager reads on purpose: a lazy ``scan_parquet(part).collect()`` per part file left memory behind per
    distinct file in Polars 2.1 (the CSV pass of a 50-part export grew by ~7 MiB, of a 200-part one by ~23 MiB),
    an eager ``read_parquet`` does not.
    """
    for p, have in zip(parts, schemas):
        yield _conform(pl.read_parquet(p).lazy(), have, want).collect()


def parts_frame(parts: list[Path], schemas: list[dict[str, pl.DataType]], want: dict[str, pl.DataType]) -> pl.LazyFrame:
    """The part files, in order and brought to schema ``want``, as ONE lazy source for a streaming sink.

    The source is a Polars IO plugin (``polars.io.plugins.register_io_source``) fed by
    :func:`conformed_parts`, so the sink pulls one part (one export batch) at a time and its memory stays
    flat in the number of parts. A ``pl.concat`` of one ``scan_parquet`` per part (the earlier code, kept as
    the fallback for a Polars without IO plugins) makes one source node per part, and the sink's memory grew
    with the table: in Polars 2.1 its peak rose by ~28 MiB over 10 parts, ~45 MiB over 50 (1,000,000 rows of
    stored responses) and ~75 MiB over 200 parts, against ~25-35 MiB at every size with the plugin.
    """
    try:
        from polars.io.plugins import register_io_source
    except ImportError:  # Polars < 1.x without IO plugins
        frames = [_conform(pl.scan_parquet(p), have, want) for p, have in zip(parts, schemas)]
        return pl.concat(frames, how="vertical", parallel=False)

    def source(with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None,
               batch_size: int | None) -> Iterator[pl.DataFrame]:
        left = n_rows
        for df in conformed_parts(parts, schemas, want):
            if predicate is not None:
                df = df.filter(predicate)
            if with_columns is not None:
                df = df.select(with_columns)
            if left is not None:
                df = df.head(left)
                left -= df.height
            yield df
            if left is not None and left <= 0:
                return

    return register_io_source(source, schema=want)


def _write_batched(
    batches: Iterator[list[tuple[str, dict[str, Any]]]],
    parquet_path: Path,
    csv_path: Path,
    batch_rows: int,
    schema: dict[str, pl.DataType] | None = None,
    *,
    metadata: dict[str, str] | None = None,
) -> int:
    import shutil
    import tempfile

    parquet_path.parent.mkdir(parents=True, exist_ok=True)
    parts_dir = Path(tempfile.mkdtemp(prefix=f".{parquet_path.stem}.parts.", dir=parquet_path.parent))
    try:
        return _write_parts(batches, parts_dir, parquet_path, csv_path, batch_rows, schema, metadata)
    except (OSError, pl.exceptions.PolarsError) as exc:  # a full disk: one error line, as write_frame's (review36b #2)
        _raise_with_errno(exc, parquet_path.parent)
    finally:
        shutil.rmtree(parts_dir, ignore_errors=True)


def _write_parts(batches: Iterator[list[tuple[str, dict[str, Any]]]], parts_dir: Path, parquet_path: Path,
                 csv_path: Path, batch_rows: int, schema: dict[str, pl.DataType] | None,
                 metadata: dict[str, str] | None) -> int:
    """:func:`_write_batched`'s work: each batch to a part file in ``parts_dir``, then the parts to the table."""
    parts: list[Path] = []
    n = 0
    for batch in batches:
        df = rows_to_frame(batch, schema)
        del batch  # the rows as Python objects (tens of MiB per batch of stored responses)
        n += df.height
        part = parts_dir / f"{len(parts):06d}.parquet"
        df.write_parquet(part)
        parts.append(part)
        del df
    schemas = [dict(pl.read_parquet_schema(p)) for p in parts]
    want = _unified_schema(schemas)
    with _table_temp(parquet_path) as tmp:  # a temporary file of its own (see write_frame)
        # row groups of one batch: the writer then buffers one batch, not ever more of the table
        parts_frame(parts, schemas, want).sink_parquet(tmp, compression="zstd", row_group_size=batch_rows,
                                                       **({"metadata": metadata} if metadata else {}))
    with _table_temp(csv_path) as tmp, open(tmp, "wb") as out:  # appended part by part, renamed whole
        for i, frame in enumerate(conformed_parts(parts, schemas, want)):
            _csv_ready(frame).write_csv(out, include_header=i == 0)
            del frame
    return n


def export_all(store: Any, out_dir: str | os.PathLike[str], *, include_responses: bool = True,
               hooks: dict[str, Callable[..., Any]] | None = None, cfg: Any = None,
               tables: Iterable[str] = (), checks: dict[str, Callable[[str, Any], Any]] | None = None,
               progress: str | None = None) -> list[ExportedTable]:
    """Export every non-empty results table (and the responses, unless ``include_responses=False``);
    ``hooks``: table -> ``rows_hook`` of :func:`export_table` (a factory is not needed: each is used once);
    ``checks``: table -> ``row_check`` of :func:`export_table`; ``progress``: the interim-export line as a caller
    writing more tables read it (:func:`progress_note`), None: read here.

    ``tables``: the results tables the campaign kind always has (:attr:`geoagent.engine.CampaignKind.results_tables`):
    each is exported also when it holds no row, as empty files with its declared columns and types
    (:data:`TABLE_SCHEMAS`), so a campaign with no answers yet still writes ``geoverify_scored.parquet`` (0 rows)
    and its exports concatenate with another campaign's.

    ``cfg`` (the campaign's :class:`~geoagent.config.CampaignConfig`, as written: a sandbox model fake is known by
    its ``*.sandbox.invalid`` URL): fills each row's ``replayed`` column from its ``[[models]]`` (True for a
    ``replay`` model) and its ``simulated`` column (True for a model answered by the simulator,
    :func:`geoagent.sandbox.launch.simulated_models`); when any model is a replay model, the replay line
    (:func:`geoagent.providers.replay.replay_note`) goes into every Parquet file's metadata
    (:data:`PARQUET_NOTE_KEY`), when any is simulated the simulator's warning
    (:func:`geoagent.sandbox.launch.simulated_note`) does (:data:`PARQUET_SIMULATED_KEY`), the campaign's name always
    does (:data:`PARQUET_CAMPAIGN_KEY`), and either note goes into
    ``out_dir/export_note.txt`` (:data:`EXPORT_NOTE_FILE`, naming the files it covers); otherwise a note file left
    by an earlier export is removed (the files it spoke of were just rewritten). See the module docstring for why
    the CSV files carry no banner line."""
    replayed, note = _replay_of(cfg)
    simulated, sim_note = _simulated_of(cfg, store)
    progress = progress_note(cfg) if progress is None else progress  # given: read once by a caller writing more
    metadata = {**({PARQUET_NOTE_KEY: note} if note else {}),
                **({PARQUET_SIMULATED_KEY: sim_note} if sim_note else {}),
                **({PARQUET_PROGRESS_KEY: progress} if progress else {}),
                **({PARQUET_CAMPAIGN_KEY: str(cfg.name)} if cfg is not None else {})} or None
    names = list(store.result_tables())
    names += sorted(t for t in set(tables) if t not in names)
    if include_responses:
        names.append(RESPONSES_TABLE)
    out = [export_table(store, t, out_dir, rows_hook=(hooks or {}).get(t), replayed=replayed, metadata=metadata,
                        simulated=simulated, row_check=(checks or {}).get(t))
           for t in names]
    note_path = Path(out_dir) / EXPORT_NOTE_FILE
    if note or sim_note or progress or any(t.simulated_from_config for t in out):
        write_export_note(note_path, note, out, simulated_note=sim_note, progress=progress)
    elif cfg is not None:
        remove_export_note(note_path)
    return out


def progress_note(cfg: Any) -> str:
    """The line an export of campaign ``cfg`` carries while the campaign is not finished, in ``export_note.txt`` and
    in each Parquet file's metadata (:data:`PARQUET_PROGRESS_KEY`), so a file handed on does not read as the whole
    campaign: ``Interim export: ...`` while tasks are ready or leased on any of its queues (stopped by the cap,
    interrupted, or still running elsewhere), ``Incomplete export: ...`` when the only work missing is dead-lettered
    (tasks set aside as no longer planned are not missing work); each names the queues and counts and what brings the
    rest. When the queues cannot be read (a damaged queue file, a Redis server gone) the export goes on and the
    line says that its completeness is unknown, with the error (its type and first line, secrets redacted); so it
    does when no queue is found while the state folder records runs (the queues folder deleted or moved, another
    ``$GEOAGENT_QUEUES``: :func:`geoagent.status.wrong_queues_root`). "" when nothing is missing or without a
    config. The ``export`` command warns on stderr from the same counts."""
    if cfg is None:
        return ""
    counts, unknown = export_queue_counts(cfg)
    if counts is None:
        return unknown_completeness_note(cfg, unknown)
    try:
        from geoagent.status import superseded_counts

        aside = superseded_counts(cfg) if any(c.dead for c in counts.values()) else {}
    except Exception as exc:  # noqa: BLE001 - a note about the export, never a reason to fail it
        return unknown_completeness_note(cfg, f"could not be read when exported ({unreadable_queues_reason(exc)})")
    parts, left, dead = [], 0, 0
    for edge, c in counts.items():
        n_dead = max(0, c.dead - int(aside.get(edge, 0)))
        if c.ready or c.leased or n_dead:
            parts.append(f"{edge}: " + ", ".join(
                ([f"{c.ready} ready, {c.leased} leased"] if c.ready or c.leased else [])
                + ([f"{n_dead} dead-lettered"] if n_dead else [])))
        left += c.ready + c.leased
        dead += n_dead
    if not parts:
        return ""
    what = "; ".join(parts)
    requeue = ("; `run.py dead CONFIG` lists the dead-lettered tasks and `run.py dead CONFIG --requeue` puts them "
               "back" if dead else "")
    if left:
        return (f"Interim export: campaign {cfg.name} is not finished ({what}, when exported): these tables hold only "
                "the work done so far. Let a run still going finish, or re-run the campaign (after raising [budget] "
                f"cap_usd if the cap stopped it{requeue}), then export again.")
    return (f"Incomplete export: campaign {cfg.name} ended with work dead-lettered ({what}, when exported): these "
            f"tables lack its rows. To complete them, requeue it (`run.py dead CONFIG --requeue`), re-run the "
            "campaign, then export again.")


def export_queue_counts(cfg: Any) -> tuple[dict[str, Any] | None, str]:
    """``(counts, "")``: campaign ``cfg``'s queue counts per edge (:func:`geoagent.status.queue_counts`; ``{}`` for
    a campaign whose queues are not found and whose state records no run); or ``(None, why)`` when they cannot be
    told: the queues could not be read (a damaged queue file, a Redis server gone; ``why`` names the error,
    :func:`unreadable_queues_reason`) or none was found while the state folder records runs
    (:func:`geoagent.status.wrong_queues_root`). What :func:`progress_note` and the ``export`` command's warning
    both read, so the two say the same."""
    from geoagent.status import queue_counts, wrong_queues_root

    try:
        counts = queue_counts(cfg)
    except Exception as exc:  # noqa: BLE001 - a note about the export, never a reason to fail it
        return None, f"could not be read when exported ({unreadable_queues_reason(exc)})"
    if not counts:
        try:
            missing = wrong_queues_root(cfg)  # none found, yet the state folder records runs (review rev24, 2)
        except Exception:  # noqa: BLE001 - a note about the export, never a reason to fail it
            missing = None
        if missing:
            return None, f"were not found when exported ({missing})"
    return counts, ""


def unknown_completeness_note(cfg: Any, why: str) -> str:
    """The export's line when the queues of campaign ``cfg`` could not be counted: ``why`` says how (``"could not
    be read when exported (...)"``, ``"were not found when exported (...)"``)."""
    return (f"Export of unknown completeness: the queues of campaign {cfg.name} {why}: these tables hold the work "
            "stored so far, and whether work was still queued or dead-lettered is not known. `run.py status CONFIG` "
            "tells once the queues can be read; export again then.")


def unreadable_queues_reason(exc: BaseException) -> str:
    """``"<ExceptionType>: <first line of its message>"`` (at most 600 characters, cut at a word, secrets redacted
    by :func:`geoagent.secrets.redact`) for an error met reading a campaign's queues: the reason
    :func:`progress_note` and the ``export`` command give for an export of unknown completeness."""
    from geoagent.secrets import redact

    first = (str(exc).strip().splitlines() or [""])[0]
    text = redact(f"{type(exc).__name__}: {first}" if first else type(exc).__name__)
    return text if len(text) <= 600 else text[:597].rsplit(" ", 1)[0] + " ..."


def _replay_of(cfg: Any) -> tuple[dict[str, bool] | None, str]:
    """(model name -> is a replay model, the replay line or ""), or (None, "") without a config."""
    if cfg is None:
        return None, ""
    from geoagent.providers.replay import replay_note

    replayed = {m.name: getattr(m, "provider", None) == "replay" for m in getattr(cfg, "models", ())}
    return replayed, (replay_note(cfg) if any(replayed.values()) else "")


def _simulated_of(cfg: Any, store: Any = None) -> tuple[dict[str, bool] | None, str]:
    """(model name -> answers from the simulator, by the current config; the simulator's warning or ""), or
    (None, "") without a config (:func:`geoagent.sandbox.launch.simulated_models`,
    :func:`~geoagent.sandbox.launch.simulated_note`). The warning names :func:`simulated_answer_models` of
    ``store`` (what the stored answers recorded, the config for those that recorded nothing)."""
    if cfg is None:
        return None, ""
    from geoagent.sandbox.launch import simulated_models, simulated_note

    names = simulated_models(cfg)
    told = simulated_answer_models(store, cfg) if store is not None else names
    return ({m.name: m.name in names for m in getattr(cfg, "models", ())},
            simulated_note(told) if told else "")


def simulated_answer_models(store: Any, cfg: Any, *, configured_only: bool = False) -> list[str]:
    """Names of the models whose stored answers came from geoagent's simulator, for the export's note and the
    ``export`` command's line: each model a stored response of which recorded ``provider_kind = "simulated"`` (or
    provider ``"simulated"``), plus each model the current config calls simulated
    (:func:`geoagent.sandbox.launch.simulated_models`) unless every stored response of it recorded another kind
    (it was answered by a model server or replayed, whatever the config says now). Config order first, then
    other names sorted. Reads each stored response's request settings once
    (:meth:`geoagent.runtime.store.ResponseStore.iter_response_meta`); without that method, the config's names.
    ``configured_only``: only models of the current config (a run's summary and reports, whose figures leave out
    the answers of a model removed from the config; walk31 #3: the note named it). The export keeps them all: its
    ``model_responses`` table holds every stored answer."""
    from geoagent.runtime.store import request_meta_source
    from geoagent.sandbox.launch import simulated_models

    names = simulated_models(cfg)
    if not hasattr(store, "iter_response_meta"):
        return names
    recorded: dict[str, set[str | None]] = {}
    for rec in store.iter_response_meta():
        model = rec.get("model")
        if not isinstance(model, str):
            continue
        provider, kind = request_meta_source(rec.get("request_meta"))
        if kind is None and provider in ("simulated", "replay"):
            kind = provider
        recorded.setdefault(model, set()).add(kind)
    out = [n for n in names if n not in recorded or "simulated" in recorded[n] or None in recorded[n]]
    out += sorted(n for n, kinds in recorded.items() if "simulated" in kinds and n not in out)
    if configured_only:
        configured = {m.name for m in getattr(cfg, "models", ())}
        out = [n for n in out if n in configured]
    return out


def simulated_from_config_line(tables: Iterable[ExportedTable]) -> str:
    """The line an export whose ``simulated`` column fell back to the current config for some rows carries (in
    ``export_note.txt`` and on the ``export`` command's output): how many rows of which tables, and why; "" when
    none did."""
    counts = [(t.csv.name, t.simulated_from_config) for t in tables if t.simulated_from_config]
    if not counts:
        return ""
    what = ", ".join(f"{n} row{'s' if n != 1 else ''} of {name}" for name, n in counts)
    return (f"Simulated flag from the current config: {what} have a `simulated` value taken from the config's "
            "[[models]] as they are now, not from a record of what answered (their responses were stored before "
            "geoagent recorded the provider kind with each answer). If a model's provider, base_url or name changed "
            "since they were stored, their flag may be wrong.")


def write_export_note(path: str | os.PathLike[str], note: str, tables: Iterable[ExportedTable], *,
                      simulated_note: str = "", progress: str = "") -> None:
    """Write ``export_note.txt``: ``progress`` (the interim-export line, :func:`progress_note`, "" for none), ``note``
    (the replay line, "" for none) and ``simulated_note`` (the simulator's warning, "" for none), the files they
    cover, and how each says it (columns ``replayed`` and ``simulated``, Parquet metadata keys
    :data:`PARQUET_PROGRESS_KEY`, :data:`PARQUET_NOTE_KEY` and
    :data:`PARQUET_SIMULATED_KEY`). Written atomically (UTF-8 text; :func:`set_export_note`)."""
    import io

    fh = io.StringIO()
    _note_paragraphs(fh, note, list(tables), simulated_note=simulated_note, progress=progress)
    set_export_note(path, fh.getvalue())


def _note_paragraphs(fh: Any, note: str, tables: list[ExportedTable], *, simulated_note: str, progress: str) -> None:
    """:func:`write_export_note`'s paragraphs, written to the text file ``fh``."""
    names = ", ".join(f"{t.csv.name} / {t.parquet.name}" for t in tables) or "none"
    guessed = [t for t in tables if t.simulated_from_config]
    if progress:  # the files are named once, by the last paragraph that names them
        fh.write(progress + ("" if (guessed or simulated_note or note) else
                             f"\nFiles this note covers (written beside it): {names}.")
                 + (f" The Parquet files carry this line in their key-value metadata too (key "
                    f"{PARQUET_PROGRESS_KEY}).") + "\n\n")
    if guessed:
        fh.write(f"{simulated_from_config_line(guessed)}\n\n")
        if not (simulated_note or note):
            fh.write(f"Files this note covers (written beside it): {names}.\n")
    if simulated_note:
        fh.write(
            f"{simulated_note}\n\n"
            f"Files this note covers (written beside it): {names}.\n"
            "In each, the column `simulated` is true on a row whose answer came from geoagent's simulator, false "
            "on a row of any other model, empty where its model is not known. The Parquet files carry the line "
            f"above in their key-value metadata too (key {PARQUET_SIMULATED_KEY}: "
            "polars.read_parquet_metadata(path)).\n" + ("\n" if note else ""))
    if not note:
        return
    fh.write(
        f"{note}\n\n"
        f"Files this note covers (written beside it): {names}.\n"
        "In each, the column `replayed` is true on a row of a replay model (its answer was read from the recorded "
        "file named above; no model was called), false on a row of any other model, as recorded with its request "
        "(else as the config names its model), empty where neither tells, so it is not known (a model the config "
        "no longer lists, without a stored response). The Parquet files carry the line above in their key-value metadata too "
        f"(key {PARQUET_NOTE_KEY}: polars.read_parquet_metadata(path)). The CSV files hold no comment or "
        "banner line, so polars, pandas and DuckDB read them with their default arguments.\n")
