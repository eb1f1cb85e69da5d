"""A stored config holds each task section's defaults even when taken before the kind's module was imported.

``stored_config`` (what a manifest records and later runs compare) dumped an unregistered task section as written:
a GeoHint config loaded by a library user before ``geoagent.geohint`` was imported was recorded without the
section's defaults, and a later comparison listed spurious ``unset -> default`` changes (session 41's note).
Each case runs in a fresh interpreter, so the import order is the one a library user gets.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

_TOML = """
[campaign]
name = "stored-{kind}"
kind = "{kind}"
contact = "mailto:test@example.org"
[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
[{kind}]
release_dir = "{tmp}/release"
"""

_SCRIPT = """
import json, sys
from geoagent.config import load_config
if sys.argv[2] == "imported":
    import geoagent.campaigns
    geoagent.campaigns.register_all_sections()
from geoagent.runtime.manifest import stored_config
cfg = load_config(sys.argv[1])
print(json.dumps(stored_config(cfg)[cfg.campaign.kind], sort_keys=True))
"""


def _section(config: Path, order: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(config), order], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kind", ["geohint", "geoverify"])
def test_a_section_stored_before_its_module_is_imported_has_its_defaults(tmp_path, kind):
    config = tmp_path / f"{kind}.toml"
    config.write_text(_TOML.format(kind=kind, tmp=tmp_path.as_posix()), encoding="utf-8")
    cold, warm = _section(config, "cold"), _section(config, "imported")
    assert cold == warm
    # the stored section holds the defaults of the keys the file left unset, not only its one key
    assert "release_dir" in cold and len(cold) > 5, sorted(cold)
