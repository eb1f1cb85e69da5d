"""Adversarial campaign outcomes: a GeoVerify campaign with missing work says so in its saved report.

A replay file holding only the first 200 of the release sample's 336 recorded answers leaves 136 trials
without an answer: they are dead-lettered (missing), the run exits 3, and the written report (what a
researcher shares) must count them per model, checked against an independent count from the file.
"""

from __future__ import annotations

import collections
import csv
from pathlib import Path

import orjson

from geoagent.cli import main
from geoagent.engine import EXIT_INCOMPLETE
from _model_harness import geoverify_replay_toml


def test_geoverify_report_counts_missing_trials_per_model(tmp_path, release_dir, capsys):
    lines = (release_dir / "verify_raw_sample.jsonl").read_bytes().splitlines()
    (tmp_path / "rec.jsonl").write_bytes(b"\n".join(lines[:200]) + b"\n")
    kept = {(r["trial_id"], r["model"]) for r in map(orjson.loads, lines[:200])}
    expected = collections.Counter(r["model"] for r in map(orjson.loads, lines[200:])
                                   if (r["trial_id"], r["model"]) not in kept)
    assert sum(expected.values()) == 136
    cfg = tmp_path / "gv.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, "gv-missing", release_dir, replay_path=tmp_path / "rec.jsonl",
                                         queue="backoff_base_s = 0.01\nbackoff_max_s = 0.02"))
    assert main(["run", str(cfg), "--no-live"]) == EXIT_INCOMPLETE
    capsys.readouterr()
    report = tmp_path / "state" / "gv-missing" / "report"
    md = (report / "geoverify_table.md").read_text()
    # before the fix the saved tables showed 200 answers' statistics with no word of the 136 missing trials
    assert "136 trial(s) missing" in md
    for model, n in expected.items():
        assert f"{model}: {n}" in md
    with (report / "geoverify_missing.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert collections.Counter(r["model"] for r in rows) == expected
    assert all("ReplayMiss" in r["reason"] for r in rows)
    assert "136 trial(s) missing" in (report / "geoverify_table.txt").read_text()


def test_complete_geoverify_report_says_none_missing(tmp_path, release_dir, capsys, monkeypatch):
    """Nothing dead-lettered; the release's trials with no recording in the replay file (which lies in the folder the
    campaign plans from, its ``[geoverify] release_dir``) are listed as not replayed. The same with
    ``$GEOAGENT_RELEASE`` set to that folder or unset (review41a #6: unset, the replay file was read as outside the
    release and the trials not replayed went unlisted)."""
    written = {}
    for name, env in (("gv-complete", None), ("gv-complete-env", str(release_dir))):
        if env is None:
            monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)
        else:
            monkeypatch.setenv("GEOAGENT_RELEASE", env)
        cfg = tmp_path / f"{name}.toml"
        cfg.write_text(geoverify_replay_toml(tmp_path, name, release_dir))
        assert main(["run", str(cfg), "--no-live"]) == 0
        capsys.readouterr()
        report = Path(tmp_path / "state" / name / "report")
        table = (report / "geoverify_table.md").read_text()
        assert "Missing trials (dead-lettered): none." in table
        with open(report / "geoverify_missing.csv", newline="") as fh:
            rows = list(csv.DictReader(fh))
        assert rows and {r["edge"] for r in rows} == {"not replayed"}, rows[:3]
        written[name] = (rows, [ln for ln in table.splitlines() if "not replayed" in ln])
    assert written["gv-complete"] == written["gv-complete-env"]


def test_geohint_report_counts_missing_requests_per_model(tmp_path, release_dir, monkeypatch):
    # the Wikidata fake answers 500 to half the requests and nothing is retried: some answers cannot
    # be located and are dead-lettered; the saved report must count them (before the fix it did not)
    import anyio

    from geoagent import engine
    from geoagent.config import config_from_dict, load_config  # noqa: F401
    from geoagent.sandbox import nominatim as nm_fake
    from geoagent.sandbox import wikidata as wd_fake
    from geoagent.sandbox.faults import FaultConfig
    from geoagent.sandbox.gazetteer import Gazetteer
    from geoagent.sandbox.server import serve
    from geoagent.status import campaign_status, dead_letters
    from test_geohint_campaign import _cfg

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    async def go():
        gaz = Gazetteer.from_release(release_dir)
        faults = FaultConfig(rate=0.5, kinds=("500",), seed=3)
        async with serve(wd_fake.make_app(gaz, faults=faults)) as wd, \
                serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            d = _cfg(wd, nm)
            d["geohint"]["conditions"] = ["baseline", "forced"]
            d["geohint"]["baseline_repeats"] = 1
            for h in d["hosts"].values():
                h["max_attempts"] = 1
            d["queue"] = {"max_attempts": 1, "backoff_base_s": 0.01, "backoff_max_s": 0.02}
            cfg = config_from_dict(d)
            return await engine.run_campaign(cfg, live=False, handle_signals=False, export=False), cfg

    out, cfg = anyio.run(go)
    dead = [d for items in dead_letters(cfg, limit=10_000).values() for d in items]
    assert out.exit_code == EXIT_INCOMPLETE and 0 < len(dead) < out.planned
    assert sum(c.dead for c in campaign_status(cfg)["queues"].values()) == len(dead)
    md = (tmp_path / "state" / "gh-engine" / "report" / "report.md").read_text(encoding="utf-8")
    assert f"Incomplete: {len(dead)} request(s) missing" in md
    per_model = collections.Counter(d.key.split("|")[1] for d in dead)
    for model, n in per_model.items():
        assert f"{model}: {n}" in md
    with (tmp_path / "state" / "gh-engine" / "report" / "missing.csv").open(newline="") as fh:
        assert collections.Counter(r["model"] for r in csv.DictReader(fh)) == per_model


def test_rerun_with_edited_requests_warns_that_results_would_mix(tmp_path, release_dir, capsys):
    # planned work keeps its original payload (queue put of an existing trial|model key is a no-op): a prompt
    # or max_output_tokens edited between runs would silently apply to part of the campaign only
    def config(cap: float, tokens: int) -> str:
        return geoverify_replay_toml(tmp_path, "gv-drift", release_dir, cap_usd=cap,
                                     geoverify=f"n_boot = 0\nmax_output_tokens = {tokens}")

    cfg = tmp_path / "gv.toml"
    cfg.write_text(config(0.0, 512))
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert "warning" not in capsys.readouterr().err
    cfg.write_text(config(5.0, 512))  # only the cap: no warning
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert "warning" not in capsys.readouterr().err
    cfg.write_text(config(5.0, 300))
    assert main(["run", str(cfg), "--no-live"]) == 0
    err = capsys.readouterr().err
    # every trial is already answered: the change is named and reaches none of them (with work left queued it
    # is a warning that results would mix: tests/test_config_drift_keys.py)
    assert ("info: campaign gv-drift: geoverify changed since its last run (geoverify.max_output_tokens: 512 -> 300); "
            "every planned task is done") in err
