"""Local ``$ref``s of a tool schema, inlined so the schema can sit inside another one.

A strict tool's ``parameters`` rarely stay the root of the JSON schema the grammar holds: most
formats put them inside the call object (``{"name": …, "arguments": PARAMETERS}``) or take each
property's schema apart (XML-style parameters). A reference written against the parameters' root
(``"#/$defs/city"``, what pydantic writes) then points elsewhere or nowhere. Inlining each local
reference's target where it is used keeps the schema's meaning wherever it is embedded.

A recursive reference cannot be inlined and is left as written (it works where the parameters
are the root, and the final compile check refuses it elsewhere); so is any reference past the
size budget, which keeps a schema whose references fan out from growing without bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

INLINE_BUDGET = 20_000
"""Schema nodes inlining may add, in all, before it leaves the remaining references as written."""


def target(schema: Any, ref: str) -> tuple[bool, Any]:
    """``(found, node)`` for a local JSON-pointer reference (``#`` or ``#/…``) into ``schema``."""
    node = schema
    for raw in ref[2:].split("/") if ref != "#" else ():
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def inline_refs(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with every local, non-recursive reference replaced by its target (siblings of
    the ``$ref`` kept beside it in an ``allOf``); the root's ``$defs`` / ``definitions`` are kept
    only while a reference left as written may still need them."""
    budget = [INLINE_BUDGET]
    left: list[str] = []

    def walk(node: Any, expanding: tuple[str, ...], data: bool) -> Any:
        if isinstance(node, list):
            return [walk(item, expanding, data) for item in node]
        if not isinstance(node, Mapping):
            return node
        if data:  # inside enum / const / default / examples: values, not schemas
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and (ref == "#" or ref.startswith("#/")):
            found, sub = target(schema, ref)
            size = _size(sub)
            if found and ref not in expanding and isinstance(sub, Mapping | bool) and size <= budget[0]:
                budget[0] -= size
                inlined = walk(sub, (*expanding, ref), False)
                rest = {k: walk(v, expanding, k in _DATA) for k, v in node.items() if k != "$ref"}
                return {"allOf": [inlined, rest]} if rest else inlined
            left.append(ref)
        return {k: walk(v, expanding, k in _DATA) for k, v in node.items()}

    out = walk(schema, (), False)
    if not left:
        for key in ("$defs", "definitions"):
            out.pop(key, None)
    return out


_DATA = frozenset({"enum", "const", "default", "examples"})


def _size(node: Any) -> int:
    if isinstance(node, Mapping):
        return 1 + sum(_size(v) for v in node.values())
    if isinstance(node, list):
        return 1 + sum(_size(v) for v in node)
    return 1
