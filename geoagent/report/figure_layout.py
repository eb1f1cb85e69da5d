"""The layout the report figures share (GeoVerify's Fig. 4, ``geoverify_dprime.png``; GeoHint's Fig. 2,
``fig_hit_by_band.png``, and Fig. 3, ``fig_echo_heatmap.png``): the legend right of the axes
(:func:`legend_outside`) and the axes above the caption as it is drawn (:func:`layout_with_caption`).

Why: inside the axes (matplotlib's ``loc="best"``) a legend hid data points (Fig. 4: claude-haiku-4-5's 1.5–3 km
point of the release replay, session 17 review; Fig. 2: the demo's top-right point once its caption was laid out
as drawn, session 18), and a caption laid out by a fixed share of the figure's height per caption line ran across
the x-axis label when its lines wrapped (Fig. 4's replay caption over "decoy band (km)", session 17 review).
"""

from __future__ import annotations

from typing import Any

#: where a report figure's legend goes: right of the axes, its top level with theirs (matplotlib legend keywords)
LEGEND_OUTSIDE: dict[str, Any] = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0}

#: the largest share of the figure's height (fraction) a caption may take from the axes
MAX_CAPTION_SHARE = 0.5


def legend_outside(ax, **kwargs):
    """``ax``'s legend placed right of the axes (:data:`LEGEND_OUTSIDE`), never over the data; ``kwargs`` go to
    ``Axes.legend`` (e.g. ``fontsize``). The figure must be wide enough for it: :func:`layout_with_caption`
    shrinks the axes to make room. Returns the ``Legend``."""
    return ax.legend(**LEGEND_OUTSIDE, **kwargs)


def layout_with_caption(fig, caption: str | None, *, fontsize: float = 6.5, pad: float = 0.01):
    """Lay out ``fig`` (``tight_layout``) with ``caption`` (lines joined by newlines; None or "" = no caption)
    drawn at its bottom left in ``fontsize`` pt and wrapped to the figure's width, the axes (with their x label
    and ticks) starting ``pad`` (fraction of the figure's height) above the caption's top as drawn: its extent is
    measured with an Agg renderer, wrapped lines included, and may take at most :data:`MAX_CAPTION_SHARE` of the
    height. Returns the caption's ``Text`` (None without a caption). Raises nothing of its own."""
    if not caption:
        fig.tight_layout()
        return None
    cap = fig.text(0.01, 0.01, caption, fontsize=fontsize, ha="left", va="bottom", wrap=True)
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()
    top = cap.get_window_extent(renderer).y1 / fig.bbox.height
    fig.tight_layout(rect=(0, min(MAX_CAPTION_SHARE, top + pad), 1, 1))
    return cap
