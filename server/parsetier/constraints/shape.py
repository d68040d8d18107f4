"""A format's tool-call shape, read off its grammar: the walk that every constraint starts from.

A format file is a state machine over terminals. Constrained decoding needs the same facts in
another arrangement: which terminals open a call, how the name is written, how the arguments are
written (one JSON value, a JSON envelope carrying the name, or one tagged block per parameter),
and which terminals close the call again. ``call_shape`` finds them by walking the states from the
answer (``content``) states, following the actions the grammar already declares (``call_begin``,
``param_begin``, ``param_end``, ``call_end``). Nothing here is written per family: a user's format
file gets a shape from the same walk, or an ``Underivable`` that says which part of the grammar
the walk could not read.

Where the grammar offers several spellings (DSML's ``function_calls`` / ``tool_calls`` wrappers,
spaced and unspaced tags), every spelling is kept as an alternative: the parser reads all of
them, so the constraint allows all of them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace

from parsetier.engine.grammar import Grammar, Rule, State
from parsetier.status import Code, StatusError

MAX_WALK = 4
"""How many skip/wrapper states a path may cross between an answer state and a call's name."""


class Underivable(StatusError, ValueError):
    """The grammar (or the request) cannot be turned into a constraint; the message says why."""

    code = Code.FAILED_PRECONDITION

    @property
    def message(self) -> str:
        return f"no constraint can be derived: {self}"


@dataclass(frozen=True, slots=True)
class Encoding:
    """How one captured item (a tool name or a parameter key) is written.

    ``rule`` is the capture rule whose groups carry it, or None when the captured text itself,
    stripped, is the item. ``end`` are the terminals that end the capture."""

    rule: Rule | None
    end: tuple[str, ...]
    xml: bool = False
    """The capture decodes XML references (``unescape = "xml"``): written values are escaped."""
    kept: bool = False
    """The end terminal is read again by the arguments (Gemma 4's ``{``): it is written once."""
    spaced: bool = True
    """Whitespace may stand between the item and its end terminal (the parser strips it). False
    where whitespace ends the capture otherwise: a Qwen3-Coder name ends at the end of its line."""


@dataclass(frozen=True, slots=True)
class ParamShape:
    """One tagged parameter: ``open`` terminals, the key, ``key_end``, ``value_open`` terminals,
    the raw value, one of ``close``."""

    open: tuple[tuple[str, ...], ...]
    key: Encoding
    value_open: tuple[str, ...]
    close: tuple[str, ...]
    value_ends: tuple[str, ...] = ()
    """Every terminal the value state listens for: a string value must not spell any of them."""


@dataclass(frozen=True, slots=True)
class CallShape:
    """Everything a constraint needs to know about one format's tool calls."""

    style: str
    """``envelope`` (a JSON object with the name and arguments), ``json`` (the arguments as one
    JSON value after a written name), ``params`` (one tagged block per parameter) or
    ``elements`` (one element per argument, nested for objects and arrays) or ``notation``
    (Gemma 4's object notation after a written name)."""
    openers: tuple[tuple[str, ...], ...]
    """Alternative terminal sequences from an answer state up to the name (or the envelope)."""
    name: Encoding | None
    """How the name is written (None for envelopes, where it is a JSON member)."""
    after_name: tuple[str, ...]
    """Terminals between the end of the name and the arguments (besides ``name.end``)."""
    param: ParamShape | None
    closers: tuple[tuple[str, ...], ...]
    """Alternative terminal sequences from the end of the arguments back to an answer state."""
    empty_closers: tuple[tuple[str, ...], ...]
    """``params`` style: alternatives that end a call right after its name (no parameters)."""
    arguments_key: str = "arguments"
    name_key: str = "name"
    end_state: str = ""
    """The state the arguments end in, where ``closers`` start."""
    group_open: tuple[tuple[str, ...], ...] = ()
    """Where calls sit in a shared block (DeepSeek's ``<｜tool▁calls▁begin｜>``, Kimi's section,
    MiniMax's ``<minimax:tool_call>``): the block's openers; ``openers`` then open one call inside
    it and ``closers`` lead back into it. Empty when every call opens from the answer."""
    group_close: tuple[tuple[str, ...], ...] = ()
    """The block's closers, from inside it back to the answer."""
    id_key: str = ""
    """``envelope`` style: an id member written first (Cohere's ``tool_call_id``), or none."""
    list_form: bool = False
    """``envelope`` style: the calls are written as one JSON list, the block's only content."""
    pythonic: bool = False
    """``envelope`` style: the list is a pythonic call list (``[f(a=1), g()]``), not JSON."""
    separate: bool = False
    """Pythonic calls are written one per line, not bracketed (Olmo 3)."""
    keyed: bool = False
    """``envelope`` style: a call object's one key is the tool's name (Apertus's ``{"f": {…}}``)."""
    ends_message: bool = False
    """The closers end the whole message (Kimi K3's ``<|close|>message<|sep|>``): nothing, and so
    no further call or block, follows them."""


@dataclass(frozen=True, slots=True)
class ReasoningShape:
    open: str | None
    """The terminal that opens reasoning from the answer, or None (only a prompt opens it)."""
    close: str
    state: str
    close_path: tuple[str, ...] = ()
    """The fullest way from reasoning to the answer (Kimi K3's ``<|close|>think<|sep|>`` then
    ``<|open|>response<|sep|>``, where ``close`` alone is the shortcut the parser forgives)."""


def answer_states(g: Grammar) -> list[str]:
    return [name for name, s in g.states.items() if s.kind == "content"]


def reasoning_shape(g: Grammar) -> ReasoningShape | None:
    """The reasoning block: the reasoning state the thinking switch (or the answer) enters, the
    terminal that leaves it for the answer, and the answer's terminal into it (if any)."""
    answers = set(answer_states(g))
    candidates = [g.thinking_on] if g.thinking_on and g.states[g.thinking_on].kind == "reasoning" else []
    candidates += [n for n, s in g.states.items() if s.kind == "reasoning" and n not in candidates]
    for rname in candidates:
        state = g.states[rname]
        close = next((t for t, tr in state.on.items() if tr.next in answers and not tr.actions), None)
        if close is None:
            continue
        open_ = next(
            (t for a in answer_states(g) for t, tr in g.states[a].on.items() if tr.next == rname),
            None,
        )
        # A marker the prompt table names as closing reasoning (Kimi K3's think close, into the
        # message's `between` state) is the way out the template writes, wrapper states and all.
        paths = [(close,)]
        for term, tr in state.on.items():
            if tr.actions or g.prompt.get(term) != tr.next or g.states[tr.next].kind != "skip":
                continue
            tails = sorted(_walk_to_answer(g, g.states[tr.next], answers, frozenset(), 0), key=len)
            paths += [(term, *tails[0])] if tails else []
        return ReasoningShape(open_, close, rname, _fullest(paths)[0])
    return None


def call_shape(g: Grammar) -> CallShape:
    """Walk ``g`` for its tool-call shape, or raise ``Underivable`` naming what stops the walk."""
    if not g.has_tool_calls:
        raise Underivable(f"format {g.name!r} has no tool calls")
    answers = set(answer_states(g))
    found: dict[str, list[tuple[str, ...]]] = {}
    for a in sorted(answers):
        for term, tr in g.states[a].on.items():
            target = g.states[tr.next]
            # A kept opener (Llama's bare "{") is read again as the call itself: calls are
            # generated with their marker, which the parser reads as well.
            if target.kind in ("content", "reasoning") or tr.actions or tr.keep:
                continue
            for path, where in _walk_to_call(g, (term,), target, 0):
                found.setdefault(where, [])
                if path not in found[where]:
                    found[where].append(path)
    if not found:
        raise Underivable(f"format {g.name!r}: no path from the answer reaches a call")
    if len(found) > 1:
        raise Underivable(f"format {g.name!r}: calls start in several states ({sorted(found)})")
    where, openers = next(iter(found.items()))
    state = g.states[where]
    skip_terms = frozenset(t for path in openers for t in path)
    if state.kind == "envelope":
        shape = _envelope_shape(g, state, answers, skip_terms)
    else:
        shape = _named_shape(g, state, answers, skip_terms)
    closing = {path[0] for path in shape.closers if path}
    openers = [p for p in openers if not closing & set(p)]  # no path through another call
    shape = replace(shape, openers=_fullest(openers), closers=_fullest(shape.closers))
    shape = replace(shape, ends_message=ends_message(g, shape.end_state, shape.closers))
    return _grouped(g, shape, answers)


def _replay(g: Grammar, state: str, terms: tuple[str, ...]) -> list[str]:
    """The states a terminal path passes through: the state after each of its terminals."""
    out = []
    for term in terms:
        state = g.states[state].on[term].next
        out.append(state)
    return out


def _grouped(g: Grammar, shape: CallShape, answers: set[str]) -> CallShape:
    """Split off a block that several calls share: a state that an opener passes through and
    that a closer returns to. Calls inside it repeat; the block opens and closes once."""
    inside: dict[str, set[tuple[tuple[str, ...], tuple[str, ...]]]] = {}
    for path in shape.openers:
        start = next(a for a in sorted(answers) if path[0] in g.states[a].on)
        for i, state in enumerate(_replay(g, start, path)[:-1]):
            inside.setdefault(state, set()).add((path[: i + 1], path[i + 1 :]))
    if not shape.end_state:
        return shape
    for path in shape.closers:
        for i, state in enumerate(_replay(g, shape.end_state, path)[:-1]):
            if state not in inside:
                continue
            splits = inside[state]
            closes = {c[i + 1 :] for c in shape.closers if _replay(g, shape.end_state, c)[i] == state}
            return replace(
                shape,
                group_open=tuple(sorted({outer for outer, _ in splits})),
                openers=tuple(sorted({inner for _, inner in splits})),
                closers=tuple(sorted({c[: i + 1] for c in shape.closers})),
                group_close=tuple(sorted(closes)),
            )
    return shape


def _fullest(paths: list[tuple[str, ...]] | tuple[tuple[str, ...], ...]) -> tuple[tuple[str, ...], ...]:
    """The spellings that open (or close) every wrapper the grammar has: the longest paths.

    The parser forgives a missing wrapper (a Kimi call without its section, a DSML parameter
    block closed by the wrapper's closer); the constraint writes the full form the models were
    trained on, and keeps every full alternative (DSML's ``function_calls`` and ``tool_calls``)."""
    if not paths:
        return ()
    longest = max(len(p) for p in paths)
    return tuple(p for p in paths if len(p) == longest)


def _walk_to_call(
    g: Grammar, path: tuple[str, ...], state: State, depth: int, seen: frozenset[str] = frozenset()
) -> Iterator[tuple[tuple[str, ...], str]]:
    """Paths through wrapper (skip) states to the state where a call is named, each state once."""
    if state.kind == "envelope":
        if state.dialect not in ("json", "keyed", "python", "python_json"):
            raise Underivable(f"format {g.name!r}: {state.dialect!r} call lists have no JSON-schema grammar")
        yield path, state.name
        return
    if state.kind == "capture" and _begins_call(state):
        yield path, state.name
        return
    if state.kind != "skip" or depth >= MAX_WALK:
        return
    found = False
    for term, tr in state.on.items():
        target = g.states[tr.next]
        if target.kind in ("content", "reasoning") or tr.actions or target.name in seen | {state.name}:
            continue
        for hit in _walk_to_call(
            g, path if tr.keep else (*path, term), target, depth + 1, seen | {state.name}
        ):
            found = True
            yield hit
    if not found and state.text_next and g.states[state.text_next].kind == "envelope":
        # The call starts with its own text (Olmo 3's `get_weather(…)` after <function_calls>);
        # where a terminal also starts one (LFM2's JSON), the marked form is the one written.
        yield from _walk_to_call(g, path, g.states[state.text_next], depth + 1, seen | {state.name})


def _begins_call(state: State) -> bool:
    return any("call_begin" in tr.actions for tr in state.on.values()) or any(
        "call_begin" in r.actions for r in state.rules
    )


def _envelope_shape(g: Grammar, state: State, answers: set[str], skip: frozenset[str]) -> CallShape:
    pythonic = state.dialect in ("python", "python_json")
    # Calls one per envelope, the block's text starting each (Olmo 3's newline-separated calls).
    block = g.states[state.done.next] if state.done is not None else None
    separate = pythonic and block is not None and block.text_next == state.name
    if state.write_list or pythonic:  # the list ends, then its block's closer (Cohere's <|END_ACTION|>)
        ends = tuple((t,) for t, tr in state.on.items() if tr.next in answers and not tr.actions)
        closers = ends or ((),)
    else:
        closers = _closers(g, state, answers, skip)
    name_key, arguments_key = state.keys
    return CallShape(
        "envelope",
        (),
        None,
        (),
        None,
        closers,
        (),
        arguments_key,
        end_state=state.name,
        name_key=name_key,
        id_key=state.id_key,
        list_form=state.write_list or pythonic,
        keyed=state.dialect == "keyed",
        pythonic=pythonic,
        separate=separate,
    )


def _the_next(g: Grammar, nexts: set[str], what: str) -> State:
    """The one state ``nexts`` names: a call's shape is derived along a single path, so ``what``
    (the transitions that lead there) leading to several states is Underivable."""
    if len(nexts) != 1:
        raise Underivable(f"format {g.name!r}: {what} to several states {sorted(nexts)}")
    return g.states[next(iter(nexts))]


def _named_shape(g: Grammar, name_state: State, answers: set[str], skip: frozenset[str]) -> CallShape:
    rule = next((r for r in name_state.rules if "call_begin" in r.actions and r.next), None)
    begins = {t: tr for t, tr in name_state.on.items() if "call_begin" in tr.actions}
    if rule is not None:
        # The rule decides the call (Kimi: functions.NAME:IDX), ended by any of the state's terminals.
        ends = tuple(t for t, tr in name_state.on.items() if not tr.actions)
        after = g.states[rule.next]
        name = Encoding(rule, ends, name_state.unescape == "xml")
        return _after_name(g, name, (), after, answers, (), skip)
    if not begins:
        raise Underivable(f"format {g.name!r}: state {name_state.name!r} names no call")
    empty = tuple((t,) for t, tr in begins.items() if "call_end" in tr.actions)
    main = {t: tr for t, tr in begins.items() if "call_end" not in tr.actions}
    if not main:
        raise Underivable(f"format {g.name!r}: calls in state {name_state.name!r} take no arguments")
    after = _the_next(g, {tr.next for tr in main.values()}, "a call name leads")
    kept = all(tr.keep for tr in main.values())
    spaced = not any(g.terminals[t][:1].isspace() for t in name_state.on if t not in main)
    name = Encoding(None, tuple(main), kept=kept, spaced=spaced)
    return _after_name(g, name, (), after, answers, empty, skip)


def _after_name(
    g: Grammar,
    name: Encoding,
    after_name: tuple[str, ...],
    state: State,
    answers: set[str],
    empty: tuple[tuple[str, ...], ...],
    skip: frozenset[str],
) -> CallShape:
    if state.kind == "json" and state.dialect == "gemma":
        if "quote" not in g.terminals:
            raise Underivable(f"format {g.name!r}: gemma arguments need a terminal named 'quote'")
        closers = _closers(g, state, answers, skip)
        return CallShape("notation", (), name, after_name, None, closers, empty, end_state=state.name)
    if state.kind == "json":
        if state.dialect != "json":
            raise Underivable(f"format {g.name!r}: {state.dialect!r} arguments have no JSON-schema grammar")
        closers = _closers(g, state, answers, skip)
        return CallShape("json", (), name, after_name, None, closers, empty, end_state=state.name)
    if state.kind == "elements":
        closers = _closers(g, state, answers, skip)
        return CallShape("elements", (), name, after_name, None, closers, empty, end_state=state.name)
    if state.kind == "capture" and _begins_param(state):
        # The name's end terminal is also the first parameter's opener (GLM: NAME<arg_key>…).
        param, body = _param_shape(g, state, opened_by=name.end)
        return _params_call(g, name, after_name, param, body, answers, empty, skip)
    if state.kind == "skip":
        paths = list(_walk_to_param(g, (), state, 0))
        if not paths:
            raise Underivable(f"format {g.name!r}: no parameter follows state {state.name!r}")
        keys = {k for _, k in paths}
        if len(keys) != 1:
            raise Underivable(f"format {g.name!r}: parameters start in several states {sorted(keys)}")
        key_state = g.states[keys.pop()]
        param, body = _param_shape(g, key_state, opened_by=None, opens=tuple(p for p, _ in paths))
        return _params_call(g, name, after_name, param, body, answers, empty, skip)
    raise Underivable(f"format {g.name!r}: arguments in a {state.kind!r} state have no constraint form")


def _params_call(
    g: Grammar,
    name: Encoding,
    after_name: tuple[str, ...],
    param: ParamShape,
    body: State,
    answers: set[str],
    empty: tuple[tuple[str, ...], ...],
    skip: frozenset[str],
) -> CallShape:
    # Every parameter opener must also be reachable from the body, so that parameters repeat.
    again = {p for p, _ in _walk_to_param(g, (), body, 0)}
    if not set(param.open) <= again and param.open != (name.end,):
        raise Underivable(f"format {g.name!r}: parameters cannot follow one another from {body.name!r}")
    closers = _closers(g, body, answers, skip)
    return CallShape("params", (), name, after_name, param, closers, empty, end_state=body.name)


def _begins_param(state: State) -> bool:
    return any("param_begin" in tr.actions for tr in state.on.values()) or any(
        "param_begin" in r.actions for r in state.rules
    )


def _walk_to_param(
    g: Grammar, path: tuple[str, ...], state: State, depth: int
) -> Iterator[tuple[tuple[str, ...], str]]:
    for term, tr in state.on.items():
        target = g.states[tr.next]
        if tr.actions:
            continue
        if target.kind == "capture" and _begins_param(target):
            yield (*path, term), target.name
        elif target.kind == "skip" and depth < MAX_WALK and target.name != state.name:
            yield from _walk_to_param(g, (*path, term), target, depth + 1)


def _param_shape(
    g: Grammar,
    key_state: State,
    opened_by: tuple[str, ...] | None,
    opens: tuple[tuple[str, ...], ...] = (),
) -> tuple[ParamShape, State]:
    rules = [r for r in key_state.rules if "param_begin" in r.actions and r.next]
    begins = {t: tr for t, tr in key_state.on.items() if "param_begin" in tr.actions}
    if not begins and rules:
        # The rule decides the parameter (Kimi K3's ` key="K" type="T"`), ended by any of the
        # state's terminals.
        begins = {t: tr for t, tr in key_state.on.items() if not tr.actions}
        nexts = {r.next for r in rules}
    elif not begins:
        raise Underivable(f"format {g.name!r}: state {key_state.name!r} ends no parameter key")
    else:
        nexts = {tr.next for tr in begins.values()} | {r.next for r in rules}
    state = _the_next(g, nexts, "a parameter key leads")
    value_open: tuple[str, ...] = ()
    while state.kind == "skip":
        steps = [(t, tr) for t, tr in state.on.items() if not tr.actions]
        if len(steps) != 1:
            raise Underivable(f"format {g.name!r}: state {state.name!r} has no single way to a value")
        term, tr = steps[0]
        value_open += (term,)
        state = g.states[tr.next]
    if state.kind != "value":
        raise Underivable(f"format {g.name!r}: a parameter key leads to a {state.kind!r} state, not a value")
    # A closer that at once opens the next key (Qwen3-Coder's "\n<parameter=") is a shortcut the
    # parser forgives; the constraint writes each parameter's own closer.
    closes = {
        t: tr
        for t, tr in state.on.items()
        if tr.actions == ("param_end",) and not _begins_param(g.states[tr.next])
    }
    if not closes:
        raise Underivable(f"format {g.name!r}: value state {state.name!r} has no closer")
    body = _the_next(g, {tr.next for tr in closes.values()}, "parameter closers lead")
    key_rule = _best_key_rule(rules)
    open_ = (opened_by,) if opened_by else opens
    key = Encoding(key_rule, tuple(begins), key_state.unescape == "xml")
    shape = ParamShape(open_, key, value_open, tuple(closes), tuple(state.on))
    return shape, body


def _best_key_rule(rules: list[Rule]) -> Rule | None:
    """The rule that states most about the value (DSML's ``string="true|false"``), if any."""
    if not rules:
        return None
    return max(rules, key=lambda r: len(r.pattern.groupindex))


def _closers(
    g: Grammar, state: State, answers: set[str], skip: frozenset[str]
) -> tuple[tuple[str, ...], ...]:
    """Terminal paths that end the call in ``state`` and lead back to an answer state, without
    opening another call on the way (``skip``: the openers' terminals)."""
    out: list[tuple[str, ...]] = []
    for term, tr in state.on.items():
        if "call_end" not in tr.actions or term in skip:
            continue
        if tr.next in answers or _is_final(g.states[tr.next]):
            out.append((term,))
            continue
        for tail in _walk_to_answer(g, g.states[tr.next], answers, skip, 0):
            out.append((term, *tail))
    if state.kind == "envelope" and state.done is not None and state.done.next in answers:
        out.append(())  # the call ends with its JSON (Llama's bare envelopes)
    if not out:
        raise Underivable(f"format {g.name!r}: nothing ends a call in state {state.name!r}")
    # Where a closer can end the whole message (Kimi K3's `<|close|>message<|sep|>`), the
    # constraint ends it so: nothing follows the calls, as the template writes them.
    final = [p for p in out if ends_message(g, state.name, (p,))]
    return tuple(dict.fromkeys(final or out))


def _is_final(state: State) -> bool:
    """A state the output never leaves and whose text is dropped: the message is over."""
    return state.kind == "skip" and not state.on and state.text_next is None


def ends_message(g: Grammar, start: str, paths: tuple[tuple[str, ...], ...]) -> bool:
    """Whether every one of ``paths`` (from ``start``) ends the whole message."""
    return bool(paths) and all(p and _is_final(g.states[_replay(g, start, p)[-1]]) for p in paths)


def _walk_to_answer(
    g: Grammar, state: State, answers: set[str], skip: frozenset[str], depth: int
) -> Iterator[tuple[str, ...]]:
    for term, tr in state.on.items():
        if tr.actions or term in skip:
            continue
        if tr.next in answers or _is_final(g.states[tr.next]):
            yield (term,)
        elif g.states[tr.next].kind == "skip" and depth < MAX_WALK and tr.next != state.name:
            for tail in _walk_to_answer(g, g.states[tr.next], answers, skip, depth + 1):
                yield (term, *tail)


_GROUP = re.compile(r"\(\?P<(\w+)>")


def fill_rule(rule: Rule, values: Mapping[str, str]) -> str:
    """The rule's pattern as a plain regex, each named group in ``values`` replaced by that
    literal text, other named groups made non-capturing, anchors and lazy marks dropped (the
    constraint's regex dialects have no captures or laziness; the language is the same)."""
    pattern = rule.pattern.pattern
    out = []
    i = 0
    while i < len(pattern):
        m = _GROUP.match(pattern, i)
        if m and m.group(1) in values:
            end = _group_end(pattern, m.end())
            out.append(re.escape(values[m.group(1)]))
            i = end
            continue
        if m:
            out.append("(?:")
            i = m.end()
            continue
        out.append(pattern[i])
        i += 1
    text = "".join(out)
    text = text.removeprefix("^")
    if text.endswith("$") and not text.endswith("\\$"):
        text = text[:-1]
    return re.sub(r"(?<!\\)([+*?}])\?", r"\1", text)


def _group_end(pattern: str, i: int) -> int:
    depth = 1
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    raise Underivable(f"unbalanced group in {pattern!r}")
