"""A trial table whose rows repeat a model request is run with each request once (seed 000 Sec. 5.4).

``verify_trials.csv`` files written by crawls before the trial builder redrew colliding mismatched-image
draws hold rows that show the same image with the same claim (two controls of one site drawing the same
image of the other continent; or a control showing an image whose own main arm names that candidate).
Such rows are one model request: the run called once and scored that answer for both rows, and the dry
run counted one call more than the run made. The campaign keeps the first row, skips the repeat with a
warning naming the file and both lines, and so plans, counts, calls and scores each request once.
"""

from __future__ import annotations

import logging
import re

import pytest

from geoagent.cli import main
from geoagent.integrate import VERIFY_TRIALS_COLUMNS

# (image_id, site, cand, band, truth, arm, image_ref); images 1000, 1001 at site eu (48.0, 2.0), 2000 at sa (-12.0, -77.0)
ROWS = [
    ("1000", "eu", "Tiger Station", "signal", "yes", "main", "1000"),        # line 2
    ("1001", "eu", "Tiger Station", "signal", "yes", "main", "1001"),        # line 3
    ("2000", "sa", "Plaza", "signal", "yes", "main", "2000"),                # line 4
    ("1000", "eu", "Tiger Station", "signal", "no", "ctrl_mismatch", "2000"),  # line 5
    ("1001", "eu", "Tiger Station", "signal", "no", "ctrl_mismatch", "2000"),  # line 6: = line 5's request
    ("1000", "eu", "Tiger Station", "signal", "no", "ctrl_noimage", "blank:gray"),  # line 7
    ("1001", "eu", "Tiger Station", "signal", "no", "ctrl_noimage", "blank:gray"),  # line 8: own gray field
    ("2000", "sa", "Plaza", "signal", "no", "ctrl_mismatch", "1000"),        # line 9
    ("2000", "sa", "Tiger Station", "signal", "no", "ctrl_mismatch", "1001"),  # line 10: = line 3's request
]
N_UNIQUE = len(ROWS) - 2


def _release(tmp_path):
    rel = tmp_path / "rel"
    rel.mkdir()
    (rel / "sites.csv").write_text("site,city,continent,lat,lon\neu,Paris,EU,48.0,2.0\nsa,Lima,SA,-12.0,-77.0\n",
                                   encoding="utf-8")
    lines = [",".join(VERIFY_TRIALS_COLUMNS)]
    for image_id, site, cand, band, truth, arm, ref in ROWS:
        lat, lon = (48.0, 2.0) if site == "eu" else (-12.0, -77.0)
        vals = dict(image_id=image_id, site=site, path="", img_lat=lat, img_lon=lon, cand=cand, cand_lat=lat,
                    cand_lon=lon + 0.0005, fam=3, d_km=0.04, band=band, truth=truth, arm=arm,
                    cont=site.upper(), image_ref=ref, cand_qid="")
        lines.append(",".join(str(vals[c]) for c in VERIFY_TRIALS_COLUMNS))
    (rel / "verify_trials.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    cfg = tmp_path / "gv.toml"
    cfg.write_text(f"""
[campaign]
name = "gv-dup"
kind = "geoverify"
seed = 3
[paths]
release_dir = "{rel}"
[budget]
cap_usd = 1.0
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
[geoverify]
trials = "release"
n_boot = 0
""", encoding="utf-8")
    return rel, cfg


def test_repeated_requests_are_skipped_named_and_counted_once(isolated_roots, tmp_path, capsys, caplog, monkeypatch):
    from geoagent.runtime.store import open_campaign_state

    monkeypatch.delenv("GEOAGENT_RELEASE", raising=False)  # the campaign plans from its own release folder
    rel, cfg = _release(tmp_path)
    table = rel / "verify_trials.csv"
    with caplog.at_level(logging.WARNING, logger="geoagent.geoverify.plan"):
        assert main(["run", str(cfg), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert int(re.search(r"planned (\d+) requests", out).group(1)) == N_UNIQUE
    assert int(re.search(r"total: (\d+) calls", out).group(1)) == N_UNIQUE
    warned = [r.getMessage() for r in caplog.records if r.name == "geoagent.geoverify.plan"]
    assert len(warned) == 2
    assert f"{table} line 6: ctrl_mismatch trial '1001|ctrl_mismatch|Tiger Station'" in warned[0]
    assert "like line 5 ('1000|ctrl_mismatch|Tiger Station')" in warned[0]
    assert f"{table} line 10: ctrl_mismatch trial '2000|ctrl_mismatch|Tiger Station' shows image '1001'" in warned[1]
    assert "like line 3 ('1001|main|Tiger Station')" in warned[1]

    assert main(["run", str(cfg), "--no-live"]) == 0
    out = capsys.readouterr().out
    assert f"this run: {N_UNIQUE} new model calls; 0 answers reused (stored by an earlier run, used instead of a call)" in out, out
    assert "trials skipped: 2 repeat an earlier trial's model request" in out
    assert f"{table} line 6:" in out and f"{table} line 10:" in out
    with open_campaign_state("gv-dup", root=isolated_roots / "state", recover=False) as st:
        assert st.ledger.summary().calls == N_UNIQUE
        scored = [row for _k, row in st.store.iter_results("geoverify_scored")]
    assert len(scored) == N_UNIQUE
    # each scored row is a different request: (image shown, claim) never repeats; the first rows are kept
    shown = {(r["trial_id"].split("|")[0], r["arm"], r["cand"]) for r in scored}
    assert ("1001", "ctrl_mismatch", "Tiger Station") not in shown and ("2000", "ctrl_mismatch", "Tiger Station") not in shown
    assert ("1001", "ctrl_noimage", "Tiger Station") in shown and ("1000", "ctrl_mismatch", "Tiger Station") in shown


def test_dry_run_counts_distinct_request_keys():
    """Any plan (here a generic one) whose messages repeat a request: the run calls once per request key and
    answers the repeats from the stored answer, so the dry run counts 3 calls for 5 messages, not 5."""
    from geoagent.config import config_from_dict, estimate
    from geoagent.engine import estimate_lines

    cfg = config_from_dict({"campaign": {"name": "rep", "kind": "generic"}, "budget": {"cap_usd": 10.0},
                            "models": [{"name": "m", "provider": "simulated", "model": "m-1", "max_output_tokens": 10,
                                        "price_output_usd_per_mtok": 1000.0}]})
    plan = [{"model": "m", "prompt": p, "image_id": i} for p, i in
            (("a", "1"), ("b", "1"), ("a", "1"), ("a", "2"), ("b", "1"))]
    est = estimate(cfg, plan)
    assert (est.calls, est.repeated, est.cached) == (3, 2, 0)
    assert est.worst_case_usd == pytest.approx(3 * 10 * 1000.0 / 1e6)  # 3 calls x 10 tokens x $1000/Mtok
    total = next(ln for ln in estimate_lines(est, cfg) if "total:" in ln)
    assert "total: 3 calls to make (2 more planned request(s) repeat another's request key" in total


def test_mismatch_row_without_image_ref_is_not_its_main_trial():
    """The public release's trial table has no ``image_ref`` column: a ``ctrl_mismatch`` row does not say which
    image was shown. It used to be sent as the row's own image, i.e. the main trial's request (same image,
    same claim), so it got the main trial's answer; now it is a request of its own and no duplicate."""
    from geoagent.data.model import VerifyTrial
    from geoagent.geoverify.plan import unique_trials
    from geoagent.geoverify.stages import plan_requests, request_identity

    common = dict(image_id="1000", site_id="eu", cand="Tiger Station", img_lat=48.0, img_lon=2.0, cand_lat=48.0,
                  cand_lon=2.0005, referenceability=3.0, d_km=0.04, band="signal")
    main_t = VerifyTrial(arm="main", truth="yes", image_ref="1000", **common)
    mism = VerifyTrial(arm="ctrl_mismatch", truth="no", image_ref=None, **common)
    assert request_identity(main_t) == ("1000", "Tiger Station")
    assert request_identity(mism) == ("mismatch:unknown#1000", "Tiger Station")
    kept, notes = unique_trials([main_t, mism])
    assert kept == [main_t, mism] and notes == []
    (_, p_main), (_, p_mism) = plan_requests([main_t, mism], ["m"])
    assert (p_main["image_id"], p_mism["image_id"], p_mism["image_ref"]) == ("1000", "mismatch:unknown#1000", None)


def test_dry_run_total_names_stored_answers(tmp_path):
    """A request whose response is stored is left out of the total with its reason (not "0 already stored")."""
    from geoagent.config import config_from_dict, estimate
    from geoagent.workers.model_caller import build_request
    from geoagent.engine import estimate_lines
    from geoagent.providers.base import ModelResponse, Usage
    from geoagent.runtime.store import open_campaign_state

    cfg = config_from_dict({"campaign": {"name": "st", "kind": "generic"}, "budget": {"cap_usd": 10.0},
                            "models": [{"name": "m", "provider": "simulated", "model": "m-1", "max_output_tokens": 10}]})
    plan = [{"model": "m", "prompt": p} for p in ("a", "b", "c")]
    st = open_campaign_state("st", root=tmp_path)
    _m, req = build_request(cfg, plan[0])
    st.store.put(req.key(), {}, ModelResponse(text="x", usage=Usage(1, 1)), None)
    est = estimate(cfg, plan, store=st.store)
    assert (est.calls, est.cached) == (2, 1)
    total = next(ln for ln in estimate_lines(est, cfg) if "total:" in ln)
    assert "total: 2 calls to make (1 answered from stored responses)," in total
    st.close()
