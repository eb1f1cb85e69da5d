"""Acceptance (issue 2) for the real multi-stage campaigns: SIGKILL a sandbox GeoHint campaign and a sandbox
crawl at seeded moments (inside the model caller, the geocoder, the crawl's image download and paid image
audit, and inside a file write), restart the same command each time, then compare with an uninterrupted run
of the same config in another folder:

1. the exported tables, the report tables and figures (GeoHint) and the crawl's tables and ladder files are
   identical (timing columns, ``created_at`` and ``latency_s``, left out);
2. no paid model request was sent again for a key whose response was stored (the model fake's call log, a
   process of its own, against the store's ``created_at``); the ledger's tokens and settled spend equal the
   usage the fake returned, and billed calls cut in flight by a kill are counted as unknown-outcome spend;
3. no temporary file is left in ``state/``, and every CSV / Parquet / JSON / JSONL file there reads whole.

Helpers: ``tests/_crash_harness.py``.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

from tests._crash_harness import (
    REPO,
    ModelFake,
    after_model_calls,
    after_new_calls,
    after_new_files,
    after_queue_rows,
    check_exactly_once_and_ledger,
    check_no_half_written,
    check_settled_once_and_ledger,
    either,
    folder_contents,
    parquet_frame,
    read_csv_rows,
    run_with_kills,
    when_temp_file,
)

PRICE_IN, PRICE_OUT = 0.15, 0.60
#: a few release sites (about 100 requests each with 2 images: the ladders' forced and warned conditions)
GH_SITES = ["marrakech_cervantes", "newyork_amsterdam", "hanoi_botanic", "telaviv_dizengoff",
            "barcelona_fontana", "paris_bataclan"]


def _geohint_config(tmp: Path, base_url: str) -> Path:
    cfg = tmp / "geohint.toml"
    cfg.write_text(f"""
[campaign]
name = "gh-crash"
kind = "geohint"
seed = 1
contact = "mailto:you@example.org"

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = 5.0

[queue]
max_attempts = 10
visibility_timeout_s = 5.0
backoff_base_s = 0.05
backoff_max_s = 0.5

[[models]]
name = "sandbox-gpt"
provider = "openai"
model = "sandbox-gpt"
base_url = "{base_url}/v1"
price_input_usd_per_mtok = {PRICE_IN}
price_output_usd_per_mtok = {PRICE_OUT}
max_output_tokens = 300
concurrency = 16
rate = {{ requests = 1000, period_s = 1.0 }}
timeout_s = 10.0

[geohint]
conditions = ["baseline", "forced", "forced_warn"]
images = "synthetic"
images_per_site = 2
sites = {GH_SITES!r}
n_flips = 500
n_splits = 40
report_interval_s = 0.5

[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
nominatim_max_requests = 1000000

[images]
missing = "placeholder"
""".replace("'", '"'))
    return cfg


def _env(release_dir: Path) -> dict[str, str]:
    env = {**os.environ, "GEOAGENT_RELEASE": str(release_dir), "PYTHONUNBUFFERED": "1"}
    for k in ("GEOAGENT_QUEUES", "GEOAGENT_STATE"):
        env.pop(k, None)
    return env


def _geohint_outputs(state: Path) -> dict[str, object]:
    """What a GeoHint run leaves, comparable across runs."""
    out: dict[str, object] = {
        "geohint_scored.csv": read_csv_rows(state / "geohint_scored.csv", sort_by=("key",)),
        "model_responses.csv": read_csv_rows(state / "model_responses.csv", sort_by=("key",)),
        "geohint_scored.parquet": parquet_frame(state / "geohint_scored.parquet", sort_by=("key",)),
        "model_responses.parquet": parquet_frame(state / "model_responses.parquet", sort_by=("key",)),
    }
    for p in sorted((state / "report").iterdir()):
        out[f"report/{p.name}"] = read_csv_rows(p) if p.suffix == ".csv" else p.read_bytes()
    return out


def _assert_same(ref: dict[str, object], got: dict[str, object]) -> None:
    assert sorted(got) == sorted(ref)
    for name, value in ref.items():
        other = got[name]
        if hasattr(value, "equals"):
            assert value.columns == other.columns, name
            assert value.equals(other), f"{name} differs from the uninterrupted run's"
        else:
            assert other == value, f"{name} differs from the uninterrupted run's"


@pytest.mark.slow
def test_geohint_sigkilled_in_model_caller_geocoder_and_report_matches_uninterrupted(tmp_path, release_dir):
    env = _env(release_dir)
    runs = {}
    for name in ("ref", "crash"):
        d = tmp_path / name
        d.mkdir()
        fake = ModelFake(d / "calls.jsonl", seed=1, latency_ms=5.0)
        try:
            cfg = _geohint_config(d, fake.base_url)
            cmd = [sys.executable, "run.py", "run", str(cfg), "--no-live"]
            state = d / "state" / "gh-crash"
            if name == "ref":
                run_with_kills(cmd, env, [], rng=random.Random(0))
            else:
                rng = random.Random(20261201)
                located = d / "queues" / "gh-crash" / "located.sqlite"
                kills = run_with_kills(cmd, env, [
                    after_new_calls(fake, rng.randint(60, 250)),       # model caller (and parser) running
                    after_queue_rows(located, rng.randint(20, 150)),   # geocoder stage running
                    after_new_calls(fake, rng.randint(60, 250)),
                    when_temp_file(state),                             # inside a report / export write
                ], rng=rng)
                print("kills:", kills)
                assert len(kills) >= 3, kills
            runs[name] = (_geohint_outputs(state), fake.calls(), state)
        finally:
            fake.close()
    ref, ref_calls, _ = runs["ref"]
    got, calls, state = runs["crash"]
    _assert_same(ref, got)
    counts = check_exactly_once_and_ledger(calls, state.parent, "gh-crash",
                                           prices={"sandbox-gpt": (PRICE_IN, PRICE_OUT)})
    assert counts["stored"] == len({r["key"] for r in ref_calls if r["status"] == 200})
    check_no_half_written(state)


CRAWL_CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
VISION, TEXT = "sandbox-vision-auditor-1", "sandbox-text-auditor-1"
#: files of a crawl that describe the run, not its results: stores and queues (SQLite), locks, the progress
#: stream, the manifest (every run's start and stop), the summary (API request counts of the runs) and
#: the decision log (its per-city records count the model calls and replayed answers of the run that rated)
CRAWL_RUN_FILES = ("progress.jsonl", "manifest.json", "report/crawl_summary.json", "crawl_decisions.jsonl",
                   "export/crawl_decisions.csv", "export/crawl_decisions.parquet")


def _crawl_config(tmp: Path, base_url: str) -> Path:
    text = CRAWL_CONFIG.read_text()
    assert text.count("http://openai.sandbox.invalid/v1") == 2
    text = text.replace("http://openai.sandbox.invalid/v1", f"{base_url}/v1")
    paths = f'[paths]\nqueues = "{tmp / "queues"}"\nstate = "{tmp / "state"}"\n\n'
    text = text.replace("[budget]", paths + "[budget]", 1)
    cfg = tmp / "crawl.toml"
    cfg.write_text(text)
    return cfg


#: what the run that wrote a file did (not results): thumbnails it downloaded for a site's selection (images
#: already on disk from a killed run are reused); batches asked, model calls made and answers replayed by the
#: city's rating step (candidates a killed run had decided are not asked again), and ``site``, the site whose task
#: ran that step (stages.py, "Decision log"): the first of the city's sites to leave the image auditor, which audits
#: a city's sites side by side, so the first is decided by a few ms and a kill that leaves one site an image ahead
#: changes it (1 run in ~35: ember first uninterrupted, nettle after the resume, all ratings and tables equal)
RUN_COUNTERS = {"image_selection/": ("downloads",), "images-": ("downloads",),
                "ref_cities/": ("model_calls", "answers_replayed", "rating_batches_asked", "screening_batches_asked",
                                "site")}


def _without_run_counters(tables: dict[str, object]) -> dict[str, object]:
    out = dict(tables)
    for name, value in tables.items():
        for prefix, keys in RUN_COUNTERS.items():
            if (name.startswith(prefix) or Path(name).name.startswith(prefix)) and isinstance(value, dict):
                out[name] = {k: v for k, v in value.items() if k not in keys}
    return out


def _skip_run_file(rel: Path) -> bool:
    return rel.suffix in (".sqlite", ".lock", ".sqlite-wal", ".sqlite-shm") or "leases" in rel.parts \
        or str(rel) in CRAWL_RUN_FILES or "api_requests" in rel.parts \
        or rel.stem == "spend"  # one request tally per process; the ledger's export (a kill books unknown outcomes)


@pytest.mark.slow
def test_crawl_sigkilled_in_download_audit_rating_and_write_matches_uninterrupted(tmp_path):
    env = {**os.environ, "MAPILLARY_TOKEN": "MLY|sandbox", "PYTHONUNBUFFERED": "1"}
    for k in ("GEOAGENT_QUEUES", "GEOAGENT_STATE"):
        env.pop(k, None)
    runs = {}
    for name in ("ref", "crash"):
        d = tmp_path / name
        d.mkdir()
        fake = ModelFake(d / "calls.jsonl", seed=20260401, latency_ms=5.0)
        try:
            cfg = _crawl_config(d, fake.base_url)
            cmd = [sys.executable, "run.py", "crawl", str(cfg), "--no-live"]
            state_root = d / "state"
            if name == "ref":
                run_with_kills(cmd, env, [], rng=random.Random(0))
            else:
                rng = random.Random(20261202)
                kills = run_with_kills(cmd, env, [
                    # inside a thumbnail write (a few microseconds: polling may miss it, then a moment later)
                    either(when_temp_file(state_root / "images"),
                           after_new_files(state_root / "images", ".jpg", rng.randint(3, 8))),
                    after_new_files(state_root / "images", ".jpg", rng.randint(3, 8)),  # thumbnail download
                    after_model_calls(fake, VISION, rng.randint(2, 10)),              # paid image audit
                    after_model_calls(fake, TEXT, rng.randint(2, 10)),                # referenceability rating
                    when_temp_file(state_root),                                        # inside a table write
                ], rng=rng)
                print("kills:", kills)
                assert len(kills) >= 3, kills
            runs[name] = (folder_contents(state_root / "crawl-sandbox", skip=_skip_run_file),
                          folder_contents(state_root / "images", skip=lambda rel: False), fake.calls(), state_root)
        finally:
            fake.close()
    ref_tables, ref_images, ref_calls, _ = runs["ref"]
    tables, images, calls, state_root = runs["crash"]
    for name in ref_tables:
        if name.startswith("ref_cities/"):  # the counters' documented bound holds after the kills too
            for rec in (ref_tables[name], tables[name]):
                assert rec["model_calls"] + rec["answers_replayed"] >= \
                    rec["rating_batches_asked"] + rec["screening_batches_asked"], (name, rec)
                assert rec["site"] in rec["sites"], (name, rec)  # one of the city's sites ran the step
            assert ref_tables[name]["answers_replayed"] == 0
    ref_tables, tables = _without_run_counters(ref_tables), _without_run_counters(tables)
    ref_images, images = _without_run_counters(ref_images), _without_run_counters(images)
    assert sorted(tables) == sorted(ref_tables)
    assert any(k.startswith("ladders/") for k in ref_tables) and "export/image_audit.parquet" in ref_tables
    differ = [name for name, value in ref_tables.items() if tables[name] != value]
    assert not differ, f"differ from the uninterrupted crawl's: {differ}"
    assert sorted(images) == sorted(ref_images)
    assert images == ref_images, "the crawled images differ"
    prices = {VISION: (PRICE_IN, PRICE_OUT), TEXT: (PRICE_IN, PRICE_OUT)}
    # each paid audit answer is stored with its settlement, never asked again once stored, and paid once
    counts = check_exactly_once_and_ledger(calls, state_root, "crawl-sandbox", prices=prices)
    print("paid calls:", counts, check_settled_once_and_ledger(calls, state_root, "crawl-sandbox", prices=prices))
    assert {r["key"] for r in calls if r["status"] == 200} == {r["key"] for r in ref_calls if r["status"] == 200}
    check_no_half_written(state_root)


def _geoverify_config(tmp: Path, base_url: str) -> Path:
    models = "".join(f"""
[[models]]
name = "{name}"
provider = "openai"
model = "{name}"
base_url = "{base_url}/v1"
price_input_usd_per_mtok = {p_in}
price_output_usd_per_mtok = {p_out}
max_output_tokens = 300
concurrency = 16
rate = {{ requests = 1000, period_s = 1.0 }}
timeout_s = 10.0
""" for name, (p_in, p_out) in GV_PRICES.items())
    cfg = tmp / "geoverify.toml"
    cfg.write_text(f"""
[campaign]
name = "gv-crash"
kind = "geoverify"
seed = 1
contact = "mailto:you@example.org"

[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"

[budget]
cap_usd = 5.0

[queue]
max_attempts = 10
visibility_timeout_s = 5.0
backoff_base_s = 0.05
backoff_max_s = 0.5
{models}
[geoverify]
trials = "release"
n_boot = 100
report_interval_s = 0.5

[images]
missing = "placeholder"
""")
    return cfg


GV_PRICES = {"sandbox-gpt": (0.15, 0.60), "sandbox-large": (3.0, 15.0)}


def _skip_campaign_run_file(rel: Path) -> bool:
    return rel.suffix in (".sqlite", ".lock", ".sqlite-wal", ".sqlite-shm") or rel.parts[0] in ("leases", "data") \
        or str(rel) in ("progress.jsonl", "manifest.json", "plan_keys.json") \
        or rel.stem == "spend"  # plan_keys: which run recorded the plan; spend: the ledger (kills book unknown outcomes)


@pytest.mark.slow
def test_geoverify_sigkilled_in_model_caller_scorer_and_report_matches_uninterrupted(tmp_path, release_dir):
    env = _env(release_dir)
    runs = {}
    for name in ("ref", "crash"):
        d = tmp_path / name
        d.mkdir()
        fake = ModelFake(d / "calls.jsonl", seed=1, latency_ms=5.0)
        try:
            cfg = _geoverify_config(d, fake.base_url)
            cmd = [sys.executable, "run.py", "run", str(cfg), "--no-live"]
            state = d / "state" / "gv-crash"
            if name == "ref":
                run_with_kills(cmd, env, [], rng=random.Random(0))
            else:
                rng = random.Random(20261203)
                kills = run_with_kills(cmd, env, [
                    after_new_calls(fake, rng.randint(20, 80)),                                # model caller
                    after_queue_rows(d / "queues" / "gv-crash" / "scored.sqlite", rng.randint(10, 60)),  # scorer
                    after_new_calls(fake, rng.randint(20, 80)),
                    when_temp_file(state),                                                     # a report write
                ], rng=rng)
                print("kills:", kills)
                assert len(kills) >= 3, kills
            runs[name] = (folder_contents(state, skip=_skip_campaign_run_file), fake.calls(), state)
        finally:
            fake.close()
    ref, ref_calls, _ = runs["ref"]
    got, calls, state = runs["crash"]
    assert "report/geoverify_table.csv" in ref and "geoverify_scored.parquet" in ref
    assert sorted(got) == sorted(ref)
    differ = [name for name, value in ref.items() if got[name] != value]
    assert not differ, f"differ from the uninterrupted run's: {differ}"
    counts = check_exactly_once_and_ledger(calls, state.parent, "gv-crash", prices=GV_PRICES)
    print("paid calls:", counts)
    assert counts["stored"] == len({r["key"] for r in ref_calls if r["status"] == 200})
    check_no_half_written(state)
