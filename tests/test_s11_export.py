"""Session 11 export and pre-flight gaps (branch s11-export): each test failed on main before its fix.

1. The scored exports say why a row is not scored ("not in the current plan", a repeated request) apart from a
   no-answer and a scored row; a no-answer row's ``resolved_level`` is null (it was never geocoded).
2. The exports of a replay campaign say they hold replayed responses, in a way CSV readers do not trip on.
3. The dry run estimates a photo without a file at the size of the crawl's ``[crawl.fetcher] thumb_field``.
4. A real run missing key variables that also has an images problem names both in one refusal.

Expected values come from the hand-made rows and files below, never from the code under test.
"""

from __future__ import annotations

import polars as pl
import pytest

from geoagent.campaigns import register_all_sections
from geoagent.config import config_from_dict
from geoagent.runtime.scope import plan_keys_path
from geoagent.runtime.store import open_campaign_state

register_all_sections()


def _write_plan(state_dir, entries: list[tuple[str, str]]) -> None:
    """The plan record as :class:`geoagent.runtime.scope.PlanRecorder` writes it (``model<TAB>key`` lines)."""
    path = plan_keys_path(state_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{m}\t{k}\n" for m, k in entries), encoding="utf-8")


# --- 1. the scored exports: why a row is not scored; no-answer rows were never geocoded ---------------------
def test_geohint_export_says_not_in_plan_apart_from_no_answer_and_a_no_answer_has_no_resolved_level(tmp_path):
    """GeoHint, model m: k0 a hit, k1 an answer the geocoder resolved nothing for (resolved level "none"), k2 cut
    off with nothing parsed (no answer), k3 a hit whose task the current plan no longer holds. Before: k3 had
    ``scored`` False and no reason anywhere (a reader could not tell it from a context answer without a hint
    distance or guess why), and k2's ``resolved_level`` was the string "none", as if the geocoder had tried."""
    from test_cutoff_loose_ends import _cfg, _payload

    from geoagent.geohint.campaign import GeoHintCampaign, aggregate_from_store
    from geoagent.geohint.stages import SCORED_TABLE, scored_scope, score_located
    from geoagent.runtime.scope import NOT_IN_PLAN, read_plan_keys
    from geoagent.scoring.truncation import NO_ANSWER_CUT_OFF

    cfg = _cfg(tmp_path)
    unresolved = _payload(1, finish_reason="stop", parsed=True)
    unresolved["located"] = {"resolved_level": "none"}       # a real answer the geocoder found nothing for
    rows = {"k0": score_located("k0", _payload(0, finish_reason="stop", parsed=True, hit=True)),
            "k1": score_located("k1", unresolved),
            "k2": score_located("k2", _payload(2, finish_reason="length", parsed=False)),
            "k3": score_located("k3", _payload(3, finish_reason="stop", parsed=True, hit=True))}
    assert rows["k2"].resolved_level is None                 # the stored row: never geocoded
    assert rows["k1"].resolved_level == "none"
    _write_plan(cfg.state_dir(), [("m", "k0"), ("m", "k1"), ("m", "k2")])
    with open_campaign_state("gh-na", root=tmp_path / "state", cap_usd=0.0) as st:
        for k, r in rows.items():
            st.store.put_result(SCORED_TABLE, k, r.to_json())
        # an older stored no-answer row (before the fix) still carries "none": the export makes it null
        old = score_located("k4", _payload(4, finish_reason="stop", parsed=False)).to_json()
        old["extra"]["finish_reason"] = "length"
        st.store.put_result(SCORED_TABLE, "k4", old)
        _write_plan(cfg.state_dir(), [("m", "k0"), ("m", "k1"), ("m", "k2"), ("m", "k4")])
        agg = aggregate_from_store(st.store, scope=scored_scope(read_plan_keys(cfg.state_dir())))
        GeoHintCampaign().export(cfg, st.store)
    # the report: 2 responses (k0 hit, k1 unresolved), 2 no-answers, k3 left out of scoring
    c = agg.select(model="m", condition="forced")
    assert (c.n, c.hits, c.n_none, agg.n_no_answer()) == (2, 1, 1, 2)
    df = pl.read_parquet(cfg.state_dir() / "geohint_scored.parquet")
    by = {r["key"]: r for r in df.iter_rows(named=True)}
    assert by["k3"]["scored"] is False and by["k3"]["extra.left_out"] == NOT_IN_PLAN
    for k in ("k0", "k1", "k2", "k4"):
        assert by[k]["scored"] is True and by[k]["extra.left_out"] is None, k
    assert by["k2"]["extra.no_answer"] == by["k4"]["extra.no_answer"] == NO_ANSWER_CUT_OFF
    assert by["k2"]["resolved_level"] is None and by["k4"]["resolved_level"] is None
    assert by["k1"]["resolved_level"] == "none" and by["k0"]["resolved_level"] == "area"
    # what a reader filters: scored, no answer, not scored and why
    assert df.filter(pl.col("scored") & pl.col("extra.no_answer").is_null()).height == c.n
    assert df.filter(pl.col("resolved_level") == "none").height == c.n_none
    csv = pl.read_csv(cfg.state_dir() / "geohint_scored.csv", infer_schema_length=None)
    assert csv.filter(pl.col("key") == "k3")["extra.left_out"].to_list() == [NOT_IN_PLAN]
    assert csv.filter(pl.col("key") == "k2")["resolved_level"].to_list() == [None]


def _gv_cfg(tmp_path, name: str = "gv-lo", models: list[dict] | None = None):
    return config_from_dict({
        "campaign": {"name": name, "kind": "geoverify", "contact": "ops@example.org"},
        "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
        "budget": {"cap_usd": 1.0},
        "models": models or [{"name": "m", "provider": "simulated", "model": "m"}]})


def test_geoverify_export_has_a_left_out_column_naming_why_a_row_is_not_scored(tmp_path):
    """GeoVerify, model m: t0 parsed, t1 an unparsed answer (scored: a parse failure, outside H and F), t2 whose
    task the current plan no longer holds, t3 repeating t0's model request. Before: no column said why t2 and t3
    had ``scored`` False."""
    from geoagent.geoverify.campaign import GeoVerifyCampaign
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.score import scored_row
    from geoagent.geoverify.stages import SCORED_TABLE
    from geoagent.runtime.scope import NOT_IN_PLAN

    cfg = _gv_cfg(tmp_path)
    yes = '{"verdict": "yes", "confidence": 0.9}'

    def row(i: int, text: str, rk: str) -> dict:
        r = scored_row({"trial_id": f"t{i}", "site": "s", "arm": "main", "band": "signal", "truth": "yes"}, "m",
                       parse_verdict(text), finish_reason="stop")
        return {**r, "request_key": rk}

    _write_plan(cfg.state_dir(), [("m", "t0|m"), ("m", "t1|m"), ("m", "t3|m")])
    with open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=0.0) as st:
        st.store.put_results(SCORED_TABLE, [("t0|m", row(0, yes, "rk0")), ("t1|m", row(1, "hmm", "rk1")),
                                            ("t2|m", row(2, yes, "rk2")), ("t3|m", row(3, yes, "rk0"))])
        GeoVerifyCampaign().export(cfg, st.store)
    for df in (pl.read_parquet(cfg.state_dir() / "geoverify_scored.parquet"),
               pl.read_csv(cfg.state_dir() / "geoverify_scored.csv", infer_schema_length=None)):
        by = {r["key"]: r for r in df.iter_rows(named=True)}
        assert by["t0|m"]["scored"] is True and by["t0|m"]["left_out"] is None
        assert by["t1|m"]["scored"] is True and by["t1|m"]["left_out"] is None and by["t1|m"]["parse_ok"] is False
        assert by["t2|m"]["scored"] is False and by["t2|m"]["left_out"] == NOT_IN_PLAN
        assert by["t3|m"]["scored"] is False and "t0|m" in by["t3|m"]["left_out"], by["t3|m"]["left_out"]
    assert pl.read_parquet(cfg.state_dir() / "geoverify_scored.parquet").schema["left_out"] == pl.String


# --- 2. the exports of a replay campaign say they hold replayed responses -----------------------------------
def test_replay_campaign_csv_exports_say_replayed_without_tripping_csv_readers(release_dir, tmp_path, monkeypatch,
                                                                               capsys):
    """``geocontext_replay.toml`` run with its export: before, ``geoverify_scored.csv`` and ``model_responses.csv``
    carried nothing saying the answers were replayed from a release sample (the report files did). Now every row
    says so in the column ``replayed``, the Parquet files carry the report's replay line in their metadata, and
    ``export_note.txt`` beside the files gives it in full; polars and pandas read the CSV with default
    arguments (no comment line to skip)."""
    import importlib.util
    import tomllib

    import anyio
    import pandas as pd

    from geoagent import engine
    from geoagent.config import packaged_config_path
    from geoagent.runtime.export import EXPORT_NOTE_FILE, PARQUET_NOTE_KEY

    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    if importlib.util.find_spec("geoagent.campaigns.geoverify") is None:
        monkeypatch.setitem(engine.KINDS, "geoverify", "geoagent.geoverify.campaign:GeoVerifyCampaign")
    cfg = config_from_dict(tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8")))
    out = anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=True))
    assert out.status == "complete", out.summary()
    state = tmp_path / "state" / cfg.name
    raw = release_dir / "verify_raw_sample.jsonl"
    for table in ("geoverify_scored", "model_responses"):
        csv_pl = pl.read_csv(state / f"{table}.csv", infer_schema_length=None)
        csv_pd = pd.read_csv(state / f"{table}.csv")
        assert csv_pl.height == csv_pd.shape[0] > 300, table            # no line taken for a header or lost
        assert list(csv_pl.columns) == list(csv_pd.columns) and csv_pl.columns[0] == "key"
        assert csv_pl["replayed"].to_list() == [True] * csv_pl.height, (table, csv_pl["model"].unique().to_list())
        assert csv_pd["replayed"].tolist() == [True] * csv_pd.shape[0], table
        meta = pl.read_parquet_metadata(state / f"{table}.parquet")
        assert meta[PARQUET_NOTE_KEY].startswith("Replay of recorded responses: release-replay from "), meta
        assert str(raw) in meta[PARQUET_NOTE_KEY]
    note = (state / EXPORT_NOTE_FILE).read_text(encoding="utf-8")
    assert str(raw) in note and "336 recorded responses" in note and "none is the paper's" in note
    assert "geoverify_scored.csv" in note and "replayed" in note
    # `run.py export` writes the same and points at the note
    from geoagent.cli import main

    (state / EXPORT_NOTE_FILE).unlink()
    path = tmp_path / "replay.toml"
    path.write_text(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["export", str(path)]) == 0
    assert (state / EXPORT_NOTE_FILE).read_text(encoding="utf-8") == note
    assert f"column replayed; {state / EXPORT_NOTE_FILE}" in capsys.readouterr().out


def test_replayed_column_per_model_and_exports_still_concatenate(tmp_path):
    """A campaign with a replay model and a simulated one: ``replayed`` is True on the replay model's rows, False
    on the other's, null for a model the config no longer names; a campaign without replay models has the same
    columns (all False), so ``pl.concat`` of the two exports works, and no note file or metadata (an earlier
    replay export's note file is removed)."""
    from geoagent.geoverify.campaign import GeoVerifyCampaign
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.score import scored_row
    from geoagent.geoverify.stages import SCORED_TABLE
    from geoagent.runtime.export import EXPORT_NOTE_FILE, PARQUET_NOTE_KEY

    rec = tmp_path / "answers.jsonl"
    rec.write_text('{"key": "t0|rp", "raw": "yes"}\n', encoding="utf-8")
    replay = {"name": "rp", "provider": "replay", "model": "recorded", "replay": {"path": str(rec)}}
    sim = {"name": "sim", "provider": "simulated", "model": "sim"}

    def rows() -> list:
        out = []
        for i, model in enumerate(("rp", "sim", "gone")):
            r = scored_row({"trial_id": f"t{i}", "site": "s", "arm": "main", "band": "signal", "truth": "yes"}, model,
                           parse_verdict('{"verdict": "yes"}'), finish_reason="stop")
            out.append((f"t{i}|{model}", r))
        return out

    frames = {}
    for name, models in (("gv-mixed", [replay, sim]), ("gv-plain", [sim])):
        cfg = _gv_cfg(tmp_path, name, models)
        with open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=0.0) as st:
            st.store.put_results(SCORED_TABLE, rows())
            if name == "gv-plain":
                (cfg.state_dir() / EXPORT_NOTE_FILE).write_text("stale", encoding="utf-8")
            GeoVerifyCampaign().export(cfg, st.store)
        frames[name] = pl.read_csv(cfg.state_dir() / "geoverify_scored.csv", infer_schema_length=None)
        meta = pl.read_parquet_metadata(cfg.state_dir() / "geoverify_scored.parquet")
        assert (PARQUET_NOTE_KEY in meta) == (name == "gv-mixed")
        # (session 12: both name a simulated model, so both get a note file, the simulator's warning; the replay
        # line only where a replay model is, and the stale note is replaced)
        note = (cfg.state_dir() / EXPORT_NOTE_FILE).read_text(encoding="utf-8")
        assert ("Replay of recorded responses" in note) == (name == "gv-mixed")
        assert "Simulated answers: sim answered" in note and "stale" not in note
    mixed = dict(zip(frames["gv-mixed"]["model"], frames["gv-mixed"]["replayed"]))
    assert mixed == {"rp": True, "sim": False, "gone": None}
    assert dict(zip(frames["gv-mixed"]["model"], frames["gv-mixed"]["simulated"])) == {
        "rp": False, "sim": True, "gone": None}
    plain = dict(zip(frames["gv-plain"]["model"], frames["gv-plain"]["replayed"]))
    assert plain == {"rp": None, "sim": False, "gone": None}
    both = pl.concat([pl.read_parquet(tmp_path / "state" / n / "geoverify_scored.parquet") for n in frames])
    assert both.height == 6 and both.schema["replayed"] == pl.Boolean


# --- 3. the dry run counts a photo without a file at the size of the crawl's thumb_field ---------------------
def _crawl_release(tmp_path, release_dir, thumb_field: str | None):
    """A copy of the release folder as a crawl's state folder: its ``manifest.json`` written by
    :class:`geoagent.runtime.manifest.Manifest` for ``crawl_sandbox.toml`` with ``[crawl.fetcher] thumb_field``
    (None: no manifest, a plain release folder)."""
    import shutil
    import tomllib

    from geoagent.config import packaged_config_path
    from geoagent.runtime.manifest import Manifest

    folder = tmp_path / f"crawl-{thumb_field or 'none'}"
    shutil.copytree(release_dir, folder)
    if thumb_field is not None:
        doc = tomllib.loads(packaged_config_path("crawl_sandbox").read_text(encoding="utf-8"))
        doc["crawl"].setdefault("fetcher", {})["thumb_field"] = thumb_field
        Manifest(config_from_dict(doc), state_dir=folder).start_run(command="crawl")
    return folder


@pytest.mark.parametrize("thumb_field, size, gpt, claude", [
    # gpt-4o high detail: 85 + 170 x tiles after the shortest side is scaled to 768 (never up); Claude:
    # ceil(w x h / 750) after its resize to a long edge of at most 1,568 px and 1,568 28-px patches
    (None, (1024, 768), 765, 1049),
    ("thumb_1024_url", (1024, 768), 765, 1049),
    ("thumb_256_url", (256, 192), 255, 66),                  # 1 tile; ceil(256 x 192 / 750) = 66
    ("thumb_2048_url", (2048, 1536), 765, None),             # scaled to 1024 x 768 by OpenAI; Claude resizes
    ("thumb_original_url", (4000, 3000), 765, None),         # no fixed size: 4000 x 3000 assumed (12 MP, 4:3)
])
def test_dry_run_counts_a_photo_without_a_file_at_the_crawls_thumbnail_size(
        isolated_roots, release_dir, monkeypatch, capsys, thumb_field, size, gpt, claude):
    """A GeoVerify campaign over a crawl's folder whose photos are not there yet: before, the dry run counted
    each at 1024 x 768 (``thumb_1024_url``) whatever ``[crawl.fetcher] thumb_field`` the crawl fetched with."""
    from test_dry_run_walkb import _gv_real_toml

    from geoagent.cli import main
    from geoagent.config import expected_image_tokens

    folder = _crawl_release(isolated_roots, release_dir, thumb_field)
    monkeypatch.setenv("GEOAGENT_RELEASE", str(folder))
    monkeypatch.setenv("WALKB_OPENAI", "x")
    monkeypatch.setenv("WALKB_ANTHROPIC", "y")
    # no [images] opt-in: the real run waits for the photos (refused until then: the dry run exits 2 saying so),
    # so they are counted at the crawl's size (with missing = "placeholder" that run would send the placeholder
    # and the dry run counts that: test_dry_run_walkb, session 11 leftovers)
    cfg = _gv_real_toml(isolated_roots, f"gv-thumb-{thumb_field or 'none'}")
    assert main(["run", cfg, "--simulate", "--no-live"]) == 2
    out = capsys.readouterr().out
    gpt_line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("gpt:"))
    claude_line = next(ln for ln in out.splitlines() if ln.lstrip().startswith("claude:"))
    claude = claude or expected_image_tokens("anthropic", "claude-sonnet-4-5", size)[0]
    assert claude > 1049 or size[0] <= 1024
    assert f"about {gpt} tokens per image" in gpt_line, gpt_line
    assert f"about {claude} tokens per image" in claude_line, claude_line
    field = thumb_field or "thumb_1024_url"
    for line in (gpt_line, claude_line):
        assert f"no file yet counted at {size[0]}x{size[1]}" in line and field in line, line
        if thumb_field is not None:
            assert str(folder) in line, line                   # where the size came from
    if thumb_field == "thumb_original_url":
        assert "no fixed size" in gpt_line, gpt_line


def test_both_kinds_take_the_photo_size_from_the_crawl_their_release_folder_is(isolated_roots, release_dir):
    """GeoHint reads the same crawl setting through ``[geohint] release_dir`` (and GeoVerify through
    ``[geoverify] release_dir``); a plain release folder (no crawl manifest) keeps 1024 x 768."""
    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.geoverify.campaign import GeoVerifyCampaign

    crawl = _crawl_release(isolated_roots, release_dir, "thumb_2048_url")
    for kind, Kind in (("geohint", GeoHintCampaign), ("geoverify", GeoVerifyCampaign)):
        for folder, size in ((crawl, (2048, 1536)), (release_dir, (1024, 768))):
            cfg = config_from_dict({
                "campaign": {"name": f"{kind}-px", "kind": kind, "contact": "ops@example.org"},
                "budget": {"cap_usd": 1.0}, "models": [{"name": "m", "provider": "simulated", "model": "m"}],
                kind: {"release_dir": str(folder)}})
            got, basis = Kind().expected_photo(cfg)
            assert got == size, (kind, folder)
            assert ("thumb_2048_url" in basis and str(crawl) in basis) == (folder == crawl), basis


# --- 4. a real run refused for unset keys names the images problem too, as its dry run does ------------------
def test_real_run_without_keys_and_photos_names_both_in_one_refusal(isolated_roots, release_dir, monkeypatch,
                                                                   capsys):
    """A real campaign with its API key variables unset and no photo files: before, ``run`` said only that the
    variables were not set (exit 2); setting them then met the images refusal, a second round trip, although
    the dry run names both. Now the refusal names both, still exit 2, and nothing is created."""
    from test_dry_run_walkb import _gv_real_toml

    from geoagent.cli import main

    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    monkeypatch.delenv("WALKB_OPENAI", raising=False)
    monkeypatch.delenv("WALKB_ANTHROPIC", raising=False)
    cfg = _gv_real_toml(isolated_roots, "gv-both")
    assert main(["run", cfg, "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "WALKB_OPENAI" in err and "WALKB_ANTHROPIC" in err, err
    assert "would carry placeholder pixels instead of photos" in err and "geoverify.image_root" in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith(("error:", "config error:"))]
    assert len(errors) == 1 and "WALKB_OPENAI" in errors[0] and "placeholder pixels" in errors[0], err  # one message
    assert errors[0].rstrip().endswith("Nothing was run"), errors[0]
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()

    # only the keys missing (the photos allowed as placeholders): the message is the keys' alone, as before
    cfg = _gv_real_toml(isolated_roots, "gv-keys", extra='[images]\nmissing = "placeholder"\n')
    assert main(["run", cfg, "--no-live"]) == 2
    err = capsys.readouterr().err
    assert "WALKB_OPENAI" in err and "placeholder pixels" not in err, err
    assert not (isolated_roots / "state").exists() and not (isolated_roots / "queues").exists()
