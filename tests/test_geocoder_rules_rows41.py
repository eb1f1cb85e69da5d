"""Each scored GeoHint row names the geocoding rules that located it (``extra.geocoder_rules``), and a campaign resumed
under other rules says in a ``warning:`` that its located answers mix two versions (newuser41 #1: the run said it in
an ``info:`` line, and nothing recorded which rules located which answer, while the manifest named only the newest).

End to end: the three-site GeoHint campaign over the sandbox fakes through the CLI; its manifest is then set back to
an earlier rules version, as a campaign run by the earlier code would have it, and the campaign run again."""

from __future__ import annotations

import json
import sqlite3

import orjson
import polars as pl

from _model_harness import geohint_three_sites_toml
from geoagent.cli import main
from geoagent.geohint.geocode import GEOCODER_RULES_VERSION
from geoagent.geohint.stages import SCORED_TABLE


def test_rows_name_their_geocoding_rules_and_a_resume_under_other_rules_warns(release_dir, tmp_path, monkeypatch,
                                                                              capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    name = "gh-rules-rows"
    cfg = tmp_path / "gh.toml"
    cfg.write_text(geohint_three_sites_toml(name, geohint="n_boot = 0"), encoding="utf-8")
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    with sqlite3.connect(tmp_path / "state" / name / "campaign.sqlite") as c:
        rows = [json.loads(r) for (r,) in c.execute("SELECT row FROM results WHERE tbl = ?", (SCORED_TABLE,))]
    located = [r for r in rows if r.get("resolved_level") is not None]
    assert located and all(r["extra"]["geocoder_rules"] == GEOCODER_RULES_VERSION for r in located)
    # the export's column is an integer, also for rows located before it was recorded (review41c #1: a batch of such
    # rows alone made it text, and an empty campaign had no column)
    with sqlite3.connect(tmp_path / "state" / name / "campaign.sqlite") as c:
        first = c.execute("SELECT key, row FROM results WHERE tbl = ? ORDER BY key LIMIT 1", (SCORED_TABLE,)).fetchone()
        old = json.loads(first[1])
        old["extra"].pop("geocoder_rules", None)
        c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", (json.dumps(old), SCORED_TABLE, first[0]))
    assert main(["export", str(cfg)]) == 0
    capsys.readouterr()
    frame = pl.read_parquet(tmp_path / "state" / name / f"{SCORED_TABLE}.parquet")
    assert frame.schema["extra.geocoder_rules"] == pl.Int64
    assert frame["extra.geocoder_rules"].null_count() == 1
    from geoagent.runtime.export import TABLE_SCHEMAS, rows_to_frame

    assert rows_to_frame([], TABLE_SCHEMAS[SCORED_TABLE]).schema["extra.geocoder_rules"] == pl.Int64

    manifest = tmp_path / "state" / name / "manifest.json"
    data = orjson.loads(manifest.read_bytes())
    data["designs"]["geohint.geocoder_rules"] = GEOCODER_RULES_VERSION - 1  # the earlier code's last run
    manifest.write_bytes(orjson.dumps(data))
    assert main(["run", str(cfg), "--no-live"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert (f"warning: campaign {name}: geoagent's geocoding rules changed since its last run (version "
            f"{GEOCODER_RULES_VERSION - 1} -> {GEOCODER_RULES_VERSION}") in err, err
    assert "would mix both" in err and "extra.geocoder_rules" in err, err
