"""``status`` of a ``--stages`` split whose ``--watch`` process idles on drained queues after a later, plain
process of the campaign ended (session 21 walkthrough #5).

Before: ``status`` looked at the newest run of manifest.json only; that was the plain process (ended), so the
watching process holding the campaign read as "a run of it is still going: it is finishing (writing the report
and export) or starting" for as long as it idled. Now a run still recorded ``running`` that was started with
``--watch`` counts too: the campaign reads complete (the documented line for a ``--watch`` run idling on drained
queues). Real manifest entries (geoagent.runtime.manifest.Manifest), read by the status module."""

from __future__ import annotations

import os

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.runtime.manifest import Manifest
from geoagent.status import _last_run_watched


def test_a_running_watch_process_beside_an_ended_plain_one_is_watching(tmp_path):
    register_all_sections()
    cfg = config_from_dict({"campaign": {"name": "split-watch", "kind": "generic"},
                            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
                            "budget": {"cap_usd": 1.0},
                            "models": [{"name": "sim", "provider": "simulated", "model": "sim"}]})
    man = Manifest(cfg)
    man.start_run(extra={"watch": True, "pid": os.getpid()})   # the --watch process: still running (this process)
    later = man.start_run(extra={"watch": False})               # the plain --stages process: ended
    man.stop_run(later, status="stages finished")
    assert _last_run_watched(cfg.state_dir())  # before: False (the newest entry only)
