"""Defects a new user met building a benchmark for a new city with the sandbox crawl (session 13, walkthrough 2).

* The info line printed when human image verdicts or review decisions are added to a finished crawl ended
  "(the export too, unless --no-export)"; ``run.py crawl`` has no ``--no-export`` option (argparse refuses it:
  "unrecognized arguments: --no-export").
"""

from __future__ import annotations

import re

from geoagent.cli import build_parser
from geoagent.runtime.drift import applied_after_line


def _crawl_options() -> set[str]:
    sub = next(a for a in build_parser("run.py")._actions if a.dest == "command")
    return {s for a in sub.choices["crawl"]._actions for s in a.option_strings}


def test_the_verdict_info_lines_name_only_options_run_py_crawl_has():
    options = _crawl_options()
    assert "--watch" in options
    for keys in ({"crawl.image_audit.human_verdicts": (None, "h.csv")},
                 {"crawl.referenceability.review_verdicts": (None, "r.csv")},
                 {"crawl.image_audit.human_verdicts": (None, "h.csv"),
                  "crawl.referenceability.review_verdicts": (None, "r.csv")}):
        line = applied_after_line("c", keys, "...")
        named = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", line))
        assert named <= options, (named - options, line)
