"""Pythonic call lists (Llama 4) → calls with JSON arguments."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

from parsetier.engine.json_bounds import MAX_DEPTH
from parsetier.engine.json_scan import COMPLETE, MALFORMED, OPEN
from parsetier.engine.readers.common import (
    PY_LITERALS,
    SENTINEL,
    CallsReader,
    Emit,
    json_string_fragment,
)

JSON_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")
"""A bare JSON scalar (number, ``true``, ``false``, ``null``); Gemma's notation writes its scalars so too."""

_PY_IDENT_START = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
_PY_IDENT = _PY_IDENT_START | frozenset("0123456789")
_PY_NAME = _PY_IDENT | frozenset(".")
_PY_ESCAPES = {
    "n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "a": "\a", "0": "\0",
    "\\": "\\", "'": "'", '"': '"', "\n": "",
}  # fmt: skip
_PY_HEX_LEN = {"x": 2, "u": 4, "U": 8}
_PY_TOKEN_LIMIT = 4096
_PY_DELIMITERS = frozenset(",:)]}")


def _py_scalar(token: str, json_literals: bool = False) -> str | None:
    """A bare Python literal → its JSON text, or None when it is not a literal (a variable name).
    With ``json_literals`` JSON's ``true``/``false``/``null`` count as literals too. Numbers are
    Python's literal syntax, ASCII digits: ``int()`` and ``float()`` also read other scripts'
    digits (``٣``), which no Python source (nor JSON) spells a number with."""
    if token in PY_LITERALS:
        return json.dumps(PY_LITERALS[token])
    if (json_literals or token not in ("true", "false", "null")) and JSON_SCALAR.fullmatch(token):
        return token
    if not token.isascii():
        return None
    value: float | int
    try:
        value = int(token, 0)
    except ValueError:
        try:
            value = float(token)
        except ValueError:
            return None
        if value != value or value in (float("inf"), float("-inf")):
            return None
    return json.dumps(value)


class PythonCallsReader(CallsReader):
    """Pythonic call lists → calls with JSON arguments, streamed: ``[f(a=1, b='x'), g()]``.

    Llama 4 (and other "pythonic" tool-call formats) write calls as Python: keyword arguments whose
    values are Python literals (``'single'``/``"double"``/``'''triple'''`` strings, numbers,
    ``True``/``False``/``None``, lists, tuples, dicts). Values become JSON as they arrive: string
    content streams; scalars are written once their delimiter shows they are complete.

    The list may be bracketed (``[…]``, calls separated by commas) or bare (``f(a=1)``; bare calls end
    at the first text that is not a comma). A call starts only once its name is followed by ``(`` and
    a keyword or ``)``, so ``[Note](url)`` or ``[1, 2]`` never start one: the reader turns malformed
    and the machine passes the text through as content. Same interface as ``EnvelopeReader``
    (``read_from``, ``status``, ``raw``, ``calls``).

    Containers inside a value are a stack of small states: ``[``/``(`` wait for an item, ``[,``/``(,``
    for a comma or the close; a dict goes ``{k`` (key) → ``{:`` → ``{v`` (value) → ``{,``. Separators
    are written lazily, when the next item starts, so a Python trailing comma never reaches the JSON.
    """

    __slots__ = (
        "_args", "_begin", "_bracketed", "_end", "_ended", "_ending", "_esc", "_flushes", "_json_literals",
        "_kwargs", "_name", "_out", "_pending", "_phase", "_quote", "_quotes", "_sep", "_space", "_stack",
        "_token", "_triple", "calls", "raw", "status",
    )  # fmt: skip

    def __init__(
        self, begin: Emit, args: Emit, end: Callable[[str, int], None], json_literals: bool = False
    ) -> None:
        """``json_literals``: JSON's ``true``/``false``/``null`` are literals too (dialect
        ``python_json``: templates that render dict values with ``tojson``, LFM2)."""
        self._begin, self._args, self._end = begin, args, end
        self._ended = False  # a call closed at the character just read: ``end`` is told where
        self._json_literals = json_literals
        self._phase = "open"
        self._bracketed = False
        self._name = ""
        self._token = ""  # a keyword or a bare scalar being read
        self._kwargs = 0
        self._stack: list[str] = []
        self._sep = False  # a comma was read; the next item writes it
        self._quote = ""
        self._triple = False
        self._quotes = 0  # quotes in a row: opening a string, or maybe closing a triple-quoted one
        self._esc = ""  # inside a string: "\\" after a backslash, or "x"/"u"/"U" plus hex digits so far
        self._out: list[str] = []
        self._flushes = 0  # how often ``_out`` was written: a step that wrote shows in it or here
        self._pending = ""  # read since the reader last wrote: lost if the list breaks (``unread``)
        self._ending = False
        self.raw: list[str] = []
        self.calls = 0
        self._space = ""
        self.status = OPEN

    # ------------------------------------------------------------------ driver
    def read_from(self, text: str, pos: int) -> int:
        """Consume ``text`` from ``pos``; return where reading stopped (a marker outside a string,
        the end of the list, or the first character of a malformed one)."""
        start, n = pos, len(text)
        mark = pos  # ``_pending`` goes on from here (read, not written)
        while pos < n and self.status == OPEN:
            if self._phase == "string":
                pos = self._string(text, pos)
                self._pending, mark = "", pos  # string content streams
                continue
            c = text[pos]
            if self._phase != "qopen" and SENTINEL.match(c):
                self.status = MALFORMED
                break
            out, flushes = len(self._out), self._flushes
            if self._step(c):
                pos += 1
            if len(self._out) != out or self._flushes != flushes:  # what was read is written…
                self._pending = ""
                mark = pos - len(self._token) if self._phase == "value" else pos  # …not a scalar begun
            if self._ended:
                self._ended = False
                self._end(text, pos)
        self._pending += text[mark:pos]
        self._flush()
        if self.calls == 0:
            self.raw.append(text[start:pos])
        return pos

    def _flush(self) -> None:
        if self._out:
            out, self._out = "".join(self._out), []
            self._flushes += 1
            self._args(out)

    def end_of_output(self) -> None:
        self._ending = True

    def unread(self) -> str:
        """A list that broke, or that the output ended in, after its first call: the text read
        since the reader last wrote (a bare name as a value, ``f(a=xyz)``; a keyword or the next
        call's name cut off by what cannot follow it; a scalar the output ended in), which no
        argument holds: the model's, for the machine to show. (Before the first call the whole
        list is passed through instead, ``unclaimed``.)"""
        pending, self._pending = self._pending, ""
        broken = self.status == MALFORMED or (self._ending and self.status == OPEN)
        return pending if broken and self.calls > 0 else ""

    def _fail(self) -> bool:
        """Malformed here: the character is not consumed."""
        self.status = MALFORMED
        return False

    # ------------------------------------------------------------------ calls
    def _step(self, c: str) -> bool:
        """One character outside strings; False when it is not consumed (read again, or malformed)."""
        phase = self._phase
        if phase == "value":
            return self._value(c)
        if phase == "qopen":
            return self._quote_open(c)
        if phase == "name":
            if c in _PY_NAME and len(self._name) < _PY_TOKEN_LIMIT:
                self._name += c
                return True
            self._phase = "paren"
            return False
        if phase == "key":
            if c in _PY_IDENT and len(self._token) < _PY_TOKEN_LIMIT:
                self._token += c
                return True
            self._phase = "eq"
            return False
        if c.isspace():
            return True
        if phase in ("open", "next"):
            if phase == "open" and c == "[" and not self._bracketed:
                self._bracketed = True
                return True
            if c not in _PY_IDENT_START:
                return self._fail()
            self._phase, self._name = "name", ""
            return False
        if phase == "paren":
            if c != "(":
                return self._fail()
            self._phase, self._kwargs = "kw", 0
            return True
        if phase == "kw":
            if c == ")":
                self._close_call()
                return True
            if c not in _PY_IDENT_START:
                return self._fail()
            self._phase, self._token = "key", ""
            return False
        if phase == "eq":
            if c != "=":
                return self._fail()
            if self._kwargs == 0:
                self.calls += 1
                self._begin(self._name)
            head = "{" if self._kwargs == 0 else ", "
            self._out.append(f"{head}{json.dumps(self._token, ensure_ascii=False)}: ")
            self._kwargs += 1
            self._phase, self._token, self._stack, self._sep = "value", "", [], False
            return True
        if phase == "after_value":
            if c == ",":
                self._phase = "kw"
                return True
            if c == ")":
                self._close_call()
                return True
            return self._fail()
        # after_call
        if c == ",":
            self._phase = "next"
            return True
        if self._bracketed:
            if c != "]":
                return self._fail()
            self.status = COMPLETE
            return True
        self.status = COMPLETE  # bare calls end at the first thing that is not a separator
        return False

    def _close_call(self) -> None:
        if self._kwargs == 0:
            self.calls += 1
            self._begin(self._name)
            self._out.append("{}")
        else:
            self._out.append("}")
        self._flush()
        self._ended = True
        self._phase = "after_call"

    # ------------------------------------------------------------------ values
    def _value(self, c: str) -> bool:
        """One character of a keyword's value, outside strings."""
        if self._token:
            if not (c.isspace() or c in _PY_DELIMITERS):
                if c in "'\"" and self._token in ("r", "R", "u", "U"):
                    self._token = ""  # a string prefix; raw strings are read like plain ones
                    self._phase, self._quote, self._quotes = "qopen", c, 1
                    return True
                if len(self._token) >= _PY_TOKEN_LIMIT:
                    return self._fail()
                self._token += c
                return True
            return self._settle_token()
        if c.isspace():
            return True
        stack = self._stack
        top = stack[-1] if stack else ""
        if c in "'\"":
            if not self._item():
                return self._fail()
            self._phase, self._quote, self._quotes = "qopen", c, 1
            return True
        if c in "[{(":
            if top == "{k" or len(stack) >= MAX_DEPTH or not self._item():
                return self._fail()
            stack.append("{k" if c == "{" else c)
            self._out.append("[" if c == "(" else c)
            return True
        if c in "])":
            want = "[" if c == "]" else "("
            if top not in (want, want + ","):
                return self._fail()
            return self._close_container("]")
        if c == "}":
            if top not in ("{k", "{,"):
                return self._fail()
            return self._close_container("}")
        if c == ",":
            if top in ("[,", "(,", "{,"):
                stack[-1] = "{k" if top == "{," else top[0]
                self._sep = True
                return True
            return self._fail()
        if c == ":":
            if top != "{:":
                return self._fail()
            stack[-1] = "{v"
            self._out.append(": ")
            return True
        if not self._item():
            return self._fail()
        self._token = c
        return True

    def _item(self) -> bool:
        """A value starts here: check that one may, and write the pending separator."""
        stack = self._stack
        if stack and stack[-1] not in ("[", "(", "{k", "{v"):
            return False
        if self._sep:
            self._out.append(", ")
            self._sep = False
        return True

    def _close_container(self, bracket: str) -> bool:
        self._stack.pop()
        self._sep = False
        self._out.append(bracket)
        self._value_done()
        return True

    def _value_done(self) -> None:
        """A complete value was written: move its container on, or end the keyword's value."""
        stack = self._stack
        if not stack:
            self._phase = "after_value"
            return
        self._phase = "value"
        top = stack[-1]
        stack[-1] = {"[": "[,", "(": "(,", "{k": "{:", "{v": "{,"}.get(top, top)

    def _settle_token(self) -> bool:
        """A bare scalar ended at a delimiter (not consumed: it is read again)."""
        json_text = _py_scalar(self._token, self._json_literals)
        self._token = ""
        if json_text is None:
            return self._fail()
        key = bool(self._stack) and self._stack[-1] == "{k"
        self._out.append(json.dumps(json_text) if key else json_text)  # JSON keys are strings
        self._value_done()
        return False

    # ------------------------------------------------------------------ strings
    def _quote_open(self, c: str) -> bool:
        """After an opening quote: ``''`` is an empty string, ``'''`` opens a triple-quoted one."""
        if c == self._quote:
            self._quotes += 1
            if self._quotes == 3:
                self._open_string(triple=True)
            return True
        if self._quotes == 2:
            self._out.append('""')
            self._value_done()
            return False
        self._open_string(triple=False)
        return False

    def _open_string(self, triple: bool) -> None:
        self._phase, self._triple, self._quotes, self._esc = "string", triple, 0, ""
        self._out.append('"')

    def _string(self, text: str, pos: int) -> int:
        """String content up to the closing quote; escapes are Python's, the output JSON's."""
        quote, n = self._quote, len(text)
        chunk: list[str] = []
        while pos < n:
            c = text[pos]
            pos += 1
            if self._esc:
                self._escape(c, chunk)
                continue
            if self._quotes and c != quote:  # quotes inside a triple-quoted string
                chunk.append(quote * self._quotes)
                self._quotes = 0
            if c == "\\":
                self._esc = "\\"
            elif c != quote:
                chunk.append(c)
            elif not self._triple or self._quotes == 2:
                self._quotes = 0
                if chunk:
                    self._out.append(json_string_fragment("".join(chunk)))
                self._out.append('"')
                self._value_done()
                return pos
            else:
                self._quotes += 1
        if chunk:
            self._out.append(json_string_fragment("".join(chunk)))
        return pos

    def _escape(self, c: str, chunk: list[str]) -> None:
        esc = self._esc
        if esc == "\\":
            if c in _PY_HEX_LEN:
                self._esc = c
                return
            self._esc = ""
            chunk.append(_PY_ESCAPES.get(c, "\\" + c))
            return
        if c not in "0123456789abcdefABCDEF":
            self._esc = ""
            chunk.append("\\" + esc + c)
            return
        esc += c
        if len(esc) - 1 < _PY_HEX_LEN[esc[0]]:
            self._esc = esc
            return
        self._esc = ""
        code = int(esc[1:], 16)
        chunk.append(chr(code) if code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else "\\" + esc)
