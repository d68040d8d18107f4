"""The tools the constraint tests derive their grammars from: a strict two-argument call and a
strict call of none (format-file formats and ``response_template`` ones alike)."""

from __future__ import annotations

from parsetier.messages import Tool

WEATHER = Tool(
    "get_weather",
    {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city"],
        "additionalProperties": False,
    },
    strict=True,
)
CLOCK = Tool("get_time", {"type": "object", "properties": {}}, strict=True)
TOOLS = (WEATHER, CLOCK)
