"""The echo rule "name" and names qualified by their site's city (session 37, geohint37 #3; geocoding rules
version 11).

Before, "Akasaka (Tokyo)" was named by an answer "Akasaka" (the bracketed qualifier is dropped) but "Akasaka, Tokyo"
was not, though both are Wikipedia's ways to tell places of one name apart; 179 of the released ladders' English
names carry such a comma, 129 of them ending in their site's city. On the release sample the rule finds 5 more
echoes (262 of 936: ``tests/test_geohint_echo.py``), e.g. "Les Halles / Saint-Eustache" for "Saint-Eustache, Paris".
Only the site's city is taken off: a comma inside a name is no qualifier.
"""

from __future__ import annotations

import pytest

from geoagent.geohint.echo import echo_by_rule, is_echo, without_city_qualifier


@pytest.mark.parametrize(("field", "name", "city"), [
    ("Akasaka", "Akasaka, Tokyo", "Tokyo"),
    ("Castro District", "Castro District, San Francisco", "San Francisco"),
    ("Les Halles / Saint-Eustache", "Saint-Eustache, Paris", "Paris"),
    ("near Kastellet", "Kastellet, Stockholm", "Stockholm"),
    ("Zona Rosa", "Zona Rosa, Mexico City", "mexico city"),  # letter case of the sites table's city is folded
    ("Laches", "Laches, Bogotá", "Bogota"),  # and its accents
])
def test_a_name_qualified_by_the_sites_city_is_named_without_it(field, name, city):
    assert not is_echo(field, None, [name])  # without the site's city nothing is taken off
    assert is_echo(field, None, [name], cities=[city])
    assert is_echo(None, field, [name], cities=[city])
    assert echo_by_rule(field, None, [name], name_en=name, name_zh=None, cities=[city])["name"]


@pytest.mark.parametrize(("field", "name", "city"), [
    ("Foreign Office", "Foreign, Commonwealth and Development Office", "London"),  # a comma inside the name
    ("City Hall", "City, University of London", "London"),
    ("Westminster Abbey", "St Margaret's, Westminster", "London"),  # a borough, not the site's city: whole name only
    ("Akasaka", "Akasaka, Tokyo", "Kyoto"),  # another city
])
def test_no_other_comma_is_taken_for_a_qualifier(field, name, city):
    assert not is_echo(field, None, [name], cities=[city])


def test_without_city_qualifier_gives_only_new_forms():
    assert without_city_qualifier(["Akasaka, Tokyo", "Akasaka", None, ""], ["Tokyo"]) == ["Akasaka"]
    assert without_city_qualifier(["Akasaka, Tokyo"], [None, ""]) == []
    assert without_city_qualifier([", Tokyo", " ,Tokyo"], ["Tokyo"]) == []  # nothing before the qualifier
    assert without_city_qualifier(["Museum of Art, Architecture and Technology"], ["Lisbon"]) == []
