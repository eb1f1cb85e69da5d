"""A GeoHint campaign records the version of geoagent's geocoding rules it geocodes with (``designs``), and a
resumed campaign whose answers were geocoded under other rules says so (session 16).

Before: the geocoder rules changed (session 16: decimal coordinates in an answer are its point, no name lookup)
without a trace in the manifest, so a campaign resumed across that change mixed located answers of both rules
without a word (adversarial review question 7). Now ``designs`` holds ``geohint.geocoder_rules``
(:data:`geoagent.geohint.geocode.GEOCODER_RULES_VERSION`; a manifest without it was geocoded under version 1), and
a change is listed with the geocoder changes, not as model-call drift."""

from __future__ import annotations

import orjson

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.geohint.geocode import GEOCODER_RULES_VERSION
from geoagent.runtime.manifest import Manifest, config_changes

register_all_sections()


def _gh(tmp_path) -> dict:
    return {"campaign": {"name": "gh-rules", "kind": "geohint", "contact": "ops@example.org"},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "budget": {"cap_usd": 1.0}, "models": [{"name": "sim", "provider": "simulated", "model": "sim"}]}


def test_the_manifest_records_the_geocoder_rules_and_an_older_record_reads_as_version_1(tmp_path, capsys):
    assert GEOCODER_RULES_VERSION == 16  # 16: session 43 (a Nominatim wikidata tag that is no item id is no tag);
    # 15: session 42 (Wikidata and Nominatim names cleaned of control and bidi
    # characters); 14: session 41 (geo URIs, full-width digits, state codes in the city field);
    # 13: session 39 (answer coordinates far from the answer's city fail);
    # 12: session 38 (curly and unclosed asides, more no-answer words);
    # 11: session 37 (echo rule: names without ", <site's city>");
    # 10: session 36 (echo rule: last word kept, "The <word>" names);
    # 9: session 35 (nearest candidate, ambiguous buildings, coarse classes);
    # 4: session 19 (street as area, compound city field, city item as area);
    # 5: session 20 (a later segment's city only near the first segment's place, Nominatim keeps Wikidata's pass);
    # 6: a compound city field's city also fits when another segment's place contains it (P131/P17), before distance,
    # and a segment's city item ranked after an unrelated region of its name is a namesake when nothing tells them apart;
    # 7: of several contained city items, the one the most other segments confirm ("Springfield, Illinois, USA",
    # "Manhattan, New York, USA"), none when a place of the field is contained by more segments; 8: a leading
    # "between" is taken off a name as "near" is
    cfg = config_from_dict(_gh(tmp_path))
    Manifest(cfg).start_run()
    path = cfg.state_dir() / "manifest.json"
    data = orjson.loads(path.read_bytes())
    assert data["designs"] == {"geohint.geocoder_rules": GEOCODER_RULES_VERSION}
    assert config_changes(cfg).calls == [] and config_changes(cfg).geocoder == {}
    data["designs"] = {}  # a manifest of the earlier code (designs recorded, none for GeoHint)
    path.write_bytes(orjson.dumps(data))
    ch = config_changes(cfg)
    assert ch.calls == [] and ch.call_keys == {}  # no model call is affected
    assert ch.geocoder == {"rules_version": (1, GEOCODER_RULES_VERSION)}
    from geoagent.cli import _warn_config_drift

    capsys.readouterr()
    _warn_config_drift(cfg)
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("info: campaign gh-rules: geoagent's geocoding rules changed since its last run "
                          f"(version 1 -> {GEOCODER_RULES_VERSION}"), err
    assert "[geohint.geocoder]" not in err  # not a setting of the config: nothing to keep "here"


def test_a_geoverify_campaign_records_no_geocoder_rules(tmp_path):
    cfg = config_from_dict({**_gh(tmp_path), "campaign": {"name": "gv", "kind": "geoverify"}})
    Manifest(cfg).start_run()
    assert "geohint.geocoder_rules" not in orjson.loads((cfg.state_dir() / "manifest.json").read_bytes())["designs"]
