"""A ``[hosts]`` key can name an IPv6 host (config38 #10).

A model server on ``http://[::1]:8001/v1`` is keyed ``[::1]:8001`` by the HTTP layer; the config refused every
spelling of that key, so such a host could get no rate limit of its own.
"""

from __future__ import annotations

import socket

import anyio
import pytest

from _model_harness import generic_campaign
from geoagent.config import host_policies, load_config
from geoagent.engine import run_campaign
from geoagent.runtime.http import host_key
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve


def _has_ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


def test_host_keys_of_ipv6_urls_are_bracketed_and_compressed():
    assert host_key("http://[0:0:0:0:0:0:0:1]:8001/v1") == "[::1]:8001"
    assert host_key("https://[2001:DB8::1]/v1") == "[2001:db8::1]"
    assert host_key("http://127.0.0.1:8001/v1") == "127.0.0.1:8001"


def _run_on_ipv6_loopback(tmp_path, name: str, n: int, model_limits: str, hosts_table: str,
                          check=None) -> tuple:
    """Run a ``generic`` campaign of ``n`` requests of one model on the OpenAI fake served on ``[::1]``, the model
    entry ending with ``model_limits`` and followed by ``hosts_table`` (``{port}`` filled in); ``check(cfg, port)``
    runs on the loaded config first. Return the outcome and the sorted receipt times of the answered calls."""
    app = llm_openai.make_app(require_auth=False)

    async def main():
        async with serve(app, host="::1") as base:
            port = base.rsplit(":", 1)[1]
            models = (f'\n[[models]]\nname = "m"\nprovider = "openai"\nmodel = "sandbox-model"\n'
                      f'base_url = "{base}/v1"\nprice_input_usd_per_mtok = 1.0\nprice_output_usd_per_mtok = 2.0\n'
                      f'max_output_tokens = 50\n{model_limits}\n' + hosts_table.format(port=port))
            cfg = load_config(generic_campaign(tmp_path, name=name, n=n, models=models))
            if check is not None:
                check(cfg, port)
            return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    outcome = anyio.run(main)
    return outcome, sorted(c["t_wall"] for c in app["calls"] if c.get("status") == 200)


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_hosts_entry_paces_a_model_on_an_ipv6_loopback_server(tmp_path):
    n, rate = 12, 8.0

    def check(cfg, port):
        assert f"[::1]:{port}" in cfg.hosts and f"[::1]:{port}" in host_policies(cfg)

    # the written key spells the address long; the HTTP layer's key is the compressed one
    outcome, sent = _run_on_ipv6_loopback(tmp_path, "v6", n, "concurrency = 4",
                                          f'\n[hosts."[0:0::1]:{{port}}"]\nrate = {rate}\nperiod_s = 1.0\n', check)
    assert outcome.status == "complete"
    assert len(sent) == n
    # paced by the [hosts] entry: the requests after the first `rate` wait for the next window (without the entry
    # all 12 go out within a few ms; the fake shares this test's event loop, so its receipt times of the first
    # burst lag while the campaign starts up: a span, not a per-window count, is what it can show)
    assert sent[-1] - sent[0] >= (n - rate) / rate, sent


@pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_a_models_own_rate_paces_it_on_an_ipv6_host_under_a_hosts_ceiling(tmp_path):
    """review40a #2: the provider keyed its calls ``::1:PORT/model`` while the config keyed the model's limits
    ``[::1]:PORT/model``: the model's own rate was lost and every request went at once."""
    n = 6
    outcome, sent = _run_on_ipv6_loopback(tmp_path, "v6m", n, "concurrency = 1\nrate = { requests = 2, period_s = 1.0 }",
                                          '\n[hosts."[::1]:{port}"]\nrate = 100\nperiod_s = 1.0\n')
    assert outcome.status == "complete"
    assert len(sent) == n and sent[-1] - sent[0] >= (n - 2) / 2, sent  # 2 per second, the model's own rate
