"""Generated blocks of docs/performance.md: each generator owns the text between its own pair of
markers and nothing else, so hand-written subsections anywhere in the page (and other
generators' blocks) survive a regeneration.

A block is ``<!-- generated: NAME (by SCRIPT; hand edits inside are lost) -->`` … ``<!-- end
generated: NAME -->``. When the page has no such block yet, it is added at the end of the
section whose heading is given (before its next ``## `` heading), or at the end of the page.
"""

from __future__ import annotations

import os
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "performance.md"


def begin_marker(name: str, script: str) -> str:
    return f"<!-- generated: {name} (by {script}; hand edits inside are lost) -->"


def end_marker(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def provenance() -> str:
    """When and on what code a block was made: a block a run did not regenerate keeps its own."""
    import subprocess
    import time

    root = DOC.parent.parent
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"],
            capture_output=True,
            text=True,
        ).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    at = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    code = f" on commit `{commit}`{' with local changes' if dirty else ''}" if commit else ""
    return f"*Measured {at}{code}.*"


def replace_block(name: str, script: str, body: str, section: str, doc: Path = DOC) -> None:
    """Write ``body`` as block ``name`` of ``doc``: in place of the old block if there is one,
    else at the end of ``section`` (a ``## `` heading, added at the end when missing)."""
    text = doc.read_text(encoding="utf-8") if doc.exists() else "# Performance\n"
    body = body.strip()
    heading, rest = body.split("\n", 1) if body.startswith("#") and "\n" in body else ("", body)
    stamped = (heading + "\n\n" if heading else "") + provenance() + "\n\n" + rest.strip()
    block = f"{begin_marker(name, script)}\n\n{stamped}\n\n{end_marker(name)}"
    head = f"<!-- generated: {name} "
    start = text.find(head)
    end = text.find(end_marker(name), start)
    if start >= 0 and end >= 0:
        text = text[:start] + block + text[end + len(end_marker(name)) :]
    else:
        at = text.find(f"\n{section}\n")
        if at < 0:
            text = text.rstrip("\n") + f"\n\n{section}\n\n{block}\n"
        else:
            nxt = text.find("\n## ", at + len(section) + 1)
            nxt = len(text) if nxt < 0 else nxt + 1
            text = text[:nxt].rstrip("\n") + f"\n\n{block}\n\n" + text[nxt:]
    doc.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def env_int(name: str, default: int) -> int:
    """An integer size from the environment (``make bench`` on a busy machine runs smaller)."""
    value = os.environ.get(name, "").strip()
    return int(value) if value else default
