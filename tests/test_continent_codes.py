"""Continents are codes from a fixed set, whatever their case (fresh-user walkthrough 9, item A).

Before, ``[[crawl.cities]] continent`` was free text compared case-sensitively: a city with ``continent = "eu"``
beside cities with ``"EU"`` gave no one-continent warning and the swapped-image control (``ctrl_mismatch``,
which must pair sites on different continents, seed 000 Sec. 5) paired "eu" with "EU" sites; ``"Europe"``
was accepted too. Now the config normalises the case and refuses an unknown value at load naming
``crawl.cities[i].continent`` and the accepted codes (those of the release's ``city_pool.csv``, where AN is
North America; NA reads as AN), and the release importer does the same per row (bad rows are reported).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from geoagent.cli import main
from geoagent.data.importer import import_release

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CODES = "AF, AN, AS, EU, OC, SA"


def _with_mirror_bay_on(tmp: Path, continent: str) -> Path:
    text = CONFIG.read_text(encoding="utf-8")
    assert text.count('continent = "AS"') == 1
    p = tmp / "crawl.toml"
    p.write_text(text.replace('continent = "AS"', f'continent = "{continent}"'), encoding="utf-8")
    return p


def test_lower_case_code_is_the_same_continent(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    cfg = _with_mirror_bay_on(isolated_roots, "eu")
    assert main(["crawl", str(cfg), "--simulate", "--no-live"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "no swapped-image control trials (ctrl_mismatch) can be built: every city is on one continent (EU)" in out, out


def test_unknown_continent_is_refused_at_load_naming_the_key_and_codes(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    for bad in ("Europe", "XX", " "):
        cfg = _with_mirror_bay_on(isolated_roots, bad)
        assert main(["crawl", str(cfg), "--simulate", "--no-live"]) == 2
        err = " ".join(capsys.readouterr().err.split())
        assert f"{cfg.name}: crawl.cities[2].continent: {bad!r} is not a continent code" in err, err
        assert CODES in err and "North America" in err, err
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()


def test_na_reads_as_the_release_code_an(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = _with_mirror_bay_on(isolated_roots, "na").read_text(encoding="utf-8")
    cfg = isolated_roots / "crawl_na.toml"
    cfg.write_text(text.replace('continent = "EU"', 'continent = "AN"'), encoding="utf-8")
    assert main(["crawl", str(cfg), "--simulate", "--no-live"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "every city is on one continent (AN)" in out, out


def test_release_import_normalises_case_and_reports_unknown_continents(release_dir, tmp_path):
    dst = tmp_path / "release"
    shutil.copytree(release_dir, dst)
    clean = import_release(release_dir)
    sites = (dst / "sites.csv").read_text(encoding="utf-8").split("\n")
    head = sites[0].split(",")
    col = head.index("continent")
    row1, row2 = sites[1].split(","), sites[2].split(",")
    assert row1[col] and row2[col]
    row1[col] = row1[col].lower()
    row2[col] = "Europe"
    sites[1], sites[2] = ",".join(row1), ",".join(row2)
    (dst / "sites.csv").write_text("\n".join(sites), encoding="utf-8")
    rel = import_release(dst)
    sid1, sid2 = row1[head.index("site")], row2[head.index("site")]
    assert rel.sites[sid1].continent == clean.sites[sid1].continent == row1[col].upper()
    assert sid2 not in rel.sites
    bad = [i for i in rel.report.issues if i.file.endswith("sites.csv")]
    assert [i.line for i in bad] == [3] and "continent" in bad[0].reason and CODES in bad[0].reason, bad
    assert {s.continent for s in rel.sites.values()} <= set(CODES.split(", "))


def test_tables_written_before_the_check_pair_by_code_not_spelling():
    # a crawl's sites.csv from before (continent "eu" beside "EU"): one continent, so no swapped-image control
    from geoagent.geoverify.trials import one_continent_note

    note = one_continent_note(["EU", "eu", " Eu "])
    assert note and "every city is on one continent (EU)" in note
    assert one_continent_note(["EU", "as"]) is None
