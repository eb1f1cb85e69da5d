"""``run.py --version`` names the package version and the rule versions a fresh run applies (newuser41).

The rule versions are what manifests and crawl records store and what CHANGELOG.md lists per component, so the
line is checked against pyproject.toml and against the newest entry of each CHANGELOG section it names.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from geoagent.cli import main

ROOT = Path(__file__).resolve().parent.parent


def _version_line(capsys) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code in (0, None)
    out, err = capsys.readouterr()
    assert err == ""
    return out.strip()


def test_version_line_names_the_package_version_of_pyproject(capsys):
    line = _version_line(capsys)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    assert line.startswith(f"geoagent {project['version']} (")
    assert line.endswith(")") and "\n" not in line


@pytest.mark.parametrize("name, section", [
    ("GeoHint geocoder rules", "## GeoHint geocoding rules"),
    ("trial builder", "## GeoVerify trial builder"),
    ("crawl sampler", "## Crawl site sampler"),
])
def test_each_rule_version_is_the_newest_changelog_entry_of_its_component(capsys, name, section):
    line = _version_line(capsys)
    version = int(re.search(rf"{name} (\d+)", line).group(1))
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    body = changelog.split(section, 1)[1].split("\n## ", 1)[0]
    newest = re.search(r"^\* \*\*(\d+)\*\*", body, flags=re.M)
    assert newest is not None, section
    assert int(newest.group(1)) == version, (section, line)


def test_the_verdict_and_answer_parser_versions_are_the_changelog_s_present_ones(capsys):
    line = _version_line(capsys)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    answer = re.search(r"answer parser (\d+)", line).group(1)
    verdict = re.search(r"verdict parser (\d+)", line).group(1)
    assert f"GeoHint answer parser **{answer}** and GeoVerify verdict parser **{verdict}** are the present" in changelog


def test_version_runs_from_the_command_line_without_a_config():
    done = subprocess.run([sys.executable, str(ROOT / "run.py"), "--version"], capture_output=True, text=True,
                          timeout=60, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"geoagent \S+ \(GeoHint geocoder rules \d+, .*queue schema \d+\)\n", done.stdout), done.stdout


def test_the_trial_builder_version_shown_for_the_paper_s_tau_is_the_one_a_build_campaign_records(tmp_path, capsys):
    from geoagent.config import load_config
    from geoagent.runtime.manifest import TRIAL_BUILDER_KEY, design_versions

    line = _version_line(capsys)
    shown = re.search(r"trial builder (\d+)(?: \((\d+) at tau_m >= 150 m\))?", line)
    recorded = {}
    for tau_m in (100, 150):
        cfg = tmp_path / f"gv{tau_m}.toml"
        cfg.write_text(f"""
[campaign]
name = "gv{tau_m}"
kind = "geoverify"
[paths]
queues = "{tmp_path.as_posix()}/queues"
state = "{tmp_path.as_posix()}/state"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
[geoverify]
release_dir = "{tmp_path.as_posix()}/release"
trials = "build"
tau_m = {tau_m}
""", encoding="utf-8")
        recorded[tau_m] = design_versions(load_config(cfg))[TRIAL_BUILDER_KEY]
    assert recorded[100] == int(shown.group(1))  # below 150 m: the newest
    assert recorded[150] == int(shown.group(2) or shown.group(1)), (line, recorded)
