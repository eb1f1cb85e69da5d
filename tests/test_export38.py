"""Exports (session 38, export38).

Before (#2): `run.py export --out DIR` replaced a `model_responses.csv` or `export_note.txt` of the user's own in DIR
without a word; only a foreign Parquet file of the same name was refused.
"""

from __future__ import annotations

from _model_harness import generic_campaign, model_table

from geoagent.cli import main


def test_export_out_refuses_a_csv_or_note_it_did_not_write_and_replaces_its_own(tmp_path, capsys):
    cfg = generic_campaign(tmp_path, name="exp38", n=3, models=model_table("sim"))
    assert main(["run", str(cfg), "--no-live"]) == 0
    for name in ("model_responses.csv", "export_note.txt"):
        out = tmp_path / f"out-{name}"
        out.mkdir()
        (out / name).write_text("my,own,data\n", encoding="utf-8")
        capsys.readouterr()
        assert main(["export", str(cfg), "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert f"it holds {name}, a file no export of this campaign wrote" in err, err
        assert (out / name).read_text(encoding="utf-8") == "my,own,data\n"
        assert not list(out.glob("*.parquet"))  # nothing written
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    assert main(["export", str(cfg), "--out", str(fresh)]) == 0
    assert main(["export", str(cfg), "--out", str(fresh)]) == 0  # its own export is replaced, as before
    assert (fresh / "model_responses.csv").is_file() and (fresh / "model_responses.parquet").is_file()


def test_fig2_says_which_points_have_clopper_pearson_intervals():
    """#3: a point at 0 % or 100 % has the Clopper-Pearson interval of its pooled count (a site bootstrap of 0 hits is
    [0, 0]); the figure's subtitle named site-bootstrap intervals alone."""
    from test_geohint_few_site_intervals import _agg

    import geoagent.report.geohint as GH

    agg = _agg(12)
    pts = GH.hit_by_band_points(agg, "forced", "baseline", n_boot=100, seed=3)
    for q in (q for p in pts.values() for q in p):
        q["exact"] = False
    def title(points):  # the subtitle as one line (wrapped at its hyphens and spaces)
        text = GH.hit_by_band_figure(agg, "forced", "baseline", n_boot=100, points=points).axes[0].get_title()
        return " ".join(text.replace("-\n", "-").split())

    plain = title(pts)
    some = next(q for p in pts.values() for q in p if q["n"])
    some["exact"] = True  # as hit_by_band_points marks a point at 0 % or 100 %
    marked = title(pts)
    assert "Clopper-Pearson" not in plain and "Clopper-Pearson at 0 % or 100 %" in marked, marked
