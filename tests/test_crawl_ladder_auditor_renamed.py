"""A crawl re-run under a renamed referenceability auditor keeps one set of ladders: the current auditor's.

Each ladder file is named by its auditor (``ladders/<site>_ladder_<auditor>-en.csv``, the release's layout), and a
run of a crawl with rated sites rebuilds every ladder from the stored ratings under the config's auditor
(:func:`geoagent.crawl.stages.apply_review_verdicts`). Renaming ``[crawl.referenceability] model`` (the
``[[models]]`` name) and re-running left the old auditor's files beside the rebuilt ones: ``ladders/`` held two
ladders per site, and every reader of the folder (the export's ``ladders`` table, a GeoHint campaign over the
crawl, the gazetteer) read both. Ladders are a function of the current config: those named by another auditor are
now moved to ``ladders_superseded/`` (kept, read by nothing) with a warning naming how many and from which
auditor. The shipped offline crawl (local fakes, started in-process) through the CLI entry."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from geoagent import constants as C
from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _ladders(state: Path, folder: str = "ladders") -> dict[str, bytes]:
    d = state / folder
    return {p.name: p.read_bytes() for p in sorted(d.glob("*.csv"))} if d.is_dir() else {}


def test_a_renamed_auditor_leaves_one_ladder_per_site_and_keeps_the_old_ones_aside(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count('"sandbox-text-auditor"') == 2  # the [[models]] name and [crawl.referenceability] model
    p = tmp_path / "crawl.toml"
    p.write_text(text + f'\n[paths]\nstate = "{tmp_path / "state"}"\nqueues = "{tmp_path / "queues"}"\n')
    assert main(["crawl", str(p), "--no-live"]) == 0
    state = tmp_path / "state" / "crawl-sandbox"
    first = _ladders(state)
    assert first and all(n.endswith("_ladder_sandbox-text-auditor-en.csv") for n in first)
    capsys.readouterr()

    p.write_text(p.read_text().replace('"sandbox-text-auditor"', '"sandbox-text-auditor-v2"'))
    assert main(["crawl", str(p), "--no-live"]) == 0
    err = capsys.readouterr().err
    second = _ladders(state)
    # one ladder per site, each named by the current auditor, built from the same stored ratings
    assert sorted(second) == sorted(n.replace("_ladder_sandbox-text-auditor-en", "_ladder_sandbox-text-auditor-v2-en")
                                    for n in first)
    assert sorted(second.values()) == sorted(first.values())
    # the old auditor's files are kept, byte for byte, where no reader of ladders/ looks
    assert _ladders(state, C.SUPERSEDED_LADDERS_DIR) == first
    # one "warning:" line, as the CLI's other warnings (before: a logging record, "... WARNING geoagent.crawl.stages: ...")
    warned = [ln for ln in err.splitlines() if C.SUPERSEDED_LADDERS_DIR in ln]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and f"{len(first)} ladder" in warned[0] and "'sandbox-text-auditor'" in warned[0]
    assert "'sandbox-text-auditor-v2'" in warned[0]
    # the export's ladders table holds the current auditor's ladders only
    lad = pl.read_parquet(state / C.EXPORT_DIR / "ladders.parquet")
    assert set(lad["ladder"].unique()) == {"sandbox-text-auditor-v2-en"}
    assert lad["site"].n_unique() == len(first)

    # a third run under the same auditor moves nothing and warns about nothing
    assert main(["crawl", str(p), "--no-live"]) == 0
    assert _ladders(state) == second and _ladders(state, C.SUPERSEDED_LADDERS_DIR) == first
    assert not [ln for ln in capsys.readouterr().err.splitlines() if C.SUPERSEDED_LADDERS_DIR in ln]
