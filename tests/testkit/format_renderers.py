"""Test scaffolding shared by the round-trip properties and the engine benchmark: how each family
writes an output, given what it says (``Parts``). For families whose chat template and vocabulary
are on no package index these are the only renderers; the others are proven through their own
templates (``chat_rendering``). Shapes follow docs/formats/.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Call = tuple[str, dict[str, Any]]
"""A tool call as rendered: its name and its arguments as the JSON value the parse must give back."""


@dataclass(frozen=True)
class Parts:
    """What an output says, before a family's syntax is applied; also what ``parse`` must return."""

    reasoning: str
    content: str
    calls: tuple[Call, ...]


def hermes_call(name: str, args: dict[str, object]) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': args}, ensure_ascii=False)}\n</tool_call>"


def xml_call(name: str, params: dict[str, str]) -> str:
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def json_value(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def raw_value(value: Any) -> str:
    """An XML-style parameter value: strings verbatim, anything else as JSON (``tojson``)."""
    return value if isinstance(value, str) else json_value(value)


def tagged_calls(
    calls: Sequence[Call],
    head: str,
    param: str,
    tail: str,
    value: Callable[[Any], str] = raw_value,
    sep: str = "",
) -> str:
    """Calls in the XML-like families' shape: per call ``head`` (its ``{name}`` filled in), one
    ``param`` per argument (``{key}``, and ``{value}`` as ``value`` writes it), then ``tail``;
    the calls joined by ``sep``."""
    return sep.join(
        head.format(name=n) + "".join(param.format(key=k, value=value(v)) for k, v in a.items()) + tail
        for n, a in calls
    )


def pyraw_value(value: Any) -> str:
    """Seed-OSS renders non-strings with Jinja's ``string`` filter: Python literals."""
    return value if isinstance(value, str) else repr(value)


def gemma_value(value: Any, quote: str = '<|"|>') -> str:
    """Gemma 4 object notation: bare keys, ``quote``-delimited raw strings, bare scalars
    (FunctionGemma's quote is ``<escape>``)."""
    if isinstance(value, str):
        return f"{quote}{value}{quote}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{gemma_value(v, quote)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(gemma_value(v, quote) for v in value) + "]"
    return json_value(value)


def k3_type(value: Any) -> str:
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    return "object" if isinstance(value, dict) else "array"


def render_qwen35(p: Parts) -> str:
    calls = "\n".join(xml_call(n, {k: raw_value(v) for k, v in a.items()}) for n, a in p.calls)
    return f"{p.reasoning}\n</think>\n\n{p.content}\n\n{calls}"


def deepseek_v3_call(name: str, args: str) -> str:
    """One DeepSeek V3 / R1 call, ``args`` its JSON text."""
    return f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n{args}\n```<｜tool▁call▁end｜>"


def deepseek_v3_calls(*calls: tuple[str, str]) -> str:
    """DeepSeek V3 / R1's calls block: (name, JSON text) pairs, one per line."""
    return (
        "<｜tool▁calls▁begin｜>"
        + "\n".join(deepseek_v3_call(n, a) for n, a in calls)
        + "<｜tool▁calls▁end｜>"
    )


def deepseek_v31_calls(*calls: tuple[str, str]) -> str:
    """DeepSeek V3.1's calls block: (name, JSON text) pairs, back to back."""
    inner = "".join(f"<｜tool▁call▁begin｜>{n}<｜tool▁sep｜>{a}<｜tool▁call▁end｜>" for n, a in calls)
    return f"<｜tool▁calls▁begin｜>{inner}<｜tool▁calls▁end｜>"


def render_deepseek_r1(p: Parts) -> str:
    calls = deepseek_v3_calls(*((n, json_value(a)) for n, a in p.calls))
    return f"<think>\n{p.reasoning}\n</think>\n\n{p.content}{calls}"


def render_deepseek_v31(p: Parts) -> str:
    # V3.1 calls tools in non-thinking mode (its template's default): no reasoning.
    return p.content + deepseek_v31_calls(*((n, json_value(a)) for n, a in p.calls))


def render_dsml(wrapper: str) -> Callable[[Parts], str]:
    """DSML (V3.2: ``function_calls``, V4: ``tool_calls``); thinking on, so the prompt opened
    ``<think>`` and the output starts inside the reasoning."""

    def param(key: str, value: Any) -> str:
        string = isinstance(value, str)
        attr = "true" if string else "false"
        body = value if string else json_value(value)
        return f'<｜DSML｜parameter name="{key}" string="{attr}">{body}</｜DSML｜parameter>\n'

    def render(p: Parts) -> str:
        invokes = "".join(
            f'<｜DSML｜invoke name="{n}">\n'
            + "".join(param(k, v) for k, v in a.items())
            + "</｜DSML｜invoke>\n"
            for n, a in p.calls
        )
        calls = f"\n\n<｜DSML｜{wrapper}>\n{invokes}</｜DSML｜{wrapper}>"
        return f"{p.reasoning}</think>{p.content}{calls}"

    return render


def render_glm47(p: Parts) -> str:
    calls = tagged_calls(
        p.calls, "<tool_call>{name}", "<arg_key>{key}</arg_key><arg_value>{value}</arg_value>", "</tool_call>"
    )
    return f"{p.reasoning}</think>{p.content}{calls}"


def render_minimax(p: Parts) -> str:
    invokes = tagged_calls(
        p.calls, '<invoke name="{name}">\n', '<parameter name="{key}">{value}</parameter>\n', "</invoke>\n"
    )
    return f"{p.reasoning}\n</think>\n\n{p.content}\n<minimax:tool_call>\n{invokes}</minimax:tool_call>"


def render_seed_oss(p: Parts) -> str:
    calls = tagged_calls(
        p.calls,
        "\n<seed:tool_call>\n<function={name}>\n",
        "<parameter={key}>{value}</parameter>\n",
        "</function>\n</seed:tool_call>",
        pyraw_value,
    )
    return f"<seed:think>{p.reasoning}</seed:think>\n{p.content}\n{calls}"


def kimi_k2_call(written_id: str, args: str) -> str:
    """One Kimi K2 call: its id as the model writes it (``functions.NAME:INDEX``), its JSON text."""
    return f"<|tool_call_begin|>{written_id}<|tool_call_argument_begin|>{args}<|tool_call_end|>"


def render_kimi_k2(p: Parts) -> str:
    calls = "".join(kimi_k2_call(f"functions.{n}:{i}", json_value(a)) for i, (n, a) in enumerate(p.calls))
    return f"{p.reasoning}</think>{p.content}<|tool_calls_section_begin|>{calls}<|tool_calls_section_end|>"


def kimi_k3_argument(key: str, value: str, kind: str | None = "string") -> str:
    """One Kimi K3 argument, ``value`` as written; ``kind`` None writes no ``type``."""
    typed = f' type="{kind}"' if kind else ""
    return f'<|open|>argument key="{key}"{typed}<|sep|>{value}<|close|>argument<|sep|>'


def kimi_k3_call(name: str, index: int, *arguments: str) -> str:
    """One Kimi K3 call from its written arguments (``kimi_k3_argument``)."""
    return f'<|open|>call tool="{name}" index="{index}"<|sep|>' + "".join(arguments) + "<|close|>call<|sep|>"


def render_kimi_k3(p: Parts) -> str:
    calls = "".join(
        kimi_k3_call(n, i, *(kimi_k3_argument(k, raw_value(v), k3_type(v)) for k, v in a.items()))
        for i, (n, a) in enumerate(p.calls, 1)
    )
    return (
        f"{p.reasoning}<|close|>think<|sep|><|open|>response<|sep|>{p.content}<|close|>response<|sep|>"
        f"<|open|>tools<|sep|>{calls}<|close|>tools<|sep|><|close|>message<|sep|>"
    )


def render_gemma4(p: Parts) -> str:
    calls = "".join(f"<|tool_call>call:{n}{gemma_value(a)}<tool_call|>" for n, a in p.calls)
    return f"<|channel>thought\n{p.reasoning}\n<channel|>{p.content}{calls}"


def render_harmony(p: Parts) -> str:
    # Consecutive call messages: what gpt-oss writes for parallel calls when <|call|> is not a stop.
    header = "<|start|>assistant to=functions.{}<|channel|>commentary <|constrain|>json<|message|>"
    calls = "".join(f"{header.format(n)}{json_value(a)}<|call|>" for n, a in p.calls)
    return (
        f"<|channel|>analysis<|message|>{p.reasoning}<|end|>"
        f"<|start|>assistant<|channel|>commentary<|message|>{p.content}<|end|>{calls}"
    )


def render_llama3(p: Parts) -> str:
    calls = "; ".join(json_value({"name": n, "parameters": a}) for n, a in p.calls)
    return f"{p.content}<|python_tag|>{calls}"


def render_llama4(p: Parts) -> str:
    calls = ", ".join(f"{n}({', '.join(f'{k}={v!r}' for k, v in a.items())})" for n, a in p.calls)
    return f"{p.content}<|python_start|>[{calls}]<|python_end|>"


def render_mistral_tekken(p: Parts) -> str:
    calls = "".join(f"[TOOL_CALLS]{n}[ARGS]{json_value(a)}" for n, a in p.calls)
    return f"[THINK]{p.reasoning}[/THINK]{p.content}{calls}"


def render_mistral_v3(p: Parts) -> str:
    calls = ", ".join(json_value({"name": n, "arguments": a}) for n, a in p.calls)
    return f"{p.content}[TOOL_CALLS] [{calls}]"


# Nemotron 3, Step-3.5 / 3.7, MiMo, Ling 3, Hunyuan Hy3: no chat template next to a real
# vocabulary on PyPI, so these follow the templates as read (docs/formats/qwen3-xml.md, glm.md,
# hunyuan.md say what was read where, and what could not be verified).


def template_value(value: Any) -> str:
    """Qwen3-Coder-style templates: objects/arrays ``tojson``, other values Jinja's ``string``
    filter (``True``, ``None``, ``1e-05``), strings verbatim."""
    if isinstance(value, dict | list):
        return json_value(value)
    return value if isinstance(value, str) else str(value)


def coder_call(name: str, args: dict[str, Any], compact: bool = False) -> str:
    """``<tool_call>\\n<function=N>\\n<parameter=K>\\nV\\n</parameter>\\n…`` (``compact``: MiMo's
    values without wrapping newlines)."""
    wrap = "" if compact else "\n"
    body = "".join(f"<parameter={k}>{wrap}{template_value(v)}{wrap}</parameter>\n" for k, v in args.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def render_nemotron3(p: Parts, thinking: bool) -> str:
    """After ``<think>\\n`` (thinking on) or ``<think></think>`` (off) in the prompt."""
    calls = "\n".join(coder_call(n, a) for n, a in p.calls)
    answer = f"{p.content}\n{calls}" if calls else p.content
    return f"{p.reasoning}\n</think>\n{answer}" if thinking else answer


def render_step3p5(p: Parts) -> str:
    """After the always-present ``<think>\\n``: calls follow the content and each other directly."""
    return f"{p.reasoning}\n</think>\n{p.content}" + "".join(coder_call(n, a) for n, a in p.calls)


def render_mimo(p: Parts, thinking: bool) -> str:
    calls = "\n".join(coder_call(n, a, compact=True) for n, a in p.calls)
    answer = f"{p.content}\n{calls}" if calls else p.content
    return f"<think>{p.reasoning}</think>{answer}" if thinking else answer


def ling3_call(name: str, *kv: tuple[str, str]) -> str:
    """One Ling 3 (GLM-4.7 compact) call from (key, written value) pairs."""
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in kv)
    return f"<tool_call>{name}{pairs}</tool_call>"


def render_ling3(p: Parts, thinking: bool) -> str:
    """GLM-4.7 compact calls; with reasoning and calls but no answer the model may skip
    ``</think>`` (a ``<tool_call>`` ends the reasoning)."""
    calls = "".join(ling3_call(n, *((k, raw_value(v)) for k, v in a.items())) for n, a in p.calls)
    if not thinking:
        return p.content + calls
    close = "" if calls and not p.content else "</think>"
    return f"<think>{p.reasoning}{close}{p.content}{calls}"


HY3_SUFFIX = ":opensource"


def hy3_marker(marker: str) -> str:
    """A Hy3 marker as the released vocabulary spells it (``<tool_calls:opensource>``)."""
    return marker[:-1] + HY3_SUFFIX + ">"


def hy3_call(name: str, *kv: tuple[str, str], m: Callable[[str], str] = hy3_marker) -> str:
    """One Hy3 call from (key, written value) pairs; ``m`` spells the markers."""
    pairs = "".join(
        f"{m('<arg_key>')}{k}{m('</arg_key>')}\n{m('<arg_value>')}{v}{m('</arg_value>')}\n" for k, v in kv
    )
    return f"{m('<tool_call>')}{name}{m('<tool_sep>')}\n{pairs}{m('</tool_call>')}\n"


def hy3_block(*calls: str, m: Callable[[str], str] = hy3_marker) -> str:
    return f"{m('<tool_calls>')}\n" + "".join(calls) + m("</tool_calls>")


def render_hy3(p: Parts, thinking: bool) -> str:
    """After ``<think>`` (low/high effort) or ``<think></think>`` (no_think) in the prompt."""
    calls = [hy3_call(n, *((k, raw_value(v)) for k, v in a.items())) for n, a in p.calls]
    answer = p.content + (hy3_block(*calls) if calls else "")
    return f"{p.reasoning}{hy3_marker('</think>')}{answer}" if thinking else answer


# --- JSON / pythonic families (Granite, ERNIE, Cohere, xLAM) ----------------------------------------
def render_granite4(p: Parts) -> str:
    """Granite 4.0's template: the content, then one ``<tool_call>`` block per call on its own
    line; with thinking (4.2) the prompt opened ``<think>``, so the output starts in the reasoning."""
    calls = "\n".join(hermes_call(n, a) for n, a in p.calls)
    body = f"{p.content}\n{calls}" if p.content and calls else p.content + calls
    return f"{p.reasoning}\n</think>\n\n{body}" if p.reasoning else body


def render_granite3(p: Parts) -> str:
    """Granite 3.x's template: a message with calls is ``<|tool_call|>`` and the list of the calls'
    ``function`` objects (``tojson(indent=4)``); its text content is not rendered. With thinking
    (3.3), the thoughts in plain-text ``<think>…</think>`` and the answer in ``<response>…</response>``,
    as its thinking prompt asks."""
    think = f"<think>{p.reasoning}</think>" if p.reasoning else ""
    if not p.calls:
        return think + (f"<response>{p.content}</response>" if think else p.content)
    functions = [{"name": n, "arguments": a} for n, a in p.calls]
    return think + "<|tool_call|>" + json.dumps(functions, ensure_ascii=False, indent=4)


def render_ernie45(p: Parts) -> str:
    """ERNIE 4.5 thinking, as the model writes it after the prompt opened ``<think>``: the
    reasoning, ``</think>``, then ``<response>`` around the answer and one ``<tool_call>`` block
    per call (the shape of real outputs quoted in transformers' response-parsing tests)."""
    response = f"<response>\n{p.content}\n</response>\n" if p.content else ""
    calls = "".join(hermes_call(n, a) + "\n" for n, a in p.calls)
    return f"{p.reasoning}\n</think>\n\n{response}{calls}"


def render_xlam(p: Parts) -> str:
    """xLAM-2's templates (Llama and Qwen based alike): a turn with calls is one JSON array of
    ``{"name": …, "arguments": …}`` and nothing else."""
    calls = ", ".join(f'{{"name": "{n}", "arguments": {json_value(a)}}}' for n, a in p.calls)
    return f"[{calls}]"


def lfm2_value(value: Any) -> str:
    """LFM2.5's template: strings in single quotes as they are, dicts ``tojson``, anything else
    Jinja's ``string`` filter (Python literals)."""
    if isinstance(value, str):
        return f"'{value}'"
    return json_value(value) if isinstance(value, dict) else str(value)


def render_lfm2(p: Parts) -> str:
    """LFM2.5's template: ``<think>…</think>`` (the model writes it), the content, then one
    ``<|tool_call_start|>[f(k=v, …), …]<|tool_call_end|>`` list."""
    think = f"<think>{p.reasoning}</think>" if p.reasoning else ""
    calls = ", ".join(f"{n}({', '.join(f'{k}={lfm2_value(v)}' for k, v in a.items())})" for n, a in p.calls)
    block = f"<|tool_call_start|>[{calls}]<|tool_call_end|>" if p.calls else ""
    return think + p.content + block


def render_phi4_mini(p: Parts) -> str:
    """Phi-4-mini, as its tool prompt asks: ``functools`` and one JSON list, no closing marker."""
    calls = ", ".join(json_value({"name": n, "arguments": a}) for n, a in p.calls)
    return f"functools[{calls}]"


def olmo3_value(value: Any) -> str:
    """Olmo 3's template: strings in single quotes as they are, None/True/False as JSON literals,
    anything else ``tojson``."""
    return f"'{value}'" if isinstance(value, str) else json_value(value)


def render_olmo3(p: Parts) -> str:
    """Olmo 3's template: a turn with calls is the ``<function_calls>`` block, one call a line."""
    if not p.calls:
        return p.content
    lines = "\n".join(f"{n}({', '.join(f'{k}={olmo3_value(v)}' for k, v in a.items())})" for n, a in p.calls)
    return f"<function_calls>\n{lines}\n</function_calls>"


def render_apertus(p: Parts) -> str:
    """Apertus's template: the deliberation in ``<|inner_prefix|>…<|inner_suffix|>``, the answer,
    then one ``<|tools_prefix|>[{"NAME": ARGUMENTS}, …]<|tools_suffix|>`` list."""
    inner = f"<|inner_prefix|>{p.reasoning}<|inner_suffix|>" if p.reasoning else ""
    calls = ", ".join(f'{{"{n}": {json_value(a)}}}' for n, a in p.calls)
    block = f"<|tools_prefix|>[{calls}]<|tools_suffix|>" if p.calls else ""
    return inner + p.content + block


def render_inkling(p: Parts) -> str:
    """After the generation prompt's ``<|message_model|>``: a thinking block (when the model
    thinks), a text block, then one tool block per call whose header repeats the name and whose
    payload has the template's sorted keys (``args`` first), compact."""
    thinking = f"<|content_thinking|>{p.reasoning}<|end_message|><|message_model|>" if p.reasoning else ""
    calls = "".join(
        f"<|message_model|>{n}<|content_invoke_tool_json|>"
        + json.dumps({"args": a, "name": n}, ensure_ascii=False, separators=(",", ":"))
        + "<|end_message|>"
        for n, a in p.calls
    )
    return f"{thinking}<|content_text|>{p.content}<|end_message|>{calls}<|content_model_end_sampling|>"


def atem_block(name: str, args: dict[str, Any]) -> str:
    head, param = '<atem:invoke name="{name}">\n', '<atem:parameter name="{key}">{value}</atem:parameter>\n'
    invoke = tagged_calls([(name, args)], head, param, "</atem:invoke>")
    return f"<atem:function_calls>\n{invoke}\n</atem:function_calls>"


def render_muse_glimmer(p: Parts) -> str:
    """After the generation prompt's ``<|start|>assistant``: the reasoning message, the answer, then
    one tool-addressed message per call; ``<|eom|>`` ends a message the turn goes on after, ``<|eot|>``
    the last."""
    messages = [f" to=self<|message|>{p.reasoning}"]
    if p.content or not p.calls:
        messages.append(f"<|start|>assistant to=user<|message|>{p.content}")
    messages += [f"<|start|>assistant to={n}<|message|>{atem_block(n, a)}" for n, a in p.calls]
    return "<|eom|>".join(messages) + "<|eot|>"
