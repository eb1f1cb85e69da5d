"""Walk43 #1: a config change's verdict counts only the done tasks the current plan still holds.

The walk ran ``my_verify.toml`` on the release (170 requests done), then pointed ``[geoverify] release_dir`` and
``image_root`` at the demo crawl under the same campaign name: the run planned 345 new requests, said the 170 old
ones were no longer in the plan (their answers kept, not scored), and then warned "this run planned 345 new tasks
that use the new settings next to 170 done under the old ones, so results would mix both versions", recording a
``config_mix`` in the manifest, while the report scored only the 345 new answers: nothing mixed. Now the run counts
the done tasks its plan holds; when none is, an info line says nothing mixes and no mix is recorded. A done task the
plan still holds keeps the warning.

Here a ``generic`` campaign (simulated model, through the CLI entry): a task section key (``[generic] image``) changes
how every request is asked, and the only model of the first run is replaced by another, so no done task is planned
again."""

from __future__ import annotations

import anyio

from _model_harness import generic_campaign, run_cli
from geoagent.runtime.manifest import read_manifest
from geoagent.runtime.scope import done_in_plan
from geoagent.runtime.sqlite_queue import SQLiteQueue


def _model(name: str, model: str) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "simulated"\nmodel = "{model}"\nmax_output_tokens = 100\n'
            'concurrency = 4\nrate = { requests = 500, period_s = 1.0 }\n')


def _with_image(text: str) -> str:
    return text.replace("n_requests = 4\n", "n_requests = 4\nimage = true\n")


def test_done_tasks_no_longer_planned_mix_with_nothing(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="notplanned", n=4, models=_model("a", "sim-1"))
    assert run_cli(p, capsys)[0] == 0
    # every request asked another way ([generic] image), and model a's 4 done tasks no longer planned (b instead)
    p.write_text(_with_image(p.read_text()).replace('name = "a"', 'name = "b"').replace('"sim-1"', '"sim-2"'))
    rc, _, err = run_cli(p, capsys)
    assert rc == 0, err
    assert "would mix" not in err and "warning" not in err, err
    assert ("the 4 tasks done under the old settings are no longer in the plan (their stored answers are kept but "
            "not scored), so every answer the results count uses the new settings: nothing mixes (this run planned "
            "4 new tasks)") in err, err
    man = read_manifest(tmp_path / "state" / "notplanned")
    assert "config_mix" not in man
    drift = man["runs"][-1]["config_drift"]
    assert drift["applied"] is True and drift["done_not_planned"] == 4


def test_done_tasks_still_planned_keep_the_warning(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="stillplanned", n=4, models=_model("a", "sim-1"))
    assert run_cli(p, capsys)[0] == 0
    # the same change, model a kept (its 4 done tasks still planned) and model b added: 4 new next to 4 old
    p.write_text(_with_image(p.read_text()) + _model("b", "sim-2"))
    rc, _, err = run_cli(p, capsys)
    assert rc == 0, err
    assert ("this run planned 4 new tasks that use the new settings next to 4 done under the old ones" in err
            and "so results would mix both versions" in err), err
    man = read_manifest(tmp_path / "state" / "stillplanned")
    assert man["config_mix"][-1]["tasks_added"] == 4 and "done_not_planned" not in man["config_mix"][-1]


def test_done_in_plan_counts_the_recorded_plan_per_model(tmp_path):
    """The plan record (``plan_keys.tsv``) read against the queue: done keys only, per model; a task whose key of an
    earlier geoagent version is done counts once; keys done but not in the record are not counted."""
    state = tmp_path / "state"
    state.mkdir()
    shown = "t1|shows=img-9|sim"  # a swapped-image control's key; its earlier key is "t1|sim"
    (state / "plan_keys.tsv").write_text(f"a\ta|0\na\ta|1\nb\tb|0\nsim\t{shown}\n", encoding="utf-8")

    async def main_() -> dict[str, int] | None:
        q = SQLiteQueue(tmp_path / "requests.sqlite")
        try:
            await q.put_many([(k, {}) for k in ("a|0", "a|1", "b|0", "gone|0", "t1|sim", shown)])
            tasks = {t.key: t for t in await q.lease(10, 60.0)}
            await q.ack([tasks[k] for k in ("a|0", "gone|0", "t1|sim", shown)])
            await q.release([tasks[k] for k in ("a|1", "b|0")])
            return await done_in_plan(state, q, chunk=2)  # several chunks
        finally:
            await q.close()

    assert anyio.run(main_) == {"a": 1, "sim": 1}
    assert anyio.run(done_in_plan, tmp_path / "no-record", None) is None
