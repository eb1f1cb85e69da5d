"""README's `dead` column: a model call whose HTTP retries ran out is dead-lettered at its first delivery.

The README read as if `[queue] max_attempts` applied to a model's 5xx answers. It does not: the HTTP client
retries a 5xx up to the model's `max_attempts` inside one delivery, and when those run out the result is
*missing* (``Missing``, a permanent failure): the task is dead-lettered at once (deliveries = 1) however
large `[queue] max_attempts` is, and its reservation is closed (nothing stays reserved).
"""

from __future__ import annotations

from pathlib import Path

import anyio

from geoagent.config import load_config
from geoagent.engine import EXIT_INCOMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.faults import FaultConfig
from geoagent.sandbox.server import serve
from _made_up_keys import made_up_key

KEY = made_up_key("sk-", 33, seed="sandbox-dead-n20")


def _cfg(tmp: Path, base: str) -> Path:
    p = tmp / "dead.toml"
    p.write_text(f"""
[campaign]
name = "dead"
kind = "generic"
[paths]
queues = "{tmp / 'q'}"
state = "{tmp / 's'}"
[queue]
max_attempts = 8
backoff_base_s = 0.01
backoff_max_s = 0.05
[budget]
cap_usd = 1.0
[generic]
n_requests = 3
[[models]]
name = "m"
provider = "openai"
model = "sim-gpt-m"
base_url = "{base}/v1"
api_key_env = "DEAD_TEST_KEY"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 50
max_attempts = 2
timeout_s = 5.0
""", encoding="utf-8")
    return p


def test_exhausted_http_retries_dead_letter_at_the_first_delivery(tmp_path, monkeypatch):
    monkeypatch.setenv("DEAD_TEST_KEY", KEY)
    app = llm_openai.make_app(faults=FaultConfig(rate=1.0, kinds=("503",)), api_keys=[KEY])

    async def main():
        async with serve(app) as base:
            return await run_campaign(load_config(_cfg(tmp_path, base)), live=False, handle_signals=False,
                                      export=False)

    out = anyio.run(main)
    assert out.status == "incomplete" and out.exit_code == EXIT_INCOMPLETE
    dead = out.dead["requests"]
    assert out.counts["requests"].dead == 3 and len(dead) == 3
    # one delivery each, although [queue] max_attempts = 8; the reason counts the 2 HTTP attempts
    assert [d.attempts for d in dead] == [1, 1, 1]
    assert all(d.reason.startswith("Missing: retries exhausted after 2 attempts") for d in dead), dead
    assert out.spend["reserved_usd"] == 0 and out.spend["open_reservations"] == 0
    assert "(deliveries 1)" in out.summary()
