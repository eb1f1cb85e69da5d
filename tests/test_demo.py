"""``python run.py demo`` from a fresh copy of the code (no ``../shared``), offline, twice (issue 2 point 9
and acceptance "completes in under 2 minutes"; issue 5 acceptance "the demo crawls the sandbox city end to
end ... and feeds the GeoVerify and GeoHint campaigns").

The demo runs as a subprocess of a copy of ``run.py`` and ``geoagent/`` in a temporary folder, so no file
of the working checkout's surroundings (the release in ``../shared``) can be read, with every
``GEOAGENT_*`` variable unset. Its outputs are then checked against independent computations: trial
labels against a haversine written here, ledger spend against token counts times the configured prices,
planned request counts against the trial table and the ladders.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest

from _reference import csv_rows, haversine_km

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "geoagent" / "configs"
CAMPAIGNS = ("demo-crawl", "demo-geoverify", "demo-geohint")
DECOY_EDGES_KM = (0.15, 0.3, 0.7, 1.5, 3.0, 6.0)

pytestmark = pytest.mark.slow  # two full demo runs (about 30-60 s on 2 cores)


def _run_demo(clone: Path, workdir: Path) -> tuple[subprocess.CompletedProcess, float]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GEOAGENT_") or k == "GEOAGENT_RUNS_INDEX"}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, str(clone / "run.py"), "demo", "--workdir", str(workdir), "--no-live"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=300)
    return proc, time.monotonic() - t0


def _ledgers(state_root: Path) -> dict[str, tuple[int, int, float]]:
    """(settled calls, stored responses, spent USD) per campaign, read from each campaign's state."""
    from geoagent.runtime.store import open_campaign_state

    out = {}
    for name in CAMPAIGNS:
        with open_campaign_state(name, root=state_root, recover=False) as st:
            s = st.ledger.summary()
            out[name] = (s.calls, st.store.count_responses(), s.spent_usd)
    return out


def _last_http_requests(state_root: Path) -> dict[str, int]:
    """HTTP requests (all hosts: APIs and model servers) made by the latest run of each campaign, from the
    last record of its progress stream (``state/<campaign>/progress.jsonl``)."""
    out = {}
    for name in CAMPAIGNS:
        lines = (state_root / name / "progress.jsonl").read_text(encoding="utf-8").splitlines()
        last = json.loads(lines[-1])
        out[name] = sum(int(h.get("requests", 0)) for h in (last.get("http") or {}).values())
    return out


def _planned(stdout: str, campaign: str) -> int:
    """The ``planned N requests`` figure of one campaign's end-of-run summary."""
    block = stdout.split(f"campaign {campaign}:", 1)[1]
    return int(block.split("planned ", 1)[1].split(" ", 1)[0])


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    clone = tmp / "clone"  # a fresh copy of the code: no ../shared next to it
    clone.mkdir()
    shutil.copy2(REPO / "run.py", clone / "run.py")
    shutil.copytree(REPO / "geoagent", clone / "geoagent", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    work = tmp / "work"
    first, t_first = _run_demo(clone, work)
    ledgers_first = _ledgers(work / "state") if first.returncode == 0 else None
    http_first = _last_http_requests(work / "state") if first.returncode == 0 else None
    second, t_second = _run_demo(clone, work)
    return {"clone": clone, "work": work, "first": first, "t_first": t_first, "second": second,
            "t_second": t_second, "ledgers_first": ledgers_first,
            "http_first": http_first}


def test_demo_completes_offline_in_time_and_summarises_every_stage(demo):
    p = demo["first"]
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert demo["t_first"] < 120, demo["t_first"]
    out = p.stdout
    for stage in ("screen:", "sample:", "fetch:", "audit:", "rate:", "ladders:"):
        assert stage in out, stage
    assert "GeoVerify (layout of GeoContext" in out and "Table 1:" in out
    assert "spend vs cap:" in out and out.count("[complete]") == 3
    state = demo["work"] / "state"
    for name in CAMPAIGNS:
        assert str(state / name / "report") in out
    # everything went under --workdir, nothing into the copy's own default roots
    assert not (demo["clone"] / "state").exists() and not (demo["clone"] / "queues").exists()
    for f in ("demo-crawl/report/crawl_summary.json", "demo-geoverify/report/geoverify_table.md",
              "demo-geoverify/report/geoverify_table.txt", "demo-geoverify/report/geoverify_dprime.png",
              "demo-geohint/report/report.md", "demo-geohint/report/table1.csv",
              "demo-geohint/report/fig_hit_by_band.png", "demo-geohint/report/fig_echo_heatmap.png"):
        assert (state / f).is_file(), f


def test_crawl_screens_samples_and_builds_ladders(demo):
    crawl = demo["work"] / "state" / "demo-crawl"
    pool = {r["city"]: r for r in csv_rows(crawl / "city_pool.csv")}
    assert pool["Sandbox City"]["eligible"] == "True" and pool["Sprawl Town"]["eligible"] == "False"
    sites = csv_rows(crawl / "sites.csv")
    assert {s["city"] for s in sites} == {"Sandbox City", "Mirror Bay"}
    assert len({s["continent"] for s in sites}) == 2
    ladders = sorted((crawl / "ladders").glob("*.csv"))
    assert {p.name.split("_ladder")[0] for p in ladders} == {s["site"] for s in sites}
    for p in ladders:
        for r in csv_rows(p):
            d, fam = float(r["dist_km"]), int(r["familiarity"])
            band = "0.5-1.5km" if 0.5 <= d < 1.5 else "1.5-3.0km" if 1.5 <= d < 3.0 else "3.0-6.0km" if 3.0 <= d < 6.0 else None
            assert r["band"] == band and r["tier"] == ("high" if fam >= 4 else "mid" if fam >= 2 else "low")
    images = [r for r in csv_rows(crawl / "images.csv") if r["usable"] == "True"]
    assert images and all((demo["work"] / "state" / "images" / r["path"]).is_file() for r in images)


def test_geoverify_trials_are_built_from_crawled_coordinates(demo):
    crawl = demo["work"] / "state" / "demo-crawl"
    trials = csv_rows(crawl / "verify_trials.csv")
    continent = {s["site"]: s["continent"] for s in csv_rows(crawl / "sites.csv")}
    site_of_image = {t["image_id"]: t["site"] for t in trials}
    arms = {t["arm"] for t in trials}
    assert arms == {"main", "ctrl_mismatch", "ctrl_noimage"}
    bands = set()
    for t in trials:
        d = haversine_km(float(t["img_lat"]), float(t["img_lon"]), float(t["cand_lat"]), float(t["cand_lon"]))
        assert abs(d - float(t["d_km"])) < 1e-3
        if t["arm"] != "main":
            assert t["truth"] == "no"
            if t["arm"] == "ctrl_noimage":
                assert t["image_ref"] == "blank:gray"
            else:  # the swapped image comes from another continent
                assert continent[site_of_image[t["image_ref"]]] != continent[t["site"]]
            continue
        assert t["truth"] == ("yes" if d < 0.15 else "no")
        want = "signal" if d < 0.15 else next(f"{lo}-{hi}km" for lo, hi in zip(DECOY_EDGES_KM, DECOY_EDGES_KM[1:]) if lo <= d < hi)
        assert t["band"] == want
        bands.add(want)
    assert "signal" in bands and len(bands) == 6


def test_ledgers_match_prices_and_plans(demo):
    state = demo["work"] / "state"
    ledgers = demo["ledgers_first"]
    assert ledgers is not None
    trials = csv_rows(state / "demo-crawl" / "verify_trials.csv")
    # GeoVerify: one request per trial x model (two models, no sampling) and one paid call per request:
    # blank-field trials of one candidate on several images are separate trials with their own request key
    assert _planned(demo["first"].stdout, "demo-geoverify") == 2 * len(trials)
    assert len({(t["image_id"], t["arm"], t["cand"]) for t in trials}) == len(trials)
    assert ledgers["demo-geoverify"][0] == ledgers["demo-geoverify"][1] == 2 * len(trials)
    # GeoHint: per model, per site, min(images_per_site, images) x (1 baseline + 2 conditions x ladder points)
    gh = tomllib.loads((CONFIGS / "demo_geohint.toml").read_text(encoding="utf-8"))["geohint"]
    per_site_images: dict[str, set[str]] = {}
    for t in trials:
        if t["arm"] == "main":
            per_site_images.setdefault(t["site"], set()).add(t["image_id"])
    ladders = {p.name.split("_ladder")[0]: len(csv_rows(p)) for p in (state / "demo-crawl" / "ladders").glob("*.csv")}
    n_ctx = len(gh["conditions"]) - 1
    want = sum(min(gh["images_per_site"], len(ims)) * (1 + n_ctx * ladders[s]) for s, ims in per_site_images.items())
    assert _planned(demo["first"].stdout, "demo-geohint") == 2 * want
    assert ledgers["demo-geohint"][0] == ledgers["demo-geohint"][1] == 2 * want
    # spend = sum over stored responses of tokens x configured price, below the cap
    for name, toml in (("demo-geoverify", "demo_geoverify.toml"), ("demo-geohint", "demo_geohint.toml")):
        doc = tomllib.loads((CONFIGS / toml).read_text(encoding="utf-8"))
        price = {m["name"]: (m["price_input_usd_per_mtok"], m["price_output_usd_per_mtok"]) for m in doc["models"]}
        rows = csv_rows(state / name / "model_responses.csv")
        assert len(rows) == ledgers[name][1]
        total = sum((int(r["input_tokens"]) * price[r["model"]][0] + int(r["output_tokens"]) * price[r["model"]][1]) / 1e6
                    for r in rows)
        assert total == pytest.approx(ledgers[name][2], rel=1e-9, abs=1e-12)
        assert 0 < ledgers[name][2] <= doc["budget"]["cap_usd"]
    summary = json.loads((state / "demo-crawl" / "report" / "crawl_summary.json").read_text(encoding="utf-8"))
    assert summary["status"] == "complete"


def test_second_run_resumes_without_new_calls(demo):
    p = demo["second"]
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    assert demo["t_second"] < 120
    assert _ledgers(demo["work"] / "state") == demo["ledgers_first"]
    # the first run talked to the fakes; the second found everything done and sent no request at all
    assert all(n > 0 for n in demo["http_first"].values()), demo["http_first"]
    assert _last_http_requests(demo["work"] / "state") == dict.fromkeys(CAMPAIGNS, 0)
    # like `run`, each campaign's summary says what this run paid for: the first run every call it settled
    # (the ledgers' counts), the second none, and the spend lines carry the same figure
    first_calls = [demo["ledgers_first"][name][0] for name in CAMPAIGNS]
    first_lines = re.findall(r"this run: (\d+) new model calls?; \d+ answers? reused \(stored by an earlier run", demo["first"].stdout)
    assert [int(n) for n in first_lines] == first_calls, first_lines
    assert re.findall(r"this run: (\d+) new model calls?; ", p.stdout) == ["0", "0", "0"], p.stdout[-4000:]
    # the spend line's tokens are the campaign's totals over both runs, labelled so; this run paid nothing
    spend_lines = re.findall(r"\(all runs: (\d+) model calls, \d+ in / \d+ out tokens; this run: (\d+) new model calls?\)",
                             p.stdout)
    assert [(int(a), int(b)) for a, b in spend_lines] == [(n, 0) for n in first_calls], spend_lines


def test_geohint_answers_geocode_to_sandbox_places(demo):
    """GeoHint answers were geocoded against the sandbox world's gazetteer (local Wikidata/Nominatim):
    error_km is the haversine from the resolved place to the site, answers naming the site's landmark
    resolve to it at building level, and hit = error < 1 km at a level finer than city."""
    state = demo["work"] / "state"
    sites = {r["site"]: r for r in csv_rows(state / "demo-crawl" / "sites.csv")}
    rows = csv_rows(state / "demo-geohint" / "geohint_scored.csv")
    assert rows
    n_landmark = 0
    for r in rows:
        s = sites[r["site"]]
        if r["lat"] and r["lon"]:
            d = haversine_km(float(r["lat"]), float(r["lon"]), float(s["lat"]), float(s["lon"]))
            assert abs(d - float(r["error_km"])) < 1e-6
        hit = bool(r["error_km"]) and float(r["error_km"]) < 1.0 and r["resolved_level"] in ("building", "area")
        assert (r["hit"] == "true") == hit, r
        if r["building"] == s["landmark"]:
            n_landmark += 1
            assert r["resolved_level"] == "building" and float(r["error_km"]) < 0.01
    assert n_landmark > 0
    # every answer records the parser rules that read it (traceability: rows read by other rules are told apart)
    from geoagent.geohint.parse import ANSWER_PARSER_VERSION

    assert {r["extra.parser_version"] for r in rows} == {str(ANSWER_PARSER_VERSION)}


def test_rerun_reports_no_config_change_for_the_fakes_local_ports(demo):
    """Walkthrough s11: a second `demo` printed five `info:` lines of models, endpoints and [hosts] "changed
    since its last run", the only change being the random local ports of the demo's own fakes. The manifest
    now records each config as written (hosts on *.sandbox.invalid)."""
    p = demo["second"]
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    both = p.stdout + p.stderr
    assert "changed since its last run" not in both, both[-4000:]
    assert "127.0.0.1" not in "".join(line for line in both.splitlines() if line.startswith("info:"))
    for name in CAMPAIGNS:
        manifest = json.loads((demo["work"] / "state" / name / "manifest.json").read_text(encoding="utf-8"))
        assert "127.0.0.1" not in json.dumps(manifest.get("config")), name


def test_demo_writes_filled_in_configs_that_status_dead_and_export_accept(demo, capsys, monkeypatch):
    """Walkthrough s11: `demo --help` and the exit-3 message say "list it with `dead CONFIG`", but the packaged
    demo_*.toml are templates ("unfilled template placeholder(s)"). The demo writes each campaign's config,
    filled in, under state/demo-configs/ and names the files; they work from any folder, with no variable set."""
    from geoagent.cli import main

    out = demo["first"].stdout
    folder = demo["work"] / "state" / "demo-configs"
    paths = [folder / f"{n}.toml" for n in ("demo_crawl", "demo_geoverify", "demo_geohint")]
    for path in paths:
        assert str(path) in out, out[-2000:]
        assert not re.search(r'"\{[a-z_]+\}"', path.read_text(encoding="utf-8")), path
    for var in ("GEOAGENT_QUEUES", "GEOAGENT_STATE", "GEOAGENT_RELEASE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(demo["work"].parent)
    capsys.readouterr()
    for path, name in zip(paths, CAMPAIGNS):
        assert main(["status", str(path)]) == 0
        text = capsys.readouterr().out
        assert f"campaign {name}" in text and "campaign complete" in text, text[:2000]
        assert main(["dead", str(path)]) == 0
        assert f"no dead-lettered work in campaign {name}" in capsys.readouterr().err  # stdout: dead tasks only
    assert main(["export", str(paths[2])]) == 0
    assert re.search(r"geohint_scored: \d+ rows -> .*demo-geohint/geohint_scored\.parquet", capsys.readouterr().out)


def test_summary_note_says_verdicts_ignore_where_the_photo_was_taken_not_what_it_shows(demo):
    """The simulated models answer the gray field "no" 98 % of the time (the table shows it), so the note must not
    claim their verdicts ignore what the image shows; d' is 0 only in expectation."""
    out = " ".join(demo["first"].stdout.split())
    assert "do not depend on what the image shows" not in out
    assert "do not depend on where the photo was taken" in out
    assert "gray field differs: answered no 98 % of the time" in out
    assert "d' between signal and decoys is 0 only in expectation" in out
    # the table it sits under shows that gray-field share: at most a few percent yes
    row = next(line for line in demo["first"].stdout.splitlines() if "control: gray field" in line
               and "share cut off" not in line and "unparsed" not in line)
    assert float(row.split("│")[2].split("%")[0]) < 10, row


def test_console_says_each_note_once(demo):
    """Session 12 walkthrough: the definition of "cut off" came 4 times (both campaign summaries, the GeoVerify
    table's terms, GeoHint Table 1's terms) although nothing was cut off, and the GeoVerify simulated banner twice
    (its summary and the table text); each is said once now, later places refer to it."""
    from geoagent.scoring.truncation import LEGEND_LINE
    out = demo["first"].stdout
    assert out.count(LEGEND_LINE) == 1, out.count(LEGEND_LINE)
    assert "cut off: see above" in out
    banners = [ln.split("Simulated answers: ", 1)[1] for ln in out.splitlines() if "Simulated answers: " in ln]
    assert len(banners) == len(set(banners)) == 2, banners  # once per model campaign (GeoVerify, GeoHint)
    # session 13: the summary writer says them once (geoagent.notes), so the GeoVerify small-n lines, in its summary
    # and again under its table text, are said once too
    small = [ln for ln in out.splitlines() if ln.lstrip().startswith(("Small n (", "† d' rests on"))]
    assert small and len(small) == len(set(ln.strip() for ln in small)), small
    assert out.count("=" * 100 + "\ndemo summary\n" + "=" * 100) == 1  # a rule is no note: both kept
    # GeoHint report.md: the echo rule in full once (at the top; before also after Tables 1, 2, 4 and 8), the
    # cut-off definition once (under Terms; before also under the cut-off table)
    md = (demo["work"] / "state" / "demo-geohint" / "report" / "report.md").read_text(encoding="utf-8")
    assert md.count("Echo rule name:") == 1 and "Echo rule name:" in md.split("### ")[0]
    assert md.count("Echo rule: name (see top).") >= 4
    assert md.count(LEGEND_LINE) == 1
