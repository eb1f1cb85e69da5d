"""A crawl's ``simulated`` export column is a fact recorded with each auditor answer, not read off today's config.

Before (session 13 follow-up): the crawl's export (:func:`geoagent.crawl.export.export_crawl_tables`) derived the
auditor tables' ``simulated`` column from the CURRENT config (``[crawl.<role>] provider = "simulated"`` or a
``[[models]]`` entry on the simulator or a sandbox fake), and the crawl's metered calls recorded
``request_meta.provider_kind`` only for the ``simulated`` / ``replay`` providers. A crawl whose config later
swapped its auditors exported flipped flags: here the image auditor answered from the simulator and the
referenceability auditor from a model server (a local OpenAI-compatible fake served here, on a plain URL: a
server as far as geoagent can tell); after the swap the export said image_audit ``{False}`` and the
referenceability tables ``{True}``. Now every auditor answer records what answered it (the image audit's record,
the raw answer log, the response store's ``request_meta``) and the export reads that; answers stored before that
keep the config rule and ``export_note.txt`` counts those rows, as the campaign export does.
"""
from __future__ import annotations

import io
import shutil
from contextlib import redirect_stdout
from pathlib import Path

import anyio
import orjson
import polars as pl
import pytest

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import EXIT_COMPLETE, run_campaign
from geoagent.sandbox import llm_openai
from geoagent.sandbox.llm_common import unmarked
from geoagent.sandbox.server import serve

REPO = Path(__file__).resolve().parents[1]
CRAWL = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
VISION, TEXT = "sandbox-vision-auditor", "sandbox-text-auditor"
#: the auditor tables of each auditor (geoagent.crawl.export.AUDITOR_TABLES)
VISION_TABLES = ["image_audit"]
TEXT_TABLES = ["candidate_referenceability", "candidate_referenceability_by_city", "ladders", "audit_decisions",
               "audit_sensitive"]


def _entry(name: str, model: str, provider: str, base_url: str | None, max_out: int) -> str:
    url = f'base_url = "{base_url}"\n' if base_url else ""
    return (f'[[models]]\nname = "{name}"\nprovider = "{provider}"\nmodel = "{model}"\n{url}'
            "price_input_usd_per_mtok = 0.15\nprice_output_usd_per_mtok = 0.60\n"
            f"max_output_tokens = {max_out}\nconcurrency = 4\nrate = {{ requests = 200, period_s = 1.0 }}\n"
            "timeout_s = 20.0\n\n")


def _config(p: Path, root: Path, *, vision: str | None, text: str | None) -> Path:
    """crawl_sandbox.toml with its own state folders; ``vision`` / ``text``: the auditor's ``[[models]]`` entry
    (None: no entry, ``[crawl.<role>] provider = "simulated"`` answers it)."""
    raw = CRAWL.read_text(encoding="utf-8")
    head, _, rest = raw.partition("[[models]]")
    rest = "[crawl]" + rest.split("\n[crawl]", 1)[1]
    if vision is None:
        rest = rest.replace('[crawl.image_audit]\nprovider = "openai"', '[crawl.image_audit]\nprovider = "simulated"')
    if text is None:
        rest = rest.replace('[crawl.referenceability]\nprovider = "openai"',
                            '[crawl.referenceability]\nprovider = "simulated"')
    paths = f'[paths]\nqueues = "{root / "queues"}"\nstate = "{root / "state"}"\n\n'
    p.write_text(head + paths + (vision or "") + (text or "") + rest, encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def crawl(tmp_path_factory):
    """A crawl with the image auditor on the simulator (``[crawl.image_audit] provider = "simulated"``, no
    ``[[models]]`` entry: an unmetered call) and the referenceability auditor on a ``[[models]]`` entry served
    here (plain URL: a model server); then the config swaps them: the vision auditor becomes a ``[[models]]``
    entry on a plain URL, the text auditor ``provider = "simulated"``. Returns (config path, state folder)."""
    root = tmp_path_factory.mktemp("crawlrec")
    p = root / "crawl.toml"
    mp = pytest.MonkeyPatch()
    mp.setenv("MAPILLARY_TOKEN", "MLY|sandbox")

    async def go():
        # the mark taken off: a model server as far as geoagent can tell (a sandbox fake marks its answers)
        async with serve(unmarked(llm_openai.make_app(require_auth=False))) as base:
            _config(p, root, vision=None,
                    text=_entry(TEXT, "sandbox-text-auditor-1", "openai", f"{base}/v1", 4000))
            return await run_campaign(load_config(p), live=False, handle_signals=False, export=False)

    try:
        outcome = anyio.run(go)
    finally:
        mp.undo()
    assert outcome.exit_code == EXIT_COMPLETE, outcome.summary()
    _config(p, root, vision=_entry(VISION, "sandbox-vision-auditor-1", "openai", "http://127.0.0.1:9/v1", 400),
            text=None)
    return p, Path(load_config(p).state_dir())


def _export(p: Path) -> str:
    buf = io.StringIO()
    with redirect_stdout(buf):
        assert main(["export", str(p)]) == 0
    return buf.getvalue()


def _flags(export: Path, table: str) -> set:
    df = pl.read_parquet(export / f"{table}.parquet")
    assert df.height > 0, table
    return set(df["simulated"].to_list())


def test_every_auditor_answer_records_what_answered_it(crawl):
    import sqlite3

    _, state = crawl
    images = [orjson.loads(f.read_bytes()) for f in sorted((state / "image_audit").glob("*/*.json"))]
    assert images and {(r["model"], r.get("provider_kind")) for r in images} == {(VISION, "simulated")}
    raw = [orjson.loads(ln) for ln in (state / "audit_raw_answers.jsonl").read_bytes().splitlines() if ln.strip()]
    assert raw and {(r["model"], r.get("provider_kind")) for r in raw} == {(TEXT, "model")}
    # the text auditor's calls are metered: its stored answers record it too (before: nothing, not simulated
    # nor replay)
    with sqlite3.connect(state / "campaign.sqlite") as db:
        kinds = {(model, orjson.loads(meta).get("provider_kind"))
                 for model, meta in db.execute("SELECT model, request_meta FROM responses")}
    assert kinds == {(TEXT, "model")}, kinds


def test_export_after_the_auditors_swapped_keeps_the_recorded_flags(crawl):
    p, state = crawl
    out = _export(p)
    export = state / "export"
    # before: image_audit {False} and the referenceability tables {True} (the swapped config's view)
    for t in VISION_TABLES:
        assert _flags(export, t) == {True}, t
    for t in TEXT_TABLES + ["model_responses"]:
        assert _flags(export, t) == {False}, t
    note = (export / "export_note.txt").read_text(encoding="utf-8")
    assert f"Simulated answers: {VISION} answered from geoagent's simulator" in note, note
    assert TEXT not in note.split("Simulated answers:")[1].split(".")[0], note
    assert "Simulated flag from the current config" not in note, note
    meta = pl.read_parquet_metadata(export / "ladders.parquet")
    assert f"Simulated answers: {VISION} answered" in meta["geoagent.simulated_note"]
    assert "Simulated flag from the current config" not in out, out
    # the export command's line names what answered too (before: the swapped config's, here none of them)
    assert f"note: rows of {VISION} hold simulated answers" in out and f"{TEXT} hold" not in out, out


def test_older_answers_without_the_record_keep_the_config_rule_and_the_note_counts_them(crawl, tmp_path):
    p, state = crawl
    old_root = tmp_path / "old"
    shutil.copytree(state.parent.parent, old_root, symlinks=True)
    q = tmp_path / "crawl.toml"
    q.write_text(p.read_text(encoding="utf-8").replace(str(state.parent.parent), str(old_root)), encoding="utf-8")
    old = Path(load_config(q).state_dir())
    for f in (old / "image_audit").glob("*/*.json"):  # answers of a crawl made before the kind was recorded
        rec = orjson.loads(f.read_bytes())
        rec.pop("provider_kind", None)
        f.write_bytes(orjson.dumps(rec))
    raw = old / "audit_raw_answers.jsonl"
    recs = [orjson.loads(ln) for ln in raw.read_bytes().splitlines() if ln.strip()]
    raw.write_bytes(b"".join(orjson.dumps({k: v for k, v in r.items() if k != "provider_kind"}) + b"\n"
                             for r in recs))
    _export(q)
    export = old / "export"
    # the rule of before: the current (swapped) config decides
    assert _flags(export, "image_audit") == {False}
    assert _flags(export, "audit_decisions") == {True}
    note = (export / "export_note.txt").read_text(encoding="utf-8")
    line = next(ln for ln in note.splitlines() if ln.startswith("Simulated flag from the current config"))
    n_images = pl.read_parquet(export / "image_audit.parquet").height
    n_dec = pl.read_parquet(export / "audit_decisions.parquet").height
    assert f"{n_images} rows of image_audit.csv" in line and f"{n_dec} rows of audit_decisions.csv" in line, line
    assert "may be wrong" in line, line


def test_an_auditor_answered_by_both_kinds_is_told_apart_per_image_and_left_null_elsewhere(tmp_path):
    """The same auditor name answered by the simulator and then by a model server (the config changed mid-crawl):
    each image_audit row follows its own image's record; rows of a table that only name the auditor cannot be
    told apart and get null, not a guess (and are not counted as taken from the config)."""
    from geoagent.crawl.export import export_crawl_tables
    from geoagent.crawl.image_audit import IMAGE_AUDIT_COLUMNS

    state = tmp_path / "state"
    for i, kind in ((1, "simulated"), (2, "model")):
        f = state / "image_audit" / "s1" / f"{i}.json"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(orjson.dumps({"image_id": str(i), "site": "s1", "path": f"s1/{i}.jpg", "model": VISION,
                                    "audit": {}, "provider_kind": kind}))
    (state / "image_audit.csv").write_text(
        ",".join(IMAGE_AUDIT_COLUMNS) + "\n" + "".join(f"s1/{i}.jpg,s1" + "," * (len(IMAGE_AUDIT_COLUMNS) - 2) + "\n"
                                                       for i in (1, 2)), encoding="utf-8")
    (state / "audit_decisions.jsonl").write_bytes(orjson.dumps({"qid": "Q1", "label": "x", "model": VISION}) + b"\n")
    cfg = load_config(_config(tmp_path / "c.toml", tmp_path,
                              vision=_entry(VISION, "v-1", "openai", "http://127.0.0.1:9/v1", 400), text=None))
    tables = {t.table: t for t in export_crawl_tables(state, tmp_path / "export", cfg=cfg)}
    assert pl.read_parquet(tmp_path / "export" / "image_audit.parquet")["simulated"].to_list() == [True, False]
    assert pl.read_parquet(tmp_path / "export" / "audit_decisions.parquet")["simulated"].to_list() == [None]
    assert tables["image_audit"].simulated_from_config == 0 and tables["audit_decisions"].simulated_from_config == 0
