"""Session 14 adversarial review of the incremental statistics path (GeoVerify / GeoHint aggregators, the
reports and exports built from them).

Each test states the attack and checks the incremental result against an independent recomputation written
here (numpy / pandas / scipy over the raw rows) or against seed 000's definitions (Sec. 5.3-5.4, Table 12).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from geoagent.data.model import BAND_SIGNAL, DECOY_BAND_LABELS
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.scoring import sdt


def _vrow(tid: str, verdict: str | None, *, model: str = "m", site: str = "s1", arm: str = "main",
          band: str = BAND_SIGNAL, conf: float | None = 0.9) -> dict:
    truth = "yes" if (arm == "main" and band == BAND_SIGNAL) else "no"
    return {"trial_id": tid, "model": model, "site": site, "arm": arm, "band": band, "truth": truth,
            "verdict": verdict, "conf": None if verdict is None else conf}


def _random_rows(rng: random.Random, n: int, models, sites, confs) -> list[dict]:
    rows = []
    for i in range(n):
        arm = rng.choice(["main"] * 6 + ["ctrl_mismatch", "ctrl_noimage"])
        band = rng.choice([BAND_SIGNAL, *DECOY_BAND_LABELS]) if arm == "main" else rng.choice(DECOY_BAND_LABELS)
        verdict = rng.choice(["yes", "no", None])
        rows.append(_vrow(f"t{i}", verdict, model=rng.choice(models), site=rng.choice(sites), arm=arm, band=band,
                          conf=rng.choice(confs)))
    return rows


def _reference(rows: list[dict], model: str | None) -> dict:
    """Table 12 quantities of one model (None: pooled) recomputed with pandas/numpy/scipy from raw rows."""
    df = pd.DataFrame(rows)
    if model is not None:
        df = df[df.model == model]
    parsed = df[df.verdict.notna()]
    main = parsed[parsed.arm == "main"]
    sig = main[main.band == BAND_SIGNAL]
    noise = main[main.band != BAND_SIGNAL]
    fa = noise[noise.verdict == "yes"].conf.astype(float)
    fa = fa[np.isfinite(fa)]
    out = {"h": (sig.verdict == "yes").mean() if len(sig) else math.nan,
           "f": (noise.verdict == "yes").mean() if len(noise) else math.nan,
           "fa_conf_median": float(np.median(fa)) if len(fa) else math.nan,
           "fa_conf_share_high": float((fa >= 0.8).mean()) if len(fa) else math.nan}
    for b in DECOY_BAND_LABELS:
        nb = noise[noise.band == b]
        if len(sig) and len(nb):
            zh = norm.ppf(((sig.verdict == "yes").sum() + 0.5) / (len(sig) + 1))
            zf = norm.ppf(((nb.verdict == "yes").sum() + 0.5) / (len(nb) + 1))
            out[f"d'[{b}]"] = zh - zf
        else:
            out[f"d'[{b}]"] = math.nan
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


# --- confidences: the share >= 0.8 and the median of the raw stated values ------------------------------------


def test_the_confidence_share_and_median_are_those_of_the_stated_values_not_of_rounded_ones():
    """Attack: false acceptances stated at 0.7999999 (or 79.99999 %, which the parser reads as 0.7999999). The
    aggregator kept confidences rounded to 6 decimals, so 0.7999999 became 0.8: counted as "confidence >= 0.8"
    (seed 000 Table 12 / abstract: share of false acceptances stated at >= 0.8) and shown as a median of 0.8,
    where the stored answers (and numpy over them) say 0.7999999 < 0.8."""
    rows = [_vrow(f"fa{i}", "yes", band=DECOY_BAND_LABELS[0], conf=0.7999999) for i in range(3)]
    rows += [_vrow("fa9", "yes", band=DECOY_BAND_LABELS[0], conf=0.95), _vrow("h1", "yes", conf=0.7999999)]
    agg = GeoVerifyAggregator()
    agg.update(rows)
    s = agg.scores()["m"]
    ref = _reference(rows, "m")
    assert s.fa_conf_share_high == pytest.approx(ref["fa_conf_share_high"]) == pytest.approx(0.25)
    assert s.fa_conf_median == pytest.approx(ref["fa_conf_median"], abs=1e-12)
    assert s.hit_conf_median == pytest.approx(0.7999999, abs=1e-12)
    # a stated 0.8 is still "at least 0.8", also when it comes out of a percent as 80 / 100
    agg = GeoVerifyAggregator()
    agg.update([_vrow("a", "yes", band=DECOY_BAND_LABELS[0], conf=80 / 100),
                _vrow("b", "yes", band=DECOY_BAND_LABELS[0], conf=0.1 + 0.7)])
    assert agg.scores()["m"].fa_conf_share_high == 1.0


# --- a model named like the pooled column ----------------------------------------------------------------------


def test_a_model_named_pooled_is_refused_not_merged_into_the_pooled_column():
    """Attack: a ``[[models]]`` entry named "pooled" (or a replayed recording of a model of that name). Scores
    are keyed by model name and the pooled column is ``"pooled"``: the model's own column was overwritten by the
    pooled one (its H became the pool's), and its cut-off counts were added to the pool twice. The plan refuses
    the name (as it refuses two entries reporting under one name), and the scorer refuses cells holding it."""
    from types import SimpleNamespace

    from geoagent.geoverify.plan import check_report_names

    rows = [_vrow("a", "yes", model="pooled"), _vrow("b", "no", model="pooled"),
            _vrow("c", "no", model="other"), _vrow("d", "no", model="other")]
    ref = _reference(rows, "pooled")
    agg = GeoVerifyAggregator()
    agg.update(rows)
    with pytest.raises(ValueError, match="pooled"):
        scores = agg.scores()
        # before: no error, and the model's column was the pool's
        assert scores["pooled"].h == pytest.approx(ref["h"])
    with pytest.raises(ValueError, match="pooled"):
        check_report_names([SimpleNamespace(name="pooled", provider="openai", model="x")], [])
    with pytest.raises(ValueError, match="pooled"):
        check_report_names([SimpleNamespace(name="rec", provider="replay", model="recorded")], ["pooled", "m2"])
    # names that merely resemble it are distinct models and score as such
    agg = GeoVerifyAggregator()
    agg.update([{**r, "model": "Pooled" if r["model"] == "pooled" else r["model"]} for r in rows])
    scores = agg.scores()
    assert scores["Pooled"].h == pytest.approx(ref["h"]) and scores[sdt.POOLED].h == pytest.approx(0.25)


# --- arrival order, batching, redeliveries, awkward names: equal to numpy over the raw rows --------------------


@pytest.mark.parametrize("seed", [3, 14])
def test_incremental_scores_equal_an_independent_recount_whatever_the_order_batching_and_redeliveries(seed):
    """Attack: the same stored answers fed in shuffled orders, in batches of 1 to 40 with redeliveries of
    already counted rows (a SIGKILL between storing and acknowledging), models whose names differ only in case
    or are non-ASCII, a site named with a snowman, confidences NaN / None / at the 0.8 edge, a model with only
    parse failures. Every Table 12 figure must equal a pandas/scipy recount of the raw rows (seed 000 Sec. 5.3:
    H, F, log-linear d' per band, median and share >= 0.8 of false-acceptance confidence)."""
    rng = random.Random(seed)
    models = ["gpt", "GPT", "Ünï-𝔪odel", "模型"]
    sites = [f"s{i}" for i in range(6)] + ["Zürich ☃"]
    confs = [None, 0.8, 0.79999999, 0.95, 0.5, float("nan"), 1.0, 0.0]
    rows = _random_rows(rng, 500, models, sites, confs)
    rows += [_vrow(f"f{i}", None, model="only-failures", site="s0") for i in range(3)]
    stream = rows[:] + rng.sample(rows, 80)
    rng.shuffle(stream)
    agg = GeoVerifyAggregator()
    i = 0
    while i < len(stream):
        k = rng.randint(1, 40)
        agg.update(stream[i:i + k])
        i += k
    scores = agg.scores()
    assert sorted(scores) == sorted([*models, "only-failures", sdt.POOLED])
    for m in [*models, None]:
        s = scores[m or sdt.POOLED]
        ref = _reference(rows, m)
        for f in ("h", "f", "fa_conf_median", "fa_conf_share_high"):
            assert _same(getattr(s, f), ref[f]), (m, f, getattr(s, f), ref[f])
        for b in s.bands:
            assert _same(b.d_prime, ref[f"d'[{b.band}]"]), (m, b.band)
    s = scores["only-failures"]
    assert s.n_parse_failures == 3 and s.n_signal == 0 and math.isnan(s.h) and s.readout.verdict == sdt.READOUT_NO_DATA


# --- a live aggregator across a re-plan (``--watch`` over a crawl's folder) --------------------------------------


def _scored(i: int, verdict: str | None, *, model: str = "m", band: str = BAND_SIGNAL) -> tuple[str, dict]:
    tid = f"img{i}|main|cand{i}"
    row = {**_vrow(tid, verdict, model=model, site=f"s{i % 6}", band=band, conf=0.9),
           "request_key": f"rk{i}", "parse_ok": verdict is not None, "finish_reason": "stop"}
    return f"{tid}|{model}", row


def _run_live_stage(tmp_path, stage, stages_module, stored, arriving, *, plan_after=None, on_start=None):
    """A live aggregator ``stage`` (of ``stages_module``: geoverify.stages or geohint.stages, for its
    SCORED_TABLE and SERVICE_PLAN_KEYS) started over the ``stored`` (key, row) pairs, its plan their keys; then,
    with ``plan_after``, the campaign plans again (the plan keys set anew, as
    :class:`geoagent.engine.WatchReplanTick` does when a crawl's hand-off replaces the trial table or adds
    images); then the ``arriving`` rows are stored first and handed to the stage, as the scorer does; flushed, its
    live rewrite waited for, stopped. ``on_start(stage)`` runs right after start. Returns (stage, the campaign
    state: the caller closes it)."""
    import anyio

    from geoagent import constants as C
    from geoagent.runtime.queue import Task
    from geoagent.runtime.stage import StageContext
    from geoagent.runtime.store import open_campaign_state

    table, plan_service = stages_module.SCORED_TABLE, stages_module.SERVICE_PLAN_KEYS
    state = open_campaign_state("adv-live", root=tmp_path / "state", cap_usd=0.0)
    store = state.store
    for key, row in stored:
        store.put_result(table, key, row)
    ctx = StageContext("adv-live", {"store": store, plan_service: frozenset(k for k, _ in stored),
                                    "report_dir": tmp_path / "report", C.SERVICE_CAMPAIGN_WRITES_REPORT: True})

    async def go():
        await stage.start(ctx)
        if on_start is not None:
            on_start(stage)
        if plan_after is not None:
            ctx.services[plan_service] = frozenset(k for k, _ in plan_after)  # the kind's plan() sets it anew
        for key, row in arriving:
            store.put_result(table, key, row)
            await stage.handle(Task(key, dict(row), 0, "lease"), ctx)
        await stage.flush(ctx)
        await stage.live.wait()
        await stage.stop(ctx)

    try:
        anyio.run(go)
    except BaseException:
        state.close()
        raise
    return stage, state


def _gh_res(i: int, hit: bool) -> tuple[str, dict]:
    """A scored GeoHint row of model m, image img<i> at site s<i % 3>: an area-level hit (0.4 km) or miss."""
    from geoagent.geohint.result import GeoHintResult

    key = f"gh|m|s{i % 3}|img{i}|baseline||r0"
    return key, GeoHintResult(key=key, site=f"s{i % 3}", image_id=f"img{i}", model="m", condition="baseline",
                              schema="forced", resolved_level="area", error_km=0.4 if hit else 2.5,
                              hit=hit).to_json()


def test_a_live_geoverify_aggregator_follows_a_replan_of_its_campaign(tmp_path):
    """Attack: a ``--watch`` GeoVerify campaign over a crawl's folder plans again when the crawl hands off a new
    trial table (``WatchReplanTick``). The live aggregator kept the scope of the plan it started with, so every
    new trial's answer was dropped as "not in the current plan" (and trials the new table no longer holds stayed
    counted) in the live report, for as long as the run watched; the campaign's report, built from the store
    with the new plan, counted them. The live counts must equal that rebuild."""
    from geoagent.geoverify import stages
    from geoagent.geoverify.campaign import aggregate_from_store
    from geoagent.geoverify.stages import GeoVerifyAggregatorStage, ScoredScope

    old = [_scored(i, "yes") for i in range(6)] + [_scored(100 + i, "no", band=DECOY_BAND_LABELS[0]) for i in range(6)]
    new = [_scored(200 + i, "no") for i in range(6)] + [_scored(300 + i, "yes", band=DECOY_BAND_LABELS[0])
                                                         for i in range(6)]
    plan_b = old[:6] + new  # the new table keeps the signal trials, drops the old decoys, adds new trials
    stage, state = _run_live_stage(tmp_path, GeoVerifyAggregatorStage(report_interval_s=3600), stages, old, new,
                                   plan_after=plan_b)
    try:
        want = aggregate_from_store(state.store, ScoredScope({k for k, _ in plan_b})).scores()["m"]
        got = stage.agg.scores()["m"]
        assert (want.n_signal, want.n_hits, want.n_noise, want.n_false_acceptances) == (12, 6, 6, 6)
        assert (got.n_signal, got.n_hits, got.n_noise, got.n_false_acceptances) == (12, 6, 6, 6)
    finally:
        state.close()


def test_a_live_geohint_aggregator_follows_a_replan_of_its_campaign(tmp_path):
    """Attack: the same re-plan under a ``--watch`` GeoHint campaign (a crawl's hand-off adds images). The live
    aggregator's scope stayed the first plan's: the new images' answers never entered the live report, and
    answers of images the new plan no longer holds stayed in it. Its counts must equal the store rebuilt under
    the new plan (:func:`geoagent.geohint.stages.scored_scope`, what the campaign's report counts)."""
    from geoagent.geohint import stages
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.result import GeoHintResult
    from geoagent.geohint.stages import GeoHintAggregatorStage, scored_scope

    old = [_gh_res(i, True) for i in range(6)]
    new = [_gh_res(100 + i, False) for i in range(6)]
    plan_b = old[:3] + new
    stage, state = _run_live_stage(tmp_path, GeoHintAggregatorStage(report_interval_s=3600, figures=False, n_boot=0),
                                   stages, old, new, plan_after=plan_b)
    try:
        want = GeoHintAggregator()
        for row in scored_scope({k for k, _ in plan_b}).rows(state.store):
            want.add(GeoHintResult.from_json(row))
        assert (want.select().n, want.select().hits) == (9, 3)
        assert sorted(stage.agg.keys) == sorted(want.keys)
        assert (stage.agg.select().n, stage.agg.select().hits) == (9, 3)
    finally:
        state.close()


def test_a_geohint_report_rewritten_without_a_condition_leaves_no_csv_of_its_tables(tmp_path):
    """Attack: a GeoHint campaign ran baseline, forced, forced_warn and forced_chain (report/table8.csv, table9.csv,
    table10.csv, table11.csv written); it is re-run with forced_warn and forced_chain removed from the config (a
    plan change): the report, scoped to the new plan, builds none of those tables, but their CSV files from the
    earlier design stayed beside it, with figures the current report.md no longer states (a reader globbing
    report/*.csv pools two designs). Every table CSV in the folder must be one the current report built."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from _geohint_synth import synth_results

    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.report.geohint import write_report

    rows = synth_results(seed=2, n_sites=6, models=("m-a", "m-b"), images_per_site=1, baseline_repeats=1)
    full = GeoHintAggregator()
    full.add_many(rows)
    out = tmp_path / "report"
    before = {t.name for t in write_report(full, out, n_flips=50, n_splits=4, n_boot=0, figures=False)}
    assert {"table8", "table9", "table10"} <= before
    (out / "notes_of_mine.csv").write_text("kept\n")  # a file the report did not write is never touched
    cut = GeoHintAggregator()
    cut.add_many(r for r in rows if r.condition in ("baseline", "forced"))
    after = {t.name for t in write_report(cut, out, n_flips=50, n_splits=4, n_boot=0, figures=False)}
    assert not {"table8", "table9", "table10", "table11"} & after
    on_disk = {p.stem for p in out.glob("*.csv")} - {"missing", "notes_of_mine"}
    assert on_disk == after, sorted(on_disk - after)
    assert (out / "notes_of_mine.csv").read_text() == "kept\n"
    # the list the report cleans by names every table it can build
    from geoagent.report.geohint import REPORT_TABLE_NAMES
    assert before <= set(REPORT_TABLE_NAMES)


# --- two [[models]] entries asking identical requests ----------------------------------------------------------


def _twin_cfg(rel, names, **second):
    from geoagent.config import config_from_dict

    def entry(name, **kw):
        return {"name": name, "provider": "openai", "model": "sandbox-gpt", "base_url": "http://openai.sandbox.invalid/v1",
                "max_output_tokens": 300, **kw}
    return config_from_dict({
        "campaign": {"name": "adv-twins", "kind": "geoverify", "seed": 1}, "budget": {"cap_usd": 1.0},
        "models": [entry(names[0]), entry(names[1], **second)],
        "geoverify": {"release_dir": str(rel)},
    })


def test_two_geoverify_models_asking_identical_requests_are_refused(release_dir, tmp_path, monkeypatch):
    """Attack: two ``[[models]]`` entries that differ only in name (e.g. "GPT" and "gpt", names differing only in
    case) and call one model with the same parameters. Their requests have one request key, so one answer is
    stored for both; the report counts one answer per model request, so the second entry's column vanished from
    the campaign's report (a walkthrough: "gpt-b" absent, 170 answers "left out of scoring"), while the live
    report, which keeps the first answer to arrive, showed it with some trials: the live and the final report
    disagreed. The plan refuses such twins, naming both, as the config refuses twins that differ only in
    base_url; entries that differ in a parameter (a seed) ask their own requests and plan."""
    from geoagent.geoverify.plan import plan_campaign

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    with pytest.raises(ValueError, match="'GPT'.*'gpt'|'gpt'.*'GPT'"):
        plan_campaign(_twin_cfg(release_dir, ("GPT", "gpt")), store_data=False)
    plan = plan_campaign(_twin_cfg(release_dir, ("GPT", "gpt"), seed=7), store_data=False)
    assert {p["model"] for _, p in plan.messages} == {"GPT", "gpt"}


def test_two_geohint_models_asking_identical_requests_are_refused():
    """Attack: the same twins in a GeoHint campaign. GeoHint counts every planned task's answer, so the one
    stored answer per request was counted under both names: every pooled statistic ("All" rows, the paired
    tables, the regimes' pooled no-context hit rate) counted each answer twice, as if a second model had given
    the same answers. The plan refuses them, as GeoVerify's does; a seed makes them two requests."""
    from geoagent.config import config_from_dict
    from geoagent.geohint.stages import plan_from_config

    def cfg(**second):
        def entry(name, **kw):
            return {"name": name, "provider": "simulated", "model": "sim-1", **kw}
        return config_from_dict({"campaign": {"name": "adv-twins-gh", "kind": "geohint", "seed": 1,
                                              "contact": "adv@example.org"},
                                 "budget": {"cap_usd": 1.0}, "models": [entry("Sim"), entry("sim", **second)],
                                 "geohint": {}})

    with pytest.raises(ValueError, match="'Sim'.*'sim'"):
        plan_from_config(cfg(), {}, [], {})
    messages, _ = plan_from_config(cfg(seed=3), {}, [], {})
    assert messages == []


# --- a stored answer re-scored differently while the live aggregator runs (a re-parse) ------------------------


def test_a_live_geoverify_aggregator_follows_a_stored_row_rescored_differently(tmp_path):
    """Attack: a parse failure is stored and counted; later its answer is parsed again and scored anew (the
    queues were lost and rebuilt, so the stored answers went through the parser again, now one that reads
    them): the scorer overwrites the stored row with the parsed verdict and sends it on. The live aggregator
    had the key counted, so it took the new row for a redelivery and kept the failure, while the store (and the
    campaign's report built from it) held the verdict: the live report disagreed with a recount from the store."""
    from geoagent.geoverify import stages
    from geoagent.geoverify.campaign import aggregate_from_store
    from geoagent.geoverify.stages import GeoVerifyAggregatorStage, ScoredScope

    rows = [_scored(i, None) for i in range(3)] + [_scored(10 + i, "yes") for i in range(3)]
    reparsed = [_scored(i, "yes") for i in range(3)]
    started_with: list[int] = []
    # the re-scored rows, and a plain redelivery of a counted one
    stage, state = _run_live_stage(
        tmp_path, GeoVerifyAggregatorStage(report_interval_s=0), stages, rows, [*reparsed, rows[3]],
        on_start=lambda st: started_with.append(st.agg.scores()["m"].n_parse_failures))
    try:
        assert started_with == [3]
        want = aggregate_from_store(state.store, ScoredScope({k for k, _ in rows})).scores()["m"]
        got = stage.agg.scores()["m"]
        assert (want.n_parse_failures, want.n_signal, want.n_hits) == (0, 6, 6)
        assert (got.n_parse_failures, got.n_signal, got.n_hits) == (0, 6, 6)
        assert stage.agg.parse_failures() == []
    finally:
        state.close()


def test_a_live_geohint_aggregator_follows_a_stored_row_rescored_differently(tmp_path):
    """Attack: the GeoHint form: a counted answer is scored anew with another outcome (parsed or geocoded again
    after the queues were rebuilt: a miss is now a hit) and the new row overwrites the stored one. The live
    aggregator kept the old outcome (its key was counted: "a redelivery"); it must equal the store's recount."""
    from geoagent.geohint import stages
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.result import GeoHintResult
    from geoagent.geohint.stages import GeoHintAggregatorStage, scored_scope

    rows = [_gh_res(i, False) for i in range(6)]
    stage, state = _run_live_stage(tmp_path, GeoHintAggregatorStage(report_interval_s=3600, figures=False, n_boot=0),
                                   stages, rows, [_gh_res(0, True), _gh_res(1, True), rows[2]])
    try:
        want = GeoHintAggregator()
        for row in scored_scope({k for k, _ in rows}).rows(state.store):
            want.add(GeoHintResult.from_json(row))
        assert (want.select().n, want.select().hits) == (6, 2)
        assert (stage.agg.select().n, stage.agg.select().hits) == (6, 2)
    finally:
        state.close()
