"""GeoHint figures lay out their text inside the figure (session 12 walkthrough, point 2).

Before: Fig. 2's subtitle ran past both edges of ``fig_hit_by_band.png`` ("…or bars: 95 % site-bootstrap
intervals, 200 resamples; none from < 5 sites, few-cluster f…"), Fig. 3's band tick labels ran into each other
("0.5–1.5 km1.5–3.0 km3.0–6.0 km"), and a one-model campaign's figures read "1 model pooled". Checked without
pixels: matplotlib measures each text's window extent once the figure is drawn.
"""

from __future__ import annotations

import pytest

from _geohint_synth import synth_results
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.report import geohint as GH


def _agg(models=("m-a",)) -> GeoHintAggregator:
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=4, n_sites=6, models=models))
    return agg


def _drawn(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _texts_inside(fig, renderer) -> list[str]:
    """The visible texts (titles, labels, ticks, notes) whose drawn extent leaves the figure (1 px slack)."""
    box = fig.bbox
    out = []
    for t in fig.findobj(lambda a: hasattr(a, "get_window_extent") and hasattr(a, "get_text")):
        if not t.get_visible() or not t.get_text().strip():
            continue
        e = t.get_window_extent(renderer)
        if e.x0 < box.x0 - 1 or e.x1 > box.x1 + 1 or e.y0 < box.y0 - 1 or e.y1 > box.y1 + 1:
            out.append(f"{t.get_text()!r}: {e} outside {box}")
    return out


@pytest.mark.parametrize("models", [("m-a",), ("m-a", "m-b", "m-c")])
@pytest.mark.parametrize("note", [None, "replay"])
@pytest.mark.parametrize("make", ["hit_by_band_figure", "echo_heatmap_figure"])
def test_every_text_of_the_figures_fits_inside_the_figure(make, note, models):
    kw = {"n_boot": 200} if make == "hit_by_band_figure" else {}
    text = (("Replay: model m-a answered from verify_raw_sample.jsonl (336 recorded responses); the figures "
             "are those of the replayed responses, not the paper's.") if note else None)
    fig = getattr(GH, make)(_agg(models), "forced", note=text, **kw)
    r = _drawn(fig)
    assert _texts_inside(fig, r) == []
    title = fig.axes[0].title
    assert title.get_text() and title.get_window_extent(r).width <= fig.bbox.width


@pytest.mark.parametrize("make", ["hit_by_band_figure", "echo_heatmap_figure"])
def test_band_tick_labels_do_not_overlap(make):
    fig = getattr(GH, make)(_agg(), "forced")
    r = _drawn(fig)
    ticks = [t for t in fig.axes[0].get_xticklabels() if t.get_text()]
    assert len(ticks) == 3
    boxes = sorted((t.get_window_extent(r) for t in ticks), key=lambda b: b.x0)
    em = ticks[0].get_fontsize() * fig.dpi / 72  # the labels' font size in pixels
    for a, b in zip(boxes, boxes[1:]):
        assert b.x0 - a.x1 >= 0.5 * em, (a, b)  # a visible gap between neighbours (before: 3 px at 10 pt)


def test_a_single_model_is_named_not_pooled(tmp_path):
    one = _agg(("m-a",))
    for make in (GH.hit_by_band_figure, GH.echo_heatmap_figure):
        title = make(one, "forced").axes[0].get_title()
        assert "pooled" not in title and "m-a" in title, title
    several = GH.hit_by_band_figure(_agg(("m-a", "m-b")), "forced").axes[0].get_title()
    assert "2 models pooled" in " ".join(several.split()), several
    GH.write_report(one, tmp_path, n_flips=20, n_splits=3, seed=1, n_boot=20, figures=True)
    md = (tmp_path / "report.md").read_text(encoding="utf-8")
    assert "(1 model)" not in md and "1 model pooled" not in md and "All models pooled (1 model" not in md
    assert "Echo rate per tier and band, model m-a" in md


def test_the_n_labels_of_fig2_stay_inside_the_axes():
    """Each point's ``n=`` label sits right of its point; the last band's ran across the axes' right edge (session 17:
    the x range ended at the last point) before the x range got room for it."""
    fig = GH.hit_by_band_figure(_agg(("m-a", "m-b")), "forced", n_boot=0)
    r = _drawn(fig)
    ax = fig.axes[0]
    box = ax.get_window_extent(r)
    labels = [t for t in ax.texts if t.get_text().startswith("n=")]
    assert labels, "no n= labels drawn"
    outside = [t.get_text() for t in labels if t.get_window_extent(r).x1 > box.x1 or t.get_window_extent(r).x0 < box.x0]
    assert outside == []
