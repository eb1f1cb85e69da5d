"""``status`` says how to go on after a run cut short by a second Ctrl-C (walkthrough 25, item 4).

It left work queued, yet ``status`` said only ``last progress (run ended)`` (a second Ctrl-C exits before the
manifest records the run's end), with no resume hint; a single interrupted process got ``re-run the same command
to resume``. (The walkthrough's other case, a scale-out run whose processes were all interrupted, is handled by the
same rule, the manifest's newest ended run standing for the processes, and has no test of its own.)"""

from __future__ import annotations

from geoagent.cli import main
from geoagent.status import RESUME_HINT
from test_export_interim_note import CONFIG as INTERIM


# the interim-export tests' small generic campaign (8 simulated calls at $100 per 1M tokens), under its own name
CONFIG = INTERIM.replace('name = "interim"', 'name = "cutshort"').replace("cap_usd = {cap}", "cap_usd = 0.02")


def _runs_as(state_dir, status: str) -> None:
    """Rewrite the manifest's runs to ``status`` (a run whose end was never recorded reads ``running``)."""
    import orjson

    path = state_dir / "manifest.json"
    man = orjson.loads(path.read_bytes())
    for run in man["runs"]:
        run["status"] = status
    path.write_bytes(orjson.dumps(man))


def _more_work(root) -> None:
    """A task put into the requests queue after the run (work left, as a cut run leaves it)."""
    import anyio

    from geoagent.runtime.queue import open_queue

    async def put():
        q = open_queue(root / "queues", "cutshort", "requests")
        try:
            await q.put("extra-1", {"index": 99})
        finally:
            await q.close()

    anyio.run(put)


def test_a_run_whose_end_the_manifest_never_recorded_gets_the_resume_hint(isolated_roots, capsys):
    """The state a second Ctrl-C during the end of a run leaves: the progress stream's final record written, the
    run lock released, the manifest still saying ``running``, requests left queued."""
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG.replace("cap_usd = 0.02", "cap_usd = 10.0"), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0
    _more_work(isolated_roots)
    _runs_as(isolated_roots / "state" / "cutshort", "running")
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    text = capsys.readouterr().out
    assert "last progress (run ended)" in text and RESUME_HINT.strip() in text, text


def test_a_budget_stop_with_an_unreadable_manifest_gets_no_resume_hint(isolated_roots, capsys):
    """Review rev25 (4): with the manifest unreadable, the first version took "no recorded end" for a cut run and
    printed "re-run the same command to resume" above the budget stop's "raise [budget] cap_usd"."""
    cfg = isolated_roots / "c.toml"
    cfg.write_text(CONFIG, encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 4
    (isolated_roots / "state" / "cutshort" / "manifest.json").write_text("{broken", encoding="utf-8")
    capsys.readouterr()
    main(["status", str(cfg)])
    text = capsys.readouterr().out
    assert "raise [budget] cap_usd" in text and RESUME_HINT.strip() not in text, text
