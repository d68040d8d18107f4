"""A validated ``response_template`` compiled into a format file's table (the TOML schema of
``docs/formats.md``), which ``grammar_from_dict`` then validates like any format file: both engines
and the constraint derivation take the result unchanged.

The mapping (docs/formats.md, *Response templates*):

* the field without an opener (``content``) is the base state, ``kind = "content"``; with no
  such field the base state is a ``markup`` skip state (the template drops that text);
* a text field with an opener (``reasoning_content``, ``thinking``) is a state of its kind,
  entered on its opener from the base state and left on its closer;
* ``tool_calls`` is a call: ``json`` content with ``{"function": "{content}"}`` is an envelope
  state; an opener capturing ``name`` leads to a capture state ended by the literal after the
  group (or by the ``{`` that starts ``json`` content) and then a ``json`` state (``gemma``
  dialect for ``unquoted_keys`` with one ``string_delims`` pair) or, for ``xml-inline``, a skip
  state whose ``tag_pattern`` becomes key capture and value states; ``python-call-list`` with
  ``transform_each`` is a pythonic envelope;
* ``\\s*`` in an anchor is whitespace the skip states between markers consume; literals are
  terminals, bound by id where they are added tokens;
* the start anchor and the text fields' literal openers and closers form the ``[prompt]`` table,
  so the prompt's tail decides where the output starts, as ``transformers``' prefix does.

What it cannot say raises ``TemplateError`` naming the key.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from parsetier.formats.response_template.anchors import Capture, Lit, Part, Unsupported, Value, Ws, parts
from parsetier.formats.response_template.validate import Anchor, Field, Template, TemplateError

REASONING_FIELDS = frozenset({"reasoning_content", "reasoning", "thinking"})
"""Text fields delivered as reasoning (``transformers`` serving reads ``reasoning_content`` and,
for older templates, ``thinking``)."""

_PLACEHOLDER = re.compile(r"\{(\w+)\}")


class _Builder:
    """Terminals and states as they are made, with the checks a hand-written file would get."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.terminals: dict[str, str] = {}
        self._by_text: dict[str, str] = {}
        self.states: dict[str, dict[str, Any]] = {}
        self._via: dict[tuple[str, tuple[str, ...]], str] = {}
        self.value_trim = "newline"

    def term(self, text: str, hint: str) -> str:
        if text in self._by_text:
            return self._by_text[text]
        name, n = hint, 1
        while name in self.terminals:
            n += 1
            name = f"{hint}_{n}"
        self.terminals[name] = text
        self._by_text[text] = name
        return name

    def named(self, name: str, text: str) -> None:
        """A terminal the engine knows by its name (``quote`` for the notation dialect)."""
        if name in self.terminals or text in self._by_text:
            raise TemplateError(f"{self.source}: response_template: the marker {text!r} is used twice")
        self.terminals[name] = text
        self._by_text[text] = name

    def state(self, name: str, kind: str, **options: Any) -> str:
        if name not in self.states:
            self.states[name] = {"kind": kind, "on": {}, **options}
        return name

    def on(self, where: str, state: str, text: str, target: Any, hint: str) -> None:
        terminal = self.term(text, hint)
        on = self.states[state]["on"]
        if terminal in on and on[terminal] != target:
            raise TemplateError(
                f"{self.source}: response_template.{where}: parsetier cannot serve this: "
                f"the marker {text!r} would lead to two places in state {state!r}"
            )
        on[terminal] = target

    def chain(
        self, where: str, start: str, path: Sequence[str], target: str, hint: str, do: Sequence[str] = ()
    ) -> None:
        """``start`` --path[0]--> … --path[-1]--> ``target``, through skip states that take the
        whitespace between the literals; ``do`` runs on the first literal. A literal followed by
        another counts only where that one follows (after optional whitespace) or the output
        ends (``follow``): the template's regex matches the whole path or nothing, so
        ``</function> then`` inside a value is no closer."""
        here = start
        for i, text in enumerate(path):
            last = i == len(path) - 1
            if last:
                nxt = target
            else:
                key = (hint, tuple(path[: i + 1]))
                nxt = self._via.get(key) or self.state(f"{hint}_via{len(self._via) + 1}", "skip")
                self._via[key] = nxt
            spec: Any = nxt
            if (do and i == 0) or not last:
                spec = {"next": nxt, "do": list(do) if i == 0 else []}
                if not last:
                    spec["follow"] = [self.term(path[i + 1], hint), "end"]
            self.on(where, here, text, spec, hint)
            here = nxt


def _unsupported(template: Template, where: str, why: str) -> TemplateError:
    return TemplateError(f"{template.source}: response_template.{where}: parsetier cannot serve this: {why}")


def _alternatives(
    template: Template, where: str, anchor: Anchor, value_group: bool = False
) -> list[list[Part]]:
    if anchor.literals is not None:
        return [[Lit(text)] for text in anchor.literals]
    assert anchor.pattern is not None
    try:
        return parts(anchor.pattern, value_group)
    except Unsupported as exc:
        raise _unsupported(template, f"{where}.{anchor.key}", str(exc)) from None


def _strip(alt: Sequence[Part]) -> list[Part]:
    out = list(alt)
    while out and isinstance(out[0], Ws):
        out.pop(0)
    while out and isinstance(out[-1], Ws):
        out.pop()
    return out


def _literals(template: Template, where: str, alt: Sequence[Part]) -> list[str]:
    """A path of literals (whitespace between them is the skip states')."""
    out = []
    for part in _strip(alt):
        if isinstance(part, Lit):
            out.append(part.text)
        elif not isinstance(part, Ws):
            raise _unsupported(template, where, "this anchor may hold only literals and optional whitespace")
    if not out:
        raise _unsupported(template, where, "an anchor of whitespace only marks nothing")
    return out


def _kind(template: Template, f: Field) -> str:
    where = f"fields.{f.name}"
    if f.name == "tool_calls":
        return "calls"
    if f.content != "text" or f.transform is not None:
        raise _unsupported(
            template,
            where,
            "besides tool_calls, fields are delivered as text (content parser 'text', no transform)",
        )
    if f.name in REASONING_FIELDS:
        return "reasoning"
    if f.name == "content":
        return "content"
    raise _unsupported(
        template,
        where,
        f"a message has reasoning ({', '.join(sorted(REASONING_FIELDS))}), content and tool_calls; "
        f"no place for {f.name!r}",
    )


def compile_template(template: Template, name: str, special_tokens: Collection[str] = ()) -> dict[str, Any]:
    """The format table of ``template`` (format name ``name``). ``special_tokens``: the vocabulary's
    special tokens; a closer of the implicit field that is one (``<|im_end|>``) needs no terminal,
    since special tokens no terminal uses never reach the output."""
    b = _Builder(template.source)
    kinds = {f.name: _kind(template, f) for f in template.fields.values()}
    if template.implicit is not None and kinds[template.implicit] != "content":
        raise _unsupported(
            template, f"fields.{template.implicit}", "only the content field may go without an opener"
        )
    base = template.implicit or "outside"
    if template.implicit is None:
        b.state(base, "skip", markup=True)
    else:
        b.state(base, "content")
    prompt: dict[str, str] = {}
    for f in template.fields.values():
        if kinds[f.name] == "calls":
            _calls(b, template, f, base)
        else:
            _text_field(b, template, f, kinds[f.name], base, prompt, special_tokens)
    start_alts = _alternatives(template, "start_anchor", template.start_anchor)
    for i, alt in enumerate(start_alts):
        stripped = _strip(alt)
        if len(stripped) == 1 and isinstance(stripped[0], Lit):
            prompt[b.term(stripped[0].text, "start" if i == 0 else f"start_{i + 1}")] = base
    for state in b.states.values():
        if not state["on"]:
            del state["on"]
    return {
        "name": name,
        "description": "from the model's response_template",
        "initial": base,
        "value_trim": b.value_trim,
        "terminals": dict(b.terminals),
        "prompt": prompt,
        "states": b.states,
    }


def _text_field(
    b: _Builder,
    template: Template,
    f: Field,
    kind: str,
    base: str,
    prompt: dict[str, str],
    special_tokens: Collection[str],
) -> None:
    where = f"fields.{f.name}"
    if f.name == template.implicit:
        if f.close is None:
            return
        for alt in _alternatives(template, where, f.close):
            path = _literals(template, f"{where}.{f.close.key}", alt)
            if len(path) == 1 and path[0] in special_tokens:
                continue  # dropped wherever it appears, as every unused special token is
            b.chain(f"{where}.{f.close.key}", base, path, base, f"{f.name}_close")
        return
    state = b.state(f.name, kind)
    assert f.open is not None
    for alt in _alternatives(template, where, f.open):
        path = _literals(template, f"{where}.{f.open.key}", alt)
        b.chain(f"{where}.{f.open.key}", base, path, state, f"{f.name}_open")
        if len(path) == 1:
            prompt[b.term(path[0], f"{f.name}_open")] = state
    if f.close is None:
        return
    for alt in _alternatives(template, where, f.close):
        path = _literals(template, f"{where}.{f.close.key}", alt)
        b.chain(f"{where}.{f.close.key}", state, path, base, f"{f.name}_close")
        if len(path) == 1:
            prompt[b.term(path[0], f"{f.name}_close")] = base


def _call_style(template: Template, f: Field) -> tuple[str, str | None]:
    """(``whole``: the content is the function object; ``named``: the name is a capture and the
    content the arguments; ``each``: a list of {name, arguments}), and the name's group."""
    where = f"fields.{f.name}.transform"
    t = f.transform
    if not isinstance(t, Mapping) or t.get("type", "function") != "function" or set(t) - {"type", "function"}:
        raise _unsupported(template, where, 'a tool call is {"type": "function", "function": …}')
    fn = t.get("function")
    if fn == "{content}" and not f.transform_each:
        return "whole", None
    if isinstance(fn, Mapping) and set(fn) == {"name", "arguments"} and isinstance(fn["name"], str):
        m = _PLACEHOLDER.fullmatch(fn["name"])
        if f.transform_each and m and m.group(1) == "name" and fn["arguments"] == "{arguments}":
            return "each", None
        if not f.transform_each and m and fn["arguments"] == "{content}":
            return "named", m.group(1)
    raise _unsupported(
        template,
        where,
        'the function is "{content}", or {"name": "{<group>}", "arguments": "{content}"} '
        '(with transform_each: {"name": "{name}", "arguments": "{arguments}"})',
    )


def _json_dialect(b: _Builder, template: Template, f: Field) -> str:
    args = f.content_args
    where = f"fields.{f.name}.content_args"
    unknown = set(args) - {"unquoted_keys", "string_delims", "allow_non_json"}
    if unknown:
        raise _unsupported(template, where, f"json content takes no {sorted(unknown)}")
    delims = args.get("string_delims") or []
    if not delims and not args.get("unquoted_keys"):
        return "json"
    ok = (
        args.get("unquoted_keys") is True
        and isinstance(delims, list)
        and len(delims) == 1
        and isinstance(delims[0], list)
        and len(delims[0]) == 2
        and delims[0][0] == delims[0][1]
        and isinstance(delims[0][0], str)
        and delims[0][0]
    )
    if not ok:
        raise _unsupported(
            template,
            where,
            "relaxed JSON is read as object notation: unquoted_keys with one string_delims pair whose "
            "opener and closer are the same marker",
        )
    b.named("quote", delims[0][0])  # the notation reader finds its delimiter by this name
    return "gemma"


def _calls(b: _Builder, template: Template, f: Field, base: str) -> None:
    where = f"fields.{f.name}"
    if f.open is None:
        raise _unsupported(template, where, "tool calls need an opener")
    style, group = _call_style(template, f)
    state = f.name
    close_alts = (
        [
            _literals(template, f"{where}.{f.close.key}", alt)
            for alt in _alternatives(template, where, f.close)
        ]
        if f.close is not None
        else []
    )
    done: dict[str, Any] | None = None if close_alts else {"next": base, "do": ["call_end"]}
    value_state: str | None = None
    param_opener: tuple[list[str], str] | None = None
    if f.content == "json" and style == "whole":
        if f.content_args:
            raise _unsupported(template, f"{where}.content_args", "a whole function object is plain JSON")
        b.state(state, "envelope", list=True, **({"done": done} if done else {}))
    elif f.content == "json" and style == "named":
        dialect = _json_dialect(b, template, f)
        b.state(state, "json", dialect=dialect, **({"done": done} if done else {}))
    elif f.content == "python-call-list" and style == "each":
        b.state(state, "envelope", list=True, dialect="python", **({"done": done} if done else {}))
    elif f.content == "xml-inline" and style == "named":
        if not close_alts:
            raise _unsupported(template, where, "xml-inline calls need a closer")
        b.state(state, "skip")
        value_state, param_opener = _xml_params(b, template, f, state)
    else:
        raise _unsupported(
            template,
            where,
            f"content {f.content!r} with this transform (json, xml-inline with a captured name, or "
            "python-call-list with transform_each)",
        )
    _call_openers(b, template, f, base, state, group, close_alts, param_opener)
    for path in close_alts:
        b.chain(f"{where}.{f.close.key}", state, path, base, f"{f.name}_close", do=["call_end"])  # type: ignore[union-attr]
        if value_state is not None:
            b.chain(
                f"{where}.{f.close.key}",  # type: ignore[union-attr]
                value_state,
                path,
                base,
                f"{f.name}_close",
                do=["param_end", "call_end"],
            )


def _call_openers(
    b: _Builder,
    template: Template,
    f: Field,
    base: str,
    state: str,
    group: str | None,
    close_alts: list[list[str]],
    param_opener: tuple[list[str], str] | None,
) -> None:
    """The opener's paths into the call. A captured name ends at the literal after its group; with
    none, at the ``{`` of ``json`` content (kept for the reader), or for ``xml-inline`` at a
    parameter's opener (kept), the call's closer (a call without arguments) or a character its
    class leaves out (``[^\n<]+`` ends at a newline)."""
    assert f.open is not None
    where = f"fields.{f.name}.{f.open.key}"
    for alt in _alternatives(template, f"fields.{f.name}", f.open):
        alt = _strip(alt)
        captures = [i for i, p in enumerate(alt) if isinstance(p, Capture)]
        if group is None:
            b.chain(where, base, _literals(template, where, alt), state, f"{f.name}_open")
            continue
        if len(captures) != 1 or getattr(alt[captures[0]], "name", None) != group:
            raise _unsupported(
                template, where, f"the opener must capture the name as the group {group!r}, once"
            )
        before, after = alt[: captures[0]], _strip(alt[captures[0] + 1 :])
        name_state = b.state(f"{f.name}_name", "capture")
        b.chain(where, base, _literals(template, where, before), name_state, f"{f.name}_open")
        if after:
            path = _literals(template, where, after)
            b.chain(where, name_state, path, state, "name_end", do=["call_begin"])
            capture = alt[captures[0]]
            assert isinstance(capture, Capture)
            for char in capture.stops:  # the name cannot hold it: no call (the opener is the model's text)
                if char != path[0][:1]:
                    b.on(where, name_state, char, base, "name_stop")
        elif f.content == "json":
            b.on(where, name_state, "{", {"next": state, "do": ["call_begin"], "keep": True}, "brace")
        elif param_opener is not None:
            # The name runs to the first parameter (stripped: GLM-4.5's newline after it is
            # markup), or to the closer or the end of the output (a call without arguments);
            # an empty name is no call, as the group needs a character.
            opener, key_state = param_opener
            b.chain(where, name_state, opener, key_state, "param_open", do=["call_begin"])
            for path in close_alts:
                b.chain(where, name_state, path, base, f"{f.name}_close", do=["call_begin", "call_end"])
            b.states[name_state]["rules"] = [{"match": r"^\s*$"}]
            b.states[name_state]["end"] = {"next": base, "do": ["call_begin", "call_end"]}
            continue
        else:
            raise _unsupported(template, where, "a literal must end the captured name")
        for path in close_alts:  # a closer before the arguments: no call
            b.chain(where, name_state, path, base, f"{f.name}_close")


def _xml_params(b: _Builder, template: Template, f: Field, body: str) -> tuple[str, tuple[list[str], str]]:
    """``xml-inline``'s tag_pattern as states: key capture, value; returns the value state, and
    a parameter's opener with the key state it leads to."""
    where = f"fields.{f.name}.content_args"
    args = f.content_args
    unknown = set(args) - {"tag_pattern", "value_parser", "merge_duplicates"}
    if unknown:
        raise _unsupported(template, where, f"xml-inline here takes no {sorted(unknown)}")
    pattern = args.get("tag_pattern")
    if not isinstance(pattern, str):
        raise TemplateError(f"{template.source}: response_template.{where}.tag_pattern: xml-inline needs one")
    try:
        alts = parts(pattern, value_group=True)
    except Unsupported as exc:
        raise _unsupported(template, f"{where}.tag_pattern", str(exc)) from None
    if len(alts) != 1:
        raise _unsupported(template, f"{where}.tag_pattern", "one spelling of a parameter, no alternatives")
    seq = _strip(alts[0])
    keys = [i for i, p in enumerate(seq) if isinstance(p, Capture) and p.name == "key"]
    values = [i for i, p in enumerate(seq) if isinstance(p, Value)]
    others = [p for p in seq if isinstance(p, Capture) and p.name != "key"]
    if len(keys) != 1 or len(values) != 1 or others or keys[0] > values[0]:
        raise _unsupported(
            template,
            f"{where}.tag_pattern",
            "a parameter is: opener, (?P<key>…), literals, (?P<value>.*?), closer",
        )
    k, v = keys[0], values[0]
    before, between, after = seq[:k], _strip(seq[k + 1 : v]), _strip(seq[v + 1 :])
    if not between or not isinstance(between[0], Lit):
        raise _unsupported(template, f"{where}.tag_pattern", "a literal must end the key")
    key_state = b.state(f"{f.name}_key", "capture")
    value_state = b.state(f"{f.name}_value", "value")
    tag = f"{where}.tag_pattern"
    opener = _literals(template, tag, before)
    b.chain(tag, body, opener, key_state, "param_open")
    b.chain(tag, key_state, _literals(template, tag, between), value_state, "key_end", do=["param_begin"])
    b.chain(tag, value_state, _literals(template, tag, after), body, "param_close", do=["param_end"])
    # ``\s*`` beside the value: the template's newlines around it are markup (one each side, as
    # the XML format files take them); without it the value is verbatim.
    spaced = isinstance(seq[v - 1], Ws) or (v + 1 < len(seq) and isinstance(seq[v + 1], Ws))
    b.value_trim = "newline" if spaced else "none"
    return value_state, (opener, key_state)
