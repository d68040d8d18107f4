"""Reads shared by the dialects: sampling numbers, stop lists, the template switches."""

from __future__ import annotations

import json
from typing import Any

from parsetier.render.conversation import Conversation
from parsetier.render.errors import BadRequest
from parsetier.render.fields import Obj, kind

MAX_N = 128
"""Most choices one request may ask for."""
MAX_STOP = 64
"""Most stop strings."""


def stops(body: Obj, key: str) -> list[str]:
    found = body.strings(key) or []
    if len(found) > MAX_STOP:
        raise body.fail(key, f"at most {MAX_STOP} stop strings, got {len(found)}")
    if any(not s for s in found):
        raise body.fail(key, "a stop string must not be empty")
    return found


def token_ids(body: Obj, key: str) -> list[int]:
    value = body.array(key) or []
    for i, item in enumerate(value):
        if isinstance(item, bool) or not isinstance(item, int) or not 0 <= item < 2**32:
            raise BadRequest(f"{body.at(key)}[{i}]", f"expected a token id, got {kind(item)} {item!r}")
    return value


def common_sampling(body: Obj, conv: Conversation) -> None:
    """The sampling fields every dialect spells alike."""
    s = conv.sampling
    s.temperature = body.number("temperature")
    if s.temperature is not None and s.temperature < 0:
        raise body.fail("temperature", f"must not be negative, got {s.temperature}")
    s.top_p = body.number("top_p")
    if s.top_p is not None and not 0 <= s.top_p <= 1:
        raise body.fail("top_p", f"must be within [0, 1], got {s.top_p}")
    s.top_k = body.integer("top_k", minimum=-1, maximum=2**31 - 1)
    s.seed = body.integer("seed", minimum=-(2**63), maximum=2**63 - 1)
    s.presence_penalty = body.number("presence_penalty")
    s.frequency_penalty = body.number("frequency_penalty")
    s.stop_token_ids = token_ids(body, "stop_token_ids")
    conv.model = body.string("model", "") or ""
    conv.stream = body.boolean("stream", False) or False


def template_switches(body: Obj, conv: Conversation) -> None:
    """``chat_template_kwargs`` (vLLM's extension) and the reasoning switches it holds.

    ``enable_thinking`` / ``thinking`` set as booleans are the request's thinking switch, for the
    parser as for the template."""
    kwargs = body.obj("chat_template_kwargs")
    if kwargs is not None:
        for key, value in kwargs.value.items():
            if key in ("messages", "tools", "add_generation_prompt", "documents"):
                raise kwargs.fail(key, "is not a template keyword the request may set")
            conv.template_kwargs[key] = value
    for key in ("enable_thinking", "thinking"):
        value = conv.template_kwargs.get(key)
        if isinstance(value, bool) and conv.thinking is None:
            conv.thinking = value
    template = body.string("chat_template")
    if template is not None:
        conv.chat_template = template


def kwargs_as_strings(kwargs: dict[str, Any]) -> dict[str, str]:
    """The template's keyword arguments as ``Open.chat_template_kwargs`` holds them (strings)."""
    out = {}
    for key, value in kwargs.items():
        if isinstance(value, bool):
            out[key] = "true" if value else "false"
        elif isinstance(value, str):
            out[key] = value
        else:
            out[key] = json.dumps(value, ensure_ascii=False)
    return out


def response_schema(fmt: Obj | None, schema_path: tuple[str, ...]) -> dict[str, Any] | None:
    """A ``response_format`` / ``text.format`` object's JSON schema: ``{}`` for json_object, the
    schema for json_schema, None for text."""
    if fmt is None:
        return None
    kind_ = fmt.string("type", "text")
    if kind_ == "text":
        return None
    if kind_ == "json_object":
        return {}
    if kind_ != "json_schema":
        raise fmt.fail("type", f"unknown response format {kind_!r}")
    holder: Obj | None = fmt
    for key in schema_path[:-1]:
        holder = holder.obj(key) if holder is not None else None
        if holder is None:
            raise fmt.fail(key, "a json_schema response format needs its schema")
    schema = holder.obj(schema_path[-1])
    if schema is None:
        raise holder.fail(schema_path[-1], "a json_schema response format needs its schema object")
    return schema.value


def tool_choice(value: Any, path: str, tools: list[dict] | None, named: str | None) -> str:
    """``auto`` / ``none`` / ``required`` / the forced function's name, checked against the tools.

    ``named`` is the name the dialect's object form gave (already read)."""
    choice = named if named is not None else value
    if choice is None:
        return "auto"
    if choice in ("auto", "none", "required") and named is None:
        if choice == "required" and not tools:
            raise BadRequest(path, "tool_choice 'required' needs tools")
        return choice
    if named is None:
        raise BadRequest(path, f"unknown tool_choice {choice!r}")
    names = [t["function"]["name"] for t in tools or ()]
    if named not in names:
        raise BadRequest(path, f"tool_choice names {named!r}, which is not among the tools {names}")
    return named
