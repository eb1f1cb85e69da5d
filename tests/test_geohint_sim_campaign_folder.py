"""The GeoHint simulator knows the sites of the folder the campaign plans from.

A GeoHint campaign with a simulated model (``provider = "simulated"`` here; the local ``*.sandbox.invalid``
model fakes answer through the same responder) over a release-form folder of its own (``[geohint]
release_dir``, as a campaign over a crawl's output folder names it). Before: the simulator indexed the
GeoContext release at ``$GEOAGENT_RELEASE`` or ``../shared/reference/geocontext`` whatever the campaign named,
so it knew none of this folder's sites, images or ladder names and answered every context prompt with the hint
itself (echo 100 %, never the landmark). Now the plan gives the simulator the campaign's own sites, ladders and
images: some answers name a site's landmark, some another point of its ladder, and the echo rate is well under
100 %. The folder is made here (three invented sites), not the shared release.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.runtime.store import open_campaign_state

#: three invented sites: site id -> (city, landmark, ladder point names)
SITES = {
    "zorvan_bell": ("Zorvania", "Quillon Bell Tower", ("Marrowgate Square", "Tessik Arcade", "Old Fennimore Mill")),
    "zorvan_dock": ("Zorvania", "Velloria Dry Dock", ("Harrowby Pier", "Cindral Market", "Ospen Lighthouse")),
    "brimmel_gate": ("Brimmelburg", "Axton Gatehouse", ("Lurvey Gardens", "Pellamy Hall", "Stromwick Bridge")),
}


def _release_folder(root: Path) -> Path:
    """A release-form folder (``sites.csv``, ``city_pool.csv``, ``ladders/<site>_ladder_x.csv``) of :data:`SITES`
    (the sandbox's Wikidata/Nominatim fakes build their gazetteer from it too); returns ``root``."""
    (root / "ladders").mkdir(parents=True)
    with (root / "city_pool.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["city", "country", "continent", "lat", "lon"])
        w.writerows([["Zorvania", "XX", "EU", 10.5, 20.5], ["Brimmelburg", "XX", "EU", 12.0, 22.0]])
    with (root / "sites.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["site", "city", "country", "continent", "landmark", "lat", "lon"])
        for i, (sid, (city, landmark, _)) in enumerate(SITES.items()):
            w.writerow([sid, city, "XX", "EU", landmark, 10.0 + i, 20.0 + i])
    for i, (sid, (_city, _landmark, names)) in enumerate(SITES.items()):
        with (root / "ladders" / f"{sid}_ladder_x.csv").open("w", newline="", encoding="utf-8") as fh:
            w = csv.writer(fh)
            w.writerow(["band", "tier", "name_en", "qid", "dist_km", "familiarity"])
            for j, (name, band, d) in enumerate(zip(names, ("0.5-1.5km", "1.5-3km", "3-6km"), (1.0, 2.0, 4.0))):
                w.writerow([band, "high", name, f"Q9{i}{j}", d, 4])
    return root


@pytest.fixture
def fresh_simulator():
    """The simulator's index as a fresh process has it (none yet), restored to that after the test."""
    from geoagent.geohint import simulate

    simulate._INDEX = None
    yield simulate
    simulate._INDEX = None


def test_a_simulated_geohint_campaign_over_its_own_folder_is_answered_from_that_folder(tmp_path, monkeypatch, capsys,
                                                                                       fresh_simulator):
    rel = _release_folder(tmp_path / "crawl")
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    cfgp = tmp_path / "gh.toml"
    cfgp.write_text(f"""
[campaign]
name = "gh-own-folder"
kind = "geohint"
seed = 4
contact = "mailto:you@example.org"
[paths]
queues = "{tmp_path / 'queues'}"
state = "{tmp_path / 'state'}"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
[geohint]
release_dir = "{rel}"
conditions = ["baseline", "forced"]
images = "synthetic"
images_per_site = 4
[geohint.geocoder]
wikidata_url = "http://127.0.0.1:9/w/api.php"
nominatim_url = ""
""", encoding="utf-8")
    # the model caller alone: the simulator's answers are what is checked (no geocoding)
    rc = main(["run", str(cfgp), "--no-live", "--stages", "model_caller"])
    out = capsys.readouterr().out
    assert rc == 0, out
    cfg = load_config(cfgp)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        rows = list(st.store.iter_responses())
    assert rows, out
    landmarks = {lm for _c, lm, _n in SITES.values()}
    ladder_names = {n for _c, _lm, names in SITES.values() for n in names}
    by_qid = {f"Q9{i}{j}": n for i, (_c, _lm, names) in enumerate(SITES.values()) for j, n in enumerate(names)}
    tally: Counter[str] = Counter()
    for r in rows:
        text = r["text"]
        area = json.loads(text[text.index("{"): text.rindex("}") + 1]).get("area")
        # task key gh|<model>|<site>|<image>|<condition>|<reference point qid, or none>|r<repeat>
        condition, qid = r["request_meta"]["task_key"].split("|")[4:6]
        hint = by_qid.get(qid)
        assert (condition == "baseline") == (hint is None), r["request_meta"]
        kind = ("landmark" if area in landmarks else "echo" if area == hint
                else "other point" if area in ladder_names else "generic")
        tally[f"{condition} {kind}"] += 1
    context = sum(n for k, n in tally.items() if k.startswith("forced"))
    assert context > 0, tally
    # before: every context answer repeated its hint (the simulator knew none of these sites) and no answer
    # named a landmark
    assert tally["forced echo"] < context, tally
    assert tally["forced landmark"] + tally["baseline landmark"] > 0, tally
    assert tally["forced other point"] > 0, tally


def test_a_stand_alone_fake_given_the_folder_places_its_baseline_photos(tmp_path, monkeypatch, fresh_simulator):
    """Walk30 #3: ``python -m geoagent.sandbox.llm_gemini --release-dir <crawl folder>`` (the variable it sets) knew
    the folder's sites and ladders but not its photos: a baseline prompt names no hint, so every baseline answer
    said 'Unknown city'. The folder's trial table maps each photo to its site now."""
    import random

    from geoagent.sandbox.responders import SimContext

    rel = _release_folder(tmp_path / "crawl")
    with (rel / "verify_trials.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(["image_id", "site", "img_lat", "img_lon", "cand", "truth", "arm"])
        w.writerow(["1234567890", "brimmel_gate", 12.0, 22.0, "Axton Gatehouse", "yes", "main"])
        w.writerow(["999", "no_such_site", 0.0, 0.0, "x", "yes", "main"])  # a site sites.csv lacks: not mapped
    monkeypatch.setenv("GEOAGENT_RELEASE", str(rel))
    baseline = 'Where was this photo taken? Answer in JSON with "city", "area" and "building".'

    def city(image_id: str, seed: int) -> str:
        text = fresh_simulator.respond(SimContext(prompt=baseline, image_id=image_id, model="m", seed=0,
                                                  rng=random.Random(seed)))
        return json.loads(text[text.index("{"):text.rindex("}") + 1])["city"]

    assert {city("1234567890", s) for s in range(5)} == {"Brimmelburg"}
    assert city("999", 0) == "Unknown city"  # its site is not in the folder: nothing to place it by


def test_a_trial_table_with_a_bom_or_a_stray_byte_still_maps_its_photos(tmp_path, monkeypatch, fresh_simulator):
    """Break30 #4: the simulator read the trial table as strict UTF-8: one cp1252 byte stopped a simulated GeoHint
    campaign with a bare "'utf-8' codec can't decode" error, and a table saved with a byte-order mark mapped no
    photo. It reads the table as the importer does now."""
    import random

    from geoagent.sandbox.responders import SimContext

    rel = _release_folder(tmp_path / "crawl")
    header = "image_id,site,img_lat,img_lon,cand,truth,arm\r\n".encode("utf-8")
    rows = "1234567890,brimmel_gate,12.0,22.0,Axton Gatehouse,yes,main\r\n".encode("utf-8")
    stray = "55,zorvan_bell,10.0,20.0,Caf\u00e9,yes,main\r\n".encode("cp1252")
    (rel / "verify_trials.csv").write_bytes(b"\xef\xbb\xbf" + header + rows + stray)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(rel))
    baseline = 'Where was this photo taken? Answer in JSON with "city", "area" and "building".'

    def city(image_id: str) -> str:
        text = fresh_simulator.respond(SimContext(prompt=baseline, image_id=image_id, model="m", seed=0,
                                                  rng=random.Random(1)))
        return json.loads(text[text.index("{"):text.rindex("}") + 1])["city"]

    assert city("1234567890") == "Brimmelburg" and city("55") == "Zorvania"
