"""A stop in the middle of a referenceability audit keeps what was already paid for.

A batch whose answer is only partly parseable is split and the missing candidates are asked again. When the
run is asked to stop between those calls (``metered_generate`` raises ``Abandoned`` for the call not yet
sent), the decisions parsed from the first, paid answer must be logged, so the next run asks only for the
missing candidates; otherwise it sends the same paid prompt (same request key) a second time.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from geoagent import constants as C
from geoagent.crawl.llmcall import metered_generate
from geoagent.crawl.referenceability import ReferenceabilityAuditor
from geoagent.crawl.settings import ReferenceabilitySettings
from geoagent.runtime.stage import Abandoned
from tests.test_crawl_referenceability import ScriptedProvider, _cands


class PartialScreen(ScriptedProvider):
    """Rates everything; its sensitivity-screen answer leaves out candidate idx 4."""

    async def generate(self, request):
        resp = await super().generate(request)
        if "CONTENTIOUS" not in request.prompt:
            return resp
        arr = [a for a in json.loads(resp.text) if a["idx"] != 4]
        return type(resp)(text=json.dumps(arr), usage=resp.usage)


def _auditor(tmp_path, prov, stop_after_kind=None):
    stop = {"now": False}

    async def generate(req):
        resp = await metered_generate(prov, req, stopping=lambda: stop["now"])
        if prov.kinds[-1] == stop_after_kind:
            stop["now"] = True  # the stop request arrives while this answer is parsed
        return resp

    return ReferenceabilityAuditor(prov, ReferenceabilitySettings(model="aud-1", batch_size=6), tmp_path,
                                   generate=generate)


def _qids(path):
    return sorted(json.loads(x)["qid"] for x in path.read_text(encoding="utf-8").splitlines())


def test_stop_between_split_rating_calls_keeps_the_parsed_decisions(tmp_path):
    cands = _cands(6)
    prov = ScriptedProvider(drop_label="Place 4")  # the answer leaves out one candidate: split and ask again
    with pytest.raises(Abandoned):
        asyncio.run(_auditor(tmp_path, prov, stop_after_kind="ref").audit("s1", cands))
    assert prov.batches == [[c.label for c in cands]]  # one paid call; the re-ask was not sent
    # the five decisions parsed from the paid answer are logged (hand count: 6 candidates, 'Place 4' left out)
    assert _qids(tmp_path / C.AUDIT_DECISIONS_FILE) == sorted(c.qid for i, c in enumerate(cands) if i != 4)
    prov2 = ScriptedProvider()
    asyncio.run(_auditor(tmp_path, prov2).audit("s1", cands))
    assert [b for b, k in zip(prov2.batches, prov2.kinds) if k == "ref"] == [["Place 4"]]  # only the missing one


def test_stop_between_split_screen_calls_keeps_the_parsed_screenings(tmp_path):
    cands = _cands(6)
    prov = PartialScreen()
    with pytest.raises(Abandoned):
        asyncio.run(_auditor(tmp_path, prov, stop_after_kind="sens").audit("s1", cands))
    assert prov.kinds == ["ref", "sens"]
    assert _qids(tmp_path / C.AUDIT_SENSITIVE_FILE) == sorted(c.qid for i, c in enumerate(cands) if i != 4)
    prov2 = ScriptedProvider()
    asyncio.run(_auditor(tmp_path, prov2).audit("s1", cands))
    assert prov2.kinds == ["sens"] and prov2.batches == [["Place 4"]]
