"""Place-name helpers: folding, linear-feature detection, query variants (hand-checked cases)."""

from __future__ import annotations

import pytest

from geoagent.geohint.placenames import fold, is_linear_name, is_null_answer, name_variants, primary_name, strip_parentheticals


@pytest.mark.parametrize(
    "name",
    ["Meiji-dōri", "Meiji-dori", "Meiji Dori", "Canal Street", "Omotesando Avenue", "Rue de Rivoli", "Calle Mayor",
     "Avenida Presidente Masaryk", "Friedrichstraße", "Gran Via de les Corts Catalanes", "Fire Street (Jinnan 1-chome)",
     "Varick St.", "Broadway", "表参道通り", "Kärntner Strasse",
     # beyond the Latin-script designators: Russian, Polish, Korean, Chinese, Thai, Arabic, Hebrew
     "Nevsky Prospekt", "Невский проспект", "Тверская улица", "улица Арбат", "Ulica Floriańska", "ul. Floriańska",
     "세종대로", "世纪大道", "ถนนสุขุมวิท", "Thanon Sukhumvit", "شارع الملك فهد", "רחוב דיזנגוף"],
)
def test_linear_names(name):
    assert is_linear_name(name)


@pytest.mark.parametrize(
    "name",
    ["Shibuya", "Sixth Avenue station", "500 Fifth Avenue", "Dohány Street Synagogue", "Park Street Church",
     "Princes Street Gardens", "Abbey Road Studios", "Berlin Friedrichstraße station", "Naka-Meguro", "Le Marais", "", None,
     "Nevsky Prospekt station", "ถนน"],
)
def test_not_linear_names(name):
    assert not is_linear_name(name)


def test_fold_is_case_diacritic_punctuation_and_article_insensitive():
    assert fold("Meiji-Dōri") == fold("meiji dori") == "meiji dori"
    assert fold("The Marais") == "marais" and fold("Île de la Cité") == "ile de la cite"
    assert fold("宮益坂") == "宮益坂" and fold(None) == ""
    assert fold("Tràng Tiền Street") == "trang tien street"
    assert fold("ガ") != fold("カ") and fold("ファイヤー通り") == "ファイヤー通り"


def test_parentheticals_are_stripped_first_and_their_content_tried_last():
    assert strip_parentheticals("Fire Street (Jinnan 1-chome)") == "Fire Street"
    assert name_variants("Shibuya (Miyamasuzaka)") == ["Shibuya (Miyamasuzaka)", "Shibuya", "Miyamasuzaka"]
    assert name_variants("Miyamasuzaka-dori (宮益坂)") == ["Miyamasuzaka-dori (宮益坂)", "Miyamasuzaka-dori", "宮益坂"]


def test_compound_answers_are_split_in_order():
    v = name_variants("Les Halles / Beaubourg district")
    assert v == ["Les Halles / Beaubourg district", "Les Halles", "Beaubourg district", "Beaubourg"]
    v = name_variants("Hudson Square / Tribeca, near the Holland Tunnel approach on Canal Street")
    assert v[1:3] == ["Hudson Square", "Tribeca"]
    assert name_variants("Financial District, Manhattan")[:2] == ["Financial District, Manhattan", "Financial District"]
    assert len(name_variants("aa / bb / cc / dd / ee / ff / gg", max_variants=4)) == 4


def test_null_answers():
    for t in ("unknown", "Unknown.", " N/A ", "", None, "not visible"):
        assert is_null_answer(t) and name_variants(t) == [] and primary_name(t) == ""
    assert primary_name("Yamate-dori near Naka-Meguro Station") == "Yamate-dori"
