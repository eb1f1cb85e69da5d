"""Campaign kinds: which stages run, what the planner enqueues, how results are reported.

Looked up by ``[campaign] kind`` through :data:`geoagent.engine.KINDS`.
"""

from __future__ import annotations

import importlib

#: modules that register a ``[section]`` of the campaign file when imported
SECTION_MODULES = (
    "geoagent.campaigns.generic",
    "geoagent.geoverify.settings",
    "geoagent.geohint.settings",
    "geoagent.crawl.settings",
)


def register_all_sections() -> None:
    """Import every task-settings module so campaign files are validated in full at load time."""
    for name in SECTION_MODULES:
        importlib.import_module(name)
