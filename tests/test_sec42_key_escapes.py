"""Security breaker, session 42, #1: an API key echoed back by a provider's error body with every character a JSON
``\\uXXXX`` escape (``key was \\u0073\\u006b\\u002d...``) was not masked: ``run.py dead`` printed it and the queue
stored it. Now the fully escaped spelling (any case of its hex) is masked whole by :func:`geoagent.secrets.redact`
and by the HTTP layer's scrub of its error texts."""

from __future__ import annotations

import random
import string

import pytest
from aiohttp import web

from _model_harness import run_against_handler
from geoagent.runtime.http import _scrub, _secrets_of
from geoagent.secrets import redact, unicode_escape_spellings


def _key() -> str:
    rng = random.Random(42)  # drawn at run time: no key-shaped literal in the sources
    return "sk-proj-" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(40))


def _escaped(key: str, upper: bool = False) -> str:
    return "".join(f"\\u{ord(c):04X}" if upper else f"\\u{ord(c):04x}" for c in key)


def test_the_escape_spelling_is_every_character_as_a_json_escape():
    assert unicode_escape_spellings("sk-Ab/1") == frozenset({r"\u0073\u006b\u002d\u0041\u0062\u002f\u0031"})
    # past U+FFFF: the UTF-16 surrogate pair, as JSON writes it
    assert unicode_escape_spellings("k\U0001F511") == frozenset({r"\u006b\ud83d\udd11"})


@pytest.mark.parametrize("upper", [False, True])
def test_redact_and_the_http_scrub_mask_a_fully_escaped_key(upper):
    key = _key()
    echoed = _escaped(key, upper)
    text = f'{{"error": {{"message": "key was {echoed} ok"}}}}'
    masked = redact(text, [key])
    assert masked == '{"error": {"message": "key was *** ok"}}', masked
    secrets = _secrets_of("https://api.example.invalid/v1/chat/completions", None, {"Authorization": f"Bearer {key}"})
    assert _scrub(text, secrets) == '{"error": {"message": "key was <redacted> ok"}}'
    # ordinary escaped text stays as it was (the spelling is masked whole)
    plain = r'{"message": "caf\u00e9 \u0073\u006b\u002d is fine"}'
    assert redact(plain, [key]) == plain


def test_an_escaped_echo_never_reaches_queues_state_or_status(tmp_path, monkeypatch):
    key = _key()
    monkeypatch.setenv("S42_UESC_KEY", key)
    echoed = _escaped(key)

    async def refuse(request: web.Request) -> web.Response:
        body = '{"error": {"message": "key was ' + echoed + ' ok"}}'
        return web.Response(text=body, status=400, content_type="application/json")

    out, status, texts = run_against_handler(tmp_path, name="uesc", key_var="S42_UESC_KEY", handler=refuse, n=3,
                                             export=True)
    assert out.counts["requests"].dead == 3, out.summary()
    assert "key was" in status and echoed not in status, status
    assert not any(echoed in t or echoed.upper() in t or key in t for t in texts)
    # the escapes of a fragment (the key's first 12 characters) are nowhere either
    assert not any(_escaped(key[:12]) in t for t in texts)
