"""Incremental JSON value scanner: knows where a JSON value ends without parsing it.

Tool-call arguments stream through verbatim, so the engine only needs to know, chunk by chunk,
whether it is inside a string, how deep the brackets go, and where the value is complete. Runs of
ordinary characters are skipped with one regex search, so cost is per interesting character.
Inside a string everything is string content, sentinels included: a model that writes
``</tool_call>`` inside an argument string emits the marker's token id there, and the call is
still open. Outside strings, a sentinel (a marker token) or a character JSON cannot contain ends
the value as malformed, and so does nesting deeper than ``json_bounds.MAX_DEPTH`` (the arguments
keep what streamed, under the malformed-call policy; nothing downstream ever recurses that deep).
"""

from __future__ import annotations

import re

from parsetier.engine.json_bounds import MAX_DEPTH

_IN_STRING = re.compile('["\\\\]')
_OUTSIDE = re.compile('[{}\\[\\]"\U000f0000-\U000ffffd]|[^\\s0-9A-Za-z.,:+\\-]')
_SCALAR_END = re.compile("[\\s,}\\]\U000f0000-\U000ffffd]")

OPEN, COMPLETE, MALFORMED = "open", "complete", "malformed"


class JsonValueScanner:
    """Feed text; ``scan_from`` returns how far the value reaches into it. Leading whitespace is part of
    the scan; ``started`` tells whether the value's first character has been seen."""

    __slots__ = ("_depth", "_escape", "_in_string", "_scalar", "first", "started", "status")

    def __init__(self) -> None:
        self._depth = 0
        self._in_string = False
        self._escape = False
        self._scalar = False
        self.started = False
        self.first = ""
        self.status = OPEN

    def scan_from(self, text: str, pos: int = 0) -> int:
        """Consume ``text[pos:]`` until the value completes or turns out malformed; return the
        index just past the last character that belongs to the value (or where scanning stopped)."""
        n = len(text)
        while pos < n and self.status == OPEN:
            if not self.started:
                while pos < n and text[pos].isspace():
                    pos += 1
                if pos == n:
                    return pos
                c = text[pos]
                self.started = True
                self.first = c
                if c in "{[":
                    self._depth = 1
                elif c == '"':
                    self._in_string = True
                elif (c.isascii() and c.isalnum()) or c == "-":
                    # ASCII only, as inside a container (``_OUTSIDE``): a non-ASCII letter or
                    # digit starts nothing JSON (or a Python literal) can read
                    self._scalar = True
                else:
                    self.status = MALFORMED
                    return pos
                pos += 1
                continue
            if self._escape:
                self._escape = False
                pos += 1
                continue
            if self._in_string:
                m = _IN_STRING.search(text, pos)
                if m is None:
                    return n
                c = m.group(0)
                pos = m.end()
                if c == "\\":
                    self._escape = True
                else:
                    self._in_string = False
                    if self._depth == 0:
                        self.status = COMPLETE
                continue
            if self._scalar:
                m = _SCALAR_END.search(text, pos)
                if m is None:
                    return n
                self.status = COMPLETE
                return m.start()
            m = _OUTSIDE.search(text, pos)
            if m is None:
                return n
            c = m.group(0)
            if c in "{[":
                if self._depth >= MAX_DEPTH:
                    self.status = MALFORMED
                    return m.start()
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self.status = COMPLETE
            elif c == '"':
                self._in_string = True
            else:
                self.status = MALFORMED
                return m.start()
            pos = m.end()
        return pos

    def finish_scalar(self) -> None:
        """At the end of input a bare scalar (``42``) is complete; anything else open is not."""
        if self.status == OPEN and self._scalar:
            self.status = COMPLETE
