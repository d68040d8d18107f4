"""Incremental literal lexer: finds a state's terminals in streamed text, holding back only a
suffix that could still become one.

The rule that makes output independent of how text is split: the leftmost terminal wins, the
longest at that position; a match is final only when no longer terminal could still complete
at the same or an earlier position. So a terminal is reported exactly when the text seen so far
proves it, whatever the chunk boundaries were.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True, slots=True)
class Match:
    start: int
    end: int
    pattern: str


class TerminalSet:
    """The terminals one state listens for, compiled once per (grammar, state)."""

    __slots__ = ("_first_chars", "_prefixes", "_regex", "patterns")

    def __init__(self, patterns: tuple[str, ...]) -> None:
        self.patterns = patterns
        self._regex = re.compile("|".join(re.escape(p) for p in patterns)) if patterns else None
        # Every proper prefix of every terminal: a suffix of the text equal to one must wait.
        self._prefixes = frozenset(p[:k] for p in patterns for k in range(1, len(p)))
        self._first_chars = frozenset(p[0] for p in patterns if len(p) > 1)

    def scan(self, text: str, pos: int) -> tuple[Match | None, int]:
        """Look in ``text[pos:]``: return (terminal match, hold) where text before ``hold`` (or
        before the match) is settled. With no match, ``text[hold:]`` must wait for more text."""
        end = len(text)
        hold = end
        if self._prefixes:
            # Earliest start of a suffix that is a proper prefix of some terminal.
            lo = max(pos, end - self._longest_prefix())
            for i in range(lo, end):
                if text[i] in self._first_chars and text[i:] in self._prefixes:
                    hold = i
                    break
        if self._regex is None:
            return None, hold
        m = self._regex.search(text, pos)
        if m is None or hold <= m.start():
            return None, hold
        return Match(m.start(), m.end(), m.group(0)), hold

    def _longest_prefix(self) -> int:
        return _longest(self.patterns)


@lru_cache(maxsize=1024)
def _longest(patterns: tuple[str, ...]) -> int:
    return max((len(p) for p in patterns), default=1) - 1
