"""Console wording found by the session-10 fresh-user walkthrough (one test per defect).

Each test runs the real code path (local files, real queues; no function-level mocks) and checks the text a
user reads.
"""

from __future__ import annotations

import asyncio

from geoagent import constants as C
from geoagent.crawl.stages import watch_config_cities
from geoagent.runtime.queue import open_queue


def test_watch_new_city_line_does_not_say_the_tool_edited_the_config(tmp_path, capsys):
    """``crawl --watch`` read ``planned new city 'Mirror Bay' (city:mirrorbay), added to /tmp/.../c4.toml``, as if
    the tool had edited the user's file: the city was *found in* it."""
    cfg = tmp_path / "c4.toml"

    async def go():
        q = open_queue(tmp_path / "queues", "w", C.EDGE_CITIES)
        cfg.write_text('[crawl]\ncontact = "mailto:x@example.org"\n\n[[crawl.cities]]\ncity = "Mirror Bay"\n'
                       'lat = 10.0\nlon = 20.0\n', encoding="utf-8")
        stop = asyncio.Event()
        task = asyncio.create_task(watch_config_cities(cfg, q, interval_s=0.05, stop=stop))
        await asyncio.sleep(0.2)
        stop.set()
        await task
        await q.close()

    asyncio.run(go())
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "Mirror Bay" in ln)
    assert "added to" not in line, line
    assert f"found in {cfg}" in line, line


def test_run_summary_says_how_many_dead_letters_it_did_not_list():
    """The summary said ``missing: 4 tasks dead-lettered`` and listed 3 with no word of the 4th: a cut list says
    how many more there are and where to see them."""
    from geoagent.engine import Outcome
    from geoagent.runtime.queue import DeadLetter, QueueCounts

    dead = {"requests": [DeadLetter(f"k{i}", {}, 5, "PermanentFailure: 400") for i in range(4)]}
    text = Outcome("c", "incomplete", 3, 4, {"requests": QueueCounts(dead=4)}, None, dead).summary()
    assert "missing: 4 tasks dead-lettered" in text
    listed = [ln for ln in text.splitlines() if ln.startswith("    requests/")]
    assert len(listed) == 3, text
    more = [ln for ln in text.splitlines() if "1 more" in ln]
    assert len(more) == 1 and "requests" in more[0] and "run.py dead" in more[0], text
    # nothing cut: no "more" line
    text = Outcome("c", "incomplete", 3, 3, {"requests": QueueCounts(dead=3)}, None,
                   {"requests": dead["requests"][:3]}).summary()
    assert " more " not in text, text


def test_interrupted_geohint_summary_counts_the_work_left_at_every_stage():
    """An interrupted GeoHint summary said ``1 answers not geocoded yet`` and nothing of ``located: ready 1`` (an
    answer geocoded, not scored yet) nor of the requests left unsent: each stage's queued work is counted, with
    the right plural."""
    from geoagent.engine import Outcome
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.runtime.queue import QueueCounts

    counts = {"requests": QueueCounts(ready=5, leased=2), "responses": QueueCounts(),
              "answers": QueueCounts(ready=1), "located": QueueCounts(ready=1),
              "scored": QueueCounts(ready=2, leased=1)}
    out = Outcome("gh", "interrupted", 130, 20, counts, None)
    camp = GeoHintCampaign()
    camp._agg = GeoHintAggregator()
    text = "\n".join(camp.summary_lines(None, None, out))
    assert "1 answer not geocoded yet" in text and "1 answers" not in text, text
    assert "1 geocoded answer not scored yet" in text, text
    assert "3 scored answers not aggregated yet" in text, text
    summary = out.summary()
    assert "7 requests not sent yet: left queued by the interrupt" in summary, summary


def test_demo_console_table1_has_the_report_s_intervals(tmp_path, monkeypatch):
    """The demo's console GeoHint Table 1 drew its bootstrap with seed 0 (``[28.2, 87.1]``, note ``seed 0``) while
    report.md / table1.csv used the campaign's seed (``[34.1, 83.7]``, ``seed 20260401``): the console table is
    the report's, intervals and note alike."""
    import sys
    from pathlib import Path

    from geoagent.config import config_from_dict
    from geoagent.demo import geohint_table1_text
    from geoagent.geohint.campaign import aggregate_from_store, bootstrap_params
    from geoagent.geohint.stages import SCORED_TABLE
    from geoagent.report.geohint import render_text, table1
    from geoagent.runtime.store import open_campaign_state

    sys.path.insert(0, str(Path(__file__).parent))
    from _geohint_synth import synth_results

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    cfg = config_from_dict({
        "campaign": {"name": "gh-t1", "kind": "geohint", "seed": 20260401, "contact": "ops@example.org"},
        "budget": {"cap_usd": 0.0},
        "models": [{"name": "m-a", "provider": "simulated", "model": "m-a"}],
        "geohint": {"images": "synthetic", "n_boot": 200},
    })
    rows = synth_results(seed=1, n_sites=6, models=("m-a",))
    with open_campaign_state(cfg.name, root=cfg.state_root()) as st:
        st.store.put_results(SCORED_TABLE, [(r.key, r.to_json()) for r in rows])
        agg = aggregate_from_store(st.store)
    assert bootstrap_params(cfg) == (200, 20260401)  # what the report's write_report gets
    want = render_text(table1(agg, condition="forced", n_boot=200, seed=20260401).to_rich())
    got = geohint_table1_text(cfg)
    assert got.startswith(want), got
    assert "seed 20260401" in got and "seed 0" not in got, got
