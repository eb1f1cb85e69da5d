"""Defects a new user met in a first-hour walkthrough of the README (session 13, s13-walk).

Each test drives the real CLI or loader on a small campaign; no function is mocked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.runtime.queue import open_queue
from geoagent.runtime.store import open_campaign_state
from tests._model_harness import generic_campaign, model_table


def test_status_of_a_run_stopped_while_planning_is_not_complete(tmp_path, capsys):
    """A Ctrl-C while a first run was planning (after it had made its queue files, before its first task was
    queued) left empty queues and no recorded run; `status` then said "campaign complete: every queue drained"
    over a campaign that had done nothing (walkthrough: `requests: ... done 0`, "campaign complete")."""
    cfgp = generic_campaign(tmp_path, name="cut", n=5, cap_usd=1.0, models=model_table())
    cfg = load_config(cfgp)

    with open_campaign_state(cfg.name, root=cfg.state_root(), cap_usd=1.0):  # its state, opened before planning
        pass

    async def make() -> None:  # what the stopped run left: its queue files, empty
        for edge in ("requests", "responses"):
            await open_queue(cfg.queues_root(), cfg.name, edge, **cfg.queue_options()).close()

    anyio.run(make)
    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    assert "campaign complete" not in out, out
    assert "no task queued yet" in out and "re-run the same command" in out, out
    # the same command then plans and runs it: complete, and status says so
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    assert "done        5" in out and "campaign complete: every queue drained" in out, out


def test_geoverify_template_with_an_unknown_placeholder_is_refused(tmp_path):
    """A claim template with ``{tau}`` (for ``{tau_m}``) loaded and sent the literal text ``{tau}`` to the model on
    every request (walkthrough: the dry run planned 345 such requests without a word); GeoHint's templates refuse
    an unknown placeholder. Now the load names it and the two GeoVerify knows."""
    import pytest

    from geoagent.geoverify.prompt import DEFAULT_TEMPLATE_PATH, TemplateError, load_template

    default = DEFAULT_TEMPLATE_PATH.read_text(encoding="utf-8")
    assert load_template() == default  # the packaged template, with its JSON braces, loads as before
    typo = tmp_path / "claim.txt"
    typo.write_text(default.replace("{tau_m}", "{tau}"), encoding="utf-8")
    with pytest.raises(TemplateError) as err:
        load_template(typo)
    msg = str(err.value)
    assert "{tau}" in msg and "{candidate}" in msg and "{tau_m}" in msg, msg
    # a misspelt {candidate} is named too, not only "has no {candidate} placeholder"
    typo.write_text(default.replace("{candidate}", "{candidat}"), encoding="utf-8")
    with pytest.raises(TemplateError) as err:
        load_template(typo)
    assert "{candidat}" in str(err.value) and "no {candidate} placeholder" in str(err.value), str(err.value)
    # a template without {tau_m} (its own wording of the tolerance) is still the user's choice
    ok = tmp_path / "ok.txt"
    ok.write_text('Was this photo taken within 150 m of "{candidate}"? Answer {"verdict": "yes" or "no"}.',
                  encoding="utf-8")
    assert "{candidate}" in load_template(ok)


def test_missing_template_beside_the_config_warns_what_running_from_there_moves(tmp_path, monkeypatch):
    """The error for a relative template path found beside the config offered "or run the command from
    <config folder>" with no word that the campaign's queues/ and state/ (relative to the working directory by
    default) and its other relative paths move with it: followed from the project folder, a campaign that had
    run there started over in an empty state folder (every call paid again). The alternative now says so."""
    import pytest

    from geoagent.geoverify.prompt import TemplateError, load_template

    project, cfg_dir = tmp_path / "project", tmp_path / "project" / "cfg"
    cfg_dir.mkdir(parents=True)
    (cfg_dir / "my_claim.txt").write_text('Near "{candidate}"?', encoding="utf-8")
    monkeypatch.chdir(project)
    with pytest.raises(TemplateError) as err:
        load_template("my_claim.txt", source="cfg/pt.toml")
    msg = " ".join(str(err.value).split())
    assert f'write prompt_template = "{cfg_dir / "my_claim.txt"}"' in msg, msg
    assert f"or run the command from {cfg_dir} (then" in msg, msg
    assert "queues/ and state/" in msg and "[paths]" in msg, msg


def test_missing_demo_crawl_folder_says_run_the_demo(tmp_path, monkeypatch, capsys):
    """README's fresh-clone variant of my_verify.toml reads ``state/demo-crawl`` (what `run.py demo` writes);
    run before the demo, it was told to "run `python run.py crawl CRAWL_CONFIG` first ... see
    geoagent/configs/crawl_sandbox.toml", a crawl that writes another folder. It now names the demo."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # it would override [paths] release_dir
    cfgp = tmp_path / "my_verify.toml"
    cfgp.write_text(
        '[campaign]\nname = "my-verify"\nkind = "geoverify"\nseed = 1\n[budget]\ncap_usd = 1.00\n'
        '[[models]]\nname = "sandbox-gpt"\nprovider = "openai"\nmodel = "sandbox-gpt"\n'
        'base_url = "http://openai.sandbox.invalid/v1"\nmax_output_tokens = 300\n'
        '[geoverify]\ntrials = "release"\nimage_root = "state/images"\n'
        '[paths]\nrelease_dir = "state/demo-crawl"\n', encoding="utf-8")
    assert main(["run", str(cfgp), "--simulate"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "crawl output not found: state/demo-crawl/sites.csv" in err, err
    assert "run `python run.py demo` first" in err, err
    assert not (tmp_path / "state" / "my-verify").exists()


#: a child process that runs the real CLI (``run.py``'s ``entry``) and sends itself a real SIGINT the moment a
#: chosen module starts importing: a Ctrl-C that lands while the command is still loading (deterministic, where a
#: timer would race the interpreter's start-up)
_CTRL_C_AT_IMPORT = r"""
import importlib.abc, os, signal, sys
target = sys.argv[1]
class Hit(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target_=None):
        if name == target:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, Hit())
sys.argv = ["run.py"] + sys.argv[2:]
from geoagent.cli import entry
entry()
"""


def _ctrl_c_at_import(module: str, args: list[str], cwd) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-c", _CTRL_C_AT_IMPORT, module, *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_ctrl_c_while_the_command_loads_is_one_line_not_a_traceback(tmp_path):
    """A Ctrl-C in the first second of `run.py run CONFIG` (while it imported its modules) printed a
    KeyboardInterrupt traceback through ``_config_warnings_as_lines``; one a moment later, while the campaign
    was planned, printed "interrupted: forced exit" for a single press. Both now say in one line that the run
    was interrupted before it started (exit 130, as any interrupt)."""
    cfgp = generic_campaign(tmp_path, name="early", n=5, cap_usd=1.0, models=model_table())
    done = _ctrl_c_at_import("geoagent.config", ["run", str(cfgp), "--no-live"], tmp_path)
    assert done.returncode == 130, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr
    assert done.stderr.strip().startswith("interrupted (Ctrl-C) before the run started"), done.stderr
    # later, once the config is loaded and the campaign is being opened and planned: the same kind of line
    late = _ctrl_c_at_import("geoagent.engine", ["run", str(cfgp), "--no-live"], tmp_path)
    assert late.returncode == 130, (late.returncode, late.stderr)
    assert "forced exit" not in late.stderr and "Traceback" not in late.stderr, late.stderr
    assert late.stderr.strip().startswith("interrupted (Ctrl-C) before the run started"), late.stderr
    # nothing was queued or sent: the same command then runs the campaign from the start
    assert main(["run", str(cfgp), "--no-live"]) == 0


def test_single_bracket_models_table_says_how_to_write_it(tmp_path):
    """``[models]`` written for ``[[models]]`` (a first campaign file's commonest TOML slip) was refused with
    "models: expected an array, got a table" and no word of the fix; the message now gives the double brackets."""
    import pytest

    from geoagent.config import ConfigError

    cfgp = tmp_path / "one.toml"
    cfgp.write_text('[campaign]\nname = "one"\nkind = "generic"\nseed = 1\n[budget]\ncap_usd = 1.0\n'
                    '[models]\nname = "m"\nprovider = "simulated"\nmodel = "sim-1"\n'
                    '[generic]\nn_requests = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(cfgp)
    msg = str(err.value)
    assert "models: expected an array, got a table" in msg, msg
    assert "[[models]]" in msg, msg


def test_prompts_dir_with_one_edited_template_names_every_one_it_lacks(tmp_path, monkeypatch):
    """A user who copied only the template they edited (``my_prompts/geohint_forced.txt``) into
    ``geohint.prompts_dir`` was refused one missing file per try (first geohint_forced.txt, then
    geohint_context.txt, ...), with no word that the folder replaces the packaged one as a whole. The error now
    says so, names every packaged template the folder lacks and where to copy them from."""
    import pytest

    from geoagent.geohint.conditions import PROMPTS_DIR, PromptBook

    monkeypatch.chdir(tmp_path)
    mine = tmp_path / "my_prompts"
    mine.mkdir()
    (mine / "geohint_forced.txt").write_text((PROMPTS_DIR / "geohint_forced.txt").read_text(encoding="utf-8"),
                                            encoding="utf-8")
    book = PromptBook("my_prompts", source="gh.toml")
    with pytest.raises(FileNotFoundError) as err:
        book.render("forced", "Eiffel Tower")
    msg = " ".join(str(err.value).split())
    assert "geohint_context.txt not found in prompts_dir my_prompts" in msg, msg
    lacks = sorted(p.name for p in PROMPTS_DIR.glob("geohint_*.txt") if p.name != "geohint_forced.txt")
    assert f"lacks {len(lacks)} of the packaged templates ({', '.join(lacks)})" in msg, msg
    assert f"copy them from {PROMPTS_DIR}" in msg, msg
    # with them copied, it renders from the folder
    for name in lacks:
        (mine / name).write_text((PROMPTS_DIR / name).read_text(encoding="utf-8"), encoding="utf-8")
    assert "Eiffel Tower" in PromptBook("my_prompts", source="gh.toml").render("forced", "Eiffel Tower")


def test_cap_below_one_call_says_no_call_fits(tmp_path, capsys):
    """A cap below one call's worst-case reservation ended "budget exhausted: 5 requests not dispatched; raise
    [budget] cap_usd and re-run" after 0 calls, the same line as a cap reached after many calls; the summary now
    says that not one call fitted (the walkthrough's cap $0.001 against a $0.0088 reservation)."""
    cfgp = generic_campaign(tmp_path, name="tiny", n=5, cap_usd=1e-7, models=model_table())
    assert main(["run", str(cfgp), "--no-live"]) == 4
    out = " ".join(capsys.readouterr().out.split())
    assert "calls 0" in out and "budget exhausted: 5 requests not dispatched" in out, out
    assert "not one call fitted under the cap" in out, out
    # a cap reached after some calls keeps the plain line
    cfgp = generic_campaign(tmp_path, name="some", n=100, cap_usd=0.0002, models=model_table())
    assert main(["run", str(cfgp), "--no-live"]) == 4
    out = " ".join(capsys.readouterr().out.split())
    assert "budget exhausted:" in out and "calls 0" not in out and "not one call fitted" not in out, out


def test_models_rate_as_a_number_says_the_table_form(tmp_path):
    """``rate = 1000`` in a ``[[models]]`` entry (the form ``[hosts."name"]`` takes: ``rate = N`` with its own
    ``period_s``) was refused as "models[0].rate: expected a table, got 1000"; the message now shows the form."""
    import pytest

    from geoagent.config import ConfigError

    cfgp = tmp_path / "r.toml"
    cfgp.write_text('[campaign]\nname = "r"\nkind = "generic"\nseed = 1\n[budget]\ncap_usd = 1.0\n'
                    '[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim-1"\nrate = 1000\n'
                    '[generic]\nn_requests = 3\n', encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_config(cfgp)
    msg = str(err.value)
    assert "models[0].rate: expected a table, got 1000" in msg, msg
    assert "rate = { requests = 1000, period_s = 1.0 }" in msg, msg


def test_a_key_in_the_wrong_table_names_the_table_it_belongs_to(tmp_path):
    """``image_root`` written under ``[paths]`` (beside ``release_dir``, where README's fresh-clone example puts
    its other folder) was refused as "paths.image_root: unknown key" and ``max_output_tokens`` under ``[budget]``
    as "budget.max_output_tokens: unknown key", with no word of where they go; the message now names the table."""
    import pytest

    from geoagent.config import ConfigError

    def refused(extra_paths: str, extra_budget: str) -> str:
        cfgp = tmp_path / "w.toml"
        cfgp.write_text('[campaign]\nname = "w"\nkind = "generic"\nseed = 1\n'
                        f'[paths]\nstate = "state"\n{extra_paths}[budget]\ncap_usd = 1.0\n{extra_budget}'
                        '[[models]]\nname = "m"\nprovider = "simulated"\nmodel = "sim-1"\n'
                        '[generic]\nn_requests = 3\n', encoding="utf-8")
        with pytest.raises(ConfigError) as err:
            load_config(cfgp)
        return str(err.value)

    msg = refused('image_root = "state/images"\n', "")
    assert "paths.image_root: unknown key (a key of [geohint] or [geoverify], not of [paths])" in msg, msg
    msg = refused("", "max_output_tokens = 300\n")
    assert ("budget.max_output_tokens: unknown key (a key of each [[models]] entry or [geohint] or [geoverify], "
            "not of [budget])") in msg, msg
    # a misspelling keeps its did-you-mean
    msg = refused("", "capusd = 2\n")
    assert "budget.capusd: unknown key (did you mean 'cap_usd'?)" in msg, msg
