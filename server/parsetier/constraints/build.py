"""From a bound format and a request's tool options to one constraint (``ir.Root``).

The semantics follow OpenAI's tool options: ``auto`` free text with triggered calls;
``required`` at least one call; a named function exactly one call of it; ``parallel_tool_calls``
false stops after the first call; ``none`` no call markup at all. Strict tools have their schema
enforced; other tools take any JSON object. With thinking on, the message starts with a
reasoning block (or, when the prompt already opened it, with the rest of one and its closer).

Policies (docs/constrained-decoding.md): the constraint writes the fullest spelling of each call
(every wrapper opened and closed), parameters in schema order, and only whitespace where the
parser skips text; string parameter values may not contain their own closer.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from parsetier.constraints.elements import element_arguments
from parsetier.constraints.headers import derive_headers, is_header_format
from parsetier.constraints.ir import Alt, Call, Json, Lit, Node, Opt, Regex, Root, Seq, Star, Text, Ws
from parsetier.constraints.notation import notation_arguments, python_call
from parsetier.constraints.request import MODES, ConstraintRequest, InvalidTool, arguments_schema, unwritable
from parsetier.constraints.schemas import check_tools
from parsetier.constraints.shape import (
    CallShape,
    Encoding,
    ReasoningShape,
    Underivable,
    call_shape,
    fill_rule,
    reasoning_shape,
)
from parsetier.engine.grammar import SENTINEL_RE, BoundGrammar
from parsetier.engine.machine import _xml_unescape
from parsetier.messages import Tool

__all__ = ["ConstraintRequest", "InvalidTool", "derive"]


def derive(bound: BoundGrammar, request: ConstraintRequest) -> Root:
    """The constraint for ``request`` on ``bound``'s format; ``Underivable`` or ``InvalidTool``."""
    g = bound.grammar
    if request.mode not in MODES:
        raise ValueError(f"unknown tool_choice mode {request.mode!r}")
    tools = request.callable_tools
    if request.mode == "named" and not tools:
        raise InvalidTool(f"tool_choice names {request.function_name!r}, which is not among the tools")
    if request.mode in ("required", "named") and not request.tools:
        raise InvalidTool(f"tool_choice {request.mode!r} needs at least one tool")
    if request.mode != "none":
        check_tools(tools)
    if is_header_format(g):
        return derive_headers(bound, request)
    lit = _Literals(bound)
    prefix = _reasoning_prefix(lit, reasoning_shape(g), request.reasoning, g.name)
    if request.mode == "none" or not tools:
        excludes = ()
        if g.has_tool_calls:
            try:
                excludes = tuple(dict.fromkeys(lit.term(p[0]).text for p in call_shape(g).openers))
            except Underivable:
                excludes = ()
        return Root(prefix, (), text_excludes=excludes)
    shape = call_shape(g)
    single = request.mode == "named" or not request.parallel_tool_calls
    return Root(
        prefix,
        _tags(lit, shape, tools, single, g),
        at_least_one=request.mode in ("required", "named"),
        stop_after_first=single or shape.ends_message or shape.list_form,
    )


class _Literals:
    """Terminal names → ``Lit`` values, split where added tokens stand (so Lark names them by id)."""

    def __init__(self, bound: BoundGrammar) -> None:
        self.bound = bound
        self.id_of_sentinel = {s: tid for tid, s in bound.sentinel_of_id.items()}

    def term(self, name: str) -> Lit:
        pattern = self.bound.patterns[name]
        pieces: list[tuple[str, int | None]] = []
        last = 0
        for m in SENTINEL_RE.finditer(pattern):
            if m.start() > last:
                pieces.append((pattern[last : m.start()], None))
            s = m.group(0)
            pieces.append((self.bound.text_of_sentinel[s], self.id_of_sentinel[s]))
            last = m.end()
        if last < len(pattern):
            pieces.append((pattern[last:], None))
        return Lit(tuple(pieces))

    def path(self, names: Sequence[str]) -> list[Node]:
        """Literals of a terminal path, with optional whitespace between them."""
        out: list[Node] = []
        for i, name in enumerate(names):
            if i:
                out.append(Ws())
            out.append(self.term(name))
        return out


def _reasoning_prefix(lit: _Literals, shape: ReasoningShape | None, mode: str, fmt: str) -> tuple[Node, ...]:
    if mode == "off" or shape is None:
        if mode != "off":
            raise Underivable(f"format {fmt!r} has no reasoning block")
        return ()
    close = lit.path(shape.close_path or (shape.close,))
    if mode == "inside":
        return (Text(), *close, Ws())
    if shape.open is None:
        raise Underivable(f"format {fmt!r}: only the prompt opens reasoning (use reasoning 'inside')")
    block = (lit.term(shape.open), Text(), *close, Ws())
    return (Opt(Seq(block)),) if mode == "optional" else block


def _calls(
    lit: _Literals, shape: CallShape, tool: Tool, strict: bool, g: Any
) -> list[tuple[list[Node], Any]]:
    """One call of ``tool`` per opener spelling: its nodes from the opener on, and its closers."""
    schema = arguments_schema(tool, strict)
    out = []
    for opener in shape.openers:
        items: list[Node] = lit.path(opener)
        if shape.style == "envelope":
            items += [Ws(), Json(_envelope(shape, tool.name, schema)), Ws()]
            ends = shape.closers
        else:
            items.append(_name(shape.name, tool.name, g.name))
            if shape.name.spaced:  # the parser strips a captured name
                items.append(Ws())
            if shape.style == "elements":
                state = g.states[shape.end_state]
                declared = schema if strict else (tool.parameters or {})
                args = element_arguments(lit.term("tag"), state.item, declared, strict, g.name)
                items += [lit.term(shape.name.end[0]), Ws(), args, Ws()]
                ends = shape.closers
            elif shape.style == "notation":
                value = notation_arguments(lit.term("quote"), schema if strict else None, g.name)
                end = [] if shape.name.kept else [lit.term(shape.name.end[0])]
                items += [*end, value, Ws()]
                ends = shape.closers
            elif shape.style == "json":
                items += [
                    lit.term(shape.name.end[0]),
                    *_lits_after(lit, shape.after_name),
                    Ws(),
                    Json(schema),
                    Ws(),
                ]
                ends = shape.closers
            else:
                params = _params(lit, shape, tool, schema, strict, g)
                shared = shape.param is not None and shape.param.open == (shape.name.end,)
                if not shared:
                    items += [lit.term(shape.name.end[0]), Ws()]
                if shared and not _has_params(schema, strict) and shape.empty_closers:
                    ends = shape.empty_closers
                else:
                    items += [params]
                    ends = shape.closers
        out.append((items, ends))
    return out


def _envelope(shape: CallShape, name: str, schema: Mapping[str, Any]) -> dict[str, Any]:
    """One call object: the id member (if the format writes one), the name, the arguments; or,
    keyed, the arguments under the name."""
    if shape.keyed:
        return {
            "type": "object",
            "properties": {name: dict(schema)},
            "required": [name],
            "additionalProperties": False,
        }
    props: dict[str, Any] = {shape.id_key: {"type": "string", "pattern": "^[0-9]+$"}} if shape.id_key else {}
    props |= {shape.name_key: {"const": name}, shape.arguments_key: dict(schema)}
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _tags(lit: _Literals, shape: CallShape, tools: Sequence[Tool], single: bool, g: Any) -> tuple[Call, ...]:
    """The triggered tags: one per call spelling, or, where calls share a block, one per block
    spelling holding one call (``single``) or several."""
    if shape.list_form:  # one block: a list of calls (one with ``single``)
        listed: Node
        if shape.pythonic:
            pycalls = [
                python_call(t.name, arguments_schema(t, True) if t.strict else None, g.name) for t in tools
            ]
            one = pycalls[0] if len(pycalls) == 1 else Alt(tuple(pycalls))
            comma = Lit.plain("\n" if shape.separate else ", ")
            more: tuple[Node, ...] = () if single else (Star(Seq((comma, one))),)
            brackets = ((), ()) if shape.separate else ((Lit.plain("["),), (Lit.plain("]"),))
            listed = Seq((*brackets[0], one, *more, *brackets[1]))
        else:
            objects = [_envelope(shape, t.name, arguments_schema(t, t.strict)) for t in tools]
            items: dict[str, Any] = objects[0] if len(objects) == 1 else {"anyOf": objects}
            schema: dict[str, Any] = {"type": "array", "items": items, "minItems": 1}
            if single:
                schema["maxItems"] = 1
            listed = Json(schema)
        out = []
        for opener in shape.openers:
            first, *rest = lit.path(opener)
            content, end = _split_end(lit, [*rest, Ws(), listed, Ws()], shape.closers)
            out.append(Call((first,), Seq(tuple(content)), end))
        return tuple(out)
    calls = [c for tool in tools for c in _calls(lit, shape, tool, tool.strict, g)]
    if not shape.group_open:
        out = []
        for items, ends in calls:
            content, end = _split_end(lit, items[1:], ends)
            out.append(Call((items[0],), Seq(tuple(content)), end))
        return tuple(out)
    inner = [Seq(tuple(_closed(lit, items, ends))) for items, ends in calls]
    one: Node = inner[0] if len(inner) == 1 else Alt(tuple(inner))
    body: list[Node] = [Ws(), one] if single else [Ws(), one, Star(Seq((Ws(), one)))]
    out = []
    for block in shape.group_open:
        first, *rest = lit.path(block)
        content, end = _split_end(lit, [*rest, *body, Ws()], shape.group_close)
        out.append(Call((first,), Seq(tuple(content)), end))
    return tuple(out)


def _closed(lit: _Literals, items: list[Node], ends: Sequence[Sequence[str]]) -> list[Node]:
    """A call's nodes followed by its closer (alternatives when the format has several)."""
    alts = tuple(Seq(tuple(lit.path(e))) for e in ends if e)
    if not alts:
        return items
    return [*items, alts[0] if len(alts) == 1 else Alt(alts)]


def _lits_after(lit: _Literals, names: Sequence[str]) -> list[Node]:
    return [x for name in names for x in (Ws(), lit.term(name))]


def _split_end(
    lit: _Literals, items: list[Node], ends: Sequence[Sequence[str]]
) -> tuple[list[Node], tuple[tuple[Lit, ...], ...]]:
    """Closer paths: all but their last literal go into the content (as alternatives), the last
    literal is the tag's end, so that xgrammar's ``end`` stays a plain string."""
    heads = {tuple(p[:-1]) for p in ends if p}
    if any(heads):
        alts = tuple(Seq((*lit.path(h), Ws())) for h in sorted(heads))
        items = [*items, alts[0] if len(alts) == 1 else Alt(alts)]
    tails = tuple(dict.fromkeys((lit.term(p[-1]),) for p in ends if p))
    if not tails:  # the call ends with its JSON (Llama's bare envelopes)
        tails = ((Lit.plain(""),),)
    return items, tails


def _name(enc: Encoding | None, name: str, fmt: str) -> Node:
    assert enc is not None
    bad = unwritable(name)
    if enc.rule is not None and enc.rule.write:
        if bad:
            raise InvalidTool(f"format {fmt!r} cannot write the tool name {name!r}")
        return _written(enc, {"name": name}, "name", fmt)
    if enc.rule is not None:
        m = enc.rule.pattern.match(name)
        if bad or not m or m.groupdict().get("name") != name:
            raise InvalidTool(f"format {fmt!r} cannot write the tool name {name!r}")
        return Regex(fill_rule(enc.rule, {"name": name}))
    if bad or any(c in name for c in '<>"\n'):
        raise InvalidTool(f"format {fmt!r} cannot write the tool name {name!r}")
    return Lit.plain(name)


def _has_params(schema: Mapping[str, Any], strict: bool) -> bool:
    return not strict or bool(schema.get("properties"))


def _params(
    lit: _Literals, shape: CallShape, tool: Tool, schema: Mapping[str, Any], strict: bool, g: Any
) -> Node:
    p = shape.param
    assert p is not None
    closers = tuple(dict.fromkeys(lit.term(c).text for c in (*p.close, *p.value_ends)))
    close = lit.term(p.close[0])
    opens = [lit.path(o) for o in p.open]
    key_end = lit.term(p.key.end[0])
    # Wrapper states between the key and the value (GLM's "</arg_key>\n<arg_value>") skip whitespace.
    value_open = [x for name in p.value_open for x in (Ws(), lit.term(name))]
    newline = g.value_trim == "newline"

    def block(key_node: Node, value: Node) -> Node:
        open_alt: Node = Seq(tuple(opens[0])) if len(opens) == 1 else Alt(tuple(Seq(tuple(o)) for o in opens))
        return Seq((open_alt, key_node, key_end, *value_open, value, close, Ws()))

    if not strict:
        key = _key(p.key, None, None, g.name)
        return Star(block(key, Text(closers)))
    props = schema.get("properties") or {}
    required = set(schema.get("required") or ())
    items: list[Node] = []
    for key_name, sub in props.items():
        sub = sub if isinstance(sub, Mapping) else {}
        value: Node
        if _is_string(sub):
            value = Text(closers)
        else:
            value = (
                Seq((Opt(Lit.plain("\n")), Json(dict(sub)), Opt(Lit.plain("\n"))))
                if newline
                else Json(dict(sub))
            )
        node = block(_key(p.key, key_name, sub, g.name), value)
        items.append(node if key_name in required else Opt(node))
    return Seq(tuple(items))


def _is_string(schema: Mapping[str, Any]) -> bool:
    t = schema.get("type")
    if t == "string" or (isinstance(t, list) and t == ["string"]):
        return (
            "enum" not in schema
            and "const" not in schema
            and "pattern" not in schema
            and "format" not in schema
        )
    return False


_ANY_KEY = Regex(r"[A-Za-z0-9_.\-]+")
"""A non-strict tool's parameter key where no rule spells one."""


def _key(enc: Encoding, key: str | None, schema: Mapping[str, Any] | None, fmt: str) -> Node:
    if enc.rule is not None and enc.rule.write:
        if key is not None and unwritable(key):
            raise InvalidTool(f"format {fmt!r} cannot write the parameter key {key!r}")
        kind = "string" if schema is None or _is_string(schema) else schema.get("type")
        values: dict[str, str | Node] = {
            "key": key if key is not None else _ANY_KEY,
            "type": kind if isinstance(kind, str) else "json",
        }
        return _written(enc, values, "key" if key is not None else "", fmt)
    if key is None:
        if enc.rule is None:
            return _ANY_KEY
        return Regex(fill_rule(enc.rule, {}))
    if unwritable(key) or re.search(r"[<>\"\n]", key):
        raise InvalidTool(f"format {fmt!r} cannot write the parameter key {key!r}")
    if enc.rule is None:
        return Lit.plain(key)
    values = {"key": key}
    if "string" in enc.rule.pattern.groupindex:
        values["string"] = "true" if schema is not None and _is_string(schema) else "false"
    return Regex(fill_rule(enc.rule, values))


_PLACEHOLDER = re.compile(r"\{(\w+)\}")
_XML_ESCAPES = {"&": "&amp;", '"': "&quot;", "<": "&lt;", ">": "&gt;"}


def _written(enc: Encoding, values: Mapping[str, str | Node], group: str, fmt: str) -> Node:
    """A capture rule's ``write`` with its placeholders filled: ``values`` (XML-escaped where
    the capture decodes XML), ``{index}`` a call number. The filled text is run through the rule,
    which must read ``values[group]`` back."""
    rule = enc.rule
    assert rule is not None and rule.write is not None
    nodes: list[Node] = []
    sample: list[str] = []
    last = 0
    for m in _PLACEHOLDER.finditer(rule.write):
        if m.start() > last:
            nodes.append(Lit.plain(rule.write[last : m.start()]))
            sample.append(rule.write[last : m.start()])
        last = m.end()
        name = m.group(1)
        value = values.get(name)
        if name == "index":
            nodes.append(Regex("[1-9][0-9]*"))
            sample.append("1")
        elif isinstance(value, str):
            text = "".join(_XML_ESCAPES.get(c, c) for c in value) if enc.xml else value
            nodes.append(Lit.plain(text))
            sample.append(text)
        elif value is not None:
            nodes.append(value)
            sample.append("x")
        else:
            raise Underivable(f"format {fmt!r}: a rule's write names {{{name}}}, which it cannot fill")
    if last < len(rule.write):
        nodes.append(Lit.plain(rule.write[last:]))
        sample.append(rule.write[last:])
    found = rule.pattern.search("".join(sample))
    if group:
        want = values[group]
        got = found.groupdict().get(group) if found else None
        if got is None or (_xml_unescape(got) if enc.xml else got).strip() != want:
            raise InvalidTool(f"format {fmt!r} cannot write the {group} {want!r}")
    elif found is None:
        raise Underivable(f"format {fmt!r}: its rule does not read its own write {rule.write!r}")
    return Seq(tuple(nodes))
