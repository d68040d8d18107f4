"""Typed reads of a JSON request body, each refusal naming the value's JSON path.

A dialect reader asks for ``obj.string("model")`` or ``obj.objects("messages")`` and gets the
value or a ``BadRequest`` saying where and what was wrong (``messages[2].role: expected a
string, got number``). Absent keys and JSON ``null`` read as "not given", as the APIs treat them.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

from parsetier.engine import json_bounds
from parsetier.render.errors import BadRequest

_KINDS = {str: "string", bool: "boolean", int: "integer", float: "number", dict: "object", list: "array"}


def kind(value: Any) -> str:
    """A JSON value's type as the JSON spec names it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    return "number" if isinstance(value, int | float) else _KINDS.get(type(value), type(value).__name__)


def parse_body(data: bytes) -> Obj:
    """The request body as an object (INVALID_ARGUMENT for anything else)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadRequest("", f"the request body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        value = json_bounds.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadRequest("", f"the request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRequest("", f"the request body must be a JSON object, got {kind(value)}")
    return Obj(value, "")


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class Obj:
    """A JSON object at a path."""

    __slots__ = ("path", "value")

    def __init__(self, value: dict[str, Any], path: str) -> None:
        self.value = value
        self.path = path

    def has(self, key: str) -> bool:
        return self.value.get(key) is not None

    def raw(self, key: str) -> Any:
        return self.value.get(key)

    def at(self, key: str) -> str:
        return join(self.path, key)

    def fail(self, key: str, problem: str) -> BadRequest:
        return BadRequest(self.at(key), problem)

    def _typed(self, key: str, types: tuple[type, ...], what: str) -> Any:
        value = self.value.get(key)
        if value is None:
            return None
        if not isinstance(value, types) or (bool not in types and isinstance(value, bool)):
            raise self.fail(key, f"expected {what}, got {kind(value)}")
        return value

    def string(self, key: str, default: str | None = None) -> str | None:
        value = self._typed(key, (str,), "a string")
        return default if value is None else value

    def boolean(self, key: str, default: bool | None = None) -> bool | None:
        value = self._typed(key, (bool,), "a boolean")
        return default if value is None else value

    def integer(self, key: str, minimum: int | None = None, maximum: int | None = None) -> int | None:
        value = self._typed(key, (int, float), "an integer")
        if value is None:
            return None
        if isinstance(value, float):
            if not value.is_integer():
                raise self.fail(key, f"expected an integer, got {value!r}")
            value = int(value)
        if minimum is not None and value < minimum:
            raise self.fail(key, f"must be at least {minimum}, got {value}")
        if maximum is not None and value > maximum:
            raise self.fail(key, f"must be at most {maximum}, got {value}")
        return value

    def number(self, key: str) -> float | None:
        value = self._typed(key, (int, float), "a number")
        if value is None:
            return None
        value = float(value)
        if not math.isfinite(value):
            raise self.fail(key, "must be a finite number")
        return value

    def obj(self, key: str) -> Obj | None:
        value = self._typed(key, (dict,), "an object")
        return None if value is None else Obj(value, self.at(key))

    def array(self, key: str) -> list[Any] | None:
        return self._typed(key, (list,), "an array")

    def objects(self, key: str) -> Iterator[Obj]:
        """Each element of an array of objects."""
        for i, item in enumerate(self.array(key) or ()):
            path = join(self.at(key), i)
            if not isinstance(item, dict):
                raise BadRequest(path, f"expected an object, got {kind(item)}")
            yield Obj(item, path)

    def strings(self, key: str) -> list[str] | None:
        """A string or an array of strings (``stop``), as a list."""
        value = self.value.get(key)
        if value is None:
            return None
        if isinstance(value, str):
            return [value]
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return list(value)
        raise self.fail(key, f"expected a string or an array of strings, got {kind(value)}")

    def refuse(self, key: str, why: str, *, unless: Any = None) -> None:
        """Refuse a field that would change the answer and cannot be honoured, unless it holds
        the value that changes nothing (``unless``)."""
        value = self.value.get(key)
        if value is not None and value != unless and value not in (False, [], {}, ""):
            raise self.fail(key, why)


def arguments_object(value: Any, path: str) -> dict[str, Any]:
    """A tool call's ``arguments``: JSON text (OpenAI) or an object, as the mapping templates read.
    Anything that is not a JSON object is refused, as OpenAI-compatible servers refuse it."""
    if isinstance(value, str):
        try:
            value = json_bounds.loads(value) if value.strip() else {}
        except (ValueError, RecursionError) as exc:
            raise BadRequest(path, f"is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadRequest(path, f"must be a JSON object (the call's arguments), got {kind(value)}")
    return value


def dumps(value: Any) -> str:
    """JSON text as the request would have sent it (compact, Unicode kept)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
