"""The documentation's files hold together: README.md is a front page linking every docs/ file, every relative
Markdown link of README.md and docs/*.md names a file that exists, and CI runs README's test command verbatim.

The 1,895-line README was split (session 17) into a short README.md and docs/*.md; a link moved from the
repository root into docs/ without ``../`` (``benchmarks/README.md``) would point at nothing, and a docs file
left out of :data:`_docs.DOC_FILES` would be invisible to the tests that check what the documentation says.
"""

from __future__ import annotations

import re
from pathlib import Path

from _docs import DOC_FILES, DOCS_DIR, README, REPO, doc_paths

#: ``[text](target)`` or ``[text](target "title")``; images (``![alt](src)``) are links too
LINK = re.compile(r"\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def _prose(text: str) -> str:
    """``text`` without fenced code blocks and inline code spans, where brackets are code, not links."""
    text = re.sub(r"(?ms)^(```|~~~).*?^\1[^\n]*$", "", text)
    return re.sub(r"`[^`\n]*`", "", text)


def _relative_links(path: Path) -> list[str]:
    """The relative link targets of the Markdown file ``path``, without their ``#fragment``."""
    out = []
    for target in LINK.findall(_prose(path.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):  # a URL, mailto:, an anchor
            continue
        out.append(target.split("#", 1)[0])
    return out


def _broken_links(path: Path) -> list[str]:
    """The relative links of ``path`` whose file (taken from ``path``'s folder) does not exist."""
    return [t for t in _relative_links(path) if not (path.parent / t).exists()]


def test_every_relative_link_of_the_documentation_names_a_file_that_exists():
    broken = {p.relative_to(REPO).as_posix(): _broken_links(p) for p in doc_paths()}
    assert not {k: v for k, v in broken.items() if v}, broken


def test_the_link_check_finds_a_link_not_adjusted_for_the_docs_folder(tmp_path):
    # the split's own trap: README's link to benchmarks/README.md, moved into docs/ as it was
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "README.md").write_text("# figures\n", encoding="utf-8")
    (tmp_path / "docs").mkdir()
    doc = tmp_path / "docs" / "development.md"
    doc.write_text("* Benchmarks: see [`benchmarks/README.md`](benchmarks/README.md).\n"
                   "```\n[not a link](nowhere.md)\n```\n`[code](nowhere.md)` and [web](https://example.org/x.md)\n",
                   encoding="utf-8")
    assert _broken_links(doc) == ["benchmarks/README.md"]
    doc.write_text("* Benchmarks: see [`benchmarks/README.md`](../benchmarks/README.md#figures).\n", encoding="utf-8")
    assert _broken_links(doc) == []


def test_docs_files_are_the_ones_the_tests_read_and_readme_links_each():
    on_disk = sorted(p.name for p in DOCS_DIR.glob("*.md"))
    assert sorted(DOC_FILES) == on_disk, "tests/_docs.py DOC_FILES must list every docs/*.md file"
    linked = set(_relative_links(README))
    assert not [f"docs/{name}" for name in DOC_FILES if f"docs/{name}" not in linked], linked


def test_readme_stays_a_front_page():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= 250, len(lines)
    headings = [ln for ln in lines if ln.startswith("## ")]
    for h in ("## Set up on a fresh machine", "## Documentation", "## Licence and data"):
        assert h in headings, headings


def test_ci_runs_the_readme_test_command_verbatim():
    """README's set-up section says its test command "is exactly what CI runs, via `.ci/run`"."""
    readme = README.read_text(encoding="utf-8")
    setup = readme[readme.index("## Set up on a fresh machine"):readme.index("\n## ", readme.index("## Set up") + 1)]
    blocks = re.findall(r"```bash\n(.*?)\n```", setup, re.S)
    assert blocks[0] == "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/python run.py demo"
    test_command = ("python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev]' && "
                    '.venv/bin/python -m pytest -q -n 4 -m "not wallclock" && .venv/bin/python -m pytest -q -n 2 -m wallclock')
    assert blocks[1] == test_command
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert test_command in ci, ci


#: a pointer from the package's text into the documentation: ``README, "Section"``, ``README "Section"`` or
#: ``docs/file.md, "Section"`` (single quotes too), the quoted words being ones the file holds
POINTER = re.compile(r"""\b(README(?:\.md)?|docs/[\w-]+\.md),? (?:"([^"\n]+?)"|'([^'\n]+?)')""")


def _pointers(root: Path) -> list[tuple[str, str, str]]:
    """(source file, documentation file, quoted words) for each :data:`POINTER` in the package's Python and
    TOML files and ``run.py``; a pointer may wrap over lines of a comment or a docstring."""
    out = []
    for src in [root / "run.py", *sorted((root / "geoagent").rglob("*.py")), *sorted((root / "geoagent").rglob("*.toml"))]:
        text = re.sub(r"\s*\n\s*(?:#:?\s*)?", " ", src.read_text(encoding="utf-8"))
        for doc, double, single in POINTER.findall(text):
            doc = "README.md" if doc.startswith("README") else doc
            out.append((src.relative_to(root).as_posix(), doc, double or single))
    return out


def test_every_pointer_from_the_package_names_the_file_that_holds_its_section():
    pointers = _pointers(REPO)
    assert len(pointers) >= 10, pointers
    flat = {}
    wrong = []
    for src, doc, words in pointers:
        if doc not in flat:
            path = REPO / doc
            flat[doc] = " ".join(path.read_text(encoding="utf-8").split()) if path.is_file() else ""
        if " ".join(words.split()) not in flat[doc]:
            wrong.append(f"{src}: {doc}, {words!r}")
    assert not wrong, "\n".join(wrong)
