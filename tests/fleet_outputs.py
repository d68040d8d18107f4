"""Real model outputs of several families for the multi-backend tests: one per session index, each
with text of its own, reasoning where the family has it, and a tool call.

``sample(i)`` picks the family round-robin, so a few hundred sessions cover every family here.
Token ids come from each model's real tokenizer (marker texts become their ids)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import marker_tokenizers
from service_samples import WEATHER_TOOLS

_REGISTRY = marker_tokenizers.registry()


@dataclass(frozen=True)
class Output:
    """One session's model output: the model, its prompt tail and output ids, and what the
    parsed message must hold."""

    model: str
    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]
    reasoning: str
    content: str
    call: tuple[str, dict]


def _args(i: int) -> dict:
    return {"city": f"City{i}", "unit": f"u{i % 7}"}


def _qwen3(i: int) -> tuple[str, str, str, str]:
    return (
        "",
        f"<think>\nSession {i} reasons about City{i}.\n</think>\n\nAnswer for session {i}."
        f'<tool_call>\n{{"name": "get_weather", "arguments": {json.dumps(_args(i))}}}\n</tool_call>',
        f"Session {i} reasons about City{i}.",
        f"Answer for session {i}.",
    )


def _qwen3_coder(i: int) -> tuple[str, str, str, str]:
    a = _args(i)
    return (
        "",
        f"Looking up City{i} now.\n\n<tool_call>\n<function=get_weather>\n"
        f"<parameter=city>\n{a['city']}\n</parameter>\n<parameter=unit>\n{a['unit']}\n</parameter>\n"
        "</function>\n</tool_call>",
        "",
        f"Looking up City{i} now.",
    )


def _deepseek_r1(i: int) -> tuple[str, str, str, str]:
    return (
        "",
        f"<think>\nSession {i} checks City{i}.\n</think>\n\nOn it, {i}.<｜tool▁calls▁begin｜>"
        f"<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{json.dumps(_args(i))}\n```"
        "<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
        f"Session {i} checks City{i}.",
        f"On it, {i}.",
    )


def _harmony(i: int) -> tuple[str, str, str, str]:
    return (
        "",
        f"<|channel|>analysis<|message|>Session {i}: the user wants City{i}.<|end|><|start|>assistant"
        f" to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{json.dumps(_args(i))}",
        f"Session {i}: the user wants City{i}.",
        "",
    )


def _glm(i: int) -> tuple[str, str, str, str]:
    a = _args(i)
    return (
        "",
        f"\n<think>Session {i} needs live data.</think>\nLooking up City{i}.\n<tool_call>get_weather\n"
        f"<arg_key>city</arg_key>\n<arg_value>{a['city']}</arg_value>\n<arg_key>unit</arg_key>\n"
        f"<arg_value>{a['unit']}</arg_value>\n</tool_call>",
        f"Session {i} needs live data.",
        f"Looking up City{i}.",
    )


FAMILIES: dict[str, Callable[[int], tuple[str, str, str, str]]] = {
    "qwen3": _qwen3,
    "qwen3-coder": _qwen3_coder,
    "deepseek-r1": _deepseek_r1,
    "gpt-oss": _harmony,
    "glm-4.5": _glm,
}
MODELS = tuple(FAMILIES)
QUICK_MODELS = ("qwen3", "qwen3-coder", "deepseek-r1")
"""Families whose tokenizers load in a few seconds: for tests that start (and restart) many
backends. gpt-oss and GLM take several seconds more each."""
TOOLS = WEATHER_TOOLS


def _ids(model: str, text: str) -> tuple[int, ...]:
    if not text:
        return ()
    tokenizer = _REGISTRY.get(model).tokenizer
    ids = tokenizer.encode(text, add_special_tokens=False).ids
    assert tokenizer.decode(ids, skip_special_tokens=False) == text
    return tuple(ids)


def sample(i: int, models: tuple[str, ...] = MODELS) -> Output:
    model = models[i % len(models)]
    prompt, text, reasoning, content = FAMILIES[model](i)
    call = ("get_weather", _args(i))
    return Output(model, _ids(model, prompt), _ids(model, text), reasoning, content, call)
