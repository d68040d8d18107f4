"""Arguments written as one element per argument (MiniMax-M3) → one JSON object, typed by schema.

Every tag starts with a marker token (the *tag prefix*, MiniMax-M3's ``]<]minimax[>[``)::

    P<city>Paris P</city>P<tags>P<item>a P</item>P<item>b P</item>P</tags>P<filters>P<max>9 P</max>P</filters>

An element holding only text is a scalar; one holding child elements is an array (its schema
says array, or, with no schema, every child is named ``item``) or else an object, one member per
child. A name repeated right after itself at the top level collects into an array (unless the
argument is a string, which streams: see below). Only a tag that starts with the prefix token
counts: ``<city>`` written as plain text is value text, and so is the prefix token followed by
anything that is not a tag.

Typing follows the tool's JSON schema, as for the other XML-style formats
(``params.typed_value``): a scalar whose schema has no ``string`` type is read as the JSON (or
Python literal) it spells, an empty element whose schema is a container is ``[]`` / ``{}``.
Where no schema reaches (an ``object`` parameter without ``properties``) leaves stay strings: the
markup does not say whether ``7`` was a number.

Streaming: a string argument (its schema's only type is ``string``) streams as a JSON string
while it is written; its element holds text only, so tags inside it other than its own closer are
text. Every other top-level argument is written, whole, once the next top-level element with
another name starts (or the call ends): a repeated name must still be able to turn the value into
an array, and nothing written is taken back. A name repeated after it was written (a string
argument's repeat, or one after another argument) is written as a second member with that key
(JSON keeps the last; nothing is dropped).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import regex

from parsetier.engine.json_scan import COMPLETE, OPEN
from parsetier.engine.readers.common import Emit, json_string_fragment
from parsetier.engine.readers.params import schema_types, typed_value

MAX_DEPTH = 64
"""Elements nested deeper than this are value text (bounded work and output)."""

MAX_NAME = 256
"""A tag name longer than this is not a tag: the prefix and what follows are value text."""

MIXED_TEXT = "$text"
"""The member that keeps text written beside child elements (nothing the model wrote is lost)."""

_NAME_CHARS = "[^<>\n\U000f0000-\U000ffffd]"
_TAG = regex.compile(rf"<(/?)([^<>/\s\U000f0000-\U000ffffd]{_NAME_CHARS}{{0,{MAX_NAME - 1}}})>")
"""``<name>`` or ``</name>`` right after the prefix."""
_PARTIAL = regex.compile(rf"(?:</?{_NAME_CHARS}{{0,{MAX_NAME}}})?")
"""What the text after the prefix may be while a tag is still being written."""

Node = str | list[tuple[str, "Node"]]
"""An element's value: its text, or its ``(name, value)`` children in order."""


class _Frame:
    __slots__ = ("children", "name", "text")

    def __init__(self, name: str) -> None:
        self.name = name
        self.text: list[str] = []
        self.children: list[tuple[str, Node]] = []

    def node(self) -> Node:
        text = "".join(self.text)
        if not self.children:
            return text
        if text.strip():
            self.children.append((MIXED_TEXT, text))
        return self.children


class ElementArgsReader:
    """Reads the body of one call (after its name, up to its closer) and writes the arguments.

    ``tag`` is the tag prefix's pattern; ``stops`` are the state's terminals: where one appears
    and no open element claims it (a closer the model forgot), the open elements end there and
    the reader stops before it, for the state's transition to take it."""

    __slots__ = (
        "_closed",
        "_emit",
        "_first",
        "_followed",
        "_gap",
        "_item",
        "_pending",
        "_props",
        "_stack",
        "_stops",
        "_streaming",
        "_tag",
        "status",
    )

    def __init__(
        self,
        tag: str,
        item: str,
        stops: Sequence[str],
        parameters: Mapping[str, Any] | None,
        emit: Emit,
        followed: Callable[[str, str, int], bool | None] | None = None,
        gap: Emit | None = None,
    ) -> None:
        """``followed(stop, text, at)``: whether a stop whose transition is ``follow``-checked
        counts where it ends at ``at`` (None: the text cannot tell yet), as the machine decides
        it for the lexer; a value may spell such a stop (M3's ``see P</invoke> inside``)."""
        props = parameters.get("properties") if isinstance(parameters, Mapping) else None
        self._props: Mapping[str, Any] = props if isinstance(props, Mapping) else {}
        self._tag = tag
        self._item = item
        self._stops = tuple(stops)
        self._followed = followed
        self._gap = gap
        """Told the text written between top-level elements, which no argument holds."""
        self._emit = emit
        self._stack: list[_Frame] = []
        self._pending: tuple[str, list[Node]] | None = None
        self._first = True
        self._closed = False
        self._streaming = False
        """The open top-level element is a string argument, streamed as it is written."""
        self.status = OPEN

    # ------------------------------------------------------------------ reading
    def read_from(self, text: str, pos: int) -> int:
        """Consume from ``pos``; stop before a stop terminal (status ``complete``), or before an
        undecided tag at the end of ``text`` (status ``open``: the machine holds it back)."""
        tag, n = self._tag, len(text)
        while pos < n:
            at = text.find(tag, pos)
            if at < 0:
                self._text(text[pos:])
                return n
            if at > pos:
                self._text(text[pos:at])
            pos = at
            after = pos + len(tag)
            m = _TAG.match(text, after)
            closing = m is not None and m.group(1) == "/"
            if m is not None and closing and self._claims(m.group(2)):
                self._close(m.group(2))
                pos = m.end()
                continue
            stop = self._stop_at(text, pos)
            if stop is None:  # a stop may still be spelled here: wait for more text
                return pos
            if stop:
                self._end_all()
                self.status = COMPLETE
                return pos
            if m is not None and not closing and len(self._stack) < MAX_DEPTH and not self._streaming:
                self._open(m.group(2))
                pos = m.end()
                continue
            if m is None and _PARTIAL.fullmatch(text, after) is not None and n - after <= MAX_NAME + 2:
                return pos  # a tag still being written
            # Not a tag here: the prefix (and a close tag of no open element) is value text.
            end = m.end() if m is not None else after
            self._text(text[pos:end])
            pos = end
        return n

    def _stop_at(self, text: str, pos: int) -> bool | None:
        """Whether a stop terminal starts at ``pos`` (None: the text ends inside one's prefix)."""
        for stop in self._stops:
            if text.startswith(stop, pos):
                if self._followed is None:
                    return True
                verdict = self._followed(stop, text, pos + len(stop))
                if verdict is False:
                    continue
                return verdict
            if len(text) - pos < len(stop) and stop.startswith(text[pos:]):
                return None
        return False

    def _claims(self, name: str) -> bool:
        return any(f.name == name for f in self._stack)

    def _text(self, text: str) -> None:
        if self._streaming:
            self._emit(json_string_fragment(text))
        elif self._stack:
            self._stack[-1].text.append(text)
        elif self._gap is not None:  # text between top-level elements: no argument holds it
            self._gap(text)

    def _open(self, name: str) -> None:
        if not self._stack:
            schema = self._props.get(name)
            streams = isinstance(schema, Mapping) and _string_only(schema)
            if self._pending is not None and (self._pending[0] != name or streams):
                self._write_pending()
            if streams:
                self._emit(f'{self._head()}{json.dumps(name, ensure_ascii=False)}: "')
                self._streaming = True
        self._stack.append(_Frame(name))

    def _close(self, name: str) -> None:
        """Close ``name`` and every element opened inside it that the model left open."""
        if self._streaming:
            self._stack.pop()
            self._streaming = False
            self._emit('"')
            return
        while self._stack:
            frame = self._stack.pop()
            node = frame.node()
            if self._stack:
                self._stack[-1].children.append((frame.name, node))
            elif self._pending is not None and self._pending[0] == frame.name:
                self._pending[1].append(node)
            else:
                self._write_pending()
                self._pending = (frame.name, [node])
            if frame.name == name:
                return

    def _end_all(self) -> None:
        if self._stack:
            self._close(self._stack[0].name)

    # ------------------------------------------------------------------ protocol
    def rest(self, text: str) -> str:
        """Text the reader left undecided when the output ended: a tag cut short (``P<da``),
        which is markup, never value text: dropped."""
        return ""

    def unclaimed(self) -> str | None:
        return None

    def close(self) -> None:
        """The call ends: close what is open, write what is held, finish the object."""
        if self._closed:
            return
        self._closed = True
        self._end_all()
        self._write_pending()
        self._emit("{}" if self._first else "}")

    # ------------------------------------------------------------------ writing
    def _write_pending(self) -> None:
        if self._pending is None:
            return
        name, nodes = self._pending
        self._pending = None
        schema = self._props.get(name)
        schema = schema if isinstance(schema, Mapping) else None
        if len(nodes) == 1:
            value = _convert(nodes[0], schema, self._item)
        else:
            items = schema.get("items") if schema is not None and _container(schema) == "array" else schema
            value = [
                _convert(node, items if isinstance(items, Mapping) else None, self._item) for node in nodes
            ]
        self._emit(
            f"{self._head()}{json.dumps(name, ensure_ascii=False)}: {json.dumps(value, ensure_ascii=False)}"
        )

    def _head(self) -> str:
        head = "{" if self._first else ", "
        self._first = False
        return head


def _string_only(schema: Mapping[str, Any]) -> bool:
    """A string argument that cannot be anything else (not null, no container, no other type):
    its text streams as a JSON string."""
    return schema_types(schema) == {"string"}


def _container(schema: Mapping[str, Any]) -> str | None:
    """``array`` or ``object`` when the schema allows that container (the first one it names)."""
    types = schema_types(schema)
    for kind in ("array", "object"):
        if kind in types:
            return kind
    if not types:
        if "items" in schema:
            return "array"
        if "properties" in schema or "additionalProperties" in schema:
            return "object"
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key, ()) or ():
            if isinstance(sub, Mapping) and (found := _container(sub)) is not None:
                return found
    return None


def _sub_schema(schema: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The first ``key`` (``items``, ``properties``…) of the schema or of its anyOf/oneOf arms."""
    if isinstance(schema.get(key), Mapping):
        return schema[key]
    for arm in (*(schema.get("anyOf", ()) or ()), *(schema.get("oneOf", ()) or ())):
        if isinstance(arm, Mapping) and isinstance(arm.get(key), Mapping):
            return arm[key]
    return None


def _convert(node: Node, schema: Mapping[str, Any] | None, item: str) -> Any:
    if isinstance(node, str):
        if schema is None:
            return node
        types = schema_types(schema)
        container = _container(schema)
        if container is not None and "string" not in types and not node.strip():
            return [] if container == "array" else {}
        if not types or "string" in types:
            return None if "null" in types and node.strip() in ("null", "None") else node
        return json.loads(typed_value(node, types))
    container = _container(schema) if schema is not None else None
    if container == "array" or (container is None and all(name in (item, MIXED_TEXT) for name, _ in node)):
        items = _sub_schema(schema, "items") if schema is not None else None
        return [_convert(child, items, item) for _, child in node]
    props = (_sub_schema(schema, "properties") or {}) if schema is not None else {}
    extra = schema.get("additionalProperties") if schema is not None else None
    out: dict[str, Any] = {}
    repeated: set[str] = set()
    for name, child in node:
        sub = props.get(name, extra)
        value = _convert(child, sub if isinstance(sub, Mapping) else None, item)
        if name not in out:
            out[name] = value
        elif name in repeated:
            out[name].append(value)
        else:
            out[name] = [out[name], value]
            repeated.add(name)
    return out
