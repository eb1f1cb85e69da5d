"""City screener (seed 000 Sec. 3.1): the addressing units the release excludes before measuring L_district."""

from __future__ import annotations

import csv

import pytest

from geoagent.crawl.screener import PlaceNode, district_scale_row, is_addressing_unit
from geoagent.crawl.settings import ScreenerSettings


@pytest.mark.parametrize("name", ["Unidad Habitacional Tlatelolco", "Unidad Habitacional Nonoalco-Tlatelolco",
                                  "Fraccionamiento Las Américas", "Fraccionamiento Lomas de Bezares"])
def test_mexican_housing_units_are_addressing_units(name):
    """Sec. 3.1: 'addressing units must be excluded'. Besides the Japanese X-chome blocks, the release's
    L_district measurement (analysis/district_scale.py, ``_ADDRESS_UNIT``) excludes Mexico's housing
    developments, names beginning 'Unidad Habitacional' or 'Fraccionamiento': that is what the Mexico City
    sites of district_scale.csv lose (cdmx_roma 299 -> 285 nodes, cdmx_condesa 307 -> 294)."""
    assert is_addressing_unit(name, ScreenerSettings().addressing_unit_patterns)


@pytest.mark.parametrize("name", ["Roma Norte", "Condesa", "Hipódromo Condesa", "Colonia Juárez",
                                  "Barrio de la Unidad", "Jardines del Fraccionamiento"])
def test_ordinary_mexican_neighbourhoods_are_kept(name):
    assert not is_addressing_unit(name, ScreenerSettings().addressing_unit_patterns)


def test_cdmx_like_node_set_keeps_the_release_count(release_dir):
    """A node set with cdmx_roma's composition (299 nodes of which 14 are housing developments) keeps the
    release's 285."""
    with (release_dir / "district_scale.csv").open(encoding="utf-8") as f:
        row = next(r for r in csv.DictReader(f) if r["site"] == "cdmx_roma")
    n_raw, n_kept = int(row["n_nodes_raw"]), int(row["n_nodes_filtered"])
    names = ([f"Unidad Habitacional {i}" if i % 2 else f"Fraccionamiento Villa {i}" for i in range(n_raw - n_kept)]
             + [f"Colonia {chr(65 + i % 26)}{i}" for i in range(n_kept)])
    nodes = [PlaceNode(i, 19.40 + 0.001 * (i % 20), -99.16 + 0.001 * (i // 20), n, "neighbourhood")
             for i, n in enumerate(names)]
    out = district_scale_row("cdmx_roma", nodes, ScreenerSettings())
    assert (out["n_nodes_raw"], out["n_nodes_filtered"]) == (n_raw, n_kept) == (299, 285)
