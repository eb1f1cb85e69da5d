"""Two first runs of one GeoVerify campaign at other taus, started together, no longer mix their work (review44b #1).

Both passed the tau guard (no manifest and no work yet), and both queued their plans: the queue held claims of both
taus, the manifest recorded one and the report scored the other's labels. Now each run checks again under the
campaign's plan lock (``state/<campaign>/plan.lock``, held from that check to the manifest's record of its start),
so the second is refused (exit 2, the guard's message) and writes nothing of its own: no task, no manifest run, no
runs-index entry. Tested with two real processes started together (no hook can order them, so it is repeated: with
either order the result must be one run and one refusal). Also the backstop: a ``tau_m`` drift found after
planning is an error before anything is queued, not the config-drift warning.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from test_geoverify_tau_bands42 import write_build_toml

REPO = Path(__file__).resolve().parents[1]


def _start(cfg_path: Path, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfg_path), "--no-live"], env=env,
                            cwd=str(cfg_path.parent), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.parametrize("rep", [1, 2])
def test_two_first_runs_at_other_taus_started_together_one_runs_the_other_is_refused(tmp_path, release_dir, rep,
                                                                                    monkeypatch):
    from geoagent import constants as C
    from geoagent.config import load_config
    from geoagent.geoverify.prompt import DEFAULT_TEMPLATE_PATH
    from geoagent.geoverify.tau_guard import claim_tau_m, label_disagreement
    from geoagent.runtime.backend import some_payloads

    name = f"gv-race-{rep}"
    paths = {tau: write_build_toml(tmp_path / f"{name}-{tau}.toml", name, release_dir, tau) for tau in (150, 200)}
    index = tmp_path / "runs_index.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_QUEUES": str(tmp_path / "queues"),
           "GEOAGENT_STATE": str(tmp_path / "state"), "GEOAGENT_RUNS_INDEX": str(index)}
    for key in ("GEOAGENT_QUEUES", "GEOAGENT_STATE"):  # this process reads the campaign too
        monkeypatch.setenv(key, env[key])
    procs = {tau: _start(p, env) for tau, p in paths.items()}  # started together, as the reviewer did
    out = {tau: (p.communicate(timeout=240), p.returncode) for tau, p in procs.items()}
    codes = sorted(rc for _, rc in out.values())
    assert codes == [0, 2], {tau: (rc, err[-3000:]) for tau, ((_, err), rc) in out.items()}
    won = next(tau for tau, (_, rc) in out.items() if rc == 0)
    lost = 350 - won
    (lost_out, lost_err), _ = out[lost]
    assert lost_err.startswith(f"config error: {paths[lost]}: [geoverify] tau_m = {lost} m, but campaign {name} was "
                               f"run at tau_m = {won} m ("), lost_err
    assert "Nothing was run or changed" in lost_err and f"set tau_m back to {won}" in lost_err
    assert "complete" not in lost_out

    # the manifest records the winner's tau and one run (the refused one recorded none)
    sdir = tmp_path / "state" / name
    manifest = orjson.loads((sdir / C.MANIFEST_FILE).read_bytes())
    assert manifest["config"]["geoverify"]["tau_m"] == won
    assert len(manifest["runs"]) == 1 and not manifest.get("config_mix")
    # every queued claim names the winner's tau, nothing was set aside as superseded, and the scored labels agree
    cfg = load_config(paths[won])
    payloads = some_payloads(cfg, C.EDGE_REQUESTS, 100_000)
    template = DEFAULT_TEMPLATE_PATH.read_text(encoding="utf-8")
    taus = {claim_tau_m(p["prompt"], p["meta"]["trial"]["cand"], template) for p in payloads}
    assert taus == {won}, taus
    from geoagent.runtime.sqlite_queue import read_counts

    counts = read_counts(cfg.queues_root(), name, C.EDGE_REQUESTS)
    assert counts.dead == 0 and counts.done == counts.total == len(payloads)
    assert label_disagreement(cfg, float(won)) is None
    # the runs index names only the config that ran
    lines = [orjson.loads(ln) for ln in index.read_bytes().splitlines() if ln.strip()]
    assert lines and {Path(ln["config"]).name for ln in lines} == {paths[won].name}, lines


def test_a_tau_drift_found_after_planning_is_refused_not_warned(tmp_path, release_dir, monkeypatch, capsys):
    """The backstop (:func:`geoagent.engine.check_change_after_plan`) on the real manifest of a real run: another
    tau over held work is the guard's refusal; over no work, or the same tau, it passes."""
    from geoagent.cli import main
    from geoagent.config import ConfigError, load_config
    from geoagent.engine import check_change_after_plan, load_kind
    from geoagent.runtime.queue import QueueCounts
    from geoagent.runtime.stage import StageContext

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    name = "gv-backstop"
    at150 = write_build_toml(tmp_path / "b150.toml", name, release_dir, 150)
    at200 = write_build_toml(tmp_path / "b200.toml", name, release_dir, 200)
    assert main(["run", str(at150), "--no-live"]) == 0
    capsys.readouterr()
    kind = load_kind("geoverify")
    cfg200, cfg150 = load_config(at200), load_config(at150)
    held = QueueCounts(done=238)
    with pytest.raises(ConfigError) as err:
        check_change_after_plan(cfg200, kind, StageContext(name, {"config_as_written": cfg200}), held)
    text = str(err.value)
    assert (f"[geoverify] tau_m = 200 m, but campaign {name} was run at tau_m = 150 m (recorded in "
            f"{tmp_path / 'state' / name / 'manifest.json'}) and holds work made at it (238 request tasks queued "
            "(238 done))") in text, text
    assert getattr(err.value, "short", "") == "its [geoverify] tau_m = 200 m, but the campaign's work was made at 150 m"
    # nothing held: the change reaches every task; the same tau: no change
    check_change_after_plan(cfg200, kind, StageContext(name, {"config_as_written": cfg200}), QueueCounts())
    check_change_after_plan(cfg150, kind, StageContext(name, {"config_as_written": cfg150}), held)
