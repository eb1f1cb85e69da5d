"""Scored exports carry the model's raw answer text on every row, and runs answered by the simulator say so.

Walkthrough: ``geoverify_scored.parquet`` had ``raw`` null except on parse failures (users had to join
``model_responses`` on ``request_key``, undocumented); GeoHint over the sandbox crawl showed "echo 100.0%"
because the simulated model repeats the hint, and nothing said that the figures describe the simulator.
Real runs through the CLI over a real sandbox crawl: GeoVerify with ``provider = "simulated"``, GeoHint with
the OpenAI-compatible fake on ``openai.sandbox.invalid`` (answers from the same simulator). The raw text is
checked against the ``model_responses`` export joined on ``request_key`` here (Polars join, independent of
the exporter's lookup).
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from geoagent.cli import main
from _docs import docs_text

REPO = Path(__file__).resolve().parents[1]
MODEL_FAKE = """
[[models]]
name = "fake-gpt"
provider = "openai"
model = "sandbox-gpt"
base_url = "http://openai.sandbox.invalid/v1"
max_output_tokens = 300
concurrency = 16
rate = { requests = 1000, period_s = 1.0 }
"""
SIMULATED = """
[[models]]
name = "sim"
provider = "simulated"
model = "sim-1"
max_output_tokens = 100
"""


def _toml(root: Path, name: str, kind: str, models: str, section: str) -> Path:
    p = root / f"{name}.toml"
    p.write_text(f'[campaign]\nname = "{name}"\nkind = "{kind}"\nseed = 7\ncontact = "mailto:x@example.org"\n'
                 f'[paths]\nrelease_dir = "{root / "state" / "crawl-sandbox"}"\n[budget]\ncap_usd = 1.0\n'
                 f"{models}\n[{kind}]\n{section}\n", encoding="utf-8")
    return p


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from tests._crawl_once import sandbox_crawl

    mp = pytest.MonkeyPatch()
    outs = {}
    try:
        import io
        from contextlib import redirect_stdout

        # the shipped crawl (the session's one, restored under its root; the data roots pointed there)
        root, _ = sandbox_crawl(tmp_path_factory, mp)
        images = root / "state" / "images"
        gv = _toml(root, "gv-sim", "geoverify", SIMULATED, f'trials = "release"\nimage_root = "{images}"\nn_boot = 0')
        gh = _toml(root, "gh-fake", "geohint", MODEL_FAKE,
                   f'conditions = ["forced"]\nimages = "release"\nimage_root = "{images}"\n'
                   '[geohint.geocoder]\nwikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
                   'nominatim_url = "http://nominatim.sandbox.invalid"\nnominatim_max_requests = 1000000')
        for name, cfg in (("gv", gv), ("gh", gh)):
            buf = io.StringIO()
            with redirect_stdout(buf):
                code = main(["run", str(cfg), "--no-live"])
            outs[name] = (code, buf.getvalue())
    finally:
        mp.undo()
    return root / "state", outs


@pytest.mark.parametrize("campaign, table", [("gv-sim", "geoverify_scored"), ("gh-fake", "geohint_scored")])
def test_every_scored_row_carries_the_raw_answer_text(runs, campaign, table):
    state, outs = runs
    folder = state / campaign
    scored = pl.read_parquet(folder / f"{table}.parquet")
    responses = pl.read_parquet(folder / "model_responses.parquet").select(
        pl.col("key").alias("request_key"), pl.col("text"))
    key_col, raw_col = (("request_key", "raw") if "request_key" in scored.columns
                        else ("extra.request_key", "extra.raw"))
    assert scored.height > 0 and scored.schema[raw_col] == pl.String
    joined = scored.select(pl.col(key_col).alias("request_key"), pl.col(raw_col).alias("raw")).join(
        responses, on="request_key", how="left")
    assert joined["text"].null_count() == 0  # every scored row's request has a stored answer
    assert joined["raw"].to_list() == joined["text"].to_list()  # ... and the export carries it verbatim
    # the CSV too (read with ids as text)
    csv = pl.read_csv(folder / f"{table}.csv", infer_schema_length=None)
    assert csv[raw_col].to_list() == scored[raw_col].to_list()


def test_reports_and_summaries_say_the_figures_describe_the_simulator(runs):
    state, outs = runs
    for name, (code, out) in outs.items():
        assert code == 0, out
        assert "NOTE: Simulated answers:" in out and "describes the simulator" in out, out
    assert "fake-gpt answered from geoagent's simulator" in outs["gh"][1]
    assert "sim answered from geoagent's simulator" in outs["gv"][1]
    # GeoHint says why its echo figure is what it is (the simulator's echo rule; session 12: "echo rate" matched
    # only by accident, in the undetermined-regime note of answers that did not geocode)
    assert "repeats the hinted place with probability" in outs["gh"][1]
    assert "Its echo and hit rates say nothing about a model" in outs["gh"][1]
    gh_md = (state / "gh-fake" / "report" / "report.md").read_text(encoding="utf-8")
    assert "**Simulated answers: fake-gpt answered from geoagent's simulator" in gh_md
    assert gh_md.index("Simulated answers") < gh_md.index("scored responses")  # at the top, not in a footnote
    gv_md = (state / "gv-sim" / "report" / "geoverify_table.md").read_text(encoding="utf-8")
    assert "**Simulated answers: sim answered from geoagent's simulator" in gv_md
    gv_txt = (state / "gv-sim" / "report" / "geoverify_table.txt").read_text(encoding="utf-8")
    assert "Simulated answers: sim" in gv_txt


def test_readme_says_what_raw_is():
    text = " ".join(docs_text().split())
    assert "`raw`" in text and "model_responses" in text and "request_key" in text
    assert "the model's answer text, verbatim" in text
