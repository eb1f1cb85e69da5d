"""Test helper: the fixture geocoder gazetteer (``tests/fixtures/gazetteer_geocode.jsonl``) plus extra entries."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

from _geocode_env import GAZETTEER

from geoagent.sandbox.gazetteer import Gazetteer


def gazetteer_with(*entries: dict) -> Gazetteer:
    """The fixture gazetteer with ``entries`` (gazetteer JSONL objects) appended."""
    lines = GAZETTEER.read_text(encoding="utf-8").splitlines() + [json.dumps(e, ensure_ascii=False) for e in entries]
    with tempfile.TemporaryDirectory(prefix="geocode-gaz-") as d:
        p = Path(d) / "gaz.jsonl"
        p.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return Gazetteer.from_jsonl(p)
