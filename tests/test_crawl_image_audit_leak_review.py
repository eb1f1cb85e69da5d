"""A human-kept image carrying the model's answer-leak flag reaches a review list (session 19; adversarial review
break19, finding 6).

Seed 000 Sec. 3.2: "exclusion runs off the human verdict, with the model's leakage flags reviewed case by case", and
answer leakage is "the one hard exclusion". An auditor answer that flags burned-in coordinates (``answer_overlay``
true) but, against App. A.4's rule, still says ``usable: true`` was read as the model accepting the image: with a
human "keep" the two "agreed", and the image was in neither disagreement table nor any other output. Now the
agreement reads the model's verdict under App. A.4's rule (``model_keeps``), and every human-kept image with a leak
flag is listed in ``image_audit_leak_flags_kept.csv``.
"""

from __future__ import annotations

import csv
import json

from geoagent.crawl.image_audit import AGREEMENT_FILES, agreement, audit_row, model_keeps, parse_image_audit, write_agreement

LEAK = ('{"answer_overlay": true, "overlay_text": "35.6581N 139.7017E 2021/07/16", "scene_type": "street", '
        '"through_glass": true, "tourist_infrastructure": false, "quality": 4, "usable": true, '
        '"why": "dashcam GPS stamp burned into the frame"}')
CLEAN = ('{"answer_overlay": false, "overlay_text": "", "scene_type": "street", "through_glass": false, '
         '"tourist_infrastructure": false, "quality": 4, "usable": true, "why": "clear street view"}')


def _row(image: str, raw: str, verdict: str) -> dict:
    return audit_row(image, "s1", parse_image_audit(raw), {"human_verdict": verdict, "human_reason": ""})


def test_leak_flag_on_a_human_kept_image_is_a_disagreement_and_listed_for_review(tmp_path):
    leak = _row("s1/123.jpg", LEAK, "keep")
    assert leak["usable"] is True and leak["ai_usable"] is True  # the human decides; the raw field is kept as answered
    assert model_keeps(leak) is False  # App. A.4: overlay -> not usable
    ag = agreement([leak, _row("s1/124.jpg", CLEAN, "keep")])
    assert (ag.n, ag.n_agree) == (2, 1)
    assert [r["image"] for r in ag.model_rejects_human_keeps] == ["s1/123.jpg"]
    assert not ag.human_excludes_model_accepts
    assert [r["image"] for r in ag.leak_flags_kept] == ["s1/123.jpg"]
    paths = write_agreement(ag, tmp_path)
    assert [p.name for p in paths] == list(AGREEMENT_FILES)
    assert json.loads(paths[0].read_text())["leak_flags_kept"] == 1
    with (tmp_path / "image_audit_leak_flags_kept.csv").open(encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [(r["image"], r["ai_answer_overlay"], r["ai_overlay_text"]) for r in rows] == [
        ("s1/123.jpg", "True", "35.6581N 139.7017E 2021/07/16")]


def test_a_human_excluded_leak_is_no_review_item():
    ag = agreement([_row("s1/123.jpg", LEAK, "exclude")])
    assert (ag.n, ag.n_agree) == (1, 1) and not ag.leak_flags_kept


def test_model_keeps_reads_csv_text_and_missing_fields_as_the_rule_does():
    assert model_keeps({"ai_usable": "True", "ai_answer_overlay": "False", "ai_scene_type": "street", "ai_quality": "4.0"})
    assert model_keeps({"ai_usable": "True", "ai_answer_overlay": "True"}) is False
    assert model_keeps({"ai_usable": "True", "ai_scene_type": "vehicle_interior"}) is False
    assert model_keeps({"ai_usable": "True", "ai_quality": "1.0"}) is False
    assert model_keeps({"ai_usable": True}) is True  # fields left empty do not count
    assert model_keeps({"ai_usable": "False"}) is False and model_keeps({"ai_usable": ""}) is None
