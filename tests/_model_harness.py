"""Shared set-up for tests that drive the model-caller stage against a local OpenAI-compatible fake.

One place for what those tests used to write out each on their own: the one-model campaign config
(``[[models]]`` pointing at ``geoagent/sandbox/llm_openai``'s server), the stage context (providers over
one ``HttpClient``, with the config's per-host policies, plus the campaign's ledger and store), a started
:class:`~geoagent.workers.model_caller.ModelCaller`, and the server-side billing checks.
Nothing here is a mock: the stage, the HTTP client, SQLite state and the fake server are all real.
"""

from __future__ import annotations

import asyncio
import os
import textwrap
from collections import Counter
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

from geoagent.config import host_policies, load_config, provider_settings
from geoagent.providers import make_provider
from geoagent.runtime.http import HttpClient
from geoagent.runtime.queue import Task
from geoagent.runtime.stage import StageContext
from geoagent.runtime.store import open_campaign_state
from geoagent.workers.model_caller import ModelCaller

#: prices of the one model, USD per 1M tokens (input, output)
PRICE_IN, PRICE_OUT = 2.0, 10.0


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    raise TypeError(f"no TOML rendering for {value!r} here")


def write_model_config(
    path: Path,
    base_url: str,
    *,
    name: str,
    key_var: str,
    seed: int = 5,
    cap_usd: float = 5.0,
    queue: Mapping[str, Any] | None = None,
    price_in: float = PRICE_IN,
    price_out: float = PRICE_OUT,
    max_output_tokens: int = 100,
    concurrency: int = 8,
    rate_requests: int = 500,
    rate_period_s: float = 1.0,
    max_attempts: int | None = None,
    timeout_s: float = 10.0,
    extra: str = "",
) -> Any:
    """Write a one-model campaign config to ``path`` and load it.

    The model, named ``"m"`` (``provider = "openai"``, ``model = "gpt-sim"``), talks to the
    OpenAI-compatible fake at ``base_url`` (its root, without ``/v1``) with the key read from the
    environment variable ``key_var``. ``queue`` becomes a ``[queue]`` table (numbers and booleans);
    ``max_attempts = None`` leaves the model's attempts at the config default; ``extra`` is appended to
    the text as is (it lands in the ``[[models]]`` table). Prices in USD per 1M tokens, times in s.

    Returns the loaded :class:`geoagent.config.CampaignConfig`; raises ``ConfigError`` as ``load_config`` does.
    """
    queue_table = ""
    if queue:
        queue_table = "[queue]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in queue.items()) + "\n"
    attempts_line = "" if max_attempts is None else f"max_attempts = {max_attempts}\n"
    text = textwrap.dedent(
        f"""\
        [campaign]
        name = "{name}"
        seed = {seed}

        [budget]
        cap_usd = {cap_usd}

        """
    ) + queue_table + textwrap.dedent(
        f"""\
        [[models]]
        name = "m"
        provider = "openai"
        model = "gpt-sim"
        base_url = "{base_url}/v1"
        api_key_env = "{key_var}"
        price_input_usd_per_mtok = {price_in}
        price_output_usd_per_mtok = {price_out}
        max_output_tokens = {max_output_tokens}
        concurrency = {concurrency}
        rate = {{ requests = {rate_requests}, period_s = {rate_period_s} }}
        """
    ) + attempts_line + f"timeout_s = {timeout_s}\n" + extra
    path.write_text(text)
    return load_config(path)


def model_providers(cfg: Any, http: HttpClient | None = None, *, require_key: bool = True) -> dict[str, Any]:
    """One provider per configured model (``{model name: Provider}``), all over ``http``."""
    return {m.name: make_provider(provider_settings(cfg, m.name, require_key=require_key), http) for m in cfg.models}


def apply_host_policies(cfg: Any, http: HttpClient) -> None:
    """Give ``http`` the config's per-host rate, concurrency and retry policies."""
    for host, policy in host_policies(cfg).items():
        http.set_policy(host, policy)


def caller_context(cfg: Any, http: HttpClient | None, state: Any, *, require_key: bool = True, **services: Any) -> StageContext:
    """The stage context the model caller reads: config, providers over ``http`` (also the ``http`` service,
    as in the engine's context: a stop request stops its retries), the campaign ``state``'s ledger and store,
    plus any further ``services`` (e.g. ``report_dir``)."""
    shared = {"http": http} if http is not None else {}
    return StageContext(
        campaign=cfg.name,
        services={"config": cfg, "providers": model_providers(cfg, http, require_key=require_key),
                  "ledger": state.ledger, "store": state.store, **shared, **services},
    )


class CallerRig:
    """The model-caller stage with its services, driven task by task (no queue runner).

    Opens the campaign state under ``tmp_path / "state"`` (budget cap from the config), applies the
    config's host policies to ``http`` and builds the stage context; ``await rig.start()`` starts the stage.
    """

    def __init__(self, tmp_path: Path, cfg: Any, http: HttpClient) -> None:
        self.cfg = cfg
        self.state = open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=cfg.budget.cap_usd)
        apply_host_policies(cfg, http)
        self.ctx = caller_context(cfg, http, self.state)
        self.stage = ModelCaller()

    async def start(self) -> CallerRig:
        await self.stage.start(self.ctx)
        return self

    async def handle(self, task: Task) -> Any:
        return await self.stage.handle(task, self.ctx)

    def reservations(self) -> list[tuple[str, str]]:
        """``(request_key, state)`` of every ledger reservation, oldest first."""
        return self.state.db.read("SELECT request_key, state FROM reservations ORDER BY id")


def photo_task(i: int, *, meta: dict[str, Any] | None = None, key: str | None = None, attempts: int = 0,
               lease_id: str = "x") -> Task:
    """A leased task asking model ``"m"`` where photo ``i`` was taken (key ``t{i}`` unless given)."""
    payload = {"model": "m", "prompt": f"Where was photo {i} taken? Name the city.", "meta": {} if meta is None else meta}
    return Task(key=f"t{i}" if key is None else key, payload=payload, attempts=attempts, lease_id=lease_id)


def billed(calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The calls the fake server billed (answered 200), from its ``app["calls"]`` log."""
    return [c for c in calls if c["status"] == 200]


def cost_usd(n_in: int, n_out: int, price_in: float = PRICE_IN, price_out: float = PRICE_OUT) -> float:
    """USD for ``n_in`` input and ``n_out`` output tokens at prices in USD per 1M tokens."""
    return (n_in * price_in + n_out * price_out) / 1e6


def run(coro: Coroutine[Any, Any, Any], timeout_s: float) -> Any:
    """Run ``coro`` to completion in a fresh event loop, failing after ``timeout_s`` seconds."""
    return asyncio.run(asyncio.wait_for(coro, timeout=timeout_s))


# -- whole generic campaigns (run through the engine or run.py) ------------------------------------------
def model_table(name: str = "m", *, base_url: str | None = None, key_var: str | None = None, model: str | None = None,
                max_output_tokens: int = 100, concurrency: int = 4, rate_requests: int = 2000,
                timeout_s: float = 5.0) -> str:
    """One ``[[models]]`` table (TOML text) priced 0.15 / 0.60 USD per 1M tokens: the simulated provider
    (model ``sim-1``) when ``base_url`` is None, else the OpenAI-compatible fake at ``base_url`` (its root,
    without ``/v1``) with the key read from ``key_var`` (model id ``model``, default ``gpt-x``)."""
    if base_url is None:
        provider = 'provider = "simulated"\nmodel = "sim-1"\n'
    else:
        provider = (f'provider = "openai"\nmodel = "{model or "gpt-x"}"\nbase_url = "{base_url}/v1"\n'
                    f'api_key_env = "{key_var}"\n')
    return (f'\n[[models]]\nname = "{name}"\n{provider}price_input_usd_per_mtok = 0.15\n'
            f'price_output_usd_per_mtok = 0.60\nmax_output_tokens = {max_output_tokens}\n'
            f'concurrency = {concurrency}\nrate = {{ requests = {rate_requests}, period_s = 1.0 }}\n'
            f'timeout_s = {timeout_s}\n')


def generic_campaign(tmp: Path, *, name: str, n: int, models: str, cap_usd: float = 1.0,
                     queue: Mapping[str, Any] | None = None) -> Path:
    """Write ``tmp/<name>.toml``: a ``generic`` campaign of ``n`` requests (seed 3) with its queues and state
    under ``tmp``, budget ``cap_usd`` (USD), an optional ``[queue]`` table and the ``models`` tables
    (:func:`model_table` text); return its path."""
    queue_table = ""
    if queue:
        queue_table = "\n[queue]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in queue.items())
    p = tmp / f"{name}.toml"
    p.write_text(
        f'[campaign]\nname = "{name}"\nkind = "generic"\nseed = 3\n\n'
        f"[paths]\nqueues = \"{tmp / 'queues'}\"\nstate = \"{tmp / 'state'}\"\n"
        f"{queue_table}\n[budget]\ncap_usd = {cap_usd!r}\n\n[generic]\nn_requests = {n}\n{models}",
        encoding="utf-8",
    )
    return p


def run_against_handler(tmp: Path, *, name: str, key_var: str, handler: Any, n: int, export: bool = False
                        ) -> tuple[Any, str, list[str]]:
    """Run a ``generic`` campaign of ``n`` requests of one OpenAI-compatible model (key variable ``key_var``, set by
    the caller) against a local aiohttp app whose ``/v1/chat/completions`` is ``handler``; return the outcome, what
    ``run.py status`` prints, and the text of every file under ``tmp`` plus those two (for secret scans)."""
    import anyio
    from aiohttp import web

    from geoagent.config import load_config
    from geoagent.engine import run_campaign
    from geoagent.sandbox.server import serve
    from geoagent.status import campaign_status, format_status

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)

    async def main() -> tuple[Any, str]:
        async with serve(app) as base:
            cfg = load_config(generic_campaign(tmp, name=name, n=n, models=model_table(
                base_url=base, key_var=key_var, concurrency=1 if n < 4 else 2)))
            out = await run_campaign(cfg, live=False, handle_signals=False, export=export)
            return out, format_status(campaign_status(cfg))

    out, status = anyio.run(main)
    texts = [out.summary(), status] + [p.read_bytes().decode("latin-1") for p in Path(tmp).rglob("*") if p.is_file()]
    return out, status, texts


def run_cli(path: Path, capsys: Any, *extra: str) -> tuple[int, str, str]:
    """``run.py run PATH --no-live [extra...]`` in this process: exit code, stdout (the summary), stderr (the
    warnings); ``capsys`` is pytest's fixture (emptied first)."""
    from geoagent.cli import main

    capsys.readouterr()
    rc = main(["run", str(path), "--no-live", *extra])
    got = capsys.readouterr()
    return rc, got.out, got.err


def geoverify_replay_toml(tmp: Path, name: str, release_dir: Path, *, replay_path: Path | None = None,
                          cap_usd: float = 0.0, queue: str = "", geoverify: str = "n_boot = 0") -> str:
    """A GeoVerify campaign file (TOML text) replaying recorded answers (default: the release sample).

    ``queue``: lines for a ``[queue]`` table (none when empty); ``geoverify``: lines of the ``[geoverify]``
    table after its ``release_dir``. Queues and state live under ``tmp``.
    """
    replay = replay_path or release_dir / "verify_raw_sample.jsonl"
    queue_table = f"[queue]\n{queue}\n" if queue else ""
    return f"""
[campaign]
name = "{name}"
kind = "geoverify"
[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"
{queue_table}[budget]
cap_usd = {cap_usd}
[[models]]
name = "release-replay"
provider = "replay"
model = "recorded"
replay = {{ path = "{replay}", key_field = "replay_key", record_key_fields = ["trial_id", "model"], text_field = "raw" }}
[geoverify]
release_dir = "{release_dir}"
{geoverify}
"""


def geoverify_over_crawl_toml(tmp: Path, *, name: str, crawl_dir: Path, images: Path, trials: str = "build",
                              n_per_band: int | None = None, rate: float | None = None) -> Path:
    """Write ``<tmp>/gv.toml``: a GeoVerify campaign ``name`` (seed 7, cap $1, one simulated model ``sim``, no
    bootstrap) over a crawl's folder ``crawl_dir`` (set in ``[geoverify]`` too, which wins over
    ``$GEOAGENT_RELEASE`` as in the demo's campaign files) and its ``images`` folder; ``trials`` "build" (the trial
    builder, ``n_per_band`` per band when given) or "release" (the crawl's verify_trials.csv); ``rate``: the
    model's requests per second when given. Returns the path."""
    rate_line = f"rate = {{ requests = {rate}, period_s = 1.0 }}\n" if rate is not None else ""
    band_line = f"n_per_band = {n_per_band}\n" if n_per_band is not None else ""
    p = tmp / "gv.toml"
    p.write_text(f"""
[campaign]
name = "{name}"
kind = "geoverify"
seed = 7
[paths]
release_dir = "{crawl_dir}"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
{rate_line}[geoverify]
trials = "{trials}"
release_dir = "{crawl_dir}"
{band_line}image_root = "{images}"
n_boot = 0
""", encoding="utf-8")
    return p


def paid_keys(app: Any) -> Counter[str]:
    """How many times the fake ``app`` answered each request key with 200 (billed), from its call log."""
    return Counter(r["key"] for r in app["calls"] if r["status"] == 200)


def ledger_figures(cfg: Any) -> tuple[list[str], dict[str, int]]:
    """The campaign's ledger consistency problems (empty when sound) and its open-reserved and
    unknown-outcome totals (nano-USD) with the number of stored results, read from its state folder."""
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        problems = st.ledger.check_consistency()
        totals = st.ledger.db.read("SELECT reserved_nusd, unknown_nusd FROM ledger_totals WHERE id = 1")[0]
        n_results = len(dict(st.store.iter_results("results")))
    return problems, {"reserved_nusd": totals[0], "unknown_nusd": totals[1], "results": n_results}


def open_reservations(db: Path) -> int:
    """Open ledger reservations in the campaign database ``db`` (calls on the wire), read-only; 0 while the file
    is missing or not yet set up."""
    import sqlite3

    if not db.is_file():
        return 0
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return conn.execute("SELECT COUNT(*) FROM reservations WHERE state = 'open'").fetchone()[0]
    except sqlite3.Error:
        return 0


def run_with_calls_on_the_wire(tmp: Path, *, name: str, latency_ms: int, key: str, key_var: str, in_flight: int,
                               timeout_s: float, n: int = 12, env_extra: Mapping[str, str] | None = None):
    """Context manager: the OpenAI-compatible fake in its own process (``latency_ms`` per answer, API key ``key``)
    and ``run.py run`` of a generic campaign of ``n`` calls on it (concurrency ``in_flight``, model timeout
    ``timeout_s``; ``env_extra``: more environment variables of the run), yielded once ``in_flight`` calls are on
    the wire (open reservations). Yields ``(proc, cfgp, db, env, cmd)``; kills both processes on exit."""
    import contextlib
    import subprocess
    import sys
    import time

    from geoagent import constants as C
    from geoagent.sandbox.server import free_port, wait_ready

    @contextlib.contextmanager
    def cm():
        repo = Path(__file__).resolve().parents[1]
        port = free_port("127.0.0.1")
        server = subprocess.Popen([sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port),
                                   "--latency-ms", str(latency_ms), "--api-key", key], cwd=repo,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        proc = None
        try:
            base = f"http://127.0.0.1:{port}"
            wait_ready(base)
            cfgp = generic_campaign(tmp, name=name, n=n, cap_usd=1.0,
                                    models=model_table(base_url=base, key_var=key_var, concurrency=in_flight,
                                                       timeout_s=timeout_s))
            db = tmp / "state" / name / C.CAMPAIGN_DB
            env = {key_var: key, "PATH": "/usr/bin:/bin", "GEOAGENT_RUNS_INDEX": os.environ.get("GEOAGENT_RUNS_INDEX", ""), **(env_extra or {})}
            cmd = [sys.executable, str(repo / "run.py"), "run", str(cfgp), "--no-live"]
            proc = subprocess.Popen(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.monotonic() + 60
            while open_reservations(db) < in_flight:
                assert proc.poll() is None and time.monotonic() < deadline, "calls not sent in time"
                time.sleep(0.05)
            yield proc, cfgp, db, env, cmd
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait(10)
            server.kill()
            server.wait(10)

    return cm()


#: ``[[models]]`` blocks and the GeoHint geocoder block of campaign files against the in-process sandbox fakes
#: (``*.sandbox.invalid``, started by :mod:`geoagent.sandbox.launch`): a priced OpenAI-compatible model, and
#: ``g5``, a reasoning model whose 256-token cap the fake uses up (empty answer, finish reason length).
#: Both set the pace of a local fake (as geoagent/configs/geohint_sandbox.toml does): the model default,
#: 10 requests/s with 8 in flight, is a courtesy to a real provider and paced every campaign of these tests
#: (a 3-site GeoHint campaign of 81 calls spent 8 of its 13 s waiting for the rate limiter); nothing here is
#: about the model host's rate.
SANDBOX_MODEL_PACE_TOML = """concurrency = 16
rate = { requests = 1000, period_s = 1.0 }
"""
SANDBOX_GPT_TOML = """[[models]]
name = "sandbox-gpt"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 300
""" + SANDBOX_MODEL_PACE_TOML
SANDBOX_G5_TOML = """[[models]]
name = "g5"
provider = "openai"
model = "gpt-5-mini"
reasoning_model = true
base_url = "http://openai.sandbox.invalid/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 256
""" + SANDBOX_MODEL_PACE_TOML
SANDBOX_GEOCODER_TOML = """[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
nominatim_max_requests = 1000000
"""


def geohint_three_sites_toml(name: str, *, models: str = SANDBOX_GPT_TOML, geohint: str = "", tables: str = "") -> str:
    """A GeoHint campaign file (TOML text) over three release sites (``tokyo_shibuya``, ``nyc_soho``,
    ``paris_marais``; one synthetic image each; conditions ``baseline`` and ``forced``: 81 requests) with the
    sandbox geocoders: ``models`` its ``[[models]]`` tables, ``geohint`` more lines of ``[geohint]`` (e.g.
    ``n_boot = 0``), ``tables`` more tables before the models (``[queue]``, ``[images]``)."""
    return f"""
[campaign]
name = "{name}"
kind = "geohint"
seed = 1
contact = "mailto:you@example.org"

[budget]
cap_usd = 5.0

{tables}
{models}
[geohint]
conditions = ["baseline", "forced"]
images = "synthetic"
sites = ["tokyo_shibuya", "nyc_soho", "paris_marais"]
images_per_site = 1
{geohint}

{SANDBOX_GEOCODER_TOML}"""


def progress_record(pid: int, run_id: str, t: float, elapsed_s: float, **extra: Any) -> dict[str, Any]:
    """A progress record as :meth:`geoagent.runtime.progress.Progress.snapshot` writes it (the fields ``status``
    reads): one ``model_caller`` stage with 5 done, its ``requests`` queue 3 ready / 1 leased / 5 done; ``t`` and
    ``elapsed_s`` in s, ``extra`` keys added (``started``, ``finished``, ...)."""
    stage = {"stage": "model_caller", "done": 5, "failed": 0, "dead": 0, "missing": 0, "released": 0, "in_flight": 0,
             "held": 0, "rate_per_s": 1.0, "finished": False, "budget_stopped": False, "last_errors": [],
             "unreachable": {}, "resolved_errors": [], "input_edge": "requests"}
    return {"t": t, "campaign": "c", "elapsed_s": elapsed_s, "stages": [stage],
            "queues": {"requests": {"ready": 3, "leased": 1, "done": 5, "dead": 0}}, "spend": None, "eta_s": None,
            "eta_stage": None, "eta_scope": None, "http": None, "host_labels": None, "budget_stopped": False,
            "finished": False, "pid": pid, "run_id": run_id, **extra}
