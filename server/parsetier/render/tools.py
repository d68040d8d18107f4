"""Tools in each dialect's shape, as the one shape chat templates and ``Open.tools_json`` read.

OpenAI chat sends ``{"type": "function", "function": {"name", "description", "parameters",
"strict"}}``; OpenAI Responses sends the function's fields flat (``{"type": "function", "name",
...}``); Anthropic sends ``{"name", "description", "input_schema"}``. All become OpenAI chat's
shape, the one Hugging Face templates are written for. A tool of another kind (a hosted web search,
a custom grammar tool) or a ``parameters`` that is not a JSON Schema is INVALID_ARGUMENT naming
its path: never silently schemaless.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from parsetier.constraints.request import InvalidTool
from parsetier.constraints.schemas import check_schema
from parsetier.constraints.shape import Underivable
from parsetier.render.errors import BadRequest
from parsetier.render.fields import Obj, kind

Shape = str
SCHEMA_CHECKS_KEPT = 256
"""Schemas whose meta-schema check is remembered (a deployment sends the same tools again and again;
the check costs milliseconds, more than the rest of a short render)."""
"""``openai_chat``, ``openai_responses`` or ``anthropic_messages``."""


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


def _function(name: Any, description: Any, parameters: Any, strict: Any, at: Obj, schema_key: str) -> dict:
    if not isinstance(name, str) or not name:
        raise at.fail("name", "a tool needs a non-empty string name")
    if description is not None and not isinstance(description, str):
        raise at.fail("description", f"expected a string, got {kind(description)}")
    if parameters is None:
        parameters = {"type": "object", "properties": {}}
    if not isinstance(parameters, dict):
        raise at.fail(schema_key, f"must be a JSON Schema object, got {kind(parameters)}")
    problem = _schema_problem(name, json.dumps(parameters, sort_keys=True))
    if problem is not None:
        raise BadRequest(at.at(schema_key), problem)
    function: dict[str, Any] = {"name": name}
    if description is not None:
        function["description"] = description
    function["parameters"] = parameters
    if strict is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def normalise_tool(tool: Obj, shape: Shape) -> dict[str, Any]:
    """One tool of a request, in OpenAI chat's shape."""
    value = tool.value
    if shape == "anthropic_messages":
        kind_ = value.get("type")
        if kind_ not in (None, "custom"):
            raise tool.fail(
                "type", f"tool type {kind_!r} is not a client tool this server can offer the model"
            )
        return _function(
            value.get("name"), value.get("description"), value.get("input_schema"), None, tool, "input_schema"
        )
    if value.get("type", "function") != "function":
        raise tool.fail("type", f"tool type {value.get('type')!r} is not supported (only function tools)")
    if shape == "openai_responses" and "function" not in value:
        return _function(
            value.get("name"), value.get("description"), value.get("parameters"), value.get("strict"),
            tool, "parameters",
        )  # fmt: skip
    function = tool.obj("function")
    if function is None:
        raise tool.fail("function", "a function tool needs its function object")
    fv = function.value
    _function(
        fv.get("name"), fv.get("description"), fv.get("parameters"), fv.get("strict"), function, "parameters"
    )
    return value  # already the templates' shape: rendered exactly as the client sent it


def normalise_tools(body: Obj, key: str, shape: Shape) -> list[dict[str, Any]] | None:
    """The request's tools (None when it has none), names unique."""
    if not body.has(key):
        return None
    tools = [normalise_tool(t, shape) for t in body.objects(key)]
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        name = tool["function"]["name"]
        if name in seen:
            raise BadRequest(f"{body.at(key)}[{i}].name", f"duplicate tool name {name!r}")
        seen.add(name)
    return tools or None
