"""Session 10 loose ends (branch s10-tidy): each test failed on main before its fix."""

from __future__ import annotations

import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict

register_all_sections()


# --- 1. [geoverify] boot_seed has a lower bound, as [geohint] boot_seed -----------------------------------
def _gv_doc(tmp_path, **geoverify) -> dict:
    return {"campaign": {"name": "gv-bs", "kind": "geoverify", "seed": 1, "contact": "ops@example.org"},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "budget": {"cap_usd": 1.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}],
            **({"geoverify": geoverify} if geoverify else {})}


def test_geoverify_boot_seed_is_refused_below_zero_at_load_naming_the_key(tmp_path):
    """Before: -1 passed validation and numpy's generator raised ValueError at report time."""
    from geoagent.config import ConfigError
    from geoagent.geoverify.settings import GeoVerifySettings

    assert GeoVerifySettings().boot_seed == 0
    assert config_from_dict(_gv_doc(tmp_path, boot_seed=0)).section("geoverify").boot_seed == 0
    assert config_from_dict(_gv_doc(tmp_path, boot_seed=12345)).section("geoverify").boot_seed == 12345
    for bad in (-1, -12345, "5", 2.5, True):
        with pytest.raises(ConfigError) as err:
            config_from_dict(_gv_doc(tmp_path, boot_seed=bad))
        assert "geoverify.boot_seed" in str(err.value)
