"""Walkthrough 31 (a new user building a benchmark with the crawl, then evaluating on it).

#1 A run started with a lower cap than the campaign's, while another run spent past it, said the running one "stops
   at $0.30 at the latest"; both then ended at $0.3481 of a $0.30 cap with no word why. The cap warning now says when
   spend is already above the new cap, and the summary and ``status`` say why spend is above the cap.
#4 A dry run whose model key variable sits on a ``.env`` line that does not parse stopped with one ``error:`` line
   and no report; ``run --help`` promises the whole report first, then ``exit 2: ...``, as for an unset variable.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import pytest

from _model_harness import generic_campaign, run_cli
from geoagent.config import SetupWarning, load_config
from geoagent.engine import over_cap_lines, run_campaign
from geoagent.providers.base import Usage
from geoagent.runtime.drift import changed_model_names, decide
from geoagent.runtime.ledger import Ledger
from geoagent.runtime.manifest import read_manifest
from geoagent.runtime.store import CampaignDB


# -- #1 ------------------------------------------------------------------------------------------------------


def test_the_summary_says_why_spend_is_above_a_lowered_cap(tmp_path):
    path = tmp_path / "campaign.sqlite"
    a = Ledger(CampaignDB(path), 0.60)
    try:
        for i in range(3):
            r = a.reserve(f"k{i}", 0.12, model="m")
            a.settle(r, Usage(1000, 100), 0.116)  # $0.348 settled in all
        with warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            b = Ledger(CampaignDB(path), 0.30)  # a second run of the campaign, its config's cap lowered
        said = " ".join(str(w.message) for w in got if issubclass(w.category, SetupWarning))
        assert "already spent or reserved $0.348" in said and "spend ends above $0.30" in said, said
        assert "at the latest" not in said
        lines = over_cap_lines(b.summary().to_json())
        assert len(lines) == 1, lines
        assert "spend $0.3480 is above the cap: the cap was lowered to $0.3000" in lines[0], lines
        b.db.close()
    finally:
        a.db.close()


@pytest.mark.parametrize("spend, says", [
    (dict(cap_usd=0.30, spent_usd=0.3481, unknown_usd=0.0, overrun_usd=0.0), True),
    (dict(cap_usd=0.30, spent_usd=0.20, unknown_usd=0.1481, overrun_usd=0.0), True),  # unknown outcome counts
    (dict(cap_usd=0.30, spent_usd=0.31, unknown_usd=0.0, overrun_usd=0.02), False),  # overruns explain it
    (dict(cap_usd=0.30, spent_usd=0.30, unknown_usd=0.0, overrun_usd=0.0), False),  # at the cap, not above
    (dict(cap_usd=0.30, spent_usd=0.10, unknown_usd=0.0), False),
])
def test_over_cap_lines_only_for_spend_the_overruns_do_not_explain(spend, says):
    assert bool(over_cap_lines(spend)) is says


# -- #4 ------------------------------------------------------------------------------------------------------


def _config(tmp: Path, var: str) -> Path:
    return generic_campaign(tmp, name="keyline", n=20, cap_usd=5.0, models=f"""
[[models]]
name = "paid"
provider = "openai"
model = "gpt-x"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "{var}"
price_input_usd_per_mtok = 2.0
price_output_usd_per_mtok = 8.0
max_output_tokens = 256
""")


def test_a_dry_run_reports_in_full_when_a_key_line_of_dotenv_does_not_parse(tmp_path, monkeypatch):
    var = "WALK31_BROKEN_LINE_KEY"
    monkeypatch.delenv(var, raising=False)
    dotenv = tmp_path / ".env"
    dotenv.write_text(f'{var} = "abc\n')  # the quote never closes: python-dotenv drops the line
    cfg = load_config(_config(tmp_path, var))
    with pytest.raises(ValueError, match=rf"{var}: .*\.env:1 sets it but cannot be parsed"):
        anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, dotenv_path=dotenv))
    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False, dotenv_path=dotenv))
    assert dry.exit_code == 2
    text = dry.summary()
    assert "total: 20 calls" in text  # the estimate is there
    warning = [ln for ln in text.splitlines() if "warning:" in ln and var in ln]
    assert len(warning) == 1 and "cannot be parsed" in warning[0] and "will refuse to start (exit 2)" in warning[0]
    assert text.splitlines()[-1] == ("  exit 2: `run` would refuse to start (an API key variable that cannot be "
                                     "read or used; see the warning above)")
    assert "abc" not in text  # never the value


# -- #2 ------------------------------------------------------------------------------------------------------
# A model's setting changed (its tasks all done) while another model was removed and a third added: the run said
# results "would mix both versions" and to start over under a new name, though no model's answers mix two settings.



def _model(name: str, tokens: int) -> str:
    return (f'\n[[models]]\nname = "{name}"\nprovider = "simulated"\nmodel = "sim-1"\nmax_output_tokens = {tokens}\n'
            f'concurrency = 4\nrate = {{ requests = 500, period_s = 1.0 }}\n')


def _run(path, capsys) -> tuple[int, str, str]:
    return run_cli(path, capsys)


def test_a_done_models_change_next_to_a_replaced_model_mixes_nothing(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="swap", n=6, models=_model("a", 512) + _model("b", 512))
    assert _run(p, capsys)[0] == 0
    # b replaced by c (another model id, so its requests are not b's stored ones), a's limit lowered
    p.write_text(p.read_text().replace('name = "b"\nprovider = "simulated"\nmodel = "sim-1"',
                                       'name = "c"\nprovider = "simulated"\nmodel = "sim-2"')
                 .replace("max_output_tokens = 512\nconcurrency",
                                                                         "max_output_tokens = 256\nconcurrency", 1))
    rc, dry, _ = run_cli(p, capsys, "--simulate")
    assert rc == 0
    earlier = [ln for ln in dry.splitlines() if "planned earlier:" in ln]
    assert len(earlier) == 1 and "would mix" not in earlier[0], dry
    assert ("(the call settings of 1 model(s) changed since the last run: every task of model a is done, so the change "
            "reaches none of the answers stored (a new [campaign] name runs it with the change): no model's results "
            "mix two settings)") in earlier[0], earlier
    rc, summary, err = _run(p, capsys)
    assert rc == 0, err
    assert "would mix" not in err and "warning" not in err, err
    assert ("every task of model a is done, so the change reaches none of its stored answers, which keep the old "
            "settings (a new [campaign] name runs them with it); the 6 tasks this run planned anew are asked under "
            "one setting each: no model's results mix two settings.") in err, err
    assert "results mix configurations" not in summary
    # walk31 #3: the summary's simulator note names the models of the config, not b (removed, its answers unscored)
    assert "Simulated answers: a, c answered from geoagent's simulator" in summary, summary
    man = read_manifest(tmp_path / "state" / "swap")
    assert "config_mix" not in man
    drift = man["runs"][-1]["config_drift"]
    assert drift["not_applied_to"] == ["a"] and drift["applied"] is True
    # written only for a model whose answers were made under more than one request setting: none here
    assert "answers_by_request_params" not in man
    # a's recorded entry keeps the setting its answers were made with, so a later run that gives a new tasks (only
    # n_requests raised now) still sees a's change and says the results mix, instead of "asked like the stored ones"
    assert [m["max_output_tokens"] for m in man["config"]["models"]] == [512, 512]
    assert [m["name"] for m in man["config"]["models"]] == ["a", "c"]
    p.write_text(p.read_text().replace("n_requests = 6", "n_requests = 8"))
    rc, summary, err = _run(p, capsys)
    assert rc == 0
    assert "models[0].max_output_tokens: 512 -> 256" in err and "so results would mix both versions" in err, err
    assert "a: 6 answers with max_output_tokens 512; 2 with max_output_tokens 256" in summary, summary


def test_a_changed_model_with_new_tasks_still_warns(tmp_path, capsys):
    p = generic_campaign(tmp_path, name="grow", n=6, models=_model("a", 512) + _model("b", 512))
    assert _run(p, capsys)[0] == 0
    p.write_text(p.read_text().replace("n_requests = 6", "n_requests = 9")
                 .replace("max_output_tokens = 512\nconcurrency", "max_output_tokens = 256\nconcurrency", 1))
    rc, summary, err = _run(p, capsys)
    assert rc == 0
    assert "so results would mix both versions" in err, err
    assert read_manifest(tmp_path / "state" / "grow")["config_mix"][-1]["changed"]["models[0].max_output_tokens"] \
        == [512, 256]


@pytest.mark.parametrize("keys, calls, expect", [
    (["models[0].max_output_tokens"], ["models"], {"a"}),
    (["models[1].params.temperature", "models[2]"], ["models"], {"b"}),  # models[2]: a whole entry (plan scope)
    (["models[0].max_output_tokens", "generic.prompt"], ["models", "generic"], None),  # a task section's key
    (["models[0].max_output_tokens"], ["models", "prompt:verify.txt"], None),  # a prompt template changed
    (["models[5].max_output_tokens"], ["models"], None),  # an index past the current models
    (["generic.n_requests"], ["generic"], set()),
])
def test_changed_model_names(keys, calls, expect):
    assert changed_model_names(calls, keys, ["a", "b", "c"]) == expect


def test_decide_per_model():
    common = dict(tasks_before=12, done_before=12, keys_text="k")
    keys = {"models[0].max_output_tokens": (512, 256)}
    # a model with no task answered before: all its answers use the new settings
    d = decide("x", ["models"], keys, added=6, left_before=0, changed_models={"a"}, by_model={"a": (0, 6)}, **common)
    assert not d.mixed and "model a had no task answered yet, so all its answers use the new settings" in d.lines[0]
    assert "not_applied_to" not in d.record
    # stored answers and work left: results mix (the totals' warning)
    d = decide("x", ["models"], keys, added=0, left_before=2, changed_models={"a"}, by_model={"a": (6, 2)}, **common)
    assert d.mixed and d.lines[0].startswith("warning:")
    # no per-model counts (a backend that cannot tell): decided from the totals, as before
    d = decide("x", ["models"], keys, added=6, left_before=0, changed_models={"a"}, by_model=None, **common)
    assert d.mixed


def test_the_sqlite_queue_counts_done_and_unfinished_tasks_per_model(tmp_path):
    from geoagent.runtime.queue import SUPERSEDED
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    async def main_() -> dict:
        q = SQLiteQueue(tmp_path / "requests.sqlite")
        try:
            await q.put_many([(f"a{i}", {"model": "a"}) for i in range(5)] + [(f"b{i}", {"model": "b"}) for i in range(3)]
                             + [("n0", {"prompt": "no model"}), ("n1", {"model": 7})])
            tasks = {t.key: t for t in await q.lease(10, 60.0)}
            await q.ack([tasks["a0"], tasks["a1"], tasks["b0"]])
            await q.dead_letter(tasks["a2"], SUPERSEDED + " no longer planned")  # set aside: no work left
            await q.dead_letter(tasks["b1"], "http 400")  # dead for a failure: work left
            await q.release([tasks[k] for k in ("a3", "a4", "b2", "n0", "n1")])
            first = await q.tasks_by_model()
            # a payload SQLite's JSON functions cannot read: the count falls back to reading payloads in Python
            import sqlite3
            import time

            with sqlite3.connect(tmp_path / "requests.sqlite") as raw:
                raw.execute("INSERT INTO tasks (key, payload, state, not_before, created_at) VALUES (?, ?, 0, ?, ?)",
                            ("bad", b"{not json", time.time(), time.time()))
            return first, await q.tasks_by_model()
        finally:
            await q.close()

    first, again = anyio.run(main_)
    assert first == {"a": (2, 2), "b": (1, 2), None: (0, 2)}  # (done, unfinished)
    assert again == {"a": (2, 2), "b": (1, 2), None: (0, 3)}


# -- #5 ------------------------------------------------------------------------------------------------------
# "Torino" added beside "Turin" at the same centre was crawled as a second city without a word.

SANDBOX_CRAWL = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"


def _crawl_config(tmp_path: Path, extra_city: str) -> Path:
    p = tmp_path / "crawl.toml"
    text = SANDBOX_CRAWL.read_text(encoding="utf-8").replace("\n[crawl.endpoints]\n",
                                                                 "\n" + extra_city + "\n[crawl.endpoints]\n", 1)
    p.write_text(text, encoding="utf-8")
    return p


def _city_warnings(path: Path) -> list[str]:
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        load_config(path)
    return [str(w.message) for w in got if "crawl.cities[" in str(w.message)]


def test_a_city_at_another_citys_centre_is_warned_about(tmp_path):
    same = _crawl_config(tmp_path, '[[crawl.cities]]\ncity = "Sandbox Town"\ncountry = "SB"\ncontinent = "EU"\n'
                                   'lat = 45.0712\nlon = 7.6869\n')
    said = _city_warnings(same)
    assert len(said) == 1, said
    assert ("crawl.cities[3] ('Sandbox Town') is 0.1 km from crawl.cities[0] ('Sandbox City'), closer than twice "
            "[crawl.sampler] radius_km (6 km): their site discs overlap") in said[0], said


def test_cities_farther_apart_than_two_sampling_radii_are_not(tmp_path):
    assert _city_warnings(SANDBOX_CRAWL) == []  # Sprawl Town is ~150 km from Sandbox City
    # 0.07 degrees of latitude (7.8 km) north: beyond 2 x 3 km
    far = _crawl_config(tmp_path, '[[crawl.cities]]\ncity = "North Town"\ncountry = "SB"\ncontinent = "EU"\n'
                                  'lat = 45.1402\nlon = 7.6869\n')
    assert _city_warnings(far) == []


def test_tasks_the_plan_brings_back_count_as_work_left_of_a_changed_model(tmp_path, capsys):
    """break31 #1: tasks set aside as no longer planned that the new plan holds again were requeued after the
    verdict, so a changed model's change was said to mix nothing, then 7 of its tasks went out under it next to 3
    answers made under the old setting."""
    priced = ('price_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\n')
    models = (_model("a", 400).replace("concurrency = 4", priced + "temperature = 0.0\nconcurrency = 1")
              + _model("b", 400).replace("concurrency = 4", priced + "concurrency = 1"))
    p = generic_campaign(tmp_path, name="revive", n=10, models=models, cap_usd=0.0003)
    _run(p, capsys)  # stopped by the cap with some of each model's tasks done, the rest queued
    p.write_text(p.read_text().replace("n_requests = 10", "n_requests = 3").replace("cap_usd = 0.0003", "cap_usd = 1.0"))
    _, _, err = _run(p, capsys)
    assert "set aside" in err, err  # the tasks past the 3 planned now go to dead, superseded
    p.write_text(p.read_text().replace("n_requests = 3", "n_requests = 10").replace("temperature = 0.0",
                                                                                      "temperature = 0.7"))
    rc, summary, err = _run(p, capsys)
    assert rc == 0
    assert "queued again" in err and "so results would mix both versions" in err, err
    assert "no model's results mix" not in err
    assert read_manifest(tmp_path / "state" / "revive")["config_mix"][-1]["changed"]["models[0].temperature"] \
        == [0.0, 0.7]


def test_a_dry_run_names_an_unset_key_beside_an_unreadable_one(tmp_path, monkeypatch):
    """break31 #4: the first unreadable variable dropped the list of unset ones from the report."""
    bad, unset = "WALK31_BAD_LINE_KEY", "WALK31_UNSET_KEY"
    for var in (bad, unset):
        monkeypatch.delenv(var, raising=False)
    dotenv = tmp_path / ".env"
    dotenv.write_text(f'{bad} = "abc\n')
    path = _config(tmp_path, bad)
    path.write_text(path.read_text() + f'''
[[models]]
name = "paid2"
provider = "openai"
model = "gpt-y"
base_url = "http://127.0.0.1:9/v1"
api_key_env = "{unset}"
price_input_usd_per_mtok = 2.0
price_output_usd_per_mtok = 8.0
max_output_tokens = 256
''')
    cfg = load_config(path)
    dry = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False, dotenv_path=dotenv))
    text = dry.summary()
    assert dry.exit_code == 2 and "total: 40 calls" in text
    assert any(unset in ln and "not set" in ln for ln in text.splitlines() if "warning:" in ln), text
    assert any(bad in ln and "cannot be parsed" in ln for ln in text.splitlines() if "warning:" in ln), text
    assert text.splitlines()[-1] == (f"  exit 2: `run` would refuse to start (variable {unset} not set; an API key "
                                     "variable that cannot be read or used; see the warnings above)")


def test_the_close_city_warning_is_only_for_a_crawl_campaign(tmp_path):
    """break31 #5: a generic campaign's file that also holds a [crawl] table (unused) got the crawl's warnings."""
    crawl = _crawl_config(tmp_path, '[[crawl.cities]]\ncity = "Sandbox Town"\ncountry = "SB"\ncontinent = "EU"\n'
                                    'lat = 45.0712\nlon = 7.6869\n')
    assert len(_city_warnings(crawl)) == 1
    generic = tmp_path / "generic.toml"
    generic.write_text(crawl.read_text().replace('kind = "crawl"', 'kind = "generic"', 1), encoding="utf-8")
    assert _city_warnings(generic) == []


def test_a_yaml_style_line_names_its_variable(tmp_path):
    """break34 config #11: ``KEY: value`` (the YAML habit) was reported as the variable not set."""
    import pytest

    from geoagent.secrets import lookup_secret

    env = tmp_path / ".env"
    env.write_text("ENVTEST_KEY: abcdef\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"ENVTEST_KEY: .*\.env:1 sets it but cannot be parsed .*NAME=value"):
        lookup_secret("ENVTEST_KEY", dotenv_path=env, environ={})
