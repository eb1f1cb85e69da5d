"""A real city added to the sandbox crawl config is named in one line: the local fakes know only the sandbox world.

Leftover of session 13: ``geoagent/configs/crawl_sandbox.toml`` points ``[crawl.endpoints]`` at the local fakes
(``*.sandbox.invalid``), which serve the demo's world only (Sandbox City, Sprawl Town, Mirror Bay). A researcher who
added Paris to its ``[[crawl.cities]]`` got a crawl that ran, found nothing there, and did not admit the city, with
no hint why. Now the plan (dry run and run) gives one ``warning:`` line naming each configured city with no sandbox
data within :data:`geoagent.sandbox.city.WORLD_DATA_RADIUS_KM` of its centre and what to do. The CLI entry, local
fakes started in-process."""

from __future__ import annotations

from pathlib import Path

from geoagent.cli import main

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
PARIS = '''
[[crawl.cities]]
city = "Paris"
country = "FR"
continent = "EU"
lat = 48.8566
lon = 2.3522
'''


def _with(tmp_path, extra):
    head, sep, rest = CONFIG.read_text(encoding="utf-8").partition("\n[crawl.endpoints]")
    p = tmp_path / "crawl.toml"
    p.write_text(head + extra + sep + rest, encoding="utf-8")
    return p


def test_a_real_city_in_the_sandbox_crawl_is_named_in_one_line(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(_with(isolated_roots, PARIS)), "--simulate", "--no-live"]) == 0
    cap = capsys.readouterr()
    lines = [ln for ln in (cap.out + cap.err).splitlines() if "sandbox world" in ln]
    assert len(lines) == 1, cap.out + cap.err  # before: none
    line = lines[0]
    assert line.startswith("warning: ") and "'Paris'" in line
    assert "Sandbox City" in line and "Mirror Bay" in line  # what the fakes know
    assert "[crawl.endpoints]" in line
    assert "Sprawl Town'" not in line.split("know only")[0]  # the sandbox's own cities are not named as outside


def test_the_shipped_sandbox_crawl_gives_no_such_line(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(CONFIG), "--simulate", "--no-live"]) == 0
    cap = capsys.readouterr()
    assert "sandbox world" not in cap.out + cap.err
