"""The pooled column beside the models' own d', and a read-out no control arm checked (stats40 #1, #3).

#1: the pooled column sums the models' counts (as the release's script does); two models with the same d' and
opposite criteria pool to a lower d' (Macmillan & Creelman 2005), so the report sets the trial-weighted mean of the
models' own d' beside it. #3: Sec. 5.4 reads the controls first; a verdict with neither control arm is marked.
"""

from __future__ import annotations

import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import norm

from geoagent.report.geoverify import pooled_mean_text, readout_text, render_markdown
from geoagent.scoring import sdt

BANDS = ("0.15-0.3km", "3.0-6.0km")


def _rows(model, zh, zf_near, zf_far, n=300, controls=False):
    rows = []
    for i in range(n):
        s = f"s{i % 30}"
        rows.append(dict(model=model, site=s, arm="main", band="signal", truth="yes",
                         verdict="yes" if i < round(norm.cdf(zh) * n) else "no"))
        for b, zf in zip(BANDS, (zf_near, zf_far)):
            rows.append(dict(model=model, site=s, arm="main", band=b, truth="no",
                             verdict="yes" if i < round(norm.cdf(zf) * n) else "no"))
    if controls:
        rows += [dict(model=model, site="s0", arm="ctrl_mismatch", band=BANDS[0], truth="no", verdict="no")] * 10
        rows += [dict(model=model, site="s0", arm="ctrl_noimage", band=BANDS[0], truth="no", verdict="no")] * 10
    return rows


def _scores(rows):
    df = pl.DataFrame(rows, schema={k: pl.Utf8 for k in ("model", "site", "arm", "band", "truth", "verdict")})
    return sdt.score(sdt.cells_from_rows(df), bands=BANDS)


def test_the_models_own_dprime_beside_the_pooled_column():
    scores = _scores(_rows("liberal", 1.2, 0.9, -0.6) + _rows("strict", -0.6, -0.9, -2.4))
    own = {m: (scores[m].bands[0].d_prime, scores[m].bands[1].d_prime) for m in ("liberal", "strict")}
    pooled = scores[sdt.POOLED]
    # both models discriminate alike, with opposite criteria: the summed counts fall below either model
    assert all(p < min(o[i] for o in own.values()) for i, p in enumerate((pooled.bands[0].d_prime,
                                                                         pooled.bands[1].d_prime)))
    for i in (0, -1):
        weights = [scores[m].n_signal + scores[m].bands[i].n for m in own]
        expect = np.average([scores[m].bands[i].d_prime for m in own], weights=weights)
        got, used = sdt.mean_model_dprime(scores, i)
        assert used == 2 and got == pytest.approx(expect, abs=1e-12)
    assert sdt.mean_model_dprime(scores, -1)[0] > sdt.INFORMATIVE_FAR_DPRIME > pooled.bands[1].d_prime
    text = pooled_mean_text(scores)
    near, far = sdt.mean_model_dprime(scores, 0)[0], sdt.mean_model_dprime(scores, -1)[0]
    assert text == (f"; the models' own d', weighted by trials: nearest {near:.2f}, farthest {far:.2f} (summed counts "
                    "lower d' where the models' criteria differ)")
    md = render_markdown(scores)
    assert "Pooled sums the models' counts" in md and f"farthest {far:.2f}." in md
    # one model: no pooled note (its pooled column repeats it)
    one = _scores(_rows("liberal", 1.2, 0.9, -0.6))
    assert pooled_mean_text(one) == "" and "Pooled sums" not in render_markdown(one)
    assert sdt.mean_model_dprime({}, 0)[0] != sdt.mean_model_dprime({}, 0)[0]  # NaN without models


def test_a_readout_without_controls_is_marked_unchecked():
    r = sdt.readout(0.3, 1.8, 0.30, None, None)
    assert r.verdict == "informative" and r.unchecked
    assert sdt.readout(0.3, 1.8, 0.30, 0.05, None).unchecked is False  # one arm ran
    assert sdt.readout(0.3, 1.8, 0.30, math.nan, math.nan, unparsed_mismatch=3).unchecked  # ran, no F
    assert sdt.readout(0.3, 1.8, 0.30, 0.5, None).verdict == "invalid"  # a control that ran decides first
    scores = _scores(_rows("m", 1.2, 0.9, -0.6))
    assert readout_text(scores["m"]).endswith(sdt.UNCHECKED_MARK)
    checked = _scores(_rows("m", 1.2, 0.9, -0.6, controls=True))
    assert sdt.UNCHECKED_MARK not in readout_text(checked["m"])
    assert f"- m: {readout_text(scores['m'])} (" in render_markdown(scores)
