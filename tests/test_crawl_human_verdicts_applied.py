"""Human image-audit verdicts decide usability for every consumer of a crawl, and adding them is no request drift.

Walkthrough (seed 000 Sec. 3.2: "exclusion runs off the human verdict"): with ``[crawl.image_audit]
human_verdicts`` excluding an image, ``images.csv`` said ``usable False`` but ``verify_trials.csv`` was byte-identical
to a crawl without verdicts (15 trials on the excluded image), so the GeoHint plan (the trials' images) still
showed it; adding the verdicts to a finished crawl read as a config change of the requests ("Use a new [campaign]
name", which re-asks and re-pays every audit) and applied nothing; a ``human_verdicts`` path that does not exist
was silently ignored. The shipped offline crawl (local fakes, started in-process) through the CLI entry; the crawl
without verdicts that two tests start from is the session's one (``sandbox_crawled``, tests/_crawl_once.py),
restored at its root for each."""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from geoagent.cli import main
from _docs import docs_text

CRAWL_CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"


def _config_with_verdicts(tmp: Path, verdicts: Path) -> Path:
    text = CRAWL_CONFIG.read_text(encoding="utf-8").replace(
        'model = "sandbox-vision-auditor"\n', f'model = "sandbox-vision-auditor"\nhuman_verdicts = "{verdicts}"\n', 1)
    assert "human_verdicts" in text
    p = tmp / "crawl_hv.toml"
    p.write_text(text, encoding="utf-8")
    return p


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _model_usable_image_in_trials(state: Path) -> dict[str, str]:
    """A row of images.csv the model audit keeps and that the trials show."""
    trial_ids = {r["image_id"] for r in _rows(state / "verify_trials.csv")}
    row = next(r for r in _rows(state / "images.csv") if r["usable"] == "True" and r["image_id"] in trial_ids)
    return row


def _write_verdicts(path: Path, image_path: str) -> None:
    path.write_text(f"image,human_verdict,human_reason\n{image_path},exclude,shop sign names the district\n",
                    encoding="utf-8")


def _audit_counts(out: str) -> tuple[int, int]:
    m = re.search(r"audit: (\d+) usable, (\d+) excluded", out)
    assert m, out
    return int(m.group(1)), int(m.group(2))


def _assert_excluded_everywhere(state: Path, image: dict[str, str]) -> None:
    iid = image["image_id"]
    assert [r["usable"] for r in _rows(state / "images.csv") if r["image_id"] == iid] == ["False"]
    audit = [r for r in _rows(state / "image_audit.csv") if r["image"] == image["path"]]
    assert [(r["human_verdict"], r["usable"]) for r in audit] == [("exclude", "False")]
    trials = _rows(state / "verify_trials.csv")
    assert trials and not [t for t in trials if t["image_id"] == iid]  # no trial shows the excluded image
    from geoagent.data.importer import import_release

    rel = import_release(state)  # what a GeoVerify / GeoHint campaign with release_dir = this folder reads
    assert iid not in {im.image_id for im in rel.images.values()}
    agreement = json.loads((state / "image_audit_agreement.json").read_text(encoding="utf-8"))
    assert agreement["n"] == 1 and agreement["human_excludes_model_accepts"] == 1
    import polars as pl

    exported = pl.read_parquet(state / "export" / "images.parquet")
    assert exported.filter(pl.col("image_id") == iid)["usable"].to_list() == [False]


def test_verdicts_added_to_a_finished_crawl_are_applied_by_a_rerun_with_no_new_call(sandbox_crawled, capsys):
    # before: the re-run said "crawl changed since its last run (crawl.image_audit.human_verdicts: unset -> ...)
    # ... affects none of the stored results ... Use a new [campaign] name" (70 audit calls again) and left
    # images.csv, verify_trials.csv and the summary's "audit: 26 usable, 6 excluded" as they were
    isolated_roots, first = sandbox_crawled  # the finished shipped crawl (run once per session) and its stdout
    capsys.readouterr()  # what the crawl may have printed here: as before, nothing of it is read below
    state = isolated_roots / "state" / "crawl-sandbox"
    usable, excluded = _audit_counts(first)
    image = _model_usable_image_in_trials(state)
    hv = isolated_roots / "hv.csv"
    _write_verdicts(hv, image["path"])
    cfg = _config_with_verdicts(isolated_roots, hv)
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    got = capsys.readouterr()
    assert "this run: 0 new model calls" in got.out, got.out
    assert "new [campaign] name" not in got.err and "affects none of the stored results" not in got.err, got.err
    assert "human_verdicts" in got.err and "no model call" in got.err, got.err  # said once, as an info line
    assert _audit_counts(got.out) == (usable - 1, excluded + 1)
    _assert_excluded_everywhere(state, image)
    man = json.loads((state / "manifest.json").read_text(encoding="utf-8"))
    assert man["config"]["crawl"]["image_audit"]["human_verdicts"] == str(hv)  # recorded as applied
    assert "config_not_applied" not in man or not man["config_not_applied"]
    # a third run with the same file says nothing more about it and changes nothing
    before = (state / "verify_trials.csv").read_bytes()
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    third = capsys.readouterr()
    assert "human_verdicts" not in third.err and "this run: 0 new model calls" in third.out
    assert (state / "verify_trials.csv").read_bytes() == before


def test_a_crawl_with_verdicts_from_the_start_leaves_the_excluded_image_out_of_the_trials(sandbox_crawled, capsys,
                                                                                          tmp_path_factory):
    # before: images.csv said usable False, but write_verify_trials read the audits without the verdicts:
    # verify_trials.csv was byte-identical to a crawl without them
    import shutil

    isolated_roots, _ = sandbox_crawled  # the finished shipped crawl (run once per session)
    capsys.readouterr()
    state = isolated_roots / "state" / "crawl-sandbox"
    image = _model_usable_image_in_trials(state)
    hv = tmp_path_factory.mktemp("hv") / "hv.csv"
    _write_verdicts(hv, image["path"])
    shutil.rmtree(isolated_roots / "state")
    shutil.rmtree(isolated_roots / "queues")
    assert main(["crawl", str(_config_with_verdicts(isolated_roots, hv)), "--no-live"]) == 0
    capsys.readouterr()
    _assert_excluded_everywhere(state, image)


def test_a_verdict_file_that_does_not_exist_stops_the_crawl_before_any_call(isolated_roots, monkeypatch, capsys):
    # before: `Path(hv).is_file()` was False and the verdicts were silently skipped: every image was judged by the
    # model audit alone
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    hv = isolated_roots / "no_such_dir" / "human_audit.csv"
    rc = main(["crawl", str(_config_with_verdicts(isolated_roots, hv)), "--no-live"])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert "[crawl.image_audit] human_verdicts" in err and str(hv) in err and "does not exist" in err, err
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()  # refused before the run began


@pytest.mark.parametrize("text, where, what", [
    ("image,verdict\na/1.jpg,keep\n", 1, "missing column 'human_verdict'"),
    ("image,human_verdict\na/1.jpg,keep\na/2.jpg,maybe\n", 3, "keep or exclude"),
])
def test_a_malformed_verdict_file_is_named_with_its_line(tmp_path, text, where, what):
    from geoagent.crawl.image_audit import read_human_verdicts

    p = tmp_path / "hv.csv"
    p.write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as ei:
        read_human_verdicts(p)
    assert f"{p}:{where}: " in str(ei.value) and what in str(ei.value), str(ei.value)


def test_the_readme_documents_the_human_half_of_the_audits():
    # before: the README never named human_verdicts, the agreement files or how the review queue is resolved
    readme = docs_text()
    for name in ("human_verdicts", "image_audit_agreement.json", "image_audit_human_excludes_model_accepts.csv",
                 "image_audit_model_rejects_human_keeps.csv", "audit_review_queue.jsonl"):
        assert name in readme, name
    assert "Ladders do\nnot wait for it" in readme or "Ladders do not wait for it" in readme
    for name in ("review_verdicts", "audit_review_resolved.csv", "audit_review_log.jsonl"):  # how a decision is fed back
        assert name in readme, name
    example = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "example.toml").read_text(encoding="utf-8")
    assert "to compare with" not in example and "decides the image's usability" in example
