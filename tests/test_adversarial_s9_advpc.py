"""Adversarial review of session 9's sampling, continent and reasoning changes (helper advpc).

Each test failed on main at 9f82647 and names what a researcher saw there.
"""

from __future__ import annotations

import warnings

from geoagent.config import ConfigWarning, config_from_dict
from geoagent.geoverify.trials import one_continent_note


def test_one_continent_note_says_an_is_north_america():
    # before: "every city is on one continent (AN)": a researcher who wrote NA (or AN) for New York reads
    # Antarctica; the release's code AN is North America, and the line shown must say so
    note = one_continent_note(["NA", "an", "AN"])
    assert note and "every city is on one continent (AN)" in note
    assert "North America" in note and "Antarctica" not in note
    eu = one_continent_note(["EU"])
    assert eu and "every city is on one continent (EU)," in eu and "North America" not in eu
