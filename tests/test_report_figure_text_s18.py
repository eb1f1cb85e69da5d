"""The report figures' text and legend, measured (session 18): GeoHint Fig. 2 (``fig_hit_by_band.png``), Fig. 3
(``fig_echo_heatmap.png``) and GeoVerify Fig. 4 (``geoverify_dprime.png``).

Before: Fig. 2 and Fig. 3 laid out their caption by giving each caption line (each ``\\n`` of the note) a fixed
share of the figure's height (12 %, at most 30 %), whatever the wrapped caption's drawn height, and Fig. 2's legend
was placed by matplotlib ("best") inside the axes. With the caption laid out as drawn (as Fig. 4 since session 17),
that legend covered the demo's top-right point (legible, 3.0–6.0 km, 83 %). Fig. 4 and Figs. 2-3 now share one
layout: legend right of the axes, axes above the caption as drawn (:mod:`geoagent.report.figure_layout`).

Checked without pixels, as tests/test_report_figure_layout.py: every drawn text's window extent (the legend as one
box) must lie inside the figure and overlap no other, and no data point, line or error bar may lie under the legend,
for a short and a long caption and for 1 and 6 models; on data shaped as the demo's (``python run.py demo``: its
Fig. 2 counts, 4 legible and 2 illegible sites) and on the release's judged sample (``geoagent.geohint.judged``;
skipped without ``../shared/reference/geocontext``).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from matplotlib.container import ErrorbarContainer

from test_report_figure_layout import _drawn, _texts_inside
from test_report_review_s17 import REPLAY_COUNTS, REPLAY_NOTE, _cells
from test_report_review_s17 import _data_points_px as _points_px

from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.geohint.result import GeoHintResult
from geoagent.report import figure_note
from geoagent.report import geohint as GH
from geoagent.report.geoverify import SMALL_N_MARK, psychometric_figure
from geoagent.sandbox.launch import simulated_note
from geoagent.scoring.sdt import score

SIX = ("demo-fast", "demo-large", "m-c", "m-d", "m-e", "m-f")
MODELS = {1: SIX[:1], 6: SIX}

# the demo's Fig. 2 (python run.py demo, session 18): (responses, hits) per band, its regimes' sites and the hits of
# their 4 no-context answers each
DEMO_FIG2 = {"legible": [(92, 73), (96, 70), (96, 80)], "illegible": [(48, 26), (48, 12), (48, 8)]}
DEMO_SITES = {"legible": {"mirrorbay_peony": 3, "mirrorbay_peony_2": 3, "sandboxcity_birch": 4, "sandboxcity_ember": 2},
              "illegible": {"mirrorbay_osmanthus": 0, "sandboxcity_nettle": 0}}
BAND_KM = {"0.5-1.5km": 1.0, "1.5-3.0km": 2.0, "3.0-6.0km": 4.0}


def _answer(key, site, model, condition, hit, **kw) -> GeoHintResult:
    return GeoHintResult(key=key, site=site, image_id="1", model=model, condition=condition, schema="forced",
                         resolved_level="area", error_km=0.2 if hit else 5.0, hit=hit, **kw)


def _demo_agg(models) -> GeoHintAggregator:
    """Answers giving the demo's Fig. 2 points (responses and hits per regime and band, pooled), dealt round-robin
    over the regime's sites and ``models``."""
    agg = GeoHintAggregator()
    rows = []
    for regime, sites in DEMO_SITES.items():
        for site, k in sites.items():
            rows += [_answer(f"b|{site}|{i}", site, models[i % len(models)], "baseline", i < k) for i in range(4)]
        names = sorted(sites)
        for band, (n, k) in zip(GH.BANDS, DEMO_FIG2[regime]):
            rows += [_answer(f"f|{regime}|{band}|{i}", names[i % len(names)], models[i % len(models)], "forced",
                             i < k, ref_qid=f"Q{band}", band=band, tier="high", dist_km=BAND_KM[band], echo=False)
                     for i in range(n)]
    agg.add_many(rows)
    return agg


def _release_agg(release_dir) -> GeoHintAggregator:
    from geoagent.geohint.judged import import_judged

    rows, _ = import_judged(release_dir)
    agg = GeoHintAggregator()
    agg.add_many(rows)
    return agg


def _long_note(models) -> str:
    """The longest caption a campaign writes: the replay line and the simulator's warning."""
    return figure_note(REPLAY_NOTE, simulated_note(list(models)))


def _fig2_note(agg, note):
    """Fig. 2's caption as write_report composes it: the note, then the empty-figure line when there is one."""
    return "\n".join(x for x in (note, GH.empty_figure_note(agg, "baseline")) if x) or None


def _boxes(fig, r, ignore: tuple[str, ...] = ()) -> list[tuple[str, object]]:
    """(name, drawn extent) of every visible text of ``fig`` outside the legend (but those reading as one of
    ``ignore``), and of the legend as one box."""
    legends = [lg for ax in fig.axes if (lg := ax.get_legend()) is not None]
    inner = {id(t) for lg in legends for t in lg.findobj(lambda a: hasattr(a, "get_text"))}
    out = [(f"legend {[t.get_text() for t in lg.get_texts()]}", lg.get_window_extent(r)) for lg in legends]
    for t in fig.findobj(lambda a: hasattr(a, "get_window_extent") and hasattr(a, "get_text")):
        if id(t) in inner or not t.get_visible() or not t.get_text().strip() or t.get_text() in ignore:
            continue
        out.append((repr(t.get_text()[:60]), t.get_window_extent(r)))
    return out


def _overlapping_texts(fig, r, slack: float = 0.5, ignore: tuple[str, ...] = ()) -> list[str]:
    """Pairs of drawn texts (and the legend) whose extents overlap by more than ``slack`` px each way; texts
    reading as one of ``ignore`` left out."""
    boxes = _boxes(fig, r, ignore)
    out = []
    for i, (a, ea) in enumerate(boxes):
        for b, eb in boxes[i + 1:]:
            w = min(ea.x1, eb.x1) - max(ea.x0, eb.x0)
            h = min(ea.y1, eb.y1) - max(ea.y0, eb.y0)
            if w > slack and h > slack:
                out.append(f"{a} {ea} over {b} {eb}")
    return out


def _legend_outside_axes(fig, r) -> list[str]:
    out = []
    for ax in fig.axes:
        lg = ax.get_legend()
        if lg is not None and lg.get_window_extent(r).overlaps(ax.get_window_extent(r)):
            out.append(f"legend {lg.get_window_extent(r)} inside axes {ax.get_window_extent(r)}")
    return out


def _check(fig, ignore: tuple[str, ...] = ()) -> None:
    """Every text inside ``fig`` and over no other (but those reading as one of ``ignore``), the legend outside the
    axes and over no data point, line or error bar."""
    r = _drawn(fig)
    assert _texts_inside(fig, r) == []
    assert _overlapping_texts(fig, r, ignore=ignore) == []
    ax = fig.axes[0]
    if ax.get_legend() is not None:
        leg = ax.get_legend().get_window_extent(r)
        assert sorted({w for x, y, w in _points_px(ax) if leg.contains(x, y)}) == []
        assert _legend_outside_axes(fig, r) == []


def _fig2_ys(fig) -> dict[str, list[float]]:
    ax = fig.axes[0]
    return {c.get_label().split(" (")[0]: [float(y) for y in c.lines[0].get_ydata()]
            for c in ax.containers if isinstance(c, ErrorbarContainer)}


def _same(a: list[float], b: list[float]) -> bool:
    return all((math.isnan(x) and math.isnan(y)) or x == pytest.approx(y, abs=1e-9) for x, y in zip(a, b))


# --- GeoHint Fig. 2 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_models", [1, 6])
@pytest.mark.parametrize("caption", ["short", "long"])
@pytest.mark.parametrize("n_boot", [0, 200])
def test_fig2_demo_texts_and_legend_clear(n_models, caption, n_boot):
    agg = _demo_agg(MODELS[n_models])
    note = _fig2_note(agg, _long_note(agg.models) if caption == "long" else None)
    fig = GH.hit_by_band_figure(agg, "forced", n_boot=n_boot, note=note)
    _check(fig)
    # the points are the demo's, as its table (Fig. 2's points, models pooled)
    ys = _fig2_ys(fig)
    for regime, counts in DEMO_FIG2.items():
        assert _same(ys[regime], [100 * k / n for n, k in counts]), (regime, ys[regime])
    pts = GH.hit_by_band_points(agg, "forced", "baseline", n_boot=n_boot, seed=0)
    assert all(_same(ys[g], list(np.array([q["rate"] for q in p]) * 100)) for g, p in pts.items())


def test_fig2_legend_is_right_of_the_axes_and_the_top_right_point_clear():
    """The demo's highest point (legible, 3.0–6.0 km, 83 %) sat under the "best" legend once the caption was laid
    out as drawn (session 17's shared helper, reverted); the legend now stands right of the axes, as Fig. 4's."""
    fig = GH.hit_by_band_figure(_demo_agg(MODELS[1]), "forced", n_boot=0)
    r = _drawn(fig)
    ax = fig.axes[0]
    assert ax.get_legend().get_window_extent(r).x0 >= ax.get_window_extent(r).x1


@pytest.mark.parametrize("caption", ["short", "long"])
def test_fig2_release_texts_and_legend_clear(release_dir, caption):
    """The release's judged sample (5 models, no no-context answer: Fig. 2 draws no line and says why)."""
    agg = _release_agg(release_dir)
    note = _fig2_note(agg, _long_note(agg.models) if caption == "long" else None)
    fig = GH.hit_by_band_figure(agg, "v1", n_boot=200, note=note)
    _check(fig)
    assert all(math.isnan(y) for ys in _fig2_ys(fig).values() for y in ys)


def test_fig2_caption_starts_under_the_x_label_as_drawn():
    """A long caption (the replay line and the simulator's warning, wrapped to 8 lines) ends below the x-axis
    label; before, the axes gave up 2 x 12 % of the height whatever the caption's drawn height."""
    agg = _demo_agg(MODELS[6])
    fig = GH.hit_by_band_figure(agg, "forced", n_boot=0, note=_long_note(agg.models))
    r = _drawn(fig)
    label = fig.axes[0].xaxis.label.get_window_extent(r)
    for t in fig.texts:
        assert t.get_window_extent(r).y1 <= label.y0, (t.get_window_extent(r), label)


def test_a_low_point_keeps_its_n_label_inside_the_axes():
    """A point at 0 % labelled under it ("n=" 10 pt below the point) ran below the x axis, over the tick labels."""
    agg = GeoHintAggregator()
    rows = [_answer(f"b|s{j}|{i}", f"s{j}", "m", "baseline", i < 3) for j in range(5) for i in range(4)]
    rows += [_answer(f"f|{b}|{i}", f"s{i % 5}", "m", "forced", False, ref_qid="Q", band=b, tier="high",
                     dist_km=BAND_KM[b], echo=False) for b in GH.BANDS for i in range(10)]
    agg.add_many(rows)
    fig = GH.hit_by_band_figure(agg, "forced", n_boot=0)
    r = _drawn(fig)
    ax = fig.axes[0]
    box = ax.get_window_extent(r)
    labels = [t for t in ax.texts if t.get_text().startswith("n=")]
    assert len(labels) == 3
    assert [t.get_text() for t in labels if t.get_window_extent(r).y0 < box.y0] == []
    _check(fig)


# --- GeoHint Fig. 3 -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("n_models", [1, 6])
@pytest.mark.parametrize("caption", ["short", "long"])
def test_fig3_demo_texts_clear(n_models, caption):
    agg = _demo_agg(MODELS[n_models])
    fig = GH.echo_heatmap_figure(agg, "forced", note=_long_note(agg.models) if caption == "long" else None)
    _check(fig)


@pytest.mark.parametrize("caption", ["short", "long"])
def test_fig3_release_texts_clear(release_dir, caption):
    agg = _release_agg(release_dir)
    fig = GH.echo_heatmap_figure(agg, "v1", note=_long_note(agg.models) if caption == "long" else None)
    _check(fig)


# --- GeoVerify Fig. 4 (the same layout) -----------------------------------------------------------------------------
def _verify_counts(n_models: int) -> dict[str, list[tuple[int, int]]]:
    """The replay's counts (4 models); for 6, two more models with the counts of the first two."""
    names = list(REPLAY_COUNTS)
    counts = {m: REPLAY_COUNTS[m] for m in names[:n_models]}
    for i in range(len(counts), n_models):
        counts[f"{names[i % 4]}-copy"] = REPLAY_COUNTS[names[i % 4]]
    return counts


@pytest.mark.parametrize("n_models", [1, 6])
@pytest.mark.parametrize("caption", ["short", "long"])
def test_fig4_texts_and_legend_clear(n_models, caption):
    counts = _verify_counts(n_models)
    fig = psychometric_figure(score(_cells(counts), n_boot=200, seed=0),
                              note=_long_note(list(counts)) if caption == "long" else None)
    # the small-n marks of side-by-side points of one band overlap one another (not fixed here: they mark points);
    # with one model there is no pooled line whose marks sat on the model's (tests/test_report_one_model_pooled_s18.py)
    _check(fig, ignore=(SMALL_N_MARK,) if n_models > 1 else ())
