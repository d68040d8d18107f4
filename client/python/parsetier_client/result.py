"""What a finished session gives back, and plain-dict views of the proto messages (for JSON)."""

from __future__ import annotations

from typing import Any

from parsetier_api.v1 import parsetier_pb2 as pb

FINISH_REASON_NAMES = {
    pb.FINISH_REASON_UNSPECIFIED: "",
    pb.FINISH_REASON_STOP: "stop",
    pb.FINISH_REASON_LENGTH: "length",
    pb.FINISH_REASON_ABORT: "abort",
    pb.FINISH_REASON_TOOL_CALLS: "tool_calls",
}


class ParseResult(tuple):
    """``(message, deltas)`` — unpacks like a pair — with the rest of the outcome as attributes:
    ``final`` (finish reason, usage, message), ``events`` and the raw server ``messages``."""

    final: pb.Final
    events: list[pb.Event]
    messages: list[pb.ParseResponse]

    def __new__(
        cls, final: pb.Final, deltas: list[pb.Delta], events: list[pb.Event], messages: list[pb.ParseResponse]
    ) -> ParseResult:
        result = super().__new__(cls, (final.message, deltas))
        result.final = final
        result.events = events
        result.messages = messages
        return result

    @property
    def message(self) -> pb.AssistantMessage:
        return self[0]

    @property
    def deltas(self) -> list[pb.Delta]:
        return self[1]

    @property
    def finish_reason(self) -> str:
        return FINISH_REASON_NAMES[self.final.finish_reason]

    @property
    def usage(self) -> pb.Usage:
        return self.final.usage


def collect(messages: list[pb.ParseResponse]) -> ParseResult:
    """Join a stream's server messages into a ``ParseResult``."""
    deltas = [d for m in messages for d in m.deltas]
    events = [e for m in messages for e in m.events]
    if not messages or not messages[-1].HasField("final"):
        raise RuntimeError("the stream ended without a final message")
    return ParseResult(messages[-1].final, deltas, events, messages)


def delta_dict(delta: pb.Delta) -> dict[str, Any]:
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


def message_dict(message: pb.AssistantMessage) -> dict[str, Any]:
    return {
        "content": message.content,
        "reasoning": message.reasoning,
        "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in message.tool_calls],
    }


def final_dict(final: pb.Final) -> dict[str, Any]:
    return {
        "finish_reason": FINISH_REASON_NAMES[final.finish_reason],
        "usage": {
            "completion_tokens": final.usage.completion_tokens,
            "reasoning_tokens": final.usage.reasoning_tokens,
        },
        "message": message_dict(final.message),
    }
