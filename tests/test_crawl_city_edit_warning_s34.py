"""Editing or removing a city already in a crawl says the stored tables keep it as it was (break34 crawl #3).

A city's screening, sites, images and ladders are stored under its name's key, so correcting its centre, continent or
country changed nothing (``city_pool.csv`` kept the old centre, ``sites.csv`` the old continent, which the
swapped-image control pairs sites by), and a removed city kept its rows in every table, while the only line said
"nothing mixes". The key shapes are those the config comparison gives (``crawl.cities[0].lat``; a removed entry:
``crawl.cities[2]`` from its table to None).
"""

from __future__ import annotations

from geoagent.runtime.drift import crawl_city_edit_lines, decide


def test_a_moved_city_is_a_warning_naming_the_field():
    [line] = crawl_city_edit_lines("c", {"crawl.cities[0].lat": (45.0702, 45.0802),
                                         "crawl.cities[1].continent": ("AS", "EU")})
    assert line.startswith("warning: campaign c: a city already in the crawl changed")
    assert "crawl.cities[0] lat 45.0702 -> 45.0802" in line and "crawl.cities[1] continent 'AS' -> 'EU'" in line
    assert "NOT applied" in line and "new [campaign] name" in line


def test_a_removed_city_keeps_its_rows_and_says_so():
    [line] = crawl_city_edit_lines("c", {"crawl.cities[2]": ({"city": "Mirror Bay"}, None)})
    assert "1 city left the crawl's list (crawl.cities[2]): what was crawled for it stays in every table" in line


def test_a_new_city_or_another_key_is_no_warning():
    assert crawl_city_edit_lines("c", {"crawl.cities[3]": (None, {"city": "New"}),
                                       "crawl.cities[3].lat": (None, 1.0), "crawl.sampler.radius_km": (3.0, 2.0)}) == []


def test_the_run_prints_the_warning_beside_its_info_line():
    d = decide("c", ["crawl"], {"crawl.cities[0].lon": (7.68, 7.70)}, tasks_before=5, done_before=5, added=0,
               left_before=0, keys_text="crawl.cities[0].lon: 7.68 -> 7.7")
    assert d.lines[0].startswith("info: campaign c:") and d.lines[1].startswith("warning: campaign c: a city")


def test_a_crawl_setting_change_with_work_left_speaks_of_the_crawl_not_of_models():
    """break34 crawl #5: after a kill, a [crawl.fetcher] change was said to send the tasks left 'with the new
    [[models]] settings' and the answers to be counted per request setting in the report."""
    d = decide("c", ["crawl"], {"crawl.fetcher.min_brightness": (90.0, 60.0)}, tasks_before=9, done_before=6,
               added=0, left_before=3, keys_text="crawl.fetcher.min_brightness: 90.0 -> 60.0")
    [line] = d.lines
    assert line.startswith("warning: campaign c:") and d.mixed
    assert "will be done with the new crawl settings" in line and "[[models]]" not in line
    assert "config_mix" in line and "to every site" in line
