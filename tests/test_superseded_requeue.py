"""Requeuing tasks set aside as superseded says what the next run does with them, and that run keeps the reason
they were set aside with; a list change in that reason reads as items added or removed.

Walkthrough: ``run.py dead CONFIG --requeue`` of 615 superseded tasks printed "requeued 615 dead tasks; re-run
the campaign to process them"; the next run set them aside again with the vaguer "(the config or its inputs
changed)". And the reason of a GeoHint run with sites removed was a positional diff of every later index
(``geohint.sites[0]: 'a' -> 'b'; ... geohint.sites[6]: 'x' -> unset``), a removed model a cut dict. A generic
campaign on the local OpenAI-compatible fake: real engine, queues and CLI.
"""

from __future__ import annotations

import anyio
import pytest

from geoagent.cli import main as cli_main
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.drift import changed_keys_text
from geoagent.runtime.queue import QueueCounts
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve

from test_superseded_tasks import GOOD_KEY, _requests_queue, _toml

@pytest.fixture(autouse=True)
def _no_upstream_wait(monkeypatch):
    # a downstream-only run plans here without a model caller (only_stages); it must end at once, as before
    # fixstages43's wait for an upstream process (GEOAGENT_UPSTREAM_WAIT_S: 10 minutes by default)
    monkeypatch.setenv("GEOAGENT_UPSTREAM_WAIT_S", "0")



def test_requeued_superseded_tasks_are_set_aside_again_with_their_reason(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("SHRINK_KEY", GOOD_KEY)
    app = llm_openai.make_app(api_keys=[GOOD_KEY])

    async def main():
        async with serve(app) as base:
            path = _toml(tmp_path, 4, base)
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            _toml(tmp_path, 10, base)
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False,
                               only_stages=["collector"])
            _toml(tmp_path, 6, base)
            await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            capsys.readouterr()
            assert cli_main(["dead", str(path), "--requeue"]) == 0
            requeued = capsys.readouterr().out
            again = await run_campaign(load_config(path), live=False, handle_signals=False, export=False)
            err = capsys.readouterr().err
            assert cli_main(["dead", str(path)]) == 0
            listed = capsys.readouterr().out
            q = _requests_queue(tmp_path)
            try:
                counts = await q.counts()
            finally:
                await q.close()
            return requeued, again, err, listed, counts

    requeued, again, err, listed, counts = anyio.run(main)
    assert requeued.strip() == ("requeued 4 dead tasks (4 of them were set aside as superseded, not in the current "
                                "plan: the next run sets those aside again, unsent, unless its config plans them "
                                "again); re-run the campaign to process them")
    assert again.status == "complete" and counts == QueueCounts(done=6, dead=4)
    # set aside again, with the reason they had (the config change that dropped them), not the generic one
    assert "the config or its inputs changed" not in err + listed
    assert "set aside 4 queued tasks" in err
    assert listed.count("superseded: not in the current plan (config changed: generic.n_requests: 10 -> 6)") == 4


def test_a_list_change_reads_as_items_added_or_removed():
    sites = ["a", "b", "c", "d", "e", "f", "x"]
    kept = ["b", "c", "d", "e", "f"]  # "a" and "x" removed: every index changes position
    keys = {f"geohint.sites[{i}]": (old, kept[i] if i < len(kept) else None) for i, old in enumerate(sites)}
    keys["models[1]"] = ({"name": "sim-b", "provider": "simulated", "model": "sim-b", "concurrency": 8}, None)
    keys["geoverify.n_per_band"] = (3, 2)
    assert changed_keys_text(keys) == ("geohint.sites: removed 'a', 'x'; models (sim-b) removed; "
                                       "geoverify.n_per_band: 3 -> 2")
    assert changed_keys_text({"geohint.sites[0]": ("a", "b"), "geohint.sites[1]": ("b", "a")}) == (
        "geohint.sites: reordered")
    assert changed_keys_text({"geohint.sites[2]": (None, "c")}) == "geohint.sites: added 'c'"


def test_a_model_replaced_by_another_names_no_index_neither_file_has():
    """Walkthrough 25, item 5: ``[sim-a, sim-b]`` -> ``[sim-a, sim-c]`` read ``models[2] (sim-b) removed; models[1]
    (sim-c) added``: sim-b was models[1], and neither file has a models[2] (the alignment by name puts removed
    entries after the current ones)."""
    from geoagent.runtime.manifest import align_by_name, changed_keys

    a, b, c = ({"name": n, "provider": "simulated", "model": n} for n in ("sim-a", "sim-b", "sim-c"))
    before, now = align_by_name([a, b], [a, c])
    text = changed_keys_text(changed_keys(before, now, "models"))
    assert text == "models (sim-b) removed; models[1] (sim-c) added", text
