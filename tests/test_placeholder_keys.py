"""Placeholder pixels and request keys (adversarial review s7b, finding kept as a strict xfail until session 10).

A request sent with placeholder pixels (its image had no file: ``[images] missing = "placeholder"``, or a
simulated model) had the request key of the same request with the photo, since the key hashes the image id and
never the pixels: an answer about a placeholder could stand in for the photo's. Now a placeholder request's key
has one more component (``pixel_source``), and only it: every request sent with a photo keeps the key it always
had (stored campaigns are not asked, or paid for, again). Tasks queued with placeholders keep their request when
the photos arrive later: the next run (and its dry run) says how many, and how to ask them with the photos.
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import anyio
import orjson
from PIL import Image as PILImage

from geoagent.cli import main
from geoagent.config import config_from_dict, load_config
from geoagent.engine import run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.server import serve
from geoagent.workers.model_caller import build_request

MODELS = [{"name": "sim", "provider": "simulated", "model": "sim-1", "price_input_usd_per_mtok": 1.0,
           "price_output_usd_per_mtok": 2.0, "max_output_tokens": 64},
          {"name": "rep", "provider": "replay", "model": "rec-1", "replay": {"path": "none.jsonl"}}]


def _legacy_key(provider: str, model: str, prompt: str, image_id: str | None, params: dict) -> str:
    """The request key as every earlier version computed it (stored campaigns hold these)."""
    blob = orjson.dumps({"provider": provider, "model": model, "prompt": prompt, "image_id": image_id,
                         "params": params}, option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


def test_only_placeholder_requests_change_key(tmp_path):
    photo = tmp_path / "img1.jpg"
    photo.write_bytes(b"\xff\xd8\xff\xd9")
    cfg = config_from_dict({"campaign": {"name": "k"}, "budget": {"cap_usd": 1.0}, "models": MODELS})
    base = {"model": "sim", "prompt": "Where is this?", "image_id": "img1"}
    cases = {"photo": {**base, "image_ref": str(photo)},
             "text": {"model": "sim", "prompt": "Where is this?"},
             "blank": {**base, "image_id": "blank:gray#img1", "image_ref": "blank:gray"},
             "synthetic": {**base, "image_ref": "synthetic:7"},
             "replay placeholder": {**base, "model": "rep", "image_ref": None}}
    for what, payload in cases.items():
        m, req = build_request(cfg, payload)
        assert req.pixel_source is None, what
        assert req.key() == _legacy_key(m.provider, m.model, req.prompt, req.image_id, req.params), what
    m, ph = build_request(cfg, {**base, "image_ref": None})
    assert ph.pixel_source == "placeholder" and ph.image_id == "img1"  # the image id itself is unchanged
    assert ph.key() != _legacy_key(m.provider, m.model, ph.prompt, ph.image_id, ph.params)
    assert ph.key() != build_request(cfg, cases["photo"])[1].key()


# --- end to end: a GeoVerify campaign whose photos arrive after a run with placeholders ------------------------


def _images(release_dir: Path) -> dict[str, str]:
    with open(release_dir / "verify_trials_sample.csv", newline="", encoding="utf-8-sig") as f:
        return {r["image_id"]: r["path"].replace("\\", "/") for r in csv.DictReader(f)}


def _photo(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.new("RGB", (64, 48), (120, 140, 160)).save(path, "JPEG")


def _toml(tmp: Path, name: str, image_root: Path) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(
        f'[campaign]\nname = "{name}"\nkind = "geoverify"\nseed = 1\n[budget]\ncap_usd = 5.0\n'
        f'[queue]\nmax_attempts = 2\nbackoff_base_s = 0.01\nbackoff_max_s = 0.05\n'
        f'[[models]]\nname = "sim"\nprovider = "simulated"\nmodel = "sim-1"\nbase_url = "http://PLACEHOLDER/v1"\n'
        f'price_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\nmax_output_tokens = 64\n'
        f'concurrency = 8\nrate = {{ requests = 5000, period_s = 1.0 }}\n'
        f'[geoverify]\nn_boot = 0\nimage_root = "{image_root}"\n', encoding="utf-8")
    return p


def test_photos_after_placeholders_new_keys_and_a_warning_with_the_way_out(isolated_roots, release_dir,
                                                                          monkeypatch, capsys):
    from geoagent.geoverify.plan import plan_campaign

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    env = isolated_roots
    images = _images(release_dir)
    root = env / "photos"
    have = sorted(images)[:3]
    for iid in have:
        _photo(root / images[iid])
    apps: list = []  # one fake per run (an aiohttp app serves one event loop)

    async def go(path: Path):
        apps.append(app := llm_openai.make_app(require_auth=False))
        async with serve(app) as base:
            path.write_text(templates[path].replace("http://PLACEHOLDER/v1", f"{base}/v1"))
            return await run_campaign(load_config(path), live=False, handle_signals=False, export=False)

    def photo_tasks(path: Path) -> dict[str, str]:
        """task key -> request key of each planned task that carries a photo file."""
        cfg = load_config(path)
        out = {}
        for key, p in plan_campaign(cfg, store_data=False).messages:
            if p.get("image_ref") and not str(p["image_ref"]).startswith("blank:"):
                out[key] = (p["image_id"], build_request(cfg, p)[1].key())
        return out

    first = _toml(env, "gv-late", root)
    templates = {first: first.read_text()}
    out = anyio.run(go, first)
    assert out.exit_code == 0, out.summary()
    calls_first = {c["key"] for c in apps[0]["calls"] if c["status"] == 200}
    assert not [ln for ln in out.extra_lines if "queued by an earlier run" in ln]

    for iid in images:  # the photos arrive
        if iid not in have:
            _photo(root / images[iid])
    now = photo_tasks(first)
    late = {k for k, (iid, _) in now.items() if iid not in have}
    assert late and len(late) < len(now)
    # a placeholder answer is stored under a key of its own: no photo request of the missing images has it,
    # while the requests sent with a photo the first time kept theirs
    assert not {rk for k, (_, rk) in now.items() if k in late} & calls_first
    assert {rk for k, (_, rk) in now.items() if k not in late} <= calls_first

    # the dry run and the run of the same campaign name the tasks still holding placeholder requests
    assert main(["run", str(first), "--simulate", "--no-live"]) == 0
    dry = [ln for ln in capsys.readouterr().out.splitlines() if "queued by an earlier run" in ln]
    assert len(dry) == 1 and f"{len(late)} planned tasks (model 'sim': {len(late)})" in dry[0], dry
    again = anyio.run(go, first)
    assert again.exit_code == 0, again.summary()
    assert apps[1]["calls"] == []  # every task was done: nothing asked again
    warn = [ln for ln in again.extra_lines if "queued by an earlier run" in ln]
    assert len(warn) == 1, again.extra_lines
    assert f"{len(late)} planned tasks (model 'sim': {len(late)}) were queued by an earlier run of campaign " \
           "gv-late with placeholder pixels (no file under geoverify.image_root then)" in warn[0]
    assert "new [campaign] name" in warn[0]

    # the way out it names: a new campaign name asks every task with its photo, and warns no more
    second = _toml(env, "gv-late-photos", root)
    templates[second] = second.read_text()
    out2 = anyio.run(go, second)
    assert out2.exit_code == 0, out2.summary()
    assert not [ln for ln in out2.extra_lines if "queued by an earlier run" in ln or "have no file" in ln]
    sent = {c["key"] for c in apps[2]["calls"] if c["status"] == 200}
    assert {rk for _, rk in photo_tasks(second).values()} <= sent


def test_photos_after_placeholders_counts_only_placeholder_tasks_that_now_have_a_photo(tmp_path):
    """The counting rule on its own (GeoHint plans go through it too): a task queued with an image id and no
    ``image_ref`` that the plan now gives a file counts; a task queued with its photo, a gray-field control, a
    task still without a file, a replay model's (no pixels sent) and a task never queued do not."""
    from geoagent import constants as C
    from geoagent.image_files import photos_after_placeholders
    from geoagent.runtime.sqlite_queue import SQLiteQueue, queue_path

    doc = {"campaign": {"name": "ph-count"}, "budget": {"cap_usd": 1.0}, "paths": {"queues": str(tmp_path / "q")},
           "models": MODELS}
    cfg = config_from_dict(doc)
    photo = str(tmp_path / "a.jpg")
    then = {"t1|sim": {"model": "sim", "image_id": "a", "image_ref": None},  # placeholder, photo now: counts
            "t2|sim": {"model": "sim", "image_id": "b", "image_ref": photo},  # photo then and now
            "t3|sim": {"model": "sim", "image_id": "blank:gray#c", "image_ref": "blank:gray"},
            "t4|sim": {"model": "sim", "image_id": "d", "image_ref": None},  # still no file
            "t1|rep": {"model": "rep", "image_id": "a", "image_ref": None}}  # replay: sends no pixels
    now = {**then, "t1|sim": {**then["t1|sim"], "image_ref": photo}, "t1|rep": {**then["t1|rep"], "image_ref": photo},
           "t5|sim": {"model": "sim", "image_id": "e", "image_ref": photo}}  # never queued
    assert photos_after_placeholders(cfg, list(now.items()), key="geohint.image_root") is None  # no queue yet
    path = queue_path(cfg.queues_root(), cfg.name, C.EDGE_REQUESTS)
    path.parent.mkdir(parents=True, exist_ok=True)
    q = SQLiteQueue(path, name=C.EDGE_REQUESTS)
    try:
        q.put_many_sync(then.items())
    finally:
        q.close_sync()
    line = photos_after_placeholders(cfg, list(now.items()), key="geohint.image_root")
    assert line is not None and line.startswith(
        "1 planned task (model 'sim': 1) was queued by an earlier run of campaign ph-count with placeholder pixels "
        "(no file under geohint.image_root then) and now has its photo"), line


def test_read_payloads_keeps_only_the_payloads_its_filter_accepts(tmp_path):
    """The placeholder look reads every planned task's queued payload; at 1,000,000 planned tasks holding them
    all in memory (as it did) costs gigabytes on every re-run. With ``keep`` only the accepted ones are held."""
    import anyio

    from geoagent.runtime.queue import open_queue
    from geoagent.runtime.sqlite_queue import read_payloads

    async def fill() -> None:
        q = open_queue(tmp_path / "q", "c", "requests")
        try:
            await q.put_many([(f"k{i}", {"image_id": f"i{i}", **({} if i % 100 == 0 else {"image_ref": f"p{i}.jpg"})})
                              for i in range(1000)])
        finally:
            await q.close()

    anyio.run(fill)
    keys = [f"k{i}" for i in range(1000)] + ["not-queued"]
    everything = read_payloads(tmp_path / "q", "c", "requests", keys)
    assert len(everything) == 1000 and everything["k1"] == {"image_id": "i1", "image_ref": "p1.jpg"}
    kept = read_payloads(tmp_path / "q", "c", "requests", keys, keep=lambda p: not p.get("image_ref"), chunk=7)
    assert sorted(kept) == sorted(f"k{i}" for i in range(0, 1000, 100))
    assert kept["k300"] == {"image_id": "i300"}
    assert read_payloads(tmp_path / "missing", "c", "requests", keys) is None
