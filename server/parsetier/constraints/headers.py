"""Formats whose output is a run of messages, each opened by a header (Harmony, gpt-oss).

There the answer is no free text that a call marker interrupts: every message starts with a
header that one capture state reads, and the state's rules route it to reasoning, to the answer
or to a call (``to=functions.NAME``). The parser accepts many spellings of a header, and a
regex cannot be run backwards into the one a model writes, so the format file says it: each
rule's ``write`` is the header the constraint writes for that kind of message, and the state's
``lead`` is what a header starts with after its opener (``assistant`` after ``<|start|>``; the
prompt wrote the first one). Each spelling is checked against the parser's own rules: the first
rule that matches it must be the rule that carries it, and read back the tool's name.

Everything else is walked: the terminals that end a header, the way from a reasoning body back
to the next header, and the closers of a call. A call's closer that is one of the model's stop
tokens (Harmony's ``<|call|>``) ends the turn, so such a format writes at most one call per
message whatever ``parallel_tool_calls`` says (docs/constrained-decoding.md, "Harmony").
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from parsetier.constraints.ir import Alt, Call, Json, Lit, Node, Opt, Root, Seq, Text
from parsetier.constraints.request import ConstraintRequest, InvalidTool, arguments_schema, unwritable
from parsetier.constraints.shape import MAX_WALK, Underivable
from parsetier.engine.grammar import SENTINEL_RE, BoundGrammar, Grammar, Rule, State


@dataclass(frozen=True, slots=True)
class HeaderShape:
    """What a header format's constraint is made of, read off its grammar."""

    header: State
    ends: tuple[str, ...]
    """The terminal that ends a header and enters the message body (Harmony's ``<|message|>``)."""
    reasoning: Rule | None
    answer: Rule | None
    call: Rule | None
    again: tuple[tuple[str, ...], ...]
    """Terminal paths from the reasoning body to the next header (``<|end|><|start|>``)."""
    call_ends: tuple[str, ...]
    """Terminals that end a call and the turn: the call body's closers that are stop tokens."""


def is_header_format(g: Grammar) -> bool:
    """Whether the output starts in a capture state whose rules say how to write headers."""
    state = g.states[g.initial]
    return state.kind == "capture" and any(r.write for r in state.rules)


def header_reasoning(g: Grammar) -> bool:
    """Whether a header format can write a reasoning message (Harmony's analysis channel)."""
    return is_header_format(g) and any(
        r.write and g.states[r.next].kind == "reasoning" for r in g.states[g.initial].rules
    )


def header_shape(g: Grammar, stop_terms: frozenset[str]) -> HeaderShape:
    header = g.states[g.initial]
    ends = tuple(t for t, tr in header.on.items() if tr.next != header.name)
    if len(ends) != 1:
        raise Underivable(f"format {g.name!r}: one terminal must end a header in state {header.name!r}")
    routes: dict[str, Rule] = {}
    for rule in header.rules:
        if not rule.write:
            continue
        kind = g.states[rule.next].kind
        role = {"reasoning": "reasoning", "content": "answer"}.get(kind)
        if "call_begin" in rule.actions:
            role = "call"
        if role is None:
            raise Underivable(f"format {g.name!r}: a written header leads to a {kind!r} state")
        routes.setdefault(role, rule)
    call = routes.get("call")
    call_ends: tuple[str, ...] = ()
    if call is not None:
        body = g.states[call.next]
        if body.kind != "json" or body.dialect != "json":
            raise Underivable(
                f"format {g.name!r}: calls after a header need JSON arguments, not {body.kind!r}"
            )
        call_ends = _turn_ends(g, body, stop_terms)
    again: tuple[tuple[str, ...], ...] = ()
    if "reasoning" in routes:
        paths = list(_paths_to(g, g.states[routes["reasoning"].next], header.name, stop_terms, 0))
        longest = max((len(p) for p in paths), default=0)
        again = tuple(dict.fromkeys(p for p in paths if len(p) == longest))
    return HeaderShape(header, ends, routes.get("reasoning"), routes.get("answer"), call, again, call_ends)


def _turn_ends(g: Grammar, body: State, stop_terms: frozenset[str]) -> tuple[str, ...]:
    """The call's closers that are stop tokens, directly or after the JSON completes (``done``)."""
    out = [t for t, tr in body.on.items() if "call_end" in tr.actions and t in stop_terms]
    if body.done is not None and "call_end" in body.done.actions:
        out += [t for t, tr in g.states[body.done.next].on.items() if t in stop_terms and not tr.actions]
    if not out:
        raise Underivable(
            f"format {g.name!r}: no stop token ends a call in state {body.name!r} (the model's stop ids)"
        )
    return tuple(dict.fromkeys(out))


def _paths_to(
    g: Grammar, state: State, target: str, stop_terms: frozenset[str], depth: int
) -> Iterator[tuple[str, ...]]:
    """Terminal paths (no stop tokens, no actions) from ``state`` through skip states to ``target``."""
    for term, tr in state.on.items():
        if tr.actions or term in stop_terms:
            continue
        if tr.next == target:
            yield (term,)
        elif g.states[tr.next].kind == "skip" and depth < MAX_WALK and tr.next != state.name:
            for tail in _paths_to(g, g.states[tr.next], target, stop_terms, depth + 1):
                yield (term, *tail)


def derive_headers(bound: BoundGrammar, request: ConstraintRequest) -> Root:
    """The constraint for a header format: an optional or required reasoning message, then the
    answer or one call (``auto``), the answer (``none``), or one call (``required``, named)."""
    g = bound.grammar
    id_of_sentinel = {s: tid for tid, s in bound.sentinel_of_id.items()}
    stop_terms = frozenset(
        t for t, p in bound.patterns.items() if len(p) == 1 and id_of_sentinel.get(p) in request.stop_ids
    )
    shape = header_shape(g, stop_terms)
    w = _Writer(bound, shape, id_of_sentinel)

    prefix: tuple[Node, ...] = ()
    if request.reasoning != "off":
        if shape.reasoning is None or not shape.again:
            raise Underivable(f"format {g.name!r} has no reasoning message the constraint can write")
        rest = (Text(), _alt([Seq(tuple(w.term(t) for t in path)) for path in shape.again]), *w.lead())
        if request.reasoning == "inside":
            if not any(
                g.states[s].kind == "reasoning" for s in (*g.prompt.values(), g.thinking_on or g.initial)
            ):
                raise Underivable(f"format {g.name!r}: no prompt leaves the output inside reasoning")
            prefix = rest
        else:
            block = Seq((w.header(shape.reasoning), *rest))
            prefix = (Opt(block),) if request.reasoning == "optional" else (block,)

    tools = request.callable_tools
    answer = Seq((w.header(shape.answer), Text())) if shape.answer is not None else None
    if request.mode == "none" or not tools:
        if answer is None:
            raise Underivable(f"format {g.name!r} has no answer message the constraint can write")
        return Root(prefix, (), body=answer)
    if shape.call is None:
        raise Underivable(f"format {g.name!r}: no header rule writes a call")
    calls = []
    end = tuple((w.term(t),) for t in shape.call_ends)
    for tool in tools:
        name = tool.name
        if unwritable(name) or "{" in name:
            raise InvalidTool(f"format {g.name!r} cannot write the tool name {name!r}")
        calls.append(Call((w.header(shape.call, name),), Json(arguments_schema(tool, tool.strict)), end))
    forced = request.mode in ("required", "named")
    choices: list[Node] = list(calls) if forced or answer is None else [answer, *calls]
    return Root(prefix, tuple(calls), at_least_one=forced, stop_after_first=True, body=_alt(choices))


def _alt(nodes: Sequence[Node]) -> Node:
    return nodes[0] if len(nodes) == 1 else Alt(tuple(nodes))


class _Writer:
    """Literals of a header format: terminals, headers (checked against the rules), the lead."""

    def __init__(self, bound: BoundGrammar, shape: HeaderShape, id_of_sentinel: dict[str, int]) -> None:
        self.bound = bound
        self.shape = shape
        self.id_of_sentinel = id_of_sentinel
        # Marker texts that are one added token, longest first, for splitting written headers.
        markers = [
            (bound.grammar.terminals[t], id_of_sentinel[p])
            for t, p in bound.patterns.items()
            if len(p) == 1 and p in id_of_sentinel
        ]
        self.markers = sorted(markers, key=lambda m: -len(m[0]))

    def term(self, name: str) -> Lit:
        pattern = self.bound.patterns[name]
        if len(pattern) == 1 and SENTINEL_RE.fullmatch(pattern):
            return Lit(((self.bound.text_of_sentinel[pattern], self.id_of_sentinel[pattern]),))
        return self.text(self.bound.grammar.terminals[name])

    def text(self, text: str) -> Lit:
        pieces: list[tuple[str, int | None]] = []
        i = plain = 0
        while i < len(text):
            hit = next((m for m in self.markers if text.startswith(m[0], i)), None)
            if hit is None:
                i += 1
                continue
            if i > plain:
                pieces.append((text[plain:i], None))
            pieces.append(hit)
            i = plain = i + len(hit[0])
        if plain < len(text):
            pieces.append((text[plain:], None))
        return Lit(tuple(pieces))

    def lead(self) -> tuple[Lit, ...]:
        return (self.text(self.shape.header.lead),) if self.shape.header.lead else ()

    def header(self, rule: Rule | None, name: str | None = None) -> Lit:
        """The rule's written header (with ``name``) and the terminal ending it, after checking
        that the parser's rules read it back as this rule, with and without the lead."""
        assert rule is not None and rule.write is not None
        g = self.bound.grammar
        written = rule.write.replace("{name}", name) if name is not None else rule.write
        for text in (written, self.shape.header.lead + written):
            match = next(((r, m) for r in self.shape.header.rules if (m := r.pattern.search(text))), None)
            if match is None or match[0] is not rule:
                if name is not None:
                    raise InvalidTool(f"format {g.name!r} cannot write the tool name {name!r} in a header")
                raise Underivable(f"format {g.name!r}: its rules do not read the header {written!r} back")
            if name is not None and (match[1].groupdict().get("name") or "").strip() != name:
                raise InvalidTool(f"format {g.name!r} cannot write the tool name {name!r} in a header")
        return Lit(self.text(written).pieces + self.term(self.shape.ends[0]).pieces)
