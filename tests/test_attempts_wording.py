""""after 1 attempts" reads "after 1 attempt" (walkthrough 9, item J, first half).

A model whose host refuses connections (a closed local port), with one attempt allowed: the model caller's
failure says ``unreachable after 1 attempt``; the HTTP client's own exhausted-retries text likewise; two
attempts stay plural. The stored wording is what ``status`` / ``dead`` rewrite, so their patterns follow.
"""

from __future__ import annotations

import socket

import pytest

from _model_harness import CallerRig, photo_task, run, write_model_config
from geoagent.runtime.http import HttpClient, RetriesExhausted
from geoagent.status import describe_reason
from _made_up_keys import made_up_key

KEY_VAR = "GA_TEST_ATTEMPTS_KEY"
KEY = made_up_key("sk-", 33, seed="sandbox-attempts-n16")


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


@pytest.mark.parametrize("attempts, word", [(1, "1 attempt,"), (2, "2 attempts,")])
def test_unreachable_after_one_attempt_is_singular(tmp_path, monkeypatch, attempts, word):
    from geoagent.workers.model_caller import CallFailed

    monkeypatch.setenv(KEY_VAR, KEY)
    base = f"http://127.0.0.1:{_closed_port()}"
    cfg = write_model_config(tmp_path / "c.toml", base, name="closed", key_var=KEY_VAR, timeout_s=5.0,
                             max_attempts=attempts)

    async def main():
        async with HttpClient() as http:
            rig = await CallerRig(tmp_path, cfg, http).start()
            with pytest.raises(CallFailed) as ei:
                await rig.handle(photo_task(0))
            return str(ei.value)

    text = run(main(), 60)
    assert f"unreachable after {word} nothing sent" in text, text


def test_http_client_exhausted_text_and_status_rewording():
    one = str(RetriesExhausted("http://h.example/x", 1, "http 503"))
    assert one.startswith("1 attempt to http://h.example/x failed"), one
    assert str(RetriesExhausted("http://h.example/x", 3, "http 503")).startswith("3 attempts to ")
    assert describe_reason("RetriesExhausted: " + one).startswith(
        "RetriesExhausted: 1 HTTP attempt(s) to http://h.example/x failed")
    assert describe_reason("Missing: retries exhausted after 1 attempt: http 500") == (
        "Missing: retries exhausted after 1 HTTP attempt(s) in the last delivery: http 500")
