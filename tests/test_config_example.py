"""geoagent/configs/example.toml: loads cleanly with every task section registered, and documents every key of
every settings class with its true default (a commented-out key stands for a default of "not set")."""

from __future__ import annotations

import dataclasses
import re
import tomllib
import warnings
from pathlib import Path

import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import load_config

EXAMPLE = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "example.toml"
TEXT = EXAMPLE.read_text(encoding="utf-8")
DOC = tomllib.loads(TEXT)


def _block(header: str) -> str:
    """The text of one TOML table, from its header line to the next header."""
    m = re.search(rf"^\[{re.escape(header)}\][^\n]*\n(.*?)(?=^\[)", TEXT + "\n[", flags=re.S | re.M)
    assert m, f"[{header}] missing from example.toml"
    return m.group(1)


def _commented_keys(header: str) -> set[str]:
    return set(re.findall(r"^#\s*([a-z_0-9]+)\s*=", _block(header), flags=re.M))


def test_example_loads_without_errors_or_warnings():
    register_all_sections()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = load_config(EXAMPLE)
    assert set(cfg.tasks) == {"geoverify", "geohint", "crawl", "generic", "images"}
    for name in cfg.tasks:
        assert cfg.section(name) is not None


def _check(model_cls, header: str, table: dict, *, not_default: set[str] = frozenset()):
    shown = set(table) | _commented_keys(header)
    fields = model_cls.model_fields
    missing = set(fields) - shown
    assert not missing, f"[{header}] does not show {sorted(missing)}"
    assert not (set(table) - set(fields)), f"[{header}] has keys no settings class reads"
    for key, value in table.items():
        if key in not_default or isinstance(value, dict) and key in fields and hasattr(fields[key].annotation, "model_fields"):
            continue
        default = fields[key].get_default(call_default_factory=True)
        if isinstance(default, tuple):
            default = list(default)
        if hasattr(default, "model_dump"):
            continue
        assert value == default, f"[{header}] {key} = {value!r}, but the default is {default!r}"
    for key in _commented_keys(header) & set(fields):
        assert fields[key].get_default(call_default_factory=True) is None or key in {"addressing_unit_patterns", "site_types"}, \
            f"[{header}] {key} is commented out but has a default other than None"


def test_geoverify_and_geohint_sections_show_every_key_with_its_default():
    from geoagent.geohint.settings import GeoHintSettings
    from geoagent.geoverify.settings import GeoVerifySettings

    _check(GeoVerifySettings, "geoverify", DOC["geoverify"])
    gh = {k: v for k, v in DOC["geohint"].items() if k != "geocoder"}
    _check(GeoHintSettings, "geohint", {**gh, "geocoder": {}}, not_default={"geocoder"})


def test_images_section_shows_every_key_with_its_default():
    from geoagent.config import ImagesSection

    _check(ImagesSection, "images", DOC["images"])


def test_geocoder_table_shows_every_field_with_its_default():
    from geoagent.geohint.geocode_stage import GeocoderSettings

    table = DOC["geohint"]["geocoder"]
    shown = set(table) | _commented_keys("geohint.geocoder")
    names = {f.name for f in dataclasses.fields(GeocoderSettings)}
    assert shown == names
    defaults = GeocoderSettings()
    for k, v in table.items():
        assert getattr(defaults, k) == v, k
    for k in _commented_keys("geohint.geocoder"):
        assert getattr(defaults, k) is None, k


@pytest.mark.parametrize("sub", ["screener", "sampler", "fetcher", "image_audit", "referenceability", "ladder", "endpoints"])
def test_crawl_subtables_show_every_key_with_its_default(sub):
    from geoagent.crawl.settings import CrawlSettings

    model_cls = CrawlSettings.model_fields[sub].annotation
    _check(model_cls, f"crawl.{sub}", DOC["crawl"][sub])


def test_crawl_and_generic_top_level_keys():
    from geoagent.campaigns.generic import GenericSection
    from geoagent.crawl.settings import CrawlSettings

    top = {k: v for k, v in DOC["crawl"].items() if not isinstance(v, dict) and k != "cities"}
    shown = set(DOC["crawl"])
    assert set(CrawlSettings.model_fields) <= shown
    _check(CrawlSettings, "crawl", {**top, "cities": [], **{k: {} for k in DOC["crawl"] if isinstance(DOC["crawl"][k], dict)}},
           not_default={"contact", "cities", "screener", "sampler", "fetcher", "image_audit", "referenceability", "ladder",
                        "endpoints"})
    _check(GenericSection, "generic", DOC["generic"])
