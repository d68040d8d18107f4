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
from parsetier.engine.session import parse
from parsetier.models import ModelRegistry
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


# --- the same fixtures through transformers' parse_response ------------------------------------------

LAST_REGION = "transformers keeps a field's last region: the answer after a call replaces the one before"
CLOSER_IN_VALUE_BOTH = "a closer inside a value: the template's lazy .*? ends it early, both misread"
CUT_VALUE = "cut inside a value: parsetier keeps it as far as it came, transformers drops the parameter"
STOPPED_IN_VALUE = "a stop before a value's closer ends the value (docs/engine.md), transformers drops it"
VALUE_EDGES = "xml-inline's \\s* strips a value's own edge whitespace; parsetier takes one newline each side"
CUT_OPENER = "cut right after an opener: the markup is not content (parsetier's truncation policy)"
TRANSFORMERS_DIFFER = {
    "gemma4/sglang-text-around-call": LAST_REGION,
    "qwen3-xml/bug-coder-text-after-call": LAST_REGION,
    "glm/glm45-marker-in-arguments": CLOSER_IN_VALUE_BOTH,
    "glm/glm47-marker-in-arguments": CLOSER_IN_VALUE_BOTH,
    "qwen3-xml/q38-marker-in-arguments": CLOSER_IN_VALUE_BOTH,
    "glm/glm47-truncated-inside-arg-value": CUT_VALUE,
    "glm/glm45-truncated-after-arg-key": CUT_VALUE,
    "qwen3-xml/q38-truncated-in-parameter": CUT_VALUE,
    "glm/glm47-missing-last-close-arg-value": STOPPED_IN_VALUE,
    "qwen3-xml/bug-missing-close-parameter-before-function": STOPPED_IN_VALUE,
    "qwen3-xml/llamacpp-q35-value-trailing-newline": VALUE_EDGES,
    "qwen3-xml/llamacpp-q35-code-leading-indent": VALUE_EDGES,
    "qwen3-xml/q38-whitespace-significant": VALUE_EDGES,
    "qwen3-xml/q38-long-arguments": VALUE_EDGES,
    "qwen3-xml/q38-truncated-at-tool-call-open": CUT_OPENER,
}
"""Fixtures where parsetier (from the template) and transformers (the same template) read a real
output differently, each for a policy docs/formats.md states. Besides these, transformers raises
(``ValueError``) on every output its content parser cannot read (arguments cut short or broken, a
marker token inside a JSON string, Gemma 4 keys with spaces or a name its ``\\w+`` does not take),
where parsetier applies its malformed-call and truncation policies."""


@pytest.fixture(scope="module")
def hf_tokenizers(templates):
    from transformers import AutoTokenizer

    return {preset: AutoTokenizer.from_pretrained(templates.get(preset).spec.tokenizer) for preset in PAIRS}


@pytest.mark.slow
@pytest.mark.parametrize("preset", sorted(PAIRS))
def test_transformers_reads_the_fixtures_alike_but_for_the_policies(
    preset: str, templates, hf_tokenizers
) -> None:
    agree, raised, differ = 0, 0, set()
    for fixture in cs.fixtures():
        if cs.preset_for(fixture) != preset:
            continue
        case = cs.case_for(fixture)
        assert case is not None
        ours = _view(parse(templates.get(preset), case.options, list(case.units), case.finish_reason)[0])
        tools = [
            {"type": "function", "function": {"name": t.name, "parameters": t.parameters}}
            for t in case.options.tools
        ]
        try:
            parsed = hf_tokenizers[preset].parse_response(
                list(case.units), prefix=list(case.options.prompt_token_ids), tools=tools
            )
        except ValueError:
            raised += 1
            continue
        calls = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.get("tool_calls") or ()]
        theirs = (parsed.get("content") or "", parsed.get("reasoning_content") or "", calls)
        if ours == theirs:
            agree += 1
        else:
            differ.add(fixture.id)
    listed = {f.id for f in cs.fixtures() if f.id in TRANSFORMERS_DIFFER and cs.preset_for(f) == preset}
    assert differ == listed, (sorted(differ - listed), sorted(listed - differ))
    assert agree > 2 * len(differ), (agree, raised, differ)
