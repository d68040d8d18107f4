"""Which tool schemas a constraint can hold a call to, checked before a constraint is answered.

A strict tool's ``parameters`` become part of the grammar. Two kinds of schema cannot be:

* **malformed** ones (``INVALID_ARGUMENT``, ``InvalidTool``): not a JSON Schema at all by the
  meta-schema (``"type": "date"``, ``"type": 5``, ``"properties": 5``, a ``pattern`` that is no
  regex), or a local ``$ref`` whose target does not exist. The meta-schema check is the
  ``jsonschema`` package's, for the draft the schema names in ``$schema`` (2020-12 when none).
* **valid but unconstrainable** ones (``FAILED_PRECONDITION``, ``Underivable``): an external
  ``$ref`` (the server fetches nothing), and whatever the grammar engine cannot compile, such as
  an unsatisfiable schema (``{"allOf": [{"type": "string"}, {"type": "integer"}]}``) or an
  unknown ``format``. ``compiled`` is that last check: the whole Lark grammar is compiled by
  llguidance, the engine the constraint is written for, before it is answered; when it fails,
  each strict tool's grammar alone is compiled to name the tool.

Messages name the tool and the JSON pointer into its ``parameters``.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import jsonschema
import llguidance
from jsonschema.validators import validator_for

from parsetier.constraints.refs import target
from parsetier.constraints.request import InvalidTool, arguments_schema
from parsetier.constraints.shape import Underivable
from parsetier.messages import Tool

_SCHEMA = ("items", "not", "additionalProperties", "contains", "if", "then", "else", "propertyNames")
_SCHEMA += ("unevaluatedItems", "unevaluatedProperties", "additionalItems", "contentSchema")
_SCHEMA_LIST = ("allOf", "anyOf", "oneOf", "prefixItems", "items")
_SCHEMA_MAP = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas", "dependencies")


def check_tools(tools: Sequence[Tool]) -> None:
    """Refuse the first strict tool whose schema no constraint can hold a call to (see above)."""
    for tool in tools:
        if tool.strict and tool.parameters:
            check_schema(tool.name, tool.parameters)


def check_schema(name: str, schema: Mapping[str, Any]) -> None:
    """``InvalidTool`` for a malformed schema, ``Underivable`` for an external ``$ref``."""
    checker = _meta_validator(validator_for(schema, default=jsonschema.Draft202012Validator))
    error = jsonschema.exceptions.best_match(checker.iter_errors(schema), key=_deepest_first)
    if error is not None:
        raise InvalidTool(
            f"tool {name!r}: parameters{_pointer(error.absolute_path)} is not a valid JSON Schema: "
            f"{error.message}"
        )
    for path, ref in _refs(schema, ()):
        where = f"tool {name!r}: parameters{_pointer(path)}/$ref {ref!r}"
        if not ref.startswith("#"):
            raise Underivable(f"{where} is external: the server resolves only references inside the schema")
        if (ref.startswith("#/") or ref == "#") and not target(schema, ref)[0]:
            raise InvalidTool(f"{where} points to nothing in the schema")


@functools.cache
def _meta_validator(cls: type) -> Any:
    """The validator of ``cls``'s meta-schema, built once per draft (building it costs more than
    checking a schema)."""
    return cls(cls.META_SCHEMA)


def compiled(lark: str, tools: Sequence[Tool], lark_of: Callable[[Tool], str]) -> None:
    """``Underivable`` unless llguidance compiles ``lark``; ``lark_of(tool)`` is the grammar with
    that tool alone, compiled only on failure, to name the tool at fault, and then the deepest
    part of its schema that does not compile alone, to name the place."""
    error = llguidance.LLMatcher.validate_grammar(lark)
    if not error:
        return
    reason = _first_line(error)
    for tool in tools:
        if tool.strict and llguidance.LLMatcher.validate_grammar(lark_of(tool)):
            where = _culprit(arguments_schema(tool, True))
            raise Underivable(f"tool {tool.name!r}: parameters{where} cannot be constrained: {reason}")
    raise Underivable(f"the constraint cannot be compiled: {reason}")


CULPRIT_CHECKS = 200
"""Sub-schemas compiled at most to find the one at fault (only on the refusal path)."""


def _culprit(schema: Mapping[str, Any]) -> str:
    """The JSON pointer of the deepest sub-schema that llguidance does not compile alone ("" for
    the whole schema, or when none is found within ``CULPRIT_CHECKS``)."""
    checks = 0
    for path, sub in sorted(_subschemas(schema, ()), key=lambda item: -len(item[0])):
        if checks >= CULPRIT_CHECKS:
            break
        if not isinstance(sub, Mapping) or "$ref" in sub:
            continue
        checks += 1
        grammar = llguidance.LLMatcher.grammar_from_json_schema(json.dumps(sub))
        if llguidance.LLMatcher.validate_grammar(grammar):
            return _pointer(path)
    return ""


def _deepest_first(error: jsonschema.ValidationError) -> tuple[int, ...]:
    """``best_match`` relevance that prefers the error deepest in the schema (the one at fault,
    not the ``anyOf`` around it)."""
    return (-len(error.absolute_path), *jsonschema.exceptions.relevance(error))


def _refs(schema: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], str]]:
    """Every ``$ref`` of a (meta-schema valid) schema with its path."""
    for where, node in _subschemas(schema, path):
        if isinstance(node, Mapping) and isinstance(node.get("$ref"), str):
            yield where, node["$ref"]


def _subschemas(node: Any, path: tuple[Any, ...]) -> Iterator[tuple[tuple[Any, ...], Any]]:
    """The schema and every schema inside it, with their paths; data-valued keywords (``enum``,
    ``const``, ``default``, ``examples``) are not searched."""
    yield path, node
    if not isinstance(node, Mapping):
        return
    for key in _SCHEMA:
        if isinstance(node.get(key), Mapping):
            yield from _subschemas(node[key], (*path, key))
    for key in _SCHEMA_LIST:
        if isinstance(node.get(key), list):
            for i, sub in enumerate(node[key]):
                yield from _subschemas(sub, (*path, key, i))
    for key in _SCHEMA_MAP:
        if isinstance(node.get(key), Mapping):
            for prop, sub in node[key].items():
                yield from _subschemas(sub, (*path, key, prop))


def _pointer(path: Sequence[Any]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else text
