"""Key/value parameters (XML-style formats) → one JSON object, typed by the tool's schema."""

from __future__ import annotations

import ast
import io
import json
import re
import tokenize
from collections.abc import Mapping
from typing import Any

from parsetier.engine import json_bounds
from parsetier.engine.readers.common import PY_LITERALS, Emit, json_string_fragment


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
        parsed: Any = json_bounds.loads(value)
    except ValueError:  # not JSON, or beyond the bounds (too deep, a huge number): a string
        parsed = PY_LITERALS.get(value, value)
        if parsed is value and types & {"object", "array"} and value[:1] in ("{", "["):
            parsed = _python_container(value)
    if isinstance(parsed, str) and parsed is not value and "string" not in types:
        parsed = value if not value.startswith('"') else parsed
    return json.dumps(parsed, ensure_ascii=False)


def _python_container(value: str) -> Any:
    """An object/array written as a Python literal (``{'a': None}``: Seed-OSS renders non-string
    values with Jinja's ``string`` filter): the dict/list it denotes, else the text unchanged.
    Only for object/array parameters, so a string like ``123_456`` is never reinterpreted.
    A literal whose JSON would not be JSON stays text too: a number that overflows to infinity
    (``[1e999]``: ``json.dumps`` would write ``Infinity``), as a JSON value beyond the bounds does."""
    try:
        json_bounds.check_depth(value)
        if "\\N" in value and _names_a_character(value):
            return value
        parsed = ast.literal_eval(value)
        if isinstance(parsed, dict | list):
            # A lone surrogate (an escape such as '\\ud800') is no UTF-8: the literal stays text.
            json.dumps(parsed, ensure_ascii=False, allow_nan=False).encode("utf-8")
            return parsed
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    return value


_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


def _names_a_character(value: str) -> bool:
    """Whether a string of the literal spells a character by its name (``'\\N{BULLET}'``).

    Such a literal stays text: Python reads the name from its own Unicode database (which grows
    with each Python release) and the native core has none; Seed-OSS's template writes values
    with Python's ``repr``, which never spells a name."""
    try:
        for token in tokenize.generate_tokens(io.StringIO(value).readline):
            if token.type != tokenize.STRING:
                continue
            quote = min(i for i in (token.string.find("'"), token.string.find('"')) if i >= 0)
            if "r" in token.string[:quote].lower():
                continue
            if any(m.group(1) == "N" for m in _ESCAPE.finditer(token.string, quote)):
                return True
    except (tokenize.TokenError, SyntaxError):
        pass  # not a literal: ``literal_eval`` refuses it as well
    return False


_NULL_SPELLINGS = ("null", "None")
"""Raw values that mean JSON null for a parameter whose schema allows both string and null."""


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
        # A string that may be null: the raw text ``null`` (or ``None``, how templates that render
        # values with Jinja's ``string`` filter write null) means JSON null. Hold back only what is
        # ambiguous — the text while it is still a prefix of one of those — and open the string lazily.
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
            if any(spelling.startswith(text) for spelling in _NULL_SPELLINGS):
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
            self._emit("null" if held in _NULL_SPELLINGS else f'"{json_string_fragment(held)}"')
        elif self._streaming:
            self._emit('"')
        else:
            self._emit(typed_value("".join(self._buffer), self._types))

    def close(self) -> None:
        """Finish the object; a call with no parameters gets ``{}``."""
        self.end()
        self._emit("{}" if self._first else "}")
        self._first = False
