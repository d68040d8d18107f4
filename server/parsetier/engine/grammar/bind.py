"""Binding a grammar to a tokenizer's vocabulary.

Binding looks every terminal's text up in the tokenizer's added tokens: a marker that is one added
token is then recognised **by id only**, through a private sentinel character the scanner puts in
the text in place of that token, so text that merely looks like a marker stays text. Markers that
mix an added token with plain text (DSML's ``<｜DSML｜invoke name="``) bind the same way,
piecewise. The result, ``BoundGrammar``, holds every table the machine and the detokenizer read
per id or per state, computed once per (format, vocabulary).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import regex
import tokenizers

from parsetier.engine.grammar.schema import SENTINEL_BASE, SENTINEL_RE, Grammar, GrammarError, State
from parsetier.engine.lexer import TerminalSet
from parsetier.token_bytes import byte_fallback_ids


@dataclass(frozen=True, slots=True)
class BoundGrammar:
    """A grammar bound to one vocabulary: terminal patterns in sentinel form, token-id tables."""

    grammar: Grammar
    vocab_size: int
    patterns: Mapping[str, str]
    """terminal name → the text the lexer looks for (added tokens replaced by sentinels)."""
    sentinel_of_id: Mapping[int, str]
    """token id → sentinel, for every added token a terminal uses."""
    text_of_sentinel: Mapping[str, str]
    """sentinel → the token's text: put back when a sentinel ends up in visible output, and
    matched literally in text steps to become the sentinel."""
    dropped_ids: frozenset[int]
    """Special tokens the format does not use: they never reach the output."""
    token_text: Mapping[int, str]
    """Text of every added token, for stop-token handling."""
    terminal_of_pattern: Mapping[str, str]
    terminal_sets: Mapping[str, TerminalSet]
    """state → the lexer's compiled set of the terminals its transitions listen for."""
    known_ids: frozenset[int] | None
    """Every valid id when the id space has gaps (marker tokenizers), else None: all below
    ``vocab_size`` are valid."""
    follow_patterns: Mapping[tuple[str, ...], regex.Pattern[str] | None]
    """A transition's ``follow`` list → ``\\s*(?:t1|t2|…)`` over their patterns, matched partially
    (a prefix of what may follow means "wait"); None when the list names only ``end``."""
    marker_ids: frozenset[int] = frozenset()
    """Ids that are not plain text: bound markers (``sentinel_of_id``) and dropped specials."""
    mark_of_id: Mapping[int, tuple[str, str]] = field(default_factory=dict)
    """Every marker id → (its token's text, its sentinel, "" for a dropped special): what the
    detokenizer needs to know of an id, in one lookup."""
    run_states: frozenset[str] = frozenset()
    """States from which plain text (no marker token in it) can never move the output into or
    out of reasoning: there a run of plain ids may be parsed as one piece and still be counted
    exactly (see ``run_states``)."""
    plain_stops: Mapping[str, tuple[bool, re.Pattern[str]]] = field(default_factory=dict)
    """Content and reasoning states that nothing moves on text (no ``text_next``) → (whether no
    terminal of theirs starts with an ASCII character, the characters a piece must not hold):
    any sentinel, and the first character of each terminal they listen for. A piece without
    them can neither hold nor begin a terminal there: it is, whole, the state's own text
    (the native core's fast path, ``describe``; ASCII text is such a piece at once when the flag
    is set). The reference machine lexes every piece."""
    byte_ids: frozenset[int] = frozenset()
    """Byte-fallback ids (``<0xAB>`` pieces of a ``ByteFallback`` decoder): the decoder decides a
    run of them only as a whole, so the scanner steps a run together with the next other id
    (``detokenizer.ByteGroupScanner``). Empty for every other vocabulary."""

    @classmethod
    def build(cls, grammar: Grammar, tokenizer: tokenizers.Tokenizer) -> BoundGrammar:
        added = tokenizer.get_added_tokens_decoder()
        added_text = {tok.content: tid for tid, tok in added.items()}
        spelled = _suffixed_markers(grammar.token_suffix, added_text)
        marker_ids = {**{text: tid for text, (tid, _) in spelled.items()}, **added_text}
        # Added tokens that occur inside some terminal, longest first so ``<|a|>`` wins over ``a``.
        used: dict[str, int] = {}
        for literal in grammar.terminals.values():
            for text in sorted(marker_ids, key=len, reverse=True):
                if _looks_like_marker(text) and text in literal:
                    used.setdefault(text, marker_ids[text])
        real_text = {text: spelled[text][1] if text in spelled else text for text in used}
        ordered = sorted(used.items(), key=lambda kv: kv[1])
        sentinel_of_text = {text: chr(SENTINEL_BASE + i) for i, (text, _) in enumerate(ordered)}
        splitter = (
            re.compile("|".join(re.escape(t) for t in sorted(sentinel_of_text, key=len, reverse=True)))
            if sentinel_of_text
            else None
        )

        def to_pattern(literal: str) -> str:
            return splitter.sub(lambda m: sentinel_of_text[m.group(0)], literal) if splitter else literal

        patterns = {name: to_pattern(lit) for name, lit in grammar.terminals.items()}
        terminal_of_pattern: dict[str, str] = {}
        for name, pat in patterns.items():
            if pat in terminal_of_pattern:
                other = terminal_of_pattern[pat]
                raise GrammarError(f"{grammar.name}: terminals {other!r} and {name!r} coincide")
            terminal_of_pattern[pat] = name
        terminal_sets = {
            sname: TerminalSet(tuple(sorted((patterns[t] for t in state.on), key=len, reverse=True)))
            for sname, state in grammar.states.items()
        }
        follow_patterns = {
            t.follow: _follow_pattern([patterns[name] for name in t.follow if name != "end"])
            for state in grammar.states.values()
            for t in state.on.values()
            if t.follow
        }
        special = {tid for tid, tok in added.items() if tok.special}
        # The id space, not the token count: a sparse vocabulary (the marker tokenizers keep
        # their markers at the real models' ids) has ids far above its number of tokens.
        count = tokenizer.get_vocab_size(with_added_tokens=True)
        vocab_size = max(count, max(added, default=-1) + 1)
        known_ids = None
        if vocab_size != count:
            known_ids = frozenset(tokenizer.get_vocab(with_added_tokens=True).values())
        sentinel_of_id = {used[text]: s for text, s in sentinel_of_text.items()}
        return cls(
            grammar=grammar,
            vocab_size=vocab_size,
            patterns=patterns,
            sentinel_of_id=sentinel_of_id,
            text_of_sentinel={s: real_text[text] for text, s in sentinel_of_text.items()},
            dropped_ids=frozenset(special - set(sentinel_of_id)),
            token_text={tid: tok.content for tid, tok in added.items()},
            terminal_of_pattern=terminal_of_pattern,
            terminal_sets=terminal_sets,
            known_ids=known_ids,
            follow_patterns=follow_patterns,
            marker_ids=frozenset(sentinel_of_id) | frozenset(special - set(sentinel_of_id)),
            mark_of_id={
                tid: (added[tid].content, sentinel_of_id.get(tid, ""))
                for tid in special | set(sentinel_of_id)
            },
            run_states=run_states(grammar, patterns),
            plain_stops={
                name: _plain_stops([patterns[t] for t in state.on])
                for name, state in grammar.states.items()
                if state.kind in ("content", "reasoning") and state.text_next is None
            },
            byte_ids=byte_fallback_ids(tokenizer),
        )


def _plain_stops(patterns: list[str]) -> tuple[bool, re.Pattern[str]]:
    """``BoundGrammar.plain_stops`` of a state listening for ``patterns``."""
    firsts = sorted({p[0] for p in patterns if p and SENTINEL_RE.match(p) is None})
    stops = re.compile("[" + "".join(re.escape(c) for c in firsts) + SENTINEL_RE.pattern[1:])
    return all(not c.isascii() for c in firsts), stops


def run_states(grammar: Grammar, patterns: Mapping[str, str]) -> frozenset[str]:
    """The states where a run of plain text keeps the output on its side of reasoning.

    A terminal with a sentinel in its pattern matches only text that holds its marker token, so
    plain text alone never fires it: either the marker is in the text the machine still holds
    (a ``follow`` check or a longer terminal waiting to be settled), which ``Machine.takes_runs``
    checks, or it is not there at all. Plain text can move the machine only through the other
    moves: a terminal that is all ordinary text, a JSON value completing (``done``), ``text_next``,
    and a capture rule redirecting one of these. A state qualifies when every state those moves
    reach, step after step, is of reasoning kind exactly when it is."""

    def plain_moves(state: State) -> list[str]:
        out = [t.next for name, t in state.on.items() if SENTINEL_RE.search(patterns[name]) is None]
        if out and state.kind == "capture":
            out += [rule.next for rule in state.rules if rule.next]
        out += [t.next for t in (state.done,) if t is not None]
        out += [state.text_next] if state.text_next else []
        return out

    safe = set()
    for name, state in grammar.states.items():
        reasoning = state.kind == "reasoning"
        seen, todo = {name}, [name]
        while todo:
            here = grammar.states[todo.pop()]
            for nxt in plain_moves(here):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
        if all((grammar.states[s].kind == "reasoning") == reasoning for s in seen):
            safe.add(name)
    return frozenset(safe)


def _suffixed_markers(suffix: str, added_text: Mapping[str, int]) -> dict[str, tuple[int, str]]:
    """Marker text → (id, the token's own text) for added tokens that carry ``suffix`` before
    their closing ``>`` and whose bare spelling is not a token itself."""
    if not suffix:
        return {}
    shape = regex.compile(r"(<.*?)(?:" + suffix + r")>")
    out: dict[str, tuple[int, str]] = {}
    for text, tid in added_text.items():
        m = shape.fullmatch(text)
        if m and m.group(1) + ">" not in added_text:
            out.setdefault(m.group(1) + ">", (tid, text))
    return out


def _follow_pattern(patterns: list[str]) -> regex.Pattern[str] | None:
    if not patterns:
        return None
    alternatives = "|".join(regex.escape(p) for p in sorted(patterns, key=len, reverse=True))
    return regex.compile(r"\s*(?:" + alternatives + ")")


def _looks_like_marker(text: str) -> bool:
    """Added tokens that can carry a terminal: bracketed markers, never plain words or whitespace
    runs (some vocabularies add ``"\\n\\n"`` as a token, which must stay ordinary text)."""
    return len(text) > 1 and text.strip() == text and any(c in text for c in "<>[]|｜")
