"""Report files rewritten by several writers at once (processes of one campaign, the live-report thread).

Every process of a scaled-out campaign writes the campaign report when it ends, and an aggregator rewrites
the live report in a worker thread meanwhile. With one shared temporary name per file, two writers renamed
each other's half-written files (a reader saw partial files, a writer died with FileNotFoundError). These
tests race real processes and threads over the same report folder and check that every write succeeds and
every file a reader sees is complete: text files byte-identical to a report written alone, CSV readable
with the csv module, PNG with its signature and fully decodable by PIL.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random
import shutil
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from PIL import Image as PILImage

import geoagent
from geoagent.files import atomic_open, atomic_savefig, atomic_write_bytes, atomic_write_text

TESTS_DIR = Path(__file__).resolve().parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
N_WRITERS = 3  # e.g. two `--stages` processes ending together + the aggregator's live rewrite
RACE_S = 5.0
MIN_ROUNDS = 3
READ_PAUSE_S = 0.05  # between the reader's passes over the report files


# --- the report inputs (deterministic, so that every writer writes the same bytes) -----------------
def geoverify_inputs():
    """Synthetic scored GeoVerify rows (2 models x 12 sites x signal + decoy bands, one parse failure)."""
    from geoagent.data.model import ARM_MAIN, BAND_SIGNAL, DECOY_BAND_LABELS
    from geoagent.geoverify.aggregate import GeoVerifyAggregator

    rng = random.Random(3)
    rows = []
    for m in ("m-a", "m-b"):
        for s in range(12):
            for band in (BAND_SIGNAL, *DECOY_BAND_LABELS):
                truth = "yes" if band == BAND_SIGNAL else "no"
                verdict = "yes" if rng.random() < (0.8 if truth == "yes" else 0.2) else "no"
                rows.append(dict(trial_id=f"{m}-{s}-{band}", model=m, site=f"s{s}", arm=ARM_MAIN, band=band,
                                 truth=truth, verdict=verdict, conf=rng.randint(1, 5)))
    rows.append(dict(trial_id="bad", model="m-a", site="s0", arm=ARM_MAIN, band=BAND_SIGNAL, truth="yes",
                     verdict=None, conf=None, reason="no JSON"))
    agg = GeoVerifyAggregator()
    agg.update(rows)
    return agg.scores(), agg.parse_failures()


def geohint_inputs():
    sys.path.insert(0, str(TESTS_DIR))
    from _geohint_synth import synth_results

    from geoagent.geohint.aggregate import GeoHintAggregator

    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=7, n_sites=6))
    return agg


MISSING = [{"model": "m-a", "edge": "answers", "key": "k1", "reason": "permanent: 400"}]


def write_both(out: Path, gv, gh) -> None:
    """One campaign-report write of each kind (GeoVerify and GeoHint), as a process does when it ends."""
    from geoagent.report import geohint as RH
    from geoagent.report import geoverify as RV

    scores, failures = gv
    RV.write_report(scores, out / "geoverify", parse_failures=failures, missing=MISSING)
    RH.write_report(gh, out / "geohint", n_flips=100, n_splits=5, missing=MISSING)


_WRITER = r"""
import json, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from test_report_concurrent_writers import MIN_ROUNDS, geohint_inputs, geoverify_inputs, write_both
out, go = Path(sys.argv[2]), Path(sys.argv[3])
gv, gh = geoverify_inputs(), geohint_inputs()
print("ready", flush=True)
while not go.exists():
    time.sleep(0.002)
stop = float(go.read_text())
rounds, errors = 0, []
while rounds < MIN_ROUNDS or time.time() < stop:
    rounds += 1
    try:
        write_both(out, gv, gh)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
print(json.dumps({"rounds": rounds, "errors": errors}), flush=True)
"""


def _check_png(data: bytes, size: tuple[int, int], name: str) -> None:
    assert data.startswith(PNG_SIGNATURE), f"{name}: not a complete PNG ({len(data)} bytes)"
    with PILImage.open(io.BytesIO(data)) as im:
        im.load()  # decodes every row: a cut-off file raises here
        assert im.format == "PNG" and im.size == size, name


def _check_file(path: Path, ref: Path) -> None:
    data = path.read_bytes()  # never missing: a rename replaces it in one step
    want = ref.read_bytes()
    if path.suffix == ".png":
        with PILImage.open(ref) as im:
            size = im.size
        _check_png(data, size, path.name)
        return
    assert data == want, f"{path.name}: {len(data)} bytes differ from the report written alone ({len(want)} bytes)"
    if path.suffix == ".csv":
        rows = list(csv.reader(io.StringIO(data.decode("utf-8"))))
        ref_rows = list(csv.reader(io.StringIO(want.decode("utf-8"))))
        assert rows == ref_rows and len(rows) >= 2, path.name


def test_processes_rewriting_the_same_reports_never_collide(tmp_path):
    gv, gh = geoverify_inputs(), geohint_inputs()
    ref = tmp_path / "alone"
    write_both(ref, gv, gh)  # the reference: the same report written by one writer
    ref_files = sorted(p.relative_to(ref) for p in ref.rglob("*") if p.is_file())
    assert {p.suffix for p in ref_files} == {".md", ".csv", ".txt", ".png"}
    assert len([p for p in ref_files if p.suffix == ".png"]) == 3
    race = tmp_path / "race"
    shutil.copytree(ref, race)  # files exist from the start: a reader must never find one missing or partial

    go = tmp_path / "go"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(geoagent.__file__).resolve().parents[1]),
                                                       os.environ.get("PYTHONPATH", "")])}
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, str(TESTS_DIR), str(race), str(go)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(N_WRITERS)]
    try:
        for p in procs:  # wait until every writer has imported and built its inputs
            line = p.stdout.readline().strip()
            assert line == "ready", f"writer did not start: {line!r} {p.stderr.read() if p.poll() is not None else ''}"
        go_tmp = tmp_path / "go.tmp"
        go_tmp.write_text(str(time.time() + RACE_S))
        os.replace(go_tmp, go)
        reads = 0
        while any(p.poll() is None for p in procs):  # read the files while the writers race
            for rel in ref_files:
                _check_file(race / rel, ref / rel)
                reads += 1
            # a pass reads each file once; a short pause between passes leaves the (few) cores to the writers,
            # whose renames are what races; the passes still land all through their rounds
            time.sleep(READ_PAUSE_S)
        results = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            results.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    errors = [e for r in results for e in r["errors"]]
    assert errors == [], f"{len(errors)} concurrent report writes failed: {errors[:3]}"
    assert all(r["rounds"] >= MIN_ROUNDS for r in results), results
    assert reads >= len(ref_files) * MIN_ROUNDS, reads  # several passes during the race, not one
    for rel in ref_files:  # the last write of each file is complete too
        _check_file(race / rel, ref / rel)
    leftovers = sorted(p.name for p in race.rglob("*") if p.is_file() and p.name.startswith("."))
    assert leftovers == [], f"temporary files left behind: {leftovers}"
    assert sorted(p.relative_to(race) for p in race.rglob("*") if p.is_file()) == ref_files


def test_threads_rewriting_one_file_never_collide(tmp_path):
    """The live-report thread and the campaign's own end-of-run write share a process (same pid)."""
    target = tmp_path / "table.csv"
    contents = {f"w{i},{'x' * (2000 + 500 * i)}\n" * 20 for i in range(4)}
    atomic_write_text(target, next(iter(contents)))
    errors: list[BaseException] = []

    def writer(text: str) -> None:
        try:
            for _ in range(150):
                atomic_write_text(target, text)
        except BaseException as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(c,)) for c in contents]
    for t in threads:
        t.start()
    seen = set()
    while any(t.is_alive() for t in threads):
        text = target.read_text(encoding="utf-8")
        assert text in contents, f"partial file read ({len(text)} chars)"
        seen.add(text)
    for t in threads:
        t.join()
    assert errors == [] and seen
    assert target.read_text(encoding="utf-8") in contents
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "report.md"
    atomic_write_text(target, "old report\n")
    with pytest.raises(RuntimeError, match="renderer broke"):
        with atomic_open(target, "w") as fh:
            fh.write("half of a new rep")
            raise RuntimeError("renderer broke")
    assert target.read_text(encoding="utf-8") == "old report\n"
    assert [p.name for p in tmp_path.iterdir()] == ["report.md"]

    class BrokenFigure:
        def savefig(self, fh, **kw):
            fh.write(PNG_SIGNATURE)
            raise OSError("disk full")

    png = tmp_path / "fig.png"
    with pytest.raises(OSError, match="disk full"):
        atomic_savefig(BrokenFigure(), png)
    assert not png.exists() and [p.name for p in tmp_path.iterdir()] == ["report.md"]
    with pytest.raises(ValueError, match="mode"):
        with atomic_open(target, "a"):
            pass


def test_written_files_are_complete_and_have_ordinary_permissions(tmp_path):
    from matplotlib.figure import Figure

    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what an ordinary open() gives under the current umask
    text_path = atomic_write_text(tmp_path / "sub" / "a.md", "caf\u00e9 \U0001f4cd\n")
    assert text_path.read_bytes() == "caf\u00e9 \U0001f4cd\n".encode()
    data_path = atomic_write_bytes(tmp_path / "b.bin", bytes(range(256)))
    assert data_path.read_bytes() == bytes(range(256))
    fig = Figure(figsize=(2, 1.5))
    fig.subplots().plot([0, 1], [1, 0])
    png = atomic_savefig(fig, tmp_path / "c.png", dpi=50)
    _check_png(png.read_bytes(), (100, 75), png.name)
    for p in (text_path, data_path, png):
        assert stat.S_IMODE(p.stat().st_mode) == stat.S_IMODE(plain.stat().st_mode), p.name
