"""``status`` of a Redis campaign makes no state folder (review rev22b): it is read-only, but opening the Redis
state made ``<state root>/<campaign>/`` (and the root), which ``export --out`` had just stopped doing (b13aa91).
A real campaign on a local redis-server (skipped without one)."""

import shutil

from test_backend_config import _cli, _redis_campaign, secured_redis  # noqa: F401 - the module's redis-server fixture


def test_status_of_a_redis_campaign_without_a_state_folder_makes_none_and_says_complete(
        tmp_path, monkeypatch, capsys, secured_redis):  # noqa: F811
    cfg_path = _redis_campaign(tmp_path, "r1", n=8)
    monkeypatch.setenv("GA_TEST_REDIS", secured_redis)
    rc, text = _cli(["run", str(cfg_path)], capsys)
    assert rc == 0, text
    shutil.rmtree(tmp_path / "state")
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "elsewhere"))
    rc, text = _cli(["status", str(cfg_path)], capsys)
    # the campaign's state is on the server: complete, and no "no state found" line (that is for SQLite roots)
    assert rc == 0 and "campaign complete" in text and "no state of campaign" not in text, text
    assert not (tmp_path / "elsewhere").exists()
