"""A crawl that Overpass, WDQS or the pageviews API refuses with HTTP 403 (a blocked client, or a User-Agent the
service does not accept) stops at the first refusal, as for a refused Mapillary token
(tests/test_crawl_mapillary_token_refused.py): exit 5 ("authentication failed"), a line naming the host, the
``[crawl.endpoints]`` key and ``[crawl] contact``, nothing dead-lettered, the refused stage's work left queued
untouched, and no further request to the refusing service. Before, each city or site was dead-lettered on its own 403
and the crawl went on asking (geoagent.crawl.stages.OpenDataRefused). The sandbox fakes refuse a User-Agent whose
contact names ``<service>-blocked.invalid`` (geoagent.sandbox.overpass.BLOCKED_CONTACT_DOMAIN)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.runtime.sqlite_queue import SQLiteQueue
from geoagent.sandbox.launch import request_counts

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"
GOOD = 'contact = "mailto:you@example.org"\nseed = 20260401\nevaluated_models'


def _config(tmp: Path, contact: str) -> Path:
    text = CONFIG.read_text(encoding="utf-8")
    assert GOOD in text  # the [crawl] table's contact (it makes the crawl's User-Agent)
    path = tmp / "crawl.toml"
    path.write_text(text.replace(GOOD, GOOD.replace("you@example.org", contact)), encoding="utf-8")
    return path


def _counts(root: Path, edge: str):
    q = SQLiteQueue.open(root / "queues", CAMPAIGN, edge)
    try:
        return q.counts_sync(), q.dead_letters_sync(10)
    finally:
        q.close_sync()


@pytest.mark.parametrize(("service", "edge", "key"), [("overpass", "cities", "overpass"), ("wdqs", "admitted", "wdqs"),
                                                      ("pageviews", "sites_for_audit", "pageviews")])
def test_a_refusing_open_data_service_stops_the_crawl_with_exit_5_and_keeps_the_work(
        isolated_roots, monkeypatch, capsys, service, edge, key):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    before = dict(request_counts())
    code = main(["crawl", str(_config(isolated_roots, f"me@{service}-blocked.invalid")), "--no-live"])
    text = "".join(capsys.readouterr())
    assert code == 5, text
    assert "authentication failed" in text
    # the sandbox serves each fake on a loopback port (the config's host names are placeholders)
    assert re.search(rf"the crawl was refused \(HTTP 403 from 127\.0\.0\.1:\d+ \(\[crawl\.endpoints\] {key}\)\): "
                     r"check \[crawl\] contact and tool_name", text), text
    sent = request_counts().get(service, 0) - before.get(service, 0)
    # the screener and sampler have 2 in flight, the referenceability auditor 1: the first refusal stops the stage
    # (Overpass: /status and /interpreter per screening)
    assert 0 < sent <= {"overpass": 4, "wdqs": 2, "pageviews": 1}[service], sent
    counts, dead = _counts(isolated_roots, edge)
    assert counts.ready > 0 and (counts.leased, counts.dead, counts.done) == (0, 0, 0) and dead == [], counts
    assert "not done: the work above stays queued untouched" in text
    if service != "overpass":  # Wikimedia's block is not Overpass's: the screener screened every city
        cities, _ = _counts(isolated_roots, "cities")
        assert cities.done > 0 and cities.ready == cities.leased == cities.dead == 0, cities
    # the block lifted (here: a contact the service accepts): the same command goes on and completes the crawl
    code = main(["crawl", str(_config(isolated_roots, "you@example.org")), "--no-live"])
    text = "".join(capsys.readouterr())
    assert code == 0, text
    counts, dead = _counts(isolated_roots, edge)
    assert counts.done > 0 and counts.ready == counts.dead == 0 and dead == []


def test_only_a_403_from_the_open_data_hosts_counts():
    """A 403 from Mapillary or an auditor's host, a 401 or 429 from WDQS, or another error, is not the refusal."""
    import tomllib

    from geoagent.crawl.settings import CrawlSettings
    from geoagent.crawl.stages import CrawlServices, open_data_refusal
    from geoagent.runtime.http import PermanentHTTPError

    settings = CrawlSettings.model_validate(tomllib.loads(CONFIG.read_text(encoding="utf-8"))["crawl"])
    svc = CrawlServices(settings=settings, http=None, state_dir=Path("."), images_root=Path("."), overpass=None,
                        wdqs=None, mapillary=None, pageviews=None, image_provider=None, ref_provider=None)
    got = [(r[1] if (r := open_data_refusal(svc, e)) else None) for e in (
        PermanentHTTPError(403, "http://wdqs.sandbox.invalid/sparql", "Forbidden"),
        PermanentHTTPError(403, "http://pageviews.sandbox.invalid/metrics/pageviews/per-article/x", "no"),
        PermanentHTTPError(403, "http://overpass.sandbox.invalid/api/interpreter", "no"),
        PermanentHTTPError(403, "http://mapillary.sandbox.invalid/images", "no"),
        PermanentHTTPError(403, "http://openai.sandbox.invalid/v1/chat/completions", "no"),
        PermanentHTTPError(401, "http://wdqs.sandbox.invalid/sparql", "no"),
        ValueError("HTTP 403 from wdqs.sandbox.invalid"),
    )]
    operators = [(r[0] if (r := open_data_refusal(svc, PermanentHTTPError(403, f"http://{h}.sandbox.invalid/x", "no")))
                  else None) for h in ("wdqs", "pageviews", "overpass", "mapillary")]
    assert operators == ["wikimedia", "wikimedia", "overpass", None]  # a block is its operator's
    assert got == ["HTTP 403 from wdqs.sandbox.invalid ([crawl.endpoints] wdqs)",
                   "HTTP 403 from pageviews.sandbox.invalid ([crawl.endpoints] pageviews)",
                   "HTTP 403 from overpass.sandbox.invalid ([crawl.endpoints] overpass)", None, None, None, None]


def test_an_unreachable_auditor_without_base_url_names_the_network_not_a_server():
    """newuser41 #C for the crawl: an auditor model with no ``base_url`` calls its provider's own API, so the
    unreachable line names this machine's access to it, not a ``base_url`` to fix or a server to start."""
    import tomllib

    from geoagent.config import load_config
    from geoagent.crawl.settings import CrawlSettings
    from geoagent.crawl.stages import CrawlServices, crawl_host_hint

    cfg = load_config(CONFIG)
    local = next(m for m in cfg.models if m.name == "sandbox-vision-auditor")
    public = local.model_copy(update={"base_url": None})
    settings = CrawlSettings.model_validate(tomllib.loads(CONFIG.read_text(encoding="utf-8"))["crawl"])
    svc = CrawlServices(settings=settings, http=None, state_dir=Path("."), images_root=Path("."), overpass=None,
                        wdqs=None, mapillary=None, pageviews=None, image_provider=None, ref_provider=None,
                        image_model_cfg=public, ref_model_cfg=next(m for m in cfg.models if m.name == "sandbox-text-auditor"))
    assert crawl_host_hint(svc, "api.openai.com") == (
        "network / DNS / proxy access to api.openai.com ('sandbox-vision-auditor', the [crawl.image_audit] model, "
        "has no [[models]] base_url: it calls its provider's own API)")
    assert crawl_host_hint(svc, local.host) == ("[[models]] base_url of 'sandbox-text-auditor' (the [crawl.referenceability] "
                                                "model)")
