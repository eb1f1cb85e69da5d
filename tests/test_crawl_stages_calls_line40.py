"""A crawl split over processes (``--stages``) names the auditor calls each process made (crawl40 #6).

Both processes printed "no model calls by this process (... the model caller's process reports its calls)": a crawl
has no model caller, and the process running the image auditor had made 29 vision calls.
"""

from __future__ import annotations

from geoagent.engine import Outcome


def _outcome(stages, calls, unit="cities"):
    return Outcome(campaign="c", status="complete", exit_code=0, planned=3, counts={}, spend=None,
                   own_stages=stages, process_calls=calls, plan_unit=unit)


def test_a_crawl_process_with_an_auditor_counts_its_calls():
    line = _outcome(["referenceability_auditor", "ladder_builder"], 28).this_run_line()
    assert line.startswith("  this run: 28 new model calls by this process;"), line
    quiet = _outcome(["city_screener", "site_sampler"], 0).this_run_line()
    assert quiet == ("  this run: no model calls by this process (it ran stages city_screener, site_sampler; the "
                     "auditors' process reports their calls)")
    # a campaign's parser-only process keeps its wording
    assert "the model caller's process reports its calls" in _outcome(["parser"], 0, "requests").this_run_line()
