"""``run.py crawl CONFIG --watch``: what the idle hand-off leaves in the crawl's folder while the daemon waits.

Gaps (session 8): (2) ``report/crawl_summary.json`` was written only at stop, while the hand-off tables were
already written at each idle drain; it is now refreshed at each idle hand-off too, so the folder is
consistent while the daemon waits. (3) With dead-lettered tasks the idle hand-off left an older
``verify_trials.csv`` in place: a campaign pointed at the folder would run on trials built from an earlier
state of the crawl. As a run that ends ``incomplete`` writes no trials, the hand-off now moves that file aside
to ``verify_trials.stale.csv`` (not read by campaigns), the summary JSON says why, and so does ``run.py status``.

In-process, real engine: the sandbox crawl (its fakes on ``*.sandbox.invalid`` start in-process), one city.
Run 1 watches until idle; run 2 finds a city task the screener cannot read (a malformed payload put on the
``cities`` queue, as a hand-edited or older queue could hold), which the real stage dead-letters at its first
delivery (a permanent failure). Takes about 10-20 s.
"""

from __future__ import annotations

import signal

import anyio
import orjson

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.queue import open_queue
from geoagent.status import campaign_status, format_status
from tests.test_crawl_watch_new_city import CONFIG, _without_city

IDLE = "crawl --watch: idle"


def _run_until_idle(cfg, capsys, *, then=None) -> tuple[object, str, dict]:
    """``crawl --watch`` in-process until its idle hand-off line; ``then()`` is called at that moment (its
    result is returned), then SIGINT. Returns ``(outcome, stdout, then's result)``."""
    out: dict[str, object] = {}
    seen: list[str] = []

    async def main():
        async def drive():
            with anyio.fail_after(120):
                while not any(IDLE in s for s in seen):
                    seen.append(capsys.readouterr().out)
                    await anyio.sleep(0.1)
            out["then"] = then() if then else {}
            signal.raise_signal(signal.SIGINT)

        async with anyio.create_task_group() as tg:
            tg.start_soon(drive)
            out["outcome"] = await run_campaign(cfg, live=False, handle_signals=True, export=True, watch=True)

    anyio.run(main)
    seen.append(capsys.readouterr().out)
    return out["outcome"], "".join(seen), out["then"]


def test_watch_idle_handoff_refreshes_the_summary_and_moves_stale_trials_aside_when_work_is_dead(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(_without_city(_without_city(CONFIG.read_text(encoding="utf-8"), "Mirror Bay"), "Sprawl Town"),
                    encoding="utf-8")
    cfg = load_config(cfgp)
    state = tmp_path / "state" / "crawl-sandbox"
    trials, stale = state / "verify_trials.csv", state / "verify_trials.stale.csv"
    summary = state / C.REPORT_DIR / "crawl_summary.json"

    # run 1: every queue drains; while the daemon waits, the summary JSON is there with the trials
    def at_idle_1():
        return {"summary": orjson.loads(summary.read_bytes()) if summary.is_file() else None,
                "trials": trials.read_bytes() if trials.is_file() else None}

    outcome, out, idle1 = _run_until_idle(cfg, capsys, then=at_idle_1)
    assert outcome.status == "complete", out
    assert idle1["trials"], "no verify_trials.csv at the idle hand-off"
    s1 = idle1["summary"]
    assert s1 is not None, f"report/crawl_summary.json not written at the idle hand-off: {out}"
    assert s1["status"] == "complete" and s1["watching"] is True and "verify_trials.csv" in s1["files"], s1
    assert s1["verify_trials"]["written"] is True and s1["api"], s1
    assert orjson.loads(summary.read_bytes())["watching"] is False  # the end of the run rewrote it
    old_trials = trials.read_bytes()

    # run 2: a city task the screener cannot read is dead-lettered; the trials on disk are from before
    async def broken():
        q = open_queue(cfg.queues_root(), cfg.name, C.EDGE_CITIES, **cfg.queue_options())
        try:
            await q.put("city:broken", {"city": {"city": "Broken"}})
        finally:
            await q.close()

    anyio.run(broken)

    def at_idle_2():
        return {"summary": orjson.loads(summary.read_bytes()), "trials": trials.is_file(),
                "stale": stale.read_bytes() if stale.is_file() else None,
                "status": format_status(campaign_status(cfg))}

    outcome, out, idle2 = _run_until_idle(cfg, capsys, then=at_idle_2)
    assert outcome.status == "incomplete", out
    assert outcome.counts[C.EDGE_CITIES].dead == 1
    line = next(ln for ln in out.splitlines() if IDLE in ln)
    assert "verify_trials.csv not written" in line and "moved to verify_trials.stale.csv" in line, line
    # while the daemon waits: no stale trials under the name campaigns read; the old ones kept aside
    assert idle2["trials"] is False and idle2["stale"] == old_trials
    s2 = idle2["summary"]
    assert s2["status"] == "incomplete" and s2["watching"] is True, s2
    vt = s2["verify_trials"]
    assert vt["written"] is False and vt["stale"] == "verify_trials.stale.csv" and "dead-lettered" in vt["reason"], vt
    assert "verify_trials.csv" not in s2["files"], s2["files"]
    # `status` from another terminal says why
    text = idle2["status"]
    assert "verify_trials.csv not written" in text and "verify_trials.stale.csv" in text, text
    # the end of the run (incomplete) agrees: still no verify_trials.csv, the summary says so
    assert not trials.is_file() and stale.read_bytes() == old_trials
    end = orjson.loads(summary.read_bytes())
    assert end["status"] == "incomplete" and end["watching"] is False and end["verify_trials"]["written"] is False
    assert "verify_trials.csv not written" in format_status(campaign_status(cfg))
