"""Defects a new user met in a fresh-user walkthrough of the README (session 13, s13-walkf; follows
tests/test_walk_s13.py).

Each test drives the real CLI on a small campaign (the README's ``my_verify.toml`` against the local
OpenAI-compatible fake, or a generic campaign); no function is mocked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import anyio

from geoagent import constants as C
from geoagent.cli import main
from geoagent.config import load_config
from geoagent.runtime.queue import open_queue
from geoagent.runtime.store import open_campaign_state
from tests._model_harness import generic_campaign, model_table


def _my_verify(tmp: Path, release: Path | str | None, *, cap_usd: float = 1.0, prices: bool = False,
               provider: str = "openai", extra_geoverify: str = "") -> Path:
    """README's ``my_verify.toml`` (the local fake, concurrency 32), its queues and state under ``tmp``;
    ``release``: ``[paths] release_dir`` (None: none, the default folder); ``prices``: priced as a paid model
    (USD 2.5 / 10 per 1M tokens) so that a small cap stops it."""
    price = "price_input_usd_per_mtok = 2.5\nprice_output_usd_per_mtok = 10.0\n" if prices else ""
    model = ('provider = "openai"\nmodel = "sandbox-gpt"\nbase_url = "http://openai.sandbox.invalid/v1"\n'
             if provider == "openai" else 'provider = "simulated"\nmodel = "sim-1"\n')
    rel = f'release_dir = "{release}"\n' if release is not None else ""
    p = tmp / "my_verify.toml"
    p.write_text(
        f'[campaign]\nname = "my-verify"\nkind = "geoverify"\nseed = 1\n[budget]\ncap_usd = {cap_usd!r}\n'
        f'[[models]]\nname = "sandbox-gpt"\n{model}max_output_tokens = 300\n{price}concurrency = 32\n'
        'rate = { requests = 1000, period_s = 1.0 }\n'
        f'[geoverify]\ntrials = "release"\n{extra_geoverify}'
        f"[paths]\n{rel}queues = \"{tmp / 'queues'}\"\nstate = \"{tmp / 'state'}\"\n", encoding="utf-8")
    return p


def test_status_after_a_budget_stop_says_the_refusal_once(tmp_path, capsys, release_dir):
    """After a budget stop of README's my_verify.toml (32 calls in flight), `status` printed two nearly identical
    `last error: BudgetStop: budget exhausted: ...` lines: every in-flight task the cap refused recorded its own
    refusal, differing only in its own request's worst case ("this call $0.008748" / "$0.008762"). One line
    now, the differing amount shown as the range of the refused calls."""
    cfgp = _my_verify(tmp_path, release_dir, cap_usd=0.1, prices=True)
    assert main(["run", str(cfgp), "--no-live"]) == 4  # budget exhausted
    capsys.readouterr()
    cfg = load_config(cfgp)
    last = json.loads(Path(cfg.state_dir(), "progress.jsonl").read_text(encoding="utf-8").splitlines()[-1])
    caller = next(sd for sd in last["stages"] if sd["stage"] == "model_caller")
    # the record keeps each refusal (s14-usage: in budget_refusals, out of the stage's real errors)
    refusals = [e for e in caller["budget_refusals"] if "budget exhausted" in e]
    assert len(set(refusals)) >= 2, caller["budget_refusals"]
    assert not any("budget exhausted" in e for e in caller["last_errors"]), caller["last_errors"]
    amounts = sorted({float(m) for e in refusals for m in re.findall(r"this call \$([\d.]+)", e)})

    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "BudgetStop" in ln]
    assert len(lines) == 1, out
    line = lines[0]
    assert "last error: BudgetStop: budget exhausted: spent $" in line and "> cap $0.100000" in line, line
    if len(amounts) > 1:  # the information that differed: kept, as a range
        assert f"this call ${amounts[0]:.6f} to ${amounts[-1]:.6f}" in line, line
    assert f"(the last {len(refusals)} calls refused at the cap)" in line, line
    assert "  budget exhausted" in out


def test_missing_release_error_names_the_demo_crawl_alternative(tmp_path, monkeypatch, capsys):
    """The first error a fresh clone meets (README's my_verify.toml without ../shared) said where to get the
    release, not the alternative the README gives: run the demo, then the fresh-clone variant over its crawl
    folder state/demo-crawl."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(C.ENV_RELEASE_DIR, raising=False)
    cfgp = _my_verify(tmp_path, None)
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: GeoContext release file not found: ../shared/reference/geocontext/sites.csv"), err
    assert len(err.strip().splitlines()) == 1, err
    assert "run `python run.py demo` first" in err and 'release_dir = "state/demo-crawl"' in err, err
    # where the fresh-clone variant puts it (walk26 D3: the error said [paths] release_dir, which loses to
    # $GEOAGENT_RELEASE, and left out image_root, so the photos became placeholders)
    assert "under [geoverify] (or [geohint]), release_dir" in err and 'image_root = "state/images"' in err, err
    assert "[paths] release_dir loses to it" in err, err


def test_drift_note_is_not_printed_before_a_refusal(tmp_path, capsys, release_dir):
    """A dry run of a campaign whose config had changed printed `note: campaign ...: geoverify changed since its
    last run ...; the run says, once it has planned, ...` and then refused (a missing prompt template): the run
    never planned, the note was noise before the error. The refusal now comes alone; a dry run that proceeds
    still says it."""
    cfgp = _my_verify(tmp_path, release_dir, provider="simulated")
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    text = cfgp.read_text(encoding="utf-8")
    cfgp.write_text(text.replace('trials = "release"\n', 'trials = "release"\nprompt_template = "'
                                 f'{tmp_path / "my_claim.txt"}"\n'), encoding="utf-8")
    assert main(["run", str(cfgp), "--simulate", "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "cannot read GeoVerify prompt template" in err, err
    assert "changed since its last run" not in err, err
    assert main(["run", str(cfgp), "--no-live"]) == 2  # the real run: the same refusal, no note either
    err = capsys.readouterr().err
    assert "cannot read GeoVerify prompt template" in err and "changed since its last run" not in err, err

    # the template written: the dry run plans, and the note is there (before its report)
    (tmp_path / "my_claim.txt").write_text('Was this photo taken within {tau_m} m of "{candidate}"? Answer '
                                           '{"verdict": "yes" or "no"}.', encoding="utf-8")
    assert main(["run", str(cfgp), "--simulate", "--no-live"]) == 0
    cap = capsys.readouterr()
    assert "note: campaign my-verify: geoverify changed since its last run (geoverify.prompt_template" in cap.err, cap.err


def test_export_of_a_run_stopped_while_planning_exits_1(tmp_path, capsys):
    """`export` of a campaign whose first run was stopped while planning (queue files, no task, no recorded run)
    wrote 0-row results tables, exit 0, no warning; README: `export` of a campaign that never ran exits 1. It
    now says what `status` says (no task queued yet, re-run the same command) and writes nothing."""
    cfgp = generic_campaign(tmp_path, name="cut", n=5, cap_usd=1.0, models=model_table())
    cfg = load_config(cfgp)
    with open_campaign_state(cfg.name, root=cfg.state_root(), cap_usd=1.0):  # its state, opened before planning
        pass

    async def make() -> None:  # what the stopped run left: its queue files, empty
        for edge in (C.EDGE_REQUESTS, "responses"):
            await open_queue(cfg.queues_root(), cfg.name, edge, **cfg.queue_options()).close()

    anyio.run(make)
    before = {p.name for p in Path(cfg.state_dir()).rglob("*")}
    assert main(["export", str(cfgp)]) == 1
    cap = capsys.readouterr()
    err = " ".join(cap.err.split())
    assert "no task queued yet" in err and "stopped" in err and "re-run the same command" in err, err
    assert "nothing to export" in err, err
    assert "rows ->" not in cap.out, cap.out
    assert {p.name for p in Path(cfg.state_dir()).rglob("*")} == before  # no 0-row table written
    # the same command then runs it, and export exports it
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["export", str(cfgp)]) == 0
    assert "results: 5 rows ->" in capsys.readouterr().out


def test_export_of_queues_remade_after_earlier_runs_still_exports(tmp_path, capsys):
    """The refusal above is for a campaign with no recorded run: a campaign that ran, lost its queue files and
    was stopped while a new run planned (empty queue files again) still exports what it stored."""
    import shutil

    cfgp = generic_campaign(tmp_path, name="again", n=4, cap_usd=1.0, models=model_table())
    cfg = load_config(cfgp)
    assert main(["run", str(cfgp), "--no-live"]) == 0
    shutil.rmtree(Path(cfg.queues_root()) / cfg.name)

    async def make() -> None:
        for edge in (C.EDGE_REQUESTS, "responses"):
            await open_queue(cfg.queues_root(), cfg.name, edge, **cfg.queue_options()).close()

    anyio.run(make)
    capsys.readouterr()
    assert main(["export", str(cfgp)]) == 0
    assert "results: 4 rows ->" in capsys.readouterr().out
