"""A re-run of a GeoVerify or GeoHint campaign over a crawl's folder whose output changed says at its start (and its
dry run says) that the plan changed since the last run, and how: requests new, requests planned before no longer
in the plan.

Walkthrough: the researcher settled the crawl's review items (``[crawl.referenceability] review_verdicts``), re-ran
the crawl (its ladders and ``verify_trials.csv`` rebuilt, 0 model calls) and re-ran the campaigns over its folder
with no config change: GeoHint made 80 new model calls, GeoVerify 5, and neither said why at the start (nor did
the dry run); only GeoHint's end summary said "Left out of scoring: 80 ...". Sandbox crawl (local fakes, restored
for each test: ``sandbox_crawled``), the campaigns on the local OpenAI fake, through the CLI entry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from geoagent.cli import main
from geoagent.runtime.scope import read_plan_keys

CRAWL = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"

#: the line's shape: "plan changed since the last run: N requests new (...), M planned before no longer in the plan"
CHANGED = re.compile(r"plan changed since the last run: (\d+) requests? new \(not planned before\), (\d+) planned "
                     r"before no longer in the plan")


def _campaign(root: Path, crawl_dir: Path, kind: str) -> str:
    images = root / "state" / "images"
    task = (f'[geoverify]\ntrials = "release"\nimage_root = "{images}"\nn_boot = 0\n' if kind == "geoverify" else
            f'[geohint]\nimages = "release"\nconditions = ["baseline", "forced"]\nimage_root = "{images}"\n'
            '[geohint.geocoder]\nwikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
            'nominatim_url = "http://nominatim.sandbox.invalid"\n')
    p = root / f"{kind}.toml"
    p.write_text(f'''[campaign]
name = "{kind}-replan"
kind = "{kind}"
seed = 1
contact = "mailto:you@example.org"
[budget]
cap_usd = 1.0
[[models]]
name = "m"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
max_output_tokens = 300
rate = {{ requests = 1000, period_s = 1.0 }}
concurrency = 32
[paths]
release_dir = "{crawl_dir}"
{task}''', encoding="utf-8")
    return str(p)


def _settle_review_items(root: Path, crawl_dir: Path) -> None:
    """Decide every queued review item against the model's tier and re-run the crawl (0 model calls): its ladders
    and verify_trials.csv are rebuilt with the decided ratings."""
    queue = [json.loads(x) for x in (crawl_dir / "audit_review_queue.jsonl").read_text().splitlines() if x.strip()]
    assert queue
    rv = root / "review.csv"
    rv.write_text("site,qid,decision,reviewer,note\n" + "".join(
        f"{q['site']},{q['qid']},{0 if q['familiarity'] >= 3 else 5},ana,\n" for q in queue), encoding="utf-8")
    text = CRAWL.read_text(encoding="utf-8").replace(
        'model = "sandbox-text-auditor"\n', f'model = "sandbox-text-auditor"\nreview_verdicts = "{rv}"\n', 1)
    assert "review_verdicts" in text
    (root / "crawl_rv.toml").write_text(text, encoding="utf-8")
    assert main(["crawl", str(root / "crawl_rv.toml"), "--no-live"]) == 0


@pytest.mark.parametrize("kind", ["geoverify", "geohint"])
def test_a_rerun_over_a_changed_crawl_says_at_start_how_the_plan_changed(sandbox_crawled, capsys, monkeypatch, kind):
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # the campaign plans from the crawl's folder
    root, _ = sandbox_crawled  # the finished shipped crawl (run once per session, tests/_crawl_once.py)
    crawl_dir = root / "state" / "crawl-sandbox"
    cfg = _campaign(root, crawl_dir, kind)
    state = root / "state" / f"{kind}-replan"
    capsys.readouterr()
    # a first run and its dry run: nothing planned before, nothing to say
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    assert "plan changed" not in capsys.readouterr().out
    assert main(["run", cfg, "--no-live"]) == 0
    got = capsys.readouterr()
    assert "plan changed" not in got.out + got.err
    # a re-run over the same crawl: the same plan, nothing to say
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    assert "plan changed" not in capsys.readouterr().out
    assert main(["run", cfg, "--no-live"]) == 0
    got = capsys.readouterr()
    assert "plan changed" not in got.out + got.err and "this run: 0 new model calls" in got.out, got.out
    before = read_plan_keys(state)

    _settle_review_items(root, crawl_dir)
    capsys.readouterr()
    # the dry run says it, in its own report (stdout), before the calls it counts
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    dry = capsys.readouterr().out
    m = CHANGED.search(dry)
    assert m, dry
    lines = dry.splitlines()
    at = next(i for i, ln in enumerate(lines) if CHANGED.search(ln))
    assert at < next(i for i, ln in enumerate(lines) if ln.strip().startswith("total:")), dry
    n_new, n_gone = int(m.group(1)), int(m.group(2))
    # the run says the same at its start (stderr, one info line), before any call
    assert main(["run", cfg, "--no-live"]) == 0
    got = capsys.readouterr()
    said = [ln for ln in got.err.splitlines() if CHANGED.search(ln)]
    assert len(said) == 1 and said[0].startswith(f"info: campaign {kind}-replan: "), got.err
    assert CHANGED.search(said[0]).groups() == (str(n_new), str(n_gone)), (said[0], dry)
    # the counts are the two plans' difference (the plan recorded by each run, state/<campaign>/plan_keys.tsv)
    after = read_plan_keys(state)
    assert (n_new, n_gone) == (len(after - before), len(before - after)) and n_new > 0 and n_gone > 0
    # ... and what the run then did: every new request called (or answered from a stored response), every
    # dropped one's answer left out of scoring (the earlier runs ended complete)
    calls = int(re.search(r"this run: (\d+) new model calls", got.out).group(1))
    reused = re.search(r"; (\d+) answers? reused", got.out)
    cached = re.search(r"(\d+) answered from stored responses", dry)
    assert calls + (int(reused.group(1)) if reused else 0) == n_new or (
        cached and calls + int(cached.group(1)) == n_new), got.out
    assert f"Left out of scoring: {n_gone} stored answers of tasks the current plan no longer holds" in got.out
    # the next run plans what this one did: nothing to say again
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    assert "plan changed" not in capsys.readouterr().out
    assert main(["run", cfg, "--no-live"]) == 0
    got = capsys.readouterr()
    assert "plan changed" not in got.out + got.err


def test_the_plan_diff_counts_against_the_recorded_plan(tmp_path, monkeypatch):
    """Counts across chunk boundaries, and what the line says of the dropped tasks (still queued or answered)."""
    from geoagent.runtime import scope
    from geoagent.runtime.scope import PlanDiff, PlanRecorder

    assert PlanDiff.of(tmp_path) is None  # no record: a first run, nothing to compare with
    monkeypatch.setattr(scope, "PLAN_DIFF_CHUNK", 7)
    assert len(list(PlanRecorder(tmp_path).wrap((f"k{i}", {"model": "m"}) for i in range(100)))) == 100
    same = PlanDiff.of(tmp_path)
    assert len(list(same.wrap((f"k{i}", {}) for i in reversed(range(100))))) == 100
    assert (same.new, same.dropped, same.text()) == (0, 0, None)
    diff = PlanDiff.of(tmp_path)
    for i in range(50, 131):
        diff.see(f"k{i}")
    assert (diff.new, diff.dropped) == (31, 50)
    head = "plan changed since the last run: 31 requests new (not planned before), 50 planned before no longer in the plan"
    assert diff.text() == head + " (their stored answers, where they have one, are kept but not scored)"
    assert diff.text(never_queued=31, still_queued=50) == head + " (still queued: set aside unsent)"
    assert diff.text(never_queued=1, still_queued=20) == head.replace(
        "31 requests new (not planned before),",
        "31 requests new to the plan (not in the last run's plan; 1 new task, queued by no earlier run),") + (
        " (20 still queued: set aside unsent; the others' stored answers, where they have one, are kept but not scored)")
    # every one queued by an older plan (a condition removed, then restored): before, "31 requests new (not planned
    # before; 0 of them queued by no earlier run)" beside the config-change line's "no new task was planned"
    assert diff.text(never_queued=0, still_queued=50) == head.replace(
        "31 requests new (not planned before),",
        "31 requests back in the plan (not in the last run's plan, but each queued by an earlier run: no new task),"
    ) + " (still queued: set aside unsent)"
    grown = PlanDiff.of(tmp_path)
    for i in range(101):
        grown.see(f"k{i}")
    assert grown.text() == ("plan changed since the last run: 1 request new (not planned before), 0 planned before "
                            "no longer in the plan")
