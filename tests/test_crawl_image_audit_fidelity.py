"""Image audit (seed 000 Sec. 3.2, App. A.4): answer leakage is the one hard exclusion, whatever the model's
own ``usable`` field says."""

from __future__ import annotations

import orjson

from geoagent.crawl.export import usable_images
from geoagent.crawl.image_audit import audit_row, parse_image_audit

#: a model answer that contradicts App. A.4's definition of ``usable`` (overlay text naming a place, yet usable)
LEAKY = ('{"answer_overlay": true, "overlay_text": "N: 52.37650 E: 4.89758", "scene_type": "street", '
         '"through_glass": true, "tourist_infrastructure": false, "quality": 4, "usable": true, "why": "dashcam"}')
INDOOR = '{"answer_overlay": false, "scene_type": "indoor", "quality": 4, "usable": true}'
BLURRY = '{"answer_overlay": false, "scene_type": "street", "quality": 1, "usable": true}'
CLEAN = '{"answer_overlay": false, "scene_type": "street", "quality": 4, "usable": true}'


def test_without_a_human_verdict_the_rule_of_a4_decides_exclusion():
    """App. A.4: usable is false if answer_overlay is true, scene_type is not street, or quality <= 1. The
    ``ai_usable`` column keeps what the model said (the release's column); the ``usable`` column, which
    decides exclusion when no human verdict exists, never keeps an image the rule excludes. A human verdict
    still decides when there is one (Sec. 3.2: exclusion runs off the human verdict)."""
    for text in (LEAKY, INDOOR, BLURRY):
        row = audit_row("s/1.jpg", "s", parse_image_audit(text))
        assert row["ai_usable"] is True and row["usable"] is False, text
    assert audit_row("s/1.jpg", "s", parse_image_audit(CLEAN))["usable"] is True
    assert audit_row("s/1.jpg", "s", parse_image_audit(LEAKY), {"human_verdict": "keep"})["usable"] is True


def test_images_csv_leaves_out_a_leaking_image(tmp_path):
    state, root = tmp_path / "state", tmp_path / "images"
    (state / "image_selection").mkdir(parents=True)
    kept = [{"image_id": iid, "lat": 0.0, "lon": 0.0, "path": f"s/{iid}.jpg"} for iid in ("1", "2")]
    (state / "image_selection" / "s.json").write_bytes(orjson.dumps({"site": "s", "kept": kept}))
    for iid, text in (("1", LEAKY), ("2", CLEAN)):
        (state / "image_audit" / "s").mkdir(parents=True, exist_ok=True)
        (state / "image_audit" / "s" / f"{iid}.json").write_bytes(
            orjson.dumps({"image_id": iid, "site": "s", "audit": parse_image_audit(text).to_json()}))
    assert {r["image_id"]: r["usable"] for r in usable_images(state, root)} == {"1": False, "2": True}
