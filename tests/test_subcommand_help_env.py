"""Every subcommand's ``--help`` names the environment variables that move its folders and the place that says
what each does (carried from session 19's walkthrough: only the top-level ``--help`` listed them, so a researcher
reading ``run.py export --help`` never learned that ``GEOAGENT_STATE`` moves the folder it reads)."""

from __future__ import annotations

import pytest

from geoagent.cli import build_parser


def _sub_help(name: str) -> str:
    parser = build_parser()
    sub = next(a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices[name].format_help()


@pytest.mark.parametrize("name", ["run", "status", "demo", "crawl", "dead", "export"])
def test_subcommand_help_names_the_variables(name):
    text = _sub_help(name)
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES", "GEOAGENT_RELEASE"):
        assert var in text, (name, text[-800:])
    assert "--help" in text.split("environment variables")[-1] and "docs/configuration.md" in text, text[-800:]
