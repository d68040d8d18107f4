"""Argument styles: how a call's arguments become a stream of JSON text fragments.

* ``ParamWriter`` — XML-style formats write one key and one raw-text value at a time
  (Qwen3-Coder, GLM, MiniMax, DSML). String values stream as JSON string fragments as they are
  generated; other schema types (integer, number, boolean, null, object, array) need the whole value
  to be typed, so they are written once their closing marker arrives.
* ``JsonArgsReader`` — the model writes the arguments as one JSON value (DeepSeek, Kimi, Harmony,
  Mistral v11): it streams through verbatim, from its first bracket to the matching last one.
* ``EnvelopeReader`` — the name travels inside the JSON (Hermes ``{"name": …, "arguments": …}``,
  Llama, Mistral's older list form): the call starts once the name is known and the arguments
  value begins; if the envelope never takes shape the raw text is handed back for passthrough.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Mapping
from typing import Any

import regex

from parsetier.engine.json_scan import COMPLETE, MALFORMED, OPEN, JsonValueScanner

Emit = Callable[[str], None]

_SENTINEL = re.compile("[\U000f0000-\U000ffffd]")
_PY_LITERALS = {"True": True, "False": False, "None": None}


def schema_types(schema: Mapping[str, Any] | None) -> frozenset[str]:
    """The JSON types a property schema allows (``type``, a type list, or ``anyOf``/``oneOf``)."""
    if not schema:
        return frozenset()
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset({kind})
    if isinstance(kind, list):
        return frozenset(str(k) for k in kind)
    out: set[str] = set()
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key, ()) or ():
            if isinstance(sub, Mapping):
                out |= schema_types(sub)
    if not out and "enum" in schema:
        out |= {type(v).__name__ for v in schema["enum"]} & {"str"} and {"string"}
    return frozenset(out)


def typed_value(text: str, types: frozenset[str]) -> str:
    """JSON text for a raw value the schema says is not (only) a string.

    Follows what the model wrote: valid JSON is kept as the JSON it is (``4.5`` for an integer
    parameter stays 4.5), Python spellings of literals are mapped, anything else becomes a string.
    """
    value = text.strip()
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = _PY_LITERALS.get(value, value)
        if parsed is value and types & {"object", "array"} and value[:1] in ("{", "["):
            parsed = _python_container(value)
    if isinstance(parsed, str) and parsed is not value and "string" not in types:
        parsed = value if not value.startswith('"') else parsed
    return json.dumps(parsed, ensure_ascii=False)


def _python_container(value: str) -> Any:
    """An object/array written as a Python literal (``{'a': None}``: Seed-OSS renders non-string
    values with Jinja's ``string`` filter): the dict/list it denotes, else the text unchanged.
    Only for object/array parameters, so a string like ``123_456`` is never reinterpreted."""
    try:
        parsed = ast.literal_eval(value)
        if isinstance(parsed, dict | list):
            json.dumps(parsed)
            return parsed
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    return value


def json_string_fragment(text: str) -> str:
    """``text`` escaped for the inside of a JSON string; fragments concatenate like their sources."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


class ParamWriter:
    """Key/value parameters → one JSON object, streamed. One writer per tool call."""

    __slots__ = (
        "_buffer",
        "_emit",
        "_first",
        "_held_newline",
        "_in_value",
        "_leading",
        "_maybe_null",
        "_properties",
        "_streaming",
        "_trim",
        "_types",
    )

    def __init__(self, parameters: Mapping[str, Any] | None, trim_newline: bool, emit: Emit) -> None:
        props = (parameters or {}).get("properties") if isinstance(parameters, Mapping) else None
        self._properties: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
        self._trim = trim_newline
        self._emit = emit
        self._first = True
        self._in_value = False
        self._streaming = False
        self._types: frozenset[str] = frozenset()
        self._buffer: list[str] = []
        self._leading = True
        self._held_newline = False
        self._maybe_null: str | None = None

    @property
    def started(self) -> bool:
        return not self._first

    def begin(self, key: str, forced: str | None = None) -> None:
        """Start a value; ``forced`` is a type the markup states (``string`` or ``json``)."""
        if self._in_value:
            self.end()
        if forced == "string":
            self._types = frozenset({"string"})
        elif forced == "json":
            self._types = frozenset({"json"})
        else:
            self._types = schema_types(self._properties.get(key))
        self._streaming = not self._types or "string" in self._types
        self._in_value = True
        self._leading = True
        self._held_newline = False
        self._buffer = []
        # A string that may be null: the raw text ``null`` means JSON null. Hold back only what is
        # ambiguous — the text while it is still a prefix of "null" — and open the string lazily.
        self._maybe_null = "" if self._streaming and "null" in self._types else None
        head = "{" if self._first else ", "
        self._first = False
        quote = '"' if self._streaming and self._maybe_null is None else ""
        self._emit(f"{head}{json.dumps(key, ensure_ascii=False)}: " + quote)

    def value(self, text: str) -> None:
        if not self._in_value or not text:
            return
        if not self._streaming:
            self._buffer.append(text)
            return
        if self._trim:
            if self._leading:
                self._leading = False
                if text.startswith("\n"):
                    text = text[1:]
            if self._held_newline:
                text = "\n" + text
                self._held_newline = False
            if text.endswith("\n"):
                text = text[:-1]
                self._held_newline = True
        if self._maybe_null is not None and text:
            text = self._maybe_null + text
            if "null".startswith(text):
                self._maybe_null = text
                return
            self._maybe_null = None
            self._emit('"')
        if text:
            self._emit(json_string_fragment(text))

    def end(self) -> None:
        if not self._in_value:
            return
        self._in_value = False
        if self._maybe_null is not None:
            held, self._maybe_null = self._maybe_null, None
            self._emit("null" if held == "null" else f'"{json_string_fragment(held)}"')
        elif self._streaming:
            self._emit('"')
        else:
            self._emit(typed_value("".join(self._buffer), self._types))

    def close(self) -> None:
        """Finish the object; a call with no parameters gets ``{}``."""
        self.end()
        self._emit("{}" if self._first else "}")
        self._first = False


class JsonArgsReader:
    """Streams one JSON value verbatim as the call's arguments, skipping any lead-in (fences)."""

    __slots__ = ("_emit", "_scanner", "emitted")

    _LEAD = re.compile("[{\\[\U000f0000-\U000ffffd]")

    def __init__(self, emit: Emit) -> None:
        self._emit = emit
        self._scanner: JsonValueScanner | None = None
        self.emitted = False

    @property
    def status(self) -> str:
        return self._scanner.status if self._scanner else OPEN

    def feed(self, text: str, pos: int) -> int:
        """Consume from ``pos``; return where reading stopped (``len(text)`` if all was taken)."""
        if self._scanner is None:
            m = self._LEAD.search(text, pos)
            if m is None:
                return len(text)
            if _SENTINEL.match(m.group(0)):
                self._scanner = JsonValueScanner()
                self._scanner.status = MALFORMED
                return m.start()
            pos = m.start()
            self._scanner = JsonValueScanner()
        end = self._scanner.feed(text, pos)
        if end > pos:
            self.emitted = True
            self._emit(text[pos:end])
        return end


# An OpenAI-style ``"type": "function"`` key may come first (Meta's own Llama 3 examples write it).
_HEAD = regex.compile(
    r'\s*\{\s*(?:"type"\s*:\s*"function"\s*,\s*)?'
    r'"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)',
    regex.DOTALL,
)
_HEAD_ARGS_FIRST = regex.compile(r'\s*\{\s*"(?:arguments|parameters)"\s*:\s*(?=\S)', regex.DOTALL)
_NAME_AFTER = regex.compile(r'\s*,\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"', regex.DOTALL)
# Either the opening bracket, or (no bracket) the first non-space character of a bare call list; written
# without an optional "[" so that a buffer ending right after "[" is a complete match, not a partial one.
_LIST_OPEN = regex.compile(r"\s*(?:(?P<open>\[)|(?=[^\s\[]))", regex.DOTALL)
_LIST_NEXT = regex.compile(r"\s*(?:(?P<sep>[,;\]])|(?=\{))", regex.DOTALL)
_HEAD_LIMIT = 4096
_STRUCTURE = {"list?": _LIST_OPEN, "head": _HEAD, "next": _LIST_NEXT, "name-after": _NAME_AFTER}


class EnvelopeReader:
    """``{"name": N, "arguments": {...}}`` (or a list of them) → call start + streamed arguments.

    With ``allow_list`` several call objects may follow each other: inside ``[…]`` separated by
    commas (Mistral's older form), or bare, separated by ``;`` or ``,`` (Llama); bare calls end at
    the first text that is not a separator.

    Callbacks: ``begin(name)`` once the name and the first character of the arguments are seen,
    ``args(fragment)``, ``end()`` when the object closes. ``raw`` keeps the text consumed before
    the first call began, for passthrough when the envelope turns out malformed.

    The short structural parts (the head up to the arguments, the separators of a list) are
    matched with partial regexes on a small bounded buffer; the arguments value itself streams
    through ``JsonValueScanner`` without being buffered.
    """

    __slots__ = (
        "_args", "_begin", "_bracketed", "_buffer", "_end", "_head", "_list", "_phase", "_scanner", "calls",
        "raw", "status",
    )

    def __init__(self, allow_list: bool, begin: Emit, args: Emit, end: Callable[[], None]) -> None:
        self._begin, self._args, self._end = begin, args, end
        self._phase = "list?" if allow_list else "head"
        self._list = allow_list
        self._bracketed = False
        self._head = ""
        self._scanner = JsonValueScanner()
        self._buffer: list[str] = []
        self.raw: list[str] = []
        self.calls = 0
        self.status = OPEN

    def feed(self, text: str, pos: int) -> int:
        """Consume ``text`` from ``pos``; return where reading stopped."""
        n = len(text)
        while pos < n and self.status == OPEN:
            start, phase = pos, self._phase
            if phase in ("args", "args-first", "tail"):
                pos = self._body(text, pos)
            else:
                pos = self._structure(text, pos)
            if self.calls == 0:
                self.raw.append(text[start:pos])
            # A structural part may match empty (an unbracketed list has no "["): only a step that
            # neither consumed text nor moved on to another phase waits for more text.
            if (
                pos == start
                and self.status == OPEN
                and self._phase == phase
                and phase not in ("args", "args-first", "tail")
            ):
                break
        return pos

    def _structure(self, text: str, pos: int) -> int:
        """Match one structural part; return the text position just past it (or where we wait)."""
        stop_m = _SENTINEL.search(text, pos)
        stop = stop_m.start() if stop_m else len(text)
        before = len(self._head)
        self._head += text[pos:stop]
        pattern = _STRUCTURE[self._phase]
        m = pattern.match(self._head, partial=True)
        if m is None and self._phase == "head":
            m2 = _HEAD_ARGS_FIRST.match(self._head, partial=True)
            if m2 is not None and not m2.partial:
                self._head = ""
                self._phase = "args-first"
                self._scanner = JsonValueScanner()
                return pos + (m2.end() - before)
            if m2 is not None:
                m = m2
        if m is None and self._phase == "next" and not self._bracketed:
            self._head = ""  # unbracketed calls end at the first thing that is not a separator
            self.status = COMPLETE
            return pos
        if m is None or len(self._head) > _HEAD_LIMIT or (m.partial and stop_m is not None):
            self.status = MALFORMED
            return stop
        if m.partial:
            return stop
        consumed = pos + (m.end() - before)
        self._head = ""
        phase = self._phase
        if phase == "list?":
            self._phase = "head"
            self._bracketed = bool(m.group("open"))
        elif phase == "next":
            if m.group("sep") == "]":
                self.status = COMPLETE
            else:
                self._phase = "head"
        elif phase == "head":
            self._start_call(m.group("name"))
            self._phase = "args"
            self._scanner = JsonValueScanner()
        else:  # name-after: the arguments came first and are buffered
            self._start_call(m.group("name"))
            self._args(self._unwrap("".join(self._buffer)))
            self._buffer = []
            self._enter_tail()
        return consumed

    def _body(self, text: str, pos: int) -> int:
        scanner = self._scanner
        end = scanner.feed(text, pos)
        chunk = text[pos:end]
        if self._phase == "tail":
            if scanner.status == COMPLETE:
                self._end()
                if self._list:
                    self._phase = "next"
                else:
                    self.status = COMPLETE
            elif scanner.status == MALFORMED:
                self.status = MALFORMED
            return end
        buffered = self._phase == "args-first" or scanner.first == '"'
        if buffered:
            self._buffer.append(chunk)
        elif chunk:
            self._args(chunk)
        if scanner.status == COMPLETE:
            if self._phase == "args-first":
                self._phase = "name-after"
            else:
                if buffered:
                    self._args(self._unwrap("".join(self._buffer)))
                    self._buffer = []
                self._enter_tail()
        elif scanner.status == MALFORMED:
            self.status = MALFORMED
        return end

    def _enter_tail(self) -> None:
        """The rest of the envelope object, up to its closing brace (extra keys are skipped)."""
        self._phase = "tail"
        self._scanner = JsonValueScanner()
        self._scanner.started = True
        self._scanner._depth = 1

    def _start_call(self, escaped_name: str) -> None:
        self.calls += 1
        self._begin(_unescape(escaped_name))

    @staticmethod
    def _unwrap(raw: str) -> str:
        """Arguments written as a JSON string that holds JSON (double-encoded): unwrap it."""
        if raw.lstrip().startswith('"'):
            try:
                inner = json.loads(raw)
                json.loads(inner)
                return inner
            except (ValueError, TypeError):
                return raw
        return raw

    @property
    def in_call(self) -> bool:
        """A call has begun and its object has not closed yet."""
        return self._phase in ("args", "tail") and self.calls > 0


def _unescape(json_string_body: str) -> str:
    try:
        return json.loads(f'"{json_string_body}"')
    except ValueError:
        return json_string_body


_GEMMA_SCALAR = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null")


class GemmaArgsReader:
    """Gemma 4's object notation → JSON, streamed: ``{key:<|"|>text<|"|>,n:42,o:{…},l:[…]}``.

    Keys are bare (they may hold spaces), strings are delimited by the ``<|"|>`` token (its
    sentinel, ``quote``), scalars are bare JSON literals. String content streams as it arrives;
    keys and scalars are short and wait for their delimiter. Inside a string every marker is text.
    """

    __slots__ = ("_emit", "_expect_key", "_pending", "_quote", "_stack", "emitted", "status")

    def __init__(self, emit: Emit, quote: str) -> None:
        self._emit = emit
        self._quote = quote
        self._stack: list[str] = []
        self._pending = ""  # a key or scalar being read
        self._expect_key = False
        self.emitted = False
        self.status = OPEN

    def _out(self, text: str) -> None:
        self.emitted = True
        self._emit(text)

    def feed(self, text: str, pos: int) -> int:
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
                self._stack.pop()
                self._out('"')
                pos = end + 1
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
            elif _SENTINEL.match(c):
                self.status = MALFORMED
                return pos
            else:
                self._pending += c
            pos += 1
        return pos

    def _settle(self, delimiter: str) -> None:
        """A key (before ``:``) or a bare scalar (before ``,`` ``}`` ``]``) is complete."""
        token = self._pending.strip()
        self._pending = ""
        if delimiter == ":":
            self._out(json.dumps(token, ensure_ascii=False) + ":")
        elif token:
            self._out(token if _GEMMA_SCALAR.fullmatch(token) else json.dumps(token, ensure_ascii=False))


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


def _py_scalar(token: str) -> str | None:
    """A bare Python literal → its JSON text, or None when it is not a literal (a variable name)."""
    if token in _PY_LITERALS:
        return json.dumps(_PY_LITERALS[token])
    if token not in ("true", "false", "null") and _GEMMA_SCALAR.fullmatch(token):
        return token
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


class PythonCallsReader:
    """Pythonic call lists → calls with JSON arguments, streamed: ``[f(a=1, b='x'), g()]``.

    Llama 4 (and other "pythonic" tool-call formats) write calls as Python: keyword arguments whose
    values are Python literals (``'single'``/``"double"``/``'''triple'''`` strings, numbers,
    ``True``/``False``/``None``, lists, tuples, dicts). Values become JSON as they arrive: string
    content streams; scalars are written once their delimiter shows they are complete.

    The list may be bracketed (``[…]``, calls separated by commas) or bare (``f(a=1)``; bare calls end
    at the first text that is not a comma). A call starts only once its name is followed by ``(`` and
    a keyword or ``)``, so ``[Note](url)`` or ``[1, 2]`` never start one: the reader turns malformed
    and the machine passes the text through as content. Same interface as ``EnvelopeReader``
    (``feed``, ``status``, ``raw``, ``calls``).

    Containers inside a value are a stack of small states: ``[``/``(`` wait for an item, ``[,``/``(,``
    for a comma or the close; a dict goes ``{k`` (key) → ``{:`` → ``{v`` (value) → ``{,``. Separators
    are written lazily, when the next item starts, so a Python trailing comma never reaches the JSON.
    """

    __slots__ = (
        "_args", "_begin", "_bracketed", "_end", "_esc", "_kwargs", "_name", "_out", "_phase", "_quote",
        "_quotes", "_sep", "_stack", "_token", "_triple", "calls", "raw", "status",
    )  # fmt: skip

    def __init__(self, begin: Emit, args: Emit, end: Callable[[], None]) -> None:
        self._begin, self._args, self._end = begin, args, end
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
        self.raw: list[str] = []
        self.calls = 0
        self.status = OPEN

    # ------------------------------------------------------------------ driver
    def feed(self, text: str, pos: int) -> int:
        """Consume ``text`` from ``pos``; return where reading stopped (a marker outside a string,
        the end of the list, or the first character of a malformed one)."""
        start, n = pos, len(text)
        while pos < n and self.status == OPEN:
            if self._phase == "string":
                pos = self._string(text, pos)
                continue
            c = text[pos]
            if self._phase != "qopen" and _SENTINEL.match(c):
                self.status = MALFORMED
                break
            if self._step(c):
                pos += 1
        self._flush()
        if self.calls == 0:
            self.raw.append(text[start:pos])
        return pos

    def _flush(self) -> None:
        if self._out:
            out, self._out = "".join(self._out), []
            self._args(out)

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
        self._end()
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
            if top == "{k" or not self._item():
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
        json_text = _py_scalar(self._token)
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
