"""A crawl re-run with changed ``[crawl.fetcher]`` settings says what the change reaches, and the manifest does
not claim settings the crawl's tables were not built with.

Walkthrough: ``max_images_per_site 4 -> 5`` on a completed crawl re-ran "complete (0.4 s)" without a word, kept
"images kept: 24 of 29", while manifest.json recorded 5 and image_selection/*.json said 4. The shipped offline
crawl (local fakes, started in-process) through the CLI entry."""

from __future__ import annotations

import json
import re
from pathlib import Path

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def test_a_fetcher_change_on_a_finished_crawl_is_named_and_the_manifest_keeps_the_tables_settings(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = CONFIG.read_text(encoding="utf-8")
    assert "max_images_per_site = 6 " in text
    p = tmp_path / "crawl.toml"
    p.write_text(text + f'\n[paths]\nstate = "{tmp_path / "state"}"\nqueues = "{tmp_path / "queues"}"\n')
    assert main(["crawl", str(p), "--no-live"]) == 0
    state = tmp_path / "state" / "crawl-sandbox"
    kept_before = re.findall(r"images kept: \d+ of \d+", capsys.readouterr().out)
    assert kept_before
    p.write_text(p.read_text().replace("max_images_per_site = 6 ", "max_images_per_site = 7 "))
    assert main(["crawl", str(p), "--no-live"]) == 0
    got = capsys.readouterr()
    assert ("info: campaign crawl-sandbox: crawl changed since its last run (crawl.fetcher.max_images_per_site: 6 -> "
            "7); every planned task is done") in got.err
    assert "affects none of the stored results" in got.err and "new [campaign] name" in got.err
    assert re.findall(r"images kept: \d+ of \d+", got.out) == kept_before  # nothing was re-fetched
    man = json.loads((state / "manifest.json").read_text())
    built = {json.loads(f.read_text())["selection"]["fetcher"]["max_images_per_site"] for f in (state / "image_selection").glob("*.json")}
    assert built == {6}
    assert man["config"]["crawl"]["fetcher"]["max_images_per_site"] == 6  # what the tables were built with
    assert man["config_not_applied"]["changed"] == {"crawl.fetcher.max_images_per_site": [6, 7]}
    assert man["runs"][-1]["config_drift"]["applied"] is False
