"""Session 18 walkthrough (a new user building a small benchmark over the sandbox crawl): count words in the crawl
summary agree with their counts, and the docs say what an offline crawl can find."""

from __future__ import annotations

from geoagent.crawl.campaign import image_counts_line


def _counts(rejected: dict[str, int], skipped: dict[str, int]) -> dict:
    kept = 5
    return {"kept": kept, "rejected": rejected, "skipped": skipped, "usable": kept, "excluded": 0,
            "audited": kept, "shared": 0}


def test_one_near_duplicate_and_one_panorama_are_singular():
    # the walkthrough's crawl printed "10 rejected after download: 9 too dark (brightness filter), 1 near-duplicates"
    line = image_counts_line(_counts({"too dark (brightness filter)": 9, "near-duplicates": 1}, {"panoramas": 1}))
    assert "9 too dark (brightness filter), 1 near-duplicate;" in line, line
    assert "1 skipped before download: 1 panorama)" in line, line
    assert "1 near-duplicates" not in line and "1 panoramas" not in line
    # plural counts keep the plural
    line = image_counts_line(_counts({"near-duplicates": 3}, {"panoramas": 7}))
    assert "3 near-duplicates" in line and "7 panoramas" in line, line
