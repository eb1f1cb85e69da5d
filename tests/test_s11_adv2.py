"""Adversarial review s11 (branch s11-adv2): each test failed on main before its fix.

1. An Azure deployment name that is a dot segment (``.``, ``..``) or holds a control character: quoting keeps
   ``/``, ``?``, ``#`` inside the path segment, but ``.``/``..`` are unreserved, so the HTTP library resolved them
   and the call went to ``/openai/chat/completions`` (``..``) or ``/openai/deployments/chat/completions`` (``.``),
   not to a deployment; now refused at load (naming the key) and by the provider before anything is sent.
2. A ``Retry-After`` of ``inf`` (or ``1e400``, ``Infinity``) paused the key forever (``paused_until`` = inf), and
   ``retry-after-ms`` read Python-only number forms (``1_000``, non-ASCII digits) as milliseconds.
"""

from __future__ import annotations

import asyncio
import time

import pytest

from test_providers_azure_classic import FAST, KEY, RESOURCE, VERSION, _generate, _load, _paid, _req

from geoagent.config import ConfigError
from geoagent.providers.errors import UnsupportedRequest
from geoagent.runtime.http import HostPolicy, HttpClient, RetriesExhausted, host_key, retry_after_of
from geoagent.sandbox import echo
from geoagent.sandbox.server import serve


# --- 1. Azure deployment names that are no path segment ------------------------------------------------------
@pytest.mark.parametrize("dep", ["..", ".", "geo\n4o", "geo\t4o", "geo\x7f"])
def test_a_deployment_name_that_would_leave_its_path_segment_is_refused_at_load(dep):
    with pytest.raises(ConfigError) as err:
        _load([_paid("a", dep, base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION)])
    assert "models[0].model" in str(err.value) or "models[0]: " in str(err.value), str(err.value)
    assert "deployment" in str(err.value)


@pytest.mark.parametrize("dep", ["..", "."])
def test_the_provider_refuses_a_dot_segment_deployment_before_sending(dep):
    """Before: ``..`` was sent to ``/openai/chat/completions`` (the fake answered 404, Azure would too)."""
    from geoagent.providers import ProviderSettings, make_provider
    from geoagent.sandbox import llm_openai

    async def go():
        app = llm_openai.make_app(seed=1, api_keys=(KEY,), deployments={dep: "gpt-4o-mini"})
        async with serve(app) as url, HttpClient(default_policy=FAST) as http:
            prov = make_provider(ProviderSettings(kind="openai", model=dep, base_url=url, api_key=KEY,
                                                  api_version=VERSION), http)
            with pytest.raises(UnsupportedRequest) as ei:
                await prov.generate(_req(dep))
            return ei.value, list(app["calls"])

    err, calls = asyncio.run(go())
    assert calls == [] and "dot segment" in str(err)


@pytest.mark.parametrize("dep", ["a/../b", "geo?x=1", "geo#f", "géo", "a b", "a%2Fb"])
def test_other_odd_deployment_names_stay_inside_their_path_segment(dep):
    _load([_paid("a", dep, base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION)])
    out, (url, body, headers), calls, _ = asyncio.run(_generate({"model": dep, "api_version": VERSION}, _req(dep),
                                                                deployments={dep: "gpt-4o-mini"}))
    assert not isinstance(out, Exception), out
    assert [c["status"] for c in calls] == [200]          # the fake found the deployment by its full name
    assert url.count("?") == 1 and "#" not in url and url.endswith(f"/chat/completions?api-version={VERSION}")


# --- 2. Retry-After / retry-after-ms values that are no number of seconds -------------------------------------
P = HostPolicy(rate=1000, period_s=1.0, concurrency=4, max_attempts=1, backoff_base_s=0.005, backoff_max_s=0.02,
               timeout_s=5.0)


async def _pause_after_429(retry_after: str) -> tuple[float | None, float]:
    async with serve(echo.make_app()) as base, HttpClient(default_policy=P) as http:
        with pytest.raises(RetriesExhausted) as ei:
            await http.request("GET", base + "/status/429", params={"retry_after": retry_after})
        return ei.value.retry_after_s, http.paused_until(host_key(base)) - time.monotonic()


@pytest.mark.parametrize("value", ["inf", "Infinity", "1e400", "-inf", "9" * 400])
def test_a_non_finite_retry_after_pauses_nobody_forever(value):
    """Before: ``inf`` seconds: the host's ``paused_until`` became inf, every later request to it waited forever
    (and a shared board would have carried it to the campaign's other processes)."""
    ra, left = asyncio.run(_pause_after_429(value))
    assert ra is None or ra < 1e6, ra
    assert left < 1.0, left


@pytest.mark.parametrize("headers,want", [
    ({"retry-after-ms": "1_000", "Retry-After": "2"}, 2.0),      # Python's digit grouping is no HTTP number
    ({"retry-after-ms": "\u0663", "Retry-After": "2"}, 2.0),      # ARABIC-INDIC DIGIT THREE
    ({"retry-after-ms": "inf", "Retry-After": "inf"}, None),
    ({"Retry-After": "\u0663"}, None),
    ({"retry-after-ms": "250", "Retry-After": "1"}, 0.25),        # held: the ordinary case
    ({"retry-after-ms": " 1500 "}, 1.5),
    ({"Retry-After": "2.5"}, 2.5),
    ({"Retry-After": "-5"}, 0.0),                                 # as before: a negative delay is no delay
])
def test_retry_after_reads_only_ascii_finite_numbers(headers, want):
    assert retry_after_of(headers) == want


# --- 3. the dry run's photo size from a crawl folder whose manifest.json is damaged ---------------------------
@pytest.mark.parametrize("body", ['{"kind": "crawl", "runs": [], "config": [1]}',
                                  '{"kind": "crawl", "runs": [], "config": {"crawl": "x"}}',
                                  '{"kind": "crawl", "runs": [], "config": {"crawl": {"fetcher": ["thumb_256_url"]}}}'])
def test_a_crawl_manifest_of_another_shape_gives_the_default_size_and_says_why(tmp_path, body):
    """Before: AttributeError ('list' object has no attribute 'get') out of the dry run's estimate."""
    from geoagent.image_files import expected_photo

    (tmp_path / "manifest.json").write_text(body, encoding="utf-8")
    size, basis = expected_photo(tmp_path)
    assert size == (1024, 768)
    assert "manifest.json" in basis and str(tmp_path) in basis, basis


def test_a_crawl_manifest_naming_an_unknown_thumb_field_is_not_called_the_default(tmp_path):
    """Before: a crawl whose manifest names a thumb_field with no known size (hand-edited, or a later release of
    the code) was said to fetch "thumb_1024_url, the crawl's default"."""
    from geoagent.image_files import expected_photo

    (tmp_path / "manifest.json").write_text(
        '{"kind": "crawl", "runs": [], "config": {"crawl": {"fetcher": {"thumb_field": "thumb_4096_url"}}}}',
        encoding="utf-8")
    size, basis = expected_photo(tmp_path)
    assert size == (1024, 768)
    assert "thumb_4096_url" in basis and "default" not in basis, basis


def test_a_folder_without_a_manifest_keeps_the_default_wording(tmp_path):
    from geoagent.image_files import DEFAULT_PHOTO_BASIS, expected_photo

    assert expected_photo(tmp_path) == ((1024, 768), DEFAULT_PHOTO_BASIS)
    (tmp_path / "manifest.json").write_text('{"kind": "geohint", "runs": []}', encoding="utf-8")
    assert expected_photo(tmp_path) == ((1024, 768), DEFAULT_PHOTO_BASIS)


# --- 4. one spelling of a boolean across the crawl's CSV files ----------------------------------------------
def test_sites_csv_spells_coverage_lower_bound_as_city_pool_and_images_do(tmp_path):
    """The crawl's CSV flags are written ``True``/``False`` (the release's form: ``city_pool.csv``'s ``ok_*`` and
    ``eligible``, ``images.csv``/``image_audit.csv``'s ``usable``, and ``city_pool.csv``'s ``coverage_lower_bound``).
    Before: ``sites.csv``'s ``coverage_lower_bound`` alone was ``true``/``false``. Polars and pandas infer both, but a
    reader comparing text (``csv.DictReader``, ``row[...] == "True"`` as the crawl's own readers of ``usable`` and
    ``eligible`` do) got a different answer for the same flag in the two files. The release's columns are unchanged."""
    import csv

    import polars as pl

    from geoagent.crawl.sampler import RELEASE_SITES_COLUMNS, write_sites_csv
    from geoagent.crawl.screener import write_city_pool_csv

    site = {"site": "s1", "city": "X", "country": "NL", "continent": "EU", "landmark": "L", "qid": "Q1",
            "wd_type": "museum", "lat": 1.0, "lon": 2.0, "sitelinks": 3, "sv_perspective": 40,
            "selection_method": "algorithm"}
    write_sites_csv([dict(site, coverage_lower_bound=True), dict(site, site="s2", coverage_lower_bound=False),
                     dict(site, site="s3")], tmp_path / "sites.csv")
    write_city_pool_csv([{"city": "X", "coverage_lower_bound": True, "eligible": True},
                         {"city": "Y", "coverage_lower_bound": False, "eligible": False}], tmp_path / "city_pool.csv")
    with open(tmp_path / "sites.csv", newline="", encoding="utf-8") as fh:
        sites = list(csv.DictReader(fh))
    with open(tmp_path / "city_pool.csv", newline="", encoding="utf-8") as fh:
        pool = list(csv.DictReader(fh))
    assert [r["coverage_lower_bound"] for r in pool] == ["True", "False"]
    assert [r["coverage_lower_bound"] for r in sites] == ["True", "False", ""]
    assert list(sites[0])[:len(RELEASE_SITES_COLUMNS)] == list(RELEASE_SITES_COLUMNS)
    df = pl.read_csv(tmp_path / "sites.csv")
    assert df.schema["coverage_lower_bound"] == pl.Boolean and df["coverage_lower_bound"].to_list() == [True, False, None]


# --- 5. GeoVerify: a replayed recorded model reported under a name another [[models]] entry has -------------
def _mixed_replay_cfg(tmp_path, release_dir, extra_models):
    import tomllib

    from geoagent.config import config_from_dict, packaged_config_path

    d = tomllib.loads(packaged_config_path("geocontext_replay").read_text(encoding="utf-8"))
    d["campaign"]["name"] = "gv-mixed-names"
    d["paths"] = {"state": str(tmp_path / "state"), "queues": str(tmp_path / "queues")}
    d["models"][0]["replay"]["path"] = str(release_dir / "verify_raw_sample.jsonl")
    d["models"] += extra_models
    return config_from_dict(d)


@pytest.mark.parametrize("extra", [
    [{"name": "claude-haiku-4-5", "provider": "simulated", "model": "claude-haiku-4-5"}],
    [{"name": "second-replay", "provider": "replay", "model": "recorded",
      "replay": {"path": "SAME", "key_field": "replay_key", "record_key_fields": ["trial_id", "model"],
                 "text_field": "raw"}}],
])
def test_a_recorded_name_that_another_model_also_reports_under_is_refused_at_plan(tmp_path, release_dir, extra):
    """``model = "recorded"`` replays every recorded model and reports each under its recorded name
    (``claude-haiku-4-5``, ...). Before: a ``[[models]]`` entry of that name (here a simulated one), or a second
    replay-every model, was planned too; the report's GeoVerify aggregator counts one answer per (trial, model name),
    so the two sources' answers were merged into one column (replayed answers under a column the report called
    simulated; which of two answers to one trial counted depended on store order) while the export marked every
    row scored. Now the plan refuses, naming both entries."""
    from geoagent.geoverify.plan import plan_campaign

    for m in extra:
        if m.get("replay", {}).get("path") == "SAME":
            m["replay"]["path"] = str(release_dir / "verify_raw_sample.jsonl")
    cfg = _mixed_replay_cfg(tmp_path, release_dir, extra)
    with pytest.raises(ValueError) as err:
        plan_campaign(cfg, store_data=False)
    text = str(err.value)
    assert "claude-haiku-4-5" in text and "release-replay" in text and extra[0]["name"] in text, text


def test_a_replay_of_one_recorded_model_beside_a_live_model_of_another_name_is_planned(tmp_path, release_dir):
    from geoagent.geoverify.plan import plan_campaign

    cfg = _mixed_replay_cfg(tmp_path, release_dir, [{"name": "sim", "provider": "simulated", "model": "sim"}])
    plan = plan_campaign(cfg, store_data=False)
    assert set(plan.per_model) == {"release-replay", "sim"}


# --- 6. a base_url with a query or a fragment: the API path was appended after it --------------------------
@pytest.mark.parametrize("base_url", ["https://geo-res.openai.azure.com?x=1", "https://geo-res.openai.azure.com#frag",
                                      "https://geo-res.openai.azure.com/?a=b", "https://geo-res.openai.azure.com/#"])
@pytest.mark.parametrize("classic", [True, False])
def test_a_base_url_with_a_query_or_fragment_is_refused_at_load(base_url, classic):
    """Every provider appends its route to ``base_url`` (``/chat/completions``, the classic
    ``/openai/deployments/<model>/chat/completions?api-version=...``, ``/v1/messages``). Before: such a base_url
    loaded, and the route landed inside the query (``...azure.com?x=1/openai/deployments/...``) or the fragment,
    which is never sent (a POST to the resource's root). The message does not repeat the URL."""
    kw = {"api_version": VERSION} if classic else {}
    with pytest.raises(ConfigError) as err:
        _load([_paid("a", "geo-4o", base_url=base_url, api_key_env="AZURE_OPENAI_API_KEY", **kw)])
    text = str(err.value)
    assert "models[0].base_url" in text and "query" in text and "fragment" in text, text
    assert "x=1" not in text and "frag" not in text.replace("fragment", "")


def test_a_base_url_with_a_path_prefix_or_port_still_loads():
    for url in ("https://geo-res.openai.azure.com:443", "https://apim.example.org/my%20proxy"):
        _load([_paid("a", "geo-4o", base_url=url, api_key_env="AZURE_OPENAI_API_KEY", api_version=VERSION)])


# --- 7. what an empty `replayed` means, as the export's note and README say it ------------------------------
def test_replayed_of_a_model_the_config_no_longer_names_comes_from_its_recorded_request(tmp_path):
    """A row of a model the config no longer names, whose stored response recorded its provider, gets ``replayed``
    from that record (here True: it was a replay model's answer). Before: the code did so, but the note beside the
    exports (and README) said such a row's ``replayed`` was empty, so a reader took True/False there for a bug, or
    an empty cell for "model removed" when it means "not known"."""
    from test_s11_export import _gv_cfg

    from geoagent.geoverify.campaign import GeoVerifyCampaign
    from geoagent.geoverify.parse import parse_verdict
    from geoagent.geoverify.score import scored_row
    from geoagent.geoverify.stages import SCORED_TABLE
    from geoagent.providers.base import ModelResponse, Usage
    from geoagent.runtime.export import EXPORT_NOTE_FILE

    import polars as pl

    rec = tmp_path / "answers.jsonl"
    rec.write_text('{"key": "t0|rp", "raw": "yes"}\n', encoding="utf-8")
    cfg = _gv_cfg(tmp_path, "gv-gone", [{"name": "rp", "provider": "replay", "model": "recorded",
                                          "replay": {"path": str(rec)}}])
    rows = []
    for i, model in enumerate(("rp", "gone-replay", "gone-unknown")):
        r = scored_row({"trial_id": f"t{i}", "site": "s", "arm": "main", "band": "signal", "truth": "yes"}, model,
                       parse_verdict('{"verdict": "yes"}'), finish_reason="stop")
        rows.append((f"t{i}|{model}", {**r, "request_key": f"rk{i}"}))
    from geoagent.runtime.store import open_campaign_state

    with open_campaign_state(cfg.name, root=tmp_path / "state", cap_usd=0.0) as st:
        st.store.put_results(SCORED_TABLE, rows)
        resp = ModelResponse(text='{"verdict": "yes"}', usage=Usage(10, 5), finish_reason="stop")
        st.store.put("rk1", {"model_name": "gone-replay", "provider": "replay"}, resp, None)
        GeoVerifyCampaign().export(cfg, st.store)
    df = pl.read_parquet(cfg.state_dir() / "geoverify_scored.parquet")
    assert dict(zip(df["model"], df["replayed"])) == {"rp": True, "gone-replay": True, "gone-unknown": None}
    note = (cfg.state_dir() / EXPORT_NOTE_FILE).read_text(encoding="utf-8")
    assert "no longer names" not in note, note
    assert "empty where" in note and "not known" in note, note


# --- 8. GeoHint: a forced_chain answer without a hint distance is in Table 11 ---------------------------------
def test_a_forced_chain_answer_without_hint_distance_says_table_11_counts_it(tmp_path):
    """Table 11 (the evidence checklist) counts every forced_chain answer, those without a hint distance too (since
    5d363e5; the report's header says so since 5eadb08). Before: the export said such a row was left out (``scored``
    False, ``extra.left_out`` "... no hint distance") with no word of Table 11, and README said "left out of every
    table", so a reader rebuilding Table 11 from ``filter(scored)`` missed them. A forced-condition row keeps the
    plain reason."""
    from test_cutoff_loose_ends import _cfg, _payload

    from geoagent.geohint.aggregate import NO_HINT_DISTANCE
    from geoagent.geohint.campaign import GeoHintCampaign
    from geoagent.geohint.stages import SCORED_TABLE, score_located
    from geoagent.runtime.store import open_campaign_state

    import polars as pl

    def no_dist(i: int, condition: str) -> dict:
        p = _payload(i, finish_reason="stop", parsed=True, hit=True)
        p["meta"] = {**p["meta"], "condition": condition, "schema": condition, "dist_km": None, "band": None,
                     "tier": None}
        return score_located(f"k{i}", p).to_json()

    cfg = _cfg(tmp_path)
    with open_campaign_state("gh-na", root=tmp_path / "state", cap_usd=0.0) as st:
        st.store.put_result(SCORED_TABLE, "k0", no_dist(0, "forced_chain"))
        st.store.put_result(SCORED_TABLE, "k1", no_dist(1, "forced"))
        GeoHintCampaign().export(cfg, st.store)
    df = pl.read_parquet(cfg.state_dir() / "geohint_scored.parquet")
    why = dict(zip(df["key"], df["extra.left_out"]))
    assert df["scored"].to_list() == [False, False]
    assert why["k1"] == NO_HINT_DISTANCE
    assert why["k0"].startswith(NO_HINT_DISTANCE) and "Table 11" in why["k0"], why["k0"]


# --- 9. an api_version the regex took but Azure does not serve ------------------------------------------------
@pytest.mark.parametrize("version", ["2024-10-21\n", "\u0662\u0660\u0662\u0664-\u0661\u0660-\u0662\u0661",
                                     "2024-10-21-preview\n"])
def test_an_api_version_with_a_trailing_newline_or_non_ascii_digits_is_refused_at_load(version):
    """Before: ``^\\d{4}-\\d{2}-\\d{2}(?:-preview)?$`` matched a trailing line break (``$`` matches before one) and
    Arabic-Indic digits (``\\d`` is Unicode), so the entry loaded and every call went out with
    ``api-version=2024-10-21%0A``: Azure's 404 "Resource not found" at run time instead of a load error."""
    with pytest.raises(ConfigError) as err:
        _load([_paid("a", "geo-4o", base_url=RESOURCE, api_key_env="AZURE_OPENAI_API_KEY", api_version=version)])
    assert "models[0].api_version" in str(err.value)
