"""Table 11 counts what the paper and the release count, through the raw route
(:mod:`geoagent.geohint.raw_import`).

Before (session 12 follow-up): an unparsed response carrying an evidence object was counted as one without (the
release's ``analysis/chain_compliance.py`` counts every response whose JSON object has an ``evidence`` object, and
its slots, whatever else the object holds); a response cut off at the output-token limit with nothing parsed was
left out of n, while the paper's n is "every forced_chain response" (seed 000 Sec. 6.3.2: "2 responses out of 2799
are unparseable", "2799 is every forced_chain response") and the release's script divides by every line.

Expected values are counted by hand from the lines written here.
"""

from __future__ import annotations

import csv
import json

import pytest

from geoagent.geohint.raw_import import main as raw_main
from tests.test_release_routes_one_request import EVIDENCE, _line, _write_raw, make_release


@pytest.fixture
def release(tmp_path):
    return make_release(tmp_path)


def _table11(release, tmp_path):
    out = tmp_path / "out"
    assert raw_main([str(release), str(out)]) == 0
    with (out / "table11.csv").open(encoding="utf-8") as fh:
        return {r["Model"]: r for r in csv.DictReader(fh)}


def test_table11_counts_the_evidence_of_an_unparsed_response(release, tmp_path):
    _write_raw(release, [
        _line(),                                                            # 1: parsed, evidence
        _line(json.dumps({"confidence_area": 0.4, "evidence": EVIDENCE}), repeat=1),  # 2: no place, evidence
    ])
    t = _table11(release, tmp_path)["m"]
    # by hand: 2 responses, both carry an evidence object (was 1 of 2: the unparsed one's was not counted);
    # vegetation "not visible" in both slots; none unparseable: line 2 is a JSON object, which the release's
    # script counts as parsed (it was "Unparsed" 1 before Table 11's column took the release's meaning)
    assert (t["n"], t["Unparseable"]) == ("2", "0")
    assert float(t["Evidence (fraction)"]) == 1.0
    assert float(t["Veg. (fraction)"]) == 1.0 and float(t["Infra. (fraction)"]) == 0.0


def test_table11_n_counts_a_cut_off_response_with_nothing_parsed(release, tmp_path):
    _write_raw(release, [
        _line(),                                   # 1: parsed, evidence
        _line("", stop="max_tokens", repeat=1),    # 2: cut off with nothing: no answer, but a response
    ])
    tables = _table11(release, tmp_path)
    t = tables["m"]
    # by hand: 2 responses (was 1), 1 with an evidence object, 1 unparseable (no JSON object)
    assert (t["n"], t["Unparseable"]) == ("2", "1")
    assert float(t["Evidence (fraction)"]) == 0.5
    md = (tmp_path / "out" / "report.md").read_text(encoding="utf-8")
    assert "n counts 1 response cut off at the output-token limit with nothing parsed" in md
