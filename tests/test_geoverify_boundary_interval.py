"""A rate of 0 (or 1) got a zero-width percentile-bootstrap interval (reviewer finding, session 9:
``control: gray field 0.0 % [0.0, 0.0] (0/52)``): with no events every site resample is 0. Such a rate now gets
the Clopper-Pearson exact interval of its pooled count, marked and named under the table."""

import csv
import io

import polars as pl
import pytest
from scipy.stats import binomtest

from geoagent.report.geoverify import BOUNDARY_MARK, render_csv, render_markdown
from geoagent.scoring.sdt import score

BANDS = ("0.15-0.3km", "0.3-0.7km", "0.7-1.5km", "1.5-3.0km", "3.0-6.0km")


def _cells() -> pl.DataFrame:
    rows = []
    for site in ("s1", "s2", "s3", "s4", "s5"):
        rows.append(("m", site, "main", "signal", "yes", 8, 5, 0))
        rows += [("m", site, "main", b, "no", 3, 7, 0) for b in BANDS]
        rows.append(("m", site, "ctrl_mismatch", "0.3-0.7km", "no", 2, 11, 0))
        rows.append(("m", site, "ctrl_noimage", "0.3-0.7km", "no", 0, 13, 0))  # 0/65 pooled (5 sites: the fewest with an interval)
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"],
                        orient="row")


def test_zero_rate_gets_clopper_pearson_interval():
    sc = score(_cells(), n_boot=100, seed=0, pooled=False)["m"]
    lo, hi = sc.ci["F[ctrl_noimage]"]
    want = binomtest(0, 65).proportion_ci(0.95, method="exact")
    assert (lo, hi) == pytest.approx((want.low, want.high))
    assert hi > 0.05 and "F[ctrl_noimage]" in sc.ci_exact
    assert "F[ctrl_mismatch]" not in sc.ci_exact  # 10/65: the site bootstrap as before
    md = render_markdown({"m": sc})
    assert f"0.0 % [0.0, {100 * want.high:.1f}]{BOUNDARY_MARK} (0/65)" in md
    assert "[0.0, 0.0]" not in md
    assert "Clopper" in md and "65" in md
    rows = list(csv.reader(io.StringIO(render_csv({"m": sc}))))
    row = {r[1]: dict(zip(rows[0], r)) for r in rows[1:]}["control: gray field"]
    assert float(row["m_hi"]) == pytest.approx(want.high) and "Clopper-Pearson" in row["m_text"]
