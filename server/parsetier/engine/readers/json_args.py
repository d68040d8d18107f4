"""Arguments written as one JSON value, streamed verbatim (DeepSeek, Kimi, Harmony, Mistral)."""

from __future__ import annotations

from collections.abc import Callable

from parsetier.engine.json_scan import MALFORMED, OPEN, JsonValueScanner
from parsetier.engine.readers.common import SENTINEL, Emit, ValueReader

Shown = Callable[[str, int, int], None]
"""``shown(text, start, end)``: ``text[start:end]`` is the model's own text, shown as content."""

_FENCE_WORDS = ("```", "json")
"""The lead-in a value may have, in this order, each optional, whitespace around them: a code
fence and its language tag (DeepSeek V3's ```` ```json ````)."""


class JsonArgsReader(ValueReader):
    """Streams one JSON value verbatim as the call's arguments.

    The text before the value (its *lead-in*) is markup when it is whitespace and a code fence
    (```` ```json ````); anything else there is the model's own text and is shown as content
    (``shown``), from its first character that is no part of a fence up to the value. Decided
    word by word, holding back only a fence word still being written, so the split of the text
    never changes what is shown."""

    __slots__ = ("_emit", "_fence", "_lead", "_loose", "_scanner", "_shown", "emitted")

    _LEAD = frozenset("{[")

    def __init__(self, emit: Emit, lead: Emit | None = None, shown: Shown | None = None) -> None:
        """``lead``: told the lead-in's markup (a code fence); ``shown``: told its other text."""
        self._emit = emit
        self._lead = lead
        self._shown = shown
        self._scanner: JsonValueScanner | None = None
        self._fence = 0
        """Fence words (``_FENCE_WORDS``) the lead-in has passed."""
        self._loose = False
        """The lead-in holds text that is no fence: the rest of it is shown too."""
        self.emitted = False

    @property
    def status(self) -> str:
        return self._scanner.status if self._scanner else OPEN

    def read_from(self, text: str, pos: int) -> int:
        """Consume from ``pos``; return where reading stopped (``len(text)`` if all was taken)."""
        if self._scanner is None:
            pos = self._lead_in(text, pos)
            if pos == len(text) or self._scanner is None:
                return pos
            if self._scanner.status == MALFORMED:
                return pos
        end = self._scanner.scan_from(text, pos)
        if end > pos:
            self.emitted = True
            self._emit(text[pos:end])
        return end

    def _lead_in(self, text: str, pos: int) -> int:
        """Read the lead-in from ``pos``: return where the value (or a marker) begins, or where a
        fence word still being written begins (held), or ``len(text)``."""
        n = len(text)
        while pos < n:
            c = text[pos]
            if c in self._LEAD or SENTINEL.match(c):
                self._scanner = JsonValueScanner()
                if c not in self._LEAD:
                    self._scanner.status = MALFORMED
                return pos
            if self._loose:
                end = pos + 1
                while end < n and text[end] not in self._LEAD and not SENTINEL.match(text[end]):
                    end += 1
                self._show(text, pos, end)
                pos = end
                continue
            if c.isspace():
                end = pos + 1
                while end < n and text[end].isspace():
                    end += 1
                self._markup(text[pos:end])
                pos = end
                continue
            for k in range(self._fence, len(_FENCE_WORDS)):
                word = _FENCE_WORDS[k]
                if text.startswith(word, pos):
                    self._fence = k + 1
                    self._markup(word)
                    pos += len(word)
                    break
                if word.startswith(text[pos:]):
                    return pos  # a fence word still being written (the machine holds it)
            else:
                self._loose = True
        return pos

    def _markup(self, text: str) -> None:
        if self._lead is not None:
            self._lead(text)

    def _show(self, text: str, start: int, end: int) -> None:
        if self._shown is not None:
            self._shown(text, start, end)
