"""Test scaffolding: how the families peers serve (issue 39: Llama-Nemotron, GigaChat, MiniCPM,
Poolside Laguna, LongCat-Flash, FunctionGemma, Granite-20B-FC, Kimi-VL) write an output, given what
it says (``format_renderers.Parts``). Neither their templates nor their vocabularies are on a package
index next to each other, so these renderers follow the templates as published (GigaChat 3's) or as
peers' parsers and tests read them; docs/formats/ says which. Shared by the round-trip properties and
the differential tests.
"""

from __future__ import annotations

import json
from typing import Any

from testkit.format_renderers import Parts, gemma_value, json_value, raw_value, tagged_calls


def render_llama_nemotron(p: Parts, thinking: bool) -> str:
    """Thinking on: the model opens ``<think>`` itself (thinking off, the v1.5 template's prompt
    prefilled an empty block); the calls as one JSON list after the answer."""
    opened = f"<think>\n{p.reasoning}\n</think>\n\n" if thinking and p.reasoning else ""
    calls = [{"name": n, "arguments": a} for n, a in p.calls]
    block = "<TOOLCALL>" + json.dumps(calls, ensure_ascii=False) + "</TOOLCALL>" if calls else ""
    return f"{opened}{p.content}{block}<|eot_id|>"


def render_gigachat3(p: Parts) -> str:
    """GigaChat 3's template: the assistant message's text and separator, then (its first call
    only) a ``function call`` message with the name spliced in and the arguments through tojson."""
    out = p.content + "<|message_sep|>\n\n"
    for n, a in p.calls[:1]:
        payload = '{"name": "' + n + '", "arguments": ' + json.dumps(a, ensure_ascii=False) + "}"
        out += "function call<|role_sep|>\n" + payload + "<|message_sep|>\n\n"
    return out


def render_gigachat35(p: Parts, thinking: bool) -> str:
    """GigaChat 3.5's template: the reasoning in ``<think>`` (its generation prompt opened it when
    the reasoning switch is on), the answer and the GCML block joined by blank lines, then ``</s>``;
    strings raw with ``string="true"``, everything else JSON with ``string="false"``."""

    def param(key: str, value: Any) -> str:
        string = isinstance(value, str)
        body = value if string else json_value(value)
        return f'<｜GCML｜parameter name="{key}" string="{str(string).lower()}">{body}</｜GCML｜parameter>'

    def invoke(name: str, args: dict[str, Any]) -> str:
        params = "\n".join(param(k, v) for k, v in args.items())
        return f'<｜GCML｜invoke name="{name}">\n' + (params + "\n" if params else "") + "</｜GCML｜invoke>"

    blocks = [p.content] if p.content else []
    if p.calls:
        blocks.append(
            "<｜GCML｜tool_calls>\n" + "\n".join(invoke(n, a) for n, a in p.calls) + "\n</｜GCML｜tool_calls>"
        )
    reasoning = f"{p.reasoning}</think>" + ("\n\n" if blocks else "") if thinking else ""
    return reasoning + "\n\n".join(blocks) + "</s>"


def minicpm_value(value: Any) -> str:
    """Strings with a line break or markup in CDATA (verbatim), other strings raw, the rest JSON."""
    if isinstance(value, str) and ("\n" in value or "<" in value or "&" in value):
        return f"<![CDATA[{value}]]>"
    return raw_value(value)


def render_minicpm(p: Parts) -> str:
    thinking = f"<think>\n{p.reasoning}\n</think>\n\n" if p.reasoning else ""
    calls = tagged_calls(
        p.calls,
        '<function name="{name}">',
        '<param name="{key}">{value}</param>',
        "</function>\n",
        minicpm_value,
    )
    return f"{thinking}{p.content}\n{calls}<|im_end|>"


def minicpm4_call(name: str, args: dict[str, Any]) -> str:
    """A pythonic call as MiniCPM-4's demonstrations write it: keyword arguments, double-quoted
    strings (JSON's escapes are Python's), no spaces; containers as JSON (read as Python literals
    or JSON's)."""
    return f"{name}(" + ",".join(f"{k}={json_value(v)}" for k, v in args.items()) + ")"


def render_minicpm4(p: Parts) -> str:
    """``<|thought_start|>`` reasoning, the answer, then one fenced python block of calls."""
    thinking = f"<|thought_start|>\n{p.reasoning}\n<|thought_end|>\n" if p.reasoning else ""
    calls = "\n".join(minicpm4_call(n, a) for n, a in p.calls)
    block = f"<|tool_call_start|>\n```python\n{calls}\n```\n<|tool_call_end|>\n" if p.calls else ""
    return f"{thinking}{p.content}\n{block}<|im_end|>"


def render_laguna(p: Parts) -> str:
    """GLM-4.5's shape: the name, each key and each value on its own line; values raw."""
    calls = tagged_calls(
        p.calls,
        "<tool_call>{name}\n",
        "<arg_key>{key}</arg_key>\n<arg_value>{value}</arg_value>\n",
        "</tool_call>\n",
    )
    thinking = f"<think>{p.reasoning}</think>" if p.reasoning else ""
    return f"{thinking}{p.content}\n{calls}"


def render_longcat(p: Parts) -> str:
    thinking = f"<longcat_think>{p.reasoning}</longcat_think>" if p.reasoning else ""
    calls = "".join(
        "<longcat_tool_call>"
        + json.dumps({"name": n, "arguments": a}, ensure_ascii=False)
        + "</longcat_tool_call>\n"
        for n, a in p.calls
    )
    return f"{thinking}{p.content}\n{calls}"


def render_functiongemma(p: Parts) -> str:
    calls = "".join(
        f"<start_function_call>call:{n}{gemma_value(a, '<escape>')}<end_function_call>" for n, a in p.calls
    )
    return f"{p.content}{calls}" + ("<start_function_response>" if p.calls else "<end_of_turn>")


def render_granite20b_fc(p: Parts) -> str:
    calls = "\n".join("<function_call> " + json.dumps({"name": n, "arguments": a}) for n, a in p.calls)
    return (calls or p.content) + "<|endoftext|>"


def render_kimi_vl(p: Parts) -> str:
    thinking = f"◁think▷{p.reasoning}◁/think▷" if p.reasoning else ""
    return f"{thinking}{p.content}<|im_end|>"
