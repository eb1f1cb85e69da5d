"""A Redis URL read from ``[backend] url_env`` is masked whole, never by its fragments (session 15 final CI).

The URL is looked up as a secret (it may hold a password). Since fragments of 8+ characters of a secret are
masked (a truncated key echo), its "127.0.0.1:" run masked every local address in every later log line of the
process: "host ***56385 unreachable", which broke the unreachable-host messages (and their tests, after a Redis
test had run in the same process). The URL is now masked only whole (any case); its password, remembered on its
own, is still masked with its fragments."""
from __future__ import annotations

from types import SimpleNamespace

from geoagent.runtime.backend import redis_url
from geoagent.secrets import redact


def test_a_redis_url_masks_itself_and_its_password_but_not_its_host_elsewhere(tmp_path, monkeypatch):
    password = "pw-" + "Xk29Qm7Tz4Lr8Vn3"
    url = f"redis://:{password}@127.0.0.1:52885/0"
    monkeypatch.setenv("GEOAGENT_TEST_REDIS_URL_S15", url)
    cfg = SimpleNamespace(backend=SimpleNamespace(kind="redis", url_env="GEOAGENT_TEST_REDIS_URL_S15"),
                          source="c.toml")
    assert redis_url(cfg, dotenv_path=tmp_path / "none.env") == url
    line = "stage fetch: host 127.0.0.1:56385 unreachable (Cannot connect to host 127.0.0.1:56385)"
    assert redact(line) == line
    assert redact(f"connect {url} failed") == "connect *** failed"
    assert redact(f"connect {url.upper()} failed") == "connect *** failed"
    assert password not in redact(f"auth {password[:12]}... refused")
    assert "refused" in redact(f"auth {password} refused")
