"""``status`` and the live display say which figures are the campaign's (every run) and which the last run's
(session 12 walkthrough, points 1 and 4).

Before, after a resume ``status`` printed the queue lines and the spend over every run (``requests: ... done
1250``, ``calls 1250``) next to stage lines of the last run only (``model_caller: 61.10/s  done 1022``,
``per model: fake-gpt done 511``) with nothing saying which was which; and ``in flight 24`` / ``leased 24``
next to two models of concurrency 8 read as a broken limit (the runner leases up to 1.5 x a model's
concurrency; the HTTP layer sends at most its concurrency at once). The limit itself is checked server-side.
"""

from __future__ import annotations

import re

import anyio
import orjson
from aiohttp import web

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.runtime.queue import QueueCounts
from geoagent.sandbox.llm_common import add_latency
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from geoagent.status import campaign_status, format_status

KEY = "local-" "run-scope"


def test_status_after_a_resume_labels_campaign_totals_and_this_runs_figures(tmp_path, capsys):
    models = model_table("a") + model_table("b")
    cfgp = generic_campaign(tmp_path, name="scope", n=4, models=models)
    assert main(["run", str(cfgp), "--no-live"]) == 0
    cfgp.write_text(cfgp.read_text(encoding="utf-8").replace("n_requests = 4", "n_requests = 10"), encoding="utf-8")
    assert main(["run", str(cfgp), "--no-live"]) == 0
    capsys.readouterr()
    assert main(["status", str(cfgp)]) == 0
    out = capsys.readouterr().out
    # the queue counts every run (20 calls over two runs), the stage lines the second run's 12 only
    assert re.search(r"requests: ready +0  leased +0  done +20", out), out
    assert re.search(r"model_caller: .*done 12 ", out), out
    lines = out.splitlines()
    q = next(i for i, ln in enumerate(lines) if "requests: ready" in ln)
    assert "every run of the campaign" in lines[q - 1], out
    s = next(i for i, ln in enumerate(lines) if "model_caller:" in ln)
    header = next(ln for ln in reversed(lines[:s]) if not ln.strip().startswith(("parser", "collector")))
    assert "last run only" in header and "every run" in header, out
    assert "per model (last run): a done 6, b done 6" in out, out


def test_live_table_says_this_run_and_leased_not_in_flight():
    from geoagent.runtime.progress import live_table

    rec = {"campaign": "c", "elapsed_s": 3.0, "spend": None,
           "stages": [{"stage": "model_caller", "done": 5, "in_flight": 24, "failed": 0, "dead": 0,
                       "rate_per_s": 1.0, "idle_s": None, "finished": False}]}
    table = live_table(rec, final=False)
    headers = [c.header for c in table.columns]
    assert "in flight" not in headers and "leased" in headers, headers
    assert "this run" in str(table.title), table.title
    assert "waiting for a" in str(table.caption) and "concurrency" in str(table.caption), table.caption


def test_leased_past_concurrency_while_each_model_keeps_its_limit(tmp_path, monkeypatch):
    """Two models of concurrency 3 on one fake: the run leases more than 6 tasks at once (each model's lane
    holds up to 1.5 x its concurrency) while the server never sees more than 3 requests of a model at once."""
    monkeypatch.setenv("SCOPE_KEY", KEY)
    app = add_latency(make_app(api_keys=[KEY]), 0.4)
    live: dict[str, int] = {}
    peak: dict[str, int] = {}

    @web.middleware
    async def in_flight(request, handler):
        body = await request.json() if request.method == "POST" else {}
        model = str(body.get("model"))
        live[model] = live.get(model, 0) + 1
        peak[model] = max(peak.get(model, 0), live[model])
        try:
            return await handler(request)
        finally:
            live[model] -= 1

    app.middlewares.insert(0, in_flight)

    async def go():
        async with serve(app) as base:
            models = (model_table("a", base_url=base, key_var="SCOPE_KEY", model="gpt-a", concurrency=3)
                      + model_table("b", base_url=base, key_var="SCOPE_KEY", model="gpt-b", concurrency=3))
            cfgp = generic_campaign(tmp_path, name="lanes", n=40, cap_usd=5.0, models=models)
            cfg = load_config(cfgp)
            return cfg, await run_campaign(cfg, live=False, handle_signals=False, export=False)

    cfg, outcome = anyio.run(go)
    assert outcome.status == "complete"
    assert peak == {"gpt-a": 3, "gpt-b": 3}, peak  # each model's concurrency holds, and is reached
    recs = [orjson.loads(x) for x in (tmp_path / "state" / "lanes" / "progress.jsonl").read_bytes().splitlines()]
    leased = max(s["in_flight"] for r in recs for s in r.get("stages", []) if s["stage"] == "model_caller")
    assert leased > 6, leased  # more leased than sent at once: what status and the live display now explain
    st = campaign_status(cfg)
    assert "leased:" not in format_status(st)  # nothing leased: no explanation
    st["queues"]["requests"] = QueueCounts(10, 8, 22, 0)  # as status reads it mid-run
    text = format_status(st)
    assert ("queues, every run of the campaign (leased: taken by a process, being handled or waiting for a slot; "
            "a model's leased requests may outnumber its concurrency, at most that many are sent at once):") in text, text
