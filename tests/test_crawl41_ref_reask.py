"""Referenceability auditor: the summary's warnings count the current auditor model's records (session 41,
fixref41 #2).

Before: the "older candidate lines" warning counted every auditor model's records, also a model the config no longer
names (whose records a resumed crawl reuses for nothing).

Real crawls of the shipped sandbox config (``run.py crawl --no-live``).
"""

from __future__ import annotations

import contextlib
import io
import json

from geoagent import constants as C
from geoagent.crawl.referenceability import RAW_ANSWERS_FILE
from tests._crawl_once import SANDBOX_CRAWL_CONFIG, SANDBOX_TOKEN


def _crawl(tmp_path, monkeypatch, config=SANDBOX_CRAWL_CONFIG) -> tuple[int, str]:
    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("MAPILLARY_TOKEN", SANDBOX_TOKEN)
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(["crawl", str(config), "--no-live"])
    return code, out.getvalue()


def _state(tmp_path):
    return next(p for p in (tmp_path / "state").iterdir() if (p / RAW_ANSWERS_FILE).is_file())


def test_the_candidate_lines_warning_counts_the_current_auditor_models_records(tmp_path, monkeypatch):
    # fixref41 #2: records an earlier auditor model made with the older candidate lines (as an older version left
    # them) kept the warning after the config named a new model that rated every candidate again
    code, text = _crawl(tmp_path, monkeypatch)
    assert code == 0 and "older candidate lines" not in text
    state = _state(tmp_path)
    for name, model in ((C.AUDIT_DECISIONS_FILE, "old-auditor"), (C.AUDIT_SENSITIVE_FILE, "sens|old-auditor")):
        path = state / name
        recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
        old = [{k: v for k, v in {**r, "model": model}.items() if k != "candidate_lines"} for r in recs if r.get("city")]
        path.write_text("".join(json.dumps(r) + "\n" for r in old + recs), encoding="utf-8")
    code, text = _crawl(tmp_path, monkeypatch)
    assert code == 0 and "older candidate lines" not in text, text
    # the current model's own older records are still told
    path = state / C.AUDIT_DECISIONS_FILE
    recs = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]
    mine = next(r for r in recs if r["model"] == "sandbox-text-auditor" and r.get("city"))
    path.write_text(path.read_text(encoding="utf-8")
                    + json.dumps({k: v for k, v in mine.items() if k != "candidate_lines"}) + "\n", encoding="utf-8")
    code, text = _crawl(tmp_path, monkeypatch)
    assert "1 of " in text and "older candidate lines" in text, text
