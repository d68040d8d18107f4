"""Import roots for the bench scripts: they run as plain scripts (``python bench/NAME.py``), with
only bench/ on ``sys.path``."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def python_roots(checkout: Path = ROOT) -> list[str]:
    """A checkout's Python import roots: the server, the client package and the generated stubs."""
    return [str(checkout / part) for part in ("server", "client/python", "protos/python")]


def use_repository(*more: Path) -> Path:
    """Put this repository's import roots first on ``sys.path``, then the repository itself (for
    ``tests.testkit``) and ``more``; returns the repository's root."""
    sys.path[:0] = [*python_roots(), str(ROOT), *map(str, more)]
    return ROOT
