"""Notes said once (session 12 fresh-clone walkthrough of ``python run.py demo``).

Before, the GeoVerify notes gave one ``No interval (model): ...`` line per column, each with the same reasons word
for word (demo-large, demo-fast and pooled alike).
"""

from __future__ import annotations

import polars as pl

from geoagent.data.model import BAND_SIGNAL
from geoagent.report import geoverify as R
from geoagent.scoring import sdt

B0, B1 = "0.15-0.3km", "0.3-0.7km"


def _cells(models):
    rows = []
    for m in models:
        for i in range(6):
            rows += [(m, f"s{i}", "main", BAND_SIGNAL, "yes", 4, 1, 0), (m, f"s{i}", "main", B1, "no", 1, 4, 0)]
        rows += [(m, f"s{i}", "main", B0, "no", 2, 3, 0) for i in range(3)]
    return pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")


def test_identical_no_interval_lines_are_merged():
    scores = sdt.score(_cells(["a", "b"]), bands=(B0, B1), pooled=True, n_boot=200, seed=1)
    for text in (R.render_markdown(scores), R.render_terminal(scores)):
        lines = [ln for ln in text.splitlines() if "No interval (" in ln]
        assert len(lines) == 1, lines
        assert "No interval (a, b, pooled):" in lines[0]
        assert "decoy trials from 3 sites (fewer than 5: reason a)" in lines[0]
