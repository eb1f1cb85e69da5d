"""Leftovers of session 11 (helper ``leftovers``), each through the local fakes (:mod:`geoagent.sandbox`):

1. A finite but absurd ``Retry-After`` (``1000000000000`` s) paused the host/model key that long: the run waited
   without a word and no process of the campaign called that model again. The pause is now bounded by
   :data:`geoagent.runtime.http.RETRY_AFTER_MAX_S` (1 day) with a warning naming the host and the value asked vs
   applied; an hour's quota reset (``Retry-After: 3600``) is still honoured as asked.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from geoagent.runtime import http as http_mod
from geoagent.runtime.http import HostPolicy, HttpClient, RetriesExhausted, host_key, limit_key
from geoagent.sandbox import echo
from geoagent.sandbox.server import serve

# --- 1. a Retry-After beyond any sensible pause --------------------------------------------------------------
RETRY_AFTER_MAX_S = 86_400.0  # documented bound (geoagent.runtime.http.RETRY_AFTER_MAX_S, checked below)
# a host whose cap is the absolute bound ([hosts] max_retry_after_s = 86400, also the default; lower caps are
# tests/test_runtime_retry_after_cap.py's): the bound still holds above any cap
P = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
               timeout_s=5.0, max_retry_after_s=RETRY_AFTER_MAX_S)


async def _pause_after(status: int, headers: dict[str, str], *, model: str | None = None
                       ) -> tuple[float | None, float, str]:
    async with serve(echo.make_app()) as base:
        host = host_key(base)
        key = limit_key(host, model) if model else host
        pols = {key: P} if model else {}
        async with HttpClient(default_policy=P, model_policies=pols) as http:
            with pytest.raises(RetriesExhausted) as ei:
                await http.request("GET", base + f"/status/{status}", params={"retry_after": headers["Retry-After"]},
                                   **({"limit": key} if model else {}))
            return ei.value.retry_after_s, http.paused_until(key) - time.monotonic(), key


def test_a_huge_finite_retry_after_is_bounded_with_a_warning_naming_the_key(caplog):
    """Before: ``paused_until`` of the model key was 1e12 s ahead and ``retry_after_s`` 1e12; no warning."""
    caplog.set_level(logging.WARNING, logger="geoagent.runtime.http")
    ra, left, key = asyncio.run(_pause_after(429, {"Retry-After": "1000000000000"}, model="gpt-x"))
    assert ra == RETRY_AFTER_MAX_S, ra
    assert RETRY_AFTER_MAX_S - 5 < left <= RETRY_AFTER_MAX_S, left
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1, warned
    assert key in warned[0] and "1000000000000 s" in warned[0] and "86400 s" in warned[0], warned[0]
    assert http_mod.RETRY_AFTER_MAX_S == RETRY_AFTER_MAX_S


def test_a_503_retry_after_beyond_the_bound_pauses_the_host_a_day():
    ra, left, _ = asyncio.run(_pause_after(503, {"Retry-After": "99999999"}))
    assert ra == RETRY_AFTER_MAX_S and RETRY_AFTER_MAX_S - 5 < left <= RETRY_AFTER_MAX_S


def test_an_hours_quota_reset_is_honoured_as_asked(caplog):
    caplog.set_level(logging.WARNING, logger="geoagent.runtime.http")
    ra, left, _ = asyncio.run(_pause_after(429, {"Retry-After": "3600"}, model="gpt-x"))
    assert ra == 3600.0 and 3595 < left <= 3600, (ra, left)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


# --- 2. a run refused for unset key variables creates nothing, also in an existing state folder -----------------
def _listing(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes) and every folder (relative path/ -> b"")."""
    out: dict[str, bytes] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel + "/" if p.is_dir() else rel] = b"" if p.is_dir() else p.read_bytes()
    return out


def _earlier_run_files(state_dir) -> None:
    """What an earlier run of the campaign left in its folder: ledger and store, host board, data import, lock."""
    import sqlite3

    from geoagent.data.store import DataStore
    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state(state_dir.name, root=state_dir.parent, recover=False):
        pass
    with DataStore.for_campaign(state_dir.name, state_dir.parent) as ds:
        ds.set_meta("release_root", "earlier")
    con = sqlite3.connect(state_dir / "hosts.sqlite")
    con.execute("CREATE TABLE earlier (x)")
    con.execute("INSERT INTO earlier VALUES (1)")
    con.commit()
    con.close()
    (state_dir / "run.lock").write_bytes(b"")
    (state_dir / "report").mkdir()
    (state_dir / "report" / "note.txt").write_text("earlier report\n")


@pytest.mark.parametrize("earlier", [False, True])
@pytest.mark.parametrize("photos", ["missing", "placeholder"])
def test_a_run_refused_for_unset_keys_leaves_an_existing_state_folder_as_it_was(
        isolated_roots, release_dir, monkeypatch, capsys, earlier, photos):
    """Before: with ``state/<campaign>/`` already there (empty, or an earlier run's), ``run`` refused for unset
    key variables (exit 2) but its read-only re-plan (the images check named in the same refusal) left
    ``campaign.sqlite``, ``hosts.sqlite``, ``data/data.sqlite`` and ``run.lock`` in it (and rewrote an earlier
    run's), while README says a refusal creates nothing. Now the folder is as it was, byte for byte."""
    from test_dry_run_walkb import _gv_real_toml

    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.delenv("WALKB_OPENAI", raising=False)
    monkeypatch.delenv("WALKB_ANTHROPIC", raising=False)
    name = f"gv-refused-{photos}-{int(earlier)}"
    extra = '[images]\nmissing = "placeholder"\n' if photos == "placeholder" else ""
    cfg = _gv_real_toml(isolated_roots, name, extra=extra)
    state_dir = isolated_roots / "state" / name
    state_dir.mkdir(parents=True)
    if earlier:
        _earlier_run_files(state_dir)
    before = _listing(isolated_roots / "state")
    assert main(["run", cfg, "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "WALKB_OPENAI" in err and "WALKB_ANTHROPIC" in err, err
    if photos == "missing":  # the re-plan still names the images problem in the same refusal
        assert "would carry placeholder pixels instead of photos" in err, err
    after = _listing(isolated_roots / "state")
    assert sorted(after) == sorted(before), (sorted(set(after) - set(before)), sorted(set(before) - set(after)))
    assert [k for k in before if before[k] != after[k]] == []
    assert not (isolated_roots / "queues").exists()


def test_a_geohint_run_refused_for_an_unset_key_leaves_an_earlier_runs_folder_as_it_was(
        isolated_roots, release_dir, monkeypatch, capsys):
    """GeoHint's plan wrote its release import into ``data/data.sqlite`` even for the read-only re-plan."""
    from test_images_missing import _gh_toml

    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.delenv("IMAGES_TEST_KEY", raising=False)
    cfg = _gh_toml(isolated_roots, "gh-refused", image_root=isolated_roots / "typo")
    state_dir = isolated_roots / "state" / "gh-refused"
    state_dir.mkdir(parents=True)
    _earlier_run_files(state_dir)
    before = _listing(isolated_roots / "state")
    assert main(["run", str(cfg), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "IMAGES_TEST_KEY" in err and "geohint.image_root" in err and "have no file" in err, err
    assert _listing(isolated_roots / "state") == before


def test_status_shows_a_model_paused_by_retry_after(tmp_path):
    """``status`` showed no pause at all (nothing read the host board's ``pauses``), so a model held by a long
    ``Retry-After`` looked merely slow; now it says which key is paused and for how long."""
    from _model_harness import generic_campaign, model_table

    from geoagent.config import load_config
    from geoagent.runtime.hostshare import HostShare, board_path
    from geoagent.status import campaign_status, format_status

    cfg = load_config(generic_campaign(tmp_path, name="paused", n=2, models=model_table("m")))
    state_dir = cfg.state_dir()
    state_dir.mkdir(parents=True)

    async def pause_published() -> str:
        async with serve(echo.make_app()) as base:
            key = limit_key(host_key(base), "gpt-x")
            async with HttpClient(default_policy=P, model_policies={key: P}) as http, \
                    HostShare(board_path(state_dir), http):
                with pytest.raises(RetriesExhausted):
                    await http.request("GET", base + "/status/429", params={"retry_after": "3600"}, limit=key)
                await asyncio.sleep(0.8)  # the board's next tick publishes it
            return key

    key = asyncio.run(pause_published())
    text = format_status(campaign_status(cfg))
    line = next((ln for ln in text.splitlines() if "paused:" in ln), None)
    assert line is not None, text
    assert f"model {key}" in line and ("for another 59 min" in line or "for another 1 h 0 min" in line), line
