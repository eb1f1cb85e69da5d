"""Sampling a model by the site's selection method (geohint39 #4).

Seed 000 Sec. 6: "claude-opus-5 is sampled at one third the rate of the others on the automatic batch"; the
hand-picked sites ran at the full rate. A per-model rate could only sample every site at 1/3.
"""

from __future__ import annotations

from collections import Counter

from geoagent.data.importer import import_release
from geoagent.data.model import Image
from geoagent.geohint.conditions import conditions_from_config
from geoagent.geohint.plan import ModelSpec, models_from_config, plan_requests


def test_rates_by_selection_method_on_the_release(release_dir):
    rel = import_release(release_dir)
    methods = Counter(s.selection_method for s in rel.sites.values())
    assert methods["algorithm"] > 50 and methods["manual"] > 5, methods
    imgs = [Image(image_id=f"{i}{j}", site_id=s, lat=v.lat, lon=v.lon)
            for i, (s, v) in enumerate(sorted(rel.sites.items())) for j in range(3)]
    specs = models_from_config({"models": [{"name": "opus"}, {"name": "other"}],
                                "geohint": {"sample_rates": {"opus": {"algorithm": 1 / 3}}}})
    assert specs[0].rates_by_selection == (("algorithm", 1 / 3),) and specs[0].sample_rate == 1.0
    conds = conditions_from_config({"geohint": {"conditions": ["baseline", "forced"]}})
    reqs, summary = plan_requests(rel.sites, imgs, rel.ladders, specs, conds, seed=5)
    n = Counter((r.model, rel.sites[r.meta["site"]].selection_method) for r in reqs)
    # hand-picked sites: every unit of both models; algorithmic ones: about a third of opus's
    assert n[("opus", "manual")] == n[("other", "manual")] > 0
    share = n[("opus", "algorithm")] / n[("other", "algorithm")]
    assert 0.28 < share < 0.39, share
    assert {r.meta["sample_rate"] for r in reqs if r.model == "opus"
            and rel.sites[r.meta["site"]].selection_method == "algorithm"} == {1 / 3}
    assert {r.meta["sample_rate"] for r in reqs if r.model == "opus"
            and rel.sites[r.meta["site"]].selection_method == "manual"} == {1.0}
    assert summary.sample_rates_by_selection == {"opus": {"algorithm": 1 / 3}}


def test_a_default_key_sets_the_other_sites_rate():
    (spec,) = models_from_config({"models": [{"name": "m", "sampling_rate": 0.9}],
                                  "geohint": {"sample_rates": {"m": {"algorithm": 0.25, "default": 0.5}}}})
    assert (spec.rate_for("algorithm"), spec.rate_for("manual"), spec.rate_for(None)) == (0.25, 0.5, 0.5)
    (spec,) = models_from_config({"models": [{"name": "m", "sampling_rate": 0.9}],
                                  "geohint": {"sample_rates": {"m": {"algorithm": 0.25}}}})
    assert (spec.rate_for("algorithm"), spec.rate_for("manual")) == (0.25, 0.9)  # the model's own elsewhere
    assert ModelSpec("x").rate_for("algorithm") == 1.0


def test_a_selection_method_no_site_has_is_refused_at_plan(release_dir):
    """review39b #4: {"opus": {"automatic": 1/3}} sampled nothing at 1/3: opus answered every item at full cost."""
    import pytest

    rel = import_release(release_dir)
    specs = models_from_config({"models": [{"name": "opus"}],
                                "geohint": {"sample_rates": {"opus": {"automatic": 1 / 3}}}})
    conds = conditions_from_config({"geohint": {"conditions": ["baseline"]}})
    with pytest.raises(ValueError, match=r"selection_method 'automatic' \(the sites' values: 'algorithm', 'manual'\)"):
        plan_requests(rel.sites, [], rel.ladders, specs, conds)


def test_the_report_says_which_models_answer_a_share():
    """walk39 #8: the report never said why one model's n was a third of the others'."""
    from geoagent.config import config_from_dict
    from geoagent.geohint.campaign import sampling_note

    cfg = config_from_dict({"campaign": {"name": "s39", "kind": "geohint", "contact": "t@example.org"}, "budget": {"cap_usd": 1.0},
                            "models": [{"name": "opus", "provider": "simulated", "model": "o"},
                                       {"name": "half", "provider": "simulated", "model": "h", "sampling_rate": 0.5},
                                       {"name": "all", "provider": "simulated", "model": "a"}],
                            "geohint": {"sample_rates": {"opus": {"algorithm": 0.3333}}}})
    note = sampling_note(cfg)
    assert note.startswith("Sampling: opus 0.3333 at algorithm sites (1 elsewhere); half 0.5 of the units"), note
    assert "all" not in note.split("of the units")[0] and "not reweighted" in note
    cfg = config_from_dict({"campaign": {"name": "s39", "kind": "geohint", "contact": "t@example.org"}, "budget": {"cap_usd": 1.0},
                            "models": [{"name": "all", "provider": "simulated", "model": "a"}]})
    assert sampling_note(cfg) is None


def test_the_sampling_note_leaves_out_models_that_answer_everything_and_uniform_rates_reweight_nothing():
    """review39c #9."""
    from geoagent.config import config_from_dict
    from geoagent.geohint.campaign import sampling_note

    def note(models, rates):
        return sampling_note(config_from_dict({"campaign": {"name": "s39", "kind": "geohint", "contact": "t@example.org"},
                                               "budget": {"cap_usd": 1.0}, "models": models,
                                               "geohint": {"sample_rates": rates}}))

    assert note([{"name": "a", "provider": "simulated", "model": "a"}], {"a": {"algorithm": 1.0, "default": 1.0}}) is None
    uniform = note([{"name": "a", "provider": "simulated", "model": "a", "sampling_rate": 0.3333}], {})
    assert uniform.startswith("Sampling: a 0.3333 of the units") and "reweighted" not in uniform


def test_a_table_that_covers_every_planned_site_reports_only_the_rates_in_use(release_dir):
    """walk39 #9: ``{algorithm = 1/3, manual = 1}`` leaves the model's own rate (its ``default``) to no site, yet the
    plan line and the report named it as the model's rate; a table whose only planned method is at the full rate
    samples nothing."""
    from geoagent.config import config_from_dict
    from geoagent.geohint.campaign import GeoHintCampaign, sampling_note

    rel = import_release(release_dir)
    imgs = [Image(image_id=f"{i}0", site_id=s, lat=v.lat, lon=v.lon) for i, (s, v) in enumerate(sorted(rel.sites.items()))]
    models = [{"name": "opus", "provider": "simulated", "model": "o", "sampling_rate": 0.2}]
    rates = {"opus": {"algorithm": 1 / 4, "manual": 1.0}}
    specs = models_from_config({"models": models, "geohint": {"sample_rates": rates}})
    conds = conditions_from_config({"geohint": {"conditions": ["baseline"]}})
    _, summary = plan_requests(rel.sites, imgs, rel.ladders, specs, conds, seed=5)
    assert summary.selection_methods == ["algorithm", "manual"]
    camp = GeoHintCampaign()
    camp._summary = summary
    (line,) = camp._plan_lines()
    assert "sampling rates (opus by selection_method: algorithm 0.25, manual 1)" in line, line
    assert "opus 0.2" not in line
    cfg = config_from_dict({"campaign": {"name": "s40", "kind": "geohint", "contact": "t@example.org"},
                            "budget": {"cap_usd": 1.0}, "models": models, "geohint": {"sample_rates": rates}})
    note = sampling_note(cfg, summary.selection_methods)
    assert note.startswith("Sampling: opus 0.25 at algorithm sites, 1 at manual sites of the units"), note
    assert "elsewhere" not in note and "not reweighted" in note
    # without the plan, every written rate (the 0.2 default included) is named
    assert "(0.2 elsewhere)" in sampling_note(cfg)
    # only manual sites planned: the table samples nothing there, the note says nothing
    assert sampling_note(cfg, ["manual"]) is None
    # only algorithmic sites: one rate for every planned site, nothing to reweight
    only = sampling_note(cfg, ["algorithm"])
    assert only.startswith("Sampling: opus 0.25 of the units") and "reweighted" not in only, only
    # a site without a selection method falls under the default
    assert "(0.2 elsewhere)" in sampling_note(cfg, ["", "algorithm"])
