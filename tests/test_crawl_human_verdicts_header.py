"""An unmatched human verdict is named also when the CSV header has spaces that the reader accepts (session 19;
adversarial review break19, finding 7).

``read_human_verdicts`` strips the header names (" image , human_verdict": "spaces around a name are no part of
it"), but ``unmatched_human_verdicts`` read the same file with the raw header, found no ``image`` column, skipped
every row and named nothing: a verdict for an image the crawl never audited (a typo in the id) decided nothing and
the warning that exists to say so stayed silent.
"""

from __future__ import annotations

from geoagent.crawl.image_audit import read_human_verdicts, unmatched_human_verdicts


def test_unmatched_verdict_is_named_with_and_without_spaces_in_the_header(tmp_path):
    plain = tmp_path / "plain.csv"
    plain.write_text("image,human_verdict\nstreetview/s1/999.jpg,keep\ns1/123.jpg,exclude\n", encoding="utf-8")
    spaced = tmp_path / "spaced.csv"
    spaced.write_text(" image , human_verdict\nstreetview/s1/999.jpg,keep\ns1/123.jpg,exclude\n", encoding="utf-8")
    assert read_human_verdicts(spaced) == read_human_verdicts(plain)  # the same verdicts
    assert unmatched_human_verdicts(plain, ["123"]) == [f"{plain}:2: streetview/s1/999.jpg"]
    assert unmatched_human_verdicts(spaced, ["123"]) == [f"{spaced}:2: streetview/s1/999.jpg"]
    assert unmatched_human_verdicts(spaced, ["123", "999"]) == []
