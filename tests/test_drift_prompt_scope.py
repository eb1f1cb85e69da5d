"""A change to a packaged prompt template is drift only for campaigns that use it.

Walkthrough: editing ``geohint_warn.txt`` made every campaign's re-run say ``prompt:geohint_warn.txt changed
since its last run`` (a GeoVerify campaign, a crawl, a generic campaign), since the manifest hashed every
``*.txt`` under ``geoagent/prompts`` and compared them all. Now the manifest records the templates the campaign's
kind uses (its conditions' GeoHint templates, the GeoVerify claim template, the crawl auditor's three; a
configured template file in place of the packaged one), and only those are compared; a manifest written by the
earlier code (every template hashed) reads without a false report."""

from __future__ import annotations

import hashlib
import shutil

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.runtime.manifest import PROMPTS_DIR, Manifest, config_changes, prompt_hashes, read_manifest

register_all_sections()


def _cfg(tmp_path, kind: str, **section):
    d = {
        "campaign": {"name": f"c-{kind}", "kind": kind, "contact": "ops@example.org"},
        "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
    }
    if kind == "crawl":
        d["crawl"] = {"contact": "ops@example.org", **section}
    elif section:
        d[kind] = section
    return config_from_dict(d)


def _prompts(tmp_path):
    p = tmp_path / "prompts"
    shutil.copytree(PROMPTS_DIR, p)
    return p


def _edit(path):
    path.write_text(path.read_text(encoding="utf-8") + "\nEdited.\n", encoding="utf-8")


def test_a_geohint_template_edit_is_drift_only_for_geohint(tmp_path):
    prompts = _prompts(tmp_path)
    cfgs = {k: _cfg(tmp_path, k) for k in ("geohint", "geoverify", "crawl", "generic")}
    for cfg in cfgs.values():
        Manifest(cfg, prompts_dir=prompts).start_run()
    _edit(prompts / "geohint_warn.txt")
    got = {k: config_changes(cfg, prompts_dir=prompts).calls for k, cfg in cfgs.items()}
    assert got == {"geohint": ["prompt:geohint_warn.txt"], "geoverify": [], "crawl": [], "generic": []}
    # a GeoHint campaign whose conditions use no warning does not use the template either
    gh = _cfg(tmp_path / "b", "geohint", conditions=["baseline", "forced"])
    Manifest(gh, prompts_dir=prompts).start_run()
    _edit(prompts / "geohint_warn.txt")
    _edit(prompts / "geoverify_claim.txt")
    assert config_changes(gh, prompts_dir=prompts).calls == []
    _edit(prompts / "geohint_forced.txt")
    assert config_changes(gh, prompts_dir=prompts).calls == ["prompt:geohint_forced.txt"]
    assert config_changes(cfgs["geoverify"], prompts_dir=prompts).calls == ["prompt:geoverify_claim.txt"]
    # the manifest records the hashes of the templates the campaign uses, nothing else
    man = read_manifest(cfgs["crawl"].state_dir())
    assert set(man["prompt_templates_sha256"]) == {"crawl_image_audit.txt", "crawl_image_audit_reask.txt",
                                                   "crawl_referenceability.txt", "crawl_referenceability_reask.txt",
                                                   "crawl_sensitive.txt", "crawl_sensitive_reask.txt"}
    assert read_manifest(cfgs["generic"].state_dir())["prompt_templates_sha256"] == {}


def test_a_configured_template_file_is_hashed_and_compared(tmp_path):
    own = tmp_path / "my_claim.txt"
    own.write_text("Is this photo within {tau_m} m of {candidate}? Answer JSON.\n", encoding="utf-8")
    prompts = _prompts(tmp_path)
    cfg = _cfg(tmp_path, "geoverify", prompt_template=str(own))
    Manifest(cfg, prompts_dir=prompts).start_run()
    man = read_manifest(cfg.state_dir())
    assert man["prompt_templates_sha256"] == {str(own): hashlib.sha256(own.read_bytes()).hexdigest()}
    _edit(prompts / "geoverify_claim.txt")  # not the one this campaign sends
    assert config_changes(cfg, prompts_dir=prompts).calls == []
    _edit(own)
    assert config_changes(cfg, prompts_dir=prompts).calls == [f"prompt:{own}"]
    # a GeoHint prompts_dir: its files are the ones hashed
    mine = tmp_path / "gh_prompts"
    shutil.copytree(PROMPTS_DIR, mine)
    gh = _cfg(tmp_path, "geohint", prompts_dir=str(mine), conditions=["baseline"])
    Manifest(gh, prompts_dir=prompts).start_run()
    assert set(read_manifest(gh.state_dir())["prompt_templates_sha256"]) == {f"{mine}/geohint_forced.txt"}
    _edit(prompts / "geohint_forced.txt")
    assert config_changes(gh, prompts_dir=prompts).calls == []
    _edit(mine / "geohint_forced.txt")
    assert config_changes(gh, prompts_dir=prompts).calls == [f"prompt:{mine}/geohint_forced.txt"]


def test_a_manifest_of_the_earlier_code_reads_without_a_false_report(tmp_path):
    """A manifest written before (every packaged template hashed): a GeoVerify re-run after a GeoHint template
    edit reports nothing, and an edit of the claim template it uses is still reported."""
    import orjson

    prompts = _prompts(tmp_path)
    cfg = _cfg(tmp_path, "geoverify")
    Manifest(cfg, prompts_dir=prompts).start_run()
    path = cfg.state_dir() / "manifest.json"
    data = orjson.loads(path.read_bytes())
    data["prompt_templates_sha256"] = prompt_hashes(prompts)  # as the earlier code wrote it
    path.write_bytes(orjson.dumps(data))
    assert config_changes(cfg, prompts_dir=prompts).calls == []
    _edit(prompts / "geohint_chain.txt")
    assert config_changes(cfg, prompts_dir=prompts).calls == []
    _edit(prompts / "geoverify_claim.txt")
    assert config_changes(cfg, prompts_dir=prompts).calls == ["prompt:geoverify_claim.txt"]
    # a manifest without the entry at all (hand-trimmed) reads as no change
    data.pop("prompt_templates_sha256")
    path.write_bytes(orjson.dumps(data))
    assert config_changes(cfg, prompts_dir=prompts).calls == []
