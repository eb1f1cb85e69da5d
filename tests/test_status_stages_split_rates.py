"""``status`` after a ``--stages`` split run: a finished stage's rate is taken over its working span, not up to the
end of its process (walkthrough).

Before: ``run --stages model_caller``, then ``run --stages parser,scorer,aggregator``; the second process parsed
every answer in a fraction of a second, then wrote the report and export for seconds more, and ``status`` showed the
parser at the tasks of its last commits over the time from their start up to the process's final record (the
display rate falls while a stage completes nothing: right for a stage that stalls, wrong for one that has finished
its work), e.g. 0.48/s for 80 answers parsed in about 1 s. Now a finished stage's rate ends at its last commit.

The real CLI, the local OpenAI-compatible fake (started by the run for ``*.sandbox.invalid``) and the release's
GeoVerify trial table; the parser's working span is read independently of its progress records, from the creation
times of the tasks it put on the ``answers`` queue."""

from __future__ import annotations

import json
import re
import sqlite3

import pytest

from geoagent.cli import main

MODELS = "".join(f"""
[[models]]
name = "{m}"
provider = "openai"
model = "{m}"
base_url = "http://openai.sandbox.invalid/v1"
max_output_tokens = 300
concurrency = 32
rate = {{ requests = 1000, period_s = 1.0 }}
""" for m in ("fake-a", "fake-b"))


def test_status_after_a_stages_split_run_gives_the_parser_its_working_rate(tmp_path, monkeypatch, capsys,
                                                                            release_dir):
    monkeypatch.chdir(tmp_path)
    cfg = tmp_path / "split.toml"
    # n_boot at its default (1000): the report after the last parse takes seconds, the parse a fraction of one
    cfg.write_text(f'[campaign]\nname = "split"\nkind = "geoverify"\nseed = 1\n[paths]\nqueues = "{tmp_path}/queues"\n'
                   f'state = "{tmp_path}/state"\n[budget]\ncap_usd = 1.0\n{MODELS}\n[geoverify]\ntrials = "release"\n'
                   f'release_dir = "{release_dir}"\n', encoding="utf-8")
    assert main(["run", str(cfg), "--no-live", "--stages", "model_caller"]) == 0
    assert main(["run", str(cfg), "--no-live", "--stages", "parser,scorer,aggregator"]) == 0
    capsys.readouterr()
    assert main(["status", str(cfg)]) == 0
    text = capsys.readouterr().out
    m = re.search(r"^ +parser: (\d+\.\d\d)/s  done (\d+) ", text, re.M)
    assert m, text
    rate, done = float(m.group(1)), int(m.group(2))
    with sqlite3.connect(f"file:{tmp_path / 'queues' / 'split' / 'answers.sqlite'}?mode=ro", uri=True) as db:
        first, last, n = db.execute("SELECT min(created_at), max(created_at), count(*) FROM tasks").fetchone()
    assert n == done > 100, (n, done)
    final = json.loads((tmp_path / "state" / "split" / "progress.jsonl").read_text().splitlines()[-1])
    working_s, after_s = last - first, final["t"] - last  # the parse; the process's time after its last commit
    # the rate over the parse (all but its first commit's tasks, at most 64 of them, over first to last commit),
    # with half a second of slack: not the parse diluted by the seconds the process ran on after it
    assert rate >= 0.5 * done / (working_s + 0.5), (rate, done, working_s, after_s, text)


def test_a_finished_stage_of_one_commit_counts_from_its_first_lease_not_its_start():
    """A ``--stages`` process started beside the upstream one waits for work; a stage that then finishes its work
    in one commit showed it over the whole wait (80 tasks over 101 s: 0.79/s). Times fed explicitly (monotonic s)."""
    from geoagent.runtime.worker import StageStats

    st = StageStats("parser", started_at=0.0)
    st.note_leased(80, now=100.0)  # its first work, after 100 s of waiting for upstream
    st.record_done(80, now=101.0)
    st.in_flight -= 80
    assert st.rate_per_s(now=101.0) == 80.0
    st.finished = True
    for later in (101.0, 160.0, 1000.0):  # finished: its rate stays that of its working span
        assert st.rate_per_s(now=later) == 80.0
        assert st.as_dict(now=later)["rate_window_s"] == 1.0


def test_a_finished_stage_s_rate_counts_its_whole_working_span():
    """Review rev22b: a finished stage whose window held its first commit left that commit's tasks and the time
    before it out of the rate: 300 tasks committed at 0.5 s, then 1 at 10.5 s showed 0.1/s (the 1 task over 10 s);
    300 at 3.0 s and 1 at 3.001 s showed 1000/s. Now every task over the span from the first lease."""
    from geoagent.runtime.worker import StageStats

    def finished(name: str, leased_at: float, commits: list[tuple[int, float]]) -> StageStats:
        st = StageStats(name, started_at=0.0)
        st.note_leased(301, now=leased_at)
        for n, at in commits:
            st.record_done(n, now=at)
        st.finished = True
        return st

    late = finished("model_caller", 0.0, [(300, 0.5), (1, 10.5)])
    assert late.rate_per_s(20.0) == pytest.approx(301 / 10.5)
    assert late.as_dict(20.0)["rate_window_s"] == pytest.approx(10.5)
    close = finished("parser", 1.0, [(300, 3.0), (1, 3.001)])
    assert close.rate_per_s(20.0) == pytest.approx(301 / 2.001)
    running = StageStats("parser", started_at=0.0)  # still running: the window of its commits, falling with time
    running.note_leased(301, now=0.0)
    running.record_done(300, now=0.5)
    running.record_done(1, now=10.5)
    assert running.rate_per_s(20.0) == pytest.approx(1 / 19.5)
