"""Arguments in a notation other than JSON: Gemma 4's object notation (``json`` states with
``dialect = "gemma"``) and pythonic call lists (Llama 4's ``[f(a=1, b='x')]``).

The notation is the reader's (``engine/readers/gemma.py``): ``{key:<|"|>text<|"|>,n:42}``,
bare keys, strings between two ``quote`` terminals, scalars as bare JSON literals, ``[…]``
lists and nested ``{…}`` objects, no whitespace needed. The constraint writes it from the strict
schema: members in schema order (required ones present, commas only between members that are
written), plain strings as text between quotes, string enums/consts as one of their values,
numbers, booleans and null as their JSON literal, arrays with ``items`` (no count limits) as
lists. A schema the notation cannot carry through the reader (a string ``pattern``/``format``,
unions, bounded arrays) is ``Underivable``. A non-strict tool gets any members with bare keys
and string or scalar values.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from parsetier.constraints.ir import Alt, Json, Lit, Node, Opt, Regex, Seq, Star, Text
from parsetier.constraints.request import ARRAY_LIMITS, STRING_LIMITS, InvalidTool, unwritable
from parsetier.constraints.shape import Underivable
from parsetier.engine.grammar import SENTINEL_RE

MAX_NESTING = 16
_SCALARS = frozenset({"integer", "number", "boolean", "null"})
_KEY = r"[A-Za-z_][A-Za-z0-9_]*"
_SCALAR = r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?|true|false|null"


def notation_arguments(quote: Lit, schema: Mapping[str, Any] | None, fmt: str) -> Node:
    """The arguments object; ``schema`` None for a non-strict tool."""
    w = _Writer(quote, fmt)
    if schema is None:
        member = Seq((Regex(_KEY), Lit.plain(":"), Alt((w.string(), Regex(_SCALAR)))))
        return Seq((Lit.plain("{"), Opt(Seq((member, Star(Seq((Lit.plain(","), member)))))), Lit.plain("}")))
    return w.value(schema, 0)


class _Writer:
    def __init__(self, quote: Lit, fmt: str) -> None:
        self.quote = quote
        self.fmt = fmt

    def string(self, inner: Node | None = None) -> Node:
        return Seq((self.quote, inner if inner is not None else Text.without(self.quote), self.quote))

    def value(self, schema: Mapping[str, Any], depth: int) -> Node:
        kind = schema.get("type")
        if depth > MAX_NESTING:
            raise Underivable(f"format {self.fmt!r}: the schema nests deeper than {MAX_NESTING}")
        if kind == "string" and not set(schema) & STRING_LIMITS:
            if "const" in schema:
                return self.string(self.literal(schema["const"]))
            if "enum" in schema:
                values = [self.literal(v) for v in schema["enum"]]
                return self.string(values[0] if len(values) == 1 else Alt(tuple(values)))
            return self.string()
        if kind in _SCALARS:
            return Json(dict(schema))
        if kind == "object" or (kind is None and "properties" in schema):
            props = schema.get("properties") or {}
            if not isinstance(props, Mapping):
                raise Underivable(f"format {self.fmt!r}: 'properties' is not an object")
            members = self.members(props, set(schema.get("required") or ()), depth)
            return Seq((Lit.plain("{"), members, Lit.plain("}")))
        counted = set(schema) & ARRAY_LIMITS
        if kind == "array" and isinstance(schema.get("items"), Mapping) and not counted:
            item = self.value(schema["items"], depth + 1)
            return Seq((Lit.plain("["), Opt(Seq((item, Star(Seq((Lit.plain(","), item)))))), Lit.plain("]")))
        raise Underivable(
            f"format {self.fmt!r}: the schema {dict(schema)!r} has no form in the object notation"
        )

    def members(self, props: Mapping[str, Any], required: set[str], depth: int) -> Node:
        """Members in order; a comma before each one that follows a written member."""
        nodes = []
        for key, sub in props.items():
            if unwritable(key) or any(c in key for c in ':,{}[]"'):
                raise InvalidTool(f"format {self.fmt!r} cannot write the key {key!r}")
            value = self.value(sub if isinstance(sub, Mapping) else {}, depth + 1)
            nodes.append((Seq((Lit.plain(f"{key}:"), value)), key in required))

        return _comma_list(nodes, ",")

    def literal(self, value: Any) -> Lit:
        if not isinstance(value, str) or self.quote.text in value or SENTINEL_RE.search(value):
            raise Underivable(f"format {self.fmt!r}: the string value {value!r} has no form in the notation")
        return Lit.plain(value)


# --------------------------------------------------------------------------------------------
# Pythonic call lists (``envelope`` states with ``dialect = "python"``/``"python_json"``)
# --------------------------------------------------------------------------------------------

_PY_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_PY_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PY_STRING = r"'([^'\\\n]|\\[\\'nt])*'"
"""A single-quoted Python string; the escapes it allows are ones the reader decodes."""


def python_call(name: str, schema: Mapping[str, Any] | None, fmt: str) -> Node:
    """``name(key=value, …)`` with Python literal values from the strict schema (``schema`` None:
    any keyword arguments with string or scalar values)."""
    if not _PY_NAME.fullmatch(name):
        raise InvalidTool(f"format {fmt!r} cannot write the tool name {name!r} as a Python call")
    w = _PyWriter(fmt)
    if schema is None:
        arg = Seq((Regex(_PY_KEY.pattern), Lit.plain("="), Alt((Regex(_PY_STRING), Regex(_SCALAR)))))
        args: Node = Opt(Seq((arg, Star(Seq((Lit.plain(", "), arg))))))
    else:
        props = schema.get("properties") or {}
        if not isinstance(props, Mapping):
            raise Underivable(f"format {fmt!r}: 'properties' is not an object")
        try:
            args = w.members(props, set(schema.get("required") or ()), 0, keyword=True)
        except Underivable as exc:
            raise Underivable(f"tool {name!r}: {exc}") from None
    return Seq((Lit.plain(f"{name}("), args, Lit.plain(")")))


class _PyWriter:
    def __init__(self, fmt: str) -> None:
        self.fmt = fmt

    def value(self, schema: Mapping[str, Any], depth: int) -> Node:
        kind = schema.get("type")
        if depth > MAX_NESTING:
            raise Underivable(f"format {self.fmt!r}: the schema nests deeper than {MAX_NESTING}")
        if kind == "string" and not set(schema) & STRING_LIMITS:
            values = [schema["const"]] if "const" in schema else schema.get("enum")
            if values is None:
                return Regex(_PY_STRING)
            lits = [Lit.plain(self.quoted(v)) for v in values]
            return lits[0] if len(lits) == 1 else Alt(tuple(lits))
        if kind in ("integer", "number"):
            return Json(dict(schema))
        if kind == "boolean" and not set(schema) & {"const", "enum"}:
            return Alt((Lit.plain("True"), Lit.plain("False")))
        if kind == "null":
            return Lit.plain("None")
        if kind == "object" or (kind is None and "properties" in schema):
            props = schema.get("properties") or {}
            if not isinstance(props, Mapping):
                raise Underivable(f"format {self.fmt!r}: 'properties' is not an object")
            members = self.members(props, set(schema.get("required") or ()), depth, keyword=False)
            return Seq((Lit.plain("{"), members, Lit.plain("}")))
        counted = set(schema) & ARRAY_LIMITS
        if kind == "array" and isinstance(schema.get("items"), Mapping) and not counted:
            item = self.value(schema["items"], depth + 1)
            return Seq((Lit.plain("["), Opt(Seq((item, Star(Seq((Lit.plain(", "), item)))))), Lit.plain("]")))
        raise Underivable(f"format {self.fmt!r}: the schema {dict(schema)!r} has no Python literal form here")

    def members(self, props: Mapping[str, Any], required: set[str], depth: int, keyword: bool) -> Node:
        """``key=value`` keyword arguments or ``'key': value`` dict members, in schema order."""
        nodes = []
        for key, sub in props.items():
            if keyword and not _PY_KEY.fullmatch(key):
                raise InvalidTool(f"format {self.fmt!r} cannot write the keyword {key!r}")
            head = f"{key}=" if keyword else f"{self.quoted(key)}: "
            value = self.value(sub if isinstance(sub, Mapping) else {}, depth + 1)
            nodes.append((Seq((Lit.plain(head), value)), key in required))
        return _comma_list(nodes, ", ")

    def quoted(self, value: Any) -> str:
        if not isinstance(value, str) or SENTINEL_RE.search(value) or "\n" in value:
            raise Underivable(f"format {self.fmt!r}: the value {value!r} has no Python literal form here")
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _comma_list(nodes: list[tuple[Node, bool]], comma: str) -> Node:
    """Items in order, each present (``True``) or optional; ``comma`` only between written ones."""

    def after(i: int) -> list[Node]:
        out: list[Node] = []
        for node, needed in nodes[i:]:
            item = Seq((Lit.plain(comma), node))
            out.append(item if needed else Opt(item))
        return out

    def first(i: int) -> Node:
        if i == len(nodes):
            return Seq(())
        node, needed = nodes[i]
        written = Seq((node, *after(i + 1)))
        return written if needed else Alt((written, first(i + 1)))

    return first(0)
