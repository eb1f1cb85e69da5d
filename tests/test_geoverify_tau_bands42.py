"""GeoVerify with a claim tolerance tau below 150 m (fixverify42).

#1 The decoy bands were fixed at 0.15-0.3, ..., 3-6 km whatever ``[geoverify] tau_m``, so with tau = 100 m a
candidate 120 m away was in no band: never drawn, never probed. Seed 000 Sec. 5.2: "The nearest band starts
immediately above tau on purpose". Now the nearest band starts at tau (``0.1-0.3km``), and the label flows through
the builder, the importer, the planner's checks, ``sdt.score`` (delta_1 names it) and the report. A build campaign
planned before (trial builder 3) is told its trials change (trial builder 4; on Redis refused without
``--accept-config-change``); one at the paper's tau records 3 and hears nothing.
#2 The report's terms name the tau used, in metres, where they define H and F.
#3 The read-out "no data" said "no (or too few) parsed answers" both where no main-arm trial had an answer and
where the trials were answered but no answer parsed; now its reason says which (and names a missing side).
"""

from __future__ import annotations

import csv
import math

import orjson
import polars as pl
import pytest

from geoagent.data.importer import import_release
from geoagent.data.model import (DECOY_BAND_LABELS, Image, ReferencePoint, VerifyTrial, decoy_band_labels,
                                 decoy_bands_km, is_decoy_band_label, tier_of, verify_band)
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.plan import check_bands
from geoagent.geoverify.trials import TRIAL_BUILDER_VERSION, build_trials, trial_builder_version
from geoagent.report.geoverify import render_markdown, render_terminal
from geoagent.scoring import sdt
from test_queue_contract import redis_url  # noqa: F401 - the fixture

TAU_100 = 0.1  # km


# --- #1 band edges -------------------------------------------------------------------------------------------


def test_band_edges_start_at_tau_below_150_m():
    # hand-computed: the paper's five bands, the nearest starting at tau where tau < 0.15 km
    assert decoy_bands_km(0.15) == ((0.15, 0.3), (0.3, 0.7), (0.7, 1.5), (1.5, 3.0), (3.0, 6.0))
    assert decoy_bands_km(0.1) == ((0.1, 0.3), (0.3, 0.7), (0.7, 1.5), (1.5, 3.0), (3.0, 6.0))
    assert decoy_band_labels(0.1) == ("0.1-0.3km", "0.3-0.7km", "0.7-1.5km", "1.5-3.0km", "3.0-6.0km")
    assert decoy_band_labels(0.12) == ("0.12-0.3km", *DECOY_BAND_LABELS[1:])
    assert decoy_band_labels(0.0999)[0] == "0.0999-0.3km"  # 99.9 m: no float noise in the label
    assert decoy_band_labels(0.001)[0] == "0.001-0.3km"  # tau_m's floor, 1 m
    # at the paper's tau the labels are the paper's; above it the nearest band starts at tau too (fixverify43 #1,
    # tests/test_geoverify_tau_above_150_43.py)
    assert decoy_band_labels(0.15) == DECOY_BAND_LABELS
    assert decoy_band_labels(0.2) == ("0.2-0.3km", *DECOY_BAND_LABELS[1:])


@pytest.mark.parametrize(("d_km", "tau_km", "band"), [
    (0.0999, 0.1, "signal"),
    (0.1, 0.1, "0.1-0.3km"),      # at tau: the nearest decoy band
    (0.12, 0.1, "0.1-0.3km"),     # before: in no band (None), never drawn
    (0.1499, 0.1, "0.1-0.3km"),
    (0.2999, 0.1, "0.1-0.3km"),
    (0.3, 0.1, "0.3-0.7km"),
    (5.999, 0.1, "3.0-6.0km"),
    (6.0, 0.1, None),
    (0.1499, 0.15, "signal"),     # the paper's tau: as before
    (0.15, 0.15, "0.15-0.3km"),
    (0.1999, 0.2, "signal"),      # tau 200 m: signal below it, the nearest band from it on (fixverify43 #1)
    (0.2, 0.2, "0.2-0.3km"),
])
def test_verify_band_at_tau(d_km, tau_km, band):
    assert verify_band(d_km, tau_km) == band


def _offset(lat: float, lon: float, d_km: float) -> tuple[float, float]:
    """The point ``d_km`` due north of (lat, lon) on the project's sphere (R = 6371.0088 km)."""
    return lat + math.degrees(d_km / 6371.0088), lon


def _pool(site: str, lat: float, lon: float, spec: list[tuple[str, float]]) -> list[ReferencePoint]:
    return [ReferencePoint(qid=None, name_en=name, lat=_offset(lat, lon, d)[0], lon=lon, referenceability=3,
                           tier=tier_of(3), site_id=site) for name, d in spec]


def test_builder_draws_decoys_between_tau_and_150_m():
    img = Image("101", "site_a", 48.0, 2.0, continent="EU")
    pool = {"site_a": _pool("site_a", 48.0, 2.0, [("Sig", 0.05), ("Near", 0.12), ("Mid", 0.2), ("Far", 0.5)])}
    trials, rep = build_trials([img], pool, seed=1, n_per_band=None, n_control=0, tau_km=TAU_100)
    got = {t.cand: (t.band, t.truth) for t in trials}
    assert got == {"Sig": ("signal", "yes"), "Near": ("0.1-0.3km", "no"), "Mid": ("0.1-0.3km", "no"),
                   "Far": ("0.3-0.7km", "no")}
    assert rep.bands == decoy_band_labels(TAU_100)
    assert rep.per_band() == {"signal": 1, "0.1-0.3km": 2, "0.3-0.7km": 1, "0.7-1.5km": 0, "1.5-3.0km": 0,
                              "3.0-6.0km": 0}
    # at the paper's tau the 120 m candidate is signal, and the bands are the paper's
    trials, rep = build_trials([img], pool, seed=1, n_per_band=None, n_control=0)
    assert {t.cand: t.band for t in trials} == {"Sig": "signal", "Near": "signal", "Mid": "0.15-0.3km",
                                                "Far": "0.3-0.7km"}
    assert tuple(rep.per_band())[1:] == DECOY_BAND_LABELS


# --- #1 importer and planner ---------------------------------------------------------------------------------

HEADER = ["image_id", "site", "path", "img_lat", "img_lon", "cand", "cand_lat", "cand_lon", "fam", "d_km", "band",
          "truth", "arm", "cont"]


def _release(tmp_path, bands: list[str]):
    root = tmp_path / "rel"
    root.mkdir()
    (root / "sites.csv").write_text("site,city,lat,lon\ns1,Paris,48.88,2.34\n", encoding="utf-8")
    with open(root / "verify_trials.csv", "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for i, band in enumerate(bands):
            w.writerow([f"{100 + i}", "s1", f"s1/{100 + i}.jpg", "48.88", "2.34", f"Place {i}", "48.881", "2.341", "3",
                        "0.12", band, "no", "main", "EU"])
    return root


def test_importer_takes_a_nearest_band_from_tau_and_refuses_other_spellings(tmp_path):
    assert is_decoy_band_label("0.1-0.3km") and is_decoy_band_label("0.15-0.3km")
    assert is_decoy_band_label("0.2-0.3km")  # a tau above 150 m (fixverify43 #1)
    for bad in ("0.10-0.3km", "0.20-0.3km", "0.3-0.3km", "0.1-0.7km", "0.0005-0.3km", "signal", ""):
        assert not is_decoy_band_label(bad), bad
    rel = import_release(_release(tmp_path, ["0.1-0.3km", "0.20-0.3km"]))
    assert [t.band for t in rel.trials] == ["0.1-0.3km"]
    (issue,) = rel.report.issues
    assert "verify_trials.csv:3:" in str(issue) and "got '0.20-0.3km'" in str(issue)


def _trial(band: str) -> VerifyTrial:
    return VerifyTrial(image_id="1", site_id="s1", arm="main", cand=f"c {band}", img_lat=0.0, img_lon=0.0,
                       cand_lat=None, cand_lon=None, referenceability=None, d_km=0.2, band=band, truth="no")


def test_planner_refuses_a_table_built_at_a_smaller_tau():
    # a table built at 100 m under the paper's tau: its nearest band's decoys would enter no band's d'
    with pytest.raises(ValueError, match=r"t\.csv: 1 main-arm decoy trial\(s\) in a band outside those scored at "
                                         r"\[geoverify\] tau_m = 150 m .* e\.g\. band '0\.1-0\.3km'"):
        check_bands([_trial("0.1-0.3km"), _trial("0.3-0.7km")], 0.15, source="t.csv")
    # the paper's table under tau 100 m: its nearest band lies inside 0.1-0.3 km and is scored there
    check_bands([_trial("0.15-0.3km"), _trial("0.3-0.7km")], TAU_100)
    check_bands([_trial("0.1-0.3km")], TAU_100)


# --- #1 scoring: labels through sdt.score, delta_1 --------------------------------------------------------------


def _cells(rows: list[tuple[str, str, str, int, int, int]]) -> pl.DataFrame:
    """(arm, band, truth, n_yes, n_no, n_fail) rows of model "m" at one site each (sites s0, s1, ...)."""
    return pl.DataFrame([dict(model="m", site=f"s{i}", arm=arm, band=band, truth=truth, n_yes=y, n_no=n, n_fail=f)
                         for i, (arm, band, truth, y, n, f) in enumerate(rows)])


def test_score_uses_the_bands_of_tau_and_counts_old_nearest_labels_in_the_new_band():
    # H = 40/50; nearest band at 100 m: 5/50 yes (d' = z(40.5/51) - z(5.5/51) > 1): delta_1 names it.
    # 10 of its decoys were stored as 0.15-0.3km (a campaign planned under trial builder 3): they lie inside
    # 0.1-0.3 km and count there
    cells = _cells([("main", "signal", "yes", 40, 10, 0), ("main", "0.1-0.3km", "no", 4, 36, 0),
                    ("main", "0.15-0.3km", "no", 1, 9, 0), ("main", "3.0-6.0km", "no", 1, 49, 0)])
    s = sdt.score(cells, tau_km=TAU_100, pooled=False)["m"]
    assert [b.band for b in s.bands] == list(decoy_band_labels(TAU_100))
    near = s.band("0.1-0.3km")
    assert (near.n, near.n_yes) == (50, 5)
    assert s.delta_1 == "0.1-0.3km" and s.tau_km == TAU_100
    # the paper's tau keeps the paper's bands (the 0.1-0.3km cell lies in none: overall F only, as before)
    paper = sdt.score(cells, pooled=False)["m"]
    assert [b.band for b in paper.bands] == list(DECOY_BAND_LABELS) and paper.band("0.15-0.3km").n == 10
    agg = GeoVerifyAggregator()
    agg.cells = cells
    assert agg.scores(tau_km=TAU_100)["m"].band("0.1-0.3km").n == 50


# --- #2 the terms name tau ---------------------------------------------------------------------------------------


def test_terms_state_the_tau_used_where_they_define_hit_and_false_alarm():
    cells = _cells([("main", "signal", "yes", 40, 10, 0), ("main", "0.1-0.3km", "no", 5, 45, 0)])
    md = render_markdown(sdt.score(cells, tau_km=TAU_100))
    terms = md[md.index("Terms:"):]
    assert ("- H (hit rate): share of signal trials (the named place lies less than tau = 100 m from the photo, "
            "Eq. 1; the paper's tau is 150 m) answered yes.") in terms
    assert ("- F (false-alarm rate): share of decoy trials (the named place lies tau = 100 m or farther from the "
            "photo, in the given distance band; the nearest band, 0.1–0.3 km, starts at tau) answered yes") in terms
    assert "tau = 100 m" in render_terminal(sdt.score(cells, tau_km=TAU_100)).split("Terms:")[1]
    paper = render_markdown(sdt.score(cells))
    assert ("- H (hit rate): share of signal trials (the named place lies less than tau = 150 m from the photo, "
            "Eq. 1) answered yes.") in paper
    assert "tau = 150 m or farther from the photo, in the given distance band) answered yes" in paper
    assert "the paper's tau" not in paper


# --- #3 read-out: no answers vs answers none of which parsed ---------------------------------------------------


def test_readout_tells_no_answers_from_answers_that_did_not_parse():
    unparsed = _cells([("main", "signal", "yes", 0, 0, 3), ("main", "0.15-0.3km", "no", 0, 0, 2)])
    s = sdt.score(unparsed, pooled=False)["m"]
    assert s.readout.verdict == sdt.READOUT_NO_DATA
    (why,) = s.readout.reasons[:1]
    assert why == ("nearest- and farthest-band d' undefined: the main arm's trials were answered (5 answers) but "
                   "none parsed: every answer is a parse failure (no verdict), so there is no H or F")
    assert f"- m: no data ({why};" in render_markdown(sdt.score(unparsed, pooled=False))
    none = sdt.score(sdt.empty_cells(), models=["m"], pooled=False)["m"]
    assert none.readout.verdict == sdt.READOUT_NO_DATA
    assert none.readout.reasons[0] == ("nearest- and farthest-band d' undefined: no main-arm trial has an answer "
                                       "yet (none answered, or every call failed: missing work, not an answer)")
    # parsed decoys, but no parsed signal answer: the missing side is named
    no_signal = sdt.score(_cells([("main", "signal", "yes", 0, 0, 2), ("main", "0.15-0.3km", "no", 1, 4, 0)]),
                          pooled=False)["m"]
    assert no_signal.readout.reasons[0] == ("nearest- and farthest-band d' undefined: no parsed answer of a signal "
                                            "trial (no H); 2 main-arm answers did not parse")
    no_decoy = sdt.score(_cells([("main", "signal", "yes", 3, 1, 0), ("main", "0.7-1.5km", "no", 1, 4, 0)]),
                         pooled=False)["m"]
    assert no_decoy.readout.reasons[0] == ("nearest- and farthest-band d' undefined: no parsed answer of a decoy "
                                           "trial in the nearest or the farthest band")


# --- #1 campaigns planned with the old band edges ------------------------------------------------------------------


def test_trial_builder_version_changes_only_below_150_m():
    from geoagent.geoverify.trials import TRIAL_BUILDER_CHANGES

    assert TRIAL_BUILDER_VERSION == 4
    # every version has its row, the newest last (the module refuses to import otherwise: fixrev42 #6)
    assert [v for v, _ in TRIAL_BUILDER_CHANGES] == list(range(1, TRIAL_BUILDER_VERSION + 1))
    assert TRIAL_BUILDER_CHANGES[-1] == (4, 0.15)
    assert trial_builder_version(TAU_100) == 4 and trial_builder_version(0.1499) == 4
    assert trial_builder_version(0.15) == trial_builder_version(0.25) == 3


def write_build_toml(path, name: str, release_dir, tau_m, backend: str = ""):
    """Write a build-trials GeoVerify campaign on the simulated model (no key, no network) to ``path``: campaign
    ``name``, ``tau_m`` as written, ``backend`` appended (a ``[backend]`` table or ""). Shared by the tau tests."""
    path.write_text(f"""
[campaign]
name = "{name}"
kind = "geoverify"
seed = 7
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[geoverify]
trials = "build"
release_dir = "{release_dir}"
tau_m = {tau_m}
n_boot = 0
{backend}""", encoding="utf-8")
    return path


def _gv_toml(tmp_path, release_dir, tau_m: float, backend: str = "") -> object:
    from geoagent.config import load_config

    return load_config(write_build_toml(tmp_path / f"gv{tau_m:g}.toml", f"gv-tau{tau_m:g}", release_dir, tau_m,
                                        backend))


def test_a_run_planned_under_the_old_edges_names_the_change(tmp_path, release_dir, monkeypatch, capsys):
    """On one machine (SQLite) the re-run plans the new trials, says the trial builder changed, and sets the tasks
    the new plan no longer holds aside: never silently."""
    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    cfg = _gv_toml(tmp_path, release_dir, 100)
    assert main(["run", str(cfg.source), "--no-live"]) == 0
    capsys.readouterr()
    manifest = cfg.state_dir() / "manifest.json"
    data = orjson.loads(manifest.read_bytes())
    assert data["designs"] == {"geoverify.trial_builder": 4}
    data["designs"] = {"geoverify.trial_builder": 3}  # as a run before fixverify42 recorded it
    manifest.write_bytes(orjson.dumps(data))
    assert main(["run", str(cfg.source), "--no-live"]) == 0
    err = capsys.readouterr().err
    assert "the trial builder changed since its last run (geoverify.trial_builder: 3 -> 4: " in err, err
    assert "this changes which tasks are planned" in err
    md = (cfg.state_dir() / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert "| F 0.1–0.3 km |" in md and "tau = 100 m" in md


def test_a_campaign_planned_under_the_old_edges_is_told_its_trials_change(tmp_path, release_dir):
    import geoagent.geoverify.campaign  # noqa: F401 - the kind's section, as a run has it loaded
    from geoagent.runtime.manifest import TRIAL_BUILDER_KEY, config_changes_against, design_versions, stored_config

    low, paper = _gv_toml(tmp_path, release_dir, 100), _gv_toml(tmp_path, release_dir, 150)
    assert design_versions(low) == {TRIAL_BUILDER_KEY: 4} and design_versions(paper) == {TRIAL_BUILDER_KEY: 3}
    for cfg, changed in ((low, {TRIAL_BUILDER_KEY: (3, 4)}), (paper, {})):
        # the manifest of a run planned before (trial builder 3), with the same file
        old = {"kind": "geoverify", "config": stored_config(cfg), "designs": {TRIAL_BUILDER_KEY: 3}}
        ch = config_changes_against(old, cfg)
        assert ch.call_keys == changed
        assert ch.calls == (["geoverify"] if changed else [])


def test_redis_refuses_the_old_edges_without_accept_config_change(tmp_path, release_dir, monkeypatch,
                                                                 redis_url):  # noqa: F811
    import redis

    import geoagent.geoverify.campaign  # noqa: F401 - the kind's section, as a run has it loaded
    from geoagent.runtime.backend import CONFIG_KEY, BackendError, check_server_config
    from geoagent.runtime.manifest import TRIAL_BUILDER_KEY, results_sha256
    from geoagent.runtime.redis_state import state_prefix

    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    backend = '[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n'
    client = redis.Redis.from_url(redis_url)
    try:
        for tau_m, refused in ((100, True), (150, False)):
            cfg = _gv_toml(tmp_path, release_dir, tau_m, backend)
            assert check_server_config(cfg, record=True).recorded
            key = state_prefix(cfg.name) + CONFIG_KEY
            rec = orjson.loads(client.get(key))
            rec["designs"][TRIAL_BUILDER_KEY] = 3  # the campaign's first run: trial builder 3
            rec.pop("results_sha256")
            rec["results_sha256"] = results_sha256(rec)
            client.set(key, orjson.dumps(rec))
            if not refused:  # 3 is this tau's version too: the same trials, nothing to accept
                assert check_server_config(cfg, record=True).line is None
                continue
            with pytest.raises(BackendError, match=r"geoverify\.trial_builder: 3 -> 4.*--accept-config-change"):
                check_server_config(cfg, record=True)
            got = check_server_config(cfg, record=True, accept_change=True)
            assert "--accept-config-change" in got.line and got.accepted["changed_keys"] == [TRIAL_BUILDER_KEY]
            assert orjson.loads(client.get(key))["designs"][TRIAL_BUILDER_KEY] == 4
    finally:
        client.close()

