"""Every document the project cites is in the repository: a citation such as
``docs/design.md "Trust"`` names a file that exists and a section (a ``##`` heading) it has,
and nothing points at documents that live elsewhere (a design file or reference notes beside
the checkout, which a reader of the repository does not have)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
SCANNED = ("operators", "tests", "robustness", "manifests", "charts", "bench", "testbed", "docs")
TOP_LEVEL = ("README.md", "CONTRIBUTING.md", "CHANGELOG.md", "Makefile", "pyproject.toml")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".tpl", ".txt", ".toml", ""}

# A citation may wrap: a line break with the next line's comment marker counts as a space.
_WRAP = re.compile(r"\s*\n\s*(?:#|//|\*)?\s*")
CITATION = re.compile(r"docs/([\w./-]+\.md)(?:\s+[\"'](?P<section>[^\"'\n]{1,80})[\"'])?")
ELSEWHERE = re.compile(r"DESIGN\.md|reference §|interop\.md|upstream-dra\.md|\.\./shared/")


def sources() -> list[Path]:
    found = [REPO / name for name in TOP_LEVEL if (REPO / name).exists()]
    for top in SCANNED:
        for path in sorted((REPO / top).rglob("*")):
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and "__pycache__" not in path.parts
                and path != Path(__file__).resolve()
            ):
                found.append(path)
    return found


def citations(text: str) -> list[tuple[str, str | None]]:
    return [(m.group(1), m.group("section")) for m in CITATION.finditer(_WRAP.sub(" ", text))]


def headings(path: Path) -> set[str]:
    return {
        line.lstrip("#").strip() for line in path.read_text().splitlines() if line.startswith("#")
    }


def test_citations_name_files_and_sections_that_exist() -> None:
    problems: list[str] = []
    cited = 0
    for path in sources():
        text = path.read_text(errors="replace")
        for document, section in citations(text):
            cited += 1
            target = REPO / "docs" / document
            where = path.relative_to(REPO)
            if not target.is_file():
                problems.append(f"{where}: docs/{document} does not exist")
            elif section is not None and section not in headings(target):
                problems.append(f'{where}: docs/{document} has no section "{section}"')
    assert not problems, "\n".join(problems)
    assert cited >= 15, f"only {cited} citations found: is the scan still looking?"


def test_nothing_cites_documents_outside_the_repository() -> None:
    found = [
        f"{path.relative_to(REPO)}: {match.group(0)}"
        for path in sources()
        for match in ELSEWHERE.finditer(path.read_text(errors="replace"))
    ]
    assert not found, "\n".join(found)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('see docs/design.md "Trust": the', [("design.md", "Trust")]),
        ('(docs/design.md "One\n# allocator")', [("design.md", "One allocator")]),
        ('(docs/design.md\n    "Two API modes")', [("design.md", "Two API modes")]),
        ("docs/design.md 'Trust')", [("design.md", "Trust")]),
        ("docs/guide.md, then", [("guide.md", None)]),
    ],
)
def test_a_citation_is_read_across_a_wrapped_line(
    text: str, expected: list[tuple[str, str | None]]
) -> None:
    assert citations(text) == expected
