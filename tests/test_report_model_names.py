"""Model names a report cannot hold apart from its own rows, columns or cell separators (session 14).

- GeoHint: a model named "All" gave a second "All" row in Tables 6 and 7 and in the cut-off and unresolved tables,
  indistinguishable from the pooled row (every model together). Refused at plan time.
- GeoVerify: geoverify_table.csv's columns are ``section, row``, then ``<m>, <m>_lo, <m>_hi, <m>_text`` per model
  (and ``pooled``), then ``label``: a model named "gpt_lo" beside "gpt", or "section"/"row"/"label", gave two
  columns of one name. Refused at plan time (as "pooled" is, :func:`geoagent.geoverify.plan.check_report_names`).
- A model name holding "|" split a Markdown table's cells, and "|" separates the request keys' fields that
  missing.csv reads the model back from. A ``[[models]]`` name is a safe file name already (no "|"), but a
  GeoVerify replay model reports each recorded model under its recorded name, read from the release: such a name
  holding "|" is refused at plan time (GeoHint's check refuses it too), and the GeoVerify Markdown table escapes
  "|" in a column header all the same (GeoHint's tables already did).
"""

from __future__ import annotations

import csv
import io
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from geoagent.data.model import BAND_SIGNAL, DECOY_BAND_LABELS
from geoagent.geoverify.aggregate import GeoVerifyAggregator


def _entry(name: str, provider: str = "openai", model: str = "x") -> SimpleNamespace:
    return SimpleNamespace(name=name, provider=provider, model=model)


def _geohint_cfg(*names: str):
    from geoagent.config import config_from_dict

    return config_from_dict({"campaign": {"name": "names-gh", "kind": "geohint", "seed": 1,
                                          "contact": "names@example.org"},
                             "budget": {"cap_usd": 1.0},
                             "models": [{"name": n, "provider": "simulated", "model": "sim-1", "seed": i}
                                        for i, n in enumerate(names)],
                             "geohint": {}})


def test_a_geohint_model_named_all_is_refused_at_plan_time_its_row_read_like_the_pooled_one():
    sys.path.insert(0, str(Path(__file__).parent))
    from _geohint_synth import synth_results

    from geoagent.geohint.aggregate import GeoHintAggregator
    from geoagent.geohint.stages import plan_from_config
    from geoagent.report.geohint import table6

    # the defect: a model named "All" and the pooled row share one label
    agg = GeoHintAggregator()
    agg.add_many(synth_results(seed=2, n_sites=6, models=("All", "m-b"), images_per_site=1, baseline_repeats=1))
    labels = [r[0] for r in table6(agg).rows]
    assert labels.count("All") == 2, labels  # Table 6: the model's row and the pooled row
    # now the plan refuses it, naming the entry and why
    with pytest.raises(ValueError, match=r"\[\[models\]\] entry 'All'.*pooled row.*Tables 6 and 7"):
        plan_from_config(_geohint_cfg("All", "m-b"), {}, [], {})
    # the config refuses "|" in a model name (a safe file name); the plan's check says why too
    from geoagent.geohint.plan import check_report_names

    with pytest.raises(ValueError, match=r"\[\[models\]\] entry 'a\|b' holds '\|'"):
        check_report_names(["m-b", "a|b"])
    # names that merely resemble it plan
    messages, _ = plan_from_config(_geohint_cfg("all", "All_models", "m-b"), {}, [], {})
    assert messages == []


def test_geoverify_model_names_that_are_csv_columns_or_hold_a_pipe_are_refused():
    from geoagent.geoverify.plan import check_report_names

    for names, entry, why in [
        (("gpt", "gpt_lo"), "gpt_lo", "derives from the model column 'gpt'"),
        (("gpt_text", "gpt"), "gpt_text", "derives from the model column 'gpt'"),
        (("pooled_hi",), "pooled_hi", "derives from the model column 'pooled'"),
        (("section", "b"), "section", "own column 'section'"),
        (("row",), "row", "own column 'row'"),
        (("label",), "label", "own column 'label'"),
        (("a|b", "c"), "a|b", "holds '|'"),
    ]:
        with pytest.raises(ValueError, match=r"\[\[models\]\] entry " + repr(entry).replace("|", r"\|")) as exc:
            check_report_names([_entry(n) for n in names], [])
        assert why in str(exc.value), str(exc.value)
    # a replayed recording under such a name: the replay entry is named
    with pytest.raises(ValueError, match=r"entry 'rec' would report under the model name 'm_lo'"):
        check_report_names([_entry("rec", "replay", "recorded")], ["m", "m_lo"])
    # names that merely resemble them are fine
    check_report_names([_entry(n) for n in ("gpt_lo", "gpt_low", "Section", "rows", "gpt-lo")], [])


def _vrow(tid: str, verdict: str, model: str, band: str = BAND_SIGNAL, site: str = "s1") -> dict:
    truth = "yes" if band == BAND_SIGNAL else "no"
    return {"trial_id": tid, "model": model, "site": site, "arm": "main", "band": band, "truth": truth,
            "verdict": verdict, "conf": 0.9}


def _scores(models):
    agg = GeoVerifyAggregator()
    agg.update([_vrow(f"{m}-{i}", v, m, band) for m in models
                for i, (v, band) in enumerate([("yes", BAND_SIGNAL), ("no", BAND_SIGNAL),
                                               ("no", DECOY_BAND_LABELS[0]), ("yes", DECOY_BAND_LABELS[-1])])])
    return agg.scores()


def test_geoverify_table_columns_of_the_names_a_plan_accepts_are_unique_and_the_markdown_escapes_a_pipe():
    from geoagent.report.geoverify import render_csv, render_markdown

    # the defect the plan now refuses: "gpt" and "gpt_lo" gave two columns named gpt_lo
    header = next(csv.reader(io.StringIO(render_csv(_scores(["gpt", "gpt_lo"])))))
    assert header.count("gpt_lo") == 2, header
    header = next(csv.reader(io.StringIO(render_csv(_scores(["gpt", "gpt_low", "Section"])))))
    assert len(header) == len(set(header)), header
    # a "|" in a column header (scores built outside a plan) stays in its own cell
    md = render_markdown(_scores(["a|b", "c"]))
    table = [ln for ln in md.splitlines() if ln.startswith("|")]
    cells = [len(ln.replace("\\|", "").split("|")) for ln in table]
    assert len(set(cells)) == 1, table[:3]
    assert "a\\|b" in table[0], table[0]
