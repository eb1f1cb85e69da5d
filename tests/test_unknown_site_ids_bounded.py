"""Unknown ``geohint.sites`` ids: the first few get a did-you-mean suggestion, the rest are counted.

Before: every unknown id was matched against every site (:func:`geoagent.config.did_you_mean`, ``difflib``), so
300 unknown ids against 3,000 sites took seconds (4.7 s measured; 13 s on a loaded machine) and the message named
all 300 with their suggestions. Now at most :data:`geoagent.config.SUGGEST_LIMIT` ids are matched (the cost is
bounded by the cap, asserted here by the number of suggestions, not by time) and the message counts the rest.
"""
from __future__ import annotations

import csv
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.config import SUGGEST_LIMIT, did_you_mean, name_unknown

REPO = Path(__file__).resolve().parents[1]


def test_message_shape():
    assert name_unknown(["athens_kotza"], ["athens_kotzia", "tokyo_shibuya"]) == \
        "'athens_kotza' (did you mean 'athens_kotzia'?)"
    assert name_unknown(["zzz", "athens_kotza"], ["athens_kotzia"]) == \
        "'zzz', 'athens_kotza' (did you mean 'athens_kotzia'?)"
    # the same helper as the unknown-key messages
    assert name_unknown(["max_ouput_tokens"], ["max_output_tokens"]) == \
        "'max_ouput_tokens'" + did_you_mean("max_ouput_tokens", ["max_output_tokens"])
    assert name_unknown(["a", "b", "c"], ["zz"], limit=1) == "'a', and 2 more"
    with pytest.raises(ValueError):
        name_unknown(["a"], [], limit=0)


def test_suggestions_are_capped():
    sites = [f"city{i:04d}_site{j}" for i in range(600) for j in range(5)]  # 3,000 sites
    unknown = [f"city{i:04d}_sit{i % 5}" for i in range(300)]  # each one letter off a site
    text = name_unknown(unknown, sites)
    assert text.count("did you mean") == SUGGEST_LIMIT
    assert text.endswith(f", and {300 - SUGGEST_LIMIT} more")
    assert text.startswith("'city0000_sit0' (did you mean 'city0000_site0'?), 'city0001_sit1' (did you mean ")


def test_plan_names_the_first_unknown_ids_and_counts_the_rest(tmp_path, monkeypatch, release_dir, capsys):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    with open(Path(release_dir) / "sites.csv", newline="", encoding="utf-8") as fh:
        ids = [r["site"] for r in csv.DictReader(fh)][:30]
    typos = [i[:-1] for i in ids]  # 30 unknown ids, each one letter short of a site
    text = (REPO / "geoagent" / "configs" / "geohint_sandbox.toml").read_text(encoding="utf-8")
    cfgp = tmp_path / "many.toml"
    cfgp.write_text(text.replace('images = "synthetic"', f'images = "synthetic"\nsites = {typos!r}'.replace("'", '"')))
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = capsys.readouterr().err.strip()
    assert "geohint.sites: unknown site ids " in err, err
    assert err.count("did you mean") == SUGGEST_LIMIT, err
    assert f", and {30 - SUGGEST_LIMIT} more (not in " in err, err
