"""Session 33: carried items fixed.

* A recorded answer's ``error`` field of ``false``, ``0``, ``[]`` or ``{}`` (a writer that always fills it) counted
  as a failure in the release importer ("False", "0") but as an answer in the replay index; a truthy non-string
  value the other way round kept different records of one trial. Both now read the field by
  :func:`geoagent.files.recorded_error`.
* GeoVerify: an object under a finality key beside the answer's verdict (``{"verdict": "yes", "revised": {"verdict":
  "no"}}``) was scored with the first verdict; now a conflict (parser version 6). "My answer: No" after the answer
  was made one too, then withdrawn (review33 #3: sub-questions and accounts of an earlier answer read so).
"""

from __future__ import annotations

import orjson
import pytest

from geoagent.data.importer import ImportReport, read_raw_jsonl
from geoagent.files import recorded_error
from geoagent.geoverify.parse import parse_verdict
from geoagent.providers.replay import ReplayIndex

NO_FAILURE = [None, False, 0, 0.0, "", "   ", [], {}]
FAILURE = [("HTTP 500", "HTTP 500"), (True, "true"), (1, "1"), ({"code": 500, "message": "x"}, '{"code":500,"message":"x"}'),
           (["timeout"], '["timeout"]')]


@pytest.mark.parametrize("value", NO_FAILURE)
def test_empty_or_false_error_values_are_no_failure(value):
    assert recorded_error(value) is None


@pytest.mark.parametrize("value, text", FAILURE)
def test_other_error_values_are_failures_as_text(value, text):
    assert recorded_error(value) == text


@pytest.mark.parametrize("value", NO_FAILURE + [v for v, _ in FAILURE])
def test_the_importer_and_the_replay_index_keep_the_same_record(tmp_path, value):
    """First line: an answer whose ``error`` field is ``value``; second line: another answer. A failure gives way to
    the later answer, an answer is kept: the importer and the replay index must pick the same line."""
    trial = "100010003227|main|Osmanthus Botanical Garden"
    lines = [{"trial_id": trial, "model": "rec", "raw": '{"verdict": "yes"}', "error": value},
             {"trial_id": trial, "model": "rec", "raw": '{"verdict": "no"}'}]
    path = tmp_path / "verify_raw.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in lines) + b"\n")
    imported = {r.trial_id: r.raw for r in read_raw_jsonl(path, ImportReport())}
    replayed = ReplayIndex(path, ("trial_id", "model")).get(f"{trial}|rec")["raw"]
    expected = '{"verdict": "yes"}' if recorded_error(value) is None else '{"verdict": "no"}'
    assert imported == {trial: expected} and replayed == expected


# -- GeoVerify: two more ways of stating the opposite verdict after the answer ---------------------------------


@pytest.mark.parametrize("text", [
    '{"verdict": "yes", "revised": {"verdict": "no", "confidence": 0.6}}',
    '{"verdict": "no", "final_answer": {"verdict": "Yes", "why": "the tram livery"}}',
    '{"verdict": "yes", "Corrected": {"verdict": "no"}}',
])
def test_a_revised_object_with_the_opposite_verdict_is_a_conflict(text):
    p = parse_verdict(text)
    assert not p.ok and p.verdict is None and p.reason == "conflicting verdicts in one answer (yes and no)", p


@pytest.mark.parametrize("text, verdict", [
    ('{"verdict": "yes"}\nMy answer: yes.', "yes"),
    ('{"verdict": "no"}\nMy answer: no doubt a Baltic city, but not Riga.', "no"),  # no verdict word alone
    ('My answer: No.\n{"verdict": "no"}', "no"),
    ('{"verdict": "yes", "revised": {"verdict": "yes", "confidence": 0.9}}', "yes"),
    ('{"verdict": "yes", "checks": {"verdict": "no"}}', "yes"),  # a sub-check's object, not a revision
    ('{"verdict": "yes", "revised": {"note": "no change"}}', "yes"),  # a revision object without a verdict
    ('{"verdict": "no", "final": {"confidence": 0.8}}', "no"),
    # review33 #3: "my answer" after the answer is a sub-question's or an account of an earlier one; objects whose
    # "answer" is a sub-question's, or a flag
    ('{"verdict": "yes", "confidence": 0.7}\nMy answer: NO.', "yes"),
    ('{"verdict": "no", "confidence": 0.8}\n\nAt first my answer was yes, but the left-hand traffic rules out Lisbon.',
     "no"),
    ('{"verdict": "yes"}\n\nSelf-check: Is there anything contradicting Vienna? My answer: no.', "yes"),
    ('{"verdict": "yes", "overall_assessment": {"question": "Any contradicting evidence?", '
     '"answer": "No, nothing contradicts Prague."}}', "yes"),
    ('{"verdict": "yes", "overall_result": {"anomalies_found": "no", "answer": "No"}}', "yes"),
    ('{"verdict": "yes", "revised": {"answer": false}}', "yes"),
])
def test_agreeing_answers_and_other_objects_still_parse(text, verdict):
    p = parse_verdict(text)
    assert p.ok and p.verdict == verdict, p


# -- stats audit, session 33 ----------------------------------------------------------------------------------

def test_an_answer_that_filled_the_context_window_is_cut_off_but_not_counted_by_the_empty_answer_breaker():
    """Anthropic's "Handling stop reasons" guide: ``model_context_window_exceeded`` means the response filled the
    model's context window, to be treated as truncated. It is scored as cut off (no answer when nothing parsed);
    the empty-answer breaker, whose fix is a higher output limit, does not count it."""
    from geoagent.scoring.truncation import is_no_answer, is_truncated
    from geoagent.workers.cutoff_breaker import empty_cut_off

    reason = "model_context_window_exceeded"
    assert is_truncated(reason) and is_no_answer(reason, False) and not is_no_answer(reason, True)
    assert not empty_cut_off("", reason) and empty_cut_off("", "max_tokens")


@pytest.mark.parametrize("err, d_ref, where", [
    ([1.0, -0.5], [2.0, 2.0], "error_km is negative at index 1"),
    ([1.0, 1.0], [2.0, float("nan")], "got nan at index 1"),
    ([1.0], [float("inf")], "got inf at index 0"),
    ([1.0], [0.0], "got 0.0 at index 0"),
])
def test_error_ratio_refuses_what_is_no_distance(err, d_ref, where):
    from geoagent.scoring.geohint import error_ratio

    with pytest.raises(ValueError, match=where):
        error_ratio(err, d_ref)


def test_error_ratio_of_a_missing_answer_is_nan():
    import numpy as np

    from geoagent.scoring.geohint import error_ratio

    out = error_ratio([1.0, float("nan"), 0.0], [2.0, 4.0, 0.5])
    assert out[0] == 0.5 and np.isnan(out[1]) and out[2] == 0.0
