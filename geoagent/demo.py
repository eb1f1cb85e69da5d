"""``python run.py demo``: the embedded default, a small complete run of the whole project, offline.

What it does (every step is the code path of a real campaign; only the URLs point at local fakes):

1. starts, in this process on 127.0.0.1, per campaign the fakes its config names on ``*.sandbox.invalid``
   hosts (:mod:`geoagent.sandbox.launch`): for the crawl the sandbox world's Overpass, WDQS, pageviews and
   Mapillary fakes (:mod:`geoagent.sandbox.city`, serving :func:`demo_world`), an OpenAI-compatible model server
   (:mod:`geoagent.sandbox.llm_openai`, answering through the simulated responders) and, for GeoHint, the
   Wikidata and Nominatim fakes, whose gazetteer is the sandbox world's places
   (:func:`geoagent.integrate.gazetteer_from_world`);
2. runs the **crawl** campaign ``demo-crawl`` (``configs/demo_crawl.toml``): screen the candidate cities,
   sample sites, fetch and audit images, rate reference points, build context ladders; the two auditors
   are models behind the OpenAI-compatible fake (real HTTP path, ledger with illustrative prices);
3. builds GeoVerify trials from the crawled images and rated candidates (signal < 150 m, five decoy bands,
   mismatched-image and blank-image control arms) into the crawl's release-form folder
   (:func:`geoagent.integrate.write_verify_trials`) and runs the **GeoVerify** campaign ``demo-geoverify``
   with two models (``configs/demo_geoverify.toml``);
4. runs the **GeoHint** campaign ``demo-geohint`` on the crawled sites, images and ladders, with the
   geocoder asking the local Wikidata and Nominatim fakes (``configs/demo_geohint.toml``);
5. prints a summary: crawl counts per stage, the GeoVerify table, GeoHint Table 1 (each with a legend of
   its terms), the terms of the campaign lines printed above it (:func:`summary_terms`), spend against the
   cap of each campaign, where the reports are and where the filled-in configs are
   (``state/demo-configs/``, :func:`write_demo_config`: ``status``, ``dead`` and ``export`` work on them).

The sandbox world is :func:`geoagent.sandbox.city.build_world` ("Sandbox City" admitted, "Sprawl Town"
rejected by the screener) plus a copy of Sandbox City moved to another continent ("Mirror Bay", see
:func:`demo_world`), so the mismatched-image control arm has images from another continent to show.

Data go to ``queues/`` and ``state/`` of the working directory (or ``$GEOAGENT_QUEUES`` /
``$GEOAGENT_STATE``), or under ``--workdir DIR``. Re-running resumes: finished work is found in the
queues and stored responses, so a second run makes no model call.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import dataclasses
import os
import sys
import time
import tomllib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from geoagent import constants as C
from geoagent.textfmt import mapping_text

#: seed of the sandbox world (the fake model servers answer with the campaign seed)
WORLD_SEED = 0
#: the mirrored city (same layout as Sandbox City, another continent; longitude shift keeps every distance)
MIRROR = {"city": "Mirror Bay", "country": "MB", "continent": "AS", "dlon_deg": 100.0, "id_offset": 1_000_000}
#: the demo's own variable holding the sandbox Mapillary token (any ``MLY|...`` value passes the fake)
MAPILLARY_TOKEN_ENV = "GEOAGENT_DEMO_MAPILLARY_TOKEN"
SANDBOX_MAPILLARY_TOKEN = "MLY|sandbox|demo"
#: the crawl template's endpoints: names of the sandbox world's fakes, served by :func:`geoagent.sandbox.launch.launch`
SANDBOX_ENDPOINTS = {"overpass_url": "http://overpass.sandbox.invalid/api", "wdqs_url": "http://wdqs.sandbox.invalid/sparql",
                     "pageviews_url": "http://pageviews.sandbox.invalid", "mapillary_url": "http://mapillary.sandbox.invalid"}
#: host limits for the local fakes ([hosts] table): loopback servers, not the public APIs, whose usage
#: policies stay the defaults of a real run
LOCAL_HOST_POLICY = {"rate": 1000.0, "period_s": 1.0, "concurrency": 8, "max_attempts": 5, "backoff_base_s": 0.02,
                     "backoff_max_s": 0.5, "timeout_s": 20.0}


# --------------------------------------------------------------------------------------------------
# the sandbox world
# --------------------------------------------------------------------------------------------------


#: name words of Mirror Bay, replacing Sandbox City's street words one for one (place names must differ
#: between the cities: the mismatched-image arm claims a place of one city on an image of the other)
_MIRROR_WORDS = ("Lotus", "Bamboo", "Camphor", "Ginkgo", "Peony", "Jade", "Lantern", "Magpie", "Orchid", "Pine",
                 "Crane", "Heron", "Tiger", "Plum", "Cypress", "Lychee", "Mulberry", "Osmanthus", "Sesame", "Teak",
                 "Wisteria", "Azalea", "Camellia", "Saffron", "Kumquat", "Persimmon", "Loquat", "Hibiscus", "Jasmine",
                 "Indigo")


def _mirror_names() -> Any:
    """A function renaming a Sandbox City place name for Mirror Bay (street words swapped; a name without
    one, such as ``12th District``, gets the prefix ``East``)."""
    from geoagent.sandbox.city import _STREETS

    words = dict(zip(_STREETS, _MIRROR_WORDS))
    for i, w in enumerate(_STREETS[len(_MIRROR_WORDS):]):
        words[w] = f"{_MIRROR_WORDS[i % len(_MIRROR_WORDS)]} East"

    def rename(name: str) -> str:
        out = " ".join(words.get(w, w) for w in name.split(" "))
        return out if out != name or not name else f"East {name}"

    return rename


def demo_world(seed: int = WORLD_SEED) -> Any:
    """The sandbox world of :func:`geoagent.sandbox.city.build_world` plus "Mirror Bay".

    Mirror Bay is Sandbox City (its place nodes, entities, images and pageviews within 7 km of the
    centre) shifted by ``MIRROR["dlon_deg"]`` degrees of longitude at the same latitude, so every
    distance inside it is unchanged; QIDs, image ids and node ids are offset so nothing collides, and
    place names get other words (``Birch Museum`` becomes ``Bamboo Museum``), so no claim about a place
    of one city is true of the other. Its continent differs, which gives the GeoVerify mismatched-image
    arm (an image from another continent) something to show.

    Returns
    -------
    geoagent.sandbox.city.SandboxWorld
    """
    from geoagent.geo import haversine_km
    from geoagent.sandbox.city import build_world

    world = build_world(seed)
    centre = world.cities[0]
    c_lat, c_lon = float(centre["lat"]), float(centre["lon"])
    dlon, off = float(MIRROR["dlon_deg"]), int(MIRROR["id_offset"])

    def near(lat: float, lon: float) -> bool:
        return haversine_km(lat, lon, c_lat, c_lon) <= 7.0

    rename = _mirror_names()
    world.cities.append({"city": MIRROR["city"], "country": MIRROR["country"], "continent": MIRROR["continent"],
                         "lat": c_lat, "lon": round(c_lon + dlon, 6)})
    for el in list(world.overpass_elements):
        if near(el["lat"], el["lon"]):
            twin = copy.deepcopy(el)
            twin["id"] = el["id"] + off
            twin["lon"] = el["lon"] + dlon
            twin["tags"]["name"] = rename(el["tags"].get("name", ""))
            world.overpass_elements.append(twin)
    for e in list(world.entities):
        if near(e.lat, e.lon):
            label = rename(e.label)
            title = label.replace(" ", "_") if e.title else None
            if e.title and e.title in world.daily_views:
                world.daily_views[title] = world.daily_views[e.title]
            world.entities.append(dataclasses.replace(e, qid=f"Q{int(e.qid[1:]) + off}", label=label, lon=e.lon + dlon,
                                                      title=title))
    for im in list(world.images):
        if near(im.lat, im.lon):
            world.images.append(dataclasses.replace(
                im, image_id=str(int(im.image_id) + off * 10), lon=im.lon + dlon,
                pattern_seed=None if im.pattern_seed is None else str(int(im.pattern_seed) + off * 10)))
    return world


# --------------------------------------------------------------------------------------------------
# configs
# --------------------------------------------------------------------------------------------------


def _fill(value: Any, values: Mapping[str, str]) -> Any:
    if isinstance(value, str):
        out = value
        for k, v in values.items():
            out = out.replace("{" + k + "}", v)
        return out
    if isinstance(value, list):
        return [_fill(v, values) for v in value]
    if isinstance(value, dict):
        return {k: _fill(v, values) for k, v in value.items()}
    return value


def demo_config(name: str, values: Mapping[str, str], *, hosts: Sequence[str] = (), cities: list[dict] | None = None) -> Any:
    """Load packaged template ``configs/<name>.toml``, fill its ``{placeholders}`` from ``values``, add a
    ``[hosts]`` entry (:data:`LOCAL_HOST_POLICY`) per local fake host and, for the crawl, the cities;
    return the validated :class:`~geoagent.config.CampaignConfig`.

    Raises
    ------
    geoagent.config.ConfigError
        A template value is invalid (names the key).
    KeyError
        A placeholder is left unfilled (names it).
    """
    import re

    from geoagent.campaigns import register_all_sections
    from geoagent.config import config_from_dict, packaged_config_path

    register_all_sections()
    path = packaged_config_path(name)
    if path is None:
        raise FileNotFoundError(f"packaged demo config {name}.toml is missing from geoagent/configs/")
    doc = _fill(tomllib.loads(path.read_text(encoding="utf-8")), values)
    left = re.findall(r'"\{([a-z_]+)\}"', repr(doc).replace("'", '"'))
    if left:
        raise KeyError(f"{path}: placeholder(s) {sorted(set(left))} not filled")
    if hosts:
        doc.setdefault("hosts", {}).update({h: dict(LOCAL_HOST_POLICY) for h in hosts})
    if cities is not None:
        doc.setdefault("crawl", {})["cities"] = cities
    return config_from_dict(doc, source=str(path))


#: folder under the demo's state root where it writes the configs it ran, every placeholder filled in
#: (``state/demo-configs/demo_geohint.toml``): ``status``, ``dead`` and ``export`` work on those files
CONFIGS_DIR = C.DEMO_CONFIGS_DIR


def _toml_str(value: str) -> str:
    """``value`` as the inside of a TOML basic string (backslash, quote and control characters escaped)."""
    import json

    return json.dumps(value, ensure_ascii=False)[1:-1]


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return '"' + _toml_str(value) + '"'
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"no TOML form for {type(value).__name__}")


def demo_configs_dir() -> Path:
    """Where the demo writes its filled-in configs: ``<state root>/demo-configs`` (absolute), the state root
    being ``$GEOAGENT_STATE`` or ``state`` of the working directory (``--workdir DIR``: ``DIR/state``)."""
    return (Path(os.environ.get(C.ENV_STATE_ROOT) or C.DEFAULT_STATE_ROOT).expanduser() / CONFIGS_DIR).resolve()


def write_demo_config(name: str, values: Mapping[str, str], folder: Path, *, cities: list[dict] | None = None,
                      check: Callable[[Any], None] | None = None) -> Path:
    """Write packaged template ``configs/<name>.toml`` to ``folder/<name>.toml`` with every ``{placeholder}``
    filled in from ``values``, ``[paths] queues`` and ``state`` set to the absolute roots in use
    (``$GEOAGENT_QUEUES`` / ``$GEOAGENT_STATE`` or ``queues`` / ``state`` here) and, for the crawl, its
    ``[[crawl.cities]]``; return the file's path. The demo runs its campaigns from these files, so
    ``python run.py status|dead|export FILE`` and the manifest see the config the campaign ran with (its URLs
    on ``*.sandbox.invalid``, not the local ports the run's fakes happened to get). Written atomically.

    ``check``: called with the config as it would be written (read from the filled-in text, its ``source`` the
    file's path) before the file is written; what it raises leaves the file as it was (review44b #6e: a template
    edited to another ``tau_m`` was refused by the run after it had overwritten the file of the config the campaign
    ran with). :func:`demo_pipeline` passes :func:`refused_change` there.

    Raises
    ------
    KeyError
        A placeholder is left unfilled (names it).
    FileNotFoundError
        The packaged template is missing.
    geoagent.config.ConfigError
        The filled-in text is no valid config, or ``check`` refused it (the file is not written).
    """
    import re

    from geoagent.config import packaged_config_path

    path = packaged_config_path(name)
    if path is None:
        raise FileNotFoundError(f"packaged demo config {name}.toml is missing from geoagent/configs/")
    lines = path.read_text(encoding="utf-8").splitlines()
    if lines and lines[0].startswith("# TEMPLATE"):  # the template's "not runnable as is" paragraph
        while lines and lines[0].startswith("#") and lines[0].strip() != "#":
            lines.pop(0)
        if lines and lines[0].strip() == "#":
            lines.pop(0)
    text = "\n".join(lines) + "\n"
    for k, v in values.items():
        text = text.replace('"{' + k + '}"', '"' + _toml_str(str(v)) + '"')
    left = re.findall(r'"\{([a-z_]+)\}"', text)
    if left:
        raise KeyError(f"{path}: placeholder(s) {sorted(set(left))} not filled")
    roots = {"queues": Path(os.environ.get(C.ENV_QUEUES_ROOT) or C.DEFAULT_QUEUES_ROOT).expanduser().resolve(),
             "state": Path(os.environ.get(C.ENV_STATE_ROOT) or C.DEFAULT_STATE_ROOT).expanduser().resolve()}
    root_lines = "".join(f'{k} = "{_toml_str(str(v))}"\n' for k, v in roots.items())
    if re.search(r"^\[paths\]\s*$", text, flags=re.M):
        text = re.sub(r"^\[paths\]\s*$\n", lambda m: m.group(0) + root_lines, text, count=1, flags=re.M)
    else:
        text += "\n[paths]\n" + root_lines
    for city in cities or []:
        text += "\n[[crawl.cities]]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in city.items())
    header = (f"# Written by `python run.py demo` from geoagent/configs/{name}.toml, every placeholder filled in: the\n"
              "# config this demo campaign ran with. `python run.py status|dead|export THIS_FILE` work on it.\n#\n")
    out = folder / f"{name}.toml"
    if check is not None:
        from geoagent.config import config_from_dict

        check(config_from_dict(tomllib.loads(header + text), source=str(out)))
    folder.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(header + text, encoding="utf-8")
    os.replace(tmp, out)
    return out


def refused_change(cfg: Any) -> None:
    """Raise what a run of demo config ``cfg`` would be refused for by its campaign kind's check of a change the
    stored work cannot follow (:meth:`geoagent.engine.CampaignKind.check_config_change`: GeoVerify's ``tau_m``), so
    the demo refuses it before writing the file (:func:`write_demo_config`'s ``check``; review44b #6e). Reads only.

    Raises
    ------
    geoagent.config.ConfigError
        The kind's refusal (the CLI exits 2)."""
    from geoagent.engine import load_kind

    load_kind(cfg.campaign.kind).check_config_change(cfg)


# --------------------------------------------------------------------------------------------------
# summary helpers
# --------------------------------------------------------------------------------------------------


def _rows(path: Path) -> list[dict[str, str]]:
    if not path.is_file():
        return []
    with path.open(encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f))


def _lines(path: Path) -> int:
    if not path.is_file():
        return 0
    with path.open("rb") as f:
        return sum(1 for line in f if line.strip())


def crawl_stage_counts(crawl_dir: Path) -> list[tuple[str, str]]:
    """(stage, what it produced) lines from a crawl's output files (release-form folder)."""
    pool = _rows(crawl_dir / "city_pool.csv")
    sites = _rows(crawl_dir / "sites.csv")
    audit = _rows(crawl_dir / "image_audit.csv")
    images = _rows(crawl_dir / "images.csv")
    ladders = sorted((crawl_dir / "ladders").glob("*.csv")) if (crawl_dir / "ladders").is_dir() else []
    points = sum(len(_rows(p)) for p in ladders)
    n_usable = sum(r.get("usable") == "True" for r in images)
    admitted = [r["city"] for r in pool if r.get("eligible") == "True"]
    return [
        ("screen", f"{len(pool)} cities screened, {len(admitted)} admitted ({', '.join(admitted) or 'none'})"),
        ("sample", f"{len(sites)} sites ({', '.join(r['site'] for r in sites)})"),
        ("fetch", f"{len(images)} images kept (spread >= 40 m, bright, de-duplicated)"),
        ("audit", f"{len(audit)} images audited by the vision model, {n_usable} usable"),
        ("rate", f"{_lines(crawl_dir / 'audit_decisions.jsonl')} referenceability decisions, "
                 f"{_lines(crawl_dir / 'audit_sensitive.jsonl')} sensitive-name screenings"),
        ("ladders", f"{len(ladders)} context ladders, {points} reference points"),
    ]


def _spend_line(outcome: Any) -> str:
    from geoagent.status import format_usd

    s = outcome.spend or {}
    new = getattr(outcome, "process_calls", None)
    this_run = "" if new is None else f"; this run: {new} new model call{'' if new == 1 else 's'}"
    # the ledger's figures are the campaign's, over every run of it: say so (a resumed demo pays nothing new)
    return (f"{format_usd(s.get('spent_usd'))} settled + {format_usd(s.get('unknown_usd'))} unknown-outcome of cap "
            f"{format_usd(s.get('cap_usd'))} (all runs: {s.get('calls', 0)} model calls, "
            f"{s.get('input_tokens', 0)} in / {s.get('output_tokens', 0)} out tokens{this_run})")


def geohint_table1_text(cfg: Any) -> str:
    """GeoHint Table 1 of campaign ``cfg`` as terminal text at its natural width (no cell cut), rebuilt from
    its stored scored results as report.md's is: the rows of the recorded plan (:func:`scored_scope` over
    ``plan_keys.tsv``) and the report's bootstrap resamples and seed (:func:`bootstrap_params`), so its
    intervals are table1.csv's; followed by the legend of its terms (without the figure's line: no figure is
    shown here)."""
    from geoagent.geohint.campaign import aggregate_from_store, bootstrap_params, settings_of
    from geoagent.geohint.stages import scored_scope
    from geoagent.report.geohint import default_conditions, legend_for, render_text, table1
    from geoagent.runtime.scope import read_plan_keys
    from geoagent.runtime.backend import open_state

    with open_state(cfg, recover=False) as state:
        s = settings_of(cfg)
        agg = aggregate_from_store(state.store, echo_rule=s.echo_rule, regime_threshold=s.regime_threshold,
                                   scope=scored_scope(read_plan_keys(cfg.state_dir())))
    if not agg.keys:
        return "no scored GeoHint responses\n"
    cond, _ = default_conditions(agg)
    n_boot, seed = bootstrap_params(cfg)
    # the console shows no figure: its terms leave out fig_hit_by_band.png's line (report.md says what it draws)
    return (render_text(table1(agg, condition=cond, n_boot=n_boot, seed=seed).to_rich()) + "Terms:\n"
            + "".join(f"  {t}\n" for t in legend_for(agg.regime_threshold, fig2=None)))


def summary_terms(gv_cfg: Any) -> list[str]:
    """Lines explaining the terms of the campaign summaries the demo prints (``planned``, ``release import``,
    ``d'(nearest)``, ``delta_1``, ``regimes``, ``hit``, ``echo``), naming where the import report is kept."""
    from geoagent.data.store import data_db_path

    db = data_db_path(gv_cfg.name, gv_cfg.state_root())
    return [
        "terms in the campaign lines above:",
        "  planned N requests: units of work the planner queued (model requests for GeoVerify and GeoHint; for",
        "    the crawl, one per candidate city to screen)",
        "  release import: what was read back from the crawl's release-form folder (trials, sites, ladder points),",
        "    and how many rows were malformed; the",
        f"    list of problems is the JSON under key 'import_report' of table 'meta' in {db}",
        "    (sqlite3 that-file \"select json from meta where key='import_report'\")",
        "  H, F, d', c, delta_1: see the terms under the GeoVerify table; d'(nearest) = d' against decoys of the",
        "    nearest band; delta_1 none = no decoy band reaches d' = 1",
        "  GeoHint hit, echo, regimes (legible / illegible): see the terms under GeoHint Table 1",
    ]


@contextlib.contextmanager
def _env(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set environment variables for the duration (None leaves a variable as it is); restore after."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is not None:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# --------------------------------------------------------------------------------------------------
# the run
# --------------------------------------------------------------------------------------------------


async def demo_pipeline(*, live: bool | None = None, out: Any = None, handle_signals: bool = True,
                        resume_cmd: str = "python run.py demo") -> int:
    """Serve the fakes, run crawl -> GeoVerify -> GeoHint, print the summary to ``out``; return the exit code.

    Data roots are the configs' (``queues/``, ``state/``) unless ``$GEOAGENT_QUEUES`` / ``$GEOAGENT_STATE``
    are set (:func:`run_demo` sets them for ``--workdir``). Exit code: 0 when all three campaigns are
    complete, else the first non-zero campaign code (see :mod:`geoagent.engine`).
    """
    from geoagent.engine import EXIT_INTERRUPTED, run_campaign
    from geoagent.runtime.manifest import adopt_sandbox_names
    from geoagent.integrate import gazetteer_from_world, write_verify_trials
    from geoagent.config import load_config
    from geoagent.report.geoverify import TABLE_TXT
    from geoagent.sandbox.responders import load_builtin_responders

    out = out or sys.stdout
    t0 = time.monotonic()
    load_builtin_responders()
    world = demo_world()
    gaz = gazetteer_from_world(world)

    from geoagent.notes import NotesOnce

    # one output: each note (the cut-off definition, a simulated-answers banner, a small-n line) said once across
    # the three campaign summaries and the tables printed after them (geoagent.notes, the summary writer's rule)
    notes = NotesOnce()

    def say(text: str = "") -> None:
        """Print ``text`` (the demo's own lines, the report texts), each note in it said once (``notes``)."""
        print(notes.say(text), file=out, flush=True)

    def say_summary(outcome: Any) -> None:
        """Print a campaign's summary as ``run`` does (:meth:`Outcome.summary_with_this_run`), sharing ``notes``."""
        print(outcome.summary_with_this_run(notes=notes), file=out, flush=True)

    say(f"geoagent demo: {len(world.cities)} candidate cities in the sandbox world; local fakes on 127.0.0.1 "
        "(Overpass, WDQS, pageviews, Mapillary; per campaign an OpenAI-compatible model server, and for "
        "GeoHint Wikidata and Nominatim)")

    # each campaign runs from its template filled in and written to state/demo-configs/ (status, dead and
    # export work on those files); run_campaign serves the fakes the file names on *.sandbox.invalid
    # (geoagent.sandbox.launch), so the manifest records those names, not the fakes' random local ports
    conf_dir = demo_configs_dir()
    # 1. crawl: its endpoints name the sandbox fakes, which launch() serves from demo_world() ------------
    # each written only once its campaign kind would not refuse it (refused_change, review44b #6e), so a refused
    # template leaves the file of the config the campaign ran with as it was
    crawl_path = write_demo_config("demo_crawl", SANDBOX_ENDPOINTS, conf_dir, cities=world.cities,
                                   check=refused_change)
    crawl_cfg = load_config(crawl_path)
    adopt_sandbox_names(crawl_cfg)  # an earlier demo's record of the fakes' loopback ports is no change
    crawl_dir = crawl_cfg.state_dir()
    images_dir = crawl_cfg.state_root() / C.IMAGES_DIR
    values = {"crawl_dir": str(crawl_dir.resolve()), "images_dir": str(images_dir.resolve())}
    say("\n[1/3] crawl of the sandbox world (screen, sample, fetch, audit, rate, ladders) ...")
    with _env({MAPILLARY_TOKEN_ENV: os.environ.get(MAPILLARY_TOKEN_ENV) or SANDBOX_MAPILLARY_TOKEN}):
        crawl = await run_campaign(crawl_cfg, live=live, handle_signals=handle_signals, export=False)
    say_summary(crawl)
    outcomes = [("crawl", crawl_cfg, crawl)]
    if crawl.exit_code != 0:
        say(f"\ndemo stopped: the crawl ended '{crawl.status}'; re-run `{resume_cmd}` to resume (its config, for "
            f"`{own_command()} status|dead {crawl_path}`)")
        return crawl.exit_code
    if crawl.late_signal or crawl.stop_signal:
        # Ctrl-C as the crawl ended (its stop left nothing queued, or it came after): it finished, the demo stops
        # before the next campaign
        say(f"\ndemo stopped by a signal after the crawl finished; re-run `{resume_cmd}` to go on")
        return EXIT_INTERRUPTED

    # hand-off: the crawl's folder becomes a complete release-form folder ------------------------------
    gv_path = write_demo_config("demo_geoverify", values, conf_dir, check=refused_change)
    gv_cfg = load_config(gv_path)
    adopt_sandbox_names(gv_cfg)
    trials_path, build = write_verify_trials(crawl_dir, images_dir, seed=gv_cfg.campaign.seed, n_per_band=2,
                                             n_control=2)
    ctrl = {arm: sum(n for (a, _b), n in build.counts.items() if a == arm) for arm in ("ctrl_mismatch", "ctrl_noimage")}
    say(f"\nhand-off: GeoVerify trials built from {build.n_images} crawled images -> {trials_path}\n"
        f"  main arm per band {mapping_text(build.per_band())}; control arms {mapping_text(ctrl)}")
    # the fake model server answers GeoHint prompts knowing each crawled image's site (it "sees" the image): the
    # GeoHint campaign's plan gives the simulator the folder it plans from, this crawl's (geoagent.geohint.simulate)

    # 2. GeoVerify ----------------------------------------------------------------------------------------
    say("\n[2/3] GeoVerify on the crawled sites (2 models behind the OpenAI-compatible fake) ...")
    gv = await run_campaign(gv_cfg, live=live, handle_signals=handle_signals)
    say_summary(gv)
    outcomes.append(("GeoVerify", gv_cfg, gv))
    if gv.exit_code == EXIT_INTERRUPTED or gv.late_signal or gv.stop_signal:
        say(f"\ndemo stopped by a signal; re-run `{resume_cmd}` to resume")
        return EXIT_INTERRUPTED

    # 3. GeoHint ------------------------------------------------------------------------------------------
    say("\n[3/3] GeoHint on the crawled ladders (geocoder against the local Wikidata and Nominatim) ...")
    gh_path = write_demo_config("demo_geohint", values, conf_dir, check=refused_change)
    gh_cfg = load_config(gh_path)
    adopt_sandbox_names(gh_cfg)
    gh = await run_campaign(gh_cfg, live=live, handle_signals=handle_signals, gazetteer=gaz)
    say_summary(gh)
    outcomes.append(("GeoHint", gh_cfg, gh))

    # summary ------------------------------------------------------------------------------------------
    say("\n" + "=" * 100)
    say("demo summary")
    say("=" * 100)
    say(f"crawl ({crawl_dir}):")
    for stage, text in crawl_stage_counts(crawl_dir):
        say(f"  {stage:>8}: {text}")
    say("")
    table_txt = gv_cfg.state_dir() / C.REPORT_DIR / TABLE_TXT
    say(table_txt.read_text(encoding="utf-8") if table_txt.is_file() else "GeoVerify table: not written")
    say(simulated_verdicts_note())
    say("GeoHint Table 1 (hit rate, forced condition):")
    say(geohint_table1_text(gh_cfg))
    for line in summary_terms(gv_cfg):
        say(line)
    say("")
    say("spend vs cap:")
    for label, _cfg, o in outcomes:
        say(f"  {label:>9}: {_spend_line(o)}  [{o.status}]")
    say("reports:")
    for label, cfg, o in outcomes:
        report_dir = cfg.state_dir() / C.REPORT_DIR
        main = [p for p in o.report_files if p.suffix in (".md", ".json")]
        say(f"  {label:>9}: {report_dir}" + (f" ({', '.join(p.name for p in main)})" if main else ""))
    say(f"configs (filled in; `{own_command()} status|dead|export FILE` works on each): {conf_dir}")
    for label, path in (("crawl", crawl_path), ("GeoVerify", gv_path), ("GeoHint", gh_path)):
        say(f"  {label:>9}: {path}")
    code = next((o.exit_code for _l, _c, o in outcomes if o.exit_code != 0), 0)
    say(f"demo {'complete' if code == 0 else 'ended with exit code ' + str(code)} in {time.monotonic() - t0:.1f} s"
        + (f"; re-run `{resume_cmd}` to resume" if code else "; a re-run resumes and makes no new model call"))
    return code


def _resume_cmd(workdir: Path | None) -> str:
    """The command that resumes this demo (with its ``--workdir``, if one was given), as :func:`own_command` runs
    the program."""
    return f"{own_command()} demo" + (f" --workdir {workdir}" if workdir is not None else "")


def own_command() -> str:
    """How the user ran this program, for the commands the demo's summary prints: ``geoagent`` (the installed
    entry point), else ``<python> <run.py as typed>`` (``run.py`` when it was not run as a script, e.g. under
    pytest). ``<python>`` is the interpreter running now (``sys.executable``): relative to the working directory
    when inside it (``.venv/bin/python``, as README's commands), ``python`` when that is the one ``PATH`` finds
    (an activated virtual environment), else its absolute path; always its absolute path (or ``python``) when
    ``run.py`` was typed as an absolute path, so the two halves of the command read alike. Walk43 #7: the summary
    said ``python run.py status|dead|export FILE`` to a reader of README, which runs ``.venv/bin/python`` and
    never activates the environment, where a bare ``python`` lacks the project's dependencies. Walk44 A3: run as
    ``/tmp/p/.venv/bin/python /tmp/p/run.py demo`` from ``/tmp``, it printed ``p/.venv/bin/python /tmp/p/run.py``."""
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else ""
    if os.path.basename(argv0) == "geoagent":
        return "geoagent"
    script = argv0 if os.path.basename(argv0) == "run.py" else "run.py"
    return f"{_python_command(absolute=os.path.isabs(script))} {script}"


def _python_command(absolute: bool = False) -> str:
    """The interpreter running now as a command to type in the working directory (see :func:`own_command`);
    ``absolute``: never relative to the working directory (``run.py`` was typed as an absolute path)."""
    import shutil

    exe = os.path.abspath(sys.executable) if sys.executable else ""
    if not exe:
        return "python"
    on_path = shutil.which("python")
    if on_path is not None and os.path.abspath(on_path) == exe:
        return "python"
    if absolute:
        return exe
    rel = os.path.relpath(exe)
    return rel if not rel.startswith(os.pardir) else exe


def simulated_verdicts_note() -> str:
    """The demo summary's note under the GeoVerify table: the simulated models' read-out means nothing (why: the
    GeoVerify campaign's "Simulated answers" note above it, :func:`geoagent.sandbox.launch.geoverify_simulated_why`).

    Returns:
        One indented line in parentheses, ending with a blank line.
    """
    return ("  (the demo's models are simulated, so this read-out means nothing (the GeoVerify campaign's 'Simulated "
            "answers' note above says why); point [[models]] at a real provider)\n")


def run_demo(workdir: Path | None = None, live: bool | None = None) -> int:
    """Entry of ``python run.py demo`` (see the module docstring); returns the process exit code.

    Parameters
    ----------
    workdir : Path, optional
        Put ``queues/`` and ``state/`` (with the crawled images) under this folder; default: the
        configured roots (``queues/`` and ``state/`` of the working directory, or ``$GEOAGENT_QUEUES`` /
        ``$GEOAGENT_STATE``).
    live : bool, optional
        Live terminal display (default: when stdout is a TTY).

    Raises
    ------
    ValueError
        ``workdir`` is a file, or cannot be made (the CLI prints one ``error:`` line, exit 2).
    """
    import anyio

    roots: dict[str, str | None] = {C.ENV_QUEUES_ROOT: None, C.ENV_STATE_ROOT: None}
    if workdir is not None:
        wd = Path(workdir).resolve()
        if wd.exists() and not wd.is_dir():
            raise ValueError(f"--workdir {workdir}: not a folder (a file of that name exists); name a folder")
        try:
            wd.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file on the way (ENOTDIR, EEXIST), read-only, no permission, ...
            raise ValueError(f"--workdir {workdir}: cannot make the folder: {exc.strerror or exc}") from None
        roots = {C.ENV_QUEUES_ROOT: str(wd / "queues"), C.ENV_STATE_ROOT: str(wd / "state")}
    with _env(roots):
        return anyio.run(lambda: demo_pipeline(live=live, resume_cmd=_resume_cmd(workdir)))
