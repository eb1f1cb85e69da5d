"""The `$GEOAGENT_RELEASE` override warning names only a folder the campaign reads.

Found by a fresh-clone walkthrough (session 15): README has a newcomer `export GEOAGENT_RELEASE=...` for
`my_verify.toml`; every later `run.py demo`, `status`, `dead` or `export` of the demo's filled-in configs then
printed `warning: ...demo_geoverify.toml: [paths] release_dir = '.../state/demo-crawl' is overridden by
$GEOAGENT_RELEASE = '...' (the environment wins); unset GEOAGENT_RELEASE to use the file's folder`, while the
campaign planned from `[geoverify] release_dir` (the same demo-crawl folder, which the variable does not
override): its `release import` line read `345 trials (verify_trials.csv), 6 sites`, the crawl's, not the release.
"""

from __future__ import annotations

from pathlib import Path

from geoagent.config import load_config, root_override_warnings
from geoagent.sandbox.launch import campaign_release_dir


def _config(tmp_path: Path, *, kind: str, task_release: bool, replay_under_release: bool = False) -> Path:
    crawl = tmp_path / "crawl"
    crawl.mkdir(exist_ok=True)
    if replay_under_release:
        model = ('name = "r"\nprovider = "replay"\nmodel = "recorded"\n'
                 f'replay = {{ path = "{crawl / "verify_raw.jsonl"}" }}\n')
    else:
        model = 'name = "m"\nprovider = "openai"\nmodel = "m"\nbase_url = "http://openai.sandbox.invalid/v1"\n'
    task = f'[{kind}]\n' + (f'release_dir = "{crawl}"\n' if task_release else "")
    p = tmp_path / f"{kind}.toml"
    p.write_text(f'[campaign]\nname = "c"\nkind = "{kind}"\ncontact = "you@example.org"\n[paths]\nqueues = "{tmp_path / "q"}"\n'
                 f'state = "{tmp_path / "s"}"\nrelease_dir = "{crawl}"\n[budget]\ncap_usd = 1.0\n'
                 f'[[models]]\n{model}{task}', encoding="utf-8")
    return p


def test_no_override_warning_when_the_task_section_names_the_folder_it_plans_from(tmp_path, monkeypatch):
    other = tmp_path / "release"
    other.mkdir()
    monkeypatch.setenv("GEOAGENT_RELEASE", str(other))
    for kind in ("geoverify", "geohint"):
        cfg = load_config(_config(tmp_path, kind=kind, task_release=True))
        # the folder the campaign plans from is the file's, whatever the variable says
        assert campaign_release_dir(cfg) == tmp_path / "crawl", kind
        assert root_override_warnings(cfg) == [], kind


def test_override_warning_stays_where_the_variable_changes_what_is_read(tmp_path, monkeypatch):
    other = tmp_path / "release"
    other.mkdir()
    monkeypatch.setenv("GEOAGENT_RELEASE", str(other))
    # no task-level key: the campaign plans from the variable's folder
    cfg = load_config(_config(tmp_path, kind="geoverify", task_release=False))
    assert campaign_release_dir(cfg) == other
    [line] = root_override_warnings(cfg)
    assert "[paths] release_dir" in line and "GEOAGENT_RELEASE" in line
    # a replay file under [paths] release_dir follows the variable, even with a task-level key
    cfg = load_config(_config(tmp_path, kind="geoverify", task_release=True, replay_under_release=True))
    assert cfg.replay_path("r") == other / "verify_raw.jsonl"
    [line] = root_override_warnings(cfg)
    assert "[paths] release_dir" in line
