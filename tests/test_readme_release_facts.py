"""The README's figures about the shipped replay sample agree with the release data they describe.

The README said the sample held "336 main-arm responses from 9 sites" (as the release folder's SOURCE.md
does); the exported scored table has 10 sites, because the sample is cut at a whole line and its last
record is the only one of ``berlin_alte``. Counted here straight from ``verify_raw_sample.jsonl``.
"""

from __future__ import annotations

import json
import re
from collections import Counter

from _docs import docs_text


def test_readme_replay_sample_counts_match_the_data(release_dir):
    rows = [json.loads(line) for line in (release_dir / "verify_raw_sample.jsonl").open(encoding="utf-8") if line.strip()]
    text = " ".join(docs_text().split())
    m = re.search(r"The shipped sample holds (\d+) main-arm responses of (\d+) models from (\d+) sites", text)
    assert m, "README no longer states the replay sample's size"
    n, n_models, n_sites = map(int, m.groups())
    assert n == len(rows) and {r["arm"] for r in rows} == {"main"}
    assert n_models == len({r["model"] for r in rows})
    per_site = Counter(r["site"] for r in rows)
    assert n_sites == len(per_site)
    singles = [site for site, k in per_site.items() if k == 1]
    assert singles == ["berlin_alte"] and rows[-1]["site"] == "berlin_alte"  # the cut falls in its first record
    assert "`berlin_alte`, has a single response" in text
