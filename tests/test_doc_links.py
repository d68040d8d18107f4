"""The docs stay navigable: every relative link in README.md and docs/ reaches a file, every
``#anchor`` a heading of its page, and a newcomer reaches every page in two clicks from the README
(the README links each page of docs/, and the per-family index each page of docs/formats/), and
every page opens, under its title, with what it is for before its first section.

Anchors are GitHub's: a heading's text lower-cased, its punctuation dropped (letters, digits, ``_``,
``-`` and spaces stay), spaces as ``-``, a repeated heading suffixed ``-1``, ``-2``...
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.rglob("*.md"))]

LINK = re.compile(r"(?<!!)\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _fenced(lines: list[str]) -> list[bool]:
    """Per line, whether it is part of a fenced code block (CommonMark's rule: a fence of three or
    more backticks whose info has none, or tildes, closed by a longer-or-equal run of the same)."""
    flags, fence = [], ""
    for line in lines:
        match = FENCE.match(line)
        if fence:
            flags.append(True)
            closing = match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence)
            if closing and not match.group(2).strip():
                fence = ""
        elif match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
            flags.append(True)
            fence = match.group(1)
        else:
            flags.append(False)
    return flags


def _prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks, with inline code spans blanked."""
    lines = text.splitlines()
    pairs = zip(lines, _fenced(lines), strict=True)
    return ["" if fenced else CODE_SPAN.sub("", line) for line, fenced in pairs]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"<[^>]+>", "", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings make (fenced code is not a heading)."""
    seen: dict[str, int] = {}
    found = set()
    lines = page.read_text(encoding="utf-8").splitlines()
    for line, fenced in zip(lines, _fenced(lines), strict=True):
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")
    return found


def links(page: Path) -> list[str]:
    """The relative link targets of a page's prose (web links and mail addresses left out)."""
    targets = []
    for line in _prose_lines(page.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            target = match.group(1)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):
                targets.append(target)
    return targets


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(page: Path) -> None:
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading makes #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def _linked(page: Path) -> set[Path]:
    return {(page.parent / t.partition("#")[0]).resolve() for t in links(page) if t.partition("#")[0]}


def test_the_readme_links_every_doc() -> None:
    linked = _linked(ROOT / "README.md")
    pages = {p.resolve() for p in DOCS.glob("*.md")} | {(DOCS / "formats" / "README.md").resolve()}
    missing = sorted(str(p.relative_to(ROOT)) for p in pages - linked)
    assert not missing, f"README.md's docs list does not link: {missing}"


def test_the_family_index_links_every_family_page() -> None:
    index = DOCS / "formats" / "README.md"
    linked = _linked(index)
    pages = {p.resolve() for p in (DOCS / "formats").glob("*.md")} - {index.resolve()}
    missing = sorted(p.name for p in pages - linked)
    assert not missing, f"docs/formats/README.md does not link: {missing}"


TOP_PAGES = [*sorted(DOCS.glob("*.md")), DOCS / "formats" / "README.md"]


@pytest.mark.parametrize("page", TOP_PAGES, ids=lambda p: p.name)
def test_every_page_opens_with_what_it_is_for(page: Path) -> None:
    """A reader landing on a page learns what it holds before any section: a title, then prose."""
    lines = [line for line in _prose_lines(page.read_text(encoding="utf-8")) if line.strip()]
    assert lines and HEADING.match(lines[0]) and lines[0].startswith("# "), f"{page.name}: no title first"
    opening = []
    for line in lines[1:]:
        if HEADING.match(line):
            break
        opening.append(line)
    words = len(" ".join(opening).split())
    assert words >= 20, f"{page.name}: {words} words before its first section; say what the page is for"


def test_slugs_follow_github() -> None:
    assert slug("A `Parse` stream") == "a-parse-stream"
    assert slug("`make serve` from a fresh clone") == "make-serve-from-a-fresh-clone"
    assert slug("Wire dialects: bytes to forward (`Open.wire`)") == "wire-dialects-bytes-to-forward-openwire"
    assert slug("Several choices (`n` > 1)") == "several-choices-n--1"
