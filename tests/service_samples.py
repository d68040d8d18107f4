"""Model outputs and tools the service tests send, and helpers that read replies back."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field

from parsetier_api.v1 import parsetier_pb2 as pb

WEATHER_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}},
        },
    },
]

REASONING_AND_TWO_CALLS = (
    "<think>\nThe user wants the weather in Paris and the time in Tokyo. "
    "I will call both tools at once.\n</think>\n\n"
    "Let me look that up."
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>\n'
    '<tool_call>\n{"name": "get_time", "arguments": {"tz": "Asia/Tokyo"}}\n</tool_call>'
)
EXPECTED_CALLS = [
    ("get_weather", {"city": "Paris", "unit": "celsius"}),
    ("get_time", {"tz": "Asia/Tokyo"}),
]

PLAIN_ANSWER = "<think>\nSimple arithmetic.\n</think>\n\nTwo plus two is four."


@dataclass
class Joined:
    """Deltas concatenated per kind: what a client rebuilds from a stream."""

    reasoning: str = ""
    content: str = ""
    calls: dict[int, dict] = field(default_factory=dict)

    def tool_calls(self) -> list[tuple[str, dict]]:
        return [(c["name"], json.loads(c["arguments"])) for _, c in sorted(self.calls.items())]


def join(deltas: Iterable[pb.Delta]) -> Joined:
    out = Joined()
    for delta in deltas:
        out.reasoning += delta.reasoning
        out.content += delta.content
        for frag in delta.tool_calls:
            call = out.calls.setdefault(frag.index, {"id": "", "name": "", "arguments": "", "fragments": 0})
            if frag.id:
                assert not call["id"], f"call {frag.index} got a second id"
                call["id"] = frag.id
            if frag.name:
                assert not call["name"], f"call {frag.index} got a second name"
                call["name"] = frag.name
            call["arguments"] += frag.arguments
            call["fragments"] += 1
    return out


def message_key(message: pb.AssistantMessage) -> tuple:
    """A message with tool-call ids left out (they derive from each request's id)."""
    return (
        message.reasoning,
        message.content,
        tuple((c.name, c.arguments) for c in message.tool_calls),
    )


def one_per_step(ids: list[int]) -> list[list[int]]:
    return [[i] for i in ids]
