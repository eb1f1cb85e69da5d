"""The local OpenAI-compatible fake as a user starts it by hand (``python -m geoagent.sandbox.llm_openai``).

A first-time user found that it printed nothing at start-up (which port? which base_url?), answered
``GET /v1/models`` (what an OpenAI client calls first) with 404, and dumped a full ``ConnectionResetError``
traceback for every client that dropped its connection. Now: one ``listening on ...`` line on stderr, the
"List models" shape of the OpenAI API reference, and one log line per dropped client.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import aiohttp
import pytest

from geoagent.providers import ModelRequest, ProviderSettings, make_provider
from geoagent.runtime.http import HostPolicy, HttpClient
from geoagent.sandbox.llm_openai import DEFAULT_MODEL_IDS, MODEL_OWNER, make_app
from geoagent.sandbox.server import serve
from _docs import docs_text
from _made_up_keys import made_up_key

REPO = Path(__file__).resolve().parents[1]
KEY = made_up_key("sk-", 24, seed="by-hand-n16")
FAST = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=2, backoff_base_s=0.01, backoff_max_s=0.02, timeout_s=10.0)


def _start(module: str, *args: str) -> tuple[subprocess.Popen, str]:
    """Start ``python -m module --port 0 ...``; return the process and its first stderr line."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", module, "--port", "0", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.5)
        if ready:
            return proc, proc.stderr.readline().rstrip("\n")
        if proc.poll() is not None:
            break
    proc.kill()
    raise AssertionError(f"{module} printed nothing within 30 s")


def _stop(proc: subprocess.Popen) -> tuple[int, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return proc.returncode, err


def _drop_mid_request(port: int, *, body_sent: bool) -> None:
    """Send a request with a key, then reset the connection (SO_LINGER 0) before the answer."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {KEY}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body) if body_sent else 100000}\r\n\r\n").encode()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    s.sendall(head + (body if body_sent else b"{" * 1000))
    time.sleep(0.05)
    s.close()


def test_openai_fake_by_hand_banner_models_and_quiet_disconnects():
    proc, banner = _start("geoagent.sandbox.llm_openai", "--latency-ms", "300")
    try:
        m = re.fullmatch(r"listening on http://127\.0\.0\.1:(\d+) \(OpenAI-compatible; base_url "
                         r"http://127\.0\.0\.1:(\d+)/v1\)", banner)
        assert m and m.group(1) == m.group(2), banner
        port = int(m.group(1))
        base_url = f"http://127.0.0.1:{port}/v1"

        # the base_url from the banner works for a campaign's provider as printed
        async def call() -> str:
            async with HttpClient(default_policy=FAST) as http:
                prov = make_provider(ProviderSettings(kind="openai", model="hand-model", base_url=base_url, api_key=KEY), http)
                resp = await prov.generate(ModelRequest(provider="openai", model="hand-model", prompt="where?",
                                                        params={"max_output_tokens": 32}))
                return resp.text

        assert asyncio.run(call())
        req = urllib.request.Request(f"{base_url}/models", headers={"Authorization": f"Bearer {KEY}"})
        with urllib.request.urlopen(req, timeout=10) as r:
            listing = json.loads(r.read())
        assert listing["object"] == "list"
        assert [d["id"] for d in listing["data"]] == [*DEFAULT_MODEL_IDS, "hand-model"]
        assert all(set(d) == {"id", "object", "created", "owned_by"} and d["object"] == "model" for d in listing["data"])

        # three clients drop their connection mid-request (two during the simulated model time, one mid-upload)
        _drop_mid_request(port, body_sent=True)
        _drop_mid_request(port, body_sent=True)
        _drop_mid_request(port, body_sent=False)
        time.sleep(1.5)
    finally:
        code, err = _stop(proc)
    assert code == 0, err  # SIGTERM ends it cleanly
    assert "Traceback" not in err and "Error handling request" not in err, err
    gone = [line for line in err.splitlines() if "went away during POST /v1/chat/completions" in line]
    assert len(gone) == 3, err
    assert all("ConnectionResetError" in line for line in gone)


@pytest.mark.parametrize(("module", "label"), [
    ("geoagent.sandbox.llm_anthropic", "Anthropic Messages API"),
    ("geoagent.sandbox.llm_gemini", "Gemini generateContent API"),
])
def test_other_fakes_print_their_banner(module, label):
    proc, banner = _start(module)
    try:
        m = re.fullmatch(rf"listening on (http://127\.0\.0\.1:\d+) \({re.escape(label)}; base_url (\S+)\)", banner)
        assert m and m.group(2) == m.group(1), banner  # their base_url is the server root
    finally:
        code, _ = _stop(proc)
    assert code == 0


def test_models_endpoints_speak_the_list_models_shape_and_check_the_key():
    async def go() -> dict:
        out = {}
        app = make_app(api_keys=[KEY], models=["gpt-4o-mini", "local-vlm"])
        async with serve(app) as base, aiohttp.ClientSession() as s:
            auth = {"Authorization": f"Bearer {KEY}"}
            async with s.get(f"{base}/v1/models") as r:
                out["nokey"] = (r.status, await r.json())
            async with s.get(f"{base}/v1/models", headers={"Authorization": "Bearer wrong-key-123456"}) as r:
                out["badkey"] = (r.status, await r.json())
            async with s.get(f"{base}/v1/models", headers=auth) as r:
                out["list"] = (r.status, await r.json())
            async with s.get(f"{base}/models", headers=auth) as r:  # no /v1: a 404, as api.openai.com (prov39 #7)
                out["list_root"] = (r.status, await r.json())
            async with s.get(f"{base}/v1/models/local-vlm", headers=auth) as r:
                out["one"] = (r.status, await r.json())
            out["calls"] = len(app["calls"])
        return out

    out = asyncio.run(go())
    assert out["nokey"][0] == 401 and out["nokey"][1]["error"]["type"] == "invalid_request_error"
    assert out["badkey"][0] == 401 and out["badkey"][1]["error"]["code"] == "invalid_api_key"
    status, listing = out["list"]
    assert status == 200
    assert out["list_root"] == (404, {"error": {"message": "Invalid URL (GET /models)", "type": "invalid_request_error",
                                                "param": None, "code": None}})
    assert listing["object"] == "list" and [d["id"] for d in listing["data"]] == ["gpt-4o-mini", "local-vlm"]
    for d in listing["data"]:
        assert d["object"] == "model" and isinstance(d["created"], int) and d["owned_by"] == MODEL_OWNER
    assert out["one"] == (200, {"id": "local-vlm", "object": "model", "created": listing["data"][1]["created"],
                                "owned_by": MODEL_OWNER})
    assert out["calls"] == 1  # listing models is not a model call: only the 404 of the wrong path is logged


def test_readme_tells_how_to_run_the_fake_by_hand():
    text = docs_text()
    assert "python -m geoagent.sandbox.llm_openai" in text
    para = text[text.index("python -m geoagent.sandbox.llm_openai"):][:1500]
    assert "base_url" in para and "api_key_env" in para and "/v1" in para



def test_the_second_line_gives_the_fakes_settings():
    """Walk28 (status walkthrough): the banner did not say that faults were on or which ones; the Anthropic fake's
    injected 503 arrives as 529 overloaded_error, said nowhere. The line after the banner gives the settings."""
    proc, banner = _start("geoagent.sandbox.llm_anthropic", "--no-auth", "--fault-rate", "0.1", "--fault-kinds",
                          "429,503", "--latency-ms", "1500")
    try:
        assert banner.startswith("listening on http://127.0.0.1:")
        second = proc.stderr.readline().rstrip("\n")
    finally:
        _stop(proc)
    # the folder the simulated answers place photos from ends the line when one is found (newuser39 #7)
    second, _, sites = second.partition("; sites from ")
    assert second == ("settings: no key needed (--no-auth); seed 0; faults on 10% of requests (429, 503; fault seed 0; "
                      "injected 429s carry Retry-After 1 s; the Anthropic fake sends an injected 503 as 529 "
                      "overloaded_error); latency 1500 ms; images billed 765 tokens each"
                      " (the dry run estimates by the API's documented rule for the size; --image-billing documented bills by it too)"), second
    assert not sites or sites.endswith(" sites)"), sites
    proc, _ = _start("geoagent.sandbox.llm_openai")
    try:
        plain = proc.stderr.readline().rstrip("\n")
    finally:
        _stop(proc)
    plain, _, sites = plain.partition("; sites from ")
    assert plain == ("settings: key required (any non-empty); seed 0; no faults; no added latency; images billed 765 "
                     "tokens each (the dry run estimates by the API's documented rule for the size; --image-billing documented bills by it too)"), plain
    assert not sites or sites.endswith(" sites)"), sites


def test_the_settings_line_names_the_release_folder_and_its_sites(tmp_path):
    """newuser39 #7: a wrong folder makes every simulated GeoHint answer 'Unknown city'; the line names the one read."""
    (tmp_path / "sites.csv").write_text("site,lat,lon\na,1,2\nb,3,4\n", encoding="utf-8")
    proc, _ = _start("geoagent.sandbox.llm_openai", "--release-dir", str(tmp_path))
    try:
        line = proc.stderr.readline().rstrip("\n")
    finally:
        _stop(proc)
    assert line.endswith(f"; sites from {tmp_path} (2 sites)"), line


def test_settings_line_edge_cases():
    """Walk28 break review: a rate under 0.5 % read "0%", kinds without a rate read as faults on, Retry-After was
    named for kinds that never carry it, and --no-auth with --api-key hid that a sent key must be a given one."""
    import argparse

    from geoagent.sandbox.llm_common import settings_line

    def line(**kw):
        base = dict(no_auth=False, api_key=None, seed=0, fault_rate=0.0, fault_kinds=None, fault_seed=0,
                    fault_retry_after_s=1.0, latency_ms=0.0, image_billing="simulated", log=None)
        return settings_line(argparse.Namespace(**{**base, **kw}))

    assert "faults on 0.4% of requests (429, 500, 503, timeout, reset, malformed; fault seed 0; injected 429s " \
           "carry Retry-After 1 s)" in line(fault_rate=0.004)
    assert "no faults (--fault-kinds without --fault-rate)" in line(fault_kinds="500")
    assert "no faults" in line(fault_rate=0.1, fault_kinds=",")
    assert "Retry-After" not in line(fault_rate=0.1, fault_kinds="500,timeout")
    assert line(no_auth=True, api_key=["abc"]).startswith(
        "settings: no key needed (--no-auth); a key that is sent must be one of the 1 given;")
    assert line(api_key=["a", "b"]).startswith("settings: key required (one of the 2 given);")
