"""A queue error on the watcher's put (``crawl --watch``) is a warning line, and the watcher keeps watching.

Before: :func:`geoagent.crawl.stages.watch_config_cities` caught only ``OSError``/``ValueError`` around a read and its
puts; a :class:`~geoagent.runtime.queue.QueueError` from ``put`` (the SQLite queue locked by another process past its
busy timeout, a Redis script refused) took the record back and then escaped: the watcher task died with it and a
city added to the config later was never queued by this run. Now it warns (``warning: crawl --watch: cannot queue
...``), the record is taken back as for any failed put, and the next read tries again. A real SQLite queue, locked by
a second connection holding a write transaction; a real config file."""

from __future__ import annotations

import asyncio
import sqlite3

import pytest

from geoagent import constants as C
from geoagent.config import InputWarning
from geoagent.crawl.stages import watch_config_cities
from geoagent.runtime.queue import open_queue


def test_a_queue_error_on_put_is_a_warning_and_the_watcher_tries_again(tmp_path):
    cfg = tmp_path / "crawl.toml"
    cfg.write_text('[crawl]\ncontact = "mailto:x@example.org"\n\n[[crawl.cities]]\ncity = "Beta"\nlat = 10.0\n'
                   'lon = 20.0\n', encoding="utf-8")
    events: list[tuple[str, str]] = []

    async def go():
        q = open_queue(tmp_path / "queues", "w", C.EDGE_CITIES, busy_timeout_s=0.05)
        await q.ready_keys()  # the file exists
        lock = sqlite3.connect(tmp_path / "queues" / "w" / f"{C.EDGE_CITIES}.sqlite", isolation_level=None)
        lock.execute("BEGIN IMMEDIATE")  # another process writing: every put waits 0.05 s and fails
        stop = asyncio.Event()
        task = asyncio.create_task(watch_config_cities(
            cfg, q, interval_s=0.05, stop=stop, on_new=lambda c: events.append(("new", c.city)),
            on_not_queued=lambda c: events.append(("not_queued", c.city))))
        await asyncio.sleep(0.5)
        alive_while_locked = not task.done()
        lock.execute("ROLLBACK")
        lock.close()
        await asyncio.sleep(0.5)
        stop.set()
        await asyncio.wait_for(task, 10)  # before: the QueueError of the first put, re-raised here
        keys = set(await q.ready_keys() or [])
        await q.close()
        return alive_while_locked, keys

    with pytest.warns(InputWarning) as got:
        alive, keys = asyncio.run(go())
    assert alive and keys == {"city:beta"}
    texts = [str(w.message) for w in got if issubclass(w.category, InputWarning)]
    assert any(t.startswith("crawl --watch: cannot queue city 'Beta' (city:beta)") for t in texts), texts
    # recorded, taken back (the put failed), ... recorded again and queued once the lock was gone
    assert events[:2] == [("new", "Beta"), ("not_queued", "Beta")] and events[-1] == ("new", "Beta"), events
