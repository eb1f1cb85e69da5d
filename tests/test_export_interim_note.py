"""An export of a campaign that is not finished says so in the files it writes, not only on the terminal.

Walkthrough 23, item 3: the export at the end of an interrupted run, and ``run.py export`` at 35 of 170 answers,
warned on stderr only; ``export_note.txt`` and the Parquet metadata said nothing, so a CSV or Parquet file handed
on looked complete. Now both carry an "interim export" line (metadata key ``geoagent.progress``) naming what was
left queued, and an export of the finished campaign drops it again.
"""

from __future__ import annotations

import polars as pl

from geoagent.cli import main
from geoagent.runtime.export import EXPORT_NOTE_FILE, PARQUET_PROGRESS_KEY

CONFIG = """[campaign]
name = "interim"
kind = "generic"
seed = 2
[budget]
cap_usd = {cap}
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
concurrency = 1
price_input_usd_per_mtok = 100.0
price_output_usd_per_mtok = 100.0
[generic]
n_requests = 8
"""


def test_an_interim_export_says_so_in_its_note_and_metadata_until_the_campaign_is_done(isolated_roots, capsys):
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(cap=0.02), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4  # the cap stops it with requests left queued
    out_dir = isolated_roots / "state" / "interim"
    results = pl.read_parquet(out_dir / "results.parquet")
    assert 0 < results.height < 8
    capsys.readouterr()
    for _ in ("end of run", "export command"):
        note = " ".join((out_dir / EXPORT_NOTE_FILE).read_text(encoding="utf-8").split())
        assert "Interim export: campaign interim is not finished" in note, note
        assert "requests: " in note and "ready" in note and "only the work done so far" in note, note
        meta = pl.read_parquet_metadata(out_dir / "results.parquet")
        assert meta.get(PARQUET_PROGRESS_KEY, "").startswith("Interim export: campaign interim is not finished"), meta
        assert PARQUET_PROGRESS_KEY in pl.read_parquet_metadata(out_dir / "model_responses.parquet")
        # the spend table is written after the kind's note: the note names it once, under the interim line too
        assert note.count("spend.csv / spend.parquet") == 1, note
        assert "Also written beside it: spend.csv / spend.parquet (the ledger per model" in note, note
        assert "The interim-export line above covers them too" in note, note
        assert main(["export", str(cfg)]) == 0
    cfg.write_text(CONFIG.format(cap=10.0), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0  # finished: the next export is whole
    assert pl.read_parquet(out_dir / "results.parquet").height == 8
    assert PARQUET_PROGRESS_KEY not in pl.read_parquet_metadata(out_dir / "results.parquet")
    note_file = out_dir / EXPORT_NOTE_FILE
    assert not note_file.exists() or "Interim export" not in note_file.read_text(encoding="utf-8")
    # the simulator's note stays; it names the spend files without an interim line for them
    final = " ".join(note_file.read_text(encoding="utf-8").split())
    assert final.count("spend.csv / spend.parquet") == 1 and "interim-export line" not in final, final


def test_an_export_missing_dead_lettered_work_says_so(isolated_roots, capsys):
    """Review rev23b (5): a campaign that ended with tasks dead-lettered (exit 3) got no mark, though its tables
    lack their rows; tasks set aside as no longer planned (superseded) are not missing work and give none."""
    import anyio

    from geoagent import constants as C
    from geoagent.config import load_config
    from geoagent.runtime.queue import SUPERSEDED, open_queue

    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(cap=0.02), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4
    c = load_config(cfg)

    async def dead_letter(n: int, reason: str) -> None:  # as the model caller does to a task that failed for good
        q = open_queue(c.queues_root(), c.name, C.EDGE_REQUESTS)
        try:
            tasks = await q.lease(n, 60.0)
            await q.release(tasks)  # back to ready, then dead-lettered from there
            keys = [t.key for t in tasks]
            assert sorted(await q.dead_letter_ready(keys, reason)) == sorted(keys)
        finally:
            await q.close()

    anyio.run(dead_letter, 4, "http 400: bad request")
    anyio.run(dead_letter, 2, SUPERSEDED + ": no longer planned")
    assert main(["export", str(cfg)]) == 0
    note = " ".join((isolated_roots / "state" / "interim" / EXPORT_NOTE_FILE).read_text(encoding="utf-8").split())
    assert note.startswith("Incomplete export: campaign interim ended with work dead-lettered (requests: 4 "
                           "dead-lettered, when exported)"), note
    assert "run.py dead CONFIG --requeue" in note and note.count("Files this note covers") == 1, note
    meta = pl.read_parquet_metadata(isolated_roots / "state" / "interim" / "results.parquet")
    assert meta[PARQUET_PROGRESS_KEY].startswith("Incomplete export:")


def test_an_export_whose_queues_cannot_be_read_says_its_completeness_is_unknown(isolated_roots, capsys):
    """Review rev23b (minor): when the queue counts could not be read at export time (a damaged queue file, a
    Redis server gone), the interim mark was dropped without a word and the files read as the whole campaign;
    and the ``export`` command's own read of the counts, after the files were written, failed the command. The
    files now say their completeness is unknown and why; the command warns and exits 0."""
    from geoagent import constants as C
    from geoagent.config import load_config
    from geoagent.runtime.sqlite_queue import queue_path

    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(cap=10.0), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0
    c = load_config(cfg)
    qfile = queue_path(c.queues_root(), c.name, C.EDGE_RESPONSES)
    for side in ("-wal", "-shm"):
        (qfile.parent / (qfile.name + side)).unlink(missing_ok=True)
    qfile.write_bytes(b"not a queue: damaged by hand" * 200)
    capsys.readouterr()
    assert main(["export", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "the queues of campaign interim could not be read" in err and "completeness" in err, err
    out_dir = isolated_roots / "state" / "interim"
    assert pl.read_parquet(out_dir / "results.parquet").height == 8
    note = " ".join((out_dir / EXPORT_NOTE_FILE).read_text(encoding="utf-8").split())
    assert note.startswith("Export of unknown completeness: the queues of campaign interim could not be read "
                           "when exported (QueueFileError"), note
    assert "run.py status CONFIG" in note, note
    meta = pl.read_parquet_metadata(out_dir / "results.parquet")
    assert meta[PARQUET_PROGRESS_KEY].startswith("Export of unknown completeness:"), meta


def test_an_export_whose_queues_are_gone_says_its_completeness_is_unknown(isolated_roots, capsys):
    """Review rev24 (2): with the queues folder moved away after a budget stop (or $GEOAGENT_QUEUES pointing
    elsewhere at export time), no queue was found, the counts were empty and the export read as whole. The state
    folder records runs: the files now say their completeness is unknown and why."""
    import shutil

    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.format(cap=0.02), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4  # requests left queued
    shutil.move(str(isolated_roots / "queues" / "interim"), str(isolated_roots / "moved-away"))
    capsys.readouterr()
    assert main(["export", str(cfg)]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert "no queues found in" in err and "its completeness is unknown" in err, err
    out_dir = isolated_roots / "state" / "interim"
    note = " ".join((out_dir / EXPORT_NOTE_FILE).read_text(encoding="utf-8").split())
    assert note.startswith("Export of unknown completeness: the queues of campaign interim were not found when "
                           "exported (no queues found in"), note
    for table in ("results", "model_responses", "spend"):
        meta = pl.read_parquet_metadata(out_dir / f"{table}.parquet")
        assert meta[PARQUET_PROGRESS_KEY].startswith("Export of unknown completeness:"), (table, meta)
