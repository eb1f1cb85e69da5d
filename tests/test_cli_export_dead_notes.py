"""``export`` of an unfinished campaign warns with the pending counts; ``dead`` on a campaign that never ran
says it was not started (walkthrough defects). The real CLI on a generic campaign with the simulated model."""

from __future__ import annotations

from geoagent.cli import main
from tests._model_harness import generic_campaign, model_table


def test_export_of_an_unfinished_campaign_warns_with_the_pending_counts(tmp_path, capsys):
    cfgp = generic_campaign(tmp_path, name="half", n=25, cap_usd=1.0, models=model_table())
    # only the model caller runs: the 25 responses wait for the collector, the campaign is not finished
    assert main(["run", str(cfgp), "--no-live", "--stages", "model_caller"]) == 0
    capsys.readouterr()
    assert main(["export", str(cfgp)]) == 0  # exit code as documented: the command succeeded
    cap = capsys.readouterr()
    assert cap.err.strip() == ("warning: campaign half is not finished (responses ready 25 leased 0): the export "
                               "covers only the work done so far; re-run the campaign, then export again")
    # finished: the same export has no warning
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["export", str(cfgp)]) == 0
    cap = capsys.readouterr()
    assert "warning" not in cap.err and "results: 25 rows" in cap.out


def test_dead_on_a_campaign_that_never_ran_says_not_started_and_creates_nothing(tmp_path, capsys):
    cfgp = generic_campaign(tmp_path, name="never", n=5, cap_usd=1.0, models=model_table())
    assert main(["dead", str(cfgp)]) == 0
    cap = capsys.readouterr()  # on stderr since session 36: stdout lists dead tasks only, one a line (cli36 #11)
    assert cap.out == "" and cap.err.strip() == "campaign never not started (no queues yet): nothing dead-lettered"
    assert main(["dead", str(cfgp), "--requeue"]) == 0
    assert capsys.readouterr().err.strip() == ("campaign never not started (no queues yet): nothing dead-lettered; "
                                               "nothing to requeue")
    assert main(["status", str(cfgp)]) == 0
    assert "no queues yet (campaign not started)" in capsys.readouterr().out
    assert not (tmp_path / "queues" / "never").exists() and not (tmp_path / "state" / "never").exists()
    # an --edge typo is still refused with the campaign's edge names
    assert main(["dead", str(cfgp), "--edge", "reqests"]) == 2
    assert "has no queue reqests; its queues are: requests, responses" in capsys.readouterr().err
