"""Image audit (seed 000 Sec. 3.2, App. A.4): parsing, human verdicts, Cohen's kappa, disagreement tables."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from statsmodels.stats.inter_rater import cohens_kappa as sm_kappa

from geoagent.crawl.image_audit import (
    IMAGE_AUDIT_COLUMNS,
    agreement,
    audit_row,
    cohen_kappa,
    image_key,
    load_prompt,
    parse_image_audit,
    read_human_verdicts,
    usable_by_rule,
    write_image_audit_csv,
)
from geoagent.crawl.settings import CrawlConfigError, load_crawl_settings


def _release_rows(release_dir):
    with (release_dir / "image_audit_sample.csv").open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _sm(a, b):
    cats = sorted(set(a) | set(b), key=str)
    table = np.zeros((len(cats), len(cats)))
    for x, y in zip(a, b):
        table[cats.index(x), cats.index(y)] += 1
    return sm_kappa(table).kappa


def test_kappa_matches_statsmodels_on_random_labels():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(10, 200))
        a = list(rng.integers(0, 3, n))
        b = [x if rng.random() < 0.6 else int(rng.integers(0, 3)) for x in a]
        assert cohen_kappa(a, b) == pytest.approx(_sm(a, b), abs=1e-12)
    assert np.isnan(cohen_kappa(["k"] * 5, ["k"] * 5))
    with pytest.raises(ValueError):
        cohen_kappa([1], [1, 2])


def test_paper_counts_give_kappa_0185():
    """Sec. 3.2: 429 images, human keeps 347, agreement 343 (80.0 %), 65 human-excludes/model-accepts,
    21 model-rejects/human-keeps, kappa = 0.185."""
    rows = ([{"ai_usable": True, "human_verdict": "keep"}] * 326 + [{"ai_usable": False, "human_verdict": "exclude"}] * 17
            + [{"ai_usable": True, "human_verdict": "exclude"}] * 65 + [{"ai_usable": False, "human_verdict": "keep"}] * 21)
    ag = agreement(rows)
    assert (ag.n, ag.n_agree) == (429, 343)
    assert round(ag.agreement, 3) == 0.800
    assert round(ag.kappa, 3) == 0.185
    assert len(ag.human_excludes_model_accepts) == 65 and len(ag.model_rejects_human_keeps) == 21


def test_release_sample_agreement_and_tables(release_dir):
    rows = _release_rows(release_dir)
    assert tuple(rows[0].keys()) == IMAGE_AUDIT_COLUMNS
    ag = agreement(rows)
    a = [r["ai_usable"] == "True" for r in rows]
    h = [r["human_verdict"] == "keep" for r in rows]
    assert ag.n == len(rows) == 90
    assert ag.kappa == pytest.approx(_sm(a, h), abs=1e-12)
    assert len(ag.human_excludes_model_accepts) == sum(1 for x, y in zip(a, h) if x and not y) == 22
    assert len(ag.model_rejects_human_keeps) == sum(1 for x, y in zip(a, h) if y and not x) == 3
    # exclusion follows the human verdict: the released 'usable' column is human_verdict == keep
    assert all((r["usable"] == "True") == (r["human_verdict"] == "keep") for r in rows)


def test_release_model_fields_follow_the_usable_rule(release_dir):
    """The model's ``ai_usable`` equals App. A.4's rule over its own fields on every sampled row."""
    for r in _release_rows(release_dir):
        rule = usable_by_rule(r["ai_answer_overlay"] == "True", r["ai_scene_type"], int(float(r["ai_quality"])))
        assert rule == (r["ai_usable"] == "True"), r["image"]


def test_read_human_verdicts_from_release_and_errors(release_dir, tmp_path):
    hv = read_human_verdicts(release_dir / "image_audit_sample.csv")
    assert len(hv) == 90
    assert hv["1368496277351683"]["human_verdict"] == "exclude" and hv["1368496277351683"]["human_reason"] == "coordinate"
    bad = tmp_path / "h.csv"
    bad.write_text("image,human_verdict\nstreetview\\x\\1.jpg,keep\nstreetview\\x\\2.jpg,maybe\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"h.csv:3: human_verdict"):
        read_human_verdicts(bad)
    bad.write_text("image,verdict\n1,keep\n", encoding="utf-8")
    with pytest.raises(ValueError, match="missing column 'human_verdict'"):
        read_human_verdicts(bad)
    assert image_key("streetview\\site\\123.jpg") == "123" == image_key("images/site/123.jpg") == image_key("123")


@pytest.mark.parametrize(
    ("text", "parsed", "usable", "scene"),
    [
        ('{"answer_overlay": false, "overlay_text": "", "scene_type": "street", "through_glass": false, '
         '"tourist_infrastructure": false, "quality": 4, "usable": true, "why": "clear"}', True, True, "street"),
        ('Sure!\n```json\n{"answer_overlay": "no", "scene_type": "vehicle interior", "through_glass": true, '
         '"quality": "3", "why": "dashcam",}\n```', True, False, "vehicle_interior"),
        ('{"answer_overlay": true, "overlay_text": "N: 52.37650 E: 4.89758", "scene_type": "street", "quality": 4}', True, False, "street"),
        ('{"answer_overlay": false, "scene_type": "beach", "quality": 4}', False, None, None),
        ('{"answer_overlay": false, "scene_type": "street", "quality": 9}', False, None, None),
        ("I cannot audit this image.", False, None, None),
    ],
)
def test_parse_image_audit(text, parsed, usable, scene):
    a = parse_image_audit(text)
    assert a.parsed is parsed and a.raw == text
    if parsed:
        assert a.usable is usable and a.scene_type == scene and a.usable_rule is usable
    else:
        assert a.reason


def test_prompt_is_our_template_with_the_protocol_fields():
    p = load_prompt("crawl_image_audit.txt")
    for field in ("answer_overlay", "overlay_text", "scene_type", "through_glass", "tourist_infrastructure", "quality", "usable"):
        assert f'"{field}"' in p
    for scene in ("street", "indoor", "vehicle_interior", "closeup", "other"):
        assert f'"{scene}"' in p


def test_rows_and_csv(tmp_path):
    a = parse_image_audit('{"answer_overlay": false, "scene_type": "street", "quality": 5, "usable": true, "why": "ok"}')
    row = audit_row("images/s/1.jpg", "s", a, {"human_verdict": "exclude", "human_reason": "blank wall"})
    assert row["usable"] is False and row["ai_usable"] is True and row["ai_quality"] == 5.0
    row2 = audit_row("images/s/2.jpg", "s", a)
    assert row2["usable"] is True and row2["human_verdict"] == ""
    p = write_image_audit_csv([row, row2], tmp_path / "image_audit.csv")
    with p.open(encoding="utf-8") as f:
        back = list(csv.DictReader(f))
    assert tuple(back[0]) == IMAGE_AUDIT_COLUMNS and back[0]["human_reason"] == "blank wall"


def test_auditor_may_not_be_an_evaluated_model():
    base = {"contact": "mailto:x@example.org", "evaluated_models": ["gpt-4o", "qwen3-vl-8b"]}
    load_crawl_settings(base)
    with pytest.raises(CrawlConfigError, match="image_audit.model = 'gpt-4o' is also an evaluated model"):
        load_crawl_settings({**base, "image_audit": {"model": "gpt-4o"}})
    with pytest.raises(CrawlConfigError, match="referenceability.model"):
        load_crawl_settings({**base, "referenceability": {"model": "qwen3-vl-8b"}})
    with pytest.raises(CrawlConfigError, match="crawl.screener.l_min_km"):
        load_crawl_settings({**base, "screener": {"l_min_km": "low"}})


def test_agreement_files(tmp_path):
    from geoagent.crawl.image_audit import write_agreement

    rows = ([{"image": "a/1.jpg", "ai_usable": True, "human_verdict": "keep"}] * 5
            + [{"image": "a/2.jpg", "ai_usable": True, "human_verdict": "exclude", "human_reason": "blank wall"}] * 2
            + [{"image": "a/3.jpg", "ai_usable": False, "human_verdict": "keep", "ai_scene_type": "vehicle_interior"}])
    paths = write_agreement(agreement(rows), tmp_path)
    import json

    summ = json.loads(paths[0].read_text())
    assert (summ["n"], summ["n_agree"], summ["human_excludes_model_accepts"], summ["model_rejects_human_keeps"]) == (8, 5, 2, 1)
    assert summ["model_rejects_human_keeps_by_scene"] == {"vehicle_interior": 1}
    assert summ["kappa"] == pytest.approx(cohen_kappa([True] * 7 + [False], [True] * 5 + [False] * 2 + [True]))
    with paths[1].open(encoding="utf-8") as f:
        t = list(csv.DictReader(f))
    assert len(t) == 2 and t[0]["human_reason"] == "blank wall"


def test_braced_aside_before_the_audit_does_not_hide_it():
    """A JSON-looking aside ({"note": ...}) before the audit object made the answer unparsed."""
    from geoagent.crawl.image_audit import parse_image_audit

    text = ('Context {"note": "image is small"} - my audit:\n'
            '{"answer_overlay": false, "overlay_text": "", "scene_type": "street", "through_glass": false,'
            ' "tourist_infrastructure": true, "quality": 4, "usable": true, "why": "clear street"}')
    a = parse_image_audit(text)
    assert a.parsed and a.scene_type == "street" and a.quality == 4 and a.usable is True and a.raw == text
    only_aside = parse_image_audit('{"note": "cannot see the image"}')
    assert not only_aside.parsed and "answer_overlay" in only_aside.reason
