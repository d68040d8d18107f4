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
    same request gives the same ids on any backend (see ``parsetier.call_ids``)."""
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


@dataclass(frozen=True, slots=True, init=False)
class ToolCallDelta:
    """A fragment of one tool call; ``id``/``name`` are set only on the call's first fragment."""

    index: int
    arguments: str = ""
    id: str | None = None
    name: str | None = None

    def __init__(
        self, index: int, arguments: str = "", id: str | None = None, name: str | None = None
    ) -> None:
        _set_index(self, index)
        _set_arguments(self, arguments)
        _set_id(self, id)
        _set_name(self, name)


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


@dataclass(frozen=True, slots=True, init=False)
class Delta:
    """One OpenAI-style streaming delta. Empty strings mean "nothing of that kind".

    ``logprobs`` and ``token_ids`` belong to the step that produced the delta (a delta with no text
    may carry only them)."""

    reasoning: str = ""
    content: str = ""
    tool_calls: tuple[ToolCallDelta, ...] = ()
    logprobs: tuple[TokenLogprob, ...] = ()
    token_ids: tuple[int, ...] = ()

    def __init__(
        self,
        reasoning: str = "",
        content: str = "",
        tool_calls: tuple[ToolCallDelta, ...] = (),
        logprobs: tuple[TokenLogprob, ...] = (),
        token_ids: tuple[int, ...] = (),
    ) -> None:
        _set_reasoning(self, reasoning)
        _set_content(self, content)
        _set_tool_calls(self, tool_calls)
        _set_logprobs(self, logprobs)
        _set_token_ids(self, token_ids)


# Deltas are made once or twice per token. A frozen dataclass's generated ``__init__`` stores each
# field through ``object.__setattr__`` (a generic attribute lookup per field: over a microsecond a
# delta); the hand-written ones above store through the slots' own descriptors, which is what the
# generated code ends up doing, at less than half the cost. The classes stay frozen dataclasses:
# assignment raises, ``dataclasses.replace``/``fields``/``==``/``hash`` work as before.
_set_index = ToolCallDelta.__dict__["index"].__set__
_set_arguments = ToolCallDelta.__dict__["arguments"].__set__
_set_id = ToolCallDelta.__dict__["id"].__set__
_set_name = ToolCallDelta.__dict__["name"].__set__
_set_reasoning = Delta.__dict__["reasoning"].__set__
_set_content = Delta.__dict__["content"].__set__
_set_tool_calls = Delta.__dict__["tool_calls"].__set__
_set_logprobs = Delta.__dict__["logprobs"].__set__
_set_token_ids = Delta.__dict__["token_ids"].__set__
_new = object.__new__


class _DeltaSlots:
    """``Delta``'s slots on a plain class. The per-token path fills one with ordinary attribute
    stores (a third of the descriptor calls' cost) and then makes it a ``Delta`` by assigning
    ``__class__``, which Python allows between classes of the same slot layout."""

    __slots__ = Delta.__slots__


class _ToolCallDeltaSlots:
    """``ToolCallDelta``'s slots, as ``_DeltaSlots`` holds ``Delta``'s."""

    __slots__ = ToolCallDelta.__slots__


def text_delta(reasoning: str, content: str) -> Delta:
    """``Delta(reasoning, content)``, for the per-token path (about half the cost)."""
    delta = _new(_DeltaSlots)
    delta.reasoning = reasoning
    delta.content = content
    delta.tool_calls = delta.logprobs = delta.token_ids = ()
    delta.__class__ = Delta  # type: ignore[assignment]
    return delta  # type: ignore[return-value]


def arguments_delta(index: int, arguments: str) -> Delta:
    """``Delta("", "", (ToolCallDelta(index, arguments),))``, made as ``text_delta`` is."""
    call = _new(_ToolCallDeltaSlots)
    call.index = index
    call.arguments = arguments
    call.id = call.name = None
    call.__class__ = ToolCallDelta  # type: ignore[assignment]
    delta = _new(_DeltaSlots)
    delta.reasoning = delta.content = ""
    delta.tool_calls = (call,)
    delta.logprobs = delta.token_ids = ()
    delta.__class__ = Delta  # type: ignore[assignment]
    return delta  # type: ignore[return-value]


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
