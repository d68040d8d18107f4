"""Formats as data: the grammar schema, its validation, and binding to a tokenizer's vocabulary.

A format file declares *terminals* (literal marker texts), *states* (each of a kind that says what
its text means) and *transitions* (state × terminal → actions + next state). Binding looks every
terminal's text up in the tokenizer's added tokens: a marker that is one added token is then
recognised **by id only**, through a private sentinel character the scanner puts in the text in
place of that token, so text that merely looks like a marker stays text. Markers that mix an added
token with plain text (DSML's ``<｜DSML｜invoke name="``) bind the same way, piecewise.

Everything that affects transitions is in this file and ``machine.py``; a family needs engine code
only when it needs a new state kind or argument style, and then every format can use it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import regex
import tokenizers

from parsetier.engine.lexer import TerminalSet
from parsetier.token_bytes import byte_fallback_ids

STATE_KINDS = frozenset({"content", "reasoning", "skip", "capture", "value", "json", "envelope", "elements"})
"""content/reasoning: text is shown as such; skip: text is dropped; capture: text is collected
for the next transition (a tool name, a parameter key, a header); value: text is one parameter
value of the current call; json: text is the call's arguments as one JSON value; envelope: text is
a JSON object carrying the name and the arguments (``{"name": …, "arguments": …}``); elements:
text is the call's arguments as one element per argument, tags starting with the ``tag``
terminal (MiniMax-M3's ``]<]minimax[>[<city>Paris]<]minimax[>[</city>``)."""

ACTIONS = frozenset({"call_begin", "call_end", "param_begin", "param_end"})
DIALECTS = frozenset({"json", "gemma", "python", "python_json", "keyed"})
ENVELOPE_NAME_KEYS = frozenset({"name", "tool_name"})
ENVELOPE_ARGUMENT_KEYS = frozenset({"arguments", "parameters", "args"})
ENVELOPE_ID_KEYS = frozenset({"id", "tool_call_id"})
"""The keys an envelope reads (``engine/arguments/envelope.py``, which skips a string-valued id
member); ``keys`` picks the written ones."""
UNESCAPES = frozenset({"none", "xml"})

SENTINEL_BASE = 0xF0000
"""Token-id terminals travel through the text as code points from Supplementary Private Use
Area-A, one per bound added token; real model text essentially never contains them."""

SENTINEL_RE = re.compile("[\U000f0000-\U000ffffd]")


class GrammarError(ValueError):
    """A format file that cannot work; the message names the file's offending part."""


@dataclass(frozen=True, slots=True)
class Rule:
    """For capture states: when the captured text matches, use its groups and go to ``next``."""

    pattern: re.Pattern[str]
    next: str
    actions: tuple[str, ...] = ()
    write: str | None = None
    """The text a derived constraint writes for this rule (Harmony's header
    ``<|channel|>commentary to=functions.{name} <|constrain|>json``), ``{name}`` standing for the
    tool's name. The parser never reads it; the constraint checks that the rule reads it back."""


@dataclass(frozen=True, slots=True)
class Transition:
    next: str
    actions: tuple[str, ...] = ()
    keep: bool = False
    """The terminal's text is not consumed: the next state reads it again (Llama's bare ``{``)."""
    follow: tuple[str, ...] = ()
    """If set, the terminal counts only where, after optional whitespace, one of these terminals
    (or, for ``"end"``, the end of the output) follows; elsewhere its text is the state's own text.
    For closers that may also be data: ``</function>`` inside a parameter value is text unless the
    call's structure goes on after it. The machine waits (holds back) only until it can tell."""


@dataclass(frozen=True, slots=True)
class State:
    name: str
    kind: str
    on: Mapping[str, Transition]
    """terminal name → transition."""
    done: Transition | None = None
    """json/envelope states: where to go once the JSON value is complete (else wait for a terminal)."""
    rules: tuple[Rule, ...] = ()
    """capture states: tried in order on the captured text when a transition leaves the state."""
    allow_list: bool = False
    """envelope states: the JSON may be a list of call objects (several calls in one envelope)."""
    text_next: str | None = None
    """On the first non-whitespace text that is not a terminal, move to this state (a state that
    only looks at how the output *starts*, like Llama's bare JSON call)."""
    dialect: str = "json"
    """json states: ``json``, or ``gemma`` (Gemma 4's unquoted keys and ``<|"|>`` strings); envelope
    states: ``json``, ``python`` (pythonic call lists ``[f(a=1), g()]``, Llama 4) or ``python_json``
    (the same, JSON's true/false/null accepted as literals: LFM2) or ``keyed`` (JSON objects whose
    one key is the tool's name: ``{"f": {…}}``, Apertus)."""
    end: Transition | None = None
    """What the end of the output means here when the model stopped by itself (finish ``stop``):
    GLM's ``<tool_call>NAME`` then the stop token is a call without arguments. Not used when the
    output was cut (``length``/``abort``): a capture cut short is not known to be whole."""
    item: str = "item"
    """elements states: the name of an array's child elements (``<item>``), for arrays the
    schema does not type."""
    unescape: str = "none"
    """capture states: ``xml`` decodes XML character references (``&amp;`` ``&quot;`` ``&#38;``…)
    in the rule's groups, for names and keys written as attribute values (Kimi K3's ``key="q&amp;a"``)."""
    keys: tuple[str, str] = ("name", "arguments")
    """envelope states: the keys the model writes for the name and the arguments (Cohere's
    ``tool_name`` / ``parameters``). The parser reads either spelling; a derived constraint writes
    these."""
    id_key: str = ""
    """envelope states: an id member a derived constraint writes first, the call's number as a
    string (Cohere's ``"tool_call_id": "0"``); the parser skips it and derives the ids."""
    write_list: bool = False
    """envelope states with ``list``: a derived constraint writes the calls as one JSON list
    (Cohere's ``[{…}, {…}]``), as the template does, rather than one object per call."""
    markup: bool = False
    """skip states: the state's text is markup the format consumes (the id Mistral numbers a call
    with after ``[CALL_ID]``, a message to another recipient). Without it only whitespace is: any
    other text a skip state meets is the model's, shown as content."""
    lead: str = ""
    """capture states: the text a derived constraint writes first when the output enters the
    state through a terminal (Harmony's role ``assistant`` after ``<|start|>``); where the output
    starts in the state, the prompt wrote it."""


@dataclass(frozen=True, slots=True)
class Preset:
    """A model that speaks a format: one ``[[presets]]`` table of the format file."""

    name: str
    tokenizer: str | None
    """A packaged vocabulary's key, or None: no package ships this family's vocabulary, so the
    preset serves only once the user configures the model's tokenizer directory."""
    description: str = ""
    thinking: bool | None = None
    """The chat template's default thinking switch, used when a request leaves it unset."""
    serves: tuple[str, ...] = ()
    """Hugging Face repos whose output this preset parses (informational, shown by ListModels)."""
    eos_token_ids: tuple[int, ...] = ()
    """Ids that end the output, for vocabularies shipped without a generation_config.json or
    tokenizer_config.json that would name them (see ``parsetier.eos``)."""


def _preset(spec: Any, source: str) -> Preset:
    if not isinstance(spec, Mapping) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise GrammarError(f"{source}: every [[presets]] entry needs a name")
    where = f"{source}: preset {spec['name']!r}"
    unknown = set(spec) - {"name", "tokenizer", "description", "thinking", "serves", "eos_token_ids"}
    if unknown:
        raise GrammarError(f"{where}: unknown key(s) {sorted(unknown)}")
    tokenizer = spec.get("tokenizer")
    thinking = spec.get("thinking")
    serves = spec.get("serves", [])
    if tokenizer is not None and (not isinstance(tokenizer, str) or not tokenizer):
        raise GrammarError(f"{where}: tokenizer must be a source key (omit it when none is packaged)")
    if thinking is not None and not isinstance(thinking, bool):
        raise GrammarError(f"{where}: thinking must be true or false")
    if not isinstance(serves, list) or not all(isinstance(r, str) for r in serves):
        raise GrammarError(f"{where}: serves must be a list of repo names")
    eos = spec.get("eos_token_ids", [])
    if not isinstance(eos, list) or not all(isinstance(i, int) and i >= 0 for i in eos):
        raise GrammarError(f"{where}: eos_token_ids must be a list of token ids")
    description = str(spec.get("description", ""))
    return Preset(spec["name"], tokenizer, description, thinking, tuple(serves), tuple(eos))


@dataclass(frozen=True, slots=True)
class Grammar:
    """A format, validated but not yet bound to a vocabulary."""

    name: str
    description: str
    terminals: Mapping[str, str]
    states: Mapping[str, State]
    initial: str
    thinking_off: str | None = None
    """Start state when the request turns thinking off (and the prompt does not say)."""
    thinking_on: str | None = None
    """Start state when the request turns thinking on (and the prompt does not say)."""
    prompt: Mapping[str, str] = field(default_factory=dict)
    """terminal name → start state, decided by the last of these terminals found in the prompt."""
    value_trim: str = "newline"
    """How parameter values are trimmed: ``newline`` drops one leading and one trailing newline."""
    tool_call_id: str = "derived"
    """``derived`` (``chatcmpl-tool-<hex>`` from the request, see ``parsetier.call_ids``) or
    ``format`` (the id the model wrote, e.g. Kimi's)."""
    presets: tuple[Preset, ...] = ()
    """Models that speak this format (the file's ``[[presets]]`` tables)."""
    token_suffix: str = ""
    """A regex: an added token spelled like a marker with this suffix before its closing ``>``
    (Hunyuan Hy3's ``<tool_calls:opensource>``) stands for that marker when the vocabulary has
    no token spelled exactly like it. The suffix is read off the vocabulary, never assumed."""

    @property
    def has_reasoning(self) -> bool:
        return any(s.kind == "reasoning" for s in self.states.values())

    @property
    def has_tool_calls(self) -> bool:
        return any(s.kind in ("json", "envelope", "value", "elements") for s in self.states.values())

    def bind(self, tokenizer: tokenizers.Tokenizer) -> BoundGrammar:
        return BoundGrammar.build(self, tokenizer)


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
    (``Machine.feed``'s fast path; ASCII text is such a piece at once when the flag is set)."""
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


def _transition(where: str, spec: Any) -> Transition:
    if isinstance(spec, str):
        return Transition(spec)
    if isinstance(spec, Mapping) and "next" in spec:
        actions = tuple(spec.get("do", ()))
        bad = set(actions) - ACTIONS
        if bad:
            raise GrammarError(f"{where}: unknown action(s) {sorted(bad)}; known: {sorted(ACTIONS)}")
        follow = tuple(str(t) for t in spec.get("follow", ()))
        return Transition(str(spec["next"]), actions, bool(spec.get("keep", False)), follow)
    raise GrammarError(f"{where}: a transition is a state name or {{next = …, do = [...]}}")


def grammar_from_dict(data: Mapping[str, Any], source: str = "<format>") -> Grammar:
    """Validate a parsed format file (TOML) into a ``Grammar``; every error names ``source``."""
    try:
        name = str(data["name"])
        terminals = {str(k): str(v) for k, v in data.get("terminals", {}).items()}
        raw_states = data["states"]
        initial = str(data["initial"])
    except KeyError as exc:
        raise GrammarError(f"{source}: missing required key {exc.args[0]!r}") from None
    for tname, text in terminals.items():
        if not text:
            raise GrammarError(f"{source}: terminal {tname!r} is empty")
    states: dict[str, State] = {}
    for sname, spec in raw_states.items():
        where = f"{source}: state {sname!r}"
        kind = spec.get("kind")
        if kind not in STATE_KINDS:
            raise GrammarError(f"{where}: kind {kind!r} is not one of {sorted(STATE_KINDS)}")
        on = {}
        for tname, tspec in spec.get("on", {}).items():
            if tname not in terminals:
                raise GrammarError(f"{where}: transition on unknown terminal {tname!r}")
            on[tname] = _transition(f"{where} on {tname!r}", tspec)
            unknown = set(on[tname].follow) - set(terminals) - {"end"}
            if unknown:
                raise GrammarError(f"{where} on {tname!r}: follow names unknown terminals {sorted(unknown)}")
        done = _transition(f"{where} done", spec["done"]) if "done" in spec else None
        end = _transition(f"{where} end", spec["end"]) if "end" in spec else None
        rules = []
        for i, rule in enumerate(spec.get("rules", ())):
            try:
                pattern = re.compile(rule["match"], re.DOTALL)
            except (KeyError, re.error) as exc:
                raise GrammarError(f"{where}: rule {i}: {exc}") from None
            t = _transition(f"{where} rule {i}", {"next": rule.get("next", ""), "do": rule.get("do", ())})
            write = rule.get("write")
            if write is not None and (not isinstance(write, str) or not write):
                raise GrammarError(f"{where}: rule {i}: write must be a non-empty string")
            rules.append(Rule(pattern, t.next, t.actions, write))
        if rules and kind != "capture":
            raise GrammarError(f"{where}: only capture states have rules")
        lead = spec.get("lead", "")
        if not isinstance(lead, str) or (lead and kind != "capture"):
            raise GrammarError(f"{where}: lead is a string, for capture states")
        dialect = str(spec.get("dialect", "json"))
        if dialect not in DIALECTS:
            raise GrammarError(f"{where}: dialect {dialect!r} is not one of {sorted(DIALECTS)}")
        unescape = str(spec.get("unescape", "none"))
        if unescape not in UNESCAPES:
            raise GrammarError(f"{where}: unescape {unescape!r} is not one of {sorted(UNESCAPES)}")
        keys = spec.get("keys", {})
        if not isinstance(keys, Mapping) or set(keys) - {"name", "arguments", "id"}:
            raise GrammarError(f"{where}: keys is a table of 'name', 'arguments' and/or 'id'")
        key_pair = (str(keys.get("name", "name")), str(keys.get("arguments", "arguments")))
        if key_pair[0] not in ENVELOPE_NAME_KEYS or key_pair[1] not in ENVELOPE_ARGUMENT_KEYS:
            names, arguments = sorted(ENVELOPE_NAME_KEYS), sorted(ENVELOPE_ARGUMENT_KEYS)
            raise GrammarError(f"{where}: keys name in {names}, arguments in {arguments}")
        id_key = str(keys.get("id", ""))
        if id_key not in ("", *ENVELOPE_ID_KEYS):
            raise GrammarError(f"{where}: keys id in {sorted(ENVELOPE_ID_KEYS)}")
        write_list = spec.get("write_list", False)
        if not isinstance(write_list, bool) or (write_list and not spec.get("list", False)):
            raise GrammarError(f"{where}: write_list is true or false, for envelope states with list = true")
        states[sname] = State(
            sname,
            kind,
            on,
            done,
            tuple(rules),
            bool(spec.get("list", False)),
            spec.get("text_next"),
            dialect,
            end=end,
            item=str(spec.get("item", "item")),
            unescape=unescape,
            keys=key_pair,
            lead=lead,
            id_key=id_key,
            write_list=write_list,
            markup=_markup(spec, kind, where),
        )
    grammar = Grammar(
        name=name,
        description=str(data.get("description", "")),
        terminals=terminals,
        states=states,
        initial=initial,
        thinking_off=data.get("thinking_off"),
        thinking_on=data.get("thinking_on"),
        prompt={str(k): str(v) for k, v in data.get("prompt", {}).items()},
        value_trim=str(data.get("value_trim", "newline")),
        tool_call_id=str(data.get("tool_call_id", "derived")),
        presets=tuple(_preset(p, source) for p in data.get("presets", ())),
        token_suffix=_token_suffix(data.get("token_suffix", ""), source),
    )
    _check_references(grammar, source)
    return grammar


def _markup(spec: Mapping[str, Any], kind: str, where: str) -> bool:
    markup = spec.get("markup", False)
    if not isinstance(markup, bool) or (markup and kind != "skip"):
        raise GrammarError(f"{where}: markup is true or false, for skip states")
    return markup


def _token_suffix(value: Any, source: str) -> str:
    if not isinstance(value, str):
        raise GrammarError(f"{source}: token_suffix must be a regex string")
    try:
        regex.compile(value)
    except regex.error as exc:
        raise GrammarError(f"{source}: token_suffix: {exc}") from None
    return value


def _check_references(g: Grammar, source: str) -> None:
    names = set(g.states)

    def need(state: str, where: str) -> None:
        if state and state not in names:
            raise GrammarError(f"{source}: {where} names unknown state {state!r}")

    need(g.initial, "initial")
    need(g.thinking_off or "", "thinking_off")
    need(g.thinking_on or "", "thinking_on")
    for tname, state in g.prompt.items():
        if tname not in g.terminals:
            raise GrammarError(f"{source}: prompt names unknown terminal {tname!r}")
        need(state, f"prompt[{tname}]")
    for s in g.states.values():
        need(s.text_next or "", f"state {s.name!r} text_next")
        for tname, t in s.on.items():
            need(t.next, f"state {s.name!r} on {tname!r}")
        if s.done:
            need(s.done.next, f"state {s.name!r} done")
        if s.end:
            need(s.end.next, f"state {s.name!r} end")
        for r in s.rules:
            need(r.next, f"state {s.name!r} rule")
        if s.kind == "elements" and "tag" not in g.terminals:
            raise GrammarError(f"{source}: state {s.name!r} reads elements: it needs a terminal named 'tag'")
    if g.value_trim not in ("newline", "none"):
        raise GrammarError(f"{source}: value_trim must be 'newline' or 'none'")
    if g.tool_call_id not in ("derived", "format"):
        raise GrammarError(f"{source}: tool_call_id must be 'derived' or 'format'")
