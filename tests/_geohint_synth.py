"""Synthetic scored GeoHint results for aggregator/report tests (deterministic under a seed)."""

from __future__ import annotations

import numpy as np

from geoagent.data.model import LADDER_BAND_LABELS
from geoagent.geohint.parse import EVIDENCE_CATEGORIES
from geoagent.geohint.result import GeoHintResult
from geoagent.scoring.geohint import is_hit

BAND_RANGES = ((0.5, 1.5), (1.5, 3.0), (3.0, 6.0))


def synth_results(seed: int = 0, n_sites: int = 14, models=("m-a", "m-b", "m-c"), images_per_site: int = 2, baseline_repeats: int = 3):
    rng = np.random.default_rng(seed)
    out: list[GeoHintResult] = []
    for s in range(n_sites):
        site = f"site{s:02d}"
        legibility = rng.uniform(0.05, 0.95)
        points = []
        for bi, (lo, hi) in enumerate(BAND_RANGES):
            for tier in ("high", "mid", "low"):
                if rng.random() < 0.8:
                    points.append((f"Q{s}{bi}{tier}", f"Point {s} {bi} {tier}", LADDER_BAND_LABELS[bi], tier, float(rng.uniform(lo, hi))))
        for i in range(images_per_site):
            image = str(1000 + s * 10 + i)
            for model in models:
                skill = {"m-a": 0.1, "m-b": 0.0, "m-c": -0.15}.get(model, 0.0)
                for r in range(baseline_repeats):
                    p = min(max(legibility + skill, 0.0), 1.0)
                    ok = rng.random() < p
                    level = rng.choice(["building", "area", "city", "none"], p=[0.3, 0.5, 0.15, 0.05])
                    err = float(rng.uniform(0.05, 0.9)) if ok else float(rng.lognormal(1.0, 1.0))
                    out.append(GeoHintResult(
                        key=f"b|{site}|{image}|{model}|{r}", site=site, image_id=image, model=model, condition="baseline",
                        schema="forced", repeat=r, resolved_level=str(level), error_km=None if level == "none" else err,
                        hit=is_hit(None if level == "none" else err, str(level)), city="C", area="A", building="B",
                    ))
                for qid, name, band, tier, d in points:
                    for cond in ("forced", "forced_warn", "forced_chain"):
                        if cond == "forced_chain" and model == "m-c":
                            continue
                        echo = bool(rng.random() < (0.5 - 0.4 * legibility))
                        level = str(rng.choice(["building", "area", "city", "none"], p=[0.3, 0.5, 0.15, 0.05]))
                        if echo:
                            err = d * float(rng.uniform(0.9, 1.1))
                        else:
                            err = float(rng.lognormal(np.log(0.4 + 2 * (1 - legibility)), 0.8))
                        if cond == "forced_warn":
                            err *= 0.9
                        error_km = None if level == "none" else err
                        evidence = None
                        if cond == "forced_chain" and rng.random() < 0.97:
                            evidence = {c: ("not visible" if rng.random() < 0.2 else "seen") for c in EVIDENCE_CATEGORIES}
                        out.append(GeoHintResult(
                            key=f"c|{site}|{image}|{model}|{cond}|{qid}", site=site, image_id=image, model=model,
                            condition=cond, schema="forced", ref_qid=qid, ref_name=name, band=band, tier=tier, dist_km=d,
                            area=name if echo else "Somewhere", building="B", resolved_level=level, error_km=error_km,
                            hit=is_hit(error_km, level), echo=echo, evidence=evidence, parse_ok=rng.random() > 0.01,
                        ))
    return out


def hand_rows(baseline: dict[str, list[int]], near: dict[str, list[int]], model: str = "m") -> list[GeoHintResult]:
    """Hand-made results of one model: per site, no-context answers (``baseline``: 1 = hit, err 0.2 km, else
    5 km) and near-band forced answers (``near``: 1 = hit, err 0.3 km, else 4 km; d_ref 1 km), all at area level."""
    out = []
    for site, hits in baseline.items():
        for r, h in enumerate(hits):
            err = 0.2 if h else 5.0
            out.append(GeoHintResult(key=f"b|{site}|{r}", site=site, image_id=f"{site}-img", model=model, condition="baseline",
                                     schema="forced", repeat=r, resolved_level="area", error_km=err, hit=is_hit(err, "area")))
    for site, hits in near.items():
        for i, h in enumerate(hits):
            err = 0.3 if h else 4.0
            out.append(GeoHintResult(key=f"c|{site}|{i}", site=site, image_id=f"{site}-img", model=model, condition="forced",
                                     schema="forced", ref_qid=f"Q{site}{i}", ref_name=f"P{i}", band="0.5-1.5km", tier="high",
                                     dist_km=1.0, area="Somewhere", resolved_level="area", error_km=err,
                                     hit=is_hit(err, "area"), echo=False))
    return out
