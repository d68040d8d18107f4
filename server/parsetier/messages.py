"""Value types a session speaks: request options in, OpenAI-style deltas and the final message out.

They are plain frozen dataclasses so the sans-IO core, the gRPC servicer, tests and benchmarks
share one vocabulary without importing protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

ToolChoice = Literal["auto", "none", "required"] | str
"""``auto`` / ``none`` / ``required``, or the name of the one function the caller forces."""

FinishReason = Literal["stop", "length", "abort", "tool_calls"]


@dataclass(frozen=True, slots=True)
class Tool:
    """One OpenAI function tool: its name and JSON-schema ``parameters``."""

    name: str
    parameters: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    strict: bool = False
    """Constrained decoding enforces ``parameters`` (OpenAI's ``function.strict``); parsing ignores it."""


@dataclass(frozen=True, slots=True)
class SessionOptions:
    """Everything a request decides about parsing, fixed when the session opens."""

    tools: tuple[Tool, ...] = ()
    tool_choice: ToolChoice = "auto"
    parallel_tool_calls: bool = True
    include_reasoning: bool = True
    thinking: bool | None = None
    """Chat-template thinking switch; ``None`` means the model's default."""
    chat_template_kwargs: Mapping[str, str] = field(default_factory=dict)
    """Other chat-template switches as sent to the template. Parsing reads ``enable_thinking`` /
    ``thinking`` (when ``thinking`` is unset); the rest do not change how output is parsed."""
    prompt_token_ids: tuple[int, ...] = ()
    """The prompt (or its tail): tells whether the prompt already opened or closed reasoning."""
    include_stop_text: bool = False
    """Whether the matched stop token's text belongs in the content."""
    complete_tool_calls: bool = False
    """Deliver each tool call in one delta once its closing marker arrives (validated),
    instead of streaming argument fragments as they are generated."""
    request_id: str = ""
    """The caller's id for the request. Tool call ids derive from it (else from the prompt), so the
    same request gives the same ids on any backend (see ``parsetier.call_ids``)."""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call; ``id``/``name`` are set only on the call's first fragment."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class Delta:
    """One OpenAI-style streaming delta. Empty strings mean "nothing of that kind"."""

    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class Message:
    """The assembled assistant message: what a non-streaming API would return."""

    content: str = ""
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


@dataclass(frozen=True, slots=True)
class Usage:
    completion_tokens: int = 0
    reasoning_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Final:
    """What ``Session.finish`` returns besides the last deltas."""

    finish_reason: FinishReason
    usage: Usage
    message: Message
