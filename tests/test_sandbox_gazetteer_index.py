"""The sandbox gazetteer's name search is an index (binary search over the folded names sorted once); it must
answer exactly as the linear scan over every name it replaced, on the sandbox world and the release ladders."""

from __future__ import annotations

import random
from typing import Any

import pytest

from geoagent.geohint.placenames import fold
from geoagent.qid import is_qid
from geoagent.sandbox.gazetteer import Gazetteer, NameMatch


def _linear_search(gaz: Gazetteer, text: str, language: str | None = "en", *, prefix: bool = True) -> list[NameMatch]:
    """The search as it was before the index: every name of every entry scanned (reference)."""
    key = fold(text)
    if not key:
        return []
    out: list[tuple[tuple[Any, ...], NameMatch]] = []
    q = text.strip().upper()
    if is_qid(q) and gaz.get(q) is not None:
        e = gaz.get(q)
        out.append(((0, 0, -e.sitelinks, e.qid), NameMatch(e, "entityId", language or "en", q, True)))
    best = {m.entry.qid: (r, m) for r, m in out}
    for e, mtype, lang, name, nk in gaz._name_index():  # every name of every entry, folded, in entry order
        exact = nk == key
        if not (exact or (prefix and nk.startswith(key))):
            continue
        other_lang = 0 if (language is None or lang == language) else 1
        rank = (0 if exact else 1, other_lang, 0 if mtype == "label" else 1, -e.sitelinks, e.qid)
        if e.qid not in best or rank < best[e.qid][0]:
            best[e.qid] = (rank, NameMatch(e, mtype, lang, name, exact))
    return [m for _, m in sorted(best.values(), key=lambda t: t[0])]


def _queries(gaz: Gazetteer, n_names: int, n_prefixed: int, n_random: int, seed: int) -> list[str]:
    """Names as written, the prefixes of some (as typed and folded), QIDs, and random texts."""
    rng = random.Random(seed)
    names = sorted({name for e in gaz for _, _, name in e.names(None)})
    qs: set[str] = set(rng.sample(names, min(len(names), n_names)))
    for name in rng.sample(names, min(len(names), n_prefixed)):
        for i in range(1, len(name) + 1):
            qs.add(name[:i])
        qs.add(fold(name)[:3])
        qs.add(name.upper() + " ")
    qs.update(e.qid for e in list(gaz)[:50])
    qs.update(e.qid.lower() for e in list(gaz)[50:60])
    alphabet = "abcdefghijklmnopqrstuvwxyz éü-'.渋谷"
    qs.update("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 6))) for _ in range(n_random))
    qs.update(["", " ", "-", "the", "The ", "zzzz", "Q", "Q0"])
    return sorted(qs)


def _assert_same(gaz: Gazetteer, queries: list[str]) -> int:
    hits = 0
    for text in queries:
        for language, prefix in (("en", True), (None, True), ("ja", True), ("en", False)):
            got = gaz.search(text, language, prefix=prefix)
            want = _linear_search(gaz, text, language, prefix=prefix)
            assert got == want, (text, language, prefix)
            hits += len(got)
    return hits


def test_indexed_search_answers_as_the_scan_on_the_sandbox_world():
    from geoagent.demo import demo_world
    from geoagent.integrate import gazetteer_from_world

    gaz = gazetteer_from_world(demo_world())
    assert len(gaz) > 10
    assert _assert_same(gaz, _queries(gaz, 10_000, 200, 300, seed=1)) > 0


def test_indexed_search_answers_as_the_scan_on_the_release_ladders(release_dir):
    gaz = Gazetteer.from_release(release_dir, seed=0)
    assert len(gaz) > 1000
    assert _assert_same(gaz, _queries(gaz, 300, 30, 100, seed=2)) > 0


def test_the_index_follows_entries_added_after_a_search():
    from geoagent.sandbox.gazetteer import GazetteerEntry

    gaz = Gazetteer([GazetteerEntry(qid="Q1", labels={"en": "Shibuya"}, lat=35.66, lon=139.7, kind="area",
                                    city="Tokyo")])
    assert [m.entry.qid for m in gaz.search("shib")] == ["Q1"]
    gaz.add(GazetteerEntry(qid="Q2", labels={"en": "Shibuya Crossing", "ja": "渋谷スクランブル交差点"},
                           aliases={"en": ("Scramble",)}, lat=35.6595, lon=139.7005, kind="building",
                           city="Tokyo", sitelinks=9))
    assert [m.entry.qid for m in gaz.search("shib")] == ["Q2", "Q1"]  # more sitelinks first
    assert gaz.search("shib") == _linear_search(gaz, "shib")
    assert gaz.search("scram") == _linear_search(gaz, "scram")
    assert gaz.search("渋谷", "ja") == _linear_search(gaz, "渋谷", "ja")


@pytest.mark.parametrize("text", ["Shibuya", "Q2"])
def test_exact_only_search_matches_whole_names(text):
    from geoagent.sandbox.gazetteer import GazetteerEntry

    gaz = Gazetteer([GazetteerEntry(qid="Q2", labels={"en": "Shibuya"}, lat=0.0, lon=0.0, kind="area", city="T"),
                     GazetteerEntry(qid="Q3", labels={"en": "Shibuya Crossing"}, lat=0.0, lon=0.0, kind="building",
                                    city="T")])
    assert [m.entry.qid for m in gaz.search(text, prefix=False)] == ["Q2"]
