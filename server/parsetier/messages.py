"""Value types a session speaks: request options in, OpenAI-style deltas and the final message out.

They are plain frozen dataclasses so the sans-IO core, the gRPC servicer, tests and benchmarks
share one vocabulary without importing protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

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
class CompletionOptions:
    """How a completion session decodes (vLLM's sampling-parameter names and defaults)."""

    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True


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
    same request gives the same ids on any backend (see ``parsetier.engine.call_ids``)."""
    return_token_ids: bool = False
    """Put each step's ids on the delta it produced (OpenAI-compatible ``return_token_ids``)."""
    completion: CompletionOptions | None = None
    """Set: a completion session (plain text, no format); see ``parsetier.completion``."""
    stop: tuple[str, ...] = ()
    """The request's stop strings (completion sessions hold back text that may become one)."""
    stop_token_ids: tuple[int, ...] = ()
    """The request's stop ids besides the model's EOS ids."""
    choice_index: int = 0
    """Which of the request's ``n`` choices this session is; tool call ids derive from it too."""
    collect_in_final: bool = False
    """Also gather every logprob (and, with ``return_token_ids``, every id) into ``Final``: for
    callers that read only the final result. Off, they are delivered on the deltas only."""
    events: bool = True
    """Whether the caller reads ``StepOutput.events``. Off (the protocol's choice when the client
    asked for no events), a session may leave them out: the native one does, which saves a third
    of its per-token cost; the reference one builds them anyway."""


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A fragment of one tool call; ``id``/``name`` are set only on the call's first fragment."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None


@dataclass(frozen=True, slots=True)
class StepLogprobs:
    """What the generate side reports for one step's sampled ids: each one's logprob, and the same
    number of top alternatives per id, flattened id-major (``top_token_ids[i*k:(i+1)*k]`` belong to
    the step's ``i``-th id)."""

    token_logprobs: Sequence[float]
    top_token_ids: Sequence[int] = ()
    top_logprobs: Sequence[float] = ()


class TopLogprob(NamedTuple):
    """One alternative at a position: OpenAI's ``top_logprobs[]`` entry plus its id. (Named
    tuples, not dataclasses: one is made per alternative per token, and they are built in C.)"""

    token_id: int
    token: str
    bytes: bytes
    logprob: float


class TokenLogprob(NamedTuple):
    """One sampled token, resolved: OpenAI's ``logprobs.content[]`` entry (chat) and one position
    of ``tokens`` / ``token_logprobs`` / ``top_logprobs`` / ``text_offset`` (completions)."""

    token_id: int
    token: str
    """The text this token settles in the output (see ``parsetier.logprobs``)."""
    bytes: bytes
    """The token's raw bytes from the vocabulary (part of a character for byte-fallback tokens)."""
    logprob: float
    text_offset: int
    """Code points of output text (all sampled tokens' ``token``) before this token."""
    top_logprobs: tuple[TopLogprob, ...] = ()


@dataclass(frozen=True, slots=True)
class Delta:
    """One OpenAI-style streaming delta. Empty strings mean "nothing of that kind".

    ``logprobs`` and ``token_ids`` belong to the step that produced the delta (a delta with no text
    may carry only them)."""

    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    token_ids: tuple[int, ...] = ()


def text_delta(reasoning: str, content: str) -> Delta:
    """A delta of reasoning and/or content text."""
    return Delta(reasoning, content)


def arguments_delta(index: int, arguments: str) -> Delta:
    """A delta carrying a fragment of call ``index``'s arguments."""
    return Delta(tool_calls=(ToolCallDelta(index, arguments),))


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
    logprobs: tuple[TokenLogprob, ...] = ()
    """Every delivered logprob, when the session collects them for the final result."""
    token_ids: tuple[int, ...] = ()
    """Every output id, when the session returns token ids and collects them for the final result."""
