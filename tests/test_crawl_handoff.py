"""From a crawl to a campaign through the CLI (first-time user path of README "From a crawl to a campaign").

The sandbox crawl (``geoagent/configs/crawl_sandbox.toml``) writes ``verify_trials.csv`` into its state
folder when it completes, byte for byte what :func:`geoagent.integrate.write_verify_trials` writes with the
demo's arguments; a GeoVerify (``trials = "build"``) and a GeoHint (``images = "release"``) campaign whose
``release_dir`` is that folder then plan work. A campaign that plans nothing on its first run is a config
error (exit 2) naming what was empty, and leaves no state folder. ``status`` on a campaign not started
names the pipeline's stages. The crawl summary says its queue counts are per-site tasks and how many images
were kept.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path

import pytest

from geoagent.cli import main
from _docs import docs_text

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "geoagent" / "configs" / "crawl_sandbox.toml"
CAMPAIGN = "crawl-sandbox"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _toml(tmp: Path, name: str, kind: str, release_dir: Path, section: str) -> Path:
    p = tmp / f"{name}.toml"
    p.write_text(f"""
[campaign]
name = "{name}"
kind = "{kind}"
seed = 7
contact = "ops@example.org"
[paths]
release_dir = "{release_dir}"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[{kind}]
{section}
""", encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def _crawl_once(tmp_path_factory):
    """The sandbox crawl run once per module (tests/_crawl_once.py): (root, pristine copy, what it printed)."""
    from tests._crawl_once import run_crawl_once

    return run_crawl_once(tmp_path_factory, CONFIG)


@pytest.fixture()
def crawled(_crawl_once, monkeypatch):
    """(root, what the crawl printed): the finished sandbox crawl put back at the same path for each test (so
    the paths its manifests and queues record are its own), with the data roots pointed at it."""
    from tests._crawl_once import restore_crawl

    root, pristine, out = _crawl_once
    restore_crawl(root, pristine, monkeypatch)
    # the campaigns here plan from the crawl's folder: a GEOAGENT_RELEASE in the caller's environment (pointing the
    # tests at the release) would win over their [paths] release_dir
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)
    return root, out


def test_crawl_writes_verify_trials_and_campaigns_plan_from_it(crawled, capsys):
    from geoagent.integrate import write_verify_trials

    root, out = crawled
    state = root / "state"
    crawl_dir, images = state / CAMPAIGN, state / "images"
    trials = crawl_dir / "verify_trials.csv"
    assert trials.is_file()
    # the same bytes as the demo's hand-off call (seed of the crawl config, 2 per band, 2 per control arm)
    _, build = write_verify_trials(crawl_dir, images, seed=20260401, n_per_band=2, n_control=2, out_dir=root / "again")
    assert (root / "again" / "verify_trials.csv").read_bytes() == trials.read_bytes()
    assert build.per_band()["signal"] > 0
    # referenceability ratings (0-5) written as integers, as candidate_referenceability.csv does
    fams = [r["fam"] for r in _rows(trials)]
    assert fams and all(f in {"0", "1", "2", "3", "4", "5"} for f in fams if f), sorted(set(fams))

    # item 3: the queue lines count per-site tasks; images kept = rows of images.csv = thumbnails on disk
    kept = len(_rows(crawl_dir / "images.csv"))
    assert kept == len(list(images.glob("*/*.jpg"))) > len(_rows(crawl_dir / "sites.csv"))
    m = re.search(r"queue counts are per-site tasks.*images kept: (\d+) of (\d+) examined \((.*)\); thumbnails "
                  r"downloaded by this run: \d+; audit: (\d+) usable, (\d+) excluded", out)
    assert m and int(m.group(1)) == kept, out
    # every image the fetcher looked at, by the reason it was left out (the campaign's selection records),
    # counted here by hand
    reasons = [r["reason"] for p in (crawl_dir / "image_selection").glob("*.json") for r in json.loads(p.read_text())["rejected"]]
    dark = sum(r.startswith("too dark") for r in reasons)
    dup = sum(r.startswith("near-duplicate") for r in reasons)
    pano, near = reasons.count("panorama"), sum(r.startswith("within 40 m of ") for r in reasons)
    assert dark and dup and pano and near and dark + dup + pano + near == len(reasons)
    assert int(m.group(2)) == kept + dark + dup
    assert m.group(3) == (f"{dark + dup} rejected after download: {dark} too dark (brightness filter), {dup} "
                          f"near-duplicates; {pano + near} skipped before download: {pano} panoramas, {near} within "
                          "min_separation_m of a kept image")
    usable = [r["usable"] for r in _rows(crawl_dir / "images.csv")]
    assert (int(m.group(4)), int(m.group(5))) == (usable.count("True"), usable.count("False")) and "False" in usable

    gv = _toml(root, "gv-from-crawl", "geoverify", crawl_dir, f'trials = "build"\nimage_root = "{images}"\nn_boot = 0')
    assert main(["run", str(gv), "--simulate", "--no-live"]) == 0
    n = int(re.search(r"planned (\d+) requests", capsys.readouterr().out).group(1))
    assert n == sum(build.per_band().values()) + sum(
        c for (arm, _b), c in build.counts.items() if arm != "main")  # one model: one request per trial
    gh = _toml(root, "gh-from-crawl", "geohint", crawl_dir, 'images = "release"\nconditions = ["baseline"]')
    assert main(["run", str(gh), "--simulate", "--no-live"]) == 0
    n_gh = int(re.search(r"planned (\d+) ", capsys.readouterr().out).group(1))
    assert n_gh > 0


def test_readme_crawl_example_is_what_the_sandbox_crawl_prints(crawled):
    """README "Try a crawl by hand" quotes the sandbox crawl's images line; it must be what the crawl prints
    (walkthrough: it said "32 of 46 downloaded (14 rejected after download: 11 too dark" after the figures
    had changed to 45, 13 and 10)."""
    _root, out = crawled
    text = " ".join(docs_text().split())
    m = re.search(r"why the others were not: `(images kept: [^`]*)`", text)
    assert m, "README lost its sandbox crawl example"
    printed = next(ln for ln in out.splitlines() if "images kept: " in ln)
    assert m.group(1) in printed, (m.group(1), printed)


def test_empty_first_plan_is_a_config_error_and_leaves_no_state(isolated_roots, capsys, monkeypatch):
    root = isolated_roots
    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # the campaigns plan from their own (empty) folder
    empty = root / "empty"
    empty.mkdir()
    (empty / "sites.csv").write_text("site,city,country,continent,lat,lon,qid,name_en\n", encoding="utf-8")
    gv = _toml(root, "gv-empty", "geoverify", empty, f'trials = "build"\nimage_root = "{root}"\nn_boot = 0')
    # the dry run says so in advance (a warning), exits 2 as the run it predicts would, and leaves nothing either
    assert main(["run", str(gv), "--simulate", "--no-live"]) == 2
    out = capsys.readouterr().out
    assert (f"warning: 0 trials built from {empty}: it has no verify_trials.csv" in out
            and "`run` will refuse to start (exit 2)" in out)
    assert not (root / "state" / "gv-empty").exists()
    assert main(["run", str(gv), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert f"0 trials built from {empty}: it has no verify_trials.csv" in err
    assert not (root / "state" / "gv-empty").exists() and not (root / "queues" / "gv-empty").exists()

    gh = _toml(root, "gh-empty", "geohint", empty, 'images = "release"\nconditions = ["baseline"]')
    assert main(["run", str(gh), "--no-live"]) == 2
    err = capsys.readouterr().err
    assert f"0 GeoHint units planned from {empty}: no site" in err
    assert not (root / "state" / "gh-empty").exists()


def test_status_of_a_campaign_not_started_names_its_stages(isolated_roots, capsys):
    gv = _toml(isolated_roots, "gv-status", "geoverify", isolated_roots, "n_boot = 0")
    assert main(["status", str(gv)]) == 0
    out = capsys.readouterr().out
    assert "no queues yet (campaign not started)" in out
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("stages"))
    # GeoVerify's pipeline (geoagent/geoverify/campaign.py docstring): model caller -> parser -> scorer -> aggregator
    assert re.findall(r"(\w+) \((\w+) -> ", line) == [("model_caller", "requests"), ("parser", "responses"),
                                                       ("scorer", "answers"), ("aggregator", "scored")]


def test_crawl_without_cities_is_a_config_error(isolated_roots, monkeypatch, capsys):
    monkeypatch.setenv("MAPILLARY_TOKEN", "MLY|sandbox")
    text = CONFIG.read_text(encoding="utf-8")
    lines, skip = [], False
    for ln in text.splitlines():  # every [[crawl.cities]] table removed
        if ln.startswith("["):
            skip = ln.strip() == "[[crawl.cities]]"
        if not skip:
            lines.append(ln)
    kept = "\n".join(lines) + "\n"
    assert "\n[[crawl.cities]]" in text and "\n[[crawl.cities]]" not in kept
    cfg = isolated_roots / "no_cities.toml"
    cfg.write_text(kept, encoding="utf-8")
    assert main(["crawl", str(cfg), "--no-live"]) == 2
    assert "0 cities planned" in capsys.readouterr().err
    assert not (isolated_roots / "state" / CAMPAIGN).exists()


def test_crawl_trials_are_unique_requests_and_dry_run_counts_the_calls(crawled, capsys):
    """Each row of the crawl's ``verify_trials.csv`` is its own model request (no two rows show the same
    image with the same claim), so a ``trials = "release"`` campaign on it plans, calls and scores each
    trial once: dry-run calls = planned = new model calls = scored rows."""
    from geoagent.runtime.store import open_campaign_state

    root, crawl_out = crawled
    state = root / "state"
    crawl_dir, images = state / CAMPAIGN, state / "images"
    rows = _rows(crawl_dir / "verify_trials.csv")
    # the sandbox crawl's first draws collide (two images of a site, one candidate, one image of the other
    # continent): the summary says how many were redrawn; none had to be dropped, so every control candidate
    # has both arms
    m = re.search(r"swapped-image controls \(ctrl_mismatch\) redrawn (\d+), dropped (\d+)", crawl_out)
    assert m and int(m.group(1)) > 0 and int(m.group(2)) == 0, crawl_out
    arms = [r["arm"] for r in rows]
    assert arms.count("ctrl_mismatch") == arms.count("ctrl_noimage") > 0

    def shown(r: dict[str, str]) -> str:  # what the model sees: a blank trial shows its own gray field
        return {"ctrl_mismatch": r["image_ref"], "ctrl_noimage": "blank#" + r["image_id"]}.get(r["arm"], r["image_id"])

    requests = [(shown(r), r["cand"]) for r in rows]
    assert len(set(requests)) == len(requests)
    gv = _toml(root, "gv-release", "geoverify", crawl_dir, f'trials = "release"\nimage_root = "{images}"\nn_boot = 0')
    assert main(["run", str(gv), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert int(re.search(r"planned (\d+) requests", out).group(1)) == len(rows)
    assert int(re.search(r"total: (\d+) calls", out).group(1)) == len(rows)
    assert main(["run", str(gv), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert f"this run: {len(rows)} new model calls; 0 answers reused (stored by an earlier run, used instead of a call)" in out, out
    with open_campaign_state("gv-release", root=state, recover=False) as st:
        assert st.ledger.summary().calls == len(rows)
        scored = list(st.store.iter_results("geoverify_scored"))
    assert len(scored) == len(rows)


def test_readme_says_what_build_and_release_trials_mean():
    """README "From a crawl to a campaign" says what each ``trials`` value runs and when to use it."""
    text = docs_text()
    start = text.index("From a crawl to a campaign")
    para = " ".join(text[start:text.index("A campaign whose first run plans nothing", start)].split())
    assert '`"release"` (the default) reads the folder\'s `verify_trials.csv` as is' in para
    assert '`"build"` has the campaign draw new trials' in para
    for knob in ("n_per_band", "n_control", "build_seed"):
        assert f"`{knob}`" in para
    assert "Use it to run the crawl's (or a release's) own trial design" in para
    assert "Use it to change the design" in para
    assert "skipped with a warning naming the file and both lines" in para


def test_readme_handoff_says_what_the_sandbox_geocoder_knows_of_the_crawl():
    """Walkthrough: the handoff's "two lines" read as if GeoHint ran for results offline over a crawl's output;
    the section says what the sandbox geocoder fakes know (session 12: the places of the folder the campaign
    plans from, ladder points at synthetic positions) and that results need the real endpoints."""
    text = docs_text()
    start = text.index("From a crawl to a campaign")
    para = " ".join(text[start:text.index("`trials` says where", start)].split())
    assert "know the places of the folder the campaign plans from" in para
    assert "seeded bearing" in para and "not a result" in para
    assert "the real Wikidata and Nominatim" in para
