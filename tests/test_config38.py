"""Config and CLI (session 38, config38).

Before:

* #1 ``[campaign] seed = -1`` passed the dry run; a GeoHint run paid every call, then its report failed (numpy takes
  no negative seed);
* #2 ``n_boot = 100000000000`` passed; the report then tried to allocate 1.46 TiB;
* #3 a line break in ``contact`` or a header value passed; every call then failed inside aiohttp, dead-lettered;
* #4 ``[crawl.referenceability] pageviews_start = "2024-01-01"`` and ``temperature = -1`` passed; the crawl failed
  every site at the audit, after its screening and downloads;
* #6 ``[paths] state = "~nouser/x"`` (a user that does not exist) ended in a traceback;
* #8 ``$GEOAGENT_RUNS_INDEX`` naming the campaign file had index lines appended to it.
"""

from __future__ import annotations

import pytest

from geoagent.config import ConfigError, config_from_dict

BASE = {"campaign": {"name": "c38"}, "budget": {"cap_usd": 1.0}, "generic": {"n_requests": 1},
        "models": [{"name": "s", "provider": "simulated", "model": "s"}]}


def _with(**tables) -> dict:
    raw = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for table, values in tables.items():
        raw[table] = {**raw.get(table, {}), **values} if isinstance(values, dict) else values
    return raw


@pytest.mark.parametrize("raw, key", [
    (_with(campaign={"seed": -1}), "campaign.seed"),
    (_with(campaign={"contact": "a@b.c\r\nX-Evil: 1"}), "campaign.contact"),
    (_with(models=[{"name": "s", "provider": "simulated", "model": "s", "headers": {"X-A": "v\r\nX-B: 1"}}]),
     "models[0].headers"),
    (_with(models=[{"name": "s", "provider": "simulated", "model": "s", "headers": {"X A": "v"}}]), "models[0].headers"),
    (_with(paths={"state": "~nouser-38/x"}), "paths.state"),
])
def test_values_that_would_fail_after_spending_are_refused_at_load(raw, key):
    with pytest.raises(ConfigError) as e:
        config_from_dict(raw)
    assert key in str(e.value), str(e.value)
    assert "X-Evil" not in str(e.value) or key == "campaign.contact"


@pytest.mark.parametrize("table, values, key", [
    ("geohint", {"n_boot": 100_000_000_000}, "n_boot"),
    ("geohint", {"n_flips": 10**9}, "n_flips"),
    ("geoverify", {"n_boot": 10**7}, "n_boot"),
])
def test_resample_counts_have_an_upper_bound(table, values, key):
    from geoagent.geohint.settings import GeoHintSettings
    from geoagent.geoverify.settings import GeoVerifySettings

    cls = GeoHintSettings if table == "geohint" else GeoVerifySettings
    with pytest.raises(ValueError, match=key):
        cls(**values)


@pytest.mark.parametrize("values", [{"pageviews_start": "2024-01-01"}, {"pageviews_start": "20241301"},
                                    {"pageviews_start": "20241231", "pageviews_end": "20240101"},
                                    {"temperature": -1.0}])
def test_crawl_audit_settings_are_checked_at_load(values):
    from geoagent.crawl.settings import ReferenceabilitySettings

    with pytest.raises(ValueError):
        ReferenceabilitySettings(**values)
    ReferenceabilitySettings(pageviews_start="20230101", pageviews_end="20231231", temperature=0.7)


def test_the_runs_index_is_never_appended_to_the_campaign_file_or_another_file(tmp_path, monkeypatch):
    from geoagent.runtime.runs_index import record_run_folder

    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text("[campaign]\nname = 'c38'\n", encoding="utf-8")

    class Cfg:
        source = str(cfg_file)
        name = "c38"

    for target, text in ((cfg_file, None), (tmp_path / "notes.txt", "my notes\n")):
        if text is not None:
            target.write_text(text, encoding="utf-8")
        before = target.read_bytes()
        monkeypatch.setenv("GEOAGENT_RUNS_INDEX", str(target))
        record_run_folder(Cfg(), tmp_path)
        assert target.read_bytes() == before
    index = tmp_path / "runs.jsonl"
    monkeypatch.setenv("GEOAGENT_RUNS_INDEX", str(index))
    record_run_folder(Cfg(), tmp_path)
    record_run_folder(Cfg(), tmp_path)
    assert len(index.read_bytes().splitlines()) == 2
