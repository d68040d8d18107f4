"""Bounds on every JSON value the server reads: from clients (``tools_json``, ``parameters_json``)
and from the model (tool-call arguments).

Python's ``json`` recurses once per nesting level, so a value nested about a thousand deep raises
``RecursionError`` (a bug report, not a status), and integers past 4300 digits raise a
``ValueError`` about ``sys.set_int_max_str_digits``. Real tool schemas and arguments nest a
handful of levels deep; ``MAX_DEPTH`` leaves ample room above that and far below the recursion
limit, so everything that reads JSON (this module's ``loads``, the streaming scanner, the
pythonic and Gemma readers) can refuse deeper values with an ordinary ``ValueError`` before any
recursion happens.
"""

from __future__ import annotations

import json
import math
import re
from itertools import accumulate
from typing import Any

MAX_DEPTH = 128
"""Deepest nesting of arrays and objects accepted in any JSON value."""
MAX_NUMBER_DIGITS = 4300
"""Longest integer literal accepted (Python's own limit on int/str conversion)."""

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_SAME_BRACKETS = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_RUN = re.compile(rb"\[+|\]+")
_PEEL_PASSES = 8
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile("[\ud800-\udfff]")


class JsonBoundsError(ValueError):
    """A JSON value nested deeper, or with a number longer, than the bounds allow."""


def nesting_depth(text: str) -> int:
    """How deep arrays and objects nest in ``text`` (string contents not counted).

    Linear, with the per-character work in C: a few ``str.replace`` passes delete the innermost
    ``[]`` pairs (one level each), which leaves little of ordinary JSON; what remains is counted
    run by run (a run of ``[`` or ``]``), and deep nesting is made of long runs."""
    # As UTF-8 (multi-byte sequences never contain ASCII bytes), where one C call keeps only
    # the brackets.
    raw = _STRING.sub(b"", text.encode("utf-8", "surrogatepass"))
    brackets = raw.translate(_SAME_BRACKETS, _NOT_BRACKETS)
    peeled = 0
    while brackets and peeled < _PEEL_PASSES:
        shorter = brackets.replace(b"[]", b"")
        if len(shorter) == len(brackets):
            break
        brackets, peeled = shorter, peeled + 1
    if not brackets:
        return peeled
    return peeled + max(0, *accumulate(map(_run_step, _RUN.findall(brackets))))


def _run_step(run: bytes) -> int:
    return len(run) if run[0] == 0x5B else -len(run)  # [


def check_depth(text: str, max_depth: int = MAX_DEPTH) -> None:
    depth = nesting_depth(text)
    if depth > max_depth:
        raise JsonBoundsError(f"nested {depth} levels deep; at most {max_depth} are accepted")


def _int(literal: str) -> int:
    if len(literal.lstrip("-")) > MAX_NUMBER_DIGITS:
        raise JsonBoundsError(f"an integer of {len(literal)} digits; at most {MAX_NUMBER_DIGITS} are read")
    return int(literal)


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise JsonBoundsError(f"the number {literal[:20]}… is out of range")
    return value


def _constant(name: str) -> Any:
    raise JsonBoundsError(f"{name} is not JSON")


def decode(text: str, **hooks: Any) -> Any:
    """``json.loads``, with every lone surrogate a ``\\uD800``-``\\uDFFF`` escape spells (one with
    no partner) replaced by U+FFFD: Python keeps it, but no UTF-8 text (a protobuf string, the
    native core's value) can carry it. Escaped pairs are one character already. Everything the
    engine reads as JSON from the model goes through here."""
    value = json.loads(text, **hooks)
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) is not None:
        return _without_surrogates(value)
    return value


def _without_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, list):
        return [_without_surrogates(v) for v in value]
    if isinstance(value, dict):  # keys that become equal merge as repeated keys do
        return {_without_surrogates(k): _without_surrogates(v) for k, v in value.items()}
    return value


def loads(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` within the bounds: too deep, a too-long integer, a number that overflows to
    infinity, and the non-JSON constants ``NaN``/``Infinity`` raise ``JsonBoundsError``; invalid
    JSON raises ``json.JSONDecodeError`` as usual (both are ``ValueError``); lone surrogates are
    U+FFFD (``decode``)."""
    check_depth(text, max_depth)
    try:
        return decode(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:  # unreachable within MAX_DEPTH unless the stack is nearly full
        raise JsonBoundsError("nested too deep") from None
