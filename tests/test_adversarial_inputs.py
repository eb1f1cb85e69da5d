"""Adversarial inputs (session 8 review): broken config values, damaged state files, hostile answers.

Each test feeds one kind of bad input through the real entry points (``load_config``, ``geoagent.cli.main``,
the providers against local aiohttp fakes) and checks that the error names the file and key, that nothing
stored is lost, and that no secret reaches a file or a message.
"""

from __future__ import annotations

import re
import string
from pathlib import Path

import pytest

from _made_up_keys import made_up_key
from conftest import find_release_dir
from geoagent.campaigns import register_all_sections
from geoagent.config import ConfigError, load_config

register_all_sections()  # validate the task sections at load, as the CLI does

GEOHINT = """
[campaign]
name = "adv-gh"
kind = "geohint"
contact = "mailto:you@example.org"

[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"

[budget]
cap_usd = 1.0

[[models]]
name = "m"
provider = "simulated"
model = "sim"

[geohint]
images = "synthetic"

[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
{extra}
"""


def _geohint(tmp: Path, extra: str) -> Path:
    p = tmp / "gh.toml"
    p.write_text(GEOHINT.format(tmp=tmp, extra=extra))
    return p


@pytest.mark.parametrize("line, key", [
    ("language = 3", "language"),
    ("cache_ttl_s = -5", "cache_ttl_s"),
    ("cache_path = 7", "cache_path"),
    ("contact = 4", "contact"),
    ("nominatim_max_requests = -1", "nominatim_max_requests"),
    ("nominatim_max_requests = 2.5", "nominatim_max_requests"),
    ("ref_aliases = \"no\"", "ref_aliases"),
    ("anchor_radius_km = true", "anchor_radius_km"),
])
def test_geocoder_table_values_of_the_wrong_type_are_refused_at_load(tmp_path, line, key):
    # before: only unknown keys and anchor_radius_km were checked. `language = 3` loaded, the dry run passed,
    # and a real run paid every model call, then dead-lettered every answer at the geocoder ("TypeError:
    # sequence item 0: expected str instance, int found", 6319 of 6319 on the sandbox release);
    # `cache_ttl_s = -5` stopped the run after planning with "ResponseCache ttl_s must be positive", no key
    path = _geohint(tmp_path, line)
    with pytest.raises(ConfigError) as ei:
        load_config(path)
    msg = str(ei.value)
    assert re.search(rf"geohint\.geocoder[.:] ?{key}: expected", msg) and "gh.toml" in msg, msg


@pytest.mark.parametrize("url", [
    "https://eu1.locationiq.com/v1?key=pk.0123456789abcdef0123",
    "https://user:pw0123456789@nominatim.example.org",
    "ftp://nominatim.example.org",
    "nominatim.example.org",
])
def test_geocoder_urls_with_credentials_or_no_scheme_are_refused(tmp_path, url):
    # before: a Nominatim-compatible service that takes its key in the query (LocationIQ) loaded fine, and the
    # key went into manifest.json (the resolved config), status lines and error messages verbatim
    path = _geohint(tmp_path, "").read_text().replace('"http://nominatim.sandbox.invalid"', f'"{url}"')
    p = tmp_path / "gh2.toml"
    p.write_text(path)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert re.search(r"geohint\.geocoder[.:] ?nominatim_url: expected", msg), msg
    assert "0123456789" not in msg


def test_geocoder_table_defaults_and_empty_nominatim_still_load(tmp_path):
    cfg = load_config(_geohint(tmp_path, 'nominatim_max_requests = 10\ncache_ttl_s = 3600\nlanguage = "de"'))
    assert cfg.campaign.kind == "geohint"
    p = tmp_path / "gh3.toml"
    p.write_text(_geohint(tmp_path, "").read_text().replace('"http://nominatim.sandbox.invalid"', '""'))
    load_config(p)


# --- damaged state files -----------------------------------------------------------------------------

GENERIC = """
[campaign]
name = "adv-state"
kind = "generic"
seed = 3

[paths]
queues = "{tmp}/queues"
state = "{tmp}/state"

[budget]
cap_usd = 1.0

[generic]
n_requests = 4

[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 2.0
max_output_tokens = 50
"""


def _stored_answers(state: Path) -> int:
    import sqlite3

    with sqlite3.connect(state / "campaign.sqlite") as db:
        return db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]


@pytest.fixture(scope="module")
def _ran_once(tmp_path_factory):
    """The generic campaign run to completion once per module; returns (root, a pristine copy of the root)."""
    import shutil

    from geoagent.cli import main

    root = tmp_path_factory.mktemp("ran")
    cfg = root / "g.toml"
    cfg.write_text(GENERIC.format(tmp=root))
    assert main(["run", str(cfg), "--no-live"]) == 0
    pristine = tmp_path_factory.mktemp("ran-pristine") / "root"
    shutil.copytree(root, pristine, symlinks=True)
    return root, pristine


@pytest.fixture()
def ran_campaign(_ran_once):
    """A generic campaign run to completion; returns (config path, state folder, queues folder). The campaign
    runs once per module; each test gets the finished run put back at the same path (the paths in its config
    and manifest stay its own)."""
    import shutil

    root, pristine = _ran_once
    shutil.rmtree(root)
    shutil.copytree(pristine, root, symlinks=True)
    return root / "g.toml", root / "state" / "adv-state", root / "queues" / "adv-state"


@pytest.mark.parametrize("which", ["queues/requests.sqlite", "state/campaign.sqlite", "state/hosts.sqlite"])
@pytest.mark.parametrize("damage", ["text", "truncated"])
def test_a_damaged_sqlite_file_is_one_error_naming_it_and_nothing_is_lost(ran_campaign, capsys, which, damage):
    # before: `run`, `status` and `export` died with a traceback; for campaign.sqlite and hosts.sqlite the last
    # line was a bare "sqlite3.DatabaseError: file is not a database" that named no file at all
    from geoagent.cli import main

    cfg, state, queues = ran_campaign
    n_before = _stored_answers(state)
    root, name = which.split("/", 1)
    target = (queues if root == "queues" else state) / name
    import sqlite3

    with sqlite3.connect(target) as db:  # fold the WAL into the file, so its bytes are the whole database
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for side in (Path(f"{target}-wal"), Path(f"{target}-shm")):
        side.unlink(missing_ok=True)
    original = target.read_bytes()
    if damage == "text":
        target.write_bytes(b"this is not a database\n")
    else:
        target.write_bytes(original[: len(original) // 2])
    damaged = target.read_bytes()
    capsys.readouterr()
    for cmd in (["run", str(cfg), "--no-live"], ["status", str(cfg)], ["export", str(cfg)]):
        rc = main(cmd)
        err = capsys.readouterr().err
        if rc == 0:  # a command that does not read this file
            continue
        assert rc == 2, (cmd, rc, err)
        assert "Traceback" not in err and str(target) in err, (cmd, err)
        assert target.read_bytes() == damaged  # nothing written into the damaged file
    if target.name != "campaign.sqlite":
        assert _stored_answers(state) == n_before  # the stored answers are untouched
    target.write_bytes(original)  # put back: the campaign reads as before
    assert main(["run", str(cfg), "--no-live"]) == 0
    assert _stored_answers(state) == n_before


@pytest.mark.parametrize("content", [b"not json at all", b"[1, 2]", b"\xff\xfe garbage", b'{"runs": 5}'])
def test_a_damaged_manifest_is_one_error_naming_it(ran_campaign, capsys, content):
    # before: "error: invalid literal, expected 'true': line 1 column 1 (char 0)" named no file; "[1, 2]"
    # ended in an AttributeError traceback
    from geoagent.cli import main

    cfg, state, _ = ran_campaign
    n_before = _stored_answers(state)
    manifest = state / "manifest.json"
    manifest.write_bytes(content)
    capsys.readouterr()
    rc = main(["run", str(cfg), "--no-live"])
    err = capsys.readouterr().err
    assert rc == 2 and str(manifest) in err and "Traceback" not in err, err
    assert manifest.read_bytes() == content
    assert _stored_answers(state) == n_before


# --- hostile answer bodies ------------------------------------------------------------------------------

class _ThreadServers:
    """Local aiohttp apps served from one event loop on a thread of their own (the tests' client runs its own
    loop): :meth:`_serve` starts ``(app, port)`` pairs on 127.0.0.1, :meth:`close` stops them."""

    def _serve(self, apps: list) -> None:
        import asyncio
        import threading

        from aiohttp import web

        self._loop = asyncio.new_event_loop()
        self._runners = []
        for app, port in apps:
            runner = web.AppRunner(app, access_log=None)
            self._loop.run_until_complete(runner.setup())
            self._loop.run_until_complete(web.TCPSite(runner, "127.0.0.1", port).start())
            self._runners.append(runner)
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    def close(self) -> None:
        import asyncio

        for runner in self._runners:
            asyncio.run_coroutine_threadsafe(runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def _chat_app(chat):
    """An aiohttp app answering ``POST /v1/chat/completions`` with ``chat``."""
    from aiohttp import web

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


class _RawAnswerServer(_ThreadServers):
    """A local OpenAI-compatible fake (aiohttp, own thread) whose 200 answers carry the given raw JSON string
    literal as the message content; counts the calls it answered (each one billed by a real provider)."""

    def __init__(self, content_literal: bytes) -> None:

        from aiohttp import web

        from geoagent.sandbox.server import free_port

        self.calls = 0
        self.port = free_port()
        body = (b'{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,'
                b'"message":{"role":"assistant","content":"' + content_literal + b'"},"finish_reason":"stop"}],'
                b'"usage":{"prompt_tokens":10,"completion_tokens":5,"total_tokens":15}}')

        async def chat(request: web.Request) -> web.Response:
            await request.read()
            self.calls += 1
            return web.Response(body=body, content_type="application/json")

        self._serve([(_chat_app(chat), self.port)])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"


@pytest.mark.parametrize("literal, expected", [
    # a cut-off emoji: the high half of a UTF-16 surrogate pair, escaped (json.dumps' default ensure_ascii)
    (b'{\\"verdict\\": \\"yes\\"} \\ud83d', '{"verdict": "yes"} \ufffd'),
    # a lone low surrogate in the middle
    (b'Paris \\udc80 France', "Paris \ufffd France"),
    # bytes that are not UTF-8 (a Latin-1 server)
    (b'Z\xfcrich', "Z\ufffdrich"),
])
def test_an_answer_with_lone_surrogates_or_bad_utf8_is_stored_once_not_paid_again(tmp_path, capsys, literal, expected):
    # before: orjson refused the body ("no low surrogate in string"), the call counted as an unusable 2xx
    # body whose outcome is unknown: each of [queue] max_attempts deliveries paid a new call (10 calls for 2
    # requests), the answers were never stored and both tasks ended dead-lettered
    from geoagent.cli import main

    server = _RawAnswerServer(literal)
    try:
        cfg = tmp_path / "s.toml"
        cfg.write_text(f"""
[campaign]
name = "adv-sur"
kind = "generic"
seed = 1
[paths]
queues = "{tmp_path}/queues"
state = "{tmp_path}/state"
[budget]
cap_usd = 1.0
[queue]
backoff_base_s = 0.05
backoff_max_s = 0.1
[generic]
n_requests = 2
[[models]]
name = "m"
provider = "openai"
model = "m"
base_url = "{server.base_url}"
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 1.0
max_output_tokens = 50
""")
        rc = main(["run", str(cfg), "--no-live"])
        out = capsys.readouterr()
        assert rc == 0, out.out + out.err
        assert server.calls == 2  # one paid call per request
    finally:
        server.close()
    import json
    import sqlite3

    with sqlite3.connect(tmp_path / "state" / "adv-sur" / "campaign.sqlite") as db:
        texts = [json.loads(r[0])["text"] for r in db.execute("SELECT response FROM responses")]
    assert texts == [expected, expected]


# --- torn lines in a crawl's logs -----------------------------------------------------------------------

CRAWL_CONFIG = Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "crawl_sandbox.toml"
CRAWL_LOGS = ("audit_decisions", "audit_sensitive", "audit_review_queue", "crawl_decisions")


@pytest.fixture(scope="module")
def _crawl_once(tmp_path_factory):
    """The shipped sandbox crawl, run to completion once per module (tests/_crawl_once.py)."""
    from tests._crawl_once import run_crawl_once

    return run_crawl_once(tmp_path_factory, CRAWL_CONFIG)


@pytest.fixture()
def crawled(_crawl_once, monkeypatch):
    """The shipped sandbox crawl, run to completion; returns its state folder. The crawl runs once per module;
    each test gets the finished crawl put back at the same path (so every path its manifests and queues
    record is its own) and the data roots pointed at it."""
    from tests._crawl_once import restore_crawl

    root, pristine, _ = _crawl_once
    restore_crawl(root, pristine, monkeypatch)
    return root / "state" / "crawl-sandbox"


def test_a_torn_log_line_from_a_crash_does_not_stop_the_crawl_or_its_export(crawled, capsys):
    # append_jsonl's contract: "A crash can leave a torn last line ... Readers skip such a line", and the next
    # append starts on a fresh line. Before: the crawl's export read these logs strictly, so a torn line (last,
    # or followed by the next run's records) failed `crawl` and `export` with exit 2 ("audit_decisions.jsonl:568:
    # not JSON (unexpected end of data ...)") until the file was edited by hand
    from geoagent.cli import main
    from geoagent.files import append_jsonl

    for name in CRAWL_LOGS:
        path = crawled / f"{name}.jsonl"
        data = path.read_bytes()
        last = data.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        path.write_bytes(data[: len(data) - len(last) // 2 - 1])  # the last record cut in half, no newline
    capsys.readouterr()
    assert main(["export", str(CRAWL_CONFIG)]) == 0, capsys.readouterr().err
    assert main(["crawl", str(CRAWL_CONFIG), "--no-live"]) == 0, capsys.readouterr().err
    for name in CRAWL_LOGS:  # a later run appends after the torn bytes: they are now a line in the middle
        append_jsonl(crawled / f"{name}.jsonl", [{"event": "adv-test"}] if name == "crawl_decisions" else [])
    append_jsonl(crawled / "crawl_decisions.jsonl", [{"event": "adv-test-2"}])
    assert main(["export", str(CRAWL_CONFIG)]) == 0, capsys.readouterr().err
    import polars as pl

    events = pl.read_parquet(crawled / "export" / "crawl_decisions.parquet")["event"].to_list()
    assert events[-2:] == ["adv-test", "adv-test-2"]  # the records after the torn line are kept


def test_a_line_that_is_not_a_torn_record_is_still_an_error_naming_it(crawled, capsys):
    from geoagent.cli import main

    path = crawled / "audit_decisions.jsonl"
    with path.open("ab") as f:
        f.write(b"this is not a record\n")
    n = path.read_bytes().count(b"\n")
    capsys.readouterr()
    assert main(["export", str(CRAWL_CONFIG)]) == 2
    assert f"audit_decisions.jsonl:{n}: not JSON" in capsys.readouterr().err


def test_is_torn_record_tells_a_cut_record_from_other_bad_lines():
    from geoagent.files import is_torn_record

    whole = '{"event": "x", "city": "Zürich", "n": [1, 2.5, true, null], "s": "a\\"b"}\n'.encode()
    cut = [whole[:i] for i in range(1, len(whole) - 2)]
    assert all(is_torn_record(c) for c in cut)  # every cut, also inside "ü" (a multi-byte character)
    for line in (whole, b"garbage\n", b'{"a": 1}}\n', b'{"a": tru e}\n', b"[1, 2\n", b'{"a": "\\xff"}\n', b"\n"):
        assert not is_torn_record(line), line


def test_sample_rates_for_a_model_the_campaign_does_not_have_is_refused(tmp_path):
    # before: a typo in a [geohint] sample_rates key loaded silently, and the model it meant was planned at
    # its full rate (an expensive model meant for 1/3 of the requests got all of them: 3x its planned cost)
    path = _geohint(tmp_path, "").read_text().replace('images = "synthetic"',
                                                      'images = "synthetic"\nsample_rates = { "mm" = 0.3333 }')
    p = tmp_path / "gh4.toml"
    p.write_text(path)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert "geohint.sample_rates" in msg and "'mm'" in msg and "did you mean 'm'" in msg, msg
    p.write_text(path.replace('"mm" = 0.3333', '"m" = 0.3333'))
    load_config(p)


@pytest.mark.parametrize("table, model", [("image_audit", "sandbox-vision-auditor"),
                                          ("referenceability", "sandbox-text-auditor")])
def test_a_crawl_auditor_model_that_names_no_models_entry_is_refused_at_load(tmp_path, table, model):
    # before: the file loaded and the dry run passed; `crawl` then stopped with "no provider configured for
    # auditor model 'sandbox-vision-audit' (add it to [[models]])", naming neither file nor key, and left a
    # state folder behind
    text = CRAWL_CONFIG.read_text()
    typo = model[:-2]
    assert f'model = "{model}"' in text
    p = tmp_path / "crawl.toml"
    p.write_text(text.replace(f'model = "{model}"', f'model = "{typo}"'))
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert f"crawl.{table}.model" in msg and "crawl.toml" in msg and f"did you mean {model!r}" in msg, msg


def _crawl_with_verdicts(tmp: Path, verdicts: Path) -> Path:
    text = CRAWL_CONFIG.read_text().replace(
        'model = "sandbox-vision-auditor"\n', f'model = "sandbox-vision-auditor"\nhuman_verdicts = "{verdicts}"\n', 1)
    assert "human_verdicts" in text
    p = tmp / "crawl_hv.toml"
    p.write_text(text)
    return p


def _write_verdicts(path: Path, encoding: str, images: list[str]) -> None:
    import csv

    with path.open("w", newline="", encoding=encoding) as f:
        w = csv.writer(f)
        w.writerow(["image", "human_verdict", "human_note"])
        for image in images:
            w.writerow([image, "exclude", "vérifié à la main"])


def test_human_verdicts_saved_by_excel_with_a_bom_are_read(crawled, tmp_path, capsys):
    # before: "CSV UTF-8" from Excel starts with a BOM; the header read '\ufeffimage', and every site's image
    # audit task (its audit calls already paid) was dead-lettered after 5 deliveries with "hv.csv: missing
    # column 'image' (have ['\ufeffimage', ...])": the crawl ended incomplete at the images stage
    import csv

    from geoagent.cli import main

    import shutil

    images = [r["image"] for r in csv.DictReader((crawled / "image_audit.csv").open())][:3]
    hv = tmp_path / "hv.csv"
    _write_verdicts(hv, "utf-8-sig", images)
    root = crawled.parents[1]
    shutil.rmtree(root / "state")  # crawl again from scratch, with the verdicts from the start
    shutil.rmtree(root / "queues")
    capsys.readouterr()
    assert main(["crawl", str(_crawl_with_verdicts(tmp_path, hv)), "--no-live"]) == 0, capsys.readouterr().out
    rows = {r["image"]: r for r in csv.DictReader((crawled / "image_audit.csv").open(encoding="utf-8"))}
    assert [rows[i]["human_verdict"] for i in images] == ["exclude"] * 3
    assert rows[images[0]]["human_note"] == "vérifié à la main"


def test_human_verdicts_that_are_not_utf8_stop_the_crawl_before_any_call(isolated_roots, monkeypatch, capsys):
    # before: a cp1252 file (Excel's plain "CSV" on Windows) dead-lettered every site's image audit task, after
    # its paid audit calls, with "UnicodeDecodeError: 'utf-8' codec can't decode byte 0xe9 in position 75"
    # (no file named); now the crawl refuses to start, naming the file and line
    from geoagent.cli import main

    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    hv = isolated_roots / "hv.csv"
    _write_verdicts(hv, "cp1252", ["sandboxcity_ember/1.jpg", "sandboxcity_ember/2.jpg"])
    rc = main(["crawl", str(_crawl_with_verdicts(isolated_roots, hv)), "--no-live"])
    err = capsys.readouterr().err
    assert rc == 2 and f"{hv}:2" in err and "UTF-8" in err, err
    assert not (isolated_roots / "state" / "crawl-sandbox").exists()  # refused before the run began


# --- the judged re-scoring command ---------------------------------------------------------------------

RELEASE = find_release_dir()[0]  # $GEOAGENT_RELEASE, else ../shared/reference/geocontext (tests skip without it)


@pytest.mark.parametrize("damage", ["missing_columns", "empty", "no_release"])
def test_judged_rescoring_command_reports_a_bad_input_in_one_line(tmp_path, capsys, damage):
    # before: `python -m geoagent.geohint.judged` ended in a traceback for a judged file without the required
    # columns, an empty one, or a release folder that does not exist (the message was right, the traceback not)
    import shutil

    from geoagent.geohint.judged import main

    if not (RELEASE / "answers_judged_sample.csv").is_file():
        pytest.skip("the GeoContext release sample is not beside the project")
    rel = tmp_path / "rel"
    if damage != "no_release":
        rel.mkdir()
        shutil.copy(RELEASE / "sites.csv", rel / "sites.csv")
        shutil.copytree(RELEASE / "ladders", rel / "ladders")
        text = (RELEASE / "answers_judged_sample.csv").read_text(encoding="utf-8")
        if damage == "missing_columns":
            text = "\n".join(",".join(line.split(",")[:5]) for line in text.splitlines()[:20]) + "\n"
        else:
            text = ""
        (rel / "answers_judged_sample.csv").write_text(text, encoding="utf-8")
    assert main([str(rel), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(rel) in err and "Traceback" not in err, err


# --- .env ------------------------------------------------------------------------------------------------

def test_a_dotenv_file_that_is_not_utf8_is_an_error_naming_it_and_its_line(tmp_path, monkeypatch, capsys):
    # before: "error: 'utf-8' codec can't decode byte 0xe9 in position 30: invalid continuation byte", naming
    # neither the .env file nor the line (a comment written in cp1252 by a Windows editor)
    from geoagent.cli import main

    cfg = tmp_path / "g.toml"
    cfg.write_text(GENERIC.format(tmp=tmp_path).replace('provider = "simulated"', 'provider = "openai"\n'
                   'base_url = "http://127.0.0.1:9/v1"\napi_key_env = "ADV_DOTENV_KEY"'))
    key = "sk" "-" + "adv" * 10
    env = tmp_path / ".env"
    env.write_bytes(b"# first line\n# cl\xe9 de l'API\nADV_DOTENV_KEY=" + key.encode() + b"\n")
    monkeypatch.setenv("GEOAGENT_DOTENV", str(env))
    monkeypatch.delenv("ADV_DOTENV_KEY", raising=False)
    rc = main(["run", str(cfg), "--simulate", "--no-live"])
    got = capsys.readouterr()
    err = got.out + got.err  # a dry run says it in its report's warnings, then ends "exit 2: ..." (walk31 #4)
    assert rc == 2 and f"{env}:2" in err and "UTF-8" in err and key not in err, err
    assert "exit 2: `run` would refuse to start (an API key variable that cannot be read" in got.out, got.out


def test_a_dotenv_file_with_a_byte_order_mark_gives_its_first_variable(tmp_path):
    # a guard, not a failing-first test: python-dotenv reading the file by path drops the BOM; the .env is now
    # decoded here first (to name the file and line of bytes that are not UTF-8), which must drop it too
    from geoagent.secrets import lookup_secret

    env = tmp_path / ".env"
    value = "adv-bom-" + "k" * 24
    env.write_bytes(b"\xef\xbb\xbfADV_BOM_KEY=" + value.encode() + b"\n")
    secret = lookup_secret("ADV_BOM_KEY", dotenv_path=env, environ={})
    assert secret is not None and secret.reveal() == value


# --- the campaign file's own encoding ----------------------------------------------------------------------

def test_a_campaign_file_with_a_byte_order_mark_loads(tmp_path):
    # before: "invalid TOML: Invalid statement (at line 1, column 1)" for a file Windows Notepad saved as UTF-8
    # with a BOM: nothing visible is wrong at line 1, column 1
    p = tmp_path / "bom.toml"
    p.write_bytes(b"\xef\xbb\xbf" + GENERIC.format(tmp=tmp_path).encode())
    assert load_config(p).campaign.name == "adv-state"


def test_a_campaign_file_that_is_not_utf8_names_the_line(tmp_path):
    # before: "not UTF-8 text (byte 64)": a byte offset, where every other config error names a line or key
    text = GENERIC.format(tmp=tmp_path).encode().replace(b'seed = 3', b'seed = 3  # graine caf\xe9')
    p = tmp_path / "latin1.toml"
    p.write_bytes(text)
    line = text[: text.index(b"\xe9")].count(b"\n") + 1
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert f"line {line}" in str(ei.value) and "not UTF-8" in str(ei.value), str(ei.value)


@pytest.mark.parametrize("key, url", [
    # a Mapillary-shaped token (MLY|<digits>|<hex>) drawn at run time: no key-shaped text in the sources
    ("mapillary", "https://graph.mapillary.com?access_token=" + made_up_key("MLY|", 10, string.digits) + "|"
     + made_up_key("", 20, "0123456789abcdef")),
    ("overpass", "https://user:pw0123456789@overpass.example.org/api"),
    ("wdqs", "query.wikidata.org/sparql"),
    ("overpass_mirrors", ["https://overpass.example.org/api?key=0123456789abcdef"]),
])
def test_crawl_endpoints_with_credentials_are_refused(tmp_path, key, url):
    # before: Mapillary's own examples put the token in the query (?access_token=MLY|...); such an endpoint loaded
    # and the crawl wrote the token verbatim into manifest.json (the resolved config)
    import tomllib

    text = CRAWL_CONFIG.read_text()
    value = ("[" + ", ".join(f'"{u}"' for u in url) + "]") if isinstance(url, list) else f'"{url}"'
    text = text.replace("[crawl.endpoints]\n", f"[crawl.endpoints]\n{key} = {value}\n" if key == "overpass_mirrors"
                        else "[crawl.endpoints]\n", 1)
    if key != "overpass_mirrors":
        old = tomllib.loads(CRAWL_CONFIG.read_text())["crawl"]["endpoints"][key]
        text = text.replace(f'{key} = "{old}"', f"{key} = {value}", 1)
    p = tmp_path / "crawl_ep.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert f"crawl.endpoints.{key}" in msg and "0123456789" not in msg, msg


# --- repeated header columns ------------------------------------------------------------------------------

def test_a_release_table_with_a_repeated_header_column_is_reported_not_read_by_guess(tmp_path):
    # before: sites.csv with two "lat" columns (a merge of two exports) imported silently, each site taking the
    # LAST lat column's value; now the file is refused with an issue naming file, line 1 and the column
    import shutil

    from geoagent.data.importer import import_release

    if not (RELEASE / "sites.csv").is_file():
        pytest.skip("the GeoContext release sample is not beside the project")
    rel = tmp_path / "rel"
    rel.mkdir()
    shutil.copytree(RELEASE / "ladders", rel / "ladders")
    lines = (RELEASE / "sites.csv").read_text(encoding="utf-8").splitlines()
    header = lines[0].split(",")
    i = header.index("lat")
    rows = [lines[0] + ",lat"] + [line + ",0.0" for line in lines[1:]]
    (rel / "sites.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    out = import_release(rel)
    assert not out.sites
    issues = [str(x) for x in out.report.issues if x.file.endswith("sites.csv")]
    assert issues and ":1:" in issues[0] and "'lat'" in issues[0], issues
    assert i >= 0


def test_a_human_verdict_csv_with_a_repeated_column_is_refused(tmp_path):
    from geoagent.crawl.image_audit import read_human_verdicts

    p = tmp_path / "hv.csv"
    p.write_text("image,human_verdict,human_verdict\na/1.jpg,keep,exclude\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"hv\.csv:1: .*'human_verdict'"):
        read_human_verdicts(p)


def test_a_judged_answers_file_with_a_repeated_column_is_refused(tmp_path, capsys):
    import shutil

    from geoagent.geohint.judged import main

    if not (RELEASE / "answers_judged_sample.csv").is_file():
        pytest.skip("the GeoContext release sample is not beside the project")
    rel = tmp_path / "rel"
    rel.mkdir()
    shutil.copy(RELEASE / "sites.csv", rel / "sites.csv")
    shutil.copytree(RELEASE / "ladders", rel / "ladders")
    lines = (RELEASE / "answers_judged_sample.csv").read_text(encoding="utf-8").splitlines()[:30]
    (rel / "answers_judged_sample.csv").write_text(
        "\n".join([lines[0] + ",error_km"] + [line + ",0.1" for line in lines[1:]]) + "\n", encoding="utf-8")
    assert main([str(rel), str(tmp_path / "out")]) == 2
    assert "answers_judged_sample.csv:1: header repeats column(s) ['error_km']" in capsys.readouterr().err


def _release_copy(tmp_path: Path, monkeypatch, needs: str) -> Path:
    """A copy of the release beside the project in ``tmp_path/rel`` (skips when ``needs``, a file or folder of it,
    is absent), with GEOAGENT_RELEASE pointing at it and the data roots under ``tmp_path``."""
    import shutil

    if not (RELEASE / needs).exists():
        pytest.skip("the GeoContext release sample is not beside the project")
    rel = tmp_path / "rel"
    shutil.copytree(RELEASE, rel)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(rel))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    return rel


def test_the_run_summary_shows_the_release_import_problems_themselves(tmp_path, monkeypatch, capsys):
    # before: "release import: 3611 rows, 110 malformed (details: table meta, key 'import_report', in
    # .../data.sqlite)": a sites.csv refused whole was only visible by reading the data store
    from geoagent.cli import main

    rel = _release_copy(tmp_path, monkeypatch, "verify_raw_sample.jsonl")
    lines = (rel / "sites.csv").read_text(encoding="utf-8").splitlines()
    (rel / "sites.csv").write_text("\n".join([lines[0] + ",lat"] + [x + ",0.0" for x in lines[1:]]) + "\n",
                                   encoding="utf-8")
    cfg = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml").read_text()
    cfg = cfg.replace('name = "geocontext-replay"', 'name = "adv-replay"')
    p = tmp_path / "replay.toml"
    p.write_text(cfg + f'\n[paths]\nqueues = "{tmp_path}/queues"\nstate = "{tmp_path}/state"\n'
                 if "[paths]" not in cfg else cfg)
    assert main(["run", str(p), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert f"{rel / 'sites.csv'}:1: header repeats column(s) ['lat']" in out, out


def test_a_geohint_plan_warns_about_malformed_release_rows(tmp_path, monkeypatch, capsys):
    # before: a GeoHint campaign stored the import report in its data store and said nothing: a sites.csv row
    # with a bad latitude dropped the site and its requests (6264 planned instead of 6319) without a word
    from geoagent.cli import main

    rel = _release_copy(tmp_path, monkeypatch, "ladders")
    lines = (rel / "sites.csv").read_text(encoding="utf-8").splitlines()
    col = lines[0].split(",").index("lat")
    row = lines[1].split(",")
    row[col] = "north"
    lines[1] = ",".join(row)
    (rel / "sites.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geohint_sandbox.toml").read_text()
    cfg = cfg.replace('name = "geohint-sandbox"', 'name = "adv-gh-import"')
    # geocoders that are not the sandbox's (those rebuild their world from sites.csv, strictly)
    cfg = cfg.replace("http://wikidata.sandbox.invalid/w/api.php", "http://127.0.0.1:9/w/api.php")
    cfg = cfg.replace("http://nominatim.sandbox.invalid", "http://127.0.0.1:9")
    p = tmp_path / "gh.toml"
    p.write_text(cfg)
    assert main(["run", str(p), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "release import: 2 problem(s)" in out, out  # the row, and its site's ladder now without a site
    assert f"{rel / 'sites.csv'}:2: column 'lat': not a number: 'north'" in out, out


# --- redirects of requests that carry a key -------------------------------------------------------------------

class _RedirectServers(_ThreadServers):
    """Two local aiohttp fakes on their own thread: ``a`` answers every request with ``307`` to the same path on
    ``b`` (another host name: ``localhost`` instead of ``127.0.0.1``), ``b`` records the headers it gets."""

    def __init__(self) -> None:

        from aiohttp import web

        from geoagent.sandbox.server import free_port

        self.port_a, self.port_b = free_port(), free_port()
        self.seen_by_b: list[dict[str, str]] = []

        async def redirect(request: web.Request) -> web.Response:
            await request.read()
            return web.Response(status=307, headers={"Location": f"http://localhost:{self.port_b}{request.path}"})

        async def sink(request: web.Request) -> web.Response:
            await request.read()
            self.seen_by_b.append(dict(request.headers))
            return web.json_response({"error": {"message": "no such model"}}, status=404)

        apps = []
        for handler, port in ((redirect, self.port_a), (sink, self.port_b)):
            app = web.Application()
            app.router.add_route("*", "/{tail:.*}", handler)
            apps.append((app, port))
        self._serve(apps)


@pytest.mark.parametrize("provider, header", [("anthropic", "x-api-key"), ("gemini", "x-goog-api-key"),
                                              ("openai", "authorization")])
def test_a_redirect_to_another_host_never_carries_the_api_key(tmp_path, monkeypatch, capsys, provider, header):
    # before: aiohttp followed the 307 and sent Anthropic's x-api-key and Gemini's x-goog-api-key to the other
    # host verbatim (it strips only Authorization on a cross-origin redirect); a gateway that redirects, or a
    # look-alike domain, received the key
    from geoagent.cli import main

    servers = _RedirectServers()
    key = "adv-redirect-" + "k" * 24
    monkeypatch.setenv("ADV_REDIRECT_KEY", key)
    base = f"http://127.0.0.1:{servers.port_a}" + ("/v1" if provider == "openai" else "")
    cfg = tmp_path / "r.toml"
    cfg.write_text(GENERIC.format(tmp=tmp_path).replace('provider = "simulated"\nmodel = "sim-1"',
                   f'provider = "{provider}"\nmodel = "m-1"\nbase_url = "{base}"\napi_key_env = "ADV_REDIRECT_KEY"'))
    try:
        rc = main(["run", str(cfg), "--no-live"])
    finally:
        servers.close()
    out = capsys.readouterr().out
    assert not any(header in {k.lower() for k in h} for h in servers.seen_by_b), servers.seen_by_b
    assert not any(key in str(h) for h in servers.seen_by_b)
    assert rc == 3 and "redirect" in out and f"localhost:{servers.port_b}" in out, out
    assert "$0.0000 unknown-outcome" in out, out  # a redirect was not billed: no reservation kept


@pytest.mark.parametrize("base_url, refused", [
    ("http://api.openai.com/v1", True),
    ("http://llm.example.org:8000/v1", True),
    ("https://api.openai.com/v1", False),
    ("http://192.168.1.20:8000/v1", False),
    ("http://gpu-box:8000/v1", False),
    ("http://vllm.internal/v1", False),
])
def test_a_key_is_never_sent_over_plain_http_to_a_host_that_is_not_local(tmp_path, base_url, refused):
    # before: base_url = "http://api.openai.com/v1" (an 's' missing) loaded and the dry run passed; the run
    # would send "Authorization: Bearer <key>" unencrypted over the internet on its first request
    text = GENERIC.format(tmp=tmp_path).replace(
        'provider = "simulated"\nmodel = "sim-1"',
        f'provider = "openai"\nmodel = "gpt-x"\nbase_url = "{base_url}"\napi_key_env = "ADV_HTTP_KEY"')
    p = tmp_path / "h.toml"
    p.write_text(text)
    if not refused:
        load_config(p)
        return
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    msg = str(ei.value)
    assert "models[0].base_url" in msg and "https://" in msg and "ADV_HTTP_KEY" in msg, msg


def test_the_mapillary_token_is_never_sent_over_plain_http_to_a_host_that_is_not_local(tmp_path):
    # before: mapillary = "http://graph.mapillary.com" loaded: every Graph API request would carry
    # "Authorization: OAuth MLY|..." unencrypted
    text = CRAWL_CONFIG.read_text().replace('mapillary = "http://mapillary.sandbox.invalid"',
                                            'mapillary = "http://graph.mapillary.com"')
    p = tmp_path / "crawl_http.toml"
    p.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert "crawl.endpoints.mapillary" in str(ei.value) and "https://" in str(ei.value), str(ei.value)


# --- one campaign name, two campaigns ------------------------------------------------------------------------------

def test_a_campaign_file_of_another_kind_under_a_used_name_is_refused_before_it_writes(ran_campaign, capsys):
    # before: a config copied from another campaign with only its task changed (the [campaign] name kept) got one
    # warning ("campaign, models, queue changed since its last run ...") and then enqueued its 336 GeoVerify
    # requests into the generic campaign's queues, spent from its ledger and mixed both in one state folder
    from geoagent.cli import main

    cfg, state, queues = ran_campaign
    n_before = _stored_answers(state)
    manifest = (state / "manifest.json").read_bytes()
    other = cfg.read_text().replace('kind = "generic"', 'kind = "geoverify"').replace("[generic]\nn_requests = 4\n", "")
    p = cfg.parent / "other.toml"
    p.write_text(other)
    sizes = {f.name: f.stat().st_size for f in queues.glob("*.sqlite")}
    for cmd in (["run", str(p), "--no-live"], ["run", str(p), "--simulate", "--no-live"], ["export", str(p)]):
        capsys.readouterr()
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert "generic" in err and "geoverify" in err and "[campaign] name" in err, err
    assert (state / "manifest.json").read_bytes() == manifest
    assert {f.name: f.stat().st_size for f in queues.glob("*.sqlite")} == sizes
    assert _stored_answers(state) == n_before


@pytest.mark.parametrize("name", ["images", "Images"])
def test_the_campaign_name_of_the_shared_images_folder_is_refused(tmp_path, name):
    # before: [campaign] name = "images" loaded; its state folder was state/images/, the folder every crawl
    # under the same state root keeps its photos in (state/images/<site>/<id>.jpg): the campaign's files mixed
    # with the photos, and removing "the whole campaign folder" (README) deleted every crawl's images
    p = tmp_path / "im.toml"
    p.write_text(GENERIC.format(tmp=tmp_path).replace('name = "adv-state"', f'name = "{name}"'))
    with pytest.raises(ConfigError) as ei:
        load_config(p)
    assert "campaign.name" in str(ei.value) and "state/images" in str(ei.value), str(ei.value)


# --- terminal control sequences in untrusted text ------------------------------------------------------------------

class _FixedAnswerServer(_RawAnswerServer):
    """A local OpenAI-compatible fake whose every answer is ``status`` with ``body`` (bytes, as sent)."""

    def __init__(self, status: int, body: bytes) -> None:  # noqa: D107 - a test helper

        from aiohttp import web

        from geoagent.sandbox.server import free_port

        self.calls = 0
        self.port = free_port()

        async def chat(request: web.Request) -> web.Response:
            await request.read()
            self.calls += 1
            return web.Response(status=status, body=body, content_type="application/json")

        self._serve([(_chat_app(chat), self.port)])


def test_terminal_escape_sequences_in_an_error_body_never_reach_the_console(tmp_path, capsys):
    # before: a server's 400 body with ESC sequences (set the window title, clear the screen, colours; OSC 52
    # would write the clipboard) was printed raw by `run` (its dead-letter lines), `dead` and `status`
    from geoagent.cli import main

    server = _FixedAnswerServer(400, b'{"error": {"message": "bad \x1b]0;PWNED\x07 \x1b[2J\x1b[31mred\x1b[0m"}}')
    cfg = tmp_path / "e.toml"
    cfg.write_text(GENERIC.format(tmp=tmp_path).replace(
        'provider = "simulated"\nmodel = "sim-1"', f'provider = "openai"\nmodel = "m-1"\nbase_url = "{server.base_url}"'))
    try:
        assert main(["run", str(cfg), "--no-live"]) == 3
    finally:
        server.close()
    assert main(["dead", str(cfg)]) == 0
    assert main(["status", str(cfg)]) == 0
    captured = capsys.readouterr()
    text = captured.out + captured.err
    assert "PWNED" in text  # the reason is shown ...
    assert "\x1b" not in text and "\x07" not in text  # ... with its control characters written out
    assert "\\x1b]0;PWNED\\x07" in text


# --- a home-relative data root ------------------------------------------------------------------------------------

def test_a_data_root_written_with_a_tilde_is_the_home_folder(tmp_path, monkeypatch, capsys):
    # before: [paths] state = "~/geo-state" made a folder literally named "~" in the working directory (a later
    # `rm -rf ~` to clean it up deletes the home folder), and the run, its model calls made, then failed at the
    # export with "No such file or directory: /root/geo-state/.../.results.parquet.tmp" (Polars expands "~")
    from geoagent.cli import main

    home = tmp_path / "home"
    home.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    monkeypatch.delenv("GEOAGENT_STATE", raising=False)
    monkeypatch.delenv("GEOAGENT_QUEUES", raising=False)
    cfg = work / "t.toml"
    cfg.write_text(GENERIC.format(tmp=tmp_path).replace(f'queues = "{tmp_path}/queues"', 'queues = "~/geo-queues"')
                   .replace(f'state = "{tmp_path}/state"', 'state = "~/geo-state"'))
    assert main(["run", str(cfg), "--no-live"]) == 0, capsys.readouterr().err
    assert not (work / "~").exists()
    assert (home / "geo-state" / "adv-state" / "results.parquet").is_file()
    assert (home / "geo-queues" / "adv-state" / "requests.sqlite").is_file()


def test_a_geocoder_cache_path_with_a_tilde_is_in_the_home_folder(tmp_path, monkeypatch):
    # before: cache_path = "~/geo-cache.sqlite" made a folder named "~" in the working directory
    from geoagent.geohint.geocode_stage import GeocoderSettings, build_geocoder
    from geoagent.runtime.http import HttpClient

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    settings = GeocoderSettings.from_mapping({"contact": "mailto:a@example.org", "cache_path": "~/geo-cache.sqlite"})
    geocoder = build_geocoder(HttpClient(), settings)
    assert geocoder is not None
    assert (home / "geo-cache.sqlite").is_file() and not (tmp_path / "~").exists()


# --- a verdict given twice in one object ---------------------------------------------------------------------------

@pytest.mark.parametrize("text", ['{"answer": "no", "verdict": "yes"}',
                                  '{"verdict": "yes", "decision": "no", "confidence": 0.9}',
                                  '```json\n{"decision": false, "verdict": "Yes."}\n```'])
def test_an_object_whose_verdict_keys_disagree_is_a_parse_failure_not_its_first_key(text):
    # before: the parser read "verdict", "answer" and "decision" as the same field and took the first it found,
    # so {"answer": "no", "verdict": "yes"} was scored as a confident yes; its own rule is that an answer stating
    # both verdicts is a parse failure ({"verdict": "yes", "Verdict": "no"} already was one)
    from geoagent.geoverify.parse import parse_verdict

    r = parse_verdict(text)
    assert not r.ok and r.verdict is None and "conflicting" in (r.reason or ""), r
    assert r.raw == text
    same = parse_verdict('{"verdict": "yes", "answer": "Yes", "confidence": 0.8}')  # agreeing keys are fine
    assert same.ok and same.verdict == "yes" and same.confidence == 0.8


def test_a_geohint_object_naming_a_field_twice_differently_is_a_parse_failure():
    # before: {"city": "Paris", "City": "Lyon"} was read as city "Lyon" (the last spelling of the key won) and
    # geocoded; two objects that disagree were already a failure ("conflicting answers in one response")
    from geoagent.geohint.parse import parse_answer

    r = parse_answer('{"city": "Paris", "area": "Marais", "City": "Lyon"}')
    assert not r.ok and r.city is None and "conflicting" in (r.error or ""), r
    same = parse_answer('{"city": "Paris", "CITY": "paris", "area": "Marais"}')  # the same place twice is fine
    assert same.ok and same.city in ("Paris", "paris"), same


def test_geohint_fields_that_are_booleans_are_no_place_names():
    # before: {"city": false, "area": false, "building": true} parsed "ok" with the place names "False" and "True",
    # which were sent to the geocoders as places (a model saying "no idea" in JSON booleans)
    from geoagent.geohint.parse import parse_answer

    r = parse_answer('{"city": false, "area": false, "building": true, "confidence_area": 0}')
    assert not r.ok and r.city is None and r.area is None and r.building is None, r
    mixed = parse_answer('{"city": "Paris", "area": true, "building": null}')
    assert mixed.ok and mixed.city == "Paris" and mixed.area is None


# --- a replay file read with a field name it does not have ----------------------------------------------------------

@pytest.mark.parametrize("key, typo", [("text_field", "rwa")])
def test_a_replay_field_name_that_no_record_has_is_one_error_at_start(tmp_path, monkeypatch, capsys, key, typo):
    # before: text_field = "rwa" dead-lettered all 336 requests, each "is a recorded failure: field 'rwa' is
    # missing or not text" (a usage field that no record has is left alone: 0 tokens, as documented)
    from geoagent.cli import main

    if not (RELEASE / "verify_raw_sample.jsonl").is_file():
        pytest.skip("the GeoContext release sample is not beside the project")
    cfg = (Path(__file__).resolve().parents[1] / "geoagent" / "configs" / "geocontext_replay.toml").read_text()
    cfg = cfg.replace('name = "geocontext-replay"', 'name = "adv-replay-field"')
    cfg = cfg.replace('text_field = "raw" }', 'text_field = "raw", usage_field = "usage" }')
    assert f'{key} = ' in cfg
    cfg = cfg.replace('text_field = "raw"', 'text_field = "rwa"') if key == "text_field" else cfg.replace(
        'usage_field = "usage"', 'usage_field = "usgae"')
    p = tmp_path / "replay.toml"
    p.write_text(cfg)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(RELEASE))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    for cmd in (["run", str(p), "--simulate", "--no-live"], ["run", str(p), "--no-live"]):
        assert main(cmd) == 2, cmd
        err = capsys.readouterr().err
        assert f"replay.{key}" in err and repr(typo) in err and "verify_raw_sample.jsonl" in err, err


class _EchoKeyServer(_RawAnswerServer):
    """A local OpenAI-compatible fake that answers 200 with the request's bearer key inside the answer text
    (a debugging proxy that echoes the request, or a gateway's error text delivered as content)."""

    def __init__(self) -> None:  # noqa: D107 - a test helper
        import json

        from aiohttp import web

        from geoagent.sandbox.server import free_port

        self.calls = 0
        self.port = free_port()

        async def chat(request: web.Request) -> web.Response:
            await request.read()
            self.calls += 1
            key = request.headers.get("Authorization", "").removeprefix("Bearer ")
            body = {"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": f"debug: you sent {key}"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}}
            return web.Response(body=json.dumps(body).encode(), content_type="application/json")

        self._serve([(_chat_app(chat), self.port)])


def test_a_key_echoed_inside_a_200_answer_is_not_stored_or_exported(tmp_path, monkeypatch, capsys):
    # before: the answer text was stored verbatim in campaign.sqlite and exported to model_responses.csv/.parquet
    # with the API key in it (error bodies were scrubbed, answers were not)
    from geoagent.cli import main

    key = "adv-echo-" + "q" * 30
    monkeypatch.setenv("ADV_ECHO_KEY", key)
    server = _EchoKeyServer()
    cfg = tmp_path / "echo.toml"
    cfg.write_text(GENERIC.format(tmp=tmp_path).replace(
        'provider = "simulated"\nmodel = "sim-1"',
        f'provider = "openai"\nmodel = "m-1"\nbase_url = "{server.base_url}"\napi_key_env = "ADV_ECHO_KEY"'))
    try:
        assert main(["run", str(cfg), "--no-live"]) == 0
    finally:
        server.close()
    assert server.calls == 4
    leaks = [p for p in tmp_path.rglob("*") if p.is_file() and p != cfg and key.encode() in p.read_bytes()]
    assert not leaks, leaks
    assert key not in capsys.readouterr().out


def test_export_still_works_with_a_damaged_manifest(ran_campaign, capsys):
    # the kind check reads the manifest; a damaged one must not keep the stored results from being exported
    from geoagent.cli import main

    cfg, state, _ = ran_campaign
    (state / "manifest.json").write_bytes(b"garbage")
    capsys.readouterr()
    assert main(["export", str(cfg)]) == 0, capsys.readouterr().err
    assert (state / "results.parquet").is_file()


def test_status_shows_no_pauses_from_a_damaged_board(tmp_path):
    # review rev20: the read-only opener raises DatabaseFileError (a ValueError) for a damaged file, and the board
    # reader caught only sqlite3.Error, so a damaged hosts.sqlite (it holds only pauses) stopped `status`
    from geoagent.runtime import hostshare

    (tmp_path / hostshare.HOSTS_DB).write_bytes(b"this is not a sqlite database, just junk " * 200)
    assert hostshare.board_pauses(tmp_path) == {}
