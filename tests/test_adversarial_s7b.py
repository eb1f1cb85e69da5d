"""Adversarial review s7b: dry run read-only, export schema types, idle hand-off, secrets, GeoVerify small-n."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from geoagent.cli import main

CONFIG = """
[campaign]
name = "{name}"
kind = "generic"
seed = 2
[budget]
cap_usd = {cap}
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 2.0
max_output_tokens = 100
[generic]
n_requests = {n}
"""


def _config(tmp: Path, name: str, *, cap: float = 1.0, n: int = 5) -> str:
    p = tmp / f"{name}.toml"
    p.write_text(CONFIG.format(name=name, cap=cap, n=n), encoding="utf-8")
    return str(p)


def _dump(db: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def test_dry_run_does_not_write_its_cap_into_the_campaign_ledger(isolated_roots, capsys):
    """A dry run with a changed [budget] cap_usd (to see what a bigger cap would buy) must not store that cap:
    the ledger of a campaign running in another process reads its cap from the file at every reservation, so a
    dry run that writes it raises (or lowers) the cap of the live run. The dry run is documented read-only."""
    cfg = _config(isolated_roots, "capped", cap=1.0)
    assert main(["run", cfg, "--no-live"]) == 0
    db = isolated_roots / "state" / "capped" / "campaign.sqlite"
    before = _dump(db)
    capsys.readouterr()
    bigger = _config(isolated_roots, "capped", cap=500.0, n=8)
    assert main(["run", bigger, "--simulate", "--no-live"]) == 0
    assert "cap $500.0000" in capsys.readouterr().out  # the dry run did use the new cap for its estimate
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        cap_nusd = conn.execute("SELECT cap_nusd FROM ledger_totals WHERE id = 1").fetchone()[0]
    finally:
        conn.close()
    assert cap_nusd == 1_000_000_000  # $1 in nano-USD, as the run stored it
    assert _dump(db) == before  # nothing at all written (no owner row, no cap)


def _sites_csv(path: Path, sitelinks: list[str], sv: list[str]) -> None:
    from geoagent.crawl.sampler import SITES_COLUMNS

    lines = [",".join(SITES_COLUMNS)]
    for i, (sl, p) in enumerate(zip(sitelinks, sv)):
        row = {c: "" for c in SITES_COLUMNS}
        row.update(site=f"s{i}", city="Paris", country="FR", continent="Europe", landmark=f"L{i}", qid=f"Q{i + 1}",
                   lat="48.85", lon="2.35", sitelinks=sl, sv_perspective=p, selection_method="top")
        lines.append(",".join(row[c] for c in SITES_COLUMNS))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def test_old_crawl_sites_export_keeps_declared_types(tmp_path):
    """A crawl from before session 7 wrote sites.csv sitelinks as '58.0' and may have no sv_perspective value at
    all. Its export must still have the declared types (Int64 counts), as a new crawl's has, so the two exports
    concatenate (README: Parquet types never depend on the data); the fallback read by inference turned the
    counts into Float64 and an all-empty declared column into String."""
    import polars as pl

    from geoagent.crawl.export import export_crawl_tables

    old, new = tmp_path / "old", tmp_path / "new"
    old.mkdir(), new.mkdir()
    _sites_csv(old / "sites.csv", ["58.0", "7.0"], ["", ""])
    _sites_csv(new / "sites.csv", ["58", "7"], ["3", ""])
    export_crawl_tables(old)
    export_crawl_tables(new)
    a = pl.read_parquet(old / "export" / "sites.parquet")
    b = pl.read_parquet(new / "export" / "sites.parquet")
    assert a.schema["sitelinks"] == pl.Int64 and a["sitelinks"].to_list() == [58, 7]
    assert a.schema["sv_perspective"] == pl.Int64 and a["sv_perspective"].to_list() == [None, None]
    assert a.schema == b.schema
    assert pl.concat([a, b]).height == 4


def test_old_crawl_fractional_count_is_kept_not_truncated(tmp_path):
    """A value that really does not fit the declared Int64 (58.5, hand-edited) is kept as it is, not cut to 58."""
    import polars as pl

    from geoagent.crawl.export import export_crawl_tables

    _sites_csv(tmp_path / "sites.csv", ["58.5", "7.0"], ["", "2"])
    export_crawl_tables(tmp_path)
    a = pl.read_parquet(tmp_path / "export" / "sites.parquet")
    assert a["sitelinks"].to_list() == [58.5, 7.0]
    assert a.schema["sv_perspective"] == pl.Int64 and a["sv_perspective"].to_list() == [None, 2]


def _gv_cells(n_signal: int, yes_signal: int, bands: dict[str, tuple[int, int]]):
    import polars as pl

    rows = [("m", "s1", "main", "signal", "yes", yes_signal, n_signal - yes_signal, 0)]
    rows += [("m", "s1", "main", b, "no", y, n - y, 0) for b, (n, y) in bands.items()]
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"], orient="row")


def test_delta_1_none_on_few_signal_trials_is_flagged():
    """delta_1 = none ("no band reaches d' = 1") rests on EVERY band's d'; with 10 signal trials behind H every
    d' is flagged small-n, and one more 'yes' on a signal trial lifts them all past 1 (hand-computed below), so
    a 'none' shown without the mark next to a row of marked d' reads as a firm result. Flag 'none' when any
    band is flagged."""
    from scipy.stats import norm

    from geoagent.data.model import DECOY_BAND_LABELS
    from geoagent.report.geoverify import SMALL_N_MARK, render_markdown
    from geoagent.scoring.sdt import delta_1_small_n, score, small_n_bands

    sc = score(_gv_cells(10, 7, {b: (50, 15) for b in DECOY_BAND_LABELS}), pooled=False)["m"]
    d_now = norm.ppf(7.5 / 11) - norm.ppf(15.5 / 51)
    d_one_more = norm.ppf(8.5 / 11) - norm.ppf(15.5 / 51)
    assert d_now < 1 <= d_one_more  # one answer moves delta_1 from none to the nearest band
    assert sc.delta_1 is None and small_n_bands(sc) == list(DECOY_BAND_LABELS)
    assert delta_1_small_n(sc)
    assert f"none {SMALL_N_MARK}" in render_markdown({"m": sc})
    from geoagent.report.geoverify import small_n_warnings

    (line,) = small_n_warnings({"m": sc})
    assert line.endswith("delta_1 = none (no band reaches d' = 1) rests on these too.")


def test_delta_1_flagged_when_a_small_nearer_band_decides_it():
    from scipy.stats import norm

    from geoagent.data.model import DECOY_BAND_LABELS
    from geoagent.scoring.sdt import delta_1_small_n, score

    near, *others = DECOY_BAND_LABELS
    sc = score(_gv_cells(50, 40, {near: (5, 3), **{b: (50, 2) for b in others}}), pooled=False)["m"]
    assert norm.ppf(40.5 / 51) - norm.ppf(3.5 / 6) < 1 <= norm.ppf(40.5 / 51) - norm.ppf(2.5 / 6)
    assert sc.delta_1 == others[0]
    assert delta_1_small_n(sc)


def test_dry_run_changes_no_lease(isolated_roots, capsys):
    """A dry run ('nothing enqueued', read-only) must not expire leases: with no other process holding the run
    lock it ran the real run's start-up recovery (every lease expired and redelivered), a queue write."""
    import asyncio

    from geoagent import constants as C
    from geoagent.runtime.sqlite_queue import SQLiteQueue

    cfg = _config(isolated_roots, "leased", n=3)
    assert main(["run", cfg, "--no-live"]) == 0
    q = SQLiteQueue.open(isolated_roots / "queues", "leased", C.EDGE_REQUESTS)

    async def lease_one():
        await q.put("extra-task", {"model": "sim", "prompt": "x"})
        return await q.lease(1, visibility_timeout_s=3600)

    try:
        leased = asyncio.run(lease_one())
        assert [t.key for t in leased] == ["extra-task"]
        assert q.counts_sync().leased == 1
        capsys.readouterr()
        assert main(["run", _config(isolated_roots, "leased", n=4), "--simulate", "--no-live"]) == 0
        assert q.counts_sync().leased == 1  # still leased to us: the dry run changed nothing
    finally:
        q.close_sync()


def test_numeric_single_label_host_is_judged_by_its_address():
    """'1753672896' and '0x68120007' have no dot, so the single-label rule called them LAN names, but the
    system resolver (inet_aton) reads them as the public IPv4 address 104.134.236.192 / 104.18.0.7: a paid API
    reached so must state prices like any public address. The loopback in the same spelling stays local."""
    import ipaddress
    import socket

    from geoagent.config import is_local_host

    assert socket.inet_aton("1753672896") == ipaddress.ip_address("104.134.236.192").packed
    assert socket.inet_aton("0x68120007") == ipaddress.ip_address("104.18.0.7").packed
    assert not is_local_host("1753672896") and not is_local_host("0x68120007")
    assert is_local_host("2130706433")  # 127.0.0.1
    assert is_local_host("my-gpu-box") and is_local_host("ollama")


def test_stage_error_text_stored_in_the_queue_is_scrubbed_of_known_keys(tmp_path):
    """Keys never appear in state (issue 2 point 8): the log filter scrubs every revealed key from log lines, but
    the text of a stage's exception also goes into the queue (dead-letter reason, shown by `run.py dead`) and the
    stage's last errors (progress file, `status`). A handler whose error message carries a key (a client library
    quoting its request) must not store it there."""
    import anyio

    from geoagent.runtime.queue import open_queue
    from geoagent.runtime.stage import PermanentFailure, Stage, StageContext
    from geoagent.runtime.worker import StageRunner
    from geoagent.secrets import lookup_secret

    key = "sk-adv7b-" + "Q7x" * 10
    secret = lookup_secret("ADV7B_KEY", environ={"ADV7B_KEY": key})

    class Leaky(Stage):
        name = "leaky"
        input_edge = "a"
        output_edge = None
        concurrency = 1

        async def handle(self, task, ctx):
            raise PermanentFailure(f"401 from https://api.example.com/v1?api_key={secret.reveal()}&x=1")

    async def main():
        q = open_queue(tmp_path / "q", "c", "a")
        try:
            await q.put("t1", {})
            runner = StageRunner(Leaky(), q, None, StageContext("c"))
            await runner.run()
            dead = await q.dead_letters()
            return [d.reason for d in dead], list(runner.stats.last_errors)
        finally:
            await q.close()

    reasons, last = anyio.run(main)
    assert len(reasons) == 1 and "401 from" in reasons[0]
    assert key not in reasons[0] and all(key not in e for e in last)


def test_a_short_key_of_a_paid_model_is_scrubbed():
    from geoagent.secrets import lookup_secret, redact

    secret = lookup_secret("ADV7B_SHORT", environ={"ADV7B_SHORT": "Zq7#k2P"})
    assert redact(f"upstream said: bad key {secret.reveal()}") == "upstream said: bad key ***"


def test_placeholder_and_photo_requests_have_different_keys(tmp_path):
    from geoagent.config import config_from_dict
    from geoagent.workers.model_caller import build_request

    photo = tmp_path / "img1.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xd9")
    cfg = config_from_dict({"campaign": {"name": "k"}, "budget": {"cap_usd": 1.0},
                            "models": [{"name": "sim", "provider": "simulated", "model": "sim-1",
                                        "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0}]})
    base = {"model": "sim", "prompt": "Where is this?", "image_id": "img1"}
    _, placeholder = build_request(cfg, {**base, "image_ref": None})
    _, real = build_request(cfg, {**base, "image_ref": str(photo)})
    assert placeholder.key() != real.key()


def test_paid_third_party_host_without_key_variable_is_warned():
    import warnings

    from geoagent.config import config_from_dict

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = config_from_dict({"campaign": {"name": "k"}, "budget": {"cap_usd": 1.0},
                                "models": [{"name": "or", "provider": "openai", "model": "qwen",
                                            "base_url": "https://openrouter.ai/api/v1",
                                            "price_input_usd_per_mtok": 1.0, "price_output_usd_per_mtok": 2.0}]})
    assert cfg.models[0].paid and cfg.models[0].key_env is None
    assert any("api_key_env" in str(w.message) for w in caught)
