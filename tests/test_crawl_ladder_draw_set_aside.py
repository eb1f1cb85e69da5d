"""A crawl whose ladders were drawn before draw versions were recorded stays version 1 when its ladders were set
aside at the start of the run (another auditor's file names) before the first ladder of the run was written.

Before: :func:`geoagent.crawl.ladder.ladder_draw_version` decided "drawn before" by ``ladders/*.csv`` alone, and it
is first asked when the run rebuilds a ladder, after :func:`geoagent.crawl.stages.set_aside_other_auditor_ladders`
moved every file named under another auditor to ``ladders_superseded/``. A crawl of an earlier version whose every
ladder was so moved (an older crawl's ladders named by an auditor its rated records do not name) found ``ladders/``
empty, was recorded version 2, and every ladder was drawn anew (other reference points, so a GeoHint campaign over
the crawl re-asked its requests) although its ratings were unchanged. Now a ladder in ``ladders_superseded/`` also
means the crawl's ladders were drawn before."""

from __future__ import annotations

import random
import shutil

from geoagent.crawl.ladder import LADDER_DRAW_FILE, RatedCandidate, build_ladder, ladder_draw_version
from tests import test_crawl_pipeline as _pipe
from tests.test_crawl_pipeline import _csv, _settings

#: the sandbox crawl of test_crawl_pipeline (module fixture: one crawl for this module)
crawled = _pipe.crawled

NOWHERE = {"overpass": "http://127.0.0.1:9/api", "wdqs": "http://127.0.0.1:9/sparql",
           "pageviews": "http://127.0.0.1:9", "mapillary": "http://127.0.0.1:9"}  # nothing listens: no call


def test_set_aside_ladders_alone_still_mean_drawn_before(tmp_path):
    (tmp_path / "ladders_superseded").mkdir()
    (tmp_path / "ladders_superseded" / "s_ladder_old-en.csv").write_text("band\n", encoding="utf-8")
    assert ladder_draw_version(tmp_path) == 1


def test_an_older_crawl_whose_ladders_were_all_set_aside_keeps_its_draws(crawled, tmp_path):
    from geoagent.crawl.stages import _rated_records, apply_review_verdicts, set_aside_other_auditor_ladders

    tmp, world, _run, _apps, _counts = crawled
    state = tmp_path / "state"
    shutil.copytree(tmp / "state", state)
    (state / LADDER_DRAW_FILE).unlink()  # drawn before versions were recorded
    for p in list((state / "ladders").glob("*.csv")):  # named under an auditor the records do not name
        site, _sep, _rest = p.stem.partition("_ladder_")
        p.rename(p.with_name(f"{site}_ladder_retired-auditor-en.csv"))
    settings = _settings(world, NOWHERE)
    moved = set_aside_other_auditor_ladders(settings, state)
    assert moved and not list((state / "ladders").glob("*.csv"))
    apply_review_verdicts(settings, state)
    assert ladder_draw_version(state) == 1
    for rec in _rated_records(state):
        sid = rec["site"]["site"]
        cands = [RatedCandidate(**r) for r in rec["rated"]]
        old = build_ladder(cands, rng=random.Random(f"{settings.seed}:{sid}"), site_qid=rec["site"].get("qid"),
                           site_names=[rec["site"].get("landmark", "")])
        [path] = (state / "ladders").glob(f"{sid}_ladder_*.csv")
        assert [r["qid"] for r in _csv(path)] == [r["qid"] for r in old]
