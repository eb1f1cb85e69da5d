"""The dry run's image refusal says what its estimate counted (newuser40 #1).

A GeoHint plan of synthetic images (``images = "auto"``) sent to a real model is refused; the warning said "the
estimate below counts a photo without a file at 1024x768" while the estimate counted the 640x480 placeholder
(about 14,167 tokens on gpt-4o-mini, where a 1024x768 photo is 25,501).
"""

from __future__ import annotations

from geoagent.cli import main

TOML = """[campaign]
name = "{name}"
kind = "geohint"
seed = 3
contact = "you@example.org"
[budget]
cap_usd = 1.00
[[models]]
name = "local-gpt"
provider = "openai"
model = "gpt-4o-mini"
base_url = "http://127.0.0.1:9/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 300
[geohint]
conditions = ["baseline"]
sites = {sites}
{images}
[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
"""


def _dry_run(root, name, images, capsys, sites='["tokyo_shibuya", "paris_marais"]'):
    path = root / f"{name}.toml"
    path.write_text(TOML.format(name=name, images=images, sites=sites), encoding="utf-8")
    assert main(["run", str(path), "--simulate", "--no-live"]) == 2
    cap = capsys.readouterr()
    out = cap.out + cap.err
    (line,) = [ln for ln in out.splitlines() if "the estimate below counts" in ln]
    return line.split("the estimate below counts ", 1)[1]


def test_synthetic_images_are_estimated_as_the_placeholder_and_the_warning_says_so(isolated_roots, release_dir,
                                                                                 monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    clause = _dry_run(isolated_roots, "synth", "", capsys)
    assert clause.startswith("the 640x480 placeholder of each image that has no photo at all (a synthetic image"), clause
    assert "1024x768" not in clause
    # sites whose photos the release lists (no file here) beside sites it has none for: both, each for its own
    both = _dry_run(isolated_roots, "mixed", "", capsys,
                    sites='["tokyo_shibuya", "paris_marais", "amsterdam_church", "berlin_alte"]')
    assert both.startswith("a photo without a file at 1024x768") and ", and the 640x480 placeholder" in both, both


def test_release_images_without_files_are_estimated_as_photos(isolated_roots, release_dir, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    empty = isolated_roots / "photos"
    empty.mkdir()
    clause = _dry_run(isolated_roots, "rel", f'images = "release"\nimage_root = "{empty}"', capsys,
                      sites='["amsterdam_church", "berlin_alte"]')
    assert clause.startswith("a photo without a file at 1024x768") and "placeholder" not in clause, clause


def test_release_images_of_other_sites_name_the_trial_table_read(isolated_roots, release_dir, monkeypatch, capsys):
    """newuser40 #7: sites the release's trial sample has no image of were blamed on an unfinished crawl."""
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    path = isolated_roots / "r7.toml"
    path.write_text(TOML.format(name="r7", images='images = "release"', sites='["tokyo_shibuya", "paris_marais"]'),
                    encoding="utf-8")
    assert main(["run", str(path), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "2 sites but no image (images = 'release'): the trial table " in err and "verify_trials" in err, err
    assert "none of the planned ones; choose [geohint] sites among them" in err
    assert "which a crawl writes" not in err
