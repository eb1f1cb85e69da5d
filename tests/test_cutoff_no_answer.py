"""An answer cut off at the output-token limit that did not parse is no answer, in both tasks.

Before: GeoHint counted such an answer (a reasoning model whose whole cap went on hidden reasoning: empty text,
finish reason ``length``) as a response, so as a miss in every hit-rate denominator, as a non-echo in every
echo rate (g5's echo rate "0.0 %" with a 95 % interval, from answers that named nothing), and as an answer
that "did not geocode" (the unresolved warning blamed the geocoder's endpoints); GeoVerify left it outside H
and F as a parse failure. The two tasks disagreed on the same event, and GeoHint's reading broke the
project's rule that failures are never answers: the cap set by the campaign, not the model, ended it.

Now (decision and sources in :mod:`geoagent.scoring.truncation`): a cut-off answer that did not parse enters
no rate of either task and is counted per model and condition (GeoHint table ``cutoff``) or per model and
arm (GeoVerify); an unparseable answer the model finished itself stays a miss in GeoHint (the release's
judged answers code answers with empty parsed fields as ``hit`` False) and a parse failure outside H and F in
GeoVerify (the paper has no unparsed GeoVerify answer: "Every returned response parsed", Sec. 6.4).

Expected counts come from the hand-made answers (which were cut off, which parsed), or from the local
OpenAI-compatible fake's documented behaviour (a reasoning model id with a cap at or below its reasoning
tokens answers ``content: ""``, ``finish_reason: "length"``), never from the code under test.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _model_harness import SANDBOX_GPT_TOML, SANDBOX_G5_TOML, SANDBOX_GEOCODER_TOML
from geoagent.data.model import ARM_MAIN
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import scored_row
from geoagent.report import geohint as GH
from geoagent.report import geoverify as GV
from geoagent.scoring.truncation import LEGEND_LINE, is_no_answer

REPO = Path(__file__).resolve().parents[1]


def _res(i: int, *, reason: str | None = "stop", parse_ok: bool = True, hit: bool = True, echo: bool = False,
         model: str = "m", condition: str = "forced", site: str | None = None) -> GeoHintResult:
    return GeoHintResult(
        key=f"k{i}|{model}|{condition}", site=site or f"s{i % 4}", image_id=f"im{i}", model=model, condition=condition,
        schema="forced", ref_qid=f"Q{i}", ref_name="Somewhere", band="0.5-1.5km", tier="high", dist_km=1.0,
        parse_ok=parse_ok, resolved_level="area" if parse_ok else "none", error_km=(0.5 if hit else 3.0) if parse_ok else None,
        hit=hit and parse_ok, echo=echo if parse_ok else False, extra={"finish_reason": reason})


def test_no_answer_is_cut_off_and_unparsed_only():
    assert is_no_answer("length", False) and is_no_answer("MAX_TOKENS", False) and is_no_answer("max_tokens", False)
    assert not is_no_answer("length", True)       # cut off but parsed: an answer, scored
    assert not is_no_answer("stop", False)        # finished but unparseable: an answer (a miss in GeoHint)
    assert not is_no_answer(None, False)          # no recorded reason: counted as not cut off


def test_geohint_rates_leave_out_cut_off_unparsed_answers_and_keep_finished_unparsed_as_misses():
    """Model m, condition forced, 10 answers: 6 hits (3 of them echoes), 2 misses the model finished but that
    did not parse, 2 cut off at the cap with nothing parsed. Hit rate 6 / 8 (not 6 / 10), echo rate 3 / 8."""
    agg = GeoHintAggregator()
    for i in range(6):
        agg.add(_res(i, echo=i < 3))
    for i in (6, 7):
        agg.add(_res(i, parse_ok=False))                      # finished, unparseable: a miss (release rule)
    for i in (8, 9):
        agg.add(_res(i, reason="length", parse_ok=False))     # cut off, nothing parsed: no answer
    c = agg.select(model="m", condition="forced")
    assert (c.n, c.hits, c.n_parse_fail, c.echo_n, c.echoes) == (8, 6, 2, 8, 3)
    assert c.hit_rate == pytest.approx(6 / 8) and c.echo_rate == pytest.approx(3 / 8)
    assert agg.no_answer == {("m", "forced"): 2}
    tc = agg.truncation[("m", "forced")]
    assert (tc.n, tc.n_truncated, tc.n_truncated_unparsed) == (10, 2, 2)   # the cut-off table counts every answer
    tables = {t.name: t for t in GH.build_tables(agg, n_flips=20, n_splits=3, n_boot=0)}
    t1 = tables["table1"]
    row = next(r for r in t1.rows if r[0] == "m")
    assert row[1] == 8 and row[2] == pytest.approx(0.75)
    assert any("2 answers cut off at the output-token limit with nothing parsed are left out" in n for n in t1.notes_lines())
    cut = {(r[0], r[1]): r[2:] for r in tables["cutoff"].rows}
    assert cut[("m", "forced")] == [10, 2, 0.2, 2, 0, 0, 0]  # the last two: withheld by the content filter
    assert "Cut off, no answer (left out)" in tables["cutoff"].columns


def test_geohint_cut_off_item_drops_out_of_the_paired_tables():
    """The same item (model, image, reference point) answered under forced and forced_warn: a cut-off unparsed
    answer under forced_warn leaves no pair (a missing answer), rather than a pair hit vs miss."""
    agg = GeoHintAggregator()
    agg.add(_res(1, site="s1"))
    agg.add(_res(1, site="s1", condition="forced_warn", reason="length", parse_ok=False))
    agg.add(_res(2, site="s1"))
    agg.add(_res(2, site="s1", condition="forced_warn", hit=False))
    pairs = agg.paired("forced_warn", "forced")
    assert len(pairs) == 1


def test_geohint_answer_quality_still_counts_a_model_whose_answers_were_all_cut_off():
    from geoagent.campaigns.geohint import GeoHintCampaign

    agg = GeoHintAggregator()
    for i in range(5):
        agg.add(_res(i, model="m-cut", reason="MAX_TOKENS", parse_ok=False))
        agg.add(_res(i, model="m-ok"))
    kind = GeoHintCampaign()
    kind._agg = agg
    q = kind.answer_quality(None, None)
    assert (q["m-cut"].answers, q["m-cut"].parsed, q["m-cut"].cut_off) == (5, 0, 5)
    assert (q["m-ok"].answers, q["m-ok"].parsed, q["m-ok"].cut_off) == (5, 5, 0)


def test_geoverify_cut_off_unparsed_answers_are_outside_h_and_f_and_the_legend_says_why():
    """20 signal trials of one model: 10 yes, 6 no, 4 cut off with empty text (finish reason length). H = 10 / 16."""
    rows = []
    for i in range(20):
        trial = {"trial_id": f"t{i}", "site": f"s{i % 3}", "arm": ARM_MAIN, "band": "signal", "truth": "yes"}
        if i < 10:
            text, reason = '{"verdict": "yes", "confidence": 0.8}', "stop"
        elif i < 16:
            text, reason = '{"verdict": "no", "confidence": 0.8}', "stop"
        else:
            text, reason = "", "length"
        rows.append(scored_row(trial, "m", parse_verdict(text), finish_reason=reason))
    agg = GeoVerifyAggregator()
    agg.update(rows)
    s = agg.scores()["m"]
    assert (s.n_signal, s.n_hits) == (16, 10) and s.h == pytest.approx(10 / 16)
    assert s.n_parse_failures == 4
    md = GV.render_markdown(agg.scores())
    assert "outside H and F" in md and "neither a yes nor a no" in md
    assert LEGEND_LINE in md


def test_shared_legend_says_a_cut_off_unparsed_answer_is_no_answer():
    assert "is no answer" in LEGEND_LINE and "never a miss" in LEGEND_LINE
    assert any("finished" in line and "miss" in line for line in GH.LEGEND)


def _geohint_toml(tmp: Path) -> Path:
    cfg = tmp / "gh.toml"
    cfg.write_text("""
[campaign]
name = "gh-cut"
kind = "geohint"
seed = 1
contact = "mailto:you@example.org"

[budget]
cap_usd = 5.0

""" + SANDBOX_GPT_TOML + "\n" + SANDBOX_G5_TOML + """
[geohint]
conditions = ["baseline", "forced"]
images = "synthetic"
sites = ["tokyo_shibuya", "nyc_soho"]
images_per_site = 1

""" + SANDBOX_GEOCODER_TOML + """""", encoding="utf-8")
    return cfg


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_geohint_campaign_with_a_fake_that_cuts_every_answer_off_empty(tmp_path, release_dir):
    """Through the whole pipeline with the local OpenAI-compatible fake: g5 (a reasoning model id, cap 256 at or
    below the fake's reasoning tokens) gets every answer back empty with finish reason length; sandbox-gpt
    answers normally. g5's answers are in no rate (no Table 1 row, no echo rate, not 'unresolved'), are
    counted in the cutoff table, g5 is stopped after 10 of them in a row, and the summary names its answers as
    unusable, naming the cap."""
    env = {**os.environ, "GEOAGENT_QUEUES": str(tmp_path / "q"), "GEOAGENT_STATE": str(tmp_path / "s"),
           "GEOAGENT_RELEASE": str(release_dir), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(_geohint_toml(tmp_path)), "--no-live"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout
    # g5 is stopped after 10 empty cut-off answers in a row (geoagent.workers.cutoff_breaker; walk30 #2): its other
    # requests are left queued, so the run ends incomplete (exit 3), still naming g5's answers as unusable
    assert done.returncode == 3, out[-3000:] + done.stderr[-3000:]
    assert "model g5: its last 10 answers came back empty, cut off at the output-token limit" in out, out[-3000:]
    report = tmp_path / "s" / "gh-cut" / "report"
    cut = {(r["Model"], r["Condition"]): r for r in _csv(report / "cutoff.csv")}
    n_g5 = int(cut[("g5", "all")]["n"])
    assert n_g5 > 0 and cut[("g5", "all")]["Cut off"] == str(n_g5)
    assert cut[("g5", "all")]["Cut off, no answer (left out)"] == str(n_g5)
    assert cut[("sandbox-gpt", "all")]["Cut off"] == "0"
    assert [r["Model"] for r in _csv(report / "table1.csv")] == ["sandbox-gpt"]
    assert "g5" not in {r["Model"] for r in _csv(report / "unresolved.csv")}
    md = (report / "report.md").read_text(encoding="utf-8")
    assert f"{n_g5} of them with nothing parsed: no answer, left out of every rate" in md
    assert f"g5 {'forced':<12} no answer (cut off, nothing parsed) " in out
    assert f"  no usable answers: g5: {n_g5} answers, none parsed ({n_g5} cut off at the output-token limit" in out
    assert not any("did not geocode" in line and "g5" in line for line in out.splitlines())


def test_release_judged_answers_with_nothing_parsed_stay_misses(release_dir):
    """The release's judged GeoHint answers carry no finish reason; its rows with empty parsed fields (13 in the
    sample, all hit False) are the model's unparsed answers and stay responses and misses (the paper's rule),
    not no-answers."""
    import csv as _csv

    from geoagent.geohint.judged import import_judged

    with (release_dir / "answers_judged_sample.csv").open(newline="", encoding="utf-8") as fh:
        raw = list(_csv.DictReader(fh))
    empty = [r for r in raw if not (r["city"] or r["area"] or r["place"])]
    assert len(empty) == 13 and {r["hit"] for r in empty} == {"False"}
    rows, _ = import_judged(release_dir)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    assert agg.n_no_answer() == 0
    unparsed = [r for r in rows if not r.parse_ok]
    assert unparsed and not any(r.hit for r in unparsed)
    assert agg.select().n_parse_fail == len(unparsed) - sum(
        1 for r in unparsed if r.has_context and r.dist_km is None)


def test_geoverify_campaign_with_a_fake_that_cuts_every_answer_off_empty(tmp_path, release_dir):
    """GeoVerify through the whole pipeline with the same fake: g5's empty cut-off answers give no verdict, so
    g5 has no parsed trial, the pooled H and F are sandbox-gpt's alone, and the table counts g5's answers as cut
    off and unparsed (all arms and main arm)."""
    cfg = tmp_path / "gv.toml"
    cfg.write_text("""
[campaign]
name = "gv-cut"
kind = "geoverify"
seed = 1

[budget]
cap_usd = 5.0

""" + SANDBOX_GPT_TOML + "\n" + SANDBOX_G5_TOML + """
[geoverify]
trials = "release"
n_boot = 0
""", encoding="utf-8")
    env = {**os.environ, "GEOAGENT_QUEUES": str(tmp_path / "q"), "GEOAGENT_STATE": str(tmp_path / "s"),
           "GEOAGENT_RELEASE": str(release_dir), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, str(REPO / "run.py"), "run", str(cfg), "--no-live"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    out = done.stdout
    assert done.returncode == 3, out[-3000:] + done.stderr[-3000:]  # g5 stopped after 10 empty answers: incomplete
    assert "model g5: its last 10 answers came back empty, cut off at the output-token limit" in out, out[-3000:]
    with (tmp_path / "s" / "gv-cut" / "report" / GV.TABLE_CSV).open(newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    head = rows[0]
    by = {r[1]: dict(zip(head[2:], r[2:])) for r in rows[1:]}
    n_g5 = int(by["answers cut off (all arms)"]["g5"])
    assert n_g5 > 0 and by["cut off and unparsed"]["g5"] == str(n_g5) == by["parse failures (all arms)"]["g5"]
    assert by["n parsed (main arm)"]["g5"] == "0"
    assert by["cut off and unparsed"]["sandbox-gpt"] == "0"
    for stat in ("H", "F"):
        key = next(k for k in by if k.startswith(f"{stat} ("))
        assert by[key]["pooled"] == by[key]["sandbox-gpt"] != ""   # g5's answers are in neither rate
    md = (tmp_path / "s" / "gv-cut" / "report" / GV.TABLE_MD).read_text(encoding="utf-8")
    assert "outside H and F" in md
