"""Each model's ``[[models]] max_output_tokens`` reaches its requests (and so its cost reservation) in the
GeoHint and GeoVerify plans, unless the task section overrides it for every model."""

from __future__ import annotations

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.workers.model_caller import build_request


def _cfg(kind: str, release_dir, section: dict) -> object:
    register_all_sections()
    return config_from_dict({
        "campaign": {"name": f"cap-{kind}", "kind": kind, "seed": 1, "contact": "mailto:t@example.org"},
        "paths": {"release_dir": str(release_dir)},
        "budget": {"cap_usd": 1.0},
        "models": [
            {"name": "short", "provider": "simulated", "model": "s", "max_output_tokens": 300},
            {"name": "long", "provider": "simulated", "model": "l", "max_output_tokens": 900},
        ],
        kind: section,
    })


def _caps(cfg, messages):
    out = {}
    for _, payload in messages:
        m, req = build_request(cfg, payload)
        out.setdefault(m.name, set()).add(req.max_output_tokens)
    return out


def _geohint_plan(cfg):
    import anyio

    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.runtime.stage import StageContext

    return anyio.run(lambda: GeoHintCampaign().plan(cfg, StageContext(cfg.name)))


def test_geohint_uses_each_models_cap_unless_overridden(release_dir, monkeypatch, tmp_path):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path))
    sec = {"sites": ["paris_marais"], "conditions": ["baseline", "forced"], "images": "synthetic"}
    cfg = _cfg("geohint", release_dir, sec)
    assert _caps(cfg, _geohint_plan(cfg)) == {"short": {300}, "long": {900}}
    cfg = _cfg("geohint", release_dir, {**sec, "max_output_tokens": 500})
    assert _caps(cfg, _geohint_plan(cfg)) == {"short": {500}, "long": {500}}


def test_geoverify_uses_each_models_cap_unless_overridden(release_dir, monkeypatch, tmp_path):
    from geoagent.geoverify.plan import plan_campaign

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path))
    cfg = _cfg("geoverify", release_dir, {})
    assert _caps(cfg, plan_campaign(cfg).messages) == {"short": {300}, "long": {900}}
    cfg = _cfg("geoverify", release_dir, {"max_output_tokens": 128})
    assert _caps(cfg, plan_campaign(cfg).messages) == {"short": {128}, "long": {128}}
