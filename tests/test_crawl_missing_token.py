"""A crawl without its Mapillary token stops before it creates anything (exit 2, the variable named).

``run.py crawl geoagent/configs/crawl_sandbox.toml`` without ``MAPILLARY_TOKEN`` used to plan the cities into
fresh queue files and only then fail in the first stage's start hook, leaving ``queues/<campaign>/`` and
``state/<campaign>/`` behind. The engine now looks up every key a run needs (models' and the campaign kind's,
:func:`geoagent.engine.check_keys`) before any folder, lock or queue file is made.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from geoagent.cli import EXIT_CODES_EPILOG, main
from geoagent.sandbox.launch import request_counts

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"


def _tree(root: Path) -> dict[str, int]:
    """Every path under ``root`` with its size (folders 0); {} when ``root`` is absent."""
    if not root.exists():
        return {}
    return {str(p.relative_to(root)): (p.stat().st_size if p.is_file() else 0) for p in root.rglob("*")}


def _documented_config_error_code() -> int:
    """The exit code ``run.py --help`` documents for a config error (read from the help epilog)."""
    m = re.search(r"^\s*(\d+)\s+config error", EXIT_CODES_EPILOG, re.M)
    assert m, EXIT_CODES_EPILOG
    return int(m.group(1))


@pytest.fixture
def no_token(isolated_roots, monkeypatch):
    monkeypatch.delenv("MAPILLARY_TOKEN", raising=False)
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))  # no .env fallback either
    return isolated_roots


def test_missing_mapillary_token_creates_no_queue_or_state_file(no_token, capsys):
    (no_token / "state").mkdir()  # an existing state root stays as it is
    before = dict(request_counts())
    code = main(["crawl", str(CONFIG), "--no-live"])
    err = capsys.readouterr().err
    assert code == _documented_config_error_code() == 2
    assert "MAPILLARY_TOKEN" in err and "mapillary_token_env" in err
    # the message names the variable, never a value; "MLY" only in the sandbox hint's example (walk24 #6)
    assert err.replace("any value of the form MLY|..., e.g. MAPILLARY_TOKEN='MLY|sandbox'", "").count("MLY") == 0, err
    assert _tree(no_token / "state") == {}
    assert not (no_token / "queues").exists()
    assert dict(request_counts()) == before  # no fake was started or asked


def test_missing_token_through_run_command_and_blank_value(no_token, monkeypatch, capsys):
    """``run.py run`` on the same config checks the same way; a blank value counts as missing."""
    monkeypatch.setenv("MAPILLARY_TOKEN", "   ")
    assert main(["run", str(CONFIG), "--no-live"]) == 2
    assert "MAPILLARY_TOKEN" in capsys.readouterr().err
    assert not (no_token / "state").exists() and not (no_token / "queues").exists()


def test_missing_token_leaves_an_earlier_runs_files_untouched(no_token, capsys):
    """A campaign that already ran keeps every byte of its queues and state when a re-run lacks the token."""
    from geoagent.runtime.sqlite_queue import SQLiteQueue
    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state(CAMPAIGN, root=no_token / "state"):
        pass
    q = SQLiteQueue.open(no_token / "queues", CAMPAIGN, "cities")
    q.close_sync()
    (no_token / "state" / CAMPAIGN / "city_pool.csv").write_text("city\nSandbox City\n", encoding="utf-8")
    q0, s0 = _tree(no_token / "queues"), _tree(no_token / "state")
    assert f"{CAMPAIGN}/cities.sqlite" in q0 and f"{CAMPAIGN}/campaign.sqlite" in s0
    assert main(["crawl", str(CONFIG), "--no-live"]) == 2
    assert "MAPILLARY_TOKEN" in capsys.readouterr().err
    assert _tree(no_token / "queues") == q0 and _tree(no_token / "state") == s0


def test_dry_run_needs_no_token(no_token, capsys):
    """``--simulate`` makes no call, so it plans without the token (and still leaves nothing behind); it exits
    2, as the real crawl would, after its whole report (walkthrough finding: it used to exit 0)."""
    assert main(["crawl", str(CONFIG), "--simulate", "--no-live"]) == 2
    out = capsys.readouterr().out
    assert "dry run: the plan is" in out
    assert out.rstrip("\n").splitlines()[-1] == ("  exit 2: `crawl` would refuse to start (variable MAPILLARY_TOKEN "
                                                 "not set; see the warning above)")
    assert not (no_token / "state" / CAMPAIGN).exists()


def test_token_from_dotenv_is_used_by_the_crawl_client(tmp_path):
    """The token may live in ``.env`` (like the models' keys): the Mapillary client gets it from there."""
    import anyio

    from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings
    from geoagent.crawl.stages import build_crawl_services
    from geoagent.runtime.http import HttpClient
    from geoagent.sandbox.mapillary import make_app
    from geoagent.sandbox.server import serve

    env = tmp_path / "token.env"
    env.write_text("GEOAGENT_TEST_MLY_TOKEN='MLY|from|dotenv'\n", encoding="utf-8")

    async def main_() -> tuple[int, str]:
        async with serve(make_app([])) as base, HttpClient() as http:
            settings = load_crawl_settings({
                "contact": "mailto:t@example.org", "evaluated_models": ["x"],
                "cities": [{"city": "A", "country": "AA", "continent": "EU", "lat": 1.0, "lon": 2.0}],
                "endpoints": {"mapillary": base, "mapillary_token_env": "GEOAGENT_TEST_MLY_TOKEN"},
                "image_audit": {"provider": "simulated", "model": "a"},
                "referenceability": {"provider": "simulated", "model": "b", "pageviews": False},
            })
            with pytest.raises(CrawlConfigError, match="GEOAGENT_TEST_MLY_TOKEN"):
                build_crawl_services(settings, http, state_dir=tmp_path / "s", dotenv_path=tmp_path / "none.env")
            svc = build_crawl_services(settings, http, state_dir=tmp_path / "s", dotenv_path=env)
            images = await svc.mapillary.search_images((2.0, 1.0, 2.01, 1.01))  # the fake answers 401 without MLY|
            return len(images), "ok"

    n, ok = anyio.run(main_)
    assert (n, ok) == (0, "ok")
