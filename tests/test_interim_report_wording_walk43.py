"""Walk43 #4 and #5: the interim GeoHint report of a run stopped early.

#4: ``timeout -s INT 6 python run.py run my_hint4.toml`` (two models, 950 requests each) wrote the banner "the run
ended 'interrupted' with 1900 task(s) still queued or in flight" beside "Answered per model: sandbox-gpt 40/950,
sandbox-large 40/950": read as nothing done, while 80 requests were answered (a task is queued on one stage at a
time: answered ones wait for the geocoder). The banner now says the tasks are not yet through the last stage and
how many model requests were answered.

#5: the same report, with no answer scored yet, said "models: ; conditions: ." and "(every condition: ; Table 1's n
counts ...)"; empty lists now read "none"."""

from __future__ import annotations

from geoagent.engine import Outcome
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report import geohint as GH
from geoagent.runtime.queue import QueueCounts


def _walk_outcome(*, shared: bool = False) -> Outcome:
    # 1820 requests still to send, the 80 answered ones waiting for the geocoder: 1900 tasks on their way
    counts = {"requests": QueueCounts(1800, 20, 80, 0), "responses": QueueCounts(0, 0, 80, 0),
              "answers": QueueCounts(80, 0, 0, 0), "located": QueueCounts(0, 0, 0, 0),
              "scored": QueueCounts(0, 0, 0, 0)}
    out = Outcome("my-hint4", "interrupted", 130, 1900, counts, None, shared_queues=shared)
    out.planned_by_model = {"sandbox-gpt": 950, "sandbox-large": 950}
    out.answered_by_model = {"sandbox-gpt": 40, "sandbox-large": 40}
    return out


def test_the_interim_banner_says_tasks_not_through_the_last_stage_and_the_answered_requests():
    note = _walk_outcome().interim_note()
    assert note.startswith("the run ended 'interrupted' with 1900 task(s) not yet through the last stage (queued or "
                           "in flight on one of the stages; 80 of 1900 model requests answered); the tables cover "
                           "only what was answered so far (re-run the same command to finish)"), note
    assert "still queued or in flight" not in note
    assert "Answered per model: sandbox-gpt 40/950 (4%), sandbox-large 40/950 (4%)" in note
    shared = _walk_outcome(shared=True).interim_note()
    assert ("this machine's run ended 'interrupted' with 1900 task(s) not yet through the last stage of the campaign "
            "(queued or in flight in the shared queues; 80 of 1900 model requests answered; processes on other "
            "machines may still be working on them)") in shared, shared


def test_a_crawl_interim_banner_names_no_model_requests():
    out = Outcome("crawl", "interrupted", 130, 3, {"cities": QueueCounts(2, 1, 0, 0)}, None, plan_unit="cities")
    note = out.interim_note()
    assert "with 3 task(s) not yet through the last stage (queued or in flight on one of the stages)" in note, note
    assert "model requests" not in note


def test_an_interim_report_with_nothing_scored_prints_none_for_empty_lists(tmp_path):
    GH.write_report(GeoHintAggregator(), tmp_path, figures=False, interim=_walk_outcome().interim_note())
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "**Interim report: the run ended 'interrupted' with 1900 task(s) not yet through the last stage" in md
    assert "0 scored responses, 0 sites, models: none; conditions: none." in md, md[:2000]
    assert "(every condition: none; Table 1's n counts" in md, md[:2000]
    assert "models: ;" not in md and "conditions: ." not in md and "every condition: ;" not in md
