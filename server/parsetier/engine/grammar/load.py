"""Loading a format file: a parsed TOML table validated into a ``Grammar``.

Every check a format file must pass before it can be bound lives here, and every error names
the file and the offending part (``GrammarError``): a format that cannot work fails at load,
never at parse time.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import regex

from parsetier.engine.grammar.schema import (
    ACTIONS,
    DIALECTS,
    ENVELOPE_ARGUMENT_KEYS,
    ENVELOPE_ID_KEYS,
    ENVELOPE_NAME_KEYS,
    STATE_KINDS,
    UNESCAPES,
    Grammar,
    GrammarError,
    Preset,
    Rule,
    State,
    Transition,
)


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


def _transition(where: str, spec: Any) -> Transition:
    if isinstance(spec, str):
        return Transition(spec)
    if isinstance(spec, Mapping) and "next" in spec:
        actions = tuple(spec.get("do", ()))
        bad = set(actions) - ACTIONS
        if bad:
            raise GrammarError(f"{where}: unknown action(s) {sorted(bad)}; known: {sorted(ACTIONS)}")
        follow = tuple(str(t) for t in spec.get("follow", ()))
        turn = spec.get("ends_turn", {})
        if not isinstance(turn, Mapping) or set(turn) - {"close", "unless"} or (turn and "close" not in turn):
            raise GrammarError(f"{where}: ends_turn is {{close = terminal, unless = [terminals]}}")
        close = str(turn.get("close", ""))
        unless = tuple(str(t) for t in turn.get("unless", ()))
        return Transition(str(spec["next"]), actions, bool(spec.get("keep", False)), follow, close, unless)
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
            unknown = {on[tname].turn_close, *on[tname].turn_unless} - set(terminals) - {""}
            if unknown:
                raise GrammarError(f"{where} on {tname!r}: ends_turn names unknown {sorted(unknown)}")
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
