"""The batched export holds one batch at a time, whatever the table size.

Issue 2: peak RSS at 1,000,000 calls <= 1.2 x at 100,000. The export of the stored responses was the part
of a run whose memory grew with the table (benchmarks/README.md, session 7): one lazy scan per part file
in the final Parquet sink, and the first batch of rows kept alive for the whole export. These tests pin
the structure that keeps it flat: the final sink reads ONE source node (not one per part), and the batch
reader lets each batch of rows go before it reads the next.
"""

import weakref
from itertools import islice

import polars as pl
import pytest

from geoagent.runtime.export import _batches, _unified_schema, conformed_parts, parts_frame


def _parts(tmp_path, k):
    """k part files whose column ``b`` is Null in part 0, int in the even parts and str in the odd ones."""
    parts = []
    for i in range(k):
        p = tmp_path / f"{i:06d}.parquet"
        if i == 0:
            b = pl.Series("b", [None, None], dtype=pl.Null)
        elif i % 2:
            b = pl.Series("b", [f"s{i}", None])
        else:
            b = pl.Series("b", [i, i * 10])
        pl.DataFrame([pl.Series("a", [2 * i, 2 * i + 1]), b]).write_parquet(p)
        parts.append(p)
    schemas = [dict(pl.read_parquet_schema(p)) for p in parts]
    return parts, schemas, _unified_schema(schemas)


@pytest.mark.parametrize("k", [3, 12])
def test_final_sink_reads_one_source_whatever_the_number_of_parts(tmp_path, k):
    parts, schemas, want = _parts(tmp_path, k)
    plan = parts_frame(parts, schemas, want).explain()
    assert plan.count("SCAN") == 1, plan  # a concat of one scan per part would show k scans
    assert "Parquet SCAN" not in plan


def test_parts_frame_rows_in_order_and_types_unified(tmp_path):
    parts, schemas, want = _parts(tmp_path, 5)
    assert want == {"a": pl.Int64, "b": pl.String}  # int and str across parts -> text, as rows_to_frame does
    got = parts_frame(parts, schemas, want).collect()
    # by hand: a = 0..9 in part order; b as text (ints written as their decimal digits), nulls kept
    assert got["a"].to_list() == list(range(10))
    assert got["b"].to_list() == [None, None, "s1", None, "2", "20", "s3", None, "4", "40"]
    assert got.schema == pl.Schema(want)


def test_parts_frame_honours_projection_filter_and_limit(tmp_path):
    parts, schemas, want = _parts(tmp_path, 6)
    got = parts_frame(parts, schemas, want).filter(pl.col("a") >= 3).select("b").head(4).collect()
    assert got.columns == ["b"]
    assert got["b"].to_list() == [None, "2", "20", "s3"]  # rows a = 3, 4, 5, 6


def test_conformed_parts_yields_one_frame_per_part(tmp_path):
    parts, schemas, want = _parts(tmp_path, 4)
    frames = list(conformed_parts(parts, schemas, want))
    assert [f.height for f in frames] == [2, 2, 2, 2]
    assert all(f.schema == pl.Schema(want) for f in frames)


class _Row:
    """A row object that can be tracked with a weak reference."""

    __slots__ = ("i", "__weakref__")

    def __init__(self, i):
        self.i = i


@pytest.mark.parametrize("n_rows", [1_000, 5_000])
def test_batches_hold_one_batch_at_a_time(n_rows):
    batch_rows = 100
    alive = weakref.WeakSet()
    peak = [0]

    def rows():
        for i in range(n_rows):
            r = _Row(i)
            alive.add(r)
            peak[0] = max(peak[0], len(alive))  # rows alive while the next batch is being read
            yield r

    it = rows()
    first = list(islice(it, batch_rows))
    gen = _batches(first, it, batch_rows)
    del first
    seen, most_alive = 0, 0
    for batch in gen:
        most_alive = max(most_alive, len(alive))
        assert [r.i for r in batch] == list(range(seen, seen + len(batch)))
        seen += len(batch)
        del batch
    assert seen == n_rows
    # at most the batch in hand (the previous one was dropped before the next was read), for any table size
    assert most_alive == batch_rows
    assert peak[0] == batch_rows
