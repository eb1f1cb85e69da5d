"""Walkthrough of the release replay (session 12, seed 000): ``run.py run geocontext_replay.toml`` on the shipped
sample.

1. The trial table holds 170 trials from 17 sites, only 88 with a recording, per-model n 86/82/82/86, yet the run
   said only ``planned 336 requests`` and the report ``Missing trials (dead-lettered): none.`` with an empty
   ``geoverify_missing.csv``: the table trials a replay model could not replay are now counted per model (summary,
   report) and listed (``geoverify_missing.csv``, edge ``not replayed``, with the reason).
2. The README's expected figures on the sample (H, F, d', c, delta_1, false-acceptance confidence) are checked
   against a fresh replay here, H and F also recounted by hand from the raw file.
3. The note said "intervals from 5, 7, 8, 9 sites ... are given but flagged few-cluster" but no cell was marked:
   each such interval now carries ``§`` (Markdown, terminal) and ``few-cluster interval`` (CSV ``_text``).
4. Model columns were alphabetical; the paper's Table 12 orders them by farthest-band d', highest first.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import tomllib
from collections import Counter, defaultdict
from pathlib import Path

import anyio
import pytest

from geoagent import engine
from geoagent.config import config_from_dict, packaged_config_path
from _docs import docs_text


@pytest.fixture(scope="module")
def replay(release_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("replay_s12")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GEOAGENT_STATE", str(tmp / "state"))
        mp.setenv("GEOAGENT_QUEUES", str(tmp / "queues"))
        mp.setenv("GEOAGENT_RELEASE", str(release_dir))
        if importlib.util.find_spec("geoagent.campaigns.geoverify") is None:
            mp.setitem(engine.KINDS, "geoverify", "geoagent.geoverify.campaign:GeoVerifyCampaign")
        cfg = config_from_dict(tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8")))
        out = anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.status == "complete", out.summary()
    return out, tmp / "state" / cfg.name / "report"


def _raw(release_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (release_dir / "verify_raw_sample.jsonl").open(encoding="utf-8") if x.strip()]


def _table_ids(release_dir: Path) -> list[tuple[str, str]]:
    with (release_dir / "verify_trials_sample.csv").open(encoding="utf-8", newline="") as f:
        return [(f"{r['image_id']}|{r['arm']}|{r['cand']}", r["site"]) for r in csv.DictReader(f)]


def test_unreplayed_table_trials_are_counted_and_listed_per_model(release_dir, replay):
    out, report = replay
    raw = _raw(release_dir)
    table = _table_ids(release_dir)
    assert len(table) == 170 and len({s for _, s in table}) == 17
    recorded = {(r["trial_id"], r["model"]) for r in raw if not r.get("error")}
    ids = [t for t, _ in table]
    assert len({t for t, _ in recorded} & set(ids)) == 88
    expected = {m: [t for t in ids if (t, m) not in recorded] for m in sorted({r["model"] for r in raw})}
    counts = {m: len(v) for m, v in expected.items()}
    assert counts == {"claude-haiku-4-5": 84, "gemini-flash": 88, "qwen3-vl-235b": 88, "qwen3-vl-8b": 84}

    summary = out.summary()
    line = next(x for x in summary.splitlines() if "not replayed" in x)
    assert "of the 170 table trials" in line
    for m, n in counts.items():
        assert f"{m} {n}" in line and f"{m} {n}" in (report / "geoverify_table.md").read_text(encoding="utf-8")
        assert f"{m} {n}" in (report / "geoverify_table.txt").read_text(encoding="utf-8")
    with (report / "geoverify_missing.csv").open(encoding="utf-8", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["edge"] == "not replayed"]
    got = defaultdict(list)
    for r in rows:
        assert r["reason"] == "no recording in verify_raw_sample.jsonl"
        assert r["key"].endswith("|" + r["model"])
        got[r["model"]].append(r["key"].rsplit("|", 1)[0])
    assert dict(got) == expected


def _readme_table() -> dict[str, dict[str, str]]:
    text = docs_text()
    i = text.index("Expected on the shipped sample")
    lines = [x for x in text[i:].splitlines() if x.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")][1:]
    rows: dict[str, dict[str, str]] = {"_order": dict.fromkeys(head, "")}
    for x in lines[2:]:
        cells = [c.strip() for c in x.strip("|").split("|")]
        rows[cells[0]] = dict(zip(head, cells[1:]))
    return rows


def test_readme_expected_figures_match_a_fresh_replay_and_a_hand_count(release_dir, replay):
    _, report = replay
    exp = _readme_table()
    md = (report / "geoverify_table.md").read_text(encoding="utf-8")
    header = next(x for x in md.splitlines() if x.startswith("| |"))
    cols = [c.strip() for c in header.strip("|").split("|")][1:]
    assert cols == list(exp["_order"])  # the README's columns are the report's order
    cells = {}
    for x in md.splitlines():
        if x.startswith("| ") and not x.startswith("| **"):
            c = [y.strip() for y in x.strip("|").split("|")]
            cells.setdefault(c[0], dict(zip(cols, c[1:])))
    for m in cols:
        assert f"({exp['H'][m]})" in cells["H (signal accepted)"][m]
        assert f"({exp['F'][m]})" in cells["F (decoy accepted)"][m]
        assert cells["0.15–0.3 km"][m].startswith(exp["d' nearest band (0.15–0.3 km)"][m].replace("-", "-") + " ")
        assert cells["nearest band"][m].split(" ")[0] == exp["c nearest band"][m]
        assert cells["delta_1"][m].startswith(exp["delta_1"][m])
        assert cells["median"][m] == exp["false acceptances: median confidence"][m]
        assert cells["share >= 0.8"][m] == exp["false acceptances: share >= 0.8"][m]
    # H and F recounted from the raw file: verdict yes on signal (truth yes) / decoy (truth no) trials
    hits, fas = Counter(), Counter()
    n_sig, n_dec = Counter(), Counter()
    conf = []
    for r in _raw(release_dir):
        yes = re.search(r'"verdict"\s*:\s*"yes"', r["raw"]) is not None
        for m in (r["model"], "pooled"):
            if r["truth"] == "yes":
                n_sig[m] += 1
                hits[m] += yes
            else:
                n_dec[m] += 1
                fas[m] += yes
        if yes and r["truth"] == "no":
            conf.append(float(re.search(r'"confidence"\s*:\s*([0-9.]+)', r["raw"]).group(1)))
    for m in cols:
        assert exp["H"][m] == f"{hits[m]}/{n_sig[m]}" and exp["F"][m] == f"{fas[m]}/{n_dec[m]}"
    conf.sort()
    assert len(conf) == 98 and conf[len(conf) // 2] == 0.85
    assert f"{100 * sum(c >= 0.8 for c in conf) / len(conf):.1f} %" == exp["false acceptances: share >= 0.8"]["pooled"]


def test_few_cluster_intervals_are_marked_in_every_table_file(release_dir, replay):
    _, report = replay
    md = (report / "geoverify_table.md").read_text(encoding="utf-8")
    txt = (report / "geoverify_table.txt").read_text(encoding="utf-8")
    # pooled H: its signal trials come from 5-9 sites (counted by hand), so its interval is few-cluster
    sig_sites = {r["site"] for r in _raw(release_dir) if r["truth"] == "yes"}
    assert 5 <= len(sig_sites) < 10
    h_row = next(x for x in md.splitlines() if x.startswith("| H (signal accepted)"))
    assert re.search(r"\[\d+\.\d, \d+\.\d\]§", h_row.split("|")[-2]), h_row
    d_row = next(x for x in md.splitlines() if x.startswith("| delta_1 "))
    assert "none [0.7–1.5 km, none]§" in d_row.split("|")[-2], d_row  # the delta_1 range rests on H too
    assert "flagged few-cluster: likely too narrow; each is marked § after its brackets" in md
    assert "§" in txt and "each is marked § after its brackets" in " ".join(txt.split())
    with (report / "geoverify_table.csv").open(encoding="utf-8", newline="") as f:
        rows = {r["row"]: r for r in csv.DictReader(f)}
    assert "few-cluster interval" in rows["H (signal accepted)"]["pooled_text"]
    # a value without an interval is not flagged
    assert rows["H (signal accepted)"]["gemini-flash_text"] == ""


def test_columns_follow_the_papers_table12_rule(replay):
    _, report = replay
    md = (report / "geoverify_table.md").read_text(encoding="utf-8")
    header = next(x for x in md.splitlines() if x.startswith("| |"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [
        "qwen3-vl-8b", "gemini-flash", "qwen3-vl-235b", "claude-haiku-4-5", "pooled"]  # d' farthest 1.24, 1.22, 0.82, 0.28
    assert "Columns: models by d' in the farthest decoy band, highest first" in md


def test_a_recorded_api_error_is_listed_with_its_reason(release_dir, tmp_path):
    """The paper's "one call failed at the API and is excluded": a raw record with ``error`` is not replayed and
    is listed as ``recorded API error: ...`` (the other table trials of that model: ``no recording in ...``)."""
    from geoagent.data.importer import import_release
    from geoagent.geoverify.plan import NOT_REPLAYED, unreplayed_trials

    rel = tmp_path / "rel"
    rel.mkdir()
    for p in release_dir.iterdir():
        if p.name not in ("verify_raw_sample.jsonl",):
            (rel / p.name).symlink_to(p)
    raw = _raw(release_dir)
    ok = raw[0]
    other = next(r for r in raw if r["model"] == ok["model"] and r["trial_id"] != ok["trial_id"])
    failed = dict(other, raw="", error="HTTP 500: upstream error")
    assert ok["model"] == failed["model"]
    (rel / "verify_raw_sample.jsonl").write_text(json.dumps(ok) + "\n" + json.dumps(failed) + "\n", encoding="utf-8")
    release = import_release(rel)
    got = unreplayed_trials(release, release.trials, [ok["model"]])
    by_trial = {u["trial_id"]: u for u in got}
    assert ok["trial_id"] not in by_trial and len(got) == len(release.trials) - 1
    assert by_trial[failed["trial_id"]]["reason"] == "recorded API error: HTTP 500: upstream error"
    assert all(u["edge"] == NOT_REPLAYED for u in got)
    assert sum(u["reason"] == "no recording in verify_raw_sample.jsonl" for u in got) == len(got) - 1
