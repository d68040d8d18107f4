"""Tools in each dialect's shape, as the one shape chat templates read.

Reading is ``parsetier.tool_shapes``' (the one reader of OpenAI chat's ``{"type": "function",
"function": {...}}``, Responses' flat function tools and Anthropic's ``input_schema`` tools, which
``Open.tools_json`` and ``BuildConstraint`` use too): a tool is read whole or refused naming its
JSON path. Render adds two things: the schema must be a JSON Schema by its meta-schema
(INVALID_ARGUMENT naming the path otherwise, never silently schemaless), and the template gets
OpenAI chat's shape, the one Hugging Face templates are written for: a chat-shaped tool exactly
as the client sent it, the others rebuilt in it.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from parsetier import tool_shapes
from parsetier.constraints.request import InvalidTool
from parsetier.constraints.schemas import check_schema
from parsetier.constraints.shape import Underivable
from parsetier.render.errors import BadRequest
from parsetier.render.fields import Obj, join

SCHEMA_CHECKS_KEPT = 256
"""Schemas whose meta-schema check is remembered (a deployment sends the same tools again and
again; the check costs milliseconds, more than the rest of a short render)."""
EMPTY_PARAMETERS = {"type": "object", "properties": {}}
"""What a tool sent without a schema (a Responses tool's null ``parameters``) shows the template."""


@functools.lru_cache(maxsize=SCHEMA_CHECKS_KEPT)
def _schema_problem(name: str, schema_text: str) -> str | None:
    """Why the schema (as canonical JSON text) is not a JSON Schema, or None."""
    try:
        check_schema(name, json.loads(schema_text))
    except InvalidTool as exc:
        return str(exc)
    except Underivable:
        pass  # an external $ref is a valid schema; only a constraint cannot follow it
    return None


def template_tool(item: dict[str, Any], path: str) -> dict[str, Any]:
    """One tool of a request (any shape), read and checked, in OpenAI chat's shape."""
    tool = tool_shapes.tool_of_json(item, path)
    chat_shaped = "function" in item and item.get("type") != "custom"
    holder = item["function"] if chat_shaped else item
    key = next((k for k in tool_shapes.SCHEMA_KEYS if holder.get(k) is not None), None)
    if key is not None:
        at = join(join(path, "function"), key) if chat_shaped else join(path, key)
        problem = _schema_problem(tool.name, json.dumps(tool.parameters, sort_keys=True))
        if problem is not None:
            raise BadRequest(at, problem)
    if chat_shaped:
        return item  # rendered exactly as the client sent it
    function: dict[str, Any] = {"name": tool.name}
    if isinstance(item.get("description"), str):
        function["description"] = item["description"]
    function["parameters"] = tool.parameters if key is not None else EMPTY_PARAMETERS
    if tool.strict:
        function["strict"] = True
    return {"type": "function", "function": function}


def normalise_tools(body: Obj, key: str) -> list[dict[str, Any]] | None:
    """The request's tools in OpenAI chat's shape (None when it has none), names unique."""
    if not body.has(key):
        return None
    raw = body.array(key) or []
    tools = [template_tool(item, join(body.at(key), i)) for i, item in enumerate(raw)]
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = tool["function"]["name"] if "function" in tool else tool["name"]
        if name in seen:
            raise BadRequest(join(join(body.at(key), i), "name"), f"duplicate tool name {name!r}")
        seen.add(name)
    return tools or None
