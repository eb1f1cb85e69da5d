"""The report files of a replay campaign say they come from replayed responses (fresh-user walkthrough, session
10): ``run.py run geoagent/configs/geocontext_replay.toml`` wrote geoverify_table.txt titled "GeoVerify (layout of
GeoContext, Zhang and Wang 2026, Table 12)" and geoverify_table.md starting with the table, naming neither the
replayed file nor that it is a sample of 336 responses whose figures are not the paper's Table 12. Each written
table/report file now opens with a line naming the file(s), the responses and that the figures are not the
paper's; the same for any campaign whose models are replay providers (GeoHint's report.md too)."""

from __future__ import annotations

import importlib.util
import tomllib

import anyio

from geoagent import engine
from geoagent.config import config_from_dict, packaged_config_path
from geoagent.geohint.aggregate import GeoHintAggregator
from geoagent.providers.replay import replay_note
from geoagent.report import geohint as GH

from _geohint_synth import synth_results


def test_geoverify_replay_report_files_open_with_the_replay_line(release_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("GEOAGENT_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("GEOAGENT_QUEUES", str(tmp_path / "queues"))
    monkeypatch.setenv("GEOAGENT_RELEASE", str(release_dir))
    if importlib.util.find_spec("geoagent.campaigns.geoverify") is None:
        monkeypatch.setitem(engine.KINDS, "geoverify", "geoagent.geoverify.campaign:GeoVerifyCampaign")
    doc = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    cfg = config_from_dict(doc)
    raw = release_dir / "verify_raw_sample.jsonl"
    out = anyio.run(lambda: engine.run_campaign(cfg, live=False, handle_signals=False, export=False))
    assert out.status == "complete", out.summary()
    report = tmp_path / "state" / cfg.name / "report"
    for name in ("geoverify_table.md", "geoverify_table.txt"):
        first = (report / name).read_text(encoding="utf-8").lstrip("*").splitlines()[0]
        assert first.startswith("Replay of recorded responses: release-replay from "), (name, first)
        assert str(raw) in first and "336 recorded responses" in first, (name, first)
        assert "a sample of the release" in first and "none is the paper's" in first and "Table 12" in first


def test_replay_note_is_generic_and_empty_without_replay(tmp_path):
    rec = tmp_path / "answers.jsonl"
    rec.write_text('{"key": "a", "raw": "x"}\n\n{"key": "b", "raw": "y"}\n', encoding="utf-8")
    base = {"campaign": {"name": "gh-rp", "kind": "geohint", "contact": "ops@example.org"},
            "paths": {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")},
            "budget": {"cap_usd": 0.0}}
    cfg = config_from_dict({**base, "models": [
        {"name": "rp", "provider": "replay", "model": "recorded", "replay": {"path": str(rec)}},
        {"name": "sim", "provider": "simulated", "model": "sim"}]})
    note = replay_note(cfg)
    assert f"rp from {rec} (2 recorded responses)" in note and "sim" not in note.split(".")[0]
    assert "a sample of the release" not in note and "none is the paper's" in note
    assert replay_note(config_from_dict({**base, "models": [{"name": "sim", "provider": "simulated",
                                                             "model": "sim"}]})) == ""
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=4, n_sites=3, models=("m-a",)))
    GH.write_report(agg, tmp_path / "r", n_flips=20, n_splits=3, seed=1, n_boot=0, figures=False,
                    replay_note=note)
    md = (tmp_path / "r" / "report.md").read_text(encoding="utf-8")
    assert f"**{note}**" in md.split("Terms:")[0]


def test_figures_carry_the_replay_line(tmp_path):
    """The PNGs of a replay campaign's report say it too (GeoVerify's d' plot; GeoHint's Fig. 2 and Fig. 3)."""
    import polars as pl

    from geoagent.report.geoverify import psychometric_figure
    from geoagent.scoring import sdt

    note = "Replay of recorded responses: rp from /x/answers.jsonl (2 recorded responses). Not the paper's."
    rows = [("m", f"s{i}", "main", b, t, 3, 2, 0) for i in range(5)
            for b, t in (("signal", "yes"), ("0.15-0.3km", "no"), ("0.3-0.7km", "no"))]
    cells = pl.DataFrame(rows, schema=list(sdt.CELL_COLUMNS), orient="row")
    fig = psychometric_figure(sdt.score(cells, bands=("0.15-0.3km", "0.3-0.7km"), n_boot=20, seed=0), note=note)
    assert any(note in t.get_text() for t in fig.texts)
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=4, n_sites=3, models=("m-a",)))
    for make in (GH.hit_by_band_figure, GH.echo_heatmap_figure):
        fig = make(agg, "forced", note=note)
        assert any(note in t.get_text() for t in fig.texts), make
    GH.write_report(agg, tmp_path, n_flips=20, n_splits=3, seed=1, n_boot=20, figures=True, replay_note=note)
    assert (tmp_path / "fig_hit_by_band.png").stat().st_size > 0
