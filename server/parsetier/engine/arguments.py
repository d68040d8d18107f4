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
    if isinstance(parsed, str) and parsed is not value and "string" not in types:
        parsed = value if not value.startswith('"') else parsed
    return json.dumps(parsed, ensure_ascii=False)


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
        head = "{" if self._first else ", "
        self._first = False
        self._emit(f"{head}{json.dumps(key, ensure_ascii=False)}: " + ('"' if self._streaming else ""))

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
        if text:
            self._emit(json_string_fragment(text))

    def end(self) -> None:
        if not self._in_value:
            return
        self._in_value = False
        if self._streaming:
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


_HEAD = regex.compile(
    r'\s*\{\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\S)',
    regex.DOTALL,
)
_HEAD_ARGS_FIRST = regex.compile(r'\s*\{\s*"(?:arguments|parameters)"\s*:\s*(?=\S)', regex.DOTALL)
_NAME_AFTER = regex.compile(r'\s*,\s*"name"\s*:\s*"(?P<name>(?:[^"\\]|\\.)*)"', regex.DOTALL)
_LIST_OPEN = regex.compile(r"\s*(?P<open>\[)?(?=\S)", regex.DOTALL)
_LIST_NEXT = regex.compile(r"\s*(?P<sep>[,;\]])", regex.DOTALL)
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
            start = pos
            if self._phase in ("args", "args-first", "tail"):
                pos = self._body(text, pos)
            else:
                pos = self._structure(text, pos)
            if self.calls == 0:
                self.raw.append(text[start:pos])
            if pos == start and self.status == OPEN and self._phase not in ("args", "args-first", "tail"):
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
