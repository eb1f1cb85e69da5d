"""Stored image audits are read again when the audit parser's rules change (session 37).

Left over from session 36: the image-audit parser learned that the prompt's example answer is no audit and that an
audit cut off by ``max_output_tokens`` is read as far as it goes, but audits stored by an earlier run kept the
earlier reading. An answer that repeated the example (usable) and then gave its own audit, cut off, reporting a
dashcam overlay naming the street, stayed ``parsed True, keeps_image True`` in a resumed crawl, and the image stayed
in ``images.csv`` (answer leakage is the one hard exclusion, Sec. 3.2). Now each stored record says which parser
version read it (:data:`geoagent.crawl.image_audit.AUDIT_PARSER_VERSION`), and a run reads an earlier version's
records again from their kept answer text (:func:`geoagent.crawl.campaign.reread_stored_audits`), keeping the
earlier reading beside the new one, with a decision per changed image and one warning. The shipped offline crawl
(local fakes) through the CLI entry.
"""

from __future__ import annotations

import json
from pathlib import Path

from geoagent import constants as C
from geoagent.cli import main
from geoagent.crawl import image_audit as ia
from geoagent.crawl.export import read_crawl_csv

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
EXAMPLE = ('{"answer_overlay": false, "overlay_text": "", "scene_type": "street", "through_glass": false, '
           '"tourist_infrastructure": false, "quality": 4, "usable": true, '
           '"why": "sharp street view with shopfronts and a tram stop"}')
OWN_LEAK_CUT = ('{"answer_overlay": true, "overlay_text": "GPS 45.0702N 7.6869E Via Roma", "scene_type": "street", '
                '"through_glass": true, "tourist_infrastructure": false, "quality": 3, "usable": false, '
                '"why": "dashcam overlay names the str')


def _crawl(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    p = tmp_path / "crawl.toml"
    p.write_text(CONFIG.read_text(encoding="utf-8")
                 + f'\n[paths]\nstate = "{tmp_path / "state"}"\nqueues = "{tmp_path / "queues"}"\n')
    assert main(["crawl", str(p), "--no-live"]) == 0
    return p, tmp_path / "state" / "crawl-sandbox"


def test_a_resumed_crawl_reads_audits_of_an_earlier_parser_again(tmp_path, monkeypatch, capsys):
    cfg, state = _crawl(tmp_path, monkeypatch)
    records = sorted((state / "image_audit").glob("*/*.json"))
    assert len(records) >= 2
    fresh = [json.loads(r.read_text()) for r in records]
    assert all(r["parser_version"] == ia.AUDIT_PARSER_VERSION for r in fresh)  # the stage records its version
    leaked, plain = records[0], records[1]
    rec = json.loads(leaked.read_text())
    iid = rec["image_id"]
    images = read_crawl_csv(state / "images.csv")
    assert dict(zip(images["image_id"], images["usable"])).get(iid) is not None
    # as version 1 stored it: the example read as the audit (usable), the answer's own leaking audit cut off
    old_audit = {**json.loads(EXAMPLE), "parsed": True, "reason": "",
                 "raw": "Format example: " + EXAMPLE + "\nMy audit:\n" + OWN_LEAK_CUT}
    rec["audit"] = old_audit
    rec.pop("parser_version")
    leaked.write_text(json.dumps(rec, indent=2))
    other = json.loads(plain.read_text())
    other.pop("parser_version")  # read the same way by both versions: only stamped
    plain.write_text(json.dumps(other, indent=2))
    capsys.readouterr()

    assert main(["crawl", str(cfg), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "1 stored image audit of 1 site read otherwise by the current audit rules" in err
    assert "1 of them now keep or drop the image otherwise" in err
    now = json.loads(leaked.read_text())
    assert now["parser_version"] == ia.AUDIT_PARSER_VERSION
    assert not now["audit"]["parsed"] and "cut off" in now["audit"]["reason"]
    assert now["audit"]["raw"] == old_audit["raw"]  # the verbatim answer is kept
    assert now["audit_before"] == old_audit and now["parser_version_before"] == 1
    stamped = json.loads(plain.read_text())
    assert stamped["parser_version"] == ia.AUDIT_PARSER_VERSION and "audit_before" not in stamped
    assert stamped["audit"] == other["audit"]
    # the unparsed audit keeps no image without a human verdict: out of images.csv and the image-audit table
    images = read_crawl_csv(state / "images.csv")
    assert iid not in set(images["image_id"])
    audit_rows = read_crawl_csv(state / "image_audit.csv")
    row = audit_rows.filter(audit_rows["image"].str.contains(iid, literal=True))
    assert row.height == 1 and row["ai_usable"][0] is None
    decisions = [json.loads(line) for line in (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()]
    reread = [d for d in decisions if d.get("event") == "image_audit_reread"]
    assert len(reread) == 1
    assert reread[0]["image_id"] == iid and reread[0]["keeps_image_before"] is True
    assert reread[0]["keeps_image"] is None and reread[0]["parser_version_before"] == 1

    # a second run finds nothing left to read again, and says nothing of it
    assert main(["crawl", str(cfg), "--no-live"]) == 0
    assert "read otherwise by the current audit rules" not in capsys.readouterr().err
    decisions = (state / C.CRAWL_DECISIONS_FILE).read_text().splitlines()
    assert sum('"image_audit_reread"' in line for line in decisions) == 1


def test_record_versions_read_defensively():
    assert ia.audit_parser_version({}) == 1
    assert ia.audit_parser_version({"parser_version": True}) == 1
    assert ia.audit_parser_version({"parser_version": "2"}) == 1
    assert ia.audit_parser_version({"parser_version": 0}) == 1
    assert ia.audit_parser_version({"parser_version": 2}) == 2
