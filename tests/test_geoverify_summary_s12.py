"""GeoVerify's console summary, session 12 walkthrough points 3, 5 and 6.

3. ``release import: 453 rows`` for a 339-trial table (6 sites + 108 ladder rows + 339 trials summed), and a
   campaign without a replay model counted the 336 lines of ``verify_raw_sample.jsonl`` in it (``3720 rows``):
   now one count per kind of file, the raw responses only when a replay model uses them.
5. With ``n_per_band = 0`` the summary explained unmatched decoys there were none of: the explanation only
   when there are some.
6. A stop's summary named requests not sent and answers not parsed, but not the answers parsed and not scored
   or scored and not aggregated (``scored: ready 2``), which GeoHint's summary does name.
Real release sample (``release_dir``) and the real planner; the stop's queue counts are the engine's
``Outcome``.
"""

from __future__ import annotations

import re

from geoagent.config import config_from_dict
from geoagent.data.importer import import_release
from geoagent.engine import Outcome
from geoagent.geoverify.campaign import GeoVerifyCampaign
from geoagent.geoverify.plan import plan_campaign
from geoagent.runtime.queue import QueueCounts


def _cfg(release_dir, name, models, **gv):
    return config_from_dict({
        "campaign": {"name": name, "kind": "geoverify", "seed": 3},
        "budget": {"cap_usd": 0.0},
        "paths": {"release_dir": str(release_dir)},
        "models": models,
        **({"geoverify": gv} if gv else {}),
    })


SIM = [{"name": "sim", "provider": "simulated", "model": "sim-1"}]


def _summary(cfg, outcome=None) -> list[str]:
    camp = GeoVerifyCampaign()
    camp._plan = plan_campaign(cfg)
    camp._scores = {}
    camp._image_warning = camp._photo_warning = None
    camp._refusals = []
    return camp.summary_lines(cfg, None, outcome)


def _import_line(lines):
    return next(ln for ln in lines if ln.strip().startswith("release import:"))


def test_release_import_line_counts_each_kind_of_file_and_no_raw_without_replay(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    rel = import_release(release_dir)
    n_sites, n_trials = len(rel.sites), len(rel.trials)
    n_points = sum(len(lad.points) for lad in rel.ladders.values())
    line = _import_line(_summary(_cfg(release_dir, "gv-imp", SIM)))
    # before: "release import: 3720 rows, 0 malformed": sites + ladder rows + trials + raw lines summed
    assert f"{n_trials} trials ({rel.trials_file.name})" in line, line
    assert f"{n_sites} sites" in line and f"{n_points} ladder points" in line, line
    assert "raw" not in line and "rows" not in line.split(",")[0], line
    assert "0 malformed" in line


def test_release_import_line_counts_raw_responses_when_a_replay_model_uses_them(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    rel = import_release(release_dir)
    replay = [{"name": "rec", "provider": "replay", "model": "recorded",
               "replay": {"path": str(release_dir / "verify_raw_sample.jsonl"), "key_field": "replay_key",
                          "record_key_fields": ["trial_id", "model"], "text_field": "raw"}}]
    line = _import_line(_summary(_cfg(release_dir, "gv-rep", replay)))
    assert f"{len(rel.raw)} recorded responses (verify_raw_sample.jsonl)" in line, line


def test_unmatched_decoys_explained_only_when_there_are_some(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    none = _summary(_cfg(release_dir, "gv-b0", SIM, trials="build", n_per_band=0, n_control=1))
    built = next(ln for ln in none if "built trials per band" in ln)
    assert "unmatched decoys 0" in built and "referenceability tier" not in built, built
    some = _summary(_cfg(release_dir, "gv-b3", SIM, trials="build", n_per_band=3))
    built = next(ln for ln in some if "built trials per band" in ln)
    n = int(re.search(r"unmatched decoys (\d+)", built).group(1))
    assert ("drawn from any referenceability tier" in built) == (n > 0), built


def test_a_stop_names_answers_not_scored_and_scores_not_aggregated(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cfg = _cfg(release_dir, "gv-stop", SIM)
    counts = {"requests": QueueCounts(5, 0, 7, 0), "responses": QueueCounts(0, 0, 7, 0),
              "answers": QueueCounts(1, 0, 6, 0), "scored": QueueCounts(2, 0, 4, 0)}
    text = "\n".join(_summary(cfg, Outcome("c", "interrupted", 130, 12, counts, None)))
    assert ("1 parsed answer not scored yet and 2 scored answers not aggregated yet: left queued by the "
            "interrupt; re-run the same command to finish (no new model call)") in text, text
    budget = "\n".join(_summary(cfg, Outcome("c", "budget exhausted", 3, 12, counts, None)))
    assert "left queued by the budget stop" in budget
    done = {"answers": QueueCounts(0, 0, 7, 0), "scored": QueueCounts(0, 0, 7, 0)}
    assert "not aggregated" not in "\n".join(_summary(cfg, Outcome("c", "complete", 0, 12, done, None)))
