"""A fresh-user walkthrough of main (session 12): messages and README points, one test per point found."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from geoagent.cli import main
from _docs import docs_text

REPO = Path(__file__).resolve().parents[1]

VERIFY = """\
[campaign]
name = "{name}"
kind = "geoverify"
seed = 1

[budget]
cap_usd = 1.0

[[models]]
name = "sandbox-gpt"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
max_output_tokens = 300

[geoverify]
trials = "release"
{extra}
"""


@pytest.fixture
def elsewhere(tmp_path, monkeypatch, release_dir):
    """A config folder ``tmp_path/cfg`` and a working directory ``tmp_path/cwd`` apart from it."""
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


# -- 1. a prompt template beside the config --------------------------------------------------------------


def test_geoverify_prompt_template_not_found_names_key_file_and_folder_and_the_fix(elsewhere, capsys):
    # before: "error: cannot read GeoVerify prompt template my_claim.txt: [Errno 2] No such file or directory:
    # 'my_claim.txt'": no key, no config file, no word on what the path is relative to
    cfg_dir = elsewhere / "cfg"
    (cfg_dir / "my_claim.txt").write_text("Was this photo taken within {tau_m} m of {candidate}? yes or no\n")
    cfgp = cfg_dir / "pt.toml"
    cfgp.write_text(VERIFY.format(name="pt", extra='prompt_template = "my_claim.txt"'))
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = capsys.readouterr().err
    assert f"geoverify.prompt_template in {cfgp}" in err, err
    assert f"looked for {elsewhere / 'cwd' / 'my_claim.txt'}" in err, err
    assert "taken from the directory the command runs in" in err and "not from the config file's folder" in err, err
    fix = f'prompt_template = "{cfg_dir / "my_claim.txt"}"'
    assert fix in err, err
    # the fix works as written
    cfgp.write_text(VERIFY.format(name="pt", extra=fix))
    assert main(["run", str(cfgp), "--simulate"]) == 0, capsys.readouterr().err


def test_geohint_prompts_dir_not_found_names_key_file_and_folder(elsewhere, capsys):
    import shutil

    shutil.copytree(REPO / "geoagent" / "prompts", elsewhere / "cfg" / "my_prompts")
    cfgp = elsewhere / "cfg" / "pd.toml"
    text = (REPO / "geoagent" / "configs" / "geohint_sandbox.toml").read_text(encoding="utf-8")
    text = text.replace('images = "synthetic"', 'images = "synthetic"\nsites = ["tokyo_shibuya"]\nprompts_dir = "my_prompts"')
    cfgp.write_text(text)
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = capsys.readouterr().err
    assert f"geohint.prompts_dir in {cfgp}" in err, err
    assert "not from the config file's folder" in err, err
    assert f'prompts_dir = "{elsewhere / "cfg" / "my_prompts"}"' in err, err


def test_readme_names_prompt_template_where_it_lists_campaign_keys():
    text = docs_text()
    conf = text[text.index("\n# Campaign configuration\n"):text.index("\n# Where things go\n")]
    assert 'prompt_template = "my_claim.txt"' in conf and "prompts_dir" in conf
    assert "not from the config file's folder" in conf


# -- 2. unknown values in lists get a suggestion ---------------------------------------------------------


def test_unknown_site_id_suggests_the_close_one_and_names_the_config(elsewhere, capsys):
    # before: "error: [geohint] sites: unknown site id(s) ['athens_kotza'] (not in .../sites.csv)"
    cfgp = elsewhere / "cfg" / "st.toml"
    text = (REPO / "geoagent" / "configs" / "geohint_sandbox.toml").read_text(encoding="utf-8")
    cfgp.write_text(text.replace('images = "synthetic"', 'images = "synthetic"\nsites = ["tokyo_shibuya", "athens_kotza"]'))
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {cfgp}: geohint.sites: unknown site id 'athens_kotza' "
                          "(did you mean 'athens_kotzia'?)"), err


def test_unknown_stage_suggests_the_close_one(tmp_path, capsys):
    # before: "error: unknown stage model_calr; this campaign has: ..."
    from _model_harness import generic_campaign, model_table

    cfgp = generic_campaign(tmp_path, name="stg", n=3, models=model_table())
    assert main(["run", str(cfgp), "--stages", "model_calr", "--no-live"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: unknown stage model_calr (did you mean 'model_caller'?); this campaign has: "), err


def test_unknown_condition_suggests_the_close_one(tmp_path):
    from geoagent.campaigns import register_all_sections
    from geoagent.config import ConfigError, load_config

    register_all_sections()  # as the CLI does before loading (else the test depends on which ran before it)

    cfgp = tmp_path / "cond.toml"
    text = (REPO / "geoagent" / "configs" / "geohint_sandbox.toml").read_text(encoding="utf-8")
    cfgp.write_text(re.sub(r"(?m)^conditions = .*$", 'conditions = ["baseline", "forced_wran"]', text))
    with pytest.raises(ConfigError) as exc:
        load_config(cfgp)
    assert str(exc.value).startswith(f"{cfgp}: geohint.conditions: unknown GeoHint condition 'forced_wran' "
                                     "(did you mean 'forced_warn'?)"), exc.value


# -- 3. run.py outside the environment -------------------------------------------------------------------


def test_run_py_without_its_dependencies_says_what_to_install_in_one_line():
    # before: a ModuleNotFoundError traceback ("No module named 'anyio'"). -S: no site-packages, so no
    # third-party package is importable whatever this machine has installed
    r = subprocess.run([sys.executable, "-S", "-I", str(REPO / "run.py"), "--help"], capture_output=True,
                       text=True, timeout=60, cwd=REPO)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("error: geoagent needs the package 'aiohttp'"), lines[0]
    assert ". .venv/bin/activate" in lines[0] and "pip install -q -e ." in lines[0], lines[0]


def test_run_py_dependency_list_matches_pyproject():
    import runpy

    ns = runpy.run_path(str(REPO / "run.py"), run_name="not_main")
    deps = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    names = [re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].strip() for d in deps]
    assert list(ns["DEPENDENCIES"]) == names


def test_readme_shows_the_missing_package_line():
    text = docs_text()
    assert "error: geoagent needs the package 'aiohttp'" in " ".join(text.split())


# -- 4, 6. the README's own-campaign example, run as written; what "reused" counts --------------------------


def _readme_own_campaign() -> str:
    text = docs_text()
    at = text.index("\n# Running campaigns\n")
    m = re.search(r"```toml\n(# my_verify\.toml.*?)```", text[at:], re.S)
    assert m, "README's own-campaign example (a ```toml block starting '# my_verify.toml') not found"
    assert len(m.group(1).strip().splitlines()) <= 20
    return m.group(1)


def test_readme_own_campaign_example_runs_and_a_rerun_says_what_it_reused(release_dir, tmp_path, capsys,
                                                                         monkeypatch):
    block = _readme_own_campaign()
    text = docs_text()
    at = text.index("\n# Running campaigns\n")
    assert "python run.py run my_verify.toml --simulate" in text[at:at + 6000]
    assert re.search(r"\npython run\.py run my_verify\.toml +#", text[at:at + 6000])
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))  # what ../shared/reference/geocontext is in a checkout
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    (tmp_path / "my_verify.toml").write_text(block)
    assert main(["run", "my_verify.toml", "--simulate"]) == 0
    dry = capsys.readouterr().out
    # the estimate is model-call time only, and says the whole run takes longer (the sandbox GeoHint run: about
    # 10 s of calls, 1.5-2.5 min in all)
    assert "of model calls (model-call time only: excludes geocoding and other stages, so the whole run takes " \
           "longer)" in dry, dry
    assert main(["run", "my_verify.toml", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"campaign my-verify: complete", out), out
    n = int(re.search(r"planned (\d+) requests", out).group(1))
    assert f"this run: {n} new model calls; 0 answers reused (stored by an earlier run, used instead of a call)" in out
    # a no-op re-run says the answers are there from before, not just "0 reused"
    assert main(["run", "my_verify.toml", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert ("this run: 0 new model calls; 0 answers reused (stored by an earlier run, used instead of a call); "
            f"{n} requests done by earlier runs") in out, out


def test_readme_own_campaign_says_it_needs_the_release_and_names_the_placeholder_warning():
    """A fresh clone has no ../shared: the example must say so before its block, and the expected warning."""
    text = docs_text()
    at = text.index("\n# Running campaigns\n")
    head = text[at:text.index("# my_verify.toml", at)]
    assert "GEOAGENT_RELEASE" in head and "fresh clone" in head, head[-800:]
    flat = " ".join(text[at:at + 6000].split())
    assert "17 of 17 images of the planned GeoVerify requests have no file under geoverify.image_root" in flat
    assert "placeholder pixels" in flat and "not an error" in flat


def _readme_fresh_clone_variant() -> str:
    text = docs_text()
    at = text.index("\n# Running campaigns\n")
    m = re.search(r"```toml\n(image_root = \"state/images\".*?)```", text[at:at + 8000], re.S)
    assert m, "README's fresh-clone variant (a ```toml block starting 'image_root = \"state/images\"') not found"
    return m.group(1)


def test_readme_own_campaign_fresh_clone_variant_runs_after_the_demo(tmp_path, tmp_path_factory, capsys, monkeypatch):
    """No release anywhere: the demo, then the README's example plus its fresh-clone lines, run as written."""
    from _fresh_demo import copy_fresh_demo, fresh_demo

    for var in ("GEOAGENT_RELEASE", "GEOAGENT_QUEUES", "GEOAGENT_STATE"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "deep" / "clone"  # no ../shared beside it
    work.mkdir(parents=True)
    monkeypatch.chdir(work)
    # the example as first written: no release on a fresh clone (the walkthrough's error)
    (work / "my_verify.toml").write_text(_readme_own_campaign())
    assert main(["run", "my_verify.toml", "--simulate"]) == 2
    assert "GeoContext release file not found" in capsys.readouterr().err
    (work / "my_verify.toml").write_text(_readme_own_campaign() + _readme_fresh_clone_variant())
    cfg = tomllib.loads((work / "my_verify.toml").read_text())
    # under [geoverify]: a task section's release_dir wins over $GEOAGENT_RELEASE (walkthrough 21 #8: [paths] lost)
    assert cfg["geoverify"]["release_dir"] == "state/demo-crawl" and cfg["geoverify"]["image_root"] == "state/images"
    # before the demo the crawl folder is missing, and the message says so
    assert main(["run", "my_verify.toml", "--simulate"]) == 2
    assert "crawl output not found: state/demo-crawl/sites.csv" in capsys.readouterr().err
    # the demo, finished (exit 0), in this folder: a copy of this test run's one demo (tests/_fresh_demo.py)
    copy_fresh_demo(fresh_demo(tmp_path_factory), work)
    capsys.readouterr()
    assert main(["run", "my_verify.toml", "--simulate"]) == 0
    dry = capsys.readouterr().out
    assert "planned 345 requests" in dry, dry
    assert main(["run", "my_verify.toml", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "campaign my-verify: complete" in out and "planned 345 requests" in out, out
    assert "placeholder pixels" not in out, out
    assert "this run: 345 new model calls" in out, out


def test_readme_documents_the_this_run_line():
    text = docs_text()
    flat = " ".join(text.split())
    assert ("this run: 0 new model calls; 0 answers reused (stored by an earlier run, used instead of a call); 170 "
            "requests done by earlier runs") in flat


# -- 5. timings the README gives ------------------------------------------------------------------------


def test_readme_demo_time_and_sandbox_run_time_are_given():
    text = docs_text()
    # before: "10-15 s" for a demo timed at ~20 s on a loaded 2-core machine; no whole-run time for the sandbox
    # GeoHint run, whose dry run says "about 10 s of model calls" while it takes ~1.5-2.5 min
    assert "10-15 s wall-clock" not in text and "`python run.py demo` (15-25 s wall-clock" in text
    at = text.index("python run.py run geoagent/configs/geohint_sandbox.toml")
    # a time or a range of times (walk46 #12: "about 1 min (up to 4 on a busy machine)", measured 41-50 s)
    assert re.search(r"takes about [\d.]+(-[\d.]+)? (s|min)", text[at:at + 1500]), text[at:at + 1500]


def test_run_campaign_unknown_stage_suggests_the_close_one(tmp_path, monkeypatch):
    """The engine's own check (``run_campaign(only_stages=...)``, behind the CLI's) suggests as the CLI does."""
    import anyio

    from _model_harness import generic_campaign, model_table
    from geoagent.config import load_config
    from geoagent.engine import run_campaign

    monkeypatch.chdir(tmp_path)
    cfg = load_config(generic_campaign(tmp_path, name="stg2", n=2, models=model_table()))
    with pytest.raises(KeyError) as exc:
        anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, only_stages=["colector"]))
    assert "'colector' (did you mean 'collector'?)" in str(exc.value), exc.value
