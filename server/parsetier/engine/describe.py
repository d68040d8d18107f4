"""The bound grammar and a session's options as JSON, for the native engine (``parsetier._core``).

The native parser (``server/parsetier_core/engine/src/grammar.rs``) interprets exactly the data
the reference engine interprets: the states, transitions and terminal patterns of a
``BoundGrammar``, already in sentinel form, plus what binding derived from them (each state's
terminal set, the fast path's stop characters, the states that take runs, ``follow`` lists).
Nothing is recomputed on the Rust side that could drift from this module.

Capture rules are regexes written for Python's ``re``; ``native_pattern`` rewrites each into what
the Rust side compiles (``fancy-regex``, which hands lookaround-free patterns to the ``regex``
crate) with the same meaning: Python's ``\\s`` (``str.isspace``) also matches U+001C-U+001F, and
its ``$`` also matches before a final newline, and its ``\\w`` (hence ``\\b``) is ``str.isalnum()`` or
``_``, where the ``regex`` crate's follows UTS #18 (combining marks and connector punctuation are
word characters there, other-script numbers such as ``²`` are not). A pattern this module cannot
translate raises ``NativeUnsupported``: that grammar is served by the reference engine.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from typing import Any

from parsetier.engine.grammar import SENTINEL_RE, BoundGrammar, State, Transition

_PY_SPACE = "\\s\\x{1C}-\\x{1F}"
"""Python's ``\\s`` inside a character class, as the Rust crates spell it."""


@functools.cache
def _py_word() -> str:
    """Python's word characters (``re``'s ``\\w`` on ``str``: ``isalnum()`` or ``_``) as ranges
    inside a character class, read off this interpreter's own Unicode data, so the core's
    ``\\w`` and ``\\b`` are Python's exactly whatever Unicode version the Rust crate carries."""
    ranges: list[list[int]] = []
    for code in range(sys.maxunicode + 1):
        if code == 0x5F or chr(code).isalnum():
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    return "".join(f"\\x{{{a:X}}}" if a == b else f"\\x{{{a:X}}}-\\x{{{b:X}}}" for a, b in ranges)


def _word_escape(e: str, in_class: bool, pattern: str) -> str:
    """``\\w``, ``\\W``, ``\\b`` or ``\\B`` with Python's word characters."""
    word = f"[{_py_word()}]"
    if in_class:
        if e == "w":
            return _py_word()
        if e == "b":  # a backspace inside a class, in Python as in Rust
            return "\\x{8}"
        raise NativeUnsupported(f"pattern {pattern!r}: \\{e} inside a class")
    if e == "w":
        return word
    if e == "W":
        return f"[^{_py_word()}]"
    if e == "b":
        return f"(?:(?<={word})(?!{word})|(?<!{word})(?={word}))"
    return f"(?:(?<={word})(?={word})|(?<!{word})(?!{word}))"


class NativeUnsupported(ValueError):
    """A grammar the native engine cannot interpret (yet); the reference engine serves it."""


def _closing_paren(pattern: str, at: int) -> int:
    """Index of the ``)`` closing the group opened at ``pattern[at]`` (escapes, classes skipped)."""
    depth, i, in_class = 0, at, False
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            in_class = c != "]"
        elif c == "[":
            in_class = True
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise NativeUnsupported(f"pattern {pattern!r}: unbalanced parentheses")


def _optional_lookaheads(pattern: str) -> str:
    """``(?:(?=A))?`` (an optional lookahead, to capture what may be there) → ``(?=(?:A)?)``: the
    same groups, and a repeat of a zero-width group is an error in ``fancy-regex``."""
    start = 0
    while (at := pattern.find("(?:(?=", start)) >= 0:
        inner = _closing_paren(pattern, at + 3)
        outer = _closing_paren(pattern, at)
        if outer == inner + 1 and pattern[outer + 1 : outer + 2] == "?":
            body = pattern[at + 6 : inner]
            pattern = pattern[:at] + "(?=(?:" + body + ")?)" + pattern[outer + 2 :]
        start = at + 1
    return pattern


def native_pattern(pattern: str) -> str:
    """A capture rule's Python ``re`` pattern (DOTALL) → the same pattern for ``fancy-regex``."""
    pattern = _optional_lookaheads(pattern)
    out: list[str] = ["(?s)"]
    i, n = 0, len(pattern)
    in_class = False
    while i < n:
        c = pattern[i]
        if c == "\\":
            if i + 1 >= n:
                raise NativeUnsupported(f"pattern {pattern!r} ends in a backslash")
            e = pattern[i + 1]
            i += 2
            if e == "s":
                out.append(_PY_SPACE if in_class else f"[{_PY_SPACE}]")
            elif e == "S":
                if in_class:
                    raise NativeUnsupported(f"pattern {pattern!r}: \\S inside a class")
                out.append(f"[^{_PY_SPACE}]")
            elif e in "AZ":
                out.append("\\A" if e == "A" else "\\z")
            elif e in "wWbB":
                out.append(_word_escape(e, in_class, pattern))
            elif e in "dD.^$|?*+()[]{}\\/-nrtfv\"'<>=:&#,;!%@~`_ ":
                out.append("\\" + e)
            else:
                raise NativeUnsupported(f"pattern {pattern!r}: escape \\{e}")
            continue
        if in_class:
            if c == "]":
                in_class = False
            elif c == "[":
                out.append("\\[")
                i += 1
                continue
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":  # a literal ] first in a class
                out.append("\\]")
                i += 1
            continue
        if c == "$":
            out.append("(?=\\n?\\z)")
        elif c == "(" and pattern.startswith("(?P=", i):
            raise NativeUnsupported(f"pattern {pattern!r}: named backreference")
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _transition(bound: BoundGrammar, index: Mapping[str, int], t: Transition | None) -> Any:
    if t is None:
        return None
    return {
        "next": index[t.next] if t.next else None,
        "actions": list(t.actions),
        "keep": t.keep,
        "follow": [bound.patterns[name] for name in t.follow if name != "end"],
        "follow_end": "end" in t.follow,
        "has_follow": bool(t.follow),
        "turn_close": bound.patterns[t.turn_close] if t.turn_close else "",
        "turn_unless": [bound.patterns[name] for name in t.turn_unless],
    }


def _state(bound: BoundGrammar, index: Mapping[str, int], state: State) -> dict[str, Any]:
    on = []
    for terminal, t in state.on.items():
        d = _transition(bound, index, t)
        d["pattern"] = bound.patterns[terminal]
        on.append(d)
    rules = []
    for rule in state.rules:
        rules.append(
            {
                "pattern": native_pattern(rule.pattern.pattern),
                "next": index[rule.next] if rule.next else None,
                "actions": list(rule.actions),
            }
        )
    stops = bound.plain_stops.get(state.name)
    plain_firsts = None
    if stops is not None:
        firsts = {bound.patterns[t][0] for t in state.on if bound.patterns[t]}
        plain_firsts = sorted(c for c in firsts if SENTINEL_RE.match(c) is None)
    return {
        "name": state.name,
        "kind": state.kind,
        "on": on,
        "terminal_set": list(bound.terminal_sets[state.name].patterns),
        "done": _transition(bound, index, state.done),
        "end": _transition(bound, index, state.end),
        "rules": rules,
        "allow_list": state.allow_list,
        "text_next": index[state.text_next] if state.text_next else None,
        "dialect": state.dialect,
        "item": state.item,
        "unescape": state.unescape,
        "run_state": state.name in bound.run_states,
        "plain_firsts": plain_firsts,
        "markup": state.markup,
    }


def describe_grammar(bound: BoundGrammar) -> str:
    """The JSON the native ``Grammar`` loads (``parsetier_core/engine/src/grammar.rs``)."""
    g = bound.grammar
    names = list(g.states)
    index = {name: i for i, name in enumerate(names)}
    data = {
        "name": g.name,
        "states": [_state(bound, index, g.states[name]) for name in names],
        "trim_values": g.value_trim == "newline",
        "format_ids": g.tool_call_id == "format",
        "text_of_sentinel": dict(bound.text_of_sentinel),
        "quote": bound.patterns.get("quote", ""),
        "tag": bound.patterns.get("tag", ""),
    }
    return json.dumps(data, ensure_ascii=False)


def describe_config(
    start: str,
    tools: Mapping[str, Any],
    *,
    include_reasoning: bool = True,
    tool_choice: str = "auto",
    parallel_tool_calls: bool = True,
    complete_tool_calls: bool = False,
    call_id_seed: str = "",
    echo: str = "",
) -> str:
    """A session's parser options, as ``ParserConfig`` in ``parsetier_core/engine/src/parser.rs``."""
    return json.dumps(
        {
            "start": start,
            "tools": [[name, schema] for name, schema in tools.items()],
            "include_reasoning": include_reasoning,
            "tool_choice": tool_choice,
            "parallel_tool_calls": parallel_tool_calls,
            "complete_tool_calls": complete_tool_calls,
            "call_id_seed": call_id_seed,
            "echo": echo,
        },
        ensure_ascii=False,
    )
