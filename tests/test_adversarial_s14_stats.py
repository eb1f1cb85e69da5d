"""Session 14 adversarial review of the incremental statistics path (GeoVerify / GeoHint aggregators, the
reports and exports built from them).

Each test states the attack and checks the incremental result against an independent recomputation written
here (numpy / pandas / scipy over the raw rows) or against seed 000's definitions (Sec. 5.3-5.4, Table 12).
"""

from __future__ import annotations

import math
import random

import numpy as np
import pandas as pd
import pytest
from scipy.stats import norm

from geoagent.data.model import BAND_SIGNAL, DECOY_BAND_LABELS
from geoagent.geoverify.aggregate import GeoVerifyAggregator
from geoagent.scoring import sdt


def _vrow(tid: str, verdict: str | None, *, model: str = "m", site: str = "s1", arm: str = "main",
          band: str = BAND_SIGNAL, conf: float | None = 0.9) -> dict:
    truth = "yes" if (arm == "main" and band == BAND_SIGNAL) else "no"
    return {"trial_id": tid, "model": model, "site": site, "arm": arm, "band": band, "truth": truth,
            "verdict": verdict, "conf": None if verdict is None else conf}


def _random_rows(rng: random.Random, n: int, models, sites, confs) -> list[dict]:
    rows = []
    for i in range(n):
        arm = rng.choice(["main"] * 6 + ["ctrl_mismatch", "ctrl_noimage"])
        band = rng.choice([BAND_SIGNAL, *DECOY_BAND_LABELS]) if arm == "main" else rng.choice(DECOY_BAND_LABELS)
        verdict = rng.choice(["yes", "no", None])
        rows.append(_vrow(f"t{i}", verdict, model=rng.choice(models), site=rng.choice(sites), arm=arm, band=band,
                          conf=rng.choice(confs)))
    return rows


def _reference(rows: list[dict], model: str | None) -> dict:
    """Table 12 quantities of one model (None: pooled) recomputed with pandas/numpy/scipy from raw rows."""
    df = pd.DataFrame(rows)
    if model is not None:
        df = df[df.model == model]
    parsed = df[df.verdict.notna()]
    main = parsed[parsed.arm == "main"]
    sig = main[main.band == BAND_SIGNAL]
    noise = main[main.band != BAND_SIGNAL]
    fa = noise[noise.verdict == "yes"].conf.astype(float)
    fa = fa[np.isfinite(fa)]
    out = {"h": (sig.verdict == "yes").mean() if len(sig) else math.nan,
           "f": (noise.verdict == "yes").mean() if len(noise) else math.nan,
           "fa_conf_median": float(np.median(fa)) if len(fa) else math.nan,
           "fa_conf_share_high": float((fa >= 0.8).mean()) if len(fa) else math.nan}
    for b in DECOY_BAND_LABELS:
        nb = noise[noise.band == b]
        if len(sig) and len(nb):
            zh = norm.ppf(((sig.verdict == "yes").sum() + 0.5) / (len(sig) + 1))
            zf = norm.ppf(((nb.verdict == "yes").sum() + 0.5) / (len(nb) + 1))
            out[f"d'[{b}]"] = zh - zf
        else:
            out[f"d'[{b}]"] = math.nan
    return out


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == pytest.approx(b, abs=1e-12)


# --- confidences: the share >= 0.8 and the median of the raw stated values ------------------------------------


def test_the_confidence_share_and_median_are_those_of_the_stated_values_not_of_rounded_ones():
    """Attack: false acceptances stated at 0.7999999 (or 79.99999 %, which the parser reads as 0.7999999). The
    aggregator kept confidences rounded to 6 decimals, so 0.7999999 became 0.8: counted as "confidence >= 0.8"
    (seed 000 Table 12 / abstract: share of false acceptances stated at >= 0.8) and shown as a median of 0.8,
    where the stored answers (and numpy over them) say 0.7999999 < 0.8."""
    rows = [_vrow(f"fa{i}", "yes", band=DECOY_BAND_LABELS[0], conf=0.7999999) for i in range(3)]
    rows += [_vrow("fa9", "yes", band=DECOY_BAND_LABELS[0], conf=0.95), _vrow("h1", "yes", conf=0.7999999)]
    agg = GeoVerifyAggregator()
    agg.update(rows)
    s = agg.scores()["m"]
    ref = _reference(rows, "m")
    assert s.fa_conf_share_high == pytest.approx(ref["fa_conf_share_high"]) == pytest.approx(0.25)
    assert s.fa_conf_median == pytest.approx(ref["fa_conf_median"], abs=1e-12)
    assert s.hit_conf_median == pytest.approx(0.7999999, abs=1e-12)
    # a stated 0.8 is still "at least 0.8", also when it comes out of a percent as 80 / 100
    agg = GeoVerifyAggregator()
    agg.update([_vrow("a", "yes", band=DECOY_BAND_LABELS[0], conf=80 / 100),
                _vrow("b", "yes", band=DECOY_BAND_LABELS[0], conf=0.1 + 0.7)])
    assert agg.scores()["m"].fa_conf_share_high == 1.0


# --- a model named like the pooled column ----------------------------------------------------------------------


def test_a_model_named_pooled_is_refused_not_merged_into_the_pooled_column():
    """Attack: a ``[[models]]`` entry named "pooled" (or a replayed recording of a model of that name). Scores
    are keyed by model name and the pooled column is ``"pooled"``: the model's own column was overwritten by the
    pooled one (its H became the pool's), and its cut-off counts were added to the pool twice. The plan refuses
    the name (as it refuses two entries reporting under one name), and the scorer refuses cells holding it."""
    from types import SimpleNamespace

    from geoagent.geoverify.plan import check_report_names

    rows = [_vrow("a", "yes", model="pooled"), _vrow("b", "no", model="pooled"),
            _vrow("c", "no", model="other"), _vrow("d", "no", model="other")]
    ref = _reference(rows, "pooled")
    agg = GeoVerifyAggregator()
    agg.update(rows)
    with pytest.raises(ValueError, match="pooled"):
        scores = agg.scores()
        # before: no error, and the model's column was the pool's
        assert scores["pooled"].h == pytest.approx(ref["h"])
    with pytest.raises(ValueError, match="pooled"):
        check_report_names([SimpleNamespace(name="pooled", provider="openai", model="x")], [])
    with pytest.raises(ValueError, match="pooled"):
        check_report_names([SimpleNamespace(name="rec", provider="replay", model="recorded")], ["pooled", "m2"])
    # names that merely resemble it are distinct models and score as such
    agg = GeoVerifyAggregator()
    agg.update([{**r, "model": "Pooled" if r["model"] == "pooled" else r["model"]} for r in rows])
    scores = agg.scores()
    assert scores["Pooled"].h == pytest.approx(ref["h"]) and scores[sdt.POOLED].h == pytest.approx(0.25)
