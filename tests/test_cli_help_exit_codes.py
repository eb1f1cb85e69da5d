"""Each subcommand's --help lists the exit codes that subcommand can return, not the whole table
(walkthrough 9, item J, second half).

Before, every subcommand printed the full table: ``crawl --help`` explained ``--stages`` (a `run` option),
``status --help`` and ``demo --help`` listed budget and authentication codes they never return. The top-level
--help keeps the full table.
"""

from __future__ import annotations

import argparse
import re

from geoagent.cli import EXIT_CODES_EPILOG, build_parser


def _codes(text: str) -> set[int]:
    tail = text.split("exit codes:", 1)[1]
    return {int(m.group(1)) for m in re.finditer(r"(?m)^  (\d+) ", tail)}


def _help(name: str) -> str:
    p = build_parser("geoagent")
    action = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices[name].format_help()


def test_each_subcommand_shows_its_own_exit_codes():
    # 6: no usable answers (a model answered, none parsed; walkthrough 9b): `run` returns it, a crawl does not
    assert _codes(build_parser("geoagent").format_help()) == _codes(EXIT_CODES_EPILOG) == {0, 1, 2, 3, 4, 5, 6, 130}
    assert _codes(_help("run")) == {0, 1, 2, 3, 4, 5, 6, 130}
    crawl = _help("crawl")
    assert _codes(crawl) == {0, 1, 2, 3, 4, 5, 130}
    assert "--stages" not in crawl.split("exit codes:", 1)[1] and "MAPILLARY_TOKEN" in crawl
    # 3 (session 36, cli36 #10): any command meets a full disk or a lost Redis server (geoagent.cli._run_command)
    assert _codes(_help("status")) == {0, 1, 2, 3, 130}
    assert _codes(_help("dead")) == {0, 1, 2, 3, 130}
    export = _help("export")
    assert _codes(export) == {0, 1, 2, 3, 130} and "nothing to export" in export
    assert "nothing to export" not in _help("run")
    assert _codes(_help("demo")) == {0, 1, 2, 3, 130}


def test_exit_2_names_every_dry_run_refusal_of_run():
    """newuser41 #D: the dry run also exits 2 for images without a file for a real model (its last line
    `exit 2: ... images without a file for a real model ...`); the top-level table and `run --help` said only
    missing keys and an empty first plan."""
    for text in (build_parser("geoagent").format_help(), _help("run")):
        two = re.search(r"(?ms)^  2 (.*?)^  3 ", text.split("exit codes:", 1)[1]).group(1)
        flat = " ".join(two.split())
        assert "images without a file for a real model" in flat and "a first run that plans nothing" in flat, flat
        assert "missing API key variables" in flat, flat
