"""The psychometric plot shows what the table shows (reviewer finding, session 9: no error bars, no small-n
markers, no n): site-bootstrap intervals of d' as error bars, small-n points marked †, trials per line in the
legend and a caption naming the interval."""

import polars as pl
from matplotlib.container import ErrorbarContainer

from geoagent.report.geoverify import SMALL_N_MARK, plot_psychometric, psychometric_figure
from geoagent.scoring.sdt import score

BANDS = ("0.15-0.3km", "0.3-0.7km", "0.7-1.5km", "1.5-3.0km", "3.0-6.0km")


def _cells() -> pl.DataFrame:
    rows = []
    for site in ("s1", "s2", "s3", "s4", "s5"):
        rows.append(("m", site, "main", "signal", "yes", 8, 2, 0))
        rows.append(("m", site, "main", BANDS[0], "no", 1, 0, 0))  # 5 decoy trials: small n
        rows += [("m", site, "main", b, "no", 2 + (site == "s1"), 8, 0) for b in BANDS[1:]]
    return pl.DataFrame(rows, schema=["model", "site", "arm", "band", "truth", "n_yes", "n_no", "n_fail"],
                        orient="row")


def test_plot_has_error_bars_small_n_marks_and_counts(tmp_path):
    scores = score(_cells(), n_boot=100, seed=0)
    fig = psychometric_figure(scores)
    ax = fig.axes[0]
    bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(bars) == 1  # m alone: its pooled line would be the same (one model, session 18)
    sc = scores["m"]
    lo, hi = sc.ci[f"d'[{BANDS[1]}]"]
    segs = bars[0].lines[2][0].get_segments()
    ys = sorted(tuple(sorted((float(a[1]), float(b[1])))) for a, b in segs)
    assert any(abs(a - lo) < 1e-9 and abs(b - hi) < 1e-9 for a, b in ys)
    texts = [t.get_text() for t in ax.texts] + [t.get_text() for t in fig.texts]
    assert any(SMALL_N_MARK in t for t in [t.get_text() for t in ax.texts])
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(lab.startswith("m ") and f"{sc.n_signal} signal" in lab and f"{sc.n_noise} decoy" in lab for lab in labels), labels
    caption = " ".join(texts)
    assert "bootstrap" in caption and "100" in caption and "sites" in caption and "fewer than 20" in caption
    assert plot_psychometric(scores, tmp_path / "p.png").stat().st_size > 0
