"""A config change between runs is judged after planning: a change that adds requests next to answers made
under other request settings warns that results would mix, and the summary and manifest count the answers
per request settings; a change that reaches no stored answer is an info line and the manifest keeps the config
the answers were made with; limits and pacing keys are never called a change that mixes results.

Walkthrough (GeoHint): images_per_site 2 -> 3 and max_output_tokens 256 -> 200 on a completed campaign printed
"no planned work is left to run ..., so the change affects none of it", then made 114 new calls under 200 next
to 228 answers under 256, and neither report nor manifest said so. Real runs of the engine (simulated provider)."""

from __future__ import annotations

import anyio

from _model_harness import generic_campaign, run_cli
from geoagent.runtime.manifest import read_manifest


def _models(tokens: int, extra: str = "") -> str:
    return (f'\n[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim-1"\nmax_output_tokens = {tokens}\n'
            f'concurrency = 4\nrate = {{ requests = 500, period_s = 1.0 }}\n{extra}')


def _run(path, capsys) -> tuple[int, str, str]:
    """``run.py run PATH --no-live``: exit code, stdout (the summary), stderr (the warnings)."""
    return run_cli(path, capsys)


def test_a_change_that_adds_requests_warns_and_the_mix_is_counted(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="mix", n=6, models=_models(512))
    assert _run(p, capsys)[0] == 0
    p.write_text(p.read_text().replace("n_requests = 6", "n_requests = 9")
                 .replace("max_output_tokens = 512", "max_output_tokens = 256"))
    rc, summary, err = _run(p, capsys)
    assert rc == 0 and "calls 9" in summary
    assert "affects none of it" not in err
    assert ("warning: campaign mix: generic, models changed since its last run (generic.n_requests: 6 -> 9; "
            "models[0].max_output_tokens: 512 -> 256); this run planned 3 new tasks that use the new settings "
            "next to 6 done under the old ones, so results would mix both versions") in err
    assert "results mix configurations" in summary
    assert "m: 6 answers with max_output_tokens 512; 3 with max_output_tokens 256" in summary
    man = read_manifest(tmp_path / "state" / "mix")
    assert man["config"]["models"][0]["max_output_tokens"] == 256
    assert man["config_mix"][-1]["changed"]["models[0].max_output_tokens"] == [512, 256]
    assert man["config_mix"][-1]["tasks_added"] == 3
    groups = {g["params"]["max_output_tokens"]: g["answers"] for g in man["answers_by_request_params"]["m"]}
    assert groups == {512: 6, 256: 3}


def test_a_change_that_reaches_no_stored_answer_keeps_the_recorded_config(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="noeffect", n=6, models=_models(512))
    assert _run(p, capsys)[0] == 0
    p.write_text(p.read_text().replace("max_output_tokens = 512", "max_output_tokens = 256"))
    rc, summary, err = _run(p, capsys)
    assert rc == 0 and "calls 6" in summary  # nothing new: the stored answers keep 512
    assert "would mix" not in err and "warning" not in err
    assert ("info: campaign noeffect: models changed since its last run (models[0].max_output_tokens: 512 -> 256); "
            "every planned task is done (6) and this config plans none anew, so the change affects none of the "
            "stored results") in err
    man = read_manifest(tmp_path / "state" / "noeffect")
    # the manifest must not claim a setting the answers were not made with
    assert man["config"]["models"][0]["max_output_tokens"] == 512
    assert man["config_not_applied"]["config"]["models"][0]["max_output_tokens"] == 256
    assert "answers_by_request_params" not in man and "results mix" not in summary
    # the next run with the same file says it again: still not applied
    assert "affects none of the stored results" in _run(p, capsys)[2]


def test_limits_and_pacing_changes_are_not_drift(tmp_path, capsys):
    closed_host = '\n[hosts."unused.example.org"]\nrate = 5.0\n'
    p = generic_campaign(tmp_path, name="pace", n=6, models=_models(512))
    assert _run(p, capsys)[0] == 0
    p.write_text(p.read_text().replace("requests = 500", "requests = 100").replace("concurrency = 4", "concurrency = 2")
                 .replace("n_requests = 6", "n_requests = 8") + closed_host)
    rc, summary, err = _run(p, capsys)
    assert rc == 0
    # the added requests are the only change to the work (they are asked like the others): no rate, concurrency or [hosts] in its list
    assert "rate" not in err.split("info: campaign pace: limits or pacing")[0]
    assert "hosts changed" not in err and "models changed" not in err
    # the one warning is the load's own about the [hosts] entry nothing calls (not a drift warning)
    warnings = [ln for ln in err.splitlines() if "warning" in ln]
    assert len(warnings) == 1 and 'hosts."unused.example.org": no model or endpoint' in warnings[0], warnings
    assert "would mix" not in err
    assert ("info: campaign pace: generic changed since its last run (generic.n_requests: 6 -> 8); this changes "
            "which tasks are planned, not how any is asked: this run planned 2 new tasks, asked like the 6 done, so "
            "nothing mixes") in err
    assert ("info: campaign pace: limits or pacing changed since its last run (hosts.unused.example.org: unset -> "
            in err and "models[0].concurrency: 4 -> 2" in err and "models[0].rate.requests: 500.0 -> 100.0" in err)
    assert "results mix" not in summary  # same request settings throughout


def test_geohint_more_images_and_fewer_tokens_warns_and_report_md_counts_the_mix(release_dir, tmp_path, monkeypatch,
                                                                                   capsys):
    """The walkthrough's GeoHint case: images_per_site up and max_output_tokens down on a completed campaign."""
    from test_config_scoring_drift import _gh

    from geoagent import engine
    from geoagent.config import config_from_dict
    from geoagent.sandbox import nominatim as nm_fake
    from geoagent.sandbox import wikidata as wd_fake
    from geoagent.sandbox.gazetteer import Gazetteer
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    def cfg(wd, nm, per_site, tokens):
        d = _gh(wd, nm, images_per_site=per_site)
        d["models"][0]["max_output_tokens"] = tokens
        return config_from_dict(d)

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            first = await engine.run_campaign(cfg(wd, nm, 1, 256), live=False, handle_signals=False, export=False)
            capsys.readouterr()
            second = await engine.run_campaign(cfg(wd, nm, 2, 200), live=False, handle_signals=False, export=False)
            return first, second, capsys.readouterr().err

    first, second, err = anyio.run(main)
    n1, n2 = first.spend["calls"], second.spend["calls"]
    assert first.status == second.status == "complete" and n2 > n1 > 0
    assert "affects none of it" not in err
    assert (f"this run planned {n2 - n1} new tasks that use the new settings next to {n1} done under the old ones, "
            "so results would mix both versions") in err
    assert "geohint.images_per_site: 1 -> 2" in err and "models[0].max_output_tokens: 256 -> 200" in err
    md = (tmp_path / "state" / "gh-rule" / "report" / "report.md").read_text(encoding="utf-8")
    assert "results mix configurations" in md
    assert f"- sim-a: {n1} answers with max_output_tokens 256; {n2 - n1} with max_output_tokens 200" in md
    man = read_manifest(tmp_path / "state" / "gh-rule")
    assert {g["params"]["max_output_tokens"]: g["answers"] for g in man["answers_by_request_params"]["sim-a"]} == {
        256: n1, 200: n2 - n1}
    assert man["config_mix"][-1]["changed"]["geohint.images_per_site"] == [1, 2]
