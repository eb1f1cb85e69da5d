"""A new user's walkthrough and the statistics check (session 38: newuser38, stats38).

Before:

* newuser38 #1: after a budget stop ``status`` said "raise [budget] cap_usd in the config to at least $0.0400" under a
  cap of $0.0400: the need, $0.040029, was rounded to the nearest shown digit, so doing as told stopped again;
* newuser38 #5: ``acme_api_key=...`` in ``.env`` for a config's ``ACME_API_KEY`` got "not set" with no hint (the
  close-name check compared with case);
* stats38 #1: a replay file holding two records of one key (the second a changed verdict) was replayed from the first
  without a word; the release importer names such a line.
"""

from __future__ import annotations

import json
import logging

from geoagent.providers import ProviderSettings, make_provider
from geoagent.secrets import SecretNotFound, get_secret
from geoagent.status import budget_resume_hint


def test_the_cap_asked_for_after_a_budget_stop_is_rounded_up():
    spend = {"spent_usd": 0.039504, "unknown_usd": 0.0, "cap_usd": 0.04, "config_cap_usd": 0.04}
    hint = budget_resume_hint(spend, 0.000525)  # needs $0.040029
    assert "to at least $0.0401 (billed $0.0395 + the $0.0005 worst case" in hint, hint
    exact = {"spent_usd": 0.0395, "unknown_usd": 0.0, "cap_usd": 0.04, "config_cap_usd": 0.04}
    assert "to at least $0.0402 " in budget_resume_hint(exact, 0.0007)  # an exact need is not raised a step


def test_a_lower_case_key_variable_in_dotenv_is_pointed_at(tmp_path):
    env = tmp_path / ".env"
    env.write_text("acme_api_key=made-up-value-for-the-test\n", encoding="utf-8")
    try:
        get_secret("ACME_API_KEY", dotenv_path=env, environ={})
    except SecretNotFound as e:
        text = str(e)
    assert "did you mean acme_api_key, which is set in" in text and "made-up" not in text


def test_a_replay_file_with_a_key_recorded_twice_says_so(tmp_path, caplog):
    rows = [{"key": "a", "text": "no"}, {"key": "b", "text": "yes"}, {"key": "a", "text": "yes"},
            {"key": "b", "text": "yes"}]
    path = tmp_path / "rec.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="geoagent.providers.replay"):
        prov = make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_usage_field=None))
    assert prov.index.get("a")["text"] == "no"  # the first answers, as the importer keeps the first
    (msg,) = [r.getMessage() for r in caplog.records]
    assert f"{path}:3: 2 record(s) repeat the key of an earlier record (the first: 'a')" in msg, msg
    assert "1 of them differ from an earlier record of their key" in msg and "model 'm'" in msg, msg
    caplog.clear()
    path.write_text("".join(json.dumps(r) + "\n" for r in rows[:2]), encoding="utf-8")
    make_provider(ProviderSettings(kind="replay", model="m", replay_path=str(path), replay_usage_field=None))
    assert not caplog.records


def test_a_false_acceptance_outside_every_scored_band_counts_in_neither_F_nor_its_confidence():
    """stats38 #2: main-arm decoys of a band not scored (``6.0-12.0km``) were left out of F but their confidences
    went into the false-acceptance figures (fa_conf_n 10 beside n_false_acceptances 0)."""
    import polars as pl

    from geoagent.data.model import DECOY_BAND_LABELS
    from geoagent.scoring import sdt

    schema = {"model": pl.Utf8, "site": pl.Utf8, "arm": pl.Utf8, "band": pl.Utf8, "truth": pl.Utf8,
              "verdict": pl.Utf8, "conf": pl.Float64}
    base = ([("m", "s1", "main", "signal", "yes", "yes", 0.9)] * 4
            + [("m", "s1", "main", DECOY_BAND_LABELS[0], "no", "no", 0.9)] * 3
            + [("m", "s1", "main", DECOY_BAND_LABELS[0], "no", "yes", 0.6)])
    odd = [("m", "s1", "main", "6.0-12.0km", "no", "yes", 0.95)] * 10
    for rows, fa in ((base, 1), (base + odd, 1)):
        df = pl.DataFrame(rows, schema=schema, orient="row")
        got = sdt.score(sdt.cells_from_rows(df), sdt.conf_from_rows(df))["m"]
        assert (got.n_false_acceptances, got.fa_conf_n) == (fa, fa), got


def test_a_ladder_row_whose_distance_lies_outside_its_band_is_refused(tmp_path):
    """stats38 #4: a ladder row of 0 km under ``3-6km`` was imported (its band scored it, its distance left it out of
    the slope); now the row is refused with file, line and both values. Rows at a band's edges, to 3 decimals, pass."""
    from geoagent.data.importer import import_release

    root = tmp_path / "rel"
    (root / "ladders").mkdir(parents=True)
    (root / "sites.csv").write_text("site,city,country,continent,landmark,qid,wd_type,lat,lon\n"
                                    "s1,Amsterdam,NL,EU,Church,Q1,church,52.37,4.90\n", encoding="utf-8")
    rows = [("3-6km", "0"), ("0.5-1.5km", "0.5"), ("0.5-1.5km", "1.4999"), ("1.5-3.0km", "1.5"), ("3.0-6.0km", "6.2"),
            ("near", "0.3")]
    (root / "ladders" / "s1_ladder_deepseek-en.csv").write_text(
        "band,tier,name_zh,name_en,label_raw,qid,dist_km,familiarity,pageviews,n_in_cell,n_taken\n"
        + "".join(f"{b},high,,Place {i},,Q{100 + i},{d},4,,3,1\n" for i, (b, d) in enumerate(rows)), encoding="utf-8")
    (root / "verify_trials_sample.csv").write_text(
        "image_id,site,path,img_lat,img_lon,cand,cand_lat,cand_lon,fam,d_km,band,truth,arm,cont\n"
        "101,s1,x/101.jpg,52.37,4.90,Church,52.37,4.90,4.0,0.1,signal,yes,main,EU\n", encoding="utf-8")
    rel = import_release(root)
    assert [p.name_en for p in rel.ladders["s1"].points] == ["Place 1", "Place 2", "Place 3", "Place 5"]
    issues = [(i.line, i.reason) for i in rel.report.issues if i.file.endswith("s1_ladder_deepseek-en.csv")]
    assert issues == [(2, "column 'dist_km': 0 km lies outside its band '3-6km' (3 to 6 km)"),
                      (6, "column 'dist_km': 6.2 km lies outside its band '3.0-6.0km' (3 to 6 km)")], issues
