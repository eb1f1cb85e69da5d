"""Release importer and data store: real release data plus hand-made malformed files."""

from __future__ import annotations

import csv
import math

import pytest

from geoagent import constants as C
from geoagent.data.importer import import_into_store, import_release, normalize_rel_path
from geoagent.data.model import ladder_band, tier_of, verify_band
from geoagent.data.store import DataStore
from geoagent.geo import haversine_km, haversine_km_array


def _hand_haversine(lat1, lon1, lat2, lon2, r=6371.0088):
    # independent formula: spherical law of cosines (fine at these distances in float64)
    p1, p2, dl = math.radians(lat1), math.radians(lat2), math.radians(lon2 - lon1)
    cos_c = math.sin(p1) * math.sin(p2) + math.cos(p1) * math.cos(p2) * math.cos(dl)
    return r * math.acos(max(-1.0, min(1.0, cos_c)))


def test_haversine_against_independent_formula():
    cases = [(52.3774, 4.9026, 52.3765, 4.9011), (0, 0, 0, 1), (-33.9, 151.2, 51.5, -0.12), (10, 179.9, 10, -179.9)]
    for c in cases:
        assert haversine_km(*c) == pytest.approx(_hand_haversine(*c), rel=1e-6, abs=1e-6)
    # one degree of longitude at the equator = 2 pi R / 360
    assert haversine_km(0, 0, 0, 1) == pytest.approx(2 * math.pi * C.EARTH_RADIUS_KM / 360, rel=1e-12)
    arr = haversine_km_array([c[0] for c in cases], [c[1] for c in cases], [c[2] for c in cases], [c[3] for c in cases])
    assert arr == pytest.approx([haversine_km(*c) for c in cases])
    with pytest.raises(ValueError):
        haversine_km(91, 0, 0, 0)


def test_bands_and_tiers():
    assert verify_band(0.1499) == "signal"
    assert verify_band(0.15) == "0.15-0.3km"
    assert verify_band(2.999) == "1.5-3.0km"
    assert verify_band(6.0) is None
    assert [tier_of(r) for r in range(6)] == ["low", "low", "mid", "mid", "high", "high"]
    assert ladder_band(0.49) is None and ladder_band(0.5) == "0.5-1.5km"


def test_release_import_counts_and_consistency(release_dir):
    rel = import_release(release_dir)
    assert rel.report.ok, rel.report.summary()
    assert len(rel.sites) == 109
    assert len(rel.ladders) == 109
    assert sum(len(lad.points) for lad in rel.ladders.values()) == 3105
    # every ladder row's band follows from dist_km and its tier from referenceability (SOURCE.md)
    for lad in rel.ladders.values():
        for p in lad.points:
            assert p.band == ladder_band(p.dist_km), p
            assert p.tier == tier_of(p.referenceability), p
    # non-ASCII names survive
    assert any(p.name_zh and not p.name_zh.isascii() for lad in rel.ladders.values() for p in lad.points)
    # trials: Windows paths normalised, d_km equals the haversine (1e-4 km), image table derived
    with (release_dir / "verify_trials_sample.csv").open(encoding="utf-8", newline="") as fh:
        n_rows = sum(1 for _ in csv.DictReader(fh))
    assert len(rel.trials) == n_rows
    for t in rel.trials:
        assert "\\" not in t.path and t.path.startswith("streetview/")
        assert haversine_km(t.img_lat, t.img_lon, t.cand_lat, t.cand_lon) == pytest.approx(t.d_km, abs=1.01e-4)
    assert set(rel.images) == {t.image_id for t in rel.trials}
    raw_lines = sum(1 for line in (release_dir / "verify_raw_sample.jsonl").open(encoding="utf-8") if line.strip())
    assert len(rel.raw) == raw_lines
    assert all(r.trial_id.count("|") >= 2 for r in rel.raw)


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_malformed_rows_reported_and_rest_imported(tmp_path):
    _write(
        tmp_path / "sites.csv",
        "site,city,country,continent,lat,lon,selection_method\n"
        "s_one,Zürich,CH,EU,47.37,8.54,algorithm\n"
        "s_two,Bogotá,CO,SA,not-a-number,-74.07,hand\n"  # line 3: bad lat
        's_three,"Quoted, City",XX,AS,10.0,20.0\n'  # line 4: too few fields
        "s_four,Kyoto,JP,AS,35.0,135.7,\n",  # empty optional field
    )
    _write(
        tmp_path / "ladders" / "s_one_ladder_deepseek-en.csv",
        "band,tier,name_en,qid,dist_km,familiarity\n"
        "0.5-1.5km,high,Grossmünster,Q1,1.0,5\n"
        "0.5-1.5km,high,Broken,Q2,1.0,9\n",  # familiarity out of range (line 3)
    )
    _write(
        tmp_path / "verify_trials_sample.csv",
        "image_id,site,path,img_lat,img_lon,cand,cand_lat,cand_lon,fam,d_km,band,truth,arm,cont\n"
        '123,s_one,streetview\\s_one\\123.jpg,47.37,8.54,"Café, ""Odeon""",47.3701,8.5401,3.0,0.0134,signal,yes,main,EU\n'
        "12a,s_one,x.jpg,47.37,8.54,X,47.37,8.54,3.0,0.0,signal,yes,main,EU\n"  # bad image id (line 3)
        "124,s_one,..\\..\\etc\\passwd,47.37,8.54,Y,47.37,8.54,3.0,0.0,signal,yes,main,EU\n",  # unsafe path (line 4)
    )
    _write(
        tmp_path / "verify_raw_sample.jsonl",
        '{"trial_id": "123|main|Café", "model": "m", "raw": "{}", "usage": {"input_tokens": 5}}\n'
        "{not json\n"
        '{"model": "m", "raw": "x"}\n',
    )
    rel = import_release(tmp_path)
    assert set(rel.sites) == {"s_one", "s_four"}
    assert rel.sites["s_one"].city == "Zürich" and rel.sites["s_four"].selection_method is None
    assert [p.name_en for p in rel.ladders["s_one"].points] == ["Grossmünster"]
    assert rel.ladders["s_one"].points[0].tier == "high"
    assert [t.cand for t in rel.trials] == ['Café, "Odeon"']
    assert rel.trials[0].path == "streetview/s_one/123.jpg"
    assert len(rel.raw) == 1 and rel.raw[0].input_tokens == 5 and rel.raw[0].output_tokens == 0
    where = {(i.file.rsplit("/", 1)[-1], i.line) for i in rel.report.issues}
    assert where == {
        ("sites.csv", 3),
        ("sites.csv", 4),
        ("s_one_ladder_deepseek-en.csv", 3),
        ("verify_trials_sample.csv", 3),
        ("verify_trials_sample.csv", 4),
        ("verify_raw_sample.jsonl", 2),
        ("verify_raw_sample.jsonl", 3),
    }
    reasons = " ".join(i.reason for i in rel.report.issues)
    assert "'lat'" in reasons and "expected 7 fields" in reasons and "trial_id" in reasons


def test_multiline_quoted_field_line_numbers(tmp_path):
    _write(
        tmp_path / "sites.csv",
        'site,city,lat,lon\ns_a,"Two\nLines",1.0,2.0\ns_b,C,bad,2.0\n',
    )
    rel = import_release(tmp_path)
    assert rel.sites["s_a"].city == "Two\nLines"
    assert [(i.line) for i in rel.report.issues] == [4]


def test_missing_required_column_reported(tmp_path):
    _write(tmp_path / "sites.csv", "site,city,lat\ns,c,1.0\n")
    rel = import_release(tmp_path)
    assert not rel.sites and rel.report.issues[0].line == 1 and "lon" in rel.report.issues[0].reason


def test_normalize_rel_path():
    assert normalize_rel_path("a\\b\\c.jpg") == "a/b/c.jpg"
    for bad in ("C:\\x\\y.jpg", "/etc/passwd", "a\\..\\..\\b"):
        with pytest.raises(ValueError):
            normalize_rel_path(bad)


def test_store_roundtrip_and_idempotent(release_dir, tmp_path):
    with DataStore(tmp_path / "data" / "data.sqlite") as store:
        rep = import_into_store(release_dir, store)
        assert rep.ok
        n = store.count("verify_trial")
        import_into_store(release_dir, store)  # second import: upserts, no duplicates
        assert store.count("verify_trial") == n == 170
        assert store.count("site") == 109 and store.count("ladder") == 109
        rel = import_release(release_dir)
        assert store.get("site", "amsterdam_church") == rel.sites["amsterdam_church"]
        assert store.get("ladder", "amsterdam_church") == rel.ladders["amsterdam_church"]
        assert sorted(store.iter("verify_raw"), key=lambda r: r.key()) == sorted(
            {r.key(): r for r in rel.raw}.values(), key=lambda r: r.key()
        )
        assert store.get_meta("import_report")["issues"] == []
