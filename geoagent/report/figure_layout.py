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


#: a legend entry's label is wrapped to lines of at most this many characters (a long model name broken too)
LEGEND_WRAP_CHARS = 48


def legend_outside(ax, **kwargs):
    """``ax``'s legend placed right of the axes (:data:`LEGEND_OUTSIDE`), never over the data; ``kwargs`` go to
    ``Axes.legend`` (e.g. ``fontsize``). Each label is wrapped to :data:`LEGEND_WRAP_CHARS` characters a line: the
    axes give the legend all the width it takes (:func:`layout_with_caption` shrinks them to make room), and one
    long model name (50 characters, Fig. 4's label adds its trial counts) left them so narrow that the title ran
    over the y tick labels and the x tick labels over one another (adversarial review s18). Returns the
    ``Legend``."""
    import textwrap

    handles, labels = ax.get_legend_handles_labels()
    labels = [textwrap.fill(x, LEGEND_WRAP_CHARS) for x in labels]
    return ax.legend(handles, labels, **LEGEND_OUTSIDE, **kwargs)


def layout_with_caption(fig, caption: str | None, *, fontsize: float = 6.5, pad: float = 0.01):
    """Lay out ``fig`` (``tight_layout``) with ``caption`` (lines joined by newlines; None or "" = no caption)
    drawn at its bottom left in ``fontsize`` pt and wrapped to the figure's width, the axes (with their x label
    and ticks) starting ``pad`` (fraction of the figure's height) above the caption's top as drawn: its extent is
    measured with an Agg renderer, wrapped lines included. A caption that would take more than
    :data:`MAX_CAPTION_SHARE` of the height makes the figure taller (its width, so the wrapping, unchanged) until
    it takes that share: before, the axes stopped at that share and a taller caption ran over them, their x label
    and (Fig. 3) their cells (adversarial review s18). A legend right of the axes (:func:`legend_outside`) taller
    than the room above the caption (Fig. 4 with 20-odd models) makes the figure taller by what it lacks. Returns
    the caption's ``Text`` (None without a caption). Raises nothing of its own."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    cap = fig.text(0.01, 0.01, caption, fontsize=fontsize, ha="left", va="bottom", wrap=True) if caption else None

    def caption_top() -> float:  # fraction of the height the axes start at
        if cap is None:
            return 0.0
        return cap.get_window_extent(FigureCanvasAgg(fig).get_renderer()).y1 / fig.bbox.height + pad

    top = caption_top()
    if top > MAX_CAPTION_SHARE:
        w, h = fig.get_size_inches()
        # the caption's own height (in, anchored ``0.01`` of the height up) stays; the axes get the rest
        fig.set_size_inches(w, h * top / MAX_CAPTION_SHARE)
        top = caption_top()
    fig.tight_layout(rect=(0, min(MAX_CAPTION_SHARE, top), 1, 1))
    # a legend right of the axes hangs from their top: one taller than the room above the caption (many models)
    # ran over the caption and off the figure's bottom; the figure grows by what it lacks (adversarial review s18)
    renderer = FigureCanvasAgg(fig).get_renderer()
    floor = top * fig.bbox.height
    lack = max([floor - lg.get_window_extent(renderer).y0 for ax in fig.axes if (lg := ax.get_legend()) is not None],
               default=0.0)
    if lack > 1.0:
        w, h = fig.get_size_inches()
        fig.set_size_inches(w, h + (lack + pad * fig.bbox.height) / fig.dpi)
        top = caption_top()
        fig.tight_layout(rect=(0, min(MAX_CAPTION_SHARE, top), 1, 1))
    return cap
