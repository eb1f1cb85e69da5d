"""The GeoHint report is thread-safe with respect to warnings (issue 4 point 6; live report in a worker thread).

``warnings.catch_warnings`` swaps the process-wide filter list, so the live report (written in a worker
thread by ``geoagent/report/live.py``) must not use it: a main-thread ``catch_warnings`` interleaved with
it can restore the wrong filters for the whole process. The one warning the report used to silence
(cluster-robust SE with fewer than 2 sites) is switched off at its source (``warn_few_clusters=False``).
"""

from __future__ import annotations

import math
import sys
import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from _geohint_synth import synth_results

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report.geohint import table6
from geoagent.scoring.regression import ClusterOLS


def test_one_cluster_fit_warns_only_when_asked():
    rng = np.random.default_rng(4)
    d = rng.uniform(0.5, 6.0, 12)
    X = np.column_stack([np.ones_like(d), d])
    y = 0.3 + 0.1 * d + rng.normal(0, 0.05, d.size)
    ols = ClusterOLS(k=2)
    ols.add("only-site", X, y)
    with pytest.warns(RuntimeWarning, match="at least 2 clusters"):
        ols.fit()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails the test
        r = ols.fit(warn_few_clusters=False)
    np.testing.assert_allclose(r.params, np.linalg.lstsq(X, y, rcond=None)[0], rtol=1e-10)
    assert np.isnan(r.bse).all() and np.isnan(r.pvalues).all()


def test_report_in_a_worker_thread_never_enters_catch_warnings():
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=3, n_sites=1))  # one site: every slope has NaN SE
    entered: list[str] = []
    enter_code = warnings.catch_warnings.__enter__.__code__

    def watch(frame, event, arg):
        if event == "call" and frame.f_code is enter_code:
            entered.append(frame.f_back.f_code.co_filename if frame.f_back else "?")

    def write():
        sys.setprofile(watch)  # this thread only, like the live report's thread
        try:
            return table6(agg)
        finally:
            sys.setprofile(None)

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a warning escaping from the report thread fails the test
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="GeoHint-report") as pool:
            t = pool.submit(write).result()
    assert entered == []
    all_row = t.rows[-1]
    assert all_row[0] == "All" and all_row[1] > 0
    assert math.isfinite(all_row[2]) and math.isnan(all_row[3])  # slope shown, SE a dash (NaN)
