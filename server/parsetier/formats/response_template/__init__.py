"""Hugging Face's ``response_template`` as a format source.

A model that declares its output in its ``tokenizer_config.json`` (``response_template``: fields
with literal or pattern anchors, content parsers, transforms) serves with no format file: the
template is validated as ``transformers`` validates it (``validate.py``), its anchors are read
into literal parts (``anchors.py``) and it is compiled into a format file's table
(``compile.py``), which the format loader turns into the same ``Grammar`` a TOML file gives.
docs/formats.md, *Response templates*, says how each key maps and what cannot be said.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from parsetier.engine.grammar import Grammar, grammar_from_dict
from parsetier.formats.response_template.compile import REASONING_FIELDS, compile_template
from parsetier.formats.response_template.validate import Template, TemplateError, validate

__all__ = [
    "REASONING_FIELDS",
    "Template",
    "TemplateError",
    "compile_template",
    "template_grammar",
    "validate",
]


def template_grammar(template: Template, name: str, special_tokens: Collection[str] = ()) -> Grammar:
    """The grammar of a validated template: its compiled table, loaded as a format file is."""
    table: dict[str, Any] = compile_template(template, name, special_tokens)
    return grammar_from_dict(table, source=f"{template.source} (response_template)")
