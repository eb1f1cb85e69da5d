"""``[geohint] regime_threshold`` is used by every regime split of the GeoHint report (issue: it did nothing).

Three hand-made sites, one model, four no-context answers each and four near-band answers each:

=====  ==================  ======================
site   no-context hits     near-band hits
=====  ==================  ======================
s1     3 of 4 (75 %)       4 of 4
s2     2 of 4 (50 %)       3 of 4
s3     1 of 4 (25 %)       1 of 4
=====  ==================  ======================

At 0.5 (the paper's): legible {s1, s2}, illegible {s3}. At 0.6: legible {s1}, illegible {s2, s3}. At 0.2:
all three legible. Table 3's split-half correction is checked against an exact enumeration of every way to
split the three sites' answers into halves (6 ** 3 equally likely joint splits).
"""

from __future__ import annotations

import csv
import io
import itertools
import math

import numpy as np
import pytest
from _geohint_synth import hand_rows

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH
from geoagent.textfmt import count_text

BASELINE = {"s1": [1, 1, 1, 0], "s2": [1, 1, 0, 0], "s3": [1, 0, 0, 0]}
NEAR = {"s1": [1, 1, 1, 1], "s2": [1, 1, 1, 0], "s3": [1, 0, 0, 0]}


def _rows() -> list[GeoHintResult]:
    return hand_rows(BASELINE, NEAR)


def _agg(threshold: float | None = None) -> GeoHintAggregator:
    agg = GeoHintAggregator() if threshold is None else GeoHintAggregator(regime_threshold=threshold)
    agg.add_many(_rows())
    return agg


def _rate(sites, table) -> float:
    return sum(sum(table[s]) for s in sites) / sum(len(table[s]) for s in sites)


HAND = {  # threshold -> legible sites, by hand from the table in the module docstring
    0.5: {"s1", "s2"},
    0.6: {"s1"},
    0.2: {"s1", "s2", "s3"},
}


@pytest.mark.parametrize("threshold", sorted(HAND))
def test_threshold_moves_sites_between_regimes_as_counted_by_hand(threshold):
    agg = _agg(threshold)
    legible = HAND[threshold]
    illegible = set(BASELINE) - legible
    assert agg.regimes() == {s: ("legible" if s in legible else "illegible") for s in BASELINE}
    t2 = GH.table2(agg, "forced", "baseline")
    assert f"({100 * threshold:g} % no-context threshold)" in t2.title
    by_regime = {r[0].split(" (")[0]: r for r in t2.rows}
    assert by_regime["legible"][0] == f"legible ({count_text(len(legible), 'site')})"
    assert by_regime["illegible"][0] == f"illegible ({count_text(len(illegible), 'site')})"
    assert by_regime["legible"][3] == pytest.approx(_rate(legible, BASELINE))  # No context
    assert by_regime["legible"][4] == pytest.approx(_rate(legible, NEAR))  # With context
    if illegible:
        assert by_regime["illegible"][3] == pytest.approx(_rate(illegible, BASELINE))
    else:
        assert math.isnan(by_regime["illegible"][3])
    # Table 3, uncorrected: near-band minus no-context hit rate over the hand-counted sites, in points
    t3 = {r[0]: r for r in GH.table3(agg, "forced", "baseline", n_splits=5).rows}
    assert t3["legible"][2] == pytest.approx(100 * (_rate(legible, NEAR) - _rate(legible, BASELINE)))
    if illegible:
        assert t3["illegible"][2] == pytest.approx(100 * (_rate(illegible, NEAR) - _rate(illegible, BASELINE)))
    # Table 5 and the paired tables take their site sets from the same split
    t5 = GH.table5(agg, "forced", "baseline")
    assert {r[0] for r in t5.rows} >= {f"legible ({count_text(len(legible), 'site')})", f"illegible ({count_text(len(illegible), 'site')})"}


def _exact_corrected(threshold: float) -> dict[str, tuple[float, float]]:
    """regime -> (mean, SD) of the split-half corrected difference (points) over every joint split of the
    three sites into halves of 2 + 2 answers (each of the C(4, 2) = 6 halves equally likely), counting only
    splits where the regime has sites (as the implementation does)."""
    sites = sorted(BASELINE)
    halves = {s: list(itertools.combinations(range(4), 2)) for s in sites}
    vals: dict[str, list[float]] = {"legible": [], "illegible": []}
    for combo in itertools.product(*(halves[s] for s in sites)):
        assign, b_rate = {}, {}
        for s, a_idx in zip(sites, combo):
            a = [BASELINE[s][i] for i in a_idx]
            b = [BASELINE[s][i] for i in range(4) if i not in a_idx]
            assign[s] = "legible" if sum(a) / len(a) >= threshold else "illegible"
            b_rate[s] = b
        for regime in vals:
            members = [s for s in sites if assign[s] == regime]
            if members:
                near = _rate(members, NEAR)
                nc = sum(sum(b_rate[s]) for s in members) / sum(len(b_rate[s]) for s in members)
                vals[regime].append(100 * (near - nc))
    return {r: (float(np.mean(v)), float(np.std(v))) for r, v in vals.items()}


def test_split_half_correction_uses_the_threshold():
    n_splits = 3000
    got = {}
    for threshold in (0.5, 0.75):
        exact = _exact_corrected(threshold)
        t3 = {r[0]: r for r in GH.table3(_agg(threshold), "forced", "baseline", n_splits=n_splits, seed=3).rows}
        got[threshold] = t3["legible"][3]
        for regime, (mean, sd) in exact.items():
            assert t3[regime][3] == pytest.approx(mean, abs=5 * sd / math.sqrt(n_splits) + 1e-9), (threshold, regime)
    # the two thresholds give clearly different corrections (so the threshold really reaches the splits)
    e5, e75 = _exact_corrected(0.5)["legible"], _exact_corrected(0.75)["legible"]
    assert abs(e5[0] - e75[0]) > 5 * (e5[1] + e75[1]) / math.sqrt(n_splits)
    assert got[0.5] != pytest.approx(got[0.75], abs=1.0)


def test_report_names_the_threshold(tmp_path):
    agg = _agg(0.6)
    GH.write_report(agg, tmp_path, n_flips=10, n_splits=5, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    header = md.split("### ")[0]
    # one model (m): its own no-context rate, nothing pooled (session 19; "(all models pooled)" before)
    assert agg.models == ["m"]
    assert "Regimes: a site is legible when its no-context hit rate (model m) is at least 60 %" in header
    assert "[geohint] regime_threshold = 0.6" in header
    assert "legible at 60 % or more, illegible below." in header
    assert "legible at 50 %" not in md and "(50 % no-context threshold)" not in md
    buf = io.StringIO()
    GH.print_report(GH.build_tables(agg, n_flips=10, n_splits=5), GH.report_console(buf), regime_threshold=0.6)
    assert "legible at 60 % or more" in buf.getvalue()
    with (tmp_path / "table2.csv").open(newline="", encoding="utf-8") as fh:
        regimes = sorted({r[0] for r in list(csv.reader(fh))[1:]})
    assert regimes == ["illegible (2 sites)", "legible (1 site)"]


def test_default_is_the_papers_half_and_output_is_unchanged(tmp_path):
    from geoagent.geohint.settings import GeoHintSettings

    assert GeoHintSettings().regime_threshold == 0.5
    default, explicit = _agg(), _agg(0.5)
    assert default.regime_threshold == 0.5 and default.regimes() == explicit.regimes()
    assert default.regimes() == {"s1": "legible", "s2": "legible", "s3": "illegible"}  # s2 at exactly 50 %: legible
    a = GH.build_tables(default, n_flips=10, n_splits=20)
    b = GH.build_tables(explicit, n_flips=10, n_splits=20)
    for ta, tb in zip(a, b):
        assert (ta.title, ta.columns) == (tb.title, tb.columns)
        assert ta.to_csv() == tb.to_csv()
    assert {t.name: t for t in a}["table2"].title.startswith("Table 2: per-model results within each regime "
                                                           "(50 % no-context threshold)")
    # the legend line reads as it always has at the default
    assert ("regime: sites are split by their own no-context (baseline) hit rate: legible at 50 % or more, "
            "illegible below.") in GH.LEGEND
    assert GH.legend_for(0.5) == GH.LEGEND


def test_bad_thresholds_are_refused():
    for bad in (0.0, 1.0, -0.1, float("nan")):
        with pytest.raises(ValueError, match="regime threshold"):
            GeoHintAggregator(regime_threshold=bad)
    with pytest.raises(ValueError, match="regime threshold"):
        _agg().regimes(threshold=1.5)


def test_campaign_passes_the_configured_threshold():
    from geoagent.campaigns import register_all_sections
    from geoagent.config import ConfigError, config_from_dict
    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.geohint.stages import GeoHintAggregatorStage

    register_all_sections()
    base = {"campaign": {"name": "x", "kind": "geohint", "contact": "ops@example.org"}, "budget": {"cap_usd": 0.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}]}
    cfg = config_from_dict({**base, "geohint": {"regime_threshold": 0.3}})
    stage = next(s for s in GeoHintCampaign().stages(cfg) if isinstance(s, GeoHintAggregatorStage))
    assert stage.agg.regime_threshold == 0.3
    assert GeoHintCampaign().manifest_extra(cfg)["regime_threshold"] == 0.3
    with pytest.raises(ConfigError, match="regime_threshold"):
        config_from_dict({**base, "geohint": {"regime_threshold": 1.0}}, source="c.toml")
