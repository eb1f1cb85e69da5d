"""A GeoVerify campaign whose trial design changed between runs scores exactly the current plan's trials, each
model request once, and says what it left out; pacing keys changed with it are not called drift.

Walkthrough: ``trials = "build"`` with ``n_per_band = 3`` interrupted, then ``n_per_band = 2`` (and a model's
rate 5 -> 100): "planned 678 requests" yet 1168 answers scored, the summary's "built trials per band" (the new
design) did not match the scored data (the union of both designs), and 3 pairs of rows of different trial ids
shared one request key (same swapped image, same claim: one answer counted twice). The drift warning listed the
rate change as one that "would mix both versions". Sandbox crawl (local fakes; the session's one, restored for
each test: ``sandbox_crawled``) -> GeoVerify with a simulated model, through the CLI entry."""

from __future__ import annotations

import re
from pathlib import Path

from _model_harness import geoverify_over_crawl_toml
from geoagent.cli import main
from geoagent.geoverify.campaign import aggregate_from_store
from geoagent.geoverify.stages import SCORED_TABLE
from geoagent.runtime.store import open_campaign_state

REPO = Path(__file__).resolve().parents[1]
CRAWL = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _gv(tmp: Path, crawl_dir: Path, images: Path, n_per_band: int, rate: float) -> Path:
    return geoverify_over_crawl_toml(tmp, name="gv-design", crawl_dir=crawl_dir, images=images, n_per_band=n_per_band,
                                     rate=rate)


def _main_arm_counts(summary: str) -> tuple[int, int, int]:
    """(built main-arm trials, parsed main-arm answers, main-arm parse failures) from the run's summary."""
    built = re.search(r"built trials per band \(main arm\): ([^;]*);", summary).group(1)
    n_built = sum(int(x) for x in re.findall(r" (\d+)(?:,|$)", built))
    line = next(ln for ln in summary.splitlines() if ln.strip().startswith("sim:") and "main arm n" in ln)
    parsed = int(re.search(r"main arm n (\d+)", line).group(1))
    failed = re.search(r"parse failures \d+ \(([^)]*)\)", line)
    main_failed = int(re.search(r"main (\d+)", failed.group(1)).group(1)) if failed and "main" in failed.group(1) else 0
    return n_built, parsed, main_failed


def test_a_changed_design_scores_only_the_current_plan(sandbox_crawled, capsys):
    isolated_roots, _ = sandbox_crawled  # the finished shipped crawl (run once per session, tests/_crawl_once.py)
    state = isolated_roots / "state"
    crawl_dir, images = state / "crawl-sandbox", state / "images"
    p = _gv(isolated_roots, crawl_dir, images, 3, 5.0)
    capsys.readouterr()
    assert main(["run", str(p), "--no-live"]) == 0
    first = capsys.readouterr().out
    n_first = int(re.search(r"planned (\d+) requests", first).group(1))
    p = _gv(isolated_roots, crawl_dir, images, 2, 100.0)
    assert main(["run", str(p), "--no-live"]) == 0
    got = capsys.readouterr()
    n_second = int(re.search(r"planned (\d+) requests", got.out).group(1))
    assert n_second < n_first
    # the design is a change to what is planned, the rate only paces: neither mixes anything
    assert "would mix" not in got.err and "warning" not in got.err
    assert "geoverify.n_per_band: 3 -> 2" in got.err and "this changes which tasks are planned" in got.err
    assert "info: campaign gv-design: limits or pacing changed since its last run (models[0].rate.requests: 5.0 -> 100.0)" in got.err
    # the scores cover exactly the built trials of the current design (each answered once: parsed or failed)
    n_built, parsed, main_failed = _main_arm_counts(got.out)
    assert parsed + main_failed == n_built, got.out
    with open_campaign_state("gv-design", root=state) as st:
        stored = sum(1 for _ in st.store.iter_results(SCORED_TABLE))
    left_out = stored - n_second
    assert left_out > 0
    assert (f"Left out of scoring: {left_out} stored answers of tasks the current plan no longer holds") in got.out
    # walk46 #13: the plan line says why the done counts below it exceed it (the earlier plan's tasks, done)
    assert (f"planned {n_second} requests (the done counts below also hold {left_out} of an earlier plan, no longer "
            "planned: kept, not scored)") in got.out
    done = int(re.search(r"requests: ready 0  leased 0  done (\d+)", got.out).group(1))
    assert done == n_second + left_out, got.out
    md = (state / "gv-design" / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert f"Left out of scoring: {left_out} stored answers" in md


def test_two_scored_rows_of_one_request_count_once(isolated_roots):
    """Two trial ids whose requests are one (same image shown, same claim) share one stored answer: counted once."""
    row = {"trial_id": "t1|ctrl_mismatch|Loquat Hotel", "model": "m", "site": "s1", "arm": "ctrl_mismatch",
           "band": "1.5-3.0km", "truth": "no", "verdict": "yes", "conf": 0.75, "request_key": "rk-1",
           "finish_reason": "stop"}
    twin = {**row, "trial_id": "t2|ctrl_mismatch|Loquat Hotel"}
    other = {**row, "trial_id": "t3|ctrl_mismatch|Plum Stadium", "request_key": "rk-2", "verdict": "no"}
    with open_campaign_state("gv-twins", root=isolated_roots / "state") as st:
        st.store.put_results(SCORED_TABLE, [("t1|ctrl_mismatch|Loquat Hotel|m", row),
                                            ("t2|ctrl_mismatch|Loquat Hotel|m", twin),
                                            ("t3|ctrl_mismatch|Plum Stadium|m", other)])
        scores = aggregate_from_store(st.store).scores()
        assert scores["m"].controls["ctrl_mismatch"][0] == 2  # 2 answers, not 3
        from geoagent.geoverify.stages import ScoredScope

        scope = ScoredScope(None)
        assert len(list(scope.rows(st.store))) == 2
    assert scope.repeated == 1
    assert scope.note() == ("Left out of scoring: 1 answer repeats a counted one's model request (same image shown, "
                            "same claim: one answer) and is counted once, e.g. t2|ctrl_mismatch|Loquat Hotel|m "
                            "repeats t1|ctrl_mismatch|Loquat Hotel|m.")


def _h_f_counts(summary: str) -> tuple[int, int, int, int]:
    """(H k, H n, F k, F n) of model ``sim`` from the run's summary line."""
    line = next(ln for ln in summary.splitlines() if ln.strip().startswith("sim:") and "main arm n" in ln)
    h = re.search(r" H [^(]*\((\d+)/(\d+)\)", line)
    f = re.search(r" F [^(]*\((\d+)/(\d+)\)", line)
    return int(h.group(1)), int(h.group(2)), int(f.group(1)), int(f.group(2))


#: another simulated model (named sim2 here), added to a config before its [geoverify] table
SECOND_MODEL = """[[models]]
name = "sim2"
provider = "simulated"
model = "sim-2"
max_output_tokens = 100
"""


def test_the_export_marks_the_scored_rows_and_superseded_tasks_are_not_missing(sandbox_crawled, capsys, monkeypatch):
    """The walkthrough's export: every stored scored row (1227) while the report scored 1035, so H and F
    recomputed from the export disagreed with the report; and the report said "Incomplete: 615 trial(s)
    missing" for tasks set aside as superseded while the run ended complete. Run 1: two models, complete;
    run 2: a third model's requests planned and queued, none sent; run 3: one model, n_per_band 3 -> 2 (the
    removed model's answers left out, the queued tasks set aside), then ``run.py export``."""
    import polars as pl

    isolated_roots, _ = sandbox_crawled  # the finished shipped crawl (run once per session, tests/_crawl_once.py)
    state = isolated_roots / "state"
    crawl_dir, images = state / "crawl-sandbox", state / "images"

    def with_models(p: Path, *names: str) -> Path:
        # each entry its own model id ("sim3": "sim-3"): two entries asking identical requests are refused
        extra = "".join(SECOND_MODEL.replace("sim2", n).replace("sim-2", f"sim-{n[3:]}") for n in names)
        p.write_text(p.read_text(encoding="utf-8").replace("[geoverify]", extra + "[geoverify]"), encoding="utf-8")
        return p

    assert main(["run", str(with_models(_gv(isolated_roots, crawl_dir, images, 3, 100.0), "sim2")), "--no-live"]) == 0
    p = with_models(_gv(isolated_roots, crawl_dir, images, 3, 100.0), "sim2", "sim3")
    # the parser-only run plans and ends (no wait for a model caller to start: fixstages43)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")
    assert main(["run", str(p), "--no-live", "--stages", "parser"]) == 0
    p = _gv(isolated_roots, crawl_dir, images, 2, 100.0)
    capsys.readouterr()
    assert main(["run", str(p), "--no-live"]) == 0
    got = capsys.readouterr()
    assert "set aside" in got.err and "Left out of scoring" in got.out
    # said at the start: the third model's queued tasks are set aside, the second's stored answers not scored
    assert re.search(r"info: campaign gv-design: plan changed since the last run: 0 requests new \(not planned "
                     r"before\), \d+ planned before no longer in the plan \(\d+ still queued: set aside unsent; the "
                     r"others' stored answers, where they have one, are kept but not scored\)\.", got.err), got.err
    hk, hn, fk, fn = _h_f_counts(got.out)
    report = state / "gv-design" / "report"
    # superseded tasks are not missing: the run ended complete, the report says nothing is missing
    md = (report / "geoverify_table.md").read_text(encoding="utf-8")
    txt = (report / "geoverify_table.txt").read_text(encoding="utf-8")
    assert "Incomplete" not in md and "Incomplete" not in txt
    assert (report / "geoverify_missing.csv").read_text(encoding="utf-8").strip().count("\n") == 0
    assert main(["export", str(p)]) == 0
    df = pl.read_parquet(state / "gv-design" / "geoverify_scored.parquet")
    with open_campaign_state("gv-design", root=state) as st:
        assert df.height == sum(1 for _ in st.store.iter_results(SCORED_TABLE))
    s = df.filter(pl.col("scored") & (pl.col("model") == "sim") & (pl.col("arm") == "main") & pl.col("parse_ok"))
    signal, noise = s.filter(pl.col("truth") == "yes"), s.filter(pl.col("truth") == "no")
    assert (signal.filter(pl.col("verdict") == "yes").height, signal.height,
            noise.filter(pl.col("verdict") == "yes").height, noise.height) == (hk, hn, fk, fn)
    assert df.filter(~pl.col("scored")).height > 0
    # the export's line counts the rows the report leaves out (walk39 #3)
    assert f"({df.filter(~pl.col('scored')).height} not scored: filter on the column scored)" in capsys.readouterr().out
