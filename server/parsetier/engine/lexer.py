"""Incremental literal lexer: finds a state's terminals in streamed text, holding back only a
suffix that could still become one.

The rule that makes output independent of how text is split: the leftmost terminal wins, the
longest at that position; a match is final only when no longer terminal could still complete
at the same or an earlier position. So a terminal is reported exactly when the text seen so far
proves it, whatever the chunk boundaries were.
"""

from __future__ import annotations

import re


class TerminalSet:
    """The terminals one state listens for, compiled once per (grammar, state)."""

    __slots__ = ("_first", "_longest", "_non_ascii", "_prefixes", "_regex", "_starts", "patterns")

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self._regex = re.compile("|".join(re.escape(p) for p in patterns)) if patterns else None
        # Every proper prefix of every terminal: a suffix of the text equal to one must wait.
        self._prefixes = frozenset(p[:k] for p in patterns for k in range(1, len(p)))
        firsts = sorted({p[0] for p in patterns if len(p) > 1})
        self._first = re.compile("[" + "".join(re.escape(c) for c in firsts) + "]") if firsts else None
        """Where such a suffix may start: one search finds the candidates, usually none."""
        self._longest = max((len(p) for p in patterns), default=1) - 1
        starts = sorted({p[0] for p in patterns})
        self._starts = re.compile("[" + "".join(re.escape(c) for c in starts) + "]") if starts else None
        """Where a terminal, or a suffix that may become one, can start: text without any of these
        characters (most pieces) is settled after one search."""
        self._non_ascii = all(not p[0].isascii() for p in patterns)
        """Every terminal starts with a non-ASCII character (a sentinel, usually): ASCII text can
        neither hold one nor end in the start of one, and ``str.isascii`` is a flag read."""

    def scan(self, text: str, pos: int) -> tuple[re.Match[str] | None, int]:
        """Look in ``text[pos:]``: return (terminal match, hold) where text before ``hold`` (or
        before the match) is settled. With no match, ``text[hold:]`` must wait for more text. The
        match's ``group()`` is the terminal's pattern."""
        end = len(text)
        if self._non_ascii and text.isascii():
            return None, end
        if self._starts is None or self._starts.search(text, pos) is None:
            return None, end
        hold = end
        first = self._first
        if first is not None:
            # Earliest start of a suffix that is a proper prefix of some terminal.
            m = first.search(text, max(pos, end - self._longest))
            while m is not None:
                i = m.start()
                if text[i:] in self._prefixes:
                    hold = i
                    break
                m = first.search(text, i + 1)
        if self._regex is None:
            return None, hold
        m = self._regex.search(text, pos)
        if m is None or hold <= m.start():
            return None, hold
        return m, hold
