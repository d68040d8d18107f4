"""Hostile model outputs for every family: a real tool call of the family with one argument value
replaced by a payload (deep nesting, huge numbers, marker soup, broken UTF-8).

``samples()`` gives, per preset, a call the family writes (from the canitoolcall fixtures, or
written here for the families the suite has no call fixture for) with ``VALUE`` where one argument
value goes, and the request options that go with it. That argument's schema type is set to
``array``, so readers that type raw values (XML-style parameters) parse the payload as JSON
instead of streaming it as a string. ``ids(sample, payload)`` is the output as token ids.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from canitoolcall_support import case_for, fixtures, registry
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model

VALUE = "\x00VALUE\x00"


@dataclass(frozen=True)
class CallSample:
    preset: str
    text: str
    """The model's output with ``VALUE`` where the payload goes."""
    options: SessionOptions
    json_context: bool
    """The value sits where JSON is written (``{"city": VALUE}``), not raw markup text."""

    @property
    def model(self) -> Model:
        return registry().get(self.preset)


def _typed_as_array(tools: Sequence[Tool], name: str, key: str) -> tuple[Tool, ...]:
    out = []
    for tool in tools:
        if tool.name == name:
            props = dict(tool.parameters.get("properties") or {})
            props[key] = {"type": "array"}
            tool = dataclasses.replace(tool, parameters={**tool.parameters, "properties": props})
        out.append(tool)
    return tuple(out)


def _from_fixture(fixture) -> CallSample | None:
    case = case_for(fixture)
    calls = getattr(fixture.expected, "tool_calls", None) if fixture.expected else None
    if case is None or not calls or fixture.truncated:
        return None
    raw = fixture.raw_output
    for call in calls:
        for key, value in (call.arguments or {}).items():
            if not isinstance(value, str) or len(value) < 3:
                continue
            for written, json_context in ((json.dumps(value, ensure_ascii=False), True), (value, False)):
                if raw.count(written) == 1:
                    tools = _typed_as_array(case.options.tools, call.name, key)
                    options = dataclasses.replace(case.options, tools=tools)
                    return CallSample(case.preset, raw.replace(written, VALUE), options, json_context)
    return None


_WRITTEN = {
    "minimax-m2": (
        '</think>\n<minimax:tool_call>\n<invoke name="f">\n<parameter name="a">'
        + VALUE
        + "</parameter>\n</invoke>\n</minimax:tool_call>"
    ),
    "minimax-m3": (
        '</mm:think>]<]minimax[>[<tool_call>\n]<]minimax[>[<invoke name="f">]<]minimax[>[<a>'
        + VALUE
        + "]<]minimax[>[</a>]<]minimax[>[</invoke>\n]<]minimax[>[</tool_call>"
    ),
    "llama4": "[f(a=" + VALUE + ")]",
    "gemma-4": "<|tool_call>call:f{a:" + VALUE + "}<tool_call|>",
    "seed-oss": "\n<seed:tool_call>\n<function=f>\n<parameter=a>"
    + VALUE
    + "</parameter>\n</function>\n</seed:tool_call>",
    # Hy3's own grammar (the other families peers serve reuse qwen3_coder's and glm's, covered above)
    "hy3": "<tool_calls:opensource>\n<tool_call:opensource>f<tool_sep:opensource>\n<arg_key:opensource>a"
    + "</arg_key:opensource>\n<arg_value:opensource>"
    + VALUE
    + "</arg_value:opensource>\n</tool_call:opensource>\n</tool_calls:opensource>",
    # JSON / pythonic families with grammars of their own (Granite 4 is a qwen3 preset)
    "granite-3": '<|tool_call|>[{"name": "f", "arguments": {"a": ' + VALUE + "}}]",
    "ernie-4.5-thinking": 'r\n</think>\n\n<tool_call>\n{"name": "f", "arguments": {"a": '
    + VALUE
    + "}}\n</tool_call>",
    "command-a": '<|START_ACTION|>[{"tool_call_id": "0", "tool_name": "f", "parameters": {"a": '
    + VALUE
    + "}}]<|END_ACTION|>",
    "xlam-2-llama": '[{"name": "f", "arguments": {"a": ' + VALUE + "}}]",
    "lfm2": "<|tool_call_start|>[f(a=" + VALUE + ")]<|tool_call_end|>",
    "phi-4-mini": 'functools[{"name": "f", "arguments": {"a": ' + VALUE + "}}]",
    "olmo-3": "<function_calls>\nf(a=" + VALUE + ")\n</function_calls>",
    "apertus": '<|tools_prefix|>[{"f": {"a": ' + VALUE + "}}]<|tools_suffix|>",
    # families peers added since the last wave
    "inkling": '<|message_model|>f<|content_invoke_tool_json|>{"name": "f", "args": {"a": '
    + VALUE
    + "}}<|end_message|>",
    "muse-glimmer": " to=self<|message|>r<|eom|><|start|>assistant to=f<|message|><atem:function_calls>\n"
    + '<atem:invoke name="f">\n<atem:parameter name="a">'
    + VALUE
    + "</atem:parameter>\n</atem:invoke>\n</atem:function_calls><|eom|>",
}
"""Families without a call fixture in the suite, and those whose fixture call has no bare value
(Llama 4's pythonic calls, Gemma 4): a call as their tests write it."""
_WRITTEN.update(
    {  # issue 39's families with grammars of their own (Laguna is a glm preset; Kimi-VL makes no calls)
        "llama-nemotron": '<TOOLCALL>[{"name": "f", "arguments": {"a": ' + VALUE + "}}]</TOOLCALL>",
        "gigachat-3": 'Ok.<|message_sep|>\n\nfunction call<|role_sep|>\n{"name": "f", "arguments": {"a": '
        + VALUE
        + "}}</s>",
        "gigachat-3.5": '<｜GCML｜tool_calls><｜GCML｜invoke name="f">'
        + '<｜GCML｜parameter name="a" string="false">'
        + VALUE
        + "</｜GCML｜parameter></｜GCML｜invoke></｜GCML｜tool_calls>",
        "minicpm-5": '<function name="f"><param name="a">' + VALUE + "</param></function>",
        "minicpm-4": "<|tool_call_start|>\n```python\nf(a=" + VALUE + ")\n```\n<|tool_call_end|>",
        "longcat-flash": '<longcat_tool_call>{"name": "f", "arguments": {"a": '
        + VALUE
        + "}}</longcat_tool_call>",
        "functiongemma": "<start_function_call>call:f{a:" + VALUE + "}<end_function_call>",
        "granite-20b-fc": '<function_call> {"name": "f", "arguments": {"a": ' + VALUE + "}}",
    }
)

_WRITTEN.update(
    {  # issue 39's families, first half
        "step-3": "r</think><｜tool_calls_begin｜><｜tool_call_begin｜>function<｜tool_sep｜>"
        + '<steptml:invoke name="f"><steptml:parameter name="a">'
        + VALUE
        + "</steptml:parameter></steptml:invoke><｜tool_call_end｜><｜tool_calls_end｜>",
        "internlm2": '<|action_start|><|plugin|>\n{"name": "f", "parameters": {"a": '
        + VALUE
        + "}}<|action_end|>",
        "intern-s1": '<think>r</think><|action_start|><|plugin|>{"name": "f", "parameters": {"a": '
        + VALUE
        + "}}<|action_end|>",
        "hunyuan-a13b": '<answer>\n<tool_calls>[{"name": "f", "arguments": {"a": '
        + VALUE
        + "}}]</tool_calls>",
        "hy-v4": "<tool_calls:opensource><tool_call:opensource>f<arg_key:opensource>a</arg_key:opensource>"
        + "<arg_value:opensource>"
        + VALUE
        + "</arg_value:opensource></tool_call:opensource></tool_calls:opensource>",
        "minimax-m1": '<tool_calls>\n{"name": "f", "arguments": {"a": ' + VALUE + "}}\n</tool_calls>",
        "jamba": '<tool_calls>[{"name": "f", "arguments": {"a": ' + VALUE + "}}]</tool_calls>",
    }
)


@functools.cache
def samples() -> dict[str, CallSample]:
    out: dict[str, CallSample] = {}
    for fixture in fixtures():
        sample = _from_fixture(fixture)
        if sample is not None and sample.preset not in out:
            out[sample.preset] = sample
    tools = (Tool("f", {"type": "object", "properties": {"a": {"type": "array"}}}),)
    for preset, text in _WRITTEN.items():
        out[preset] = CallSample(preset, text, SessionOptions(tools=tools), False)
    return out


def ids(sample: CallSample, payload: str) -> list[int]:
    text = sample.text.replace(VALUE, payload)
    return sample.model.tokenizer.encode(text, add_special_tokens=False).ids


def deep_array(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def deep_object(depth: int) -> str:
    return '{"a": ' * depth + "1" + "}" * depth


PAYLOADS = {
    "array 1000 deep": deep_array(1000),
    "object 1000 deep": deep_object(1000),
    "array 10000 deep, unclosed": "[" * 10_000,
    "5000-digit integer": "9" * 5000,
    "number overflowing to infinity": "1e99999",
    "5000-digit integer in an array": "[" + "9" * 5000 + "]",
}
"""Argument values a prompt injection can make a model write."""


def hostile_ids(sample: CallSample) -> Iterator[list[int]]:
    """The sample's output with each of the ``PAYLOADS`` in turn (in the order of their names)."""
    for _name, payload in sorted(PAYLOADS.items()):
        yield ids(sample, payload)
