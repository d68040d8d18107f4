"""What a finished session gives back, and plain-dict views of the proto messages (for JSON)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from google.protobuf import json_format

from parsetier_api.v1 import parsetier_pb2 as pb
from parsetier_client.typed import Delta, Final, Message, Usage

FINISH_REASON_NAMES = {
    pb.FINISH_REASON_UNSPECIFIED: "",
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_ABORT: "abort",
    pb.FINISH_REASON_TOOL_CALLS: "tool_calls",
}


class ParseResult(tuple):
    """``(message, deltas)`` — unpacks like a pair — with the rest of the outcome as attributes:
    ``final`` (finish reason, usage, message), ``events`` and the raw server ``messages``. The
    message, deltas and final are typed records (``typed``); ``final.proto`` and ``messages`` are
    the server's own messages."""

    final: Final
    events: list[pb.Event]
    messages: list[pb.ParseResponse]

    def __new__(
        cls, final: Final, deltas: list[Delta], events: list[pb.Event], messages: list[pb.ParseResponse]
    ) -> ParseResult:
        result = super().__new__(cls, (final.message, deltas))
        result.final = final
        result.events = events
        result.messages = messages
        return result

    @property
    def message(self) -> Message:
        return self[0]

    @property
    def deltas(self) -> list[Delta]:
        return self[1]

    @property
    def finish_reason(self) -> str:
        """The finish reason's name (``"tool_calls"``); ``final.finish_reason`` is the enum."""
        return str(self.final.finish_reason)

    @property
    def usage(self) -> Usage:
        return self.final.usage

    @property
    def logprobs(self) -> list[pb.TokenLogprob]:
        """Every resolved logprob of the session, from the deltas or (no deltas) the final result."""
        return logprobs_of(self.deltas) + list(self.final.logprobs)

    @property
    def wire(self) -> bytes:
        """With ``Open.wire``: every byte to forward, in order (each reply's ``wire``, then
        ``final.wire``): the whole SSE stream, or the complete body."""
        return wire_of(self.messages)

    @property
    def token_ids(self) -> list[int]:
        """With ``return_token_ids``: every output id, from the deltas or the final result."""
        return [i for d in self.deltas for i in d.token_ids] + list(self.final.token_ids)


def collect(messages: list[pb.ParseResponse]) -> ParseResult:
    """Join a stream's server messages into a ``ParseResult``."""
    deltas = [Delta.of(d) for m in messages for d in m.deltas]
    events = [e for m in messages for e in m.events]
    if not messages or not messages[-1].HasField("final"):
        raise RuntimeError("the stream ended without a final message")
    return ParseResult(Final.of(messages[-1].final), deltas, events, messages)


def wire_of(replies: Iterable[pb.ParseResponse | pb.SessionOutput]) -> bytes:
    """The wire bytes of a session's replies (``ParseResponse`` or ``SessionOutput``) joined:
    each reply's ``wire``, and the final result's after the last (or, for a ``SessionOutput``
    that ended the session with a status, its error in the dialect: ``SessionStatus.wire``)."""
    parts: list[bytes] = []
    for reply in replies:
        parts.append(reply.wire)
        if reply.HasField("final"):
            parts.append(reply.final.wire)
        elif isinstance(reply, pb.SessionOutput) and reply.HasField("status"):
            parts.append(reply.status.wire)
    return b"".join(parts)


def logprobs_of(deltas: Iterable[pb.Delta | Delta]) -> list[pb.TokenLogprob]:
    """The resolved logprobs of ``deltas``, in order. OpenAI's JSON shapes of them are the server's
    to write: open the session with ``wire=`` (OpenAI chat or completions) and forward its bytes."""
    return [lp for d in deltas for lp in d.logprobs]


def _proto_dict(message: Any) -> dict[str, Any]:
    return json_format.MessageToDict(message, preserving_proto_field_name=True)


def delta_dict(delta: pb.Delta | Delta) -> dict[str, Any]:
    """Only the kinds the delta carries; tool-call fragments keep their index even when 0."""
    out: dict[str, Any] = {}
    if delta.reasoning:
        out["reasoning"] = delta.reasoning
    if delta.content:
        out["content"] = delta.content
    if delta.tool_calls:
        calls = []
        for call in delta.tool_calls:
            item: dict[str, Any] = {"index": call.index}
            if call.id:
                item["id"] = call.id
            if call.name:
                item["name"] = call.name
            item["arguments"] = call.arguments
            calls.append(item)
        out["tool_calls"] = calls
    if delta.logprobs:  # the proto's own JSON mapping (OpenAI's shapes are the wire dialects')
        out["logprobs"] = [_proto_dict(lp) for lp in delta.logprobs]
    if delta.token_ids:
        out["token_ids"] = list(delta.token_ids)
    return out


def event_dict(event: pb.Event) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": pb.EventKind.Name(event.kind).removeprefix("EVENT_KIND_").lower()}
    if event.text:
        out["text"] = event.text
    if event.tool_index >= 0:
        out["tool_index"] = event.tool_index
    if event.call_id:
        out["call_id"] = event.call_id
    out["tokens"] = event.tokens
    return out


def message_dict(message: pb.AssistantMessage | Message) -> dict[str, Any]:
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
    }


def final_dict(final: pb.Final | Final) -> dict[str, Any]:
    return {
        "finish_reason": FINISH_REASON_NAMES[final.finish_reason],
        "usage": {
            "completion_tokens": final.usage.completion_tokens,
            "reasoning_tokens": final.usage.reasoning_tokens,
        },
        "message": message_dict(final.message),
    }
