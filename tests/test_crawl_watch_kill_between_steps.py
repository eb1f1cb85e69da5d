"""A ``crawl --watch`` killed between queueing a city it read from its config and recording it leaves no city
queued but unrecorded.

Leftover of session 14: the watcher put a city added to the config on the ``cities`` queue and only then recorded it
in the run's manifest entry (:func:`geoagent.crawl.stages.record_watched_city`). A SIGKILL between the two left the
city queued (and crawled by the next run) while the manifest's config, the record of what the crawl ran with, did
not hold it, so the next run of the same file said ``crawl changed since its last run (crawl.cities: added ...)``
about a city the killed run had queued itself. The order is now record first, then queue
(:func:`geoagent.crawl.stages.watch_config_cities`): a kill between the two leaves the city recorded and not
queued, and the next run, which plans every city of its config, queues it; a city another process had queued already
is withdrawn from the record again.

The kill is real and lands between the two steps whichever order they come in: the crawl runs in a process of its
own (``tests/_watch_kill_child.py``: ``run.py crawl CONFIG --watch``) that SIGKILLs itself as the watcher puts the
added city on the queue, once just before the queue commits it and once just after. In both cases every city on the
queue must be in the manifest's recorded config, and a plain re-run of the file must report no config change and
crawl the city. Takes about 30-45 s per case (the watcher re-reads the config every 10 s).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys

import orjson
import pytest

from geoagent.crawl.stages import city_key
from geoagent.engine import WATCH_BANNER
from tests.test_crawl_watch_new_city import CONFIG, REPO, _lines_until, _watch_env, _without_city

KEY = "city:mirrorbay"


def _queued_keys(tmp_path) -> set[str]:
    db = tmp_path / "queues" / "crawl-sandbox" / "cities.sqlite"
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {k for (k,) in con.execute("SELECT key FROM tasks")}
    finally:
        con.close()


@pytest.mark.parametrize("when", ["after_put", "before_put"])
def test_a_kill_between_queueing_a_watched_city_and_recording_it_leaves_it_recorded(tmp_path, when):
    import selectors

    full = CONFIG.read_text(encoding="utf-8")
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(_without_city(_without_city(full, "Mirror Bay"), "Sprawl Town"), encoding="utf-8")
    folder = tmp_path / "state" / "crawl-sandbox"
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "_watch_kill_child.py"), str(cfgp), KEY, when],
                            cwd=REPO, env=_watch_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    seen: list[str] = []
    try:
        _lines_until(proc, sel, re.escape(WATCH_BANNER), seen, 60)
        cfgp.write_text(_without_city(full, "Sprawl Town"), encoding="utf-8")
        proc.communicate(timeout=60)  # the watcher reads the file within 10 s and the process kills itself
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)
    assert proc.returncode == -9, (proc.returncode, "".join(seen)[-2000:])

    man = orjson.loads((folder / "manifest.json").read_bytes())
    run = man["runs"][-1]
    assert run["status"] == "running" and run["stopped_at"] is None  # no end was written: a kill
    recorded = {f"city:{city_key(c['city'])}" for c in man["config"]["crawl"]["cities"]}
    queued = _queued_keys(tmp_path)
    # before (after_put): the queue holds city:mirrorbay, the manifest records Sandbox City only
    assert queued <= recorded, (queued, recorded)
    assert KEY in recorded

    # a plain re-run of the same file: no config change to report; it queues and crawls the city
    res = subprocess.run([sys.executable, str(REPO / "run.py"), "crawl", str(cfgp), "--no-live"], cwd=REPO,
                         env=_watch_env(tmp_path), capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "changed since its last run" not in res.stderr, res.stderr
    assert "Mirror Bay" not in res.stderr, res.stderr
    man = orjson.loads((folder / "manifest.json").read_bytes())
    assert man["runs"][-2]["status"] == "killed" and man["runs"][-1]["status"] == "complete"
    assert KEY in _queued_keys(tmp_path)
    assert any(p.name.startswith("mirrorbay_") for p in (folder / "ladders").iterdir())


def test_the_watcher_records_a_city_before_queueing_it_and_takes_back_one_queued_already(tmp_path, capsys):
    """The order of the two steps, in process: ``on_new`` (the crawl's record) runs while the city is not yet
    queued; a city the queue already holds (another process of the campaign queued it) is recorded, then taken
    back (``on_not_queued``) and not announced; the run's start cities (``known_keys``) are neither."""
    import asyncio

    from geoagent import constants as C
    from geoagent.crawl.settings import CitySpec
    from geoagent.crawl.stages import watch_config_cities
    from geoagent.runtime.queue import open_queue

    cfg = tmp_path / "crawl.toml"
    body = '[crawl]\ncontact = "mailto:x@example.org"\n'
    for c in ("Alpha", "Beta", "Gamma"):
        body += f'\n[[crawl.cities]]\ncity = "{c}"\nlat = 10.0\nlon = 20.0\n'
    cfg.write_text(body, encoding="utf-8")
    events: list[tuple[str, str, bool]] = []

    async def go():
        q = open_queue(tmp_path / "queues", "w", C.EDGE_CITIES)
        await q.put("city:alpha", {"city": CitySpec(city="Alpha", lat=10, lon=20).model_dump()})  # the run's plan
        await q.put("city:gamma", {"city": CitySpec(city="Gamma", lat=10, lon=20).model_dump()})  # another process

        async def queued(key: str) -> bool:
            return key in set(await q.ready_keys() or [])

        def on_new(city):
            events.append(("new", city.city, False))

        def on_not_queued(city):
            events.append(("not_queued", city.city, False))

        stop = asyncio.Event()
        real_put = q.put

        async def put(key, payload):  # what the queue holds as the watcher puts a city
            events.append(("put", key, await queued(key)))
            return await real_put(key, payload)

        q.put = put
        task = asyncio.create_task(watch_config_cities(cfg, q, interval_s=0.05, stop=stop, on_new=on_new,
                                                       on_not_queued=on_not_queued, known_keys=["city:alpha"]))
        await asyncio.sleep(0.3)
        stop.set()
        await task
        keys = set(await q.ready_keys() or [])
        await q.close()
        return keys

    keys = asyncio.run(go())
    assert keys == {"city:alpha", "city:beta", "city:gamma"}
    assert events == [("new", "Beta", False), ("put", "city:beta", False),
                      ("new", "Gamma", False), ("put", "city:gamma", True), ("not_queued", "Gamma", False)]
    out = capsys.readouterr().out
    assert "planned new city 'Beta'" in out and "Gamma" not in out and "Alpha" not in out
