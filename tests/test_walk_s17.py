"""A new user's walk from README.md through the docs/ files after the README split (session 17), one test per
point found.

1. docs/campaigns.md said of a GeoHint campaign with the public geocoders that "the dry run does not warn" about
   an offline machine; since session 16 the dry run prints a ``geocoding:`` line naming the public hosts.
2. docs/configuration.md's Azure paragraph said "no images as above" of the reasoning-model rules, which the
   split left in docs/campaigns.md ("Reasoning and thinking models"); cross-file pointers must name a phrase
   their file holds, and a pointer "above"/"below" a phrase on the right side of it in the same file.
3. README.md's first hour sent readers to docs/configuration.md for "every key of a campaign file"; that file
   gives the keys "In short" and names example.toml for every key.
5. docs/campaigns.md said the model caller leases "up to 1.5 x each model's concurrency"; that is the rule of
   several models (lanes): one model leases its concurrency plus min(32, concurrency) ahead (``status`` showed
   ``leased 64`` for my_verify.toml's concurrency 32).
4. docs/campaigns.md's "Your own campaign" had no GeoHint file: a new user pieced one together from three
   paragraphs of "From a crawl to a campaign". Its GeoHint example is run here as written, after the demo.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import anyio
import orjson
from aiohttp import web

from _model_harness import generic_campaign, model_table
from geoagent.cli import main
from geoagent.config import load_config
from geoagent.engine import run_campaign
from geoagent.sandbox.llm_common import add_latency
from geoagent.sandbox.llm_openai import make_app
from geoagent.sandbox.server import serve
from _docs import DOCS_DIR, README, doc_paths, docs_text

REPO = Path(__file__).resolve().parents[1]
SANDBOX_HINT = REPO / "geoagent" / "configs" / "geohint_sandbox.toml"
URLS = ('wikidata_url = "http://wikidata.sandbox.invalid/w/api.php"\n'
        'nominatim_url = "http://nominatim.sandbox.invalid"\n')


def _flat(text: str) -> str:
    return " ".join(text.split())


# -- 1. the GeoHint dry run's geocoding line, as the docs quote it ------------------------------------------


def test_docs_quote_the_geohint_dry_run_geocoding_line(isolated_roots, release_dir, capsys):
    flat = _flat(docs_text())
    assert "the dry run does not warn" not in flat
    m = re.search(r"`(geocoding: every answer is geocoded through [^`]*?)(?: ?\.\.\.)?\)?`", flat)
    assert m, "the docs do not quote the GeoHint dry run's geocoding line"
    quoted = m.group(1)
    text = SANDBOX_HINT.read_text(encoding="utf-8")
    assert text.count(URLS) == 1
    p = isolated_roots / "hint.toml"
    p.write_text(text.replace(URLS, ""), encoding="utf-8")
    assert main(["run", str(p), "--simulate", "--no-live"]) == 0
    out = capsys.readouterr()
    assert quoted in _flat(out.out + out.err), (quoted, out.out[-2000:])


# -- 2. pointers between the docs files ----------------------------------------------------------------------

#: ``"Phrase" in [Title](file.md)``: a passage of another docs file
CROSS = re.compile(r'"([^"\n]{3,80})" in \[([^\]\n]+)\]\(([\w.-]+\.md)\)')
#: ``"Phrase" above`` / ``"Phrase" below``: a passage of the same file
SAME = re.compile(r'"([A-Z][^"\n]{3,80})" (above|below)\b')


def _pointer_problems(files: dict[str, str]) -> list[str]:
    """Each pointer of :data:`CROSS` or :data:`SAME` in ``files`` (name -> Markdown text, all in one folder)
    whose phrase is not where it says (spaces and line breaks compared as one space), or whose link title is not
    the H1 of the file it links."""
    flat = {name: _flat(text) for name, text in files.items()}
    wrong = []
    for name, text in flat.items():
        for m in CROSS.finditer(text):
            phrase, title, target = m.groups()
            if target not in flat:
                wrong.append(f"{name}: {target!r} is no docs file")
                continue
            if phrase not in flat[target]:
                wrong.append(f"{name}: {phrase!r} not in {target}")
            h1 = files[target].splitlines()[0]
            if h1 != f"# {title}":
                wrong.append(f"{name}: [{title}]({target}) but {target}'s title is {h1!r}")
        for m in SAME.finditer(text):
            phrase, side = m.groups()
            here = m.start()
            others = [i.start() for i in re.finditer(re.escape(phrase), text) if i.start() != here + 1]
            ok = any(i < here for i in others) if side == "above" else any(i > here for i in others)
            if not ok:
                wrong.append(f"{name}: {phrase!r} {side}, not found {side} it in {name}")
    return wrong


def test_pointer_check_finds_a_phrase_moved_to_another_file():
    files = {
        "a.md": '# Alpha\n\nsee "Tasks no longer planned" below; "Workers" in [Beta](b.md).\n\n'
                "Tasks no longer planned. ...\n",
        "b.md": "# Beta\n\n* **Workers**: ...\n",
    }
    assert _pointer_problems(files) == []
    files["a.md"] = files["a.md"].replace("Tasks no longer planned. ...", "")  # moved away by a split
    files["b.md"] = files["b.md"].replace("Workers", "Stages")
    assert _pointer_problems(files) == [
        "a.md: 'Workers' not in b.md",
        "a.md: 'Tasks no longer planned' below, not found below it in a.md",
    ]
    assert _pointer_problems({"a.md": '# A\n"X y z" in [Wrong](b.md)', "b.md": "# B\nX y z"}) == [
        "a.md: [Wrong](b.md) but b.md's title is '# B'"]


def test_every_pointer_between_the_docs_files_names_a_phrase_of_its_file():
    files = {p.name: p.read_text(encoding="utf-8") for p in doc_paths() if p != README}
    assert len(files) == len(list(DOCS_DIR.glob("*.md")))
    assert not _pointer_problems(files), "\n".join(_pointer_problems(files))


def test_configuration_points_to_the_reasoning_rules_in_models():
    text = _flat((DOCS_DIR / "configuration.md").read_text(encoding="utf-8"))
    assert "no images as above" not in text  # "above" was the old README's Running campaigns section
    assert '"Reasoning and thinking models" in [Models and images](models.md)' in text
    assert "Reasoning and thinking models:" in _flat((DOCS_DIR / "models.md").read_text(encoding="utf-8"))


# -- 3. what README's first hour says docs/configuration.md holds -------------------------------------------


def test_readme_does_not_promise_every_key_in_configuration_md():
    readme = _flat(README.read_text(encoding="utf-8"))
    conf = _flat((DOCS_DIR / "configuration.md").read_text(encoding="utf-8"))
    assert "In short:" in conf and "every key: example.toml" in conf  # the file's own account of itself
    assert "every key of a campaign file in [docs/configuration.md]" not in readme
    m = re.search(r"every key[^.]{0,40}\[`geoagent/configs/example\.toml`\]", readme)
    assert m, "README should send 'every key' to example.toml"


# -- 4. the GeoHint example of "Your own campaign", run as written after the demo ---------------------------


def _own_geohint_block() -> str:
    text = (DOCS_DIR / "campaigns.md").read_text(encoding="utf-8")
    m = re.search(r"```toml\n(# my_hint\.toml.*?)```", text[:12000], re.S)
    assert m, "docs/campaigns.md's own GeoHint example (a ```toml block starting '# my_hint.toml') not found"
    return m.group(1)


def test_own_geohint_campaign_example_runs_after_the_demo(tmp_path, tmp_path_factory, capsys, monkeypatch):
    from _fresh_demo import copy_fresh_demo, fresh_demo

    for var in ("GEOAGENT_RELEASE", "GEOAGENT_QUEUES", "GEOAGENT_STATE"):
        monkeypatch.delenv(var, raising=False)
    work = tmp_path / "clone"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "my_hint.toml").write_text(_own_geohint_block(), encoding="utf-8")
    cfg = tomllib.loads((work / "my_hint.toml").read_text(encoding="utf-8"))
    assert cfg["campaign"]["kind"] == "geohint" and cfg["campaign"]["contact"]
    # the demo, finished (exit 0), in this folder: a copy of this test run's one demo (tests/_fresh_demo.py)
    copy_fresh_demo(fresh_demo(tmp_path_factory), work)
    capsys.readouterr()
    assert main(["run", "my_hint.toml", "--simulate"]) == 0
    dry = capsys.readouterr().out
    n = int(re.search(r"planned (\d+) requests", dry).group(1))
    assert "geocoding: every answer is geocoded through" not in dry, dry  # the local fakes: no network needed
    flat = _flat((DOCS_DIR / "campaigns.md").read_text(encoding="utf-8"))
    assert f"then plan {n} requests" in flat, n
    assert main(["run", "my_hint.toml", "--no-live"]) == 0
    out = capsys.readouterr().out
    assert "campaign my-hint: complete" in out and f"planned {n} requests" in out, out
    assert f"this run: {n} new model calls" in out and "placeholder" not in out, out
    by_condition = re.search(r"plan: \d+ requests by condition \(([^)]*)\)", out).group(1)
    assert by_condition in flat, by_condition


# -- 5. how many tasks one model's run leases, as the docs say ----------------------------------------------

KEY = "local-" "walk-s17"


def test_one_model_leases_its_concurrency_plus_the_lease_ahead_as_documented(tmp_path, monkeypatch):
    flat = _flat((DOCS_DIR / "campaigns.md").read_text(encoding="utf-8"))
    assert ("a campaign of one model has no lanes, and leases up to its `concurrency` plus min(32, "
            "`concurrency`) ahead") in flat
    monkeypatch.setenv("WALK_KEY", KEY)
    app = add_latency(make_app(api_keys=[KEY]), 0.3)
    live = {"n": 0, "peak": 0}

    @web.middleware
    async def in_flight(request, handler):
        live["n"] += 1
        live["peak"] = max(live["peak"], live["n"])
        try:
            return await handler(request)
        finally:
            live["n"] -= 1

    app.middlewares.insert(0, in_flight)

    async def go():
        async with serve(app) as base:
            models = model_table("a", base_url=base, key_var="WALK_KEY", model="gpt-a", concurrency=4)
            cfg = load_config(generic_campaign(tmp_path, name="one", n=40, cap_usd=5.0, models=models))
            return await run_campaign(cfg, live=False, handle_signals=False, export=False)

    outcome = anyio.run(go)
    assert outcome.status == "complete"
    assert live["peak"] == 4, live  # the concurrency holds, and is reached
    recs = [orjson.loads(x) for x in (tmp_path / "state" / "one" / "progress.jsonl").read_bytes().splitlines()]
    leased = max(s["in_flight"] for r in recs for s in r.get("stages", []) if s["stage"] == "model_caller")
    assert 6 < leased <= 8, leased  # past 1.5 x 4 (the several-models rule), at most 4 + min(32, 4)
