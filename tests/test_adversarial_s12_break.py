"""Adversarial review of session 12's merges (s12-break): each test failed on main before its fix."""

from __future__ import annotations

import dataclasses

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
