"""Semantic events: what the state machine says happened in the model's output.

Small immutable values, in output order. The assembler turns them into OpenAI-style deltas;
clients that want lower-level structure can receive them as they are.
"""

from __future__ import annotations

from enum import Enum
from typing import NamedTuple


class EventKind(Enum):
    CONTENT = "content"
    """Visible answer text (``text``)."""
    REASONING_START = "reasoning_start"
    REASONING = "reasoning"
    """A chunk of reasoning text (``text``)."""
    REASONING_END = "reasoning_end"
    TOOL_CALL_START = "tool_call_start"
    """A tool call begins; ``text`` is the function name, ``call_id`` set when the format names it."""
    TOOL_ARGUMENTS = "tool_arguments"
    """A fragment of the call's arguments as JSON text (``text``)."""
    TOOL_CALL_END = "tool_call_end"
    """The call ended; ``text`` is the call's text as the model wrote it (its markup and arguments,
    from its block's opener or the previous call's end): content when the call is not delivered."""
    END = "end"
    """The output ended (always the last event); ``tokens`` carries any not yet attributed."""


class Event(NamedTuple):
    """One event: a small immutable value (a named tuple, so it unpacks and compares as one)."""

    kind: EventKind
    text: str = ""
    tool_index: int = -1
    """Index of the tool call this event belongs to, -1 outside calls."""
    tokens: int = 0
    """Output tokens consumed since the previous event (their sum is the completion length)."""
    call_id: str = ""


# Looking an enum member up on its class costs about 0.2 µs on Python 3.11 (EnumType's attribute
# machinery), several times the cost of a global; the hot path compares and emits kinds once or
# twice per token, so it uses these names.
CONTENT = EventKind.CONTENT
REASONING_START = EventKind.REASONING_START
REASONING = EventKind.REASONING
REASONING_END = EventKind.REASONING_END
TOOL_CALL_START = EventKind.TOOL_CALL_START
TOOL_ARGUMENTS = EventKind.TOOL_ARGUMENTS
TOOL_CALL_END = EventKind.TOOL_CALL_END
END = EventKind.END
