"""Independent reference computations for tests (written here, not imported from geoagent)."""

from __future__ import annotations

import csv
import math
from pathlib import Path


def haversine_km(lat1: float, lon1: float, lat2: float, lon2: float) -> float:
    """Great-circle distance in km on the IUGG mean Earth radius (6371.0088 km)."""
    p1, p2 = math.radians(lat1), math.radians(lat2)
    a = math.sin((p2 - p1) / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(math.radians(lon2 - lon1) / 2) ** 2
    return 2 * 6371.0088 * math.asin(math.sqrt(a))


def csv_rows(path: Path) -> list[dict[str, str]]:
    """Rows of a CSV file with a header, as dicts of strings."""
    with Path(path).open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))
