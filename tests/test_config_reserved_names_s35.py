"""Campaign names and data roots that would land in a folder the state root shares, or in none (session 35; carried
from session 34)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("name", ["demo-configs", "Demo-Configs", "images", "IMAGES"])
def test_a_campaign_may_not_take_the_name_of_a_shared_state_folder(name):
    """Carried from session 34: a campaign named `demo-configs` would write its state into the folder where
    `run.py demo` writes its filled-in configs (as `images` would into every crawl's photo folder, refused before)."""
    from geoagent.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match=f"campaign.name: '{name}' is the folder under the state root"):
        config_from_dict({"campaign": {"name": name, "kind": "generic"}, "budget": {"cap_usd": 1.0},
                          "models": [{"name": "m", "provider": "simulated", "model": "m"}]})


@pytest.mark.parametrize("key", ["queues", "state", "release_dir"])
@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_data_root_is_refused_naming_the_key_and_the_fix(key, value):
    """Carried from session 34: `[paths] state = ""` was read as the default folder by some readers."""
    from geoagent.config import ConfigError, config_from_dict

    with pytest.raises(ConfigError, match=rf"paths\.{key}: expected a folder's path \(to use the default folder"):
        config_from_dict({"campaign": {"name": "c", "kind": "generic"}, "paths": {key: value},
                          "budget": {"cap_usd": 1.0}, "models": [{"name": "m", "provider": "simulated", "model": "m"}]})
