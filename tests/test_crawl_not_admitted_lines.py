"""The crawl summary and ``run.py status`` name each city the screener did not admit, and why.

Walkthrough: a city outside the sandbox world (Lyon: 0 neighbourhood nodes, 0 images) ended the run
``complete`` with ``admitted: done N`` and nothing said which city was rejected or why; the researcher had to
open ``city_pool.csv`` or ``screening/lyon.json``. Now one line per city not admitted, with the reasons in the
terms of seed 000 Sec. 3.1 (L_district outside [0.32, 0.65] km, or undefined with fewer than 3 neighbourhood
points; Mapillary coverage below 30 images within 1 km) and the measured values. Real process
(``run.py crawl``, its fakes in-process on ``*.sandbox.invalid``), then ``run.py status``.
"""

from __future__ import annotations

import re
import subprocess
import sys

from tests.test_crawl_watch_new_city import CONFIG, REPO, _watch_env, _without_city

LYON = '''
[[crawl.cities]]
city = "Lyon"
country = "FR"
continent = "EU"
lat = 45.764
lon = 4.8357
'''


def _crawl_config(tmp_path):
    text = _without_city(_without_city(CONFIG.read_text(encoding="utf-8"), "Mirror Bay"), "Sandbox City")
    head, sep, rest = text.partition("\n[crawl.endpoints]")  # the table, not its mention in the comments
    assert sep, text
    cfgp = tmp_path / "crawl.toml"
    cfgp.write_text(head + LYON + sep + rest, encoding="utf-8")
    return cfgp


def test_summary_and_status_name_the_cities_not_admitted_with_the_papers_reasons(tmp_path):
    cfgp = _crawl_config(tmp_path)
    env = _watch_env(tmp_path)
    res = subprocess.run([sys.executable, str(REPO / "run.py"), "crawl", str(cfgp), "--no-live"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=180)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out[-3000:]
    lyon = [ln for ln in out.splitlines() if "not admitted" in ln and "Lyon" in ln]
    assert len(lyon) == 1, out[-3000:]
    # 0 neighbourhood points: L_district undefined (3 needed); 0 images within 1 km, 30 needed
    assert re.search(r"L_district undefined.*\b0 neighbourhood points\b.*at least 3", lyon[0]), lyon[0]
    assert re.search(r"Mapillary coverage 0 .*images within 1 km.*below 30", lyon[0]), lyon[0]
    sprawl = [ln for ln in out.splitlines() if "not admitted" in ln and "Sprawl Town" in ln]
    assert len(sprawl) == 1, out[-3000:]
    m = re.search(r"L_district (\d+\.\d{3}) km, above the ceiling 0\.65 km of \[0\.32, 0\.65\] km", sprawl[0])
    assert m and float(m.group(1)) > 0.65, sprawl[0]
    assert "Sec. 3.1" in out

    st = subprocess.run([sys.executable, str(REPO / "run.py"), "status", str(cfgp)], cwd=REPO, env=env,
                        capture_output=True, text=True, timeout=60)
    assert st.returncode == 0, st.stdout[-2000:] + st.stderr[-2000:]
    assert [ln.strip() for ln in st.stdout.splitlines() if "not admitted" in ln and "Lyon" in ln] == \
        [lyon[0].strip()], st.stdout[-3000:]
