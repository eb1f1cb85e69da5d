"""The auditor's Chinese name is capped as its English name is (session 16; mirrors
``tests/test_polish_s15.py::test_an_overlong_english_name_is_not_used_and_the_decision_log_says_so``).

Before: ``name_en`` over :data:`~geoagent.crawl.ladder.NAME_EN_MAX_CHARS` (200) characters was dropped, but a looping
auditor's 50 KB ``zh`` was kept as ``name_zh``: into the decision log, the ladder's ``name_zh`` column, the plan's
``ref_name_zh`` (the ``release_first_word`` echo key) and, for a candidate with neither English name nor label, the
hint name put into every prompt.
"""

from __future__ import annotations

import asyncio
import json

from test_polish_s15 import _LoopingAuditor


class _LoopingZhAuditor(_LoopingAuditor):
    """A text-only auditor (Provider interface) whose Chinese name for candidate 0 loops for 50 KB."""

    kind = "looping-zh-test"
    names = ({"zh": "淡水老磨坊" * 10000, "en": "Old Mill"}, {"zh": "淡水镇公所", "en": "Town Hall"})


def test_an_overlong_chinese_name_is_not_used_and_the_decision_log_says_so(tmp_path):
    from geoagent import constants as C
    from geoagent.crawl.ladder import hint_name
    from geoagent.crawl.referenceability import (
        NAME_ZH_MAX_CHARS,
        RefCandidate,
        ReferenceabilityAuditor,
        parse_ref_batch,
    )
    from geoagent.crawl.settings import ReferenceabilitySettings
    from geoagent.providers.base import Provider

    assert NAME_ZH_MAX_CHARS == 200
    got = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 2, "zh": "%s", "en": "Mill"}]' % ("磨" * 201), 1)
    assert got[0]["familiarity"] == 2 and got[0]["name_zh"] is None and got[0]["name_en"] == "Mill"
    assert "name_en_dropped" not in got[0]
    ok = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 2, "zh": "%s"}]' % ("磨" * 200), 1)
    assert ok[0]["name_zh"] == "磨" * 200 and "name_zh_dropped" not in ok[0]
    both = parse_ref_batch('[{"idx": 0, "ok": true, "familiarity": 2, "zh": "%s", "en": "%s"}]' % ("磨" * 201, "x" * 201), 1)
    assert both[0]["name_zh"] is None and both[0]["name_en"] is None
    assert "name_zh_dropped" in both[0] and "name_en_dropped" in both[0]

    Provider.register(_LoopingZhAuditor)
    cands = [RefCandidate("Q501", "Old Mill of Tamsui", 0.5, 0, 0), RefCandidate("Q502", "Tamsui Town Hall", 0.7, 0, 0)]
    aud = ReferenceabilityAuditor(_LoopingZhAuditor(), ReferenceabilitySettings(model="aud-1"), tmp_path)
    rated = asyncio.run(aud.audit("s1", cands))
    by = {r.qid: r for r in rated}
    assert by["Q501"].familiarity == 4 and by["Q501"].name_zh is None and by["Q501"].name_en == "Old Mill"
    assert by["Q502"].name_zh == "淡水镇公所"
    lines = (tmp_path / C.AUDIT_DECISIONS_FILE).read_text().splitlines()
    recs = {r["qid"]: r for r in map(json.loads, lines)}
    assert recs["Q501"]["name_zh"] is None and recs["Q501"]["familiarity"] == 4
    assert "200" in recs["Q501"]["name_zh_dropped"] and "name_en_dropped" not in recs["Q501"]
    assert list(recs["Q501"])[-2:] == ["ts", "name_zh_dropped"]  # the release's keys first, the note after ts
    assert "name_zh_dropped" not in recs["Q502"]
    # a decision log written before the cap still holds the long name: the hint does not use it either
    assert hint_name(None, "Q501", "淡水老磨坊" * 10000, qid="Q501") is None
    assert hint_name(None, "Q501", "淡水老磨坊", qid="Q501") == "淡水老磨坊"
