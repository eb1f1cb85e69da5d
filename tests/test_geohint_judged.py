"""Replication from a release: judged answers import as scored results; hit, echo, rates, ratios and
slopes agree with independent computations on the release rows (issue 4 points 5, 7)."""

from __future__ import annotations

import csv
import math
from collections import defaultdict

import numpy as np
import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.judged import image_id_from_path, iter_judged, parse_context_label
from geoagent.geohint.judged import import_judged
from geoagent.data.importer import ImportReport
from geoagent.report.geohint import table1, table4, table5, table6

sm = pytest.importorskip("statsmodels.api")

BAND = {"05_15km": "0.5-1.5km", "15_30km": "1.5-3.0km", "30_60km": "3.0-6.0km"}


def _raw(release_dir):
    with (release_dir / "answers_judged_sample.csv").open(encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _dist(release_dir):
    out = {}
    for path in (release_dir / "ladders").glob("*.csv"):
        site = path.name.split("_ladder")[0]
        with path.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                out[(site, row["qid"])] = float(row["dist_km"])
    return out


def test_hit_reproduces_release_column_for_every_row(release_dir):
    rows, report = import_judged(release_dir)
    raw = _raw(release_dir)
    assert len(rows) == len(raw) == 966
    for r, src in zip(rows, raw):
        assert r.hit == (src["hit"] == "True"), (src["error_km"], src["resolved_level"], src["hit"])
    assert sum(r.hit for r in rows) == sum(src["hit"] == "True" for src in raw)
    assert {r.resolved_level for r in rows} <= {"building", "area", "city", "none"}
    # the only issues are the two QIDs absent from tokyo_shibuya's ladder
    judged_issues = [i for i in report.issues if "answers_judged" in i.file]
    assert len(judged_issues) == 2 and all("not in the ladder" in i.reason for i in judged_issues)


def test_fields_carry_over(release_dir):
    rows, _ = import_judged(release_dir)
    src = _raw(release_dir)[0]
    r = rows[0]
    assert (r.site, r.model, r.schema, r.condition) == (src["site"], src["model"], "v1", "v1")
    assert r.image_id == "1183435175413354" and r.ref_qid == "Q1069457" and r.tier == "high" and r.band == "0.5-1.5km"
    assert r.dist_km == pytest.approx(0.89) and r.error_km == pytest.approx(0.527)
    assert (r.city, r.area, r.building) == ("Tokyo", "Shibuya", "Fire Street (Jinnan 1-chome)")
    assert r.source == "release" and r.extra["release_hit"] == "True"


def test_rates_and_ratios_match_independent_computation(release_dir):
    rows, _ = import_judged(release_dir)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    raw = _raw(release_dir)
    dist = _dist(release_dir)
    # Table 1 independently: per model hit rate overall and per band; as the release's analysis does,
    # rows whose reference point is not in the site's ladder are left out
    by = defaultdict(list)
    n_out = 0
    for src in raw:
        if (src["site"], src["context"].rsplit("_", 1)[-1]) not in dist:
            n_out += 1
            continue
        band = BAND["_".join(src["context"].split("_")[1:3])]
        hit = src["error_km"] != "" and float(src["error_km"]) < 1 and src["resolved_level"] not in {"city", ""}
        by[(src["model"], None)].append(hit)
        by[(src["model"], band)].append(hit)
    assert n_out > 0 and agg.n_without_ladder_point == n_out
    t1 = table1(agg, "v1")
    for row in t1.rows:
        model = row[0]
        assert row[1] == len(by[(model, None)])
        assert row[2] == pytest.approx(np.mean(by[(model, None)]))
        for j, band in enumerate(BAND.values()):
            assert row[3 + j] == pytest.approx(np.mean(by[(model, band)]))
    # Table 5 (all-sites block) independently: geometric means and median ratio on finer-than-city rows
    t5 = {(row[0].split(" (")[0], row[1]): row for row in table5(agg, "v1", "v1_baseline").rows}
    for band in BAND.values():
        d, e = [], []
        for src in raw:
            qid = src["context"].rsplit("_", 1)[-1]
            if BAND["_".join(src["context"].split("_")[1:3])] != band or (src["site"], qid) not in dist:
                continue
            if src["resolved_level"] in {"area", "place"} and src["error_km"] and float(src["error_km"]) > 0:
                d.append(dist[(src["site"], qid)])
                e.append(float(src["error_km"]))
        row = t5[("all sites", band)]
        assert row[2] == len(d)
        assert row[3] == pytest.approx(math.exp(np.mean(np.log(d))))
        assert row[4] == pytest.approx(math.exp(np.mean(np.log(e))))
        assert row[5] == pytest.approx(float(np.median(np.array(e) / np.array(d))))
    # Table 4 margins equal the echo rate over rows with a known reference point
    t4 = table4(agg, "v1")
    known = [r for r in rows if r.echo is not None]
    assert t4.rows[-1][-1] == pytest.approx(sum(r.echo for r in known) / len(known))


def test_release_slope_equals_statsmodels_cluster(release_dir):
    rows, _ = import_judged(release_dir)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    use = [r for r in rows if r.dist_km is not None and r.error_km is not None and r.error_km > 0]
    X = sm.add_constant(np.array([r.dist_km for r in use]))
    y = np.log10([r.error_km for r in use])
    groups = np.unique([r.site for r in use], return_inverse=True)[1]
    ref = sm.OLS(y, X).fit(cov_type="cluster", cov_kwds={"groups": groups})
    got = agg.regression(condition="v1").fit()
    assert abs(got.slope - ref.params[1]) < 1e-8
    assert abs(got.slope_se - ref.bse[1]) < 1e-8
    assert got.slope_p == pytest.approx(ref.pvalues[1], rel=1e-6)
    t6 = table6(agg, "v1")
    all_row = [row for row in t6.rows if row[0] == "All"][0]
    assert all_row[1] == len(use) and abs(all_row[2] - ref.params[1]) < 1e-8


def test_context_labels_and_paths():
    assert parse_context_label("mid_15_30km_Q616359") == ("mid", "1.5-3.0km", "Q616359")
    assert parse_context_label("none") is None
    with pytest.raises(ValueError, match="neither"):
        parse_context_label("high_Q1")
    assert image_id_from_path("streetview\\nyc_soho\\772774250092967.jpg") == "772774250092967"


def test_bad_rows_are_reported_with_line_numbers(tmp_path):
    p = tmp_path / "answers_judged.csv"
    p.write_text(
        "site,model,schema,lang,context,path,city,area,place,conf_area,conf_fine,error_km,resolved_level,resolved_label,hit\n"
        "s1,m,forced,en,none,streetview\\s1\\123.jpg,X,Y,Z,0.5,0.5,0.4,area,Y,True\n"
        "s1,m,forced,en,bogus,streetview\\s1\\124.jpg,X,Y,Z,0.5,0.5,0.4,area,Y,True\n"
        "s1,m,forced,en,none,streetview\\s1\\abc.jpg,X,Y,Z,0.5,0.5,0.4,area,Y,True\n"
        "s1,m,forced,en,none,streetview\\s1\\125.jpg,X,Y,Z,0.5,0.5,zero,area,Y,True\n",
        encoding="utf-8",
    )
    rep = ImportReport()
    rows = list(iter_judged(p, {}, rep))
    assert len(rows) == 1 and rows[0].condition == "baseline" and rows[0].hit
    assert [i.line for i in rep.issues] == [3, 4, 5]
    bad = tmp_path / "bad.csv"
    bad.write_text("site,model\n", encoding="utf-8")
    with pytest.raises(ValueError, match="missing column"):
        list(iter_judged(bad, {}))


def test_replication_command_writes_the_report(release_dir, tmp_path, capsys):
    from geoagent.geohint.judged import main

    assert main([str(release_dir), str(tmp_path), "--flips", "100", "--splits", "5"]) == 0
    out = capsys.readouterr().out
    assert "Table 1" in out and "Q242803" in out
    rows = list(csv.DictReader((tmp_path / "table1.csv").open(encoding="utf-8")))
    assert sum(int(r["n"]) for r in rows) == 966 - 30  # 30 rows name a reference point absent from the ladder
