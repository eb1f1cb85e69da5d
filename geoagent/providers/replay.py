"""The ``replay`` provider: answers from a recorded JSONL file, with the recorded token usage.

Use it to re-run a released campaign (e.g. the GeoContext release's ``data/verify_raw.jsonl``) through the
same parser, scorer and aggregator as a live one, without any call. Each line of the file is one JSON
object (a record); its key is the ``ProviderSettings.replay_key_fields`` values joined with ``|``. A
request is answered by the record whose key equals

* ``request.meta[replay_key_field]`` when ``replay_key_field`` is set (a list/tuple value is joined
  with ``|``, so a planner can pass ``[trial_id, model]``), or
* ``request.key()`` otherwise (our own recordings store it in a ``key`` field).

For the release's ``verify_raw.jsonl`` use ``replay_key_fields = ["trial_id", "model"]``,
``replay_text_field = "raw"``, ``replay_usage_field = "usage"`` (``usage`` holds ``input_tokens``,
``output_tokens``, ``stop_reason``).

The file is indexed once, on first use: a dict from key to (byte offset, length) of its line. Answer texts
stay on disk and are read with ``os.pread`` when asked for, so memory grows with the number of keys, not
with the text. When a key occurs more than once, a record without an ``error`` beats one with an error,
and among equals the first line wins (the importer's rule, :func:`geoagent.files.later_record_wins`: a re-run that
succeeded overrides an earlier failed attempt). A line that is not a JSON object holding the key fields refuses
the file (ValueError naming the file and line), where the importer skips such a line: a replay answers from the
file as a whole, and a damaged one (an interrupted download cuts its last line) is to be fetched again.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path
from typing import Any

import orjson

from geoagent.files import later_record_wins, loads_record, recorded_error
from geoagent.paths import missing_release_error
from geoagent.providers.base import ModelRequest, ModelResponse, Provider, Usage, provider_model_text, register
from geoagent.providers.errors import ReplayMiss, ReplayRecordedError
from geoagent.providers.http_base import MAX_USAGE_TOKENS
from geoagent.providers.settings import ProviderSettings

log = logging.getLogger(__name__)


def _not_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


class ReplayIndex:
    """Key -> line location index of one JSONL file.

    Parameters
    ----------
    path : path-like
        The JSONL file.
    key_fields : sequence of str
        Record fields whose values, joined with ``|``, form the key.
    error_field : str
        Record field that marks a recorded failure when not null/empty.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        A line is not a JSON object or lacks a key field (the message names file and line number).
    """

    def __init__(self, path: str | os.PathLike[str], key_fields: tuple[str, ...], error_field: str = "error") -> None:
        self.path = Path(path)
        self.key_fields = tuple(key_fields)
        self.error_field = error_field
        self._loc: dict[str, tuple[int, int, bool]] = {}  # key -> (offset, length, is_error)
        self.n_lines = 0
        #: records whose key an earlier record of the file has; of them, those whose text differs from the first's
        #: (whitespace around the line aside), and the first one's line number and key
        self.n_duplicates = 0
        self.n_conflicting = 0
        self.first_duplicate: tuple[int, str] | None = None
        #: every field name some record of the file has (to check a configured field name at start)
        self.fields: set[str] = set()
        self._build()

    def record_key(self, rec: dict[str, Any]) -> str:
        """The key of one record (fields joined with ``|``; ``None`` values become empty strings)."""
        return "|".join("" if rec[f] is None else str(rec[f]) for f in self.key_fields)

    def _build(self) -> None:
        offset = 0
        with self.path.open("rb") as fh:
            for lineno, line in enumerate(fh, start=1):
                length = len(line)
                stripped = line.strip()
                if stripped:
                    try:
                        rec = loads_record(stripped)  # a lone surrogate escape: U+FFFD, not a refused file
                    except orjson.JSONDecodeError as exc:
                        what = "not UTF-8 text" if _not_utf8(stripped) else "not valid JSON"
                        raise ValueError(f"{self.path}:{lineno}: {what} ({exc})") from None
                    if not isinstance(rec, dict):
                        raise ValueError(f"{self.path}:{lineno}: a record must be a JSON object")
                    missing = [f for f in self.key_fields if f not in rec]
                    if missing:
                        raise ValueError(f"{self.path}:{lineno}: record lacks key field(s) {missing}")
                    key = self.record_key(rec)
                    self.fields.update(rec)
                    is_error = recorded_error(rec.get(self.error_field)) is not None
                    old = self._loc.get(key)
                    if old is not None:
                        self.n_duplicates += 1
                        if self.first_duplicate is None:
                            self.first_duplicate = (lineno, key)
                        if os.pread(fh.fileno(), old[1], old[0]).strip() != stripped:
                            self.n_conflicting += 1
                    # the importer's rule (geoagent.files.later_record_wins): the first answers, a failure gives way
                    if old is None or later_record_wins(old[2], is_error):
                        self._loc[key] = (offset, length, is_error)
                    self.n_lines += 1
                offset += length

    def __len__(self) -> int:
        return len(self._loc)

    def __contains__(self, key: object) -> bool:
        return key in self._loc

    def keys(self) -> list[str]:
        """All keys, in first-seen order."""
        return list(self._loc)

    def get(self, key: str) -> dict[str, Any] | None:
        """The record for ``key`` read from disk, or None."""
        loc = self._loc.get(key)
        if loc is None:
            return None
        offset, length, _ = loc
        fd = os.open(self.path, os.O_RDONLY)
        try:
            data = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        return loads_record(data)


@register
class ReplayProvider(Provider):
    """Answers from a recorded JSONL file; ``kind = "replay"``, ``paid = False``."""

    kind = "replay"
    paid = False

    def __init__(self, model_cfg: ProviderSettings, http: Any = None) -> None:
        if not model_cfg.replay_path:
            raise ValueError(f"replay provider for model {model_cfg.model!r} needs 'replay_path'")
        self.settings = model_cfg
        self.path = Path(model_cfg.replay_path)
        self._index: ReplayIndex | None = None
        self._lock = threading.Lock()
        # index now: a missing or malformed file is one clear error at start, not every request dead-lettered
        # after its retries (FileNotFoundError / ValueError naming file and line)
        if not self.path.is_file():
            # the [[models]] entry by its name (the model id too), as the config file names it
            entry = (f"[[models]] entry {model_cfg.name!r} (model {model_cfg.model!r})" if model_cfg.name
                     else f"model {model_cfg.model!r}")
            if model_cfg.replay_release_dir is not None:  # a release file: the release's one message
                raise missing_release_error(model_cfg.replay_release_dir, self.path, role=f"replay file of {entry}")
            where = self.path.parent
            shown = where if where.is_absolute() else f"{where} (= {os.path.abspath(where)})"
            state = f"holds no {self.path.name}" if where.is_dir() else "does not exist"
            raise FileNotFoundError(f"replay file for {entry} not found: {self.path} (the folder "
                                    f"{shown} {state}); set replay.path of its [[models]] entry")
        index = self.index
        if index.n_duplicates and index.first_duplicate is not None:
            from geoagent.textfmt import one_line_text

            line, key = index.first_duplicate
            differ = (f"{index.n_conflicting} of them differ from an earlier record of their key" if index.n_conflicting
                      else "each repeats an earlier record of its key")
            # the release importer's rule and words: the first answers (a recorded failure gives way to an answer)
            log.warning(f"replay file {self.path}:{line}: {index.n_duplicates} record(s) repeat the key of an earlier "
                        f"record (the first: {one_line_text(key)[:160]!r}); {differ}; each key is answered by its "
                        f"first record (a recorded failure gives way to a later answer), for model {model_cfg.model!r}")
        # a text field that no record has is a typo in the config: one error now, not every request
        # dead-lettered as "a recorded failure: field ... is missing" (the usage field may be absent: 0 tokens)
        name = model_cfg.replay_text_field
        if name and len(index) and name not in index.fields:
            shown = ", ".join(repr(f) for f in sorted(index.fields)[:30])
            raise ValueError(f"replay file {self.path}: no record has the field {name!r} (replay.text_field of model "
                             f"{model_cfg.model!r}); its records have {shown}")

    def __repr__(self) -> str:
        return f"ReplayProvider(model={self.settings.model!r}, path={str(self.path)!r})"

    @property
    def index(self) -> ReplayIndex:
        """The file's index (built on first access)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = ReplayIndex(self.path, self.settings.replay_key_fields)
        return self._index

    def lookup_key(self, request: ModelRequest) -> str:
        """The key ``request`` is answered by (see module docstring).

        Raises
        ------
        ReplayMiss
            ``replay_key_field`` is configured but absent from ``request.meta``.
        """
        field = self.settings.replay_key_field
        if not field:
            return request.key()
        if field not in request.meta:
            raise ReplayMiss(f"<meta[{field!r}] missing>", str(self.path), f"request meta has no {field!r}")
        value = request.meta[field]
        if isinstance(value, (list, tuple)):
            return "|".join("" if v is None else str(v) for v in value)
        return str(value)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """The recorded answer for ``request`` (see :meth:`answer`)."""
        return self.answer(request)

    def recorded_usage(self, request: ModelRequest) -> tuple[int, int] | None:
        """``(input_tokens, output_tokens)`` recorded for ``request``, or None when it has no usable recorded
        answer (no record, a recorded failure, a bad field: :meth:`answer` would raise). For the dry run's
        token and cost figures (:func:`geoagent.config.estimate`)."""
        try:
            resp = self.answer(request)
        except (ReplayMiss, ReplayRecordedError):
            return None
        return resp.usage.input_tokens, resp.usage.output_tokens

    def answer(self, request: ModelRequest) -> ModelResponse:
        """The recorded answer for ``request`` (reads one line of the file; no other I/O).

        Returns
        -------
        ModelResponse
            ``text`` = the record's text field verbatim; ``usage`` = recorded input/output tokens (0 when
            absent); ``finish_reason`` = recorded ``stop_reason``/``finish_reason``; ``latency_s`` = 0.

        Raises
        ------
        ReplayMiss
            No record for the key (the message names the key and the file).
        ReplayRecordedError
            The record is a recorded failure (``error`` set), its text field is missing/not text, or a token
            count is not a non-negative integer (a JSON integer, an integral float or a digit string).
        """
        key = self.lookup_key(request)
        rec = self.index.get(key)
        if rec is None:
            raise ReplayMiss(key, str(self.path))
        s = self.settings
        failure = recorded_error(rec.get("error"))
        if failure is not None:
            raise ReplayRecordedError(key, str(self.path), failure[:300])
        text = rec.get(s.replay_text_field)
        if not isinstance(text, str):
            raise ReplayRecordedError(key, str(self.path), f"field {s.replay_text_field!r} is missing or not text")
        usage_src = rec.get(s.replay_usage_field) if s.replay_usage_field else rec
        usage_src = usage_src if isinstance(usage_src, dict) else {}
        finish = usage_src.get("stop_reason") or usage_src.get("finish_reason") or rec.get("finish_reason")
        counts = []
        for name in ("input_tokens", "output_tokens"):
            n = _token_count(usage_src.get(name))
            if n is None:
                raise ReplayRecordedError(key, str(self.path), f"{name} is not a non-negative integer of at most "
                                          f"{MAX_USAGE_TOKENS:,} (the most one call can use): "
                                          f"{str(usage_src.get(name))[:40]!r}", unusable=True)
            counts.append(n)
        return ModelResponse(
            text=text,
            usage=Usage(counts[0], counts[1]),
            latency_s=0.0,
            finish_reason=str(finish) if finish is not None else None,
            # a recorded name cleaned and capped as a provider's echo is (sec42 #3)
            provider_model=provider_model_text(str(rec["model"])) if rec.get("model") is not None else request.model,
        )


def _token_count(value: object) -> int | None:
    """A recorded token count as an int (absent/null -> 0); None when it is not a non-negative integer of at most
    :data:`geoagent.providers.http_base.MAX_USAGE_TOKENS` (the bound the HTTP providers apply: a count of 10^30 in
    a damaged recording booked as spend stopped the campaign as "budget exhausted", break28 #1; a string of 4,300+
    digits, which ``int`` refuses, raised a bare ValueError, #2)."""
    if value is None:
        return 0
    number: int | None = None
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        number = value
    elif isinstance(value, float):
        number = int(value) if value.is_integer() else None
    elif isinstance(value, str) and value.isascii() and value.strip().isdigit():
        digits = value.strip()
        number = int(digits) if len(digits) <= 12 else MAX_USAGE_TOKENS + 1
    return number if number is not None and 0 <= number <= MAX_USAGE_TOKENS else None


def count_records(path: str | os.PathLike[str]) -> int:
    """Records (non-blank lines) of the JSONL file at ``path``: the recorded responses a replay can answer
    with, recorded failures included. Reads the file in 1 MiB blocks (no parsing).

    Raises
    ------
    OSError
        The file cannot be read (missing: FileNotFoundError).
    """
    n = 0
    tail = b""
    with open(path, "rb") as fh:
        while block := fh.read(1 << 20):
            lines = (tail + block).split(b"\n")
            tail = lines.pop()
            n += sum(1 for ln in lines if ln.strip())
    return n + (1 if tail.strip() else 0)


def replay_note(cfg: Any) -> str:
    """The header line of every written report of a campaign with ``replay`` models (:class:`ReplayProvider`),
    "" when it has none: which model answered from which file, how many responses that file records
    (:func:`count_records`), and that its figures are those of the replayed responses, not the paper's
    (a release ``*_sample`` file is a cut of the release, so its tables are not, e.g., the paper's Table 12).

    ``cfg``: a :class:`geoagent.config.CampaignConfig` (its :meth:`~geoagent.config.CampaignConfig.replay_path`
    resolves each file as the provider does). A file that cannot be read is named with "not readable" instead
    of a count (the provider itself raises at start, so a report rarely sees one). Paths are made absolute (a
    report file is read away from the working directory the config's relative path meant).
    """
    parts = []
    sample = False
    for m in getattr(cfg, "models", ()):
        path = cfg.replay_path(m) if getattr(m, "provider", None) == "replay" else None
        if path is None:
            continue
        try:
            n = count_records(path)
            what = f"{n} recorded response{'' if n == 1 else 's'}"
        except OSError:
            what = "not readable"
        parts.append(f"{m.name} from {os.path.abspath(path)} ({what})")  # absolute: the report travels
        sample |= "sample" in path.name
    if not parts:
        return ""
    return (f"Replay of recorded responses: {'; '.join(parts)}. Every figure here is computed from these replayed "
            "responses only" + (", a sample of the release" if sample else "")
            + ", so none is the paper's (its tables, e.g. GeoVerify's Table 12, rest on the full data); no model "
            "was called.")
