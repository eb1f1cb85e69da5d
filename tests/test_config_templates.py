"""Demo templates (geoagent/configs/demo_*.toml) fail at load with a message saying they are templates."""

import pytest

from geoagent.config import ConfigError, load_config


@pytest.mark.parametrize("name", ["demo_crawl", "demo_geoverify", "demo_geohint"])
def test_unfilled_template_fails_naming_the_demo(name):
    with pytest.raises(ConfigError) as ei:
        load_config(name)
    msg = str(ei.value)
    assert "template" in msg and "python run.py demo" in msg
    assert "{crawl_dir}" in msg or "{overpass_url}" in msg


def test_filled_template_loads(tmp_path):
    from geoagent.demo import demo_config

    cfg = demo_config("demo_geoverify", {"crawl_dir": str(tmp_path), "images_dir": str(tmp_path / "images")})
    assert cfg.section("geoverify").release_dir == str(tmp_path)
