"""Table 11 re-scored from the released raw forced_chain responses (``data/forced_chain_raw.jsonl``), with no
model calls and no geocoder: :mod:`geoagent.geohint.raw_import`.

Expected values are counted by hand from the fixture lines written here and from the seven lines of the real
sample (``../shared/reference/geocontext/forced_chain_raw_sample.jsonl``, read and counted when this test was
written; the test skips when the release folder is absent)."""

from __future__ import annotations

import csv
import json

import pytest

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.raw_import import NOT_GEOCODED, import_raw, main, replicate_table11
from geoagent.report.geohint import table11
from _docs import docs_text
from _one_site_release import one_site_release

CATS = ("Infra.", "Veg.", "Arch.", "Script", "Terrain")
FULL = {"infrastructure": "bollards", "vegetation": "plane trees", "architecture": "Haussmann stone",
        "language": "Latin", "terrain_climate_vehicles": "flat, asphalt"}
PATH = "streetview\\s1\\111.jpg"


def _line(context: str, raw, *, stop: str | None = "end_turn", model: str = "m", **more) -> str:
    d = {"path": PATH, "location": "s1", "condition": "day", "hour": 12, "model": model, "lang": "en", "repeat": 0,
         "context": context, "schema": "forced_chain", "ts": 1.0, "raw": raw,
         "usage": {"input_tokens": 10, "output_tokens": 5, "stop_reason": stop}, "error": None}
    d.update(more)
    return json.dumps(d)


@pytest.fixture
def release(tmp_path):
    """A release folder: one site, a ladder holding Q1 only, and a raw file of 7 lines (one blank)."""
    root = one_site_release(tmp_path)
    two_nv = {**FULL, "vegetation": "Not visible", "language": "not visible"}
    lines = [
        # 1: full checklist, plain JSON
        _line("high_15_30km_Q1", json.dumps({"city": "Paris", "area": "1er", "building": "shop", "evidence": FULL})),
        # 2: prose, then fenced JSON with 2 "not visible"; Q9 is not in the ladder (still a forced_chain response)
        _line("mid_05_15km_Q9", "**Vegetation:** none\n```json\n" + json.dumps(
            {"city": "Paris", "area": "9e", "building": "store", "evidence": two_nv}) + "\n```"),
        # 3: no context, unparseable prose the model finished: an unparsed answer (forced_chain_baseline)
        _line("none", "I cannot tell where this photo was taken."),
        # 4: broken JSON
        '{"path": "streetview\\\\s1\\\\111.jpg", "model": ',
        # 5: no raw field
        json.dumps({"path": PATH, "location": "s1", "model": "m", "context": "none", "schema": "forced_chain"}),
        # 6: cut off at the token limit with nothing: no answer (cut-off table only)
        _line("high_15_30km_Q1", "", stop="max_tokens", repeat=1),
        "",
    ]
    (root / "forced_chain_raw.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_fixture_table11_by_hand(release):
    rows, report = import_raw(release)
    assert [r.extra["line"] for r in rows] == [1, 2, 3, 6]
    assert [r.condition for r in rows] == ["forced_chain", "forced_chain", "forced_chain_baseline", "forced_chain"]
    assert all(r.hit is None and r.error_km is None and r.extra["not_geocoded"] == NOT_GEOCODED for r in rows)
    assert rows[1].dist_km is None and rows[0].dist_km == 2.0 and rows[0].ref_qid == "Q1" and rows[0].band == "1.5-3.0km"
    assert rows[2].extra["raw"] == "I cannot tell where this photo was taken." and not rows[2].parse_ok
    issues = [(i.line, i.reason) for i in report.issues if i.file.endswith("forced_chain_raw.jsonl")]
    assert [ln for ln, _ in issues] == [2, 4, 5]
    assert "Q9" in issues[0][1] and "not valid JSON" in issues[1][1] and "'raw'" in issues[2][1]
    agg = GeoHintAggregator()
    agg.add_many(rows)
    t = table11(agg)
    row = dict(zip(t.columns, t.rows[0]))
    # by hand: lines 1-3 and 6 are responses (6 is no answer elsewhere, but Table 11's n is every forced_chain
    # response, the paper's 2799 with its 2 unparseable ones); 2 parsed, both with evidence; 2 unparsed (3, 6), so
    # 2 of the 4 responses carry an evidence object (the paper's and the release's denominator: every response);
    # vegetation and script "not visible" in 1 of 2 slots each
    assert len(t.rows) == 1 and row["Model"] == "m" and row["n"] == 4 and row["Unparseable"] == 2
    assert row["Evidence"] == pytest.approx(2 / 4)
    assert tuple(row[c] for c in CATS) == (0.0, 0.5, 0.0, 0.5, 0.0)


def test_fixture_command_writes_table11_and_withholds_hit_tables(release, tmp_path, capsys):
    out = tmp_path / "out"
    assert main([str(release), str(out)]) == 0
    files = sorted(p.name for p in out.iterdir())
    assert files == ["cutoff.csv", "parse.csv", "report.md", "table11.csv"]  # no hit, echo or distance table
    md = (out / "report.md").read_text(encoding="utf-8")
    assert "Withheld: Tables 1-10" in md and "not geocoded" in md and "forced_chain_raw.jsonl (4 answers)" in md
    with (out / "table11.csv").open(encoding="utf-8") as fh:
        t11 = list(csv.DictReader(fh))
    assert len(t11) == 1 and t11[0]["n"] == "4" and float(t11[0]["Veg. (fraction)"]) == 0.5  # 6 counted (no answer)
    with (out / "cutoff.csv").open(encoding="utf-8") as fh:
        cut = {(r["Model"], r["Condition"]): r for r in csv.DictReader(fh)}
    # by hand: forced_chain lines 1, 2, 6 (6 cut off with nothing parsed); forced_chain_baseline line 3
    fc = cut[("m", "forced_chain")]
    assert (fc["n"], fc["Cut off"], fc["Cut off, no answer (left out)"]) == ("3", "1", "1")
    assert cut[("All", "all")]["n"] == "4"
    with (out / "parse.csv").open(encoding="utf-8") as fh:
        parse = {(r["Model"], r["Condition"]): r for r in csv.DictReader(fh)}
    assert (parse[("m", "forced_chain")]["n"], parse[("m", "forced_chain")]["JSON"],
            parse[("m", "forced_chain")]["Unparsed"]) == ("3", "2", "1")
    assert parse[("m", "forced_chain_baseline")]["Unparsed"] == "1"
    printed = capsys.readouterr().out
    assert "forced_chain_raw.jsonl:4:" in printed and "forced_chain_raw.jsonl:5:" in printed


def test_missing_file_is_one_error_line(tmp_path, release, capsys):
    (release / "forced_chain_raw.jsonl").unlink()
    assert main([str(release), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "forced_chain_raw" in err[0]


def test_file_without_a_usable_line_is_refused_naming_file_and_line(tmp_path, release, capsys):
    (release / "forced_chain_raw.jsonl").write_text("not json\n", encoding="utf-8")
    assert main([str(release), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "forced_chain_raw.jsonl:1:" in err[0] and "not valid JSON" in err[0]


def test_real_sample_table11_by_hand(release_dir):
    name = "forced_chain_raw_sample.jsonl"
    if not (release_dir / name).is_file():
        pytest.skip(f"{name} not in {release_dir}")
    rows, report = import_raw(release_dir, filename=name)
    assert len(rows) == 7 and all(r.condition == "forced_chain" and r.parse_ok for r in rows)
    assert rows[0].site == "paris_montmartre" and rows[0].image_id == "395369233492299"
    assert rows[6].extra["finish_reason"] == "stop" and rows[0].extra["finish_reason"] == "end_turn"
    with (release_dir / name).open(encoding="utf-8") as fh:
        assert rows[2].extra["raw"] == [json.loads(x) for x in fh][2]["raw"]  # kept verbatim
    # line 3 names Montmartre Cemetery (Q746647), which the released ladder leaves out: noted, still counted
    issues = [i for i in report.issues if i.file.endswith(name)]
    assert [(i.line, "Q746647" in i.reason) for i in issues] == [(3, True)]
    agg = GeoHintAggregator()
    agg.add_many(rows)
    t = {r[0]: dict(zip(table11(agg).columns, r)) for r in table11(agg).rows}
    # by hand from the 7 lines: claude-haiku-4-5 lines 1-6, every one with a 5-slot evidence object; "not
    # visible": language on lines 3, 4, 5, vegetation on line 5. qwen3-vl-235b line 7: language "not visible"
    c = t["claude-haiku-4-5"]
    assert (c["n"], c["Evidence"], c["Unparseable"]) == (6, 1.0, 0)
    assert tuple(c[k] for k in CATS) == pytest.approx((0.0, 1 / 6, 0.0, 3 / 6, 0.0))
    q = t["qwen3-vl-235b"]
    assert (q["n"], q["Evidence"], q["Unparseable"]) == (1, 1.0, 0)
    assert tuple(q[k] for k in CATS) == (0.0, 0.0, 0.0, 1.0, 0.0)


def test_real_sample_command(release_dir, tmp_path):
    name = "forced_chain_raw_sample.jsonl"
    if not (release_dir / name).is_file():
        pytest.skip(f"{name} not in {release_dir}")
    out = tmp_path / "out"
    tables, report = replicate_table11(release_dir, out)  # default: the full file, else the sample
    assert [t.name for t in tables] == ["table11", "parse", "cutoff"]
    assert sum(n for f, n in report.imported.items() if f.endswith(name)) == 7
    assert not (out / "table1.csv").exists()


def test_each_kind_of_bad_line_is_named_and_skipped(tmp_path, release):
    bad = [
        "[1, 2]",
        _line("none", 42),
        _line("none", None, error="HTTP 529 overloaded"),
        _line("near_Q1", "{}"),
        _line("none", "{}", location="../etc"),
        "[" * 100_000 + "]" * 100_000,
        b"\xff\xfe not utf-8".decode("latin-1"),
        _line("none", None),  # null text and no error: an empty answer the model returned (unparsed, counted)
    ]
    (release / "forced_chain_raw.jsonl").write_bytes(
        "\n".join(bad[:6]).encode() + b"\n\xff\xfe not utf-8\n" + bad[7].encode() + b"\n")
    rows, report = import_raw(release)
    reasons = {i.line: i.reason for i in report.issues if i.file.endswith(".jsonl")}
    assert sorted(reasons) == [1, 2, 3, 4, 5, 6, 7]
    assert "not a JSON object" in reasons[1] and "'raw' is not text" in reasons[2]
    assert "API call failed" in reasons[3] and "not an answer" in reasons[3]
    assert "context label" in reasons[4] and "site id" in reasons[5]
    assert "not valid JSON" in reasons[6] and "UTF-8" in reasons[7]
    assert [(r.extra["line"], r.parse_ok, r.extra["raw"]) for r in rows] == [(8, False, "")]


def test_readme_sample_figures_match_the_sample(release_dir, tmp_path):
    """README's Table 11 figures on the 7-line sample are what the command prints (6 claude-haiku-4-5 answers:
    script 3 of 6, vegetation 1 of 6 'not visible', counted by hand above)."""
    readme = docs_text()
    assert 'claude-haiku-4-5 6 answers, evidence object in 100 %,\nscript "not visible" in 50.0 %, vegetation 16.7 %' in readme
    assert f"{100 * 3 / 6:.1f}" == "50.0" and f"{100 * 1 / 6:.1f}" == "16.7"
    test_real_sample_table11_by_hand(release_dir)
