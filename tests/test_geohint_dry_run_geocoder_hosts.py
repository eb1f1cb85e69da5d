"""The GeoHint dry run says when answers will be geocoded through the public Wikidata and Nominatim services
(fresh-user walkthrough, session 16).

Before: a GeoHint config without ``[geohint.geocoder]`` URLs (the defaults: www.wikidata.org and
nominatim.openstreetmap.org) passed the dry run without a word on them; offline, the run then paid every model
call and stopped with exit 3 ("host www.wikidata.org unreachable", every answer left queued for geocoding). Now the
dry run names the hosts the geocoder will call, and says nothing when they are local servers or sandbox fakes.
"""

from __future__ import annotations

from pathlib import Path

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "geohint_sandbox.toml"
URLS = ('wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
        'nominatim_url = "http://nominatim.sandbox.invalid"\n')


def _dry_run(tmp: Path, capsys, *, public: bool) -> str:
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count(URLS) == 1
    p = tmp / "hint.toml"
    p.write_text(text.replace(URLS, "") if public else text, encoding="utf-8")
    assert main(["run", str(p), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr()
    return " ".join((out.out + out.err).split())


def test_the_dry_run_names_the_public_geocoder_hosts(isolated_roots, release_dir, capsys):
    text = _dry_run(isolated_roots, capsys, public=True)
    assert "geocoding: every answer is geocoded through nominatim.openstreetmap.org, www.wikidata.org" in text, text
    assert "network" in text


def test_local_geocoders_draw_no_line(isolated_roots, release_dir, capsys):
    text = _dry_run(isolated_roots, capsys, public=False)
    assert "geocoding: every answer is geocoded through" not in text, text
