"""GeoHint answers read by an earlier answer parser are read again from their stored text (no model call), and
geocoded and scored again where the place read changed (fixreparse41).

Before: every scored row recorded ``extra.parser_version``, but a campaign whose answers an earlier
``ANSWER_PARSER_VERSION`` read kept that reading for good, so its report, its export and any later run mixed two
parsers with no sign of it. Now a run reads the stale rows again before its workers start (the same place: only the
parse fields and the version change; another place: geocoded through the campaign's geocoder stage and scored again)
and says how many; the export shows the current reading where the place is unchanged and warns of the rows it could
not bring up to date; the geocoder and the scorer read again an answer queued by an earlier parser
(:mod:`geoagent.geohint.reparse`; GeoVerify's counterpart: tests/test_geoverify_reparse.py).

Unit cases use a real campaign store (SQLite, in ``tmp_path``) and the local Wikidata and Nominatim fakes; the
end-to-end cases run a three-site campaign over the sandbox fakes through the CLI, one of them killed (SIGKILL) while
it geocodes the stale answers again (skipped without the release data).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import polars as pl
import pytest

from _geocode_env import geocode_env
from _model_harness import geohint_three_sites_toml
from geoagent.cli import main
from geoagent.geohint.geocode_stage import GeocodeStage
from geoagent.geohint.parse import ANSWER_PARSER_VERSION, parse_answer
from geoagent.geohint.reparse import (GEOCODER_ELSEWHERE, StaleView, refresh_stored_rows, reparse_items,
                                      row_parser_version)
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.stages import SCORED_TABLE, GeoHintScorerStage
from geoagent.providers.base import ModelResponse, Usage
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.runtime.store import StoredRowError, open_campaign_state

REPO = Path(__file__).resolve().parents[1]
MARAIS = ('{"city": "Paris", "area": "Le Marais", "building": "Palais des Thés", "confidence_area": 0.8, '
          '"confidence_building": 0.5}')
META = {"task": "geohint", "site": "paris_test", "condition": "forced", "schema": "forced", "ref_qid": "Q99000031",
        "ref_name": "Le Marais", "site_lat": 48.8595, "site_lon": 2.3610, "dist_km": 1.2}


def _store_answer(st, key: str, text: str) -> None:
    st.store.put(key, {"model": "m"}, ModelResponse(text=text, usage=Usage(100, 12), latency_s=0.1,
                                                    finish_reason="stop"), None)


def _row(key: str, request_key: str | None, *, area: str = "Le Marais", version: int | None = ANSWER_PARSER_VERSION,
         **extra) -> dict:
    """A scored row of MARAIS as a parser of ``version`` (None: none recorded) may have read it, geocoded at area
    level (a hit), not an echo."""
    row = GeoHintResult(key=key, site="paris_test", image_id="1", model="m", condition="forced", schema="forced",
                        ref_qid="Q99000031", ref_name="Le Marais", dist_km=1.2, city="Paris", area=area,
                        building="Palais des Thés", confidence_area=0.8, confidence_building=0.5,
                        resolved_level="area", lat=48.859, lon=2.362, error_km=0.2, hit=True, echo=False,
                        extra={"request_key": request_key, "parse_method": "json", "parse_error": None,
                               "finish_reason": "stop", "raw": None, **extra}).to_json()
    if version is not None:
        row["extra"]["parser_version"] = version
    return row


def test_refresh_reads_stale_rows_again_and_leaves_current_ones(tmp_path):
    with open_campaign_state("rp", root=tmp_path) as st:
        _store_answer(st, "k1", MARAIS)
        same = {**_row("a", "k1", version=None), "confidence_area": 0.1}  # read otherwise, the same place
        same["extra"]["parse_method"] = "regex"
        moved = _row("b", "k1", area="Bastille", version=4)  # an earlier parser read another place
        current = {**_row("c", "k1"), "confidence_area": 0.3}  # the current version: never read again
        orphan = _row("d", "k-gone", version=3)  # no stored text and no raw: kept
        raw_only = _row("e", None, version=2, raw=MARAIS)  # its text only in the row (the only copy): kept
        st.store.put_results(SCORED_TABLE, [("a", same), ("b", moved), ("c", current), ("d", orphan),
                                            ("e", raw_only)])

        got = asyncio.run(refresh_stored_rows(st.store, SCORED_TABLE, None))  # no geocoder in this process
        assert (got.stale, got.reparsed, got.changed, got.regeocoded, got.pending, got.no_text) == (4, 3, 2, 0, 1, 1)
        assert got.versions == (0, 2, 3, 4)
        assert got.line("rp") == (
            "info: campaign rp: 3 stored answers read by an earlier answer parser (version 2, 3, 4 or no version "
            f"recorded) were read again by version {ANSWER_PARSER_VERSION} from the stored text (no model call): 2 "
            "changed their reading, 0 of them naming another place geocoded and scored again; 1 naming another place "
            f"keeps the earlier reading for now ({GEOCODER_ELSEWHERE}); 1 stored answer read by an earlier answer "
            "parser has no stored text and keeps that reading (its extra.parser_version in the export says so).")
        # upgrade41 C: what geocodes them is a run that runs the geocoder, not a re-run of this --stages command
        assert "the next run of the campaign whose stages include geocoder" in GEOCODER_ELSEWHERE

        rows = dict(st.store.iter_results(SCORED_TABLE))
        a = rows["a"]
        assert (a["confidence_area"], a["extra"]["parse_method"], a["extra"]["parser_version"]) == (
            0.8, "json", ANSWER_PARSER_VERSION)
        # the geocoder gets the same place: its point, the hit and the echo verdict stand
        assert {k: a[k] for k in ("resolved_level", "lat", "lon", "error_km", "hit", "echo")} == {
            k: same[k] for k in ("resolved_level", "lat", "lon", "error_km", "hit", "echo")}
        assert rows["b"] == moved and rows["c"] == current and rows["d"] == orphan  # kept as they were
        e = rows["e"]
        assert e["extra"]["parser_version"] == ANSWER_PARSER_VERSION and e["extra"]["raw"] == MARAIS

        again = asyncio.run(refresh_stored_rows(st.store, SCORED_TABLE, None))  # the moved and the orphan are left
        assert (again.stale, again.reparsed, again.changed, again.pending, again.no_text) == (2, 1, 1, 1, 1)


def test_another_place_of_a_task_no_longer_planned_keeps_its_reading(tmp_path):
    """Its request (the site's coordinates, the reference point's names) is not known: no geocoding, said why."""
    from geoagent.geohint.reparse import NOT_PLANNED, Regeocoder

    with open_campaign_state("rp5", root=tmp_path) as st:
        _store_answer(st, "k1", MARAIS)
        moved = _row("b", "k1", area="Bastille", version=4)
        st.store.put_results(SCORED_TABLE, [("b", moved)])
        asked = []
        regeocoder = Regeocoder(StageContext("rp5", services={"store": st.store}),
                                lambda keys: asked.append(keys) or {}, echo_rule="name")
        got = asyncio.run(refresh_stored_rows(st.store, SCORED_TABLE, regeocoder))
        assert (got.changed, got.regeocoded, got.pending, asked) == (1, 0, 1, [{"b"}])
        assert f"1 naming another place keeps the earlier reading for now ({NOT_PLANNED})" in got.line("rp5")
        assert st.store.get_result(SCORED_TABLE, "b") == moved


def test_a_damaged_stale_row_is_named_like_any_damaged_row(tmp_path):
    with open_campaign_state("rp2", root=tmp_path) as st:
        row = _row("a", "k", version=4)
        del row["schema"]
        st.store.put_results(SCORED_TABLE, [("a", row)])
        with pytest.raises(StoredRowError, match=r"table 'geohint_scored', row 'a': no field schema"):
            asyncio.run(refresh_stored_rows(st.store, SCORED_TABLE, None))


def test_the_export_view_reads_again_without_writing_and_counts_what_it_keeps(tmp_path):
    with open_campaign_state("rp3", root=tmp_path) as st:
        _store_answer(st, "k1", MARAIS)
        same = {**_row("a", "k1", version=4), "confidence_area": 0.1}
        moved = _row("b", "k1", area="Bastille", version=4)
        orphan = _row("c", "k-gone", version=4)
        st.store.put_results(SCORED_TABLE, [("a", same), ("b", moved), ("c", orphan)])
        view = StaleView(st.store)
        seen = dict(view.items(st.store.iter_results(SCORED_TABLE)))
        assert seen["a"]["confidence_area"] == 0.8 and row_parser_version(seen["a"]) == ANSWER_PARSER_VERSION
        assert seen["b"] == moved and seen["c"] == orphan
        assert st.store.get_result(SCORED_TABLE, "a") == same  # the store is not written
        assert view.warning("rp3", SCORED_TABLE) == (
            "warning: campaign rp3: 2 rows of geohint_scored keep the reading of an earlier answer parser "
            f"(extra.parser_version below {ANSWER_PARSER_VERSION}): 1 names another place by version "
            f"{ANSWER_PARSER_VERSION} and is geocoded again by the next run of the campaign whose stages include "
            "geocoder (a plain `run.py run`; a --stages run without it never does; no model call); "
            "1 has no stored answer text")
        assert StaleView(st.store).warning("rp3", SCORED_TABLE) is None  # nothing read: nothing to say
        assert list(reparse_items([("c", _row("c", "k1"))], st.store)) == [("c", _row("c", "k1"))]


def test_the_geocoder_and_the_scorer_read_again_an_answer_queued_by_an_earlier_parser(tmp_path):
    text = MARAIS.replace('"Palais des Thés"', "null")  # no building: the geocoder looks the area up
    old = {k: v for k, v in parse_answer(text.replace("Le Marais", "Bastille")).to_json().items() if k != "raw"}
    answer = {"model": "m", "request_key": "k1", "image_id": "1", "meta": META, "parsed": old, "parser_version": 4,
              "finish_reason": "stop"}

    async def go():
        with open_campaign_state("rp4", root=tmp_path) as st:
            _store_answer(st, "k1", text)
            ctx = StageContext("rp4", services={"store": st.store})
            async with geocode_env() as env:
                (_, located), = await GeocodeStage(env.geocoder).handle(Task("a", answer, 0, "l1"), ctx)
            scorer = GeoHintScorerStage()
            same = {**located, "parser_version": 3,
                    "parsed": {**located["parsed"], "confidence_area": 0.1, "method": "regex"}}
            moved = {**located, "parser_version": 3, "parsed": {**located["parsed"], "area": "Bastille"}}
            (_, row_same), = await scorer.handle(Task("b", same, 0, "l2"), ctx)
            (_, row_moved), = await scorer.handle(Task("c", moved, 0, "l3"), ctx)
            return located, row_same, row_moved

    located, row_same, row_moved = asyncio.run(go())
    # geocoded as the current parser reads the stored text, not as the queued parse said
    assert located["parsed"]["area"] == "Le Marais" and located["parser_version"] == ANSWER_PARSER_VERSION
    queries = {t["query"] for t in located["geocode_trace"] if t["level"] == "area"}
    assert "Le Marais" in queries and "Bastille" not in queries, located["geocode_trace"]
    assert (located["resolved_level"], located["qid"]) == ("area", "Q99000031")
    # located under an earlier parser: the same place takes the current parse; another keeps its version
    assert (row_same["confidence_area"], row_same["extra"]["parse_method"], row_same["extra"]["parser_version"]) == (
        0.8, "json", ANSWER_PARSER_VERSION)
    assert (row_moved["area"], row_moved["extra"]["parser_version"]) == ("Bastille", 3)


# -- end to end ---------------------------------------------------------------------------------------------------

def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, got.out, got.err


def _stored(db: Path) -> tuple[dict[str, dict], int, float]:
    """The scored rows by key, the number of stored model answers and the spend in USD."""
    with sqlite3.connect(db) as c:
        rows = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = ?", (SCORED_TABLE,))}
        answers = c.execute("SELECT count(*) FROM responses").fetchone()[0]
        spend = c.execute("SELECT coalesce(sum(cost_usd), 0) FROM responses").fetchone()[0]
    return rows, answers, spend


def _set_back(db: Path, rows: dict[str, dict], moved: list[str], same: list[str]) -> None:
    """Rows as an earlier parser would have left them: ``moved`` read another area (version 4; its geocoded point
    was that place's), ``same`` the same place with another confidence and method (no version recorded)."""
    with sqlite3.connect(db) as c:
        for k in moved:
            old = json.loads(json.dumps(rows[k]))
            old["area"], old["resolved_level"], old["hit"], old["error_km"] = "Somewhere Else", "none", False, None
            old["extra"]["parser_version"] = 4
            c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", (json.dumps(old), SCORED_TABLE, k))
        for k in same:
            old = json.loads(json.dumps(rows[k]))
            old["confidence_area"] = 0.01
            old["extra"]["parse_method"] = "regex"
            del old["extra"]["parser_version"]
            c.execute("UPDATE results SET row = ? WHERE tbl = ? AND key = ?", (json.dumps(old), SCORED_TABLE, k))


def _first_run(tmp_path, monkeypatch, capsys, release_dir, name: str) -> tuple[Path, Path, dict, int, float]:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    cfg = tmp_path / "gh.toml"
    cfg.write_text(geohint_three_sites_toml(name, geohint="n_boot = 0"), encoding="utf-8")
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "read again" not in err
    db = tmp_path / "state" / name / "campaign.sqlite"
    rows, answers, spend = _stored(db)
    assert len(rows) == 81 and all(r["extra"]["parser_version"] == ANSWER_PARSER_VERSION for r in rows.values())
    return cfg, db, rows, answers, spend


def test_a_run_reads_stale_rows_again_and_geocodes_another_place_again(release_dir, tmp_path, monkeypatch, capsys):
    cfg, db, rows, answers, spend = _first_run(tmp_path, monkeypatch, capsys, release_dir, "gh-reparse")
    keys = sorted(k for k, r in rows.items() if r["area"])
    moved, same = keys[10:14], keys[20:23]
    _set_back(db, rows, moved, same)

    out_dir = tmp_path / "exported"
    rc, out, err = _cli(capsys, "export", str(cfg), "--out", str(out_dir))
    assert rc == 0, out[-2000:] + err[-2000:]
    assert ("warning: campaign gh-reparse: 4 rows of geohint_scored keep the reading of an earlier answer parser "
            f"(extra.parser_version below {ANSWER_PARSER_VERSION}): 4 name another place") in err, err[-2000:]
    df = pl.read_parquet(out_dir / f"{SCORED_TABLE}.parquet")
    got = {r["key"]: r for r in df.iter_rows(named=True)}
    for k in same:  # the current reading, not written to the store
        assert (got[k]["confidence_area"], got[k]["extra.parser_version"]) == (rows[k]["confidence_area"],
                                                                               ANSWER_PARSER_VERSION)
    for k in moved:  # the earlier reading, and its version says so
        assert (got[k]["area"], got[k]["extra.parser_version"]) == ("Somewhere Else", 4)
    assert _stored(db)[0][same[0]]["confidence_area"] == 0.01

    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert ("info: campaign gh-reparse: 7 stored answers read by an earlier answer parser (version 4 or no version "
            f"recorded) were read again by version {ANSWER_PARSER_VERSION} from the stored text (no model call): 7 "
            "changed their reading, 4 of them naming another place geocoded and scored again.") in err, err[-3000:]
    again, answers_again, spend_again = _stored(db)
    assert (answers_again, spend_again) == (answers, spend)  # no model call, no spend
    assert again == rows  # every row as the current parser and the geocoder wrote it at first

    rc, out, err = _cli(capsys, "export", str(cfg), "--out", str(out_dir))
    assert rc == 0 and "earlier answer parser" not in err, err[-2000:]
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")  # nothing more to do: said once
    assert rc == 0 and "read again" not in err, out[-2000:] + err[-2000:]


def test_a_run_killed_while_it_geocodes_again_loses_nothing(release_dir, tmp_path, monkeypatch, capsys):
    cfg, db, rows, answers, spend = _first_run(tmp_path, monkeypatch, capsys, release_dir, "gh-reparse-kill")
    moved = sorted(k for k, r in rows.items() if r["area"])
    _set_back(db, rows, moved, [])
    for f in db.parent.glob("geocode_cache.sqlite*"):  # every place looked up again: a refresh that takes a while
        f.unlink()
    # a slower Wikidata for the run killed: the kill lands while its refresh geocodes (limits change no answer)
    text = cfg.read_text(encoding="utf-8")
    cfg.write_text(text.replace("[[models]]", '[hosts."wikidata.sandbox.invalid"]\nrate = 3\n\n[[models]]', 1),
                   encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(REPO), "GEOAGENT_RELEASE": str(release_dir)}
    proc = subprocess.Popen([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live"], cwd=tmp_path,
                            env=env, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "killed.err", "w"))

    def n_current() -> int:
        try:
            rs = _stored(db)[0]
        except sqlite3.Error:
            return 0
        return sum(rs[k]["extra"].get("parser_version") == ANSWER_PARSER_VERSION for k in moved)

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and n_current() < 3:
        time.sleep(0.01)
    assert proc.poll() is None, "the run ended before the kill"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    half, answers_half, _ = _stored(db)
    done = [k for k in moved if half[k]["extra"].get("parser_version") == ANSWER_PARSER_VERSION]
    assert 3 <= len(done) < len(moved), len(done)
    for k in moved:  # each row either its earlier reading, whole, or the new one, whole
        assert half[k] == rows[k] or (half[k]["area"], half[k]["extra"]["parser_version"]) == ("Somewhere Else", 4)
    assert answers_half == answers

    cfg.write_text(text, encoding="utf-8")
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")  # the next run finishes the refresh
    assert rc == 0, out[-2000:] + err[-2000:]
    left = len(moved) - len(done)
    assert (f"{left} stored answers read by an earlier answer parser (version 4) were read again by version "
            f"{ANSWER_PARSER_VERSION} from the stored text (no model call): {left} changed their reading, {left} of "
            "them naming another place geocoded and scored again.") in err, err[-3000:]
    again, answers_again, spend_again = _stored(db)
    assert (answers_again, spend_again) == (answers, spend)
    assert again == rows
