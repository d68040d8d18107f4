"""What every argument style shares: the emit callback, sentinels, JSON string escaping."""

from __future__ import annotations

import json
from collections.abc import Callable

from parsetier.engine.grammar import SENTINEL_RE

Emit = Callable[[str], None]

SENTINEL = SENTINEL_RE
"""Marker tokens travel through text as these code points (see ``engine/grammar.py``)."""

PY_LITERALS = {"True": True, "False": False, "None": None}


def json_string_fragment(text: str) -> str:
    """``text`` escaped for the inside of a JSON string; fragments concatenate like their sources."""
    return json.dumps(text, ensure_ascii=False)[1:-1]

