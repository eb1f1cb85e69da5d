"""The progress stream is rotated, so a long-running campaign does not fill the disk (aggr42: "never rotated").

Every running process appends a record about once a second, idle or not (a ``--watch`` daemon: roughly 300 MB a
day). Once the stream reaches :data:`geoagent.runtime.progress.ROTATE_BYTES` a writer renames it to
``progress.jsonl.1`` (replacing the one before) and the next record starts a new file; ``status`` reads back across
both, so a process whose latest record went to the rotated file is still found.
"""

from __future__ import annotations

import orjson
from _model_harness import generic_campaign, model_table

from geoagent import constants as C
from geoagent.cli import main
from geoagent.config import load_config
from geoagent.files import append_jsonl, rotate_jsonl, rotated_jsonl_path
from geoagent.runtime import progress
from geoagent.runtime.progress import read_last, read_processes, read_runs


def _rec(run_id: str, t: float, started: float, done: int, finished: bool = False) -> dict:
    return {"t": t, "started": started, "elapsed_s": t - started, "run_id": run_id, "pid": 1, "campaign": "c",
            "stages": [{"stage": "model_caller", "done": done}], "queues": {}, "finished": finished}


def test_rotation_happens_at_the_size_and_a_second_look_leaves_the_new_file(tmp_path):
    path = tmp_path / "progress.jsonl"
    append_jsonl(path, [_rec("a", 10.0, 0.0, 1), _rec("a", 10.5, 0.0, 1)], fsync=False)
    size = path.stat().st_size
    assert rotate_jsonl(path, size + 1) is False and not rotated_jsonl_path(path).exists()
    assert rotate_jsonl(path, size) is True
    assert not path.exists() and rotated_jsonl_path(path).stat().st_size == size
    append_jsonl(path, [_rec("a", 11.0, 0.0, 2)], fsync=False)
    # a second process that judged the old file's size before the rename must not move the new, small file
    assert rotate_jsonl(path, size) is False
    assert [orjson.loads(x)["stages"][0]["done"] for x in path.read_bytes().splitlines()] == [2]
    assert rotate_jsonl(tmp_path / "none.jsonl", 1) is False  # nothing to rotate


def test_readers_find_a_process_whose_latest_record_is_in_the_rotated_file(tmp_path):
    path = tmp_path / "progress.jsonl"
    append_jsonl(path, [_rec("a", 100.0, 0.0, 5), _rec("b", 101.0, 50.0, 7)], fsync=False)
    assert rotate_jsonl(path, 1)
    append_jsonl(path, [_rec("b", 102.0, 50.0, 8)], fsync=False)  # a wrote nothing since the rotation
    found = {r["run_id"]: r["stages"][0]["done"] for r in read_processes(path)}
    assert found == {"a": 5, "b": 8}
    assert [[r["run_id"] for r in run] for run in read_runs(path)] == [["b", "a"]]
    assert read_last(path)["stages"][0]["done"] == 8
    path.unlink()  # rotated, and no record written to the new file yet
    assert read_last(path)["stages"][0]["done"] == 7


def test_a_run_that_rotates_its_stream_every_tick_still_reads_complete(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress, "ROTATE_BYTES", 1)  # any record: rotate
    monkeypatch.setattr(progress, "ROTATE_CHECK_TICKS", 1)
    cfgp = generic_campaign(tmp_path, name="rot42", n=30, models=model_table("m", rate_requests=10, concurrency=2))
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    state = load_config(cfgp).state_dir()
    stream = state / C.PROGRESS_FILE
    assert rotated_jsonl_path(stream).is_file()  # ticks rotated the stream during the run
    records = [orjson.loads(x) for f in (rotated_jsonl_path(stream), stream) if f.is_file()
               for x in f.read_bytes().splitlines() if x.strip()]
    assert records and all(isinstance(r, dict) for r in records)
    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    assert "complete" in out and "30" in out, out


def test_a_rotation_while_a_reader_reads_neither_hides_nor_repeats_records(tmp_path):
    """review42c #2: the reader judged each file by the name's size and opened it after; a rotation in between hid the
    rotated file (its budget spent on the old size) or had the reader read the same file twice."""
    from geoagent.runtime.progress import _records_backwards

    path = tmp_path / "progress.jsonl"
    append_jsonl(path, [_rec("a", 100.0 + i, 0.0, i) for i in range(4)], fsync=False)
    reader = _records_backwards(path, 8 * 1024 * 1024)
    first = next(reader)  # both files are opened now
    assert rotate_jsonl(path, 1)  # the file being read becomes progress.jsonl.1
    append_jsonl(path, [_rec("b", 200.0, 150.0, 9)], fsync=False)
    rest = list(reader)
    assert [r["stages"][0]["done"] for r in [first, *rest]] == [3, 2, 1, 0]  # each once, none twice
    # a reader starting now finds both: the new file's record, then the rotated file's
    assert [(r["run_id"], r["stages"][0]["done"]) for r in _records_backwards(path, 8 * 1024 * 1024)] == [
        ("b", 9), ("a", 3), ("a", 2), ("a", 1), ("a", 0)]
