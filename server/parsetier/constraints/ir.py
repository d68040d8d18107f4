"""The constraint's own small language, and its two renderings.

A derived constraint is built once as these values and then written out twice: as an xgrammar
structural tag (JSON) and as an llguidance Lark grammar. Keeping one tree for both is what makes
them equivalent: neither renderer decides anything about the format.

- ``Lit``: a marker or fixed text; ``pieces`` says which parts are one added token (Lark writes
  those as ``<[id]>``, so look-alike text never counts as the marker).
- ``Ws``: optional whitespace (where the parser skips it).
- ``Text``: free text that runs until what follows it; ``excludes`` are texts it may not hold.
- ``Regex``, ``Json`` (a JSON Schema), ``Seq``, ``Alt``, ``Opt``, ``Star``.
- ``Call``: one tool call as a tag: ``begin`` literals, ``content``, ``end`` alternatives.
- ``Root``: the message: ``prefix`` (reasoning), calls triggered from free text, and the flags
  of xgrammar's ``triggered_tags`` (``at_least_one``, ``stop_after_first``); or, where the
  format has no free text to trigger from (Harmony's messages each open with a header), a
  ``body`` that spells the rest of the message itself, its calls as ``Call`` nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

WS_PATTERN = r"[ \t\r\n]*"


@dataclass(frozen=True, slots=True)
class Lit:
    pieces: tuple[tuple[str, int | None], ...]
    """(text, token id or None) in order; a piece with an id is that one added token."""

    @classmethod
    def plain(cls, text: str) -> Lit:
        """Ordinary text: one piece, no added token in it."""
        return cls(((text, None),))

    @property
    def text(self) -> str:
        return "".join(t for t, _ in self.pieces)

    @property
    def is_text(self) -> bool:
        """Whether the literal can be spelled by ordinary text tokens (no added token in it)."""
        return all(tid is None for _, tid in self.pieces)


@dataclass(frozen=True, slots=True)
class Ws:
    pass


@dataclass(frozen=True, slots=True)
class Text:
    excludes: tuple[str, ...] = ()

    @classmethod
    def without(cls, marker: Lit) -> Text:
        """Text in which ``marker`` does not occur: one that is added tokens cannot be spelled
        by text (look-alikes stay text to the reader); one of ordinary text is excluded."""
        return cls((marker.text,) if marker.is_text else ())


@dataclass(frozen=True, slots=True)
class Regex:
    pattern: str


@dataclass(frozen=True, slots=True)
class Json:
    schema: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Seq:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Alt:
    items: tuple[Node, ...]


@dataclass(frozen=True, slots=True)
class Opt:
    item: Node


@dataclass(frozen=True, slots=True)
class Star:
    item: Node
    at_least_one: bool = False


@dataclass(frozen=True, slots=True)
class Call:
    begin: tuple[Lit, ...]
    content: Node
    end: tuple[tuple[Lit, ...], ...]
    """Alternative closing literal sequences."""

    @property
    def trigger(self) -> str:
        return self.begin[0].text


Node = Lit | Ws | Text | Regex | Json | Seq | Alt | Opt | Star | Call


@dataclass(frozen=True, slots=True)
class Root:
    prefix: tuple[Node, ...]
    calls: tuple[Call, ...]
    at_least_one: bool = False
    stop_after_first: bool = False
    text_excludes: tuple[str, ...] = field(default=())
    body: Node | None = None
    """The message after ``prefix`` when it is not free text with triggered ``calls`` (which then
    only name the calls ``body`` holds, for their triggers)."""

    @property
    def triggers(self) -> list[str]:
        """The calls' first literals, without one that another of them starts (Gemma's
        ``<|tool_call>call:`` beside ``<|tool_call>``): xgrammar wants each tag under one trigger."""
        texts = list(dict.fromkeys(c.trigger for c in self.calls))
        return [t for t in texts if not any(o != t and t.startswith(o) for o in texts)]


# ---------------------------------------------------------------------------------------------
# xgrammar structural tag
# ---------------------------------------------------------------------------------------------


def to_structural_tag(root: Root) -> dict[str, Any]:
    """``{"type": "structural_tag", "format": …}`` in xgrammar's documented format."""
    if root.body is not None:
        calls = _format(root.body)
    elif root.calls:
        triggers = root.triggers
        calls: dict[str, Any] = {
            "type": "triggered_tags",
            "triggers": triggers,
            "tags": [_tag(c) for c in root.calls],
            "at_least_one": root.at_least_one,
            "stop_after_first": root.stop_after_first,
        }
    else:
        calls = {"type": "any_text", "excludes": list(root.text_excludes)}
    elements = [_format(n) for n in root.prefix] + [calls]
    fmt = elements[0] if len(elements) == 1 else {"type": "sequence", "elements": elements}
    return {"type": "structural_tag", "format": fmt}


def _tag(call: Call) -> dict[str, Any]:
    ends = ["".join(lit.text for lit in alt) for alt in call.end]
    return {
        "type": "tag",
        "begin": "".join(lit.text for lit in call.begin),
        "content": _format(call.content),
        "end": ends[0] if len(ends) == 1 else ends,
    }


def _format(node: Node) -> dict[str, Any]:
    if isinstance(node, Lit):
        return {"type": "const_string", "value": node.text}
    if isinstance(node, Ws):
        return {"type": "regex", "pattern": WS_PATTERN}
    if isinstance(node, Text):
        return {"type": "any_text", "excludes": list(node.excludes)}
    if isinstance(node, Regex):
        return {"type": "regex", "pattern": node.pattern}
    if isinstance(node, Json):
        return {"type": "json_schema", "json_schema": node.schema}
    if isinstance(node, Seq):
        items = _flat(node.items)
        if not items:
            return {"type": "const_string", "value": ""}
        if len(items) == 1:
            return _format(items[0])
        return {"type": "sequence", "elements": [_format(n) for n in items]}
    if isinstance(node, Alt):
        return {"type": "or", "elements": [_format(n) for n in node.items]}
    if isinstance(node, Opt):
        return {"type": "optional", "content": _format(node.item)}
    if isinstance(node, Star):
        return {"type": "plus" if node.at_least_one else "star", "content": _format(node.item)}
    if isinstance(node, Call):
        return _tag(node)
    raise TypeError(node)


def _flat(items: tuple[Node, ...]) -> list[Node]:
    """A sequence's items with nested sequences spliced in (the same language, easier to read)."""
    out: list[Node] = []
    for n in items:
        out.extend(_flat(n.items) if isinstance(n, Seq) else (n,))
    return out


# ---------------------------------------------------------------------------------------------
# llguidance Lark
# ---------------------------------------------------------------------------------------------


class _Lark:
    """Writes rules; a text run that an ordinary-text literal ends becomes one lazy rule (the run
    stops at the first occurrence of the literal), as llguidance's lexer needs."""

    def __init__(self) -> None:
        self.rules: list[str] = []
        self.lexemes: dict[tuple[str, ...], str] = {}
        self.count = 0

    def rule(self, body: str, lazy: bool = False) -> str:
        self.count += 1
        name = f"r{self.count}"
        self.rules.append(f"{name}{'[lazy]' if lazy else ''}: {body}")
        return name

    def seq(self, items: tuple[Node, ...]) -> str:
        out: list[str] = []
        i = 0
        while i < len(items):
            node = items[i]
            nxt = items[i + 1] if i + 1 < len(items) else None
            if isinstance(node, Text) and isinstance(nxt, Lit) and nxt.is_text:
                out.append(self.rule(f"{self.text(node)} {self.lit(nxt)}", lazy=True))
                i += 2
                continue
            out.append(self.node(node))
            i += 1
        return " ".join(out) if out else '""'

    def node(self, node: Node) -> str:
        if isinstance(node, Lit):
            return self.lit(node)
        if isinstance(node, Ws):
            return "WS"
        if isinstance(node, Text):
            return self.text(node)
        if isinstance(node, Regex):
            return "/" + node.pattern.replace("/", "\\/") + "/"
        if isinstance(node, Json):
            # The parser reads every JSON string escape, so the grammar allows them too.
            schema = {**node.schema, "x-guidance": {"json_allow_general_unicode_escapes": True}}
            return self.rule("%json " + json.dumps(schema, ensure_ascii=False))
        if isinstance(node, Seq):
            return self.rule(self.seq(node.items))
        if isinstance(node, Alt):
            return self.rule(" | ".join(self.seq((n,)) for n in node.items))
        if isinstance(node, Opt):
            return f"({self.seq((node.item,))})?"
        if isinstance(node, Star):
            return f"({self.seq((node.item,))}){'+' if node.at_least_one else '*'}"
        if isinstance(node, Call):
            return self.rule(_call(self, node))
        raise TypeError(node)

    def text(self, node: Text) -> str:
        if not node.excludes:
            return "TEXT"
        if node.excludes not in self.lexemes:
            name = f"TEXT{len(self.lexemes) + 1}"
            banned = "|".join(_regex_escape(x) for x in node.excludes)
            self.rules.append(f"{name}: /(.|\\n)*/ & ~/(.|\\n)*({banned})(.|\\n)*/")
            self.lexemes[node.excludes] = name
        return self.lexemes[node.excludes]

    @staticmethod
    def lit(node: Lit) -> str:
        parts = [
            f"<[{tid}]>" if tid is not None else json.dumps(text, ensure_ascii=False)
            for text, tid in node.pieces
        ]
        return " ".join(parts)


_CONTROL = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _regex_escape(text: str) -> str:
    return "".join(_CONTROL.get(c) or ("\\" + c if c in r".^$*+?()[]{}|\/&~" else c) for c in text)


def to_lark(root: Root) -> str:
    """An llguidance Lark grammar accepting the same messages as ``to_structural_tag(root)``."""
    w = _Lark()
    prefix = w.seq(root.prefix) if root.prefix else ""
    if root.body is not None:
        body = w.seq((root.body,))
    elif root.calls:
        # A call alone (forced at the start) and a call after free text, as xgrammar's
        # triggered_tags has them: free text runs until a call's first literal.
        def alone() -> str:
            return w.rule(" | ".join(_call(w, c) for c in root.calls))

        def after() -> str:
            alts = (w.seq((Text(), c.begin[0])) + " " + _call(w, c, skip_first=True) for c in root.calls)
            return w.rule(" | ".join(alts))

        if root.at_least_one and root.stop_after_first:
            body = f"WS {alone()}"
        elif root.at_least_one:
            body = f"WS {alone()} {after()}* TEXT"
        elif root.stop_after_first:
            body = f"(TEXT | {after()})"
        else:
            body = f"{after()}* TEXT"
    else:
        body = w.text(Text(root.text_excludes))
    start = " ".join(part for part in (prefix, body) if part)
    head = ["%llguidance {}", "", f"start: {start}"]
    tail = ["TEXT: /(.|\\n)*/", f"WS: /{WS_PATTERN}/"]
    return "\n".join([*head, *w.rules, *tail]) + "\n"


def _call(w: _Lark, call: Call, skip_first: bool = False) -> str:
    begin = call.begin[1:] if skip_first else call.begin
    return (w.seq((*begin, call.content)) + " " + _end(w, call)).strip()


def _end(w: _Lark, call: Call) -> str:
    alts = [" ".join(w.lit(lit) for lit in alt) for alt in call.end]
    return alts[0] if len(alts) == 1 else "(" + " | ".join(alts) + ")"
