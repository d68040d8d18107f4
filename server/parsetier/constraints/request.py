"""What a constraint is asked for: the request's tool options, and the errors a tool can cause."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from parsetier.constraints.refs import inline_refs
from parsetier.engine.grammar import SENTINEL_RE
from parsetier.messages import Tool
from parsetier.status import Code, StatusError

MODES = ("auto", "none", "required", "named")


class InvalidTool(StatusError, ValueError):
    """A tool the format cannot write (its name or a key holds the format's own markup), or whose
    schema is malformed."""

    code = Code.INVALID_ARGUMENT


def unwritable(text: str) -> bool:
    """A name or key no format writes: empty, padded with whitespace, or holding a marker."""
    return bool(SENTINEL_RE.search(text)) or not text or text != text.strip()


@dataclass(frozen=True, slots=True)
class ConstraintRequest:
    tools: tuple[Tool, ...] = ()
    """The offered tools; a tool's ``strict`` says whether its schema is enforced."""
    mode: str = "auto"
    function_name: str | None = None
    parallel_tool_calls: bool = True
    reasoning: str = "off"
    """``off``, ``open`` (the message opens and closes a reasoning block), ``optional`` (it may),
    or ``inside`` (the prompt already opened it: the message continues it and closes it)."""
    stop_ids: frozenset[int] = frozenset()
    """The model's stop tokens. A closer that is one ends the turn: formats whose calls end
    that way (Harmony's ``<|call|>``) need them to tell a call's end from a message's."""

    @property
    def callable_tools(self) -> tuple[Tool, ...]:
        """The tools a call may name: under ``named`` only the named one, else every tool."""
        if self.mode != "named":
            return self.tools
        return tuple(t for t in self.tools if t.name == self.function_name)


STRING_LIMITS = frozenset({"pattern", "format", "minLength", "maxLength"})
"""String keywords a written text value cannot be held to (elements, notation)."""
ARRAY_LIMITS = frozenset({"minItems", "maxItems", "uniqueItems", "prefixItems", "contains"})
"""Array keywords a repeated item cannot be held to (elements, notation)."""


def arguments_schema(tool: Tool, strict: bool) -> dict[str, Any]:
    """The schema a call's arguments are held to: the tool's own when strict, else any object."""
    if not strict:
        return {"type": "object"}
    schema = inline_refs(tool.parameters) if tool.parameters else {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    return schema
