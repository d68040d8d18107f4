"""The native core's extension module (``parsetier._core``), or None: one import and one check for
the whole package.

A core built from older sources than the Python beside it (a copied ``_core.abi3.so``, a tree
pulled without ``make native``) would fail in the middle of a request, or quietly lack a
function. So the core carries the version of its boundary with Python (``BOUNDARY`` in
``parsetier_core/python/src/lib.rs``), and a core whose version is not this file's counts as no
core at all: every model then runs on the reference engine, with ``unavailable`` logged as the
reason. Whoever changes what crosses the boundary (a class, a function, an argument) bumps both.
"""

from __future__ import annotations

from types import ModuleType

BOUNDARY = 8
"""The boundary version this Python expects of the core."""


def _load() -> tuple[ModuleType | None, str]:
    try:
        from parsetier import _core
    except ImportError:
        return None, "the native core is not built (make native)"
    if getattr(_core, "BOUNDARY", None) != BOUNDARY:
        return None, "the native core was built from other sources than this tree's (make native)"
    return _core, ""


core, unavailable = _load()
"""The core (None when it is not built or not this tree's), and why it is not there."""
