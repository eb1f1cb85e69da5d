"""Dry-run (``--simulate``) findings of a fresh-user walkthrough (findings 2-5; finding 1: test_config_paid_prices).

2. ``--help`` promises exit 2 when the dry run predicts that ``run`` refuses to start; with an API key variable
   (or a crawl's MAPILLARY_TOKEN) unset it said so and exited 0. It now exits 2 after its whole report, whose
   last line says why.
3. After a config change, the dry run of a finished campaign counted every planned request again at the new
   settings ("678 calls (0 already stored), $0.7366 expected ... OVER cap") while the run made 0 calls: a task
   planned earlier keeps the request it was queued with. It now counts what the run would do.
4. An OpenAI entry without ``base_url`` silently called api.openai.com with no key: the dry run and the run
   now name the API and the key variable (OPENAI_API_KEY), and the missing-key check covers it.
5. A ``[hosts."typo.example.org"]`` section no part of the campaign calls was accepted silently (its limits
   applied to nothing): it now warns at load, naming the hosts used and the closest one.

Campaigns run for real through the engine with the simulated provider (no network); figures are hand-counted.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import anyio
import pytest

from geoagent import constants as C
from geoagent.cli import build_parser, main
from geoagent.config import ConfigWarning, config_from_dict, load_config, provider_settings
from geoagent.engine import EXIT_COMPLETE, EXIT_CONFIG, run_campaign
from geoagent.runtime.queue import open_queue
from _made_up_keys import made_up_key


@pytest.fixture
def no_keys(isolated_roots, monkeypatch):
    for var in ("WALK_KEY", "OPENAI_API_KEY", "MAPILLARY_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))  # no .env fallback either
    return isolated_roots


def _write(root: Path, name: str, model: str, *, n: int = 4, extra: str = "") -> Path:
    p = root / f"{name}.toml"
    p.write_text(f'[campaign]\nname = "{name}"\nkind = "generic"\nseed = 3\n[budget]\ncap_usd = 1.0\n'
                 f'[generic]\nn_requests = {n}\n[[models]]\n{model}{extra}', encoding="utf-8")
    return p


PAID_LOCAL = ('name = "gpt"\nprovider = "openai"\nmodel = "gpt-x"\nbase_url = "http://127.0.0.1:9/v1"\n'
              'api_key_env = "WALK_KEY"\nprice_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 2.0\n')
SIM = ('name = "sim"\nprovider = "simulated"\nmodel = "sim-1"\nprice_input_usd_per_mtok = 1.0\n'
       'price_output_usd_per_mtok = 2.0\nmax_output_tokens = 256\n')


# -- 2. exit 2 when the dry run predicts a refusal ---------------------------------------------------------


def test_dry_run_with_a_missing_key_prints_the_report_then_exits_2(no_keys, capsys, monkeypatch):
    cfg = _write(no_keys, "walk2", PAID_LOCAL)
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == EXIT_CONFIG
    lines = capsys.readouterr().out.rstrip("\n").splitlines()
    assert any("warning: API key variable not set" in ln and "WALK_KEY (model gpt)" in ln for ln in lines)
    assert any(ln.startswith("    total: 4 calls") for ln in lines)  # the whole estimate is still there
    assert lines[-1] == "  exit 2: `run` would refuse to start (variable WALK_KEY not set; see the warning above)"
    # the real run refuses too (exit 2), so the prediction holds
    assert main(["run", str(cfg), "--no-live"]) == EXIT_CONFIG
    assert "WALK_KEY" in capsys.readouterr().err
    # with the key set, the dry run ends 0 and has no exit line
    monkeypatch.setenv("WALK_KEY", made_up_key("sk-", 25, seed="walk-n20"))
    assert main(["run", str(cfg), "--simulate", "--no-live"]) == EXIT_COMPLETE
    assert "exit 2" not in capsys.readouterr().out


def test_help_says_the_dry_run_exits_2_after_the_report():
    text = build_parser(prog="run.py").format_help()
    assert "prints its whole report first, then a last line `exit 2: ...`" in " ".join(text.split())
    run_help = build_parser(prog="run.py")._subparsers._group_actions[0].choices["run"].format_help()
    assert "exits 2 (after the report)" in " ".join(run_help.split())


# -- 3. a finished campaign after a config change ----------------------------------------------------------


def _run(cfg, **kw):
    return anyio.run(lambda: run_campaign(cfg, live=False, handle_signals=False, **kw))


def test_finished_campaign_after_a_config_change_dry_runs_what_the_run_does(no_keys):
    path = _write(no_keys, "walk3", SIM, n=4)
    first = _run(load_config(path))
    assert (first.exit_code, first.process_calls) == (EXIT_COMPLETE, 4)
    # the user's change: max_output_tokens 256 -> 300 (every request key changes)
    path.write_text(path.read_text().replace("max_output_tokens = 256", "max_output_tokens = 300"))
    cfg = load_config(path)
    dry = _run(cfg, simulate=True)
    text = dry.summary()
    assert dry.exit_code == EXIT_COMPLETE
    assert "total: 0 calls to make (4 already done by earlier runs), $0.0000 expected, worst $0.0000" in text, text
    assert "planned earlier: 4 planned request(s) already done by an earlier run keep their answers" in text
    again = _run(cfg)  # and the run indeed calls nothing
    assert (again.status, again.process_calls) == ("complete", 0)


def test_dry_run_counts_queued_tasks_as_queued_and_new_keys_at_the_new_settings(no_keys):
    path = _write(no_keys, "walk3b", SIM, n=4)
    assert _run(load_config(path)).process_calls == 4
    cfg0 = load_config(path)
    # a task an earlier run queued and never handled, with its own output cap (as a planner may set); the new
    # plan holds its key (a queued task the plan no longer holds is set aside unsent: test_superseded_tasks.py)
    pending = {"model": "sim", "prompt": "Generic task 5: describe a street.", "params": {"max_output_tokens": 50},
               "meta": {"index": 5}}

    async def put() -> None:
        q = open_queue(cfg0.queues_root(), cfg0.name, C.EDGE_REQUESTS)
        await q.put_many([("sim|5", pending)])
        await q.close()

    anyio.run(put)
    # now: 2 more prompts planned and the output cap raised
    path.write_text(path.read_text().replace("n_requests = 4", "n_requests = 6")
                    .replace("max_output_tokens = 256", "max_output_tokens = 300"))
    cfg = load_config(path)
    dry = _run(cfg, simulate=True)
    text = dry.summary()
    assert "total: 2 calls to make (4 already done by earlier runs)," in text, text  # sim|5 as queued + sim|4
    assert "4 planned request(s) already done" in text and "1 queued by an earlier run" in text
    # walkthrough 23, item 2: the note said "a task keeps the request it was queued with: config changes since reach
    # only requests not queued yet", while the run sends a queued task with the new [[models]] settings (its drift
    # warning says so, and the answers then mix both versions)
    flat = " ".join(text.split())
    assert "reach only requests not queued yet" not in flat, flat
    assert ("the 1 task an earlier run left queued is sent with the new [[models]] settings (only its prompt text "
            "and a task section's max_output_tokens stay as planned)") in flat, flat
    assert ("the 1 new request uses the new settings, while the 4 answers already stored keep the old ones: results "
            "would mix both versions") in flat, flat
    from geoagent.config import estimate
    from geoagent.engine import run_would_handle
    from geoagent.campaigns.generic import GenericCampaign

    payloads, earlier = run_would_handle(cfg, GenericCampaign(), list(GenericCampaign._messages(cfg)))
    assert earlier == (4, 0, 1, 0, 0)
    est = estimate(cfg, payloads)
    # output tokens reserved: the queued task keeps its own cap (50), the new one takes the new 300
    assert est.by_model["sim"].worst_output_tokens == 50 + 300
    real = _run(cfg)
    assert (real.status, real.process_calls) == ("complete", 2)  # what the dry run said


# -- 4. a model without base_url: the API and the key it uses ---------------------------------------------

NO_URL = ('name = "mini"\nprovider = "openai"\nmodel = "gpt-4o-mini"\nprice_input_usd_per_mtok = 0.15\n'
          'price_output_usd_per_mtok = 0.60\n')


def test_no_base_url_names_the_default_api_and_key_variable(no_keys, capsys, monkeypatch):
    path = _write(no_keys, "walk4", NO_URL)
    assert main(["run", str(path), "--simulate", "--no-live"]) == EXIT_CONFIG
    out = capsys.readouterr().out
    assert ("note: model mini has no base_url: it calls https://api.openai.com/v1 (openai's own API) with the key "
            "in OPENAI_API_KEY (api_key_env not set: openai's usual variable)") in out
    assert "OPENAI_API_KEY (model mini)" in out  # the missing-key check covers it
    assert main(["run", str(path), "--no-live"]) == EXIT_CONFIG
    err = capsys.readouterr().err
    assert "calls https://api.openai.com/v1" in err and "OPENAI_API_KEY (model mini)" in err
    # with the variable set, the provider gets that key
    monkeypatch.setenv("OPENAI_API_KEY", made_up_key("sk-", 25, seed="walk-n20"))
    settings = provider_settings(load_config(path), "mini")
    assert settings.api_key is not None and settings.api_key.reveal() == made_up_key("sk-", 25, seed="walk-n20")


def test_key_variable_defaults_only_for_the_providers_own_host():
    base = {"campaign": {"name": "k"}, "budget": {"cap_usd": 1.0}}
    prices = {"price_input_usd_per_mtok": 1, "price_output_usd_per_mtok": 1}
    cfg = config_from_dict({**base, "models": [
        {"name": "a", "provider": "anthropic", "model": "claude-haiku-4-5", **prices},
        {"name": "g", "provider": "gemini", "model": "gemini-2.5-flash", "base_url": "https://generativelanguage.googleapis.com", **prices},
        {"name": "o", "provider": "openai", "model": "x", "base_url": "https://openrouter.ai/api/v1", **prices},
        {"name": "e", "provider": "openai", "model": "y", "api_key_env": "MY_KEY", **prices},
        {"name": "l", "provider": "openai", "model": "z", "base_url": "http://localhost:11434/v1"},
    ]})
    assert [m.key_env for m in cfg.models] == ["ANTHROPIC_API_KEY", "GEMINI_API_KEY", None, "MY_KEY", None]
    assert [m.default_base_url for m in cfg.models] == ["https://api.anthropic.com", None, None,
                                                        "https://api.openai.com/v1", None]
    # the model's rate and concurrency apply to the API it calls, also when base_url is left out
    from geoagent.config import host_policies

    pols = host_policies(cfg)
    assert [m.host for m in cfg.models] == ["api.anthropic.com", "generativelanguage.googleapis.com", "openrouter.ai",
                                            "api.openai.com", "localhost:11434"]
    assert pols["api.openai.com"].concurrency == cfg.models[3].concurrency
    assert pols["api.openai.com"].retry_unknown_outcome is False  # a paid call of unknown outcome is never repeated


# -- 5. [hosts] sections the campaign never calls ---------------------------------------------------------


def _load_warnings(doc: dict) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        config_from_dict(doc, source="h.toml")
    return [str(w.message) for w in caught if issubclass(w.category, ConfigWarning)]


def test_unused_hosts_section_warns_with_the_used_hosts_and_a_suggestion():
    doc = {"campaign": {"name": "h", "kind": "generic"}, "budget": {"cap_usd": 1.0},
           "models": [{"name": "m", "provider": "openai", "model": "x", "base_url": "https://api.example.org/v1",
                       "api_key_env": "H_KEY", "price_input_usd_per_mtok": 1, "price_output_usd_per_mtok": 1}],
           "hosts": {"typo.example.org": {"rate": 1}, "api.exmple.org": {"rate": 1}, "api.example.org": {"rate": 2}}}
    said = _load_warnings(doc)
    assert said == [
        'h.toml: hosts."typo.example.org": no model or endpoint of this campaign calls this host, so its limits '
        "apply to nothing (did you mean 'api.example.org'?) (hosts this campaign calls: api.example.org)",
        'h.toml: hosts."api.exmple.org": no model or endpoint of this campaign calls this host, so its limits '
        "apply to nothing (did you mean 'api.example.org'?) (hosts this campaign calls: api.example.org)",
    ]
    (far,) = _load_warnings({**doc, "hosts": {"zz9.invalid": {"rate": 1}}})
    assert "did you mean" not in far and far.endswith("(hosts this campaign calls: api.example.org)")


def test_hosts_of_task_urls_kind_defaults_and_default_model_apis_count_as_used():
    base = {"budget": {"cap_usd": 1.0}}
    # a geohint campaign's geocoder defaults (Wikidata, Nominatim) and a model without base_url (api.openai.com)
    geohint = {**base, "campaign": {"name": "g", "kind": "geohint", "contact": "ops@example.org"},
               "models": [{"name": "m", "provider": "openai", "model": "x", "price_input_usd_per_mtok": 1,
                           "price_output_usd_per_mtok": 1}],
               "hosts": {"nominatim.openstreetmap.org": {"rate": 1}, "www.wikidata.org": {"rate": 5},
                         "api.openai.com": {"rate": 5}}}
    assert _load_warnings(geohint) == []
    # a crawl: its endpoint URLs (a port-less key matches the host on any port) and the thumbnail CDN
    crawl = {**base, "campaign": {"name": "c", "kind": "crawl"},
             "crawl": {"contact": "me@example.org", "endpoints": {"overpass": "http://overpass.mirror.test:8080/api"}},
             "hosts": {"overpass.mirror.test": {"rate": 1}, "scontent-ams4-1.xx.fbcdn.net": {"rate": 5},
                       "graph.mapillary.com": {"rate": 5}}}
    assert _load_warnings(crawl) == []
    # the same Nominatim section on a generic campaign is unused
    generic = {**base, "campaign": {"name": "x", "kind": "generic"}, "hosts": {"nominatim.openstreetmap.org": {"rate": 1}}}
    (said,) = _load_warnings(generic)
    assert 'hosts."nominatim.openstreetmap.org"' in said and "(hosts this campaign calls: none)" in said


def test_kind_default_hosts_match_the_clients_defaults():
    from urllib.parse import urlsplit

    from geoagent.clients.nominatim import NOMINATIM_URL
    from geoagent.clients.wikidata import WIKIDATA_API_URL
    from geoagent.config import KIND_DEFAULT_HOSTS
    from geoagent.crawl.settings import EndpointSettings

    ep = EndpointSettings()
    assert set(KIND_DEFAULT_HOSTS["crawl"]) == {urlsplit(u).hostname for u in (ep.overpass, ep.wdqs, ep.pageviews,
                                                                               ep.mapillary)}
    assert set(KIND_DEFAULT_HOSTS["geohint"]) == {urlsplit(NOMINATIM_URL).hostname, urlsplit(WIKIDATA_API_URL).hostname}


def test_the_config_changes_note_comes_only_after_a_change(no_keys):
    """Before (session 15 review): the "planned earlier" line always ended "(a task keeps the request it was queued
    with: config changes since reach only requests not queued yet; ...)", also when the config had not changed
    since the last run. Now that note comes only when the call settings changed."""
    note = "the call settings changed since the last run"
    path = _write(no_keys, "walk3n", SIM, n=4)
    assert _run(load_config(path)).process_calls == 4
    same = _run(load_config(path), simulate=True).summary()
    assert "planned earlier: 4 planned request(s) already done by an earlier run keep their answers" in same, same
    assert note not in same, same  # before: there although nothing changed
    path.write_text(path.read_text().replace("max_output_tokens = 256", "max_output_tokens = 300"))
    changed = _run(load_config(path), simulate=True).summary()
    assert note in changed, changed
    # nothing queued, nothing new: the change reaches none of the stored answers (as the run's drift line says)
    assert "every planned task is done, so the change reaches none of them" in " ".join(changed.split()), changed


def test_the_changed_settings_note_counts_dead_lettered_tasks_as_the_run_does():
    """Review rev23b (1): with tasks dead-lettered and none queued or new, the note said "every planned task is done,
    so the change reaches none of them", while the run's drift warning says dead-lettered tasks are sent with the new
    settings (once requeued) and results would mix. Each case by hand."""
    from geoagent.engine import _changed_settings_note as note

    dead_only = note(queued=0, new=0, done=3, dead=3)
    assert "every planned task is done" not in dead_only
    assert ("the 3 dead-lettered tasks would be sent with the new settings too if requeued, while the 3 answers "
            "already stored keep the old ones: results would mix both versions") in dead_only, dead_only
    assert "every planned task is done, so the change reaches none of them (the 1 answer already stored keeps" in note(
        0, 0, 1)
    fresh = note(queued=2, new=1, done=0)  # nothing answered yet: nothing mixes, no new name needed
    assert "mix" not in fresh and "new [campaign] name" not in fresh and "no answer is stored yet" in fresh, fresh
    assert "the 1 new request uses the new settings" in fresh, fresh
    assert "mix" not in note(0, 0, 0) and "no task of this plan was answered with the old ones" in note(0, 0, 0)
