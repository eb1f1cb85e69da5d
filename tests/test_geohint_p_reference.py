"""``[geohint] p_reference``: the slope tables' p-values (Tables 6-7, SEs clustered by site) from the normal
reference (default, statsmodels' default) or Student's t with G - 1 df (statsmodels ``use_t=True``), checked
against statsmodels on the release's judged answers (3 sites) and on a hand-made 4-site case; with the normal
reference and fewer than 30 sites the tables say so and give the cluster counts."""

from __future__ import annotations

import math

import numpy as np
import pytest
import statsmodels.api as sm

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.judged import import_judged
from geoagent.geohint.result import GeoHintResult
from geoagent.report import geohint as GH


def _sm_slope_p(rows, *, use_t: bool) -> tuple[float, float, int]:
    """(slope, p, clusters) of log10(err) ~ 1 + d_ref with site-clustered SEs, by statsmodels, from raw rows."""
    keep = [r for r in rows if r.has_context and r.dist_km is not None and r.dist_km > 0
            and r.error_km is not None and math.isfinite(r.error_km) and r.error_km > 0]
    X = sm.add_constant(np.array([r.dist_km for r in keep], dtype=float))
    y = np.log10([r.error_km for r in keep])
    groups = np.unique([r.site for r in keep], return_inverse=True)[1]
    fit = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": groups}, use_t=use_t)
    return float(fit.params[1]), float(fit.pvalues[1]), len(set(groups))


@pytest.fixture(scope="module")
def judged(release_dir):
    rows, _ = import_judged(release_dir)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    return rows, agg


@pytest.mark.parametrize("p_reference", ["normal", "t"])
def test_slope_p_values_equal_statsmodels_on_the_release(judged, p_reference):
    rows, agg = judged
    cond, base = GH.default_conditions(agg)
    assert cond == "v1"
    rows = [r for r in rows if r.condition == cond]
    t6 = {r[0]: r for r in GH.table6(agg, cond, p_reference=p_reference).rows}
    t7 = {r[0]: r for r in GH.table7(agg, cond, base, p_reference=p_reference).rows}
    for label in [*agg.models, "All"]:
        sub = rows if label == "All" else [r for r in rows if r.model == label]
        slope, p, g = _sm_slope_p(sub, use_t=p_reference == "t")
        assert t6[label][2] == pytest.approx(slope, rel=1e-9)
        assert t7[label][8] == pytest.approx(slope, rel=1e-9)  # beta all
        if p_reference == "normal" and g < GH.MIN_CLUSTERS_NORMAL_P:  # not printed (3 sites); the fit's p still
            assert math.isnan(t6[label][4]) and math.isnan(t7[label][9])  # equals statsmodels
            ms = list(agg.models) if label == "All" else [label]
            got = GH._slope_cells(agg, ms, cond, False, p_reference=p_reference).slope_p
            assert got == pytest.approx(p, rel=1e-7, abs=1e-300)
            continue
        assert t6[label][4] == pytest.approx(p, rel=1e-7, abs=1e-300)
        assert t7[label][9] == pytest.approx(p, rel=1e-7, abs=1e-300)  # p all


def test_release_tables_note_the_few_clusters_under_the_normal_reference(judged):
    rows, agg = judged
    cond, base = GH.default_conditions(agg)
    counts = sorted({_sm_slope_p([r for r in rows if r.condition == cond and (m is None or r.model == m)], use_t=False)[2]
                     for m in [*agg.models, None]})
    assert counts[-1] == 3  # the judged sample holds 3 sites
    for p_ref in ("normal", "t"):
        for t in (GH.table6(agg, cond, p_reference=p_ref), GH.table7(agg, cond, base, p_reference=p_ref)):
            if p_ref == "normal":
                # 3 sites: every p is withheld (fewer than 10 clusters), so the note is that sentence alone
                assert not any(n.startswith("p: two-sided") for n in t.notes_lines())
                note = next(n for n in t.notes_lines() if n.startswith("p ") and "fewer than 10 site clusters" in n)
                assert "normal" in note and 'p_reference = "t"' in note
                assert "(here G = " in note and str(counts[-1]) in note.split("(here G = ", 1)[1].split(")")[0]
                assert "Few clusters" not in note
            else:
                note = next(n for n in t.notes_lines() if n.startswith("p: two-sided"))
                assert "Student's t with G - 1 degrees of freedom" in note and "Few clusters" not in note


def _hand_rows() -> list[GeoHintResult]:
    """4 sites x 2 models, hint distances 0.6-5.5 km, errors with a site effect (deterministic)."""
    rows = []
    rng = np.random.default_rng(11)
    for s in range(4):
        site_shift = [0.3, -0.2, 0.5, -0.4][s]
        for m in ("m-a", "m-b"):
            for i in range(6):
                d = 0.6 + 0.9 * i + 0.1 * s
                err = 10 ** (-0.8 + 0.12 * d + site_shift + 0.2 * rng.standard_normal())
                rows.append(GeoHintResult(
                    key=f"{s}|{m}|{i}", site=f"site{s}", image_id=f"im{s}", model=m, condition="forced",
                    schema="forced", ref_qid=f"Q{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high", dist_km=d,
                    resolved_level="area", error_km=err, hit=err < 1,
                ))
    return rows


def test_hand_made_four_sites_both_references_match_statsmodels_and_t_is_wider():
    rows = _hand_rows()
    agg = GeoHintAggregator()
    agg.add_many(rows)
    res = {}
    for p_ref in ("normal", "t"):
        t6 = {r[0]: r for r in GH.table6(agg, "forced", p_reference=p_ref).rows}
        t7 = {r[0]: r for r in GH.table7(agg, "forced", p_reference=p_ref).rows}
        for label in ("m-a", "m-b", "All"):
            sub = rows if label == "All" else [r for r in rows if r.model == label]
            slope, p, g = _sm_slope_p(sub, use_t=p_ref == "t")
            assert g == 4
            if p_ref == "normal":  # 4 < MIN_CLUSTERS_NORMAL_P: not printed; the fit's p equals statsmodels
                assert math.isnan(t6[label][4]) and math.isnan(t7[label][9])
                ms = ["m-a", "m-b"] if label == "All" else [label]
                assert GH._slope_cells(agg, ms, "forced", False).slope_p == pytest.approx(p, rel=1e-9)
            else:
                assert t6[label][4] == pytest.approx(p, rel=1e-9)
                assert t7[label][9] == pytest.approx(p, rel=1e-9)
            res[(p_ref, label)] = p
        note = GH.table7(agg, "forced", p_reference=p_ref).notes_lines()[0]
        # normal: every p withheld at 4 clusters, so the note is only that sentence (no "set p_reference" lead-in)
        assert "Few clusters" not in note
        assert note.startswith(f"p is {GH.DASH} for a fit on fewer than 10 site clusters (here G = 4)") == (
            p_ref == "normal"), note
    # t with 3 df is far wider than the normal reference at 4 clusters
    assert all(res[("t", lab)] > res[("normal", lab)] for lab in ("m-a", "m-b", "All"))


def test_report_header_names_the_reference_and_bad_values_are_refused(tmp_path):
    agg = GeoHintAggregator()
    agg.add_many(_hand_rows())
    GH.write_report(agg, tmp_path / "t", n_flips=10, n_splits=2, figures=False, p_reference="t")
    md = (tmp_path / "t" / "report.md").read_text(encoding="utf-8")
    assert "Slope p-values (Tables 6-7): t reference (Student's t with G - 1 df, G = site clusters)." in md
    GH.write_report(agg, tmp_path / "n", n_flips=10, n_splits=2, figures=False)
    assert "Slope p-values (Tables 6-7): normal reference (statsmodels' default)." in (tmp_path / "n" / "report.md").read_text(encoding="utf-8")
    with pytest.raises(ValueError, match="p_reference must be one of"):
        GH.table6(agg, "forced", p_reference="z")


def test_config_key_is_validated_and_defaults_to_normal():
    from geoagent.campaigns import register_all_sections
    from geoagent.config import ConfigError, config_from_dict
    from geoagent.geohint.campaign import GeoHintCampaign, settings_of

    register_all_sections()
    base = {"campaign": {"name": "x", "kind": "geohint", "contact": "ops@example.org"}, "budget": {"cap_usd": 0.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}]}
    assert settings_of(config_from_dict(base)).p_reference == "normal"
    cfg = config_from_dict({**base, "geohint": {"p_reference": "t"}})
    assert GeoHintCampaign().manifest_extra(cfg) == {"echo_rule": "name", "p_reference": "t", "regime_threshold": 0.5}
    with pytest.raises(ConfigError, match=r"c\.toml: geohint\.p_reference: expected one of 'normal' or 't', got 'students'"):
        config_from_dict({**base, "geohint": {"p_reference": "students"}}, source="c.toml")


def test_no_few_clusters_note_from_30_sites_on():
    assert "Few clusters" not in GH.p_reference_note("normal", [30, 41])
    assert "rest on 29 site clusters" in GH.p_reference_note("normal", [29, 41])
    assert "rest on 2 to 29 site clusters" in GH.p_reference_note("normal", [29, 2, 100])
    assert "Few clusters" not in GH.p_reference_note("t", [3])


def test_every_p_withheld_prints_only_the_withheld_sentence():
    """Normal reference, every fit on fewer than 10 site clusters: no 'p: two-sided ... set p_reference' lead-in
    for p-values the table does not print; only the withheld sentence."""
    for se, lead in ((True, "p and SE are"), (False, "p is")):
        note = GH.p_reference_note("normal", [3, 4], [3, 4], se=se)
        assert note.startswith(f"{lead} {GH.DASH} for a fit on fewer than 10 site clusters (here G = 3, 4)"), note
        assert "two-sided" not in note and "Few clusters" not in note and "too small;" not in note
    # some p printed: the reference and the few-clusters warning stay, then the withheld sentence
    note = GH.p_reference_note("normal", [3, 12], [3], se=True)
    assert note.startswith("p: two-sided, from the normal distribution") and "Few clusters" in note
    assert "p and SE are" in note and "(here G = 3)" in note
