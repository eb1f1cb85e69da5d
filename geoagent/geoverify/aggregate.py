"""Incremental GeoVerify aggregator: per-group counts updated per batch of scored rows (Polars).

State (the sufficient statistics of every statistic in :mod:`geoagent.scoring.sdt`):

* ``cells``: one row per (model, site, arm, band, truth) with ``n_yes``, ``n_no``, ``n_fail``;
* ``conf``: one row per (model, arm, band, verdict, conf) with a count ``n`` (each stated confidence as the
  scored row holds it, never rounded: rounded to 6 decimals, a stated 0.7999999 became 0.8 and counted as
  "confidence >= 0.8"), from which medians, shares and confidence sums follow exactly;
* the set of (trial_id, model) keys already counted, so a redelivered scored row is not counted twice;
* ``truncation``: per (model, arm) a :class:`~geoagent.scoring.truncation.TruncationCount` of answers cut
  off at the output-token limit or stopped by the provider's content filter (from each row's ``finish_reason``; a
  row without one counts as neither).

:meth:`GeoVerifyAggregator.update` groups only the new batch and merges it into the state
(``concat`` + ``group_by().sum()`` over existing *groups*, not over all rows seen so far).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from geoagent import constants as C
from geoagent.files import atomic_open
from geoagent.scoring import sdt
from geoagent.scoring.truncation import TruncationCount

CELL_KEYS = ["model", "site", "arm", "band", "truth"]
CONF_KEYS = ["model", "arm", "band", "verdict", "conf"]
ROW_SCHEMA = {
    "trial_id": pl.Utf8, "model": pl.Utf8, "site": pl.Utf8, "arm": pl.Utf8, "band": pl.Utf8, "truth": pl.Utf8,
    "verdict": pl.Utf8, "conf": pl.Float64, "finish_reason": pl.Utf8,
}
FAIL_SCHEMA = {"key": pl.Utf8, "model": pl.Utf8, "trial_id": pl.Utf8, "reason": pl.Utf8}
TRUNC_SCHEMA = {"model": pl.Utf8, "arm": pl.Utf8, "n": pl.Int64, "n_truncated": pl.Int64,
                "n_truncated_unparsed": pl.Int64, "n_no_reason": pl.Int64, "n_withheld": pl.Int64,
                "n_withheld_unparsed": pl.Int64}
#: the TruncationCount fields saved per (model, arm), in TRUNC_SCHEMA's order
TRUNC_FIELDS = ("n", "n_truncated", "n_truncated_unparsed", "n_no_reason", "n_withheld", "n_withheld_unparsed")


#: the fields of a stored ``geoverify_scored`` row the aggregator reads as text (:func:`scored_row_problem`)
TEXT_FIELDS = ("trial_id", "model", "site", "arm", "truth")
#: fields present in every scored row that may be text (empty included) or null: a trial's ``band`` is optional
#: (:class:`geoagent.data.model.VerifyTrial`: an empty cell of the trial table, a release raw record without one;
#: the trial builder writes ``""`` for a control whose main trial has none), and the aggregator counts such a row
OPTIONAL_TEXT_FIELDS = ("band",)


def scored_row_problem(row: Any) -> str | None:
    """What makes ``row`` (a stored ``geoverify_scored`` row, parsed JSON) no scored row, or None when it is one:
    a JSON object with the text fields :data:`TEXT_FIELDS` (non-empty), ``band`` text or null
    (:data:`OPTIONAL_TEXT_FIELDS`), ``verdict`` "yes", "no" or null (a parse failure), ``conf`` a number or
    null when present, and every other field of a declared export column (``d_km``, ``parse_ok``,
    ``input_tokens``, ...) of that column's type or null, so the export's column types never depend on the data. The scorer (:func:`geoagent.geoverify.score.scored_row`) writes every row so; another row
    was written outside geoagent, and counting it would put a model named None in Table 12 or stop the report
    with a type error."""
    if not isinstance(row, dict):
        return f"a JSON {type(row).__name__} where a scored row (a JSON object) belongs"
    fields = (*TEXT_FIELDS, *OPTIONAL_TEXT_FIELDS, "verdict")
    missing = [k for k in fields if k not in row]
    if missing:
        return f"no field {', '.join(missing)} (a scored row has {', '.join(fields)})"
    bad = next((k for k in TEXT_FIELDS if not isinstance(row[k], str) or not row[k]), None)
    if bad is not None:
        return f"field {bad} is {row[bad]!r}, not a non-empty text"
    if row["verdict"] not in (*sdt.VERDICTS, None):
        return f"verdict {row['verdict']!r} is not 'yes', 'no' or null (a parse failure)"
    # every field of an exported column (band and conf among them): of its column's type or null
    for name, kinds, what in _declared_types():
        value = row.get(name)
        if value is not None and (type(value) not in kinds):
            return f"field {name} is {value!r}, not {what} or null (its exported column's type)"
    return None


@functools.cache
def _declared_types() -> tuple[tuple[str, frozenset[type], str], ...]:
    """(field, the Python types of a parsed JSON value its declared export column takes, in words) for the
    fields of ``geoverify_scored``'s declared schema (:data:`geoagent.runtime.export.TABLE_SCHEMAS`) a scored row
    holds (the export's own columns, ``scored``, ``replayed``, ... excluded): text, a number (an int or a
    float), an integer, true or false. Looked up once."""
    from geoagent.runtime.export import TABLE_SCHEMAS

    words = {pl.String: (frozenset({str}), "a text"), pl.Float64: (frozenset({int, float}), "a number"),
             pl.Int64: (frozenset({int}), "an integer"), pl.Boolean: (frozenset({bool}), "true or false")}
    added_by_export = {"scored", "left_out", "replayed", "simulated"}
    return tuple((name, *words[dtype]) for name, dtype in TABLE_SCHEMAS["geoverify_scored"].items()
                 if name not in added_by_export and dtype in words)


def rows_frame(rows: Iterable[Mapping[str, Any]]) -> pl.DataFrame:
    """Scored rows (dicts) -> a DataFrame with the columns the aggregator needs (``conf`` as a float, unrounded)."""
    data = {k: [] for k in ROW_SCHEMA}
    for r in rows:
        for k in ROW_SCHEMA:
            v = r.get(k)
            if k == "conf" and v is not None:
                v = float(v)
            elif k == "finish_reason" and v is not None and not isinstance(v, str):
                v = str(v)
            data[k].append(v)
    return pl.DataFrame(data, schema=ROW_SCHEMA)


class GeoVerifyAggregator:
    """Running counts of scored GeoVerify rows; :meth:`scores` gives Table 12 at any moment."""

    def __init__(self) -> None:
        self.cells = sdt.empty_cells()
        self.conf = sdt.empty_conf()
        self._seen: set[str] = set()
        self.failures: dict[str, dict[str, Any]] = {}  # key -> model, trial_id, reason (parse failures)
        self.n_rows = 0
        self.n_duplicates = 0
        #: (model, arm) -> answers cut off at the output-token limit (module doc)
        self.truncation: dict[tuple[str, str], TruncationCount] = {}

    def update(self, rows: Iterable[Mapping[str, Any]] | pl.DataFrame) -> int:
        """Merge one batch of scored rows; returns how many were new.

        Parameters
        ----------
        rows : iterable of dict or polars.DataFrame
            Scored rows with at least ``trial_id, model, site, arm, band, truth, verdict, conf`` (verdict None =
            parse failure) and optionally ``finish_reason`` (the provider's, for the cut-off counts).

        Raises
        ------
        ValueError
            A verdict other than "yes", "no" or None (naming the trial); nothing of that batch is counted.
        """
        dicts = None if isinstance(rows, pl.DataFrame) else list(rows)
        df = rows if dicts is None else rows_frame(dicts)
        if df.height == 0:
            return 0
        sdt.check_verdicts(df)  # before any key is marked seen: a rejected batch leaves no trace
        if "conf" in df.columns:
            df = df.with_columns(pl.col("conf").cast(pl.Float64))
        keys = (df["trial_id"].cast(pl.Utf8) + "|" + df["model"]).to_list()
        keep = []
        for k in keys:
            if k in self._seen:
                keep.append(False)
                self.n_duplicates += 1
            else:
                self._seen.add(k)
                keep.append(True)
        if dicts is not None:
            # list a parse failure only when this copy is the one counted (a later copy of an already counted
            # trial, in this batch or an earlier one, is a duplicate and changes nothing)
            for r, counted in zip(dicts, keep):
                if counted and r.get("verdict") is None and r.get("trial_id") is not None:
                    self.failures[f"{r['trial_id']}|{r.get('model')}"] = {
                        "model": r.get("model"), "trial_id": r["trial_id"],
                        "reason": r.get("parse_reason") or "unparseable"}
        df = df.filter(pl.Series(keep))
        if df.height == 0:
            return 0
        self.n_rows += df.height
        self._count_truncation(df)
        delta = sdt.cells_from_rows(df)
        self.cells = (
            pl.concat([self.cells, delta])
            .group_by(CELL_KEYS)
            .agg(pl.col("n_yes").sum(), pl.col("n_no").sum(), pl.col("n_fail").sum())
            .sort(CELL_KEYS)
        )
        dconf = sdt.conf_from_rows(df)
        if dconf.height:
            self.conf = (
                pl.concat([self.conf, dconf]).group_by(CONF_KEYS).agg(pl.col("n").sum()).sort(CONF_KEYS)
            )
        return df.height

    def _count_truncation(self, df: pl.DataFrame) -> None:
        fr = df["finish_reason"] if "finish_reason" in df.columns else pl.Series([None] * df.height, dtype=pl.Utf8)
        for model, arm, verdict, reason in zip(df["model"].to_list(), df["arm"].to_list(), df["verdict"].to_list(),
                                               fr.to_list()):
            c = self.truncation.get((model, arm))
            if c is None:
                c = self.truncation[(model, arm)] = TruncationCount()
            c.add(reason, verdict is not None)

    def truncation_by_model(self) -> dict[str, dict[str, TruncationCount]]:
        """model -> arm -> cut-off counts, plus ``pooled`` (sums over models) when any model has answers."""
        out: dict[str, dict[str, TruncationCount]] = {}
        for (model, arm), c in sorted(self.truncation.items()):
            out.setdefault(model, {})[arm] = TruncationCount().merge(c)
            out.setdefault(sdt.POOLED, {}).setdefault(arm, TruncationCount()).merge(c)
        return out

    def scores(self, *, n_boot: int = 0, seed: int = 0, models: Iterable[str] = (),
               tau_km: float = C.GEOVERIFY_TAU_KM) -> dict[str, sdt.ModelScores]:
        """Table 12 statistics from the current counts (see :func:`geoagent.scoring.sdt.score`), each with its
        cut-off counts per arm (``ModelScores.truncation``); ``models``: names that get a column even before
        their first answer; ``tau_km``: the campaign's claim tolerance in km (``[geoverify] tau_m`` / 1000), which
        sets the decoy bands scored (the nearest starts at tau: ``0.1-0.3km``, ``0.2-0.3km``) and is named in the
        report."""
        scores = sdt.score(self.cells, self.conf, n_boot=n_boot, seed=seed, models=models, tau_km=tau_km)
        trunc = self.truncation_by_model()
        for name, s in scores.items():
            s.truncation = trunc.get(name, {})
        return scores

    def parse_failures(self) -> list[dict[str, Any]]:
        """Every parse failure seen (model, trial_id, reason), sorted; rows given as DataFrames are not
        listed (only counted)."""
        return [self.failures[k] for k in sorted(self.failures)]

    def conf_sums(self) -> pl.DataFrame:
        """Per (model, arm, band, verdict): number of stated confidences and their sum."""
        return (
            self.conf.group_by(["model", "arm", "band", "verdict"])
            .agg(pl.col("n").sum().alias("n_conf"), (pl.col("conf") * pl.col("n")).sum().alias("conf_sum"))
            .sort(["model", "arm", "band", "verdict"])
        )

    # --- persistence (parquet, written atomically) ---------------------------------------------

    def save(self, folder: str | Path) -> None:
        """Write ``agg_cells.parquet``, ``agg_conf.parquet``, ``agg_seen.parquet``, ``agg_trunc.parquet`` and
        ``agg_failures.parquet`` (the parse-failure list of :meth:`parse_failures`) under ``folder``."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        seen = pl.DataFrame({"key": sorted(self._seen)}, schema={"key": pl.Utf8})
        items = sorted(self.truncation.items())
        trunc = pl.DataFrame(
            {"model": [m for (m, _), _c in items], "arm": [a for (_, a), _c in items],
             **{f: [getattr(c, f) for _k, c in items] for f in TRUNC_FIELDS}},
            schema=TRUNC_SCHEMA,
        )
        fails = [self.failures[k] for k in sorted(self.failures)]
        failures = pl.DataFrame(
            {"key": sorted(self.failures), "model": [f["model"] for f in fails],
             "trial_id": [None if f["trial_id"] is None else str(f["trial_id"]) for f in fails],
             "reason": [f["reason"] for f in fails]},
            schema=FAIL_SCHEMA,
        )
        for name, df in (("agg_cells", self.cells), ("agg_conf", self.conf), ("agg_seen", seen), ("agg_trunc", trunc),
                         ("agg_failures", failures)):
            with atomic_open(folder / f"{name}.parquet", "wb") as fh:  # a temporary file of its own
                df.write_parquet(fh)

    @classmethod
    def load(cls, folder: str | Path) -> "GeoVerifyAggregator":
        """Read state written by :meth:`save` (an empty aggregator if nothing was saved)."""
        folder = Path(folder)
        agg = cls()
        if (folder / "agg_cells.parquet").is_file():
            agg.cells = pl.read_parquet(folder / "agg_cells.parquet")
            agg.conf = pl.read_parquet(folder / "agg_conf.parquet")
            agg._seen = set(pl.read_parquet(folder / "agg_seen.parquet")["key"].to_list())
            agg.n_rows = len(agg._seen)
        if (folder / "agg_failures.parquet").is_file():  # absent in state saved before the list was kept
            for r in pl.read_parquet(folder / "agg_failures.parquet").iter_rows(named=True):
                agg.failures[r["key"]] = {"model": r["model"], "trial_id": r["trial_id"], "reason": r["reason"]}
        if (folder / "agg_trunc.parquet").is_file():  # absent in state saved before cut-off answers were counted
            for r in pl.read_parquet(folder / "agg_trunc.parquet").iter_rows(named=True):
                # state saved before the content-filter counts were kept has no such columns: 0
                agg.truncation[(r["model"], r["arm"])] = TruncationCount(*(r.get(f) or 0 for f in TRUNC_FIELDS))
        return agg
