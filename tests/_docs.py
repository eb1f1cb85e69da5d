"""The project's documentation as tests read it: README.md, then the docs/ files in a fixed order.

README.md is the front page (what geoagent is, the set-up commands, the first hour, an index); the reference
text lives in docs/, one file per topic, in the order README's documentation table lists them. Tests that check what
the documentation promises read :func:`docs_text` (the whole of it, so a passage can move between files without
breaking them); tests about the set-up commands read README.md itself (:data:`README`).
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS_DIR = REPO / "docs"

#: the docs/ files in reading order (the order of README's documentation table)
DOC_FILES = (
    "campaigns.md",
    "crawls.md",
    "judgement-calls.md",
    "models.md",
    "scale-out.md",
    "demo.md",
    "geocontext-release.md",
    "configuration.md",
    "where-things-go.md",
    "exports.md",
    "how-it-works.md",
    "development.md",
)


def doc_paths() -> list[Path]:
    """README.md, then every docs/ file of :data:`DOC_FILES`, in that order."""
    return [README, *(DOCS_DIR / name for name in DOC_FILES)]


def docs_text() -> str:
    """The documentation as one text: each file of :func:`doc_paths` in order, separated by a blank line."""
    return "\n".join(p.read_text(encoding="utf-8") for p in doc_paths())
