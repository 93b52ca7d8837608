"""Every relative link of the README, docs/ and the other READMEs names a file that exists,
and every #anchor a heading of the page it points to (as the repository's web view makes
anchors); the README stays a landing page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
PAGES = [
    REPO / "README.md",
    *sorted((REPO / "docs").glob("*.md")),
    REPO / "manifests" / "README.md",
    REPO / "charts" / "dralloc" / "README.md",
    REPO / "testbed" / "README.md",
]
LINK = re.compile(r"\]\(([^)\s]+)\)")
README_MAX_LINES = 300


def prose(text: str) -> str:
    """The page without its code blocks (a `](x)` in a code sample is no link)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings: lower case, punctuation but hyphens and underscores
    dropped, spaces made hyphens; a repeated heading gets -1, -2, ..."""
    found: set[str] = set()
    for line in prose(page.read_text()).splitlines():
        heading = re.match(r"^#{1,6} +(.*)", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def broken_links(page: Path, root: Path = REPO) -> list[str]:
    problems = []
    for target in LINK.findall(prose(page.read_text())):
        if re.match(r"^[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(root)}: ({target})"
        if not linked.exists():
            problems.append(f"{where}: {path} does not exist")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: {linked.relative_to(root)} has no heading #{anchor}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_and_anchor_exists(page: Path) -> None:
    assert broken_links(page) == []


def test_every_docs_page_is_in_the_site_navigation() -> None:
    nav = (REPO / "mkdocs.yml").read_text()
    missing = [p.name for p in (REPO / "docs").glob("*.md") if f": {p.name}" not in nav]
    assert missing == []


def test_the_readme_stays_a_landing_page() -> None:
    lines = (REPO / "README.md").read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move detail to docs/"


def test_the_checker_finds_a_broken_link_and_a_missing_anchor(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Title\n\n## A section: `x`\n")
    page = tmp_path / "b.md"
    page.write_text(
        "[ok](a.md#a-section-x) [gone](c.md) [bad](a.md#nope)\n```\n[x](code.md)\n```\n"
    )
    problems = broken_links(page, root=tmp_path)
    assert len(problems) == 2, problems
    assert "c.md does not exist" in problems[0] and "#nope" in problems[1]
