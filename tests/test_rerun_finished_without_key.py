"""A re-run of a finished campaign without its key (walkthrough 24, item 6, left part).

A researcher re-ran a finished sandbox crawl in a new shell, without ``MAPILLARY_TOKEN``, to look at it again: the
run was refused (exit 2) naming the variable only. A run still needs the keys (it plans again, and a config changed
since may add work), but the refusal now says the campaign's last run ended complete and that ``status`` and
``export`` need no key; both are checked to work without it.
"""

from __future__ import annotations

from pathlib import Path

from geoagent.cli import main

CRAWL = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"


def test_a_refused_rerun_of_a_finished_crawl_says_status_and_export_need_no_key(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(CRAWL), "--no-live"]) == 0
    monkeypatch.delenv("MAPILLARY_TOKEN")
    capsys.readouterr()
    assert main(["crawl", str(CRAWL), "--no-live"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "MAPILLARY_TOKEN" in err and "Campaign crawl-sandbox's last run ended complete (20" in err, err
    assert "`run.py status CONFIG` and `run.py export CONFIG` need no key" in err, err
    assert "Nothing was run" not in err, err  # no other refusal joined it
    # what the sentence promises holds
    assert main(["status", str(CRAWL)]) == 0
    assert main(["export", str(CRAWL)]) == 0


def test_a_refused_first_run_has_no_such_sentence(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))
    monkeypatch.delenv("MAPILLARY_TOKEN", raising=False)
    assert main(["crawl", str(CRAWL), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "MAPILLARY_TOKEN" in err and "last run ended complete" not in err, err
