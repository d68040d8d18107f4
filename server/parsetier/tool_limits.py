"""The per-request bounds on an ``Open``'s tools: how many, and how large each one's schema.

The tools are the one part of a request whose cost grows without a natural bound: every tool is
parsed, checked and compiled into the session (and, for ``BuildConstraint``, into a grammar
llguidance compiles: 5,000 tools took 2-7 s, 5,000 strict ones up to 24 s). Both bounds are
checked on the request as it came, before any of that work, and refused with
``INVALID_ARGUMENT`` naming the flag. Ordinary requests (a few tools, small schemas) pass on the
fast path: a count and a length per tool, or one length for ``tools_json``.
"""

from __future__ import annotations

import json

from parsetier.status import invalid
from parsetier_api.v1 import parsetier_pb2 as pb


def check_tools(open_: pb.Open, max_tools: int, max_schema_bytes: int) -> None:
    """``INVALID_ARGUMENT`` when ``open_`` has more than ``max_tools`` tools, or a tool whose
    JSON (its ``parameters_json``; its entry of ``tools_json``) is over ``max_schema_bytes``."""
    if open_.tools_json:
        _check_tools_json(open_.tools_json, max_tools, max_schema_bytes)
        return
    tools = open_.tools
    if len(tools) > max_tools:
        raise _too_many(len(tools), max_tools)
    for tool in tools:
        size = len(tool.parameters_json)
        if size > max_schema_bytes // 4 and len(tool.parameters_json.encode()) > max_schema_bytes:
            raise _too_large(tool.name, len(tool.parameters_json.encode()), max_schema_bytes)


def _check_tools_json(text: str, max_tools: int, max_schema_bytes: int) -> None:
    """The same for ``tools_json``: short enough text cannot break either bound (a tool takes at
    least two characters); longer text is parsed to count and measure its entries (malformed JSON
    is left to the reading that follows, which names the problem)."""
    if len(text) <= min(2 * max_tools, max_schema_bytes // 4):
        return
    try:
        entries = json.loads(text)
    except (ValueError, RecursionError):
        return
    if not isinstance(entries, list):
        return
    if len(entries) > max_tools:
        raise _too_many(len(entries), max_tools)
    if len(text.encode()) <= max_schema_bytes:
        return
    for entry in entries:
        size = len(json.dumps(entry, ensure_ascii=False).encode())
        if size > max_schema_bytes:
            raise _too_large(_name(entry), size, max_schema_bytes)


def _name(entry: object) -> str:
    if isinstance(entry, dict):
        function = entry.get("function", entry)
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            return function["name"]
    return "?"


def _too_many(count: int, limit: int) -> Exception:
    return invalid(f"{count} tools in one request; the limit is {limit} (--max-tools)")


def _too_large(name: str, size: int, limit: int) -> Exception:
    return invalid(f"tool {name!r}: its JSON is {size} bytes; the limit is {limit} (--max-schema-bytes)")
