"""Each response template describes the language of its family's format file: on the family's
canitoolcall conformance fixtures (real model outputs, the fixture's own prompt, tools and
finish), the model served from the template and the preset served from the format file give the
same message, except where the format file says what a template cannot (docs/formats.md,
*Response templates*): those fixtures are listed with the reason, and the format file is right
on each (the suite passes it), which is why a config can name a format over a template.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

import canitoolcall_support as cs
from parsetier.models import ModelRegistry
from parsetier.session import parse
from response_templates import TEMPLATES, write_dir

PAIRS = {
    "qwen3": ("qwen3", "qwen2"),
    "qwen3-coder": ("qwen3", "qwen3_5"),
    "qwen3.5": ("qwen3.5", "qwen3_5"),
    "gemma-4": ("gemma4", "gemma4"),
    "glm-4.5": ("glm-4.5", "glm"),
    "glm-4.7": ("glm-4.5", "glm"),
    "deepseek-v3.1": ("deepseek-v3.1", "deepseek-v3.1"),
}
"""Preset (its format file) → (the tokenizer directory, the template) of the same model."""

CLOSER_IN_VALUE = "a closer written inside a value: the format file's follow checks keep it text"
FORMAT_ONLY = {
    "qwen3-xml/q38-marker-in-arguments": CLOSER_IN_VALUE,
    "qwen3-xml/coder-marker-in-arguments": CLOSER_IN_VALUE,
    "glm/glm45-marker-in-arguments": CLOSER_IN_VALUE,
    "glm/glm47-marker-in-arguments": CLOSER_IN_VALUE,
    "qwen3-xml/llamacpp-q35-call-inside-think": "a call opened inside unclosed reasoning ends it",
    "qwen3-xml/llamacpp-coder-bare-function": "a bare <function= without its <tool_call> is a call",
    "qwen3-xml/llamacpp-coder-bare-function-parallel": "a bare <function= without its <tool_call> is a call",
    "qwen3-xml/bug-coder-missing-tool-call-opener": "a bare <function= without its <tool_call> is a call",
    "qwen3-xml/vllm-coder-missing-close-parameter": "a <parameter= at a line start ends an unclosed value",
}
"""Fixtures where the format file reads more than its template can say, and why."""


@pytest.fixture(scope="module")
def templates(tmp_path_factory: pytest.TempPathFactory) -> ModelRegistry:
    root: Path = tmp_path_factory.mktemp("template-dirs")
    reg = ModelRegistry({})
    for preset, (tokenizer, template) in PAIRS.items():
        reg.add_model_dir(write_dir(root, preset, tokenizer, TEMPLATES[template]), preset)
    return reg


def _view(message) -> tuple[str, str, list[tuple[str, Any]]]:
    calls = []
    for call in message.tool_calls:
        try:
            calls.append((call.name, json.loads(call.arguments)))
        except ValueError:
            calls.append((call.name, call.arguments))
    return message.content, message.reasoning, calls


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PAIRS))
def test_a_template_reads_its_family_conformance_cases_as_the_format_file(preset: str, templates) -> None:
    compared, differ = 0, set()
    for fixture in cs.fixtures():
        if cs.preset_for(fixture) != preset:
            continue
        case = cs.case_for(fixture)
        assert case is not None
        from_file = parse(cs.registry().get(preset), case.options, list(case.units), case.finish_reason)[0]
        from_template = parse(templates.get(preset), case.options, list(case.units), case.finish_reason)[0]
        compared += 1
        if _view(from_file) != _view(from_template):
            differ.add(fixture.id)
    assert compared >= 4, compared
    assert differ == {f for f in FORMAT_ONLY if f in differ}, sorted(differ - set(FORMAT_ONLY))
    known = {f.id for f in cs.fixtures() if f.id in FORMAT_ONLY and cs.preset_for(f) == preset}
    assert differ == known, "a listed difference no longer differs: update FORMAT_ONLY and the docs"
