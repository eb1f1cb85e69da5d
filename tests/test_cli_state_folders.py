"""A run that never starts leaves no folder under state/; a dry run writes nothing there.

``run.py run`` opens the campaign (ledger, host board, data import) before it plans; a failure at that point
(a missing API key, a bad plan: exit 2) or a dry run (``--simulate``: README "dry run ... before any
spend") must not leave ``state/<campaign>/`` behind, while the state of a campaign that has run is kept.
"""

from __future__ import annotations

from pathlib import Path

from geoagent.cli import main

MODEL = """
[[models]]
name = "sim"
provider = "{provider}"
model = "sim-1"
{extra}
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 2.0
max_output_tokens = 100
"""


def _config(tmp: Path, name: str, *, kind: str = "generic", provider: str = "simulated", extra: str = "",
            tail: str = "[generic]\nn_requests = 5\n") -> str:
    p = tmp / f"{name}.toml"
    p.write_text(f'[campaign]\nname = "{name}"\nkind = "{kind}"\nseed = 2\ncontact = "ops@example.org"\n[budget]\ncap_usd = 1.0\n'
                 + MODEL.format(provider=provider, extra=extra) + tail, encoding="utf-8")
    return str(p)


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


def test_dry_run_writes_nothing_under_state(isolated_roots, capsys):
    cfg = _config(isolated_roots, "dry")
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    assert "dry run" in capsys.readouterr().out
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()


def test_missing_api_key_exit_2_leaves_no_folder(isolated_roots, monkeypatch, capsys):
    monkeypatch.delenv("GEOAGENT_TEST_ABSENT_KEY", raising=False)
    (isolated_roots / "state").mkdir()  # an existing state root stays; only the campaign folder must not appear
    cfg = _config(isolated_roots, "nokey", provider="openai",
                  extra='base_url = "https://api.example.invalid/v1"\napi_key_env = "GEOAGENT_TEST_ABSENT_KEY"')
    assert main(["run", cfg, "--no-live"]) == 2
    assert "GEOAGENT_TEST_ABSENT_KEY" in capsys.readouterr().err
    assert _tree(isolated_roots / "state") == [] and (isolated_roots / "state").is_dir()
    assert not (isolated_roots / "queues").exists()


def test_plan_failure_exit_2_leaves_no_folder(isolated_roots, capsys, monkeypatch):
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # it would win over the missing [paths] release_dir
    cfg = _config(isolated_roots, "badplan", kind="geohint",
                  tail=f'[paths]\nrelease_dir = "{isolated_roots / "no-release"}"\n'
                       '[geohint]\nconditions = ["baseline"]\nimages = "synthetic"\n')
    assert main(["run", cfg, "--no-live"]) == 2
    assert "sites.csv" in capsys.readouterr().err
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()


def test_state_of_a_campaign_that_ran_is_kept_by_a_dry_run(isolated_roots, capsys):
    cfg = _config(isolated_roots, "ran")
    assert main(["run", cfg, "--no-live"]) == 0
    before = _tree(isolated_roots / "state" / "ran")
    assert "campaign.sqlite" in before and "manifest.json" in before
    capsys.readouterr()
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    # the dry run read the kept queues: every planned request is done, so the run would call nothing
    # the total and the "planned earlier" line agree (fresh-user finding: "0 calls (0 already stored)")
    assert "total: 0 calls to make (5 already done by earlier runs)," in out
    assert "planned earlier: 5 planned request(s) already done by an earlier run keep their answers" in out
    assert set(before) <= set(_tree(isolated_roots / "state" / "ran"))


def test_unstarted_state_is_kept_while_another_process_holds_the_campaign(tmp_path):
    """The clean-up never removes a folder another process of the campaign is using (run lock held, or
    queue files present: a run started)."""
    import fcntl

    from geoagent.config import config_from_dict
    from geoagent.engine import discard_unstarted_state

    cfg = config_from_dict({"campaign": {"name": "busy"}, "budget": {"cap_usd": 1.0},
                            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")}})
    sd = cfg.state_dir()
    sd.mkdir(parents=True)
    (sd / "campaign.sqlite").write_bytes(b"x")
    with open(sd / "run.lock", "a+b") as other:  # a separate open file description: another holder
        fcntl.flock(other, fcntl.LOCK_SH)
        assert discard_unstarted_state(cfg, [sd]) is False and (sd / "campaign.sqlite").is_file()
    qd = tmp_path / "queues" / "busy"
    qd.mkdir(parents=True)
    (qd / "requests.sqlite").write_bytes(b"")
    assert discard_unstarted_state(cfg, [sd]) is False and (sd / "campaign.sqlite").is_file()
    (qd / "requests.sqlite").unlink()
    assert discard_unstarted_state(cfg, [sd, tmp_path / "state"]) is True
    assert not (tmp_path / "state").exists()


def test_export_of_a_campaign_that_never_ran_creates_nothing(isolated_roots, capsys):
    cfg = _config(isolated_roots, "never")
    assert main(["export", cfg]) == 1
    assert "has not run yet" in capsys.readouterr().err
    assert not (isolated_roots / "state").exists()


def test_a_run_waiting_for_the_lock_while_a_clean_up_removes_the_folder_locks_the_new_folder(tmp_path):
    """A run whose ``run_lock`` waited (shared) while another process's clean-up held the lock exclusively
    and removed the folder must end up holding the lock of the folder as it exists afterwards. Before, it
    held a lock on the unlinked ``run.lock``: a third process then took the new folder's lock exclusively,
    thought itself alone (expiring the live run's leases) and its own clean-up could remove the live run's
    folder."""
    import fcntl
    import shutil
    import threading

    from geoagent.engine import run_lock

    sd = tmp_path / "state" / "camp"
    sd.mkdir(parents=True)
    inside, leave = threading.Event(), threading.Event()
    seen: list[bool] = []

    def second_run() -> None:
        with run_lock(sd) as alone:
            seen.append(alone)
            inside.set()
            leave.wait(10)

    with open(sd / "run.lock", "a+b") as cleanup:  # the clean-up of a run that failed before its plan
        fcntl.flock(cleanup, fcntl.LOCK_EX)
        t = threading.Thread(target=second_run, daemon=True)
        t.start()
        assert not inside.wait(0.3)  # the second run waits for the clean-up
        shutil.rmtree(sd)
        fcntl.flock(cleanup, fcntl.LOCK_UN)
    try:
        assert inside.wait(10)
        assert (sd / "run.lock").is_file()
        # a third process cannot take the folder's lock exclusively: the second run holds it
        with open(sd / "run.lock", "a+b") as third:
            try:
                fcntl.flock(third, fcntl.LOCK_EX | fcntl.LOCK_NB)
                took = True
            except BlockingIOError:
                took = False
        assert took is False
    finally:
        leave.set()
        t.join(10)
    assert seen == [True]  # the second run found the new folder unused, so it is alone there


def test_state_of_a_campaign_whose_queues_were_deleted_is_kept_by_a_dry_run_and_a_failed_run(isolated_roots, monkeypatch, capsys):
    """Queues deleted, state kept (e.g. to start the work over): neither a dry run nor a run that fails
    before its plan (missing key) may remove the kept state (stored responses, spend)."""
    import shutil

    cfg = _config(isolated_roots, "kept")
    assert main(["run", cfg, "--no-live"]) == 0
    before = _tree(isolated_roots / "state" / "kept")
    assert "campaign.sqlite" in before
    shutil.rmtree(isolated_roots / "queues")
    capsys.readouterr()
    assert main(["run", cfg, "--simulate", "--no-live"]) == 0
    assert set(before) <= set(_tree(isolated_roots / "state" / "kept"))
    monkeypatch.delenv("GEOAGENT_TEST_ABSENT_KEY", raising=False)
    text = Path(cfg).read_text().replace('provider = "simulated"', 'provider = "openai"\nbase_url = "https://api.example.invalid/v1"\n'
                                         'api_key_env = "GEOAGENT_TEST_ABSENT_KEY"')
    Path(cfg).write_text(text)
    assert main(["run", cfg, "--no-live"]) == 2
    assert set(before) <= set(_tree(isolated_roots / "state" / "kept"))
