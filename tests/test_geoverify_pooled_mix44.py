"""The pooled GeoVerify column names a decoy band whose F counts other models' trials than its H (review44c #3):
with one model's decoys missing from a band, the pooled d' of that band set the other models' F against every
model's H, and the pooled delta_1 could fall there for that reason alone, without a word. Hand-made counts; the
pooled d' is checked with scipy."""

from __future__ import annotations

import polars as pl
from scipy.stats import norm

from geoagent.data.model import BAND_SIGNAL
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

B0, B1 = "0.15-0.3km", "0.3-0.7km"


def _scores(with_b1_for_c: bool):
    rows = []
    for site in ("s1", "s2", "s3"):
        for m in ("a", "b", "c"):
            rows.append((m, site, "main", BAND_SIGNAL, "yes", 2, 1, 0))
            rows.append((m, site, "main", B0, "no", 1, 2, 0))
            if m != "c" or with_b1_for_c:
                rows.append((m, site, "main", B1, "no", 0, 3, 0))
    cells = pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")
    return sdt.score(cells, bands=(B0, B1))


def _z(k: int, n: int) -> float:
    return float(norm.ppf((k + 0.5) / (n + 1)))


def test_a_band_missing_one_models_decoys_is_named_in_every_output():
    scores = _scores(with_b1_for_c=False)
    pooled = scores[sdt.POOLED]
    # the arithmetic is the summed counts' (unchanged): H 18/27 of a, b and c, F[0.3-0.7] 0/18 of a and b only
    assert pooled.band(B1).n == 18
    assert abs(pooled.band(B1).d_prime - (_z(18, 27) - _z(0, 18))) < 1e-12
    lines = R.pooled_mix_lines(scores)
    assert lines == ["Pooled, 0.3\u20130.7 km: its F counts decoy trials of a, b and H counts signal trials of a, b, c, "
                     "so this band's pooled d' (and a pooled delta_1 decided there) sets different models' rates "
                     "against each other; read the models' own columns."]
    assert lines[0] in R.render_markdown(scores)
    assert lines[0] in R.render_terminal(scores)


def test_every_band_from_the_same_models_says_nothing():
    scores = _scores(with_b1_for_c=True)
    assert R.pooled_mix_lines(scores) == []
    assert "Pooled, " not in R.render_markdown(scores)


def test_one_model_has_no_pooled_warning():
    rows = [("a", "s1", "main", BAND_SIGNAL, "yes", 2, 1, 0), ("a", "s1", "main", B0, "no", 1, 2, 0)]
    scores = sdt.score(pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row"), bands=(B0, B1))
    assert R.pooled_mix_lines(scores) == []
