"""The sandbox's Wikidata/Nominatim fakes know the places of the folder the campaign plans from.

A GeoHint (or GeoVerify) campaign over a release-form folder of its own (``[geohint] release_dir``, as a
campaign over a crawl's output names it) with its geocoder on the sandbox fakes. Before: :func:`launch` built
the fakes' gazetteer from ``cfg.release_dir()`` (``$GEOAGENT_RELEASE``, ``[paths] release_dir`` or the
default) whatever the task section named, so such a campaign geocoded against the shared release (or failed
with FileNotFoundError where there was none). Now the gazetteer is the task section's folder when it names one.
"""

from __future__ import annotations

import anyio
import aiohttp
import pytest

from geoagent.config import load_config
from geoagent.sandbox.launch import launch
from tests.test_geohint_sim_campaign_folder import _release_folder


def _config(tmp_path, kind: str, rel, paths_release) -> object:
    geocoder = ('[geohint.geocoder]\nwikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
                'nominatim_url = "http://nominatim.sandbox.invalid"\n' if kind == "geohint" else "")
    p = tmp_path / f"{kind}.toml"
    p.write_text(f"""
[campaign]
name = "own-folder-{kind}"
kind = "{kind}"
seed = 4
contact = "mailto:you@example.org"
[paths]
queues = "{tmp_path / 'queues'}"
state = "{tmp_path / 'state'}"
release_dir = "{paths_release}"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "openai"
base_url = "http://openai.sandbox.invalid/v1"
model = "gpt-4o-mini"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
[{kind}]
release_dir = "{rel}"
{geocoder}""", encoding="utf-8")
    return load_config(p)


@pytest.mark.parametrize("kind", ["geohint"])
def test_the_wikidata_fake_knows_the_task_sections_folder(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)
    rel = _release_folder(tmp_path / "crawl")
    # [paths] release_dir names a folder that does not exist: the task section's folder must be used
    cfg = _config(tmp_path, kind, rel, tmp_path / "no-release-here")

    async def go():
        async with launch(cfg) as live:
            url = live.tasks["geohint"]["geocoder"]["wikidata_url"]
            async with aiohttp.ClientSession(headers={"User-Agent": "geoagent-test/1 (mailto:you@example.org)"}) as s:
                async with s.get(url, params={"action": "wbsearchentities", "search": "Marrowgate Square",
                                              "language": "en", "format": "json", "type": "item"}) as r:
                    assert r.status == 200
                    return await r.json()

    body = anyio.run(go)
    labels = [hit.get("label") for hit in body.get("search", [])]
    assert "Marrowgate Square" in labels, body
