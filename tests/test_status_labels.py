"""`status` names the hosts the config names: model name / API name next to ``host:port``.

Local fakes listen on ``127.0.0.1:<random port>``, so a bare host key tells nobody which API it is. The
labels come from the config (``[[models]] base_url``, endpoint URLs in task tables); URLs on
``*.sandbox.invalid`` get their port only when the run starts, so the run records its labels in the
progress stream and ``status`` reads them from there.
"""

from __future__ import annotations

import re
from pathlib import Path

import anyio

from geoagent.campaigns import register_all_sections
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status, host_labels

DEMO_CRAWL = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "demo_crawl.toml"


def _model(name: str, base_url: str) -> str:
    return f"""
[[models]]
name = "{name}"
provider = "openai"
model = "sim-{name}"
base_url = "{base_url}"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 100
concurrency = 8
rate = {{ requests = 2000, period_s = 1.0 }}
"""


def test_crawl_config_endpoints_and_models_are_labelled(tmp_path):
    register_all_sections()
    urls = {"overpass_url": "http://127.0.0.1:41001/api", "wdqs_url": "http://127.0.0.1:41002/sparql",
            "pageviews_url": "http://127.0.0.1:41003/api/rest_v1", "mapillary_url": "http://127.0.0.1:41004"}
    text = DEMO_CRAWL.read_text(encoding="utf-8")
    for k, v in urls.items():
        text = text.replace("{" + k + "}", v)
    cfg_path = tmp_path / "crawl.toml"
    cfg_path.write_text(text, encoding="utf-8")
    labels = host_labels(load_config(cfg_path))
    assert labels == {
        "openai.sandbox.invalid": "model demo-vision-auditor, model demo-text-auditor",
        "127.0.0.1:41001": "overpass API", "127.0.0.1:41002": "wdqs API",
        "127.0.0.1:41003": "pageviews API", "127.0.0.1:41004": "mapillary API",
    }
    http = {h: {"requests": 1, "retries": 0, "errors": {}} for h in ("127.0.0.1:41003", "127.0.0.1:49999")}
    st = {"campaign": "c", "queues": {}, "spend": None, "dead": {}, "host_labels": labels,
          "progress": {"finished": True, "elapsed_s": 1.0, "stages": [], "http": http}}
    out = format_status(st)
    assert "http 127.0.0.1:41003 (pageviews API): 1 request, 0 retries" in out
    assert "http 127.0.0.1:49999: 1 request, 0 retries" in out  # a host the config does not name stays bare


def test_status_names_sandbox_and_served_model_hosts_after_a_run(tmp_path):
    """Two models on a ``*.sandbox.invalid`` fake (port chosen at run time) and one on a fake served here."""
    cfg_path = tmp_path / "labels.toml"

    async def main():
        async with serve(llm_openai.make_app(require_auth=False)) as base:
            cfg_path.write_text(
                f'[campaign]\nname = "labels"\nkind = "generic"\nseed = 3\n'
                f'[paths]\nqueues = "{tmp_path / "queues"}"\nstate = "{tmp_path / "state"}"\n'
                '[budget]\ncap_usd = 5.0\n[generic]\nn_requests = 6\n'
                + _model("alpha", "http://openai.sandbox.invalid/v1") + _model("beta", "http://openai.sandbox.invalid/v1")
                + _model("gamma", f"{base}/v1"), encoding="utf-8")
            out = await run_campaign(load_config(cfg_path), live=False, handle_signals=False, export=False)
            return base, out

    base, outcome = anyio.run(main)
    assert outcome.exit_code == EXIT_COMPLETE
    text = format_status(campaign_status(load_config(cfg_path)))
    served = base.split("//", 1)[1].rstrip("/")
    assert re.search(rf"http {re.escape(served)} \(model gamma\): 6 requests", text), text
    sandbox = [ln for ln in text.splitlines() if ln.strip().startswith("http 127.0.0.1:") and served not in ln]
    # the fake's port was this run's own: said so (walkthrough s18: a bare port read as a server still there)
    assert len(sandbox) == 1 and "(model alpha, model beta; a local fake started by its run): 12 requests" in sandbox[0], text


SANDBOX_CRAWL = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"


def test_status_after_a_crawl_rerun_names_the_hosts_of_the_run_it_shows(sandbox_crawled, capsys):
    """A re-run with nothing to do starts the fakes on new ports; ``status`` then shows the HTTP figures of
    the last run that did work, so it must name THAT run's ports (each run records its own labels)."""
    import json

    from geoagent.cli import main

    isolated_roots, summary = sandbox_crawled  # the finished crawl (the session's one, restored) and its stdout
    capsys.readouterr()
    assert main(["crawl", str(SANDBOX_CRAWL), "--no-live"]) == 0  # resumes: no work, fakes on new ports
    capsys.readouterr()
    assert main(["status", str(SANDBOX_CRAWL)]) == 0
    out = capsys.readouterr().out
    assert "no work left to do" in out  # the figures shown are those of the first run
    records = [json.loads(ln) for ln in
               (isolated_roots / "state" / "crawl-sandbox" / "progress.jsonl").read_text().splitlines()]
    worked = [r for r in records if r.get("http")][-1]
    # the re-run's ports differ (the OS may hand one port out again: at least one differs; a CI run under load
    # reused one, session 34)
    assert set(records[-1]["host_labels"]) != set(worked["host_labels"])
    shown = {m.group(1): m.group(2) for m in re.finditer(r"^ +http (\S+)(?: \((.+?)\))?: \d+ requests", out, re.M)}
    assert set(shown) == set(worked["http"])
    fake = "; a local fake started by its run"
    assert sorted(v or "(none)" for v in shown.values()) == [
        f"mapillary API{fake}", f"model sandbox-vision-auditor, model sandbox-text-auditor{fake}",
        f"overpass API{fake}", f"pageviews API{fake}", f"wdqs API{fake}"], out
    # the pageviews 404s (articles without views) are explained, with the count the run recorded
    pv_host = next(h for h, label in shown.items() if label == f"pageviews API{fake}")
    n_404 = worked["http"][pv_host]["answers"]["http 404"]
    assert n_404 > 0 and (f"; {n_404} expected 404 answers (articles without views in the date range; not errors)"
                          in out), out
    assert re.search(rf"^ +pageviews: \d+ requests by this run \(\d+ over all runs\), 0 retries, error rate 0\.0%; {n_404} expected 404 answers "
                     r"\(articles without views in the date range; not errors\)$", summary, re.M), summary


#: loopback fakes need no usage-policy pacing (the public APIs' defaults would make the crawl take a minute)
FAST_POLICY = ("rate = 500.0\nperiod_s = 1.0\nconcurrency = 8\nmax_attempts = 3\nbackoff_base_s = 0.01\n"
               "backoff_max_s = 0.05\ntimeout_s = 10.0")


def test_status_names_the_mapillary_thumbnail_cdn_a_crawl_downloaded_from(tmp_path, monkeypatch):
    """Mapillary thumbnail URLs name a CDN host (``scontent-*.fbcdn.net``) that no config key names, found
    only when the crawl asks for the URLs. The crawl's world is served here with its thumbnails on a CDN fake of
    their own host; ``status`` must name that host too, not show it bare beside the labelled API hosts."""
    from geoagent.demo import demo_world
    from geoagent.runtime.http import host_key
    from geoagent.sandbox.city import serve_world
    from geoagent.sandbox.mapillary import MAPILLARY_STATE

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = SANDBOX_CRAWL.read_text(encoding="utf-8")
    text = text[: text.index('[[crawl.cities]]\ncity = "Sprawl Town"')] + text[text.index("\n[crawl.endpoints]\n") + 1:]
    cfg_path = tmp_path / "cdn.toml"

    async def main():
        async with serve_world(demo_world(), separate_cdn=True) as sb:
            body = text
            for key, url in sb["endpoints"].items():
                body = re.sub(rf'^{key} = "[^"]*"', f'{key} = "{url}"', body, count=1, flags=re.M)
            cfg_path.write_text(body.replace('name = "crawl-sandbox"', 'name = "cdn-labels"', 1)
                                + f'\n[paths]\nqueues = "{tmp_path / "queues"}"\nstate = "{tmp_path / "state"}"\n'
                                + "".join(f"\n[crawl.policies.{api}]\n{FAST_POLICY}\n" for api in
                                          ("overpass", "wdqs", "pageviews", "mapillary", "thumbnails")),
                                encoding="utf-8")
            out = await run_campaign(load_config(cfg_path), live=False, handle_signals=False, export=False)
            return sb, out, len(sb["apps"]["mapillary"][MAPILLARY_STATE].thumb_requests)

    sb, outcome, n_thumbs = anyio.run(main)
    assert outcome.exit_code == EXIT_COMPLETE and n_thumbs > 0
    cdn, api = host_key(sb["cdn"]), host_key(sb["endpoints"]["mapillary"])
    assert cdn != api
    out = format_status(campaign_status(load_config(cfg_path)))
    shown = {m.group(1): (m.group(2), int(m.group(3)))
             for m in re.finditer(r"^ +http (\S+)(?: \((.+?)\))?: (\d+) requests", out, re.M)}
    assert shown[cdn] == ("Mapillary thumbnail CDN", n_thumbs), out  # every download, counted at the fake
    assert shown[api][0] == "mapillary API"
    assert all(label for label, _ in shown.values()), out  # no host is left bare
