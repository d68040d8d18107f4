"""Gemma 4's object notation → JSON."""

from __future__ import annotations

import json
from collections.abc import Callable

from parsetier.engine.json_bounds import MAX_DEPTH
from parsetier.engine.json_scan import COMPLETE, MALFORMED, OPEN
from parsetier.engine.readers.common import SENTINEL, Emit, ValueReader, json_string_fragment
from parsetier.engine.readers.python_calls import JSON_SCALAR

Held = Callable[[str, str, int], None]
"""``held(pending, text, at)``: the reader's held text ``pending``, read up to ``text[at]`` (it may
have begun in earlier pieces), is the model's own text."""


class GemmaArgsReader(ValueReader):
    """Gemma 4's object notation → JSON, streamed: ``{key:<|"|>text<|"|>,n:42,o:{…},l:[…]}``.

    Keys are bare (they may hold spaces), strings are delimited by the ``<|"|>`` token (its
    sentinel, ``quote``), scalars are bare JSON literals. String content streams as it arrives;
    keys and scalars are short and wait for their delimiter. Inside a string every marker is text,
    and so is a quote that the notation does not go on after (``see <|"|> inside``).
    """

    __slots__ = (
        "_emit", "_ending", "_expect_key", "_loose", "_pending", "_quote", "_stack", "emitted", "status",
    )  # fmt: skip

    def __init__(self, emit: Emit, quote: str, loose: Held | None = None) -> None:
        """``loose``: told text the notation has no place for (a bare word before ``{``) and where
        it ends, so the machine keeps it out of the call's ledger (it is shown at once)."""
        self._loose = loose or (lambda _held, _text, _at: None)
        self._emit = emit
        self._quote = quote
        self._stack: list[str] = []
        self._pending = ""  # a key or scalar being read
        self._expect_key = False
        self._ending = False
        self.emitted = False
        self.status = OPEN

    def _out(self, text: str) -> None:
        self.emitted = True
        self._emit(text)

    def read_from(self, text: str, pos: int) -> int:
        n = len(text)
        quote = self._quote
        while pos < n and self.status == OPEN:
            if self._stack and self._stack[-1] == "str":
                end = text.find(quote, pos)
                chunk = text[pos : n if end < 0 else end]
                if chunk:
                    self._out(json_string_fragment(chunk))
                if end < 0:
                    return n
                after = end + len(quote)
                closes = self._closes(text, after)
                if closes is None:  # only whitespace (or nothing) yet: hold from the quote
                    return end
                if closes:
                    self._stack.pop()
                    self._out('"')
                else:  # a quote the value itself holds (the template writes strings verbatim)
                    self._out(quote)
                pos = after
                continue
            c = text[pos]
            if not self._stack:
                if c.isspace():
                    pos += 1
                    continue
                if c != "{":
                    self.status = MALFORMED
                    return pos
            if c == quote and not self._pending.strip():
                self._pending = ""
                self._stack.append("str")
                self._out('"')
            elif c in "{[":
                if len(self._stack) >= MAX_DEPTH:
                    self.status = MALFORMED
                    return pos
                if self._pending.strip():  # text the notation has no place for: the model's
                    self._loose(self._pending, text, pos)
                self._stack.append(c)
                self._expect_key = c == "{"
                self._pending = ""
                self._out(c)
            elif c in ",}]" or (c == ":" and self._expect_key):
                self._settle(c)
                if self.status != OPEN:
                    return pos
                if c in "}]":
                    self._stack.pop()
                    self._out(c)
                    self._expect_key = False
                    if not self._stack:
                        self.status = COMPLETE
                        return pos + 1
                elif c == ",":
                    self._out(",")
                    self._expect_key = self._stack[-1] == "{"
                else:
                    self._expect_key = False
            elif SENTINEL.match(c):
                self.status = MALFORMED
                return pos
            else:
                self._pending += c
            pos += 1
        return pos

    def end_of_output(self) -> None:
        """Nothing follows: a quote still waiting on what follows it closes its string."""
        self._ending = True

    def unread(self) -> str:
        """At the end of the output: a key or bare value still being written, never settled."""
        pending, self._pending = self._pending, ""
        return pending

    def _closes(self, text: str, at: int) -> bool | None:
        """Whether a ``<|"|>`` inside a string ends it: only where the notation goes on after it
        (optional whitespace, then ``,`` ``}`` ``]``, or a marker token other than a quote, or the
        end of the output), the follow-check the XML-style closers have. None: cannot tell yet."""
        n = len(text)
        while at < n and text[at].isspace():
            at += 1
        if at == n:
            return True if self._ending else None
        c = text[at]
        return c in ",}]" or (SENTINEL.match(c) is not None and not text.startswith(self._quote, at))

    def _settle(self, delimiter: str) -> None:
        """A key (before ``:``) or a bare scalar (before ``,`` ``}`` ``]``) is complete."""
        token = self._pending.strip()
        self._pending = ""
        if delimiter == ":":
            self._out(json.dumps(token, ensure_ascii=False) + ":")
        elif token:
            self._out(token if JSON_SCALAR.fullmatch(token) else json.dumps(token, ensure_ascii=False))
