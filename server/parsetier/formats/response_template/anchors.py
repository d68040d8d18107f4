"""An anchor as a sequence of parts the grammar can say: literal text, optional whitespace, a named
capture that a following literal (or the content) ends, and ``xml-inline``'s value.

A format file's terminals are literal texts, so a regex anchor is compiled only when it is made of
such parts: ``\\s*<tool_call>\\s*<function=(?P<name>[^>\\n]+)>`` is whitespace, ``<tool_call>``,
whitespace, ``<function=``, the capture ``name``, ``>``. Alternations of literals (``(?:a|b)``)
and optional parts (``(?:<wrapper>)?``) expand into alternative sequences. Anything else
(lookarounds, backreferences, a repeated literal, a character class standing alone) is refused
with ``Unsupported``, naming the construct: the template is valid, but parsetier cannot serve it
without a format file.
"""

from __future__ import annotations

import re
import re._constants as sre  # the standard library's own regex parser: what a pattern is made of
import re._parser as sre_parse
from dataclasses import dataclass

MAX_ALTERNATIVES = 64
"""An anchor expanding into more literal sequences than this is refused (each is a terminal path)."""


class Unsupported(ValueError):
    """A valid regex the grammar cannot express."""


@dataclass(frozen=True, slots=True)
class Lit:
    text: str


@dataclass(frozen=True, slots=True)
class Ws:
    """Optional whitespace: markup the grammar skips between markers."""


@dataclass(frozen=True, slots=True)
class Capture:
    """A named group: text up to whatever ends it (the next literal, or the content)."""

    name: str
    stops: tuple[str, ...] = ()
    """Characters a negated class (``[^>\n]+``) leaves out: the group cannot hold them."""


@dataclass(frozen=True, slots=True)
class Value:
    """``xml-inline``'s ``(?P<value>.*?)``: one parameter value."""


Part = Lit | Ws | Capture | Value


def parts(pattern: str, value_group: bool = False) -> list[list[Part]]:
    """The alternatives of ``pattern``, each a list of parts (adjacent literals merged).
    ``value_group``: a group named ``value`` is ``xml-inline``'s value, not a capture."""
    try:
        parsed = sre_parse.parse(pattern, re.DOTALL)
    except re.error as exc:
        raise Unsupported(f"the pattern uses syntax outside Python's re: {exc}") from None
    names = {index: name for name, index in parsed.state.groupdict.items()}
    alternatives = _sequence(list(parsed), names, value_group)
    return [_merge(alt) for alt in alternatives]


def literal_parts(text: str) -> list[list[Part]]:
    return [[Lit(text)]]


def _merge(alt: list[Part]) -> list[Part]:
    out: list[Part] = []
    for part in alt:
        if isinstance(part, Lit) and out and isinstance(out[-1], Lit):
            out[-1] = Lit(out[-1].text + part.text)
        elif isinstance(part, Ws) and out and isinstance(out[-1], Ws):
            continue
        else:
            out.append(part)
    return out


def _sequence(items: list, names: dict[int, str], value_group: bool) -> list[list[Part]]:
    alternatives: list[list[Part]] = [[]]
    for op, av in items:
        options = _item(op, av, names, value_group)
        alternatives = [a + o for a in alternatives for o in options]
        if len(alternatives) > MAX_ALTERNATIVES:
            raise Unsupported(f"the pattern expands into more than {MAX_ALTERNATIVES} literal sequences")
    return alternatives


def _item(op, av, names: dict[int, str], value_group: bool) -> list[list[Part]]:
    if op is sre.LITERAL:
        return [[Lit(chr(av))]]
    if op is sre.BRANCH:
        return [alt for branch in av[1] for alt in _sequence(list(branch), names, value_group)]
    if op is sre.SUBPATTERN:
        group, _add, _del, sub = av
        name = names.get(group) if group is not None else None
        if name is None:
            return _sequence(list(sub), names, value_group)
        if not _is_run(list(sub)):
            raise Unsupported(f"the group {name!r} must be a run of characters (such as [^>]+, \\w+ or .*?)")
        return [[Value() if (value_group and name == "value") else Capture(name, _excluded(list(sub)))]]
    if op in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        low, high, sub = av
        if low == 0 and _is_space(list(sub)):
            return [[Ws()]]
        if low == 0 and high == 1:  # an optional part: the sequences with it and without it
            return [[], *_sequence(list(sub), names, value_group)]
        raise Unsupported("a repeat other than optional whitespace (\\s*) or an optional part (?)")
    if op is sre.IN and len(av) == 1 and av[0][0] is sre.LITERAL:
        return [[Lit(chr(av[0][1]))]]
    raise Unsupported(f"the construct {str(op).lower()} has no place in a marker")


def _is_run(sub: list) -> bool:
    """A repeat of one character set, or of any character: what a capture may be."""
    if len(sub) != 1 or sub[0][0] not in (sre.MAX_REPEAT, sre.MIN_REPEAT):
        return False
    inner = list(sub[0][1][2])
    return len(inner) == 1 and inner[0][0] in (sre.IN, sre.ANY, sre.NOT_LITERAL, sre.CATEGORY)


def _excluded(sub: list) -> tuple[str, ...]:
    """The literal characters of a negated class the run repeats (``[^>\n]`` → ``>``, ``\n``)."""
    inner = list(sub[0][1][2])
    if inner[0][0] is sre.NOT_LITERAL:
        return (chr(inner[0][1]),)
    if inner[0][0] is not sre.IN or not inner[0][1] or inner[0][1][0][0] is not sre.NEGATE:
        return ()
    return tuple(chr(v) for kind, v in inner[0][1][1:] if kind is sre.LITERAL)


_SPACE = frozenset(" \t\n\r\f\v")


def _is_space(sub: list) -> bool:
    """A single item matching whitespace only (``\\s``, ``\\n``, ``[ \\t]``)."""
    if len(sub) != 1:
        return False
    op, av = sub[0]
    if op is sre.LITERAL:
        return chr(av) in _SPACE
    if op is sre.IN:
        for kind, value in av:
            if kind is sre.CATEGORY and value is sre.CATEGORY_SPACE:
                continue
            if kind is sre.LITERAL and chr(value) in _SPACE:
                continue
            return False
        return True
    return False
