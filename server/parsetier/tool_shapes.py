"""Tools as each public API sends them, read into one ``Tool`` value.

A gateway forwards its caller's ``tools`` array verbatim (``Open.tools_json``, a ``Render``
request's body), so every place that takes tools reads the same three shapes, here, and nowhere
else:

- OpenAI chat completions: ``{"type": "function", "function": {"name", "description",
  "parameters", "strict"}}`` (the bare function object, without ``type``, is read too);
- OpenAI Responses: the flat ``{"type": "function", "name", "description", "parameters",
  "strict"}`` (``parameters`` may be null there, as that API types it: no parameters);
- Anthropic Messages: ``{"name", "description", "input_schema", "strict"}``, ``type`` absent or
  ``"custom"``.

The schema matters beyond constrained decoding: the formats that write arguments as text
(qwen3_coder's XML parameters) type each value by it, so a schema read from the wrong key would
turn ``3`` into ``"3"`` without a word. Hence the rule: a tool is read whole or refused with
``INVALID_ARGUMENT`` naming its JSON path (``tools_json[2].input_schema``); nothing is dropped.

Tools that are not functions (Anthropic's server tools such as ``web_search_20250305`` or
``bash_20250124``, Responses' ``web_search``, ``file_search``, ``mcp``, ``custom`` grammar tools...)
are refused, not skipped: they are run by the API provider, which an open model's server is not,
and a tools array parsed without them would parse a call to one as a call to an unknown tool
while the prompt offered it. A gateway that serves them strips them before it forwards the array.
"""

from __future__ import annotations

from typing import Any

from parsetier.messages import Tool
from parsetier.status import invalid

SCHEMA_KEYS = ("parameters", "input_schema")
"""Where a tool's arguments schema is: OpenAI's key and Anthropic's."""
FUNCTION_TYPES = (None, "function", "custom")
"""``type`` values of a tool this module reads; ``custom`` only with Anthropic's ``input_schema``."""


def tools_of_json(value: Any, what: str) -> tuple[Tool, ...]:
    """A parsed ``tools`` array, in any of the shapes above, as tools. ``what`` names the array in
    error messages (``tools_json``, ``tools``)."""
    if not isinstance(value, list):
        raise invalid(f"{what} must be a JSON array of tools")
    return tuple(tool_of_json(item, f"{what}[{i}]") for i, item in enumerate(value))


def tool_of_json(item: Any, path: str) -> Tool:
    """One tool of a ``tools`` array (``path``: where it is, for error messages)."""
    if not isinstance(item, dict):
        raise invalid(f"{path} must be an object")
    kind = item.get("type")
    if kind not in FUNCTION_TYPES:
        shown = kind if isinstance(kind, str) else repr(kind)
        raise invalid(
            f"{path}.type: {shown!r} is not a function tool; parsetier reads function tools only "
            "(OpenAI chat or Responses function tools, Anthropic client tools): leave provider-run "
            "tools out of the array"
        )
    if "function" in item and kind != "custom":
        function = item["function"]
        path = f"{path}.function"
        if not isinstance(function, dict):
            raise invalid(f"{path} must be an object")
    else:
        function = item
    keys = [key for key in SCHEMA_KEYS if key in function]
    if len(keys) > 1:
        raise invalid(f"{path} has both parameters and input_schema: send one")
    key = keys[0] if keys else None
    if kind == "custom" and key != "input_schema":
        raise invalid(
            f"{path}: a custom tool without input_schema (a Responses free-form or grammar tool) "
            "is not a function tool; parsetier reads function tools only"
        )
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise invalid(f"{path}.name must be a non-empty string (the function's name)")
    value = function[key] if key is not None else None
    if value is None and key == "parameters" and kind == "function" and function is item:
        key = None  # Responses types a flat function tool's parameters as nullable: none
    parameters = schema(value, f"{path}.{key}") if key is not None else {}
    description = function.get("description")
    if description is None:
        description = ""
    elif not isinstance(description, str):
        raise invalid(f"{path}.description must be a string, got {type(description).__name__}")
    strict = function.get("strict")
    if strict is not None and not isinstance(strict, bool):
        raise invalid(f"{path}.strict must be a boolean, got {type(strict).__name__}")
    return Tool(name=name, parameters=parameters, description=description, strict=strict is True)


def schema(value: Any, path: str) -> dict[str, Any]:
    """A tool's arguments schema, however it arrived: it must be a JSON object."""
    if not isinstance(value, dict):
        got = "null" if value is None else type(value).__name__
        raise invalid(f"{path} must be a JSON object, got {got}")
    return value
