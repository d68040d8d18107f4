"""Arguments written as one JSON value, streamed verbatim (DeepSeek, Kimi, Harmony, Mistral)."""

from __future__ import annotations

import re

from parsetier.engine.arguments.common import SENTINEL, Emit, ValueReader
from parsetier.engine.json_scan import MALFORMED, OPEN, JsonValueScanner


class JsonArgsReader(ValueReader):
    """Streams one JSON value verbatim as the call's arguments, skipping any lead-in (fences)."""

    __slots__ = ("_emit", "_lead", "_scanner", "emitted")

    _LEAD = re.compile("[{\\[\U000f0000-\U000ffffd]")

    def __init__(self, emit: Emit, lead: Emit | None = None) -> None:
        """``lead``: told the text skipped before the value (a code fence's ```` ```json ````)."""
        self._emit = emit
        self._lead = lead
        self._scanner: JsonValueScanner | None = None
        self.emitted = False

    @property
    def status(self) -> str:
        return self._scanner.status if self._scanner else OPEN

    def read_from(self, text: str, pos: int) -> int:
        """Consume from ``pos``; return where reading stopped (``len(text)`` if all was taken)."""
        if self._scanner is None:
            m = self._LEAD.search(text, pos)
            if self._lead is not None:
                self._lead(text[pos : m.start() if m is not None else len(text)])
            if m is None:
                return len(text)
            if SENTINEL.match(m.group(0)):
                self._scanner = JsonValueScanner()
                self._scanner.status = MALFORMED
                return m.start()
            pos = m.start()
            self._scanner = JsonValueScanner()
        end = self._scanner.scan_from(text, pos)
        if end > pos:
            self.emitted = True
            self._emit(text[pos:end])
        return end


# An OpenAI-style ``"type": "function"`` key may come first (Meta's own Llama 3 examples write it).
