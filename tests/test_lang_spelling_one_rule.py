"""One rule for the prompt language's spelling: as the release writes it (case and spaces kept).

The release's analysis scripts key ``[site, path, model, lang, context]`` on the column as read (pandas: "EN",
"en" and " en" are three keys) and seed 000 says only "same language". Before: the strict pairing
(:func:`geoagent.geohint.aggregate.pair_lang`) lower-cased and stripped ``lang`` ("EN" paired with "en"), the
judged route stripped it (" en" and "en" one request) while the raw route and the request identity kept them apart.
"""
from __future__ import annotations

from geoagent.geohint.aggregate import GeoHintAggregator, pair_lang
from geoagent.geohint.judged import import_judged
from geoagent.geohint.raw_import import import_raw

from test_geohint_pairing_lang_repeats import _r
from test_release_routes_one_request import HEADER, _judged, _line, _notes, _write_raw, make_release


def test_pairing_keeps_the_release_spelling():
    assert pair_lang(_r("a", "forced", True, lang="EN")) == "EN"
    assert pair_lang(_r("a", "forced", True, lang=None)) == "en"  # a campaign answer: English prompts
    agg = GeoHintAggregator()
    agg.add_many([_r("a", "forced", True, lang="EN"), _r("b", "forced_warn", False, lang="en")])
    assert agg.paired("forced_warn", "forced") == []


def test_judged_route_keeps_the_release_spelling(tmp_path):
    release = make_release(tmp_path)
    row = "s1,m,forced,{},none,streetview\\s1\\111.jpg,Paris,1er,shop,0.5,0.5,0.4,area,1er,True"
    _judged(release, [row.format("en"), row.format(" en"), row.format("EN"), row.format("en")], header=HEADER)
    rows, report = import_judged(release)
    # the spellings are three requests; line 5 repeats line 2's request: with no repeat column in the file it is
    # read as that request's repeat 1 and counted, as the release counts every row (s12-judged)
    assert [(r.extra["line"], r.extra["lang"]) for r in rows] == [(2, "en"), (3, " en"), (4, "EN"), (5, "en")]
    assert [r.repeat for r in rows] == [0, 0, 0, 1]


def test_raw_route_keeps_the_release_spelling(tmp_path):
    release = make_release(tmp_path)
    _write_raw(release, [_line(lang="en"), _line(lang=" en"), _line(lang="EN"), _line(lang="en")])
    rows, report = import_raw(release)
    assert [(r.extra["line"], r.extra["lang"]) for r in rows] == [(1, "en"), (2, " en"), (3, "EN")]
    assert sorted(_notes(report, "forced_chain_raw.jsonl")) == [4]
