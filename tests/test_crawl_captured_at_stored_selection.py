"""Selections stored before the ``captured_at`` rule keep no 1970 capture times on resume.

Leftover of session 14: the rule (:func:`geoagent.clients.mapillary.read_captured_at`, session 14) reads a
``captured_at`` plausible only as seconds as seconds, but a crawl resumed over selection records stored before it
(``image_selection/<site>.json`` and the shared ``<site>/images-<key>.json``: the selection key did not change) kept
their values: an image whose server sent 1626443291 (2021-07-16 in seconds) stayed at 1626443291 ms, exported as
1970-01-19. What a researcher expects: the times the rule gives, with a record of the change. Such a value is
recognisable exactly: before the rule the client kept the sent value as it came (0 to now, as milliseconds), and since
the rule no stored value lies before 1990-01-01 (:data:`geoagent.clients.mapillary.EARLIEST_CAPTURE_MS`), so a stored
value before 1990 without a ``captured_at_note`` is the value sent, and the rule is applied to it now
(:func:`geoagent.crawl.fetcher.correct_stored_captured_at`): every reader corrects it, the resumed run rewrites the
campaign's own records with the note, logs one ``mapillary_captured_at`` decision per site (``stored: true``) and
says so in one warning line. The shipped offline crawl (local fakes, started in-process) through the CLI entry; the
stored records are put in the form the client before the rule wrote (the sent value in ``captured_at_ms``, no note).
"""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl

from geoagent import constants as C
from geoagent.cli import main
from geoagent.crawl.export import read_crawl_csv

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
SECONDS = 1_626_443_291  # 2021-07-16T13:48:11Z, sent in seconds


def _as_before_the_rule(path: Path, sent: dict[str, int]) -> None:
    """Rewrite the selection record at ``path`` as the client before the rule stored it: the value sent for the
    images of ``sent`` (image id -> sent value) in ``captured_at_ms``, as it came."""
    rec = json.loads(path.read_text())
    for part in ("kept", "rejected"):
        for m in rec[part]:
            if m["image_id"] in sent:
                m["captured_at_ms"] = sent[m["image_id"]]
                m.pop("captured_at_note", None)
    path.write_text(json.dumps(rec, indent=2))


def test_a_resumed_crawl_corrects_capture_times_stored_before_the_rule(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    p = tmp_path / "crawl.toml"
    p.write_text(CONFIG.read_text(encoding="utf-8")
                 + f'\n[paths]\nstate = "{tmp_path / "state"}"\nqueues = "{tmp_path / "queues"}"\n')
    assert main(["crawl", str(p), "--no-live"]) == 0
    state = tmp_path / "state" / "crawl-sandbox"
    own = sorted((state / "image_selection").glob("*.json"))
    assert len(own) >= 2
    site = own[0].stem
    rec = json.loads(own[0].read_text())
    kept = [k["image_id"] for k in rec["kept"]]
    assert len(kept) >= 2
    # one image sent in seconds, one a placeholder 0 (no capture time either way); the other sites as they are
    sent = {kept[0]: SECONDS, kept[1]: 0}
    _as_before_the_rule(own[0], sent)
    shared = tmp_path / "state" / "images" / site / f"images-{rec['selection_key']}.json"
    assert shared.is_file()
    _as_before_the_rule(shared, sent)
    before_other = {p.name: p.read_bytes() for p in own[1:]}
    capsys.readouterr()

    assert main(["crawl", str(p), "--no-live"]) == 0
    err = capsys.readouterr().err
    images = read_crawl_csv(state / "images.csv")
    got = dict(zip(images["image_id"], images["captured_at"]))
    # before: 1970-01-19T19:47:23Z and 1970-01-01T00:00:00Z, carried forward from the stored records
    assert got[kept[0]] == "2021-07-16T13:48:11Z"
    assert got[kept[1]] is None
    assert not any(str(v).startswith("1970") for v in got.values())
    exported = pl.read_parquet(state / C.EXPORT_DIR / "images.parquet")
    assert not exported.filter(pl.col("captured_at").str.starts_with("1970")).height
    # the campaign's own record is rewritten with each decision beside the value; the other sites' are untouched
    fixed = {m["image_id"]: m for m in json.loads(own[0].read_text())["kept"]}
    assert fixed[kept[0]]["captured_at_ms"] == SECONDS * 1000 and "seconds" in fixed[kept[0]]["captured_at_note"]
    assert fixed[kept[1]]["captured_at_ms"] is None and "unknown" in fixed[kept[1]]["captured_at_note"]
    assert all("before this rule" in fixed[i]["captured_at_note"] for i in sent)
    assert {p.name: p.read_bytes() for p in own[1:]} == before_other
    # one decision for the site, naming each image, and one warning line
    logged = [json.loads(ln) for ln in (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
    recs = [r for r in logged if r.get("event") == "mapillary_captured_at" and r.get("stored")]
    assert len(recs) == 1 and recs[0]["site"] == site
    assert recs[0]["converted_from_seconds"] == [kept[0]] and recs[0]["unknown"] == [kept[1]]
    warned = [ln for ln in err.splitlines() if "captured_at" in ln]
    assert len(warned) == 1 and warned[0].startswith("warning: ") and "2 image" in warned[0], err
    # a campaign reusing the shared record reads the corrected times too
    from geoagent.crawl.fetcher import load_selection

    again = load_selection(shared, rec["selection_key"])
    assert {m["image_id"]: m["captured_at_ms"] for m in again["kept"]}[kept[0]] == SECONDS * 1000

    # a third run finds nothing left to correct: no second decision, no warning
    assert main(["crawl", str(p), "--no-live"]) == 0
    assert "captured_at" not in capsys.readouterr().err
    logged = [json.loads(ln) for ln in (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
    assert len([r for r in logged if r.get("event") == "mapillary_captured_at" and r.get("stored")]) == 1


def test_a_campaign_reusing_a_shared_selection_stored_before_the_rule_takes_the_corrected_times(
        tmp_path, monkeypatch, capsys):
    """Another campaign with the same ``[crawl.fetcher]`` settings reuses a site's shared record
    (``<site>/images-<key>.json``, no request): stored before the rule, it becomes the new campaign's own record
    corrected, with the decision logged in the new campaign's folder."""
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = (CONFIG.read_text(encoding="utf-8")
            + f'\n[paths]\nstate = "{tmp_path / "state"}"\nqueues = "{tmp_path / "queues"}"\n')
    first = tmp_path / "first.toml"
    first.write_text(text)
    assert main(["crawl", str(first), "--no-live"]) == 0
    rec_path = sorted((tmp_path / "state" / "crawl-sandbox" / "image_selection").glob("*.json"))[0]
    site, rec = rec_path.stem, json.loads(rec_path.read_text())
    iid = rec["kept"][0]["image_id"]
    shared = tmp_path / "state" / "images" / site / f"images-{rec['selection_key']}.json"
    _as_before_the_rule(shared, {iid: SECONDS})
    second = tmp_path / "second.toml"
    assert text.count('name = "crawl-sandbox"') == 1
    second.write_text(text.replace('name = "crawl-sandbox"', 'name = "crawl-sandbox-2"'))
    capsys.readouterr()

    assert main(["crawl", str(second), "--no-live"]) == 0
    state = tmp_path / "state" / "crawl-sandbox-2"
    own = {m["image_id"]: m for m in json.loads((state / "image_selection" / f"{site}.json").read_text())["kept"]}
    # before: 1626443291 (1970-01-19) copied into the new campaign's record and images.csv
    assert own[iid]["captured_at_ms"] == SECONDS * 1000 and "before this rule" in own[iid]["captured_at_note"]
    images = read_crawl_csv(state / "images.csv")
    assert dict(zip(images["image_id"], images["captured_at"]))[iid] == "2021-07-16T13:48:11Z"
    logged = [json.loads(ln) for ln in (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
    recs = [r for r in logged if r.get("event") == "mapillary_captured_at" and r.get("stored")]
    assert len(recs) == 1 and recs[0]["site"] == site and recs[0]["converted_from_seconds"] == [iid]
