"""Typed views of what a session gives back: the finish reason as an enum that prints its name, and
immutable records (named tuples, a frozen dataclass) for the final result, deltas, usage and tool
calls, as the Go and Rust clients give typed structs.

The proto messages stay within reach: iterating a stream yields the server's raw
``ParseResponse``s, ``Final.proto`` is the raw final result, and ``Delta.of`` / ``Final.of`` turn any
raw message (a batch's ``SessionOutput.deltas`` and ``.final`` included) into these records.
Named tuples are what the per-token path can afford (one tuple per delta, no per-field setattr).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import NamedTuple

from parsetier_api.v1 import parsetier_pb2 as pb


class FinishReason(IntEnum):
    """Why the output ended. The values are the proto's (so a member equals its
    ``pb.FINISH_REASON_*`` number); ``str()`` is the name OpenAI writes (``"tool_calls"``)."""

    UNSPECIFIED = pb.FINISH_REASON_UNSPECIFIED
    STOP = pb.FINISH_REASON_STOP
    LENGTH = pb.FINISH_REASON_LENGTH
    ABORT = pb.FINISH_REASON_ABORT
    TOOL_CALLS = pb.FINISH_REASON_TOOL_CALLS

    def __str__(self) -> str:
        return "" if self is FinishReason.UNSPECIFIED else self.name.lower()

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


class Usage(NamedTuple):
    """Tokens of the output (``completion_tokens``), and how many of them were reasoning."""

    completion_tokens: int
    reasoning_tokens: int

    @classmethod
    def of(cls, usage: pb.Usage) -> Usage:
        return cls(usage.completion_tokens, usage.reasoning_tokens)


class ToolCall(NamedTuple):
    """One complete tool call of the assembled message (``arguments``: JSON text)."""

    id: str
    name: str
    arguments: str


class Message(NamedTuple):
    """The assembled assistant message."""

    content: str
    reasoning: str
    tool_calls: tuple[ToolCall, ...]

    @classmethod
    def of(cls, message: pb.AssistantMessage) -> Message:
        calls = tuple(ToolCall(c.id, c.name, c.arguments) for c in message.tool_calls)
        return cls(message.content, message.reasoning, calls)


class ToolCallDelta(NamedTuple):
    """A fragment of tool call ``index``: its ``id`` and ``name`` arrive once, on its first
    fragment; ``arguments`` is the next piece of JSON text."""

    index: int
    id: str
    name: str
    arguments: str


class Delta(NamedTuple):
    """One piece of output, as a chat-completions chunk carries it. ``logprobs`` are the proto's
    ``TokenLogprob``s (OpenAI's JSON shapes of them are in the wire bytes of a session opened with
    ``wire=``)."""

    reasoning: str
    content: str
    tool_calls: tuple[ToolCallDelta, ...]
    logprobs: tuple[pb.TokenLogprob, ...]
    token_ids: tuple[int, ...]

    @classmethod
    def of(cls, delta: pb.Delta) -> Delta:
        calls = delta.tool_calls
        return tuple.__new__(
            cls,
            (
                delta.reasoning,
                delta.content,
                tuple(ToolCallDelta(c.index, c.id, c.name, c.arguments) for c in calls) if calls else (),
                tuple(delta.logprobs) if delta.logprobs else (),
                tuple(delta.token_ids) if delta.token_ids else (),
            ),
        )


@dataclass(frozen=True, slots=True)
class Final:
    """A session's outcome: why it ended, its usage, the assembled message, and with the options
    that ask for them its logprobs (``return_logprobs`` without deltas), output ids
    (``return_token_ids``) and closing wire bytes (``Open.wire``). ``proto`` is the raw message."""

    finish_reason: FinishReason  # (a plain int only for a reason newer than this client)
    usage: Usage
    message: Message
    logprobs: tuple[pb.TokenLogprob, ...] = ()
    token_ids: tuple[int, ...] = ()
    wire: bytes = b""
    proto: pb.Final = field(default_factory=pb.Final, repr=False, compare=False)

    @classmethod
    def of(cls, final: pb.Final) -> Final:
        reason = final.finish_reason
        return cls(
            FinishReason(reason) if reason in FinishReason._value2member_map_ else reason,  # type: ignore[arg-type]
            Usage.of(final.usage),
            Message.of(final.message),
            tuple(final.logprobs),
            tuple(final.token_ids),
            final.wire,
            final,
        )
