"""What a dry run (``--simulate``) says it assumes, and every key it warns about.

* A crawl dry run without ``MAPILLARY_TOKEN`` ended 0 with no word, while the README promises that the dry
  run lists every missing API key variable as a warning (it did so for model keys only). It now looks up the
  campaign kind's own keys (:meth:`geoagent.engine.CampaignKind.required_keys`) as the real run does.
* The replay dry run said ``model-call time about 84 s`` for a run that takes seconds: every model was timed
  at ``expected_latency_s`` (default 2.0 s, documented nowhere the user looks). The lines now name that
  assumption, and replay and offline simulated models say that they take no model time.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import anyio
import pytest

from geoagent.cli import main
from geoagent.config import config_from_dict, estimate
from geoagent.engine import estimate_lines, run_campaign

REPO = Path(__file__).resolve().parents[1]
CRAWL = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")) if root.exists() else []


@pytest.fixture
def no_keys(isolated_roots, monkeypatch):
    monkeypatch.delenv("MAPILLARY_TOKEN", raising=False)
    monkeypatch.delenv("DRYRUN_AUDITOR_KEY", raising=False)
    monkeypatch.setenv("GEOAGENT_DOTENV", str(isolated_roots / "absent.env"))  # no .env fallback either
    return isolated_roots


def test_crawl_dry_run_warns_about_the_missing_mapillary_token(no_keys, capsys, monkeypatch):
    code = main(["crawl", str(CRAWL), "--simulate", "--no-live"])
    out = capsys.readouterr().out
    assert code == 2  # the crawl would refuse to start without it: the dry run exits as it would
    assert out.splitlines()[-1].startswith("  exit 2: `crawl` would refuse to start (variable MAPILLARY_TOKEN")
    warnings = [line for line in out.splitlines() if "warning:" in line]
    assert len(warnings) == 1, out
    # against the sandbox's Mapillary fake the line says what it takes (walk24 #6: in the config's comments only)
    assert ("MAPILLARY_TOKEN (the Mapillary token, [crawl.endpoints] mapillary_token_env; the sandbox's Mapillary "
            "fake accepts any value of the form MLY|..., e.g. MAPILLARY_TOKEN='MLY|sandbox')") in warnings[0]
    assert "`crawl` will refuse to start until it is set" in warnings[0]
    assert _tree(no_keys / "state") == [] and _tree(no_keys / "queues") == []  # a dry run leaves nothing
    # with the token set: no warning
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    assert main(["crawl", str(CRAWL), "--simulate", "--no-live"]) == 0
    assert "warning:" not in capsys.readouterr().out


def test_crawl_dry_run_lists_model_keys_and_the_token_in_one_warning(no_keys, capsys, tmp_path):
    """The warning names every variable the real run refuses to start without, models' and the kind's."""
    doc = tomllib.loads(CRAWL.read_text(encoding="utf-8"))
    doc["models"][0]["api_key_env"] = "DRYRUN_AUDITOR_KEY"
    cfg = config_from_dict(doc, source="crawl.toml")
    from geoagent.campaigns import register_all_sections

    register_all_sections()
    out = anyio.run(lambda: run_campaign(cfg, simulate=True, live=False, handle_signals=False))
    (warning,) = [line for line in out.extra_lines if "warning:" in line]
    assert "DRYRUN_AUDITOR_KEY (model sandbox-vision-auditor)" in warning
    assert "MAPILLARY_TOKEN (the Mapillary token" in warning
    assert warning.index("DRYRUN_AUDITOR_KEY") < warning.index("MAPILLARY_TOKEN")  # models first, as the run says
    assert "until they are set" in warning
    # and the real run refuses with the same two names (exit 2)
    code = main(["crawl", str(_write_toml(tmp_path / "crawl.toml", CRAWL, "DRYRUN_AUDITOR_KEY")), "--no-live"])
    err = capsys.readouterr().err
    assert code == 2 and "DRYRUN_AUDITOR_KEY" in err and "MAPILLARY_TOKEN" in err


def _write_toml(dest: Path, src: Path, key_var: str) -> Path:
    text = src.read_text(encoding="utf-8")
    text = text.replace('name = "sandbox-vision-auditor"\n', f'name = "sandbox-vision-auditor"\napi_key_env = "{key_var}"\n', 1)
    dest.write_text(text, encoding="utf-8")
    return dest


def _cfg(models: list[dict]) -> object:
    return config_from_dict({"campaign": {"name": "dr", "kind": "generic"}, "budget": {"cap_usd": 100.0},
                             "models": models})


# 40 distinct requests per model (the estimate counts distinct request keys, as the run calls)
PLAN = [{"model": m, "prompt": f"{i:03d}" + "x" * 297} for m in ("paid", "sim", "simhttp", "rep") for i in range(40)]


def _models(tmp_path: Path) -> list[dict]:
    (tmp_path / "rec.jsonl").write_text("", encoding="utf-8")
    return [
        {"name": "paid", "provider": "openai", "model": "gpt-x", "base_url": "http://127.0.0.1:9/v1",
         "concurrency": 4, "rate": {"requests": 10, "period_s": 1.0}, "expected_latency_s": 0.8,
         "expected_output_tokens": 120, "price_output_usd_per_mtok": 8.0},
        {"name": "sim", "provider": "simulated", "model": "sim-1", "rate": {"requests": 10, "period_s": 1.0}},
        {"name": "simhttp", "provider": "simulated", "model": "sim-2", "base_url": "http://127.0.0.1:8/v1",
         "rate": {"requests": 8, "period_s": 2.0}},
        {"name": "rep", "provider": "replay", "model": "rec", "replay": {"path": str(tmp_path / "rec.jsonl")}},
    ]


def test_estimate_times_each_provider_by_what_it_really_waits_for(tmp_path):
    est = estimate(_cfg(_models(tmp_path)), PLAN)
    bm = est.by_model
    # paid: min(rate 10/s, concurrency 4 / 0.8 s = 5/s) = 5/s -> 40 calls in 8 s
    assert bm["paid"].throughput_per_s == pytest.approx(5.0) and bm["paid"].duration_s == pytest.approx(8.0)
    # simulated in-process and replay: no model is called, no model time
    assert (bm["sim"].duration_s, bm["sim"].time_basis) == (0.0, "none")
    assert (bm["rep"].duration_s, bm["rep"].time_basis) == (0.0, "none")
    # simulated behind a local fake: paced by its rate alone, 8 per 2 s = 4/s -> 40 calls in 10 s
    assert bm["simhttp"].time_basis == "rate" and bm["simhttp"].duration_s == pytest.approx(10.0)
    assert est.duration_s == pytest.approx(10.0)  # hosts run in parallel: the slowest


def test_dry_run_lines_name_their_assumptions(tmp_path):
    cfg = _cfg(_models(tmp_path))
    lines = estimate_lines(estimate(cfg, PLAN), cfg)
    line = {n: next(ln for ln in lines if ln.strip().startswith(f"{n}:")) for n in ("paid", "sim", "simhttp", "rep")}
    assert "assuming 120 output tokens per call ([[models]] expected_output_tokens)" in line["paid"]
    assert "model-call time about 8 s at 5 calls/s (assuming 0.8 s per call ([[models]] expected_latency_s)" in line["paid"]
    assert "concurrency 4 / 0.8 s and its rate limit of 10 per 1 s" in line["paid"]
    assert "no model-call time (simulated: answers are made in this process" in line["sim"]
    assert f"no model-call time (replay: answers are read from the recorded file {tmp_path / 'rec.jsonl'})" in line["rep"]
    assert "model-call time about 10 s (simulated behind a local fake" in line["simhttp"]
    assert "expected_latency_s" not in line["sim"] + line["rep"] + line["simhttp"]
    total = next(ln for ln in lines if "total:" in ln)
    assert "about 10 s of model calls" in total
    # a campaign of free models only: the total says there is no model time at all
    only_free = _cfg(_models(tmp_path)[1:2] + _models(tmp_path)[3:])
    free_lines = estimate_lines(estimate(only_free, [p for p in PLAN if p["model"] in ("sim", "rep")]), only_free)
    assert "no model-call time (replay and simulated answers call no model" in free_lines[-1]


def test_replay_dry_run_says_it_takes_no_model_time(release_dir, isolated_roots, monkeypatch, capsys):
    """The user's case: the replay of the release sample said "about 84 s" (336 calls x 2 s / 8 at once)."""
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    assert main(["run", str(REPO / "geoagent" / "configs" / "geocontext_replay.toml"), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "model-call time about" not in out and not re.search(r"about \d+ s of model calls", out)
    assert f"no model-call time (replay: answers are read from the recorded file {release_dir / 'verify_raw_sample.jsonl'})" in out


def test_replay_estimate_uses_the_recorded_usage_and_counts_unanswered_requests(tmp_path):
    """A replay dry run's tokens and cost are the file's recorded usage (what the run books), not the
    prompt-length estimate; requests without a usable record (none, or a recorded failure) are counted."""
    import orjson

    from geoagent.config import provider_settings
    from geoagent.providers import make_provider
    from geoagent.workers.model_caller import build_request

    rec = tmp_path / "rec.jsonl"
    cfg = _cfg([{"name": "rep", "provider": "replay", "model": "rec", "price_input_usd_per_mtok": 2.0,
                 "price_output_usd_per_mtok": 10.0, "replay": {"path": str(rec)}}])
    plan = [{"model": "rep", "prompt": f"question {i}"} for i in range(5)]
    keys = [build_request(cfg, p)[1].key() for p in plan]
    records = [{"key": keys[0], "text": "a", "usage": {"input_tokens": 1000, "output_tokens": 50}},
               {"key": keys[1], "text": "b", "usage": {"input_tokens": 3000, "output_tokens": 70}},
               {"key": keys[2], "text": "c", "usage": {"input_tokens": 2000, "output_tokens": 30}},
               {"key": keys[3], "text": None, "error": "HTTP 529 overloaded"}]  # keys[4]: no record at all
    rec.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    providers = {"rep": make_provider(provider_settings(cfg, "rep"))}
    m = estimate(cfg, plan, providers=providers).by_model["rep"]
    assert (m.calls, m.recorded, m.unanswered) == (5, 3, 2)
    assert (m.input_tokens, m.output_tokens) == (6000, 150)
    assert m.cost_usd == pytest.approx((6000 * 2.0 + 150 * 10.0) / 1e6)  # by hand: 0.0135 USD
    line = next(ln for ln in estimate_lines(estimate(cfg, plan, providers=providers), cfg) if ln.strip().startswith("rep:"))
    assert "6000 in / 150 out tokens" in line and "the recorded token usage of 3 answer(s)" in line
    assert "2 request(s) have no usable recorded answer" in line and "would end missing" in line
    # without the providers (no file read) the estimate stays the prompt-length one
    assert estimate(cfg, plan).by_model["rep"].recorded == 0


def test_replay_dry_run_of_the_release_sample_gives_its_recorded_tokens(release_dir, isolated_roots, monkeypatch, capsys):
    """The release sample's 336 GeoVerify answers: the dry run's tokens are the sums of the ``usage`` fields
    of verify_raw_sample.jsonl (read here independently), every planned trial answered."""
    import orjson

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    raw = [orjson.loads(line) for line in (release_dir / "verify_raw_sample.jsonl").read_bytes().splitlines() if line.strip()]
    n_in = sum(int(r["usage"]["input_tokens"] or 0) for r in raw if not r.get("error"))
    n_out = sum(int(r["usage"]["output_tokens"] or 0) for r in raw if not r.get("error"))
    assert main(["run", str(REPO / "geoagent" / "configs" / "geocontext_replay.toml"), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    lines = [ln for ln in out.splitlines() if "recorded token usage of" in ln]
    assert lines, out
    got_in = sum(int(re.search(r"(\d+) in / ", ln).group(1)) for ln in lines)
    got_out = sum(int(re.search(r"/ (\d+) out tokens", ln).group(1)) for ln in lines)
    assert (got_in, got_out) == (n_in, n_out)
    assert "no usable recorded answer" not in out


def test_budget_stop_forecast_names_the_per_image_assumption_for_an_unknown_model_id():
    """Walkthrough finding 18: the stop forecast rested on image_input_tokens for a model id with no documented
    image-billing rule without saying so; a model billed by its documented rule is not named."""
    cfg = config_from_dict({"campaign": {"name": "dr", "kind": "generic"}, "budget": {"cap_usd": 0.05}, "models": [
        {"name": "vlm", "provider": "openai", "model": "acme-vision-7", "base_url": "https://vlm.example.com/v1",
         "api_key_env": "K", "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0, "max_output_tokens": 100,
         "expected_output_tokens": 50},
        {"name": "mini", "provider": "openai", "model": "gpt-4o-mini", "api_key_env": "K", "price_input_usd_per_mtok": 0.15,
         "price_output_usd_per_mtok": 0.6, "max_output_tokens": 100, "expected_output_tokens": 50}]})
    plan = [{"model": m, "prompt": f"{i:03d} where", "image_id": str(i)} for m in ("vlm", "mini") for i in range(40)]
    lines = estimate_lines(estimate(cfg, plan), cfg)
    (stop,) = [ln for ln in lines if "the run would stop at the cap" in ln]
    assert ("this forecast rests on the per-image token assumption for vlm (40 image(s) at 1600 input tokens each, "
            "[[models]] image_input_tokens: no documented billing rule for openai acme-vision-7") in stop
    assert "mini (" not in stop.split("this forecast rests")[1]


def _two_models(expected_a: int | None, expected_b: int | None, cap: float = 0.01):
    def model(name: str, expected: int | None) -> dict:
        m = {"name": name, "provider": "openai", "model": f"gpt-4o-mini-{name}", "api_key_env": "K",
             "price_input_usd_per_mtok": 0.15, "price_output_usd_per_mtok": 0.6, "max_output_tokens": 1000}
        return m if expected is None else {**m, "expected_output_tokens": expected}

    cfg = config_from_dict({"campaign": {"name": "dr", "kind": "generic"}, "budget": {"cap_usd": cap},
                            "models": [model("a", expected_a), model("b", expected_b)]})
    plan = [{"model": m, "prompt": f"{i:03d} where"} for m in ("a", "b") for i in range(40)]
    return [ln for ln in estimate_lines(estimate(cfg, plan), cfg) if "the run would stop at the cap" in ln]


def test_stop_forecast_resting_on_max_output_tokens_alone_opens_with_that_condition():
    """Walkthrough 23 #5: with no model setting expected_output_tokens, "expected" is the max_output_tokens
    upper bound, yet the line read as a plain forecast ("the run would stop at the cap"); the real run of short
    answers finished within the cap. The sentence now opens with its condition; a model with its own figure
    keeps the plain forecast and the note naming the others."""
    (every,) = _two_models(None, None)
    assert every.startswith("  if every answer used all its max_output_tokens (what the expected cost assumes: no "
                            "expected_output_tokens set for a, b), the run would stop at the cap (exit 4) after about ")
    assert "possibly all of them: set expected_output_tokens" in every
    (mixed,) = _two_models(None, 50)
    assert mixed.startswith("  the run would stop at the cap (exit 4) after about ")
    assert ("the expected cost of a takes every answer at its max_output_tokens (no expected_output_tokens set): "
            "shorter answers let the run make more calls than this") in mixed
    (both,) = _two_models(50, 50, cap=0.001)
    assert both.startswith("  the run would stop at the cap") and "max_output_tokens (no" not in both
