"""Arguments written as one element per argument (the ``elements`` state kind, MiniMax-M3).

The element syntax is the reader's (``engine/readers/elements.py``): every tag is the format's
``tag`` terminal then ``<name>`` or ``</name>``; an element holds text (a scalar, typed by the
schema) or child elements (an object's members, an array's ``item`` children). The constraint
writes what the templates write, from the strict schema:

- an object with ``properties``: one child per property in schema order, required ones present;
- an array with ``items`` (and no count limits): any number of ``item`` children;
- a plain string: text up to the closing tag (never the tag marker); a string enum or
  const: one of its values;
- anything else (numbers, booleans, null, unions, objects without properties, bounded arrays):
  the value's JSON text, which the reader types by the schema as it does every scalar.

A non-strict tool gets its declared parameters, each optional, as text (the reader types them);
undeclared names cannot be written, since a CFG cannot make a closing tag repeat an open one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from parsetier.constraints.ir import Alt, Json, Lit, Node, Opt, Seq, Star, Text
from parsetier.constraints.request import ARRAY_LIMITS, STRING_LIMITS, InvalidTool
from parsetier.constraints.shape import Underivable
from parsetier.engine.grammar import SENTINEL_RE
from parsetier.engine.readers.elements import _TAG

MAX_NESTING = 16
"""Schemas nested deeper than this are written as JSON text below that depth."""


def element_arguments(tag: Lit, item: str, schema: Mapping[str, Any], strict: bool, fmt: str) -> Node:
    """The arguments of one call: its top-level elements."""
    w = _Writer(tag, item, fmt)
    props = schema.get("properties") or {}
    if not isinstance(props, Mapping):
        raise Underivable(f"format {fmt!r}: 'properties' is not an object")
    if not strict:
        return Seq(tuple(Opt(w.element(key, w.text())) for key in props))
    return w.members(props, set(schema.get("required") or ()), 0)


class _Writer:
    def __init__(self, tag: Lit, item: str, fmt: str) -> None:
        self.tag = tag
        self.item = item
        self.fmt = fmt

    def text(self) -> Text:
        return Text.without(self.tag)

    def element(self, key: str, value: Node) -> Node:
        if SENTINEL_RE.search(key) or not _TAG.fullmatch(f"<{key}>"):
            raise InvalidTool(f"format {self.fmt!r} cannot write the element name {key!r}")
        open_ = Lit((*self.tag.pieces, (f"<{key}>", None)))
        close = Lit((*self.tag.pieces, (f"</{key}>", None)))
        return Seq((open_, value, close))

    def members(self, props: Mapping[str, Any], required: set[str], depth: int) -> Node:
        items: list[Node] = []
        for key, sub in props.items():
            node = self.element(key, self.value(sub if isinstance(sub, Mapping) else {}, depth + 1))
            items.append(node if key in required else Opt(node))
        return Seq(tuple(items))

    def value(self, schema: Mapping[str, Any], depth: int) -> Node:
        kind = schema.get("type")
        if kind == "string" and not set(schema) & STRING_LIMITS:
            if "const" in schema:
                return self.literal(schema["const"])
            if "enum" in schema:
                values = [self.literal(v) for v in schema["enum"]]
                return values[0] if len(values) == 1 else Alt(tuple(values))
            return self.text()
        if kind == "string":
            raise Underivable(
                f"format {self.fmt!r}: a string {sorted(set(schema) & {'pattern', 'format'})} "
                "has no element form (elements hold raw text, not JSON)"
            )
        props = schema.get("properties")
        if depth < MAX_NESTING and kind == "object" and isinstance(props, Mapping) and props:
            return self.members(props, set(schema.get("required") or ()), depth)
        counted = set(schema) & ARRAY_LIMITS
        if (
            depth < MAX_NESTING
            and kind == "array"
            and isinstance(schema.get("items"), Mapping)
            and not counted
        ):
            return Star(self.element(self.item, self.value(schema["items"], depth + 1)))
        return Json(dict(schema))

    def literal(self, value: Any) -> Lit:
        if not isinstance(value, str) or self.tag.text in value or SENTINEL_RE.search(value):
            raise Underivable(f"format {self.fmt!r}: the string value {value!r} has no element form")
        return Lit.plain(value)
