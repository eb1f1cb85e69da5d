"""A swapped-image control (arm ``ctrl_mismatch``) whose image was redrawn is a new task (fixverify41 #1).

Breaker report (geoverify41): a GeoVerify campaign over a crawl's folder (``trials = "release"``), re-run after the
crawl grew (``sites_per_city`` 3 -> 4: the other continent had more images, so the builder's draw
``others[Random(seed|image|mismatch|cand).randrange(len(others))]`` picked another image under the same trial id
``image_id|ctrl_mismatch|cand``). The queue's put is idempotent by key, so the task of the old image stayed done:
no new request, "0 planned before no longer in the plan", and the answer about the old image was scored as the new
trial's (66 of 120 swapped-image rows showed another image than the table named). Now the task key names the image
a swapped-image control shows: a redrawn image is a new request (counted by the dry run), the old answer is kept but
not scored ("no longer in the plan"), and every scored row shows the image its trial names.

Sandbox crawl (local fakes; the session's one, restored for each test: ``sandbox_crawled``) -> GeoVerify over its
verify_trials.csv with the OpenAI-compatible sandbox fake (real HTTP path), through the CLI entry; the redraw is made
by editing the crawl's verify_trials.csv as a grown crawl rewrites it (another image of the other continent)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import polars as pl

from geoagent.cli import main
from geoagent.geoverify.stages import SCORED_TABLE, ScoredScope
from geoagent.runtime.drift import decide
from geoagent.runtime.store import open_campaign_state

#: swapped-image controls whose image the test redraws
N_REDRAWN = 3


def _config(tmp: Path, crawl_dir: Path, images: Path) -> Path:
    p = tmp / "gv-redraw.toml"
    p.write_text(f"""
[campaign]
name = "gv-redraw"
kind = "geoverify"
seed = 1
[budget]
cap_usd = 2.0
[[models]]
name = "sandbox-gpt"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
price_input_usd_per_mtok = 0.15
price_output_usd_per_mtok = 0.60
max_output_tokens = 300
rate = {{ requests = 1000, period_s = 1.0 }}
[geoverify]
trials = "release"
release_dir = "{crawl_dir}"
image_root = "{images}"
n_boot = 0
""", encoding="utf-8")
    return p


def _redraw(trials_csv: Path, n: int) -> dict[str, str]:
    """Give ``n`` swapped-image rows of ``trials_csv`` another image of the other continent (one not yet shown with
    that claim), as a crawl that grew rewrites the table; returns trial id -> the new image_ref."""
    with trials_csv.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields, rows = list(reader.fieldnames or ()), list(reader)
    by_cont: dict[str, list[str]] = {}
    for r in rows:
        if r["arm"] == "main" and r["image_id"] not in by_cont.setdefault(r["cont"], []):
            by_cont[r["cont"]].append(r["image_id"])
    shown = {(r["image_ref"], r["cand"]) for r in rows}
    changed: dict[str, str] = {}
    for r in rows:
        if r["arm"] != "ctrl_mismatch" or len(changed) == n:
            continue
        other = next((i for c, ims in sorted(by_cont.items()) if c != r["cont"] for i in ims
                      if i != r["image_ref"] and (i, r["cand"]) not in shown), None)
        if other is not None:
            r["image_ref"] = other
            shown.add((other, r["cand"]))
            changed[f"{r['image_id']}|ctrl_mismatch|{r['cand']}"] = other
    with trials_csv.open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    return changed


def test_a_redrawn_swapped_image_is_asked_and_the_old_answer_is_not_scored(sandbox_crawled, capsys):
    root, _ = sandbox_crawled
    state = root / "state"
    crawl_dir, images = state / "crawl-sandbox", state / "images"
    p = _config(root, crawl_dir, images)
    capsys.readouterr()
    assert main(["run", str(p), "--no-live"]) == 0
    first = capsys.readouterr().out
    n_planned = int(re.search(r"planned (\d+) requests", first).group(1))

    changed = _redraw(crawl_dir / "verify_trials.csv", N_REDRAWN)
    assert len(changed) == N_REDRAWN
    # the dry run counts the new requests, and the old tasks as no longer planned
    assert main(["run", str(p), "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert (f"plan changed since the last run: {N_REDRAWN} requests new (not planned before), {N_REDRAWN} planned "
            "before no longer in the plan") in dry, dry
    assert re.search(rf"total: {N_REDRAWN} calls to make \({n_planned - N_REDRAWN} already done", dry), dry

    assert main(["run", str(p), "--no-live"]) == 0
    got = capsys.readouterr()
    assert re.search(rf"planned {n_planned} requests", got.out)
    assert f"this run: {N_REDRAWN} new model calls; 0 answers reused" in got.out, got.out
    assert (f"Left out of scoring: {N_REDRAWN} stored answers of tasks the current plan no longer holds"
            in got.out), got.out
    # every scored swapped-image row shows the image the table now names; the old answers are kept, not scored
    assert main(["export", str(p)]) == 0
    df = pl.read_parquet(state / "gv-redraw" / "geoverify_scored.parquet")
    mism = df.filter(pl.col("arm") == "ctrl_mismatch")
    scored = {r["trial_id"]: r["image_shown"] for r in mism.filter(pl.col("scored")).iter_rows(named=True)}
    for tid, ref in changed.items():
        assert scored[tid] == ref
        old = mism.filter((pl.col("trial_id") == tid) & ~pl.col("scored"))
        assert old.height == 1 and old["image_shown"][0] != ref
        assert old["left_out"][0].startswith("not in the current plan")
    table = pl.read_csv(crawl_dir / "verify_trials.csv", infer_schema_length=0).filter(pl.col("arm") == "ctrl_mismatch")
    named = {f"{r['image_id']}|ctrl_mismatch|{r['cand']}": r["image_ref"] for r in table.iter_rows(named=True)}
    assert scored == {tid: named[tid] for tid in scored}
    assert len(scored) == table.height


def test_a_row_showing_another_image_than_its_task_names_is_never_scored(isolated_roots):
    """Defence in depth: a stored swapped-image row under a planned key that names another image (or a row with no
    image shown under such a key) is left out and counted, before it can stand for its request key."""
    tid = "100|ctrl_mismatch|Loquat Hotel"
    base = {"trial_id": tid, "model": "m", "site": "s1", "arm": "ctrl_mismatch", "band": "1.5-3.0km",
            "truth": "no", "verdict": "yes", "conf": 0.75, "finish_reason": "stop"}
    right = {**base, "image_shown": "200", "request_key": "rk-200"}
    wrong = {**base, "trial_id": "101|ctrl_mismatch|Loquat Hotel", "image_shown": "300", "request_key": "rk-300"}
    keys = [f"{tid}|shows=200|m", "101|ctrl_mismatch|Loquat Hotel|shows=201|m"]
    with open_campaign_state("gv-shown", root=isolated_roots / "state") as st:
        st.store.put_results(SCORED_TABLE, list(zip(keys, [right, wrong])))
        scope = ScoredScope(set(keys))
        rows = list(scope.rows(st.store))
    assert [r["image_shown"] for r in rows] == ["200"]
    assert scope.other_image == 1 and scope.not_planned == 0
    assert scope.note() == ("Left out of scoring: 1 stored answer of a swapped-image control shows another image "
                            "than its task names (the trial's image was redrawn) and is not scored, e.g. "
                            "101|ctrl_mismatch|Loquat Hotel|shows=201|m.")


def test_a_changed_release_folder_does_not_promise_counts_per_request_setting():
    """The drift warning of a release_dir change said "the summary, the report and the manifest count the answers made
    under each request setting"; they count none per release folder (only the manifest records the mix)."""
    kw = dict(tasks_before=528, done_before=528, added=300, left_before=0, kind="geoverify")
    d = decide("gv", ["geoverify"], {"geoverify.release_dir": ("a", "b")},
               keys_text="geoverify.release_dir: 'a' -> 'b'", **kw)
    assert d.mixed and "request setting" not in d.lines[0]
    assert "the manifest records the mix under config_mix; the summary and the report count no answers" in d.lines[0]
    d = decide("gv", ["models"], {"models[0].temperature": (0.0, 0.5)},
               keys_text="models[0].temperature: 0.0 -> 0.5", **kw)
    assert "count the answers made under each request setting" in d.lines[0]


def test_a_tolerance_at_the_nearest_decoy_bands_upper_edge_is_refused_at_load():
    """fixverify41 #2: tau_m = 300 made the nearest decoy band (0.15-0.3 km) all signal: the band held no decoy trial
    and every report said its d' was undefined. Refused at load, naming the key; just below the edge loads."""
    import pytest

    import geoagent.geoverify.settings  # noqa: F401 - registers [geoverify] (else, run alone, the table went unchecked)
    from geoagent.config import ConfigError, config_from_dict

    def cfg(tau_m: float):
        return config_from_dict({
            "campaign": {"name": "gv-tau", "kind": "geoverify", "seed": 1}, "budget": {"cap_usd": 1.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim-1"}],
            "geoverify": {"tau_m": tau_m}})

    with pytest.raises(ConfigError, match=r"geoverify\.tau_m: expected a tolerance below 300 .*nearest decoy band "
                                          r"\(0\.15-0\.3 km"):
        cfg(300.0)
    assert cfg(299.0).section("geoverify").tau_m == 299.0


def test_a_tolerance_that_is_no_whole_number_of_metres_is_refused_where_a_run_plans(tmp_path, monkeypatch, capsys):
    """review43c #7: the claim names tau in whole metres, so tau_m = 149.6 asked "150 metres" while truth and bands
    were labelled at 149.6 m (a candidate at 149.8 m was a decoy of a claim that is true for it). Refused where a run
    plans, naming the key and the value once; not at load (fixguard43 #2: status, export and dead of a campaign
    stored at such a tau, allowed before session 43, failed to load its config). A whole number written as a float
    is taken."""
    import pytest

    from geoagent.config import ConfigError, config_from_dict
    from geoagent.engine import load_kind
    from geoagent.geoverify.plan import plan_campaign

    def cfg(tau_m: float):
        return config_from_dict({
            "campaign": {"name": "gv-tau", "kind": "geoverify", "seed": 1}, "budget": {"cap_usd": 1.0},
            "models": [{"name": "sim", "provider": "simulated", "model": "sim-1"}],
            "geoverify": {"tau_m": tau_m}})

    wording = (r"geoverify\.tau_m: expected a whole number of metres \(the claim the model reads names tau in whole "
               r"metres\), got 149\.6$")
    loaded = cfg(149.6)  # loads
    assert loaded.section("geoverify").tau_m == 149.6
    with pytest.raises(ConfigError, match=wording):
        plan_campaign(loaded)
    with pytest.raises(ConfigError, match=wording):  # the run's check before anything is made
        load_kind("geoverify").check_config_change(loaded)
    assert cfg(200.0).section("geoverify").tau_m == 200.0
    assert cfg(120).section("geoverify").tau_m == 120

    # through the CLI: `run` and its dry run refuse (exit 2), status, export and dead load the config
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    path = tmp_path / "gv-tau.toml"
    path.write_text('[campaign]\nname = "gv-tau"\nkind = "geoverify"\nseed = 1\n[budget]\ncap_usd = 1.0\n'
                    '[[models]]\nname = "sim"\nprovider = "simulated"\nmodel = "sim-1"\n[geoverify]\ntau_m = 149.6\n',
                    encoding="utf-8")
    for extra in ([], ["--simulate"]):
        assert main(["run", str(path), "--no-live", *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"config error: {path}: geoverify.tau_m: expected a whole number of metres"), err
        assert err.count("149.6") == 1, err
    assert not (tmp_path / "state" / "gv-tau").exists()
    for cmd in (["status", str(path)], ["export", str(path), "--out", str(tmp_path / "exp")], ["dead", str(path)]):
        main(cmd)
        assert "config error" not in capsys.readouterr().err, cmd
