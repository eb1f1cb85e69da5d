"""A GeoHint campaign without a contact is refused at load, by the dry run and the run alike, before anything
is written (fresh-user walkthrough 9, item B).

Before, with the ``[campaign] contact`` line removed (and no ``[geohint.geocoder] contact``), ``run --simulate``
exited 0 without a word and ``run`` exited 2 with "error: geocoder needs a contact ..." (no file named) after
creating ``state/<name>/``, enqueuing every request and writing manifest.json status "interrupted". The
geocoder (Wikidata, Nominatim) needs the contact for its User-Agent, so the config cannot run without one.
"""

from __future__ import annotations

from pathlib import Path

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "geohint_sandbox.toml"
LINE = 'contact = "mailto:you@example.org"\n'


def _without_contact(tmp: Path, geocoder_contact: str | None = None) -> Path:
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count(LINE) == 1
    text = text.replace(LINE, "")
    if geocoder_contact is not None:
        text = text.replace("[geohint.geocoder]\n", f'[geohint.geocoder]\ncontact = "{geocoder_contact}"\n')
    p = tmp / "hint_nocontact.toml"
    p.write_text(text, encoding="utf-8")
    return p


def test_no_contact_is_a_config_error_for_dry_run_and_run(isolated_roots, capsys):
    cfg = _without_contact(isolated_roots)
    for argv in (["run", str(cfg), "--simulate", "--no-live"], ["run", str(cfg), "--no-live"]):
        assert main(argv) == 2, argv
        err = " ".join(capsys.readouterr().err.split())
        assert err.startswith(f"config error: {cfg}: campaign.contact: not set, and no [geohint.geocoder] contact"), err
        assert "Wikidata and Nominatim" in err
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()


def test_geocoder_contact_alone_is_enough(isolated_roots, release_dir, capsys):
    # the dry run gets past the load and plans the sandbox config over the release (skipped without it)
    cfg = _without_contact(isolated_roots, geocoder_contact="mailto:me@example.org")
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    assert "campaign.contact" not in capsys.readouterr().err
