"""``[geohint] n_boot``: the site-bootstrap resamples behind Table 1's and Fig. 2's intervals are a setting.

Before: GeoHint drew a fixed 200 resamples (``DEFAULT_N_BOOT``) whatever the campaign said; ``n_boot`` in
``[geohint]`` was an unknown key (refused at load), and no report could drop the intervals. Now ``n_boot``
(default 200 then, 1000 since session 22; 0 = no intervals) is validated like GeoVerify's (an integer >= 0), recorded in the
manifest, a scoring-only key (a change re-scores, no drift warning), and named in the captions.

The campaign runs through the local OpenAI-compatible fake and the Wikidata / Nominatim fakes (sandbox hosts).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _model_harness import geohint_three_sites_toml
from geoagent.campaigns import register_all_sections
from geoagent.config import ConfigError, config_from_dict
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report import geohint as GH
from geoagent.runtime.manifest import Manifest, config_changes

from _geohint_synth import synth_results

register_all_sections()
REPO = Path(__file__).resolve().parents[1]


def _doc(tmp_path, **geohint) -> dict:
    return {"campaign": {"name": "gh-boot", "kind": "geohint", "contact": "ops@example.org"},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "budget": {"cap_usd": 1.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
            **({"geohint": geohint} if geohint else {})}


def test_n_boot_is_validated_like_geoverify_and_defaults_to_1000(tmp_path):
    from geoagent.geohint.settings import GeoHintSettings

    assert GeoHintSettings().n_boot == 1000 == GH.DEFAULT_N_BOOT  # as GeoVerify's; 200 until session 22
    assert config_from_dict(_doc(tmp_path, n_boot=0)).section("geohint").n_boot == 0
    for bad in (-1, "50", 2.5, True):
        with pytest.raises(ConfigError) as err:
            config_from_dict(_doc(tmp_path, n_boot=bad))
        assert "geohint.n_boot" in str(err.value)


def test_n_boot_is_a_scoring_only_key(tmp_path):
    Manifest(config_from_dict(_doc(tmp_path))).start_run()
    changed = config_changes(config_from_dict(_doc(tmp_path, n_boot=50)))
    assert changed.calls == [] and changed.scoring == {"geohint.n_boot": (1000, 50)}


def test_negative_n_boot_is_refused_by_the_report_functions():
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=4, n_sites=4))
    with pytest.raises(ValueError, match="n_boot must be >= 0"):
        GH.table1(agg, "forced", n_boot=-5)
    with pytest.raises(ValueError, match="n_boot must be >= 0"):
        GH.hit_by_band_points(agg, "forced", n_boot=-5)


def test_n_boot_zero_says_so_under_table1():
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=4, n_sites=4))
    t1 = GH.table1(agg, "forced", n_boot=0)
    ci = t1.columns.index("Hit rate 95 % CI")
    assert all(r[ci] is None for r in t1.rows)
    assert any("no intervals: [geohint] n_boot = 0" in n for n in t1.notes_lines())


def _toml(tmp: Path, n_boot: int) -> Path:
    cfg = tmp / "gh.toml"
    cfg.write_text(geohint_three_sites_toml("gh-boot", geohint=f"n_boot = {n_boot}"), encoding="utf-8")
    return cfg


def test_campaign_uses_records_and_captions_its_n_boot(tmp_path, release_dir):
    env = {**os.environ, "GEOAGENT_QUEUES": str(tmp_path / "q"), "GEOAGENT_STATE": str(tmp_path / "s"),
           "GEOAGENT_RELEASE": str(release_dir), "PYTHONPATH": str(REPO)}
    state = tmp_path / "s" / "gh-boot"

    def run(n_boot: int) -> subprocess.CompletedProcess:
        done = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(_toml(tmp_path, n_boot)), "--no-live"],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        return done

    run(37)
    md = (state / "report" / "report.md").read_text(encoding="utf-8")
    assert "site-bootstrap percentile intervals (37 resamples of the 3 sites, seed 1" in md      # Table 1
    # Fig. 2: 3 sites, so every interval is withheld (< 5 sites): the caption says no bars, from 37 resamples
    # (session 13: it said "error bars are 95 % percentile intervals from 37 resamples" over a figure with none)
    assert "no error bars: every interval is withheld (37 resamples drawn, seed 1)" in md
    assert json.loads((state / "manifest.json").read_text())["config"]["geohint"]["n_boot"] == 37
    second = run(0)
    assert "warning: campaign gh-boot" not in second.stderr
    assert "scoring setting changed since its last run (geohint.n_boot 37 -> 0)" in second.stderr
    md = (state / "report" / "report.md").read_text(encoding="utf-8")
    assert "no intervals: [geohint] n_boot = 0" in md and "resamples of the 3 sites" not in md
    assert "no error bars ([geohint] n_boot = 0)" in md
    with (state / "report" / "table1.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert rows and all(r["Hit rate 95 % CI lo (fraction)"] == "" for r in rows)
    assert json.loads((state / "manifest.json").read_text())["config"]["geohint"]["n_boot"] == 0
