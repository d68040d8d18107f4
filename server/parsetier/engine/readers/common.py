"""What every argument style shares: the reader protocol, the emit callback, sentinels, JSON string
escaping."""

from __future__ import annotations

from collections.abc import Callable
from json.encoder import encode_basestring  # type: ignore[attr-defined]
from typing import Protocol

from parsetier.engine.grammar import SENTINEL_RE

Emit = Callable[[str], None]

SENTINEL = SENTINEL_RE
"""Marker tokens travel through text as these code points (see ``engine/grammar/``)."""

PY_LITERALS = {"True": True, "False": False, "None": None}


def json_string_fragment(text: str) -> str:
    """``text`` escaped for the inside of a JSON string; fragments concatenate like their sources.
    (What ``json.dumps(text, ensure_ascii=False)`` writes, without building an encoder per call.)"""
    return encode_basestring(text)[1:-1]


class ArgumentReader(Protocol):
    """What the machine asks of the reader of a ``json`` or ``envelope`` state, and nothing more.

    ``read_from`` reads the state's text first (so a marker inside a JSON string stays string); once
    ``status`` is no longer ``open`` the lexer takes over and hands the state's remaining text to
    ``rest``. ``unclaimed`` is asked once, when the state is left."""

    status: str

    def read_from(self, text: str, pos: int) -> int:
        """Consume ``text`` from ``pos``; return where reading stopped."""
        ...

    def rest(self, text: str) -> str:
        """Text of the state the reader did not take: the part that is the model's own visible
        text ("" drops it, like code fences or separators)."""
        ...

    def unclaimed(self) -> str | None:
        """Leaving the state: the raw text read when no call came of it (to show as content),
        else None. Answers once."""
        ...


class ValueReader:
    """Readers of one JSON value (the ``json`` kind): text outside the value is dropped."""

    __slots__ = ()

    def rest(self, text: str) -> str:
        return ""

    def unclaimed(self) -> str | None:
        return None


class CallsReader:
    """Readers that find the calls themselves (the ``envelope`` kind): until a call begins their
    text is kept in ``raw``, for passthrough if none ever does; text after a call inside the block
    is the model's, shown as content (no lost text). Trailing whitespace there is held (``_space``)
    until more text of the model's proves it inner, and dropped if the block ends first (the
    separator before the closer), so the content is the same however the text was split."""

    __slots__ = ()
    raw: list[str]
    calls: int
    _space: str

    def rest(self, text: str) -> str:
        if self.calls == 0:
            self.raw.append(text)
            return ""
        text = self._space + text
        shown = text.rstrip()
        self._space = text[len(shown) :]
        return shown

    def unclaimed(self) -> str | None:
        if self.calls != 0:
            return None
        raw, self.raw = "".join(self.raw), []
        self.calls = -1  # passed through once
        return raw
