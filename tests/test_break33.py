"""Session 33: carried items fixed.

* A recorded answer's ``error`` field of ``false``, ``0``, ``[]`` or ``{}`` (a writer that always fills it) counted
  as a failure in the release importer ("False", "0") but as an answer in the replay index; a truthy non-string
  value the other way round kept different records of one trial. Both now read the field by
  :func:`geoagent.files.recorded_error`.
* GeoVerify: "My answer: No" after an answer whose JSON said yes, and an object under a finality key beside the
  answer's verdict (``{"verdict": "yes", "revised": {"verdict": "no"}}``), were scored with the first verdict; now
  conflicts (parser version 6).
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
    '{"verdict": "yes", "confidence": 0.7}\nMy answer: NO.',
    '{"verdict": "no"}\n\nMy final answer: yes',
    '{"verdict": "yes", "revised": {"verdict": "no", "confidence": 0.6}}',
    '{"verdict": "no", "final_answer": {"answer": "Yes", "why": "the tram livery"}}',
    '{"verdict": "yes", "Updated Assessment": {"decision": "no"}}',
])
def test_my_answer_and_a_revised_object_are_conflicts(text):
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
])
def test_agreeing_answers_and_other_objects_still_parse(text, verdict):
    p = parse_verdict(text)
    assert p.ok and p.verdict == verdict, p
