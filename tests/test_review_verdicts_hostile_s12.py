"""Hostile review-decision CSVs (``[crawl.referenceability] review_verdicts``): the QID follows the project's one
id shape rule (:func:`geoagent.qid.is_qid`), a decision is an ASCII 0-5 or keep, and every malformed row is named
by file:line (a bare ``int()`` error named neither)."""

from __future__ import annotations

import pytest

from geoagent.crawl.review import read_review_verdicts


@pytest.mark.parametrize("qid", ["Q042", "Q0", "Q\u00b2", "Q\u0663", "Q1 2"])
def test_qid_not_shaped_like_a_wikidata_id_is_named(tmp_path, qid):
    p = tmp_path / "r.csv"
    p.write_text(f"site,qid,decision\r\ns1,Q7,keep\r\ns1,{qid},keep\r\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        read_review_verdicts(p)
    assert f"{p}:3:" in str(e.value) and "qid must be a Wikidata id" in str(e.value)


@pytest.mark.parametrize("decision", ["\u00b2", "\u0663", "\uff13"])
def test_decision_in_non_ascii_digits_is_named(tmp_path, decision):
    p = tmp_path / "r.csv"
    p.write_text(f"\ufeffsite,qid,decision\ns1,Q7,{decision}\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        read_review_verdicts(p)
    assert f"{p}:2:" in str(e.value) and "decision must be keep" in str(e.value)


def test_lower_case_q_and_crlf_still_read(tmp_path):
    p = tmp_path / "r.csv"
    p.write_bytes(b"\xef\xbb\xbfsite,qid,decision\r\ns1,q42,4\r\ns1,Q42,4\r\n")
    got = read_review_verdicts(p)
    assert list(got) == [("s1", "Q42")] and got[("s1", "Q42")]["familiarity"] == 4


def _decide(tmp_path, decision, name="r.csv"):
    p = tmp_path / name
    p.write_text(f"site,qid,decision,reviewer\ns1,Q7,{decision},ana\n", encoding="utf-8")
    return read_review_verdicts(p)


def test_a_decision_changed_back_is_logged_again(tmp_path):
    """3, then 0, then 3 again: the log's last line for the item must be the decision in force (3); before, the
    return to 3 matched the first line and was not logged, so the log said 0 while the ladders took 3."""
    import json

    from geoagent.crawl.review import DECISION_LOG_FILE, write_resolution

    model = {("s1", "Q7"): 5}
    for d in ("3", "0", "3"):
        write_resolution(tmp_path, _decide(tmp_path, d), model)
    log = [json.loads(x) for x in (tmp_path / DECISION_LOG_FILE).read_text().splitlines()]
    assert [r["decision"] for r in log] == ["3", "0", "3"]
    assert write_resolution(tmp_path, _decide(tmp_path, "3"), model)["logged"] == 0  # an unchanged re-run: nothing


def test_qid_order_puts_a_non_ascii_number_last_instead_of_raising():
    """``qid_order`` (the candidates' sort key) promises ids without a number last; "Q²" passed ``isdigit`` and
    ``int("²")`` raised, failing a whole site's candidate sort on one such id from a stored cache."""
    from geoagent.crawl.referenceability import qid_order

    assert sorted(["Q\u00b2", "Q10", "Q9", "Q\u0663"], key=qid_order) == ["Q9", "Q10", "Q\u00b2", "Q\u0663"]


def test_a_header_that_repeats_a_column_is_named(tmp_path):
    """``decision`` twice (a pasted column): the row would silently take the last copy ("keep"), dropping the
    correction; the image verdicts' reader refuses such a header, and so does this one now."""
    p = tmp_path / "r.csv"
    p.write_text("site,qid,decision,note,decision\ns1,Q7,2,,keep\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        read_review_verdicts(p)
    assert f"{p}:1:" in str(e.value) and "'decision'" in str(e.value) and "repeats" in str(e.value)
