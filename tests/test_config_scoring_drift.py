"""Scoring-only config keys (``[geohint] echo_rule``, ``p_reference``, ``[geoverify] n_boot``, ...) changed
between runs: recorded in the manifest, the report re-scored with them, and no "changed since its last run"
call-drift warning (one info line instead); a change that shapes the calls still warns."""

from __future__ import annotations

import csv
from urllib.parse import urlsplit

import anyio

from geoagent import engine
from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.runtime.manifest import Manifest, config_changes, config_drift, read_manifest
from _model_harness import geoverify_replay_toml

register_all_sections()


def _gv(tmp_path, **geoverify) -> dict:
    return {
        "campaign": {"name": "gv-scoring", "kind": "geoverify"},
        "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
        "budget": {"cap_usd": 1.0},
        "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
        **({"geoverify": geoverify} if geoverify else {}),
    }


def test_config_changes_sorts_scoring_keys_from_call_drift(tmp_path):
    cfg = config_from_dict(_gv(tmp_path, n_boot=1000))
    assert config_changes(cfg).calls == [] and config_changes(cfg).scoring == {}  # no run yet
    Manifest(cfg).start_run()
    same = config_from_dict(_gv(tmp_path))  # the section's defaults written out or left out: no change
    assert config_changes(same).calls == [] and config_changes(same).scoring == {}
    boot = config_from_dict(_gv(tmp_path, n_boot=200, boot_seed=4))
    assert config_changes(boot).scoring == {"geoverify.boot_seed": (0, 4), "geoverify.n_boot": (1000, 200)}
    assert config_changes(boot).calls == [] and config_drift(boot) == []
    tau = config_from_dict(_gv(tmp_path, n_boot=200, tau_m=100.0))  # the claim prompt names tau: a call change
    assert config_changes(tau).calls == ["geoverify"] and config_drift(tau) == ["geoverify"]
    assert config_changes(tau).scoring == {"geoverify.n_boot": (1000, 200)}
    gh = {**_gv(tmp_path), "campaign": {"name": "gh-scoring", "kind": "geohint", "contact": "ops@example.org"}}
    Manifest(config_from_dict(gh)).start_run()  # no [geohint] table: the defaults
    rule = config_from_dict({**gh, "geohint": {"echo_rule": "release_first_word", "p_reference": "t", "n_flips": 50}})
    assert config_changes(rule).calls == []
    assert config_changes(rule).scoring == {"geohint.echo_rule": ("name", "release_first_word"),
                                            "geohint.n_flips": (10_000, 50), "geohint.p_reference": ("normal", "t")}
    tokens = config_from_dict({**gh, "geohint": {"echo_rule": "release_first_word", "max_output_tokens": 64}})
    assert config_changes(tokens).calls == ["geohint"]
    assert list(config_changes(tokens).scoring) == ["geohint.echo_rule"]


FAST = {"rate": 2000.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 3, "backoff_base_s": 0.01, "backoff_max_s": 0.1, "timeout_s": 10.0}


def _gh(wd_url: str, nm_url: str, **geohint) -> dict:
    return {
        "campaign": {"name": "gh-rule", "kind": "geohint", "seed": 1, "contact": "ops@example.org"},
        "budget": {"cap_usd": 0.0},
        "models": [{"name": "sim-a", "provider": "simulated", "model": "sim-a"}],
        "hosts": {urlsplit(wd_url).netloc: FAST, urlsplit(nm_url).netloc: FAST},
        "geohint": {
            "sites": ["paris_marais", "tokyo_shibuya", "amsterdam_church"], "conditions": ["forced"], "images": "synthetic",
            "n_flips": 50, "n_splits": 5,
            "geocoder": {"wikidata_url": wd_url + "/w/api.php", "nominatim_url": nm_url, "nominatim_max_requests": 100_000},
            **geohint,
        },
    }


def _echo_rates(report_dir) -> dict[str, float]:
    with (report_dir / "table1.csv").open(newline="") as fh:
        return {r["Model"]: float(r["Echo rate (fraction)"]) for r in csv.DictReader(fh)}


def test_echo_rule_change_rescores_the_report_without_a_drift_warning(release_dir, tmp_path, monkeypatch, capsys):
    from geoagent.cli import _warn_config_drift
    from geoagent.geohint.stages import SCORED_TABLE
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox import nominatim as nm_fake
    from geoagent.sandbox import wikidata as wd_fake
    from geoagent.sandbox.gazetteer import Gazetteer
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            first_cfg = config_from_dict(_gh(wd, nm))
            first = await engine.run_campaign(first_cfg, live=False, handle_signals=False, export=False)
            second_cfg = config_from_dict(_gh(wd, nm, echo_rule="release_first_word", p_reference="t"))
            capsys.readouterr()
            _warn_config_drift(second_cfg)  # what `run.py run` prints before it runs
            err = capsys.readouterr().err
            second = await engine.run_campaign(second_cfg, live=False, handle_signals=False, export=False)
            third_cfg = config_from_dict(_gh(wd, nm, echo_rule="release_first_word", p_reference="t", max_output_tokens=64))
            _warn_config_drift(third_cfg)
            await engine.run_campaign(third_cfg, live=False, handle_signals=False, export=False)  # decides after planning
            err_third = capsys.readouterr().err
            return first, second, err, err_third, first_cfg

    first, second, err, err_third, cfg = anyio.run(main)
    assert first.status == "complete" and second.status == "complete"
    assert "warning" not in err and "changed since its last run; work already planned" not in err
    assert ("info: campaign gh-rule: scoring setting changed since its last run (geohint.echo_rule 'name' -> "
            "'release_first_word', geohint.p_reference 'normal' -> 't'); the report is re-scored") in err
    # a call setting is still named, but every planned call is done: it affects none of them (an info line)
    assert ("info: campaign gh-rule: geohint changed since its last run (geohint.max_output_tokens: unset -> 64); "
            "every planned task is done") in err_third
    assert second.spend["calls"] == first.spend["calls"]  # re-scored from the stored answers, nothing called again
    runs = read_manifest(tmp_path / "state" / "gh-rule")["runs"]
    assert (runs[0]["echo_rule"], runs[0]["p_reference"]) == ("name", "normal")
    assert (runs[-1]["echo_rule"], runs[-1]["p_reference"]) == ("release_first_word", "t")
    report = tmp_path / "state" / "gh-rule" / "report"
    md = (report / "report.md").read_text(encoding="utf-8")
    assert "Echo rule release_first_word:" in md and "Slope p-values (Tables 6-7): t reference" in md
    # the report's echo rates are those of the new rule, counted here from the stored scored rows
    with open_campaign_state("gh-rule", root=cfg.state_root()) as st:
        rows = [r for _k, r in st.store.iter_results(SCORED_TABLE)]
    want: dict[str, list[bool]] = {}
    old: dict[str, list[bool]] = {}
    for r in rows:
        by_rule = (r.get("extra") or {}).get("echo_by_rule")
        if r["condition"] == "forced" and by_rule is not None and r.get("dist_km") is not None:
            want.setdefault(r["model"], []).append(bool(by_rule["release_first_word"]))
            old.setdefault(r["model"], []).append(bool(by_rule["name"]))
    got = _echo_rates(report)
    assert set(got) == set(want) == {"sim-a"}
    assert got["sim-a"] == sum(want["sim-a"]) / len(want["sim-a"])
    assert sum(want["sim-a"]) != sum(old["sim-a"])  # the two rules disagree on these answers


def test_run_command_prints_info_not_warning_for_a_bootstrap_change(tmp_path, release_dir, capsys):
    """`run.py run` twice on a replayed GeoVerify campaign, the second time with other bootstrap settings: no
    drift warning, one info line; the second report uses the new replicates (named under its table)."""
    from geoagent.cli import main
    from geoagent.report.geoverify import TABLE_MD

    def base(n_boot: int) -> str:
        return geoverify_replay_toml(tmp_path, "gv-boot", release_dir, geoverify=f"n_boot = {n_boot}\nboot_seed = 3")

    cfg = tmp_path / "gv.toml"
    cfg.write_text(base(0))
    assert main(["run", str(cfg), "--no-live"]) == 0
    capsys.readouterr()
    cfg.write_text(base(50))
    assert main(["run", str(cfg), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "warning" not in err
    assert "info: campaign gv-boot: scoring setting changed since its last run (geoverify.n_boot 0 -> 50)" in err
    md = (tmp_path / "state" / "gv-boot" / "report" / TABLE_MD).read_text(encoding="utf-8")
    assert "50 bootstrap resamples of sites (seed 3" in md
    assert read_manifest(tmp_path / "state" / "gv-boot")["config"]["geoverify"]["n_boot"] == 50


def test_geocoder_settings_are_not_call_drift(tmp_path, capsys):
    """`[geohint.geocoder]` never reaches a model call: a change there is listed apart (`geocoder`), not as
    call drift; a table written with its defaults equals an absent one; the contact alone says nothing."""
    gh = {**_gv(tmp_path), "campaign": {"name": "gh-geocoder", "kind": "geohint", "contact": "ops@example.org"}}
    Manifest(config_from_dict(gh)).start_run()  # no [geohint] table at all
    defaults = config_from_dict({**gh, "geohint": {"geocoder": {"language": "en", "anchor_radius_km": 25.0}}})
    assert config_changes(defaults).calls == [] and config_changes(defaults).geocoder == {}
    urls = config_from_dict({**gh, "geohint": {"geocoder": {"wikidata_url": "http://127.0.0.1:9/w/api.php",
                                                            "nominatim_url": "", "contact": "me@example.org"}}})
    ch = config_changes(urls)
    assert ch.calls == [] and ch.scoring == {}
    assert sorted(ch.geocoder) == ["nominatim_url", "wikidata_url"]  # contact: only the User-Agent
    assert ch.geocoder["nominatim_url"] == ("https://nominatim.openstreetmap.org", "")
    from geoagent.cli import _warn_config_drift

    capsys.readouterr()
    _warn_config_drift(urls)  # no queue yet: nothing was geocoded, so nothing mixes
    err = " ".join(capsys.readouterr().err.split())
    assert err == ("info: campaign gh-geocoder: geocoder settings changed since its last run ([geohint.geocoder] "
                   "nominatim_url, wikidata_url); no answer was geocoded yet, so every answer uses the new settings "
                   "(no model call is affected).")
    both = config_from_dict({**gh, "geohint": {"max_output_tokens": 64, "geocoder": {"language": "de"}}})
    assert config_changes(both).calls == ["geohint"] and list(config_changes(both).geocoder) == ["language"]


def test_geocoder_change_warns_about_geocoding_not_model_calls(release_dir, tmp_path, monkeypatch, capsys):
    """Walkthrough: adding `[geohint.geocoder]` URLs to a campaign that already ran printed the model-call
    drift warning ("work already planned keeps its original requests"). The geocoder shapes no call; what it
    changes is how answers not yet geocoded are located, and that is what the warning now says, with the
    count of answers already geocoded (those keep the old settings)."""
    from geoagent.cli import _warn_config_drift
    from geoagent.geohint.stages import SCORED_TABLE
    from geoagent.runtime.store import open_campaign_state
    from geoagent.sandbox import nominatim as nm_fake
    from geoagent.sandbox import wikidata as wd_fake
    from geoagent.sandbox.gazetteer import Gazetteer
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            cfg = config_from_dict(_gh(wd, nm))
            first = await engine.run_campaign(cfg, live=False, handle_signals=False, export=False)
            moved = _gh(wd, nm)
            moved["geohint"]["geocoder"] = {**moved["geohint"]["geocoder"], "nominatim_url": "", "language": "fr"}
            capsys.readouterr()
            _warn_config_drift(config_from_dict(moved))
            return first, capsys.readouterr().err, cfg

    first, err, cfg = anyio.run(main)
    assert first.status == "complete"
    with open_campaign_state("gh-rule", root=cfg.state_root()) as st:
        n_scored = sum(1 for _ in st.store.iter_results(SCORED_TABLE))  # one scored row per geocoded answer
    assert n_scored > 0
    assert "changed since its last run; work already planned" not in err  # no model-call drift
    assert (f"warning: campaign gh-rule: geocoder settings changed since its last run ([geohint.geocoder] "
            f"language, nominatim_url): answers geocoded from now on use the new settings; the {n_scored} "
            "already geocoded keep the old ones") in " ".join(err.split())
