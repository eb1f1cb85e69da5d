"""Answers cut off at the output-token limit are counted in the reports (GeoVerify, GeoHint, generic summary).

Every expected count here comes from the hand-made answers themselves (which records were given a cut-off
finish reason, which of those were made unparseable), never from the code under test: the three local
provider fakes' own finish reasons, hand-made scored rows and stored responses, and a replay file made from
the release sample with some records marked ``max_tokens`` and run through the whole GeoVerify campaign.
"""

from __future__ import annotations

import asyncio
import collections
import csv
import io

import orjson
import pytest

from geoagent.data.model import ARM_MAIN, ARM_MISMATCH
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.geohint.stages import score_located
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.geoverify.parse import parse_verdict
from geoagent.geoverify.score import scored_row
from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.providers.base import ModelResponse, Usage
from geoagent.report import geohint as GH
from geoagent.report import geoverify as GV
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.runtime.store import open_campaign_state
from geoagent.sandbox import llm_anthropic, llm_gemini, llm_openai
from geoagent.sandbox.server import serve
from geoagent.scoring.truncation import is_truncated
from _model_harness import geoverify_replay_toml
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 22, seed="trunc-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=3, backoff_base_s=0.005, backoff_max_s=0.02, timeout_s=10.0)
FULL = '{"verdict": "yes", "confidence": 0.9, "evidence": ["a tram stop sign"]}'
CUT_PARSED = '{"verdict": "no", "confidence": 0.7, "evidence": ["the facade looks like a late nineteenth-century bui'
CUT_UNPARSED = '```json\n{"confid'


# --- the providers' own finish reasons --------------------------------------------------------------
def test_each_provider_fake_cut_answer_reads_as_truncated_and_a_whole_one_does_not():
    """OpenAI ``length``, Anthropic ``max_tokens``, Gemini ``MAX_TOKENS`` (from the local fakes speaking each
    API's wire format) are cut off; each API's normal stop is not."""

    async def one(kind, module, max_out):
        async with serve(module.make_app(seed=3, api_keys=[KEY])) as url, HttpClient(default_policy=FAST) as http:
            base = url + "/v1" if kind == "openai" else url
            prov = make_provider(ProviderSettings(kind=kind, model="m", base_url=base, api_key=KEY), http)
            req = ModelRequest(provider=kind, model="m", prompt="Where was this photo taken? Answer in JSON.",
                               params={"max_output_tokens": max_out})
            return (await prov.generate(req)).finish_reason

    expected_cut = {"openai": "length", "anthropic": "max_tokens", "gemini": "MAX_TOKENS"}
    for kind, module in (("openai", llm_openai), ("anthropic", llm_anthropic), ("gemini", llm_gemini)):
        cut = asyncio.run(one(kind, module, 2))
        whole = asyncio.run(one(kind, module, 4000))
        assert cut == expected_cut[kind] and is_truncated(cut)
        assert whole != cut and not is_truncated(whole)
    assert not is_truncated(None) and not is_truncated("end_turn") and not is_truncated("STOP")


# --- GeoVerify ------------------------------------------------------------------------------------
def _gv_rows():
    """Model A: 150 main-arm and 50 swapped-image answers, of which 3 main (1 unparsed) and 2 swapped (both
    parsed) are cut off (5 of 200 = 2.5 %). Model B: 200 main-arm answers, 1 cut off (0.5 %, no warning),
    20 without a finish reason."""
    rows = []

    def add(model, i, arm, text, reason):
        band = "signal" if i % 2 == 0 else "0.3-0.7km"
        trial = {"trial_id": f"t{i}|{arm}", "site": f"s{i % 7}", "arm": arm, "band": band,
                 "truth": "yes" if (arm == ARM_MAIN and band == "signal") else "no"}
        rows.append(scored_row(trial, model, parse_verdict(text), finish_reason=reason))

    for i in range(150):
        text, reason = {0: (CUT_UNPARSED, "max_tokens"), 1: (CUT_PARSED, "max_tokens"), 2: (CUT_PARSED, "max_tokens")}.get(
            i, (FULL, "end_turn"))
        add("model-a", i, ARM_MAIN, text, reason)
    for i in range(50):
        add("model-a", 1000 + i, ARM_MISMATCH, CUT_PARSED if i < 2 else FULL, "max_tokens" if i < 2 else "end_turn")
    for i in range(200):
        add("model-b", i, ARM_MAIN, CUT_PARSED if i == 0 else FULL, "length" if i == 0 else (None if i > 179 else "stop"))
    return rows


def _csv_rows(text):
    rows = list(csv.reader(io.StringIO(text)))
    header = rows[0]
    return {r[1]: dict(zip(header[2:], r[2:])) for r in rows[1:]}


def test_geoverify_report_counts_cut_off_answers_per_model_and_arm(tmp_path):
    agg = GeoVerifyAggregator()
    rows = _gv_rows()
    agg.update(rows[:123])
    agg.update(rows[123:] + rows[:40])  # redelivered rows are not counted twice
    scores = agg.scores()
    by = _csv_rows(GV.render_csv(scores))
    assert by["answers cut off (all arms)"]["model-a"] == "5"
    assert float(by["share cut off (all arms)"]["model-a"]) == pytest.approx(5 / 200)
    assert float(by["share cut off, main arm"]["model-a"]) == pytest.approx(3 / 150)
    assert float(by["share cut off, control: swapped image"]["model-a"]) == pytest.approx(2 / 50)
    assert by["share cut off, control: gray field"]["model-a"] == ""  # arm not answered
    assert by["cut off and unparsed"]["model-a"] == "1"
    assert by["parse failures (all arms)"]["model-a"] == "1"  # the unparsed cut-off answer is the parse failure
    assert by["answers cut off (all arms)"]["model-b"] == "1"
    assert by["no finish reason recorded"]["model-b"] == "20"
    assert by["answers cut off (all arms)"]["pooled"] == "6"
    assert float(by["share cut off (all arms)"]["pooled"]) == pytest.approx(6 / 400)
    md = GV.render_markdown(scores)
    assert "| answers cut off (all arms) | 5 of 200 | 1 of 200 | 6 of 400 |" in md
    assert "**Warning: 2.5 % of the answers of model-a (5 of 200) were cut off" in md
    assert "[geoverify] max_output_tokens" in md
    assert "of model-b" not in md  # 0.5 % is under the 1 % threshold
    assert "- cut off: answers the provider stopped at the output-token limit" in md  # legend
    txt = GV.render_terminal(scores)
    assert "Warning: 2.5 % of the answers of model-a (5 of 200)" in txt and "cut off: answers the provider" in txt
    # the aggregator's saved state keeps the counts
    agg.save(tmp_path / "agg")
    again = GeoVerifyAggregator.load(tmp_path / "agg")
    assert _csv_rows(GV.render_csv(again.scores())) == by


def test_geoverify_campaign_counts_cut_off_records_of_a_replay(tmp_path, release_dir, capsys):
    """The release sample as a replay file, 5 of claude-haiku-4-5's records marked ``max_tokens`` (2 of them
    cut to an unparseable stub): the campaign's saved table and its summary count them; gemini-flash's records
    carry no stop reason and are counted as such."""
    from geoagent.cli import main

    recs = [orjson.loads(x) for x in (release_dir / "verify_raw_sample.jsonl").read_bytes().splitlines() if x.strip()]
    marked = 0
    for r in recs:
        if r["model"] == "claude-haiku-4-5" and marked < 5:
            r["usage"]["stop_reason"] = "max_tokens"
            if marked < 2:
                r["raw"] = CUT_UNPARSED
            marked += 1
    (tmp_path / "rec.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in recs) + b"\n")
    n_per_model = collections.Counter(r["model"] for r in recs)
    no_reason = collections.Counter(r["model"] for r in recs if not (r.get("usage") or {}).get("stop_reason"))
    cfg = tmp_path / "gv.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, "gv-cut", release_dir, replay_path=tmp_path / "rec.jsonl"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    report = tmp_path / "state" / "gv-cut" / "report"
    by = _csv_rows((report / GV.TABLE_CSV).read_text(encoding="utf-8"))
    assert by["answers cut off (all arms)"]["claude-haiku-4-5"] == "5"
    assert float(by["share cut off (all arms)"]["claude-haiku-4-5"]) == pytest.approx(5 / n_per_model["claude-haiku-4-5"])
    assert by["cut off and unparsed"]["claude-haiku-4-5"] == "2"
    assert by["parse failures (all arms)"]["claude-haiku-4-5"] == "2"
    for m in n_per_model:
        assert by["no finish reason recorded"][m] == str(no_reason[m])
        if m != "claude-haiku-4-5":
            assert by["answers cut off (all arms)"][m] == "0"
    assert no_reason["gemini-flash"] == n_per_model["gemini-flash"] > 0
    md = (report / GV.TABLE_MD).read_text(encoding="utf-8")
    share = 100 * 5 / n_per_model["claude-haiku-4-5"]
    assert f"Warning: {share:.1f} % of the answers of claude-haiku-4-5 (5 of {n_per_model['claude-haiku-4-5']})" in md
    assert md.count("Warning:") == 1
    assert "cut off 5 (" in out and f"Warning: {share:.1f} % of the answers of claude-haiku-4-5" in out


# --- GeoHint --------------------------------------------------------------------------------------
def _gh_result(i: int, model: str, condition: str, reason: str | None, parse_ok: bool = True) -> GeoHintResult:
    ctx = condition != "baseline"
    return GeoHintResult(
        key=f"k{i}|{model}|{condition}", site=f"s{i % 5}", image_id=f"im{i}", model=model, condition=condition,
        schema="forced", ref_qid="Q1" if ctx else None, ref_name="Somewhere" if ctx else None,
        band="0.5-1.5km" if ctx else None, tier="high" if ctx else None, dist_km=1.0 if ctx else None,
        parse_ok=parse_ok, resolved_level="area" if parse_ok else "none", error_km=0.5 if parse_ok else None,
        hit=parse_ok, extra={"finish_reason": reason},
    )


def test_geohint_cutoff_table_per_model_and_condition_with_warning(tmp_path):
    """m-a: 100 baseline (none cut), 100 forced (4 cut, 1 unparsed). m-b: 100 forced, 1 cut (1 %: not above the
    threshold, no warning), 10 answers without a finish reason."""
    agg = GeoHintAggregator()
    for i in range(100):
        agg.add(_gh_result(i, "m-a", "baseline", "stop"))
        agg.add(_gh_result(i, "m-a", "forced", "length" if i < 4 else "stop", parse_ok=i != 0))
        agg.add(_gh_result(i, "m-b", "forced", "MAX_TOKENS" if i == 0 else (None if i >= 90 else "STOP")))
    agg.add(_gh_result(0, "m-a", "forced", "length"))  # the same key again: not counted
    tables = {t.name: t for t in GH.build_tables(agg, n_flips=20, n_splits=3)}
    cut = tables["cutoff"]
    rows = {(r[0], r[1]): r[2:] for r in cut.rows}
    # the last two: withheld by the content filter, and of them with nothing parsed (session 35): none here
    assert rows[("m-a", "baseline")] == [100, 0, 0.0, 0, 0, 0, 0]
    assert rows[("m-a", "forced")] == [100, 4, 0.04, 1, 0, 0, 0]
    assert rows[("m-a", "all")] == [200, 4, 0.02, 1, 0, 0, 0]
    assert rows[("m-b", "forced")] == [100, 1, 0.01, 0, 10, 0, 0]
    assert rows[("All", "all")] == [300, 5, pytest.approx(5 / 300), 1, 10, 0, 0]
    assert ("m-b", "all") not in rows  # one condition only: no per-model total row
    notes = cut.notes_lines()
    # the definition is said once per report, under Terms (session 12 walkthrough: it came twice in report.md)
    assert notes[0] == "cut off: defined under Terms (said once per report)."
    assert [n for n in notes if n.startswith("Warning")] == [
        "Warning: 4.0 % of the answers of m-a in condition forced (4 of 100) were cut off at the output-token limit "
        "(1 of them with nothing parsed: no answer, left out of every rate); results are biased towards short "
        "answers. Raise the model's [[models]] max_output_tokens (or [geohint] max_output_tokens where the config sets "
        "it) and re-run the same command: the requests still queued are then sent under the new limit, and the answers "
        "already stored keep theirs (a new [campaign] name starts clean, asking every request again); where [geohint] "
        "max_output_tokens sets the limit, planning wrote it into each request, so a raised one reaches only requests "
        "planned after it: re-run under a new [campaign] name."]
    GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, figures=False)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "Answers cut off at the output-token limit: 5 of 300 scored answers (1.7 %)" in md
    assert "**Warning: 4.0 % of the answers of m-a in condition forced" in md
    assert "- cut off: answers the provider stopped" in md
    with (tmp_path / "cutoff.csv").open(newline="") as fh:
        csv_rows = list(csv.DictReader(fh))
    assert {(r["Model"], r["Condition"]): (r["Cut off"], r["Share cut off (fraction)"]) for r in csv_rows}[("m-a", "forced")] == ("4", "0.04")
    buf = io.StringIO()
    GH.print_report(list(tables.values()), GH.report_console(buf))
    assert "Warning: 4.0 % of the answers of m-a in condition forced" in buf.getvalue()
    # not read as rich markup
    assert "Raise the model's [[models]] max_output_tokens (or [geohint] max_output_tokens" in " ".join(buf.getvalue().split())


def test_geohint_scorer_keeps_the_finish_reason_and_old_rows_take_it_from_the_store(tmp_path):
    from geoagent.geohint.campaign import aggregate_from_store
    from geoagent.geohint.stages import SCORED_TABLE

    meta = {"task": "geohint", "site": "s1", "condition": "forced", "ref_qid": "Q9", "ref_name": "Old Bridge",
            "dist_km": 1.2, "band": "0.5-1.5km", "tier": "high", "site_lat": 0.0, "site_lon": 0.0}
    payload = {"model": "m", "request_key": "rk-1", "meta": meta, "finish_reason": "max_tokens",
               "parsed": {"ok": True, "city": "X", "area": "Old Bridge"}, "resolved_level": "area", "lat": 0.001, "lon": 0.0}
    row = score_located("gh|m|s1|a", payload).to_json()
    assert row["extra"]["finish_reason"] == "max_tokens"
    # a row scored before finish reasons were carried: no such key in extra; the stored answer has it
    old = score_located("gh|m|s1|b", {**payload, "request_key": "rk-2", "finish_reason": None}).to_json()
    del old["extra"]["finish_reason"]
    other = score_located("gh|m|s1|c", {**payload, "request_key": "rk-3", "finish_reason": "end_turn"}).to_json()
    with open_campaign_state("gh-old", root=tmp_path / "state", cap_usd=0.0) as st:
        st.store.put("rk-2", {"model": "m"}, ModelResponse("{...", Usage(10, 5), finish_reason="length"), None)
        for k, r in (("a", row), ("b", old), ("c", other)):
            st.store.put_result(SCORED_TABLE, k, r)
        agg = aggregate_from_store(st.store)
    c = agg.truncation[("m", "forced")]
    assert (c.n, c.n_truncated, c.n_no_reason) == (3, 2, 0)


# --- generic campaign summary ----------------------------------------------------------------------
def test_generic_summary_counts_cut_off_answers_from_stored_results(tmp_path):
    from geoagent.campaigns.generic import RESULTS_TABLE, GenericCampaign
    from geoagent.runtime.stage import StageContext

    with open_campaign_state("gen-cut", root=tmp_path / "state", cap_usd=0.0) as st:
        # model x: 50 answers, 3 cut off (one of them an older row whose finish reason is only in the store)
        for i in range(50):
            reason = "length" if i < 3 else "stop"
            row = {"model": "x", "request_key": f"x{i}", "text": "t", "finish_reason": reason}
            if i == 0:
                del row["finish_reason"]
                st.store.put("x0", {"model": "x"}, ModelResponse("t", Usage(1, 1), finish_reason="length"), None)
            st.store.put_result(RESULTS_TABLE, f"x|{i}", row)
        # model y: 200 answers, 1 cut off (0.5 %)
        for i in range(200):
            st.store.put_result(RESULTS_TABLE, f"y|{i}", {"model": "y", "request_key": f"y{i}", "text": "t",
                                                          "finish_reason": "max_tokens" if i == 7 else "end_turn"})
        ctx = StageContext(campaign="gen-cut", services={"store": st.store})
        lines = GenericCampaign().summary_lines(None, ctx, None)
    assert lines[0] == "  results stored: 250"
    assert lines[1] == "  cut off at the output-token limit: x 3 of 50 (6.0%); y 1 of 200 (0.5%)"
    assert lines[2].startswith("  cut off: answers the provider stopped")
    assert lines[3].startswith("  Warning: 6.0 % of the answers of x (3 of 50) were cut off") and "[[models]] max_output_tokens" in lines[3]
    assert len(lines) == 4
