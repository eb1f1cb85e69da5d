"""geoagent.files.append_jsonl: a torn last line left by a crash never swallows the next record."""

from __future__ import annotations

import orjson
import pytest

from geoagent.files import append_jsonl
from geoagent.runtime.progress import read_last


def _records(path):
    out = []
    for line in path.read_bytes().splitlines():
        try:
            out.append(orjson.loads(line))
        except orjson.JSONDecodeError:
            out.append(None)
    return out


@pytest.mark.parametrize("fsync", [True, False])
def test_append_after_a_torn_line_starts_a_fresh_line(tmp_path, fsync):
    path = tmp_path / "log" / "decisions.jsonl"
    append_jsonl(path, [{"a": 1}], fsync=fsync)  # creates the folder
    with path.open("ab") as fh:
        fh.write(b'{"a": 2, "tor')  # a crash mid-append
    append_jsonl(path, [{"a": 3}, {"a": 4}], fsync=fsync)
    assert _records(path) == [{"a": 1}, None, {"a": 3}, {"a": 4}]


def test_nothing_to_append_creates_nothing(tmp_path):
    append_jsonl(tmp_path / "x.jsonl", [])
    assert not (tmp_path / "x.jsonl").exists()


def test_unserialisable_record_writes_nothing(tmp_path):
    path = tmp_path / "x.jsonl"
    append_jsonl(path, [{"ok": 1}])
    with pytest.raises(TypeError):
        append_jsonl(path, [{"ok": 2}, {"bad": object()}])
    assert _records(path) == [{"ok": 1}]


def test_progress_stream_after_a_torn_line_reads_the_new_record(tmp_path):
    # the progress stream appends through append_jsonl; `status` reads its last complete record
    path = tmp_path / "progress.jsonl"
    append_jsonl(path, [{"t": 1}], fsync=False)
    with path.open("ab") as fh:
        fh.write(b'{"t": 2, "sta')
    append_jsonl(path, [{"t": 3}], fsync=False)
    assert read_last(path) == {"t": 3}


def test_iter_jsonl_objects_numbers_lines_skips_blanks_and_names_the_bad_line(tmp_path):
    from geoagent.files import iter_jsonl_objects

    path = tmp_path / "log.jsonl"
    path.write_bytes(b'{"a": 1}\n\n{"a": 2}\n')
    assert list(iter_jsonl_objects(path)) == [(1, {"a": 1}), (3, {"a": 2})]
    path.write_bytes(b'{"a": 1}\n[1, 2]\n')
    with pytest.raises(ValueError, match=r"log\.jsonl:2: expected a JSON object, got list"):
        list(iter_jsonl_objects(path))
    path.write_bytes(b'{"a": 1}\n{"a": 2, "tor\n')
    with pytest.raises(ValueError, match=r"log\.jsonl:2: not JSON"):
        list(iter_jsonl_objects(path))
