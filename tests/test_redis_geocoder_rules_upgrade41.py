"""A Redis-backed GeoHint campaign run by a newer geoagent whose geocoding rules changed (upgrade41 #1): the same
file, so no config to copy and nothing to ``--accept-config-change``. The server's config record named the older
rules and every first run after the upgrade was refused (exit 2, advice to copy the file or rename the campaign,
which re-pays every call). Now the newer rules are recorded and the run goes on (its own drift check warns that
located answers mix both versions); a machine still on the older geoagent is refused, told to upgrade."""

from __future__ import annotations

import orjson
import pytest

from _model_harness import geohint_three_sites_toml
from test_queue_contract import redis_url  # noqa: F401 - the fixture


def test_a_code_upgrade_of_the_geocoding_rules_is_recorded_not_refused(release_dir, tmp_path, monkeypatch,
                                                                       redis_url):  # noqa: F811
    import redis

    import geoagent.geohint.campaign  # noqa: F401 - the kind's section defaults, as a run has them loaded
    from geoagent.config import load_config
    from geoagent.geohint.geocode import GEOCODER_RULES_VERSION
    from geoagent.runtime.backend import CONFIG_KEY, BackendError, check_server_config
    from geoagent.runtime.manifest import results_sha256
    from geoagent.runtime.redis_state import state_prefix

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    path = tmp_path / "gh.toml"
    path.write_text(geohint_three_sites_toml("gh-rules-redis", geohint="n_boot = 0")
                    + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    cfg = load_config(path)
    assert check_server_config(cfg, record=True).recorded
    client = redis.Redis.from_url(redis_url)
    key = state_prefix(cfg.name) + CONFIG_KEY

    def set_recorded_rules(version: int) -> None:
        rec = orjson.loads(client.get(key))
        rec["designs"]["geohint.geocoder_rules"] = version
        rec.pop("results_sha256")
        rec["results_sha256"] = results_sha256(rec)
        client.set(key, orjson.dumps(rec))

    try:
        set_recorded_rules(GEOCODER_RULES_VERSION - 1)  # the campaign's first run was an earlier geoagent's
        got = check_server_config(cfg, record=True)
        assert got.line is None and not got.recorded
        assert orjson.loads(client.get(key))["designs"]["geohint.geocoder_rules"] == GEOCODER_RULES_VERSION
        set_recorded_rules(GEOCODER_RULES_VERSION + 1)  # another machine already runs a newer geoagent
        with pytest.raises(BackendError, match=r"upgrade geoagent on this machine"):
            check_server_config(cfg, record=True)
    finally:
        client.close()
