"""The echo rule "name" and articles (session 36, geocoding rules version 10).

Before: every article token was dropped from names and fields alike, so

* "Đại La" (a Hanoi ward in the released ladders; "la" is no article in Vietnamese) shrank to "dai", and an answer
  "Đại học Bách khoa" (a university) echoed it;
* "The Mall" shrank to the common noun "mall", and "Pall Mall" (a London street beside it) or "a shopping mall"
  echoed it; likewise "Rockefeller Center" echoed "The Center" and "Kennington Oval" "The Oval".

Expected values are read off the answers by hand.
"""

from __future__ import annotations

import csv

import pytest

from geoagent.geohint.echo import is_echo, normalize_tokens


@pytest.mark.parametrize(
    "field, name, expected",
    [
        # a last word is never an article
        ("Đại học Bách khoa", "Đại La", False),
        ("Đại Cồ Việt", "Đại La", False),
        ("Đại La", "Đại La", True),
        ("Dai La street", "Đại La", True),  # the field read with its articles
        ("Barceloneta, La", "La Barceloneta", True),  # a field's last article stays and harms nothing
        # "The" and one word: the word must start a segment or follow an article
        ("Pall Mall", "The Mall", False),
        ("a shopping mall", "The Mall", False),
        ("Rockefeller Center", "The Center", False),
        ("North Dakota", "The Dakota", False),
        ("Kennington Oval", "The Oval", False),  # the same ground, but only as an alias (below)
        # review36 #3: more ways to start a phrase
        ("Quartier du Marais", "The Marais", True),
        ("Paris 4e – Marais", "The Marais", True),
        ("30 St Mary Axe \u2013 Gherkin", "The Gherkin", True),
        ('30 St Mary Axe "Gherkin"', "The Gherkin", True),
        ("City of London: Gherkin", "The Gherkin", True),
        ("伦敦，Oval", "The Oval", True),
        ("the lawns of the Mall", "The Mall", True),
        ("Bar am Oval", "The Oval", True),
        # names of articles alone, inverted names, "Saint"
        ("going to the park", "The", False),
        ("la plage", "La", False),
        ("Mall", "Mall, The", True),
        ("Pall Mall", "Mall, The", False),
        ("Soho, The Saint", "The Saint", True),
        ("The Mall", "The Mall", True),
        ("Mall", "The Mall", True),
        ("near the Mall, Westminster", "The Mall", True),
        ("Westminster / The Mall", "The Mall", True),
        ("St James's Park (the Mall)", "The Mall", True),
        ("Gherkin tower", "The Gherkin", True),
        # unchanged: inner articles, Romance articles, several words after "the"
        ("Gardens by the Bay", "Gardens by the Bay", True),
        ("Gardens by Bay", "Gardens by the Bay", True),
        ("Hôtel des Invalides", "Les Invalides", True),
        ("Raval", "El Raval", True),
        ("near THE VONDELPARK!", "Vondelpark", True),
        ("Tower of London", "The Tower of London", True),
    ],
)
def test_articles_and_the_one_word_names(field, name, expected):
    assert is_echo(field, None, [name]) is expected
    assert is_echo(None, field, [name]) is expected  # the building field is read the same way


def test_tokens():
    assert normalize_tokens("Đại La") == ["dai", "la"]
    assert normalize_tokens("La Barceloneta") == ["barceloneta"]
    assert normalize_tokens("The Mall", keep_articles=True) == ["the", "mall"]
    assert normalize_tokens("Barnes & Noble and the Bay", keep_articles=True) == ["barnes", "noble", "the", "bay"]


def test_an_alias_names_the_point_in_its_own_words():
    assert is_echo("Kennington Oval", None, ["The Oval", "Kennington Oval"])


def test_a_parenthetical_variant_of_a_the_one_word_name():
    """The rule reads each name variant: "The Mall (London)" without its qualifier is "The Mall"."""
    assert not is_echo("Pall Mall", None, ["The Mall (London)"])
    assert is_echo("The Mall", None, ["The Mall (London)"])


def test_the_released_ladders_hold_the_names_these_rules_concern(release_dir):
    """The docstring's count: the released ladders' English names and native labels that are "The" + one word, and the
    one name ending in an article-like word."""
    the_one, trailing = set(), set()
    for path in (release_dir / "ladders").glob("*.csv"):
        with path.open(encoding="utf-8") as fh:
            for row in csv.DictReader(fh):
                for name in (row["name_en"], row["label_raw"]):
                    words = name.split()
                    if len(words) == 2 and words[0].lower() == "the":
                        the_one.add(name)
                    if len(words) > 1 and words[-1].lower() in {"la", "le", "el", "the", "les", "los", "las", "de"}:
                        trailing.add(name)
    assert the_one == {"The Annex", "The Belcher's", "The Center", "The Den", "The Dakota", "The Gherkin", "The Mall", "The Marais",
                       "The Masterpiece", "The Oval"}
    assert trailing == {"Đại La"}
