"""API keys: looked up by the configured variable NAME in the environment or a ``.env`` file; never shown.

Issue 2 point 8: keys come only from the environment or ``.env`` and are never written to state, logs,
reports or tracebacks. The config holds only the *name* of the variable (``api_key_env``); the value is
read here, wrapped in :class:`Secret` (whose ``repr``/``str`` is ``'***'``) and unwrapped only at the moment
a provider builds its request headers (:meth:`Secret.reveal`).

Lookup order: the real process environment first, then the ``.env`` file (python-dotenv's parser; the file
is read, never loaded into ``os.environ``, so a real variable always wins and child processes do not
inherit values they were not given). Every value revealed through this module is remembered (in memory
only) so :func:`redact` and :class:`RedactingFilter` can scrub it from any text before it is logged, stored
or raised.

How short a remembered value may be and still be scrubbed by itself depends on where the key goes:

* the key of a local server (looked up with ``local=True``: a model whose API is not a paid host,
  :attr:`geoagent.config.ModelConfig.on_paid_host`): from :data:`MIN_SECRET_LEN` (8) characters. Such servers
  take any placeholder ("local", "EMPTY", "ollama", "test"), and masking those corrupted ordinary text that
  contains them (a model named "oa-local" stored as "oa-***");
* every other key (a paid host's, e.g. a proxy's short key; Mapillary's token; a lookup that does not say):
  from :data:`MIN_PAID_SECRET_LEN` (4) characters, the floor the HTTP layer's error scrubbing uses too
  (:func:`geoagent.runtime.http._secrets_of`). Such a key is masked wherever it occurs, also inside ordinary
  words: give a paid host a key of its own, not a word. A value of 1-3 characters is never masked (it would
  mangle every line): no real provider issues one.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from dotenv import dotenv_values

ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
MASK = "***"
#: prefixes of real providers' keys that are also legal variable names (Hugging Face, Groq, Stripe-style,
#: Google API keys, GitHub tokens, Replicate): a value starting so is a key pasted into ``api_key_env``
_KEY_PREFIXES = ("hf_", "gsk_", "sk_", "rk_", "pk_", "AIza", "ghp_", "gho_", "ghs_", "github_pat_", "r8_", "xai_")

_known_lock = threading.Lock()
_known_values: set[str] = set()  # secret values seen in this process (memory only), longest first on use
_known_whole: set[str] = set()  # values masked only whole (Secret(whole_only=True): a Redis URL), memory only


class SecretNotFound(KeyError):
    """The configured environment variable is set neither in the environment nor in ``.env``."""

    def __str__(self) -> str:  # KeyError quotes its argument; keep the message readable
        return str(self.args[0]) if self.args else "secret not found"


class Secret:
    """An opaque secret string: ``repr``/``str``/``format`` give ``'***'``; :meth:`reveal` gives the value.

    It cannot be pickled (so it never lands in a file by accident) and compares only by identity.
    """

    __slots__ = ("_value", "name")

    def __init__(self, value: str, name: str = "", *, local: bool = False, whole_only: bool = False) -> None:
        """``value``: the key (non-empty); ``name``: the variable it came from (shown in ``repr``); ``local``: the
        key of a local server, scrubbed by :func:`redact` only from :data:`MIN_SECRET_LEN` characters (else from
        :data:`MIN_PAID_SECRET_LEN`; module docstring); ``whole_only``: masked only whole (any case), never by
        its fragments (a URL holding a host and port, whose fragments would mask every address like it; its
        password is remembered on its own). Raises ValueError for an empty or non-string value."""
        if not isinstance(value, str) or not value:
            raise ValueError("a Secret needs a non-empty string value")
        self._value = value
        self.name = name
        _remember(value, local=local, whole_only=whole_only)

    def reveal(self) -> str:
        """Return the secret value (call only where it goes on the wire, e.g. an auth header)."""
        return self._value

    def __repr__(self) -> str:
        return f"Secret({self.name!r}, {MASK!r})" if self.name else f"Secret({MASK!r})"

    def __str__(self) -> str:
        return MASK

    def __format__(self, spec: str) -> str:
        return MASK

    def __bool__(self) -> bool:
        return True

    def __reduce__(self) -> Any:
        raise TypeError("Secret values cannot be pickled; look the key up by name in the other process")


def looks_like_secret(name: str) -> bool:
    """Whether a would-be variable NAME looks like an API key pasted by mistake (then it must not be echoed).

    True for a known key prefix (``hf_``, ``gsk_``, ``sk_``, ``AIza``, ``ghp_``, ...), for 20+ characters
    mixing lower case, upper case and digits (variable names are conventionally ``UPPER_SNAKE``), and for
    32+ characters of hex or other digit-bearing text without an underscore (raw hex keys).
    """
    if not isinstance(name, str):
        return False
    if name.startswith(_KEY_PREFIXES):
        return True
    has_lower = any(c.islower() for c in name)
    has_upper = any(c.isupper() for c in name)
    has_digit = any(c.isdigit() for c in name)
    if len(name) >= 20 and has_lower and has_upper and has_digit:
        return True
    return len(name) >= 32 and has_digit and "_" not in name


#: how the providers' keys begin: :data:`_KEY_PREFIXES` (less Stripe's restricted and publishable ``rk_``/``pk_``,
#: no model-API keys) and the prefixes no variable name has (OpenAI sk-/sk-proj-, Anthropic sk-ant-, OpenRouter
#: sk-or-, xAI xai-): a value that begins so and whose body is random is a key pasted where a name or an id goes
#: (:func:`looks_like_pasted_key`)
_PASTED_KEY_PREFIXES = ("sk-", "xai-") + tuple(p for p in _KEY_PREFIXES if p not in ("rk_", "pk_"))


#: the documented shapes of some providers' keys, taken whatever their body (Google API keys: AIza + 35; GitHub
#: classic tokens: ghp_/gho_/ghs_ + 36; Hugging Face: hf_ + 34 letters; Groq: gsk_ + 52; OpenAI's older keys:
#: sk- + 48)
_KEY_FORMATS = re.compile(r"AIza[0-9A-Za-z_-]{35}|gh[pos]_[A-Za-z0-9]{36}|hf_[A-Za-z]{34}|gsk_[A-Za-z0-9]{52}"
                          r"|sk-[A-Za-z0-9]{48}")


def _char_class(c: str) -> int:
    return 0 if c.islower() else 1 if c.isupper() else 2


def _case_changes(segments: list[str]) -> float:
    """Share of neighbouring characters, within each segment, whose class (lower case, upper case, digit)
    differs: about 0.5-0.6 in the random part of a key, 0.1-0.35 in names and model ids (words, CamelCase)."""
    pairs = sum(max(len(x) - 1, 0) for x in segments)
    changes = sum(1 for x in segments for a, b in zip(x, x[1:]) if _char_class(a) != _char_class(b))
    return changes / pairs if pairs else 0.0


def _hex_run(segments: list[str]) -> bool:
    """A segment of 20+ hexadecimal characters holding both a digit and a letter (an Azure key, the hex part
    of a Mapillary token, an OpenRouter key's body)."""
    return any(len(x) >= 20 and re.fullmatch(r"[0-9a-f]+|[0-9A-F]+", x) and re.search(r"\d", x)
               and re.search(r"[a-fA-F]", x) for x in segments)


def looks_like_pasted_key(value: str) -> bool:
    """Whether a VALUE written where a name, a model id or free text goes is an API key pasted by mistake
    (break28 #5): one word of 20+ characters of ``[A-Za-z0-9_-]`` that begins as a provider's keys do
    (``sk-proj-``, ``AIza``, ``hf_``, ...: :data:`_PASTED_KEY_PREFIXES`) and whose body is random, not words: a
    segment (between ``-`` and ``_``) of 12+ characters with class changes in at least a quarter of its
    neighbouring characters (:func:`_case_changes`), or a run of 20+ hex digits. So ``sk-proj-Xy3...`` is taken and
    ``sk-bratislava-geoverify-pilot``, ``hf_llava_next_mistral_7b`` (walk28 review) are not. Narrower than
    :func:`looks_like_secret`, which also takes any long mixed-case word and so would take model ids such as
    ``meta-llama/Llama-3.1-70B-Instruct``. Keys in a documented shape (:data:`_KEY_FORMATS`) are taken whatever
    their body; of keys drawn at random in other shapes (``sk-proj-``, ``sk-ant-``, ``sk-or-v1-``, ``xai-``), fewer
    than 1 in 200 is missed."""
    if not (isinstance(value, str) and len(value) >= 20 and value.startswith(_PASTED_KEY_PREFIXES)
            and re.fullmatch(r"[A-Za-z0-9_-]+", value)):
        return False
    if _KEY_FORMATS.fullmatch(value):
        return True
    segments = [x for x in re.split(r"[-_]", value) if x]
    return _hex_run(segments) or (max(len(x) for x in segments) >= 12 and _case_changes(segments) >= 0.25)


def _key_candidates(text: str) -> list[str]:
    """The runs of ``[A-Za-z0-9_-]`` (20+ characters) in ``text``, and each tail of such a run that starts with a
    key prefix after a ``-`` or ``_`` (``OPENAI_API_KEY_sk-proj-...``): the places a pasted key can sit whatever
    surrounds it (``key=...``, ``...?key=...``, a trailing ``.``; walk28 break review)."""
    out = []
    for m in re.finditer(r"[A-Za-z0-9_-]{20,}", text):
        run = m.group()
        out.append(run)
        out += [run[i:] for i in range(1, len(run) - 19)
                if run[i - 1] in "-_" and run.startswith(_PASTED_KEY_PREFIXES, i)]
    return out


def contains_pasted_key(text: str) -> bool:
    """Whether ``text`` (a name, a model id, free text) holds an API key pasted by mistake anywhere in it
    (:func:`looks_like_pasted_key` of each of its :func:`_key_candidates`): ``key=sk-proj-...``, a key followed by
    a full stop, or in a URL's query are found as a bare one is."""
    return isinstance(text, str) and any(looks_like_pasted_key(c) for c in _key_candidates(text))


def looks_like_key_text(value: str) -> bool:
    """Whether a value shown in an error message (a config value or key) may be an API key: a pasted one
    (:func:`looks_like_pasted_key`), or any word of 20+ letters and digits that looks random: a run of 20+ hex
    digits (an Azure key, a Mapillary token's hex part), or a segment of 16+ characters of ``[A-Za-z0-9]`` with
    class changes in at least 40% of its neighbouring characters. Model ids (``meta-llama/Llama-3.1-70B-Instruct``,
    ``Qwen2.5-VL-72B-Instruct-AWQ``), CamelCase names (``GeoVerifyReplay2024Edition``) and host names are shown
    (walk28 review: they were hidden as keys). Checked in each run of ``[A-Za-z0-9_|-]``, whatever surrounds it."""
    if not isinstance(value, str):
        return False
    if contains_pasted_key(value):
        return True
    for m in re.finditer(r"[A-Za-z0-9_|-]+", value):  # each run, whatever surrounds it (key=..., ?key=..., "...".)
        segments = [x for x in re.split(r"[^A-Za-z0-9]+", m.group()) if x]
        if sum(map(len, segments)) < 20:
            continue
        if _hex_run(segments) or (max(map(len, segments)) >= 16 and _case_changes(segments) >= 0.4):
            return True
    return False


#: shortest revealed key of a LOCAL server (``local=True``) that :func:`redact` scrubs by itself: local servers'
#: placeholder keys ("local", "EMPTY", "ollama") are shorter, and masking them corrupted ordinary text that
#: contains them (a model named "oa-local" stored as "oa-***" in the manifest, then reported as changed on every
#: run); real providers' keys are far longer (20+ characters)
MIN_SECRET_LEN = 8
#: shortest revealed key of any other host (a paid API, a proxy in front of one, Mapillary; or a lookup that
#: does not say where the key goes) that :func:`redact` scrubs by itself; also the floor of ``extra`` values and
#: of the HTTP layer's header scrubbing (:func:`geoagent.runtime.http._secrets_of`)
MIN_PAID_SECRET_LEN = 4


def min_secret_len(*, local: bool) -> int:
    """Shortest key :func:`redact` scrubs by itself: :data:`MIN_SECRET_LEN` (8 characters) for a local server's
    key, :data:`MIN_PAID_SECRET_LEN` (4) for any other (module docstring)."""
    return MIN_SECRET_LEN if local else MIN_PAID_SECRET_LEN


def secret_spellings(value: str) -> set[str]:
    """The ways a key ``value`` can be spelled in the text of an HTTP answer that repeats it: as is, and as a JSON
    string writes it (``"`` and ``\\`` escaped, control and non-ASCII characters as ``\\uXXXX``; also with every
    ``/`` written ``\\/``, as PHP's ``json_encode`` and some proxies do), and percent-encoded as a URL's query or
    path carries it (``urllib.parse.quote`` with nothing safe, and ``quote_plus``; security37 #2: an answer that
    repeated a base64-style key as ``...%2B...%2F...`` was stored and exported; :func:`redact` folds letter case, so
    ``%2b`` too). A server that echoes a refused key in its error body must not put it, so escaped, in a stored
    reason, the progress stream or ``status``."""
    import json
    from urllib.parse import quote, quote_plus

    escaped = json.dumps(value)[1:-1]
    return {value, escaped, escaped.replace("/", "\\/"), quote(value, safe=""), quote_plus(value)}


#: shortest base64 stretch of a key that :func:`base64_spellings` gives (shorter ones would be common text)
MIN_BASE64_SPELLING = 16


@functools.lru_cache(maxsize=64)
def base64_spellings(value: str) -> frozenset[str]:
    """The stretches of base64 text that any base64 encoding of a text holding ``value`` contains, whatever came
    before it: a server that echoes a header such as ``Authorization: Basic base64("user:KEY")`` or a base64 of the
    key itself repeats the key transformed (session 29's note: such echoes were not masked). For each of the three
    alignments of the key's bytes in the encoded stream (0, 1 or 2 bytes before it, mod 3), the base64 characters
    whose 6 bits all come from the key (RFC 4648 section 4; the URL-safe alphabet of section 5 too), when at least
    :data:`MIN_BASE64_SPELLING` long; empty for a short key. :func:`redact` masks them whole (a cut base64 echo is
    not looked for: its runs would cost a search each on every answer's text)."""
    import base64

    raw = value.encode("utf-8")
    out: set[str] = set()
    for before in range(3):
        enc = base64.b64encode(b"\0" * before + raw).decode("ascii")
        start, end = -(-8 * before // 6), 8 * (before + len(raw)) // 6  # characters wholly inside the key's bits
        stable = enc[start:end]
        if len(stable) >= MIN_BASE64_SPELLING:
            out |= {stable, stable.replace("+", "-").replace("/", "_")}
    return frozenset(out)


@functools.lru_cache(maxsize=64)
def entity_spellings(value: str) -> frozenset[str]:
    """The ways an HTML or XML page can repeat a key ``value`` with character references (break32 #3: a 400 page
    that echoed the key as ``&#90;&#113;&#55;...`` put it whole in the dead-letter reason, the progress stream and
    ``status``): every character as a decimal reference (``&#90;``) or as a hexadecimal one (``&#x5a;``; the mask
    folds letter case, so ``&#X5A;`` too), only the characters other than ASCII letters and digits so written
    (``...&#43;...&#47;...``), and HTML escaping of ``& < > " '`` (``&amp;``, ``&quot;``, ``&#x27;`` or ``&#39;``).
    Only spellings that differ from ``value`` are given; :func:`redact` masks them whole."""
    import html

    def refs(keep_alnum: bool, fmt: str) -> str:
        return "".join(c if keep_alnum and c.isascii() and c.isalnum() else fmt.format(ord(c)) for c in value)

    out = {refs(False, "&#{};"), refs(False, "&#x{:x};"), refs(True, "&#{};"), refs(True, "&#x{:x};")}
    escaped = html.escape(value, quote=True)
    out |= {escaped, escaped.replace("&#x27;", "&#39;")}
    out.discard(value)
    return frozenset(out)


@functools.lru_cache(maxsize=64)
def unicode_escape_spellings(value: str) -> frozenset[str]:
    """The key ``value`` with every character written as a JSON ``\\uXXXX`` escape (``\\u0073\\u006b...``;
    characters past U+FFFF as their UTF-16 surrogate pair), as a hand-written or hostile JSON error body may repeat
    it (sec42 #1: ``key was \\u0073\\u006b\\u002d...`` reached the dead-letter reason, ``run.py dead`` and the
    queue, since :func:`secret_spellings` gives only the escapes a JSON encoder makes). Lower-case hex only:
    :func:`mask_values` folds ASCII letter case, so ``\\u004B`` (and a mix of cases) is matched by ``\\u004b``.
    :func:`redact` masks it whole: its runs of 8 characters stand for one or two characters of the key, and
    searching each of them (six times the key's length) on every log line would cost more than the echo is worth.
    """
    units = value.encode("utf-16-be")
    return frozenset({"".join(f"\\u{int.from_bytes(units[i:i + 2], 'big'):04x}" for i in range(0, len(units), 2))})


def _remember(value: str, *, local: bool = False, whole_only: bool = False) -> None:
    if len(value) >= min_secret_len(local=local):
        with _known_lock:
            (_known_whole if whole_only else _known_values).update(secret_spellings(value))
            _known_whole.update(base64_spellings(value))  # a base64 echo of it, masked whole
            _known_whole.update(entity_spellings(value))  # an HTML page's character references of it, whole
            _known_whole.update(unicode_escape_spellings(value))  # every character a JSON \u escape, whole (sec42 #1)


def dotenv_where(dotenv_path: str | os.PathLike[str] | None = None) -> str:
    """Where a message says the ``.env`` file was looked for: the file given, or the default one with where it is
    read from (walk32 #1: a key in a ``.env`` beside the campaign file, run from another folder, was reported not
    set, with nothing saying which ``.env`` had been read): ``.env of the folder the command runs in
    (/abs/.env; GEOAGENT_DOTENV names another file)``."""
    if dotenv_path is not None:
        return str(Path(dotenv_path))
    path = dotenv_path_default()
    if os.environ.get("GEOAGENT_DOTENV"):
        return f"{path} (GEOAGENT_DOTENV)"
    return f".env of the folder the command runs in ({path.resolve()}; GEOAGENT_DOTENV names another file)"


def dotenv_path_default() -> Path:
    """The ``.env`` file consulted by default: ``$GEOAGENT_DOTENV`` if set, else ``./.env``."""
    return Path(os.environ.get("GEOAGENT_DOTENV") or ".env")


log = logging.getLogger(__name__)
#: the start of python-dotenv's own warning for a line it cannot parse (it names no file): dropped, since
#: :func:`read_dotenv` says the same naming ``file:line`` (:func:`_dotenv_problems`)
_DOTENV_PARSE_WARNING = "python-dotenv could not parse statement"
#: ``NAME=`` at the start of a ``.env`` line (``export`` allowed), to name the variable of a line that cannot be parsed;
#: also ``NAME:``, the YAML habit, which python-dotenv cannot parse (break34 config #11: reported as "not set")
_DOTENV_NAME = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)\s*[=:]")
_reported_lines: set[tuple[str, int]] = set()  # (file, line) already logged as unparsable in this process


class _DropFilelessDotenvWarning(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(_DOTENV_PARSE_WARNING)


logging.getLogger("dotenv.main").addFilter(_DropFilelessDotenvWarning())


def _dotenv_problems(text: str) -> dict[int, str | None]:
    """1-based line -> variable NAME (None when no ``NAME=`` starts it) of every statement of a ``.env`` text that
    python-dotenv cannot parse (an unclosed quote, a line without ``=``); python-dotenv drops such a line."""
    from io import StringIO

    try:
        from dotenv.parser import parse_stream  # python-dotenv's parser (not its documented API: guarded)
    except ImportError:  # another python-dotenv layout: lines it drops are then only named by its own warning
        return {}

    out: dict[int, str | None] = {}
    for binding in parse_stream(StringIO(text)):
        if binding.error:
            m = _DOTENV_NAME.match(binding.original.string)
            name = m.group(1) if m and not looks_like_secret(m.group(1)) else None
            out[binding.original.line] = name
    return out


def _unparsable_line_of(env_name: str, path: Path) -> int | None:
    """The line of ``.env`` file ``path`` where ``env_name`` is assigned in a statement python-dotenv cannot parse."""
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except (OSError, UnicodeDecodeError):
        return None
    return next((line for line, name in _dotenv_problems(text).items() if name == env_name), None)


def read_dotenv(path: str | os.PathLike[str] | None = None, *, report: bool = True) -> dict[str, str]:
    """Parse a ``.env`` file (python-dotenv syntax) without touching ``os.environ``; {} if it is absent.

    A statement python-dotenv cannot parse (an unclosed quote, a line without ``=``) is left out, as python-dotenv
    does, and logged once per process as ``<file>:<line>: cannot be parsed ...`` (naming its variable, never its
    value; python-dotenv's own warning names no file and is dropped); ``report=False`` logs nothing (a file the
    run does not read, looked at only for a hint: :func:`unread_dotenv_hint`).

    Raises
    ------
    ValueError
        The file is not UTF-8 text (python-dotenv reads UTF-8): the message names the file and line, never
        the bytes (the line may hold a key); or it cannot be read (permissions, an I/O error): the message names
        the file and the reason.
    """
    p = Path(path) if path is not None else dotenv_path_default()
    if not p.is_file():
        return {}
    try:
        data = p.read_bytes()
    except OSError as exc:  # security37 #4: a bare EACCES was blamed on [paths] by the CLI's data-root hint
        raise ValueError(f"{p}: cannot read the .env file ({exc.strerror or type(exc).__name__}); make it readable, "
                         "or point GEOAGENT_DOTENV at another file") from None
    try:
        text = data.decode("utf-8-sig")  # a byte-order mark (Windows Notepad) would glue onto the first name
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ValueError(f"{p}:{line}: not UTF-8 text; save the file as UTF-8 (the API keys are read from it)") from None
    from io import StringIO

    for line, name in (_dotenv_problems(text) if report else {}).items():
        with _known_lock:
            if (str(p), line) in _reported_lines:
                continue
            _reported_lines.add((str(p), line))
        what = f"the line of variable {name}" if name else "the line"
        log.warning("%s:%d: %s cannot be parsed (python-dotenv syntax: NAME=value, a quote closed where it opens); "
                    "it is ignored", p, line, what)
    return {k: v for k, v in dotenv_values(stream=StringIO(text)).items() if v is not None}


def lookup_secret(
    env_name: str,
    *,
    dotenv_path: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
    local: bool = False,
    whole_only: bool = False,
) -> Secret | None:
    """Return the secret held by variable ``env_name`` (environment first, then ``.env``), or None.

    Parameters
    ----------
    env_name : str
        The NAME of the variable (e.g. ``OPENAI_API_KEY``), as configured in ``models[].api_key_env``.
    dotenv_path : path, optional
        The ``.env`` file to consult (default :func:`dotenv_path_default`).
    environ : dict, optional
        Environment to consult instead of ``os.environ`` (tests).
    local : bool
        The key is for a local server (a model not on a paid host): :func:`redact` scrubs it only from
        :data:`MIN_SECRET_LEN` (8) characters; otherwise (default) from :data:`MIN_PAID_SECRET_LEN` (4).
    whole_only : bool
        Mask the value only whole, not by its fragments (:class:`Secret`; a Redis URL).

    Returns
    -------
    Secret or None
        The value with surrounding whitespace removed (a CRLF ``.env`` read by other tools leaves ``\r``,
        which an HTTP header cannot carry), or None when unset or blank.

    Raises
    ------
    ValueError
        ``env_name`` is not a valid variable name, or its value has control characters (line break,
        tab, NUL) inside it (neither message echoes the value: it may be a key).
    """
    if not isinstance(env_name, str) or not ENV_NAME_RE.match(env_name) or looks_like_secret(env_name):
        raise ValueError("api_key_env must be the NAME of an environment variable (letters, digits, _)")
    env = os.environ if environ is None else environ
    value = (env.get(env_name) or "").strip()
    where = "the environment"
    if not value:
        value = (read_dotenv(dotenv_path).get(env_name) or "").strip()
        where = "the .env file"
        path = Path(dotenv_path) if dotenv_path is not None else dotenv_path_default()
        if not value and path.is_file() and (line := _unparsable_line_of(env_name, path)) is not None:
            # not "not set": the variable is there, on a line python-dotenv dropped (never echo it: it holds a key)
            raise ValueError(f"API key variable {env_name}: {path}:{line} sets it but cannot be parsed (python-dotenv "
                             "syntax: NAME=value, a quote closed where it opens); fix that line")
    if value and not value.isprintable():  # line breaks, tabs, NUL...: no HTTP header can carry them
        _remember(value, local=local, whole_only=whole_only)  # never echoed, but scrub it wherever it might surface
        raise ValueError(f"API key variable {env_name} (from {where}) holds control characters "
                         "(line break, tab, NUL) inside the value; check its quotes and line ends")
    return Secret(value, env_name, local=local, whole_only=whole_only) if value else None


def get_secret(
    env_name: str,
    *,
    dotenv_path: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
    local: bool = False,
) -> Secret:
    """Like :func:`lookup_secret` but raise :class:`SecretNotFound` (naming the variable) when unset."""
    secret = lookup_secret(env_name, dotenv_path=dotenv_path, environ=environ, local=local)
    if secret is None:
        where = dotenv_where(dotenv_path)
        empty = empty_where(env_name, dotenv_path=dotenv_path, environ=environ)
        if empty:
            raise SecretNotFound(f"API key variable {env_name} is set but empty in {empty} (and not set elsewhere)")
        near = close_set_variable(env_name, dotenv_path=dotenv_path, environ=environ)
        raise SecretNotFound(f"API key variable {env_name} is not set in the environment or in {where}"
                             + (f" (did you mean {near[0]}, which is set in {near[1]}?)" if near else ""))
    return secret


def empty_where(
    env_name: str,
    *,
    dotenv_path: str | os.PathLike[str] | None = None,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """Where a variable that :func:`lookup_secret` found no value for is *set but empty* (``NAME=`` or only
    whitespace): ``"the environment"``, else the ``.env`` file's path (``".env"`` by default), else None (not
    there at all, or the file cannot be read). Lets a message say "set but empty" instead of "not set"
    (walk19 10c: ``OPENAI_API_KEY=`` in ``.env`` was reported as not set). Never returns or logs a value."""
    env = os.environ if environ is None else environ
    if env_name in env and not (env.get(env_name) or "").strip():
        return "the environment"
    try:
        values = read_dotenv(dotenv_path)
    except (OSError, ValueError):
        return None
    if env_name in values and values[env_name] is not None and not values[env_name].strip():
        return str(Path(dotenv_path) if dotenv_path is not None else dotenv_path_default())
    return None


#: shortest run of a key's consecutive characters that :func:`mask_values` masks on its own: a server that
#: prints a truncated key ("sk-abc...xyz", the first or last characters only) or cuts it at a length limit
#: shows such a run, and 8 characters of a random key are as good as secret (62^8 values)
FRAGMENT_LEN = 8
#: characters a key run made of words is built of: letters of one case, or capitalised words ("Password" of a
#: password a person chose), with these separators ("-polish-", "required", "github_p") is no fragment by itself
#: (a placeholder key of words, "sk-no-key-required", masked "required" in every "field required"; a provider's
#: public prefix "sk-proj-" is no secret); a random key's run of 8 is such a word run a few times in a thousand,
#: and its neighbouring runs still mask it
_WORD_SEPARATORS = frozenset("-_./:")
_ASCII_FOLD = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _fold(text: str) -> str:
    """``text`` with ASCII capitals made small; every other character kept, so positions stay aligned
    (``str.lower``/``casefold`` may change the length: "İ" lowers to two characters)."""
    return text.translate(_ASCII_FOLD)


def _word_run(run: str) -> bool:
    """Whether ``run`` (a slice of a key, as issued) reads as words: letters and separators only, either all of one
    case or each stretch of letters between separators lower case or capitalised (a capital, then at least one
    lower-case letter: "Password", "Geoagent" of a password a person chose; a lone capital, "polish-Q" of a key
    cut after its public prefix, is no word)."""
    letters = [c for c in run if c not in _WORD_SEPARATORS]
    if not letters or not all(c.isascii() and c.isalpha() for c in letters):
        return False
    if all(c.islower() for c in letters) or all(c.isupper() for c in letters):
        return True
    stretches = [w for w in re.split(r"[-_./:]+", run) if w]
    return all(w.islower() or (len(w) >= 2 and w[0].isupper() and w[1:].islower()) for w in stretches)


@functools.lru_cache(maxsize=512)
def _fragments(value: str) -> tuple[str, tuple[tuple[str, tuple[int, ...]], ...]]:
    """(``value`` folded, its runs of :data:`FRAGMENT_LEN` characters folded -> their offsets in it), without
    runs that hold whitespace (the scheme of "Bearer KEY") or read as words (:func:`_word_run`). Memory only."""
    folded = _fold(value)
    runs: dict[str, list[int]] = {}
    for i in range(len(value) - FRAGMENT_LEN + 1):
        run = value[i:i + FRAGMENT_LEN]
        if any(c.isspace() for c in run) or _word_run(run):
            continue
        runs.setdefault(folded[i:i + FRAGMENT_LEN], []).append(i)
    return folded, tuple((run, tuple(offsets)) for run, offsets in runs.items())


def mask_values(text: str, values: Iterable[str], mask: str = MASK, *, fragments: bool = True) -> str:
    """``text`` with every occurrence of each of ``values`` replaced by ``mask``: in any case of its ASCII
    letters (a server echoing the key upper-cased), and also any run of :data:`FRAGMENT_LEN` (8) or more
    consecutive characters of a value longer than that (a truncated echo "sk-abc123...", a suffix, a cut),
    except runs that read as words (letters of one case and separators: :func:`_word_run`).

    Parameters
    ----------
    text : str
        Any text (an error body, a log line, a stored answer).
    values : iterable of str
        The secrets (and their spellings); the caller decides the shortest it masks (empty ones are skipped).
    mask : str
        What each masked stretch becomes (overlapping or adjacent matches become one).
    fragments : bool
        False: mask each value only whole (in any case), not its runs of 8.

    Returns
    -------
    str
        ``text`` itself when nothing matched. Cost: one pass to fold the case plus one substring search per
        value and per distinct run of each value (about ``len(value)`` searches), C-speed each.
    """
    if not text:
        return text
    folded = _fold(text)
    n = len(folded)
    spans: list[tuple[int, int]] = []
    covered = bytearray()  # 1 where a span already masks the character (made at the first span)

    def add(s: int, e: int) -> None:
        nonlocal covered
        if not covered:
            covered = bytearray(n)
        covered[s:e] = b"\x01" * (e - s)
        spans.append((s, e))

    for value in values:
        if not value:
            continue
        whole, runs = _fragments(value)
        if not fragments:
            runs = ()
        start = folded.find(whole)
        while start >= 0:
            add(start, start + len(whole))
            start = folded.find(whole, start + 1)
        for run, offsets in runs:
            pos = folded.find(run)
            while pos >= 0:
                if not covered or covered.find(0, pos, pos + FRAGMENT_LEN) >= 0:  # not masked yet
                    for k in offsets:  # widen to the whole stretch that agrees with the value
                        i, j = pos, k
                        while i > 0 and j > 0 and folded[i - 1] == whole[j - 1]:
                            i, j = i - 1, j - 1
                        e, f = pos + FRAGMENT_LEN, k + FRAGMENT_LEN
                        while e < n and f < len(whole) and folded[e] == whole[f]:
                            e, f = e + 1, f + 1
                        add(i, e)
                pos = folded.find(run, pos + 1)
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    at = 0
    cur_s, cur_e = spans[0]
    for s, e in spans[1:]:
        if s <= cur_e:
            cur_e = max(cur_e, e)
            continue
        out += [text[at:cur_s], mask]
        at, (cur_s, cur_e) = cur_e, (s, e)
    out += [text[at:cur_s], mask, text[cur_e:]]
    return "".join(out)


def redact(text: str, extra: list[str | Secret] | tuple[str | Secret, ...] = ()) -> str:
    """Replace every known secret value (and ``extra`` values) in ``text`` with ``'***'``.

    Known values are those revealed in this process: a local server's key of at least :data:`MIN_SECRET_LEN`
    (8) characters, any other of at least :data:`MIN_PAID_SECRET_LEN` (4) (module docstring); ``extra`` values
    are scrubbed from 4 characters on (masking 1-3 character strings would mangle ordinary text). A value is
    masked in any case of its letters, and so is any run of 8+ of its characters that does not read as words
    (a truncated or cut echo of the key: :func:`mask_values`); a base64 echo of a key (``Basic base64("user:KEY")``)
    is masked where it holds the key whole (:func:`base64_spellings`), and so is one written with HTML character
    references (:func:`entity_spellings`) or with every character a JSON ``\\uXXXX`` escape
    (:func:`unicode_escape_spellings`)."""
    if not text:
        return text
    with _known_lock:
        values, whole_values = set(_known_values), set(_known_whole)
    if whole_values:  # whole first: a URL is masked entire before its password's fragments cut it
        text = mask_values(text, (v for v in whole_values if len(v) >= MIN_PAID_SECRET_LEN), fragments=False)
    encoded: set[str] = set()
    for item in extra:
        value = item.reveal() if isinstance(item, Secret) else item
        if value and len(value) >= MIN_PAID_SECRET_LEN:  # a shorter one is never masked, nor its spellings
            values.update(secret_spellings(value))
            encoded.update(base64_spellings(value) | entity_spellings(value) | unicode_escape_spellings(value))
    if encoded - whole_values:  # an extra key's base64 or HTML echo (the known keys' are among whole_values)
        text = mask_values(text, encoded - whole_values, fragments=False)
    return mask_values(text, (v for v in values if v and len(v) >= MIN_PAID_SECRET_LEN))


class RedactingFilter(logging.Filter):
    """A logging filter that scrubs known secret values from each record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: leave it to logging's own error path
            return True
        cleaned = redact(message)
        if cleaned != message or record.args:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        elif record.exc_text:
            record.exc_text = redact(record.exc_text)
        return True


def install_log_redaction(logger: logging.Logger | None = None) -> RedactingFilter:
    """Attach a :class:`RedactingFilter` to every handler of ``logger`` (root by default); return it."""
    target = logger or logging.getLogger()
    flt = RedactingFilter()
    for handler in target.handlers:
        handler.addFilter(flt)
    target.addFilter(flt)
    return flt


def read_or_note(var: str, unreadable: list[str] | None, **lookup: Any) -> tuple[bool, "Secret | None"]:
    """``(True, lookup_secret(var, **lookup))``; with ``unreadable`` a list, a variable that cannot be read (set on
    a ``.env`` line that does not parse, or holding control characters) gives ``(False, None)`` and adds its
    message to ``unreadable`` (once), so a caller names every problem at once (break31 #4).

    Raises
    ------
    ValueError
        ``unreadable`` None and the variable cannot be read (:func:`lookup_secret`; no message echoes a value).
    """
    try:
        return True, lookup_secret(var, **lookup)
    except ValueError as exc:
        if unreadable is None:
            raise
        if str(exc) not in unreadable:
            unreadable.append(str(exc))
        return False, None


def missing_api_keys(
    cfg: Any,
    *,
    dotenv_path: str | os.PathLike[str] | None = None,
    environ: dict[str, str] | None = None,
    unreadable: list[str] | None = None,
) -> list[tuple[str, str]]:
    """Every ``(variable NAME, model name)`` whose paid model's key variable (``api_key_env``, else the provider's
    usual one for its own API host: :attr:`geoagent.config.ModelConfig.key_env`) is set nowhere, in config order.

    Checks each ``[[models]]`` entry that can cost money (:attr:`geoagent.config.ModelConfig.paid`) and names
    an ``api_key_env``, in the environment and then the ``.env`` file (like :func:`lookup_secret`), so one
    error can list them all instead of one per attempt.

    ``unreadable``: a list to collect the message of each variable that cannot be read (set on a ``.env`` line
    that does not parse, or holding control characters) instead of raising at the first, so a dry run names every
    problem at once (break31 #4); each variable once.

    Raises
    ------
    ValueError
        Without ``unreadable``: a configured name is not a valid variable name, or a value holds control characters
        (:func:`lookup_secret`; no message echoes a value).
    """
    out: list[tuple[str, str]] = []
    for m in getattr(cfg, "models", []):
        # key_env: api_key_env, else the provider's usual variable for its own API host (OPENAI_API_KEY for a
        # model without base_url: geoagent.config.ModelConfig.key_env)
        var = getattr(m, "key_env", None) or m.api_key_env
        # a key of a model not on a paid host (a local server's "EMPTY") is scrubbed only from 8 characters
        local = not getattr(m, "on_paid_host", True)
        if not (var and m.paid):
            continue
        readable, found = read_or_note(var, unreadable, dotenv_path=dotenv_path, environ=environ, local=local)
        if readable and found is None:
            out.append((var, m.name))
    return out


def close_set_variable(var: str, *, dotenv_path: str | os.PathLike[str] | None = None,
                       environ: Mapping[str, str] | None = None) -> tuple[str, str] | None:
    """``(NAME, where)`` of a variable that is set (non-empty) in the environment or the ``.env`` file and whose
    name is close to ``var``, which is not (``ANTHROPIC_API_KEY`` in ``.env`` for a config's ``ANTHROPC_API_KEY``:
    walk30 #8, the message named only the misspelt one); None when there is none. Only names that look like a
    key's (``KEY``, ``TOKEN`` or ``SECRET`` in them) are compared, without case (:func:`difflib.get_close_matches`,
    ratio >= 0.85: ``acme_api_key`` for ``ACME_API_KEY``); never a value."""
    import difflib

    env = os.environ if environ is None else environ
    try:
        dotenv = read_dotenv(dotenv_path)
    except (OSError, ValueError):
        dotenv = {}
    where = {n: "the environment" for n, v in env.items() if v and v.strip()}
    dot = Path(dotenv_path) if dotenv_path is not None else dotenv_path_default()
    where.update({n: str(dot) for n, v in dotenv.items() if v and v.strip() and n not in where})
    names = sorted(n for n in where if n != var and re.search(r"KEY|TOKEN|SECRET", n, re.IGNORECASE))
    # compared without case: variable names are case-sensitive, and "acme_api_key" in .env is the likely slip for
    # a config's ACME_API_KEY (newuser38 #5)
    by_upper: dict[str, str] = {}
    for n in names:
        by_upper.setdefault(n.upper(), n)
    close = difflib.get_close_matches(var.upper(), list(by_upper), n=1, cutoff=0.85)
    return (by_upper[close[0]], where[by_upper[close[0]]]) if close else None


def unread_dotenv_hint(variables: Iterable[str], config_source: str | None,
                       dotenv_path: str | os.PathLike[str] | None = None) -> str:
    """``"; the campaign file's folder has a .env that sets X (/abs/.env), which is not read: run from that folder
    or set GEOAGENT_DOTENV=/abs/.env"`` when the ``.env`` beside the campaign file ``config_source`` is not the
    one read (:func:`dotenv_where`) and sets one of ``variables`` (names only: no value is read into the message);
    ``""`` otherwise (walk32 #1)."""
    if not config_source or dotenv_path is not None or os.environ.get("GEOAGENT_DOTENV"):
        return ""
    beside = Path(config_source).expanduser().parent / ".env"
    try:
        if not beside.is_file() or beside.resolve() == dotenv_path_default().resolve():
            return ""
        # a name without '=' or with an empty value sets nothing (break32b #5)
        names = {k for k, v in read_dotenv(beside, report=False).items() if v}
    except (OSError, ValueError):
        return ""
    found = [v for v in variables if v in names]
    if not found:
        return ""
    where = beside.resolve()
    return (f"; the campaign file's folder has a .env that sets {', '.join(found)} ({where}), which is not read: "
            f"run from that folder or set GEOAGENT_DOTENV={where}")


def missing_keys_message(missing: list[tuple[str, str]], *, dotenv_path: str | os.PathLike[str] | None = None,
                         others: list[tuple[str, str]] | tuple[()] = (),
                         environ: Mapping[str, str] | None = None, config_source: str | None = None) -> str:
    """One sentence naming every missing variable (and the models that need it), never a value.

    ``missing`` is :func:`missing_api_keys`'s list, e.g. ``API key variables not set in the environment or in
    .env: OPENAI_API_KEY (model gpt), ANTHROPIC_API_KEY (models claude, haiku)``. ``others`` lists
    ``(variable, what needs it)`` of keys that are not a model's (e.g. ``MAPILLARY_TOKEN (the Mapillary
    client, ...)``); they follow the models' variables. A variable set to the empty string is said to be so
    (``OPENAI_API_KEY (model gpt; set but empty in .env)``, headed "set but empty" when every one is:
    :func:`empty_where`); ``environ`` is the environment to consult (default ``os.environ``); ``config_source``: the
    campaign file, whose folder's ``.env`` is named when it sets a missing variable but is not the one read
    (:func:`unread_dotenv_hint`).
    """
    by_var: dict[str, list[str]] = {}
    for var, model in missing:
        by_var.setdefault(var, []).append(model)
    where = dotenv_where(dotenv_path)
    empty = {var: e for var in list(by_var) + [v for v, _ in others]
             if (e := empty_where(var, dotenv_path=dotenv_path, environ=environ))}

    def why(var: str) -> str:
        if var in empty:
            return f"; set but empty in {empty[var]}"
        near = close_set_variable(var, dotenv_path=dotenv_path, environ=environ)
        return f"; did you mean {near[0]}, which is set in {near[1]}?" if near else ""

    parts = [f"{var} (model{'s' if len(ms) > 1 else ''} {', '.join(ms)}{why(var)})" for var, ms in by_var.items()]
    parts += [f"{var} ({who}{why(var)})" for var, who in others if var not in by_var]
    noun = "variables" if len(parts) > 1 else "variable"
    if empty and len(empty) == len(parts):  # every one is there, with no value: "not set" would send them looking
        return f"API key {noun} set but empty (a value is needed): {', '.join(parts)}"
    state = "not set (or set but empty)" if empty else "not set"
    return (f"API key {noun} {state} in the environment or in {where}: {', '.join(parts)}"
            + unread_dotenv_hint([*by_var, *(v for v, _ in others)], config_source, dotenv_path))
