"""The ``--watch`` crawl's own warnings are ``warning:`` lines like the crawl's others (session 13 review).

Before: a config file the watcher could not re-read (a half-saved edit, a TOML error) and a city added while
watching that could not be recorded in the manifest yet were logging records
(``2026-12-02 ... WARNING geoagent.crawl.stages: crawl: cannot re-read ...``), where the crawl's other warnings
became :class:`geoagent.config.InputWarning` (``warning: ...`` lines on the CLI's console, commit 8b77e67).
Real watcher on a real SQLite queue and a real config file; a real manifest without the run asked for.
"""

from __future__ import annotations

import asyncio
import logging

import pytest

from geoagent.config import InputWarning
from geoagent.crawl.settings import CitySpec
from geoagent.crawl.stages import record_watched_city, watch_config_cities
from geoagent.runtime.manifest import Manifest
from geoagent.runtime.queue import open_queue


def test_a_config_the_watcher_cannot_re_read_is_a_warning_line_not_a_log_record(tmp_path, caplog):
    cfg = tmp_path / "crawl.toml"
    cfg.write_text("[crawl\n", encoding="utf-8")  # a half-saved edit: not TOML

    async def once() -> None:
        q = open_queue(tmp_path / "queues", "w", "cities")
        stop = asyncio.Event()
        task = asyncio.create_task(watch_config_cities(cfg, q, interval_s=0.05, stop=stop))
        await asyncio.sleep(0.3)  # several re-reads of the same broken file
        stop.set()
        await task
        await q.close()

    with caplog.at_level(logging.WARNING), pytest.warns(InputWarning) as got:
        asyncio.run(once())
    texts = [str(w.message) for w in got if issubclass(w.category, InputWarning)]
    assert texts and all(t.startswith(f"crawl --watch: cannot re-read {cfg} (its cities stay as last read): ")
                         for t in texts), texts
    assert len(set(texts)) == 1  # one text: Python's default filter prints it once however often it recurs
    # before: "crawl: cannot re-read ..." as a logging record, no warning
    assert not [r for r in caplog.records if "cannot re-read" in r.getMessage()], caplog.records


def test_a_watched_city_not_recorded_in_the_manifest_is_a_warning_line(tmp_path, caplog):
    manifest = Manifest(None, state_dir=tmp_path)  # no run "r-1" in it: record_progress raises KeyError
    city = CitySpec.model_validate({"city": "Lyon", "country": "France", "lat": 45.76, "lon": 4.84})
    with caplog.at_level(logging.WARNING), pytest.warns(InputWarning) as got:
        record_watched_city(lambda: manifest.record_progress("r-1", planned=2), city)
    (w,) = [w for w in got if issubclass(w.category, InputWarning)]
    assert str(w.message).startswith("crawl --watch: the city 'Lyon' added while watching is not recorded in the "
                                     "manifest yet (the end of the run records it): "), w.message
    assert "no run 'r-1'" in str(w.message)
    assert not caplog.records
    record_watched_city(None, city)  # nothing to record with: nothing said
