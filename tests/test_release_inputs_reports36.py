"""Release files as other tools write them, and replays of rows the importer refused (session 36, reports36).

Before (each case reproduced by the helper on copies of the release sample):

1. ``answers_judged*.csv`` whose unparsed answers carry ``error_km`` "NaN", "None", "nan" or "NA" (pandas' ``na_rep``,
   ``str(None)``, R) refused those rows, misses all: qwen3-vl-8b's hit rate rose from 26.7 % to 27.4 %.
2. A ladder whose empty ``pageviews`` cells read "NA" (R's ``write.csv``) refused every point; ``judged`` then wrote an
   empty report over the last one in OUT_DIR, exit 0, naming the forced schema as its condition.
3. A GeoVerify trial-table row refused as malformed (an image latitude of 95) was rebuilt from its raw records and
   scored all the same; a rebuilt trial skipped tau_m's check; a raw record's site "../../x" became a site id.
4. The judged report said nothing of the rows it left out (only the console did).
5. A released model named "All" gave two "All" rows in Table 6 (the model's and the pooled one).
"""

from __future__ import annotations

import csv
import io
import shutil

import orjson
import pytest

from geoagent.data.importer import import_release, is_missing_number
from geoagent.geohint.judged import import_judged, main as judged_main
from geoagent.geoverify.stages import release_replay_plan


def _copy_release(release_dir, root):
    root.mkdir(parents=True)
    for name in ("sites.csv", "ladders", "answers_judged_sample.csv", "verify_trials_sample.csv",
                 "verify_raw_sample.jsonl"):
        src = release_dir / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


def _set_where(column, equals, target, value):
    """An edit for :func:`_rewrite_csv`: in every row whose ``column`` reads ``equals``, set ``target`` to ``value``."""
    def edit(header, rows):
        for r in rows:
            if r[header.index(column)] == equals:
                r[header.index(target)] = value

    return edit


def _rewrite_csv(path, edit):
    with path.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    header, body = rows[0], rows[1:]
    edit(header, body)
    out = io.StringIO()
    csv.writer(out, lineterminator="\n").writerows([header, *body])
    path.write_text(out.getvalue(), encoding="utf-8")


@pytest.mark.parametrize("text", ["", "NaN", "nan", "None", "NA", "null", " N/A "])
def test_missing_number_spellings(text):
    assert is_missing_number(text)


@pytest.mark.parametrize("text", ["0", "0.0", "inf", "far", "Nan Lian Garden"])
def test_numbers_and_text_are_not_missing(text):
    assert not is_missing_number(text)


@pytest.mark.parametrize("spelling", ["NaN", "None", "nan", "NA"])
def test_unparsed_answers_with_a_missing_error_spelled_out_stay_misses(release_dir, tmp_path, spelling):
    base, base_rep = import_judged(_copy_release(release_dir, tmp_path / "a"))
    root = _copy_release(release_dir, tmp_path / "b")
    n_blank = 0

    def edit(header, rows):
        nonlocal n_blank
        for r in rows:
            if r[header.index("error_km")] == "":
                r[header.index("error_km")] = spelling
                n_blank += 1

    _rewrite_csv(root / "answers_judged_sample.csv", edit)
    assert n_blank == 13  # the sample's unresolved rows (12 unparsed, 1 parsed and not located)
    rows, rep = import_judged(root)
    assert len(rows) == len(base) == 966
    assert [(i.line, i.reason) for i in rep.issues] == [(i.line, i.reason) for i in base_rep.issues]
    assert [r.hit for r in rows] == [r.hit for r in base]
    assert sum(r.error_km is None for r in rows) == 13


def test_a_resolved_answer_without_a_distance_is_refused_not_a_miss(release_dir, tmp_path):
    root = _copy_release(release_dir, tmp_path / "b")
    _rewrite_csv(root / "answers_judged_sample.csv", lambda h, rows: rows[0].__setitem__(h.index("error_km"), "NA"))
    rows, rep = import_judged(root)
    assert len(rows) == 965
    assert any(i.line == 2 and "column 'error_km' is missing ('NA') for an answer resolved at 'area'" in i.reason
               for i in rep.issues), [str(i) for i in rep.issues]


def test_a_distance_for_an_answer_with_no_resolved_level_is_refused(release_dir, tmp_path):
    """stats46 #1, the mirror of the case above: a row with an ``error_km`` but an empty ``resolved_level`` was
    scored a miss while its distance entered the error-distance regression (Tables 6-7); it is refused with a note."""
    root = _copy_release(release_dir, tmp_path / "b")
    at: list[int] = []

    def edit(header, rows):
        for i, r in enumerate(rows):
            if r[header.index("resolved_level")] == "" and not at:
                r[header.index("error_km")] = "0.5"
                at.append(i + 2)  # the file's line (the header is line 1)

    _rewrite_csv(root / "answers_judged_sample.csv", edit)
    rows, rep = import_judged(root)
    assert len(rows) == 965
    assert sum(r.error_km is None for r in rows) == 12  # the other unresolved rows stay misses without a distance
    assert any(i.line == at[0] and "column 'error_km' is 0.5 km for an answer with no resolved level ('')" in i.reason
               for i in rep.issues), [str(i) for i in rep.issues]


def test_na_in_an_optional_ladder_column_is_absent(release_dir, tmp_path):
    root = _copy_release(release_dir, tmp_path / "b")
    for path in (root / "ladders").glob("*.csv"):
        _rewrite_csv(path, lambda h, rows: [r.__setitem__(h.index("pageviews"), r[h.index("pageviews")] or "NA")
                                            for r in rows])
    rel = import_release(root)
    base = import_release(release_dir)
    assert sum(len(lad.points) for lad in rel.ladders.values()) == sum(len(lad.points) for lad in base.ladders.values())
    assert not [i for i in rel.report.issues if "ladder" in i.file]


def test_judged_refuses_a_file_with_nothing_to_score_and_keeps_the_last_report(release_dir, tmp_path, capsys):
    root = _copy_release(release_dir, tmp_path / "b")
    out = tmp_path / "out"
    assert judged_main([str(root), str(out), "--file", "answers_judged_sample.csv", "--flips", "50", "--splits", "5",
                        "--n-boot", "0"]) == 0
    before = (out / "table1.csv").read_bytes()
    # every ladder point refused (text in a numeric column): no context row can be scored ...
    for path in (root / "ladders").glob("*.csv"):
        _rewrite_csv(path, lambda h, rows: [r.__setitem__(h.index("pageviews"), "many") for r in rows])
    # ... and no baseline row either
    _rewrite_csv(root / "answers_judged_sample.csv",
                 lambda h, rows: rows.__setitem__(slice(None), [r for r in rows if r[h.index("context")] != "none"]))
    capsys.readouterr()
    assert judged_main([str(root), str(out), "--file", "answers_judged_sample.csv", "--n-boot", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "can be scored" in err and "answers_judged_sample.csv" in err
    assert (out / "table1.csv").read_bytes() == before
    # a header and no row: refused too, naming the file
    _rewrite_csv(root / "answers_judged_sample.csv", lambda h, rows: rows.clear())
    assert judged_main([str(root), str(out), "--file", "answers_judged_sample.csv", "--n-boot", "0"]) == 2
    assert "answers_judged_sample.csv: no answer row" in capsys.readouterr().err
    assert (out / "table1.csv").read_bytes() == before


def test_judged_report_lists_the_rows_it_left_out_and_refuses_a_model_named_all(release_dir, tmp_path):
    root = _copy_release(release_dir, tmp_path / "b")

    _rewrite_csv(root / "answers_judged_sample.csv", _set_where("model", "claude-opus-5", "model", "All"))
    rows, rep = import_judged(root)
    n_all = sum(1 for i in rep.issues if "the name of the report's pooled row" in i.reason)
    assert n_all > 0 and not any(r.model == "All" for r in rows)
    out = tmp_path / "out"
    assert judged_main([str(root), str(out), "--file", "answers_judged_sample.csv", "--flips", "50", "--splits", "5",
                        "--n-boot", "0"]) == 0
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "## Import notes" in md and "model 'All' is the name of the report's pooled row" in md
    with (out / "table6.csv").open(encoding="utf-8") as fh:
        assert sum(1 for r in csv.reader(fh) if r and r[0] == "All") == 1


def _raw_lines(path):
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def _write_raw(path, recs):
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))


def test_replay_does_not_rebuild_a_trial_whose_table_row_was_refused(release_dir, tmp_path):
    root = _copy_release(release_dir, tmp_path / "b")
    refused = {}

    def edit(header, rows):
        r = rows[3]  # line 5
        r[header.index("img_lat")] = "95.0"
        refused["id"] = f"{r[header.index('image_id')]}|{r[header.index('arm')]}|{r[header.index('cand')]}"

    _rewrite_csv(root / "verify_trials_sample.csv", edit)
    rel = import_release(root)
    assert refused["id"] in rel.refused_trials
    notes: list[str] = []
    trials, pairs, _ = release_replay_plan(rel, notes)
    assert refused["id"] not in {t.trial_id for t in trials}
    assert not any(tid == refused["id"] for tid, _ in pairs)
    assert any(refused["id"] in n and "refused as malformed" in n for n in notes), notes
    base_trials, base_pairs, _ = release_replay_plan(import_release(release_dir))
    assert len(trials) == len(base_trials) - 1


def test_replay_checks_the_trials_it_rebuilds(release_dir, tmp_path):
    root = _copy_release(release_dir, tmp_path / "b")
    recs = _raw_lines(root / "verify_raw_sample.jsonl")
    # one image's table rows removed: its records rebuild its trials
    image = str(recs[0]["image_id"])
    _rewrite_csv(root / "verify_trials_sample.csv",
                 lambda h, rows: rows.__setitem__(slice(None), [r for r in rows if r[h.index("image_id")] != image]))
    mine = [r for r in recs if str(r["image_id"]) == image]
    assert len({r["trial_id"] for r in mine}) >= 3
    tids = sorted({r["trial_id"] for r in mine})
    for r in recs:
        if r["trial_id"] == tids[0]:
            r["site"] = "../../x"  # unsafe site id
        if r["trial_id"] == tids[1]:
            r["trial_id"] = "999|main|Nowhere"  # disagrees with its own fields
    _write_raw(root / "verify_raw_sample.jsonl", recs)
    notes: list[str] = []
    trials, _, _ = release_replay_plan(import_release(root), notes)
    got = {t.trial_id for t in trials}
    assert tids[0] not in got and "999|main|Nowhere" not in got and tids[2] in got
    assert any("../../x" in n for n in notes) and any("999|main|Nowhere" in n and "unknown" in n for n in notes), notes
    # records of one rebuilt trial that disagree on its truth: noted, the first record's used
    of_trial = [r for r in recs if r["trial_id"] == tids[2]]
    assert len(of_trial) >= 2
    of_trial[1]["truth"] = "no" if of_trial[1]["truth"] == "yes" else "yes"
    _write_raw(root / "verify_raw_sample.jsonl", recs)
    notes = []
    release_replay_plan(import_release(root), notes)
    assert any(tids[2] in n and "disagree" in n for n in notes), notes


def test_replay_campaign_reports_the_refused_row_and_does_not_score_it(release_dir, tmp_path, monkeypatch):
    """End to end (the helper's ``t_lat_oor``): a table row refused for an image latitude of 95 was still scored for
    all 4 models (336 answers); now 332 are, and the report and summary name the row and the trial."""
    import tomllib

    import anyio

    from geoagent import engine
    from geoagent.config import config_from_dict, packaged_config_path

    root = _copy_release(release_dir, tmp_path / "rel")
    refused = {}

    def edit(header, rows):
        r = rows[3]
        r[header.index("img_lat")] = "95.0"
        refused["id"] = f"{r[header.index('image_id')]}|{r[header.index('arm')]}|{r[header.index('cand')]}"

    _rewrite_csv(root / "verify_trials_sample.csv", edit)
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(root))
    doc = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    for m in doc["models"]:
        m["replay"]["path"] = str(root / "verify_raw_sample.jsonl")
    cfg = config_from_dict(doc)
    out = anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.planned == 332, out.summary()
    md = (tmp_path / "state" / cfg.name / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert "## Import notes" in md and "column 'img_lat': 95.0 outside [-90, 90]" in md
    assert f"trial {refused['id']!r}: its row in the trial table was refused as malformed" in md
    assert any("not replayed as recorded" in line for line in out.extra_lines), out.extra_lines


def test_a_hit_column_that_disagrees_with_the_rule_is_noted(release_dir, tmp_path):
    """reports36 nit: a ``hit`` that disagrees with the recomputed one drew no note; the recomputed value is used."""
    base, base_rep = import_judged(_copy_release(release_dir, tmp_path / "a"))
    assert not any("'hit' column disagrees" in i.reason for i in base_rep.issues)  # the release agrees on every row
    root = _copy_release(release_dir, tmp_path / "b")

    def flip(header, rows):
        for r in rows[:3]:
            r[header.index("hit")] = "False" if r[header.index("hit")] == "True" else "True"

    _rewrite_csv(root / "answers_judged_sample.csv", flip)
    rows, rep = import_judged(root)
    assert [r.hit for r in rows] == [r.hit for r in base]
    (note,) = [i for i in rep.issues if "'hit' column disagrees" in i.reason]
    assert note.line == 2 and note.reason.startswith("3 rows'"), note


def test_a_city_level_answer_without_a_distance_stays_a_miss(release_dir, tmp_path):
    """review36 #1: the refusal of a resolved answer without ``error_km`` took city-level rows too, which are misses
    whatever their distance (censored), and raised the hit rates; only building and area rows are refused."""
    base, _ = import_judged(_copy_release(release_dir, tmp_path / "a"))
    root = _copy_release(release_dir, tmp_path / "b")

    _rewrite_csv(root / "answers_judged_sample.csv", _set_where("resolved_level", "city", "error_km", ""))
    rows, rep = import_judged(root)
    assert len(rows) == len(base) and sum(r.hit for r in rows) == sum(r.hit for r in base)
    assert not any("is missing" in i.reason for i in rep.issues)
