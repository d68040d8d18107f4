"""Test scaffolding: how the first half of issue 39's families (Step-3, InternLM2 / Intern-S1,
Hunyuan-A13B, Hunyuan Hy-V4, MiniMax-M1, Jamba) write an output, given what it says
(``format_renderers.Parts``). Their templates do not ship beside a vocabulary on a package index
(MiniMax-M1's template ships, but it renders no tool calls), so these renderers follow the formats
as the templates' own instructions and peers' parsers and tests have them; docs/formats/ says which.
Shared by the round-trip properties.
"""

from __future__ import annotations

import json

from testkit.format_renderers import Parts, hy3_marker, tagged_calls


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False)


def render_step3(p: Parts) -> str:
    """After the generation prompt's ``<think>\\n``: the reasoning, ``</think>``, the content, then
    one block with a ``function<｜tool_sep｜>`` steptml invoke per call; values raw."""
    entries = tagged_calls(
        p.calls,
        '<｜tool_call_begin｜>function<｜tool_sep｜><steptml:invoke name="{name}">\n',
        '<steptml:parameter name="{key}">{value}</steptml:parameter>\n',
        "</steptml:invoke><｜tool_call_end｜>",
        sep="\n",
    )
    block = f"\n<｜tool_calls_begin｜>\n{entries}\n<｜tool_calls_end｜>" if p.calls else ""
    return f"{p.reasoning}\n</think>\n{p.content}{block}<|EOT|>"


def _actions(p: Parts) -> str:
    return "".join(
        "<|action_start|><|plugin|>\n" + _json({"name": n, "parameters": a}) + "<|action_end|>\n"
        for n, a in p.calls
    )


def render_internlm2(p: Parts) -> str:
    """The content, then one plugin action block per call."""
    calls = _actions(p)
    return f"{p.content}\n{calls}<|im_end|>" if calls else f"{p.content}<|im_end|>"


def render_intern_s1(p: Parts) -> str:
    """Intern-S1 thinking: ``<think>`` first (written by the model), then as InternLM2."""
    thinking = f"<think>{p.reasoning}</think>" if p.reasoning else ""
    return thinking + render_internlm2(p)


def render_hunyuan_a13b(p: Parts) -> str:
    """``<think>`` and ``<answer>`` blocks (plain text); the calls as one JSON list in the answer."""
    calls = [{"name": n, "arguments": a} for n, a in p.calls]
    block = f"<tool_calls>{_json(calls)}</tool_calls>" if calls else ""
    thinking = f"<think>\n{p.reasoning}\n</think>\n" if p.reasoning else ""
    return f"{thinking}<answer>\n{p.content}{block}\n</answer><|eos|>"


def render_hy_v4(p: Parts, thinking: bool) -> str:
    """Hy3's markup (suffixed marker tokens) without ``<tool_sep>``: the name, then key/value pairs."""
    m = hy3_marker
    param = f"{m('<arg_key>')}{{key}}{m('</arg_key>')}{m('<arg_value>')}{{value}}{m('</arg_value>')}"
    calls = tagged_calls(p.calls, m("<tool_call>") + "{name}", param, m("</tool_call>"))
    answer = p.content + (m("<tool_calls>") + calls + m("</tool_calls>") if calls else "")
    return f"{p.reasoning}{m('</think>')}{answer}" if thinking else answer


def render_minimax_m1(p: Parts) -> str:
    """``<think>`` written by the model; one JSON call per line in one ``<tool_calls>`` block (the
    template's own instruction)."""
    lines = "\n".join(_json({"name": n, "arguments": a}) for n, a in p.calls)
    block = f"\n<tool_calls>\n{lines}\n</tool_calls>" if p.calls else ""
    thinking = f"<think>\n{p.reasoning}\n</think>\n" if p.reasoning else ""
    return f"{thinking}{p.content}{block}<end_of_sentence>"


def render_jamba(p: Parts) -> str:
    """The content, then the calls as one JSON list in ``<tool_calls>``."""
    calls = [{"name": n, "arguments": a} for n, a in p.calls]
    block = f"<tool_calls>{_json(calls)}</tool_calls>" if calls else ""
    return f"{p.content}{block}<|endoftext|>"
