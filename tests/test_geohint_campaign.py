"""GeoHint campaign kind through the engine: real sites and ladders, simulated provider, geocoder against
the local Wikidata and Nominatim fakes, report written, re-run makes no new calls (issue 4 acceptance)."""

from __future__ import annotations

import importlib.util
from urllib.parse import urlsplit

import anyio
import pytest

from geoagent import engine
from geoagent.config import config_from_dict
from geoagent.geohint.campaign import settings_of
from geoagent.sandbox import nominatim as nm_fake
from geoagent.sandbox import wikidata as wd_fake
from geoagent.sandbox.gazetteer import Gazetteer
from geoagent.sandbox.server import serve

SITES = ["paris_marais", "tokyo_shibuya"]
FAST = {"rate": 2000.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.1, "timeout_s": 10.0}


def _cfg(wd_url: str, nm_url: str) -> dict:
    return {
        "campaign": {"name": "gh-engine", "kind": "geohint", "seed": 1, "contact": "ops@example.org"},
        "budget": {"cap_usd": 0.0},
        "models": [{"name": "sim-a", "provider": "simulated", "model": "sim-a"},
                   {"name": "sim-b", "provider": "simulated", "model": "sim-b", "sampling_rate": 0.5}],
        "hosts": {urlsplit(wd_url).netloc: FAST, urlsplit(nm_url).netloc: FAST},
        "geohint": {
            "sites": SITES, "conditions": ["baseline", "forced", "forced_warn"], "images": "synthetic",
            "baseline_repeats": 2, "n_flips": 200, "n_splits": 10,
            "geocoder": {"wikidata_url": wd_url + "/w/api.php", "nominatim_url": nm_url, "nominatim_max_requests": 100_000},
        },
    }


def _run(release_dir, edit=None):
    """Run the campaign of :func:`_cfg` (``edit``: a function that changes its raw table first) against the local
    geocoder fakes; return ``(outcome, cfg)``."""
    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            raw = _cfg(wd, nm)
            if edit is not None:
                edit(raw)
            cfg = config_from_dict(raw)
            return await engine.run_campaign(cfg, live=False, handle_signals=False, export=False), cfg

    return anyio.run(main)


def test_geohint_campaign_through_the_engine_and_resume(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    if importlib.util.find_spec("geoagent.campaigns.geohint") is None:  # until the lead's re-export lands
        monkeypatch.setitem(engine.KINDS, "geohint", "geoagent.geohint.campaign:GeoHintCampaign")
    out, cfg = _run(release_dir)
    assert out.status == "complete", out.summary()
    assert out.missing == 0
    assert settings_of(cfg).sites == SITES
    names = {p.name for p in out.report_files}
    assert {"report.md", "table1.csv", "table4.csv", "table8.csv", "fig_hit_by_band.png", "fig_echo_heatmap.png"} <= names
    md = (tmp_path / "state" / "gh-engine" / "report" / "report.md").read_text(encoding="utf-8")
    assert "sim-a" in md and "Table 8" in md
    assert any("GeoHint:" in line and "scored responses" in line for line in out.extra_lines)
    assert any("sampling rates" in line for line in out.extra_lines)
    calls = out.spend["calls"]
    assert calls == out.planned
    # no echo_rule in the config: the default rule, recorded in the run's manifest entry and named in the report
    from geoagent.runtime.manifest import read_manifest

    assert read_manifest(tmp_path / "state" / "gh-engine")["runs"][-1]["echo_rule"] == "name"
    assert "Echo rule name:" in md
    again, _ = _run(release_dir)
    assert again.status == "complete" and again.spend["calls"] == calls  # nothing called twice
    assert again.planned == out.planned


def test_unknown_site_and_geocoder_keys_are_config_errors(release_dir):
    from geoagent.config import ConfigError

    doc = _cfg("http://127.0.0.1:1", "http://127.0.0.1:2")
    doc["geohint"]["geocoder"]["bogus_key"] = 1
    with pytest.raises(ConfigError, match="bogus_key"):
        config_from_dict(doc).section("geohint")


def test_the_plan_line_and_manifest_count_the_points_not_drawn(release_dir, tmp_path, monkeypatch):
    """walk39 #2: the docs promised `points_not_drawn` in manifest.json; it was computed and written nowhere."""
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    def edit(raw):
        raw["geohint"]["points_per_cell"] = 1
        raw["geohint"]["conditions"] = ["forced"]

    out, _ = _run(release_dir, edit)
    from geoagent.data.importer import import_release
    from geoagent.runtime.manifest import read_manifest

    rel = import_release(release_dir)
    n_points = sum(len(rel.ladders[s].points) for s in SITES)
    summary = read_manifest(tmp_path / "state" / "gh-engine")["runs"][-1]["plan_summary"]
    assert summary["points_not_drawn"] > 0 and summary["points_outside_bands"] == 0
    line = next(ln for ln in out.extra_lines if "plan:" in ln and "requests by condition" in ln)
    assert f"reference points left out: {summary['points_not_drawn']} not drawn" in line, line
    # sim-a answers every unit: one forced request per drawn point
    assert summary["units_total"]["sim-a"] == n_points - summary["points_not_drawn"]
