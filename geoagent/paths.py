"""Resolution of data roots and safe file names (imports only constants)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from geoagent import constants as C

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_DIGITS = re.compile(r"^[0-9]{1,32}$")


def queues_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """Root folder of the durable queues: config value, else ``$GEOAGENT_QUEUES``, else ``queues/``."""
    return Path(configured or os.environ.get(C.ENV_QUEUES_ROOT) or C.DEFAULT_QUEUES_ROOT)


def state_root(configured: str | os.PathLike[str] | None = None) -> Path:
    """Root folder of campaign state: config value, else ``$GEOAGENT_STATE``, else ``state/``."""
    return Path(configured or os.environ.get(C.ENV_STATE_ROOT) or C.DEFAULT_STATE_ROOT)


def safe_name(value: str, *, what: str = "name") -> str:
    """Return ``value`` if it is safe as a single path component, else raise ``ValueError``.

    Allowed: letters, digits, ``_ . -``; must start with a letter or digit; at most 128 characters.
    Used for campaign names, site ids and anything from an API that becomes a file name.
    """
    if not isinstance(value, str) or not _SAFE_NAME.match(value) or ".." in value:
        raise ValueError(f"unsafe {what} for a file name: {value!r}")
    return value


def safe_image_id(value: str | int) -> str:
    """Return a Mapillary image id as a string if it is 1-32 decimal digits, else raise ``ValueError``."""
    text = str(value)
    if not _DIGITS.match(text):
        raise ValueError(f"image id must be decimal digits, got {text!r}")
    return text
