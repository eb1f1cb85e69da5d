"""A GeoHint campaign whose located answers mix geocoding rules versions says how many each located (fixgeohint42 #1,
#2, upgrade41 #6).

Before: each scored row recorded its rules (``extra.geocoder_rules``), but the report never counted them; the
rules-change ``warning:`` was printed once, by the first run after the upgrade (its manifest then recorded the new
rules, so a re-run, another ``--stages`` process or another machine said nothing while older-rules rows remained),
and it counted every answer geocoded before that run, also those the same run's refresh geocoded again. Now
``report.md`` says how many answers each version located when they mix, and the run's summary warns, from the stored
rows, at every run while answers the report counts keep other rules than this geoagent's.

Unit cases feed :class:`~geoagent.geohint.aggregate.GeoHintAggregator` scored results; the end-to-end case runs the
three-site campaign over the sandbox fakes through the CLI (skipped without the release data).
"""

from __future__ import annotations

import json
import sqlite3

import orjson

from _model_harness import geohint_three_sites_toml
from geoagent.cli import main
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.geocode import GEOCODER_RULES_RECORDED_FROM, GEOCODER_RULES_VERSION
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.stages import SCORED_TABLE
from geoagent.report.geohint import geocoder_rules_line, geocoder_rules_text, geocoder_rules_warning

V = GEOCODER_RULES_VERSION


def _result(key: str, rules: int | None, *, finish: str = "stop", parse_ok: bool = True) -> GeoHintResult:
    extra = {"finish_reason": finish, **({"geocoder_rules": rules} if rules is not None else {})}
    return GeoHintResult(key=key, site="s1", image_id="1", model="m", condition="forced", schema="forced",
                         ref_qid="Q1", ref_name="Le Marais", dist_km=1.2, band="near", tier="high", city="Paris",
                         area="Le Marais" if parse_ok else None, parse_ok=parse_ok, resolved_level="area",
                         lat=48.859, lon=2.362, error_km=0.2, hit=True, echo=False, extra=extra)


def test_the_aggregate_counts_the_answers_each_version_located():
    agg = GeoHintAggregator()
    agg.add_many([_result("a", V), _result("b", V), _result("c", V - 1), _result("d", None),
                  _result("e", V - 1, finish="length", parse_ok=False),  # no answer: nothing located, not counted
                  _result("a", V - 2)])  # a repeat of a key: no-op
    assert agg.geocoder_rules == {V: 2, V - 1: 1, None: 1}
    assert sum(agg.geocoder_rules.values()) == agg.select().n
    assert geocoder_rules_text(agg.geocoder_rules) == (
        f"2 by version {V}, 1 by version {V - 1}, 1 with none recorded (located before version "
        f"{GEOCODER_RULES_RECORDED_FROM})")
    line = geocoder_rules_line(agg)
    assert line is not None and line.startswith(
        f"Geocoding rules: the 4 answers the tables count were located by more than one version: 2 by version {V}, ")
    warning = geocoder_rules_warning(agg, "c1")
    assert warning is not None and warning.startswith(
        f"warning: campaign c1: 2 of the 4 answers the report counts were located by other geocoding rules than this "
        f"geoagent's (version {V}): 1 by version {V - 1}, 1 with none recorded")
    assert "located answers (hits, error km, unresolved) mix versions" in warning


def test_one_version_gives_no_report_line_and_warns_only_when_it_is_not_this_geoagents():
    current = GeoHintAggregator()
    current.add_many([_result("a", V), _result("b", V)])
    assert geocoder_rules_line(current) is None and geocoder_rules_warning(current, "c1") is None
    older = GeoHintAggregator()
    older.add_many([_result("a", V - 1), _result("b", V - 1)])
    assert geocoder_rules_line(older) is None  # nothing mixes in the report
    warning = geocoder_rules_warning(older, "c1")
    assert warning is not None and "all 2 answers the report counts were located by other geocoding rules" in warning
    assert "answers the campaign adds would mix versions" in warning
    assert geocoder_rules_line(GeoHintAggregator()) is None and geocoder_rules_warning(GeoHintAggregator(), "c") is None
    release = GeoHintAggregator()  # rows read from a release record no version: one "version", no line
    release.add_many([_result("a", None), _result("b", None)])
    assert geocoder_rules_line(release) is None


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    rc = main(list(args))
    got = capsys.readouterr()
    return rc, " ".join(got.out.split()), " ".join(got.err.split())


def _rewrite(db, edits: dict[str, dict]) -> None:
    with sqlite3.connect(db) as c:
        c.executemany("UPDATE results SET row = ? WHERE tbl = ? AND key = ?",
                      [(json.dumps(row), SCORED_TABLE, k) for k, row in edits.items()])


def test_a_campaign_holding_older_rules_rows_says_so_at_every_run_until_none_is_left(release_dir, tmp_path,
                                                                                    monkeypatch, capsys):
    """Rows set back to the earlier version 13 (four; two of them also read by an earlier answer parser as another
    place, which the next run's refresh geocodes again under the current rules) and to none recorded (two), with
    the manifest of the earlier geoagent's last run. The upgraded run's summary counts the four that keep other
    rules, not the six; its report says how many each version located; a re-run (its manifest now the current
    rules, no start-of-run warning) says it again; once no such row is left, nothing is said."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    name = "gh-rules-mix"
    cfg = tmp_path / "gh.toml"
    cfg.write_text(geohint_three_sites_toml(name, geohint="n_boot = 0"), encoding="utf-8")
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "other geocoding rules" not in out + err
    counted = int(out.split(" GeoHint: ")[1].split()[0])  # "GeoHint: 78 scored responses over 3 sites"
    db = tmp_path / "state" / name / "campaign.sqlite"
    with sqlite3.connect(db) as c:
        rows = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = ?", (SCORED_TABLE,))}
    keys = sorted(k for k, r in rows.items() if r["area"] and r["extra"].get("geocoder_rules") == V)
    older, regeocoded, none = keys[:2], keys[10:12], keys[20:22]
    edits = {}
    for k in older + regeocoded:
        row = json.loads(json.dumps(rows[k]))
        row["extra"]["geocoder_rules"] = V - 1
        if k in regeocoded:  # an earlier parser read another place: the refresh geocodes it again
            row["area"], row["resolved_level"], row["hit"], row["error_km"] = "Somewhere Else", "none", False, None
            row["extra"]["parser_version"] = 4
        edits[k] = row
    for k in none:
        row = json.loads(json.dumps(rows[k]))
        del row["extra"]["geocoder_rules"]
        edits[k] = row
    _rewrite(db, edits)
    manifest = tmp_path / "state" / name / "manifest.json"
    data = orjson.loads(manifest.read_bytes())
    data["designs"]["geohint.geocoder_rules"] = V - 1  # the earlier geoagent's last run
    manifest.write_bytes(orjson.dumps(data))

    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    # the start of the run (stderr): the count is of before it, and it says the refresh may change it
    assert (f"warning: campaign {name}: geoagent's geocoding rules changed since its last run (version {V - 1} -> "
            f"{V}") in err and "except any this run's refresh geocodes again" in err, err[-3000:]
    assert "2 of them naming another place geocoded and scored again" in err, err[-3000:]
    # the summary (stdout), from the stored rows after the refresh: 4, not the 6 set back
    warning = (f"warning: campaign {name}: 4 of the {counted} answers the report counts were located by other "
               f"geocoding rules than this geoagent's (version {V}): 2 by version {V - 1}, 2 with none recorded "
               f"(located before version {GEOCODER_RULES_RECORDED_FROM})")
    assert warning in out, out[-3000:]
    report = (tmp_path / "state" / name / "report" / "report.md").read_text(encoding="utf-8")
    line = next(ln for ln in report.splitlines() if ln.startswith("Geocoding rules:"))
    assert f", 2 by version {V - 1}, 2 with none recorded" in line and f"by version {V}, " in line, line
    with sqlite3.connect(db) as c:
        again = {k: json.loads(r) for k, r in c.execute("SELECT key, row FROM results WHERE tbl = ?",
                                                        (SCORED_TABLE,))}
    assert all(again[k]["extra"]["geocoder_rules"] == V for k in regeocoded)  # the refresh located them anew

    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")  # a re-run: no rules change since its last run
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "geocoding rules changed since its last run" not in err
    assert warning in out, out[-3000:]

    _rewrite(db, {k: rows[k] for k in older + none})  # as the current rules located them
    rc, out, err = _cli(capsys, "run", str(cfg), "--no-live")
    assert rc == 0, out[-2000:] + err[-2000:]
    assert "other geocoding rules" not in out + err
    report = (tmp_path / "state" / name / "report" / "report.md").read_text(encoding="utf-8")
    assert "Geocoding rules:" not in report
