"""A permutation p at its floor is marked in the report's CSV, not only in Markdown.

Before: a sampled site-flip p that no flip reached (:class:`geoagent.report.geohint.FloorP`, ``1 / (1 + n_flips)``)
was shown ``<1.0e-04`` in Markdown and the terminal, but the CSV wrote the bare float, which a reader takes for the
p itself. Now every permutation p column (format ``permp``) has a Boolean ``<name>_is_floor`` column appended at the
end of the CSV (``True``/``False``, empty where the p is); the existing columns keep their names and order. Real
permutation tests (:func:`geoagent.scoring.permutation.paired_site_permutation_test`) and the report's Table."""

from __future__ import annotations

import csv
import io

import numpy as np

from geoagent.report.geohint import Table, perm_p
from geoagent.scoring.permutation import paired_site_permutation_test


def _p(effect: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    sites = [f"s{i}" for i in range(40) for _ in range(3)]
    control = rng.random(len(sites))
    treatment = control + effect + 0.3 * (rng.random(len(sites)) - 0.5)
    return paired_site_permutation_test(sites, treatment, control, n_flips=200, seed=seed)


def test_a_permutation_p_at_its_floor_is_marked_in_the_csv():
    floor, plain = _p(0.5), _p(0.0)
    assert floor.at_floor and not plain.at_floor
    t = Table("t", "T", ["Model", "Delta (pp)", "p", "p (building)"], ["text", "pp", "permp", "permp"],
              [["a", 1.0, perm_p(floor), perm_p(plain)], ["b", 2.0, float("nan"), perm_p(floor)]])
    rows = list(csv.reader(io.StringIO(t.to_csv())))
    # the earlier columns as before, then one flag per permutation p column
    assert rows[0] == ["Model", "Delta (fraction)", "p", "p (building)", "p_is_floor", "p (building)_is_floor"]
    assert rows[1][4:] == ["True", "False"] and float(rows[1][2]) == 1 / 201
    assert rows[2][2] == "" and rows[2][4:] == ["", "True"]
    assert "<" in t.to_markdown().splitlines()[4]  # Markdown still shows the bound
