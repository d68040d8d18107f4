"""Validating a ``response_template`` the way ``transformers`` does, with every error located.

``transformers`` (``utils/chat_parsing/response_templates.py``) refuses a template for a fixed set
of reasons: unknown keys at the top or in a field, another ``version`` than 1, ``defaults`` that is
no table, no fields, a field that is no table, an unknown content parser, both a literal and a
pattern for one anchor, an empty or mistyped literal list, a regex that does not compile,
``join`` without ``repeats``, ``transform_each`` that is no boolean or has no ``transform``, a
transform string that mixes a ``{placeholder}`` with text, named groups no transform reads, more
than one field without an opener, and no start anchor. This module refuses exactly those
templates (``tests/test_response_template.py`` checks each against ``transformers`` itself), and
says where: ``response_template.fields.tool_calls.open_pattern: …``. What it returns is the
template as plain values (``Template``), ready for ``compile.py``.
"""

from __future__ import annotations

import re as _stdlib_re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import regex

from parsetier.engine.grammar import GrammarError

TOP_KEYS = frozenset({"version", "defaults", "fields", "start_anchor", "start_anchor_pattern"})
FIELD_KEYS = frozenset(
    {
        "open",
        "open_pattern",
        "close",
        "close_pattern",
        "content",
        "content_args",
        "repeats",
        "join",
        "optional",
        "transform",
        "transform_each",
    }
)
CONTENT_PARSERS = frozenset(
    {"text", "int", "float", "bool", "json", "xml-inline", "kv-lines", "python-call-list"}
)
"""The content parsers ``transformers`` knows; a template naming another is refused."""

_PLACEHOLDER = _stdlib_re.compile(r"\{(\w+(?:\.\w+)*)\}")


class TemplateError(GrammarError):
    """A ``response_template`` that ``transformers`` would refuse, or that parsetier cannot compile;
    the message names the template's source and the offending key."""


@dataclass(frozen=True, slots=True)
class Anchor:
    """One anchor: literal alternatives (``open``/``close``/``start_anchor``) or a regex
    (``*_pattern``), as the template wrote it."""

    key: str
    """The template key it came from (``open``, ``close_pattern``, ...), for error messages."""
    literals: tuple[str, ...] | None
    pattern: str | None
    groups: frozenset[str] = frozenset()
    """Named groups of a pattern."""


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    open: Anchor | None
    close: Anchor | None
    content: str
    content_args: Mapping[str, Any]
    repeats: bool
    join: str | None
    optional: bool
    transform: Any
    transform_each: bool


@dataclass(frozen=True, slots=True)
class Template:
    """A validated ``response_template``: its fields in order, the implicit field (the one without an
    opener, which takes the text outside every other region), the start anchor and the defaults."""

    source: str
    fields: Mapping[str, Field]
    implicit: str | None
    start_anchor: Anchor
    defaults: Mapping[str, Any] = field(default_factory=dict)


def _anchor(where: str, spec: Mapping[str, Any], literal_key: str, pattern_key: str) -> Anchor | None:
    if literal_key in spec and pattern_key in spec:
        raise TemplateError(f"{where}: give {literal_key!r} or {pattern_key!r}, not both")
    if literal_key in spec:
        raw = spec[literal_key]
        if isinstance(raw, str):
            literals = [raw]
        elif isinstance(raw, list):
            if not raw:
                raise TemplateError(f"{where}.{literal_key}: an empty list matches nothing")
            if not all(isinstance(s, str) for s in raw):
                raise TemplateError(f"{where}.{literal_key}: every item of the list must be a string")
            literals = list(dict.fromkeys(raw))
        else:
            raise TemplateError(
                f"{where}.{literal_key}: a string or a list of strings, not {type(raw).__name__}"
            )
        if "" in literals:
            raise TemplateError(f"{where}.{literal_key}: a literal may not be empty")
        return Anchor(literal_key, tuple(literals), None)
    if pattern_key in spec:
        pattern = spec[pattern_key]
        if not isinstance(pattern, str):
            raise TemplateError(f"{where}.{pattern_key}: a regex string, not {type(pattern).__name__}")
        try:
            compiled = regex.compile(pattern, regex.DOTALL)
        except regex.error as exc:
            raise TemplateError(f"{where}.{pattern_key}: the regex does not compile: {exc}") from None
        return Anchor(pattern_key, None, pattern, frozenset(compiled.groupindex))
    return None


def _transform_strings(where: str, transform: Any) -> None:
    if isinstance(transform, Mapping):
        for key, value in transform.items():
            _transform_strings(f"{where}.{key}", value)
    elif isinstance(transform, list):
        for i, value in enumerate(transform):
            _transform_strings(f"{where}[{i}]", value)
    elif (
        isinstance(transform, str)
        and _PLACEHOLDER.search(transform)
        and not _PLACEHOLDER.fullmatch(transform)
    ):
        raise TemplateError(
            f"{where}: {transform!r} mixes a {{placeholder}} with text; a transform string is a "
            'whole placeholder ("{content}") or plain text'
        )


def _field(source: str, name: str, spec: Any) -> Field:
    where = f"{source}: response_template.fields.{name}"
    if not isinstance(spec, Mapping):
        raise TemplateError(f"{where}: a field is a table, not {type(spec).__name__}")
    unknown = set(spec) - FIELD_KEYS
    if unknown:
        raise TemplateError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(FIELD_KEYS)}")
    content = spec.get("content", "text")
    if content not in CONTENT_PARSERS:
        raise TemplateError(f"{where}.content: unknown parser {content!r}; known: {sorted(CONTENT_PARSERS)}")
    open_ = _anchor(where, spec, "open", "open_pattern")
    close = _anchor(where, spec, "close", "close_pattern")
    join = spec.get("join")
    repeats = spec.get("repeats", False)
    if join is not None and not isinstance(join, str):
        raise TemplateError(f"{where}.join: a string, not {type(join).__name__}")
    if join is not None and not repeats:
        raise TemplateError(f"{where}.join: needs repeats = true")
    transform = spec.get("transform")
    transform_each = spec.get("transform_each", False)
    if not isinstance(transform_each, bool):
        raise TemplateError(f"{where}.transform_each: true or false, not {type(transform_each).__name__}")
    if transform_each and transform is None:
        raise TemplateError(f"{where}.transform_each: set, but the field has no transform")
    if transform is not None:
        _transform_strings(f"{where}.transform", transform)
    else:
        named = sorted((open_.groups if open_ else frozenset()) | (close.groups if close else frozenset()))
        if named:
            raise TemplateError(
                f"{where}: its patterns name group(s) {named}, which only a transform can read; add a "
                "transform that uses them, or drop the names"
            )
    args = spec.get("content_args", {})
    return Field(
        name=name,
        open=open_,
        close=close,
        content=content,
        content_args=args if isinstance(args, Mapping) else {},
        repeats=bool(repeats),
        join=join,
        optional=bool(spec.get("optional", True)),
        transform=transform,
        transform_each=transform_each,
    )


def validate(spec: Any, source: str = "<response_template>") -> Template:
    """``spec`` (the ``response_template`` value) validated as ``transformers`` validates it;
    ``TemplateError`` names ``source`` and the key at fault."""
    where = f"{source}: response_template"
    if not isinstance(spec, Mapping):
        raise TemplateError(f"{where}: a table, not {type(spec).__name__}")
    version = spec.get("version", 1)
    if version != 1:
        raise TemplateError(f"{where}.version: {version!r} is not supported (only 1)")
    unknown = set(spec) - TOP_KEYS
    if unknown:
        raise TemplateError(f"{where}: unknown key(s) {sorted(unknown)}; known: {sorted(TOP_KEYS)}")
    defaults = spec.get("defaults", {})
    if not isinstance(defaults, Mapping):
        raise TemplateError(f"{where}.defaults: a table, not {type(defaults).__name__}")
    fields_spec = spec.get("fields", {})
    if not isinstance(fields_spec, Mapping) or not fields_spec:
        raise TemplateError(f"{where}.fields: a table of at least one field")
    fields = {str(name): _field(source, str(name), value) for name, value in fields_spec.items()}
    implicit = [name for name, f in fields.items() if f.open is None]
    if len(implicit) > 1:
        raise TemplateError(
            f"{where}.fields: only one field may go without open/open_pattern (it takes the text "
            f"outside the other regions); these do: {', '.join(implicit)}"
        )
    start = _anchor(where, spec, "start_anchor", "start_anchor_pattern")
    if start is None:
        raise TemplateError(f"{where}: needs start_anchor or start_anchor_pattern")
    return Template(source, fields, implicit[0] if implicit else None, start, dict(defaults))


def literal_list(anchor: Anchor) -> Sequence[str]:
    """An anchor's literal alternatives (empty for a pattern)."""
    return anchor.literals or ()
