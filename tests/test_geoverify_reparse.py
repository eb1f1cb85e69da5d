"""GeoVerify answers read by an earlier verdict parser are parsed again from their stored text (no model call).

Before: a campaign's scored rows kept the reading of the parser that wrote them; after a parser fix (version 2: a
labelled "Verdict: No way to tell" is no verdict, version 1 read it as "no") its report, its exports and any later run
kept the old reading, mixed with the new one for answers scored after the upgrade. Now every row records its
``parser_version``; a run parses the stale rows again before its workers start and says how many changed, the export
shows the current reading, and the scorer parses again an answer queued by an earlier parser
(:mod:`geoagent.geoverify.reparse`).

Unit cases use a real campaign store (SQLite, in ``tmp_path``); the end-to-end case replays the release sample
through the CLI (skipped without the release data).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import polars as pl
import pytest

from geoagent.cli import main
from geoagent.geoverify.parse import VERDICT_PARSER_VERSION, parse_verdict
from geoagent.geoverify.reparse import refresh_stored_rows, reparse_items
from geoagent.geoverify.score import scored_row
from geoagent.geoverify.stages import SCORED_TABLE, GeoVerifyScorerStage
from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.runtime.store import open_campaign_state

REPLAY = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml"
NO_WAY = "Verdict: No way to tell from this photo.\nConfidence: 0.4"
TRIAL = {"trial_id": "img1|main|Old Mill", "image_id": "img1", "site": "s1", "arm": "main", "band": "signal",
         "truth": "yes", "cand": "Old Mill", "d_km": 0.05, "referenceability": 3.0}


def _version_1_row(text_key: str) -> dict:
    """A row as the version-1 parser wrote it for NO_WAY: the labelled form read as "no", no parser_version."""
    row = scored_row(TRIAL, "m", parse_verdict('{"verdict": "no", "confidence": 0.4}'), finish_reason="stop")
    del row["parser_version"]
    row.update(request_key=text_key, input_tokens=100, output_tokens=12)
    return row


def _store_answer(st, key: str, text: str) -> None:
    st.store.put(key, {"model": "m"}, ModelResponse(text=text, usage=Usage(100, 12), latency_s=0.1,
                                                    finish_reason="stop"), None)


def test_the_labelled_no_way_is_no_verdict_in_this_version():
    """The change version 2 stood for (the parser's own tests hold the rest)."""
    assert VERDICT_PARSER_VERSION >= 2
    assert not parse_verdict(NO_WAY).ok
    assert scored_row(TRIAL, "m", parse_verdict(NO_WAY))["parser_version"] == VERDICT_PARSER_VERSION


def test_refresh_parses_stale_rows_again_and_leaves_current_ones(tmp_path):
    with open_campaign_state("rp", root=tmp_path) as st:
        _store_answer(st, "k-stale", NO_WAY)
        _store_answer(st, "k-same", '{"verdict": "yes", "confidence": 0.9}')
        stale = _version_1_row("k-stale")
        same = {**scored_row({**TRIAL, "trial_id": "t2"}, "m", parse_verdict('{"verdict": "yes", "confidence": 0.9}')),
                "request_key": "k-same"}
        del same["parser_version"]  # version 1, and version 2 reads it alike
        current = {**scored_row({**TRIAL, "trial_id": "t3"}, "m", parse_verdict("Yes.")), "request_key": "k-gone"}
        orphan = {**_version_1_row("k-gone"), "trial_id": "t4"}  # no stored text and no raw: kept
        st.store.put_results(SCORED_TABLE, [("a", stale), ("b", same), ("c", current), ("d", orphan)])

        # the run's "work began" hook (review40b #5): called once, while row "a" still has its version-1 reading
        began: list[object] = []
        got = refresh_stored_rows(st.store, SCORED_TABLE, before_write=lambda: began.append(
            dict(st.store.iter_results(SCORED_TABLE))["a"].get("parser_version", "v1")))
        assert (got.stale, got.reparsed, got.changed, got.no_text, got.versions) == (3, 2, 1, 1, (1,))
        assert began == ["v1"]
        line = got.line("rp")
        assert line == (f"info: campaign rp: 2 stored answers read by an earlier verdict parser (version 1) were parsed "
                        f"again by version {VERDICT_PARSER_VERSION} from the stored text (no model call): 1 changed "
                        "verdict, confidence or parse success; 1 stored answer read by an earlier verdict parser "
                        "(version 1) has no stored text and keeps that reading (its parser_version in the export says "
                        "so).")

        rows = dict(st.store.iter_results(SCORED_TABLE))
        a = rows["a"]
        assert (a["verdict"], a["conf"], a["correct"], a["parse_ok"]) == (None, None, None, False)
        assert (a["raw"], a["parser_version"], a["parse_reason"]) == (NO_WAY, VERDICT_PARSER_VERSION, "no JSON object found")
        assert (a["request_key"], a["input_tokens"], a["output_tokens"], a["finish_reason"]) == ("k-stale", 100, 12, "stop")
        assert {k: rows["b"][k] for k in ("verdict", "conf", "parse_ok", "parser_version")} == {
            "verdict": "yes", "conf": 0.9, "parse_ok": True, "parser_version": VERDICT_PARSER_VERSION}
        assert rows["c"] == current
        assert rows["d"] == orphan  # kept as it was, version 1 by its missing field

        again = refresh_stored_rows(st.store, SCORED_TABLE, before_write=lambda: began.append(0))
        assert (again.stale, again.reparsed, again.no_text) == (1, 0, 1)  # only the orphan is still stale
        assert began == ["v1"]  # nothing written: not called


def test_a_row_that_now_parses_loses_its_raw_and_gets_the_stored_finish_reason(tmp_path):
    with open_campaign_state("rp2", root=tmp_path) as st:
        _store_answer(st, "k", "Verdict: No, the skyline differs.")
        row = _version_1_row("k")
        row.update(verdict=None, conf=None, correct=None, parse_ok=False, parse_reason="x", raw="old text")
        del row["finish_reason"]
        st.store.put_results(SCORED_TABLE, [("a", row)])
        assert refresh_stored_rows(st.store, SCORED_TABLE).changed == 1
        new = st.store.get_result(SCORED_TABLE, "a")
        assert new["verdict"] == "no" and new["correct"] is False
        assert new["raw"] == "old text"  # a raw the row holds is kept (it may be the only copy: rev26 #5)
        assert new["finish_reason"] == "stop"  # from the stored response, as the report's fill would


def test_the_only_copy_of_a_text_is_never_dropped(tmp_path):
    """rev26 #5: a stale failed row with raw and no stored response lost its raw once it parsed."""
    with open_campaign_state("rp5", root=tmp_path) as st:
        row = _version_1_row("k-none")
        del row["request_key"]
        text = 'Verdict: "yes" or "no"? Having looked again, verdict: no'
        row.update(verdict=None, conf=None, correct=None, parse_ok=False, parse_reason="x", raw=text)
        st.store.put_results(SCORED_TABLE, [("a", row)])
        assert refresh_stored_rows(st.store, SCORED_TABLE).reparsed == 1
        new = st.store.get_result(SCORED_TABLE, "a")
        assert (new["verdict"], new["raw"], new["parser_version"]) == ("no", text, VERDICT_PARSER_VERSION)


def test_a_damaged_stale_row_is_named_like_any_damaged_row(tmp_path):
    """rev26 #8: a stale row missing a field stopped the run with a bare "error: band"."""
    from geoagent.runtime.store import StoredRowError

    with open_campaign_state("rp6", root=tmp_path) as st:
        row = _version_1_row("k")
        del row["band"]
        st.store.put_results(SCORED_TABLE, [("a", row)])
        with pytest.raises(StoredRowError, match=r"table 'geoverify_scored', row 'a': no field band"):
            refresh_stored_rows(st.store, SCORED_TABLE)


def test_export_view_reparses_without_writing(tmp_path):
    with open_campaign_state("rp3", root=tmp_path) as st:
        _store_answer(st, "k", NO_WAY)
        st.store.put_results(SCORED_TABLE, [("a", _version_1_row("k"))])
        (key, row), = list(reparse_items(st.store.iter_results(SCORED_TABLE), st.store))
        assert key == "a" and row["parse_ok"] is False and row["parser_version"] == VERDICT_PARSER_VERSION
        assert st.store.get_result(SCORED_TABLE, "a")["verdict"] == "no"  # the store is not written
        # rev26 #4: the export fills raw in before this view; a row that now parses keeps it
        ok = {**_version_1_row("k"), "raw": "filled by the export"}
        ok.update(verdict=None, conf=None, correct=None, parse_ok=False)
        _store_answer(st, "k2", '{"verdict": "yes"}')
        ok["request_key"] = "k2"
        (_, seen), = list(reparse_items([("b", ok)], st.store))
        assert seen["verdict"] == "yes" and seen["raw"] == "filled by the export"
        # rev26 #10: a stale row without a text found says its version (1), not null
        orphan = _version_1_row("k-none")
        (_, kept), = list(reparse_items([("c", orphan)], st.store))
        assert kept["parser_version"] == 1 and kept["verdict"] == "no"


def test_the_scorer_parses_again_an_answer_queued_by_an_earlier_parser(tmp_path):
    import asyncio

    async def main_():
        with open_campaign_state("rp4", root=tmp_path) as st:
            _store_answer(st, "k", NO_WAY)
            ctx = StageContext(campaign="rp4", services={"store": st.store})
            v1 = {"model": "m", "request_key": "k", "trial": TRIAL, "finish_reason": "stop",
                  "parsed": parse_verdict('{"verdict": "no", "confidence": 0.4}').to_json()}
            v2 = {**v1, "parser_version": VERDICT_PARSER_VERSION}
            stage = GeoVerifyScorerStage()
            (_, old), = await stage.handle(Task("a", v1, 0, "l1"), ctx)
            (_, new), = await stage.handle(Task("b", v2, 0, "l2"), ctx)
            return old, new

    old, new = asyncio.run(main_())
    assert old["parse_ok"] is False and old["parser_version"] == VERDICT_PARSER_VERSION  # parsed again (stored text)
    assert new["verdict"] == "no" and new["parser_version"] == VERDICT_PARSER_VERSION  # a current one keeps its parse


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_a_run_and_an_export_read_stale_rows_by_the_current_parser(release_dir, tmp_path, monkeypatch, capsys):
    """End to end over the release replay: rows set back to a version-1 reading (verdict flipped, no
    parser_version) are exported by their current reading, then parsed again by the next run, which says so."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    rc, out, err = _cli(capsys, "run", str(REPLAY), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "parsed again" not in err
    db = tmp_path / "state" / "geocontext-replay" / "campaign.sqlite"
    with sqlite3.connect(db) as c:
        rows = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = ?", (SCORED_TABLE,))}
    assert rows and all(r["parser_version"] == VERDICT_PARSER_VERSION for r in rows.values())
    parsed = sorted(k for k, r in rows.items() if r["parse_ok"])[:3]
    assert len(parsed) == 3
    with sqlite3.connect(db) as c:  # as an earlier parser would have left them: another verdict, no version
        for k in parsed:
            old = dict(rows[k])
            del old["parser_version"]
            old["verdict"] = "no" if old["verdict"] == "yes" else "yes"
            old["correct"] = old["verdict"] == old["truth"]
            c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", (json.dumps(old), SCORED_TABLE, k))

    out_dir = tmp_path / "exported"
    rc, out, err = _cli(capsys, "export", str(REPLAY), "--out", str(out_dir))
    assert rc == 0, out[-2000:] + err[-2000:]
    df = pl.read_parquet(out_dir / f"{SCORED_TABLE}.parquet").filter(pl.col("key").is_in(parsed))
    assert df.height == 3 and df["parser_version"].to_list() == [VERDICT_PARSER_VERSION] * 3
    assert {r["key"]: r["verdict"] for r in df.iter_rows(named=True)} == {k: rows[k]["verdict"] for k in parsed}

    rc, out, err = _cli(capsys, "run", str(REPLAY), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert ("info: campaign geocontext-replay: 3 stored answers read by an earlier verdict parser (version 1) were "
            f"parsed again by version {VERDICT_PARSER_VERSION} from the stored text (no model call): 3 changed") in err, err[-3000:]
    with sqlite3.connect(db) as c:
        again = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = ?", (SCORED_TABLE,))}
    assert again == rows  # every row as the current parser wrote it at first

    rc, out, err = _cli(capsys, "run", str(REPLAY), "--no-live")
    assert rc == 0 and "parsed again" not in err, err[-2000:]
