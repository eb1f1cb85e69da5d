"""A model call paused by its host (429 with a Retry-After beyond the host's backoff_max_s) holds no reservation
while its task waits out the pause (session 11)."""

from __future__ import annotations

import sqlite3
import time


def test_a_paused_call_releases_its_reservation_until_the_task_is_redelivered(tmp_path, monkeypatch):
    import anyio

    from test_cost_dead_letter_deliveries import KEY, _cfg

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.sandbox import llm_openai
    from geoagent.sandbox.faults import FaultConfig
    from geoagent.sandbox.server import serve

    pause_s = 2.0
    monkeypatch.setenv("DEAD_TEST_KEY", KEY)
    faults = FaultConfig(rate=1.0, kinds=("429",), retry_after_s=pause_s)
    app = llm_openai.make_app(faults=faults, api_keys=[KEY])
    db = tmp_path / "s" / "dead" / "campaign.sqlite"
    seen: dict[str, object] = {}

    def read() -> tuple[list[tuple[str, str]], int, int]:
        con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            rows = con.execute("SELECT request_key, state FROM reservations ORDER BY id").fetchall()
            spent, reserved = con.execute("SELECT spent_nusd, reserved_nusd FROM ledger_totals").fetchone()
        finally:
            con.close()
        return rows, spent, reserved

    async def watch() -> None:
        while True:  # the first delivery's call
            if db.exists():
                try:
                    if read()[0]:
                        break
                except sqlite3.Error:
                    pass
            await anyio.sleep(0.02)
        seen["first_at"] = time.monotonic()
        await anyio.sleep(pause_s / 3)  # the 429 is in, the task waits out the pause
        rows, spent, reserved = read()
        seen["mid"] = (rows, spent, reserved)
        faults.rate = 0.0  # the next delivery is answered

    async def go():
        async with serve(app) as base:
            p = _cfg(tmp_path, base)
            host = base.split("//", 1)[1].rstrip("/")
            p.write_text(p.read_text().replace("n_requests = 3", "n_requests = 20")
                         + f'\n[hosts."{host}"]\nrate = 1000\nbackoff_max_s = 0.05\nmax_attempts = 3\n',
                         encoding="utf-8")
            async with anyio.create_task_group() as tg:
                tg.start_soon(watch)
                out = await run_campaign(load_config(p), live=False, handle_signals=False, export=False)
            return out

    t0 = time.monotonic()
    out = anyio.run(go)
    rows, spent, reserved = seen["mid"]
    assert [state for _, state in rows if state == "open"] == [], rows  # none held through the pause
    assert reserved == 0 and spent == 0, (reserved, spent)
    assert out.counts["requests"].dead == 0 and out.exit_code == 0, out.counts
    assert time.monotonic() - t0 >= pause_s  # redelivered after the pause, not before
    final, spent_after, reserved_after = read()
    assert [s for _, s in final].count("settled") == 20, final  # settled once each
    assert len({k for k, _ in final}) == 20
    assert spent_after > 0 and reserved_after == 0
    assert out.spend["open_reservations"] == 0
