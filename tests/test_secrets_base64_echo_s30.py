"""A server that echoes the request's credentials base64-encoded (``Basic base64("user:KEY")``, a gateway logging
the ``Authorization`` header as base64) must not put the key, so transformed, into the queues, state or status
(session 29's note: only the key's plain and JSON-escaped spellings were masked).

The campaign runs the real engine against a local aiohttp gateway that answers every call 401 with a JSON error
whose message repeats ``base64("Bearer " + key)``; the base64 stretches that hold the key are computed here from
RFC 4648 directly, not with the code under test.
"""

from __future__ import annotations

import base64
import random
import string

from aiohttp import web

from _model_harness import run_against_handler
from geoagent.secrets import base64_spellings, redact


def _key() -> str:
    rng = random.Random(30)  # drawn at run time: no key-shaped literal in the sources
    return "sk-proj-" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(40))


def _key_stretches(key: str) -> list[bytes]:
    """Each base64 text that encodes ``key`` after 0, 1 or 2 other bytes, cut to the characters made of the key's
    bits alone (RFC 4648 section 4: 4 characters per 3 bytes)."""
    out = []
    for before in range(3):
        enc = base64.b64encode(b"x" * before + key.encode())
        out.append(enc[(8 * before + 5) // 6: 8 * (before + len(key)) // 6])
    return out


def test_base64_spellings_hold_every_alignment_of_the_key():
    key = _key()
    spelled = set(base64_spellings(key))
    assert {s.decode() for s in _key_stretches(key)} <= spelled
    for prefix in ("", "u:", "user:", "Bearer ", "ab"):  # whatever precedes it, one spelling is in the encoding
        enc = base64.b64encode((prefix + key + "!").encode()).decode()
        assert any(s in enc for s in spelled), prefix
        masked = redact(f"header was {enc}.", [key])
        assert not any(s.decode() in masked for s in _key_stretches(key)), masked
    assert base64_spellings("short") == frozenset()


def test_a_base64_echo_of_the_key_never_reaches_queues_state_or_status(tmp_path, monkeypatch):
    key = _key()
    monkeypatch.setenv("S30_B64_KEY", key)

    async def refuse(request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        echo = base64.b64encode(auth.encode()).decode()
        return web.json_response({"error": {"message": f"invalid credentials (header {echo})", "type": "auth"}},
                                 status=401)

    out, status, texts = run_against_handler(tmp_path, name="b64", key_var="S30_B64_KEY", handler=refuse, n=4)
    assert "authentication failed" in out.summary()
    assert "invalid credentials (header " in status or "401" in status, status
    for stretch in _key_stretches(key):
        assert not any(stretch.decode() in t for t in texts), stretch
