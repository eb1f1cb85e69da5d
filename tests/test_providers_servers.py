"""The fake LLM servers as separate processes: ``python -m`` entry points, ``spawn()``, and the JSONL call log
that a test reads from outside the server process (also after the server was killed)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.llm_common import CallLog
from geoagent.sandbox.server import free_port, spawn, wait_ready

KEY = "sk-proc-test-key-0001"
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=8, max_attempts=8, backoff_base_s=0.005, backoff_max_s=0.02, timeout_s=10.0)
REPO = Path(__file__).resolve().parents[1]


async def _calls(kind: str, base_url: str, n: int) -> list[tuple[ModelRequest, object]]:
    out = []
    async with HttpClient(default_policy=FAST) as http:
        prov = make_provider(ProviderSettings(kind=kind, model="proc-model", base_url=base_url, api_key=KEY), http)
        reqs = [ModelRequest(provider=kind, model="proc-model", prompt=f"where {i}?", params={"max_output_tokens": 64}) for i in range(n)]
        resps = await asyncio.gather(*(prov.generate(r) for r in reqs))
        out = list(zip(reqs, resps, strict=True))
    return out


def test_python_m_server_logs_to_jsonl_and_survives_as_file(tmp_path):
    port = free_port()
    log = tmp_path / "calls.jsonl"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "geoagent.sandbox.llm_openai", "--port", str(port), "--log", str(log), "--api-key", KEY,
           "--fault-rate", "0.3", "--fault-kinds", "429,500", "--fault-retry-after-s", "0", "--seed", "9"]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_ready(f"http://127.0.0.1:{port}", timeout_s=30)
        results = asyncio.run(_calls("openai", f"http://127.0.0.1:{port}/v1", 20))
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_sandbox/requests", timeout=10) as r:
            injected = json.loads(r.read())["injected"]
        assert sum(injected.values()) > 0  # the faults really happened
    finally:
        proc.send_signal(signal.SIGKILL)  # killed, not stopped: the log must already be on disk
        proc.wait(timeout=10)
    records = CallLog.read(log)
    ok = {r["key"]: r for r in records if r["status"] == 200}
    assert len(ok) == 20  # 429/500 never reach the handler; one billed call per request
    # ... but every try is in the log: the faulted ones with the fault and the status sent, not billed
    faulted = [r for r in records if r["fault"] is not None]
    assert len(records) == 20 + len(faulted) and len(faulted) == sum(injected.values())
    assert all(r["status"] is None and r["status_sent"] == int(r["fault"]) and r["key"] in ok for r in faulted)
    for req, resp in results:
        r = ok[req.key()]
        assert (r["input_tokens"], r["output_tokens"]) == (resp.usage.input_tokens, resp.usage.output_tokens)
    assert sum(r["input_tokens"] + r["output_tokens"] for r in records) == sum(
        resp.usage.input_tokens + resp.usage.output_tokens for _, resp in results
    )


def test_spawned_anthropic_and_gemini_servers(tmp_path):
    for kind, factory in (("anthropic", "geoagent.sandbox.llm_anthropic:make_app"), ("gemini", "geoagent.sandbox.llm_gemini:make_app")):
        log = tmp_path / f"{kind}.jsonl"
        proc, url = spawn(factory, token_log=str(log), api_keys=[KEY], seed=2)
        try:
            wait_ready(url, timeout_s=30)
            results = asyncio.run(_calls(kind, url, 5))
        finally:
            proc.terminate()
            proc.join(timeout=10)
        records = CallLog.read(log)
        assert sorted(r["key"] for r in records) == sorted(req.key() for req, _ in results)
        assert all(r["api"] == kind and r["status"] == 200 for r in records)


def test_call_log_ignores_torn_last_line(tmp_path):
    p = tmp_path / "log.jsonl"
    log = CallLog(p)
    log.append({"key": "a", "status": 200})
    log.close()
    with p.open("ab") as fh:
        fh.write(b'{"key": "b", "sta')  # the writer died mid-line
    assert CallLog.read(p) == [{"key": "a", "status": 200}]
    assert CallLog.read(tmp_path / "absent.jsonl") == []
