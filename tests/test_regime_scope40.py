"""A model added to or removed from a GeoHint campaign moves the regime split (walk39 #11).

The regime of a site is the pooled no-context hit rate of every planned model's answers (seed 000 Sec. 6.1.2), so
a plan-scope change that asks no stored task differently ("nothing mixes") still moves every model's legible /
illegible tables. The run says so; other kinds and other plan-scope keys get no such line.
"""

from __future__ import annotations

import anyio

from geoagent.runtime.drift import decide, regime_scope_lines


def test_the_line_names_the_keys_that_change_the_pooled_baseline():
    (line,) = regime_scope_lines("gh", {"models[1]": (None, "b"), "geohint.conditions": (["forced"], ["v1"])}, "geohint")
    assert "(models[1])" in line and "legible and illegible regime for every model" in line
    assert regime_scope_lines("gh", ["geohint.sample_rates.opus.algorithm"], "geohint")
    assert regime_scope_lines("gh", ["geohint.conditions"], "geohint") == []  # the baseline is not among them
    assert regime_scope_lines("gv", ["models[1]"], "geoverify") == []
    lines = decide("gh", ["models"], {"models[1]": ("b", None)}, tasks_before=10, done_before=10, added=0, left_before=0, keys_text="",
                   kind="geohint").lines
    assert "nothing mixes" in lines[0] and "regime split pools" in lines[1], lines


def test_a_model_added_to_a_finished_campaign_says_the_regimes_move(release_dir, tmp_path, monkeypatch, capsys):
    from test_config_scoring_drift import _gh

    from geoagent import engine
    from geoagent.cli import _warn_config_drift
    from geoagent.config import config_from_dict
    from geoagent.sandbox import nominatim as nm_fake
    from geoagent.sandbox import wikidata as wd_fake
    from geoagent.sandbox.gazetteer import Gazetteer
    from geoagent.sandbox.server import serve

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))

    def cfg(wd, nm, models):
        d = _gh(wd, nm, conditions=["baseline", "forced"])
        d["models"] = [{"name": m, "provider": "simulated", "model": m} for m in models]
        return config_from_dict(d)

    async def main():
        gaz = Gazetteer.from_release(release_dir)
        async with serve(wd_fake.make_app(gaz)) as wd, serve(nm_fake.make_app(gaz, min_interval_s=0.0)) as nm:
            first = await engine.run_campaign(cfg(wd, nm, ["sim-a"]), live=False, handle_signals=False, export=False)
            capsys.readouterr()
            two = cfg(wd, nm, ["sim-a", "sim-b"])
            _warn_config_drift(two, simulate=True)  # the dry run says it before any spend
            dry = capsys.readouterr().err
            second = await engine.run_campaign(two, live=False, handle_signals=False, export=False)
            return first, second, dry, capsys.readouterr().err

    first, second, dry, err = anyio.run(main)
    assert first.status == second.status == "complete"
    for text in (dry, err):
        assert "nothing mixes" in text, text
        assert "info: campaign gh-rule: the report's regime split pools the no-context answers of every planned " \
               "model (seed 000 Sec. 6.1.2), so this change (models[1])" in text, text
