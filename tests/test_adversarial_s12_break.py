"""Adversarial review of session 12's merges (s12-break): each test failed on main before its fix."""

from __future__ import annotations

import dataclasses
import json

import pytest
from test_geohint_image_paired import _base, _ctx

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report.geohint import build_tables, default_conditions


def test_image_paired_tables_with_another_baseline_condition():
    """A campaign (or judged import) of the permissive schema reports v1 against v1_baseline
    (:func:`default_conditions`); the image-paired tables counted only the aggregator's ``baseline_condition``
    ("baseline") as no context, so both tables had 0 images although every image was answered in both.
    By hand: image A (s1) no context hit, near miss -> -1; image B (s2) miss vs hit -> +1; mean 0, 2 images."""
    rows = [_base("s1", "A", True), _ctx("s1", "A", False), _base("s2", "B", False), _ctx("s2", "B", True)]
    rows = [dataclasses.replace(r, condition="v1" if r.has_context else "v1_baseline", schema="v1") for r in rows]
    agg = GeoHintAggregator()
    agg.add_many(rows)
    assert default_conditions(agg) == ("v1", "v1_baseline")
    tables = {t.name: t for t in build_tables(agg, n_flips=100)}
    near = tables["nocontext_near"].rows[0]
    assert near[0] == "m" and near[1:3] == [2, 2]
    assert near[3] == pytest.approx(0.5) and near[4] == pytest.approx(0.5) and near[5] == pytest.approx(0.0)
    assert tables["building_vs_nocontext"].rows[0][1] == 2


@pytest.mark.parametrize("text", [
    '{"city": "Paris", "City": null}\nActually: {"city": "Lyon"}',
    '{"city": "Paris"}\nActually: {"city": "Lyon", "City": null}',
    '{"city": "Paris", "City": NaN}\nActually: {"city": "Lyon"}',
])
def test_place_named_beside_a_non_place_spelling_still_clashes(text):
    """Two answers in one response are a failure ("conflicting answers"), never the first or the last guess. Since
    non-string places name nothing, :func:`_fill` reads the first place each field names over its spellings, but the
    clash check read the last spelling (null): Paris was invisible to it and the response parsed as Paris (or Lyon)."""
    from geoagent.geohint.parse import parse_answer

    ans = parse_answer(text)
    assert not ans.ok and "conflicting answers" in (ans.error or ""), (ans.city, ans.error)


def test_unreadable_repeats_kept_by_the_judged_route_are_all_averaged_in_the_pairs(tmp_path):
    """The release routes keep rows whose ``repeat`` is unreadable (read as 0, "1.0" as a CSV written by pandas
    gives) as requests of their own, not copies of repeat 0 (release_rows); the strict pairing then put them all
    in the slot of repeat 0 and held one (n_pair_conflicts), so the paired mean used 1 of the 3 forced answers.
    The release's pivot_table(mean) over [site, path, model, lang, context] averages every row of the item.
    By hand: forced_warn 1 hit of 1; forced hits 1, 0, 0 over repeats "0.0", "1.0", "2.0": mean 1/3 ->
    delta +2/3 (held alone, the smallest key's row, line 2's hit: delta 0)."""
    from test_release_routes_one_request import HEADER, _judged, make_release

    from geoagent.geohint.judged import import_judged

    release = make_release(tmp_path)
    hit = "Paris,1er,shop,0.5,0.5,0.4,area,1er,True"
    miss = "Paris,2e,bar,0.5,0.5,3.0,area,2e,False"
    img = "streetview\\s1\\111.jpg"
    _judged(release, [
        f"s1,m,forced,en,high_15_30km_Q1,{img},{hit},0.0",       # 2
        f"s1,m,forced,en,high_15_30km_Q1,{img},{miss},1.0",      # 3
        f"s1,m,forced,en,high_15_30km_Q1,{img},{miss},2.0",      # 4
        f"s1,m,forced_warn,en,high_15_30km_Q1,{img},{hit},0.0",  # 5
    ], header=HEADER.strip() + ",repeat\n")
    rows, _ = import_judged(release)
    assert len(rows) == 4
    agg = GeoHintAggregator()
    agg.add_many(rows)
    (site, warn, forced), = agg.paired("forced_warn", "forced")
    assert forced.n == 3 and forced.hit == pytest.approx(1 / 3)
    assert warn.hit - forced.hit == pytest.approx(2 / 3)
    assert agg.n_pair_conflicts == 0


def _gazetteer_folder(tmp_path, sites_csv: str, city_pool: str | None):
    from test_release_routes_one_request import make_release

    root = make_release(tmp_path)
    (root / "sites.csv").write_text(sites_csv, encoding="utf-8")
    if city_pool is not None:
        (root / "city_pool.csv").write_text(city_pool, encoding="utf-8")
    return root


@pytest.mark.parametrize("sites_csv, city_pool", [
    # no city_pool.csv and no landmark column: the folder the release route tests plan from
    ("site,city,lat,lon\ns1,Paris,48.88,2.34\ns2,Paris,48.85,2.36\n", None),
    # a spreadsheet's byte-order mark before the header
    ("\ufeffsite,city,lat,lon,landmark,qid\ns1,Paris,48.88,2.34,Gare du Nord,Q11\ns2,Paris,48.85,2.36,Ile,Q12\n",
     "\ufeffcity,country,lat,lon\nParis,France,48.86,2.35\n"),
    # a row whose coordinate is no number (NaN, empty): the importer skips and reports it
    ("site,city,lat,lon,landmark\ns1,Paris,48.88,2.34,Gare\ns2,Paris,nan,2.36,X\ns3,Paris,,2.3,Y\n",
     "city,country,lat,lon\nParis,France,48.86,2.35\nLyon,France,NaN,4.8\n"),
])
def test_sandbox_gazetteer_reads_every_folder_the_campaign_plans_from(tmp_path, sites_csv, city_pool):
    """Since session 12 the Wikidata/Nominatim fakes' gazetteer is built from the campaign's own folder
    (``[geohint] release_dir``, :func:`geoagent.sandbox.launch.campaign_release_dir`), not the shared release. The
    campaign imports these folders (:func:`import_release`: no city_pool.csv needed, landmark optional, a BOM
    read, a row with a bad coordinate skipped and reported), but the gazetteer failed on each (FileNotFoundError
    city_pool.csv, KeyError 'landmark', KeyError 'site') or kept a site at NaN, so the sandbox run stopped at launch
    where it ran before (against the shared release). Paris is known as a city, ladder point Q1 near s1."""
    import math

    from geoagent.data.importer import import_release
    from geoagent.sandbox.gazetteer import Gazetteer

    root = _gazetteer_folder(tmp_path, sites_csv, city_pool)
    rel = import_release(root)
    assert "s1" in rel.sites
    gaz = Gazetteer.from_release(root)
    assert any(e.kind == "city" and e.labels.get("en") == "Paris" for e in gaz), "Paris is no city of the gazetteer"
    assert gaz.get("Q1") is not None and gaz.get("Q1").synthetic  # s1's ladder point, placed from s1
    for e in gaz:
        assert math.isfinite(e.lat) and math.isfinite(e.lon), e


def test_table11_counts_the_checklist_of_an_answer_naming_two_cities_in_one_object(tmp_path):
    """Table 11's Evidence column counts every response whose JSON object holds an evidence object, parsed or not
    (release analysis/chain_compliance.py: json.loads of the first '{' to the last '}', then
    isinstance(obj.get("evidence"), dict)). An object giving "city" and "City" two places is a failure (conflicting
    answers) but its checklist was dropped with the place: 1 of 2 responses carried evidence instead of 2 of 2, and
    its "not visible" vegetation slot was lost (by hand: vegetation not visible in 2 of 2 slots)."""
    import json

    from test_release_routes_one_request import EVIDENCE, OK, _line, _write_raw, make_release

    from geoagent.geohint.raw_import import import_raw
    from geoagent.report.geohint import table11

    release = make_release(tmp_path)
    clash = json.dumps({"city": "Paris", "City": "Lyon", "area": "1er", "evidence": EVIDENCE})
    _write_raw(release, [_line(json.dumps(OK)), _line(clash, repeat=1)])
    rows, _ = import_raw(release)
    assert [r.parse_ok for r in rows] == [True, False]
    agg = GeoHintAggregator()
    agg.add_many(rows)
    t = table11(agg)
    row = dict(zip(t.columns, t.rows[0]))
    # Unparseable: 0 (session 12, later: the object is read by json.loads, so the release counts it parsed)
    assert row["n"] == 2 and row["Unparseable"] == 0
    assert row["Evidence"] == pytest.approx(1.0)
    assert row["Veg."] == pytest.approx(1.0) and row["Infra."] == pytest.approx(0.0)


def test_sandbox_gazetteer_reads_a_release_checkout_as_the_importer_does(tmp_path):
    """A checkout of the release repository holds its files under data/ (the importer reads RELEASE/data, and the
    missing-release message says "point at that folder (or its data/ folder)"); the sandbox gazetteer, now built
    from the campaign's own folder, looked for RELEASE/sites.csv only and stopped the launch (FileNotFoundError)."""
    import shutil

    from test_release_routes_one_request import make_release

    from geoagent.data.importer import import_release
    from geoagent.sandbox.gazetteer import Gazetteer

    src = make_release(tmp_path / "src")
    (src / "city_pool.csv").write_text("city,country,lat,lon\nParis,France,48.86,2.35\n", encoding="utf-8")
    checkout = tmp_path / "geocontext"
    shutil.copytree(src, checkout / "data")
    assert "s1" in import_release(checkout).sites
    gaz = Gazetteer.from_release(checkout)
    assert gaz.get("Q1") is not None and any(e.kind == "city" for e in gaz)


def test_a_crawl_resumed_across_the_label_language_change_says_so(tmp_path):
    """Session 12 widened the reference-point query's label languages (en,mul -> en,mul,zh,... LABEL_LANGUAGES).
    A crawl begun before keeps each site's stored candidate list (ref_candidates/<site>.json, never queried again),
    so its earlier sites' Chinese- or local-language-only places stayed bare QIDs, not rated, and its later sites'
    were rated: two rules in one crawl, with no version and no word (the sampler and the fetcher say so for theirs).
    The crawl summary now names such sites; a list stored by this version records its languages."""
    from geoagent.clients.wdqs import LABEL_LANGUAGES
    from geoagent.crawl.stages import REF_CANDIDATES_DIR, label_language_warning

    d = tmp_path / REF_CANDIDATES_DIR
    d.mkdir()
    assert label_language_warning(tmp_path) is None  # nothing stored yet
    (d / "s_new.json").write_text(json.dumps({"site": "s_new", "label_languages": list(LABEL_LANGUAGES),
                                              "candidates": []}), encoding="utf-8")
    assert label_language_warning(tmp_path) is None
    (d / "s_old.json").write_text(json.dumps({"site": "s_old", "candidates": []}), encoding="utf-8")  # before
    w = label_language_warning(tmp_path)
    assert w is not None and "1 of 2 sites" in w and "s_old" in w and "s_new" not in w
