"""Config changes between runs of one campaign, decided after planning, and answers made under several settings.

A re-run with a changed config used to decide its message before planning, from the queue counts alone: "no
planned work is left to run, so the change affects none of it", and then planned 114 new requests under the
new settings next to 228 stored answers made under the old ones, with a report that did not say so. The engine
now plans first and then calls :func:`decide` with what planning did:

* no stored work (a first run): nothing to say;
* only keys that choose which tasks are planned changed (:func:`is_plan_scope_key`: ``n_requests``,
  ``images_per_site``, ``n_per_band``, crawl cities, ...): an info line, nothing mixes;
* the new config adds tasks, or tasks of an earlier run are still queued, in flight or dead-lettered: a warning
  that results would mix both versions; the manifest keeps the change in ``config_mix`` (one entry per such run);
  but a change of only what planning fixes in each task (:func:`only_planning_fixed`: a task section's prompt
  template or ``max_output_tokens``) reaches the queued tasks not at all, so it mixes only with tasks planned anew;
* otherwise (every task done, nothing new planned): an info line that the change reaches none of the stored
  results, so it needs a new ``[campaign]`` name; the manifest keeps the config the results were made with
  (``config``) and records the one not applied under ``config_not_applied``, so the next run says so again.

Inputs applied after the calls (:func:`is_applied_after_key`: the crawl's ``[crawl.image_audit] human_verdicts``,
``[crawl.referenceability] review_verdicts``, ``[crawl.ladder]`` draws, and ``[crawl] seed`` while ``[crawl.ladder] seed`` is
unset: it seeds the ladder draws then, :func:`crawl_seed_line`) are no drift either: each run re-applies them to the
stored answers (:func:`applied_after_line`).

Keys that only set limits or pacing (:func:`is_pacing_key`: a model's ``rate``, ``concurrency``, timeouts,
``max_attempts``, the estimates; ``[hosts]``; ``[queue]``) change no answer and are never listed as a change
that would mix results: :func:`pacing_line` makes them one info line. Nor are a model's prices
(:func:`is_price_key`): they set what a call is booked at, not the request; :func:`price_line` says so.

:func:`params_mix` counts stored answers per model and distinct request settings (the ``params`` the model
caller stored with each answer: ``max_output_tokens``, ``temperature``, ...), which the summary, the reports and
the manifest print when a model's answers were made under more than one (:func:`params_mix_lines`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from geoagent.textfmt import first_few_text

#: config paths that only set limits or pacing: they change when and how often a request is sent, never the
#: request or its answer (``models[i].rate``, ``concurrency``, timeouts, attempts, the dry run's estimates;
#: ``[hosts]`` and ``[queue]`` whole; the crawl's ``[crawl.policies.<api>]``, keys as in ``[hosts]``)
_PACING = re.compile(
    r"^(hosts|queue|crawl\.policies)([.\[]|$)"
    r"|^models\[\d+\]\.(concurrency|rate|rate\.\w+|timeout_s|connect_timeout_s|max_attempts"
    r"|expected_output_tokens|expected_latency_s)$"
)


#: config paths of a model's prices (USD per 1M tokens): they set what the ledger books for a call, never the
#: request (they are no part of its key, :meth:`geoagent.config.ModelConfig.default_params`) or its answer
_PRICE = re.compile(r"^models\[\d+\]\.price_(input|output)_usd_per_mtok$")


#: config paths of inputs applied after the model calls, to their stored answers, never to a request: the crawl's
#: human image-audit verdicts (``[crawl.image_audit] human_verdicts``, Sec. 3.2: a human verdict decides over the
#: model's) and the human decisions on referenceability review items (``[crawl.referenceability] review_verdicts``,
#: Sec. 3.3), and the context-ladder builder's draws (``[crawl.ladder] draws_per_cell`` and ``seed``: the ladders are
#: drawn from the stored ratings, :func:`geoagent.crawl.stages.apply_review_verdicts`). Each run reads them afresh
#: and rebuilds the tables from the stored audits, so a change is no drift
_APPLIED_AFTER = re.compile(
    r"^crawl\.(image_audit\.human_verdicts|referenceability\.review_verdicts|ladder\.(draws_per_cell|seed))$")


#: config paths that only choose which tasks are planned, not how any of them is asked or built: more or fewer
#: requests (``[generic] n_requests``, GeoHint ``images_per_site``, ``sites``, ``conditions``, repeats, sampling
#: rates), other GeoVerify trials (``n_per_band``, ``max_signal``, ``n_control``, ``build_seed``), crawl cities, a
#: model added or removed whole (``models[2]``). New tasks they add are asked like the stored ones: nothing mixes.
_PLAN_SCOPE = re.compile(
    r"^generic\.n_requests$"
    r"|^geohint\.(conditions|baseline_repeats|context_repeats|images_per_site|points_per_cell|sites|sample_rates)([.\[]|$)"
    r"|^geoverify\.(n_per_band|max_signal|n_control|build_seed)$"
    r"|^models\[\d+\](\.sampling_rate)?$"
    r"|^crawl\.(cities|watch)([.\[]|$)"
)


#: recorded versions of the code that draws the planned tasks (manifest ``designs``,
#: :func:`geoagent.runtime.manifest.design_versions`), as they are named in messages: a new version plans
#: other tasks from the same config and seed, a change of which tasks are planned
DESIGN_KEYS: dict[str, str] = {
    "geoverify.trial_builder": "the GeoVerify trial builder (trials = \"build\") draws another design from the "
                               "same seed: version 2 draws nested designs, geoagent/geoverify/trials.py",
}


#: config paths of the request settings the model caller sends with each call (:meth:`geoagent.config.ModelConfig.
#: default_params`, a task section's ``max_output_tokens``): the stored answers are counted per distinct setting
#: (:func:`params_mix`) in the summary, the report and the manifest. Other keys that change the requests (a
#: release folder, a model id, an endpoint) are recorded by the manifest alone (``config_mix``)
_REQUEST_SETTING = re.compile(
    r"^models\[\d+\]\.(max_output_tokens|temperature|seed|params(\..+)?)$|^(geoverify|geohint)\.max_output_tokens$")


def is_request_setting_key(path: str) -> bool:
    """Whether config path ``path`` is a request setting whose answers the summary, the report and the manifest count
    per setting (:data:`_REQUEST_SETTING`: ``models[0].temperature``, ``models[1].params.top_k``, ...)."""
    return bool(_REQUEST_SETTING.match(path))


def design_lines(keys: Iterable[str]) -> list[str]:
    """What each changed design key of ``keys`` (:data:`DESIGN_KEYS`) means, one phrase each."""
    return [DESIGN_KEYS[k] for k in keys if k in DESIGN_KEYS]


def is_plan_scope_key(path: str) -> bool:
    """Whether config path ``path`` only chooses which tasks are planned (``generic.n_requests``,
    ``geohint.images_per_site``, ``geoverify.n_per_band``, ``crawl.cities[4]``, a whole ``models[2]``, a model's
    ``sampling_rate``), not how a request is asked or a table built: tasks it adds are asked like the stored ones."""
    return bool(_PLAN_SCOPE.match(path)) or path in DESIGN_KEYS


#: config paths whose value planning writes into each queued task's payload (a task section's prompt template, or
#: GeoHint's folder of them, and ``max_output_tokens``): a task queued before the change keeps the old value, only tasks planned after it get the
#: new one (an idempotent put leaves a queued payload as it is)
_PLANNING_FIXED = re.compile(r"^(geoverify\.(prompt_template|max_output_tokens)|geohint\.(prompts_dir|max_output_tokens))$")
#: campaign kinds whose planned payloads carry the prompt text (a crawl's stages read their templates when a task is
#: handled, so an edited crawl prompt reaches its queued tasks)
PROMPT_IN_PAYLOAD_KINDS = frozenset({"geoverify", "geohint"})


def is_planning_fixed_key(path: str) -> bool:
    """Whether config path ``path`` is fixed in each task's payload when it is planned (:data:`_PLANNING_FIXED`)."""
    return bool(_PLANNING_FIXED.match(path))


def only_planning_fixed(calls: Iterable[str], call_keys: Iterable[str], kind: str | None) -> bool:
    """Whether a change of the call settings reaches only tasks planned after it (runtime36 #1): every changed key is
    fixed at planning (:func:`is_planning_fixed_key`, or an edited prompt template ``prompt:<file>`` of a campaign
    kind whose payloads carry the prompt, :data:`PROMPT_IN_PAYLOAD_KINDS`) or only chooses which tasks are planned
    (:func:`is_plan_scope_key`), and at least one is fixed at planning. Tasks an earlier run left queued then go out
    as they were planned, with the old settings."""
    calls, keys = list(calls), list(call_keys)
    prompts = [c for c in calls if c.startswith("prompt:")]
    if prompts and kind not in PROMPT_IN_PAYLOAD_KINDS:
        return False
    fixed = bool(prompts) or any(is_planning_fixed_key(k) for k in keys)
    return fixed and all(is_planning_fixed_key(k) or is_plan_scope_key(k) for k in keys)


def only_plan_scope(calls: Iterable[str], call_keys: Iterable[str]) -> bool:
    """Whether a change of the call settings (``calls``, ``call_keys``: :class:`geoagent.runtime.manifest.ConfigChanges`)
    only chooses which tasks are planned: no prompt template changed (``prompt:<file>``) and every changed key is
    :func:`is_plan_scope_key`. New tasks are then asked like the stored ones, so nothing mixes; the run
    (:func:`decide`) and the dry run (:func:`geoagent.engine._calls_changed`, ``geoagent.cli``) decide by it."""
    return not any(c.startswith("prompt:") for c in calls) and all(is_plan_scope_key(k) for k in call_keys)


_CITY_FIELD = re.compile(r"crawl\.cities\[(\d+)\]\.(lat|lon|continent|country)")
_CITY_ENTRY = re.compile(r"crawl\.cities\[(\d+)\]")


def crawl_city_edit_lines(name: str, call_keys: Mapping[str, tuple[Any, Any]]) -> list[str]:
    """Warnings for crawl ``name`` when a city already in its list changed its centre, continent or country, or
    left the list (``call_keys``: the changed config paths, ``crawl.cities[0].lat`` ...). A city's screening, sites,
    images and ladders are stored under its name's key, so an edited entry keeps what was made with its old values
    (``city_pool.csv`` keeps the old centre, ``sites.csv`` the old continent, which the swapped-image control
    pairs by), and a removed one keeps its rows in every table; break34 crawl #3: the only line said "nothing
    mixes". [] when no such key changed."""
    edited: dict[int, list[str]] = {}
    removed: list[int] = []
    for key, (old, new) in call_keys.items():
        m = _CITY_FIELD.fullmatch(key)
        if m and old is not None:
            edited.setdefault(int(m.group(1)), []).append(f"{m.group(2)} {old!r} -> {new!r}")
        elif (e := _CITY_ENTRY.fullmatch(key)) and old is not None and new is None:
            removed.append(int(e.group(1)))
    lines = []
    if edited:
        what = "; ".join(f"crawl.cities[{i}] {', '.join(v)}" for i, v in sorted(edited.items()))
        lines.append(f"warning: campaign {name}: a city already in the crawl changed ({what}): its screening, sites, "
                     "images and ladders are stored under its name and keep the old values, so the change is NOT "
                     "applied to them; to crawl it with the new values, crawl under a new [campaign] name")
    if removed:
        lines.append(f"warning: campaign {name}: {len(removed)} cit{'ies' if len(removed) != 1 else 'y'} left the "
                     "crawl's list (crawl.cities[" + "], [".join(str(i) for i in sorted(removed)) + "]): what was "
                     f"crawled for {'them' if len(removed) != 1 else 'it'} stays in every table (sites.csv, the "
                     "ladders, the trials)")
    return lines


#: plan-scope keys that change which no-context answers a GeoHint report pools (the models, their sampling, the
#: sites, images and repeats): the regime split (legible / illegible, seed 000 Sec. 6.1.2) is the pooled
#: no-context hit rate of every planned model's answers at a site
_POOLED_BASELINE = re.compile(
    r"^geohint\.(baseline_repeats|images_per_site|sites|sample_rates)([.\[]|$)|^models\[\d+\](\.sampling_rate)?$")


def regime_scope_lines(name: str, call_keys: Iterable[str], kind: str | None) -> list[str]:
    """An info line for GeoHint campaign ``name`` when a plan-scope change (``call_keys``: the changed config paths)
    changes the no-context answers its regime split pools: adding or removing a model, its sampling rate, the
    sites, images or baseline repeats move every model's legible / illegible split, which "nothing mixes" did not
    say (walk39 #11). [] for other kinds and keys."""
    if kind != "geohint":
        return []
    keys = sorted(k for k in call_keys if _POOLED_BASELINE.match(k))
    if not keys:
        return []
    shown = first_few_text(keys, 4)
    return [f"info: campaign {name}: the report's regime split pools the no-context answers of every planned model "
            f"(seed 000 Sec. 6.1.2), so this change ({shown}) can move sites between the legible and illegible "
            "regime for every model; compare regime tables only between runs with the same models and sampling"]


def setting_lines(name: str, changes: Any, keys_text: Callable[[dict[str, tuple[Any, Any]]], str],
                  cfg: Any = None) -> list[str]:
    """The info lines of campaign ``name`` for changed keys that change no request or no answer already stored
    (:func:`pacing_line`, :func:`price_line`, :func:`unsent_line`, :func:`applied_after_line`), in that order, from
    ``changes`` (:class:`geoagent.runtime.manifest.ConfigChanges`); ``keys_text`` writes the changed keys
    (:func:`changed_keys_text`). ``cfg``: the config now (as written), whose models' ``timeout_s`` defaults the
    pacing line names (:func:`default_timeout_notes`). The run prints them once it has planned, the dry run before
    its report."""
    notes = default_timeout_notes(cfg, changes.pacing) if cfg is not None else {}
    lines = (pacing_line(name, changes.pacing, pacing_keys_text(changes.pacing, keys_text, notes)),
             price_line(name, changes.prices, keys_text(changes.prices)),
             unsent_line(name, changes.unsent, keys_text(changes.unsent)),
             applied_after_line(name, changes.applied_after, keys_text(changes.applied_after)))
    return [line for line in lines if line]


def is_pacing_key(path: str) -> bool:
    """Whether config path ``path`` (as in :attr:`geoagent.runtime.manifest.ConfigChanges.call_keys`, e.g.
    ``models[0].rate.requests``, ``hosts.example.org.rate``) only sets limits or pacing (no answer changes)."""
    return bool(_PACING.match(path))


def is_price_key(path: str) -> bool:
    """Whether config path ``path`` is a model's price (``models[0].price_input_usd_per_mtok``,
    ``models[1].price_output_usd_per_mtok``; USD per 1M tokens): it changes what a call is booked at, no
    request or answer."""
    return bool(_PRICE.match(path))


def is_applied_after_key(path: str) -> bool:
    """Whether config path ``path`` names an input applied to stored answers after the calls, never part of a
    request (``crawl.image_audit.human_verdicts``): a change re-applies it, no call is repeated."""
    return bool(_APPLIED_AFTER.match(path))


def section_of(path: str) -> str:
    """The top-level section of config path ``path``: ``models[0].rate`` -> ``models``."""
    return re.split(r"[.\[]", path, maxsplit=1)[0]


#: at most this many changed keys are named in the config-change line (then "and N more")
CHANGED_KEYS_SHOWN = 8
#: a changed value longer than this (characters) is shown cut, ending in "..."
CHANGED_VALUE_CHARS = 60


#: a changed key naming a whole item of a list (``geohint.sites[3]``, ``models[1]``): group, index
_LIST_ITEM = re.compile(r"^(.*)\[(\d+)\]$")


def _item_label(v: Any) -> str | None:
    """The name of a list item that is a table with a ``name`` (a ``[[models]]`` entry), else None."""
    return str(v["name"]) if isinstance(v, dict) and isinstance(v.get("name"), str) else None


def _list_aware_items(keys: dict[str, tuple[Any, Any]], shown: Any) -> list[str]:
    """The texts of :func:`changed_keys_text`, whole list items grouped per list and read as what was added or
    removed (a positional diff of ``geohint.sites`` with one site removed named every later index as changed):
    ``geohint.sites: removed 'a', 'b'; added 'c'``, ``models (sim-b) removed``, ``models[1] (sim-c) added``,
    ``geohint.sites: reordered``.
    Other keys read ``key: old -> new``. Order: each list where its first changed item was."""
    out: list[Any] = []
    lists: dict[str, list[tuple[int, Any, Any]]] = {}
    for k, (old, new) in keys.items():
        m = _LIST_ITEM.match(k)
        if m is None:
            out.append(f"{k}: {shown(old)} -> {shown(new)}")
            continue
        path = m.group(1)
        if path not in lists:
            lists[path] = []
            out.append((path,))  # placeholder, filled below
        lists[path].append((int(m.group(2)), old, new))
    texts: dict[str, list[str]] = {}
    for path, changes in lists.items():
        news = [n for _, _, n in changes if n is not None]
        removed = [(i, o) for i, o, _ in changes if o is not None and not _take(news, o)]
        olds_left = [o for _, o, _ in changes if o is not None]
        added = [(i, n) for i, _, n in changes if n is not None and not _take(olds_left, n)]
        parts: list[str] = []
        for what, items in (("removed", removed), ("added", added)):
            named = [(i, v) for i, v in items if _item_label(v) is not None]
            plain = [v for _, v in items if _item_label(v) is None]
            # an added item's index is its place in the current file; a removed one is named without one (the
            # alignment by name puts it after the current entries, an index neither file has: walk25 #5)
            parts += [f"{path}[{i}] ({_item_label(v)}) added" if what == "added" else f"{path} ({_item_label(v)}) removed"
                      for i, v in named]
            if plain:
                parts.append(f"{path}: {what} " + ", ".join(shown(v) for v in plain))
        texts[path] = parts or [f"{path}: reordered"]
    items: list[str] = []
    for x in out:
        items += texts[x[0]] if isinstance(x, tuple) else [x]
    return items


def _take(pool: list[Any], v: Any) -> bool:
    """Remove one item equal to ``v`` from ``pool``; whether there was one (a multiset difference)."""
    for j, w in enumerate(pool):
        if w == v:
            del pool[j]
            return True
    return False


def changed_keys_text(keys: dict[str, tuple[Any, Any]]) -> str:
    """``models[0].max_output_tokens: 512 -> 256; ...``: the changed keys of
    :attr:`geoagent.runtime.manifest.ConfigChanges.call_keys`, values redacted (known secrets masked), long
    values cut, at most :data:`CHANGED_KEYS_SHOWN` of them. Whole items of a list read as what was added or
    removed (``geohint.sites: removed 'london_barbican'``; ``models (sim-b) removed``), not as a positional
    diff of every later index."""
    from geoagent.secrets import redact

    def shown(v: Any) -> str:
        text = "unset" if v is None else repr(v)
        return text if len(text) <= CHANGED_VALUE_CHARS else text[:CHANGED_VALUE_CHARS - 3] + "..."

    items = _list_aware_items(keys, shown)
    more = len(items) - CHANGED_KEYS_SHOWN
    text = "; ".join(items[:CHANGED_KEYS_SHOWN]) + (f"; and {more} more" if more > 0 else "")
    return redact(text)


@dataclass
class DriftDecision:
    """What a re-run with changed call settings does with them (:func:`decide`).

    Attributes
    ----------
    lines : list of str
        Lines for stderr (``warning: ...`` or ``info: ...``), empty when there is nothing to say.
    applied : bool
        The run applies the new config to some work (False: every task was done and none was added, so the
        stored results keep the recorded config; the manifest keeps it).
    mixed : bool
        Results made under the old settings sit next to work done under the new ones.
    record : dict
        For the manifest: ``changed`` (``{path: [old, new]}``), ``prompts`` (changed prompt files),
        ``tasks_before`` (tasks of the plan edge before this run), ``tasks_added`` (planned anew),
        ``left_before`` (tasks an earlier run left queued, in flight or dead).
    """

    lines: list[str] = field(default_factory=list)
    applied: bool = True
    mixed: bool = False
    record: dict[str, Any] = field(default_factory=dict)


_MODEL_KEY = re.compile(r"^models\[(\d+)\]\.")


def changed_model_names(calls: Iterable[str], call_keys: Iterable[str], names: list[str]) -> set[str] | None:
    """The models whose own settings changed, when the change reaches no other request: every changed key that is not
    :func:`is_plan_scope_key` is one model's (``models[i].<key>``; ``i`` indexes ``names``, the current config's
    ``[[models]]`` names in order, as :func:`geoagent.runtime.manifest.align_by_name` lines them up) and no prompt
    template changed. None otherwise (a task section, a prompt, or a key of an index past ``names``: every model's
    requests may change)."""
    calls, keys = list(calls), list(call_keys)
    if not keys or any(c.startswith("prompt:") for c in calls):
        return None
    out: set[str] = set()
    for k in keys:
        if is_plan_scope_key(k):
            continue
        m = _MODEL_KEY.match(k)
        if m is None or int(m.group(1)) >= len(names):
            return None
        out.add(names[int(m.group(1))])
    return out


def _models_text(names: Iterable[str]) -> str:
    names = sorted(names)
    return f"model{'s' if len(names) != 1 else ''} {', '.join(names)}"


def split_by_model(changed: Iterable[str], by_model: dict[str, tuple[int, int]]
                   ) -> tuple[list[str], list[str], list[str]]:
    """The ``changed`` models sorted into ``(mixing, untouched, fresh)`` from ``by_model``, per model ``(tasks done
    under the old settings, tasks still to send)``: mixing have both, untouched only done ones (the change reaches
    none of their answers), fresh no done one (all their answers use the new settings). Each list sorted. The run
    (:func:`decide`) and the dry run (:func:`geoagent.engine._per_model_drift_note`) judge by it."""
    counts = {m: by_model.get(m, (0, 0)) for m in changed}
    mixing = sorted(m for m, (done, left) in counts.items() if done and left)
    untouched = sorted(m for m, (done, left) in counts.items() if done and not left)
    fresh = sorted(m for m, (done, _) in counts.items() if not done)
    return mixing, untouched, fresh


def _per_model(name: str, what: str, changed: set[str], by_model: dict[str, tuple[int, int]], record: dict[str, Any],
               added: int) -> DriftDecision | None:
    """:func:`decide` for a change confined to ``changed`` models' own settings, given per model ``(tasks done before
    this run, tasks not done after planning)`` on the plan edge: None when one of them has both (results would mix:
    the caller's warning), else the info line that nothing mixes (walk31 #2: a run that changed a model whose tasks
    were all done, and added another model, was told its results would mix and to start over under a new name)."""
    mixing, untouched, fresh = split_by_model(changed, by_model)
    if mixing:
        return None
    parts = []
    if untouched:
        parts.append(f"every task of {_models_text(untouched)} is done, so the change reaches none of "
                     f"{'its' if len(untouched) == 1 else 'their'} stored answers, which keep the old settings (a new "
                     "[campaign] name runs them with it)")
    if fresh:
        parts.append(f"{_models_text(fresh)} had no task answered yet, so all "
                     f"{'its' if len(fresh) == 1 else 'their'} answers use the new settings")
    if added:
        parts.append(f"the {added} task{'s' if added != 1 else ''} this run planned anew "
                     f"{'are' if added != 1 else 'is'} asked under one setting each")
    line = f"info: campaign {name}: {what}; {'; '.join(parts)}: no model's results mix two settings."
    return DriftDecision([line], applied=True, mixed=False,
                         record={**record, **({"not_applied_to": untouched} if untouched else {})})


def _none_done_in_plan(name: str, what: str, record: dict[str, Any], done_not_planned: int, added: int,
                       left_before: int) -> DriftDecision:
    """:func:`decide` when every task done under the old settings is one the plan no longer holds: the info line
    that nothing mixes (their answers are kept, not scored; every answer scored is made under the new settings),
    and no mix recorded (walk43 #1). ``left_before``: tasks of the plan an earlier run left queued, in flight or
    dead-lettered, sent with the new settings (the caller keeps a change fixed at planning apart: those keep the
    old ones)."""
    s = "s" if done_not_planned != 1 else ""
    work = ([f"this run planned {added} new task{'s' if added != 1 else ''}"] if added else []) + (
        [f"{left_before} task{'s' if left_before != 1 else ''} an earlier run left queued, in flight or "
         "dead-lettered go out with the new settings too"] if left_before else [])
    line = (f"info: campaign {name}: {what}; the {done_not_planned} task{s} done under the old settings "
            f"{'are' if s else 'is'} no longer in the plan (their stored answers are kept but not scored), so every "
            f"answer the results count uses the new settings: nothing mixes ({'; '.join(work)}).")
    return DriftDecision([line], applied=True, mixed=False, record=record)


def decide(name: str, calls: list[str], call_keys: dict[str, tuple[Any, Any]], *, tasks_before: int,
           done_before: int, added: int, left_before: int, keys_text: str,
           changed_models: set[str] | None = None, by_model: dict[str, tuple[int, int]] | None = None,
           kind: str | None = None, done_not_planned: int | None = None) -> DriftDecision:
    """Decide, after planning, what a changed config means for the run of campaign ``name`` (of campaign kind
    ``kind``: whether its payloads carry the prompt, :func:`only_planning_fixed`).

    Parameters
    ----------
    calls, call_keys
        :attr:`ConfigChanges.calls` and :attr:`ConfigChanges.call_keys` without the pacing keys (sections and
        prompts ``prompt:<file>`` that shape the calls or the planned work, and their changed keys).
    tasks_before, done_before : int
        Tasks of the plan edge before this run's plan was queued (all, and done; done: those this run's plan still
        holds when ``done_not_planned`` is given).
    added : int
        Tasks this run's plan added to the plan edge (keys not queued before).
    left_before : int
        Tasks of any edge an earlier run left ready, leased or dead-lettered. Their queued payloads fix only
        what planning put there (the prompt text, a task section's ``max_output_tokens``); the ``[[models]]``
        settings are read from the current config when a task is sent
        (:func:`geoagent.workers.model_caller.build_request`), so they go out with the new settings.
    keys_text : str
        The changed keys as printed (redacted, cut; :func:`geoagent.cli._changed_keys_text`).
    changed_models, by_model
        When the change is confined to some models' own settings (:func:`changed_model_names`) and the plan queue
        can count its tasks per model (:meth:`geoagent.runtime.queue.WorkQueue.tasks_by_model`): those models, and
        per model ``(tasks of the plan edge done before this run, tasks not done after planning)``. Results then mix
        only when a changed model has both;
        otherwise one info line says why nothing mixes, and ``record["not_applied_to"]`` names the changed models
        whose every task was done (their stored answers keep the old settings). None: decided from the totals.
    done_not_planned : int, optional
        Tasks done before this run that its plan no longer holds (:func:`geoagent.runtime.scope.done_in_plan`):
        their stored answers are kept but left out of scoring, so they mix with nothing. When none of the done
        tasks is in the plan (``done_before`` 0), one info line says nothing mixes and no mix is recorded (walk43
        #1). None: the plan's done tasks could not be told apart (``done_before`` counts every done task).
    """
    if not calls or tasks_before == 0:
        return DriftDecision()
    designs = design_lines(call_keys)
    if designs and all(k in DESIGN_KEYS for k in call_keys) and not any(c.startswith("prompt:") for c in calls):
        # no config key changed: the code that draws the plan did
        what = f"the trial builder changed since its last run ({keys_text}: {'; '.join(designs)})"
    else:
        what = f"{', '.join(calls)} changed since its last run" + (f" ({keys_text})" if keys_text else "")
        if designs:
            what += f"; the trial builder changed: {'; '.join(designs)}"
    prompts = [c.split(":", 1)[1] for c in calls if c.startswith("prompt:")]
    record = {"changed": {k: [old, new] for k, (old, new) in call_keys.items()}, "prompts": prompts,
              "tasks_before": tasks_before, "tasks_added": added, "left_before": left_before}
    if only_plan_scope(calls, call_keys):
        # which tasks are planned changed, not how any is asked: new tasks are asked like the stored ones
        new_text = (f"this run planned {added} new task{'s' if added != 1 else ''}, asked like the {done_before} "
                    "done" if added else "no new task was planned")
        line = (f"info: campaign {name}: {what}; this changes which tasks are planned, not how any is asked: "
                f"{new_text}, so nothing mixes (stored answers of tasks no longer planned stay stored).")
        return DriftDecision([line, *crawl_city_edit_lines(name, call_keys),
                              *regime_scope_lines(name, call_keys, kind)], applied=True, mixed=False, record=record)
    if done_not_planned:
        record["done_not_planned"] = done_not_planned
    fixed = only_planning_fixed(calls, call_keys, kind)
    if done_not_planned and not done_before and (added or left_before) and not (fixed and left_before):
        return _none_done_in_plan(name, what, record, done_not_planned, added, left_before)
    if (added or left_before) and fixed:
        # runtime36 #1: tasks left queued keep the prompt and max_output_tokens they were planned with; only tasks this
        # run planned anew get the new ones (before: "will be sent with the new settings ... results would mix", the
        # manifest recorded the new template as applied, and a model added later was told "nothing mixes")
        kept = (f"; the {left_before} task{'s' if left_before != 1 else ''} an earlier run left queued, in flight or "
                "dead-lettered keep the prompt text and max_output_tokens they were planned with (the old ones)"
                if left_before else "")
        if added:
            line = (f"warning: campaign {name}: {what}; this run planned {added} new task{'s' if added != 1 else ''} "
                    f"that use the new settings next to {done_before} done under the old ones{kept}, so results "
                    "would mix both versions (the manifest records the mix under config_mix). Use a new [campaign] "
                    "name to apply the change to every trial (raising [budget] cap_usd is fine).")
            return DriftDecision([line], applied=True, mixed=True, record=record)
        line = (f"info: campaign {name}: {what}; planning fixes these settings in each task when it is queued, and "
                f"this run planned no task anew: the {done_before} done and the {left_before} left queued, in flight "
                "or dead-lettered keep the old ones, "
                "so the change reaches no request: the manifest keeps recording the old settings (the new config is "
                "under config_not_applied). Use a new [campaign] name to run with the change.")
        return DriftDecision([line], applied=False, mixed=False, record=record)
    if changed_models and by_model is not None and (added or left_before):
        per_model = _per_model(name, what, changed_models, by_model, record, added)
        if per_model is not None:
            return per_model
    if added or left_before:
        parts = []
        if added:
            parts.append(f"this run planned {added} new task{'s' if added != 1 else ''} that use the new settings "
                         f"next to {done_before} done under the old ones")
        crawl_only = bool(call_keys) and all(k.startswith("crawl.") for k in call_keys)
        if left_before and crawl_only:  # break34 crawl #5: a [crawl.fetcher] change was told about [[models]]
            parts.append(f"{left_before} task{'s' if left_before != 1 else ''} an earlier run left queued, in "
                         "flight or dead-lettered will be done with the new crawl settings, while what is already "
                         "stored (sites, images, ratings) keeps the old ones")
        elif left_before:
            parts.append(f"{left_before} task{'s' if left_before != 1 else ''} an earlier run left queued, in "
                         "flight or dead-lettered will be sent with the new [[models]] settings (only what "
                         "planning fixed stays as planned: the prompt text and a task section's "
                         "max_output_tokens), while the answers already stored keep the old ones")
        # fixverify41 #1: a changed release_dir (or model id, base_url) is no request setting: the summary and the
        # report count nothing per value of it (the warning promised they did), only the manifest records the mix
        if crawl_only:
            counted = "the manifest records the mix under config_mix"
        elif any(is_request_setting_key(k) for k in call_keys):
            counted = "the summary, the report and the manifest count the answers made under each request setting"
        else:
            counted = ("the manifest records the mix under config_mix; the summary and the report count no answers "
                       "per value of these keys")
        line = (f"warning: campaign {name}: {what}; {'; '.join(parts)}, so results would mix both versions "
                f"({counted}). Use a new [campaign] name to apply the change to every "
                f"{'site' if crawl_only else 'trial'} (raising [budget] cap_usd is fine).")
        return DriftDecision([line], applied=True, mixed=True, record=record)
    line = (f"info: campaign {name}: {what}; every planned task is done ({done_before}) and this config plans "
            "none anew, so the change affects none of the stored results: they keep the old settings, and the "
            "manifest keeps recording those (the new config is under config_not_applied). Use a new [campaign] "
            "name to run with the change.")
    return DriftDecision([line], applied=False, mixed=False, record=record)


#: a model's ``timeout_s`` path, whose default depends on whether the model may reason at length
_MODEL_TIMEOUT = re.compile(r"^models\[(\d+)\]\.timeout_s$")


def default_timeout_notes(cfg: Any, pacing: Mapping[str, tuple[Any, Any]]) -> dict[str, str]:
    """``{path: note}`` for each changed ``models[i].timeout_s`` of ``pacing`` that the config ``cfg`` does not set:
    its value is the default, 600 s for a model that may reason at length (:func:`geoagent.config.may_reason_long`,
    :data:`geoagent.config.REASONING_TIMEOUT_S`), else 120 s, so it moved with a change that made the model think
    or stop thinking, not by the user's hand. Walk44 B2: adding ``params = { thinking_budget = 0 }`` printed
    ``limits or pacing changed since its last run (models[1].timeout_s: 600.0 -> 120.0)``, a key the config never
    named. The note: ``the default for a non-thinking model; not set in the config``."""
    from geoagent.config import may_reason_long

    out: dict[str, str] = {}
    models = list(getattr(cfg, "models", None) or [])
    for path in pacing:
        m = _MODEL_TIMEOUT.match(path)
        if m is None or int(m.group(1)) >= len(models):
            continue
        model = models[int(m.group(1))]
        if "timeout_s" in getattr(model, "model_fields_set", {"timeout_s"}):
            continue  # written in the config: the user's change
        try:
            long = may_reason_long(model)
        except Exception:  # noqa: BLE001 - a message aid only
            continue
        what = "a reasoning or thinking model" if long else "a non-thinking model"
        out[path] = f"the default for {what}; not set in the config"
    return out


def pacing_keys_text(pacing: dict[str, tuple[Any, Any]], keys_text: Callable[[dict[str, tuple[Any, Any]]], str],
                     notes: Mapping[str, str]) -> str:
    """``keys_text(pacing)``, with each key of ``notes`` written ``models[1].timeout_s: 600.0 -> 120.0, <note>``
    after the others (:func:`default_timeout_notes`)."""
    if not notes:
        return keys_text(pacing)
    rest = {k: v for k, v in pacing.items() if k not in notes}
    noted = [f"{k}: {_shown(pacing[k][0])} -> {_shown(pacing[k][1])}, {notes[k]}" for k in sorted(notes)]
    return "; ".join(([keys_text(rest)] if rest else []) + noted)


def _shown(v: Any) -> str:
    """A scalar value as :func:`changed_keys_text` writes it (``unset`` for None)."""
    return "unset" if v is None else repr(v)


def pacing_line(name: str, pacing: dict[str, tuple[Any, Any]], keys_text: str) -> str | None:
    """One info line for changed keys that only set limits or pacing (``None`` when there are none)."""
    if not pacing:
        return None
    return (f"info: campaign {name}: limits or pacing changed since its last run ({keys_text}); they change no "
            "request or answer, so nothing mixes.")


def price_line(name: str, prices: dict[str, tuple[Any, Any]], keys_text: str) -> str | None:
    """One info line for changed model prices (``None`` when there are none). The ledger books each call when it
    settles, at the prices of the config the settling run loaded (:meth:`geoagent.config.ModelConfig.cost_usd`),
    and stores the amount (``reservations.actual_nusd``; unknown-outcome spend at its reservation amount): calls
    settled from now on are booked at the new prices, the amounts already booked stay as they are."""
    if not prices:
        return None
    return (f"info: campaign {name}: model prices changed since its last run ({keys_text}); a price changes no "
            "request or answer, so nothing mixes: calls settled from now on are booked at the new prices, and the "
            "spend already booked keeps the amounts of the old ones (settled and unknown-outcome spend are stored "
            "as amounts, never re-priced).")


def applied_after_line(name: str, keys: dict[str, tuple[Any, Any]], keys_text: str) -> str | None:
    """One info line for changed keys applied after the calls (:func:`is_applied_after_key`; ``None`` when there
    are none): the run applies them to the stored answers and asks nothing anew."""
    if not keys:
        return None
    if "crawl.seed" in keys:  # [crawl] seed while [crawl.ladder] seed is unset (manifest.crawl_seed_draws_ladders)
        rest = {k: v for k, v in keys.items() if k != "crawl.seed"}
        seed_text = changed_keys_text({"crawl.seed": keys["crawl.seed"]})
        line = crawl_seed_line(name, seed_text, keys["crawl.seed"][0])
        other = applied_after_line(name, rest, changed_keys_text(rest)) if rest else None
        return line if other is None else f"{line}\n{other}"
    if all(k.startswith("crawl.ladder.") for k in keys):  # [crawl.ladder] draws alone
        return (f"info: campaign {name}: the context-ladder settings changed since its last run ({keys_text}); the "
                "ladders are drawn from the stored ratings, never in a request, so no model call is repeated and "
                "nothing mixes: this run rebuilds every site's ladder (ladders/) with them, and the export (export/); "
                "the ratings (rated/) and verify_trials.csv do not depend on them.")
    review = any("review_verdicts" in k for k in keys)
    ladder = any(k.startswith("crawl.ladder.") for k in keys)
    if review and len(keys) == 1:  # [crawl.referenceability] review_verdicts alone
        return (f"info: campaign {name}: the human review decisions changed since its last run ({keys_text}); they "
                "are applied to the stored ratings, never sent in a request, so no model call is repeated and "
                "nothing mixes: this run rebuilds the ladders, audit_review_resolved.csv and audit_review_log.jsonl "
                "with them (rated/ keeps the model's), verify_trials.csv when the crawl is complete, and the export "
                "(export/).")
    hv = any("human_verdicts" in k for k in keys)
    what = [w for w, on in (("the human image-audit verdicts", hv), ("the human review decisions", review),
                            ("the context-ladder settings", ladder)) if on]
    tables = [t for t, on in (("image_audit.csv, images.csv and the agreement files", hv), ("the ladders", review or ladder),
                              ("the review resolution", review)) if on]
    return (f"info: campaign {name}: {' and '.join(what)} changed since its last run ({keys_text}); they are applied "
            "to the stored model answers, never sent in a request, so no model call is repeated and nothing mixes: "
            f"this run rebuilds {', '.join(tables)} with them, verify_trials.csv when the crawl is complete, and the "
            "export (export/).")


def crawl_seed_line(name: str, seed_text: str, old_seed: Any) -> str:
    """The info line for a changed ``[crawl] seed`` while ``[crawl.ladder] seed`` is unset (an applied-after key
    then: :func:`geoagent.runtime.manifest.crawl_seed_draws_ladders`). What the crawl seed seeds: the ladder draws
    (redrawn by every run from the stored ratings, :func:`geoagent.crawl.stages.write_site_ladder`), the site
    sampler's shuffle of each city (:func:`geoagent.crawl.sampler.city_seed`; a stored sampling is kept with the
    seed it records, so only a city sampled from now on is shuffled by the new one) and the simulated auditors'
    answers (new calls only). ``seed_text``: the change as printed; ``old_seed``: the earlier value."""
    keep = "" if old_seed is None else f" (set [crawl.ladder] seed = {old_seed!r} to keep the old ladders)"
    return (f"info: campaign {name}: [crawl] seed changed since its last run ({seed_text}); with [crawl.ladder] seed "
            "unset it also seeds the context-ladder draws, which are drawn from the stored ratings, never in a "
            "request, so no model call is repeated: this run redraws every site's ladder (ladders/) with it, and "
            f"the export (export/), and the manifest records it{keep}. The stored sites keep the site sampler's "
            "shuffle they were drawn with (each city's seed is in sampling/<city>.json), so a city sampled from now "
            "on (one added) is shuffled by the new seed, and a simulated auditor answers new calls under it; "
            "the ratings (rated/) and verify_trials.csv do not depend on it.")


def params_mix(responses: Iterable[dict[str, Any]], keys: set[str] | None = None) -> dict[str, list[tuple[dict[str, Any], int]]]:
    """Stored answers per model and distinct request settings, for the models with more than one.

    Parameters
    ----------
    responses : iterable of dict
        Stored responses with ``key`` (request key), ``model`` and ``request_meta`` (its ``params``: the
        request settings the model caller sent, e.g. ``max_output_tokens``), as
        :meth:`geoagent.runtime.store.ResultStore.iter_response_meta` yields them.
    keys : set of str, optional
        Count only these request keys (the answers a report covers).

    Returns
    -------
    dict
        ``{model: [(params, n answers), ...]}`` (most answers first) for each model whose answers were made
        under more than one set of params; ``{}`` when every model's answers share one.
    """
    counts: dict[str, dict[bytes, int]] = {}
    for r in responses:
        if keys is not None and r.get("key") not in keys:
            continue
        meta = r.get("request_meta") or {}
        model = str(meta.get("model_name") or r.get("model") or "")
        params = meta.get("params") if isinstance(meta.get("params"), dict) else {}
        if "replay_of" in params:  # a replay entry answers as several released models: each is a model here
            params = dict(params)
            model = str(params.pop("replay_of") or model)
        p = orjson.dumps(params, option=orjson.OPT_SORT_KEYS)
        counts.setdefault(model, {})
        counts[model][p] = counts[model].get(p, 0) + 1
    out: dict[str, list[tuple[dict[str, Any], int]]] = {}
    for model, by in counts.items():
        if len(by) > 1:
            out[model] = sorted(((orjson.loads(p), n) for p, n in by.items()), key=lambda x: -x[1])
    return out


def mixed_setting_names(manifest: dict[str, Any] | None) -> set[str]:
    """The request settings a recorded config change mixed: the last name of each changed key of the manifest's
    ``config_mix`` records (``models[0].max_output_tokens`` and ``geohint.max_output_tokens`` ->
    ``max_output_tokens``; ``models[0].params.top_p`` -> ``top_p``); empty when no run mixed (a campaign never
    changed, or changed only what reached no stored answer). Answers can differ in settings a plan varies by
    design (a GeoHint repeat's ``seed``, a replay's ``replay_of``): those are no mix, so only these names are
    compared (:func:`restrict_mix`)."""
    names: set[str] = set()
    for rec in (manifest or {}).get("config_mix") or []:
        for key in (rec.get("changed") or {}) if isinstance(rec, dict) else ():
            names.add(str(key).rsplit(".", 1)[-1].split("[", 1)[0])
    return names


def restrict_mix(mix: dict[str, list[tuple[dict[str, Any], int]]], names: set[str],
                 not_sent: Callable[[str, dict[str, Any]], set[str]] | None = None
                 ) -> dict[str, list[tuple[dict[str, Any], int]]]:
    """``mix`` (:func:`params_mix`) with each answer's settings cut to ``names`` and counted again: the models
    whose answers still differ in one of them, most answers first; ``{}`` for no name. ``not_sent``
    (:func:`not_sent_of`): a setting the model was not sent is left out too, so answers compare by what their
    requests carried (``temperature 0.0`` and ``temperature 1`` to an OpenAI reasoning model, sent neither, are
    one group)."""
    out: dict[str, list[tuple[dict[str, Any], int]]] = {}
    for model, groups in mix.items():
        counts: dict[bytes, int] = {}
        for params, n in groups:
            unsent = not_sent(model, params) if not_sent is not None else set()
            p = orjson.dumps({k: v for k, v in params.items() if k in names and k not in unsent},
                             option=orjson.OPT_SORT_KEYS)
            counts[p] = counts.get(p, 0) + n
        if len(counts) > 1:
            out[model] = sorted(((orjson.loads(p), n) for p, n in counts.items()), key=lambda x: -x[1])
    return out


#: config paths of a model's sampling settings (:data:`geoagent.providers.sampling.SAMPLING_PARAMS`):
#: ``models[0].temperature``, ``models[0].seed``, ``models[0].params.top_p``
_SAMPLING_KEY = re.compile(r"^models\[(\d+)\]\.(?:params\.)?(temperature|top_p|seed)$")
#: a model's keys that decide which sampling rules apply (:func:`geoagent.providers.sampling.sent_sampling`)
_RULE_KEYS = ("provider", "model", "base_url", "reasoning_model", "model_family")


def _recorded_params(entry: dict[str, Any]) -> dict[str, Any]:
    """A recorded ``[[models]]`` entry's request params, as :meth:`geoagent.config.ModelConfig.default_params`
    makes them."""
    out: dict[str, Any] = {"max_output_tokens": entry.get("max_output_tokens"), "temperature": entry.get("temperature")}
    if entry.get("seed") is not None:
        out["seed"] = entry["seed"]
    out.update(entry.get("params") if isinstance(entry.get("params"), dict) else {})
    return out


def unsent_sampling_changes(call_keys: dict[str, tuple[Any, Any]], before_models: list[Any], cfg: Any
                            ) -> dict[str, tuple[Any, Any]]:
    """The changed keys of ``call_keys`` that are sampling settings of a ``[[models]]`` entry whose requests carry
    the same sampling before and after (:func:`geoagent.providers.sampling.sent_sampling`): ``models[0].temperature``
    0.0 -> 1 for an OpenAI reasoning model, which is sent no temperature either way. Such a change alters the
    request key (the configured params are hashed) but no request body, so it mixes no results.

    ``before_models``: the recorded entries lined up with ``cfg.models`` by name
    (:func:`geoagent.runtime.manifest.align_by_name`). Only entries whose rule keys (provider, model, base_url,
    reasoning_model, model_family) did not change are judged, each by its current rules; ``{}`` otherwise."""
    from geoagent.providers.sampling import SAMPLING_PARAMS, sent_sampling

    models = list(getattr(cfg, "models", ()) or ())
    by_model: dict[int, list[str]] = {}
    for key in call_keys:
        hit = _SAMPLING_KEY.match(key)
        if hit:
            by_model.setdefault(int(hit.group(1)), []).append(key)
    out: dict[str, tuple[Any, Any]] = {}
    for i, keys in by_model.items():
        old = before_models[i] if i < len(before_models) else None
        if i >= len(models) or not isinstance(old, dict):
            continue
        m = models[i]
        if any(f"models[{i}].{k}" in call_keys for k in _RULE_KEYS):
            continue

        def sent(params: dict[str, Any]) -> dict[str, Any]:
            got = sent_sampling(m.provider, m.model, params, base_url=m.effective_base_url,
                                reasoning_model=m.reasoning_model, family=getattr(m, "model_family", None))
            return {k: got[k] for k in SAMPLING_PARAMS if k in got}

        if sent(_recorded_params(old)) == sent(m.default_params()):
            out.update({k: call_keys[k] for k in keys})
    return out


def unsent_line(name: str, unsent: dict[str, tuple[Any, Any]], keys_text: str) -> str | None:
    """One info line for changed sampling settings that no request carries, before or after
    (:func:`unsent_sampling_changes`; ``None`` when there are none)."""
    if not unsent:
        return None
    return (f"info: campaign {name}: sampling settings changed since its last run ({keys_text}), but the model is "
            "sent none of them either way (an OpenAI reasoning model is sent no temperature or top_p; "
            "manifest sampling_sent), so its requests carry the same sampling and nothing mixes.")


def not_sent_of(cfg: Any) -> Callable[[str, dict[str, Any]], set[str]]:
    """For :func:`params_mix_lines`: a function of a ``[[models]]`` name and an answer's stored params giving
    the sampling settings among them that were not sent to that model (:func:`geoagent.providers.sampling.sent_sampling`:
    an OpenAI reasoning model's temperature other than 1, a Claude 4.7+ model's temperature, ...); the params
    are read over the model's configured ones (a mix's params are cut to the changed settings). Empty for a
    name ``cfg`` has no model of (a replay's released models)."""
    from geoagent.providers.sampling import SAMPLING_PARAMS, sent_sampling

    models = {m.name: m for m in getattr(cfg, "models", ()) or ()}

    def not_sent(name: str, params: dict[str, Any]) -> set[str]:
        m = models.get(name)
        if m is None:
            return set()
        full = {**m.default_params(), **params}
        sent = sent_sampling(m.provider, m.model, full, base_url=m.effective_base_url,
                             reasoning_model=m.reasoning_model, family=getattr(m, "model_family", None))
        return {k for k in SAMPLING_PARAMS if full.get(k) is not None and k not in sent}

    return not_sent


def params_mix_lines(mix: dict[str, list[tuple[dict[str, Any], int]]],
                     not_sent: Callable[[str, dict[str, Any]], set[str]] | None = None) -> list[str]:
    """One sentence per model of :func:`params_mix`: ``local-a: 228 answers with max_output_tokens 256, 114 with
    max_output_tokens 200`` (only the settings that differ between its groups are named). ``not_sent``
    (:func:`not_sent_of`): a setting the model was not sent reads ``temperature 0.0 (not sent)``, so the line
    does not claim the model answered under it."""
    out = []
    for model, groups in mix.items():
        differ = sorted({k for p, _ in groups for k in p
                         if len({orjson.dumps(q.get(k), option=orjson.OPT_SORT_KEYS) for q, _ in groups}) > 1})
        parts = []
        for i, (p, n) in enumerate(groups):
            unsent = not_sent(model, p) if not_sent is not None else set()
            shown = ", ".join((f"{k} {p[k]!r}" + (" (not sent)" if k in unsent else "")) if k in p
                              else f"{k} unset" for k in differ)
            parts.append(f"{n} answer{'s' if n != 1 else ''} with {shown}" if i == 0 else f"{n} with {shown}")
        out.append(f"{model}: {'; '.join(parts)}")
    return out


def params_mix_json(mix: dict[str, list[tuple[dict[str, Any], int]]]) -> dict[str, list[dict[str, Any]]]:
    """:func:`params_mix` for the manifest: ``{model: [{"params": {...}, "answers": n}, ...]}``."""
    return {m: [{"params": p, "answers": n} for p, n in groups] for m, groups in mix.items()}


MIX_WARNING = ("results mix configurations: some models' answers were made under different request settings "
               "(the config changed between runs of this campaign), and every figure pools them")
