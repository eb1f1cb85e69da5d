"""GeoHint conditions: which prompt template, whether a hint is given, what the answer must contain.

Seed 000, Sec. 4.1 and App. A.1. Every condition shares one question and differs in the context
sentence ("I took this photo near <reference point>. ", prepended) and in what is appended:

=================  ==========  =======  ==============================================================
condition          schema      context  appended to the schema
=================  ==========  =======  ==============================================================
``baseline``       forced      no       nothing (the no-context control)
``forced``         forced      yes      nothing (the paper's "context" condition)
``forced_warn``    forced      yes      the warning that the user's mention may be wrong
``forced_chain``   forced      yes      the five-category evidence checklist + ``evidence`` object
``v1``             v1          yes      nothing; permissive schema that allows "unknown" (control)
``v1_baseline``    v1          no       nothing
=================  ==========  =======  ==============================================================

Templates live in ``geoagent/prompts/geohint_*.txt`` (our own wording, faithful to the protocol) and
use ``string.Template`` placeholders (``${context}``, ``${reference_point}``), so JSON braces in them
need no escaping. A campaign config lists the conditions and their order under ``geohint.conditions``
(names or the aliases ``context``, ``warned``, ``checklist``, ``permissive``); ``geohint.prompts_dir``
points at an edited copy of the templates.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PROMPTS_DIR = Path(__file__).resolve().parents[1] / "prompts"
CONTEXT_TEMPLATE = "geohint_context.txt"


@dataclass(frozen=True, slots=True)
class Condition:
    """One GeoHint condition.

    Attributes
    ----------
    name : str
        Condition name as stored with every result (``baseline``, ``forced``, ...).
    schema : str
        Output schema: ``forced`` (no "unknown") or ``v1`` (permissive).
    uses_context : bool
        Whether the context sentence with a reference point is prepended.
    template : str
        File name of the schema template under the prompts folder.
    suffixes : tuple of str
        Template files appended after the schema (warning, checklist).
    evidence : bool
        The answer must carry an ``evidence`` object (checklist condition).
    allows_unknown : bool
        "unknown" is an allowed answer (permissive control).
    """

    name: str
    schema: str
    uses_context: bool
    template: str
    suffixes: tuple[str, ...] = ()
    evidence: bool = False
    allows_unknown: bool = False


BUILTIN_CONDITIONS: dict[str, Condition] = {
    c.name: c
    for c in (
        Condition("baseline", "forced", False, "geohint_forced.txt"),
        Condition("forced", "forced", True, "geohint_forced.txt"),
        Condition("forced_warn", "forced", True, "geohint_forced.txt", ("geohint_warn.txt",)),
        Condition("forced_chain", "forced", True, "geohint_forced.txt", ("geohint_chain.txt",), evidence=True),
        Condition("v1", "v1", True, "geohint_v1.txt", allows_unknown=True),
        Condition("v1_baseline", "v1", False, "geohint_v1.txt", allows_unknown=True),
    )
}
ALIASES = {
    "context": "forced",
    "warned": "forced_warn",
    "warn": "forced_warn",
    "checklist": "forced_chain",
    "evidence": "forced_chain",
    "chain": "forced_chain",
    "permissive": "v1",
    "no_context": "baseline",
    "none": "baseline",
}
DEFAULT_CONDITIONS = ("baseline", "forced", "forced_warn", "forced_chain", "v1")
BASELINE_CONDITIONS = frozenset(n for n, c in BUILTIN_CONDITIONS.items() if not c.uses_context)


def get_condition(name: str) -> Condition:
    """Look up a condition by name or alias.

    Raises
    ------
    KeyError
        Unknown name (the message names the closest known one, :func:`geoagent.config.did_you_mean`, and lists
        them all).
    """
    key = ALIASES.get(name, name)
    try:
        return BUILTIN_CONDITIONS[key]
    except KeyError:
        from geoagent.config import did_you_mean

        known = sorted(BUILTIN_CONDITIONS) + sorted(ALIASES)
        raise KeyError(f"unknown GeoHint condition {name!r}{did_you_mean(name, known)}; known: {known}") from None


def conditions_from_config(config: Mapping[str, Any] | None) -> list[Condition]:
    """The ordered conditions of a campaign config (``config["geohint"]["conditions"]`` or
    ``config["conditions"]``), defaulting to :data:`DEFAULT_CONDITIONS`.

    Raises
    ------
    ValueError
        A condition listed twice, or the list is empty.
    KeyError
        An unknown condition name (``geohint.conditions[i]``).
    """
    section = (config or {}).get("geohint", config or {})
    names = section.get("conditions", DEFAULT_CONDITIONS)
    if isinstance(names, str) or not isinstance(names, Iterable):
        raise ValueError(f"geohint.conditions must be a list of names, got {names!r}")
    out: list[Condition] = []
    for i, n in enumerate(names):
        try:
            c = get_condition(str(n))
        except KeyError as exc:
            raise KeyError(f"geohint.conditions[{i}]: {exc.args[0]}") from None
        if c in out:
            raise ValueError(f"geohint.conditions lists {c.name!r} twice")
        out.append(c)
    if not out:
        raise ValueError("geohint.conditions is empty")
    return out


class PromptBook:
    """Loads and renders the condition templates from a prompts folder (cached per instance).

    ``prompts_dir`` is the configured ``geohint.prompts_dir`` (default: the packaged templates); a relative one
    is taken from the working directory, as every path of a campaign file. ``source`` names the config file in
    the error for a missing template."""

    def __init__(self, prompts_dir: str | Path | None = None, *, source: str | None = None) -> None:
        self.dir = Path(prompts_dir) if prompts_dir else PROMPTS_DIR
        self._configured = str(prompts_dir) if prompts_dir else None
        self._source = source
        self._cache: dict[str, str] = {}

    def text(self, filename: str) -> str:
        """Raw template text. Raises ``FileNotFoundError`` naming the file (and, for a configured
        ``prompts_dir``, the key, the config file and the folder a relative path was taken from, and, when that
        folder exists, every packaged ``geohint_*.txt`` it lacks and where to copy them from); ``ValueError``
        naming the file (and the key) when it is not UTF-8 text."""
        if filename not in self._cache:
            path = self.dir / filename
            if not path.is_file():
                if self._configured is None:
                    raise FileNotFoundError(f"GeoHint prompt template not found: {path}")
                from geoagent.paths import config_path_problem

                lacks = ""
                if self.dir.is_dir():  # a folder holding only the edited template: name all it lacks at once
                    absent = sorted(f.name for f in PROMPTS_DIR.glob("geohint_*.txt") if not (self.dir / f.name).is_file())
                    lacks = (f"; prompts_dir replaces the packaged templates as a whole (each one the conditions use "
                             f"is read from it): this folder lacks {len(absent)} of the packaged templates "
                             f"({', '.join(absent)}): copy them from {PROMPTS_DIR}, then edit those to change")
                raise FileNotFoundError(
                    f"GeoHint prompt template {filename} not found in prompts_dir {self._configured}: "
                    f"{config_path_problem('geohint.prompts_dir', self._configured, self._source, file=filename)}"
                    + lacks)
            try:
                self._cache[filename] = path.read_text(encoding="utf-8")
            except UnicodeDecodeError as exc:  # saved as UTF-16 or Latin-1: name the key and the file
                key = "geohint.prompts_dir" + (f" in {self._source}" if self._source
                                               and not str(self._source).startswith("<") else "")
                raise ValueError(f"GeoHint prompt template {path} is not UTF-8 text ({exc.reason} at byte "
                                 f"{exc.start})" + (f": {key}" if self._configured else "")
                                 + "; save it as UTF-8") from None
        return self._cache[filename]

    def render(self, condition: Condition | str, reference_point: str | None = None) -> str:
        """Full prompt of ``condition``; ``reference_point`` (its English name) for context conditions.

        Raises
        ------
        ValueError
            A context condition without a reference point, or a baseline with one.
        KeyError
            A template uses a placeholder other than ``${context}`` / ``${reference_point}``.
        """
        cond = get_condition(condition) if isinstance(condition, str) else condition
        if cond.uses_context:
            if not reference_point or not str(reference_point).strip():
                raise ValueError(f"condition {cond.name!r} needs a reference point")
            context = string.Template(self.text(CONTEXT_TEMPLATE)).substitute(reference_point=str(reference_point).strip())
        else:
            if reference_point:
                raise ValueError(f"condition {cond.name!r} takes no reference point")
            context = ""
        body = string.Template(self.text(cond.template)).substitute(context=context).rstrip("\n")
        for suffix in cond.suffixes:
            body += "\n" + self.text(suffix).strip("\n")
        return body + "\n"


_DEFAULT_BOOK: PromptBook | None = None


def render_prompt(condition: Condition | str, reference_point: str | None = None, *, prompts_dir: str | Path | None = None) -> str:
    """Render one condition's prompt from the packaged templates (or ``prompts_dir``)."""
    global _DEFAULT_BOOK
    if prompts_dir is not None:
        return PromptBook(prompts_dir).render(condition, reference_point)
    if _DEFAULT_BOOK is None:
        _DEFAULT_BOOK = PromptBook()
    return _DEFAULT_BOOK.render(condition, reference_point)
