"""A model that answered but gave no usable (parsed) answer ends the run non-zero (walkthrough 9b item 2).

Before: gemini-2.5-flash at max_output_tokens 64 against the local fake had every answer cut off at the limit
(``cut off 345 (100.0%)``, ``parse failures 345``, read-out "no data"), and the campaign ended ``complete``,
exit 0. Issue 2 point 10: failures are never answers, and a campaign with missing work ends incomplete with a
non-zero exit code, never with silently lower scores. Now such a run ends ``no usable answers`` with its own
exit code, the summary naming the model and the cause (cut off: raise max_output_tokens), while partial
cut-offs stay warnings (``test_report_truncation.py``: 5 of a model's answers cut off still ends 0).

The answers are the public release sample as a replay file, one model's records made unusable by hand.
"""

from __future__ import annotations

import collections
import json

import orjson

from _model_harness import geoverify_replay_toml
from geoagent.engine import EXIT_CODES_HELP, EXIT_NO_USABLE_ANSWERS, STATUS_NO_USABLE
from _docs import docs_text

CUT_UNPARSED = '```json\n{"confid'
MODEL = "claude-haiku-4-5"


def _run(tmp_path, release_dir, capsys, *, cut: bool, name: str):
    from geoagent.cli import main

    recs = [orjson.loads(x) for x in (release_dir / "verify_raw_sample.jsonl").read_bytes().splitlines() if x.strip()]
    for r in recs:
        if r["model"] == MODEL:
            r["raw"] = CUT_UNPARSED if cut else "I cannot tell from this photo."
            r["usage"]["stop_reason"] = "max_tokens" if cut else "end_turn"
    (tmp_path / "rec.jsonl").write_bytes(b"\n".join(orjson.dumps(r) for r in recs) + b"\n")
    n = collections.Counter(r["model"] for r in recs)[MODEL]
    cfg = tmp_path / "gv.toml"
    cfg.write_text(geoverify_replay_toml(tmp_path, name, release_dir, replay_path=tmp_path / "rec.jsonl"))
    code = main(["run", str(cfg), "--no-live"])
    out = capsys.readouterr().out
    manifest = json.loads((tmp_path / "state" / name / "manifest.json").read_text())
    return code, out, n, manifest


def test_a_model_whose_answers_were_all_cut_off_ends_the_run_non_zero_naming_the_cause(tmp_path, release_dir, capsys):
    code, out, n, manifest = _run(tmp_path, release_dir, capsys, cut=True, name="gv-allcut")
    assert code == EXIT_NO_USABLE_ANSWERS and code not in (0, 2, 3, 4, 5, 130)
    assert f"campaign gv-allcut: {STATUS_NO_USABLE}" in out
    assert (f"  no usable answers: {MODEL}: {n} answers, none parsed ({n} cut off at the output-token limit: "
            "raise the model's [[models]] max_output_tokens (or [geoverify] max_output_tokens where the config sets "
            "it) and re-run the same command") in out
    assert manifest["runs"][-1]["status"] == STATUS_NO_USABLE
    # `status` afterwards does not call the campaign complete
    from geoagent.config import load_config
    from geoagent.status import campaign_status, format_status

    text = format_status(campaign_status(load_config(tmp_path / "gv.toml")))
    assert "campaign complete" not in text and "the last run ended 'no usable answers'" in text
    # the other models' answers are scored as before
    assert "gemini-flash: main arm n " in out and "gemini-flash: main arm n 0 " not in out


def test_a_model_whose_answers_all_failed_to_parse_ends_non_zero_too(tmp_path, release_dir, capsys):
    code, out, n, _ = _run(tmp_path, release_dir, capsys, cut=False, name="gv-allbad")
    assert code == EXIT_NO_USABLE_ANSWERS
    assert f"  no usable answers: {MODEL}: {n} answers, none parsed (none cut off: see " in out


def test_the_exit_code_is_in_the_tables():
    from geoagent.cli import EXIT_CODES_EPILOG, COMMAND_EXIT_CODES

    import geoagent.engine as engine

    code = str(EXIT_NO_USABLE_ANSWERS)
    assert f"{code} no usable answers" in EXIT_CODES_HELP
    assert f"\n  {code}    no usable answers" in EXIT_CODES_EPILOG
    assert EXIT_NO_USABLE_ANSWERS in COMMAND_EXIT_CODES["run"]
    assert f"{STATUS_NO_USABLE:<21}  {code}" in engine.__doc__
    readme = docs_text()
    assert f"`{code}` no usable answers" in readme




def test_geohint_answer_quality_counts_each_models_parsed_and_cut_off_answers():
    """GeoHint's side of the check, from hand-made scored answers: m-cut's 30 answers all cut off and unparsed
    (a line naming the cause), m-ok's 30 parsed with 2 cut off (no line: a partial cut-off is a warning)."""
    from geoagent.campaigns.geohint import GeoHintCampaign
    from geoagent.engine import unusable_answer_lines
    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.result import GeoHintResult

    def res(i, model, reason, parse_ok):
        return GeoHintResult(key=f"k{i}|{model}", site=f"s{i % 3}", image_id=f"im{i}", model=model,
                             condition="baseline", schema="forced", ref_qid=None, ref_name=None, band=None, tier=None,
                             dist_km=None, parse_ok=parse_ok, resolved_level="area" if parse_ok else "none",
                             error_km=0.5 if parse_ok else None, hit=parse_ok, extra={"finish_reason": reason})

    agg = GeoHintAggregator()
    for i in range(30):
        agg.add(res(i, "m-cut", "MAX_TOKENS", False))
        agg.add(res(i, "m-ok", "length" if i < 2 else "stop", True))
    kind = GeoHintCampaign()
    kind._agg = agg  # what report() leaves behind
    q = kind.answer_quality(None, None)
    assert (q["m-cut"].answers, q["m-cut"].parsed, q["m-cut"].cut_off) == (30, 0, 30)
    assert (q["m-ok"].answers, q["m-ok"].parsed, q["m-ok"].cut_off) == (30, 30, 2)
    (line,) = unusable_answer_lines(q)
    assert line.startswith("  no usable answers: m-cut: 30 answers, none parsed (30 cut off at the output-token "
                           "limit: raise the model's [[models]] max_output_tokens")
