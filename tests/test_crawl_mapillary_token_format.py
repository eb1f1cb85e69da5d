"""A Mapillary token that is no client token (``MLY|...``) is refused before any request (crawl40 #8).

Before: ``MAPILLARY_TOKEN=sandbox`` started the crawl; the API (or the fake) refused it, and the secrets masker,
having read the word as the token, masked it wherever it occurred in the stored config (``manifest.json``:
``http://mapillary.***.invalid``, ``***-vision-auditor``), so the next run, with the right token, warned that
"results would mix". Now the run (and ``build_crawl_services``, and the release-image fetcher) refuses a token that
does not start with ``MLY|``, naming the variable, never the value, before any folder, queue or request; the dry
run says so and exits 2; the sandbox's own tokens (``MLY|sandbox``, the demo's ``MLY|sandbox|demo``) pass.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.clients.mapillary import token_problem
from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings
from geoagent.crawl.stages import build_crawl_services
from geoagent.demo import SANDBOX_MAPILLARY_TOKEN
from geoagent.runtime.http import HttpClient
from geoagent.sandbox.launch import request_counts

CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"
#: an ordinary word where the token belongs (not "sandbox": the masker remembers a value for the whole process)
WORD = "plainwordtoken"


def test_the_sandbox_tokens_are_tokens_and_a_word_is_not():
    assert token_problem("MAPILLARY_TOKEN", "MLY|sandbox") is None
    assert token_problem("MAPILLARY_TOKEN", SANDBOX_MAPILLARY_TOKEN) is None
    problem = token_problem("MAPILLARY_TOKEN", WORD)
    assert problem and "MAPILLARY_TOKEN" in problem and "MLY|" in problem and WORD not in problem


def test_a_crawl_with_a_word_for_a_token_is_refused_before_anything(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", WORD)
    before = dict(request_counts())
    assert main(["crawl", str(CONFIG), "--no-live"]) == 2
    got = capsys.readouterr()
    text = got.out + got.err
    assert "the Mapillary token in MAPILLARY_TOKEN is not a Mapillary client token: one starts with MLY|" in text, text
    assert "MAPILLARY_TOKEN='MLY|sandbox'" in text  # the offline fake's convention, as the missing-token line says
    assert WORD not in text
    assert dict(request_counts()) == before
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()
    assert not (isolated_roots / "queues" / "crawl-sandbox").exists()


def test_the_dry_run_says_it_and_exits_2(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", WORD)
    assert main(["crawl", str(CONFIG), "--no-live", "--simulate"]) == 2
    out = capsys.readouterr().out
    assert "warning: the Mapillary token in MAPILLARY_TOKEN is not a Mapillary client token" in out, out
    assert out.rstrip("\n").splitlines()[-1].startswith("  exit 2: `crawl` would refuse to start"), out
    assert WORD not in out


def test_build_crawl_services_refuses_it_too(tmp_path):
    settings = load_crawl_settings({
        "contact": "mailto:t@example.org", "evaluated_models": ["x"],
        "cities": [{"city": "A", "country": "AA", "continent": "EU", "lat": 1.0, "lon": 2.0}],
        "image_audit": {"provider": "simulated", "model": "a"},
        "referenceability": {"provider": "simulated", "model": "b", "pageviews": False}})

    async def build(token: str):
        async with HttpClient() as http:
            return build_crawl_services(settings, http, state_dir=tmp_path / "s", mapillary_token=token)

    with pytest.raises(CrawlConfigError) as e:
        asyncio.run(build(WORD))
    assert "MAPILLARY_TOKEN" in str(e.value) and WORD not in str(e.value)
    assert asyncio.run(build("MLY|1|x")).mapillary is not None


def test_the_release_image_fetcher_refuses_it(tmp_path, monkeypatch, capsys):
    from geoagent.crawl.release_images import main as fetch_main

    monkeypatch.setenv("GEOAGENT_DOTENV", str(tmp_path / "absent.env"))
    monkeypatch.setenv("MLY_T40", WORD)
    assert fetch_main(["--out", str(tmp_path), "--token-env", "MLY_T40"]) == 2
    err = capsys.readouterr().err
    assert "MLY_T40" in err and "MLY|" in err and WORD not in err, err
