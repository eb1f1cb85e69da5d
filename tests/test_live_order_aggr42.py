"""The live GeoHint report equals a recompute of the same rows to the last digit, whatever order the rows arrive in
(aggr42 #5).

Before: Table 5's geometric means summed logarithms, and the slope fits of Tables 6-7 summed ``X'X``, ``X'y`` and
``y'y`` per site, as floats in arrival order (and each site's sums about its first answer), so the live aggregator
(rows as the queue delivers them) wrote ``table5.csv``-``table7.csv`` whose floats differed in the last one or two
digits from ``python -m geoagent.geohint.judged`` (file order). After: those sums are exact
(:mod:`geoagent.scoring.exact`) and rounded once, so every CSV is byte-identical.
"""

from __future__ import annotations

import copy
import math
import pickle
import random
from fractions import Fraction

import anyio
import numpy as np
import pytest
from _geohint_synth import synth_results

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.judged import import_judged, replicate_report
from geoagent.geohint.stages import GeoHintAggregatorStage
from geoagent.report.geohint import write_report
from geoagent.runtime.stage import StageContext, Task
from geoagent.scoring.exact import ExactSum
from geoagent.scoring.geohint import FINE_LEVELS
from geoagent.scoring.regression import ClusterOLS

KW = dict(n_flips=200, n_splits=5, n_boot=20, figures=False)


def _live_report(rows, out_dir, *, shuffle_seed: int) -> GeoHintAggregatorStage:
    """Feed ``rows`` shuffled to a live GeoHint aggregator stage, flushing (live rewrites) as they come; stop it
    (the final report) and return it."""
    order = list(rows)
    random.Random(shuffle_seed).shuffle(order)
    stage = GeoHintAggregatorStage(report_interval_s=0.0, **KW)
    ctx = StageContext("order-test", {"report_dir": out_dir})

    async def main():
        await stage.start(ctx)
        for i, r in enumerate(order):
            await stage.handle(Task(r.key, r.to_json(), 0, "l"), ctx)
            if i % 50 == 0:
                await stage.flush(ctx)
        await stage.live.wait()
        await stage.stop(ctx)

    anyio.run(main)
    return stage


def _csvs(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.glob("*.csv"))}


def test_live_report_of_shuffled_release_rows_equals_the_judged_recompute_byte_for_byte(release_dir, tmp_path):
    # the recompute: the command's own function, rows in file order
    replicate_report(release_dir, tmp_path / "ref", **KW)
    ref = _csvs(tmp_path / "ref")
    assert {"table5.csv", "table6.csv", "table7.csv"} <= ref.keys()
    rows, _ = import_judged(release_dir)
    for seed in (1, 2):
        _live_report(rows, tmp_path / f"live{seed}", shuffle_seed=seed)
        live = _csvs(tmp_path / f"live{seed}")
        assert live.keys() == ref.keys()
        for name in ref:
            assert live[name] == ref[name], f"{name} (shuffle {seed}) differs from the recompute"


def test_tables_5_to_7_do_not_depend_on_arrival_order_on_a_synthetic_campaign(tmp_path):
    # more fine answers and sites than the release sample: before the fix table5-7.csv differed in every shuffle
    rows = synth_results(seed=3, n_sites=8)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    write_report(agg, tmp_path / "ref", **KW)
    ref = _csvs(tmp_path / "ref")
    stage = _live_report(rows, tmp_path / "live", shuffle_seed=7)
    assert len(stage.agg.keys) == len(rows)
    live = _csvs(tmp_path / "live")
    assert live.keys() == ref.keys()
    for name in ("table5.csv", "table6.csv", "table7.csv"):  # the tables with float sums, first
        assert live[name] == ref[name], name
    assert live == ref
    # the statistics themselves are those of a float sum up to the last digits: Table 5's geometric mean from the
    # rows directly
    cell = agg.select(condition="forced")
    logs = [math.log(r.dist_km) for r in rows if r.condition == "forced" and r.resolved_level in FINE_LEVELS
            and r.error_km is not None and r.dist_km and r.error_km > 0]
    assert cell.fine_dref_n == len(logs) > 100
    assert cell.geo_mean_dref_km == math.exp(math.fsum(logs) / len(logs))
    assert cell.geo_mean_dref_km == pytest.approx(math.exp(sum(logs) / len(logs)), rel=1e-13)


def test_exact_sum_is_the_rounded_exact_sum_in_any_order():
    rng = random.Random(0)
    for _ in range(200):
        xs = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in range(rng.randint(1, 40))]
        ys = [rng.uniform(-1, 1) * 10.0 ** rng.randint(-30, 30) for _ in xs]
        want = float(sum((Fraction(x) * Fraction(y) for x, y in zip(xs, ys)), Fraction(0)))
        for _ in range(3):
            pairs = list(zip(xs, ys))
            rng.shuffle(pairs)
            s, p = ExactSum(), ExactSum()
            for x, y in pairs:
                s.add(x)
                p.add_product(x, y)
            assert float(s) == math.fsum(xs)
            assert float(p) == want
    s = ExactSum()
    for v in (1e16, 1.0, -1e16):  # a float sum in this order: 0.0
        s.add(v)
    assert float(s) == 1.0
    assert float(ExactSum(1e308) + 1e308) == math.inf and float(ExactSum(math.inf) + 1.0) == math.inf
    assert math.isnan(float(ExactSum(math.inf) + ExactSum(-math.inf)))


def test_cluster_fit_is_identical_whatever_the_order_of_rows_and_clusters():
    rng = np.random.default_rng(4)
    rows = [(f"s{int(rng.integers(12))}", float(rng.uniform(0.5, 40)), float(rng.normal(0.5, 0.7))) for _ in range(600)]

    def fit(order):
        o = ClusterOLS(k=2)
        for s, d, y in order:
            o.add_row(s, (1.0, d), y)
        return o.fit()

    a = fit(rows)
    shuffled = list(rows)
    random.Random(3).shuffle(shuffled)
    b = fit(shuffled)
    for f in ("params", "bse", "pvalues", "cov", "bse_nonrobust"):
        assert np.array_equal(getattr(a, f), getattr(b, f)), f
    # merged in another order (as the aggregator pools models), and fitted on a cluster list in another order
    halves = [ClusterOLS(k=2), ClusterOLS(k=2)]
    for i, (s, d, y) in enumerate(shuffled):
        halves[i % 2].add_row(s, (1.0, d), y)
    merged = ClusterOLS(k=2)
    merged.merge(halves[1])
    merged.merge(halves[0])
    sites = sorted({s for s, _, _ in rows}, reverse=True)
    c = merged.fit(sites)
    assert np.array_equal(a.params, c.params) and np.array_equal(a.bse, c.bse)


def test_exact_sum_takes_numpy_scalars_as_the_numbers_they_are():
    """review43d #3: ``np.float32('inf')`` raised OverflowError (the finiteness test asked ``isinstance(x, float)``);
    now any non-finite number is summed apart as a float's is, and numpy's finite scalars exactly."""
    for bad in (np.float32("inf"), np.float16("-inf"), np.longdouble("inf")):
        s, f = ExactSum(1.0), ExactSum(1.0)
        s.add(bad)
        f.add(float(bad))
        assert float(s) == float(f) and math.isinf(float(s))
        p = ExactSum()
        p.add_product(bad, 2.0)
        assert float(p) == float(bad) * 2.0
    s = ExactSum()
    s.add(np.float32("nan"))
    assert math.isnan(float(s))
    s = ExactSum()
    s.add(np.float32(0.1))  # exactly the float32 value, not 0.1
    s.add(np.int64(2**62 + 1))  # exactly, not through a float (which would drop the 1)
    assert s == ExactSum(float(np.float32(0.1))) + (2**62 + 1)
    assert (s - 2**62).num != 0 and float(s - 2**62) == 1.0 + float(np.float32(0.1))


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_exact_sum_and_cluster_stats_pickle_compare_and_print(protocol):
    """review43d #3: both hold their state in slots, which protocols 0 and 1 could not pickle ("a class that defines
    __slots__ without defining __getstate__"); ClusterStats, a dataclass before, had lost __eq__ and __repr__."""
    s = ExactSum(1e16)
    s.add(1.0)
    s.add(1e-300)
    back = pickle.loads(pickle.dumps(s, protocol))
    assert back == s and (back.num, back.exp, back.special) == (s.num, s.exp, s.special)
    inf = ExactSum(math.inf)
    assert float(pickle.loads(pickle.dumps(inf, protocol))) == math.inf

    o = ClusterOLS(k=2)
    for i in range(5):
        o.add_row("site", (1.0, 0.5 + i), 0.1 * i)
    st = o.clusters["site"]
    back = pickle.loads(pickle.dumps(st, protocol))
    assert back == st and back is not st and back.n == 5 and back.ref == st.ref
    assert np.array_equal(back.xtx, st.xtx) and np.array_equal(back.xty, st.xty) and back.yty == st.yty
    assert copy.deepcopy(st) == st == st.copy()
    more = st.copy()
    more.add_row([1.0, 2.0], 0.3)
    assert more != st
    assert repr(st).startswith("ClusterStats(xtx=array([[") and f"n=5, ref={st.ref!r})" in repr(st)
