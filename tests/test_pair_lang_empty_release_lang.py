"""The strict pairing keys an empty release ``lang`` as written, as the request identity does.

The one spelling rule (:func:`geoagent.geohint.release_rows.release_lang`): both import routes and the request
identity keep ``lang`` as the release writes it, so a release row with an empty ``lang`` and one with ``"en"``
are two requests, both imported. Before, :func:`geoagent.geohint.aggregate.pair_lang` read the empty one as
English (the default meant for campaign answers, which carry no ``lang``): the two requests took one pairing
slot, one of them dropped as a conflict.
"""
from __future__ import annotations

from geoagent.geohint.aggregate import GeoHintAggregator, pair_lang
from geoagent.geohint.raw_import import import_raw

from test_geohint_pairing_lang_repeats import _r
from test_release_routes_one_request import _line, _notes, _write_raw, make_release


def test_empty_release_lang_is_its_own_language_in_the_pairing():
    assert pair_lang(_r("a", "forced", True, lang="")) == ""
    assert pair_lang(_r("a", "forced", True, lang=None)) == "en"  # a campaign answer: English prompts
    agg = GeoHintAggregator()
    agg.add_many([_r("a", "forced", True, lang=""), _r("b", "forced", False, lang="en")])
    assert agg.n_pair_conflicts == 0


def test_raw_rows_without_lang_and_with_en_are_two_requests_in_both_places(tmp_path):
    release = make_release(tmp_path)
    _write_raw(release, [_line(lang=""), _line(lang="en")])
    rows, report = import_raw(release)
    assert len(rows) == 2 and not _notes(report, "forced_chain_raw.jsonl")  # the identity: two requests
    agg = GeoHintAggregator()
    agg.add_many(rows)
    assert agg.n_pair_conflicts == 0  # the pairing: two slots too
