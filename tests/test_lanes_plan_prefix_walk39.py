"""A stopped multi-model run holds about a prefix of each model's plan (walk39 #1).

A GeoHint plan queues an image's baseline unit before its reference points, so a run stopped at the budget cap with
one model holds the no-context answer of every context answer it holds (the paired comparisons). With several
models the model caller's lanes used to defer a task of a full or paced-ahead lane with ``release(delay_s=...)``,
which put it behind every task ready at that moment (SQLite orders ready tasks by ``not_before``, Redis by stream
order), and the lease loop meanwhile walked on through the plan: each model's answers at the stop were scattered
over a stretch of the plan many times their number, and most context answers lacked their image's baseline.

Measured on this test's set-up (session 41): one model 0 to 8 of about 60 context answers without their baseline; two models
of the same host 96 of 128, three 173 of 201. Now such a task is parked (kept leased, in its lane's order) and each
lane takes its parked tasks first (:mod:`geoagent.runtime.worker`, "Lanes"): two models 0 to 4 of about 58, three
3 to 7 of about 93 (five runs). What is left unpaired are calls the cap refused or kept waiting for other calls'
reservations to settle while later ones went (the model caller's own order, not the lanes').

End to end: GeoHint campaigns on the sandbox's OpenAI-compatible fake with prices and a cap that stops them after
a few dozen calls per model; the stored answers' task keys tell each model's baselines and context answers.
"""

from __future__ import annotations

from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import EXIT_BUDGET
from geoagent.runtime.store import open_campaign_state


def _toml(tmp, release_dir, models: tuple[str, ...], cap_usd: float) -> str:
    tables = "".join(f"""
[[models]]
name = "{name}"
provider = "openai"
base_url = "http://openai.sandbox.invalid/v1"
model = "gpt-4o-mini-{name}"
max_output_tokens = 64
price_input_usd_per_mtok = 1.0
price_output_usd_per_mtok = 4.0
concurrency = 4
rate = {{ requests = 40, period_s = 1.0 }}
""" for name in models)
    return f"""
[campaign]
name = "gh-prefix"
kind = "geohint"
seed = 5
contact = "mailto:test@example.org"
[paths]
queues = "{tmp / 'queues'}"
state = "{tmp / 'state'}"
[budget]
cap_usd = {cap_usd}
{tables}
[geohint]
release_dir = "{release_dir}"
conditions = ["baseline", "forced"]
baseline_repeats = 1
images = "synthetic"
images_per_site = 2
n_boot = 0
[geohint.geocoder]
wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"
nominatim_url = "http://nominatim.sandbox.invalid"
"""


def _unpaired(tmp, release_dir, capsys, models: tuple[str, ...], cap_usd: float) -> tuple[int, int]:
    """Run the capped campaign; (context answers, those whose model has no baseline answer of their image)."""
    cfgp = tmp / "gh.toml"
    cfgp.write_text(_toml(tmp, release_dir, models, cap_usd), encoding="utf-8")
    assert main(["run", str(cfgp), "--no-live"]) == EXIT_BUDGET
    capsys.readouterr()
    cfg = load_config(cfgp)
    with open_campaign_state(cfg.name, root=cfg.state_root(), recover=False) as st:
        rows = list(st.store.iter_responses())
    baselines, context = set(), []
    for r in rows:
        # task key gh|<model>|<site>|<image>|<condition>|<reference point qid, or none>|r<repeat>
        _gh, model, _site, image, condition = r["request_meta"]["task_key"].split("|")[:5]
        (baselines.add if condition == "baseline" else context.append)((model, image))
    return len(context), sum(1 for pair in context if pair not in baselines)


def test_one_model_stopped_at_the_cap_keeps_its_pairs(tmp_path, release_dir, capsys):
    context, unpaired = _unpaired(tmp_path, release_dir, capsys, ("a",), 0.06)
    assert context >= 10, context  # stopped after some context answers (the plan has thousands of requests)
    # not always 0 (0 to 8 in nine runs, with lanes or without): near the cap a call whose reservation does not fit
    # beside those in flight waits for them to settle, polling, and a later task may reserve first (the model
    # caller's budget wait is not first-come first-served)
    assert unpaired <= 8, (unpaired, context)


def test_two_models_stopped_at_the_cap_keep_their_pairs(tmp_path, release_dir, capsys):
    context, unpaired = _unpaired(tmp_path, release_dir, capsys, ("a", "c"), 0.12)
    assert context >= 20, context
    # as nearly as concurrency allows: the calls in flight at the stop (4 per model) may leave a few unpaired
    assert unpaired <= 8, (unpaired, context)
