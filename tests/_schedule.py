"""The order the suite's modules are handed to xdist workers: the longest first.

pyproject.toml runs xdist with ``--dist loadfile --no-loadscope-reorder``: each test module goes whole to one
worker (a module-scoped fixture runs once, not once per worker that got some of the module's tests: under the
default ``load`` the chunk edges split modules, and e.g. tests/test_exports_doc.py's ~30 s demo ran twice), and a
worker takes the next module when it is nearly done with its last. The modules below, which took the longest in
a whole ``-n 4`` run (``--durations``, 2-core machine, session 20), are collected first, so that they start at
once and the run does not end waiting on one of them started last (collection order put tests/test_walk_s17.py,
~115 s, among the last modules). Every other module keeps its place, after these. Only the order changes:
which tests run, and what they check, does not.
"""

from __future__ import annotations

#: test module file names, longest first (seconds of their slowest tests in the measured run)
LONG_FIRST = (
    "test_geohint_sandbox_campaign.py",  # 218
    "test_crash_campaigns.py",  # 129
    "test_walk_s17.py",  # 114
    "test_adversarial_s11_adv4.py",  # 81
    "test_walkthrough_s12_msgs.py",  # 80
    "test_demo.py",  # 74
    "test_exports_doc.py",  # 66
    "test_queue_sqlite.py",  # 63
    "test_hostshare_redis.py",  # 54
    "test_redis_scaleout.py",  # 49
    "test_crawl_watch_manifest_cities.py",  # 49
    "test_stored_row_wrong_fields.py",  # 49
    "test_status_scaleout.py",  # 45
    "test_geoverify_campaign_resume.py",  # 44
    "test_report_concurrent_writers.py",  # 39
    "test_redis_stages_split.py",  # 37
    "test_replay_this_run_line.py",  # 35
    "test_unreported_usage.py",  # 33
    "test_crawl_ref_shared.py",  # 33
    "test_runtime_hostshare.py",  # 31
    "test_damaged_stored_row.py",  # 29
    "test_model_caller_fair_share.py",  # 29
    "test_geohint_n_boot.py",  # 26
    "test_replay_report_header_s10.py",  # 25
    "test_crash_safety.py",  # 24
    "test_plan_change_since_last_run.py",  # 24
    "test_crawl_ref_order.py",  # 23
    "test_geohint_report_of_an_empty_scope.py",  # 22
    "test_walk_s14.py",  # 22
)
_RANK = {name: i for i, name in enumerate(LONG_FIRST)}


def pytest_collection_modifyitems(session, config, items) -> None:
    """Modules of :data:`LONG_FIRST` first, in its order; the rest after them in collection order (a stable sort:
    each module's tests keep their order and stay together)."""
    items.sort(key=lambda item: _RANK.get(item.path.name, len(_RANK)))
